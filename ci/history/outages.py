"""A remote service's outage as the history shows it: which tests and runs it failed, over what time.

Contract: `outage(store, service)` reads the failures ingest marked ``outage``
(`ci.history.errors.infra_kind`: a hub's HTTP 5xx, a registry timing out) whose error names
``service`` (`ci.history.errors.service`), newest first up to ``as_of``, and keeps the newest spell:
failures no more than `SPELL_GAP` apart. An outage is a window of time, not a commit: it fails
every test that needs the service, in main's runs and every pull request's alike, until the
service is back. None when the history holds no such failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ci.history.errors import OUTAGE, service as service_of
from ci.history.store import Store
from ci.history.verdict_queries import cut

SPELL_GAP = timedelta(hours=6)
_LOOKBACK = 5000  # outage failures read, newest first

_ROWS = """SELECT r.id, r.ingested_at, r.pr, r.sha, c.node_id, c.error FROM cases c JOIN reports r ON r.id = c.report_id
    WHERE c.infra = ?{until} ORDER BY r.id DESC LIMIT {limit}"""


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
        """``huggingface.co failed 12 tests in 9 runs of 5 pull requests and main commits from ... to ...``"""
        return (f"{self.service} failed {self.tests} test{'s' if self.tests != 1 else ''} in {self.runs} "
                f"run{'s' if self.runs != 1 else ''} of {self.sources} pull requests and main commits "
                f"from {self.first[:16]} to {self.last[:16]}")


def _when(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def outage(store: Store, service: str, *, as_of: int | None = None) -> Outage | None:
    """The newest spell of ``service``'s outage in the history (see the module docstring)."""
    until, limit = cut(as_of)
    rows = store.fetchall(_ROWS.format(until=until, limit=_LOOKBACK), (OUTAGE, *limit))
    spell, newer = [], None
    for rid, at, pr, sha, node_id, error in rows:  # newest first
        if service_of(str(error or "")) != service:
            continue
        when = _when(at)
        if newer is not None and when is not None and newer - when > SPELL_GAP:
            break
        newer = when or newer
        spell.append((int(rid), str(at), pr, str(sha), int(node_id)))
    if not spell:
        return None
    sources = {("pr", int(pr)) if pr is not None else ("sha", sha) for _, _, pr, sha, _ in spell}
    return Outage(service, len({n for *_, n in spell}), len({rid for rid, *_ in spell}), len(sources),
                  spell[-1][1], spell[0][1])


def outage_text(store: Store, error: str, *, as_of: int | None = None) -> str:
    """A verdict's detail for a failure marked ``outage``: the service its ``error`` names and,
    when the history shows it, the outage's spell."""
    name = service_of(error)
    spell = outage(store, name, as_of=as_of) if name else None
    where = f"{name} failed or could not be reached" if name else "a remote service failed or could not be reached"
    return f"infra: {where}, an outage, not a commit" + (f" ({spell.describe()})" if spell else "")
