"""Which test file an interpreter's command line runs, by the registry's roots and patterns.

Pure, and without imports of the recorder: both the start-up hook of an observed command's
processes (`ci.observe.script_test`) and the unheard-child judge of its runners
(`ci.observe.files`) use it. ``spec`` is ``roots|patterns``, each comma-separated (the registry's
``project.test_roots`` and ``test_patterns``; `ci.observe.files.OBSERVE_ENV` carries it).

Contract: `test_file_of` returns the repo-relative path of the existing test file that ``python
path/test_x.py``, ``python -m pkg.test_x`` or ``python -m unittest`` naming exactly one test
module (dotted or a path) runs, or None (``-c``, standard input, several modules, discovery, a
file outside the root, the roots or the patterns).
"""

from __future__ import annotations

import fnmatch
import os

_WITH_VALUE = frozenset({"-X", "-W", "--check-hash-based-pycs"})


def _target(argv: list[str]) -> str | None:
    """The path (as given, or a dotted module made a path) of the program ``argv`` runs."""
    args = iter(argv[1:])
    for arg in args:
        if arg in _WITH_VALUE:
            next(args, None)
        elif arg.startswith("-m"):
            module = arg[2:] or next(args, "")
            if module != "unittest":
                return module.replace(".", "/") + ".py" if module else None
            named = [a for a in args if not a.startswith("-")]
            if len(named) != 1:
                return None  # several test modules, or discovery: no one file owns the process
            return named[0] if named[0].endswith(".py") else named[0].replace(".", "/") + ".py"
        elif arg.startswith("-c") or arg == "-":
            return None
        elif not arg.startswith("-"):
            return arg
    return None


def test_file_of(argv: list[str], cwd: str, root: str, spec: str) -> str | None:
    """The repo-relative test file an interpreter command line (``sys.orig_argv``) runs, or None;
    ``spec``: `OBSERVE_ENV`'s ``roots|patterns``."""
    target = _target(argv)
    if not target:
        return None
    full = os.path.abspath(os.path.join(cwd, target))
    for base in dict.fromkeys((os.path.abspath(root), os.path.realpath(root))):
        if full.startswith(base + os.sep):
            rel = full[len(base) + 1:].replace(os.sep, "/")
            break
    else:
        return None
    roots, _, patterns = spec.partition("|")
    under = any(r in (".", "") or rel == r or rel.startswith(r.rstrip("/") + "/") for r in roots.split(","))
    named = any(fnmatch.fnmatch(rel.rsplit("/", 1)[-1], p) for p in patterns.split(",") if p)
    return rel if under and named and os.path.isfile(full) else None
