"""``python -m bench._history_gen15_extract GIT_DIR``: read PEFT's real history (huggingface/peft)
from a bare clone into ``bench/_history_gen15_data.json`` for the fifteenth labelled history.

What is read, all from the clone: the first-parent commits of main committed in [SINCE, UNTIL) with
their time, author, pull request number (the squash subject's ``(#N)``), subject and touched files
(those under src/, tests/, setup.py, Makefile and the test workflows); which test files each commit's
tree holds (as first/last commit index); each test file's real test functions at the last commit
holding it (`bench._history_gen15_parse`); the CI shape at every commit that changes it (tests.yml's
matrix, events, fail-fast and concurrency, the Makefile's ``test`` command, nightly.yml's cron and
GPU runner groups); and the breakage windows the history names (``Revert "X"``, ``... introduced in
#N``, and dependency fixes: a ``fix`` subject naming transformers, pytest, torch or a transformers
API). Contract: the same clone gives byte-identical JSON (`bench._history_gen15_verify`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from datetime import datetime

import yaml

from bench._history_gen15_parse import read_tests

SINCE, UNTIL = "2025-07-01T00:00:00+00:00", "2026-02-01T00:00:00+00:00"
DATA = Path(__file__).with_name("_history_gen15_data.json")
KEPT = ("src/", "tests/", "setup.py", "Makefile", ".github/workflows/tests.yml",
        ".github/workflows/nightly.yml", ".github/workflows/tests-main.yml")
CI_FILES = (".github/workflows/tests.yml", ".github/workflows/nightly.yml", "Makefile")
MAX_FILES, MAX_FUNCS = 12, 24
PR = re.compile(r"\(#(\d+)\)\s*$")
REVERT = re.compile(r'^Revert "(.+)"')
INTRODUCED = re.compile(r"introduced (?:in|by) #(\d+)", re.I)
PLATFORM = re.compile(r"(?i)^(ci:? )?fix\b.*\b(windows|macos)\b")
DEPENDENCY = re.compile(r"(?i)^(ci:? )?fix\b.*\b(transformers|pytest v?\d|torch|dynamiccache|key_cache|"
                        r"max_cache_len|deprecat)")


class ExtractError(RuntimeError):
    """The git directory cannot be read as PEFT's history."""


def git(git_dir: str, *args: str) -> str:
    """One git command's stdout in GIT_DIR; ExtractError naming the command when it fails."""
    done = subprocess.run(["git", "--git-dir", git_dir, *args], capture_output=True, text=True)
    if done.returncode:
        raise ExtractError(f"git {' '.join(args[:2])} failed in {git_dir}: {done.stderr.strip()[:200]}")
    return done.stdout


def first_parent_commits(git_dir: str) -> list[dict[str, Any]]:
    """The range's first-parent commits, oldest first."""
    out = git(git_dir, "log", "--first-parent", "--reverse", "--format=%H%x09%ct%x09%cI%x09%an%x09%s", "HEAD")
    commits = []
    for line in out.splitlines():
        sha, stamp, iso, author, subject = line.split("\t", 4)
        when = datetime.fromisoformat(iso)
        if datetime.fromisoformat(SINCE) <= when < datetime.fromisoformat(UNTIL):
            match = PR.search(subject)
            commits.append({"sha": sha, "time": int(stamp), "author": author,
                            "pr": int(match.group(1)) if match else None, "subject": subject})
    if len(commits) < 200:
        raise ExtractError(f"{git_dir}: only {len(commits)} first-parent commits in [{SINCE}, {UNTIL})")
    return commits


def touched(git_dir: str, sha: str) -> tuple[list[str], bool]:
    """The commit's kept files, and whether it touches docs/ only (tests.yml's paths-ignore)."""
    out = git(git_dir, "diff-tree", "--no-commit-id", "--name-only", "-r", f"{sha}^1", sha).splitlines()
    return [f for f in out if f.startswith(KEPT)][:MAX_FILES], bool(out) and all(f.startswith("docs/") for f in out)


def test_files(git_dir: str, sha: str) -> list[str]:
    out = git(git_dir, "ls-tree", "-r", "--name-only", sha, "tests/")
    return sorted(f for f in out.splitlines() if re.search(r"(^|/)test_[^/]*\.py$", f))


def ci_shape(git_dir: str, sha: str) -> dict[str, Any]:
    """The test workflows' shape at one commit, as the files say it."""
    tests = yaml.safe_load(git(git_dir, "show", f"{sha}:.github/workflows/tests.yml"))
    nightly = yaml.safe_load(git(git_dir, "show", f"{sha}:.github/workflows/nightly.yml"))
    make = git(git_dir, "show", f"{sha}:Makefile")
    job = tests["jobs"]["tests"]
    strategy = job.get("strategy", {})
    events = tests.get(True, tests.get("on", {}))  # PyYAML reads the key `on` as True
    make_test = re.search(r"^test:\n\t(.+)$", make, re.M)
    groups = {name: j["runs-on"]["group"] for name, j in nightly["jobs"].items()
              if isinstance(j.get("runs-on"), dict)}
    return {"sha": sha, "python": [str(v) for v in strategy["matrix"]["python-version"]],
            "os": list(strategy["matrix"]["os"]), "fail_fast": bool(strategy.get("fail-fast", True)),
            "cancel_in_progress": "concurrency" in tests, "events": sorted(events),
            "make_test": make_test.group(1).split(" $(")[0] if make_test else "",
            "continue_on_error": [os for os in strategy["matrix"]["os"]
                                  if "macos" in os and "continue-on-error" in str(job)],
            "nightly_cron": nightly[True]["schedule"][0]["cron"] if True in nightly else "",
            "gpu_groups": groups}


def windows(commits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The breakage windows the subjects name: start is the breaking commit's index (None when it
    lies outside the range or is a dependency's release), end the fixing commit's."""
    by_pr = {c["pr"]: i for i, c in enumerate(commits) if c["pr"] is not None}
    by_subject = {c["subject"]: i for i, c in enumerate(commits)}
    found = []
    for end, commit in enumerate(commits):
        subject = commit["subject"]
        kind, start = "", None
        if (m := REVERT.match(subject)) is not None:
            kind, start = "revert", by_subject.get(m.group(1))
        elif (m := INTRODUCED.search(subject)) is not None:
            kind, start = "introduced", by_pr.get(int(m.group(1)))
        elif DEPENDENCY.search(subject):
            kind = "dependency"
        elif PLATFORM.search(subject):
            kind = "platform"
        if kind:
            tests = [f for f in commit["files"] if re.search(r"(^|/)test_[^/]*\.py$", f)]
            found.append({"kind": kind, "start": start, "end": end, "subject": subject, "tests": tests})
    return found


def extract(git_dir: str) -> dict[str, Any]:
    """All of the history's real data, as the JSON file holds it."""
    commits = first_parent_commits(git_dir)
    spans: dict[str, list[int]] = {}
    shapes = []
    for index, commit in enumerate(commits):
        commit["files"], commit["docs_only"] = touched(git_dir, commit["sha"])
        for path in test_files(git_dir, commit["sha"]):
            spans.setdefault(path, [index, index])[1] = index
        if index == 0 or any(f in CI_FILES for f in commit["files"]):
            shapes.append({"index": index, **ci_shape(git_dir, commit["sha"])})
    tests = {}
    for path, (_, last) in sorted(spans.items()):
        funcs = read_tests(git(git_dir, "show", f"{commits[last]['sha']}:{path}"))[:MAX_FUNCS]
        tests[path] = [[f.cls, f.name, f.cases, list(f.ids)] for f in funcs]
    return {"repo": "huggingface/peft", "since": SINCE, "until": UNTIL, "commits": commits,
            "test_files": dict(sorted(spans.items())), "tests": tests, "ci": shapes,
            "windows": windows(commits)}


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench._history_gen15_extract GIT_DIR (a clone of huggingface/peft)", file=sys.stderr)
        return 2
    try:
        text = dumps(extract(argv[0]))
    except ExtractError as exc:
        print(f"python -m bench._history_gen15_extract: {exc}", file=sys.stderr)
        return 1
    DATA.write_text(text, encoding="utf-8")
    print(f"wrote {DATA.name}: {len(text)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
