"""Scoring `ci history verdicts` on a labelled history: each run ingested through the real ingest
path as GitHub's workflows would (``ci.history.ingest.prepare`` + ``ingest``, the functions `ci
history ingest` calls), in the order runs finish, and each pull request run's verdicts asked the
way pr-gpu.yml's ``history`` job asks them (`load_run` of the run's commit, then `judge` with the
pull request's merge base: what `ci history verdicts --sha SHA --repo REPO` calls) right after its
own reports are in; and once more over the whole history at its end (a later rerun, the HUD).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bench._history_gen2 import REPO
from bench._verdicts_records import History, Label, Run
from ci.history.ingest import ingest, prepare
from ci.history.merge_queue import batch_verdicts
from ci.history.model import MERGE_GROUP, RunIdentity
from ci.history.run_results import load_run
from ci.history.store import Store, open_store
from ci.history.verdict import judge

MISSING = "(no verdict)"
UNLABELLED = "(not failing)"


@dataclass(frozen=True)
class Judged:
    """One failing test of one asked run: its truth, whether every attempt failed, and the answer."""

    label: str
    every_attempt: bool
    verdict: str
    detail: str

    @property
    def right(self) -> bool:
        return self.label == self.verdict


@dataclass
class Score:
    """A history's answers: ``at_time`` as each pull request run was judged when it finished,
    ``at_end`` the same commits asked at the end; ``changed`` answers that differ between the
    last at-time ask of a commit and the end (None: the generator has no end ask)."""

    generator: str
    seed: int
    at_time: list[Judged] = field(default_factory=list)
    at_end: list[Judged] = field(default_factory=list)
    changed: int | None = None
    compared: int = 0


# GitHub's event names that a workflow passes to `ci history ingest --event` under another name
INGEST_EVENT = {"schedule": "nightly"}


def _identity(run: Run, tier: str, shard: str, runner: str) -> RunIdentity:
    unscored = run.event == "pull_request"
    batch = tuple(getattr(run, "batch", ()))
    pr = run.pr
    if run.event == MERGE_GROUP:  # a queue run names its pull requests by batch, never by --pr
        batch, pr = batch or ((run.pr,) if run.pr else ()), None
    event = INGEST_EVENT.get(run.event, run.event)
    return RunIdentity(REPO, run.sha, event, tier, pr=pr, runner=runner, shard=shard,
                       run_id=run.run_id, attempt=run.attempt,
                       run_url=f"https://github.com/{REPO}/actions/runs/{run.run_id}/attempts/{run.attempt}",
                       author=run.author, base_sha=run.base_sha, scored=not unscored,
                       batch=batch)


def ingest_run(store: Store, run: Run, folder: Path, root: Path | None = None, known: tuple[str, ...] = ()) -> None:
    """Every report of ``run`` into ``store``, as `.github/scripts/ingest-junit.sh` would (one
    artifact per tier and shard, sorted by name); in checkout ``root`` with the registry's test
    files ``known`` when the history has them, as `ci history ingest` reads them."""
    for report in sorted(run.reports, key=lambda r: (r.tier, r.shard)):
        path = folder / f"{run.run_id}-{run.attempt}-{report.tier}-{report.shard}.xml"
        path.write_text(report.xml, encoding="utf-8")
        identity = _identity(run, report.tier, f"{report.shard + 1}/{report.shards}", report.runner)
        ingest(store, prepare(path, identity, root=root, known_files=known))


def checkout_files(history: History) -> tuple[str, ...]:
    """The history's ``checkout_files`` (read once: a generator may build them from its data file)."""
    return tuple(getattr(history, "checkout_files", ()))


def checkout(files: tuple[str, ...], folder: Path) -> Path | None:
    """A tree of ``files`` (empty) under ``folder``, or None when there are none."""
    if not files:
        return None
    root = folder / "checkout"
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).touch()
    return root


def ask(store: Store, sha: str, base: str, truth: dict[tuple[str, str], Label]) -> tuple[list[Judged], dict]:
    """The verdicts of commit ``sha`` against ``truth`` (each failing test's label); also the
    answers by (node, tier), for comparing two asks."""
    results = load_run(store, sha=sha, repo=REPO)
    # as `ci history verdicts` and the HUD's pull request view ask: as of the run's newest report
    verdicts = judge(store, results.failures, merge_base=base or results.base_sha, git_order=None,
                     as_of=results.report_id)
    if MERGE_GROUP in results.events:  # as `ci history verdicts` words a queue run's
        verdicts = batch_verdicts(verdicts, results.batch)
    out, answers = [], {}
    for v in verdicts:
        label = truth.get((v.node, v.tier))
        answers[(v.node, v.tier)] = v.verdict
        out.append(Judged(label.label if label else UNLABELLED, bool(label and label.every_attempt), v.verdict,
                          v.detail))
    for key, label in truth.items():
        if key not in answers:
            out.append(Judged(label.label, label.every_attempt, MISSING, ""))
    return out, answers


def score_history(history: History, generator: str = "gen2") -> Score:
    """Replay ``history`` into a fresh SQLite store and score every pull request run's verdicts."""
    score = Score(generator, history.seed)
    truths: dict[str, dict[tuple[str, str], Label]] = {}
    bases: dict[str, str] = {}
    last_answers: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-verdicts-") as tmp:
        folder = Path(tmp)
        known = checkout_files(history)
        root = checkout(known, folder)
        with open_store(str(folder / "history.sqlite")) as store:
            for run in history.runs:
                ingest_run(store, run, folder, root, known)
                if run.event not in ("pull_request", MERGE_GROUP) or not run.reports:
                    continue  # a run that uploaded nothing (cancelled, its runner lost) has nothing to judge
                truth = truths.setdefault(run.sha, {})
                truth.update({(label.node, label.tier): label for label in run.labels})
                bases[run.sha] = run.base_sha
                judged, last_answers[run.sha] = ask(store, run.sha, run.base_sha, truth)
                score.at_time.extend(judged)
            score.changed = 0
            for sha, truth in truths.items():
                judged, answers = ask(store, sha, bases[sha], truth)
                score.at_end.extend(judged)
                before = last_answers[sha]
                score.compared += len(set(before) | set(answers))
                score.changed += sum(1 for key in set(before) | set(answers) if before.get(key) != answers.get(key))
    return score
