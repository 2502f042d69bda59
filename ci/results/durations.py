"""Fold measured JUnit timings into ``est_time`` values, rewriting registry.yaml in place.

Design choice: registry.yaml stays the single source of truth; there is no separate durations
file to drift out of sync. ``python -m ci durations --write`` changes only the numbers.

Contract:
- A *sample* is one file's summed testcase time (seconds, reruns included) in one JUnit XML.
  Pass one XML per shard per run; a file appears in exactly one shard of a run.
- Files whose every test was skipped (hardware absent) give no sample: their time says nothing.
- The statistic across samples is the nearest-rank p90 (the max for fewer than 10 samples):
  robust to one fast outlier, pessimistic enough that shards rarely overrun.
- New est_time = ceil(p90 * (1 + margin)), at least 1 s (margin default 10%): integers keep the
  diff readable and deterministic. A file whose sample or proposed est_time exceeds
  `ci.registry.MAX_SECONDS` (one day) is refused with `DurationsError` naming the file and the
  reports: the registry cannot hold it, so the reports are wrong (each testcase time is already
  checked by `ci.results.junit`).
- The rewrite locates each ``est_time`` scalar through PyYAML node marks and replaces only those
  characters; comments, order, quoting of everything else stay byte-identical. The result is
  re-parsed and checked before it is returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import yaml

from ci.results.junit import JUnitReport
from ci.registry import MAX_SECONDS, Registry, RegistryError, derived_timeout, parse_registry
from ci.registry.tier_edit import apply_edits

DEFAULT_MARGIN = 0.10


class DurationsError(ValueError):
    """The reports give a duration the registry cannot hold; the message names files and reports."""


@dataclass(frozen=True)
class Measurement:
    """``samples`` in seconds (sorted); ``value`` the p90 statistic; ``proposed`` the new est_time."""

    path: str
    samples: tuple[float, ...]
    value: float
    proposed: int


@dataclass(frozen=True)
class Drift:
    path: str
    est_time: float
    measured: float
    proposed: int

    @property
    def pct(self) -> float:
        return (self.measured - self.est_time) / self.est_time * 100.0


@dataclass(frozen=True)
class DurationReport:
    measurements: dict[str, Measurement]  # registered files only, sorted by path
    unknown: tuple[str, ...]              # files in the XML that the registry does not know
    all_skipped: tuple[str, ...]          # registered files with no usable sample
    drifts: tuple[Drift, ...]             # sorted by path


def p90(samples: Iterable[float]) -> float:
    """Nearest-rank 90th percentile of a non-empty sample."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("p90 of an empty sample")
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def propose(value: float, margin: float = DEFAULT_MARGIN) -> int:
    """Whole seconds, rounded up after the margin, never below 1."""
    return max(1, math.ceil(round(value * (1.0 + margin), 6)))


def collect(reports: Iterable[JUnitReport], registry: Registry, *, margin: float = DEFAULT_MARGIN,
            threshold_pct: float = 25.0, min_seconds: float = 5.0) -> DurationReport:
    """Aggregate samples per registered file and compare with the registry's est_time.

    Raises `DurationsError` when some file's sample or proposed est_time is above MAX_SECONDS.
    """
    samples: dict[str, list[float]] = {}
    sources: dict[str, list[str]] = {}
    seen: set[str] = set()
    unknown: set[str] = set()
    for report in reports:
        for file, result in report.files.items():
            if registry.entry(file) is None:
                unknown.add(file or "(testcases with no resolvable file)")
                continue
            seen.add(file)
            if result.tests and result.skipped == result.tests:
                continue
            samples.setdefault(file, []).append(result.time)
            sources.setdefault(file, []).append(report.source)
    measurements = {
        path: Measurement(path, tuple(sorted(s)), p90(s), propose(p90(s), margin))
        for path, s in sorted(samples.items())
    }
    too_long = [f"{path}: measured up to {max(m.samples):.0f} s (p90 {m.value:.0f} s, est_time would be "
                f"{m.proposed} s) in {', '.join(sources[path])}"
                for path, m in measurements.items() if max(m.samples) > MAX_SECONDS or m.proposed > MAX_SECONDS]
    if too_long:
        raise DurationsError(f"above the limit of {MAX_SECONDS} s (one day) that registry.yaml accepts; "
                             f"refusing these reports: " + "; ".join(too_long))
    drifts = []
    for path, m in measurements.items():
        est = registry.tests[path].est_time
        if abs(m.value - est) > max(threshold_pct / 100.0 * est, min_seconds):
            drifts.append(Drift(path, est, m.value, m.proposed))
    return DurationReport(measurements, tuple(sorted(unknown)), tuple(sorted(seen - samples.keys())),
                          tuple(drifts))


def rewrite_est_times(text: str, new_values: Mapping[str, int | float], path: str = "registry.yaml") -> str:
    """Return ``text`` with ``tests.<path>.est_time`` replaced for each key of ``new_values``.

    An entry that runs on a GPU tier also gets ``timeout: derived_timeout(new est_time)`` when its
    timeout is missing or lower (lint's L007 rule: a longer test keeps a proportionate budget);
    a higher timeout is a deliberate choice and stays.

    Raises `RegistryError` if the text is not a valid registry before or after, and KeyError
    naming any path that has no est_time scalar in the file.
    """
    registry, problems = parse_registry(text, path)
    if registry is None:
        raise RegistryError(problems)
    gpu_tiers = {name for name, tier in registry.tiers.items() if tier.needs_gpu}
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    est_nodes: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    flow_entries: set[str] = set()
    timeout_nodes: dict[str, yaml.Node] = {}
    for key, value in root.value:
        if key.value != "tests":
            continue
        for test_key, test_value in value.value:
            if test_value.flow_style:
                flow_entries.add(test_key.value)
            for field_key, field_value in test_value.value:
                if field_key.value == "est_time":
                    est_nodes[test_key.value] = (field_key, field_value)
                elif field_key.value == "timeout":
                    timeout_nodes[test_key.value] = field_value
    missing = sorted(set(new_values) - est_nodes.keys())
    if missing:
        raise KeyError(f"{path}: no est_time entry for {', '.join(missing)}")
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), applied back to front
    expected_timeouts: dict[str, int] = {}
    for test, value in new_values.items():
        est_key, est_value = est_nodes[test]
        edits.append((est_value.start_mark.index, est_value.end_mark.index, _number(value)))
        entry = registry.tests[test]
        needed = derived_timeout(float(value))
        if gpu_tiers.isdisjoint(entry.tiers) or (entry.timeout is not None and entry.timeout >= needed):
            continue
        expected_timeouts[test] = needed
        if test in timeout_nodes:
            node = timeout_nodes[test]
            edits.append((node.start_mark.index, node.end_mark.index, str(needed)))
        elif test not in flow_entries and est_key.start_mark.line == est_value.end_mark.line:
            # Block style (`est_time: 5  # comment`): a new line below it, at the same indent.
            line_end = text.find("\n", est_value.end_mark.index)
            line_end = len(text) if line_end < 0 else line_end
            edits.append((line_end, line_end, "\n" + " " * est_key.start_mark.column + f"timeout: {needed}"))
        else:
            raise ValueError(f"{path}: {test} runs on a GPU tier and needs 'timeout: {needed}', "
                             f"but its entry is not in block style; add it by hand")
    out, after = apply_edits(text, edits, path)
    for test, value in new_values.items():
        if after.tests[test].est_time != float(value):
            raise ValueError(f"{path}: rewriting est_time of {test} did not take effect")
    for test, needed in expected_timeouts.items():
        if after.tests[test].timeout != float(needed):
            raise ValueError(f"{path}: raising the timeout of {test} to {needed} did not take effect")
    return out


def _number(value: int | float) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS:
        raise ValueError(f"est_time must be a positive number of seconds up to {MAX_SECONDS}, got {value!r}")
    return str(int(value)) if float(value).is_integer() else repr(float(value))
