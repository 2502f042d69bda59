"""A 178-shard ``/rerun-tier`` end to end against the fake GitHub, on a virtual clock: what it costs.

The handler dispatches every shard, then every run's ``report`` writes its row: all finishing at
once, or one every 20 s. The fake records every request (`FakeGitHub.requests`, stamped with the
virtual clock), so the counts are GitHub's view: requests by method and path, and the most writes in
any 60 s. The bounds are `tools.rerun.budget`'s: GitHub's documented limits for GITHUB_TOKEN.
"""

from __future__ import annotations

import random
import re
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from tools.rerun import budget
from tools.rerun.dispatch import RunLookup
from tools.rerun.fake_github import FakeGitHub, Recorded
from tools.rerun.handler import BotConfig, Handler
from tools.rerun.github import DEFAULT_BOT_LOGIN as BOT_LOGIN
from tools.rerun.report import Reporter, RunResults, result_cell
from tools.rerun.runs_table import rows_in

from rerun_support import PR, REPO, comment_payload

SHARDS = 178
COMMENT = 91
START = 1_800_000_000.0  # epoch seconds: the virtual clock's start


class VirtualClock:
    """Time that moves only when someone sleeps. The fake stamps requests with the clock of whoever
    is running (`Stage.current`): the simulation runs one actor at a time."""

    def __init__(self, t: float):
        self.t = t
        self._lock = threading.Lock()

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.t += max(0.0, seconds)


@dataclass
class Stage:
    current: VirtualClock


@dataclass(frozen=True)
class Cost:
    """What the fake saw: all requests, writes, and the most writes within any 60 s."""

    requests: int
    writes: int
    writes_per_minute: int
    by_route: dict[str, int]


def _route(r: Recorded) -> str:
    path = re.sub(r"/\d+", "/{n}", r.path.replace(REPO, "{repo}"))
    return f"{r.method} {path}"


def _most_in_a_minute(times: list[float]) -> int:
    times, best, lo = sorted(times), 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - 60.0:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def cost(requests: list[Recorded]) -> Cost:
    writes = [r for r in requests if r.method != "GET"]
    return Cost(len(requests), len(writes), _most_in_a_minute([r.at for r in writes]),
                dict(sorted(Counter(_route(r) for r in requests).items())))


def write_registry(root: Path, tiers: dict[str, int]) -> Path:
    """A registry whose tier T has ``tiers[T]`` files of one shard budget each: one shard per file."""
    lines = ["version: 1", "tiers:"]
    for tier in tiers:
        lines += [f"  {tier}:", "    description: one GPU", "    runner_labels: [gpu-x]", "    gpu_count: 1",
                  "    arch: sm_90"]
    lines.append("tests:")
    for tier, count in tiers.items():
        for i in range(count):
            lines += [f"  tests/{tier}/test_{i}.py:", f"    tiers: [{tier}]", "    est_time: 1800",
                      "    timeout: 86400", "    owner: \"@t\"", "    status: active"]
    (root / "registry.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def tier_root(tmp_path: Path) -> Path:
    """A tier `gpu_x` of 178 shards."""
    return write_registry(tmp_path, {"gpu_x": SHARDS})


def _results(index: int) -> RunResults:
    return RunResults(index, 0, 0, 0, 1.5, ())


def run_tier(fake: FakeGitHub, make_client: Callable[..., Any], root: Path, finish: Callable[[int], float | None],
             during: Callable[[VirtualClock], None] = lambda clock: None,
             command: str = "/rerun-tier gpu_x") -> tuple[Cost, Cost, float]:
    """Handle ``command``, then report the k-th run dispatched (1-based) ``finish(k)`` seconds after
    the handling began (None: it does not report), with the dispatch's inputs as the workflow passes
    them; ``during`` is called at each of the bot's paced waits. (cost of the handler, cost of
    everything, how long the handler took.) The handler runs first, then each report: their
    requests interleave on the virtual timeline, not in the fake's state."""
    stage = Stage(VirtualClock(START))
    fake.clock = lambda: stage.current.now()
    bot = stage.current

    def bot_sleep(seconds: float) -> None:
        bot.sleep(seconds)
        during(bot)
    pacer = budget.WritePacer(clock=bot.now, sleep=bot_sleep)
    handler = Handler(make_client(sleep=bot.sleep, clock=bot.now, pace=pacer.take),
                      BotConfig(repo_root=root, lookup=RunLookup(0.3, 0.2, 0.02)), sleep=bot.sleep, clock=bot.now)
    outcome = handler.handle(comment_payload(command, comment_id=COMMENT))
    assert outcome.status == "dispatched"
    handler_cost, done = cost(list(fake.requests)), bot.now()
    links = {row.key: row.run for row in rows_in(fake.bot_replies(PR)[0].body)}
    urls = {tuple(run.display_title.split()[3:5]): run.to_json(REPO)["html_url"] for run in fake.runs}
    assert links == {key: f"[run]({url})" for key, url in urls.items()}  # each row links its own run
    for k, dispatch in enumerate(list(fake.dispatches), 1):
        at, inputs = finish(k), dispatch["inputs"]
        if at is None:
            continue
        stage.current = clock = VirtualClock(START + at)
        reporter = Reporter(make_client(sleep=clock.sleep, clock=clock.now), REPO, BOT_LOGIN, settle=12.0,
                            sleep=clock.sleep, clock=clock.now, rng=random.Random(k))
        shard = int(inputs["part"].split("/")[0])
        assert reporter.report(PR, COMMENT, inputs["tier"], inputs["part"], result_cell(_results(shard)),
                               urls[inputs["tier"], inputs["part"]], inputs["slot"]).lost == 0
    return handler_cost, cost(list(fake.requests)), done - START


@pytest.mark.parametrize("finish", [pytest.param(lambda i: 600.0, id="all-at-once"),
                                    pytest.param(lambda i: 120.0, id="all-at-once-while-dispatching"),
                                    pytest.param(lambda i: 600.0 + 20 * i, id="one-every-20s"),
                                    pytest.param(lambda i: 600.0 + (SHARDS - i) * budget.REPORT_SLOT_SECONDS,
                                                 id="last-shard-first")])
def test_a_178_shard_tier_fits_github_limits(fake: FakeGitHub, make_client, tier_root: Path,
                                             finish: Callable[[int], float]) -> None:
    handler_cost, total, dispatching = run_tier(fake, make_client, tier_root, finish)
    assert len(fake.dispatches) == SHARDS
    assert total.writes_per_minute <= budget.WORST_WRITES_PER_MINUTE <= budget.CONTENT_WRITES_PER_MINUTE
    assert handler_cost.writes_per_minute <= budget.BOT_WRITES_PER_MINUTE + 1
    assert handler_cost.by_route["POST /repos/{repo}/actions/workflows/rerun-test-dispatch.yml/dispatches"] == SHARDS
    assert handler_cost.requests <= SHARDS + budget.BOT_FIXED_REQUESTS + 2 * budget.PROGRESS_REQUESTS * (
        1 + int(dispatching // budget.PROGRESS_SECONDS))  # no per-shard lookups
    assert not any(route.endswith("/runs") for route in total.by_route)
    expected = budget.rerun_cost(SHARDS)
    assert (total.requests, total.writes) <= (expected.requests, expected.writes)
    assert expected.fits and total.requests <= budget.BUDGET_SHARE * budget.HOURLY_REQUESTS
    assert dispatching <= budget.dispatch_seconds(SHARDS) + budget.PROGRESS_SECONDS
    rows = {row.part: row for row in rows_in(fake.bot_replies(PR)[0].body)}
    runs = {run.display_title.split()[4]: run.id for run in fake.runs}
    assert set(rows) == set(runs) and len(rows) == SHARDS
    for part, row in rows.items():  # every row linked to its own run and holding its own final result
        assert row.run == f"[run](https://github.com/{REPO}/actions/runs/{runs[part]})"
        assert row.result.startswith(f"**passed**: {part.split('/')[0]} passed, 0 failed"), row


def test_a_row_reported_while_dispatching_survives_the_progress_and_final_edits(
        fake: FakeGitHub, make_client, tier_root: Path) -> None:
    """Shard 1 finishes 100 s into a five-minute paced dispatch: the reply's later edits keep its row."""
    stage_clock: list[VirtualClock] = []

    def during(bot: VirtualClock) -> None:
        if stage_clock or bot.now() < START + 100:
            return
        stage_clock.append(bot)
        own = VirtualClock(bot.now())  # the report's runner has its own time; the bot's does not stop
        reporter = Reporter(make_client(sleep=own.sleep), REPO, BOT_LOGIN, settle=12.0, sleep=own.sleep,
                            clock=own.now, rng=random.Random(0))
        reporter.report(PR, COMMENT, "gpu_x", f"1/{SHARDS}", result_cell(_results(1)),
                        fake.runs[0].to_json(REPO)["html_url"])
    run_tier(fake, make_client, tier_root, lambda i: None if i == 1 else 600.0, during)
    assert stage_clock, "the report ran during the dispatch"
    body = fake.bot_replies(PR)[0]
    assert body.edits >= 4, body.edits  # the report's, then progress edits and the final one
    row = {r.part: r for r in rows_in(body.body)}[f"1/{SHARDS}"]
    assert row.has_results


def test_two_tiers_in_one_comment_report_in_turns(fake: FakeGitHub, make_client, tmp_path: Path) -> None:
    """Shard i of one tier and shard i of the other finish together: their slots still differ."""
    root = write_registry(tmp_path, {"gpu_a": 89, "gpu_b": 89})
    _, total, _ = run_tier(fake, make_client, root, lambda k: 600.0, command="/rerun-tier gpu_a\n/rerun-tier gpu_b")
    assert len(fake.dispatches) == 178
    assert total.writes_per_minute <= budget.WORST_WRITES_PER_MINUTE
    reports = cost([r for r in fake.requests if r.at >= START + 600])  # the bot was done long before
    assert reports.writes == 178 and reports.writes_per_minute <= budget.REPORT_WRITES_PER_MINUTE + 1
    rows = rows_in(fake.bot_replies(PR)[0].body)
    assert len(rows) == 178 and all(row.has_results for row in rows)


def test_a_second_tier_over_the_hourly_budget_is_refused(fake: FakeGitHub, make_handler, tmp_path: Path) -> None:
    root = write_registry(tmp_path, {"gpu_a": 120, "gpu_b": 120})
    assert 120 <= budget.max_runs() < 240
    outcome = make_handler(root=root).handle(comment_payload("/rerun-tier gpu_a\n/rerun-tier gpu_b", comment_id=92))
    assert outcome.status == "partial" and {d.spec.tier for d in outcome.dispatches} == {"gpu_a"}
    assert len(fake.dispatches) == 120
    reply = fake.bot_replies(PR)[0].body
    assert ("**`/rerun-tier gpu_b`**: 120 shards with the 120 run(s) this comment already asks for would take "
            "about") in reply and "nothing dispatched for this tier" in reply
    assert "GITHUB_TOKEN's 1,000 requests and 500 writes an hour" in reply


@pytest.mark.parametrize("command, runs", [("/rerun-test test_pack.py --tier gpu_h100", 1),
                                           ("/rerun-test test_pack.py", 2)])
def test_a_comment_s_fixed_cost_is_what_the_budget_counts(fake: FakeGitHub, make_handler, command: str,
                                                          runs: int) -> None:
    """`BOT_FIXED_REQUESTS` and `BOT_FIXED_WRITES`, measured: everything the bot sends for a comment
    besides its dispatches (it dispatches in well under `PROGRESS_SECONDS`: no progress edit)."""
    assert make_handler().handle(comment_payload(command)).status == "dispatched"
    spent = cost(list(fake.requests))
    assert spent.by_route.pop("POST /repos/{repo}/actions/workflows/rerun-test-dispatch.yml/dispatches") == runs
    assert (spent.requests - runs, spent.writes - runs) == (budget.BOT_FIXED_REQUESTS, budget.BOT_FIXED_WRITES)
    assert spent.by_route == {  # as the constant's comment lists them
        "GET /repos/{repo}/issues/{n}/comments": 1, "GET /repos/{repo}/collaborators/maintainer/permission": 1,
        "GET /repos/{repo}/pulls/{n}": 1, "POST /repos/{repo}/issues/comments/{n}/reactions": 2,
        "POST /repos/{repo}/issues/{n}/comments": 1, "PATCH /repos/{repo}/issues/comments/{n}": 1,
        "GET /repos/{repo}/issues/comments/{n}": 1}


def test_a_rerun_fits_only_within_both_hourly_shares() -> None:
    requests = int(budget.BUDGET_SHARE * budget.HOURLY_REQUESTS)
    writes = int(budget.BUDGET_SHARE * budget.CONTENT_WRITES_PER_HOUR)
    assert budget.RerunCost(1, requests, writes).fits  # exactly at both shares
    assert not budget.RerunCost(1, requests + 1, writes).fits
    assert not budget.RerunCost(1, requests, writes + 1).fits
    assert not budget.RerunCost(1, requests + 1, writes + 1).fits


def test_the_pacer_takes_any_positive_rate() -> None:
    clock = VirtualClock(0.0)
    pacer = budget.WritePacer(1, clock=clock.now, sleep=clock.sleep)  # one write a minute
    pacer.take()
    pacer.take()
    assert clock.now() == 60.0 and budget.WritePacer(0.5).spacing == 120.0
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"per_minute must be > 0, got {bad}"):
            budget.WritePacer(bad)


def test_the_pacer_spaces_writes_and_the_slots_interleave_reports() -> None:
    clock = VirtualClock(0.0)
    pacer = budget.WritePacer(60, clock=clock.now, sleep=clock.sleep)
    times = []
    for _ in range(5):
        pacer.take()
        times.append(clock.now())
    assert times == [0.0, 1.0, 2.0, 3.0, 4.0]
    clock.sleep(10)
    pacer.take()  # a writer idle for a while is not made to wait
    assert clock.now() == 14.0
    slot = budget.REPORT_SLOT_SECONDS
    waits = [budget.report_slot_wait(1000.0, i, 178) for i in range(1, 179)]
    starts = sorted(1000.0 + w for w in waits)
    assert all(0 <= w < 178 * slot for w in waits)
    assert all(b - a == pytest.approx(slot) for a, b in zip(starts, starts[1:]))
    assert budget.shard_of("3/7") == (3, 7) and budget.shard_of("targets") is None and budget.shard_of("8/7") is None


def test_edits_are_coalesced_but_never_repeated() -> None:
    clock = VirtualClock(0.0)
    edits = budget.Coalescer(60, clock.now)
    assert edits.due("a")
    edits.wrote("a")
    clock.sleep(59)
    assert not edits.due("b")
    clock.sleep(1)
    assert edits.due("b") and not edits.due("a")


def test_the_command_line_paces_by_default() -> None:
    from tools.rerun.__main__ import _config, build_parser

    args = build_parser().parse_args(["handle", "--event", "e.json"])
    assert args.writes_per_minute == budget.BOT_WRITES_PER_MINUTE and _config(args).pacer() is not None
    args = build_parser().parse_args(["handle", "--event", "e.json", "--writes-per-minute", "0"])
    assert _config(args).pacer() is None
