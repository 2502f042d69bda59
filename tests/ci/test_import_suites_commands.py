"""`ci import-suites` from pytest command lines: Makefile targets (Liger-Kernel's `make test` /
`make test-convergence`) and workflow steps. The oracle is pytest itself: `pytest --collect-only`
with each suite's exact arguments, run in the fixture tree, must collect from the same files."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.registry import Status, load_registry
from ci.results.junit import parse_junit
from tests.ci.test_run_env import ci_run as _ci_run

PASSING = "def test_ok():\n    assert True\n"

MAKEFILE = """\
.PHONY: test test-convergence lint
PYTEST = python -m pytest
IGNORES := --ignore=test/convergence \\
\t--ignore-glob='test/*/test_skip_*.py'

test:
\t$(PYTEST) --disable-warnings \\
\t\t$(IGNORES) \\
\t\t--ignore=test/cutedsl \\
\t\ttest/

# convergence
test-convergence:
\tHF_DATASETS_OFFLINE=1 python -m pytest -k "not slow" test/convergence/fp32/test_mini.py \\
\t\ttest/convergence/bf16/test_mini.py

test-defaults:
\t@cd test && pytest -m 'not gpu'; echo done

lint:
\truff check .; status=$$?; exit $$status
"""

WORKFLOW = """\
name: ci
on: [pull_request]
jobs:
  unit:
    runs-on: ubuntu-latest
    defaults: {run: {working-directory: test}}
    steps:
      - uses: actions/checkout@v4
      - name: tests
        run: |
          pip install -e .   # pytest is mentioned here only in a comment
          timeout 600 pytest -v transformers triton/test_ops.py::test_ok --deselect triton/test_b.py::test_ok
  docs:
    runs-on: ubuntu-latest
    steps:
      - run: mkdocs build
"""


@pytest.fixture
def liger_like(tmp_path: Path) -> Path:
    root = tmp_path / "liger"
    files = {
        "Makefile": MAKEFILE, ".github/workflows/ci.yml": WORKFLOW,
        "pyproject.toml": '[tool.pytest.ini_options]\npython_files = "test_*.py"\ntestpaths = ["test/"]\n',
        "src/liger/__init__.py": "",
        "test/__init__.py": "", "test/utils.py": "",
        "test/transformers/test_rms.py": PASSING, "test/transformers/skip_me_test.py": PASSING,
        "test/transformers/skip_old.py": PASSING, "test/triton/test_ops.py": PASSING,
        "test/triton/test_b.py": PASSING, "test/triton/test_skip_x.py": PASSING,
        "test/convergence/fp32/test_mini.py": PASSING, "test/convergence/bf16/test_mini.py": PASSING,
        "test/convergence/bf16/test_other.py": PASSING, "test/convergence/__init__.py": "",
        "test/convergence/fp32/__init__.py": "", "test/convergence/bf16/__init__.py": "", "test/cutedsl/test_dsl.py": PASSING,
        "test/build/test_built.py": PASSING,  # pytest's norecursedirs skips build/
    }
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    return root


def collected(root: Path, cwd: str, *args: str) -> set[str]:
    """The files pytest collects from with ``args``, run in ``root/cwd`` (its node ids are relative to
    its rootdir, the fixture's root: the pyproject.toml is there)."""
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             "-p", "no:randomly", *args], cwd=root / cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return {line.split("::", 1)[0] for line in result.stdout.splitlines() if "::" in line}


def suite_files(registry_path: Path, suite_tier: str) -> set[str]:
    registry = load_registry(registry_path)
    return {p for p, e in registry.tests.items() if suite_tier in e.tiers and e.status is Status.ACTIVE}


TIERS = """\
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
  conv: {description: convergence, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
  dflt: {description: defaults, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
  unit: {description: workflow, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
"""


def with_tiers(root: Path) -> None:
    assert ci_main(["--root", str(root), "init"]) == 0
    text = (root / "registry.yaml").read_text()
    start, end = text.index("tiers:\n"), text.index("tests:\n")
    (root / "registry.yaml").write_text(text[:start] + TIERS + text[end:])


def import_make_targets(root: Path, capsys) -> tuple[Path, str]:
    """Import the three make targets, each on its own tier: (the registry, what was printed)."""
    with_tiers(root)
    out = root / "registry.yaml"
    assert ci_main(["--root", str(root), "import-suites", "--from-make", "--tier-map", "test=cpu",
                    "--tier-map", "test-convergence=conv", "--tier-map", "test-defaults=dflt",
                    "--output", str(out), "--force"]) == 0
    return out, capsys.readouterr().out


def test_makefile_targets_select_what_pytest_collects(liger_like, capsys):
    out, printed = import_make_targets(liger_like, capsys)
    assert suite_files(out, "cpu") == collected(
        liger_like, ".", "--ignore=test/convergence", "--ignore-glob=test/*/test_skip_*.py", "--ignore=test/cutedsl",
        "test/") == {"test/transformers/test_rms.py", "test/triton/test_ops.py", "test/triton/test_b.py"}
    assert suite_files(out, "conv") == collected(
        liger_like, ".", "test/convergence/fp32/test_mini.py", "test/convergence/bf16/test_mini.py")
    # no path, run in test/: pytest's rootdir is the root, so testpaths do not apply there
    assert suite_files(out, "dflt") == collected(liger_like, "test")
    assert "test/build/test_built.py" not in suite_files(out, "dflt")
    assert "suite 'test-convergence' selects within its files with -k not slow" in printed
    assert "suites read from Makefile target(s) test, test-convergence, test-defaults" in printed
    assert load_registry(out).tests["test/cutedsl/test_dsl.py"].tiers == ("dflt",)  # --ignore kept it off cpu


def test_a_variable_a_suites_command_sets_is_named_unless_its_tier_sets_it(liger_like, capsys):
    """``HF_DATASETS_OFFLINE=1 python -m pytest ...`` (Liger's ``make test-convergence``, and
    ``LIGER_KERNEL_IMPL=cutedsl`` in ``make test-cutedsl``): the tier runs without it unless its
    ``env:`` says it, so the import names it, with the line to add."""
    with_tiers(liger_like)
    out = liger_like / "registry.yaml"
    args = ["--root", str(liger_like), "import-suites", "--from-make", "--tier-map", "test=cpu",
            "--tier-map", "test-convergence=conv", "--tier-map", "test-defaults=dflt"]
    assert ci_main(args + ["--output", str(out), "--force"]) == 0
    err = capsys.readouterr().err
    assert ("note: suite 'test-convergence' runs pytest with HF_DATASETS_OFFLINE=1 (Makefile:14 (make test-convergence)), "
            "which tier 'conv' does not set: its tests would run without it; give the tier env: "
            '{HF_DATASETS_OFFLINE: "1"}') in err, err
    assert err.count("runs pytest with") == 1, err
    text = out.read_text().replace("  conv:\n", "  conv:\n    env: {HF_DATASETS_OFFLINE: \"1\"}\n", 1)
    assert text != out.read_text()
    out.write_text(text)
    assert ci_main(args) == 0
    assert "runs pytest with" not in capsys.readouterr().err


def test_workflow_steps_become_suites_and_discovery_falls_back_to_them(liger_like, capsys):
    (liger_like / "Makefile").unlink()
    with_tiers(liger_like)
    out = liger_like / "registry.yaml"
    assert ci_main(["--root", str(liger_like), "import-suites", "--tier-map", "ci/unit=unit",
                    "--output", str(out), "--force"]) == 0
    printed = capsys.readouterr()
    assert suite_files(out, "unit") == collected(liger_like, "test", "transformers", "triton/test_ops.py")
    assert "pytest steps of .github/workflows/ci.yml" in printed.out
    assert "--deselect triton/test_b.py::test_ok" in printed.out
    registry = load_registry(out)  # a node id names test_ops.py: it runs whole; the job's other file carries the rest
    assert registry.tiers["unit"].pytest_args == () and registry.tests["test/triton/test_ops.py"].pytest_args == ()
    assert registry.tests["test/transformers/test_rms.py"].pytest_args == ("--deselect", "triton/test_b.py::test_ok")
    assert "1 file(s) run whole where their suites select within them (named by node id" in printed.err


@pytest.mark.parametrize(("makefile", "args", "message"), [
    ("test:\n\tpytest $(FLAGS) test/\n", ["--from-make"],
     "Makefile:2: target 'test' uses ${FLAGS}, which the Makefile does not define"),
    ("test:\n\tpytest $(wildcard test/*.py)\n", ["--from-make", "test"],
     "Makefile:2: target 'test' calls the make function $(wildcard test/*.py)"),
    ("test:\n\tpytest test/\nlint:\n\truff $(X)\n", ["--from-make", "lint"],
     "Makefile: target(s) lint run no pytest command (targets that do: none)"),
])
def test_what_cannot_be_read_is_refused_in_one_line(tmp_path, capsys, makefile, args, message):
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_a.py").write_text(PASSING)
    (tmp_path / "Makefile").write_text(makefile)
    assert ci_main(["--root", str(tmp_path), "import-suites", *args, "--tier-map", "test=cpu"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


STEPS = """\
group: Distributed
steps:
- label: Distributed Comm Ops
  key: distributed-comm-ops
  num_devices: 2
  source_file_dependencies:
  - src/liger/
  - tests/distributed/test_comm
  - vllm/executor/
  commands:
  - export NCCL_CUMEM_HOST_ENABLE=0
  - pytest -v -s distributed/test_comm_ops.py
  - TP_SIZE=2 pytest -v -s distributed --ignore distributed/test_comm_ops.py -k "not ray"
  - torchrun --nproc-per-node=2 distributed/test_same_node.py
- label: Examples (1 GPU)
  optional: true
  working_dir: "/vllm-workspace/"
  commands:
  - pytest -v -s tests/basic/test_basic.py
- label: Docs
  commands:
  - mkdocs build
"""


def test_buildkite_steps_become_suites_with_their_dependencies(tmp_path, capsys):
    root = tmp_path / "vllm"
    files = {".buildkite/test_areas/distributed.yaml": STEPS, "src/liger/__init__.py": "",
             "tests/distributed/test_comm_ops.py": PASSING, "tests/distributed/test_pp.py": PASSING,
             "tests/distributed/test_same_node.py": PASSING, "tests/basic/test_basic.py": PASSING,
             "tests/basic/test_other.py": PASSING}
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    with_tiers(root)
    text = (root / "registry.yaml").read_text()
    (root / "registry.yaml").write_text(text.replace("tiers:\n", "tiers:\n  gpu2: {description: two, runner_labels: "
                                                                  "[h100x2], gpu_count: 2, arch: sm_90}\n", 1))
    out = root / "registry.yaml"
    assert ci_main(["--root", str(root), "import-suites", "--from-buildkite", "--tier-map", "distributed-comm-ops=gpu2",
                    "--tier-map", "examples-1-gpu=cpu", "--output", str(out), "--force"]) == 0
    printed = capsys.readouterr()
    registry = load_registry(out)
    # the step's folder is tests/ (no working_dir); pytest, run there with each command's arguments, agrees
    expected = collected(root, "tests", "distributed/test_comm_ops.py") | collected(
        root, "tests", "distributed", "--ignore", "distributed/test_comm_ops.py")
    assert suite_files(out, "gpu2") == {f"tests/{p}" for p in expected} == {
        "tests/distributed/test_comm_ops.py", "tests/distributed/test_pp.py", "tests/distributed/test_same_node.py"}
    assert registry.tests["tests/distributed/test_pp.py"].depends_on == (
        "src/liger", "tests/distributed/test_comm_ops.py")
    assert suite_files(out, "cpu") == {"tests/basic/test_basic.py"}  # working_dir /vllm-workspace/ is the root
    assert registry.tests["tests/basic/test_other.py"].status is Status.MANUAL
    assert "source_file_dependencies vllm/executor/ match nothing here" in printed.err
    assert "suite 'examples-1-gpu'" not in printed.err  # no num_devices: nothing to check
    assert "1 optional step(s) (run only when unblocked), imported like the rest: examples-1-gpu" in printed.out
    assert "suite 'distributed-comm-ops' selects within its files with -k not ray" in printed.out


FILTERED = "import pytest\ndef test_ok(): pass\ndef test_slow(): pass\n@pytest.mark.gpu\ndef test_gpu(): pass\n"


def collected_tests(root: Path, cwd: str, *args: str) -> set[str]:
    """The oracle: the tests (``file::name``) pytest collects with the adopter's exact ``args`` in ``cwd``."""
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             "-p", "no:randomly", *args], cwd=root / cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return {line for line in result.stdout.splitlines() if "::" in line}


def ran_tests(root: Path, tier: str) -> set[str]:
    """The tests `ci run --tier` ran, from its JUnit report."""
    proc = _ci_run(root, "--tier", tier, "--junit", str(root / f"{tier}.xml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {f"{c.file}::{c.name}" for c in parse_junit(root / f"{tier}.xml").cases}


def test_an_imported_suites_k_and_m_become_pytest_args_and_ci_run_runs_what_the_command_ran(liger_like, capsys):
    for path in liger_like.rglob("test*.py"):
        path.write_text(FILTERED)
    out, printed = import_make_targets(liger_like, capsys)
    registry = load_registry(out)
    # one suite per tier: the filter is the tier's, whatever other suites hold the same files
    assert (registry.tiers["conv"].pytest_args, registry.tiers["dflt"].pytest_args) == (("-k", "not slow"),
                                                                                          ("-m", "not gpu"))
    assert registry.tiers["cpu"].pytest_args == () and not any(e.pytest_args for e in registry.tests.values())
    assert "suite 'test-convergence' selects within its files with -k not slow: pytest_args of tier 'conv'" in printed
    conv = ran_tests(liger_like, "conv")
    assert conv == collected_tests(liger_like, ".", "-k", "not slow", "test/convergence/fp32/test_mini.py",
                                   "test/convergence/bf16/test_mini.py")
    assert "test/convergence/fp32/test_mini.py::test_slow" not in conv and len(conv) == 4
    dflt = ran_tests(liger_like, "dflt")
    assert dflt == collected_tests(liger_like, "test", "-m", "not gpu")
    assert {t.split("::")[1] for t in dflt} == {"test_ok", "test_slow"} and len(dflt) == 2 * 8  # of 3 x 8


def test_filters_of_several_suites_on_one_tier_go_to_the_entries_or_are_named(liger_like, capsys):
    """The workflow job (node id, --deselect) and the two make targets all on one tier: a file
    whose suites agree carries their args; one selected differently, or by node id, runs whole."""
    only_transformers = MAKEFILE.replace("@cd test && pytest -m 'not gpu'", "@cd test && pytest -m 'not gpu' transformers")
    (liger_like / "Makefile").write_text(only_transformers)
    with_tiers(liger_like)
    out = liger_like / "registry.yaml"
    assert ci_main(["--root", str(liger_like), "import-suites", "--from-make", "test-convergence", "test-defaults",
                    "--tier-map", "*=cpu", "--output", str(out), "--force"]) == 0
    printed = capsys.readouterr()
    registry = load_registry(out)
    assert registry.tiers["cpu"].pytest_args == ()
    assert registry.tests["test/convergence/fp32/test_mini.py"].pytest_args == ("-k", "not slow")
    assert registry.tests["test/transformers/test_rms.py"].pytest_args == ("-m", "not gpu")
    assert "pytest_args of the entries of 2 file(s)" in printed.out
    (liger_like / "Makefile").write_text(only_transformers.replace("test/convergence/fp32/test_mini.py \\",
                                                                   "test/transformers/test_rms.py \\"))
    assert ci_main(["--root", str(liger_like), "import-suites", "--from-make", "test-convergence", "test-defaults",
                    "--tier-map", "*=cpu", "--output", str(out), "--force"]) == 0
    printed = capsys.readouterr()
    assert load_registry(out).tests["test/transformers/test_rms.py"].pytest_args == ()
    assert ("note: 1 file(s) run whole where their suites select within them (selected differently by its suites; "
            "pytest_args cannot say it), e.g. test/transformers/test_rms.py") in printed.err
