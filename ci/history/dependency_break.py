"""A dependency's release breaking the default branch: told apart from a remote service's outage.

A project that installs a dependency unpinned (``pip install transformers``, a torch nightly)
gets its new release on the next run. When the release changes an API the tests use, every run
from then on fails those tests, on the default branch and in every pull request, at code that
passed them the day before, until a commit pins the dependency or adapts to it. By its shape
that is `ci.history.outages.timed_outage`'s window of time, not a commit; but it is no outage (a
service that comes back by itself): nothing changes until a maintainer acts on the default
branch, so it is ``broken_on_main``, worded so that the dependency is named as the cause.

Contract. `api_mismatch(line)` reads an error line as Python words a call into code that does not
have the API the caller expects (CPython's own messages):

- ``ImportError: cannot import name 'X' from 'pkg.mod' (/.../site-packages/pkg/mod.py)``: names
  ``pkg.mod``; when the line gives the module's file and it is not under a ``site-packages`` or
  ``dist-packages`` folder, the module is the project's own (or a mount's), no installed package's;
- ``ModuleNotFoundError: No module named 'pkg.sub'`` for a dotted name (a module moved inside a
  package; a missing top-level package is an install step's failure, not an API): ``pkg.sub``;
- ``AttributeError: module 'pkg' has no attribute 'x'``: ``pkg``; ``AttributeError: 'Cls'
  object has no attribute 'x'`` and ``type object 'Cls' ...``: ``Cls`` (never ``'NoneType'``: a
  value that is missing, such as a download that returned nothing, is no API);
- ``TypeError: f() got an unexpected keyword argument 'x'``, ``... missing N required ...
  argument(s)``, ``... takes N positional argument(s) but M were given``: ``f``.

An assertion quoting such text is the test's own check and is none. `dependency_break` reads the
default branch's own runs of every test it failed with that signature: pushes, nightlies and its
merge queue (a queue run at main's commit before its batch, the batch's base; never a batch that
holds the judged change's pull request, whose own change may be what fails). For each test and
tier, the failures with the signature back from its newest one until a run that did not fail so
are main's spell; when they span `MIN_MAIN_COMMITS` or more distinct commits, the break persists
on main across commits and the answer is a `DependencyBreak` (``since``: the spell's oldest
commit; ``passing_again`` when a later main run of such a test passed: pinned or adapted since).

`dependency_verdict` asks it for two kinds of failure (`ci.history.verdict.judge`): one that the
timed outage rule took for a window of time (`ci.history.outages.timed_outage`: many tests of
several files, at code that passed them before), which then is ``broken_on_main`` worded as the
dependency's (not a commit's, no outage: pin or adapt on main); and one the other rules called
``new`` (no outage's shape seen), worded with main's runs as the evidence and the dependency as a
reading. Fewer main commits (a tier main never runs, a break main has not run into yet) return
None: the outage, or ``new``, stands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ci.history.errors import is_generic
from ci.history.model import MAIN_EVIDENCE_EVENTS
from ci.history.outages import TimedOutage
from ci.history.store import Store
from ci.history.verdict_model import Failure, Verdict
from ci.history.verdict_queries import cut, repo_condition
from ci.history.verdict_tally import BROKEN_ON_MAIN, short

MIN_MAIN_COMMITS = 2

_NAME = r"[A-Za-z_][\w.]*"
_API = (
    re.compile(rf"^\s*ImportError: cannot import name '?({_NAME})'? from '({_NAME})'"),
    re.compile(rf"^\s*ModuleNotFoundError: No module named '({_NAME}\.{_NAME})'"),
    re.compile(rf"^\s*AttributeError: (?:module|type object|partially initialized module) '({_NAME})' has no attribute"),
    re.compile(rf"^\s*AttributeError: '(?!NoneType')({_NAME})' object has no attribute"),
    re.compile(rf"^\s*TypeError: ({_NAME})\(\) (?:got an unexpected keyword argument|missing \d+ required "
               r"(?:positional|keyword-only) arguments?|takes (?:from )?\d+ (?:to \d+ )?positional arguments? but)"),
)
_FROM_PATH = re.compile(r"^\s*ImportError: cannot import name .* from '[\w.]+' \(([^)]*)\)")
_INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\]|^unknown location$")

# The default branch's runs (a merge queue's at main's commit before its batch) of every test it
# ever failed with one signature, oldest first.
_MAIN = """SELECT c.node_id, r.tier, r.id, CASE WHEN r.event = 'merge_group' AND r.base_sha <> '' THEN r.base_sha
    ELSE r.sha END, r.ingested_at, c.kind, c.fingerprint, r.batch FROM reports r JOIN cases c ON c.report_id = r.id
    WHERE {repo}r.scored = 1 AND r.event IN ({events}) AND c.kind IN ('pass', 'fail', 'broken'){until}
    AND c.node_id IN (SELECT c2.node_id FROM cases c2 JOIN reports r2 ON r2.id = c2.report_id
                      WHERE c2.fingerprint = ? AND r2.event IN ({events}){until2})
    ORDER BY r.id, c.attempt"""


def api_mismatch(line: str) -> str:
    """The module or callable an error line says lacks the API its caller expects, or ``""`` (see
    the module docstring). ``ImportError`` names the module imported from, not the name."""
    where = _FROM_PATH.search(line)
    if where and not _INSTALLED.search(where.group(1)):
        return ""  # a module the line places outside the interpreter's packages: the project's own, or a mount
    for pattern in _API:
        found = pattern.match(line)
        if found:
            return found.group(found.lastindex or 1) if pattern is _API[0] else found.group(1)
    return ""


def package_of(name: str) -> str:
    """The top-level package of a dotted module name (``transformers.pytorch_utils`` -> ``transformers``)."""
    return name.split(".", 1)[0]


@dataclass(frozen=True)
class DependencyBreak:
    """``error`` (an API mismatch with ``names``) failed the default branch at ``commits`` distinct
    commits in ``runs`` of its reports from ``since`` (its oldest failing commit, ingested at
    ``first``); the spell that showed it failed ``tests`` tests in ``spell_runs`` reports; ``passing_again``
    when main passed one of those tests after its failures (pinned or adapted since)."""

    error: str
    names: str
    since: str
    first: str
    commits: int
    runs: int
    tests: int
    spell_runs: int
    passing_again: bool = False

    def describe(self) -> str:
        """The verdict's detail: the dependency as the cause and what a maintainer does about it."""
        module = self.error.lstrip().startswith(("ImportError", "ModuleNotFoundError", "AttributeError: module"))
        what = f"the installed {package_of(self.names)}" if module else f"{self.names}() as installed"
        if not self.tests:  # no outage's shape seen: main's runs are the evidence, the dependency a reading
            return (f"broken on main since {short(self.since)}: main's own runs (pushes, nightlies, its merge queue) "
                    f"failed it so at {self.commits} commits since {self.first[:16]}, with an API mismatch: {what} "
                    f"lacks what the tests call ({self.error[:120]}); if a new release of it is the cause, pin it or "
                    f"adapt to it on main" + ("; main passes it again since: merge the default branch"
                                              if self.passing_again else ""))
        return (f"broken on main since {short(self.since)} by a dependency, not a commit: {what} no longer has the API "
                f"the tests call ({self.error[:120]}); main's own runs (pushes, nightlies, its merge queue) failed so at "
                f"{self.commits} commits since "
                f"{self.first[:16]}, as the spell failed {self.tests} tests in {self.spell_runs} runs, "
                f"at code that passed before: a new release of something CI installs unpinned. Not this "
                f"change's and no outage (a rerun will not pass): "
                + ("main passes it again since, so merge the default branch" if self.passing_again
                   else "pin the dependency or adapt to it on main"))


def dependency_break(store: Store, error: str, fingerprint: str, *, tests: int = 0, runs: int = 0, sha: str = "",
                     repo: str = "", as_of: int | None = None) -> DependencyBreak | None:
    """The `DependencyBreak` a timed outage's failure is, or None (see the module docstring).
    ``tests`` and ``runs``: the timed outage's counts, for the detail (0: no outage's shape was seen);
    ``sha``: the judged run's commit, whose pull requests' own merge queue batches are no evidence."""
    names = api_mismatch(error)
    if not names or not fingerprint or is_generic(error):
        return None
    where, given = repo_condition(repo)
    until, limit = cut(as_of)
    until2, _ = cut(as_of, "r2.id")
    events = ", ".join("?" * len(MAIN_EVIDENCE_EVENTS))
    seen_by: dict[tuple[int, str], list[tuple[int, str, str, bool]]] = {}  # (test, tier) -> main's runs of it
    own = _own_prs(store, sha)
    for node, tier, rid, commit, at, kind, fp, batch in store.fetchall(
            _MAIN.format(repo=where, events=events, until=until, until2=until2),
            (*given, *MAIN_EVIDENCE_EVENTS, *limit, fingerprint, *MAIN_EVIDENCE_EVENTS, *limit)):
        if own & set(str(batch or "").split(",")):
            continue  # the judged change's own queue runs: its change, not main's
        seen_by.setdefault((int(node), str(tier)), []).append((int(rid), str(commit), str(at),
                                                                kind != "pass" and fp == fingerprint))
    block: dict[int, tuple[str, str]] = {}  # report id -> (commit, ingest time) of main's newest failing spell
    fixed = False
    for seen in seen_by.values():
        newest = max((k for k, run in enumerate(seen) if run[3]), default=None)
        if newest is None:
            continue
        fixed = fixed or any(not failed for *_, failed in seen[newest + 1:])
        k = newest
        while k >= 0 and seen[k][3]:
            block[seen[k][0]] = (seen[k][1], seen[k][2])
            k -= 1
    commits = list(dict.fromkeys(block[rid] for rid in sorted(block)))
    distinct = len({commit for commit, _ in commits})
    if distinct < MIN_MAIN_COMMITS:
        return None
    return DependencyBreak(error, names, commits[0][0], commits[0][1], distinct, len(block), tests, runs, fixed)


def _own_prs(store: Store, sha: str) -> set[str]:
    """The pull requests a commit's runs belong to: its own, or its merge queue batch's."""
    if not sha:
        return set()
    out: set[str] = set()
    for pr, batch in store.fetchall("SELECT DISTINCT pr, batch FROM reports WHERE sha = ?", (sha.lower(),)):
        out |= {str(pr)} if pr is not None else set()
        out |= {b for b in str(batch or "").split(",") if b}
    return out


def dependency_verdict(store: Store, f: Failure, spell: TimedOutage | None, *,
                       as_of: int | None = None) -> Verdict | None:
    """``broken_on_main`` for failure ``f`` when it is a `DependencyBreak`, else None. ``spell``:
    the timed outage it belongs to (the caller's outage stands on None), or None for a failure the
    other rules called ``new``."""
    found = dependency_break(store, f.error, f.fingerprint, tests=spell.tests if spell else 0,
                             runs=spell.runs if spell else 0, sha=f.sha, repo=f.repo, as_of=as_of)
    if found is None:
        return None
    return Verdict(f.node, f.tier, f.sha, BROKEN_ON_MAIN, found.describe(), f.error, f.fingerprint, f.runner,
                   since=found.since)
