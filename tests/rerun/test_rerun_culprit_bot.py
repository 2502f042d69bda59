"""``/culprit`` through the real handler at the fake GitHub over real HTTP, in a git repository of
its own (the registry of `rerun_support`, then five commits on main and one off its line): a
permitted command dispatches culprit.yml exactly once with the inputs the workflow declares and
replies "searching: ..."; a refused user and every kind of bad input get a reply and no dispatch;
the window defaults to the test history's breakage window (a SQLite history filled by ingest)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import open_store
from tests.ci.history_support import Case, write_report
from tools.rerun.cmd_culprit import CULPRIT_WORKFLOW, culprit_run_name, max_budget
from tools.rerun.fake_github import FakeGitHub, Scripted
from tools.rerun.github import GitHubError

from rerun_support import PR, REGISTRY, REPO, TREE_FILES, comment_payload, load_workflow

FILE = "tests/quant/test_kvfp4_quant_dequant.py"  # tiers cpu, gpu_b200: one GPU tier
RUN_LINK = f"https://github.com/{REPO}/actions/runs/"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def window(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], str]:
    """(the repository, main's commits 0-5, a commit off main's first-parent line)."""
    root = tmp_path_factory.mktemp("culprit-bot") / "repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    (root / "registry.yaml").write_text(REGISTRY, encoding="utf-8")
    for rel in TREE_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("def test_ok():\n    pass\n", encoding="utf-8")
    shas = []
    for i in range(6):
        (root / f"m{i}.py").write_text(f"X = {i}\n")
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", f"commit {i}")
        shas.append(_git(root, "rev-parse", "HEAD"))
    _git(root, "checkout", "-q", "-b", "side", shas[2])
    (root / "side.py").write_text("S = 1\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "side")
    side = _git(root, "rev-parse", "HEAD")
    _git(root, "checkout", "-q", "main")
    return root, shas, side


@pytest.fixture
def github(fake: FakeGitHub) -> FakeGitHub:
    """The fake, naming culprit.yml's runs with that workflow's own run-name."""
    fake.run_names[CULPRIT_WORKFLOW] = str(load_workflow(CULPRIT_WORKFLOW)["run-name"])
    return fake


def _fill(text: str, shas: list[str], side: str) -> str:
    for i, sha in enumerate(shas):
        text = text.replace(f"{{{i}}}", sha[:10])
    return text.replace("{side}", side[:10])


def test_a_permitted_culprit_dispatches_culprit_yml_once_and_says_searching(github: FakeGitHub, make_handler,
                                                                           window) -> None:
    root, shas, _ = window
    outcome = make_handler(root=root).handle(comment_payload(
        f"/culprit {FILE} --good {shas[1][:9]} --bad {shas[5]} --budget 12", comment_id=801))
    assert outcome.status == "dispatched", outcome
    (sent,) = github.dispatches
    inputs = {"tier": "gpu_b200", "test": FILE, "good": shas[1], "bad": shas[5], "budget": "12", "runners": "1",
              "comment_id": "801", "pr": str(PR)}
    assert (sent["workflow"], sent["ref"], sent["inputs"]) == (CULPRIT_WORKFLOW, "main", inputs)
    assert set(load_workflow(CULPRIT_WORKFLOW)["on"]["workflow_dispatch"]["inputs"]) == set(inputs)
    (run,) = github.runs
    assert run.display_title == culprit_run_name(inputs)  # the workflow's run-name is the one the bot looks up
    (reply,) = github.bot_replies(PR)
    assert "state=done" in reply.body and reply.body.split("\n")[1].startswith(
        f"@maintainer searching: 4 candidate commit(s) between `{shas[1][:12]}` and `{shas[5][:12]}` for "
        f"<code>{FILE.replace('_', '&#95;').replace('.', '&#46;')}</code> on `gpu_b200`, budget 12 runs, "
        f"[run]({RUN_LINK}{run.id}).")
    # a redelivery of the same comment finds the final reply: nothing twice
    again = make_handler(root=root).handle(comment_payload(
        f"/culprit {FILE} --good {shas[1][:9]} --bad {shas[5]} --budget 12", comment_id=801))
    assert again.status == "duplicate" and len(github.dispatches) == 1


def test_a_resumed_culprit_finds_its_run_and_sends_nothing_twice(github: FakeGitHub, make_handler, window) -> None:
    """The claim was posted and the dispatch went out, then the handler died: the replay looks the
    run up by its run-name and only writes the reply."""
    root, shas, _ = window
    body = f"/culprit {FILE} --good {shas[0]} --bad {shas[2]}"
    github.fail("PATCH", r"/issues/comments/\d+$", *[Scripted(502, body={"message": "bad gateway"})] * 4)
    with pytest.raises(GitHubError):
        make_handler(root=root).handle(comment_payload(body, comment_id=802))
    assert len(github.dispatches) == 1 and "state=claimed" in github.bot_replies(PR)[0].body
    outcome = make_handler(root=root).handle(comment_payload(body, comment_id=802))
    assert outcome.status == "dispatched" and outcome.dispatches[0].state == "found"
    assert len(github.dispatches) == 1 and "searching: 2 candidate" in github.bot_replies(PR)[0].body


def test_a_failed_dispatch_is_said_and_left_resumable(github: FakeGitHub, make_handler, window) -> None:
    root, shas, _ = window
    github.fail("POST", r"/workflows/culprit\.yml/dispatches$",
                Scripted(422, body={"message": "Workflow does not have 'workflow_dispatch' trigger"}))
    outcome = make_handler(root=root).handle(comment_payload(f"/culprit {FILE} --good {shas[0]} --bad {shas[2]}"))
    assert outcome.status == "partial" and outcome.errors and github.runs == []
    body = github.bot_replies(PR)[0].body
    assert "state=incomplete" in body and "could not start the culprit search" in body
    assert "Workflow does not have" in body


@pytest.mark.parametrize("user", ["reader", "contributor"])
def test_permission_is_checked_as_for_rerun_test(github: FakeGitHub, make_handler, window, user: str) -> None:
    """A reader who is not the PR's author is refused by rule 1; the PR's author (same repository)
    may, as for `/rerun-test`."""
    root, shas, _ = window
    outcome = make_handler(root=root).handle(comment_payload(
        f"/culprit {FILE} --good {shas[1]} --bad {shas[5]}", user=user))
    if user == "reader":
        assert outcome.status == "refused" and github.dispatches == []
        assert "refused by rule 1" in github.bot_replies(PR)[0].body
    else:
        assert outcome.status == "dispatched" and len(github.dispatches) == 1


@pytest.mark.parametrize("body, words", [
    ("/culprit tests/nope/test_zz.py --good {1} --bad {5}", "no registered test file"),
    ("/culprit tests/quant/test_pack.py --good {1} --bad {5}", "runs on the GPU tiers `gpu_h100`, `gpu_b200`: name one"),
    (f"/culprit {FILE} --tier gpu_h100 --good {{1}} --bad {{5}}", "is not one of this file's tiers"),
    (f"/culprit {FILE} --good {{1}} --bad {{5}} --budget 0", "`--budget` must be at least 1 run"),
    (f"/culprit {FILE} --good {{1}} --bad {{5}} --budget 500", "is over the"),
    # each run's artifact reads count too: 60 would fit without them (95)
    (f"/culprit {FILE} --good {{1}} --bad {{5}} --budget 60", "`--budget 60` is over the 54 runs"),
    (f"/culprit {FILE} --good {{side}} --bad {{5}}", "is not an ancestor of --bad"),
    (f"/culprit {FILE} --good {{5}} --bad {{1}}", "is not an ancestor of --bad"),
    (f"/culprit {FILE} --good 1234567 --bad {{5}}", "--good 1234567: not a commit of the default branch"),
    (f"/culprit {FILE} --good {{1}}", "no test history is configured"),
    (f"/culprit {FILE} --good zz --bad {{5}}", "is not a commit SHA"),
    (f"/culprit {FILE} tests/quant/test_pack.py --good {{1}} --bad {{5}}", "give exactly one test file"),
    (f"/culprit {FILE} --good {{1}} --bad {{5}}\n/rerun-test {FILE}", "post `/culprit` in a comment of its own"),
])
def test_bad_input_is_a_reply_and_nothing_is_dispatched(github: FakeGitHub, make_handler, window, body: str,
                                                       words: str) -> None:
    root, shas, side = window
    outcome = make_handler(root=root).handle(comment_payload(_fill(body, shas, side)))
    assert outcome.status == "invalid", outcome
    assert github.dispatches == [] and github.runs == []
    (reply,) = github.bot_replies(PR)
    assert words in reply.body and "nothing was run" in reply.body and "state=done" in reply.body
    assert str(root) not in reply.body  # git's messages name the checkout; the reply does not
    assert max_budget() < 500


def _history(location: str, directory: Path, shas: list[str], first_fail: int | None) -> None:
    """main's pushes of commits 0-5 on gpu_b200: the file's test_ok fails from ``first_fail`` on."""
    with open_store(location) as store:
        for i, sha in enumerate(shas):
            failed = first_fail is not None and i >= first_fail
            cases = [Case(FILE, "test_ok", "failed" if failed else "passed", "AssertionError: scale")]
            identity = RunIdentity(REPO, sha, "push", "gpu_b200", run_url=f"https://ci.example/r/{i}")
            assert ingest(store, prepare(write_report(directory, cases), identity)).added


def test_the_window_defaults_to_the_histories_breakage_window(github: FakeGitHub, make_handler, window,
                                                              tmp_path: Path) -> None:
    """Broken on main since commit 3, last passed at commit 2: good and bad are those two."""
    root, shas, _ = window
    location = str(tmp_path / "history.sqlite")
    _history(location, tmp_path, shas, first_fail=3)
    outcome = make_handler(root=root, history=location).handle(comment_payload(f"/culprit {FILE}::test_ok"))
    assert outcome.status == "dispatched", outcome
    (sent,) = github.dispatches
    assert (sent["inputs"]["good"], sent["inputs"]["bad"], sent["inputs"]["test"]) == (
        shas[2], shas[3], f"{FILE}::test_ok")
    assert "searching: 1 candidate commit(s)" in github.bot_replies(PR)[0].body
    # an explicit --good widens it; the bad stays the history's
    make_handler(root=root, history=location).handle(comment_payload(f"/culprit {FILE} --good {shas[0]}"))
    assert (github.dispatches[1]["inputs"]["good"], github.dispatches[1]["inputs"]["bad"]) == (shas[0], shas[3])


def test_no_breakage_in_the_history_is_a_reply(github: FakeGitHub, make_handler, window, tmp_path: Path) -> None:
    root, shas, _ = window
    location = str(tmp_path / "history.sqlite")
    _history(location, tmp_path, shas, first_fail=None)
    outcome = make_handler(root=root, history=location).handle(comment_payload(f"/culprit {FILE}"))
    assert outcome.status == "invalid" and github.dispatches == []
    assert "shows no open breakage" in github.bot_replies(PR)[0].body
    missing = make_handler(root=root, history=str(tmp_path / "none" / "h.sqlite")).handle(
        comment_payload(f"/culprit {FILE}"))
    assert missing.status == "invalid" and "could not be read" in github.bot_replies(PR)[1].body
    assert github.dispatches == []


def test_an_invalid_registry_is_said_and_nothing_dispatched(github: FakeGitHub, make_handler, tmp_path: Path) -> None:
    (tmp_path / "registry.yaml").write_text("version: 1\ntiers: [\n", encoding="utf-8")
    outcome = make_handler(root=tmp_path).handle(comment_payload(f"/culprit {FILE} --good 1234567 --bad 89abcde"))
    assert outcome.status == "failed" and github.dispatches == []
    assert "`registry.yaml` on the default branch is invalid" in github.bot_replies(PR)[0].body
