"""Which lines of a comment are bot commands, and which only look like one.

Prow-style rules: a command is a whole line starting with ``/rerun-test``, ``/rerun-failed``,
``/rerun-tier``, ``/rerun-stage`` or ``/culprit`` (up to 3 leading spaces, as GitHub renders them the same),
several commands per comment are fine, and lines inside fenced code blocks (````` and ``~~~``),
indented code (a tab or 4+ spaces), HTML comments (``<!-- -->``, which GitHub does not show) or
quoted with ``>`` are ignored, so that pasting an old comment or a log, or hiding text from
reviewers, never triggers a run. Lines end at ``\\n`` only, as GitHub's Markdown does (not at
U+2028 and the other breaks `str.splitlines` knows).

A visible line that becomes a command once look-alike characters are replaced (a fullwidth or
division slash, a Unicode dash, a zero-width or other invisible character, NBSP or another Unicode
space, fullwidth letters) is reported as a `LookAlike`: it is never run, and the reply says what
was understood and the exact ASCII command to type.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

RERUN_TEST, RERUN_FAILED, RERUN_TIER, RERUN_STAGE = "rerun-test", "rerun-failed", "rerun-tier", "rerun-stage"
CULPRIT = "culprit"
COMMAND_NAMES = (RERUN_TEST, RERUN_FAILED, RERUN_TIER, RERUN_STAGE, CULPRIT)

# A command name at the start of a line, then whitespace or the end of the line (`/rerun-tests`
# is not a command).
COMMAND_RE = re.compile(r"^ {0,3}/(?P<name>rerun-(?:test|failed|tier|stage)|culprit)(?:[ \t]+(?P<args>.*?))?[ \t]*$")
# Opening/closing code fence (CommonMark: up to 3 spaces of indent, 3+ backticks or tildes).
FENCE_RE = re.compile(r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})")
QUOTE_RE = re.compile(r"^[ \t]{0,3}>")
# An HTML comment (an unterminated one runs to the end, as in CommonMark).
HTML_COMMENT_RE = re.compile(r"<!--.*?(?:-->|\Z)", re.S)

# Characters people (or their editors) type instead of `/` and `-`; NFKC leaves these unchanged.
_SLASHES = "\u2215\u2044\u29f8\u2571\uff0f"
_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"
_TRANSLATE = {ord(c): "/" for c in _SLASHES} | {ord(c): "-" for c in _DASHES}


@dataclass(frozen=True)
class LookAlike:
    """A line that is a command only after `normalize`. ``characters`` describes each replaced or
    removed character once (``U+FF0F FULLWIDTH SOLIDUS``); ``understood`` is the ASCII line."""

    understood: str
    characters: tuple[str, ...]


@dataclass(frozen=True)
class CommandLine:
    """One command line: 1-based ``line`` in the comment, the ``name`` as written, the text after
    it. ``lookalike`` is set when the line was written with look-alike characters."""

    line: int
    name: str
    args: str
    lookalike: LookAlike | None = None


def normalize(line: str) -> str:
    """``line`` with look-alike slashes and dashes made ASCII, invisible format characters (Unicode
    category Cf: zero-width space/joiners, word joiner, BOM, soft hyphen, bidi marks) removed, other
    Unicode spaces made a plain space, and NFKC applied (fullwidth letters become ASCII)."""
    out = []
    for char in line.translate(_TRANSLATE):
        category = unicodedata.category(char)
        if category == "Cf":
            continue
        out.append(" " if category == "Zs" else char)
    return unicodedata.normalize("NFKC", "".join(out)).translate(_TRANSLATE)


def _describe(original: str) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for char in original:
        if ord(char) > 0x7E and normalize(char) != char:
            seen[f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed character')}"] = None
    return tuple(seen)


def command_lines(body: str) -> list[CommandLine]:
    """Every command line (and look-alike) outside code fences, quotes and HTML comments, in order."""
    out: list[CommandLine] = []
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
        plain = normalize(line) if not line.isascii() else line
        match = COMMAND_RE.match(plain)
        if match is None:
            continue
        lookalike = None
        if plain != line:
            understood = f"/{match['name']}" + (f" {match['args']}" if match["args"] else "")
            lookalike = LookAlike(understood, _describe(line))
        out.append(CommandLine(number, match["name"], match["args"] or "", lookalike))
    return out


__all__ = ["COMMAND_NAMES", "COMMAND_RE", "CULPRIT", "CommandLine", "LookAlike", "RERUN_FAILED", "RERUN_STAGE",
           "RERUN_TEST", "RERUN_TIER", "command_lines", "normalize"]
