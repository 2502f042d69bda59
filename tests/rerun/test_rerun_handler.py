"""`/rerun-test` end to end against a fake GitHub served on 127.0.0.1 (every request recorded)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ci.registry import find_repo_root, load_registry
from tools.rerun.commands import quote
from tools.rerun.fake_github import FakeGitHub, Scripted
from tools.rerun.github import DEFAULT_BOT_LOGIN as BOT_LOGIN
from tools.rerun.github import GitHubError
from tools.rerun.handler import BotConfig, Handler
from tools.rerun.replies import find_marker, marker
from tools.rerun.resolve import default_tiers
from tools.rerun.runs_table import find_row
from tools.rerun.wrap import breakable_code

from rerun_support import HEAD_SHA, PR, REPO, comment_payload, dedent

STORY_FILE = "tests/quant/test_kvfp4_quant_dequant.py"


def _writes(fake: FakeGitHub) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in fake.writes()]


def test_story_command_dispatches_on_gpu_tier(fake: FakeGitHub, make_handler) -> None:
    payload = comment_payload("/rerun-test test_kvfp4_quant_dequant.py", comment_id=101)
    outcome = make_handler().handle(payload)

    assert outcome.status == "dispatched" and outcome.errors == []
    (dispatch,) = fake.dispatches
    assert dispatch["workflow"] == "rerun-test-dispatch.yml" and dispatch["ref"] == "main"
    assert dispatch["inputs"] == {
        "pr": str(PR), "sha": HEAD_SHA, "tier": "gpu_b200", "part": "targets",
        "runner": '["self-hosted", "linux", "gpu-b200"]', "tests": STORY_FILE, "comment_id": "101", "slot": "1/1",
    }
    assert json.loads(dispatch["inputs"]["runner"]) == ["self-hosted", "linux", "gpu-b200"]
    assert [c for c, _ in fake.reactions] == [101, 101] and [r for _, r in fake.reactions] == ["eyes", "rocket"]
    (reply,) = fake.bot_replies(PR)
    assert find_marker(reply.body, 101).state == "done" and reply.edits == 1  # claimed, then edited
    assert f"| {quote('test_kvfp4_quant_dequant.py')} | `{STORY_FILE}` | `gpu_b200` |" in reply.body
    row = find_row(reply.body, "gpu_b200", "targets")
    (run,) = fake.runs
    assert row is not None and row.result == "dispatched" and row.tests == breakable_code(STORY_FILE, limit=200)
    assert row.run == f"[run](https://github.com/{REPO}/actions/runs/{run.id})"
    # The head SHA is read after the permission check; the claim is posted before the dispatch.
    paths = [(r.method, r.path) for r in fake.requests]
    claim = paths.index(("POST", f"/repos/{REPO}/issues/{PR}/comments"))
    assert paths.index(("GET", f"/repos/{REPO}/collaborators/maintainer/permission")) \
        < paths.index(("GET", f"/repos/{REPO}/pulls/{PR}")) < claim \
        < paths.index(("POST", f"/repos/{REPO}/actions/workflows/rerun-test-dispatch.yml/dispatches"))
    assert all(r.headers.get("authorization") == "Bearer test-token" for r in fake.requests)


def test_targets_of_all_lines_go_out_as_one_dispatch_per_tier(fake: FakeGitHub, make_handler) -> None:
    body = dedent("""
        /rerun-test test_pack.py test_kvfp4_quant_dequant.py::test_roundtrip[bf16]
        /rerun-test tests/a/test_dup.py --tier gpu_h100
    """)
    outcome = make_handler().handle(comment_payload(body))
    assert outcome.status == "dispatched"
    assert len(fake.dispatches) == 2  # three targets, two tiers
    by_tier = {d["inputs"]["tier"]: d["inputs"]["tests"] for d in fake.dispatches}
    assert by_tier == {
        "gpu_h100": "tests/quant/test_pack.py tests/a/test_dup.py",
        "gpu_b200": f"tests/quant/test_pack.py {STORY_FILE}::test_roundtrip[bf16]",
    }


def test_unregistered_manual_folder_file_shows_yaml(fake: FakeGitHub, make_handler) -> None:
    outcome = make_handler().handle(comment_payload("/rerun-test test_legacy_fp4_server.py --tier gpu_b200"))
    assert outcome.status == "partial" and fake.dispatches == []
    body = fake.bot_replies(PR)[0].body
    assert "`tests/manual/test_legacy_fp4_server.py` exists in the tree but is not registered" in body
    assert "```yaml\n  tests/manual/test_legacy_fp4_server.py:\n    tiers: [gpu_b200]\n" in body
    # On a GPU tier the snippet carries the timeout lint's L007 asks for, so pasting it lints clean.
    assert "    status: active\n    timeout: 120\n```" in body
    assert [r for _, r in fake.reactions] == ["eyes", "confused"]
    # Nothing to dispatch: no claim either, one reply.
    assert _writes(fake).count(("POST", f"/repos/{REPO}/issues/{PR}/comments")) == 1


def test_manual_and_quarantined_entries_explain_and_show_diff(fake: FakeGitHub, make_handler) -> None:
    make_handler().handle(comment_payload("/rerun-test test_old_pool.py test_broken.py"))
    body = fake.bot_replies(PR)[0].body
    assert fake.dispatches == []
    assert "registered as manual" in body and "needs 8 GPUs and a model checkpoint" in body
    assert "-    status: manual\n-    reason: needs 8 GPUs and a model checkpoint\n+    status: active" in body
    assert "quarantined (known broken)" in body and "https://github.com/acme/llm-serving/issues/7" in body
    assert "-    issue: https://github.com/acme/llm-serving/issues/7\n+    status: active" in body
    # Applying each suggested change gives valid YAML that keeps the owner ("@mem-team" needs quotes).
    diffs = re.findall(r"```diff\n(.*?)```", body, flags=re.S)
    assert len(diffs) == 2
    for diff in diffs:
        after = "\n".join(line[1:] for line in diff.splitlines() if not line.startswith("-"))
        (entry,) = yaml.safe_load("tests:\n" + after)["tests"].values()
        assert entry["status"] == "active" and entry["owner"] in ("@mem-team", "quant")


def test_ambiguous_unknown_and_tier_errors(fake: FakeGitHub, make_handler) -> None:
    body = "/rerun-test test_dup.py test_kvfp4_quant_dequnt.py\n/rerun-test test_pack.py --tier gpu_b200_x4\n"
    outcome = make_handler().handle(comment_payload(body))
    assert outcome.status == "partial" and fake.dispatches == []
    reply = fake.bot_replies(PR)[0].body
    assert "several registered files have this name" in reply
    assert "`tests/a/test_dup.py`" in reply and "`tests/b/test_dup.py`" in reply
    assert "Did you mean:\n  * `tests/quant/test_kvfp4_quant_dequant.py`" in reply
    assert f"{quote('gpu_b200_x4')} is not one of this file's tiers; use one of `cpu`, `gpu_h100`, `gpu_b200`" in reply


def test_unsafe_targets_are_quoted_escaped_and_never_dispatched(fake: FakeGitHub, make_handler) -> None:
    body = "/rerun-test ../../etc/passwd /abs/test_x.py test_$(id).py test_pack.py"
    outcome = make_handler().handle(comment_payload(body))
    assert outcome.status == "partial"
    reply = fake.bot_replies(PR)[0].body
    assert "refused: the target contains `..`" in reply
    assert "is an absolute path" in reply
    assert quote("test_$(id).py") in reply and quote("$") in reply
    # The safe target in the same comment still runs.
    assert [d["inputs"]["tests"] for d in fake.dispatches] == ["tests/quant/test_pack.py"] * 2


def test_code_blocks_quotes_edits_issues_and_bots_are_ignored(fake: FakeGitHub, make_handler) -> None:
    handler = make_handler()
    quoted = dedent("""
        > /rerun-test test_pack.py
        ```
        /rerun-test test_pack.py
        ```
    """)
    assert handler.handle(comment_payload(quoted)).status == "ignored"
    assert handler.handle(comment_payload("/rerun-test test_pack.py", action="edited")).status == "ignored"
    assert handler.handle(comment_payload("/rerun-test test_pack.py", on_pr=False)).status == "ignored"
    own = comment_payload(marker(1) + "\n/rerun-test test_pack.py")
    assert handler.handle(own).status == "ignored"
    assert fake.requests == []


def test_non_collaborator_gets_polite_refusal(fake: FakeGitHub, make_handler) -> None:
    for user in ("reader", "stranger"):
        outcome = make_handler().handle(comment_payload("/rerun-test test_pack.py", user=user))
        assert outcome.status == "refused"
    assert fake.dispatches == []
    replies = [c.body for c in fake.bot_replies(PR)]
    assert "your permission is `read` (role `triage`)" in replies[0]
    assert "your permission is `none`" in replies[1]
    assert all("thanks for the request" in r and "refused by rule 1 (collaborator" in r for r in replies)


def test_help_reply_is_open_to_everyone_and_prints_the_policy(fake: FakeGitHub, make_handler) -> None:
    assert make_handler().handle(comment_payload("/rerun-test --help", user="stranger")).status == "help"
    body = fake.bot_replies(PR)[0].body
    assert "/rerun-test <target> [<target> ...] [--tier TIER]" in body
    assert "| 2 | the PR's author, when the PR's branch is in this repository |" in body
    assert fake.dispatches == [] and not any(r.path.endswith("/permission") for r in fake.requests)


def test_same_comment_twice_dispatches_once(fake: FakeGitHub, make_handler) -> None:
    payload = comment_payload("/rerun-test test_kvfp4_quant_dequant.py", comment_id=777)
    assert make_handler().handle(payload).status == "dispatched"
    assert make_handler().handle(payload).status == "duplicate"
    assert len(fake.dispatches) == 1 and len(fake.bot_replies(PR)) == 1


def test_a_marker_pasted_by_someone_else_does_not_silence_the_bot(fake: FakeGitHub, make_handler) -> None:
    """The comment id is public: only the bot's own replies may mark a comment as answered."""
    fake.add_comment(PR, "mallory", "nice PR " + marker(4343))
    outcome = make_handler().handle(comment_payload("/rerun-test test_pack.py", comment_id=4343))
    assert outcome.status == "dispatched" and fake.dispatches


def test_marker_found_on_a_later_page(fake: FakeGitHub, make_handler) -> None:
    for i in range(150):
        fake.add_comment(PR, "someone", f"comment {i}")
    fake.add_comment(PR, BOT_LOGIN, marker(4242) + "\nold reply")
    assert make_handler().handle(comment_payload("/rerun-test test_pack.py", comment_id=4242)).status == "duplicate"
    assert fake.dispatches == []
    pages = [r.query.get("page") for r in fake.requests if r.path.endswith("/comments")]
    assert pages == [None, ["2"]]


def test_dry_run_reads_but_never_writes(fake: FakeGitHub, make_handler) -> None:
    outcome = make_handler(dry_run=True).handle(comment_payload("/rerun-test test_kvfp4_quant_dequant.py"))
    assert outcome.status == "dispatched" and fake.writes() == []
    assert outcome.dispatches[0].inputs["tests"] == STORY_FILE
    assert "Dry run: nothing was sent." in outcome.reply
    assert {r.method for r in fake.requests} == {"GET"}


def test_dispatch_failure_is_reported_in_reply(fake: FakeGitHub, make_handler) -> None:
    fake.fail("POST", r"/dispatches$", *[Scripted(400, body={"message": "boom"})])
    outcome = make_handler().handle(comment_payload("/rerun-test test_kvfp4_quant_dequant.py", comment_id=515))
    assert outcome.status == "partial" and len(outcome.errors) == 1  # the CLI exits non-zero
    reply = fake.bot_replies(PR)[0].body
    assert "dispatch failed:" in reply and quote("HTTP 400: boom").removeprefix("<code>") in reply
    assert find_marker(reply, 515).state == "incomplete"  # a replay resumes it
    assert [r for _, r in fake.reactions] == ["eyes", "confused"]


def test_permission_check_failure_is_reported(fake: FakeGitHub, make_handler) -> None:
    fake.fail("GET", r"/permission$", Scripted(403, body={"message": "Resource not accessible by integration"}))
    outcome = make_handler().handle(comment_payload("/rerun-test test_pack.py"))
    assert outcome.status == "failed" and fake.dispatches == [] and outcome.errors
    body = fake.bot_replies(PR)[0].body
    assert "reading the repository, the permission or the pull request failed" in body
    assert "Resource not accessible by integration" in body and "state=failed" in body


def test_reply_post_failure_raises_typed_error(fake: FakeGitHub, make_handler) -> None:
    fake.fail("POST", rf"/issues/{PR}/comments$", *[Scripted(502, body={"message": "bad gateway"})] * 4)
    with pytest.raises(GitHubError, match="HTTP 502: bad gateway") as info:
        make_handler().handle(comment_payload("/rerun-test test_pack.py"))
    assert info.value.attempts == 4
    assert fake.dispatches == []  # the claim could not be posted, so nothing was dispatched


def test_invalid_registry_is_reported(fake: FakeGitHub, make_handler, tmp_path: Path) -> None:
    (tmp_path / "registry.yaml").write_text("version: 1\ntiers: {}\ntests:\n  a.py: {tiers: [x]}\n")
    outcome = make_handler(root=tmp_path).handle(comment_payload("/rerun-test a.py"))
    assert outcome.status == "failed"
    body = fake.bot_replies(PR)[0].body
    assert "`registry.yaml` on the default branch is invalid" in body and "registry.yaml:4:" in body


def test_story_file_in_the_real_registry(fake: FakeGitHub, make_handler) -> None:
    root = find_repo_root()
    registry = load_registry(root / "registry.yaml")
    assert registry.entry(STORY_FILE) is not None, f"{STORY_FILE} must stay registered"
    outcome = make_handler(root=root).handle(comment_payload("/rerun-test test_kvfp4_quant_dequant.py"))
    assert {d["inputs"]["tests"] for d in fake.dispatches} == {STORY_FILE}, outcome.reply
    expected = default_tiers(registry, registry.entry(STORY_FILE))
    assert "gpu_b200" in expected  # the story: the FP4 KV test must be runnable on B200
    assert tuple(d["inputs"]["tier"] for d in fake.dispatches) == expected


def test_other_repository_is_ignored(fake: FakeGitHub, make_client, repo_root: Path) -> None:
    handler = Handler(make_client(), BotConfig(repo_root=repo_root, repository="acme/other"))
    outcome = handler.handle(comment_payload("/rerun-test test_pack.py"))
    assert outcome.status == "ignored" and "this bot serves acme/other" in outcome.reason
    assert fake.requests == []


def test_malformed_commands_and_too_many_targets(fake: FakeGitHub, make_handler) -> None:
    outcome = make_handler().handle(comment_payload("/rerun-test --tier\n/rerun-test --frobnicate x.py"))
    assert outcome.status == "invalid" and fake.dispatches == []
    reply = fake.bot_replies(PR)[0].body
    assert "**line 1** <code>/rerun-test --tier</code>: `--tier` needs a value" in reply
    assert "unknown option <code>--frobnicate</code>" in reply and "| target |" not in reply
    many = "/rerun-test " + " ".join(f"test_{i}.py" for i in range(21))
    assert make_handler().handle(comment_payload(many)).status == "partial"
    assert "asks for 21 targets; at most 20" in fake.bot_replies(PR)[1].body
    assert fake.dispatches == []


def test_default_branch_missing_from_payload_is_read_from_the_repository(fake: FakeGitHub, make_handler) -> None:
    fake.default_branch = "trunk"
    payload = comment_payload("/rerun-test test_kvfp4_quant_dequant.py")
    del payload["repository"]["default_branch"]
    assert make_handler().handle(payload).status == "dispatched"
    assert [d["ref"] for d in fake.dispatches] == ["trunk"]
    assert ("GET", f"/repos/{REPO}") in [(r.method, r.path) for r in fake.requests]
    assert "on `trunk`" in fake.bot_replies(PR)[0].body


def test_owner_runs_every_active_file_of_the_team_on_its_gpu_tiers(fake: FakeGitHub, make_handler) -> None:
    outcome = make_handler().handle(comment_payload("/rerun-test --owner @QUANT"))
    assert outcome.status == "dispatched"
    by_tier = {d["inputs"]["tier"]: d["inputs"]["tests"].split() for d in fake.dispatches}
    # quant's active files (test_broken.py is quarantined); one dispatch per tier, never cpu.
    assert by_tier == {"gpu_h100": ["tests/quant/test_pack.py"],
                       "gpu_b200": ["tests/quant/test_kvfp4_quant_dequant.py", "tests/quant/test_pack.py"]}
    assert f"| {quote('--owner @QUANT')} | 2 file(s) | `gpu_h100`, `gpu_b200` |" in fake.bot_replies(PR)[0].body


def test_owner_with_cpu_only_files_tier_filter_and_unknown_owner(fake: FakeGitHub, make_handler) -> None:
    make_handler().handle(comment_payload("/rerun-test --owner ci --tier gpu_h100"))
    assert [d["inputs"]["tests"] for d in fake.dispatches] == ["tests/a/test_dup.py tests/b/test_dup.py"]
    assert "`tests/cpu_only/test_cpu_only.py`" in fake.bot_replies(PR)[0].body  # listed as not run
    outcome = make_handler().handle(comment_payload("/rerun-test --owner @quantt"))
    assert outcome.status == "partial" and len(fake.dispatches) == 1
    assert "Did you mean `quant`?" in fake.bot_replies(PR)[1].body


def test_a_look_alike_command_gets_one_reply_with_the_command_to_type(fake: FakeGitHub, make_handler) -> None:
    payload = comment_payload("please \n\uff0frerun-test test_pack.py\n", comment_id=9091, user="stranger")
    assert make_handler().handle(payload).status == "invalid"
    (reply,) = fake.bot_replies(PR)
    assert "**line 2** looks like a command" in reply.body and "U+FF0F FULLWIDTH SOLIDUS" in reply.body
    assert "was **not run**" in reply.body and "```\n/rerun-test test_pack.py\n```" in reply.body
    assert make_handler().handle(payload).status == "duplicate"  # once, even when redelivered
    assert fake.dispatches == [] and len(fake.bot_replies(PR)) == 1


def test_a_look_alike_next_to_a_real_command(fake: FakeGitHub, make_handler) -> None:
    body = "/rerun-test test_kvfp4_quant_dequant.py\n/rerun-test\u00a0test_pack.py\n"
    assert make_handler().handle(comment_payload(body)).status == "partial"  # one line did not run
    assert [d["inputs"]["tests"] for d in fake.dispatches] == ["tests/quant/test_kvfp4_quant_dequant.py"]
    assert [r for _, r in fake.reactions] == ["eyes", "confused"]
    assert "U+00A0 NO-BREAK SPACE" in fake.bot_replies(PR)[0].body
