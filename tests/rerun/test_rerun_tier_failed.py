"""`/rerun-tier` (and `/rerun-stage`) and `/rerun-failed` end to end against the fake GitHub."""

from __future__ import annotations

import re
from pathlib import Path

from ci.selection.plan import plan
from ci.registry import load_registry
from tools.rerun.commands import quote
from tools.rerun.cmd_rerun_tier import DEFAULT_SHARD_BUDGET
from tools.rerun.fake_actions import BASE_SHA
from tools.rerun.fake_github import FakeGitHub, Scripted
from tools.rerun.handler import BotConfig

from rerun_support import HEAD_SHA, PR, REPO, WORKFLOWS, comment_payload, load_workflow, pull_request_payload


def test_tier_run_is_one_dispatch_per_shard_of_the_plan(fake: FakeGitHub, make_handler, repo_root: Path) -> None:
    outcome = make_handler(shard_budget=30).handle(comment_payload("/rerun-stage gpu_b200", comment_id=88))
    assert outcome.status == "dispatched"
    expected = plan(load_registry(repo_root / "registry.yaml"), "gpu_b200", shard_budget=30)
    assert [(s.index, s.count, s.tests) for s in expected.shards] == [
        (1, 2, ("tests/quant/test_kvfp4_quant_dequant.py",)), (2, 2, ("tests/quant/test_pack.py",))]
    got = [(d["inputs"]["part"], d["inputs"]["tests"], d["inputs"]["tier"]) for d in fake.dispatches]
    assert got == [("1/2", "tests/quant/test_kvfp4_quant_dequant.py", "gpu_b200"),
                   ("2/2", "tests/quant/test_pack.py", "gpu_b200")]
    body = fake.bot_replies(PR)[0].body
    assert "`/rerun-tier gpu_b200`: 2 active file(s) in 2 shard(s) (shard budget 30 s of est_time" in body
    assert "1 manual/quarantined file(s) not run" in body  # test_broken.py
    names = {r.display_title for r in fake.runs}
    assert len(names) == 2 and all("comment 88" in n for n in names)  # unique run-names per shard


def test_the_reply_says_results_are_paced_while_a_shard_is_pending(fake: FakeGitHub, make_handler,
                                                                   make_client) -> None:
    """The handler's reply, then each shard's `report` at the fake GitHub: the pacing note (from
    `budget.REPORT_SLOT_SECONDS`) stays while a shard is pending and goes with the last one; a
    failed shard comes before a pending one, a passed one goes into the collapsed block."""
    from tools.rerun.budget import REPORT_SLOT_SECONDS
    from tools.rerun.github import DEFAULT_BOT_LOGIN
    from tools.rerun.layout import NOTE_OPEN
    from tools.rerun.report import Reporter

    make_handler(shard_budget=30).handle(comment_payload("/rerun-tier gpu_b200", comment_id=89))
    paced = f"one every {REPORT_SLOT_SECONDS:.1f} s, each in its own turn, so a run's row can appear up to 4 s after"
    body = fake.bot_replies(PR)[0].body
    assert NOTE_OPEN in body and paced in body
    reporter = Reporter(make_client(), REPO, DEFAULT_BOT_LOGIN, settle=0, sleep=lambda s: None)
    reporter.report(PR, 89, "gpu_b200", "2/2", "**failed**: 1 passed, 1 failed, 0 skipped, 0 errors in 2.0 s")
    body = fake.bot_replies(PR)[0].body
    assert paced in body and "1 of 2 runs reported so far" in body
    assert body.index("| 2/2 | **failed**") < body.index("| 1/2 | dispatched")  # the failure before the pending
    reporter.report(PR, 89, "gpu_b200", "1/2", "**passed**: 3 passed, 0 failed, 0 skipped, 0 errors in 2.0 s")
    body = fake.bot_replies(PR)[0].body
    assert NOTE_OPEN not in body and "paced" not in body and "so far" not in body
    assert body.index("| 2/2 |") < body.index("<details><summary>1 passed run(s)</summary>") < body.index("| 1/2 |")


def test_tier_run_with_the_default_budget_is_one_shard(fake: FakeGitHub, make_handler) -> None:
    make_handler().handle(comment_payload("/rerun-tier gpu_b200\n/rerun-tier gpu_b200"))
    assert [(d["inputs"]["part"], d["inputs"]["tests"]) for d in fake.dispatches] == [
        ("1/1", "tests/quant/test_kvfp4_quant_dequant.py tests/quant/test_pack.py")]


def test_unknown_tier_lists_the_tiers_and_the_closest(fake: FakeGitHub, make_handler) -> None:
    outcome = make_handler().handle(comment_payload("/rerun-tier gpu_b20"))
    assert outcome.status == "partial" and fake.dispatches == []
    body = fake.bot_replies(PR)[0].body
    assert f"there is no tier {quote('gpu_b20')}. The closest name is `gpu_b200`." in body
    assert "Tiers: `cpu`, `gpu_h100`, `gpu_b200`." in body


def test_a_file_longer_than_the_budget_is_explained(fake: FakeGitHub, make_handler) -> None:
    outcome = make_handler(shard_budget=20).handle(comment_payload("/rerun-tier gpu_b200"))
    assert outcome.status == "partial" and fake.dispatches == []
    assert "cannot plan the tier" in fake.bot_replies(PR)[0].body and "more than the shard budget" in \
        fake.bot_replies(PR)[0].body


def test_default_shard_budget_matches_the_pull_request_workflows() -> None:
    """The pull-request workflows shard the GPU tiers with `ci plan --shard-budget N`; /rerun-tier
    must split a tier the same way."""
    names = sorted(p.name for p in WORKFLOWS.glob("pr*.yml"))
    runs = [step.get("run", "") for name in names for job in load_workflow(name)["jobs"].values()
            for step in job.get("steps", [])]
    budgets = {float(m) for run in runs if "ci plan" in run
               for m in re.findall(r"--shard-budget[ =](\d+(?:\.\d+)?)", run)}
    assert budgets == {DEFAULT_SHARD_BUDGET}, names
    assert BotConfig(repo_root=Path(".")).shard_budget == DEFAULT_SHARD_BUDGET


OLD_SHA = "e" * 40


def _runs(fake: FakeGitHub, make_client) -> dict[str, int]:
    """The runs of PR 42 as GitHub records them: pr.yml's `pull_request` runs carry the head SHA;
    pr-gpu.yml's `pull_request_target` and `issue_comment` runs and the bot's dispatched runs carry
    the base branch's SHA, and say whose they are only in their run-name."""
    approval = fake.add_comment(PR, "maintainer", f"/ok-to-test-gpu {HEAD_SHA[:10]}\nlooks good")
    old_approval = fake.add_comment(PR, "maintainer", f"/ok-to-test-gpu {OLD_SHA[:10]}")
    chatter = fake.add_comment(PR, "contributor", "thanks!")
    make_client().dispatch_workflow(REPO, "rerun-test-dispatch.yml", "main", {
        "pr": str(PR), "sha": HEAD_SHA, "tier": "gpu_b200", "part": "targets", "runner": "[]", "tests": "t.py",
        "comment_id": "77"})
    dispatched = fake.runs[-1]
    dispatched.status, dispatched.conclusion = "completed", "failure"
    made = {"unit": fake.add_run(HEAD_SHA, "unit tests", conclusion="failure"),
            "lint": fake.add_run(HEAD_SHA, "lint", conclusion="success"),
            "nightly": fake.add_run(HEAD_SHA, "nightly", status="in_progress", conclusion=None),
            "old": fake.add_run(OLD_SHA, "old commit", conclusion="failure"),
            "gpu": fake.trigger("pr-gpu.yml", "pull_request_target", pull_request_payload(PR, HEAD_SHA),
                                conclusion="timed_out"),
            "gpu_approved": fake.trigger("pr-gpu.yml", "issue_comment",
                                         comment_payload("", comment_id=approval), conclusion="failure"),
            "gpu_old": fake.trigger("pr-gpu.yml", "pull_request_target", pull_request_payload(PR, OLD_SHA)),
            "gpu_old_approval": fake.trigger("pr-gpu.yml", "issue_comment",
                                             comment_payload("", comment_id=old_approval)),
            "gpu_chatter": fake.trigger("pr-gpu.yml", "issue_comment", comment_payload("", comment_id=chatter),
                                        status="in_progress", conclusion=None),
            "gpu_other_pr": fake.trigger("pr-gpu.yml", "pull_request_target", pull_request_payload(PR + 1, HEAD_SHA)),
            "dispatched": dispatched}
    return {name: run.id for name, run in made.items()}


def test_the_fake_gives_base_branch_runs_the_base_sha(fake: FakeGitHub, make_client) -> None:
    """What GitHub does, and what /rerun-failed has to live with: a PR's pull_request_target,
    issue_comment and workflow_dispatch runs are not listed under the PR's head SHA."""
    ids = _runs(fake, make_client)
    by_id = {run.id: run for run in fake.runs}
    for name in ("gpu", "gpu_approved", "dispatched"):
        assert (by_id[ids[name]].head_sha, by_id[ids[name]].head_branch) == (BASE_SHA, "main"), name
    assert by_id[ids["gpu"]].display_title == f"pr-gpu PR #{PR} ({HEAD_SHA})"
    listed = make_client().list_runs_for_sha(REPO, HEAD_SHA)
    assert {r.id for r in listed} == {ids["unit"], ids["lint"], ids["nightly"]}


def test_rerun_failed_reruns_the_failed_runs_of_the_head_gpu_ones_too(fake: FakeGitHub, make_handler,
                                                                     make_client) -> None:
    ids = _runs(fake, make_client)
    outcome = make_handler().handle(comment_payload("/rerun-failed"))
    assert outcome.status == "dispatched" and len(fake.dispatches) == 1  # the setup's, none by the bot
    assert sorted(fake.reruns) == sorted([ids["unit"], ids["gpu"], ids["gpu_approved"], ids["dispatched"]])
    body = fake.bot_replies(PR)[0].body
    assert "6 workflow run(s), 4 failed, 1 still in progress" in body  # not: old head, other PR, chatter
    assert f"In progress, left alone: [<code>nightly</code>](https://github.com/{REPO}/actions/runs/{ids['nightly']})" in body
    assert "| failure | failed jobs re-run |" in body and "| timed_out | failed jobs re-run |" in body


def test_rerun_failed_says_when_github_cut_the_search_short(fake: FakeGitHub, make_handler) -> None:
    """GitHub lists at most 1,000 runs of a filtered listing: the reply says what was not searched."""
    for _ in range(1001):
        fake.trigger("pr-gpu.yml", "pull_request_target", pull_request_payload(PR + 1, HEAD_SHA), conclusion="success")
    make_handler().handle(comment_payload("/rerun-failed"))
    body = fake.bot_replies(PR)[0].body
    assert "older runs of `pr-gpu.yml` were not searched" in body and "rerun-test-dispatch.yml" not in body.split(
        "were not searched")[0].rsplit("GitHub lists", 1)[1]
    pages = [r.query["page"] for r in fake.requests if r.path.endswith("/pr-gpu.yml/runs")]
    assert pages == [[str(n)] for n in range(1, 11)]


def test_rerun_failed_with_nothing_failed_writes_nothing_but_the_reply(fake: FakeGitHub, make_handler) -> None:
    fake.add_run(HEAD_SHA, "lint", conclusion="success")
    outcome = make_handler().handle(comment_payload("/rerun-failed"))
    assert fake.reruns == [] and not any(r.path.endswith("rerun-failed-jobs") for r in fake.requests)
    body = fake.bot_replies(PR)[0].body
    assert "Nothing failed, so nothing was re-run." in body and outcome.status == "partial"
    assert len(fake.bot_replies(PR)) == 1 and fake.bot_replies(PR)[0].edits == 0  # no claim needed


def test_rerun_post_that_timed_out_but_took_effect_is_not_resent(fake: FakeGitHub, make_handler,
                                                                 make_client) -> None:
    ids = _runs(fake, make_client)
    fake.fail("POST", r"/rerun-failed-jobs$", Scripted(route=True, delay=1.0))  # lands, answer too late
    handler = make_handler(client=make_client(timeout=0.3))
    outcome = handler.handle(comment_payload("/rerun-failed"))
    failed = [ids["unit"], ids["gpu"], ids["gpu_approved"], ids["dispatched"]]
    assert sorted(fake.reruns) == sorted(failed)  # each once
    first = outcome.reruns[0].run.id  # the POST that timed out
    assert {r.run.id: r.state for r in outcome.reruns} == {i: "found" if i == first else "sent" for i in failed}
    assert outcome.errors == []


def _tier_registry(files: int, est_time: float):
    from ci.registry import parse_registry

    lines = ["version: 1", "tiers:", "  gpu_x:", "    description: one GPU", "    runner_labels: [gpu-x]",
             "    gpu_count: 1", "    arch: sm_90", "tests:"]
    for i in range(files):
        lines += [f"  tests/t{i}/test_{i}.py:", "    tiers: [gpu_x]", f"    est_time: {est_time:g}",
                  "    timeout: 86400", "    owner: \"@t\"", "    status: active"]
    registry, problems = parse_registry("\n".join(lines) + "\n")
    assert registry is not None, problems
    return registry


def test_a_tier_with_more_shards_than_one_reply_can_hold_is_refused_whole() -> None:
    """One reply row per shard and a row with a result is never dropped: a tier whose shards
    could not all fit is refused before anything is dispatched, with what to do instead."""
    from tools.rerun.cmd_rerun_tier import plan as tier_work
    from tools.rerun.commands import parse_comment
    from tools.rerun.fit import max_rows

    limit = max_rows("gpu_x")
    assert 150 <= limit <= 400
    at_limit = tier_work(_tier_registry(limit, DEFAULT_SHARD_BUDGET), parse_comment("/rerun-tier gpu_x"))
    assert len(at_limit.dispatches) == limit and at_limit.complete
    over = tier_work(_tier_registry(limit + 1, DEFAULT_SHARD_BUDGET), parse_comment("/rerun-tier gpu_x"))
    assert over.dispatches == [] and not over.complete
    assert f"{limit + 1} shards" in over.notes[0] and f"at most {limit} rows" in over.notes[0]


def test_the_row_limit_is_what_fit_really_keeps() -> None:
    """`max_rows` rows, each at its longest (github.com's longest run link, five-digit counts,
    failing ids), fit one reply with every row and every verdict kept."""
    from tools.rerun.fit import _LONGEST_RUN, fit, max_rows
    from tools.rerun.replies import MAX_BODY_CHARS
    from tools.rerun.runs_table import RunRow, parse_row

    tier = "gpu_h200_long_tier_name"
    n = max_rows(tier)
    failing = "<br>failing:<br>" + "<br>".join(f"<code>tests/t/test_x.py::test_{i}[{'p' * 60}]</code>" for i in range(3))
    rows = [RunRow(tier, f"{i}/{n}", "`self-hosted, linux, gpu-h200`", "<br>".join(["`tests/a/test_b.py`"] * 5),
                   _LONGEST_RUN, f"**failed**: 99999 passed, 99999 failed, 99999 skipped, 99999 errors in 9999.9 s{failing}")
            for i in range(1, n + 1)]
    header = "x" * 6000  # the reply's text around the table
    body = header + "\n| tier | part | runner | tests | run | result |\n|---|---|---|---|---|---|\n" + "\n".join(
        r.render() for r in rows)
    fitted = fit(body)
    assert len(fitted) <= MAX_BODY_CHARS
    kept = [parse_row(line) for line in fitted.split("\n") if parse_row(line) is not None]
    assert [r.key for r in kept] == [r.key for r in rows]
    assert all(r.result.startswith("**failed**: 99999 passed") for r in kept)
