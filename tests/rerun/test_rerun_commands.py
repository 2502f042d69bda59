"""Comment parsing and target resolution (no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.registry import load_registry
from tools.rerun.commands import UnsafeTarget, check_target, parse_comment, quote
from tools.rerun.resolve import Kind, resolve_target

from rerun_support import dedent


def test_line_anchored_commands_outside_code_and_quotes() -> None:
    body = dedent("""
        Thanks! Please run:
        /rerun-test test_a.py tests/x/test_b.py::T::test_c[1-2] --tier gpu_b200
        ```
        /rerun-test in_backticks.py
        ```
        ~~~~
        /rerun-test in_tildes.py
        ```
        /rerun-test still_in_tildes.py
        ~~~~
        > /rerun-test quoted.py
        text /rerun-test mid_line.py
        /rerun-tests not_a_command.py
           /rerun-test --tier=gpu_h100 indented.py
    """)
    commands = parse_comment(body)
    assert [(c.line, c.targets, c.tier) for c in commands] == [
        (2, ("test_a.py", "tests/x/test_b.py::T::test_c[1-2]"), "gpu_b200"),
        (14, ("indented.py",), "gpu_h100"),
    ]


def test_hidden_and_indented_lines_are_not_commands() -> None:
    body = ("<!-- /rerun-test hidden.py -->\n"
            "<!--\n/rerun-test hidden_block.py\n-->\n"
            "\t/rerun-test tab_indented.py\n"
            "    /rerun-test four_spaces.py\n"
            "text\u2028/rerun-test after_line_separator.py\n"
            "   /rerun-test visible.py\r\n"
            "<!-- unterminated\n/rerun-test after_unterminated.py\n")
    commands = parse_comment(body)
    assert [(c.line, c.targets) for c in commands] == [(8, ("visible.py",))]


def test_help_and_errors() -> None:
    commands = parse_comment("/rerun-test\n/rerun-test --help\n/rerun-test --tier\n/rerun-test --bogus x.py\n"
                             "/rerun-test --tier gpu_b200\n/rerun-test a.py --tier x --tier y\n")
    assert [c.help for c in commands] == [True, True, False, False, False, False]
    assert "needs a value" in commands[2].error
    assert "unknown option" in commands[3].error and "--bogus" in commands[3].error
    assert "no target" in commands[4].error
    assert "twice" in commands[5].error


@pytest.mark.parametrize("target, problem", [
    ("../etc/passwd", "`..`"),
    ("/etc/passwd", "absolute"),
    ("test_x.py;rm", "characters outside"),
    ("$(id).py", "characters outside"),
    ("tests/x[1].py", "file part"),
    ("::node", "no file"),
])
def test_unsafe_targets_rejected(target: str, problem: str) -> None:
    with pytest.raises(UnsafeTarget, match=problem if problem.isalpha() else None) as info:
        check_target(target)
    assert problem.strip("`") in str(info.value)


def test_quote_escapes_markdown_and_html() -> None:
    shown = quote("<img src=x>|`@everyone\x07")
    assert "<img" not in shown and "|" not in shown and "`" not in shown.removeprefix("<code>")
    assert "@everyone" not in shown and "&#92;x07" in shown
    long = quote("a" * 100, limit=10)
    assert long.endswith("(90 more characters)")


@pytest.fixture
def registry(repo_root: Path):
    return load_registry(repo_root / "registry.yaml")


@pytest.mark.parametrize("target, tier, kind, path, tiers", [
    ("test_kvfp4_quant_dequant.py", None, Kind.RESOLVED, "tests/quant/test_kvfp4_quant_dequant.py", ("gpu_b200",)),
    ("tests/quant/test_pack.py", None, Kind.RESOLVED, "tests/quant/test_pack.py", ("gpu_h100", "gpu_b200")),
    ("test_pack.py", "cpu", Kind.RESOLVED, "tests/quant/test_pack.py", ("cpu",)),
    ("test_cpu_only.py", None, Kind.RESOLVED, "tests/cpu_only/test_cpu_only.py", ("cpu",)),
    ("test_pack.py", "gpu_b200_x4", Kind.BAD_TIER, "tests/quant/test_pack.py", ()),
    ("test_dup.py", None, Kind.AMBIGUOUS, None, ()),
    ("tests/a/test_dup.py", None, Kind.RESOLVED, "tests/a/test_dup.py", ("gpu_h100",)),
    ("test_legacy_fp4_server.py", None, Kind.UNREGISTERED, "tests/manual/test_legacy_fp4_server.py", ()),
    ("tests/manual/test_legacy_fp4_server.py", None, Kind.UNREGISTERED, "tests/manual/test_legacy_fp4_server.py", ()),
    ("test_old_pool.py", None, Kind.NOT_ACTIVE, "tests/mem_cache/test_old_pool.py", ()),
    ("test_broken.py", None, Kind.NOT_ACTIVE, "tests/quant/test_broken.py", ()),
    ("test_kvfp4_quant_dequnt.py", None, Kind.UNKNOWN, None, ()),
    ("../x.py", None, Kind.UNSAFE, None, ()),
])
def test_resolution(registry, repo_root: Path, target, tier, kind, path, tiers) -> None:
    r = resolve_target(registry, repo_root, target, tier)
    assert (r.kind, r.path, r.tiers) == (kind, path, tiers)


def test_resolution_details(registry, repo_root: Path) -> None:
    ambiguous = resolve_target(registry, repo_root, "test_dup.py")
    assert ambiguous.candidates == ("tests/a/test_dup.py", "tests/b/test_dup.py")
    unknown = resolve_target(registry, repo_root, "test_kvfp4_quant_dequnt.py")
    assert unknown.candidates[0] == "tests/quant/test_kvfp4_quant_dequant.py"
    bad_tier = resolve_target(registry, repo_root, "test_pack.py", "gpu_b200_x4")
    assert bad_tier.candidates == ("cpu", "gpu_h100", "gpu_b200")
    node = resolve_target(registry, repo_root, "test_pack.py::TestPack::test_x[bf16-1]")
    assert node.test_id == "tests/quant/test_pack.py::TestPack::test_x[bf16-1]"


def test_every_command_and_its_arguments() -> None:
    body = dedent("""
        /rerun-failed
        /rerun-failed now
        /rerun-tier gpu_b200
        /rerun-stage gpu_h100
        /rerun-tier
        /rerun-tier a b
        /rerun-tiers gpu_b200
        /rerun-test --owner @kv-cache-team --tier gpu_b200
        /rerun-test --owner=@kv x.py
        /rerun-tier --help
        /rerun-failed -h
    """)
    c = parse_comment(body)
    assert [(x.name, x.line) for x in c] == [
        ("rerun-failed", 1), ("rerun-failed", 2), ("rerun-tier", 3), ("rerun-tier", 4), ("rerun-tier", 5),
        ("rerun-tier", 6), ("rerun-test", 8), ("rerun-test", 9), ("rerun-tier", 10), ("rerun-failed", 11)]
    assert c[0].runnable and "takes no arguments" in c[1].error
    assert (c[2].tier, c[3].tier) == ("gpu_b200", "gpu_h100")  # /rerun-stage is /rerun-tier
    assert "exactly one tier" in c[4].error and "exactly one tier" in c[5].error
    assert (c[6].owner, c[6].tier, c[6].targets, c[6].runnable) == ("@kv-cache-team", "gpu_b200", (), True)
    assert "not both" in c[7].error
    assert c[8].help and c[9].help
    assert [x.action.value for x in (c[0], c[2], c[6])] == [
        "`/rerun-failed`", "`/rerun-tier` / `/rerun-stage`", "`/rerun-test --owner`"]


@pytest.mark.parametrize("line, chars", [
    ("\uff0frerun-test test_x.py", ["U+FF0F FULLWIDTH SOLIDUS"]),
    ("\u2215rerun-test test_x.py", ["U+2215 DIVISION SLASH"]),
    ("/rerun\u200b-test test_x.py", ["U+200B ZERO WIDTH SPACE"]),
    ("/\u200brerun-test test_x.py", ["U+200B ZERO WIDTH SPACE"]),
    ("/rerun-test\u00a0test_x.py", ["U+00A0 NO-BREAK SPACE"]),
    ("/rerun-test test_x.py\u200b", ["U+200B ZERO WIDTH SPACE"]),
    ("/rerun\u2013test test_x.py", ["U+2013 EN DASH"]),
    ("\uff0f\uff52\uff45\uff52\uff55\uff4e-test test_x.py", ["U+FF0F FULLWIDTH SOLIDUS",
                                                          "U+FF52 FULLWIDTH LATIN SMALL LETTER R",
                                                          "U+FF45 FULLWIDTH LATIN SMALL LETTER E",
                                                          "U+FF55 FULLWIDTH LATIN SMALL LETTER U",
                                                          "U+FF4E FULLWIDTH LATIN SMALL LETTER N"]),
])
def test_look_alike_commands_are_recognised_never_run(line: str, chars: list[str]) -> None:
    (command,) = parse_comment(f"hi\n{line}\n")
    assert command.lookalike is not None and not command.runnable
    assert command.lookalike.understood == "/rerun-test test_x.py" == command.text
    assert list(command.lookalike.characters) == chars
    assert command.line == 2


def test_look_alikes_in_code_and_quotes_and_plain_commands_are_not_look_alikes() -> None:
    assert parse_comment("```\n\uff0frerun-test a.py\n```\n> \uff0frerun-test b.py\n") == []
    assert parse_comment("\uff0frerun-tests a.py\ntext \u2215rerun-test c.py\n") == []
    (plain,) = parse_comment("/rerun-test a.py")
    assert plain.lookalike is None and plain.runnable
