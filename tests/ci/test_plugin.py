"""ci.pytest_plugin, driven through pytest's own `pytester` in throw-away repositories."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from ci.pytest_entry import ENTRY_POINT
from ci.running.hardware import OVERRIDE_ENV
from tests.ci.tree_testutil import write

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


def test_reruns_become_markers_unless_the_test_sets_its_own(pytester, repo):
    repo(entry("tests/test_t.py", reruns=2), {"tests/test_t.py": """
        import pytest

        def test_default(request):
            marker = request.node.get_closest_marker("flaky")
            assert marker.kwargs["reruns"] == 2 and r"\\bImportError\\b" in marker.kwargs["rerun_except"]

        @pytest.mark.flaky(reruns=5)
        def test_own(request):
            assert request.node.get_closest_marker("flaky").kwargs == {"reruns": 5}

        ATTEMPTS = []

        def test_rerun_really_reruns():
            ATTEMPTS.append(1)
            assert len(ATTEMPTS) == 3
    """})
    result = run(pytester, "tests")
    assert result.parseoutcomes() == {"passed": 3, "rerun": 2}


def test_timeout_is_the_whole_files_budget_and_each_test_gets_what_remains(pytester, repo):
    repo(entry("tests/test_t.py", timeout=600), {"tests/test_t.py": """
        import time

        import pytest

        SEEN = []

        def test_first(request):
            SEEN.append(request.node.get_closest_marker("timeout").args[0])
            time.sleep(0.2)

        def test_second(request):
            SEEN.append(request.node.get_closest_marker("timeout").args[0])
            # What the first test used (setup and teardown included) is gone from the budget.
            assert 600 - 5 < SEEN[1] <= 600 - 0.2 < SEEN[0] <= 600

        @pytest.mark.timeout(7)
        def test_own_smaller_timeout_is_kept(request):
            assert request.node.get_closest_marker("timeout").args == (7.0,)

        @pytest.mark.timeout(9999, method="thread")
        def test_own_larger_timeout_is_cut_to_the_budget(request):
            marker = request.node.get_closest_marker("timeout")
            assert marker.args[0] < 600 and marker.kwargs == {"method": "thread"}
    """})
    run(pytester, "tests").assert_outcomes(passed=4)


def test_a_hung_test_takes_only_what_is_left_and_the_rest_of_the_file_fails_without_running(pytester, repo):
    repo(entry("tests/test_hang.py", timeout=1.5), {"tests/test_hang.py": """
        import time

        RAN = []

        def test_uses_most_of_the_budget():
            time.sleep(1.0)

        def test_hangs():
            time.sleep(30)

        def test_never_starts():
            RAN.append(1)

        def test_nothing_ran_after_the_budget():
            assert RAN == []
    """})
    result = run(pytester, "tests")
    result.assert_outcomes(passed=1, failed=1, errors=2)
    result.stdout.fnmatch_lines([  # errors are reported before failures
        "*tests/test_hang.py: the file's timeout of 1.5 s (registry.yaml) is used up*not running this test*",
        "*Timeout (>0.*s) from pytest-timeout*",  # the hung test got the ~0.5 s left, not 1.5 s
    ], consecutive=False)


def test_a_registry_timeout_without_pytest_timeout_is_a_usage_error(pytester, repo):
    repo(entry("tests/test_t.py", timeout=60), {"tests/test_t.py": TWO_TESTS})
    result = pytester.runpytest_inprocess("-p", "ci.pytest_plugin", "-p", "no:cacheprovider", "tests")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tests/test_t.py a timeout, but pytest-timeout is not loaded*"])


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


# --- the registry's root and project layout ---------------------------------------------------------

def test_the_registry_is_found_above_a_subdirectory_rootdir(pytester, repo):
    repo(entry("tests/test_cpu.py"), {"tests/test_cpu.py": TWO_TESTS, "tests/test_stray.py": TWO_TESTS})
    result = run(pytester, "--rootdir", str(pytester.path / "tests"), "--continue-on-collection-errors", "tests")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["tests/test_stray.py is not registered in registry.yaml*"])


def test_test_roots_and_patterns_come_from_the_project_section(pytester, repo):
    project = 'project:\n  test_roots: [test/registered]\n  test_patterns: ["*_test.py", "test_*.py"]\n'
    repo(entry("test/registered/a/core_test.py"), {
        "test/registered/a/core_test.py": TWO_TESTS,   # registered, pytest's python_files extended to collect it
        "test/registered/b/test_new.py": TWO_TESTS,    # under a test root, unregistered: an error
        "test/manual/test_by_hand.py": TWO_TESTS,      # outside the test roots: left alone
        "tests/test_old_root.py": TWO_TESTS,           # `tests/` is not a root here
    })
    (pytester.path / "registry.yaml").write_text(
        (pytester.path / "registry.yaml").read_text().replace("tiers:\n", project + "tiers:\n", 1))
    result = run(pytester, "-o", "python_files=test_*.py", "--continue-on-collection-errors", "test", "tests")
    result.assert_outcomes(passed=6, errors=1)
    result.stdout.fnmatch_lines([
        "test/registered/b/test_new.py is not registered in registry.yaml; every test file under test/registered/ *"])


def test_files_pytest_collects_beyond_the_registrys_patterns_are_left_alone(pytester, repo):
    repo(entry("tests/test_cpu.py"), {"tests/test_cpu.py": TWO_TESTS, "tests/check_free.py": TWO_TESTS})
    run(pytester, "-o", "python_files=test_*.py check_*.py", "tests").assert_outcomes(passed=4)


def test_a_test_file_linked_from_outside_the_repository_is_refused(pytester, repo, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "test_evil.py"
    outside.write_text("def test_evil():\n    raise SystemExit('ran code from outside the repository')\n")
    repo(entry("tests/test_link.py") + entry("tests/test_inside.py") + entry("tests/ext/test_deep.py"),
         {"tests/real/test_target.py": TWO_TESTS})
    (pytester.path / "tests" / "test_link.py").symlink_to(outside)
    (pytester.path / "tests" / "test_inside.py").symlink_to(pytester.path / "tests" / "real" / "test_target.py")
    (pytester.path / "tests" / "ext").symlink_to(outside.parent, target_is_directory=True)
    outside.with_name("test_deep.py").write_text("def test_deep():\n    raise SystemExit('outside')\n")
    result = run(pytester, "--continue-on-collection-errors", "tests/test_link.py", "tests/test_inside.py",
                 "tests/ext")
    result.assert_outcomes(passed=2, errors=3)  # the link inside the repository runs
    result.stdout.fnmatch_lines([
        f"tests/test_link.py is a symlink (or lies under one) to {outside}, outside the repository; "
        "refusing to collect it*",
        f"tests/ext/test_deep.py is a symlink (or lies under one) to {outside.parent / 'test_deep.py'}, outside the "
        "repository; refusing to collect it*",
        f"tests/ext/test_evil.py is a symlink (or lies under one) to {outside}, outside the repository; *",
    ], consecutive=False)


@pytest.mark.parametrize("damage, shown", [
    (lambda text: text.encode("utf-16"), "R011 registry.yaml is UTF-16-encoded (byte order mark at byte offset 0)"),
    (lambda text: text.encode("utf-16-le"), "R011 registry.yaml has a NUL byte at byte offset 1 (UTF-16 without a byte order mark?)"),
    (lambda text: text.replace("no GPU", "caf\xe9").encode("latin-1"), "R011 registry.yaml is not valid UTF-8 at byte "
                                                                       "offset 45 (byte 0xE9)"),
])
def test_a_registry_that_is_not_utf8_is_a_usage_error_naming_the_byte(pytester, repo, damage, shown):
    repo(entry("tests/test_cpu.py"), {"tests/test_cpu.py": TWO_TESTS})
    path = pytester.path / "registry.yaml"
    path.write_bytes(damage(path.read_text()))
    result = run(pytester, "tests")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*registry.yaml:*:*: {shown}; save it as UTF-8"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_registry_with_an_alias_is_a_usage_error(pytester, repo):
    repo(entry("tests/test_cpu.py", tiers="&t [cpu]") + entry("tests/test_two.py", tiers="*t"),
         {"tests/test_cpu.py": TWO_TESTS, "tests/test_two.py": TWO_TESTS})
    result = run(pytester, "tests")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*R010 anchor '&t': anchors and aliases are not allowed*",
                                 "*R010 alias '*t': anchors and aliases are not allowed*"])


# -- the pytest11 entry point: only a tree with a registry gets the plugin (issue #50) --------------

ADOPTER_CONFTEST = """\
def pytest_addoption(parser):  # an adopter's own option: the plugin's --tier once collided with it
    parser.addoption("--tier", default="none")


def pytest_report_header(config):
    return f"tier option: {config.getoption('tier')}"
"""


def pytest_subprocess(project: Path, *args: str) -> tuple[int, str]:
    """A real ``python -m pytest`` in ``project`` with this environment's installed entry points;
    its exit status and output with the timings taken out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args], cwd=project,
                          env=env, text=True, capture_output=True, timeout=120)
    # pytest's header names every installed plugin distribution, loaded or blocked: not the run.
    return done.returncode, re.sub(r"(?m) in [0-9.]+s|^plugins: .*\n", "", done.stdout + done.stderr)


def test_the_entry_point_is_named_as_the_docs_say() -> None:
    points = {e.name: e.value for e in entry_points(group="pytest11") if e.value.startswith("ci.")}
    assert points == {ENTRY_POINT: "ci.pytest_entry"}


@pytest.mark.parametrize("args", [(), ("--help",)])
def test_without_a_registry_a_run_is_the_same_as_without_the_package(tmp_path: Path, args: tuple[str, ...]) -> None:
    write(tmp_path, {"pytest.ini": "[pytest]\n", "conftest.py": ADOPTER_CONFTEST,
                     "tests/test_one.py": "def test_one():\n    pass\n", "tests/unmarked_test.py": "x = 1\n"})
    default = pytest_subprocess(tmp_path, *args)
    assert default == pytest_subprocess(tmp_path, "-p", f"no:{ENTRY_POINT}", *args)
    assert default[0] == 0
    assert "--registry" not in default[1] and "ci.pytest_plugin" not in default[1]


def test_with_a_registry_the_entry_point_loads_the_plugin_unless_told_not_to(tmp_path: Path) -> None:
    write(tmp_path, {"sub/pytest.ini": "[pytest]\n", "sub/tests/test_one.py": "def test_one():\n    pass\n",
                     "registry.yaml": "version: 1\nproject:\n  test_roots: [sub/tests]\ntiers:\n"
                                      "  cpu: {description: cpu, runner_labels: [x], gpu_count: 0, arch: cpu}\ntests: {}\n"})
    code, out = pytest_subprocess(tmp_path / "sub")  # the registry sits above the rootdir
    assert code == 2 and "sub/tests/test_one.py is not registered in" in out, out
    assert pytest_subprocess(tmp_path / "sub", "--tier", "cpu")[0] == 2  # the plugin's option, its error
    for off in (ENTRY_POINT, "ci.pytest_plugin"):
        code, out = pytest_subprocess(tmp_path / "sub", "-p", f"no:{off}")
        assert code == 0 and "1 passed" in out, out
