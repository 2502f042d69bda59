"""Flakiness per test node and tier, from evidence that the code did not change.

The rule (docs/history.md#the-score says why):

- A node's attempts on a tier are grouped by commit (repo, sha), in the order their reports were
  ingested. Skipped and *broken* attempts (`ci.history.classify`) never count: breakage is the
  code's doing. What is left of a group is a pass group, a fail group, or mixed (a failure and a
  pass on one sha: flaky for certain).
- Default-branch groups (a push or nightly report among them) form the branch's sequence. Their
  every attempt is a trial, except those of a *fail streak* (consecutive fail groups) of
  `STREAK_LIMIT` or more commits, or one not yet ended by a pass, or one with no pass before it:
  that is the code breaking (and maybe being fixed), not chance; so is a closed *breakage window*
  (`closed_breakage`: two or more fail commits between passes that each failed every retry, or
  whose failures all read one specific error that the node's other flaky evidence never showed:
  broken, then fixed or reverted; or one such commit whose retry failed too, when no other flake
  of the node could have printed that error and no other window shows it). What is left, a
  single fail commit or a short streak of a flake's own kind between passes, is a flip, and its
  failures are flaky evidence.
- Other groups (pull requests, bot reruns) add only their retries, every attempt after the
  first: whether a retry happens depends on the first outcome, but a retry's own outcome does not,
  so this keeps the failure-rate estimate unbiased. A group that never passed adds nothing (the
  pull request may have broken the test).
- Infra failures (``cases.infra``: no GPU, a CUDA or NCCL error, the OOM killer, a lost runner, a
  signal) never count either: they are the machine's, and a bad runner must not get tests quarantined.
  Only the verdicts pass ``own`` (`ci.history.infra_flakes`): the infra failures that follow a test
  over several runners then count as its own attempts.
- Only scored reports count (``reports.scored``): a pull request's own JUnit, ingested for its
  verdicts, never moves a score or a quarantine. Verdicts ask with ``unscored=True``: then the
  unscored reports count by the rule for other groups above, so a flake that failed and passed on
  retry in some pull request's run (the same code passing) lends its error to the flake's
  signatures, which a quarantine never reads.
- The score is the mean of the failure rate's posterior under the Jeffreys prior,
  Beta(failures + 1/2, trials - failures + 1/2), with its equal-tailed credible interval (90 % by
  default): the interval with the best frequentist coverage among the simple binomial ones
  (Brown, Cai and DasGupta, 2001). A node is listed only with at least one flaky failure.

`flaky_scores` reads only the nodes that ever failed (one partial index) and their history (one
primary-key lookup per report and node), so its cost grows with the failing part of the history,
not all of it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

from ci.history.beta import beta_ppf
from ci.history.errors import environment_kind, is_generic
from ci.history.model import (BROKEN, DEFAULT_BRANCH_EVENTS, FAIL, PASS, EvidenceRow, FlakyScore,
                              Interval)
from ci.history.store import Store

STREAK_LIMIT = 3
DEFAULT_LEVEL = 0.90
PRIOR = 0.5  # Jeffreys: Beta(1/2, 1/2)
MAX_EXAMPLES = 3
NO_TEXT = "(retried attempt: pytest's JUnit keeps no failure text)"
_CHUNK = 500


@dataclass
class Evidence:
    """What one node's history on one tier says (see the module docstring)."""

    failures: int = 0
    trials: int = 0
    flaky_failures: int = 0
    broken: int = 0
    reports: set[int] = field(default_factory=set)
    flaky_rows: list[EvidenceRow] = field(default_factory=list)


@dataclass
class _Group:
    default: bool = False
    attempts: list[EvidenceRow] = field(default_factory=list)

    @property
    def fails(self) -> list[EvidenceRow]:
        return [a for a in self.attempts if a.kind == FAIL]

    @property
    def status(self) -> str:
        kinds = {a.kind for a in self.attempts}
        return "mixed" if kinds == {PASS, FAIL} else ("fail" if FAIL in kinds else "pass")


def evidence(rows: Iterable[EvidenceRow], own: Callable[[EvidenceRow], bool] | None = None) -> Evidence:
    """Fold one node's attempts on one tier, in ingest order, by the rule above; an infra failure
    for which ``own`` is true counts as the test's (`ci.history.infra_flakes`: verdicts only)."""
    out = Evidence()
    groups: dict[tuple[str, str], _Group] = {}
    for row in rows:
        out.reports.add(row.report_id)
        group = groups.setdefault((row.repo, row.sha), _Group())
        group.default = group.default or row.event in DEFAULT_BRANCH_EVENTS
        if row.infra and not (own is not None and own(row)):
            continue
        if row.kind == BROKEN:
            out.broken += 1
        elif row.kind in (PASS, FAIL):
            group.attempts.append(row)
    live = [g for g in groups.values() if g.attempts]
    for group in (g for g in live if not g.default and g.status != "fail"):
        out.trials += len(group.attempts) - 1
        out.failures += sum(a.kind == FAIL for a in group.attempts[1:])
        if group.status == "mixed":
            _flaky(out, group.fails)
    branch = [g for g in live if g.default]
    windows: list[Sequence[_Group]] = []  # judged once the flips have shown the flake's own errors
    i = 0
    while i < len(branch):
        if branch[i].status != "fail":
            _count(out, branch[i].attempts)
            if branch[i].status == "mixed":
                _flaky(out, branch[i].fails)
            i += 1
            continue
        end = i
        while end < len(branch) and branch[end].status == "fail":
            end += 1
        if end - i < STREAK_LIMIT and i > 0 and end < len(branch):  # passes on both sides
            windows.append(branch[i:end])
        i = end
    # an error that ends in a pass again and again is intermittent: a flake's, whatever each window looks like
    seen = Counter(fp for window in windows for fp in {a.fingerprint for g in window for a in g.fails if a.fingerprint})
    recurring = {fp for fp, n in seen.items() if n >= 2}
    for window in sorted(windows, key=len):
        if not closed_breakage(window, {r.fingerprint for r in out.flaky_rows if r.fingerprint} | recurring,
                               any(not r.fingerprint for r in out.flaky_rows)):
            for group in window:
                _count(out, group.attempts)
                _flaky(out, group.attempts)
    return out


def closed_breakage(window: Sequence[_Group], flake_prints: set[str], textless_flakes: bool = False) -> bool:
    """Whether consecutive fail commits between passes were the code broken and then fixed (a revert,
    a fix): two or more commits that each failed every retry (two or more failed attempts), or
    whose failures all read one specific error that is none of ``flake_prints`` (the signatures of
    the node's other flaky evidence). One commit alone is a flip (flaky evidence) unless its retry
    failed too with such an error, no environmental one (`environment_kind`: a server that did not
    start, a port in use), and no other flake of the node could have printed it (``textless_flakes``:
    some of its flaky failures kept no text): a breakage reverted before the test ran again looks
    like that, and a test with no flake that could have printed it has no flake to explain it."""
    if len(window) >= 2 and all(len(g.fails) >= 2 for g in window):
        return True
    lines = {(a.fingerprint, a.message) for g in window for a in g.fails if a.fingerprint}
    if len(lines) != 1 or not all(any(a.fingerprint for a in g.fails) for g in window):
        return False
    fingerprint, message = next(iter(lines))
    specific = not is_generic(message) and fingerprint not in flake_prints
    if len(window) >= 2:
        return specific
    return specific and len(window[0].fails) >= 2 and not environment_kind(message) and not textless_flakes


def _count(out: Evidence, attempts: Sequence[EvidenceRow]) -> None:
    out.trials += len(attempts)
    out.failures += sum(a.kind == FAIL for a in attempts)


def _flaky(out: Evidence, fails: Sequence[EvidenceRow]) -> None:
    out.flaky_failures += len(fails)
    out.flaky_rows.extend(fails)


def posterior(failures: int, trials: int, level: float = DEFAULT_LEVEL) -> tuple[float, Interval]:
    """The posterior mean failure rate and its equal-tailed ``level`` credible interval."""
    if not 0 <= failures <= trials:
        raise ValueError(f"failures {failures} not within 0..trials {trials}")
    if not 0 < level < 1:
        raise ValueError(f"credible level {level} not within (0, 1)")
    a, b = failures + PRIOR, trials - failures + PRIOR
    tail = (1.0 - level) / 2.0
    return a / (a + b), Interval(beta_ppf(tail, a, b), beta_ppf(1.0 - tail, a, b))


def score(node: str, file: str, tier: str, ev: Evidence, level: float = DEFAULT_LEVEL) -> FlakyScore:
    """A `FlakyScore` from a node's `Evidence` (owner left empty for the caller)."""
    mean, interval = posterior(ev.failures, ev.trials, level)
    prints = Counter((r.fingerprint, r.message or NO_TEXT) for r in ev.flaky_rows)
    latest = sorted(ev.flaky_rows, key=lambda r: (r.report_id, r.attempt), reverse=True)
    examples: list[str] = []
    for row in latest:
        if row.run_url and row.run_url not in examples:
            examples.append(row.run_url)
    return FlakyScore(node, file, tier, mean, interval, ev.failures, ev.trials, ev.flaky_failures, ev.broken,
                      len(ev.reports), tuple((fp, text, n) for (fp, text), n in prints.most_common()),
                      latest[0].ingested_at if latest else "", tuple(examples[:MAX_EXAMPLES]))


def rank(scores: Iterable[FlakyScore]) -> list[FlakyScore]:
    """Most certainly flaky first: by the interval's lower end, then the score, then the node."""
    return sorted(scores, key=lambda s: (-s.interval.low, -s.score, s.node, s.tier))


# CROSS JOIN makes SQLite walk the reports and look each candidate up by the primary key
# (report_id, node_id, attempt); PostgreSQL plans it as the inner join it is.
_HISTORY = """SELECT n.node, n.file, r.tier, r.repo, r.sha, r.event, r.id, c.attempt, c.kind, c.fingerprint,
    c.message, r.run_url, r.ingested_at, c.infra
    FROM reports r CROSS JOIN cases c JOIN nodes n ON n.id = c.node_id
    WHERE c.report_id = r.id{scored} AND c.node_id IN ({marks}){tier}
    ORDER BY c.node_id, r.tier, r.id, c.attempt"""


def node_ids(store: Store, nodes: Sequence[str]) -> dict[str, int]:
    """{test id: node id} of the ``nodes`` the store knows."""
    ids: dict[str, int] = {}
    for start in range(0, len(nodes), _CHUNK):
        chunk = list(nodes[start:start + _CHUNK])
        ids.update((str(n), int(i)) for i, n in store.fetchall(
            f"SELECT id, node FROM nodes WHERE node IN ({', '.join('?' * len(chunk))})", chunk))
    return ids


def candidate_nodes(store: Store) -> list[int]:
    """Ids of the nodes with at least one non-broken failure (the partial index ``cases_failed``)."""
    return sorted(int(r[0]) for r in store.fetchall("SELECT DISTINCT node_id FROM cases WHERE kind = 'fail'"))


def flaky_scores(store: Store, *, tier: str | None = None, min_trials: int = 1,
                 level: float = DEFAULT_LEVEL, nodes: Sequence[str] | None = None,
                 as_of: int | None = None, unscored: bool = False,
                 own: Callable[[EvidenceRow], bool] | None = None) -> list[FlakyScore]:
    """Every (node, tier) with flaky evidence and at least ``min_trials`` trials, ranked; with
    ``nodes``, only those test ids; with ``as_of``, from reports up to that id only; with
    ``unscored``, unscored reports too (see the module docstring); with ``own``, the infra
    failures it owns as the test's (`evidence`)."""
    out: list[FlakyScore] = []
    ids = candidate_nodes(store)
    if nodes is not None:
        wanted = set(node_ids(store, sorted(set(nodes))).values())
        ids = [i for i in ids if i in wanted]
    for key, history in node_histories(store, ids, tier, as_of=as_of, unscored=unscored):
        ev = evidence(history, own)
        if ev.flaky_failures and ev.trials >= min_trials:
            out.append(score(key[0], key[1], key[2], ev, level))
    return rank(out)


def node_histories(store: Store, ids: Sequence[int], tier: str | None = None, *, as_of: int | None = None,
                   unscored: bool = False) -> Iterator[tuple[tuple[str, str, str], list[EvidenceRow]]]:
    """Each (node, file, tier) of the node ``ids`` (on ``tier`` only, when given) with its stored
    attempts of scored reports (and unscored ones with ``unscored``; up to report id ``as_of``, when
    given), ordered by report id, then attempt."""
    extra = (" AND r.tier = ?" if tier else "") + (" AND r.id <= ?" if as_of is not None else "")
    params = ([tier] if tier else []) + ([as_of] if as_of is not None else [])
    for start in range(0, len(ids), _CHUNK):
        chunk = list(ids[start:start + _CHUNK])
        query = _HISTORY.format(marks=", ".join("?" * len(chunk)), tier=extra,
                                scored="" if unscored else " AND r.scored = 1")
        yield from _by_node_tier(store.fetchall(query, [*chunk, *params]))


def _by_node_tier(rows: Sequence[tuple]) -> Iterable[tuple[tuple[str, str, str], list[EvidenceRow]]]:
    current: tuple[str, str, str] | None = None
    batch: list[EvidenceRow] = []
    for node, file, tier, repo, sha, event, report_id, attempt, kind, fp, message, url, seen, infra in rows:
        key = (node, file, tier)
        if key != current:
            if current is not None:
                yield current, batch
            current, batch = key, []
        batch.append(EvidenceRow(node, tier, repo, sha, event, int(report_id), int(attempt), kind, fp, message,
                                 url, seen, infra))
    if current is not None:
        yield current, batch
