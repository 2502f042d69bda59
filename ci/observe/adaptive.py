"""Is a ``torch.cuda`` availability query that said no the test file choosing its device?

A **device-adaptive** test picks its tensors' device by asking (Liger-Kernel: ``device =
infer_device()`` at the test module's top, where ``infer_device`` asks
``torch.cuda.is_available()``): on a CPU machine it runs and may pass, on a GPU runner the same
test runs its GPU path. A query counts as that choice (`choice`) only when all of these hold:

- the chain of callers from the query up to the test file is the repository's own code (the test
  file, its first-party helpers), never site-packages nor pytest: a conftest's autouse fixture or
  a fixture pytest calls does not reach the test file this way, so it never counts;
- the test file's frame is its module code or a ``test*`` function (or a helper of the file
  called from one of them);
- the statement of the test file that asked puts the answer on a device: it assigns a name that
  says ``device`` (``device = infer_device()``, ``DEVICE = "cuda" if ... else "cpu"``) or passes
  it as a ``device=`` keyword (``torch.ones(2, device=infer_device())``). An answer only
  compared, or thrown away, does not count.

Contract: `choice` never raises and never imports anything outside the standard library
(imported at interpreter start-up through `ci.observe.devices`); each test file is parsed once
per process.
"""

from __future__ import annotations

import os
import re
from types import FrameType
from typing import Any

DEVICE_NAME = re.compile(r"device", re.IGNORECASE)
_statements: dict[str, dict[int, Any]] = {}  # test file -> {line: the innermost statement holding it}


def choice(caller: FrameType, root: str, test: str, query: str) -> str | None:
    """The evidence line when ``caller`` (who called the ``query`` that said no, e.g.
    ``torch.cuda.is_available() False``) is the test file ``test`` (relative to ``root``)
    choosing its device (see the module docstring), else None."""
    try:
        return _choice(caller, root.rstrip("/"), test, query)
    except Exception:
        return None


def _choice(caller: FrameType, root: str, test: str, query: str) -> str | None:
    path = os.path.join(root, test)
    frame: FrameType | None = caller
    callee = query.split("(")[0]
    while frame is not None and frame.f_code.co_filename != path:
        where = frame.f_code.co_filename
        if not where.startswith(root + "/") or "/site-packages/" in where:
            return None
        callee, frame = frame.f_code.co_name, frame.f_back
    if frame is None or not _from_module_or_test(frame, path) or not _places(path, frame.f_lineno):
        return None
    return f"asks {callee}() at {test}:{frame.f_lineno} -> {query} here: its GPU path needs a GPU runner"


def _from_module_or_test(frame: FrameType | None, path: str) -> bool:
    while frame is not None and frame.f_code.co_filename == path:
        if frame.f_code.co_name == "<module>" or frame.f_code.co_name.startswith("test"):
            return True
        frame = frame.f_back
    return False


def _places(path: str, line: int) -> bool:
    import ast  # only once a query reached a test file

    statement = _statements_of(path, ast).get(line)
    if statement is None:
        return False
    targets = statement.targets if isinstance(statement, ast.Assign) else \
        [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) else []
    names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if any(DEVICE_NAME.search(name) for name in names):
        return True
    header = [statement.test] if isinstance(statement, (ast.If, ast.While)) else [statement]
    return any(isinstance(node, ast.keyword) and node.arg == "device" and
               any(getattr(inner, "lineno", None) == line for inner in ast.walk(node.value))
               for part in header for node in ast.walk(part))


def _statements_of(path: str, ast: Any) -> dict[int, Any]:
    found = _statements.get(path)
    if found is None:
        with open(path, encoding="utf-8") as source:
            tree = ast.parse(source.read(), path)
        found = {}
        for node in ast.walk(tree):  # outer statements first, so an inner one wins its lines
            if isinstance(node, ast.stmt):
                for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                    found[line] = node
        _statements[path] = found
    return found
