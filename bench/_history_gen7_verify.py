"""``python -m bench._history_gen7_verify GIT_DIR``: check gen7's data file against a clone of SGLang.

Every commit of the span (sha, time, author, subject) as ``git log --first-parent`` gives it, its
touched files a subset of the commit's, and one test file in twenty defining its test and
registering a CUDA suite at the span's first commit. Exit 0 when all hold, 1 naming the first that
does not, 2 when git cannot read the clone. Not part of the test suite: CI has no SGLang clone."""

from __future__ import annotations

import subprocess
import sys

from bench._history_gen7_story import load


def verify(git_dir: str) -> str:
    """The first mismatch between the data file and the clone at ``git_dir``, or "" when none."""
    skeleton = load()
    first, last = skeleton.span

    def git(*args: str) -> str:
        return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True,
                              text=True).stdout

    log = git("log", "--first-parent", "--reverse", "--name-only", "--format=%x00%H%x1f%cI%x1f%an%x1f%s",
              f"{first}^..{last}").split("\0")[1:]
    if len(log) != len(skeleton.commits):
        return f"the clone has {len(log)} commits in {first[:12]}..{last[:12]}, the data {len(skeleton.commits)}"
    for chunk, commit in zip(log, skeleton.commits):
        head, _, names = chunk.partition("\n")
        if head.split("\x1f") != [commit.sha, commit.time, commit.author, commit.subject]:
            return f"commit {commit.sha[:12]}: the data's sha, time, author or subject differ from the clone's"
        if not commit.files <= set(names.split()):
            return f"commit {commit.sha[:12]}: files {sorted(commit.files - set(names.split()))} not touched there"
    for test in {t.file: t for t in skeleton.tests}.values():
        if sum(test.file.encode()) % 20 == 0:
            text = git("show", f"{first}:{test.file}")
            if f"def {test.name}" not in text or "register_cuda_ci(" not in text:
                return f"{test.file} at {first[:12]} does not define {test.name} or register a CUDA suite"
    return ""


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench._history_gen7_verify GIT_DIR", file=sys.stderr)
        return 2
    try:
        problem = verify(argv[0])
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"{argv[0]}: git failed ({exc}); give a clone of sgl-project/sglang", file=sys.stderr)
        return 2
    print(problem or "gen7's data file matches the clone")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
