"""``python -m bench._history_gen14_extract GIT_DIR [HEAD]``: bitsandbytes' real history for gen14.

Reads a bitsandbytes clone or bare mirror (``GIT_DIR``) and writes `DATA` (bench/_history_gen14_data.json):
the `COMMITS` newest first-parent commits up to ``HEAD`` (default: the data file's head if it has one,
else the repository's) with time, author, subject, pull-request number and touched files; the
test functions of every ``tests/test_*.py`` at the oldest commit and again wherever a commit changes
one (`bench._history_gen14_parse`); the GPU CI shape wherever the workflows change it
(`bench._history_gen14_ci`); and the breakage windows the history itself names
(`bench._history_gen14_windows`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from bench._history_gen14_ci import gpu_jobs
from bench._history_gen14_parse import collected
from bench._history_gen14_windows import find_windows

DATA = Path(__file__).with_name("_history_gen14_data.json")
REPO = "bitsandbytes-foundation/bitsandbytes"
COMMITS = 240
MAX_FILES = 12
_PR = re.compile(r"\(#(\d+)\)\s*$|^Merge pull request #(\d+)")
_TEST_FILE = re.compile(r"^tests/test_[^/]*\.py$")


class ExtractError(RuntimeError):
    """The repository cannot be read as bitsandbytes' history (the message says why)."""


def git(git_dir: str, *args: str) -> str:
    done = subprocess.run(["git", "--git-dir", git_dir, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise ExtractError(f"git {' '.join(args[:3])}: {done.stderr.strip() or 'failed'}")
    return done.stdout


def _tree_files(git_dir: str, sha: str, folder: str) -> list[str]:
    return git(git_dir, "ls-tree", "-r", "--name-only", sha, folder).split()


def _inventory(git_dir: str, sha: str, path: str) -> list[list]:
    return [[f.cls, f.name, f.cases, *f.ids] for f in collected(git(git_dir, "show", f"{sha}:{path}"))]


def _ci(git_dir: str, sha: str) -> dict:
    files = {p: git(git_dir, "show", f"{sha}:{p}") for p in _tree_files(git_dir, sha, ".github/workflows")
             if p.endswith(".yml")}
    return gpu_jobs(files).as_json()


def extract(git_dir: str, head: str | None = None) -> dict:
    """The data file's content for ``git_dir`` at ``head`` (see the module docstring)."""
    head = git(git_dir, "rev-parse", head or "HEAD").strip()
    log = git(git_dir, "log", "--first-parent", f"-{COMMITS + 1}", "--format=%H%x1f%ct%x1f%an%x1f%s%x1f%b%x1e", head)
    entries = [e.strip("\n").split("\x1f") for e in log.split("\x1e") if e.strip()]
    if len(entries) < COMMITS + 1:
        raise ExtractError(f"{git_dir}: {len(entries)} first-parent commits, need {COMMITS + 1}")
    base, entries = entries[-1], list(reversed(entries[:-1]))
    commits, bodies, tests, ci = [], [], [], []
    ci_now = _ci(git_dir, base[0])
    ci.append({"at": -1, **ci_now})
    for path in _tree_files(git_dir, base[0], "tests"):
        if _TEST_FILE.match(path):
            tests.append({"at": -1, "file": path, "funcs": _inventory(git_dir, base[0], path)})
    for i, (sha, ctime, author, subject, body) in enumerate(entries):
        files = git(git_dir, "diff-tree", "--no-commit-id", "-r", "--name-only", f"{sha}^1", sha).split()
        found = _PR.search(subject)
        pr = int(found.group(1) or found.group(2)) if found else None
        commits.append({"sha": sha, "time": int(ctime), "author": author, "subject": subject[:120], "pr": pr,
                        "files": files[:MAX_FILES], "nfiles": len(files)})
        bodies.append(body)
        for path in files:
            if _TEST_FILE.match(path):
                alive = path in _tree_files(git_dir, sha, path)
                tests.append({"at": i, "file": path, "funcs": _inventory(git_dir, sha, path) if alive else None})
        if any(f.startswith(".github/workflows/") for f in files):
            shape = _ci(git_dir, sha)
            if shape != ci_now:
                ci.append({"at": i, **shape})
                ci_now = shape
    diffs = {i: git(git_dir, "diff", f"{c['sha']}^1", c["sha"], "--", "tests/") for i, c in enumerate(commits)
             if any(f.startswith("tests/") for f in c["files"])}
    windows = find_windows(commits, bodies, diffs)
    return {"repo": REPO, "head": head, "base": base[0], "commits": commits, "tests": tests, "ci": ci,
            "windows": [asdict(w) for w in windows]}


def dump(data: dict) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n"


def stored_head() -> str | None:
    return json.loads(DATA.read_text())["head"] if DATA.exists() else None


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m bench._history_gen14_extract GIT_DIR [HEAD]", file=sys.stderr)
        return 2
    try:
        data = extract(argv[0], argv[1] if len(argv) > 1 else stored_head())
    except ExtractError as exc:
        print(f"python -m bench._history_gen14_extract: {exc}", file=sys.stderr)
        return 1
    DATA.write_text(dump(data))
    print(f"{DATA.name}: {len(data['commits'])} commits, {len(data['tests'])} test-file versions, "
          f"{len(data['ci'])} CI shapes, {len(data['windows'])} windows, {DATA.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
