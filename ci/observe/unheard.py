"""Python children that the recorder cannot hear.

A recorded test's Python subprocess is measured by the start-up hook installed in this
environment's site-packages (`ci.observe.startup`), which needs the recording's variables
in the child's environment. A child started so that the hook never runs would leave its test
file's entry complete without the modules the child ran, and a later change to them would
select nothing. `unheard_reason` says, from what ``subprocess`` is about to start (its
``subprocess.Popen`` audit event), why such a child will not be heard, or None:

- ``-S``: no ``site``, so no hook;
- another interpreter than this environment's (``/usr/bin/python3`` beside a virtual
  environment's, a base interpreter run by its own path): its site-packages have no hook;
- an environment (``env=``) without the recording's variables (``required``).

A child none of these can hear is still ignored when it cannot run or read repository code
(`inert_code`): ``-I`` and ``-S`` together (its ``sys.path`` is the standard library alone: no
site-packages or ``.pth`` file, no ``PYTHONPATH``, not the working directory) running ``-c CODE``
whose every import is a standard-library module that loads no code by name or path and reads no
file, and which names nothing that opens, executes or imports by a computed name, nor ``sys.path``
or the environment (the lists below). Anything else, a worker that receives its work through a
pipe and unpickles it included, stays unheard: its test's entry is not complete.

Python is known by the program's name (``python``, ``python3``, ``python3.12``) or, for a
script, by a ``#!`` line that names one (a console script such as ``pytest``, ``/usr/bin/env
python3``). A ``sh -c`` command is read as words: ``VAR=value`` assignments, ``exec`` and
``env [-i] [VAR=value]...`` before each simple command are understood; the rest of the shell's
syntax is not, so such a child is judged by its first words only. Anything else is not Python,
and not judged. ``python -I`` and ``-E`` are heard: ``site`` still runs and the recording's
variables are not ``PYTHON*`` ones.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import sys
from typing import Mapping, Sequence

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?$")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh"})
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")"})
_OPTION_WITH_VALUE = frozenset({"-X", "-W", "--check-hash-based-pycs"})


def _which(program: str, env: Mapping[str, str]) -> str | None:
    if os.sep in program:
        return os.path.abspath(program)
    for folder in env.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    return None


def _shebang(path: str) -> list[str]:
    """The words of a script's ``#!`` line; [] when it has none or cannot be read."""
    try:
        with open(path, "rb") as fh:
            first = fh.read(256).split(b"\n", 1)[0]
    except OSError:
        return []
    if not first.startswith(b"#!"):
        return []
    return first[2:].decode("utf-8", "replace").split()


def _interpreter(argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, list[str]] | None:
    """The Python interpreter ``argv`` starts and the options it passes it, or None."""
    if not argv:
        return None
    program = argv[0]
    if _PYTHON.match(os.path.basename(program)):
        return _which(program, env) or program, list(argv[1:])
    path = _which(program, env)
    words = _shebang(path) if path else []
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    if words and _PYTHON.match(os.path.basename(words[0])):
        return _which(words[0], env) or words[0], words[1:]
    return None


def _no_site(options: Sequence[str]) -> bool:
    """Whether the interpreter's own options (up to the script, ``-c`` or ``-m``) include ``-S``."""
    args = iter(options)
    for arg in args:
        if arg == "--" or not arg.startswith("-") or arg == "-":
            return False
        if arg in _OPTION_WITH_VALUE:
            next(args, None)
            continue
        if arg.startswith("--"):
            continue
        flags = arg[1:]
        for i, flag in enumerate(flags):
            if flag == "S":
                return True
            if flag in "cm":  # the rest is the command or module: the interpreter's options end
                return False
            if flag in "XW":  # the rest of the word, or the next one, is the option's value
                if i + 1 == len(flags):
                    next(args, None)
                break
    return False


# modules that load code by a name or path, run programs, or read files and code objects
_LOADING_MODULES = frozenset({
    "builtins", "code", "codeop", "ctypes", "dbm", "fileinput", "filecmp", "glob", "imp", "importlib", "io",
    "linecache", "marshal", "mmap", "modulefinder", "multiprocessing", "pathlib", "pickle", "pkgutil", "pty",
    "pydoc", "runpy", "shelve", "shutil", "site", "sqlite3", "subprocess", "tarfile", "tokenize", "zipfile",
    "zipimport", "zipapp"})
# names and attributes that open, execute, import by a computed name or reach sys.path, the environment or
# arguments (a path built at run time from them could name a repository file)
_LOADING_NAMES = frozenset({
    "open", "open_code", "FileIO", "exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr",
    "vars", "globals", "locals", "input", "breakpoint", "path", "getcwd", "getcwdb", "chdir", "environ",
    "environb", "getenv", "argv", "orig_argv", "stdin", "fdopen", "read_text", "read_bytes", "system", "popen",
    "startfile", "load", "loads", "load_module", "exec_module"})
_LOADING_PREFIXES = ("exec", "spawn", "posix_spawn", "fork", "__")


def _stdlib_root(name: str | None) -> bool:
    top = (name or "").split(".")[0]
    return top in sys.stdlib_module_names and top not in _LOADING_MODULES


def inert_code(options: Sequence[str]) -> bool:
    """Whether an interpreter's options (see the module docstring) run code that can neither
    import nor read a repository file: ``-I`` and ``-S`` with ``-c CODE`` of the kind above."""
    args, flags, code = iter(options), set(), None
    for arg in args:
        if arg in _OPTION_WITH_VALUE:
            next(args, None)
            continue
        if arg == "--" or not arg.startswith("-") or arg == "-" or arg.startswith("--"):
            return False  # a script, standard input, or an option not read here
        for i, flag in enumerate(arg[1:], 1):
            if flag == "c":
                code = arg[i + 1:] or next(args, None)
                break
            if flag in "XWm":
                return False  # an option's value or a module: not read here
            flags.add(flag)
        if code is not None:
            break
    if code is None or not {"I", "S"} <= flags:
        return False
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and not all(_stdlib_root(alias.name) for alias in node.names):
            return False
        if isinstance(node, ast.ImportFrom) and (node.level or not _stdlib_root(node.module)):
            return False
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if isinstance(node, ast.alias):
            name = node.asname or node.name
        if name is not None and (name in _LOADING_NAMES or name.startswith(_LOADING_PREFIXES)):
            return False
    return True


def _judge(argv: Sequence[str], env: Mapping[str, str], here_executable: str, required: Sequence[str]) -> str | None:
    found = _interpreter(argv, env)
    if found is None:
        return None
    interpreter, options = found
    if inert_code(options):  # heard or not, it runs and reads no repository code
        return None
    shown = shlex.join(argv[:4])
    if _no_site(options):
        return f"{shown}: -S runs no site, so no recording hook"
    if os.path.dirname(os.path.abspath(interpreter)) != os.path.dirname(os.path.abspath(here_executable)):
        return f"{shown}: another interpreter than {here_executable}, whose site has no recording hook"
    missing = [name for name in required if name not in env]
    if missing:
        return f"{shown}: its environment leaves out {', '.join(missing)}"
    return None


def _shell_commands(command: str, env: Mapping[str, str]) -> list[tuple[list[str], dict[str, str]]]:
    """Each simple command of ``command`` (first words only) with the environment it gets."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return []
    commands, current = [], []
    for word in words + [";"]:
        if word in _SEPARATORS:
            if current:
                commands.append(current)
            current = []
        else:
            current.append(word)
    found = []
    for words in commands:
        child_env = dict(env)
        while words and (re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0]) or words[0] == "exec"):
            if words[0] != "exec":
                name, _, value = words[0].partition("=")
                child_env[name] = value
            words = words[1:]
        if words and words[0] in ("env", "/usr/bin/env"):
            words = words[1:]
            while words and (words[0].startswith("-") or "=" in words[0]):
                if words[0] in ("-i", "--ignore-environment", "-"):
                    child_env = {}
                elif "=" in words[0] and not words[0].startswith("-"):
                    name, _, value = words[0].partition("=")
                    child_env[name] = value
                words = words[1:]
        found.append((words, child_env))
    return found


def unheard_reason(executable: object, args: object, env: object, here_env: Mapping[str, str],
                   here_executable: str, required: Sequence[str]) -> str | None:
    """Why the child a ``subprocess.Popen`` audit event describes (its ``executable``, ``args``
    and ``env``) will not be heard by the recorder, or None (heard, or not Python); ``required``:
    the variables the recording's hook needs in a child's environment."""
    if isinstance(args, (str, bytes, os.PathLike)):
        args = [args]
    try:
        argv = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]  # type: ignore[union-attr]
    except TypeError:
        return None
    child_env = {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()} if isinstance(env, Mapping) else dict(here_env)
    program = os.fsdecode(executable) if isinstance(executable, (str, bytes, os.PathLike)) else (argv[0] if argv else "")
    if argv and program:
        argv[0] = program
    if os.path.basename(program) in _SHELLS and len(argv) >= 3 and argv[1] == "-c":
        for words, shell_env in _shell_commands(argv[2], child_env):
            reason = _judge(words, shell_env, here_executable, required)
            if reason is not None:
                return reason
        return None
    return _judge(argv, child_env, here_executable, required)


__all__ = ["inert_code", "unheard_reason"]
