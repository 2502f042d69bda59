"""The ``sysmon`` line core: coverage.py's ``sys.monitoring`` core (CPython 3.12+, PEP 669), with
a context per test file.

coverage.py's sysmon core records a line on its first ``LINE`` event and answers
``sys.monitoring.DISABLE``, so that line never calls back again; it also refuses coverage's own
dynamic contexts (``dynamic_context = test_function``) and warns on ``switch_context``. Here every
test file must see every line it runs, so `SysmonCoverage.switch_context` switches coverage's
context (which saves the lines so far under the old one) and then calls
``sys.monitoring.restart_events()``: every disabled event fires once more, in the new context. The
cost is one callback per line and context, as the slipcover core's re-armed probes
(`ci.observe.retire`). Unlike a trace function, ``sys.monitoring`` sees every thread, those
started before the measurement included, and calls back only in code coverage measures.

Contract: `unavailable_reason` is None where this core runs (CPython 3.12+ with a coverage.py
that has the sysmon core), else one line saying why; `measure` returns a
`SysmonCoverage` (a ``coverage.Coverage``, not started) that measures the files ``include`` names, with the
sysmon warnings about contexts silenced; its `switch_context` starts the new context with every
line's event enabled again, unless given ``rearm=False``. Once started, every line of each
repository code object that TorchDynamo reads (`ci.observe.dynamo_probes.record_reads`) goes to
the current context too, through ``clines.<pid>.dynamo.jsonl`` beside the data file (the merge
reads it as a subprocess's lines): ``sys.monitoring`` sees no line of a frame dynamo compiled.
"""

from __future__ import annotations

import os
import sys

from ci.observe import dynamo_probes

CORE = "sysmon"
# coverage.py's warnings that this module answers: contexts under sysmon (restart_events below),
# and its fallback to ctrace in a child whose interpreter has no sys.monitoring
SILENCED = ("no-sysmon-context", "no-sysmon")


def unavailable_reason() -> str | None:
    """Why this core cannot run here, or None when it can."""
    if sys.implementation.name != "cpython" or sys.version_info < (3, 12):
        return (f"the sysmon core needs CPython 3.12 or later (sys.monitoring), this is "
                f"{sys.implementation.name} {sys.version_info[0]}.{sys.version_info[1]}")
    try:
        import coverage.sysmon  # noqa: F401  (deferred: only this core needs it)
        from coverage.config import CoverageConfig
    except ImportError as exc:
        return f"coverage.py with a sysmon core is not installed: {exc}"
    if not hasattr(CoverageConfig(), "core"):
        return "the installed coverage.py has no [run] core setting (7.10 or later has)"
    return None


def available() -> bool:
    """True when this core can run here (`unavailable_reason` is None)."""
    return unavailable_reason() is None


def measure(data_file: str, include: list[str], omit: list[str]):
    """A `SysmonCoverage` writing parallel data files next to ``data_file``, not started."""
    import coverage  # deferred: only a recording needs it

    roots = tuple(pattern.rstrip("*") for pattern in include)
    log = os.path.join(os.path.dirname(data_file), f"clines.{os.getpid()}.dynamo.jsonl")

    class SysmonCoverage(coverage.Coverage):
        """coverage.Coverage whose context switch enables every line's event again."""

        rearms = True  # disables recorded lines: `switch_context` takes ``rearm``
        context = ""

        def start(self) -> None:
            super().start()
            # sys.monitoring sees no line of a frame dynamo compiled: every line dynamo reads counts
            on_read = dynamo_probes.line_recorder(log, lambda path: path.startswith(roots), lambda: self.context)
            dynamo_probes.record_reads(on_read, dynamo_probes.after_import)

        def switch_context(self, new_context: str, rearm: bool = True) -> str | None:
            self.context = new_context
            previous = super().switch_context(new_context)
            if rearm:  # False: the caller knows the new context has every disabled line (`ci.observe.files.Rearm`)
                sys.monitoring.restart_events()  # lines seen in the old context are new to this one
            return previous

    cov = SysmonCoverage(data_file=data_file, data_suffix=True, config_file=False, include=include, omit=omit)
    cov.set_option("run:core", CORE)
    cov.set_option("run:disable_warnings", list(SILENCED))
    return cov
