"""`ci import-suites` reads registrations only where the suite runner reads them, keeps label-gated
suites off per-commit tiers, and ends with a summary naming every per-commit suite left on no tier.

The fixture is shaped like SGLang at d89b678d6: ``test/run_suite.py`` globs ``test/registered`` and
``python/pkg/kernels/tests`` (the jit_kernel shape); ``test/manual`` holds a parked file that
registers itself; ``extra-*`` suites run from a workflow that needs a second label. The expected
files and counts are written out by hand from that layout, never from our parser's output.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.adopt.label_gates import label_gated_suites
from ci.adopt.suite_runner import SourceFolder, runner_folders
from ci.registry import Status, load_registry
from sglang_like import write

RUN_SUITE = textwrap.dedent("""\
    import glob
    import os
    from pathlib import Path

    HERE = Path(__file__).resolve().parent


    def run_a_suite():
        script_dir = os.path.dirname(os.path.abspath(__file__))
        repo_root = os.path.dirname(script_dir)
        files = glob.glob(os.path.join(script_dir, "registered", "**", "*.py"), recursive=True)
        kernel_dir = os.path.join(repo_root, "python", "pkg", "kernels")
        files += glob.glob(os.path.join(kernel_dir, "tests", "**", "test_*.py"), recursive=True)
        return files
    """)


def _reg(backend: str, suite: str, est: int = 10, extra: str = "") -> str:
    return f"register_{backend}_ci(est_time={est}, suite={suite!r}{extra})\n"


def _file(*calls: str) -> str:
    return "".join(calls) + "\n\ndef test_ok():\n    assert True\n"


WORKFLOW_MAIN = textwrap.dedent("""\
    on: {pull_request: {}}
    jobs:
      gate:
        uses: ./.github/workflows/pr-gate.yml
        with: {require-run-ci: true}
      small:
        # extra-a-test-1-gpu-small is listed in pr-test-extra.yml, not here: a comment never counts
        runs-on: gpu
        steps:
          - run: python3 run_suite.py --hw cuda --suite base-b-test-1-gpu-small
            env:  # a label read as a value, not an `if:`: no gate (SGLang's pr-test-amd.yml does this)
              BYPASS: ${{ contains(github.event.pull_request.labels.*.name, 'bypass-fastfail') }}
      large:
        runs-on: gpu
        if: ${{ !contains(github.event.pull_request.labels.*.name, 'skip-large') }}
        steps:
          - run: python3 run_suite.py --hw cuda --suite base-b-test-1-gpu-large
    """)
WORKFLOW_EXTRA = textwrap.dedent("""\
    on: {pull_request: {}}
    jobs:
      check:
        if: |
          github.event_name != 'pull_request' ||
          (contains(github.event.pull_request.labels.*.name, 'run-ci') &&
           contains(github.event.pull_request.labels.*.name, 'run-ci-extra'))
        runs-on: ubuntu-latest
        steps: [{run: echo ok}]
      extra-a-test-1-gpu-small:
        uses: ./.github/workflows/_stage.yml
        with: {self_name: extra-a-test-1-gpu-small}
    """)
WORKFLOW_GATE_INPUT = textwrap.dedent("""\
    on: {pull_request: {}}
    jobs:
      gate:
        uses: ./.github/workflows/pr-gate.yml
        with: {require-run-ci: true, require-run-ci-extra: true}
      big:
        runs-on: gpu
        steps: [{run: "python3 run_suite.py --suite extra-b-test-2-gpu-large"}]
    """)

TIERS = "".join(f"  {name}:\n    description: {name}\n    runner_labels: [{name}]\n    gpu_count: {gpus}\n    arch: {arch}\n"
                for name, gpus, arch in (("cpu", 0, "cpu"), ("gpu_1", 1, "sm_90"), ("gpu_2", 2, "sm_90")))
BASE = ("version: 1\nproject:\n  source_roots: [python]\n  test_roots: [test]\n  test_patterns: [\"test_*.py\"]\n"
        "tiers:\n" + TIERS + "tests: {}\n")
MAP = ["*-1-gpu-small=gpu_1", "*-1-gpu-large=gpu_1", "*-2-gpu-large=gpu_2", "base-*-test-cpu=cpu"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    write(tmp_path, {
        "registry.yaml": BASE,
        "test/run_suite.py": RUN_SUITE,
        "test/registered/test_small.py": _file(_reg("cuda", "base-b-test-1-gpu-small")),
        "test/registered/test_large.py": _file(_reg("cuda", "base-b-test-1-gpu-large", 50)),
        "test/registered/test_cpu.py": _file(_reg("cpu", "base-a-test-cpu", 5)),
        "test/registered/test_extra_a.py": _file(_reg("cuda", "extra-a-test-1-gpu-small", 30)),
        "test/registered/test_extra_b.py": _file(_reg("cuda", "extra-b-test-2-gpu-large", 40)),
        # in a gated suite and a default one: the default one places it
        "test/registered/test_both.py": _file(_reg("cuda", "extra-a-test-1-gpu-small"),
                                              _reg("cuda", "base-b-test-1-gpu-small")),
        "test/registered/test_xpu.py": _file(_reg("xpu", "base-b-test-1-gpu-xpu")),
        "test/registered/test_xpu2.py": _file(_reg("xpu", "base-b-test-1-gpu-xpu")),
        # the CUDA suite's name on another backend: refused on the CUDA tier, and one suite of its own
        "test/registered/test_amd_small.py": _file(_reg("amd", "base-b-test-1-gpu-small")),
        "test/registered/test_other.py": _file(_reg("cuda", "stage-z-unknown")),
        "test/registered/test_nightly.py": _file(_reg("cuda", "nightly-test-1-gpu-large")),
        "python/pkg/kernels/tests/test_kernel.py": _file(_reg("cuda", "base-b-test-1-gpu-large", 7)),
        "python/pkg/kernels/tests/helper.py": _file(_reg("cuda", "base-b-test-1-gpu-large")),  # not test_*.py
        # parked: registers itself, but the runner never reads test/manual
        "test/manual/test_parked.py": _file(_reg("cuda", "base-b-test-1-gpu-small")),
        ".github/workflows/pr-test.yml": WORKFLOW_MAIN,
        ".github/workflows/pr-test-extra.yml": WORKFLOW_EXTRA,
        ".github/workflows/pr-test-big.yml": WORKFLOW_GATE_INPUT,
        ".github/workflows/broken.yml": "jobs: [unclosed\n",
    })
    return tmp_path


def run(repo: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str, str]:
    argv = ["--root", str(repo), "import-suites", "--output", str(repo / "out.yaml"), "--force", *flags]
    for pair in MAP:
        argv += ["--tier-map", pair]
    code = ci_main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_runner_folders_follow_the_globs_of_sglangs_run_suite(repo: Path) -> None:
    found = runner_folders(repo, repo / "test/run_suite.py")
    assert found.notes == []
    assert found.folders == [SourceFolder("test/registered", "*.py", "test/run_suite.py:11"),
                             SourceFolder("python/pkg/kernels/tests", "test_*.py", "test/run_suite.py:13")]


@pytest.mark.parametrize("source, expected", [
    ("import glob\nglob.glob('x/test_a.py')\n", ("t/x", "test_a.py")),                # one file: its folder
    ("import glob\nglob.glob('registered/**/*.py')\n", ("t/registered", "*.py")),     # relative: the runner's folder
    ("from glob import glob\nglob('../x/*_test.py')\n", ("x", "*_test.py")),          # one folder up, still inside
    ("from pathlib import Path\nimport glob\nglob.glob(str(Path(__file__).parent / 'a'))\n", None),  # str(): unknown
    ("import glob\nD = 'b'\ndef f():\n    D = 'c'\n    return glob.glob(D + '/*.py')\n", None),  # a + is not evaluated
    ("import glob\ndef f():\n    d = 'c'\n    return glob.iglob(d + '/**/*.py')\n", None),
    ("import glob\ndef f():\n    d = 'c/d'\n    return glob.iglob(f'{d}/*.py')\n", None),
])
def test_runner_globs_are_evaluated_only_from_literals(tmp_path: Path, source: str,
                                                        expected: tuple[str, str] | None) -> None:
    write(tmp_path, {"t/run_suite.py": source})
    found = runner_folders(tmp_path, tmp_path / "t/run_suite.py")
    if expected is None:
        assert found.folders == [] and len(found.notes) == 1 and "not built from literals" in found.notes[0]
    else:
        assert [(f.folder, f.pattern) for f in found.folders] == [expected] and found.notes == []


def test_runner_glob_names_inside_a_function_shadow_module_names(tmp_path: Path) -> None:
    write(tmp_path, {"t/run_suite.py": "import glob, os\nD = 'mod'\ndef f():\n    D = 'fn'\n"
                                       "    return glob.glob(os.path.join(D, '*.py'))\n"})
    assert [f.folder for f in runner_folders(tmp_path, tmp_path / "t/run_suite.py").folders] == ["t/fn"]


def test_runner_globs_leaving_the_repository_or_reading_no_python_are_notes(tmp_path: Path) -> None:
    write(tmp_path, {"t/run_suite.py": "import glob\nglob.glob('../../*.py')\nglob.glob('/etc/*.py')\n"
                                       "glob.glob('data/*.json')\n"})
    found = runner_folders(tmp_path, tmp_path / "t/run_suite.py")
    assert found.folders == []
    assert found.notes == ["t/run_suite.py:2: glob '../*.py' leaves the repository; skipped",
                           "t/run_suite.py:3: glob '/etc/*.py' leaves the repository; skipped",
                           "t/run_suite.py:4: glob 't/data/*.json' reads no .py files; skipped"]


def test_label_gates_read_both_gate_syntaxes_and_ignore_comments_and_negations(repo: Path) -> None:
    suites = {"base-b-test-1-gpu-small", "base-b-test-1-gpu-large", "extra-a-test-1-gpu-small",
              "extra-b-test-2-gpu-large", "base-a-test-cpu"}
    gates = label_gated_suites(repo / ".github/workflows", suites)
    assert sorted(gates) == ["extra-a-test-1-gpu-small", "extra-b-test-2-gpu-large"]
    # every workflow here needs run-ci: the baseline, not a gate; 'skip-large' is negated, so no gate
    assert gates["extra-a-test-1-gpu-small"].labels == ("run-ci-extra",)
    assert gates["extra-b-test-2-gpu-large"].labels == ("run-ci-extra",)
    assert gates["extra-b-test-2-gpu-large"].workflows == ("pr-test-big.yml",)
    assert label_gated_suites(repo / "nowhere", suites) == {}


def test_a_suite_also_run_without_the_label_is_not_gated(repo: Path) -> None:
    (repo / ".github/workflows/nightly.yml").write_text(
        "on: {schedule: [{cron: '0 0 * * *'}]}\njobs:\n  n:\n    runs-on: gpu\n"
        "    steps: [{run: python3 run_suite.py --suite extra-a-test-1-gpu-small}]\n")
    gates = label_gated_suites(repo / ".github/workflows", {"extra-a-test-1-gpu-small", "extra-b-test-2-gpu-large"})
    assert sorted(gates) == ["extra-b-test-2-gpu-large"]


def test_import_reads_only_the_runners_folders_and_keeps_gated_suites_off(repo: Path, capsys) -> None:
    code, out, err = run(repo, capsys)
    assert code == 0, err
    tests = load_registry(repo / "out.yaml").tests
    active = {p for p, e in tests.items() if e.status is Status.ACTIVE}
    assert active == {"test/registered/test_small.py", "test/registered/test_large.py", "test/registered/test_cpu.py",
                      "test/registered/test_both.py", "python/pkg/kernels/tests/test_kernel.py"}
    assert tests["test/registered/test_both.py"].tiers == ("gpu_1",)
    parked = tests["test/manual/test_parked.py"]
    assert parked.status is Status.MANUAL and parked.reason.startswith(
        "not under test/registered, python/pkg/kernels/tests, where the suite runner reads registrations")
    gated = tests["test/registered/test_extra_a.py"]
    assert gated.status is Status.MANUAL and gated.tiers == ("cpu",)
    assert gated.reason == ("only in label-gated suite(s) extra-a-test-1-gpu-small, kept off per-commit tiers "
                            "(--include-label-gated maps them)")
    assert "python/pkg/kernels/tests/helper.py" not in tests
    assert "note: suite 'extra-a-test-1-gpu-small' -> tier 'gpu_1' refused for 2 file(s)" in err
    # the summary closes the output, after the 'wrote' line; every per-commit suite on no tier is named
    lines = out.splitlines()
    assert lines[0].startswith(f"wrote {repo / 'out.yaml'}: 13 entries (5 active, 8 manual)")
    assert lines[1:] == [
        "summary: registrations read from test/registered/**/*.py (test/run_suite.py:11), "
        "python/pkg/kernels/tests/**/test_*.py (test/run_suite.py:13)",
        "summary: 5 per-commit suite(s) left on no tier (7 file registration(s); those files are manual unless "
        "another suite places them):",
        "  base-b-test-1-gpu-small (amd)     1 file(s)  its tiers are of another backend or schedule; "
        "--tier-map 'base-b-test-1-gpu-small=<amd tier>'",
        "  base-b-test-1-gpu-xpu             2 file(s)  no --tier-map matches it; --tier-map 'base-b-test-1-gpu-xpu=<xpu tier>'",
        "  extra-a-test-1-gpu-small          2 file(s)  label-gated: label run-ci-extra (pr-test-extra.yml); "
        "--include-label-gated",
        "  extra-b-test-2-gpu-large          1 file(s)  label-gated: label run-ci-extra (pr-test-big.yml); --include-label-gated",
        "  stage-z-unknown                   1 file(s)  no --tier-map matches it; --tier-map 'stage-z-unknown=<cuda tier>'",
    ]
    assert tests["test/registered/test_amd_small.py"].status is Status.MANUAL
    assert "nightly-test-1-gpu-large" not in "\n".join(lines)  # not per-commit: a note above, not the summary


def test_include_label_gated_maps_them_and_registered_in_overrides_the_runner(repo: Path, capsys) -> None:
    code, out, err = run(repo, capsys, "--include-label-gated")
    assert code == 0, err
    tests = load_registry(repo / "out.yaml").tests
    assert tests["test/registered/test_extra_a.py"].tiers == ("gpu_1",) and tests["test/registered/test_extra_a.py"].is_active
    assert tests["test/registered/test_extra_b.py"].tiers == ("gpu_2",) and tests["test/registered/test_extra_b.py"].is_active
    assert "summary: label-gated suites mapped like any other (--include-label-gated)" in out
    assert "extra-a" not in out.split("summary:", 1)[1]

    code, out, err = run(repo, capsys, "--registered-in", "test", "--label-gated", "base-a-*")
    assert code == 0, err
    tests = load_registry(repo / "out.yaml").tests
    assert tests["test/manual/test_parked.py"].is_active  # read because asked to
    assert "python/pkg/kernels/tests/test_kernel.py" not in tests
    assert tests["test/registered/test_cpu.py"].status is Status.MANUAL
    assert "summary: registrations read from test/**/*.py (--registered-in)" in out
    assert "  base-a-test-cpu" in out and "label-gated: --label-gated base-a-*; --include-label-gated" in out


def test_without_a_runner_glob_the_test_roots_are_read_and_said(repo: Path, capsys) -> None:
    (repo / "test/run_suite.py").write_text("def main():\n    pass\n")
    code, out, err = run(repo, capsys)
    assert code == 0, err
    assert load_registry(repo / "out.yaml").tests["test/manual/test_parked.py"].is_active
    assert "summary: registrations read from test/**/*.py (test root)" in out


@pytest.mark.parametrize("flag, value, said", [
    ("--registered-in", "tests", "--registered-in tests (no such folder under "),
    ("--registered-in", "test/run_suite.py", "--registered-in test/run_suite.py (no such folder under "),
    ("--workflows", ".gitlab", "--workflows .gitlab (no such folder under "),
])
def test_a_folder_flag_naming_no_folder_is_one_error_line(repo: Path, capsys, flag: str, value: str,
                                                          said: str) -> None:
    code, out, err = run(repo, capsys, flag, value)
    assert code == 2 and out == "" and not (repo / "out.yaml").exists()
    assert err.startswith(f"python -m ci import-suites: cannot read: {said}") and err.count("\n") == 1, err


def test_an_absolute_workflows_folder_is_used_as_given(repo: Path, capsys) -> None:
    code, out, err = run(repo, capsys, "--workflows", str(repo / ".github/workflows"))
    assert code == 0, err
    assert "label-gated: label run-ci-extra (pr-test-extra.yml)" in out
