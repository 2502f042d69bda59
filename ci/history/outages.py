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

from ci.history.errors import HUB, service
from ci.history.store import Store

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
    newest = as_of if as_of is not None else int((store.fetchall("SELECT MAX(id) FROM reports")[0][0]) or 0)
    words = _HUB_WORDS if name == HUB else ()
    rows = store.fetchall(_ROWS.format(more=" OR c.error LIKE ?" * len(words)), (newest - WINDOW, newest, f"%{name}%",
                                                                                 *words))
    spell = sorted((int(rid), str(at), pr, str(sha), int(node)) for rid, at, pr, sha, node, text in rows
                   if service(str(text or "")) == name)
    sources = {("pr", int(pr)) if pr is not None else ("sha", sha) for _, _, pr, sha, _ in spell}
    tests = len({node for *_, node in spell})
    if tests < MIN_TESTS or len(sources) < MIN_SOURCES:
        return None
    return Outage(name, tests, len({rid for rid, *_ in spell}), len(sources), spell[0][1], spell[-1][1])
