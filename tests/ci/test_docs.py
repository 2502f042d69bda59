"""The README and docs/ stay true: every command they show exists, every link resolves.

Commands are read from code (fenced blocks and inline spans): ``python -m ci [--root DIR] CMD``,
``fp4kv-ci CMD``, ``python -m tools.rerun CMD``, ``python -m tools.approval`` and
``python -m bench NAME``; each distinct one is run with ``--help`` and must exit 0. Links are
every relative Markdown link outside code; the target file must exist and an ``#anchor`` must be
the GitHub slug of one of its headings.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[ \t]*$", re.M | re.S)
_INLINE = re.compile(r"(`+)(.+?)\1", re.S)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_COMMAND = re.compile(r"(?:(?:\.venv/bin/)?python3? -m (ci|tools\.rerun|tools\.approval|bench)|(fp4kv-ci))\b([^\n`]*)")
_WORD = re.compile(r"[a-z][a-z0-9_-]*\Z")


def code_parts(text: str) -> list[str]:
    """The contents of fenced code blocks and inline code spans."""
    fences = [m.group(0) for m in _FENCE.finditer(text)]
    rest = _FENCE.sub("", text)
    return fences + [m.group(2) for m in _INLINE.finditer(rest)]


def prose(text: str) -> str:
    """``text`` without code: fenced blocks, inline spans and indented (4-space) code lines."""
    text = _INLINE.sub("", _FENCE.sub("", text))
    return "\n".join(line for line in text.splitlines() if not line.startswith("    "))


def commands_in(code: str) -> set[tuple[str, str | None]]:
    """``(module, subcommand or None)`` for every command invocation in ``code``."""
    found = set()
    for match in _COMMAND.finditer(code):
        module = match.group(1) or "ci"  # fp4kv-ci is the console script of `python -m ci`
        words = match.group(3).split()
        while words[:1] in (["--root"], ["[--root"]) or (words and words[0].startswith(("--root=", "[--root="))):
            words = words[2:] if words[0] in ("--root", "[--root") else words[1:]
        sub = words[0] if words and _WORD.match(words[0]) and module != "tools.approval" else None
        found.add((module, sub))
    return found


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: markup dropped, lower case, punctuation removed
    (letters, digits, ``-``, ``_`` and spaces kept), spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of ``page``, with GitHub's ``-1``, ``-2`` suffixes for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for line in _FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = github_slug(match.group(1))
            out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return out


def broken_links(page: Path, base: Path = ROOT) -> list[str]:
    """Each relative link of ``page`` whose file or anchor does not exist, named from ``base``."""
    problems = []
    for target in _LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ... not checked offline
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            problems.append(f"{page.relative_to(base)}: link to {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{page.relative_to(base)}: link to {target}: no heading with that anchor")
    return problems


def shown_commands() -> list[tuple[str, str | None]]:
    found: set[tuple[str, str | None]] = set()
    for page in PAGES:
        for code in code_parts(page.read_text(encoding="utf-8")):
            found |= commands_in(code)
    return sorted(found, key=lambda c: (c[0], c[1] or ""))


def test_docs_exist_and_the_readme_links_them() -> None:
    assert len(PAGES) >= 10
    assert broken_links(ROOT / "README.md") == []
    linked = {t.partition("#")[0] for t in _LINK.findall(prose((ROOT / "docs" / "README.md").read_text()))}
    assert sorted(p.name for p in PAGES if p.parent.name == "docs" and p.name != "README.md") == sorted(
        t for t in linked if t.endswith(".md")), "docs/README.md must index every page"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_every_ci_command_is_documented() -> None:
    from ci.__main__ import COMMANDS

    shown = {sub for module, sub in shown_commands() if module == "ci"}
    assert sorted(set(COMMANDS) - shown) == []


@pytest.mark.parametrize("command", shown_commands(), ids=lambda c: " ".join(filter(None, c)))
def test_every_shown_command_exists(command: tuple[str, str | None]) -> None:
    module, sub = command
    argv = [sys.executable, "-m", module, *([sub] if sub else []), "--help"]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(argv[1:])} -> {result.returncode}\n{result.stderr[-2000:]}"
    assert "usage" in (result.stdout + result.stderr).lower()


# -- the checks themselves ----------------------------------------------------------------------

def test_commands_are_read_with_their_subcommand() -> None:
    code = ("python -m ci --root /r lint --fix\n.venv/bin/python -m ci job --tier cpu\nfp4kv-ci init\n"
            "python -m ci [--root DIR] <command>\npython -m tools.approval --event F\n"
            "python -m tools.rerun serve --port 1\npython -m bench quant --quick\npython -m pytest -n 2")
    assert commands_in(code) == {("ci", "lint"), ("ci", "job"), ("ci", "init"), ("ci", None),
                                 ("tools.approval", None), ("tools.rerun", "serve"), ("bench", "quant")}


def test_a_misspelled_command_is_caught(tmp_path: Path) -> None:
    """The extraction finds what a doc shows, and `--help` of a command that does not exist fails."""
    assert commands_in("run `python -m ci lnit` first") == {("ci", "lnit")}
    result = subprocess.run([sys.executable, "-m", "ci", "lnit", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0


@pytest.mark.parametrize(("heading", "slug"), [
    ("Setting up: `ci/bootstrap.py`", "setting-up-cibootstrappy"),
    ("Self-hosted: `serve`", "self-hosted-serve"),
    ("Why two parsers", "why-two-parsers"),
    ("`fp4kv`: FP4 KV-cache quantization", "fp4kv-fp4-kv-cache-quantization"),
    ("The [registry](x.md) & more", "the-registry--more"),
])
def test_github_slugs(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_broken_links_are_found(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n## Part two\n\n[ok](#part-two) [ok](b.md#b) [web](https://x.example/y)\n"
                                   "[gone](missing.md) [bad](b.md#nope) `[in code](nowhere.md)`\n\n"
                                   "```\n[fenced](nowhere.md)\n```\n")
    (tmp_path / "b.md").write_text("# B\n")
    assert broken_links(tmp_path / "a.md", tmp_path) == ["a.md: link to missing.md: no such file",
                                                         "a.md: link to b.md#nope: no heading with that anchor"]


def test_repeated_headings_get_numbered_anchors(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_text("# Notes\n\n## Notes\n\n```\n# not a heading\n```\n")
    assert anchors(tmp_path / "p.md") == {"notes", "notes-1"}
