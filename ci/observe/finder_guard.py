"""The guard a meta path finder needs when it answers by asking every other finder.

Such a finder (the recorder's `ci.observe.probe_imports.ProbeImports` and
`ci.observe.aside.SameFileFinder`, slipcover's own, a second copy of either in a program
that runs its own copy of the recorder) is asked back by the next one that does the same, which
asks the first again, until the stack runs out. Each must answer None to a question it is
already asking.

Contract: ``with guard.asking(name) as first:`` gives True when this thread is not already inside
that block for ``name`` with this guard, False when it is; the question is open until the block
ends, however it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class FinderGuard:
    """The questions (thread, module name) one finder is answering now (see the module docstring)."""

    def __init__(self) -> None:
        self._open: set[tuple[int, str]] = set()

    @contextmanager
    def asking(self, name: str) -> Iterator[bool]:
        key = (threading.get_ident(), name)
        if key in self._open:
            yield False
            return
        self._open.add(key)
        try:
            yield True
        finally:
            self._open.discard(key)
