"""``python -m bench._history_gen12_extract GIT_DIR``: read DeepSpeed's real skeleton for gen12 from a
bare clone into ``bench/_history_gen12_data.json``.

Contract: `extract(git_dir)` reads, with git alone, `COUNT` consecutive first-parent commits of the
default branch starting at `START` (oldest first): each one's sha, commit time, author, subject,
pull request number (the ``(#N)`` a squash merge ends with) and touched files; the unit test files
present at any of those commits, each read (`bench._history_gen12_parse`) at the first of them it
appears in, with the commit it appears and disappears at; the GPU workflows that run ``tests/unit``
(`WORKFLOWS`) at the first commit and at every commit that changes them; and the breakage windows
the history names (`bench._history_gen12_windows`). The result is plain JSON, the same for the
same mirror: `bench._history_gen12_verify` re-extracts and compares.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench._history_gen12_parse import parse_test_file, parse_workflow
from bench._history_gen12_windows import find_pins, find_windows

START = "a36db9cc1c167c24c7ce6b1d3f38a8550c6ec4b7"  # "Update torch version in workflows (#6631)", 2024-10-17
COUNT = 250
WORKFLOWS = ("nv-torch-latest-v100", "nv-inference", "nv-a6000", "nv-nightly", "nv-h100", "nv-torch-nightly-v100")
DATA = Path(__file__).with_name("_history_gen12_data.json")
MAX_TOUCHED = 30  # files kept per commit (a tree-wide rename touches hundreds; the first 30 say enough)
_SEP = "\x1e"


class ExtractError(RuntimeError):
    """The git directory cannot give what the extractor needs; the message says what."""


def git(git_dir: str, *args: str) -> str:
    """stdout of ``git --git-dir=git_dir args`` (ExtractError naming the command on failure)."""
    done = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True,
                          encoding="utf-8", errors="replace")
    if done.returncode != 0:
        raise ExtractError(f"git {' '.join(args[:3])} failed: {done.stderr.strip()[:300]}")
    return done.stdout


def _commits(git_dir: str) -> list[dict[str, Any]]:
    start = git(git_dir, "rev-parse", "--verify", f"{START}^{{commit}}").strip()
    shas = git(git_dir, "rev-list", "--first-parent", "--reverse", f"{start}^..HEAD").split()
    if len(shas) < COUNT or shas[0] != start:
        raise ExtractError(f"the mirror holds {len(shas)} first-parent commits from {START}, need {COUNT}")
    shas = shas[:COUNT]
    text = git(git_dir, "log", "--first-parent", "--reverse", f"--format={_SEP}%H%x00%ct%x00%an%x00%s%x00%b%x00",
               "--name-status", "--no-renames", f"{start}^..{shas[-1]}")
    out = []
    for chunk in text.split(_SEP)[1:]:
        sha, stamp, author, subject, body, files = chunk.split("\x00", 5)
        touched, added, deleted = [], [], []
        for line in files.strip().splitlines():
            status, _, path = line.partition("\t")
            touched.append(path)
            if status.startswith("A"):
                added.append(path)
            elif status.startswith("D"):
                deleted.append(path)
        out.append({"sha": sha, "time": int(stamp), "author": author, "subject": subject,
                    "body": body.strip()[:600], "pr": _pr_number(subject), "n_touched": len(touched),
                    "touched": sorted(touched)[:MAX_TOUCHED], "added": sorted(added), "deleted": sorted(deleted)})
    if [c["sha"] for c in out] != shas:
        raise ExtractError("git log and git rev-list disagree on the first-parent commits")
    return out


def _pr_number(subject: str) -> int | None:
    tail = subject.rstrip()
    if tail.endswith(")") and "(#" in tail:
        digits = tail[tail.rindex("(#") + 2:-1]
        if digits.isdigit():
            return int(digits)
    return None


def _is_unit_test(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return path.startswith("tests/unit/") and name.startswith("test_") and name.endswith(".py")


def _test_files(git_dir: str, commits: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    files: dict[str, dict[str, Any]] = {}
    first = commits[0]["sha"]
    for path in git(git_dir, "ls-tree", "-r", "--name-only", first, "tests/unit").split():
        if _is_unit_test(path):
            files[path] = {"born": 0, "gone": None, **parse_test_file(git(git_dir, "show", f"{first}:{path}"))}
    for index, commit in enumerate(commits[1:], start=1):
        for path in commit["added"]:
            if _is_unit_test(path) and (path not in files or files[path]["gone"] is not None):
                files[path] = {"born": index, "gone": None,
                               **parse_test_file(git(git_dir, "show", f"{commit['sha']}:{path}"))}
        for path in commit["deleted"]:
            if path in files and files[path]["gone"] is None:
                files[path]["gone"] = index
    return dict(sorted(files.items()))


def _workflows(git_dir: str, commits: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for name in WORKFLOWS:
        path = f".github/workflows/{name}.yml"
        versions = []
        for index, commit in enumerate(commits):
            if index and path not in commit["touched"] and path not in commit["deleted"]:
                continue
            listed = git(git_dir, "ls-tree", "--name-only", commit["sha"], path).strip()
            shape = parse_workflow(git(git_dir, "show", f"{commit['sha']}:{path}")) if listed else None
            if not versions or versions[-1]["shape"] != shape:
                versions.append({"from": index, "shape": shape})
        out[name] = versions
    return out


def extract(git_dir: str) -> dict[str, Any]:
    """The gen12 data read from the bare clone at ``git_dir`` (see the module docstring)."""
    commits = _commits(git_dir)
    files = _test_files(git_dir, commits)
    data = {"project": "deepspeedai/DeepSpeed", "start": commits[0]["sha"], "count": COUNT,
            "workflows": _workflows(git_dir, commits), "windows": find_windows(commits, files),
            "pins": find_pins(commits, WORKFLOWS),
            "test_files": files}
    for commit in commits:
        del commit["body"], commit["added"]
    data["commits"] = commits
    return data


def dumps(data: dict[str, Any]) -> str:
    """The data file's exact text (compact, keys sorted, one trailing newline)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench._history_gen12_extract GIT_DIR (a bare clone of deepspeedai/DeepSpeed)",
              file=sys.stderr)
        return 2
    try:
        text = dumps(extract(argv[0]))
    except ExtractError as exc:
        print(f"python -m bench._history_gen12_extract: {exc}", file=sys.stderr)
        return 1
    DATA.write_text(text, encoding="utf-8")
    print(f"wrote {DATA.name}: {len(text)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
