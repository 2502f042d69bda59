"""``python -m bench._history_gen10_extract GIT_DIR [OUT]``: the real part of the tenth labelled
history (`bench._history_gen10`), read once from a bare clone of pytorch/ao (torchao) with ``git``
and written to ``bench/_history_gen10_data.json`` (or OUT).

What it reads, all at the fixed window `LAST` (the newest commit) and `COUNT` first-parent commits
back from it: each commit's sha, commit time, author name, subject, pull request number (the
subject's last ``(#NNNN)``, else the body's ``Pull Request resolved: .../pull/NNNN``), the files
it touched, and the sha a ``Revert`` names (``This reverts commit SHA``); and each test file under
``test/`` (``test_*.py``, at `LAST`'s tree) with its test functions (``Class::test_x`` inside a
class), how many cases each parametrizes (the product of its ``parametrize`` decorators whose
values are a literal list, tuple or module-level literal name; 1 where the count is not literal),
and the ``torchao`` modules it imports. No torchao code is imported or run: files are parsed with
`ast`. Exit status: 0 written, 2 GIT_DIR cannot be read (or lacks the window), 3 OUT cannot be
written (the old file is left whole).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from ci.atomic_write import atomic_write_text

REPO = "pytorch/ao"
LAST = "741fec67830e8361cbc47bafef0366f38954ff95"
COUNT = 250
DATA = Path(__file__).with_name("_history_gen10_data.json")
COMMAND = "python -m bench._history_gen10_extract GIT_DIR"
_PR = re.compile(r"\(#(\d+)\)\s*$")
_PR_BODY = re.compile(r"Pull Request resolved: https://github\.com/pytorch/ao/pull/(\d+)")
_REVERTS = re.compile(r"This reverts commit ([0-9a-f]{40})")
_SEP = "\x1e"


class ExtractError(RuntimeError):
    """git could not read what the extract needs (the message names the command and the folder)."""


def git(git_dir: str, *args: str) -> str:
    """``git --git-dir GIT_DIR ARGS`` as text; ExtractError naming the command when it fails."""
    try:
        done = subprocess.run(["git", "--git-dir", git_dir, *args], capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ExtractError(f"git {' '.join(args[:2])}: cannot run git: {exc}") from exc
    if done.returncode != 0:
        raise ExtractError(f"git {' '.join(args[:2])} in {git_dir}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
    return done.stdout


def read_commits(git_dir: str) -> list[dict]:
    """The window's commits, oldest first."""
    fmt = "\x1d" + _SEP.join(["%H", "%ct", "%an", "%s", "%b"]) + "\x1f"
    out = git(git_dir, "log", "--first-parent", f"-{COUNT}", f"--format={fmt}", "--name-only", LAST)
    commits = []
    for block in out.split("\x1d")[1:]:
        head, _, listing = block.partition("\x1f")
        sha, ctime, author, subject, body = head.split(_SEP, 4)
        pr = _PR.search(subject) or _PR_BODY.search(body)
        reverts = _REVERTS.search(body)
        commits.append({"sha": sha, "time": int(ctime), "author": author, "subject": subject,
                        "pr": int(pr.group(1)) if pr else None,
                        "files": sorted(line for line in listing.splitlines() if line.strip()),
                        "reverts": reverts.group(1) if reverts else ""})
    if len(commits) != COUNT:
        raise ExtractError(f"{git_dir}: {len(commits)} first-parent commits up to {LAST[:12]}, expected {COUNT}")
    return commits[::-1]


def _literal_len(node: ast.expr, names: dict[str, int]) -> int:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return len(node.elts)
    if isinstance(node, ast.Name):
        return names.get(node.id, 1)
    return 1


def _cases(func: ast.FunctionDef, names: dict[str, int]) -> int:
    count = 1
    for deco in func.decorator_list:
        if not isinstance(deco, ast.Call):
            continue
        name = ast.unparse(deco.func)
        if name.endswith("parametrize") and len(deco.args) >= 2:
            count *= max(1, _literal_len(deco.args[1], names))
        elif name.endswith("parametrize") and len(deco.args) == 1 and isinstance(deco.args[0], ast.Dict):
            count *= max(1, len(deco.args[0].keys))
    return count


def parse_test(source: str) -> tuple[list[list], list[str]]:
    """A test file's ``[[name, cases], ...]`` and the sorted torchao modules it imports."""
    tree = ast.parse(source)
    names = {t.id: len(n.value.elts) for n in tree.body if isinstance(n, ast.Assign)
             and isinstance(n.value, (ast.List, ast.Tuple)) for t in n.targets if isinstance(t, ast.Name)}
    functions: list[list] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            functions.append([node.name, _cases(node, names)])
        elif isinstance(node, ast.ClassDef) and (node.name.startswith("Test") or node.name.endswith("Test")
                                                  or node.name.endswith("Tests")):
            functions += [[f"{node.name}::{item.name}", _cases(item, names)] for item in node.body
                          if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test")]
    imports = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imports.add(node.module)
        elif isinstance(node, ast.Import):
            imports.update(alias.name for alias in node.names)
    return functions, sorted(m for m in imports if m == "torchao" or m.startswith("torchao."))


def read_tests(git_dir: str) -> dict[str, dict]:
    """Every ``test/**/test_*.py`` at `LAST` with at least one test function."""
    paths = [p for p in git(git_dir, "ls-tree", "-r", "--name-only", LAST, "test").splitlines()
             if re.fullmatch(r"test/(.+/)?test_[^/]+\.py", p)]
    tests = {}
    for path in sorted(paths):
        try:
            functions, imports = parse_test(git(git_dir, "show", f"{LAST}:{path}"))
        except SyntaxError:
            continue
        if functions:
            tests[path] = {"imports": imports, "functions": functions}
    return tests


def extract(git_dir: str) -> dict:
    """The whole data file's content."""
    commits = read_commits(git_dir)
    return {"repo": REPO, "command": COMMAND, "first": commits[0]["sha"], "last": LAST, "count": COUNT,
            "commits": commits, "tests": read_tests(git_dir)}


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(f"usage: {COMMAND} [OUT]  (GIT_DIR: a clone of https://github.com/{REPO})", file=sys.stderr)
        return 2
    try:
        data = extract(argv[0])
    except ExtractError as exc:
        print(f"python -m bench._history_gen10_extract: {exc}", file=sys.stderr)
        return 2
    out = Path(argv[1]) if len(argv) == 2 else DATA
    try:
        atomic_write_text(out, json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")
    except OSError as exc:
        print(f"python -m bench._history_gen10_extract: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 3
    print(f"{out}: {len(data['commits'])} commits {data['first'][:12]}..{LAST[:12]}, {len(data['tests'])} test files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
