"""gen8's real skeleton read from `DATA` (`bench._history_gen8_extract` wrote it) and the story the
real commits tell: which steps a change runs (vLLM's rule) and the breakage windows of main.

Which steps a change runs is vLLM's own rule: every step when a touched file matches a
``run_all_patterns`` prefix (and no ``run_all_exclude_patterns`` one), else each step one of whose
``source_file_dependencies`` is a prefix of a touched file.

Breakage windows come from real commits only. A revert (``Revert "..." (#O)``) whose original O is
in the span breaks from O until the revert. A fix (subject ``[Bugfix] Fix``, ``[CI] fix``,
``[CI/Build]``, any case, or ``... broken by #N``) breaks from its breaker: the PR it names, else
the newest of the `LOOKBACK` commits before it that touched a ``vllm/`` or ``tests/`` file the fix
touched. The tests that fail are those of the steps the breaker's diff runs whose file the breaker
or the fixer touched or that import a module the breaker touched, the fixer's first (at most
`PER_WINDOW`). A window with no such test, or whose breaker is not in the span, is dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("_history_gen8_data.json")
LOOKBACK = 40
PER_WINDOW = 3
_FIX = re.compile(r"^(\[[^\]]+\])*\[(bugfix|ci|ci/build)\](\[[^\]]+\])*\s*(fix|.*\bbroken by #\d+)", re.I)
_CI_BUILD = re.compile(r"^\[ci/build\]", re.I)
_BROKEN_BY = re.compile(r"broken by #(\d+)")
_REVERTED_PR = re.compile(r"\(#(\d+)\)")


@dataclass(frozen=True)
class Commit:
    """One first-parent commit of the span: ``index`` its place, oldest 0."""

    index: int
    sha: str
    time: int
    author: str
    pr: int
    subject: str
    touched: tuple[str, ...]


@dataclass(frozen=True)
class Test:
    """One real test function: ``node`` pytest's id (``file::name``), the vllm modules its file imports
    (as path prefixes) and the ``mark.flaky`` reruns its file declares."""

    node: str
    file: str
    imports: tuple[str, ...]
    reruns: int


@dataclass(frozen=True)
class Step:
    """One real Buildkite step: ``key`` its label as a slug (the harness's tier)."""

    key: str
    label: str
    area: str
    device: str
    gpus: int
    parallelism: int
    soft_fail: bool
    deps: tuple[str, ...]
    tests: tuple[Test, ...]

    @property
    def pool(self) -> str:
        return f"{self.device}x{self.gpus}"


@dataclass(frozen=True)
class Window:
    """Main broken from commit ``start`` (the breaker, included) until ``end`` (the revert or fix,
    excluded): ``tests`` (step key, node) fail with ``error`` in every run of code inside it."""

    start: int
    end: int
    kind: str
    tests: tuple[tuple[str, str], ...]
    error: str


@dataclass(frozen=True)
class Skeleton:
    """The data file's content, typed."""

    source: str
    first: str
    last: str
    commits: tuple[Commit, ...]
    steps: tuple[Step, ...]
    run_all: tuple[str, ...]
    run_all_exclude: tuple[str, ...]


def slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", label.lower().replace("%n", "")).strip("-")


@lru_cache(maxsize=2)
def load(path: Path = DATA) -> Skeleton:
    """`DATA` as a `Skeleton` (read once)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    paths = data["paths"]
    commits = tuple(Commit(i, sha, t, author, pr, subject, tuple(paths[p] for p in ids))
                    for i, (sha, t, author, pr, subject, ids, _count) in enumerate(data["commits"]))
    files = data["files"]
    steps = tuple(Step(slug(s["label"]), s["label"], s["area"], s["device"], s["gpus"], s["parallelism"],
                       s["soft_fail"], tuple(s["deps"]),
                       tuple(Test(f"{f}::{name}", f, tuple(files[f]["imports"]), files[f]["reruns"])
                             for f in s["files"] for name in files[f]["tests"]))
                  for s in data["steps"])
    return Skeleton(data["source"], data["first"], data["last"], commits, steps,
                    tuple(data["run_all"]["patterns"]), tuple(data["run_all"]["exclude"]))


def runs_all(skeleton: Skeleton, touched: tuple[str, ...]) -> bool:
    return any(any(t.startswith(p) for p in skeleton.run_all)
               and not any(t.startswith(x) for x in skeleton.run_all_exclude) for t in touched)


def selected_steps(skeleton: Skeleton, steps: tuple[Step, ...], touched: tuple[str, ...]) -> list[Step]:
    """The steps a change touching ``touched`` runs, by vLLM's rule (the module docstring)."""
    if runs_all(skeleton, touched):
        return list(steps)
    return [s for s in steps if not s.deps or any(t.startswith(d) for d in s.deps for t in touched)]


def _module_touched(test: Test, touched: tuple[str, ...]) -> bool:
    # ``from vllm import LLM`` imports everything: only a named module (``vllm.x...``) ties a test to a change
    return any(t == m + ".py" or t.startswith(m + "/") for m in test.imports if "/" in m for t in touched)


def _code(touched: tuple[str, ...]) -> set[str]:
    return {t for t in touched if t.startswith(("vllm/", "tests/")) and t.endswith(".py")}


def _breaker(commits: tuple[Commit, ...], fix: Commit) -> int | None:
    named = _BROKEN_BY.search(fix.subject)
    if named:
        return next((c.index for c in commits[:fix.index] if c.pr == int(named.group(1))), None)
    own = _code(fix.touched)
    for c in reversed(commits[max(0, fix.index - LOOKBACK):fix.index]):
        if own & _code(c.touched):
            return c.index
    return None


def _window_tests(skeleton: Skeleton, steps: tuple[Step, ...], breaker: Commit, fixer: Commit) -> list[tuple[str, str]]:
    first, then = [], []
    for step in selected_steps(skeleton, steps, breaker.touched):
        for test in step.tests:
            by_fixer = test.file in fixer.touched or _module_touched(test, fixer.touched)
            if by_fixer and (test.file in breaker.touched or _module_touched(test, breaker.touched)):
                first.append((step.key, test.node))
            elif test.file in breaker.touched:
                then.append((step.key, test.node))
    return (first + then)[:PER_WINDOW]


_ERRORS = ("AssertionError: outputs of {m} differ from the reference at token {n}",
           "ImportError: cannot import name '{f}' from 'vllm.{m}'",
           "AttributeError: '{f}' object has no attribute 'forward_native'",
           "TypeError: {f}.__init__() got an unexpected keyword argument 'prefix'",
           "RuntimeError: shape '[-1, {n}]' is invalid for input of size {n}1")


def _error(index: int, breaker: Commit) -> str:
    module = next((t for t in breaker.touched if t.startswith("vllm/") and t.endswith(".py")), "vllm/config.py")
    dotted = module[5:-3].replace("/", ".")
    name = "".join(part.capitalize() for part in dotted.rsplit(".", 1)[-1].split("_"))
    return _ERRORS[index % len(_ERRORS)].format(m=dotted, f=name, n=64 + 8 * index)


def windows(skeleton: Skeleton, steps: tuple[Step, ...] | None = None) -> list[Window]:
    """The real reverts' and fixes' breakage windows over ``steps`` (all steps by default)."""
    steps = skeleton.steps if steps is None else steps
    commits, out = skeleton.commits, []
    by_pr = {c.pr: c.index for c in commits if c.pr}
    for fixer in commits:
        if fixer.subject.startswith("Revert"):
            numbers = [int(n) for n in _REVERTED_PR.findall(fixer.subject)[:-1]] or []
            start, kind = next((by_pr[n] for n in numbers if by_pr.get(n, fixer.index) < fixer.index), None), "revert"
        elif _FIX.match(fixer.subject) or _CI_BUILD.match(fixer.subject):
            start, kind = _breaker(commits, fixer), "fix"
        else:
            continue
        if start is None:
            continue
        tests = _window_tests(skeleton, steps, commits[start], fixer)
        if tests:
            out.append(Window(start, fixer.index, kind, tuple(tests), _error(len(out), commits[start])))
    return out
