"""Extract gen8's real skeleton from a clone of vLLM (read with git, never imported): ::

    python -m bench._history_gen8_extract GIT_DIR > bench/_history_gen8_data.json

``GIT_DIR`` is a clone (bare is enough) holding `SPAN`'s commits (vLLM's main, as mirrored by
local-inference-lab/vllm). Written: the span's first-parent commits oldest first (sha, committer
time, author, PR number from the subject's last ``(#NNNNN)``, subject, touched files), the
``run_all_patterns`` of ``.buildkite/ci_config.yaml`` and every non-optional GPU step of
``.buildkite/test_areas/*.yaml`` at the first commit: its label, device, GPU count, parallelism,
``soft_fail``, ``source_file_dependencies`` and the test files its ``pytest`` commands run (at most
`FILES_PER_STEP`), each with its first `TESTS_PER_FILE` top-level test functions, the ``vllm``
modules it imports and its ``pytest.mark.flaky(reruns=N)``. Bad input: one line, exit 2.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from typing import Any

import yaml

# 221 consecutive first-parent commits of vLLM's main, 2026-03-25 .. 2026-04-02.
SPAN = ("1bf2ddd0ee24cf878a87b643536b749676e8f902", "5a2d420c175653c05ff9273bbda95eb23cdb4155")
SOURCE = "vLLM main (github:vllm-project/vllm, as mirrored by github:local-inference-lab/vllm)"
COMMAND = "python -m bench._history_gen8_extract GIT_DIR"
FILES_PER_STEP = 4
TESTS_PER_FILE = 4
MAX_TOUCHED = 80  # a commit's touched files kept (its count is kept whole)
CPU_DEVICES = ("cpu-small", "cpu-medium")
_PR = re.compile(r"\(#(\d+)\)\s*$")
_TEST_DEF = re.compile(r"^(?:async )?def (test_\w+)\(", re.M)
_IMPORT = re.compile(r"^\s*(?:from|import)\s+(vllm(?:\.\w+)*)", re.M)
_FLAKY = re.compile(r"mark\.flaky\(\s*reruns\s*=\s*(\d+)")
_VALUE_FLAGS = {"-k", "-m", "--deselect", "--ignore", "-c", "-p", "--maxfail", "--timeout", "-n",
                "--shard-id", "--num-shards", "-o"}


class ExtractError(Exception):
    """The clone does not hold what the extraction needs: the message says what."""


def git(git_dir: str, *args: str) -> str:
    done = subprocess.run(["git", "--git-dir", git_dir, *args], capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise ExtractError(f"git {' '.join(args[:2])} in {git_dir}: {said} (give a vLLM clone holding {SPAN[1][:12]})")
    return done.stdout


def span_commits(git_dir: str) -> list[str]:
    """`SPAN`'s first-parent commits, oldest first."""
    first, last = SPAN
    shas = git(git_dir, "rev-list", "--first-parent", "--reverse", f"{first}^..{last}").split()
    if not shas or shas[0] != first:
        raise ExtractError(f"{git_dir}: {first[:12]} is not on {last[:12]}'s first-parent line")
    return shas


def commit_record(git_dir: str, sha: str, paths: dict[str, int]) -> list[Any]:
    meta = git(git_dir, "show", "-s", "--format=%ct%x00%an%x00%s", sha).rstrip("\n").split("\x00")
    touched = git(git_dir, "diff-tree", "-r", "--no-commit-id", "--name-only", f"{sha}^", sha).split("\n")
    touched = sorted(t for t in touched if t)
    match = _PR.search(meta[2])
    ids = [paths.setdefault(t, len(paths)) for t in touched[:MAX_TOUCHED]]
    return [sha, int(meta[0]), meta[1], int(match.group(1)) if match else 0, meta[2], ids, len(touched)]


def pytest_targets(command: str) -> list[str]:
    """The paths a ``pytest`` command line names (``file.py``, ``dir``, ``file.py::test``)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    if "pytest" not in words:
        return []
    out, skip = [], False
    for word in words[words.index("pytest") + 1:]:
        if skip:
            skip = False
        elif word in _VALUE_FLAGS:
            skip = True
        elif word in ("&&", ";", "|", "||"):
            break
        elif not word.startswith("-") and "=" not in word:
            out.append(word.split("::")[0].removeprefix("./").rstrip("/"))
    return out


def test_files(git_dir: str, sha: str, step: dict[str, Any], tree: set[str]) -> list[str]:
    base = "tests/" if step.get("working_dir", "/vllm-workspace/tests").rstrip("/").endswith("tests") else ""
    found: list[str] = []
    for command in step.get("commands") or []:
        for target in pytest_targets(str(command)):
            path = base + target
            if path in tree and path.endswith(".py"):
                candidates = [path]
            else:
                candidates = sorted(t for t in tree if t.startswith(path + "/") and t.endswith(".py")
                                    and t.rsplit("/", 1)[-1].startswith("test_"))
            found += [c for c in candidates if c not in found][:2]
    return found


def file_record(git_dir: str, sha: str, path: str) -> dict[str, Any] | None:
    text = git(git_dir, "show", f"{sha}:{path}")
    tests = _TEST_DEF.findall(text)[:TESTS_PER_FILE]
    if not tests:
        return None
    imports = sorted({m.replace(".", "/") for m in _IMPORT.findall(text)})
    reruns = max((int(n) for n in _FLAKY.findall(text)), default=0)
    return {"tests": tests, "imports": imports, "reruns": reruns}


def steps_at(git_dir: str, sha: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    tree = set(git(git_dir, "ls-tree", "-r", "--name-only", sha).split("\n"))
    files: dict[str, Any] = {}
    steps = []
    for area in sorted(t for t in tree if t.startswith(".buildkite/test_areas/") and t.endswith(".yaml")):
        doc = yaml.safe_load(git(git_dir, "show", f"{sha}:{area}")) or {}
        for step in doc.get("steps") or []:
            if step.get("optional") or step.get("device") in CPU_DEVICES:
                continue
            chosen = []
            for path in test_files(git_dir, sha, step, tree):
                if path not in files:
                    files[path] = file_record(git_dir, sha, path)
                if files[path] is not None and len(chosen) < FILES_PER_STEP:
                    chosen.append(path)
            if not chosen:
                continue
            steps.append({"label": str(step.get("label")), "area": area.rsplit("/", 1)[-1][:-5],
                          "device": str(step.get("device") or "l4"),
                          "gpus": int(step.get("num_devices") or step.get("num_gpus") or 1),
                          "parallelism": int(step.get("parallelism") or 1), "soft_fail": bool(step.get("soft_fail")),
                          "deps": [str(d) for d in step.get("source_file_dependencies") or []], "files": chosen})
    return steps, {path: record for path, record in sorted(files.items()) if record is not None}


def extract(git_dir: str) -> dict[str, Any]:
    """The whole data file's content (see the module docstring)."""
    shas = span_commits(git_dir)
    paths: dict[str, int] = {}
    commits = [commit_record(git_dir, sha, paths) for sha in shas]
    steps, files = steps_at(git_dir, shas[0])
    config = yaml.safe_load(git(git_dir, "show", f"{shas[0]}:.buildkite/ci_config.yaml")) or {}
    return {"source": SOURCE, "command": COMMAND, "first": shas[0], "last": shas[-1], "count": len(shas),
            "run_all": {"patterns": config.get("run_all_patterns") or [],
                        "exclude": config.get("run_all_exclude_patterns") or []},
            "paths": sorted(paths, key=paths.__getitem__), "commits": commits, "steps": steps, "files": files}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench._history_gen8_extract GIT_DIR (a vLLM clone; bare is enough)", file=sys.stderr)
        return 2
    try:
        data = extract(argv[0])
    except ExtractError as exc:
        print(f"bench._history_gen8_extract: {exc}", file=sys.stderr)
        return 2
    json.dump(data, sys.stdout, separators=(",", ":"), sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
