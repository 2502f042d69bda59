"""``python -m bench._history_gen9_extract GIT_DIR [--out FILE]``: the real skeleton of the ninth
labelled history (`bench._history_gen9`), read once from a clone of linkedin/Liger-Kernel.

What it reads (with ``git``, never importing Liger): the `COUNT` first-parent commits of main that
end at `LAST_REF` (the last commit before #1069 moved the GPU tests to a merge queue; in this range
``.github/workflows/nvi-ci.yml`` runs them on push to main and on pull requests that touch
``src/**`` or ``test/**``), each with its commit time (the merge), author, subject, pull request number ("(#NNN)")
and touched files (only ``src/`` and ``test/``, which the path filter and selection read; `MAX_FILES`
at most, the rest counted), the commit a test file was added at; and at `LAST_REF` every test file
under ``test/`` with its test functions (class methods too), how many cases each
``@pytest.mark.parametrize`` stack makes, the first `KEEP_IDS` node ids pytest would give them, the
``liger_kernel`` source files the file imports, and whether it builds a tokenizer (``TokenizerFast(``).
The result is `bench/_history_gen9_data.json`; `bench._history_gen9_verify` compares it with a clone.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

LAST_REF = "78fa8e4d^"  # "Moving unit testing to a merge queue. (#1069)" and its first parent
COUNT = 250
KEEP_IDS = 6
MAX_FILES = 40
COMMAND = "python -m bench._history_gen9_extract GIT_DIR"
DATA = Path(__file__).with_name("_history_gen9_data.json")
_PR = re.compile(r"\(#(\d+)\)\s*$")
_SIMPLE = (int, float, str, bool, type(None))


def git(git_dir: str, *args: str) -> str:
    """``git --git-dir GIT_DIR ARGS`` as text; CalledProcessError when git refuses."""
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True,
                          text=True, encoding="utf-8", errors="replace").stdout


def commits(git_dir: str, last: str) -> list[dict]:
    """The `COUNT` first-parent commits ending at ``last``, oldest first."""
    out = git(git_dir, "log", "--first-parent", f"-n{COUNT}", "--reverse", "--no-renames", "--name-status",
              "--format=%x00%H%x1f%ct%x1f%an%x1f%s", last)
    rows = []
    for block in out.split("\x00")[1:]:
        head, _, body = block.partition("\n")
        sha, at, author, subject = head.split("\x1f")
        changes = [line.split("\t") for line in body.splitlines() if "\t" in line]
        files = sorted({c[-1] for c in changes if c[-1].startswith(("src/", "test/"))})
        added = sorted({c[-1] for c in changes if c[0] == "A" and c[-1].startswith("test/")})
        match = _PR.search(subject)
        rows.append({"sha": sha, "time": int(at), "author": author, "subject": subject,
                     "pr": int(match.group(1)) if match else None, "files": files[:MAX_FILES],
                     "more_files": max(0, len(files) - MAX_FILES), "added_tests": added,
                     "other_files": sum(1 for c in changes if not c[-1].startswith(("src/", "test/")))})
    return rows


def _value_id(node: ast.expr, name: str, index: int) -> str:
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return f"{name}{index}"  # pytest's id for a value it cannot print: argname + index
    return str(value) if isinstance(value, _SIMPLE) else f"{name}{index}"


def _case_id(element: ast.expr, names: list[str], index: int) -> str:
    if isinstance(element, ast.Call) and getattr(element.func, "attr", "") == "param":
        given = [k.value for k in element.keywords if k.arg == "id"]
        if given and isinstance(given[0], ast.Constant):
            return str(given[0].value)
        values = list(element.args)
    elif len(names) > 1 and isinstance(element, (ast.Tuple, ast.List)):
        values = list(element.elts)
    else:
        values = [element]
    return "-".join(_value_id(v, names[min(i, len(names) - 1)], index) for i, v in enumerate(values))


def _parametrize(deco: ast.expr) -> list[str] | None:
    """The ids one ``@pytest.mark.parametrize(names, [...])`` gives, None when it is not one."""
    if not (isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "parametrize" and len(deco.args) >= 2):
        return None
    first, cases = deco.args[0], deco.args[1]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        names = [n.strip() for n in first.value.split(",") if n.strip()]
    elif isinstance(first, (ast.List, ast.Tuple)):
        names = [str(getattr(e, "value", "arg")) for e in first.elts]
    else:
        names = ["arg"]
    if not isinstance(cases, (ast.List, ast.Tuple)):
        return [f"{names[0]}0"]  # built at run time: counted as one case
    return [_case_id(e, names or ["arg"], i) for i, e in enumerate(cases.elts)]


def _function(fn: ast.FunctionDef) -> dict:
    stacks = [ids for ids in (_parametrize(d) for d in reversed(fn.decorator_list)) if ids is not None]
    count = 1
    for ids in stacks:
        count *= max(1, len(ids))
    kept = ["-".join(p) for p in itertools.islice(itertools.product(*stacks), KEEP_IDS)] if stacks else []
    seen = Counter(kept)
    index: Counter[str] = Counter()
    for i, case in enumerate(kept):  # pytest numbers an id that several cases share: id0, id1, ...
        if seen[case] > 1:
            kept[i] = f"{case}{index[case]}"
            index[case] += 1
    return {"count": count, "ids": kept}


def _imports(tree: ast.Module, sources: set[str]) -> list[str]:
    found = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "liger_kernel":
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] == "liger_kernel"]
        for name in names:
            base = "src/" + name.replace(".", "/")
            found.update(p for p in (base + ".py", base + "/__init__.py") if p in sources)
    return sorted(found)


def test_files(git_dir: str, last: str) -> dict[str, dict]:
    """Every ``test/**/test_*.py`` at ``last``: its functions, imported sources, downloads."""
    paths = git(git_dir, "ls-tree", "-r", "--name-only", last).splitlines()
    sources = {p for p in paths if p.startswith("src/liger_kernel/") and p.endswith(".py")}
    out = {}
    for path in sorted(p for p in paths if p.startswith("test/") and Path(p).name.startswith("test_")
                       and p.endswith(".py")):
        text = git(git_dir, "show", f"{last}:{path}")
        tree = ast.parse(text)
        functions = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                functions[node.name] = _function(node)
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                functions.update({f"{node.name}::{f.name}": _function(f) for f in node.body
                                  if isinstance(f, ast.FunctionDef) and f.name.startswith("test")})
        if functions:
            out[path] = {"imports": _imports(tree, sources), "tokenizer": "TokenizerFast(" in text,
                         "functions": functions}
    return out


class CloneError(ValueError):
    """``GIT_DIR`` is no readable Liger-Kernel clone: the message names it and git's complaint."""


def extract(git_dir: str) -> dict:
    """The data file's content, from the clone at ``git_dir``; `CloneError` when git cannot read it."""
    try:
        last = git(git_dir, "rev-parse", LAST_REF).strip()
        rows, tests = commits(git_dir, last), test_files(git_dir, last)
    except subprocess.CalledProcessError as exc:
        said = next((line for line in (exc.stderr or "").splitlines() if line.strip()), f"exit {exc.returncode}")
        raise CloneError(f"cannot read {git_dir!r} as Liger-Kernel's git directory (git: {said.strip()})") from exc
    except OSError as exc:
        raise CloneError(f"cannot run git on {git_dir!r}: {exc}") from exc
    return {"source": "github:linkedin/Liger-Kernel", "first": rows[0]["sha"], "last": last, "count": len(rows),
            "command": COMMAND, "workflow": ".github/workflows/nvi-ci.yml", "commits": rows,
            "tests": tests}


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--out"):
        print(f"usage: {COMMAND} [--out FILE]", file=sys.stderr)
        return 2
    try:
        data = extract(argv[0])
    except CloneError as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr)
        return 2
    Path(argv[2] if len(argv) == 3 else DATA).write_text(json.dumps(data, separators=(",", ":")) + "\n",
                                                          encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
