"""``python -m bench._history_gen13_extract GIT_DIR``: read TransformerEngine's real history from a
git directory into `DATA` (``bench/_history_gen13_data.json``), the skeleton of the thirteenth
labelled history (`bench._history_gen13`).

What is read, all from the repository at the commits it names:
- the last `COUNT` first-parent commits of ``HEAD`` (its time, author, pull request number from the
  squash-merge subject ``... (#N)``, subject, touched files);
- the qa scripts' pytest invocations (`bench._history_gen13_parse.qa_jobs`) at every commit where a
  ``qa/<level>/test.sh`` of `LEVELS` changed, so a run uses the script its commit holds;
- each test file those scripts run: its test functions, their classes, parametrize argnames and
  the product of their literal parametrize lengths (`bench._history_gen13_parse.read_functions`);
- breakage windows (`bench._history_gen13_parse.windows`): ``Revert "X"`` back to X, and a fix
  naming the pull request it fixes (``#N`` in its message) or sharing a touched source file and a
  subject word with one of the `FIX_REACH` commits before it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from bench._history_gen13_parse import (Commit, parse_pr, qa_jobs, read_functions, windows)

DATA = Path(__file__).with_name("_history_gen13_data.json")
COUNT = 240
MAX_FILES = 12
LEVELS = ("L0_pytorch_unittest", "L0_pytorch_debug_unittest", "L0_jax_unittest", "L1_pytorch_distributed_unittest",
          "L1_jax_distributed_unittest", "L1_pytorch_onnx_unittest", "L2_jax_unittest")
MAX_FUNCTIONS = 30
MAX_BODY = 240
_SEP = "\x1e"


def git(git_dir: str, *args: str) -> str:
    """One git command's stdout; a failure raises `RuntimeError` with git's own message."""
    done = subprocess.run(["git", "--git-dir", git_dir, *args], capture_output=True, text=True, check=False)
    if done.returncode:
        said = done.stderr.strip().splitlines()
        raise RuntimeError(f"git {args[0]}: {said[-1] if said else 'exit ' + str(done.returncode)}")
    return done.stdout


def read_commits(git_dir: str, count: int = COUNT) -> list[Commit]:
    """The last ``count`` first-parent commits of HEAD, oldest first, with their touched files."""
    out = git(git_dir, "log", "--first-parent", f"-{count}", "--name-only",
              f"--format={_SEP}%H%x1f%cI%x1f%an%x1f%s%x1f%b%x1f", "HEAD")
    commits = []
    for block in out.split(_SEP)[1:]:
        sha, when, author, subject, body, rest = block.split("\x1f", 5)
        files = [line for line in rest.splitlines() if line.strip()]
        commits.append(Commit(sha, when, author, parse_pr(subject), subject, body.strip()[:MAX_BODY],
                              files[:MAX_FILES], len(files)))
    return commits[::-1]


def extract(git_dir: str) -> dict:
    """The whole data set as the JSON file holds it."""
    commits = read_commits(git_dir)
    scripts: dict[str, list[dict]] = {}
    table: list[dict] = []  # each distinct job once; a script version lists its jobs' indices
    for level in LEVELS:
        path = f"qa/{level}/test.sh"
        changed = {line.strip() for line in git(git_dir, "log", "--first-parent", "--format=%H",
                                                 f"{commits[0].sha}..{commits[-1].sha}", "--", path).splitlines()}
        versions: list[dict] = []
        for index, commit in enumerate(commits):
            if index and commit.sha not in changed:
                continue
            jobs = []
            for job in qa_jobs(git(git_dir, "show", f"{commit.sha}:{path}")):
                if asdict(job) not in table:
                    table.append(asdict(job))
                jobs.append(table.index(asdict(job)))
            if not versions or versions[-1]["jobs"] != jobs:
                versions.append({"from": index, "jobs": jobs})
        scripts[level] = versions
    targets = {job["path"] for job in table}
    listed = git(git_dir, "ls-tree", "-r", "--name-only", commits[-1].sha, "tests/").splitlines()
    dirs = {t: sorted(f for f in listed if f.startswith(t + "/") and f.rsplit("/", 1)[-1].startswith("test_")
                      and f.endswith(".py")) for t in sorted(targets) if not t.endswith(".py")}
    files = sorted({t for t in targets if t.endswith(".py")} | {f for fs in dirs.values() for f in fs})
    tests: dict[str, list[dict]] = {}
    for path in files:
        for commit in reversed(commits):  # the newest text the range holds
            try:
                text = git(git_dir, "show", f"{commit.sha}:{path}")
            except RuntimeError:
                continue
            tests[path] = [asdict(f) for f in read_functions(text)[:MAX_FUNCTIONS]]
            break
    found = windows(commits)
    return {"repo": "NVIDIA/TransformerEngine", "first": commits[0].sha, "head": commits[-1].sha,
            "commits": [asdict(c) for c in commits], "jobs": table, "scripts": scripts, "dirs": dirs, "tests": tests,
            "windows": [asdict(w) for w in found]}


def dumps(data: dict) -> str:
    return json.dumps(data, indent=None, separators=(",", ":"), sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench._history_gen13_extract GIT_DIR (TransformerEngine's git directory)",
              file=sys.stderr)
        return 2
    try:
        data = extract(argv[0])
    except (RuntimeError, OSError) as exc:
        print(f"python -m bench._history_gen13_extract: {exc}", file=sys.stderr)
        return 1
    DATA.write_text(dumps(data))
    print(f"{DATA.name}: {len(data['commits'])} commits, {len(data['tests'])} test files, "
          f"{len(data['windows'])} windows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
