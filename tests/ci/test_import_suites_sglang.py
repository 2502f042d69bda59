"""`ci import-suites` on SGLang's registration shapes (issue 19): after the import, each per-commit
tier runs exactly the files SGLang's own per-commit selection runs for the suites mapped to it.

The fixture is data (`REGISTRATIONS`) from which the test files are written, and the oracle is
SGLang's selection rule restated from its ``test/run_suite.py``: a suite run on backend B picks
the files with a ``register_<B>_ci`` call naming that suite (``suite=``, or ``stage=`` with
``runner_config=`` as ``<stage>-test-<runner_config>``) whose ``nightly`` equals the run's
(``False`` per commit) and that are not ``disabled``. It never reads our parser's output.
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.registry import Status, load_registry
from sglang_like import write
from tools.rerun.cmd_rerun_tier import plan as rerun_tier
from tools.rerun.commands import parse_comment

# (file under test/registered/, backend, register call keyword arguments)
REGISTRATIONS: list[tuple[str, str, dict[str, object]]] = [
    ("core/test_a.py", "cuda", {"est_time": 60, "stage": "stage-b", "runner_config": "1-gpu-large"}),
    ("core/test_a.py", "amd", {"est_time": 80, "suite": "stage-b-test-1-gpu-large-amd"}),
    ("core/test_b.py", "cuda", {"est_time": 30, "suite": "stage-b-test-1-gpu-small"}),
    ("core/test_c.py", "cuda", {"est_time": 30, "suite": "stage-b-test-1-gpu-small", "disabled": "hangs on H100"}),
    ("core/test_c.py", "cuda", {"est_time": 40, "suite": "stage-b-test-2-gpu-large"}),
    ("core/test_d.py", "cuda", {"est_time": 20, "suite": "stage-b-test-1-gpu-small", "disabled": "OOM"}),
    ("amd/test_amd_only.py", "amd", {"est_time": 50, "suite": "stage-b-test-1-gpu-small-amd"}),
    ("nightly/test_by_name.py", "cuda", {"est_time": 100, "stage": "nightly", "runner_config": "1-gpu-large"}),
    ("nightly/test_two_gpus.py", "cuda", {"est_time": 100, "stage": "nightly", "runner_config": "2-gpu-large"}),
    ("nightly/test_amd_nightly.py", "amd", {"est_time": 100, "suite": "nightly-amd-1-gpu", "nightly": True}),
    ("nightly/test_flagged.py", "cuda", {"est_time": 90, "suite": "stage-b-test-1-gpu-large", "nightly": True}),
    ("npu/test_npu.py", "npu", {"est_time": 10, "suite": "base-b-test-1-npu-a3"}),
    ("cpu/test_cpu.py", "cpu", {"est_time": 5, "suite": "base-a-test-cpu"}),
]
PER_COMMIT_SUITES = {  # SGLang's run_suite.py lists (the part this fixture uses)
    "cuda": ["stage-b-test-1-gpu-small", "stage-b-test-1-gpu-large", "stage-b-test-2-gpu-large"],
    "cpu": ["base-a-test-cpu"],
    "amd": ["stage-b-test-1-gpu-small-amd", "stage-b-test-1-gpu-large-amd"],
    "npu": ["base-b-test-1-npu-a3"],
}
TIER_MAP = ["base-a-test-cpu=cpu", "stage-b-test-1-gpu-small=gpu_1_small", "stage-b-*-1-gpu-large*=gpu_1_large",
            "*-2-gpu-large=gpu_2_large", "nightly-*=gpu_nightly", "stage-b-test-1-gpu-small-amd=gpu_1_small"]


def _tier(name: str, gpus: int, arch: str, schedule: str = "") -> str:
    return (f"  {name}:\n    description: {name}\n    runner_labels: [{name.replace('_', '-')}]\n"
            f"    gpu_count: {gpus}\n    arch: {arch}\n" + (f"    schedule: {schedule}\n" if schedule else ""))


BASE = ("version: 1\nproject:\n  source_roots: [python]\n  test_roots: [test]\n  test_patterns: [\"test_*.py\"]\n"
        "tiers:\n" + _tier("cpu", 0, "cpu") + _tier("gpu_1_small", 1, "sm_90") + _tier("gpu_1_large", 1, "sm_90")
        + _tier("gpu_2_large", 2, "sm_90") + _tier("gpu_nightly", 1, "sm_90", "nightly") + "tests: {}\n")


def _source(path: str) -> str:
    calls = [f"register_{backend}_ci({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
             for rel, backend, kwargs in REGISTRATIONS if rel == path]
    imports = sorted({f"register_{b}_ci" for rel, b, _ in REGISTRATIONS if rel == path})
    return (f"from sglang.test.ci.ci_register import {', '.join(imports)}\n\n" + "\n".join(calls)
            + "\n\n\ndef test_ok():\n    assert True\n")


def sglang_selection(backend: str, suite: str, nightly: bool = False) -> set[str]:
    """SGLang's ``filter_tests``: the enabled files of ``suite`` on ``backend``."""
    out = set()
    for rel, b, kwargs in REGISTRATIONS:
        effective = (f"{kwargs['stage']}-test-{kwargs['runner_config']}" if "stage" in kwargs else kwargs["suite"])
        if b == backend and effective == suite and bool(kwargs.get("nightly", False)) == nightly \
                and kwargs.get("disabled") is None:
            out.add(f"test/registered/{rel}")
    return out


@pytest.fixture
def imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    files = {f"test/registered/{rel}": _source(rel) for rel, _, _ in REGISTRATIONS}
    # SGLang's test/run_suite.py today: it selects registered files, it no longer lists suites
    files["test/run_suite.py"] = "import glob\n\n\ndef main():\n    return glob.glob('registered/**/*.py')\n"
    write(tmp_path, {**files, "registry.yaml": BASE, "test/pytest.ini": "[pytest]\n"})
    argv = ["--root", str(tmp_path), "import-suites", "--suites", str(tmp_path / "test/run_suite.py"),
            "--owner", "@sgl", "--output", str(tmp_path / "imported.yaml")]
    for pair in TIER_MAP:
        argv += ["--tier-map", pair]
    assert ci_main(argv) == 0
    err = capsys.readouterr().err
    (tmp_path / "registry.yaml").write_text((tmp_path / "imported.yaml").read_text())
    return tmp_path, err


def test_each_per_commit_tier_runs_what_sglang_runs_per_commit(imported: tuple[Path, str]) -> None:
    root, _ = imported
    registry = load_registry(root / "registry.yaml")
    tier_of = {pair.split("=")[0]: pair.split("=")[1] for pair in TIER_MAP}
    for tier in registry.tiers.values():
        if tier.schedule != "per-commit":
            continue
        expected: set[str] = set()
        for backend, suites in PER_COMMIT_SUITES.items():
            if backend != tier.backend:
                continue  # another backend's machines: never this tier
            for suite in suites:
                targets = [tier_of[suite]] if suite in tier_of else [
                    t for pattern, t in tier_of.items() if fnmatch.fnmatchcase(suite, pattern)]
                if tier.name in targets:
                    expected |= sglang_selection(backend, suite)
        ours = {path for path, e in registry.tests.items() if e.status is Status.ACTIVE and tier.name in e.tiers}
        assert ours == expected, tier.name
    assert expected  # the loop compared something: the last tier holds files
    # SGLang's nightly CUDA suite is chosen by name, without --nightly
    nightly = {p for p, e in registry.tests.items() if e.status is Status.ACTIVE and "gpu_nightly" in e.tiers}
    assert nightly == (sglang_selection("cuda", "nightly-test-1-gpu-large")
                       | sglang_selection("cuda", "nightly-test-2-gpu-large")) == {
        "test/registered/nightly/test_by_name.py", "test/registered/nightly/test_two_gpus.py"}


def test_backends_nightly_and_disabled_survive_the_import(imported: tuple[Path, str]) -> None:
    root, err = imported
    tests = load_registry(root / "registry.yaml").tests
    assert tests["test/registered/core/test_a.py"].tiers == ("gpu_1_large",)  # its AMD suite matched the glob too
    assert tests["test/registered/core/test_c.py"].tiers == ("gpu_2_large",)  # the disabled suite's tier dropped
    d = tests["test/registered/core/test_d.py"]
    assert (d.status, d.reason) == (Status.MANUAL, "disabled in source: OOM")
    for amd in ("amd/test_amd_only.py", "nightly/test_amd_nightly.py", "nightly/test_flagged.py"):
        entry = tests[f"test/registered/{amd}"]
        assert entry.status is Status.MANUAL and "another backend or schedule" in entry.reason, amd
    assert "only in suite(s) base-b-test-1-npu-a3" in tests["test/registered/npu/test_npu.py"].reason
    assert ("suite 'stage-b-test-1-gpu-small-amd' -> tier 'gpu_1_small' refused for 1 file(s) "
            "(e.g. test/registered/amd/test_amd_only.py): register_amd_ci is for amd machines") in err
    assert "suite 'stage-b-test-1-gpu-large' -> tier 'gpu_1_large' refused for 1 file(s)" in err
    assert "nightly registrations (nightly=True) would run on every commit" in err
    # SGLang's stage="nightly" suites carry the cadence in the name: a broad glob does not make them per-commit
    assert ("suite 'nightly-test-2-gpu-large' -> tier 'gpu_2_large' refused for 1 file(s) (e.g. "
            "test/registered/nightly/test_two_gpus.py): nightly registrations (a suite named nightly-...)") in err
    assert "test/run_suite.py: defines no suites" in err


def test_plan_and_rerun_tier_honour_the_nightly_schedule(imported: tuple[Path, str],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = imported

    def planned(*flags: str) -> set[str]:
        assert ci_main(["--root", str(root), "plan", "--gpu-tiers", *flags, "--format", "json"]) == 0
        return {p["tier"] for p in json.loads(capsys.readouterr().out)["plans"]}

    assert planned() == {"gpu_1_small", "gpu_1_large", "gpu_2_large"}
    assert planned("--schedule", "all") == {"gpu_1_small", "gpu_1_large", "gpu_2_large", "gpu_nightly"}
    assert planned("--schedule", "nightly") == {"gpu_nightly"}
    registry = load_registry(root / "registry.yaml")
    work = rerun_tier(registry, parse_comment("/rerun-tier gpu_nightly"))
    assert sorted(t for d in work.dispatches for t in d.tests) == [
        "test/registered/nightly/test_by_name.py", "test/registered/nightly/test_two_gpus.py"]
    assert "A nightly tier: no pull request plans it" in work.sections[0]
    assert "nightly tier" not in rerun_tier(registry, parse_comment("/rerun-tier gpu_1_large")).sections[0]


def test_a_source_without_registrations_is_an_error_not_an_empty_import(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, {"registry.yaml": BASE, "test/run_suite.py": "def main():\n    pass\n",
                     "test/registered/test_plain.py": "def test_ok():\n    pass\n"})
    assert ci_main(["--root", str(tmp_path), "import-suites", "--suites", str(tmp_path / "test/run_suite.py"),
                    "--tier-map", "x=cpu"]) == 2
    err = capsys.readouterr().err
    assert "test/run_suite.py: defines no suites" in err
    assert "found no suite registration" in err and "nothing imported" in err
