"""A remote service's outage: many tests failing at once because a hub or registry is down.

Contract: `outage(store, error)` takes a failure's error line that names a remote service
(`ci.history.errors.service`: a hub's HTTP 5xx or 429, a refused or timed-out connection to a
registry, huggingface_hub's unreachable hub) and reads the failures of the newest `WINDOW`
reports up to ``as_of`` whose error names the same service. One such failure is a hiccup (a
flake's business, `ci.history.errors.environment_kind`'s ``remote``); at least `MIN_TESTS`
tests in runs of at least `MIN_SOURCES` pull requests or main commits is an outage: a window of
time that fails every test needing the service, in main's runs and everyone's, whatever the
commit. Returns the `Outage`, or None when the error names no service or the spell is narrower.
"""

from __future__ import annotations

from dataclasses import dataclass

from ci.history.errors import HUB, is_check, is_generic, service
from ci.history.store import Store
from ci.history.verdict_queries import repo_condition, source_of

OUTAGE = "outage"
WINDOW = 40  # reports read back from the judged one (a few runs): an outage fails them all at once
MIN_TESTS = 4
MIN_SOURCES = 1

_ROWS = """SELECT r.id, r.ingested_at, r.pr, r.sha, c.node_id, c.error FROM reports r JOIN cases c ON c.report_id = r.id
    WHERE r.id > ? AND r.id <= ? AND c.kind IN ('fail', 'broken') AND (c.error LIKE ?{more})"""
_HUB_WORDS = ("%LocalEntryNotFound%", "%local cache%")  # hub errors that name no host


@dataclass(frozen=True)
class Outage:
    """``service`` failed ``tests`` tests in ``runs`` reports of ``sources`` pull requests and main
    commits, from ``first`` to ``last`` (ingest times)."""

    service: str
    tests: int
    runs: int
    sources: int
    first: str
    last: str

    def describe(self) -> str:
        """``huggingface.co failed or could not be reached: an outage, not a commit (it failed 12 tests ...)``"""
        return (f"{self.service} failed or could not be reached: an outage, not a commit (it failed {self.tests} "
                f"tests in {self.runs} runs of {self.sources} pull requests and main commits from {self.first[:16]} "
                f"to {self.last[:16]})")


def outage(store: Store, error: str, *, as_of: int | None = None) -> Outage | None:
    """The outage of the service ``error`` names, if the recent history shows one (see the module docstring)."""
    name = service(error)
    if not name:
        return None
    newest = _newest(store, as_of)
    words = _HUB_WORDS if name == HUB else ()
    rows = store.fetchall(_ROWS.format(more=" OR c.error LIKE ?" * len(words)), (newest - WINDOW, newest, f"%{name}%",
                                                                                 *words))
    spell = sorted((int(rid), str(at), pr, str(sha), int(node)) for rid, at, pr, sha, node, text in rows
                   if service(str(text or "")) == name)
    sources = {source_of(pr, sha) for _, _, pr, sha, _ in spell}
    tests = len({node for *_, node in spell})
    if tests < MIN_TESTS or len(sources) < MIN_SOURCES:
        return None
    return Outage(name, tests, len({rid for rid, *_ in spell}), len(sources), spell[0][1], spell[-1][1])


SHAPE_WINDOW = 200  # reports read back for an outage told by its shape: a few hours of a busy CI
SHAPE_MIN_FILES = 2
DENSE = 0.5  # of the spell's tests' runs since its first failure, the share failing so: an outage fails most
MIN_EVIDENCE = 2  # sources whose failing code passed the same test before: one could be its own change

_SPELL = """SELECT r.id, r.ingested_at, r.pr, r.sha, r.base_sha, r.runner, c.node_id, n.file FROM reports r
    JOIN cases c ON c.report_id = r.id JOIN nodes n ON n.id = c.node_id
    WHERE {repo}r.id > ? AND r.id <= ? AND c.kind IN ('fail', 'broken') AND c.fingerprint = ?"""
_SEEN = """SELECT r.id, c.node_id, c.kind, c.fingerprint FROM reports r JOIN cases c ON c.report_id = r.id
    WHERE {repo}r.id >= ? AND r.id <= ? AND c.node_id IN ({nodes})"""
_PASSED = """SELECT r.id, r.sha, r.pr, c.node_id FROM reports r JOIN cases c ON c.report_id = r.id
    WHERE {repo}r.id <= ? AND c.kind = 'pass' AND c.node_id IN ({nodes}) AND r.sha IN ({shas})"""


@dataclass(frozen=True)
class TimedOutage:
    """An outage told by its shape (`timed_outage`): ``message`` failed ``tests`` tests of ``files``
    files in ``runs`` reports from ``first`` to ``last`` (ingest times); in runs of ``evidence``
    pull requests and main commits the failing code passed the same test in another report; ``runner``
    when all the failures ran on one."""

    message: str
    tests: int
    files: int
    runs: int
    evidence: int
    first: str
    last: str
    runner: str = ""

    def describe(self) -> str:
        """``outage: OSError: ... failed 12 tests in 9 runs from ... to ...: ...``"""
        where = f" on runner {self.runner}" if self.runner else ""
        return (f"outage: {self.message[:120]} failed {self.tests} tests in {self.runs} runs{where} from "
                f"{self.first[:16]} to {self.last[:16]}: a window of time, not a commit (in runs of {self.evidence} "
                f"pull requests and main commits the same code had passed them)")


def timed_outage(store: Store, error: str, fingerprint: str, *, repo: str = "",
                 as_of: int | None = None) -> TimedOutage | None:
    """The outage ``error`` belongs to, told by its shape whatever it says, or None.

    Of the newest `SHAPE_WINDOW` reports up to ``as_of``, the failures with ``fingerprint`` (the
    error line's `ci.history.classify.signature`) make the spell. It is an outage when it holds
    `MIN_TESTS` or more tests of `SHAPE_MIN_FILES` or more files; since its first failure those
    tests failed so in `DENSE` or more of their runs (a flake fails now and then); and it follows
    time, not code: in runs of `MIN_EVIDENCE` or more pull requests and main commits, a failing
    run's code passed that test in another report (its own commit or head again, or a pull
    request's merge base in main's run). A breakage at commit C fails every run holding C and passes every run before
    it, so only the breaking pull request's own runs show such a pass (one source), never two.

    Its line must be one a service or a machine can raise: never the test's own check
    (`ci.history.errors.is_check`: an assertion, ``Tensor-likes are not close!``). An outage fails
    a test where it reaches the service or the device (a connection, a file, a CUDA call), before
    its comparison; a check that fails ran to the end and got a wrong value, as several flaky
    tests sharing one tolerance message do at once now and then."""
    if not fingerprint or is_generic(error) or is_check(error):
        return None
    newest = _newest(store, as_of)
    where, given = repo_condition(repo)
    rows = sorted(store.fetchall(_SPELL.format(repo=where), (*given, newest - SHAPE_WINDOW, newest, fingerprint)))
    nodes = {int(row[6]) for row in rows}
    if len(nodes) < MIN_TESTS or len({row[7] for row in rows}) < SHAPE_MIN_FILES:
        return None
    marks = ", ".join("?" * len(nodes))
    seen: dict[tuple[int, int], bool] = {}
    for rid, node, kind, fp in store.fetchall(_SEEN.format(repo=where, nodes=marks),
                                              (*given, int(rows[0][0]), newest, *sorted(nodes))):
        key = (int(rid), int(node))
        seen[key] = seen.get(key, False) or (kind in ("fail", "broken") and fp == fingerprint)
    if sum(seen.values()) < DENSE * len(seen):
        return None
    evidence = _evidence(store, rows, where, given, newest)
    if evidence < MIN_EVIDENCE:
        return None
    runners = {str(row[5]) for row in rows}
    return TimedOutage(error, len(nodes), len({row[7] for row in rows}), len({row[0] for row in rows}), evidence,
                       str(rows[0][1]), str(rows[-1][1]), runners.pop() if len(runners) == 1 else "")


def _evidence(store: Store, rows: list[tuple], where: str, given: list[str], newest: int) -> int:
    """How many sources (a pull request, a main commit) failed a test at code that passed it in
    another report: the same commit or pull request head, or a pull request's merge base in a run
    of main's (another pull request passing at that base may be the fix itself, so it does not count)."""
    shas = sorted({str(row[3]) for row in rows} | {str(row[4]) for row in rows if row[2] is not None and row[4]})
    nodes = sorted({int(row[6]) for row in rows})
    passed: dict[tuple[str, int], set[int]] = {}  # (commit, node) -> the reports that passed it there
    on_main: set[tuple[str, int]] = set()
    for rid, sha, pr, node in store.fetchall(_PASSED.format(repo=where, nodes=", ".join("?" * len(nodes)),
                                                            shas=", ".join("?" * len(shas))),
                                             (*given, newest, *nodes, *shas)):
        passed.setdefault((str(sha), int(node)), set()).add(int(rid))
        if pr is None:
            on_main.add((str(sha), int(node)))
    sources = set()
    for rid, _, pr, sha, base, _, node, _ in rows:
        again = bool(passed.get((str(sha), int(node)), set()) - {int(rid)})  # a retry within the run is no other time
        if again or pr is not None and bool(base) and (str(base), int(node)) in on_main:
            sources.add(source_of(pr, str(sha)))
    return len(sources)


def _newest(store: Store, as_of: int | None) -> int:
    """The newest report id to read up to: ``as_of``, else the store's last."""
    return as_of if as_of is not None else int((store.fetchall("SELECT MAX(id) FROM reports")[0][0]) or 0)
