"""A pytest plugin for ``bench depmap``: counts the audit events this process raises.

Loaded with ``-p bench._depmap_audit`` when ``BENCH_AUDIT_COUNTS`` names a file: from the
plugin's import to pytest's unconfigure it counts every audit event (each one is a call of every
Python audit hook installed, the recorder's included) by name, and writes ``{name: count}`` as
JSON to that file. Only the pytest process is counted, not its subprocesses.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

from ci.atomic_write import atomic_write_text

COUNTS_ENV = "BENCH_AUDIT_COUNTS"
_counts: Counter[str] = Counter()
_on = [bool(os.environ.get(COUNTS_ENV))]


def _hook(event: str, args: tuple) -> None:
    if _on[0]:
        _counts[event] += 1


if _on[0]:
    sys.addaudithook(_hook)


def pytest_unconfigure(config) -> None:
    if not _on[0]:
        return
    _on[0] = False
    atomic_write_text(os.environ[COUNTS_ENV], json.dumps(dict(_counts)))
