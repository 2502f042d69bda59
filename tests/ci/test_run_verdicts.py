"""`ci run`'s verdict line and failing tests (step summary and stdout), and that this repository's
own test session never writes to the real job's $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.commands import history as history_cmd
from ci.commands import run as run_cmd
from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import open_store
from ci.results.summary import FailureLine, append_step_summary, summarize, to_markdown
from tests.ci.history_support import Case, write_report

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = textwrap.dedent("""\
    version: 1
    tiers:
      cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
    tests:
      tests/test_mix.py: {tiers: [cpu], est_time: 2, owner: t, status: active}
    """)
# test_flaky fails on its first attempt and passes on the rerun (a file beside it remembers).
MIX = textwrap.dedent("""\
    import os, pytest
    MARK = os.path.join(os.path.dirname(__file__), "flaky.mark")

    def test_ok():
        pass

    @pytest.mark.flaky(reruns=1)
    def test_flaky():
        if not os.path.exists(MARK):
            open(MARK, "w").close()
            assert False, "first attempt fails"

    def test_broken():
        assert {"a": 1}.get("b") == 1, "expected key 'b' in the model config"

    def test_nccl():
        raise RuntimeError("NCCL error: unhandled system error, NCCL version 2.21.5")
    """)
FAST_CHILD = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": "-p xdist -p pytest_rerunfailures"}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in FAST_CHILD.items():
        monkeypatch.setenv(key, value)
    for key in ("GITHUB_SHA", "GITHUB_REPOSITORY", "RUNNER_NAME"):
        monkeypatch.delenv(key, raising=False)
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "registry.yaml").write_text(REGISTRY)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "tests" / "test_mix.py").write_text(MIX)
    return root


def test_step_summary_leads_with_the_verdict(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                            capfd: pytest.CaptureFixture[str]) -> None:
    summary = repo / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("RUNNER_NAME", "h100-07")
    rc = run_cmd.main(["--registry", str(repo / "registry.yaml"), "--tier", "cpu", "--workers", "0",
                       "--junit", str(repo / "j.xml")])
    out = capfd.readouterr().out
    assert rc == 1
    md = summary.read_text().splitlines()
    assert md[:4] == ["earlier step", "### ci run cpu-1of1", "",
                      "**2 passed, 2 failed: 1 infra on h100-07, 1 not judged (no history to compare with) (1 flaky, passed on retry)**"]
    tail = md[md.index("Failing tests:"):]
    assert tail[2:] == [
        "- **new** `tests/test_mix.py::test_broken`: new: no history to compare with",
        "  <br>`AssertionError: expected key 'b' in the model config`",
        "- **infra** `tests/test_mix.py::test_nccl`: infra: nccl on runner h100-07",
        "  <br>`RuntimeError: NCCL error: unhandled system error, NCCL version 2.21.5`",
        "- **flaky** `tests/test_mix.py::test_flaky`: flaky: failed, then passed on retry in this run",
        "  <br>`AssertionError: first attempt fails`",  # the retried attempt's own error (the plugin keeps it)
    ], tail
    assert "verdict: 2 passed, 2 failed: 1 infra on h100-07" in out
    assert "  flaky           tests/test_mix.py::test_flaky" in out


def test_verdicts_against_the_history(repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                      capfd: pytest.CaptureFixture[str]) -> None:
    """With --history, a test failing on the default branch since a commit is broken on main."""
    store = str(tmp_path / "h.sqlite")
    boom = Case("tests/test_mix.py", "test_broken", "failed", "AssertionError: expected key 'b' in the model config",
                "E   AssertionError: expected key 'b' in the model config")
    with open_store(store) as s:
        for i in range(3):
            case = boom if i else Case("tests/test_mix.py", "test_broken")
            ingest(s, prepare(write_report(tmp_path, [case]), RunIdentity("acme/x", f"{i:07x}", "push", "cpu")))
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/x")
    rc = run_cmd.main(["--registry", str(repo / "registry.yaml"), "--tier", "cpu", "--workers", "0",
                       "--junit", str(repo / "j.xml"), "--history", store, "tests/test_mix.py"])
    out = capfd.readouterr().out
    assert rc == 1
    assert "verdict: 2 passed, 2 failed: 1 broken on main since 0000001, 1 infra" in out
    capfd.readouterr()
    rc = run_cmd.main(["--registry", str(repo / "registry.yaml"), "--tier", "cpu", "--workers", "0",
                       "--junit", str(repo / "j2.xml"), "--history", str(tmp_path / "none.sqlite"), "tests/test_mix.py"])
    captured = capfd.readouterr()
    assert rc == 1 and "ci run: warning: history not read:" in captured.err and "Traceback" not in captured.err
    assert "1 not judged (no history to compare with)" in captured.out and "this change's" not in captured.out


def test_markdown_keeps_a_test_s_text_inside_its_code_span() -> None:
    md = to_markdown(summarize({}, {}, 1.0), "t", "0 passed, 1 failed: new",
                     [FailureLine("t.py::test_[a`b]", "new", "new: x", "AssertionError: `x`\nsecond line")])
    assert "- **new** `t.py::test_[a'b]`: new: x\n  <br>`AssertionError: 'x' second line`" in md
    assert md.splitlines()[2] == "**0 passed, 1 failed: new**"


def test_code_under_test_sees_no_step_summary() -> None:
    """The root conftest drops $GITHUB_STEP_SUMMARY for the session: nothing here can append to it."""
    assert "GITHUB_STEP_SUMMARY" not in os.environ
    assert append_step_summary("### a summary of a throw-away run\n") is None


def test_a_session_under_a_set_step_summary_leaves_it_untouched(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("the real job's summary\n")
    env = {**os.environ, **FAST_CHILD, "GITHUB_STEP_SUMMARY": str(summary)}
    node = "tests/ci/test_run_verdicts.py::test_code_under_test_sees_no_step_summary"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", node],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert summary.read_text() == "the real job's summary\n"


def test_run_and_history_verdicts_agree_on_the_changes_files(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """`ci run --history` and `ci history verdicts` judge one failure on one store alike, with and
    without the change's files: other authors' pull requests based from 0000003 on fail test_broken
    so (its failure, as this run reports it), which reads as main's, unless the change touched the
    test's file (`ci.history.pr_base_evidence`)."""
    (repo / "tests" / "test_mix.py").write_text("def test_broken():\n    assert {}.get('b') == 1, 'no key b'\n")
    args = ["--registry", str(repo / "registry.yaml"), "--tier", "cpu", "--workers", "0"]
    assert run_cmd.main([*args, "--junit", str(tmp_path / "first.xml"), "tests/test_mix.py"]) == 1
    store = str(tmp_path / "h.sqlite")
    passed = write_report(tmp_path, [Case("tests/test_mix.py", "test_broken")])
    with open_store(store) as s:
        ingest(s, prepare(passed, RunIdentity("acme/gpu", "0000000", "nightly", "cpu")))
        for base in range(1, 6):
            ident = RunIdentity("acme/gpu", f"{base:05x}ee", "pull_request", "cpu", pr=20 + base, author=f"dev{base}",
                                base_sha=f"{base:07x}", scored=False)
            ingest(s, prepare(tmp_path / "first.xml" if base >= 3 else passed, ident))
    listed = tmp_path / "changed.txt"
    listed.write_text("tests/test_mix.py\n")
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/gpu")
    monkeypatch.setenv("GITHUB_SHA", "00000ff1234567")
    capfd.readouterr()

    def run_headline(*change: str) -> str:
        junit = tmp_path / f"run{len(change)}.xml"
        assert run_cmd.main([*args, "--junit", str(junit), "--history", store, "--merge-base", "0000005", *change,
                             "tests/test_mix.py"]) == 1
        (line,) = [x for x in capfd.readouterr().out.splitlines() if x.startswith("verdict: ")]
        return line.removeprefix("verdict: ")

    runs = run_headline(), run_headline("--changed-files", str(listed))
    with open_store(store) as s:  # the run into the history, as the workflow's history job ingests it
        ingest(s, prepare(tmp_path / "run2.xml", RunIdentity("acme/gpu", "00000ff1234567", "pull_request", "cpu",
                                                              pr=42, author="bob", base_sha="0000005", scored=False)))

    def history_headline(*change: str) -> str:
        assert history_cmd.main(["verdicts", "--sha", "00000ff1234567", "--store", store, *change]) == 0
        return capfd.readouterr().out.splitlines()[0].split("): ", 1)[1]

    assert runs == (history_headline(), history_headline("--changed-files", str(listed)))
    assert runs[0] == "0 passed, 1 failed: broken on main since 0000003"
    assert "broken" not in runs[1] and "new" in runs[1], runs[1]


def test_a_bad_merge_base_or_list_is_exit_2_before_any_test_runs(repo: Path, capfd: pytest.CaptureFixture[str]) -> None:
    args = ["--registry", str(repo / "registry.yaml"), "--workers", "0", "--junit", str(repo / "j.xml")]
    assert run_cmd.main([*args, "--merge-base", "main", "tests/test_mix.py"]) == 2
    assert run_cmd.main([*args, "--changed-files", str(repo / "missing.txt"), "tests/test_mix.py"]) == 2
    err = capfd.readouterr().err
    assert "--merge-base 'main' is not a hexadecimal commit id" in err and "missing.txt" in err
    assert "Traceback" not in err and not (repo / "j.xml").exists()
