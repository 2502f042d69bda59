"""The rerun bot benchmark's own checks (bench/rerun_bot.py), without running it: the checkout it
writes holds the registered file its comments name, and its dispatch check counts each comment once.
test_bench_quick.py runs the benchmark itself.
"""

from __future__ import annotations

from pathlib import Path

from bench.rerun_bot import COMMENT, REGISTRY, dispatch_problem, write_checkout
from ci.registry import load_registry
from tools.rerun.resolve import Kind, resolve_target


def test_rerun_bot_checkout_holds_the_registered_file_its_comments_name(tmp_path: Path) -> None:
    """The cause of issue 28's "0 of 400 dispatched": the bot resolves a target only to a registered
    file present in its checkout, and the bench's checkout held the registry alone."""
    target = COMMENT.split()[-1]
    written = write_checkout(tmp_path)
    registry = load_registry(tmp_path / "registry.yaml")
    assert (tmp_path / "registry.yaml").read_text() == REGISTRY
    assert written == sorted(registry.tests) == ["tests/quant/test_kvfp4_quant_dequant.py"]
    assert all((tmp_path / path).is_file() for path in written)
    assert resolve_target(registry, tmp_path, target).kind is Kind.RESOLVED
    (tmp_path / next(iter(registry.tests))).unlink()
    assert resolve_target(registry, tmp_path, target).kind is Kind.UNKNOWN


def test_rerun_bot_dispatch_check_counts_each_comment() -> None:
    """The bench fails unless each expected comment was dispatched once, and none other."""
    state = {"dispatches": [{"inputs": {"comment_id": "1"}}, {"inputs": {"comment_id": "2"}},
                            {"inputs": {"comment_id": "2"}}],
             "replies": [{"body": "<!-- rerun-test:comment=3 state=done -->\n@x nothing was started\nnot found"}]}
    assert dispatch_problem({"dispatches": state["dispatches"][:1], "replies": []}, {1}) is None
    assert dispatch_problem(state, {1}) == (
        "1 of 1 comments dispatched exactly once, 0 more than once, 0 never, 1 dispatched though never sent "
        "(the bot's reply to one of those: 'none')")
    assert dispatch_problem(state, {1, 2, 3}) == (
        "1 of 3 comments dispatched exactly once, 1 more than once, 1 never, 0 dispatched though never sent "
        "(the bot's reply to one of those: '@x nothing was started not found')")
