"""Typed records of the HUD: what the page shows, before it is rendered.

Contract: every record is a frozen dataclass of plain values (str, int, float, tuples of them),
so `ci.report.write` can dump the whole `Report` as JSON with `dataclasses.asdict` and the HTML
renderer never sees the store or the registry.
"""

from __future__ import annotations

from dataclasses import dataclass

# A matrix cell's status, and how it is drawn: a letter as well as a colour (colour-blind safe).
# INFRA: a final failure whose every failing test names a runner-level cause (`ci.history.errors.infra_kind`).
PASS, FAIL, FLAKY, BROKEN, INFRA, SKIPPED, QUARANTINED, MANUAL, NOT_RUN = (
    "pass", "fail", "flaky", "broken", "infra", "skipped", "quarantined", "manual", "not-run")
STATUSES = (PASS, FAIL, FLAKY, BROKEN, INFRA, SKIPPED, QUARANTINED, MANUAL, NOT_RUN)
LETTERS = {PASS: "✓", FAIL: "✗", FLAKY: "~", BROKEN: "B", INFRA: "!", SKIPPED: "S", QUARANTINED: "Q", MANUAL: "M",
           NOT_RUN: "·"}
MEANING = {PASS: "passed", FAIL: "failed", FLAKY: "failed, then passed on a retry", BROKEN:
           "broken (ImportError, collection error, no GPU)",
           INFRA: "infra failure (CUDA, NCCL, OOM kill, lost runner: the machine, not the code)",
           SKIPPED: "every test skipped (no hardware)",
           QUARANTINED: "quarantined in the registry, not run", MANUAL: "manual in the registry, not run",
           NOT_RUN: "no result at this commit"}


# A row's triage state: what the matrix shows first. FAILING: its latest result fails; FLAKY: a
# failure (final or retried) in the last `RECENT` columns; OK: neither (what hide-green hides).
FAILING_ROW, FLAKY_ROW, OK_ROW = "failing", "flaky", "ok"
ROW_STATES = (FAILING_ROW, FLAKY_ROW, OK_ROW)
RECENT = 10


@dataclass(frozen=True)
class Run:
    """One column of the matrix: a commit of the default branch and every CI run of it (reports
    sharing repo and sha; several runs or run attempts at one commit are merged into its cells).
    ``index`` counts from 0, oldest first; ``run_id`` and ``url`` are the newest run's; ``runs``
    how many runs were merged; ``author`` and ``pr`` (the pull request that made the commit) are
    "" and None where the history does not know them."""

    index: int
    sha: str
    event: str
    run_id: str
    url: str
    started: str  # ingested_at of its first report (UTC, ISO 8601)
    author: str = ""
    pr: int | None = None
    runs: int = 1


@dataclass(frozen=True)
class Failure:
    """Why one cell failed: the first failing test of the file in that column (by node id), the
    first line of its message, how many of the file's tests failed there, and the verdict on the
    failure where one is known ("" otherwise). ``infra`` is the runner-level cause when every
    failing test there names one ("" otherwise); ``runner`` the machine the first one ran on."""

    run: int
    node: str
    message: str
    failed: int
    verdict: str = ""
    infra: str = ""
    runner: str = ""


@dataclass(frozen=True)
class Culprit:
    """The culprit search of a row failing now (`ci.history.culprits`, the newest of its tier and
    file whose window is of the row's current streak): ``sha`` is "" while it is searching; ``found`` when it reached its confidence; ``url``
    the search's run (http(s) only, else "")."""

    sha: str
    probability: float | None
    found: bool
    url: str
    good: str
    bad: str


@dataclass(frozen=True)
class FileRow:
    """One row of the matrix: a registered (or once-seen) file on one tier. ``cells[i]`` is its
    status in run ``i``; ``times[i]`` the seconds its tests took there (None: no sample)."""

    tier: str
    file: str
    owner: str
    registry_status: str  # active, manual, quarantined; "unregistered" for a file only the history knows
    cells: tuple[str, ...]
    times: tuple[float | None, ...]
    state: str = OK_ROW                      # `ROW_STATES`
    since: int = -1                          # FAILING: the column the current failure streak began in
    streak: int = 0                          # FAILING: failing columns in that streak
    since_days: float = 0.0                  # FAILING: days from the streak's first column to the latest
    failures: tuple[Failure, ...] = ()       # one per failing or flaky cell, by column
    attempts: tuple[int, ...] = ()           # per column, the run attempts merged there (empty: one each)
    culprit: Culprit | None = None           # FAILING: its culprit search, when one was requested or run


@dataclass(frozen=True)
class DurationRow:
    """A file's measured time on a tier over the runs shown, against the registry."""

    tier: str
    file: str
    owner: str
    samples: int
    p50: float
    p90: float
    est_time: float | None
    timeout: float | None
    drift: bool          # p90 off est_time by more than the rule of `ci durations` allows
    over_timeout: bool   # p90 above the timeout: the file will be killed


@dataclass(frozen=True)
class FlakyRow:
    """A ranked flaky test (from `ci.history.flaky`), with what the page links to."""

    rank: int
    tier: str
    node: str
    file: str
    owner: str
    score: float
    low: float
    high: float
    failures: int
    trials: int
    examples: tuple[str, ...]


@dataclass(frozen=True)
class Bar:
    """One test file's slot on a shard: ``start`` and ``length`` in seconds from the shard's start."""

    file: str
    start: float
    length: float


@dataclass(frozen=True)
class ShardLane:
    index: int
    load: float
    bars: tuple[Bar, ...]


@dataclass(frozen=True)
class TierPlan:
    """The plan of one tier as a timeline: its shards, the makespan and the lower bound."""

    tier: str
    shards: tuple[ShardLane, ...]
    makespan: float
    lower_bound: float
    selected: int
    not_run: int


@dataclass(frozen=True)
class PullTest:
    """One test of a pull request's view: was it selected (and why), did it run, its result, and
    the command that runs it when it did not."""

    tier: str
    file: str
    owner: str
    selected: bool
    why: str
    status: str          # a matrix status; NOT_RUN when no report of the pull request has it
    rerun: str           # "/rerun-test FILE" when it did not run, else ""
    failure: Failure | None = None  # why it failed, when it did


@dataclass(frozen=True)
class PullView:
    pr: int
    sha: str
    changed: tuple[str, ...]
    tests: tuple[PullTest, ...]


@dataclass(frozen=True)
class RunnerRow:
    """A runner with infra failures: its record over the store's scored reports as
    `ci.history.runners.RunnerHealth` counts it (``text``, its ``describe()``); ``bad`` when it is
    out of line with its pool on a tier (`ci.history.runners.pool_review`, the verdicts' rule),
    ``why`` then that tier and the record's words (counts and Fisher p), so the page blames what
    the verdicts blame."""

    runner: str
    reports: int
    infra_reports: int
    infra_failures: int
    kinds: tuple[tuple[str, int], ...]
    bad: bool
    text: str
    why: str = ""


@dataclass(frozen=True)
class PoolRow:
    """A test failing with infra errors on its tier's whole pool (`ci.history.runners.pool_wide`):
    the pool's (an image or driver change), no runner's; ``text`` in that module's words."""

    tier: str
    node: str
    text: str


@dataclass(frozen=True)
class Report:
    """Everything the page shows. ``generated`` is UTC ISO 8601; ``repo`` the default branch's."""

    generated: str
    repo: str
    runs: tuple[Run, ...]
    rows: tuple[FileRow, ...]
    flaky: tuple[FlakyRow, ...]
    durations: tuple[DurationRow, ...]
    plans: tuple[TierPlan, ...]
    pull: PullView | None
    level: float
    runners: tuple[RunnerRow, ...] = ()  # infra failures per runner, the runners at fault first
    pools: tuple[PoolRow, ...] = ()  # tests failing with infra errors on a tier's whole pool
