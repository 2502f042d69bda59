"""How a recording measures: read from the environment by every recording process.

`MEASURE_ENV` (``CI_DEPMAP_MEASURE``) is a comma-separated list of parts; unset or empty means
all of them:

- ``lines``: executed lines per test file (the map's ``executed``);
- ``opened``: the "open" audit hook logs opened files (the map's ``opened``);
- ``subprocesses``: Python subprocesses a test starts are measured (``COVERAGE_PROCESS_START``).

A map recorded without one of them holds less than the test really used, so leaving a part out
exists to measure what each part costs (``python -m bench depmap``), not for CI.

`CORE_ENV` (``CI_DEPMAP_CORE``) picks what measures lines in the pytest process (and its xdist
workers): ``slipcover`` (`ci.observe.slipcover_core`, bytecode probes in repository code only),
``sysmon`` (`ci.observe.sysmon_core`, coverage.py's ``sys.monitoring`` core, CPython 3.12+),
``ctrace`` (coverage.py's C tracer, a trace function over every frame), or ``auto`` (the
default): slipcover where it imports and the interpreter is one it is tested on here (CPython
3.11), else sysmon where ``sys.monitoring`` exists, else ctrace. Subprocesses the start-up hook
of `ci.observe.startup` does not pick up are measured by coverage.py, with sysmon where their
interpreter has it (unless the core is ``ctrace``).

`KEEP_PARTS_ENV` (``CI_DEPMAP_KEEP_PARTS``) names a directory where the owner copies the parts
(coverage data with its contexts, open logs) before it deletes them: the raw data behind a map.

Contract: `record_options` returns the options with the core resolved (never ``auto``), or raises
`ValueError` naming the variable and the offending value; ``slipcover`` or ``sysmon`` asked for by
name where it cannot run is such an error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple

MEASURE_ENV = "CI_DEPMAP_MEASURE"
CORE_ENV = "CI_DEPMAP_CORE"
KEEP_PARTS_ENV = "CI_DEPMAP_KEEP_PARTS"
PARTS = ("lines", "opened", "subprocesses")
CORES = ("auto", "ctrace", "slipcover", "sysmon")


class RecordOptions(NamedTuple):
    """The parts a recording measures (all by default) and the core that measures lines (a
    named tuple, not a dataclass: every recorded subprocess imports this module at start-up, and
    ``dataclasses`` costs one about 9 ms of CPU)."""

    lines: bool = True
    opened: bool = True
    subprocesses: bool = True
    core: str = "ctrace"


def _resolve(core: str) -> str:
    from ci.observe import sysmon_core  # deferred: imports nothing heavy until asked

    if core == "auto" and sysmon_core.available():  # CPython 3.12+, where slipcover's core does not run
        return "sysmon"
    if core in ("auto", "slipcover"):
        # asked second: importing this module costs a 3.12 process about 45 ms of CPU
        from ci.observe import slipcover_core

        if core == "auto":
            return "slipcover" if slipcover_core.available() else "ctrace"
        if not slipcover_core.available():
            raise ValueError(f"${CORE_ENV}=slipcover, but slipcover does not import here "
                             f"({slipcover_core.unavailable_reason()})")
    if core == "sysmon" and not sysmon_core.available():
        raise ValueError(f"${CORE_ENV}=sysmon, but it cannot run here ({sysmon_core.unavailable_reason()}); "
                         "use ctrace, or auto")
    return core


def record_options(environ: Mapping[str, str] = os.environ, *, resolve_core: bool = True) -> RecordOptions:
    """See the module docstring. ``resolve_core=False`` (a subprocess, which measures with
    coverage.py whatever the core) leaves the core unresolved and imports nothing."""
    core = environ.get(CORE_ENV, "").strip() or "auto"
    if core not in CORES:
        raise ValueError(f"${CORE_ENV}={core!r}: unknown core (known: {', '.join(CORES)})")
    if resolve_core:
        core = _resolve(core)
    value = environ.get(MEASURE_ENV, "").strip()
    if not value:
        return RecordOptions(core=core)
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise ValueError(f"${MEASURE_ENV}={value!r}: unknown part {unknown[0]!r} (known: {', '.join(PARTS)})")
    return RecordOptions(*(p in names for p in PARTS), core=core)
