"""The breakage windows bitsandbytes' own history names (gen14's extractor).

A window is ``[start, end)`` in first-parent order: the commit at ``start`` broke ``tests`` on the
CUDA jobs in ``scope`` (``all`` or ``windows``) and the commit at ``end`` mended them. Found three ways:

* ``revert``: ``Revert "X"`` ends the window X's commit started;
* ``named``: a fix whose message names an earlier pull request of the range (``#N``) ends the
  window that pull request's commit started;
* ``fix``: a fix that edits existing test functions starts its window at the latest earlier commit
  (at most `LOOKBACK` back) that touched the same source files or test files.

A fix whose subject says it is about tolerances (``threshold``, ``tolerance``, ``precision``, ``flaky``)
is a ``flaky`` window instead: its tests failed at random before it. Subjects naming another
backend or the build (ROCm, XPU, CPU, Triton, lint, docs) are no CUDA test breakage and are left out.
Tests: the functions the fixing commit's test diff edits; without any, the test files its source
files map to (`SOURCE_TESTS`), for the generator to draw from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LOOKBACK = 30
_FIX = re.compile(r"\bfix|regression|\bhotfix", re.I)
_NOT_CUDA = re.compile(r"rocm|\bhip\b|xpu|hpu|triton|\bcpu\b|avx|neon|aarch64|\barm|mps|gcc|openmp|lint|ruff|"
                       r"\bdoc|typo|readme|release|build|workflow|ci\b|scikit|sckit|python 3\.1[1-9]", re.I)
_FLAKY = re.compile(r"threshold|tolerance|precision|flaky|atol|rtol", re.I)
_WINDOWS = re.compile(r"windows|\bwin\b|_win\b|msvc", re.I)
_REVERT = re.compile(r'^Revert "(.+)"')
_REF = re.compile(r"#(\d{3,5})")
_FILE = re.compile(r"^diff --git a/(tests/test_[^ ]+\.py) ", re.M)
_DEF = re.compile(r"def (test_\w+)")
SOURCE_TESTS = (("bitsandbytes/optim", ("tests/test_optim.py",)),
                ("bitsandbytes/nn/parametrize", ("tests/test_parametrize.py",)),
                ("bitsandbytes/nn", ("tests/test_modules.py", "tests/test_linear4bit.py", "tests/test_linear8bitlt.py")),
                ("bitsandbytes/autograd", ("tests/test_autograd.py",)),
                ("bitsandbytes/cextension", ("tests/test_cuda_setup_evaluator.py",)),
                ("bitsandbytes/cuda_specs", ("tests/test_cuda_setup_evaluator.py",)),
                ("bitsandbytes/", ("tests/test_functional.py", "tests/test_ops.py")),
                ("csrc/", ("tests/test_functional.py", "tests/test_ops.py")))


@dataclass(frozen=True)
class Window:
    """One breakage (or tolerance-flake) window; ``tests`` are ``file::name`` of edited functions."""

    start: int
    end: int
    kind: str
    scope: str
    flaky: bool
    tests: tuple[str, ...]
    files: tuple[str, ...]


def edited_tests(diff: str) -> list[str]:
    """``file::function`` for each existing test function a ``git diff`` of test files edits (its
    hunk headers' context or removed lines name it); functions only added are left out."""
    out: list[str] = []
    for chunk in re.split(r"(?=^diff --git )", diff, flags=re.M):
        found = _FILE.match(chunk)
        if not found:
            continue
        names: list[str] = []
        for line in chunk.splitlines():
            if line.startswith("@@"):
                names += _DEF.findall(line.split("@@")[-1])
            elif line.startswith("-") and not line.startswith("---"):
                names += _DEF.findall(line)
        out += [f"{found.group(1)}::{n}" for n in dict.fromkeys(names)]
    return out


def _sources(files: list[str]) -> list[str]:
    return [f for f in files if (f.startswith("bitsandbytes/") or f.startswith("csrc/")) and not f.startswith("tests/")]


def _mapped(files: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    for path in _sources(files):
        out += next((tests for prefix, tests in SOURCE_TESTS if path.startswith(prefix)), ())
    return tuple(dict.fromkeys(out))


def _start(commits: list[dict], end: int, fix_files: list[str]) -> int | None:
    wanted = set(_sources(fix_files)) | {f for f in fix_files if f.startswith("tests/test_")}
    for back in range(end - 1, max(-1, end - 1 - LOOKBACK), -1):
        if wanted & set(commits[back]["files"]):
            return back
    return None


def find_windows(commits: list[dict], bodies: list[str], test_diffs: dict[int, str]) -> list[Window]:
    """The windows of ``commits`` (oldest first; each with ``subject``, ``pr``, ``files``), their
    message ``bodies`` and the ``git diff -- tests/`` of those that touch tests (see the module docstring)."""
    by_pr = {c["pr"]: i for i, c in enumerate(commits) if c["pr"] is not None}
    by_subject = {c["subject"]: i for i, c in enumerate(commits)}
    out: list[Window] = []
    for end, commit in enumerate(commits):
        subject = commit["subject"]
        reverted = _REVERT.match(subject)
        edited = tuple(edited_tests(test_diffs.get(end, "")))
        scope = "windows" if _WINDOWS.search(subject) else "all"
        if reverted and reverted.group(1) in by_subject and by_subject[reverted.group(1)] < end:
            start = by_subject[reverted.group(1)]
            out.append(Window(start, end, "revert", scope, False, edited, _mapped(commits[start]["files"])))
            continue
        if not _FIX.search(subject) or _NOT_CUDA.search(subject):
            continue
        named = [by_pr[int(n)] for n in _REF.findall(subject + "\n" + bodies[end])
                 if int(n) in by_pr and by_pr[int(n)] < end and int(n) != commit["pr"]]
        flaky = bool(_FLAKY.search(subject))
        if named and not flaky:
            start = max(named)
            out.append(Window(start, end, "named", scope, False, edited, _mapped(commits[start]["files"] + commit["files"])))
        elif edited:
            start = _start(commits, end, commit["files"])
            if start is not None:
                out.append(Window(start, end, "fix", scope, flaky, edited, _mapped(commit["files"])))
    return out
