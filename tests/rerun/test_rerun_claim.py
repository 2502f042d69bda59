"""Nothing dispatched twice: claim first, capped replies, lookups before resends, resumed comments."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.rerun.dispatch import DispatchSpec, dispatch_inputs, run_name
from tools.rerun.fake_github import MAX_COMMENT_CHARS, FakeGitHub, Scripted
from tools.rerun.github import DEFAULT_BOT_LOGIN as BOT_LOGIN
from tools.rerun.fit import max_rows
from tools.rerun.github import GitHubError
from tools.rerun.replies import MAX_BODY_CHARS, cap, find_marker, marker
from tools.rerun.runs_table import find_row, rows_in

from rerun_support import HEAD_SHA, PR, REGISTRY, REPO, comment_payload

DISPATCHES = rf"/repos/{REPO}/actions/workflows/rerun-test-dispatch\.yml/dispatches$"
COMMENTS = rf"/issues/{PR}/comments$"


def test_the_comment_is_claimed_before_anything_is_dispatched(fake: FakeGitHub, make_handler) -> None:
    make_handler().handle(comment_payload("/rerun-test test_pack.py", comment_id=4001))
    writes = [r for r in fake.writes() if "reactions" not in r.path]
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in writes] == [
        ("POST", "comments"), ("POST", "dispatches"), ("POST", "dispatches"), ("PATCH", "10000000")]
    claim = writes[0].body["body"]
    assert claim.startswith(marker(4001, "claimed", HEAD_SHA)) and "dispatching…" in claim
    assert find_marker(fake.bot_replies(PR)[0].body, 4001).state == "done"


def test_no_claim_no_dispatch_then_the_redelivery_dispatches_once(fake: FakeGitHub, make_handler) -> None:
    payload = comment_payload("/rerun-test test_kvfp4_quant_dequant.py", comment_id=4002)
    fake.fail("POST", COMMENTS, *[Scripted(502, body={"message": "bad gateway"})] * 5)
    with pytest.raises(GitHubError, match="HTTP 502"):
        make_handler().handle(payload)
    assert fake.dispatches == [] and fake.bot_replies(PR) == []
    assert make_handler().handle(payload).status == "dispatched"
    assert make_handler().handle(payload).status == "duplicate"
    assert len(fake.dispatches) == 1 and len(fake.bot_replies(PR)) == 1


def test_a_claim_that_timed_out_but_landed_is_not_posted_twice(fake: FakeGitHub, make_handler, make_client) -> None:
    fake.fail("POST", COMMENTS, Scripted(route=True, delay=1.0))
    outcome = make_handler(client=make_client(timeout=0.3)).handle(comment_payload("/rerun-test test_pack.py"))
    assert outcome.status == "dispatched"
    assert len(fake.bot_replies(PR)) == 1 and len(fake.dispatches) == 2


def test_twenty_long_node_ids_give_a_reply_github_accepts(fake: FakeGitHub, make_handler) -> None:
    """The issue's case: 20 targets with long node ids made a reply over the limit (422, no marker)."""
    targets = [f"test_pack.py::test_{i}[{'x' * 3100}]" for i in range(20)]
    body = "/rerun-test " + " ".join(targets)
    assert len(body) < MAX_COMMENT_CHARS  # a comment GitHub accepts
    payload = comment_payload(body, comment_id=4003)
    assert make_handler().handle(payload).status == "dispatched"
    (reply,) = fake.bot_replies(PR)
    assert len(reply.body) <= MAX_BODY_CHARS and find_marker(reply.body, 4003).state == "done"
    assert make_handler().handle(payload).status == "duplicate"
    assert len(fake.dispatches) == 2  # one per tier, once


def test_a_reply_over_the_limit_is_fitted_and_still_marks_the_comment(fake: FakeGitHub, make_handler,
                                                                      tmp_path: Path) -> None:
    """A tier split into as many shards as one reply holds (`fit.max_rows`), each of 8 files with
    long names: the full runs table is over GitHub's limit, so its cells are shortened
    (tools.rerun.fit); every row is kept, nothing is truncated."""
    shards = max_rows("gpu_b200")
    long_dir = "very_long_directory_name_" * 4
    entries = "".join(f"  tests/{long_dir}/test_{i:04d}.py: {{tiers: [gpu_b200], est_time: 1, owner: o, status: active}}\n"
                      for i in range(8 * shards))
    (tmp_path / "registry.yaml").write_text(REGISTRY.split("tests:")[0] + "tests:\n" + entries)
    payload = comment_payload("/rerun-tier gpu_b200", comment_id=4008)
    assert make_handler(root=tmp_path, shard_budget=8).handle(payload).status == "dispatched"
    (reply,) = fake.bot_replies(PR)
    assert len(reply.body) <= MAX_BODY_CHARS and "**… truncated:**" not in reply.body
    assert len(rows_in(reply.body)) == shards
    assert find_marker(reply.body, 4008).state == "done"
    assert make_handler(root=tmp_path, shard_budget=8).handle(payload).status == "duplicate"
    assert len(fake.dispatches) == shards and len({d["inputs"]["part"] for d in fake.dispatches}) == shards


def test_a_dispatch_that_timed_out_but_landed_is_found_by_run_name(fake: FakeGitHub, make_handler,
                                                                    make_client) -> None:
    fake.fail("POST", DISPATCHES, Scripted(route=True, delay=1.0))  # accepted, the answer comes too late
    outcome = make_handler(client=make_client(timeout=0.3)).handle(
        comment_payload("/rerun-test test_kvfp4_quant_dequant.py", comment_id=4004))
    assert len(fake.dispatches) == 1
    (result,) = outcome.dispatches
    assert (result.state, outcome.errors) == ("found", [])
    assert [r.path for r in fake.requests].count(f"/repos/{REPO}/actions/workflows/rerun-test-dispatch.yml/runs") >= 1


def test_a_dispatch_that_timed_out_and_did_not_land_is_resent_once(fake: FakeGitHub, make_handler,
                                                                    make_client) -> None:
    fake.fail("POST", DISPATCHES, Scripted(504, delay=1.0))  # never applied
    outcome = make_handler(client=make_client(timeout=0.3)).handle(
        comment_payload("/rerun-test test_kvfp4_quant_dequant.py", comment_id=4005))
    assert len(fake.dispatches) == 1 and outcome.dispatches[0].state == "sent"


def test_a_crashed_attempt_is_resumed_without_dispatching_twice(fake: FakeGitHub, make_handler,
                                                                make_client) -> None:
    """The bot died after claiming and sending the first of two dispatches; the PR moved on since."""
    comment_id = 4006
    # posted before the attempt that crashed: its created_at (to the second) bounds the run lookup,
    # so a payload made after the dispatch missed the run whenever a second boundary fell between
    payload = comment_payload("/rerun-test test_pack.py", comment_id=comment_id)
    fake.add_comment(PR, BOT_LOGIN, marker(comment_id, "claimed", HEAD_SHA) + "\ndispatching…")
    sent = dispatch_inputs(_spec("gpu_h100"), PR, HEAD_SHA, comment_id)
    make_client().dispatch_workflow(REPO, "rerun-test-dispatch.yml", "main", sent)
    fake.add_pull(PR, "f" * 40)  # a new push after the comment

    outcome = make_handler().handle(payload)
    assert outcome.status == "dispatched"
    assert [(d["inputs"]["tier"], d["inputs"]["sha"]) for d in fake.dispatches] == [
        ("gpu_h100", HEAD_SHA), ("gpu_b200", HEAD_SHA)]  # the missing one only, for the claimed SHA
    assert {d.spec.tier: d.state for d in outcome.dispatches} == {"gpu_h100": "found", "gpu_b200": "sent"}
    (reply,) = fake.bot_replies(PR)
    assert find_marker(reply.body, comment_id).state == "done"
    assert find_row(reply.body, "gpu_h100", "targets").result == "dispatched (an earlier attempt had sent it)"
    assert fake.reactions == [(comment_id, "rocket")]  # no second "eyes"


def test_a_resumed_comment_sends_nothing_when_the_runs_cannot_be_listed(fake: FakeGitHub, make_handler) -> None:
    fake.add_comment(PR, BOT_LOGIN, marker(4007, "incomplete", HEAD_SHA))
    fake.fail("GET", r"/rerun-test-dispatch\.yml/runs$", Scripted(404, body={"message": "Not Found"}))
    outcome = make_handler().handle(comment_payload("/rerun-test test_kvfp4_quant_dequant.py", comment_id=4007))
    assert fake.dispatches == [] and outcome.errors and "looking for earlier runs failed" in outcome.errors[0]
    assert find_marker(fake.bot_replies(PR)[0].body, 4007).state == "incomplete"


def _spec(tier: str) -> DispatchSpec:
    runner = {"gpu_h100": ("self-hosted", "linux", "gpu-h100"), "gpu_b200": ("self-hosted", "linux", "gpu-b200")}
    return DispatchSpec(tier, "targets", runner[tier], ("tests/quant/test_pack.py",))


def test_run_name_is_unique_per_dispatch() -> None:
    a = run_name(dispatch_inputs(_spec("gpu_h100"), PR, HEAD_SHA, 1))
    assert a == f"rerun-test PR #{PR} gpu_h100 targets ({HEAD_SHA}) comment 1"
    assert len({a, run_name(dispatch_inputs(_spec("gpu_b200"), PR, HEAD_SHA, 1)),
                run_name(dispatch_inputs(_spec("gpu_h100"), PR, HEAD_SHA, 2))}) == 3


@pytest.mark.parametrize("size", [MAX_BODY_CHARS - 1, MAX_BODY_CHARS])
def test_cap_leaves_a_body_within_the_limit_alone(size: int) -> None:
    body = marker(1) + "\n" + "a" * (size - len(marker(1)) - 1)
    assert len(body) == size and cap(body) == body


def test_cap_cuts_at_a_line_closes_a_fence_and_counts_utf16() -> None:
    head = marker(7) + "\nhello\n```\n"
    lines = [f"line {i} " + "é" * 50 for i in range(2000)]
    body = head + "\n".join(lines)
    capped = cap(body)
    assert len(capped.encode("utf-16-le")) // 2 <= MAX_BODY_CHARS and capped.startswith(head)
    kept, note = capped.split("\n```\n\n**… truncated:** ")
    assert kept.split("\n")[-1] in lines  # cut between lines
    assert note.startswith(f"{2000 - (len(kept.split(chr(10))) - 3)} more line(s)")
    emoji = marker(8) + "\n" + "\U0001F680" * 40000  # 2 UTF-16 units each: 80,000 units
    capped = cap(emoji)
    assert len(capped.encode("utf-16-le")) // 2 <= MAX_BODY_CHARS and "truncated" in capped
