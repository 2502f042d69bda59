"""The real skeleton of the ninth history, read from `bench/_history_gen9_data.json` (made by
`bench._history_gen9_extract`): Liger-Kernel's main commits, its test cases at each commit, and
the breakage windows its real reverts and fixes give (`windows`).

A window is ``(breaker, end, cases)``: the cases fail on main from commit index ``breaker`` up to,
not including, ``end`` (the revert or fix). A revert's breaker is the commit whose subject it
quotes. A fix's breaker is not written anywhere, so it is modelled: the latest of the `LOOKBACK`
commits before the fix that touched a source or test file the fix touches, and through which some
test file is reached (the test file itself, or a ``liger_kernel`` file it imports; `HUBS` do
not count). The failing cases are 1-3 of one test function there, one named like the subject when
there is one. Subjects that
fix a flaky test, the style, docs, benchmarks, CI or another vendor's device (XPU, NPU, AMD: code
the NVIDIA jobs do not run) are no breakage of a test and are left out.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("_history_gen9_data.json")
LOOKBACK = 12
# Files nearly every change touches: a fix and an earlier commit sharing only these share no bug.
HUBS = ("src/liger_kernel/transformers/__init__.py", "src/liger_kernel/utils.py", "src/liger_kernel/ops/utils.py",
        "src/liger_kernel/transformers/functional.py", "src/liger_kernel/ops/__init__.py",
        "src/liger_kernel/transformers/monkey_patch.py", "test/transformers/test_monkey_patch.py", "test/utils.py")
_FIX = re.compile(r"^(fix|\[bug\]|bug fix|fixbug)|\bfix(es|ed)?\b", re.IGNORECASE)
_REVERT = re.compile(r'^Revert "(.+)"')
_NOT_A_BREAK = re.compile(r"flaky|typo|style|docs?\b|benchmark|workflow|\bci\b|readme|format|xpu|npu|amd|rocm|ascend",
                          re.IGNORECASE)
# `make test-convergence` runs these files one after another (the Makefile's order); `make test` the rest.
CONVERGENCE = ("test/convergence/fp32/test_mini_models.py", "test/convergence/fp32/test_mini_models_multimodal.py",
               "test/convergence/fp32/test_mini_models_with_logits.py", "test/convergence/bf16/test_mini_models.py",
               "test/convergence/bf16/test_mini_models_multimodal.py",
               "test/convergence/bf16/test_mini_models_with_logits.py")


@dataclass(frozen=True)
class Commit:
    """One first-parent commit of main: ``files`` only its ``src/`` and ``test/`` paths."""

    index: int
    sha: str
    time: int
    author: str
    subject: str
    pr: int | None
    files: tuple[str, ...]
    added_tests: tuple[str, ...]

    @property
    def runs_gpu(self) -> bool:
        """nvi-ci.yml's ``paths: [src/**, test/**]`` filter, for push and pull_request alike."""
        return bool(self.files)


@dataclass(frozen=True)
class Case:
    """One test case as pytest names it: ``file::function[id]``; ``reaches`` the file and the
    ``liger_kernel`` sources it imports; ``tokenizer`` whether its file builds a tokenizer."""

    file: str
    function: str
    param: str
    reaches: frozenset[str]
    tokenizer: bool

    @property
    def node(self) -> str:
        return f"{self.file}::{self.function}" + (f"[{self.param}]" if self.param else "")

    @property
    def classname(self) -> str:
        inner = self.function.rsplit("::", 1)[0] if "::" in self.function else ""
        module = self.file[:-3].replace("/", ".")
        return f"{module}.{inner}" if inner else module

    @property
    def name(self) -> str:
        return self.function.rsplit("::", 1)[-1] + (f"[{self.param}]" if self.param else "")

    @property
    def convergence(self) -> bool:
        return self.file in CONVERGENCE

    @property
    def kernel(self) -> bool:
        """A numerical test of a Triton kernel: a parametrized case outside convergence."""
        return bool(self.param) and not self.convergence


@dataclass(frozen=True)
class Window:
    """Cases that fail on main from ``breaker`` until ``end`` (exclusive); ``kind`` revert or fix."""

    breaker: int
    end: int
    cases: tuple[Case, ...]
    kind: str
    why: str


@dataclass(frozen=True)
class World:
    data: dict
    commits: tuple[Commit, ...]
    cases: tuple[Case, ...]
    added_at: dict[str, int]  # a test file added inside the range: the index of the commit that added it

    def present(self, index: int, extra: tuple[str, ...] = ()) -> list[Case]:
        """The cases main at commit ``index`` (plus a pull request's added files ``extra``) holds."""
        return [c for c in self.cases if self.added_at.get(c.file, -1) <= index or c.file in extra]


@lru_cache(maxsize=2)
def load(path: str = str(DATA), ids_per_test: int = 2) -> World:
    """The committed data file as a `World`, each test function cut to its first ``ids_per_test`` ids."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    commits = tuple(Commit(i, c["sha"], c["time"], c["author"], c["subject"], c["pr"], tuple(c["files"]),
                           tuple(c["added_tests"])) for i, c in enumerate(data["commits"]))
    cases = []
    for file in [p for p in sorted(data["tests"]) if p not in CONVERGENCE] + [p for p in CONVERGENCE
                                                                             if p in data["tests"]]:
        info = data["tests"][file]
        reaches = frozenset([file, *info["imports"]])
        for function, fn in info["functions"].items():
            for param in fn["ids"][:ids_per_test] or [""]:
                cases.append(Case(file, function, param, reaches, info["tokenizer"]))
    added = {path: c.index for c in commits for path in c.added_tests if path in data["tests"]}
    return World(data, commits, tuple(cases), added)


def _links(files: tuple[str, ...], cases: tuple[Case, ...]) -> set[str]:
    return {c.file for c in cases if c.reaches & set(files)}


def _named(functions: list[str], subject: str) -> list[str]:
    """The functions whose name shares a word with the fix's subject ("Fix mllama monkey patch
    tests" -> the mllama ones), else all of them."""
    words = {w for w in re.findall(r"[a-z0-9]{4,}", subject.lower())} - {"test", "tests", "fix", "patch"}
    named = [f for f in functions if words & set(re.findall(r"[a-z0-9]+", f.lower()))]
    return named or functions


def windows(world: World, rng: random.Random) -> list[Window]:
    """The breakage windows of the real reverts and fixes; ``rng`` picks the 1-3 cases of each."""
    out = []
    by_subject = {c.subject: c.index for c in world.commits}
    for fix in world.commits:
        revert = _REVERT.match(fix.subject)
        breaker: int | None = None
        if revert:
            quoted = revert.group(1)
            breaker = next((i for s, i in by_subject.items() if s.startswith(quoted) and i < fix.index), None)
            shared = set(world.commits[breaker].files) if breaker is not None else set()
            kind = "revert"
        elif _FIX.search(fix.subject) and not _NOT_A_BREAK.search(fix.subject) and fix.files:
            kind = "fix"
            for back in range(fix.index - 1, max(-1, fix.index - 1 - LOOKBACK), -1):
                shared = (set(world.commits[back].files) & set(fix.files)) - set(HUBS)
                if shared and _links(tuple(shared), world.cases):
                    breaker = back
                    break
        if breaker is None:
            continue
        files = sorted(_links(tuple(shared), world.cases))
        if not files:
            continue
        file = rng.choice(files)
        candidates = [c for c in world.cases if c.file == file and c.reaches & shared]
        function = rng.choice(_named(sorted({c.function for c in candidates}), fix.subject))
        chosen = [c for c in candidates if c.function == function][:rng.randint(1, 3)]
        why = f"{kind} {fix.sha[:10]} ({fix.subject[:60]}) ends what {world.commits[breaker].sha[:10]} broke"
        out.append(Window(breaker, fix.index, tuple(chosen), kind, why))
    return out


def broken_by(wins: list[Window], index: int, fixer: int | None = None) -> dict[str, Window]:
    """The cases failing on main at commit ``index`` (by node), less those the pull request that
    lands as ``fixer`` ends."""
    out = {}
    for w in wins:
        if w.breaker <= index < w.end and w.end != fixer:
            out.update({c.node: w for c in w.cases})
    return out
