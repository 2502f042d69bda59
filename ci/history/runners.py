"""Runner health: how many of a runner's reports hold infrastructure failures, against the fleet.

Contract: `runner_health(store)` counts, per runner name, the scored reports (a pull request's own
JUnit could forge failures on any runner, so it never counts) and those with at least one infra
failure (``cases.infra``, read through its partial index): a record, never a judgement (a driver
update fails every runner of a pool alike, so raw counts blame machines that are not at fault).
Whose the failures are is `out_of_line`'s and `pool_wide`'s; `pool_review` asks both of a tier's
whole window, so the HUD says what the verdicts say.

`runner_only(store, ...)` finds a test failing on one runner only: its reports on that runner, from
the newest back to the runner's last pass of it, all failed (at least `ONLY_MIN_FAILED`, from
runs of at least `ONLY_MIN_SOURCES` other pull requests or main commits than the judged one),
while since the first of them it passed on other runners at least `ONLY_MIN_PASSES` times and
failed on none. Code fails on every machine; one machine failing what the others pass is that
machine (an image or driver update), whatever its error says.

`out_of_line(store, ...)` asks whether an infrastructural-looking failure (`cases.infra`) is the
runner's: over the newest `WINDOW` reports of the tier (every event: main runs twice a day in some
CIs, so pull requests' runs are most of the evidence), each test run on the runner counts once,
failed with an infra-looking error or not, against the same count on the pool's other runners;
and so each job (report), and each run of the judged test alone (`UNITS`: a node failing every
test, one test per job, or one test). The runner is out of line when, in any, at least
`MIN_FAILED` of its units failed so, in runs of at least `MIN_SOURCES` pull requests or main
commits (the judged run counts as one: one pull request's JUnit never blames a machine alone), and
a one-sided Fisher exact test, its p multiplied by the three questions, puts its rate above the
others' at ``p < ALPHA``. A bad node fails many tests, or one test far more often than the pool
does; one test's race fails it on every runner alike, so no runner stands out, and its failure is
the test's. Before that, a judged run whose tests on the runner failed so at least `AT_ONCE` times
and at least half of them is out of line by itself: a bad node fails the whole job, where a flaky
file's race fails a few of its tests. `runner_blame` falls back on `pool_wide`: a test failing so
on every runner, every time, is the pool's (an image or driver change), not a flake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union
from math import comb

from ci.history.store import Store
from ci.history.verdict_queries import cut, repo_condition, source_of

ONLY_MIN_FAILED = 3
ONLY_MIN_SOURCES = 2
ONLY_MIN_PASSES = 2
_ONLY_LOOKBACK = 400  # reports of the test read, newest first: a runner's trouble is recent
WINDOW = 40  # reports of the tier read back from the judged one: a bad machine is a spell, not a history
MIN_FAILED = 2
MIN_SOURCES = 2
# Asked only of a failure whose text already names a machine-level cause, over a small window: at
# 0.01 a bad node that fails one test in half its jobs is named after a handful of them, and about
# one infra-looking flake in a hundred may be blamed on a runner by chance (gen7 seed 1: 0.001
# and 0.01 differed in one answer of 2,082).
ALPHA = 0.01
TEST_RUNS, JOBS, RUNS_OF_TEST = "test runs", "jobs", "runs of this test"
UNITS = (TEST_RUNS, JOBS, RUNS_OF_TEST)  # a node failing every test, one test per job, or one test
AT_ONCE = 3  # and at least half the tests of the judged run on the runner: a bad node fails its whole job


@dataclass(frozen=True)
class RunnerHealth:
    """One runner's infra record over the history (counts only: see the module docstring)."""

    runner: str
    reports: int
    infra_reports: int
    infra_failures: int
    kinds: tuple[tuple[str, int], ...]  # (infra kind, reports with it), most first

    def describe(self) -> str:
        """``gpu-7 has infra failures in 5 of 9 reports (cuda 4, nccl 1)``"""
        kinds = ", ".join(f"{k} {n}" for k, n in self.kinds)
        text = f"{self.runner} has infra failures in {self.infra_reports} of {self.reports} reports"
        return text + (f" ({kinds})" if kinds else "")


_INFRA = """SELECT r.runner, c.infra, COUNT(DISTINCT r.id), COUNT(*) FROM cases c JOIN reports r ON r.id = c.report_id
    WHERE c.infra <> '' AND r.scored = 1{until} GROUP BY r.runner, c.infra"""


def runner_health(store: Store, *, as_of: int | None = None) -> dict[str, RunnerHealth]:
    """Every runner with scored reports: {runner name: its `RunnerHealth`} (the empty name included);
    with ``as_of``, over the reports up to that id only."""
    until, limit = cut(as_of)
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


@dataclass(frozen=True)
class RunnerOnly:
    """A test failing on ``runner`` only: ``failed`` reports there since ``since`` (a commit), none
    passing, ``sources`` of them other runs than the judged one's; ``passed_elsewhere`` passing
    reports on other runners since, none failing."""

    runner: str
    since: str
    failed: int
    sources: int
    passed_elsewhere: int

    def describe(self) -> str:
        """``fails on gpu-3 only: 5 reports there since abc1234 failed it, 4 on other runners passed``"""
        return (f"fails on {self.runner} only: {self.failed} reports there since {self.since[:7]} failed it, "
                f"{self.passed_elsewhere} on other runners passed (a runner image or driver update?)")


Source = Union[str, tuple[str, Union[int, str]]]  # "own", ("pr", N) or ("sha", S)


def machine_at_once(failed: int, tests: int) -> bool:
    """Whether ``failed`` infra-looking failures among a job's ``tests`` tests are the machine's at
    once: at least `AT_ONCE`, and at least half of them (a bad node fails its whole job)."""
    return failed >= AT_ONCE and 2 * failed >= tests


def sources_of(shas_prs: list[tuple[str, int | None]], sha: str) -> Callable[[str, int | None], Source]:
    """The run source of a report's (sha, pr): ``"own"`` for ``sha`` itself and its pull request's
    runs (any report at ``sha`` names the pull request), else ``("pr", N)`` or ``("sha", S)``: one
    pull request's pushes and retries are one source, so one change never counts as several."""
    judged = sha.lower()
    own_prs = {int(pr) for s, pr in shas_prs if s == judged and pr is not None}

    def source(commit: str, pr: int | None) -> Source:
        if commit == judged or (pr is not None and int(pr) in own_prs):
            return "own"
        return source_of(pr, commit)
    return source


_BY_REPORT = """SELECT r.id, r.runner, r.sha, r.pr, r.event,
    SUM(CASE WHEN c.kind = 'pass' THEN 1 ELSE 0 END), SUM(CASE WHEN c.kind IN ('fail', 'broken') THEN 1 ELSE 0 END)
    FROM reports r JOIN cases c ON c.report_id = r.id WHERE {repo}r.tier = ? AND c.node_id = ?{until}
    GROUP BY r.id, r.runner, r.sha, r.pr, r.event ORDER BY r.id DESC LIMIT {limit}"""


def runner_only(store: Store, repo: str, tier: str, node_id: int | None, runner: str, sha: str, *,
                as_of: int | None = None) -> RunnerOnly | None:
    """The `RunnerOnly` record of the test ``node_id`` on ``tier`` if it fails on ``runner`` only
    (see the module docstring), judged for a run at ``sha``; None otherwise. Reports of every event
    count (a machine fails everyone's runs alike); the runs of ``sha``'s own pull request, or of
    ``sha`` itself, never count towards ``sources``."""
    if node_id is None or not runner:
        return None
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    rows = store.fetchall(_BY_REPORT.format(repo=where, until=until, limit=_ONLY_LOOKBACK),
                          (*params, tier, node_id, *limit))
    source = sources_of([(s, pr) for _, _, s, pr, _, _, _ in rows], sha)
    failed, sources, first = 0, set(), None
    for rid, name, commit, pr, _event, passes, fails in rows:  # newest first
        if name != runner:
            continue
        if int(passes):
            break
        if int(fails):
            failed += 1
            first = (int(rid), str(commit))
            if (found := source(commit, pr)) != "own":
                sources.add(found)
    if first is None or failed < ONLY_MIN_FAILED or len(sources) < ONLY_MIN_SOURCES:
        return None
    elsewhere = [(int(p), int(f)) for rid, name, _, _, _, p, f in rows if name != runner and int(rid) > first[0]]
    if any(f and not p for p, f in elsewhere) or sum(1 for p, _ in elsewhere if p) < ONLY_MIN_PASSES:
        return None
    return RunnerOnly(runner, first[1], failed, len(sources), sum(1 for p, _ in elsewhere if p))


@dataclass(frozen=True)
class OutOfLine:
    """``runner``'s units in the window (``unit``, one of `UNITS`): ``failed`` of ``runs`` failed with
    an infra-looking error (``tests`` distinct tests, in runs of ``sources`` pull requests and main
    commits), against ``pool_failed`` of ``pool_runs`` on ``others`` other runners; ``p`` the
    one-sided Fisher test's, times the number of units asked. ``at_once``: the judged run alone."""

    runner: str
    unit: str
    failed: int
    runs: int
    tests: int
    sources: int
    pool_failed: int
    pool_runs: int
    others: int
    p: float
    at_once: bool = False

    def describe(self) -> str:
        """``out of line with the pool: 9 of its 12 recent test runs failed with infra errors (4 tests), ...``"""
        if self.at_once:
            return f"{self.failed} of the {self.runs} tests of this run there failed with infra errors at once"
        tests = f" ({self.tests} test{'s' if self.tests != 1 else ''})" if self.unit == TEST_RUNS else ""
        return (f"out of line with the pool: {self.failed} of its {self.runs} recent {self.unit} failed with infra "
                f"errors{tests}, against {self.pool_failed} of {self.pool_runs} on the pool's {self.others} other "
                f"runner{'s' if self.others != 1 else ''} (Fisher p = {self.p:.1g})")


_WINDOW_RUNS = """SELECT r.id, r.runner, r.sha, r.pr, c.node_id, MAX(CASE WHEN c.infra <> '' THEN 1 ELSE 0 END)
    FROM reports r JOIN cases c ON c.report_id = r.id
    WHERE c.kind <> 'skip' AND r.id IN (SELECT r.id FROM reports r WHERE {repo}r.tier = ?{until}
    ORDER BY r.id DESC LIMIT {window}) GROUP BY r.id, r.runner, r.sha, r.pr, c.node_id"""


def out_of_line(store: Store, repo: str, tier: str, runner: str, sha: str, node_id: int | None = None, *,
                as_of: int | None = None) -> OutOfLine | None:
    """The `OutOfLine` record of ``runner`` on ``tier`` if its infra-looking failures stand out from
    the pool's (see the module docstring), judged for a failure of ``node_id`` in a run at ``sha``:
    by each of `UNITS`, each p multiplied by their number;
    None when no runner is named, no other runner is in the window, or nothing is out of line."""
    if not runner:
        return None
    return _out_of_line(_window(store, repo, tier, as_of), runner, sha, node_id)


def _window(store: Store, repo: str, tier: str, as_of: int | None) -> list[tuple]:
    """The newest `WINDOW` reports of ``tier``: (report, runner, sha, pr, node, failed so) rows."""
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    return store.fetchall(_WINDOW_RUNS.format(repo=where, until=until, window=WINDOW), (*params, tier, *limit))


def _out_of_line(rows: list[tuple], runner: str, sha: str, node_id: int | None) -> OutOfLine | None:
    """`out_of_line` over the window's ``rows`` (`_window`)."""
    of = sources_of([(s, pr) for _, _, s, pr, _, _ in rows], sha)
    source = {rid: of(s, pr) for rid, _, s, pr, _, _ in rows}
    others = len({name for _, name, *_ in rows if name != runner})
    own = [int(bad) for rid, name, *_, bad in rows if name == runner and source[rid] == "own"]
    if machine_at_once(sum(own), len(own)):  # most of this run's tests there: the machine
        return OutOfLine(runner, TEST_RUNS, sum(own), len(own), sum(own), 1, 0, 0, others, 0.0, at_once=True)
    found = []
    for unit in UNITS:
        mine, pool = _units(rows, unit, runner, node_id)
        failed = [(rid, node) for rid, node, bad in mine if bad]
        sources = {source[rid] for rid, _ in failed}
        if not pool or len(failed) < MIN_FAILED or len(sources) < MIN_SOURCES:
            continue
        p = min(1.0, len(UNITS) * fisher_greater(len(failed), len(mine), sum(pool), len(pool)))
        if p < ALPHA:
            found.append(OutOfLine(runner, unit, len(failed), len(mine), len({node for _, node in failed}),
                                   len(sources), sum(pool), len(pool), others, p))
    return min(found, key=lambda o: o.p, default=None)


def _units(rows: list[tuple], unit: str, runner: str, node_id: int | None) -> tuple[list[tuple[int, int, int]],
                                                                                 list[int]]:
    """(the runner's (report id, node id, failed) units, the other runners' failed flags) of the
    window's (report, runner, sha, pr, node, failed) rows, counted by ``unit`` (`UNITS`)."""
    if unit == TEST_RUNS or unit == RUNS_OF_TEST:
        kept = [(int(rid), name, int(node), int(bad)) for rid, name, _, _, node, bad in rows
                if unit == TEST_RUNS or (node_id is not None and int(node) == node_id)]
    else:  # a job fails when any of its tests failed so; named by its first failed test
        jobs: dict[int, tuple[str, int, int]] = {}
        for rid, name, _, _, node, bad in rows:
            held = jobs.get(int(rid))
            if held is None or (int(bad) and not held[2]):
                jobs[int(rid)] = (name, int(node), int(bad))
        kept = [(rid, name, node, bad) for rid, (name, node, bad) in jobs.items()]
    return ([(rid, node, bad) for rid, name, node, bad in kept if name == runner],
            [bad for _, name, _, bad in kept if name != runner])


def fisher_greater(failed: int, runs: int, pool_failed: int, pool_runs: int) -> float:
    """One-sided Fisher exact p: the chance, were every run alike, that ``runs`` runs drawn from
    all ``runs + pool_runs`` hold ``failed`` or more of the ``failed + pool_failed`` failures."""
    total, bad = runs + pool_runs, failed + pool_failed
    k, top = max(failed, runs - (total - bad)), min(bad, runs)  # the terms below k are 0
    if k > top:
        return 0.0
    term, tail = comb(bad, k) * comb(total - bad, runs - k), 0
    while True:
        tail += term
        if k == top:
            return tail / comb(total, runs)
        # each term from the one before, exactly: two comb() per term took 26 s at 80,000 test runs
        term = term * (bad - k) * (runs - k) // ((k + 1) * (total - bad - runs + k + 1))
        k += 1


def runner_blame(store: Store, repo: str, tier: str, runner: str, sha: str, node_id: int | None, *,
                 as_of: int | None = None, code: Callable[[], object] | None = None) -> str | None:
    """Why an infra-looking failure of ``node_id`` on ``runner`` is the machine's, or None when it
    follows the test: `out_of_line`'s record in words, else `pool_wide`'s unless ``code()`` answers
    (truthy) that the failures follow a commit instead (`ci.history.code_follow`)."""
    rows = _window(store, repo, tier, as_of)  # read once: both questions are about the same window
    found = _out_of_line(rows, runner, sha, node_id) if runner else None
    if found is not None:
        return found.describe()
    pool = pool_wide(rows, sha, node_id)
    return None if pool is not None and code is not None and code() else pool


# one row per report, its attempts grouped: the window is the test's newest reports, not attempts
_TEST_INFRA = """SELECT r.id, r.runner, r.sha, r.pr, MAX(CASE WHEN c.infra = ? THEN 1 ELSE 0 END)
    FROM reports r JOIN cases c ON c.report_id = r.id WHERE {repo}r.tier = ? AND c.node_id = ?{until}
    GROUP BY r.id, r.runner, r.sha, r.pr ORDER BY r.id DESC LIMIT {limit}"""


def failed_so_elsewhere(store: Store, repo: str, tier: str, node_id: int | None, kind: str, runner: str, sha: str, *,
                        as_of: int | None = None) -> int:
    """How many of the test's newest `_ONLY_LOOKBACK` runs on other runners than ``runner``, from
    other pull requests or main commits than ``sha``'s, failed with the infra-looking ``kind``.
    None of them, and no runner out of line: the error follows neither the machine nor the test
    (a fabric or network hiccup on a random test), and stays infra; one or more: it follows the
    test (its own race), and is judged as the test's failure."""
    if node_id is None:
        return 0
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    rows = store.fetchall(_TEST_INFRA.format(repo=where, until=until, limit=_ONLY_LOOKBACK),
                          (kind, *params, tier, node_id, *limit))
    source = sources_of([(s, pr) for _, _, s, pr, _ in rows], sha)
    return sum(1 for _, name, s, pr, hit in rows if int(hit) and name != runner and source(s, pr) != "own")


def pool_wide(rows: list[tuple], sha: str, node_id: int | None) -> str | None:
    """Why ``node_id`` fails on the whole pool, or None: its newest runs of other sources in the
    window's ``rows`` (`_window`), back to its last pass, all failed with infra-looking errors (at least `ONLY_MIN_FAILED`,
    from `MIN_SOURCES` pull requests or main commits, on 2 or more runners). A flake passes between
    its failures; a pool whose image or driver changed under a test fails it everywhere, every time."""
    if node_id is None:
        return None
    source = sources_of([(s, pr) for _, _, s, pr, _, _ in rows], sha)
    streak = []
    for rid, name, s, pr, node, bad in sorted(rows, key=lambda row: -int(row[0])):
        if int(node) != node_id or source(s, pr) == "own":
            continue
        if not int(bad):
            break
        streak.append((name, source(s, pr)))
    names, sources = {n for n, _ in streak}, {src for _, src in streak}
    if len(streak) < ONLY_MIN_FAILED or len(sources) < MIN_SOURCES or len(names) < 2:
        return None
    return (f"the pool's {len(names)} runners failed it with infra errors in all its {len(streak)} recent runs of "
            f"other pull requests and main commits, none passing (an image or driver change?)")


@dataclass(frozen=True)
class PoolSpell:
    """A test of ``tier`` that `pool_wide` calls the pool's (``text``, its words), no runner's."""

    tier: str
    node: str
    text: str


@dataclass(frozen=True)
class PoolReview:
    """``tier``'s window judged as the verdicts judge a failure in it: ``runners`` every named
    runner there, ``out_of_line`` the `OutOfLine` records of those out of line with the pool (the
    smallest p first), ``spells`` the tests failing on the whole pool, by test id."""

    tier: str
    runners: tuple[str, ...]
    out_of_line: tuple[OutOfLine, ...]
    spells: tuple[PoolSpell, ...]


def pool_review(store: Store, repo: str, tier: str, *, as_of: int | None = None) -> PoolReview:
    """The `PoolReview` of ``tier``'s newest `WINDOW` reports (of ``repo``; every repository when
    empty): `out_of_line` asked of each named runner and `pool_wide` of each test failed so there,
    for no judged run (every report of the window is another source), one read of the window."""
    rows = _window(store, repo, tier, as_of)
    names = sorted({str(name) for _, name, *_ in rows if name})
    found = sorted((o for name in names if (o := _out_of_line(rows, name, "", None)) is not None),
                   key=lambda o: (o.p, o.runner))
    by_node: dict[int, list[tuple]] = {}
    for row in rows:
        by_node.setdefault(int(row[4]), []).append(row)
    # a test's own rows suffice (no judged run: no source is "own"); all of them, per test, would be quadratic
    texts = {node: why for node, mine in sorted(by_node.items())
             if any(int(row[5]) for row in mine) and (why := pool_wide(mine, "", node)) is not None}
    marks = ", ".join("?" * len(texts))
    nodes = {int(i): str(n) for i, n in store.fetchall(f"SELECT id, node FROM nodes WHERE id IN ({marks})",
                                                       list(texts))} if texts else {}
    spells = tuple(sorted((PoolSpell(tier, nodes.get(i, str(i)), text) for i, text in texts.items()),
                          key=lambda spell: spell.node))
    return PoolReview(tier, tuple(names), tuple(found), spells)
