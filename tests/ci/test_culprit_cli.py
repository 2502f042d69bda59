"""``ci culprit --runner local`` on a small real git repository made here: nine commits after a
good one, the sixth of which breaks ``calc.add``; the test can be made flaky through a seeded,
environment-controlled failure rate (a counter file gives each attempt its own draw)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ci.culprit_support import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
TEST = '''\
import os, random, time
from pathlib import Path
import calc

def test_add():
    env = os.environ
    if env.get("CULPRIT_LOG"):
        with open(env["CULPRIT_LOG"], "a") as log:
            log.write(Path("commit_id.txt").read_text().strip() + "\\n")
    time.sleep(float(env.get("CULPRIT_SLEEP", "0")))
    counter = Path(env["CULPRIT_COUNTER"])
    count = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(count + 1))
    assert random.Random(count).random() >= float(env.get("CULPRIT_FLAKE", "0")), "flaked"
    assert calc.add(2, 3) == 5
'''
CULPRIT = 6  # commit 6 breaks add


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The repository and its commits' shas, commit 0 (good) to 9 (bad)."""
    root = tmp_path_factory.mktemp("culprit") / "repo"
    (root / "tests").mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    (root / "registry.yaml").write_text(REGISTRY)
    (root / "tests" / "test_calc.py").write_text(TEST)
    shas = []
    for i in range(10):
        (root / "commit_id.txt").write_text(f"{i}\n")
        (root / "calc.py").write_text("def add(a, b):\n    return a %s b\n" % ("-" if i >= CULPRIT else "+"))
        (root / f"notes{i}.txt").write_text("x\n")
        _git(root, "add", "-A")
        _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", f"commit {i}")
        shas.append(_git(root, "rev-parse", "HEAD"))
    return root, shas


def culprit(repo: Path, *args: str, env: dict[str, str] | None = None, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ci", "culprit", "--tier", "cpu", *args], cwd=repo, text=True,
                          capture_output=True, timeout=300, env=_env(tmp, env))


def _env(tmp: Path, extra: dict[str, str] | None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "CULPRIT_COUNTER": str(tmp / "counter"),
            "CULPRIT_LOG": str(tmp / "log"), "CI_HISTORY_STORE": str(tmp / "none.sqlite"), **(extra or {})}


def test_finds_the_breaking_commit(repo, tmp_path) -> None:
    root, shas = repo
    done = culprit(root, "--test", "tests/test_calc.py", "--good", shas[0], "--bad", shas[9], "--flake-rate", "0.01",
                   "--state", str(tmp_path / "s.json"), tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"culprit {shas[CULPRIT]} (commit {CULPRIT})" in done.stdout
    assert "flake rate 0.010 from --flake-rate; retry rate 0.500 (default max(0.5, f): no retry after a flaky " \
           "failure in the history)" in done.stdout
    assert "false-pass rate 0.0027, the 90% quantile of p's Beta(0.5, 499.5) prior (no known breakage window of " \
           "the tier in the history)" in done.stdout
    runs = json.loads((tmp_path / "s.json").read_text())["runs"]
    assert len(runs) <= 2 + 5  # the two verifications, then about log2(9) probes


def test_finds_it_through_a_flaky_test(repo, tmp_path) -> None:
    root, shas = repo
    done = culprit(root, "--test", "tests/test_calc.py::test_add", "--good", shas[0], "--bad", shas[9],
                   "--flake-rate", "0.3", "--attempts", "1", "--state", str(tmp_path / "s.json"), tmp=tmp_path,
                   env={"CULPRIT_FLAKE": "0.3"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"culprit {shas[CULPRIT]}" in done.stdout
    assert "failed" in done.stdout


@pytest.mark.parametrize("start", [0, 9])
def test_each_runs_failed_attempts_are_recorded_and_weighed(repo, tmp_path, start) -> None:
    """A run stops at its first passing attempt; the state file records how many failed and each
    one's error signature from pytest's JUnit report (the oracle: the test's log of each attempt's
    commit and its seeded draws: which assert it failed on), and the answer's probability is the
    core's replay of them. From draw 0 --bad's attempts fail on the flake, the breakage, the flake
    (no breakage signature), from 9 on the breakage thrice (its signature is learned)."""
    from ci.culprit.model import NoiseModel, Outcome, false_pass_bound, flake_match_bound
    from ci.culprit.search import Search

    root, shas = repo
    (tmp_path / "counter").write_text(str(start))
    done = culprit(root, "--test", "tests/test_calc.py", "--good", shas[0], "--bad", shas[9], "--flake-rate", "0.3",
                   "--attempts", "3", "--w-low", "1", "--state", str(tmp_path / "s.json"), tmp=tmp_path, env={"CULPRIT_FLAKE": "0.3"})
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads((tmp_path / "s.json").read_text())["runs"]
    ran = [int(line) for line in (tmp_path / "log").read_text().split()]
    count, signatures, kinds = start, {}, []
    for run in runs:
        failures, said = 0, []
        while count - start < len(ran) and failures < 3:
            assert ran[count - start] == shas.index(run["sha"])
            flaked = random.Random(count).random() < 0.3
            passed = not flaked and ran[count - start] < CULPRIT
            count += 1
            if passed:
                break
            failures += 1
            said.append("flaked" if flaked else "broken")
        assert (run["failures"], run["failed"]) == (failures, failures == 3)
        assert len(run["signatures"]) == failures  # one per failed attempt
        kinds.append(said)
        for kind, signature in zip(said, run["signatures"]):
            signatures.setdefault(kind, set()).add(signature)
    passed_late = [r["failures"] for r in runs if 0 < r["failures"] < 3]
    assert count - start == len(ran) and passed_late  # a pass after failed attempts was recorded
    assert len(signatures["flaked"]) == len(signatures["broken"]) == 1 and signatures["flaked"] != signatures["broken"]
    assert kinds[1] == (["broken"] * 3 if start else ["flaked", "broken", "flaked"])
    breakage, m = (signatures["broken"].pop(), flake_match_bound(0, 0)) if start else (None, None)  # m: no history
    assert (f"breakage signature {breakage} (--bad's run); a flaky failure carries it with {m:.3f}" if start else
            "no breakage signature (--bad not verified, its attempts failed with different") in done.stdout
    search = Search([1.0] * 9, NoiseModel(0.3, false_pass_bound(0, 0), 0.5, m), attempts=3, detail=True)
    for run in runs[1:]:  # --good is no candidate; --bad's verification is one
        same = run["signatures"][-1] == breakage if run["signatures"] and breakage else None
        search.record(Outcome(shas.index(run["sha"]) - 1, run["failed"], 3, run["failures"], same))
    assert f"probability {search.best()[1]:.3f}" in done.stdout
    assert f"passed ({passed_late[0]} of 3 attempts failed)" in done.stdout


def test_a_resumed_search_weighs_the_recorded_attempt_counts(repo, tmp_path) -> None:
    """A pass after two failed attempts is weak evidence of working code (28:1 here, against 115:1
    for a pass not counted): resumed from a state file that holds the counts, with no run left in the
    budget, the answer's probability is the core's over exactly those counts (0.836, not 0.943)."""
    from ci.culprit.model import NoiseModel, Outcome, false_pass_bound
    from ci.culprit.search import Search

    root, shas = repo
    said = [(0, 0), (9, 3), (5, 2), (6, 3), (6, 3)]  # (commit, failed attempts of 3); --good, --bad first
    (tmp_path / "s.json").write_text(json.dumps({
        "good": shas[0], "bad": shas[9], "target": "tests/test_calc.py", "tier": "cpu", "attempts": 3,
        "runs": [{"sha": shas[c], "failed": j == 3, "link": None, "failures": j} for c, j in said]}))
    done = culprit(root, "--test", "tests/test_calc.py", "--good", shas[0], "--bad", shas[9], "--flake-rate", "0.3",
                   "--attempts", "3", "--w-low", "1", "--budget", "4", "--state", str(tmp_path / "s.json"), tmp=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    search = Search([1.0] * 9, NoiseModel(0.3, false_pass_bound(0, 0), 0.5), attempts=3, detail=True)
    for c, j in said[1:]:
        search.record(Outcome(c - 1, j == 3, 3, j))
    assert f"culprit {shas[CULPRIT]} (commit {CULPRIT}), probability {search.best()[1]:.3f}," in done.stdout
    assert not (tmp_path / "log").exists()  # nothing was run again


@pytest.mark.parametrize("args, words", [
    (("--good", "{2}", "--bad", "{7}", "--budget", "0"), "--budget"),
    (("--good", "{7}", "--bad", "{2}"), "is not an ancestor of --bad"),
    (("--good", "nope", "--bad", "{7}"), "--good nope: not a commit"),
    (("--good", "{2}", "--bad", "{7}", "--tier", "gpu"), "--tier gpu: tests/test_calc.py is registered for cpu"),
    (("--good", "{2}", "--bad", "{7}", "--test", "tests/test_other.py"), "not a registered test file"),
    (("--good", "{7}", "--bad", "{9}"), "--good {7s} fails tests/test_calc.py"),
    (("--good", "{1}", "--bad", "{3}"), "--bad {3s} passes tests/test_calc.py"),
    (("--good", "{2}", "--bad", "{7}", "--python", "/nonexistent/python"), "--python /nonexistent/python: not an"),
    (("--good", "{2}", "--bad", "{7}", "--test-from", "nope"), "--test-from nope: no tests/test_calc.py at that"),
    (("--good", "{2}", "--bad", "{7}", "--inject-flake", "1.5"), "--inject-flake 1.5: give a rate in [0, 1)"),
    (("--good", "{2}", "--bad", "{7}", "--runner", "dispatch"), "run `python -m tools.rerun culprit --runner dispatch"),
    (("--good", "{2}", "--bad", "{7}", "--depmap", "/nonexistent/map.json"),
     "--depmap /nonexistent/map.json: cannot read it: No such file or directory"),
    (("--good", "{2}", "--bad", "{7}", "--depmap", "registry.yaml"), "--depmap registry.yaml: not a ci-depmap"),
])
def test_bad_input_is_one_line_and_exit_2(repo, tmp_path, args, words) -> None:
    root, shas = repo
    fill = {str(i): s for i, s in enumerate(shas)} | {f"{i}s": s[:12] for i, s in enumerate(shas)}
    argv = [fill[a[1:-1]] if a.startswith("{") else a for a in args]
    if "--test" not in argv:
        argv += ["--test", "tests/test_calc.py"]
    done = culprit(root, *argv, tmp=tmp_path)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and words.format(**fill) in last[-1]
    verified = "fails" in words or "passes" in words
    log = (tmp_path / "log").read_text().split() if (tmp_path / "log").exists() else []
    assert len(log) <= (2 if verified else 0)  # nothing of the search ran


def test_a_killed_search_repeats_no_finished_run(repo, tmp_path) -> None:
    root, shas = repo
    state = tmp_path / "s.json"
    argv = [sys.executable, "-m", "ci", "culprit", "--tier", "cpu", "--test", "tests/test_calc.py", "--good", shas[0],
            "--bad", shas[9], "--flake-rate", "0.01", "--state", str(state)]
    child = subprocess.Popen(argv, cwd=root, env=_env(tmp_path, {"CULPRIT_SLEEP": "0.5"}),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if state.exists() and len(json.loads(state.read_text())["runs"]) >= 3:
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    finished = {r["sha"] for r in json.loads(state.read_text())["runs"]}
    assert len(finished) >= 3
    (tmp_path / "log").unlink()
    done = culprit(root, "--test", "tests/test_calc.py", "--good", shas[0], "--bad", shas[9], "--flake-rate", "0.01",
                   "--state", str(state), tmp=tmp_path)
    assert done.returncode == 0 and f"culprit {shas[CULPRIT]}" in done.stdout, done.stdout + done.stderr
    assert "resuming" in done.stdout
    rerun = {shas[int(i)] for i in (tmp_path / "log").read_text().split()} if (tmp_path / "log").exists() else set()
    assert not rerun & finished
    assert _git(root, "worktree", "list").count("\n") == 0  # every temporary worktree removed


def test_a_fifo_as_state_file_is_one_line_and_exit_2(repo, tmp_path) -> None:
    """The state file is read with `read_regular`: a FIFO there is named, not blocked on."""
    root, shas = repo
    state = tmp_path / "s.json"
    os.mkfifo(state)
    done = subprocess.run([sys.executable, "-m", "ci", "culprit", "--tier", "cpu", "--test", "tests/test_calc.py",
                           "--good", shas[0], "--bad", shas[9], "--state", str(state)], cwd=root, text=True,
                          capture_output=True, timeout=30, env=_env(tmp_path, None))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == \
        f"fp4kv-ci culprit: --state {state}: is a FIFO, not a regular file: give the path of a regular file"
    assert not (tmp_path / "log").exists()  # nothing of the search ran


def _fix_commit(root: Path) -> str:
    """A commit off the line (as a later fix would be) whose test file adds ``test_added``, made
    with plumbing so the shared repository's branch and working tree stay as they are."""
    text = TEST + "\n\ndef test_added():\n    with open(os.environ['CULPRIT_LOG'], 'a') as log:\n" \
        "        log.write('run\\n')\n    assert calc.add(1, 1) == 2\n"
    blob = subprocess.run(["git", "-C", str(root), "hash-object", "-w", "--stdin"], input=text, text=True,
                          check=True, capture_output=True).stdout.strip()
    tests = subprocess.run(
        ["git", "-C", str(root), "mktree"], input=f"100644 blob {blob}\ttest_calc.py\n", text=True, check=True,
        capture_output=True).stdout.strip()
    top = subprocess.run(["git", "-C", str(root), "mktree"], input=f"040000 tree {tests}\ttests\n", text=True,
                         check=True, capture_output=True).stdout.strip()
    return _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", top, "-m", "fix")


def test_a_test_from_a_later_commit_with_injected_flakes(repo, tmp_path) -> None:
    """--test-from copies the fix's test file into every probed tree (test_added exists nowhere on
    the line), --python names the interpreter, --inject-flake fails attempts unrun."""
    root, shas = repo
    fix = _fix_commit(root)
    argv = ["--test", "tests/test_calc.py::test_added", "--good", shas[0], "--bad", shas[9], "--attempts", "1",
            "--flake-rate", "0.2", "--state", str(tmp_path / "s.json")]
    without = culprit(root, *argv, tmp=tmp_path)
    assert without.returncode == 2 and f"--good {shas[0][:12]} fails" in without.stderr
    (tmp_path / "s.json").unlink()
    done = culprit(root, *argv, "--test-from", fix, "--python", sys.executable, "--inject-flake", "0.2", "--seed", "9",
                   tmp=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"culprit {shas[CULPRIT]}" in done.stdout
    runs = json.loads((tmp_path / "s.json").read_text())["runs"]
    ran = (tmp_path / "log").read_text().split()
    assert 0 < len(ran) < len(runs)  # some attempts were failed unrun (the log counts only real ones)


CALC = ["# calc", "", "", "def add(a, b):", "    return a + b", "", "", "def sub(a, b):", "    return a - b"]


def _edit(lines: list[str], i: int) -> list[str]:
    """Commit i's change of calc.py (1-5; commit 6, the bad one, changes sub again): see the levels below."""
    if i == 1:
        return lines[:1] + ["# more", "# notes"] + lines[1:]  # between two comment lines: shifts add and sub
    if i == 2:
        return [line.replace("a - b", "-(b - a)") for line in lines]  # sub's body
    if i == 6:
        return [line.replace("-(b - a)", "-(b - a) + 0") for line in lines]
    if i == 4:
        return [line.replace("a + b", "a - b") for line in lines]  # the culprit: add's body
    if i == 5:
        return lines[:2] + ["# a", "# b", "# c"] + lines[2:]  # between blank lines: shifts add again
    return lines


def test_the_prior_comes_from_the_observed_lines(tmp_path) -> None:
    """A map recorded at the bad commit names add's body (line numbers of that commit: two
    insertions above it since the culprit); each candidate is judged against its parent's numbers:
    1 and 5 shift lines (file only), 2 and 6 change sub (file only), 3 a note (nothing), 4 add's
    body (executed lines). Without carrying the lines, 4 reads as "file only"."""
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    (root / "registry.yaml").write_text(REGISTRY)
    (root / "tests" / "test_calc.py").write_text(TEST)
    lines, shas = CALC, []
    for i in range(7):
        lines = _edit(lines, i)
        (root / "calc.py").write_text("\n".join(lines) + "\n")
        (root / "commit_id.txt").write_text(f"{i}\n")
        (root / "notes.txt").write_text(f"{i if i == 3 else 0}\n")
        _git(root, "add", "-A")
        _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", f"commit {i}")
        shas.append(_git(root, "rev-parse", "HEAD"))
    body = lines.index("    return a - b") + 1  # add's body at the bad commit
    defs = [n for n, line in enumerate(lines, 1) if line.startswith("def ")]
    depmap = {"format": "ci-depmap", "version": 2, "tier": "cpu", "recorded_at": "2026-12-06T10:00:00+00:00",
              "sha": shas[6], "shared": {"calc.py": ",".join(map(str, defs))},
              "tests": {"tests/test_calc.py": {"complete": True, "items": 1, "ran": 1,
                                               "executed": {"calc.py": str(body), "tests/test_calc.py": "6-15"},
                                               "opened": []}}}
    (tmp_path / "map.json").write_text(json.dumps(depmap))
    args = ["--test", "tests/test_calc.py", "--good", shas[0], "--bad", shas[6], "--flake-rate", "0.01"]
    done = culprit(root, *args, "--depmap", str(tmp_path / "map.json"), "--state", str(tmp_path / "s.json"),
                   tmp=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"culprit {shas[4]}" in done.stdout
    assert f"prior from the observed map (map {tmp_path / 'map.json'}): 1 candidate(s) change lines the test " \
           "executed (weight 1), 4 only files it executed (0.1), 1 nothing it executed (0.02)" in done.stdout
    static = culprit(root, *args, "--state", str(tmp_path / "s2.json"), tmp=tmp_path)
    assert static.returncode == 0, static.stdout + static.stderr
    assert "prior from the static import closure (no map of the test): 5 candidate(s) change it (weight 1), " \
           "1 not (0.1)" in static.stdout
