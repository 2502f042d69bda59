"""Which test file a Python process of an observed command is (`ci observe`), and its facts.

An observed command (``make test``, SGLang's ``python3 run_suite.py``) starts Python processes
with `OBSERVE_ENV` set to ``roots|patterns`` (the registry's ``project.test_roots`` and
``test_patterns``, comma-separated). The start-up hook calls `begin` in each one before anything
else (`ci.observe.child.start`). A process whose main script is a test file (`ci.observe.argv_test_file`: (``python3
test/x/test_y.py``; ``python3 -m test.x.test_y``; ``python3 -m unittest test.x.test_y`` or
``test/x/test_y.py`` naming one test module)) and that is not already some test file's child
(`TEST_ENV` unset) becomes that test file: `begin` sets `TEST_ENV`, so everything it runs, and
every child it starts (a server), inherits it and is that file's. A pytest process is left to
the recorder's per-test-file contexts (`ci.observe.record`); any other process (a runner,
``make``'s ``python -c``) has no test file, and its lines are the map's ``shared``.

A test file's process writes ``items.<pid>.json`` as it starts (one item, not finished) and
again as it leaves: finished, with its wall time and outcome (`ci.observe.facts`): exit status 0
is ``passed``, anything else ``failed`` (``sys.exit``'s status, 1 after an uncaught exception,
``os._exit``'s status). A process killed before it leaves stays unfinished: its entry partial.

Contract: `begin` never raises (the start-up hook's caller swallows too).
"""

from __future__ import annotations

import atexit
import json
import os
import sys

from ci.observe import clock
from ci.observe.files import OBSERVE_ENV, PARTS_ENV, ROOT_ENV, TEST_ENV
from ci.observe.argv_test_file import test_file_of

def _write(parts: str, test: str, record: dict) -> None:
    target = os.path.join(parts, f"items.{os.getpid()}.json")
    temporary = os.path.join(parts, f".items.{os.getpid()}.tmp")  # not an items.*.json until whole
    try:
        with open(temporary, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        os.replace(temporary, target)
    except OSError:
        pass  # the recording is over: nothing to add to


class _Exit:
    """The status this process leaves with, as far as Python sees it."""

    def __init__(self, parts: str, test: str):
        self.parts, self.test, self.status, self.started, self.done = parts, test, 0, clock.now(), False
        self.pid = os.getpid()

    def watch(self) -> None:
        real_exit, real_hook, real_os_exit = sys.exit, sys.excepthook, os._exit

        def exit_(status: object = None) -> None:
            self.status = 0 if status is None else status if isinstance(status, int) else 1
            real_exit(status)

        def excepthook(*info) -> None:
            self.status = 1
            real_hook(*info)

        def os_exit(status: int) -> None:
            self.status = status
            self.leave()
            real_os_exit(status)

        sys.exit, sys.excepthook, os._exit = exit_, excepthook, os_exit
        atexit.register(self.leave)

    def leave(self) -> None:
        """Write the finished record, once, in the process that began (not in a fork of it)."""
        if self.done or os.getpid() != self.pid:
            return
        self.done = True
        outcome = "passed" if self.status == 0 else "failed"
        facts = {"duration_s": round(clock.now() - self.started, 3), "outcomes": [outcome]}
        _write(self.parts, self.test, {"items": {self.test: 1}, "done": {self.test: 1}, "ran": {self.test: 1},
                                       "facts": {self.test: facts}})


def begin() -> None:
    """See the module docstring."""
    parts, root, spec = os.environ.get(PARTS_ENV), os.environ.get(ROOT_ENV), os.environ.get(OBSERVE_ENV)
    if not parts or not root or not spec or os.environ.get(TEST_ENV) or not os.path.isdir(parts):
        return
    test = test_file_of(list(getattr(sys, "orig_argv", sys.argv)), os.getcwd(), root, spec)
    if test is None:
        return
    os.environ[TEST_ENV] = test
    _write(parts, test, {"items": {test: 1}, "done": {}, "ran": {}})
    _Exit(parts, test).watch()
