"""The breakage windows DeepSpeed's history names, for gen12 (`bench._history_gen12_extract`).

A window opens at a culprit commit and closes at the commit that undoes or mends it: a
``Revert "S"`` of the commit titled S (or of the sha its body names), a commit titled rollback or
revert naming the culprit's pull request ``#N``, or a ``Fix ...`` commit whose title or body names
``#N``, a pull request merged earlier in the range. Each window keeps the unit test files the
closing commit or the culprit touched (the tests the breakage is known to reach) and the culprit's
touched source files (for mapping to tests when neither touched a test).

`find_pins` lists the commits that pin a dependency in a GPU workflow (``Pin ...``, ``... by
pinning ...``): each ends a breakage that came from outside the repository (a new release of a
dependency the workflow installs unpinned); git holds the end, not the start.
"""

from __future__ import annotations

import re
from typing import Any

_REVERT = re.compile(r'^Revert "(?P<inner>.+)"')
_REVERTS_SHA = re.compile(r"This reverts commit (?P<sha>[0-9a-f]{7,40})")
_NUMBER = re.compile(r"#(\d+)\b")
_UNDO = re.compile(r"^\s*(revert|rollback|roll back)\b", re.IGNORECASE)
_FIX = re.compile(r"^\s*\[?fix", re.IGNORECASE)
_INTRODUCED = re.compile(r"(introduced|caused|broken|broke) (in|by) #(\d+)", re.IGNORECASE)
_PIN = re.compile(r"^\s*(fix .* by )?pin(ning)?\b|\bby pinning\b", re.IGNORECASE)
_SOURCE_ROOTS = ("deepspeed/", "csrc/", "op_builder/", "accelerator/")


def _culprit(index: int, commit: dict[str, Any], commits: list[dict[str, Any]],
             by_pr: dict[int, int]) -> tuple[int, str] | None:
    subject, body = commit["subject"], commit.get("body", "")
    found = _REVERT.match(subject)
    if found:
        inner = found.group("inner")
        for earlier in range(index - 1, -1, -1):
            if commits[earlier]["subject"] == inner:
                return earlier, "revert"
        named = _REVERTS_SHA.search(body)
        if named:
            for earlier in range(index - 1, -1, -1):
                if commits[earlier]["sha"].startswith(named.group("sha")):
                    return earlier, "revert"
    for number in (m.group(3) for m in _INTRODUCED.finditer(body)):
        earlier = by_pr.get(int(number))
        if earlier is not None and earlier < index:
            return earlier, "fix"
    if _UNDO.match(subject) or _FIX.match(subject):
        kind = "revert" if _UNDO.match(subject) else "fix"
        for number in _NUMBER.findall(subject + "\n" + body):
            earlier = by_pr.get(int(number))
            if earlier is not None and earlier < index and int(number) != commit["pr"]:
                return earlier, kind
    return None


def find_windows(commits: list[dict[str, Any]], files: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Windows ``{culprit, end, kind, tests, sources}`` (commit indexes into ``commits``), oldest first."""
    by_pr = {c["pr"]: i for i, c in enumerate(commits) if c["pr"] is not None}
    windows = []
    for index, commit in enumerate(commits):
        found = _culprit(index, commit, commits, by_pr)
        if found is None:
            continue
        culprit, kind = found
        touched = set(commit["touched"]) | set(commits[culprit]["touched"])
        tests = sorted(path for path in touched if path in files)
        sources = sorted(p for p in commits[culprit]["touched"] if p.startswith(_SOURCE_ROOTS) and p.endswith(".py"))
        windows.append({"culprit": culprit, "end": index, "kind": kind, "end_subject": commit["subject"],
                        "tests": tests, "sources": sources})
    return windows


def find_pins(commits: list[dict[str, Any]], workflows: tuple[str, ...]) -> list[dict[str, Any]]:
    """``{end, workflows, subject}`` for each commit pinning a dependency in one of ``workflows``."""
    pins = []
    for index, commit in enumerate(commits):
        if not _PIN.search(commit["subject"]):
            continue
        named = sorted(w for w in workflows if f".github/workflows/{w}.yml" in commit["touched"])
        if named:
            pins.append({"end": index, "workflows": named, "subject": commit["subject"]})
    return pins
