"""Infra-looking failures that are a test's own flakiness, not a machine's.

Contract: `infra_flakes(store, repo, tier)` reads the tier's infra-looking failures (``cases.infra``,
through its partial index) and returns the `InfraFlakes` that `ci.history.flaky.evidence` and
`ci.history.retries` count as the test's own attempts when the verdicts ask for them. A test's
failure of kind K counts so when the test failed with K on at least `MIN_RUNNERS` runners, in runs
of at least `MIN_SOURCES` pull requests or main commits (a race in the test follows it from
machine to machine; one bad machine, or one change, is one runner or one source), unless its
report is the machine's at once (`ci.history.runners.machine_at_once`: at least three of the
report's tests, and half of them, failed with an infra-looking error; a bad node or an outage
fails the whole job, as `ci.history.runners.out_of_line` reads a judged run). A lost runner or a signal is never the
test's here: `ci.history.verdict` judges those by their own rules. Nor is a machine-only kind
(`MACHINE_KINDS`: no GPU, a GPU that other processes hold, a full disk, a failing mount), whatever
runners it struck the test on: no test's race takes a device away, fills it from another process or
makes a mount go stale; nor a GPU's hardware fault (`ci.history.hardware.hardware_fault`: an
uncorrectable ECC error, a GPU fallen off the bus), whose stored kind is ``cuda``; so rule 1 keeps such a failure
infra when no runner is to blame (`MACHINE_ONLY` when the test failed so elsewhere, else a
hiccup): a pool-wide spell, such as a shared model
cache's mount going stale for hours, strikes every test on every runner it meets, and its
failures of one test on many runners are the spell's, not the test's. The judged failure itself is
still attributed by rule 1 (`ci.history.runners.runner_blame`, `failed_so_elsewhere`) first;
this only lets an infra-looking error that follows the test be matched with its earlier ones,
so a flake that fails every attempt with an NCCL error is called flaky, not new.

The quarantine never reads this (`ci.history.flaky.flaky_scores` without ``own``): which runner
failed is not proof enough to quarantine a test on.
"""

from __future__ import annotations

from dataclasses import dataclass

from ci.history.errors import DISK_FULL, GPU_HELD, LOST_RUNNER, NO_GPU, SIGNAL, STORAGE
from ci.history.hardware import hardware_fault
from ci.history.model import EvidenceRow
from ci.history.runners import machine_at_once
from ci.history.store import Store
from ci.history.verdict_queries import cut, repo_condition, source_of

MIN_RUNNERS = 2
MIN_SOURCES = 2
MACHINE_KINDS = frozenset({NO_GPU, GPU_HELD, DISK_FULL, STORAGE})
MACHINE_ONLY = ("not one runner's (in line with the pool), and never a test's own (a missing device, a GPU other "
                "processes hold, a GPU's hardware fault, a full disk or a failing mount): the machines'; rerun it")
_CHUNK = 500

_INFRA_FAILURES = """SELECT n.node, c.infra, r.runner, r.sha, r.pr, r.id, c.error FROM cases c
    JOIN reports r ON r.id = c.report_id JOIN nodes n ON n.id = c.node_id
    WHERE c.infra <> '' AND {repo}r.tier = ?{until}"""
_REPORT_SIZES = """SELECT c.report_id, COUNT(DISTINCT c.node_id),
    COUNT(DISTINCT CASE WHEN c.infra <> '' THEN c.node_id END) FROM cases c
    WHERE c.kind <> 'skip' AND c.report_id IN ({marks}) GROUP BY c.report_id"""


@dataclass(frozen=True)
class InfraFlakes:
    """Per test (node id string), the infra kinds that follow it (``kinds``), and the reports whose
    infra-looking failures are the machine's at once (``machine_reports``)."""

    kinds: dict[str, frozenset[str]]
    machine_reports: frozenset[int] = frozenset()

    def owns(self, row: EvidenceRow) -> bool:
        """Whether the infra-looking failure ``row`` is its test's own (see the module docstring)."""
        return bool(row.infra) and row.infra in self.kinds.get(row.node, ()) and row.report_id not in \
            self.machine_reports


NONE = InfraFlakes({})


def infra_flakes(store: Store, repo: str, tier: str, *, as_of: int | None = None) -> InfraFlakes:
    """The tier's `InfraFlakes` over the reports up to ``as_of`` (all when None)."""
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    found = store.fetchall(_INFRA_FAILURES.format(repo=where, until=until), (*params, tier, *limit))
    # a rerun attempt with no text of its own carries its last attempt's kind, not its line: the report's test is one
    faults = {(row[0], row[5]) for row in found if hardware_fault(str(row[6] or ""))}
    rows = [row[:6] for row in found if can_follow_test(str(row[1]))]
    machine = _machine_reports(store, sorted({int(row[5]) for row in rows}))
    rows = [row for row in rows if (row[0], row[5]) not in faults]
    seen: dict[tuple[str, str], tuple[set[str], set[tuple[str, int | str]]]] = {}
    for node, kind, runner, sha, pr, report_id in rows:
        if int(report_id) in machine:
            continue
        runners, sources = seen.setdefault((str(node), str(kind)), (set(), set()))
        runners.add(str(runner))
        sources.add(source_of(pr, str(sha)))
    kinds: dict[str, set[str]] = {}
    for (node, kind), (runners, sources) in seen.items():
        if len(runners - {""}) >= MIN_RUNNERS and len(sources) >= MIN_SOURCES:
            kinds.setdefault(node, set()).add(kind)
    return InfraFlakes({node: frozenset(k) for node, k in kinds.items()}, frozenset(machine))


def can_follow_test(kind: str) -> bool:
    """Whether an infra kind can be a test's own race (NCCL, CUDA, the OOM killer), not only a machine's."""
    return bool(kind) and kind not in MACHINE_KINDS and kind not in (LOST_RUNNER, SIGNAL)


def _machine_reports(store: Store, report_ids: list[int]) -> set[int]:
    """The reports among ``report_ids`` whose infra-looking failures are the machine's at once
    (`ci.history.runners.machine_at_once`)."""
    out: set[int] = set()
    for start in range(0, len(report_ids), _CHUNK):
        chunk = report_ids[start:start + _CHUNK]
        for report_id, total, infra in store.fetchall(_REPORT_SIZES.format(marks=", ".join("?" * len(chunk))), chunk):
            if machine_at_once(int(infra), int(total)):
                out.add(int(report_id))
    return out
