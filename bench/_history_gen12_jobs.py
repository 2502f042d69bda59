"""One gen12 GPU job: a workflow's pytest invocations on one runner, with every failure's truth.

`run_job` collects the tests the workflow's ``pytest ... unit/`` lines select at the code's commit,
decides each test's outcome and writes the JUnit (`bench._history_gen12_text`). A failure's cause,
first that applies: an infra fault on the job (a bad host's ECC/Xid errors, another process holding
GPU memory, the Hugging Face hub timing out, a full disk under the JIT extension cache), a window
open at the code's commit (`broken_on_main`, or `new` for the pull request that opened it), the
pull request's own break (`new`), else the test's flake at its rate (`flaky`). DeepSpeed runs no
rerun plugin, so a test has one attempt per job and a failed flake failed every attempt of it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bench._history_gen12_text import Case, fills_for, report_xml, suite_xml
from bench._history_gen12_world import Node, Window, Workflow, World
from bench._verdicts_records import Label, Report

SKIP_TEXT = "Skipping test because not enough GPUs are available: 8 required, 4 available"


@dataclass(frozen=True)
class Code:
    """What a job tests: main's tree at ``index`` plus, for a pull request, its own change.

    ``culprit``: the pull request opens the windows starting at its merge commit ``merged``;
    ``broken``: the tests its unfinished change breaks, with the error they raise."""

    index: int
    pr: int | None = None
    merged: int | None = None
    broken: frozenset[str] = frozenset()
    broken_error: str = ""


@dataclass(frozen=True)
class Fault:
    """An infra fault on one job: its kind (`bench._history_gen12_text.TEXTS`) and the tests it hits."""

    kind: str
    nodes: frozenset[str]


@dataclass
class JobOutcome:
    report: Report | None
    failed: bool
    lost: bool = False
    minutes: float = 0.0
    labels: list[Label] = field(default_factory=list)


def window_label(window: Window, code: Code, workflow: str, when: datetime) -> str | None:
    """``broken_on_main``/``new`` when ``window`` fails its tests in this job, else None."""
    if window.kind == "env":
        if workflow in window.workflows and when >= window.since and code.index < window.end:
            return "broken_on_main"
        return None
    if window.start <= code.index < window.end:
        return "broken_on_main"
    if code.merged is not None and code.merged == window.start and code.index < window.start:
        return "new"
    return None


def draw_fault(rng: random.Random, nodes: list[Node], bad_host: bool, infra_rate: float) -> Fault | None:
    """The infra fault a job meets, if any: a bad host's GPU errors most times, else `infra_rate`."""
    if bad_host and rng.random() < 0.7:
        kind = rng.choice(("ecc", "xid79"))
    elif rng.random() < infra_rate:
        kind = rng.choice(("oom_other", "oom_other", "hub", "disk", "xid79"))
    else:
        return None
    if kind == "hub":
        pool = [n for n in nodes if "transformers" in n.file or "inference" in n.file or "model" in n.file]
    elif kind == "disk":
        pool = [n for n in nodes if "/ops/" in n.file]
    else:
        pool = nodes
    pool = pool or nodes
    if not pool:
        return None
    if kind in ("ecc", "xid79"):  # the GPU is gone for the rest of the worker's tests: a run of them
        start = rng.randrange(len(pool))
        hit = pool[start:start + rng.randint(4, 16)]
    else:
        hit = rng.sample(pool, min(len(pool), rng.randint(2, 8)))
    return Fault(kind, frozenset(n.node for n in hit))


def _case(node: Node, rng: random.Random, kind: str = "", fills: tuple = ()) -> Case:
    return Case(node.node, node.classname, node.name, round(rng.uniform(0.4, 40.0), 3), kind, fills)


def run_job(world: World, workflow: Workflow, code: Code, started: datetime, runner: str,
            rng: random.Random, *, bad_host: bool, infra_rate: float, lost_rate: float,
            attempt_text: bool) -> JobOutcome:
    """One job of ``workflow`` on ``runner`` (see the module docstring); a lost runner writes no JUnit."""
    invocations = world.selected(workflow, code.index)
    every = [n for group in invocations for n in group]
    if rng.random() < lost_rate:
        return JobOutcome(None, True, lost=True, minutes=rng.uniform(20, 120))
    fault = draw_fault(rng, every, bad_host, infra_rate)
    windows = [(w, label) for w in world.windows
               if (label := window_label(w, code, workflow.name, started)) is not None]
    suites, labels = [], []
    clock = started
    for group in invocations:
        cases = []
        for node in group:
            if node.markers & {"skip", "skipif"} or (node.distributed and "world_size" in node.markers):
                cases.append(Case(node.node, node.classname, node.name, 0.0, skip=SKIP_TEXT))
                continue  # skipped before it runs: it cannot fail
            cause = None
            if fault is not None and node.node in fault.nodes:
                cause = ("infra", fault.kind, (("error", ""),), f"infra: {fault.kind} on {runner}")
            if cause is None:
                for window, label in windows:
                    if node.node in window.nodes:
                        kind = "env" if window.kind == "env" else "broken"
                        why = window.why if label == "broken_on_main" else f"PR #{code.pr} opens the {window.why}"
                        cause = (label, kind, (("error", window.error), ("frame", _frame(node))), why)
                        break
            if cause is None and node.node in code.broken:
                cause = ("new", "broken", (("error", code.broken_error), ("frame", _frame(node))),
                         f"PR #{code.pr}'s own change")
            flake = world.flaky.get(node.node)
            if cause is None and flake is not None and rng.random() < flake.rate:
                cause = ("flaky", flake.kind, (), f"flaky {flake.kind} at {flake.rate:.1%}")
            if cause is None:
                cases.append(_case(node, rng))
                continue
            label, kind, extra, why = cause
            fills = fills_for(kind, rng) + tuple(extra)
            cases.append(_case(node, rng, kind, fills))
            labels.append(Label(node.node, workflow.name, label, True, why))
        host = f"{runner}-{rng.randrange(16):x}"
        suites.append(suite_xml(cases, clock, host, attempt_text))
        clock += timedelta(seconds=sum(c.time for c in cases) / 4)
    minutes = max(5.0, (clock - started).total_seconds() / 60 + rng.uniform(8, 25))  # setup: venv, torch, build
    report = Report(workflow.name, 0, 1, runner, report_xml(suites), labels)
    return JobOutcome(report, bool(labels), minutes=minutes, labels=labels)


def _frame(node: Node) -> str:
    test = node.name.split("[")[0]
    return f"    def {test}(self):\n>       model, _, _, _ = deepspeed.initialize(config=config_dict, model=model)"
