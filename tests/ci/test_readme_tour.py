"""The README's tour prints what it shows: each command is run, in order, in one fresh copy.

The tour is the fenced block of README.md's "A tour" section whose lines start with ``$ ``: each
such line is a command (a `` # ...`` tail is a shell comment, so bash ignores it), and the lines
after it, up to the next command, are what it prints (stdout and stderr together, as a terminal
shows them). A shown line ``...`` stands for any number of printed lines.

The copy holds only what git tracks (``git ls-files``, as the working tree has them), made a git
repository with one commit as a fresh clone is; ``python`` there is this interpreter (a wrapper
first on ``PATH``), and every command must exit 0. The tour's ``/tmp/demo`` is this test's own
temporary directory: the commands get its path, and the output gets ``/tmp/demo`` back.

Every shown line must equal the printed one, except lines of the forms in `TEMPLATES`: the counts
there move whenever a test is added, so the README's digits are not compared; the printed ones
must equal counts the test works out itself (`expected_counts`: the registry, read by the
project's loader, ``ci deps --format json`` and the JUnit report's test cases), and times must
have their form.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ci.registry import load_registry

ROOT = Path(__file__).resolve().parents[2]
DEMO = "/tmp/demo"
CHANGED = "fp4kv/mem_cache/codec.py"  # the file the tour's sed edits
SHARD_FILE = "tests/ci/test_shard.py"  # the file the tour's `ci run` runs

# Shown lines with counts or times. `{time}` is a time (0.1, 6.1), `{drift}` a signed percentage;
# every other `{name}` is a count from `expected_counts`. Two or more spaces match two or more (the
# summary table widens its columns with its numbers and parts them by two); the rest is literal.
TEMPLATES = (
    "tier cpu: {cpu_selected} selected, {cpu_not_run} not run (1 changed files)",
    "tests/ci/test_shard.py  {shard_tests}  {shard_tests}  0  0  0  0  {time}  {shard_est}  {drift}",
    "TOTAL  {shard_tests}  {shard_tests}  0  0  0  0  {time}",
    "wall time {time}s",
    "slowest: tests/ci/test_shard.py {time}s",
    "  tests/ci/test_shard.py: p90 {time}s over 1 sample(s), est_time {shard_est}s",
)
_FORMS = {"time": r"\d+\.\d", "drift": r"[-+]\d+%"}


def tour() -> list[tuple[str, list[str]]]:
    """``(command, shown output lines)`` for each ``$ `` line of the tour's fenced block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## A tour\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert section, "README.md has no '## A tour' section"
    blocks = [b for b in re.findall(r"^```[a-z]*\n(.*?)^```", section.group(1), flags=re.M | re.S)
              if b.startswith("$ ")]
    assert len(blocks) == 1, f"the tour section should have one block of $ commands, has {len(blocks)}"
    steps: list[tuple[str, list[str]]] = []
    for line in blocks[0].splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def _template_regex(template: str, values: dict[str, str] | None) -> re.Pattern[str]:
    """``template`` as a regex; a count is any number, or with ``values`` exactly its value."""
    indent = len(template) - len(template.lstrip(" "))
    parts = []
    for piece in re.split(r"(\{\w+\}|  +)", template[indent:]):
        if piece.startswith("{"):
            name = piece[1:-1]
            parts.append(_FORMS.get(name) or (r"\d+" if values is None else re.escape(values[name])))
        elif piece.startswith("  "):
            parts.append(" {2,}")
        else:
            parts.append(re.escape(piece))
    return re.compile(" " * indent + "".join(parts))


def template_of(shown: str) -> str | None:
    """The template whose form ``shown`` has, or None (then ``shown`` is compared literally)."""
    matching = [t for t in TEMPLATES if _template_regex(t, None).fullmatch(shown.rstrip())]
    assert len(matching) <= 1, f"{shown!r} has the form of {len(matching)} templates"
    return matching[0] if matching else None


def line_ok(shown: str, printed: str, counts: dict[str, str]) -> bool:
    template = template_of(shown)
    if template is None:
        return shown.rstrip() == printed.rstrip()
    return _template_regex(template, counts).fullmatch(printed.rstrip()) is not None


def output_ok(shown: list[str], printed: list[str], counts: dict[str, str]) -> bool:
    """True if ``printed`` matches ``shown`` line by line, a ``...`` line taking any number."""
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        if (i, j) not in memo:
            if i == len(shown):
                memo[i, j] = j == len(printed)
            elif shown[i] == "...":
                memo[i, j] = match(i + 1, j) or (j < len(printed) and match(i, j + 1))
            else:
                memo[i, j] = j < len(printed) and line_ok(shown[i], printed[j], counts) and match(i + 1, j + 1)
        return memo[i, j]

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * (len(shown) + len(printed)) + 100))
    return match(0, 0)


# Where this tree is no git checkout (the selection safety test runs every test file in a plain
# copy), the copy is the tree less what a run or an install leaves behind.
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".hypothesis", ".pytest_cache", ".ci-cache",
                                     "*.egg-info", ".ci-reports", "build", "dist", "changed.txt")


def fresh_copy(dest: Path) -> None:
    """The files git tracks, as the working tree has them, committed in a new repository."""
    if not (ROOT / ".git").exists():
        shutil.copytree(ROOT, dest, ignore=_NOT_SOURCE, symlinks=True, dirs_exist_ok=True)
    else:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        for rel in filter(None, listed.decode().split("\0")):
            source = ROOT / rel
            if source.is_file():  # a tracked file deleted in the working tree is not in the copy
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest / rel)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "fresh clone"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
                        *args], cwd=dest, capture_output=True, check=True)


def tour_env(tmp_path: Path) -> dict[str, str]:
    """PATH with a ``python`` that is this interpreter (a wrapper: a symlink would lose the venv)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GIT_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONUNBUFFERED="1",
               GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
    return env


def expected_counts(copy: Path, env: dict[str, str]) -> dict[str, str]:
    """The counts the templates name, worked out apart from the commands that print them."""
    registry = load_registry(copy / "registry.yaml")
    cpu = registry.tests_for_tier("cpu", include_inactive=True)
    deps = subprocess.run([sys.executable, "-m", "ci", "deps", "--reverse", CHANGED, "--format", "json"],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert deps.returncode == 0, deps.stdout + deps.stderr
    reached = {t["path"] for t in json.loads(deps.stdout)["tests"]}
    selected = [e for e in cpu if e.is_active and e.path in reached]
    report = ET.parse(copy / ".ci-reports" / "junit-explicit.xml")
    cases = list(report.iter("testcase"))  # the report of `ci run` on SHARD_FILE alone
    entry = registry.entry(SHARD_FILE)
    assert entry is not None and selected and cases
    return {"cpu_selected": str(len(selected)), "cpu_not_run": str(len(cpu) - len(selected)),
            "shard_tests": str(len(cases)), "shard_est": f"{entry.est_time:.0f}"}


def test_the_tour_parses_into_commands_with_the_story() -> None:
    steps = tour()
    commands = [command for command, _ in steps]
    assert 6 <= len(steps) <= 10, commands
    assert commands[0].startswith("python -m ci lint") and steps[0][1] == [], "lint first, silent on a clean tree"
    assert any("I001" in line and "did you mean" in line for _, shown in steps for line in shown)
    assert any("changed.txt" in c and "--changed-files" not in c for c in commands), "changed.txt is made first"
    used = {template_of(line) for _, shown in steps for line in shown} - {None}
    assert used == set(TEMPLATES), f"templates no shown line has: {set(TEMPLATES) - used}"


def test_each_tour_command_prints_what_the_readme_shows(tmp_path: Path) -> None:
    copy = tmp_path / "clone"
    demo = tmp_path / "demo"
    copy.mkdir()
    fresh_copy(copy)
    env = tour_env(tmp_path)
    printed: list[tuple[str, list[str], list[str]]] = []
    for command, shown in tour():
        result = subprocess.run(["bash", "-c", command.replace(DEMO, str(demo))], cwd=copy, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        lines = result.stdout.replace(str(demo), DEMO).splitlines()
        assert result.returncode == 0, f"$ {command}\nexited {result.returncode}:\n{result.stdout}"
        printed.append((command, shown, lines))
    counts = expected_counts(copy, env)
    wrong = [f"$ {command}\n--- shown\n" + "\n".join(shown) + "\n--- printed\n" + "\n".join(lines)
             for command, shown, lines in printed if not output_ok(shown, lines, counts)]
    assert not wrong, f"counts {counts}\n" + "\n\n".join(wrong)


@pytest.mark.parametrize(("shown", "printed", "ok"), [
    (["a", "...", "c"], ["a", "b", "b2", "c"], True),
    (["a", "...", "c"], ["a", "c"], True),
    (["a", "...", "c"], ["a", "b"], False),
    (["a"], ["a", "b"], False),
    ([], [], True),
    ([], ["x"], False),
    (["tier cpu: 9 selected, 9 not run (1 changed files)"], ["tier cpu: 19 selected, 62 not run (1 changed files)"], True),
    (["tier cpu: 9 selected, 9 not run (1 changed files)"], ["tier cpu: 19 selected, 61 not run (1 changed files)"], False),
    (["tier cpu: 9 selected, 9 not run (2 changed files)"], ["tier cpu: 19 selected, 62 not run (1 changed files)"], False),
    (["wall time 6.1s"], ["wall time 12.3s"], True),
    (["wall time 6.1s"], ["wall time 12s"], False),
    (["tests/ci/test_shard.py     61      61       0        0       0       0     0.1      1   -93%"],
     ["tests/ci/test_shard.py    161     161       0        0       0       0    10.4      1   +12%"], False),
    (["tests/ci/test_shard.py     61      61       0        0       0       0     0.1      1   -93%"],
     ["tests/ci/test_shard.py     61      60       1        0       0       0     0.1      1   -93%"], False),
    (["tests/ci/test_shard.py     61      61       0        0       0       0     0.1      1   -93%"],
     ["tests/ci/test_shard.py     61      61       0        0       0       0    10.4      1   +12%"], True),
])
def test_output_matching(shown: list[str], printed: list[str], ok: bool) -> None:
    counts = {"cpu_selected": "19", "cpu_not_run": "62", "shard_tests": "61", "shard_est": "1"}
    assert output_ok(shown, printed, counts) is ok
