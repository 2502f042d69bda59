"""Per test file facts beyond lines: how long it ran, how it ended, why pytest skipped it.

Each recording process that runs tests adds them to its ``items.<pid>.json`` part under
``"facts"``: ``{test: {"duration_s": s, "outcomes": [...], "skip_reasons": [...]}}``. A pytest
process (`ci.observe.record`) adds each report of a test file's items (`PytestFacts`); a test
script's own process (`ci.observe.script_test`) its wall time and exit status. The merge
(`combine`) sums durations (xdist workers share a file's items), keeps every skip reason once,
and gives a file one outcome: ``error`` when any setup or teardown failed, else ``failed`` when any
test failed, else ``passed`` when any passed, else ``skipped``.

Devices (`ci.observe.devices`): each process's ``devices.<pid>.jsonl`` lines (`read_devices`) give a
file its ``devices`` (sorted) and ``device_evidence`` (each string once, at most `MAX_EVIDENCE`); a
skip reason that says CUDA or a GPU is missing (`GPU_SKIP`, e.g. ``skipif(not
torch.cuda.is_available())``) counts as ``cuda`` with the evidence ``skip: <reason>``: on a CPU
machine that test wanted the GPU. So does a failure (a test's, or the file's collection) that a
device guard raised (`guard_failure`: ``assert x.is_cuda``, Triton's "0 active drivers", a
``torch.cpu`` without a device module's function, a message naming CUDA or a GPU), with the
evidence ``failed: <message> at <line>``; and a ``torch.cuda`` availability query that said no
(a ``query`` event of `ci.observe.devices`) counts only in a file that then failed or errored,
and one the test file chose its tensors' device by (an ``adaptive`` event, `ci.observe.adaptive`)
in any file, passed included: on a GPU runner that file runs its GPU path.
Both count only for a file without a hook's own event (a launch, ``torch.cuda.init``), which
says the same more exactly.

Contract: nothing here raises for a report it does not understand; `combine` skips a record of
another shape.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from ci.observe.devices import MAX_EVIDENCE as MAX_GUARD_TEXT  # characters of one failure's evidence

RANK = ("error", "failed", "passed", "skipped")  # the first a file has is its outcome
MAX_REASONS = 20  # a file that skips each of 500 parametrised cases for its own reason
MAX_EVIDENCE = 10
GPU_SKIP = re.compile(r"\b(cuda|gpus?|nvidia|nccl)\b", re.IGNORECASE)
# what a device guard's failure says, in its message or its failing line (`guard_failure`)
GUARD = re.compile(r"\bis_cuda\b|\b\d+ active drivers\b|module 'torch\.cpu' has no attribute|" + GPU_SKIP.pattern,
                   re.IGNORECASE)


class Facts(NamedTuple):
    """One test file's merged facts (`combine`)."""

    duration_s: float | None
    outcome: str | None
    skip_reasons: tuple[str, ...]
    devices: tuple[str, ...] = ()
    device_evidence: tuple[str, ...] = ()


def report_outcome(when: str, outcome: str) -> str | None:
    """The outcome one pytest report stands for: a failed setup or teardown is an ``error``, a
    passed setup or teardown none."""
    if when == "call":
        return outcome
    if outcome == "failed":
        return "error"
    return "skipped" if outcome == "skipped" else None


def skip_reason(longrepr: Any) -> str | None:
    """pytest's skip reason from a skipped report's ``longrepr`` ((path, line, "Skipped: why"))."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3 and isinstance(longrepr[2], str):
        return longrepr[2].removeprefix("Skipped: ")
    return None


def guard_failure(longrepr: Any) -> tuple[str, str] | None:
    """(device, ``failed: <message> at <line>``) when a failure's final exception (its last run of
    ``E`` lines) or the source line it was raised at (the line before them, caret lines skipped)
    is a device guard's (`GUARD`); None for any other failure. ``triton`` for Triton's driver
    lookup, else ``cuda``."""
    lines = str(longrepr).splitlines()
    end = max((i for i, line in enumerate(lines) if line.startswith("E ")), default=-1)
    if end < 0:
        return None
    start = end
    while start > 0 and lines[start - 1].startswith("E "):
        start -= 1
    message = " ".join(line[1:].strip() for line in lines[start:end + 1] if line[1:].strip())
    at = next((line.lstrip("> ").strip() for line in reversed(lines[:start])
               if line.strip() and set(line.strip()) - set("^~ ")), "")
    found = GUARD.search(message) or GUARD.search(at)
    if found is None:
        return None
    device = "triton" if "active drivers" in found.group(0) else "cuda"
    return device, f"failed: {message} at {at}"[:MAX_GUARD_TEXT]


class PytestFacts:
    """What one pytest process saw of each test file's reports."""

    def __init__(self) -> None:
        self.files: dict[str, dict[str, Any]] = {}

    def _entry(self, test: str) -> dict:
        return self.files.setdefault(test, {"duration_s": 0.0, "outcomes": [], "skip_reasons": [], "guards": []})

    def add_seconds(self, test: str, seconds: float) -> None:
        """The wall time one of ``test``'s items took (`ci.observe.clock`, never a report's own)."""
        self._entry(test)["duration_s"] += max(0.0, seconds)

    def add(self, test: str, when: str, outcome: str, longrepr: Any) -> None:
        """One report of ``test``'s item (setup, call or teardown)."""
        entry = self._entry(test)
        kind = report_outcome(when, outcome)
        if kind is not None and kind not in entry["outcomes"]:
            entry["outcomes"].append(kind)
        reason = skip_reason(longrepr) if outcome == "skipped" else None
        if reason is not None and reason not in entry["skip_reasons"] and len(entry["skip_reasons"]) < MAX_REASONS:
            entry["skip_reasons"].append(reason)
        guard = guard_failure(longrepr) if outcome == "failed" else None
        if guard is not None and list(guard) not in entry["guards"] and len(entry["guards"]) < MAX_EVIDENCE:
            entry["guards"].append(list(guard))


def read_devices(parts: Path) -> dict[str, list[tuple[str, str, str]]]:
    """Each test file's (device, evidence, kind) events from the ``devices.*.jsonl`` parts in
    ``parts`` (kind ``use``, or ``query``: an availability query that said no, or ``adaptive``: the
    test file chose its device by that answer); a line of another shape is skipped."""
    from ci.selection.depmap_format import DEVICES  # deferred: merging reads parts, a recorded pytest needs not

    events: dict[str, list[tuple[str, str, str]]] = {}
    for part in sorted(parts.glob("devices.*.jsonl")):
        for line in part.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
                test, device, evidence = event["test"], event["device"], event["evidence"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(test, str) and device in DEVICES and isinstance(evidence, str):
                kind = next((k for k in ("adaptive", "query") if event.get(k) is True), "use")
                events.setdefault(test, []).append((device, evidence, kind))
    return events


def _devices(events: list[tuple[str, str, str]], reasons: Iterable[str], guards: Iterable[tuple[str, str]],
             outcome: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    hooked = [(d, e) for d, e, kind in events if kind == "use"]
    asked = [(d, e) for d, e, kind in events
             if kind == "adaptive" or kind == "query" and outcome in ("error", "failed")]
    found = hooked or asked + list(guards)  # the hooks' own evidence is exact: the rest only without it
    found += [("cuda", f"skip: {r}") for r in reasons if GPU_SKIP.search(r)]
    evidence = list(dict.fromkeys(e for _, e in found))
    return tuple(sorted({d for d, _ in found})), tuple(evidence[:MAX_EVIDENCE])


def combine(records: Iterable[Any], devices: dict[str, list[tuple[str, str, str]]] | None = None) -> dict[str, Facts]:
    """Every process's ``"facts"`` record merged per test file, with its ``devices`` events
    (`read_devices`; see the module docstring)."""
    from ci.selection.depmap_format import DEVICES  # deferred, as in `read_devices`

    duration: dict[str, float] = {}
    outcomes: dict[str, set[str]] = {}
    reasons: dict[str, list[str]] = {}
    guards: dict[str, list[tuple[str, str]]] = {}
    for record in records:
        if not isinstance(record, dict):
            continue
        for test, entry in record.items():
            if not isinstance(entry, dict):
                continue
            seconds = entry.get("duration_s")
            duration[test] = duration.get(test, 0.0) + (seconds if isinstance(seconds, (int, float)) else 0.0)
            outcomes.setdefault(test, set()).update(o for o in entry.get("outcomes", ()) if o in RANK)
            found = reasons.setdefault(test, [])
            found.extend(r for r in entry.get("skip_reasons", ()) if isinstance(r, str) and r not in found)
            guards.setdefault(test, []).extend((g[0], g[1]) for g in entry.get("guards", ())
                                               if isinstance(g, list) and len(g) == 2 and g[0] in DEVICES)
    devices = devices or {}
    out = {}
    for test in duration.keys() | devices.keys():
        outcome = next((o for o in RANK if o in outcomes.get(test, ())), None)
        out[test] = Facts(round(duration.get(test, 0.0), 3) if test in duration else None, outcome,
                          tuple(reasons.get(test, [])[:MAX_REASONS]),
                          *_devices(devices.get(test, []), reasons.get(test, []), guards.get(test, []), outcome))
    return out
