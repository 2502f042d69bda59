"""ci.pytest_plugin, driven through pytest's own `pytester` in throw-away repositories."""

from __future__ import annotations

import textwrap

import pytest

from ci.hardware import OVERRIDE_ENV

pytest_plugins = ["pytester"]

REGISTRY_HEAD = """\
version: 1
tiers:
  cpu:
    description: no GPU
    runner_labels: [ubuntu-latest]
    gpu_count: 0
    arch: cpu
  gpu_h100:
    description: one H100
    runner_labels: [gpu-h100]
    gpu_count: 1
    arch: sm_90
    features: [fp8]
  gpu_b200:
    description: one B200
    runner_labels: [gpu-b200]
    gpu_count: 1
    arch: sm_100
    features: [fp8, fp4]
  gpu_b200_x4:
    description: four B200
    runner_labels: [gpu-b200-x4]
    gpu_count: 4
    arch: sm_100
    features: [fp8, fp4, nvlink]
tests:
"""

TWO_TESTS = "def test_a():\n    pass\n\n\ndef test_b():\n    pass\n"


def entry(path: str, tiers: str = "[cpu]", **extra: object) -> str:
    lines = [f"  {path}:", f"    tiers: {tiers}", "    est_time: 1", "    owner: me", "    status: active"
             if "status" not in extra else f"    status: {extra.pop('status')}"]
    lines += [f"    {k}: {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture
def repo(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """Writes registry.yaml and test files; returns a function running pytest in-process."""
    monkeypatch.setenv(OVERRIDE_ENV, "none")
    # Entry-point plugin discovery (and hypothesis, httpserver, xdist) would cost ~2 s per run.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")

    def make(entries: str, files: dict[str, str]):
        pytester.makefile(".yaml", registry=REGISTRY_HEAD + entries)
        for rel, body in files.items():
            target = pytester.path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(textwrap.dedent(body))

    return make


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess("-p", "ci.pytest_plugin", "-p", "pytest_timeout", "-p", "pytest_rerunfailures",
                                        "-p", "no:cacheprovider", "-rs", *args)


def test_cpu_tests_run_and_gpu_tests_skip_with_the_missing_hardware(pytester, repo):
    repo(entry("tests/test_cpu.py") + entry("tests/test_gpu.py", "[gpu_b200]"),
         {"tests/test_cpu.py": TWO_TESTS, "tests/test_gpu.py": TWO_TESTS})
    result = run(pytester, "tests")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["*tier gpu_b200 needs 1 GPU with sm_100 (fp8, fp4); this machine has none*"])


def test_fake_hardware_satisfies_exact_capability_and_count(pytester, repo, monkeypatch):
    repo(entry("tests/test_b200.py", "[gpu_b200]") + entry("tests/test_x4.py", "[gpu_b200_x4]")
         + entry("tests/test_h100.py", "[gpu_h100]"),
         {"tests/test_b200.py": TWO_TESTS, "tests/test_x4.py": TWO_TESTS, "tests/test_h100.py": TWO_TESTS})
    monkeypatch.setenv(OVERRIDE_ENV, "sm_100x2")
    result = run(pytester, "tests")
    result.assert_outcomes(passed=2, skipped=4)
    result.stdout.fnmatch_lines([
        "*tier gpu_h100 needs 1 GPU with sm_90 (fp8); this machine has 2x sm_100*",
        "*tier gpu_b200_x4 needs 4 GPUs with sm_100 (fp8, fp4, nvlink); this machine has 2x sm_100*",
    ])


def test_item_runs_if_any_tier_is_satisfied(pytester, repo):
    repo(entry("tests/test_both.py", "[cpu, gpu_b200]"), {"tests/test_both.py": TWO_TESTS})
    run(pytester, "tests").assert_outcomes(passed=2)


def test_markers_select_tiers_and_pass_strict_markers(pytester, repo, monkeypatch):
    monkeypatch.setenv(OVERRIDE_ENV, "sm_100")
    repo(entry("tests/test_cpu.py") + entry("tests/test_both.py", "[cpu, gpu_b200]")
         + entry("tests/test_gpu.py", "[gpu_b200]"),
         {"tests/test_cpu.py": TWO_TESTS, "tests/test_both.py": TWO_TESTS, "tests/test_gpu.py": TWO_TESTS})
    run(pytester, "--strict-markers", "-m", "gpu_b200", "tests").assert_outcomes(passed=4, deselected=2)
    run(pytester, "--strict-markers", "-m", "cpu and not gpu_b200", "tests").assert_outcomes(passed=2, deselected=4)
    markers = run(pytester, "--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.gpu_b200: registry tier - one B200"])


def test_a_test_may_use_a_tier_marker_under_strict_markers(pytester, repo):
    repo(entry("tests/test_m.py"), {"tests/test_m.py": """
        import pytest

        @pytest.mark.cpu
        def test_marked():
            pass
    """})
    run(pytester, "--strict-markers", "tests").assert_outcomes(passed=1)


def test_tier_option_deselects_other_tiers_and_requires_the_hardware(pytester, repo, monkeypatch):
    repo(entry("tests/test_cpu.py") + entry("tests/test_both.py", "[cpu, gpu_b200]"),
         {"tests/test_cpu.py": TWO_TESTS, "tests/test_both.py": TWO_TESTS})
    # No B200 here: the tier's items are selected but skipped, even though they could run on cpu.
    result = run(pytester, "--tier", "gpu_b200", "tests")
    result.assert_outcomes(skipped=2, deselected=2)
    result.stdout.fnmatch_lines(["*tier gpu_b200 needs 1 GPU with sm_100*"])
    monkeypatch.setenv(OVERRIDE_ENV, "sm_100")
    run(pytester, "--tier", "gpu_b200", "tests").assert_outcomes(passed=2, deselected=2)
    run(pytester, "--tier", "cpu", "tests").assert_outcomes(passed=4)


def test_unknown_tier_option_is_a_usage_error(pytester, repo):
    repo(entry("tests/test_cpu.py"), {"tests/test_cpu.py": TWO_TESTS})
    result = run(pytester, "--tier", "gpu_a100", "tests")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tier 'gpu_a100': unknown tier; known tiers: cpu, gpu_h100*"])


def test_unregistered_file_is_a_collection_error_with_the_entry_to_add(pytester, repo):
    repo(entry("tests/test_cpu.py"), {"tests/test_cpu.py": TWO_TESTS,
                                      "tests/quant/test_kvfp4_quant_dequant.py": TWO_TESTS})
    result = run(pytester, "tests")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR collecting tests/quant/test_kvfp4_quant_dequant.py*",
        "tests/quant/test_kvfp4_quant_dequant.py is not registered in registry.yaml;*",
        "  tests/quant/test_kvfp4_quant_dequant.py:",
        "    tiers: [cpu]",
        "    est_time: 30  # seconds*",
        '    owner: "@your-github-handle"',
        "    status: active",
    ])


def test_files_outside_tests_dir_are_ignored(pytester, repo):
    repo(entry("tests/test_cpu.py", "[gpu_b200]"), {"tests/test_cpu.py": TWO_TESTS, "other/test_free.py": TWO_TESTS})
    run(pytester, "other", "tests").assert_outcomes(passed=2, skipped=2)


@pytest.mark.parametrize("status, extra, shown", [
    ("manual", {"reason": "needs a person at the console"}, "is manual in the registry: needs a person"),
    ("quarantined", {"reason": "flaky NCCL", "issue": "https://example.org/i/7"},
     "is quarantined in the registry: flaky NCCL (https://example.org/i/7)"),
])
def test_inactive_files_skip_unless_named_or_included(pytester, repo, status, extra, shown):
    repo(entry("tests/test_off.py", status=status, **extra), {"tests/test_off.py": TWO_TESTS})
    result = run(pytester, "tests")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines([f"*tests/test_off.py {shown}*"])
    run(pytester, "tests/test_off.py").assert_outcomes(passed=2)
    run(pytester, "tests/test_off.py::test_a").assert_outcomes(passed=1)
    run(pytester, "--include-inactive", "tests").assert_outcomes(passed=2)
    # CI shards name their files and pass --tier: that is not a developer asking for the file.
    run(pytester, "--tier", "cpu", "tests/test_off.py").assert_outcomes(skipped=2)
    run(pytester, "--tier", "cpu", "--include-inactive", "tests/test_off.py").assert_outcomes(passed=2)


def test_timeout_and_reruns_become_markers_unless_the_test_sets_its_own(pytester, repo):
    repo(entry("tests/test_t.py", timeout=7, reruns=2), {"tests/test_t.py": """
        import pytest

        def test_default(request):
            assert request.node.get_closest_marker("timeout").args == (7.0,)
            assert request.node.get_closest_marker("flaky").kwargs == {"reruns": 2}

        @pytest.mark.timeout(99)
        @pytest.mark.flaky(reruns=5)
        def test_own(request):
            assert request.node.get_closest_marker("timeout").args == (99,)
            assert request.node.get_closest_marker("flaky").kwargs == {"reruns": 5}

        ATTEMPTS = []

        def test_rerun_really_reruns():
            ATTEMPTS.append(1)
            assert len(ATTEMPTS) == 3
    """})
    result = run(pytester, "tests")
    assert result.parseoutcomes() == {"passed": 3, "rerun": 2}


def test_registry_timeout_really_stops_a_hanging_test(pytester, repo):
    repo(entry("tests/test_hang.py", timeout=0.5), {"tests/test_hang.py": """
        import time

        def test_hangs():
            time.sleep(30)
    """})
    result = run(pytester, "tests")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Timeout (>0.5s) from pytest-timeout*"])


def test_bad_registry_is_a_usage_error_listing_problems(pytester, repo):
    repo(entry("tests/test_cpu.py", "[cpu, gpu_z9]") + entry("tests/test_cpu.py"), {"tests/test_cpu.py": TWO_TESTS})
    result = run(pytester, "tests")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*registry has problems:*",
        "*registry.yaml:*:*: R006 test 'tests/test_cpu.py' names unknown tier 'gpu_z9'*",
        "*registry.yaml:*:*: R002 duplicate key 'tests/test_cpu.py' in tests*",
    ], consecutive=False)


def test_registry_option_points_elsewhere(pytester, repo):
    repo(entry("tests/test_cpu.py"), {"tests/test_cpu.py": TWO_TESTS})
    other = pytester.path / "conf" / "alt.yaml"
    other.parent.mkdir()
    other.write_text(REGISTRY_HEAD + entry("tests/test_cpu.py", "[gpu_b200]"))
    run(pytester, "--registry", str(other), "tests").assert_outcomes(skipped=2)


# --- ci.hardware -----------------------------------------------------------------------------------

def _tier(name: str, count: int, arch: str, features: tuple[str, ...] = ()):
    from ci.registry import Tier

    return Tier(name, "d", ("l",), count, arch, features)


def test_parse_override_and_describe():
    from ci.hardware import parse_override

    hw = parse_override("sm_90, sm_100x4")
    assert hw.capabilities == ((9, 0),) + ((10, 0),) * 4
    assert hw.count((10, 0)) == 4 and hw.count((9, 0)) == 1 and hw.count((8, 0)) == 0
    assert hw.describe() == "1x sm_90, 4x sm_100"
    assert parse_override("none").describe() == "none" and parse_override("").capabilities == ()
    for bad in ("h100", "sm_100x0", "sm_100xx", "sm_1"):
        with pytest.raises(ValueError, match="CI_HARDWARE_OVERRIDE: bad item"):
            parse_override(bad)


def test_missing_needs_exact_capability_and_count():
    from ci.hardware import missing, parse_override

    b200_x4 = _tier("gpu_b200_x4", 4, "sm_100", ("fp8", "fp4", "nvlink"))
    assert missing(_tier("cpu", 0, "cpu"), parse_override("none")) is None
    assert missing(b200_x4, parse_override("sm_100x4")) is None
    assert missing(b200_x4, parse_override("sm_100x3,sm_90")) == (
        "tier gpu_b200_x4 needs 4 GPUs with sm_100 (fp8, fp4, nvlink); this machine has 1x sm_90, 3x sm_100")
    # A newer GPU does not stand in for the tier's architecture: CI must run on what it names.
    assert missing(_tier("gpu_h100", 1, "sm_90"), parse_override("sm_100")) == (
        "tier gpu_h100 needs 1 GPU with sm_90; this machine has 1x sm_100")


def test_probe_uses_the_override_or_torch(monkeypatch):
    from ci.hardware import probe

    monkeypatch.setenv(OVERRIDE_ENV, "sm_90x2")
    assert probe().capabilities == ((9, 0), (9, 0))
    monkeypatch.delenv(OVERRIDE_ENV)
    torch = pytest.importorskip("torch")
    expected = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert len(probe().capabilities) == expected
