"""The pytest commands of a Makefile's targets, read as text, never run.

Liger-Kernel keeps its suites as ``make test`` / ``make test-convergence``: recipe lines running
``python -m pytest`` with paths and ``--ignore``. `pytest_targets` reads a Makefile's rules
(``a b: deps``, recipe lines starting with a tab, ``\\`` continuations) and its variables
(``=``, ``:=``, ``::=``, ``?=``, ``+=``, with ``export`` / ``override``), expands ``$(NAME)`` /
``${NAME}`` / ``$@`` / ``$$`` in the recipe lines, and hands each line to
`ci.adopt.pytest_argv.pytest_commands` (the recipe's ``@``/``-``/``+`` prefix dropped; the folder
is the Makefile's). A variable the Makefile does not define (one given on make's command line or
from the environment) or a make function (``$(wildcard ...)``, ``$(shell ...)``) in a line that
mentions pytest (a variable named ``PYTEST...`` counts) is not guessed at: `MakefileError` names the line, the target and the variable.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ci.adopt.pytest_argv import PytestCommand, pytest_commands
from ci.adopt.pytest_config import read_config_text

_ASSIGN = re.compile(r"^(?:(?:export|override)\s+)*([A-Za-z_][A-Za-z0-9_.-]*)\s*(::=|:=|\?=|\+=|!=|=)\s*(.*)$")
_RULE = re.compile(r"^([^\s:=#][^:=#]*?)\s*::?(?!=)\s*(.*)$")
_REFERENCE = re.compile(r"\$(?:\(([^()]*)\)|\{([^{}]*)\}|(.))")


class MakefileError(ValueError):
    """A Makefile whose pytest line cannot be read without guessing (the message says where and why)."""


@dataclass
class MakeTarget:
    """A target ``name`` and the pytest commands of its recipe."""

    name: str
    commands: list[PytestCommand] = field(default_factory=list)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) with continuations joined; recipe lines keep their ``\\`` newline
    (the shell reads it), other lines join with a space as make does."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if pending is not None:
            start, head = pending
            line = head + ("\\\n" if head.startswith("\t") else " ") + line.lstrip()
            number = start
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = (number, line[:-1].rstrip() if not line.startswith("\t") else line[:-1])
            continue
        pending = None
        out.append((number, line))
    if pending is not None:
        out.append(pending)
    return out


def _expand(text: str, variables: dict[str, str], target: str, where: str, depth: int = 0) -> str:
    if depth > 20:
        raise MakefileError(f"{where}: variables refer to each other too deeply in target {target!r}")

    def one(match: re.Match[str]) -> str:
        name = match.group(1) if match.group(1) is not None else match.group(2) if match.group(2) is not None \
            else match.group(3)
        if name == "$":
            return "$$"  # kept for the shell, unescaped below
        if name == "@":
            return target
        if name in variables:
            return _expand(variables[name], variables, target, where, depth + 1).replace("$$", "\0")
        if " " in name or "," in name:
            raise MakefileError(f"{where}: target {target!r} calls the make function $({name}); its value is only "
                                f"known when make runs: write the pytest arguments out, or list the suite by hand")
        raise MakefileError(f"{where}: target {target!r} uses ${{{name}}}, which the Makefile does not define (make's "
                            f"command line or the environment would): define it in the Makefile, or list the suite "
                            f"by hand")

    return _REFERENCE.sub(one, text)


def pytest_targets(root: Path, makefile: Path, only: Iterable[str] = ()) -> list[MakeTarget]:
    """Every target of ``makefile`` (under ``root``) whose recipe runs pytest, in file order; only
    those named in ``only`` when it names any (another target's recipe is then not expanded). Raises MakefileError (see the module docstring) or OSError / UnicodeDecodeError (unreadable)."""
    wanted = set(only)
    display = makefile.relative_to(root).as_posix()
    cwd = posixpath.dirname(display) or "."
    variables: dict[str, str] = {}
    targets: dict[str, MakeTarget] = {}
    current: list[str] = []
    recipes: list[tuple[int, list[str], str]] = []
    for number, line in _logical_lines(read_config_text(makefile)):
        if line.startswith("\t"):
            if current:
                recipes.append((number, current, line[1:]))
            continue
        stripped = line.split("#", 1)[0].rstrip()
        if not stripped.strip():
            continue
        assign = _ASSIGN.match(stripped)
        if assign:
            name, op, value = assign.groups()
            if op == "+=" and name in variables:
                variables[name] = f"{variables[name]} {value}"
            elif op != "?=" or name not in variables:
                variables[name] = value
            continue
        rule = _RULE.match(stripped)
        current = [t for t in rule.group(1).split() if not t.startswith(".")] if rule else []
    for number, names, recipe in recipes:
        for name in names:
            if wanted and name not in wanted:
                continue
            where = f"{display}:{number}"
            try:
                line = _expand(recipe, variables, name, where).replace("$$", "$").replace("\0", "$")
            except MakefileError:
                if "pytest" in recipe.lower() or "py.test" in recipe.lower():
                    raise
                continue  # a line that cannot run pytest (ruff $(shell ...)) is not ours to refuse
            found = pytest_commands(line.lstrip("@-+ "), cwd, f"{where} (make {name})")
            if found:
                targets.setdefault(name, MakeTarget(name)).commands.extend(found)
    return list(targets.values())


__all__ = ["MakeTarget", "MakefileError", "pytest_targets"]
