"""A wall clock the code under observation cannot patch.

Time-freezing libraries (freezegun, time-machine's module scan) replace ``time.monotonic`` and
``time.perf_counter`` in the ``time`` module and in every loaded module's globals bound to them;
pytest's own report durations then read the frozen clock (on itsdangerous with freezegun, a setup
reported 1.3e9 s). The real function is held as a class attribute, which such a scan of module
globals does not reach, from the moment this module is imported (before any test runs).
"""

from __future__ import annotations

import time


class _Held:
    monotonic = staticmethod(time.monotonic)


def now() -> float:
    """Seconds on the real monotonic clock (only differences mean anything)."""
    return _Held.monotonic()
