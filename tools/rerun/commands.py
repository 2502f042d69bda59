"""The `/rerun-test` command grammar: regexes and help text live here, parsing does nothing else.

Prow-style rules: a command is a whole line starting with ``/rerun-test`` (leading spaces are
allowed, as GitHub renders them the same), several commands per comment are fine, and lines inside
fenced code blocks (````` and ``~~~``), indented code (a tab or 4+ spaces), HTML comments
(``<!-- -->``, which GitHub does not show) or quoted with ``>`` are ignored, so that pasting an
old comment or a log, or hiding text from reviewers, never triggers a run. Lines end at ``\n``
only, as GitHub's Markdown does (not at U+2028 and the other breaks `str.splitlines` knows).

A *target* is a basename (``test_x.py``), a repo-relative path (``tests/quant/test_x.py``) or
either of those followed by a pytest node id (``tests/quant/test_x.py::TestA::test_b[1-2]``).
Targets are checked against `SAFE_TARGET` here, before anything else looks at them; the bot never
passes comment text to a shell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COMMAND = "/rerun-test"

# `/rerun-test` at the start of a line, then whitespace or the end of the line (`/rerun-tests`
# is not a command).
COMMAND_RE = re.compile(r"^ {0,3}/rerun-test(?:[ \t]+(?P<args>.*?))?[ \t]*$")
# Opening/closing code fence (CommonMark: up to 3 spaces of indent, 3+ backticks or tildes).
FENCE_RE = re.compile(r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})")
QUOTE_RE = re.compile(r"^[ \t]{0,3}>")
# An HTML comment (an unterminated one runs to the end, as in CommonMark).
HTML_COMMENT_RE = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
# Everything a target may contain. `[` `]` for parametrized node ids, `:` for `::`.
SAFE_TARGET = re.compile(r"[A-Za-z0-9_./:\[\]-]+")
TIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Upper bounds that keep one comment from becoming an unbounded amount of work. Exceeding them is
# an error in the reply, never a silent cut.
MAX_TARGETS = 20

HELP_TEXT = f"""\
**`{COMMAND}`** re-runs registered test files of this pull request on their CI tiers.

```
{COMMAND} <target> [<target> ...] [--tier TIER]
{COMMAND} --help
```

* `<target>` is a file name (`test_kvfp4_quant_dequant.py`), a repo-relative path
  (`tests/quant/test_kvfp4_quant_dequant.py`) or either with a pytest node id appended
  (`tests/quant/test_kvfp4_quant_dequant.py::test_roundtrip[bf16]`).
* Files are looked up in `registry.yaml`. Without `--tier`, each registered tier of the file
  except `cpu` runs (a cpu-only file runs on `cpu`); `--tier` must be one of the file's tiers.
* One command per line; several lines per comment are fine. Lines in code blocks or quotes
  are ignored. At most {MAX_TARGETS} targets per comment.
* Only users with write, maintain or admin permission on the repository can trigger runs.
"""


@dataclass(frozen=True)
class Command:
    """One `/rerun-test` line. ``error`` is set (and the rest may be partial) when it did not parse.

    ``line`` is the 1-based line number in the comment; ``tier`` is None when not given.
    """

    line: int
    text: str
    targets: tuple[str, ...] = ()
    tier: str | None = None
    help: bool = False
    error: str | None = None


class UnsafeTarget(ValueError):
    """A target that the bot refuses to look at (see `check_target`)."""


def command_lines(body: str) -> list[tuple[int, str]]:
    """``(line number, args text)`` of every command line outside code fences and quotes."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    # Blank out HTML comments but keep their line breaks, so line numbers stay the comment's own.
    visible = HTML_COMMENT_RE.sub(lambda m: "\n" * m.group(0).count("\n"), body.replace("\r\n", "\n"))
    for number, line in enumerate(visible.split("\n"), start=1):
        fence_match = FENCE_RE.match(line)
        if fence is not None:
            # A fence closes only with the same character, at least as long, and nothing after it.
            if fence_match and fence_match["fence"][0] == fence[0] and len(fence_match["fence"]) >= len(fence) \
                    and not line.strip().lstrip(fence[0]):
                fence = None
            continue
        if fence_match:
            fence = fence_match["fence"]
            continue
        if QUOTE_RE.match(line):
            continue
        match = COMMAND_RE.match(line)
        if match:
            out.append((number, match["args"] or ""))
    return out


def parse_args(line: int, args: str) -> Command:
    """Parse the text after `/rerun-test` on one line."""
    text = f"{COMMAND} {args}".rstrip()
    tokens = args.split()
    if not tokens:
        return Command(line, text, help=True)
    targets: list[str] = []
    tier: str | None = None
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in ("--help", "-h"):
            return Command(line, text, help=True)
        if token == "--tier" or token.startswith("--tier="):
            if token == "--tier":
                if i + 1 >= len(tokens):
                    return Command(line, text, error="`--tier` needs a value, e.g. `--tier gpu_b200`")
                value = tokens[i + 1]
                i += 2
            else:
                value = token.removeprefix("--tier=")
                i += 1
            if tier is not None and tier != value:
                return Command(line, text, error="`--tier` is given twice with different values")
            if not TIER_RE.fullmatch(value):
                return Command(line, text, error=f"`--tier` value {quote(value)} is not a tier name")
            tier = value
            continue
        if token.startswith("-"):
            return Command(line, text, error=f"unknown option {quote(token)}; see `{COMMAND} --help`")
        targets.append(token)
        i += 1
    if not targets:
        return Command(line, text, tier=tier, error="no target given; see `/rerun-test --help`")
    return Command(line, text, tuple(targets), tier)


def parse_comment(body: str) -> list[Command]:
    """Every `/rerun-test` command in a comment body, in order (empty if there is none)."""
    return [parse_args(line, args) for line, args in command_lines(body)]


def check_target(target: str) -> None:
    """Raise `UnsafeTarget` unless ``target`` only uses `SAFE_TARGET` characters, is relative and
    has no ``..``; the message names the problem (the reply quotes the text itself)."""
    if not SAFE_TARGET.fullmatch(target):
        bad = sorted({c for c in target if not SAFE_TARGET.fullmatch(c)})
        raise UnsafeTarget("contains characters outside [A-Za-z0-9_./:[]-]: "
                           + ", ".join(quote(c) for c in bad))
    if target.startswith("/"):
        raise UnsafeTarget("is an absolute path; give a path relative to the repository root")
    if ".." in target:
        raise UnsafeTarget("contains `..`")
    file_part = target.split("::", 1)[0]
    if not file_part:
        raise UnsafeTarget("has a node id but no file")
    if "[" in file_part or "]" in file_part:
        raise UnsafeTarget("has `[` or `]` in the file part (they belong in a node id after `::`)")


def quote(text: str, limit: int = 80) -> str:
    """``text`` as inline code that is safe in Markdown and HTML: control and non-ASCII characters
    become escapes, HTML specials entities, ``|`` cannot break a table. Longer than ``limit``
    characters is cut with an explicit note of how much was left out."""
    shown, rest = text[:limit], len(text) - limit
    escaped = shown.encode("unicode_escape").decode("ascii")
    escaped = (escaped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
               .replace("|", "&#124;").replace("`", "&#96;").replace("@", "&#64;"))
    suffix = f"… ({rest} more characters)" if rest > 0 else ""
    return f"<code>{escaped}</code>{suffix}"
