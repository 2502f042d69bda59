"""`ci durations`: aggregation (p90, skipped files, unknown files), in-place est_time rewrite that
leaves every other byte of registry.yaml alone, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

from ci.commands import durations as durations_cmd
from ci.results.durations import collect, p90, propose, rewrite_est_times
from ci.results.junit import JUnitError, parse_junit
from ci.registry import RegistryError, parse_registry

REGISTRY = textwrap.dedent("""\
    # top comment: keep me
    version: 1
    tiers:
      cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
    tests:
      # --- area one ---
      tests/test_a.py:
        tiers: [cpu]
        est_time: 10   # measured 2026-01
        owner: a
        status: active
      tests/test_b.py: {tiers: [cpu], est_time: 2.5, owner: b, status: active}
      "tests/test_c.py":
        est_time:    100
        tiers: [cpu]
        owner: c
        status: active
    # trailing comment
    """)


def junit(cases: list[tuple[str, str, float, str]]) -> str:
    """cases: (file, name, time, outcome) -> a pytest-like xunit1 document."""
    body = []
    for file, name, time, outcome in cases:
        child = {"passed": "", "skipped": '<skipped message="no gpu"/>', "failed": '<failure message="x"/>'}[outcome]
        classname = file.removesuffix(".py").replace("/", ".")
        body.append(f'<testcase classname="{classname}" name="{name}" file="{file}" time="{time}">{child}</testcase>')
    return f'<testsuites><testsuite name="pytest" time="1">{"".join(body)}</testsuite></testsuites>'


@pytest.fixture
def registry():
    reg, problems = parse_registry(REGISTRY, "registry.yaml")
    assert problems == []
    return reg


def test_p90_and_propose():
    assert p90([5.0]) == 5.0
    assert p90([1, 2, 3]) == 3  # the max below 10 samples
    assert p90(range(1, 21)) == 18
    assert propose(10.0) == 11 and propose(10.01) == 12 and propose(0.01) == 1
    with pytest.raises(ValueError):
        p90([])


def test_collect_samples_drift_unknown_and_skipped(tmp_path, registry):
    (tmp_path / "r1.xml").write_text(junit([
        ("tests/test_a.py", "t1", 20.0, "passed"), ("tests/test_a.py", "t2", 5.0, "failed"),
        ("tests/test_b.py", "t", 0.1, "skipped"),
        ("tests/test_new.py", "t", 1.0, "passed")]))
    (tmp_path / "r2.xml").write_text(junit([("tests/test_a.py", "t1", 12.0, "passed"),
                                            ("tests/test_c.py", "t", 104.0, "passed")]))
    reports = [parse_junit(tmp_path / f"r{i}.xml") for i in (1, 2)]
    result = collect(reports, registry)
    assert list(result.measurements) == ["tests/test_a.py", "tests/test_c.py"]
    a = result.measurements["tests/test_a.py"]
    assert a.samples == (12.0, 25.0) and a.value == 25.0 and a.proposed == 28
    assert result.unknown == ("tests/test_new.py",)
    assert result.all_skipped == ("tests/test_b.py",)
    # a: 25 vs 10 drifts; c: 104 vs 100 is within 25%
    assert [(d.path, d.pct) for d in result.drifts] == [("tests/test_a.py", 150.0)]


def test_rewrite_changes_only_the_numbers(registry):
    out = rewrite_est_times(REGISTRY, {"tests/test_a.py": 28, "tests/test_b.py": 7, "tests/test_c.py": 99.5})
    expected = (REGISTRY.replace("est_time: 10   #", "est_time: 28   #")
                .replace("est_time: 2.5,", "est_time: 7,").replace("est_time:    100", "est_time:    99.5"))
    assert out == expected  # byte-for-byte: comments, spacing, quoting, order untouched
    reg, problems = parse_registry(out, "registry.yaml")
    assert problems == [] and [e.est_time for e in reg.tests.values()] == [28, 7, 99.5]
    assert rewrite_est_times(REGISTRY, {}) == REGISTRY


GPU_REGISTRY = textwrap.dedent("""\
    version: 1
    tiers:
      cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
      gpu: {description: gpu, runner_labels: [gpu], gpu_count: 1, arch: sm_90}
    tests:
      tests/test_low.py:
        tiers: [cpu, gpu]
        est_time: 10  # measured
        timeout: 120
        owner: a
        status: active
      tests/test_none.py:
        tiers: [gpu]
        est_time: 10  # no timeout yet
        owner: a
        status: active
      tests/test_high.py:
        tiers: [gpu]
        est_time: 10
        timeout: 5000
        owner: a
        status: active
      tests/test_cpu.py:
        tiers: [cpu]
        est_time: 10
        owner: a
        status: active
      tests/test_flow.py: {tiers: [gpu], est_time: 10, owner: a, status: active}
    """)


def test_rewrite_raises_a_gpu_entrys_timeout_with_its_est_time():
    """A GPU entry keeps timeout >= derived_timeout(est_time) (lint L007); cpu-only entries and a
    deliberately higher timeout are left alone."""
    from ci.registry import derived_timeout

    new = {"tests/test_low.py": 100, "tests/test_none.py": 100, "tests/test_high.py": 100, "tests/test_cpu.py": 100}
    needed = derived_timeout(100)
    assert needed > 120  # the case is only meaningful if the old timeout is too low
    out = rewrite_est_times(GPU_REGISTRY, new)
    expected = (GPU_REGISTRY
                .replace("est_time: 10  # measured\n    timeout: 120",
                         f"est_time: 100  # measured\n    timeout: {needed}")
                .replace("est_time: 10  # no timeout yet\n",
                         f"est_time: 100  # no timeout yet\n    timeout: {needed}\n")
                .replace("est_time: 10\n    timeout: 5000", "est_time: 100\n    timeout: 5000")
                .replace("tiers: [cpu]\n    est_time: 10", "tiers: [cpu]\n    est_time: 100"))
    assert out == expected
    reg, problems = parse_registry(out, "registry.yaml")
    assert problems == []
    assert {p: e.timeout for p, e in reg.tests.items()} == {
        "tests/test_low.py": needed, "tests/test_none.py": needed, "tests/test_high.py": 5000,
        "tests/test_cpu.py": None, "tests/test_flow.py": None}
    # A flow-style GPU entry cannot take a new line: the error names it instead of guessing.
    with pytest.raises(ValueError, match="tests/test_flow.py runs on a GPU tier and needs 'timeout: "):
        rewrite_est_times(GPU_REGISTRY, {"tests/test_flow.py": 100})


def test_rewrite_errors_name_the_problem():
    with pytest.raises(KeyError, match="no est_time entry for tests/test_zzz.py"):
        rewrite_est_times(REGISTRY, {"tests/test_zzz.py": 3})
    with pytest.raises(ValueError, match="positive"):
        rewrite_est_times(REGISTRY, {"tests/test_a.py": 0})
    with pytest.raises(RegistryError, match="registry.yaml:"):
        rewrite_est_times("tests: [", {})


def test_cli_reports_then_writes_in_place(tmp_path, capsys):
    reg_file = tmp_path / "registry.yaml"
    reg_file.write_text(REGISTRY)
    (tmp_path / "r.xml").write_text(junit([("tests/test_a.py", "t", 30.0, "passed"),
                                           ("tests/test_b.py", "t", 2.0, "passed"),
                                           ("tests/test_zz.py", "t", 1.0, "passed")]))
    args = ["--registry", str(reg_file), str(tmp_path / "r.xml")]
    assert durations_cmd.main(args + ["--check"]) == 1
    out = capsys.readouterr().out
    assert "drift: tests/test_a.py: measured 30.0s vs est_time 10s (+200%), proposed 33" in out
    assert "unknown: tests/test_zz.py" in out
    assert reg_file.read_text() == REGISTRY  # report only

    assert durations_cmd.main(args + ["--write", "--json", str(tmp_path / "d.json")]) == 0
    assert reg_file.read_text() == REGISTRY.replace("est_time: 10   #", "est_time: 33   #")
    assert json.loads((tmp_path / "d.json").read_text()) == {"tests/test_a.py": 30.0, "tests/test_b.py": 2.0}
    capsys.readouterr()
    assert durations_cmd.main(args + ["--write-all"]) == 0  # b: ceil(2.0 * 1.1) = 3
    assert "est_time: 3," in reg_file.read_text()


def test_cli_bad_report_exits_2(tmp_path, capsys):
    reg_file = tmp_path / "registry.yaml"
    reg_file.write_text(REGISTRY)
    assert durations_cmd.main(["--registry", str(reg_file), str(tmp_path / "missing.xml")]) == 2
    assert "missing.xml: cannot read JUnit XML" in capsys.readouterr().err


# -- bad timings: refused with the report and the test named, nothing written, exit 2 -----------

ABSURD = [
    pytest.param([("tests/test_a.py", "t", "inf")], "not a finite number", id="inf"),
    pytest.param([("tests/test_a.py", "t", "-inf")], "not a finite number", id="-inf"),
    pytest.param([("tests/test_a.py", "t", "nan")], "not a finite number", id="nan"),
    pytest.param([("tests/test_a.py", "t", "-50")], "negative", id="negative"),
    pytest.param([("tests/test_a.py", "t", "1e308")], "above 86400", id="1e308"),
    pytest.param([("tests/test_a.py", "t", "9" * 400)], "not a finite number", id="400-digits"),
    pytest.param([("tests/test_a.py", "t", "86401")], "above 86400", id="over-one-day"),
    # float() reads each of these; a JUnit time is plain ASCII decimal (issue #22)
    *[pytest.param([("tests/test_a.py", "t", raw)], "not a plain decimal number of seconds", id=f"junit-{name}")
      for name, raw in (("underscore", "5_0"), ("arabic-indic", "\u0665"), ("space", " 5"), ("plus", "+5"),
                        ("leading-zero", "05"), ("fullwidth", "\uff15"))],
    # each case below a day, but the file's sum (or p90 plus the margin) is not
    pytest.param([("tests/test_a.py", "t1", "50000"), ("tests/test_a.py", "t2", "50000")],
                 "above the limit of 86400", id="file-sum-over-one-day"),
    pytest.param([("tests/test_a.py", "t", "80000")], "above the limit of 86400", id="margin-over-one-day"),
]


@pytest.mark.parametrize("cases, problem", ABSURD)
def test_cli_refuses_absurd_times_and_writes_nothing(tmp_path, capsys, cases, problem):
    reg_file = tmp_path / "registry.yaml"
    reg_file.write_text(REGISTRY)
    body = "".join(f'<testcase classname="x" name="{name}" file="{file}" time="{time}"/>'
                   for file, name, time in cases)
    (tmp_path / "r.xml").write_text(f'<testsuites><testsuite time="1">{body}</testsuite></testsuites>')
    rc = durations_cmd.main(["--registry", str(reg_file), str(tmp_path / "r.xml"), "--write-all",
                             "--json", str(tmp_path / "d.json")])
    err = capsys.readouterr().err
    assert rc == durations_cmd.EXIT_BAD_INPUT == 2, err
    assert str(tmp_path / "r.xml") in err and "tests/test_a.py" in err and problem in err, err
    assert "Traceback" not in err
    assert len(err) < 1000  # a 400-digit number is shown abbreviated, not pasted whole
    assert reg_file.read_text() == REGISTRY
    assert not (tmp_path / "d.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.xml", "registry.yaml"]


@pytest.mark.parametrize("raw", ["nan", "inf", "-1"])
def test_junit_refuses_a_bad_testsuite_time(tmp_path, raw):
    (tmp_path / "r.xml").write_text(f'<testsuites><testsuite time="{raw}"></testsuite></testsuites>')
    with pytest.raises(JUnitError, match=r"r\.xml: testsuite time"):
        parse_junit(tmp_path / "r.xml")


def test_junit_accepts_zero_and_tiny_times(tmp_path):
    (tmp_path / "r.xml").write_text(
        '<testsuite time="0"><testcase classname="x" name="a" file="tests/test_a.py" time="-0"/>'
        '<testcase classname="x" name="b" file="tests/test_a.py" time="1e-400"/>'
        '<testcase classname="x" name="c" file="tests/test_a.py" time="86400"/></testsuite>')
    assert parse_junit(tmp_path / "r.xml").files["tests/test_a.py"].time == 86400.0


def test_rewrite_refuses_values_the_registry_cannot_hold():
    for bad in (float("inf"), float("nan"), 86401, -3):
        with pytest.raises(ValueError, match="est_time"):
            rewrite_est_times(REGISTRY, {"tests/test_a.py": bad})
    assert "est_time: 86400" in rewrite_est_times(REGISTRY, {"tests/test_a.py": 86400})


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        durations_cmd.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for line in ("0 ", "1 drift found (with --check)", "2 bad input", "3 cannot write"):
        assert line in out, out


def test_junit_from_pytest_rerunfailures_last_attempt_decides_and_every_attempt_counts(tmp_path):
    """A real pytest run with pytest-rerunfailures: it writes one <testcase> per attempt, the
    earlier ones without their failure, so only the last one says how the test ended."""
    (tmp_path / "test_flaky.py").write_text(textwrap.dedent("""\
        import pathlib
        import time

        def attempt(name):
            counter = pathlib.Path(__file__).with_name(name)
            n = int(counter.read_text()) if counter.exists() else 0
            counter.write_text(str(n + 1))
            return n

        def test_passes_on_the_third_attempt():
            n = attempt("flaky.count")
            time.sleep(0.1 * (n + 1))
            assert n == 2

        def test_always_fails():
            attempt("broken.count")
            assert False
        """))
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    subprocess.run([sys.executable, "-m", "pytest", "-p", "pytest_rerunfailures", "-p", "no:cacheprovider",
                    "--reruns", "2", "--junitxml=j.xml", "-o", "junit_family=xunit1", "-q", "test_flaky.py"],
                   cwd=tmp_path, env=env, capture_output=True, timeout=120)
    attempts = {}
    for case in ET.parse(tmp_path / "j.xml").getroot().iter("testcase"):
        attempts.setdefault(case.get("name"), []).append(float(case.get("time")))
    assert [len(a) for a in attempts.values()] == [3, 3]  # the premise: one <testcase> per attempt
    report = parse_junit(tmp_path / "j.xml")
    cases = {c.name: c for c in report.cases}
    flaky, broken = cases["test_passes_on_the_third_attempt"], cases["test_always_fails"]
    assert (flaky.outcome, flaky.reruns) == ("passed", 2)
    assert (broken.outcome, broken.reruns) == ("failed", 2)  # its first attempts carry no <failure>
    assert flaky.time == pytest.approx(sum(attempts[flaky.name])) and flaky.time >= 0.6  # 0.1 + 0.2 + 0.3 s
    assert report.files["test_flaky.py"].time == pytest.approx(sum(map(sum, attempts.values())))
    assert (report.files["test_flaky.py"].passed, report.files["test_flaky.py"].failed) == (1, 1)


@pytest.mark.parametrize("measured_c, measured_b, drifting", [
    (110.0, 2.5, []),     # c: 10 s over (> 5 s) but only 10 % (< 25 %): not drift
    (125.0, 2.5, []),     # c: exactly 25 %: not drift
    (125.5, 2.5, ["tests/test_c.py"]),  # c: over 25 % and over 5 s
    (100.0, 6.0, []),     # b: +140 % but only 3.5 s (< 5 s): not drift
    (100.0, 7.6, ["tests/test_b.py"]),  # b: +204 % and 5.1 s
    (74.0, 2.5, ["tests/test_c.py"]),   # c: 26 s under: drift is either way
])
def test_drift_needs_both_25_percent_and_5_seconds(tmp_path, registry, measured_c, measured_b, drifting):
    (tmp_path / "r.xml").write_text(junit([("tests/test_c.py", "t", measured_c, "passed"),
                                           ("tests/test_b.py", "t", measured_b, "passed")]))
    result = collect([parse_junit(tmp_path / "r.xml")], registry)
    assert [d.path for d in result.drifts] == drifting
