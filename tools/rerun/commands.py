"""The bot's command grammar: arguments of each command, their ``--help`` text, target safety.

Which lines are commands is `tools.rerun.comment_lines`' job; this module turns each line into a
typed `Command`. Commands:

* ``/rerun-test <target>... [--tier T]`` and ``/rerun-test --owner @team [--tier T]``
* ``/rerun-failed``
* ``/rerun-tier <tier>`` (alias ``/rerun-stage <tier>``)
* ``/culprit <target> [--tier T] [--good SHA] [--bad SHA] [--budget N]`` (one target, one per comment)

each with ``--help``. A *target* is a basename (``test_x.py``), a repo-relative path
(``tests/quant/test_x.py``) or either followed by a pytest node id (``tests/x.py::TestA::test_b[1-2]``).
Targets are checked against `SAFE_TARGET` before anything else looks at them; the bot never
passes comment text to a shell.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from ci.culprit.model import DEFAULT_BUDGET as DEFAULT_CULPRIT_BUDGET
from tools.rerun.comment_lines import (CULPRIT, RERUN_FAILED, RERUN_STAGE, RERUN_TEST, RERUN_TIER, LookAlike,
                                       command_lines)
from tools.rerun.policy import POLICY_TEXT, Action

COMMAND = "/rerun-test"
# Everything a target may contain. `[` `]` for parametrized node ids, `:` for `::`.
SAFE_TARGET = re.compile(r"[A-Za-z0-9_./:\[\]-]+")
TIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
OWNER_RE = re.compile(r"@?[A-Za-z0-9][A-Za-z0-9_./-]{0,99}")
SHA_RE = re.compile(r"[0-9a-fA-F]{7,40}")

# Upper bounds that keep one comment from becoming an unbounded amount of work. Exceeding them is
# an error in the reply, never a silent cut.
MAX_TARGETS = 20

_USAGE = {
    RERUN_TEST: f"""\
**`/rerun-test`** re-runs registered test files of this pull request on their CI tiers.

```
/rerun-test <target> [<target> ...] [--tier TIER]
/rerun-test --owner @team [--tier TIER]
/rerun-test --help
```

* `<target>` is a file name (`test_kvfp4_quant_dequant.py`), a repo-relative path
  (`tests/quant/test_kvfp4_quant_dequant.py`) or either with a pytest node id appended
  (`tests/quant/test_kvfp4_quant_dequant.py::test_roundtrip[bf16]`).
* Files are looked up in `registry.yaml` of the default branch. Without `--tier`, each GPU tier of
  the file runs (a cpu-only file runs on `cpu`); `--tier` must be one of the file's tiers.
* `--owner @team` runs every active file whose registry `owner` is `@team`, on each file's GPU tiers.
* All targets of a comment (several per line, several lines) go out as one run per tier.
  Lines in code blocks or quotes are ignored. At most {MAX_TARGETS} targets per comment.
""",
    RERUN_FAILED: """\
**`/rerun-failed`** re-runs the failed jobs of this pull request's head commit.

```
/rerun-failed
/rerun-failed --help
```

* Every completed workflow run of the head commit whose conclusion is `failure` or `timed_out`
  gets GitHub's "re-run failed jobs": the pull-request checks, the GPU runs (pr-gpu.yml, found by
  their run-name) and the bot's own dispatched runs; runs still in progress are listed and left alone.
""",
    RERUN_TIER: """\
**`/rerun-tier`** (alias **`/rerun-stage`**) runs every active test of one tier on this PR's head commit.

```
/rerun-tier <tier>
/rerun-tier --help
```

* One run per shard of `python -m ci plan --tier <tier>` (the plan's sharding and shard budget).
""",
    CULPRIT: f"""\
**`/culprit`** finds the commit of the default branch that broke a test, flake-aware, on its tier's runners.

```
/culprit <target> [--tier TIER] [--good SHA] [--bad SHA] [--budget RUNS]
/culprit --help
```

* `<target>` is one registered test file, or one test of it (`tests/quant/test_x.py::test_roundtrip`).
* `--tier`: default the file's GPU tier (a file on several must name one).
* `--good` / `--bad`: a commit where it passes and a later one where it fails, on one first-parent
  line; default the test history's breakage window (last passed at `--good`, broken since `--bad`).
* `--budget`: the most runs the search may spend (default {DEFAULT_CULPRIT_BUDGET}). The search runs in
  `culprit.yml`; this reply says where, and gets the answer.
""",
}


def help_text(name: str) -> str:
    """The ``--help`` reply of one command (``rerun-stage`` is ``rerun-tier``), policy included."""
    return _USAGE[RERUN_TIER if name == RERUN_STAGE else name] + "\n" + POLICY_TEXT + "\n"


@dataclass(frozen=True)
class Command:
    """One command line. ``name`` is canonical (``rerun-stage`` becomes ``rerun-tier``); ``line``
    is 1-based in the comment. ``error`` is set (the rest may be partial) when it did not parse;
    ``lookalike`` when it was written with look-alike characters (then it is never run)."""

    name: str
    line: int
    text: str
    targets: tuple[str, ...] = ()
    tier: str | None = None
    owner: str | None = None
    good: str | None = None  # /culprit's window and budget
    bad: str | None = None
    budget: int = DEFAULT_CULPRIT_BUDGET
    help: bool = False
    error: str | None = None
    lookalike: LookAlike | None = None

    @property
    def runnable(self) -> bool:
        return not (self.help or self.error or self.lookalike)

    @property
    def action(self) -> Action:
        if self.name == RERUN_FAILED:
            return Action.RERUN_FAILED
        if self.name == RERUN_TIER:
            return Action.RERUN_TIER
        if self.name == CULPRIT:
            return Action.CULPRIT
        return Action.RERUN_OWNER if self.owner is not None else Action.RERUN_TEST


class UnsafeTarget(ValueError):
    """A target that the bot refuses to look at (see `check_target`)."""


def parse_comment(body: str) -> list[Command]:
    """Every command (and look-alike) in a comment body, in order (empty if there is none)."""
    out = []
    for found in command_lines(body):
        command = parse_args(found.name, found.line, found.args)
        if found.lookalike is not None:
            command = Command(command.name, found.line, found.lookalike.understood, lookalike=found.lookalike)
        out.append(command)
    return out


def parse_args(name: str, line: int, args: str) -> Command:
    """Parse the text after ``/<name>`` on one line."""
    name = RERUN_TIER if name == RERUN_STAGE else name
    text = f"/{name} {args}".rstrip()
    tokens = args.split()
    if any(t in ("--help", "-h") for t in tokens):
        return Command(name, line, text, help=True)
    if name == RERUN_FAILED:
        if tokens:
            return Command(name, line, text, error="`/rerun-failed` takes no arguments; see `/rerun-failed --help`")
        return Command(name, line, text)
    if name == RERUN_TIER:
        if len(tokens) != 1 or tokens[0].startswith("-"):
            return Command(name, line, text, error="give exactly one tier, e.g. `/rerun-tier gpu_b200`")
        if not TIER_RE.fullmatch(tokens[0]):
            return Command(name, line, text, error=f"{quote(tokens[0])} is not a tier name")
        return Command(name, line, text, tier=tokens[0])
    if not tokens:
        return Command(name, line, text, help=True)
    if name == CULPRIT:
        return _parse_culprit(line, text, tokens)
    return _parse_rerun_test(line, text, tokens)


def _option(tokens: list[str], i: int, flag: str) -> tuple[str | None, int]:
    """(value, next index) of ``--flag V`` or ``--flag=V`` at ``tokens[i]``; value None if missing."""
    if tokens[i] == flag:
        return (tokens[i + 1], i + 2) if i + 1 < len(tokens) else (None, i + 1)
    return tokens[i].removeprefix(flag + "="), i + 1


def _parse_rerun_test(line: int, text: str, tokens: list[str]) -> Command:
    targets: list[str] = []
    values: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        flag = next((f for f in ("--tier", "--owner") if token == f or token.startswith(f + "=")), None)
        if flag is None:
            if token.startswith("-"):
                return Command(RERUN_TEST, line, text, error=f"unknown option {quote(token)}; see `{COMMAND} --help`")
            targets.append(token)
            i += 1
            continue
        value, i = _option(tokens, i, flag)
        example = "--tier gpu_b200" if flag == "--tier" else "--owner @kv-cache-team"
        if not value:
            return Command(RERUN_TEST, line, text, error=f"`{flag}` needs a value, e.g. `{example}`")
        if values.get(flag, value) != value:
            return Command(RERUN_TEST, line, text, error=f"`{flag}` is given twice with different values")
        pattern = TIER_RE if flag == "--tier" else OWNER_RE
        if not pattern.fullmatch(value):
            what = "a tier name" if flag == "--tier" else "an owner name"
            return Command(RERUN_TEST, line, text, error=f"`{flag}` value {quote(value)} is not {what}")
        values[flag] = value
    tier, owner = values.get("--tier"), values.get("--owner")
    if owner is not None and targets:
        return Command(RERUN_TEST, line, text, error="give targets or `--owner`, not both")
    if not targets and owner is None:
        return Command(RERUN_TEST, line, text, tier=tier, error=f"no target given; see `{COMMAND} --help`")
    return Command(RERUN_TEST, line, text, tuple(targets), tier, owner)


_CULPRIT_OPTIONS = {"--tier": (TIER_RE, "a tier name", "--tier gpu_b200"),
                    "--good": (SHA_RE, "a commit SHA (7 to 40 hex digits)", "--good 1a2b3c4"),
                    "--bad": (SHA_RE, "a commit SHA (7 to 40 hex digits)", "--bad 5d6e7f8"),
                    "--budget": (re.compile(r"[0-9]{1,4}"), "a whole number of runs", "--budget 20")}


def _parse_culprit(line: int, text: str, tokens: list[str]) -> Command:
    targets: list[str] = []
    values: dict[str, str] = {}
    usage = f"see `/{CULPRIT} --help`"
    i = 0
    while i < len(tokens):
        flag = next((f for f in _CULPRIT_OPTIONS if tokens[i] == f or tokens[i].startswith(f + "=")), None)
        if flag is None:
            if tokens[i].startswith("-"):
                return Command(CULPRIT, line, text, error=f"unknown option {quote(tokens[i])}; {usage}")
            targets.append(tokens[i])
            i += 1
            continue
        value, i = _option(tokens, i, flag)
        pattern, what, example = _CULPRIT_OPTIONS[flag]
        if not value:
            return Command(CULPRIT, line, text, error=f"`{flag}` needs a value, e.g. `{example}`")
        if not pattern.fullmatch(value):
            return Command(CULPRIT, line, text, error=f"`{flag}` value {quote(value)} is not {what}")
        if values.get(flag, value) != value:
            return Command(CULPRIT, line, text, error=f"`{flag}` is given twice with different values")
        values[flag] = value
    if len(targets) != 1:
        return Command(CULPRIT, line, text, error=f"give exactly one test file (or one test of it); {usage}")
    budget = int(values.get("--budget", DEFAULT_CULPRIT_BUDGET))
    if budget < 1:
        return Command(CULPRIT, line, text, error="`--budget` must be at least 1 run")
    good, bad = (values[f].lower() if f in values else None for f in ("--good", "--bad"))
    return Command(CULPRIT, line, text, tuple(targets), values.get("--tier"), good=good, bad=bad, budget=budget)


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


# Every ASCII punctuation character is a Markdown or HTML metacharacter somewhere (emphasis, links,
# autolinks, tables, entities, raw HTML); quoted text gets each as a numeric entity, which GitHub
# shows as the character and never parses. `/`, `,` and `-` start nothing inline and stay readable.
_ENTITIES = {ord(c): f"&#{ord(c)};" for c in string.punctuation if c not in "/,-"}
# GFM links an e-mail address found in text even when written with entities; an empty HTML comment
# before the `@` splits the text so nothing is linked (and `&#64;` is no @-mention either).
_ENTITIES[ord("@")] = "<!-- -->&#64;"


# Characters that show nothing but change what is around them: C0 and C1 controls and DEL (ESC
# starts a terminal colour sequence), and the bidi controls that reorder the text after them, so a
# name can read as something it is not. Text the bot did not write shows each as its escape.
_HIDDEN = (*range(0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPES = {c: chr(c).encode("unicode_escape").decode("ascii") for c in _HIDDEN}
_ENTITIES.update({c: "&#92;" + escape[1:] for c, escape in _ESCAPES.items()})


def visible(text: str, keep: str = "") -> str:
    """``text`` with each control character (except those in ``keep``) and bidi control written
    as its escape (``\\x1b``, ``\\u202e``): for raw text such as a code block's."""
    return text.translate({c: e for c, e in _ESCAPES.items() if chr(c) not in keep})


def entities(text: str) -> str:
    """``text`` with every Markdown and HTML metacharacter written as a numeric entity (and each
    ``@`` split from what precedes it), as `quote` writes it: plain text in any GitHub Markdown.
    Control characters (line breaks too) and bidi controls show as their escapes (`visible`)."""
    return text.translate(_ENTITIES)


def quote(text: str, limit: int = 80) -> str:
    """``text`` as inline code that renders as exactly that text in GitHub-flavoured Markdown and
    HTML: control and non-ASCII characters become escapes (``\\u200b``), every Markdown and HTML
    metacharacter an entity, so nothing in it is a link, emphasis, a mention, a tag or a table
    cell break. Longer than ``limit`` characters is cut with an explicit note of how much was left out."""
    shown, rest = text[:limit], len(text) - limit
    escaped = entities(shown.encode("unicode_escape").decode("ascii"))
    suffix = f"… ({rest} more characters)" if rest > 0 else ""
    return f"<code>{escaped}</code>{suffix}"


__all__ = ["COMMAND", "Command", "DEFAULT_CULPRIT_BUDGET", "MAX_TARGETS", "SAFE_TARGET", "TIER_RE", "UnsafeTarget", "check_target", "entities",
           "help_text", "parse_args", "parse_comment", "quote", "visible"]
