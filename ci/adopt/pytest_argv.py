"""pytest command lines in shell text, and the test files each selects, worked out as pytest would.

A Makefile recipe or a workflow ``run:`` script is split into commands with `shlex` (``;``, ``&&``,
``||``, ``|`` and newlines separate them; ``cd DIR`` changes the folder of the commands after it).
A command runs pytest when, after ``VAR=value`` assignments and ``env``/``timeout N``-style
wrappers, it is ``pytest``, ``py.test`` or ``python[3[.N]] -m pytest``. Its arguments are read
as pytest's parser reads them: options that take a value (`VALUE_OPTIONS`) consume it,
``--opt=value`` is one word, the rest are paths (``path::node`` keeps the node id as a filter).

`selected_files` then follows pytest's collection: the paths given (relative to the command's
folder), else the ``testpaths`` of the pytest configuration that the folder is the rootdir of,
else the folder itself; in folders, files matching ``python_files`` outside pytest's default
``norecursedirs``; a file named explicitly is collected whatever its name; ``--ignore`` drops a
path and everything under it, ``--ignore-glob`` what its pattern matches. ``-k``, ``-m``,
``--deselect`` and node ids select *within* files: they are kept in `PytestCommand.filters`;
the ``VAR=value`` assignments before pytest in `PytestCommand.env`.
Not followed: ``conftest.py`` ``collect_ignore`` and a configured ``norecursedirs``.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from ci.adopt.pytest_config import PYTEST_DEFAULT_FILES, find_pytest_configs

# pytest's own options and those of the plugins CI commonly runs, that take a value as the next word.
VALUE_OPTIONS = frozenset((
    "-k", "-m", "-p", "-c", "-o", "-n", "-W", "-r", "--rootdir", "--confcutdir", "--basetemp", "--junitxml",
    "--junit-xml", "--junit-prefix", "--cov", "--cov-report", "--cov-config", "--cov-fail-under", "--durations",
    "--durations-min", "--maxfail", "--timeout", "--timeout-method", "--reruns", "--reruns-delay", "--dist",
    "--tb", "--log-level", "--log-cli-level", "--log-file", "--log-format", "--import-mode", "--deselect",
    "--ignore", "--ignore-glob", "--capture", "--color", "--override-ini", "--maxprocesses", "--max-worker-restart",
    "--tx", "--rsyncdir", "--only-rerun", "--random-order-seed", "--count", "--benchmark-json", "--html",
    "--report-log", "--splits", "--group", "--asyncio-mode", "--pythonwarnings",
))
FILTER_OPTIONS = ("-k", "-m", "--deselect")
NORECURSE = ("*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}", "__pycache__")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_WRAPPERS = {"env", "exec", "time", "nohup", "uv", "run", "poetry", "pdm", "hatch", "coverage"}


@dataclass(frozen=True)
class PytestCommand:
    """One pytest invocation: ``cwd`` the repo-relative folder it runs in (``.``), ``paths`` as
    written, ``ignore`` / ``ignore_glob`` as written, ``filters`` the options selecting within
    files (``-k EXPR``, ``-m EXPR``, ``--deselect ID``, node ids), ``where`` ``file:line``, ``env``
    the ``VAR=value`` words it runs under (``LIGER_KERNEL_IMPL=cutedsl pytest ...``), as written."""

    cwd: str
    paths: tuple[str, ...]
    ignore: tuple[str, ...]
    ignore_glob: tuple[str, ...]
    filters: tuple[str, ...]
    where: str
    env: tuple[str, ...] = ()


def _commands(script: str) -> list[list[str]]:
    """The simple commands of a shell script, as words (quotes removed); a line that does not
    split (an unclosed quote) is skipped."""
    out: list[list[str]] = []
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        try:
            for word in lexer:
                if set(word) <= set(";&|()"):
                    out.append(current)
                    current = []
                else:
                    current.append(word)
        except ValueError:
            continue
        out.append(current)
    return [c for c in out if c]


def _pytest_args(words: list[str]) -> tuple[list[str], list[str]] | None:
    """(the ``VAR=value`` words before it, the arguments after ``pytest`` / ``python -m pytest``)
    of a command's words; None if it runs no pytest."""
    i = 0
    while i < len(words) and (_ASSIGNMENT.match(words[i]) or words[i] in _WRAPPERS
                              or (words[i - 1] == "timeout" if i else False) or words[i] == "timeout"):
        i += 1
    rest, env = words[i:], [w for w in words[:i] if _ASSIGNMENT.match(w)]
    if rest and posixpath.basename(rest[0]) in ("pytest", "py.test"):
        return env, rest[1:]
    if len(rest) >= 3 and _PYTHON.fullmatch(posixpath.basename(rest[0])) and rest[1:3] == ["-m", "pytest"]:
        return env, rest[3:]
    return None


def read_command(args: list[str], cwd: str, where: str) -> PytestCommand:
    """The `PytestCommand` for pytest ``args`` run in repo-relative ``cwd``."""
    paths: list[str] = []
    values: dict[str, list[str]] = {"--ignore": [], "--ignore-glob": [], "filters": []}
    i = 0
    while i < len(args):
        word = i_word = args[i]
        name, eq, value = word.partition("=")
        if word.startswith("--") and eq:
            pass
        elif word in VALUE_OPTIONS and i + 1 < len(args):
            name, value = word, args[i + 1]
            i += 1
        elif word[:2] in ("-k", "-m") and len(word) > 2 and not word.startswith("--"):
            name, value = word[:2], word[2:]
        elif not word.startswith("-"):
            file, sep, _ = word.partition("::")
            paths.append(file)
            if sep:
                values["filters"].append(i_word)
            i += 1
            continue
        else:
            name = ""
        if name in ("--ignore", "--ignore-glob"):
            values[name].append(value)
        elif name in FILTER_OPTIONS:
            values["filters"] += [name, value]
        i += 1
    return PytestCommand(cwd, tuple(paths), tuple(values["--ignore"]), tuple(values["--ignore-glob"]),
                         tuple(values["filters"]), where)


def pytest_commands(script: str, cwd: str, where: str) -> list[PytestCommand]:
    """Every pytest command in shell ``script`` run from repo-relative ``cwd``; ``cd DIR`` moves later ones."""
    out: list[PytestCommand] = []
    for words in _commands(script):
        if words[0] == "cd" and len(words) == 2:
            cwd = posixpath.normpath(posixpath.join(cwd, words[1]))
            continue
        found = _pytest_args(words)
        if found is not None:
            out.append(replace(read_command(found[1], cwd, where), env=tuple(found[0])))
    return out


def _config_for(root: Path, cwd: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(rootdir, testpaths, python_files) pytest uses when run in ``cwd``: the nearest configuration
    in ``cwd`` or above it; without one, ``cwd`` with pytest's defaults."""
    configs = {posixpath.dirname(c.path) or ".": c for c in find_pytest_configs(root) if c.problem is None}
    folder = cwd
    while True:
        if folder in configs:
            c = configs[folder]
            return folder, c.test_roots, c.python_files
        if folder == ".":
            return cwd, (), PYTEST_DEFAULT_FILES
        folder = posixpath.dirname(folder) or "."


def _rel(cwd: str, path: str) -> str:
    return posixpath.normpath(posixpath.join(cwd, path.rstrip("/") or "."))


def selected_files(root: Path, command: PytestCommand) -> tuple[list[str], list[str]]:
    """(repo-relative test files the command collects from, problems such as a path that is not there)."""
    rootdir, testpaths, patterns = _config_for(root, command.cwd)
    if command.paths:
        starts = [_rel(command.cwd, p) for p in command.paths]
    elif testpaths and rootdir == command.cwd:
        starts = list(testpaths)
    else:
        starts = [command.cwd]
    ignored = [_rel(command.cwd, p) for p in command.ignore]
    globs = [_rel(command.cwd, g) for g in command.ignore_glob]

    def dropped(rel: str) -> bool:
        return (any(rel == i or rel.startswith(i + "/") for i in ignored)
                or any(fnmatch.fnmatch(rel, g) for g in globs))

    files: list[str] = []
    problems: list[str] = []
    for start in starts:
        full = root / start
        if full.is_file():
            if not dropped(start):
                files.append(start)
            continue
        if not full.is_dir():
            problems.append(f"{command.where}: {start} is not a file or folder here")
            continue
        for directory, dirs, names in os.walk(full):
            rel_dir = Path(directory).relative_to(root).as_posix()
            dirs[:] = sorted(d for d in dirs if not any(fnmatch.fnmatch(d, p) for p in NORECURSE)
                             and not dropped(posixpath.join(rel_dir, d) if rel_dir != "." else d))
            for name in sorted(names):
                rel = posixpath.join(rel_dir, name) if rel_dir != "." else name
                if name.endswith(".py") and any(fnmatch.fnmatch(name, p) for p in patterns) and not dropped(rel):
                    files.append(rel)
    return list(dict.fromkeys(files)), problems


__all__ = ["FILTER_OPTIONS", "PytestCommand", "VALUE_OPTIONS", "pytest_commands", "read_command", "selected_files"]
