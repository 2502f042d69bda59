"""Workflow dispatches that are never sent twice, and the links to the runs they start.

Each dispatch has a unique run-name (`run_name`: PR, tier, part, head SHA and the comment id), which
``rerun-test-dispatch.yml`` sets as its ``run-name``; GitHub lists it as the run's
``display_title``. That name is how the bot finds a run it started:

* a dispatch POST that failed ambiguously (timeout, dropped connection, 5xx) is looked up by
  run-name before any resend (bounded polling, `RunLookup.wait`); found means sent;
* a resumed comment (an earlier attempt crashed or failed after claiming it) looks up every run
  it is about to dispatch and sends only those that do not exist;
* the reply links each run: the dispatch asks for ``return_run_details``, so GitHub's answer names
  the run it started; a run found by the lookups above links itself; any other (a server that
  answered 204) is looked up (bounded polling, `RunLookup.link_wait`), else linked to the
  workflow's Actions tab.

A lookup reads the dispatch workflow's ``workflow_dispatch`` runs created since the comment was
posted (GitHub's ``created>=`` filter; `Dispatcher` ``since``), page after page until every name
is found or the listing ends: a `/rerun-tier` sends up to `fit.max_rows` (~178) runs, more than
one page of 100. GitHub lists at most 1,000 runs of a filtered listing (`LOOKUP_PAGES`).

What is left: GitHub may list a run a few seconds after accepting the dispatch. A lookup that
gives up before then (after `RunLookup.wait` seconds) and resends would start the run twice, so
`wait` should stay above GitHub's usual listing delay.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Callable, Collection

from tools.rerun.github import GitHubAPI, GitHubError, WorkflowRun

log = logging.getLogger(__name__)

DISPATCH_WORKFLOW = "rerun-test-dispatch.yml"
MAX_INPUT_CHARS = 65535  # GitHub's limit on a workflow_dispatch's inputs, all together
LOOKUP_PAGES = 10  # of 100 runs: GitHub lists no more than 1,000 runs of a filtered listing
SEARCH_PR = 0  # a culprit search's probes answer no pull request: their run-names say "PR #0"


@dataclass(frozen=True)
class DispatchSpec:
    """One run to dispatch: ``tests`` on ``tier``; ``part`` is ``targets`` or shard ``i/N``."""

    tier: str
    part: str
    runner: tuple[str, ...]
    tests: tuple[str, ...]


@dataclass(frozen=True)
class DispatchResult:
    """``state``: ``sent``; ``found`` (an earlier attempt had started it); ``failed`` (``error``
    says why); ``dry-run``. ``run_url`` links the run, or the Actions tab when not listed yet."""

    spec: DispatchSpec
    inputs: dict[str, str]
    run_name: str
    state: str
    error: str | None = None
    run_url: str | None = None

    @property
    def ok(self) -> bool:
        return self.state != "failed"


@dataclass(frozen=True)
class RunLookup:
    """Seconds: how long to look for a run before resending (``wait``) and for its link
    (``link_wait``), polling every ``interval``."""

    wait: float = 6.0
    link_wait: float = 4.0
    interval: float = 1.0


def dispatch_inputs(spec: DispatchSpec, pr: int, sha: str, comment_id: int, slot: str = "") -> dict[str, str]:
    """The workflow_dispatch inputs of one run (``rerun-test-dispatch.yml`` declares the same).
    ``slot``: ``k/M``, this run's place among the comment's M runs: its report writes in slot k of
    M (`budget.report_slot_wait`), so no two reports of one comment share a slot, whatever their tiers."""
    return {"pr": str(pr), "sha": sha, "tier": spec.tier, "part": spec.part,
            "runner": json.dumps(list(spec.runner)), "tests": " ".join(spec.tests), "comment_id": str(comment_id),
            "slot": slot}


def run_name(inputs: dict[str, str]) -> str:
    """The run-name ``rerun-test-dispatch.yml`` gives a run of these inputs (unique per dispatch)."""
    return (f"rerun-test PR #{inputs['pr']} {inputs['tier']} {inputs['part']} ({inputs['sha']}) "
            f"comment {inputs['comment_id']}")


_RUN_NAME = re.compile(r"rerun-test PR #(\d+) ([A-Za-z_][A-Za-z0-9_]*) (targets|\d+/\d+) \(([0-9a-f]{7,40})\) "
                       r"comment (\d+)")


def parse_run_name(title: str) -> dict[str, str] | None:
    """The inputs `run_name` wrote into ``title`` (pr, tier, part, sha, comment_id), or None for a
    title the bot did not write."""
    found = _RUN_NAME.fullmatch(title)
    if found is None:
        return None
    return dict(zip(("pr", "tier", "part", "sha", "comment_id"), found.groups()))


class Dispatcher:
    """Sends the dispatches of one comment (see the module docstring)."""

    def __init__(self, client: GitHubAPI, repo: str, workflow_file: str, ref: str, actions_url: str,
                 lookup: RunLookup = RunLookup(), sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, since: str | None = None):
        """``since``: when the comment was posted (ISO 8601); its runs cannot be older."""
        self.client, self.repo, self.workflow_file, self.ref = client, repo, workflow_file, ref
        self.actions_url, self.since = actions_url, since
        self.lookup, self.sleep, self.clock = lookup, sleep, clock

    def find(self, names: Collection[str], wait: float) -> dict[str, WorkflowRun]:
        """The listed runs whose run-name is in ``names``, polling until all are found or ``wait``
        seconds have passed; each poll reads page after page until all are found or the listing
        ends. Raises `GitHubError` when the runs cannot be listed."""
        wanted, found = set(names), {}
        deadline = self.clock() + wait
        while True:
            page, more = 1, True
            while more and len(found) < len(wanted) and page <= LOOKUP_PAGES:
                runs, more = self.client.workflow_runs_page(self.repo, self.workflow_file, page,
                                                            event="workflow_dispatch", created_since=self.since)
                for run in runs:
                    if run.display_title in wanted and run.display_title not in found:
                        found[run.display_title] = run
                page += 1
            left = deadline - self.clock()
            if len(found) == len(wanted) or left <= 0:
                return found
            self.sleep(min(self.lookup.interval, left))

    def send_all(self, specs: list[DispatchSpec], pr: int, sha: str, comment_id: int, *,
                 look_first: bool, dry_run: bool = False,
                 progress: Callable[[list[DispatchResult]], None] | None = None) -> list[DispatchResult]:
        """Dispatch every spec once. ``look_first``: this comment was claimed before (a resumed
        attempt), so runs that already exist are not sent again. Never raises for one failed
        dispatch: its result says ``failed``. ``progress`` is given the results so far after each one."""
        inputs = [dispatch_inputs(spec, pr, sha, comment_id, f"{k}/{len(specs)}") for k, spec in enumerate(specs, 1)]
        names = [run_name(i) for i in inputs]
        if dry_run:
            return [DispatchResult(s, i, n, "dry-run") for s, i, n in zip(specs, inputs, names)]
        existing: dict[str, WorkflowRun] = {}
        if look_first and specs:
            try:
                existing = self.find(names, self.lookup.wait)
            except GitHubError as exc:  # cannot prove they were not sent: send nothing
                return [DispatchResult(s, i, n, "failed", f"looking for earlier runs failed: {exc}")
                        for s, i, n in zip(specs, inputs, names)]
        results = []
        for spec, spec_inputs, name in zip(specs, inputs, names):
            if name in existing:
                results.append(DispatchResult(spec, spec_inputs, name, "found", run_url=existing[name].html_url))
            else:
                results.append(self._send(spec, spec_inputs, name))
            if progress is not None:
                progress(list(results))
        return self._link(results)

    def _send(self, spec: DispatchSpec, inputs: dict[str, str], name: str) -> DispatchResult:
        size = len(json.dumps(inputs))
        if size > MAX_INPUT_CHARS:
            return DispatchResult(spec, inputs, name, "failed",
                                  f"the inputs are {size} characters, over GitHub's {MAX_INPUT_CHARS}; "
                                  f"name fewer tests or lower the shard budget")
        state, url, error = self.send_inputs(inputs, name)
        return DispatchResult(spec, inputs, name, state, error, url)

    def send_inputs(self, inputs: dict[str, str], name: str) -> tuple[str, str | None, str | None]:
        """Dispatch the workflow once with ``inputs``, its run named ``name``: (state, run link,
        error), state ``sent``, ``found`` (an ambiguous failure that the lookup proved sent) or
        ``failed``. Never raises for a GitHub failure."""
        seen: dict[str, WorkflowRun] = {}

        def confirm() -> bool:
            seen.update(self.find([name], self.lookup.wait))
            return bool(seen)
        try:
            done = self.client.dispatch_workflow(self.repo, self.workflow_file, self.ref, inputs, confirm=confirm)
        except GitHubError as exc:
            log.error("dispatch %s failed: %s", name, exc)
            return "failed", None, str(exc)
        url = done.html_url or (seen[name].html_url if name in seen else None)
        return ("sent" if done.sent else "found"), url, None

    def _link(self, results: list[DispatchResult]) -> list[DispatchResult]:
        missing = [r.run_name for r in results if r.ok and r.run_url is None]
        runs: dict[str, WorkflowRun] = {}
        if missing:
            try:
                runs = self.find(missing, self.lookup.link_wait)
            except GitHubError as exc:
                log.warning("looking up run links failed: %s", exc)
        return [r if not r.ok or r.run_url else
                DispatchResult(r.spec, r.inputs, r.run_name, r.state, None,
                               runs[r.run_name].html_url if r.run_name in runs else self.actions_url)
                for r in results]


__all__ = ["DISPATCH_WORKFLOW", "DispatchResult", "DispatchSpec", "Dispatcher", "LOOKUP_PAGES", "MAX_INPUT_CHARS",
           "RunLookup", "SEARCH_PR", "dispatch_inputs", "parse_run_name", "run_name"]
