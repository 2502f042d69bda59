"""``/rerun-failed``: re-run the failed jobs of the workflow runs of the PR's head commit.

Plan: the head commit's runs as `tools.rerun.pr_runs.find` finds them (``head_sha`` for
``pull_request`` runs; pr-gpu.yml's and the bot's dispatched runs by their run-name, since GitHub
gives those the base branch's SHA); every completed run whose conclusion is ``failure`` or
``timed_out`` is to be re-run, every run not completed yet is listed as in progress and left
alone. Nothing failed -> the reply says so and nothing is written. A listing GitHub cut short is
named in the reply.

Carry out: ``POST /actions/runs/{id}/rerun-failed-jobs`` once per failed run. A POST that failed
ambiguously is confirmed by reading the run again (a re-run that took effect left it not
completed) before it is resent. A resumed comment re-plans from the runs' current state, so a run
already re-run is in progress by then and is not re-run twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from tools.rerun import pr_runs
from tools.rerun.commands import quote
from tools.rerun.github import GitHubAPI, GitHubError, PullRequest, WorkflowRun
from tools.rerun.pr_runs import FAILED_CONCLUSIONS
from tools.rerun.work import Work


@dataclass(frozen=True)
class RerunResult:
    """``state``: ``sent``, ``found`` (an earlier ambiguous attempt took effect), ``failed`` or ``dry-run``."""

    run: WorkflowRun
    state: str
    error: str | None = None


def _link(run: WorkflowRun) -> str:
    name = quote(run.name or f"run {run.id}", limit=60)
    return f"[{name}]({run.html_url})" if run.html_url.startswith("https://") else name


def plan(client: GitHubAPI, repo: str, pull: PullRequest, head_sha: str, workflows: tuple[str, ...]) -> Work:
    """The runs of ``pull`` at ``head_sha`` to re-run (``workflows``: those found by run-name, see
    `tools.rerun.pr_runs`), and a section listing what was found."""
    found = pr_runs.find(client, repo, pull.number, head_sha, pull.created_at, workflows)
    runs = found.runs
    failed = [r for r in runs if r.status == "completed" and r.conclusion in FAILED_CONCLUSIONS]
    running = [r for r in runs if r.status != "completed"]
    lines = [f"`/rerun-failed` for commit `{head_sha[:12]}`: {len(runs)} workflow run(s), "
             f"{len(failed)} failed, {len(running)} still in progress."]
    if running:
        lines.append("In progress, left alone: " + ", ".join(_link(r) for r in running) + ".")
    if found.incomplete:
        lines.append("GitHub lists at most 1,000 runs: older runs of " + ", ".join(f"`{w}`" for w in found.incomplete)
                     + " were not searched.")
    if not failed:
        lines.append("Nothing failed, so nothing was re-run.")
    return Work(reruns=failed, sections=["\n".join(lines)])


def carry_out(client: GitHubAPI, repo: str, runs: list[WorkflowRun], dry_run: bool = False) -> list[RerunResult]:
    """Re-run the failed jobs of each run once (see the module docstring); never raises for one run."""
    if dry_run:
        return [RerunResult(run, "dry-run") for run in runs]
    results = []
    for run in runs:
        def took_effect(run_id: int = run.id) -> bool:
            return client.get_run(repo, run_id).status != "completed"
        try:
            sent = client.rerun_failed_jobs(repo, run.id, confirm=took_effect)
        except GitHubError as exc:
            results.append(RerunResult(run, "failed", str(exc)))
            continue
        results.append(RerunResult(run, "sent" if sent else "found"))
    return results


def render(results: list[RerunResult]) -> str:
    """The re-run table of the reply (empty when nothing was to be re-run)."""
    if not results:
        return ""
    text = {"sent": "failed jobs re-run", "found": "failed jobs re-run (an earlier attempt had done it)",
            "dry-run": "would re-run (dry run)"}
    rows = [f"| {_link(r.run)} | {r.run.conclusion} | "
            f"{text.get(r.state) or 're-run failed: ' + quote(r.error or '', limit=200)} |" for r in results]
    return "\n".join(["| workflow run | conclusion | result |", "|---|---|---|"] + rows)


__all__ = ["FAILED_CONCLUSIONS", "RerunResult", "carry_out", "plan", "render"]
