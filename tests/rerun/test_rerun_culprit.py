"""``python -m tools.rerun culprit --runner dispatch``: a real search as a subprocess, each run a
workflow_dispatch to the fake GitHub over real HTTP. The window is ``ci culprit``'s own test
repository (tests/ci/test_culprit_cli.py: nine commits after a good one, the sixth breaks the
test); the fake's runs are completed by a thread playing the runners, failing at and after that
commit, after a delay."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.ci.test_culprit_cli import CULPRIT, _git, repo  # noqa: F401 - ci culprit's own window, reused
from tools.rerun.fake_github import FakeGitHub, FakeRun

from rerun_support import ROOT, TOKEN

TITLE_SHA = re.compile(r"\(([0-9a-f]{40})\)")


@pytest.fixture(scope="module")
def side(repo) -> str:
    """A commit off main's first-parent line (a branch from commit 3)."""
    root, shas = repo
    _git(root, "checkout", "-q", "-B", "side", shas[3])
    (root / "side.txt").write_text("x\n")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "side")
    sha = _git(root, "rev-parse", "HEAD")
    _git(root, "checkout", "-q", "main")
    return sha


class Runners:
    """Completes the fake's queued runs ``delay`` seconds after their dispatch: failure when the
    dispatched commit (in the run-name) is the culprit or later. ``most_at_once``: the most runs
    seen queued together. ``hold_after``: when set, runs past the first that many stay queued (a
    kill then finds them unfinished however slow the machine is). ``together``: when set, no run
    completes before that many were dispatched (a batch sent together is then seen queued
    together however slow the machine is; one sent run by run would never finish).
    ``on_complete(run, sha)``: called as each run completes (the fake locked), to change its
    conclusion or publish its artifacts."""

    def __init__(self, fake: FakeGitHub, shas: list[str], delay: float):
        self.fake, self.bad, self.delay = fake, set(shas[CULPRIT:]), delay
        self.cancel_once: set[str] = set()  # the first run of each of these commits is cancelled
        self.fail_once: set[str] = set()  # the first run of each of these commits fails (a flake)
        self.hold_after: int | None = None
        self.together: int | None = None
        self.on_complete: Callable[[FakeRun, str], None] | None = None
        self.most_at_once, self._stop = 0, threading.Event()
        self._seen: dict[int, float] = {}
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            with self.fake.lock:
                queued = [r for r in self.fake.runs if r.status == "queued"]
                self.most_at_once = max(self.most_at_once, len(queued))
                if self.together is not None and len(self.fake.runs) < self.together:
                    continue
                for run in queued:
                    if self.hold_after is not None and self.fake.runs.index(run) >= self.hold_after:
                        continue
                    first = self._seen.setdefault(run.id, time.monotonic())
                    if time.monotonic() - first >= self.delay:
                        sha = TITLE_SHA.search(run.display_title).group(1)
                        run.status, run.conclusion = "completed", "failure" if sha in self.bad else "success"
                        if sha in self.cancel_once:
                            self.cancel_once.discard(sha)
                            run.conclusion = "cancelled"
                        if sha in self.fail_once:
                            self.fail_once.discard(sha)
                            run.conclusion = "failure"
                        if self.on_complete is not None:
                            self.on_complete(run, sha)

    def __enter__(self) -> "Runners":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def runners(fake: FakeGitHub, repo) -> Iterator[Runners]:
    with Runners(fake, repo[1], delay=0.3) as r:
        yield r


def _argv(api_url: str, state: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "tools.rerun", "culprit", "--runner", "dispatch", "--repo", "acme/llm-serving",
            "--api-url", api_url, "--poll", "0.05", "--lookup-wait", "0.5", "--writes-per-minute", "6000",
            "--flake-rate", "0.01", "--attempts", "1", "--state", str(state), *args]


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "GITHUB_TOKEN": TOKEN, "CI_HISTORY_STORE": str(tmp / "none.sqlite")}


def _names(fake: FakeGitHub) -> list[str]:
    with fake.lock:
        return [r.display_title for r in fake.runs if r.event == "workflow_dispatch"]


def test_finds_the_culprit_through_dispatches_several_at_once(repo, fake, api_url, runners, tmp_path) -> None:
    root, shas = repo
    fake.associate(shas[CULPRIT], 17, "make add faster")
    runners.together = 2  # good's and bad's runs: within the 0.3 s delay only on an idle machine
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    done = subprocess.run(_argv(api_url, tmp_path / "s.json", "--tier", "cpu", "--test", "tests/test_calc.py",
                                "--good", shas[0], "--bad", shas[9], "--runners", "2"),
                          cwd=root, env={**_env(tmp_path), "GITHUB_STEP_SUMMARY": str(summary)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    text = summary.read_text()  # the answer where a workflow's maintainer looks, after the earlier step's
    assert text.startswith("earlier step\n### Culprit of `tests/test_calc.py` on `cpu`")
    assert f"`{shas[CULPRIT][:12]}` `commit {CULPRIT}`: found, probability" in text and "PR #17 (make add faster)" in text
    assert len(re.findall(r"\| (failed|passed) \| \[run\]\(https://github\.com/acme/llm-serving/actions/runs/\d+\) \|",
                          text)) == len(_names(fake))
    assert f"culprit {shas[CULPRIT]} (commit {CULPRIT}), PR #17 (make add faster) " \
           "https://github.com/acme/llm-serving/pull/17, probability" in done.stdout
    assert re.search(r"run [0-9a-f]{12} failed: https://github\.com/acme/llm-serving/actions/runs/\d+", done.stdout)
    names = _names(fake)
    assert len(names) == len(set(names)) and all(" cpu targets" in n and "PR #0" in n for n in names)
    assert runners.most_at_once >= 2  # the batches went out together
    inputs = [d["inputs"] for d in fake.dispatches]
    assert {i["tests"] for i in inputs} == {"tests/test_calc.py"} and {i["runner"] for i in inputs} == \
        {'["ubuntu-latest"]'}


def test_killed_between_dispatch_and_result_dispatches_nothing_twice(repo, fake, api_url, runners, tmp_path) -> None:
    root, shas = repo
    argv = _argv(api_url, tmp_path / "s.json", "--tier", "cpu", "--test", "tests/test_calc.py",
                 "--good", shas[0], "--bad", shas[9], "--runners", "2")
    runners.hold_after = 2  # good's and bad's runs complete; the probes wait until the kill
    child = subprocess.Popen(argv, cwd=root, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_names(fake)) < 3 and time.monotonic() < deadline:  # good and bad, then the first probe(s)
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)  # the runs just dispatched are held: no result read yet
    child.wait()
    at_kill = _names(fake)
    assert len(at_kill) >= 3
    with fake.lock:
        held = [r.id for r in fake.runs if r.status == "queued"]
    assert held  # killed with a run dispatched and unfinished
    journal = json.loads((tmp_path / "s.dispatches.json").read_text())
    assert {d["name"] for d in journal["dispatches"]} >= set(at_kill)  # journalled before it was sent
    runners.hold_after = None
    done = subprocess.run(argv, cwd=root, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and f"culprit {shas[CULPRIT]}" in done.stdout, done.stdout + done.stderr
    assert "no pull request associated with it" in done.stdout
    names = _names(fake)
    assert sorted(names) == sorted(set(names)), "a run was dispatched twice"
    assert set(at_kill) <= set(names)
    # The resumed search read the runs held at the kill: it dispatched nothing new for them, and
    # whether it needed further probes depends on how many went out before the kill (timing).
    for run_id in held:
        assert re.search(rf"run [0-9a-f]{{12}} (failed|passed): \S+/actions/runs/{run_id}\b", done.stdout), done.stdout


def test_a_cancelled_run_stops_the_search_and_is_dispatched_anew_on_resume(repo, fake, api_url, runners,
                                                                           tmp_path) -> None:
    root, shas = repo
    runners.cancel_once.add(shas[9])  # --bad's verification run
    argv = _argv(api_url, tmp_path / "s.json", "--tier", "cpu", "--test", "tests/test_calc.py", "--good", shas[0],
                 "--bad", shas[9])
    done = subprocess.run(argv, cwd=root, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert re.search(r"stopped: run https://\S+/actions/runs/\d+ \(.*\) ended cancelled, which says nothing",
                     done.stderr.strip().splitlines()[-1])
    assert len(_names(fake)) == 2  # good, and bad's cancelled run
    done = subprocess.run(argv, cwd=root, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and f"culprit {shas[CULPRIT]}" in done.stdout, done.stdout + done.stderr
    names = _names(fake)
    assert sorted(names) == sorted(set(names)) and sum(f"({shas[9]})" in n for n in names) == 2


def test_each_run_records_how_many_of_its_attempts_failed(repo, fake, api_url, runners, tmp_path) -> None:
    """--attempts 2: good's first dispatch flakes and its second passes (1 failed), bad's both fail
    (2 failed). The counts are the search's evidence (a pass after a failure is the weaker one):
    said per run, and kept in the state for a resume."""
    root, shas = repo
    runners.fail_once.add(shas[0])
    state = tmp_path / "s.json"
    done = subprocess.run(_argv(api_url, state, "--tier", "cpu", "--test", "tests/test_calc.py", "--good", shas[0],
                                "--bad", shas[9], "--attempts", "2"),
                          cwd=root, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert re.search(rf"{shas[0][:12]} passed \(1 of 2 attempts failed\)", done.stdout), done.stdout + done.stderr
    assert re.search(rf"{shas[9][:12]} failed \(2 of 2 attempts failed\)", done.stdout), done.stdout + done.stderr
    runs = {r["sha"]: (r["failed"], r["failures"]) for r in json.loads(state.read_text())["runs"]}
    assert runs.pop(shas[0]) == (False, 1) and runs.pop(shas[9]) == (True, 2)
    assert runs and all(failures == (2 if failed else 0) for failed, failures in runs.values()), runs  # the probes
    assert sum(f"({shas[0]})" in n for n in _names(fake)) == 2 and sum(f"({shas[9]})" in n for n in _names(fake)) == 2


@pytest.mark.parametrize("args, words, sent", [
    (("--good", "{2}", "--bad", "{7}", "--budget", "0"), "--budget", 0),
    (("--good", "{7}", "--bad", "{9}"), "--good {7s} fails tests/test_calc.py", 1),
    (("--good", "{1}", "--bad", "{3}"), "--bad {3s} passes tests/test_calc.py", 2),
    (("--good", "{side}", "--bad", "{9}"), "is not an ancestor of --bad", 0),
    (("--good", "{9}", "--bad", "{2}"), "is not an ancestor of --bad", 0),
    (("--good", "{2}", "--bad", "{7}", "--test", "tests/test_other.py"), "not a registered test file", 0),
    (("--good", "{2}", "--bad", "{7}", "--tier", "gpu"), "--tier gpu: tests/test_calc.py is registered for cpu", 0),
    (("--good", "{2}", "--bad", "{7}", "--budget", "500"), "--budget 500 x --attempts 1: up to 502 dispatches", 0),
    # each failed run's artifact reads (list + 2 downloads) count: 152 dispatches fit without them (195)
    (("--good", "{2}", "--bad", "{7}", "--budget", "150"), "up to 152 dispatches, over the 112 one search may send", 0),
    (("--good", "{2}", "--bad", "{7}", "--repo", "acme"), "--repo acme: give the repository as OWNER/NAME", 0),
])
def test_bad_input_is_one_line_exit_2_and_nothing_dispatched(repo, side, fake, api_url, runners, tmp_path, args,
                                                             words, sent) -> None:
    root, shas = repo
    fill = {str(i): s for i, s in enumerate(shas)} | {f"{i}s": s[:12] for i, s in enumerate(shas)} | {"side": side}
    argv = [fill[a[1:-1]] if a.startswith("{") else a for a in args]
    defaults = {"--test": "tests/test_calc.py", "--tier": "cpu"}
    argv += [x for flag, value in defaults.items() if flag not in argv for x in (flag, value)]
    done = subprocess.run(_argv(api_url, tmp_path / "s.json", *argv), cwd=root, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and words.format(**fill) in done.stderr.strip().splitlines()[-1]
    assert len(fake.dispatches) == sent  # only the verification runs, if any


SEARCH_RUN = "https://github.com/acme/llm-serving/actions/runs/555"


def _reply(fake: FakeGitHub, comment_id: int) -> int:
    """The bot's "searching" reply to a /culprit comment, as the handler leaves it."""
    from tools.rerun.github import DEFAULT_BOT_LOGIN
    from tools.rerun.replies import marker

    from rerun_support import PR

    return fake.add_comment(PR, DEFAULT_BOT_LOGIN, f"{marker(comment_id)}\n@maintainer searching: 9 candidate "
                                                   f"commit(s) ..., [run]({SEARCH_RUN}).")


def _answer(fake: FakeGitHub, reply_id: int) -> str:
    from rerun_support import PR

    with fake.lock:
        return next(c.body for c in fake.comments[PR] if c.id == reply_id)


def test_the_answer_is_written_into_the_culprit_reply(repo, fake, api_url, runners, tmp_path) -> None:
    """culprit.yml's command with --pr and --comment-id: the reply becomes the answer (culprit,
    subject, PR, probability, every run with its link), marker and mention kept."""
    from tools.rerun.replies import find_marker

    from rerun_support import PR

    root, shas = repo
    fake.associate(shas[CULPRIT], 17, "make add *faster*")
    reply_id = _reply(fake, 901)
    done = subprocess.run(_argv(api_url, tmp_path / "s.json", "--tier", "cpu", "--test", "tests/test_calc.py",
                                "--good", shas[0], "--bad", shas[9], "--pr", str(PR), "--comment-id", "901",
                                "--run-url", SEARCH_RUN),
                          cwd=root, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    body = _answer(fake, reply_id)
    assert find_marker(body, 901).state == "done"
    head = body.split("\n")[1]
    assert head.startswith(f"@maintainer culprit of <code>tests/test&#95;calc&#46;py</code> on `cpu`: "
                           f"`{shas[CULPRIT][:12]}` commit {CULPRIT} — [PR #17](https://github.com/acme/llm-serving/"
                           "pull/17) (make add &#42;faster&#42;), probability "), head
    links = re.findall(r"^\| `[0-9a-f]{12}` \| (?:failed|passed) \| \[run\]\((https://github\.com/acme/llm-serving/"
                       r"actions/runs/\d+)\) \|$", body, re.M)
    assert len(links) == len(_names(fake)) >= 3 and f"search [run]({SEARCH_RUN})" in body


def test_a_search_that_stops_short_says_so_in_the_reply(repo, fake, api_url, runners, tmp_path) -> None:
    from rerun_support import PR

    root, shas = repo
    reply_id = _reply(fake, 902)
    done = subprocess.run(_argv(api_url, tmp_path / "s.json", "--tier", "cpu", "--test", "tests/test_calc.py",
                                "--good", shas[0], "--bad", shas[9], "--budget", "2", "--pr", str(PR),
                                "--comment-id", "902", "--run-url", SEARCH_RUN),
                          cwd=root, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"^@maintainer stopped: budget spent, most likely `[0-9a-f]{12}` commit \d — no pull request "
                     r"associated with it \(p 0\.\d{3}\), for ", _answer(fake, reply_id), re.M), _answer(fake, reply_id)


def test_bad_input_of_the_search_is_said_in_the_reply(repo, fake, api_url, runners, tmp_path) -> None:
    """A --good that fails (the two verification runs spent): exit 2, and the reply says why."""
    from rerun_support import PR

    root, shas = repo
    reply_id = _reply(fake, 903)
    done = subprocess.run(_argv(api_url, tmp_path / "s.json", "--tier", "cpu", "--test", "tests/test_calc.py",
                                "--good", shas[7], "--bad", shas[9], "--pr", str(PR), "--comment-id", "903"),
                          cwd=root, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout + done.stderr
    body = _answer(fake, reply_id)
    assert "@maintainer the culprit search stopped without an answer (search run):" in body
    assert f"--good {shas[7][:12]} fails tests/test_calc.py" in body and "post a corrected `/culprit`" in body


def test_the_dispatch_runners_answer_is_stored_with_each_runs_link(repo, fake, api_url, runners, tmp_path) -> None:
    """Issue 51: `ci culprit`'s answer reaches the history through the dispatch runner too, under
    its --repo, with every dispatched run's link and the search's own run."""
    from ci.history.culprits import culprit_states
    from ci.history.store import open_store

    root, shas = repo
    store = tmp_path / "h.sqlite"
    open_store(str(store)).close()
    env = {**_env(tmp_path), "CI_HISTORY_STORE": str(store), "GITHUB_SERVER_URL": "https://github.com",
           "GITHUB_REPOSITORY": "acme/llm-serving", "GITHUB_RUN_ID": "4242"}
    done = subprocess.run(_argv(api_url, tmp_path / "s.json", "--tier", "cpu", "--test", "tests/test_calc.py",
                                "--good", shas[0], "--bad", shas[9], "--runners", "2"),
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    with open_store(str(store), create=False) as s:
        [state] = culprit_states(s, "acme/llm-serving").values()
        [(links, runs)] = s.fetchall("SELECT run_links, runs FROM culprits")
    assert (state.culprit, state.found, state.run_url) == (shas[CULPRIT], True,
                                                          "https://github.com/acme/llm-serving/actions/runs/4242")
    links = json.loads(links)
    assert runs == len(links) == len(_names(fake)) and all(
        re.fullmatch(r"https://github\.com/acme/llm-serving/actions/runs/\d+", link) for link in links)


def test_the_reply_and_the_stored_answer_give_one_search_run(repo, fake, api_url, runners, tmp_path) -> None:
    """Issue 51: --run-url and GitHub's environment name different runs here; the reply and the
    history both give --run-url's (`ci.commands.culprit.search_run_url`), not one each."""
    from ci.history.culprits import culprit_states
    from ci.history.store import open_store

    from rerun_support import PR

    root, shas = repo
    store = tmp_path / "h.sqlite"
    open_store(str(store)).close()
    reply_id = _reply(fake, 904)
    env = {**_env(tmp_path), "CI_HISTORY_STORE": str(store), "GITHUB_SERVER_URL": "https://github.com",
           "GITHUB_REPOSITORY": "acme/llm-serving", "GITHUB_RUN_ID": "4242"}
    done = subprocess.run(_argv(api_url, tmp_path / "s.json", "--tier", "cpu", "--test", "tests/test_calc.py",
                                "--good", shas[0], "--bad", shas[9], "--pr", str(PR), "--comment-id", "904",
                                "--run-url", SEARCH_RUN),
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"search [run]({SEARCH_RUN})" in _answer(fake, reply_id)
    with open_store(str(store), create=False) as s:
        [state] = culprit_states(s, "acme/llm-serving").values()
    assert state.run_url == SEARCH_RUN
