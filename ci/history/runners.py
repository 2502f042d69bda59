"""Runner health: how many of a runner's reports hold infrastructure failures, against the fleet.

Contract: `runner_health(store)` counts, per runner name, the scored reports (a pull request's own
JUnit could forge failures on any runner, so it never counts) and those with at least one infra
failure (``cases.infra``, read through its partial index). A runner is *bad* when at least
`BAD_MIN_REPORTS` of its reports hold infra failures and they are at least `BAD_SHARE` of its
reports: one CUDA error is bad luck, a third of a machine's runs is a bad machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from ci.history.store import Store

BAD_MIN_REPORTS = 3
BAD_SHARE = 0.2


@dataclass(frozen=True)
class RunnerHealth:
    """One runner's infra record over the history."""

    runner: str
    reports: int
    infra_reports: int
    infra_failures: int
    kinds: tuple[tuple[str, int], ...]  # (infra kind, reports with it), most first

    @property
    def bad(self) -> bool:
        return self.infra_reports >= BAD_MIN_REPORTS and self.infra_reports >= BAD_SHARE * max(1, self.reports)

    def describe(self) -> str:
        """``gpu-7 has infra failures in 5 of 9 reports (cuda 4, nccl 1): a bad machine?``"""
        kinds = ", ".join(f"{k} {n}" for k, n in self.kinds)
        text = f"{self.runner} has infra failures in {self.infra_reports} of {self.reports} reports"
        text += f" ({kinds})" if kinds else ""
        return text + (": a bad machine?" if self.bad else "")


_INFRA = """SELECT r.runner, c.infra, COUNT(DISTINCT r.id), COUNT(*) FROM cases c JOIN reports r ON r.id = c.report_id
    WHERE c.infra <> '' AND r.scored = 1{until} GROUP BY r.runner, c.infra"""


def runner_health(store: Store, *, as_of: int | None = None) -> dict[str, RunnerHealth]:
    """Every runner with scored reports: {runner name: its `RunnerHealth`} (the empty name included);
    with ``as_of``, over the reports up to that id only."""
    until, limit = (" AND r.id <= ?", [as_of]) if as_of is not None else ("", [])
    totals = {str(r): int(n) for r, n in store.fetchall(f"SELECT r.runner, COUNT(*) FROM reports r WHERE r.scored = 1"
                                                         f"{until} GROUP BY r.runner", limit)}
    kinds: dict[str, dict[str, int]] = {}
    failures: dict[str, int] = {}
    for runner, kind, reports, count in store.fetchall(_INFRA.format(until=until), limit):
        kinds.setdefault(str(runner), {})[str(kind)] = int(reports)
        failures[str(runner)] = failures.get(str(runner), 0) + int(count)
    per_report = {str(r): int(n) for r, n in store.fetchall(
        "SELECT r.runner, COUNT(DISTINCT r.id) FROM cases c JOIN reports r ON r.id = c.report_id "
        f"WHERE c.infra <> '' AND r.scored = 1{until} GROUP BY r.runner", limit)}
    out = {}
    for runner, reports in totals.items():
        found = kinds.get(runner, {})
        out[runner] = RunnerHealth(runner, reports, per_report.get(runner, 0), failures.get(runner, 0),
                                   tuple(sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))))
    return out
