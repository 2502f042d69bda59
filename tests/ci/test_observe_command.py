"""``python -m ci observe``: an adopter's own command, recorded unchanged (docs/depmaps.md,
"Observing an adopter's own command").

A tiny project is observed in real processes: (a) a pytest suite run by ``make test`` with two
xdist workers; (b) an SGLang-shaped ``tests/run_suite.py`` that runs unittest files as
``python3 tests/test_x.py`` children, one of which starts a server child and terminates it, on
3.11 (the slipcover hook) and under ``.venv-py312`` (the recorder's sysmon core); (c) a failing
command; (d) a test file the runner starts with ``-S``, which the recorder cannot hear. Each
test file's lines are asserted against line numbers known by construction.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci.selection.depmap_format import DepmapError, parse_depmap
from tests.ci.depmap_support import clean_env, write_project

REPO = Path(__file__).resolve().parents[2]
PY312 = REPO / ".venv-py312" / "bin" / "python"

WORK = """\
def add(a, b):
    return a + b


def mul(a, b):
    return a * b


def never():
    return 0
"""
SERVER = """\
import time

from pkg.work import mul


def main():
    print(mul(2, 3), flush=True); time.sleep(60)  # one line: the signal finds every line before it run


if __name__ == "__main__":
    main()
"""
SERVE = """\
import subprocess
import sys
import unittest


class Serve(unittest.TestCase):
    def test_serve(self):
        server = subprocess.Popen([sys.executable, "-m", "pkg.server"], stdout=subprocess.PIPE, text=True)
        self.assertEqual(server.stdout.readline(), "6\\n")
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    unittest.main()
"""
UNIT = """\
import unittest

from pkg.work import add


class Calc(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 2), {expected})


if __name__ == "__main__":
    unittest.main()
"""
RUN_SUITE = """\
import subprocess
import sys


def main():
    failed = 0
    for name in sys.argv[1:]:
        flags = ["-S"] if name.endswith("nosite.py") else []
        failed += subprocess.run([sys.executable, *flags, name]).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
"""
PYTEST_FILE = """\
import pytest

from pkg.work import {name}


def test_{name}():
    assert {name}(2, 3) > 0


@pytest.mark.skip(reason="no gpu here")
def test_skipped():
    never()
"""
FILES = {
    "pkg/__init__.py": "",
    "pkg/work.py": WORK,
    "pkg/server.py": SERVER,
    "tests/run_suite.py": RUN_SUITE,
    "tests/test_serve.py": SERVE,
    "tests/test_calc.py": UNIT.format(expected=4),
    "tests/test_fail.py": UNIT.format(expected=5),
    "tests/test_nosite.py": UNIT.format(expected=4),
    "tests/test_add.py": PYTEST_FILE.format(name="add"),
    "tests/test_mul.py": PYTEST_FILE.format(name="mul"),
    "Makefile": ".PHONY: test\ntest:\n\tpython3 -m pytest -q -p no:cacheprovider -p no:randomly -n 2 "
                "tests/test_add.py tests/test_mul.py\n",
}


def _observe(python: Path | str, root: Path, *command: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """Run ``ci observe`` in ``root`` with ``python``'s folder first on PATH (``python3`` is its)."""
    out = root.parent / "facts.json"
    env = {**clean_env(), "PYTHONPATH": f"{REPO}{os.pathsep}{root}",
           "PATH": f"{Path(python).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([str(python), "-m", "ci", "observe", "--out", str(out), "--", *command], cwd=root,
                          env=env, capture_output=True, text=True, timeout=240)
    facts = json.loads(out.read_text()) if out.exists() else {}
    if facts:
        parse_depmap(out.read_text(), str(out))  # the one reader accepts what observe wrote
    return proc, facts


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    write_project(root, FILES)
    return root


def _pkg(entry: dict) -> dict:
    return {path: lines for path, lines in entry["executed"].items() if path.startswith("pkg/")}


def test_make_test_runs_pytest_with_xdist_and_each_file_gets_its_lines_and_skip_reasons(project: Path) -> None:
    proc, facts = _observe(sys.executable, project, "make", "test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed, 2 skipped" in proc.stdout
    tests = facts["tests"]
    assert sorted(tests) == ["tests/test_add.py", "tests/test_mul.py"]
    assert facts["version"] == 3
    # each worker collects test_add.py first, whose import of pkg.work runs its def lines (shared
    # and test_add's); each file ran its own function's body
    assert _pkg(tests["tests/test_add.py"])["pkg/work.py"] == "1-2,5,9"
    assert _pkg(tests["tests/test_mul.py"])["pkg/work.py"] == "6"
    assert facts["shared"]["pkg/work.py"] == "1,5,9"
    for test in tests.values():
        assert (test["complete"], test["items"], test["ran"], test["outcome"]) == (True, 2, 1, "passed")
        assert test["skip_reasons"] == ["no gpu here"]
        assert 0 < test["duration_s"] < 60


def _assert_suite(facts: dict, own_lines_whole: bool) -> None:
    tests = facts["tests"]
    assert sorted(tests) == ["tests/test_calc.py", "tests/test_serve.py"]
    serve, calc = tests["tests/test_serve.py"], tests["tests/test_calc.py"]
    # the server child's lines are the test file's that started it
    assert _pkg(serve) == {"pkg/__init__.py": "", "pkg/work.py": "1,5-6,9", "pkg/server.py": "1,3,6-7,10-11"}
    assert _pkg(calc) == {"pkg/__init__.py": "", "pkg/work.py": "1-2,5,9"}
    for entry in (serve, calc):
        assert (entry["complete"], entry["items"], entry["ran"], entry["outcome"]) == (True, 1, 1, "passed")
        assert 0 < entry["duration_s"] < 60
    # the runner's own lines are shared, never a test file's
    assert "tests/run_suite.py" in facts["shared"]
    assert not any("tests/run_suite.py" in entry["executed"] for entry in tests.values())
    if own_lines_whole:  # a script run as `python path.py` runs without probes: recorded whole
        assert calc["executed"]["tests/test_calc.py"] == "1-12"
        assert facts["shared"]["tests/run_suite.py"] == "1-14"


def test_an_sglang_shaped_run_suite_gives_each_unittest_file_its_process_and_its_servers_lines(project: Path) -> None:
    proc, facts = _observe(sys.executable, project, "python3", "tests/run_suite.py", "tests/test_serve.py",
                           "tests/test_calc.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _assert_suite(facts, own_lines_whole=True)
    assert "not complete" not in proc.stderr.replace("0 not complete", "")


@pytest.mark.skipif(not PY312.exists(), reason="no .venv-py312: run python3 ci/bootstrap.py")
def test_the_run_suite_under_python_312_is_recorded_by_the_sysmon_core(project: Path) -> None:
    proc, facts = _observe(PY312, project, "python3", "tests/run_suite.py", "tests/test_serve.py",
                           "tests/test_calc.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _assert_suite(facts, own_lines_whole=False)


def test_a_failing_command_still_leaves_its_facts_and_its_exit_status(project: Path) -> None:
    proc, facts = _observe(sys.executable, project, "python3", "tests/run_suite.py", "tests/test_fail.py",
                           "tests/test_calc.py")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "AssertionError: 4 != 5" in proc.stderr
    tests = facts["tests"]
    assert (tests["tests/test_fail.py"]["outcome"], tests["tests/test_fail.py"]["complete"]) == ("failed", True)
    assert tests["tests/test_calc.py"]["outcome"] == "passed"
    assert _pkg(tests["tests/test_fail.py"])["pkg/work.py"] == "1-2,5,9"


def test_a_status_of_its_own_and_a_signal_pass_through(project: Path) -> None:
    proc, facts = _observe(sys.executable, project, "sh", "-c", "exit 7")
    assert (proc.returncode, facts["tests"]) == (7, {})
    proc, _ = _observe(sys.executable, project, "sh", "-c", "kill -TERM $$")
    assert proc.returncode == 128 + 15


def test_a_test_file_started_with_dash_s_is_partial_and_named_on_stderr(project: Path) -> None:
    proc, facts = _observe(sys.executable, project, "python3", "tests/run_suite.py", "tests/test_nosite.py",
                           "tests/test_calc.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tests = facts["tests"]
    assert tests["tests/test_nosite.py"]["complete"] is False
    assert tests["tests/test_calc.py"]["complete"] is True
    named = [line for line in proc.stderr.splitlines() if ": not complete: " in line]
    assert len(named) == 1, proc.stderr
    assert named[0].startswith("python -m ci observe: tests/test_nosite.py: not complete: ")
    assert named[0].endswith(" -S tests/test_nosite.py: -S runs no site, so no recording hook")


def test_the_env_form_prepares_a_directory_and_collects_it_after_a_step(project: Path, tmp_path: Path) -> None:
    env = {**clean_env(), "PYTHONPATH": f"{REPO}{os.pathsep}{project}",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    folder, out = tmp_path / "observed", tmp_path / "step.json"
    ci = [sys.executable, "-m", "ci", "observe"]
    prepared = subprocess.run([*ci, "--env", str(folder)], cwd=project, env=env, capture_output=True, text=True,
                              timeout=60)
    assert prepared.returncode == 0, prepared.stderr
    variables = dict(line.split("=", 1) for line in prepared.stdout.splitlines())
    assert variables["CI_DEPMAP_PARTS"] == str(folder.resolve())
    step = subprocess.run([sys.executable, "tests/test_calc.py"], cwd=project, env={**env, **variables},
                          capture_output=True, text=True, timeout=60)
    assert step.returncode == 0, step.stderr
    done = subprocess.run([*ci, "--collect", str(folder), "--out", str(out)], cwd=project, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calc = json.loads(out.read_text())["tests"]["tests/test_calc.py"]
    assert (calc["complete"], calc["outcome"], _pkg(calc)["pkg/work.py"]) == (True, "passed", "1-2,5,9")
    assert not folder.exists()


@pytest.mark.parametrize("args, message", [
    ([], "--out FACTS.json is required"),
    (["--out", "x.json"], "no command"),
    (["--out", "x.json", "--", "no-such-program-here"], "cannot run 'no-such-program-here'"),
    (["--out", "x.json", "--tier", "gpu", "--", "true"], "--tier 'gpu': unknown tier"),
    (["--collect", "missing-dir", "--out", "x.json"], "not a directory that `ci observe --env` prepared"),
    (["--out", "x.json", "--", "true"], "no registry"),
])
def test_bad_input_is_one_line_and_no_traceback(project: Path, args: list[str], message: str) -> None:
    if message == "no registry":
        (project / "registry.yaml").unlink()
        message = "observe needs the tree's registry"
    proc = subprocess.run([sys.executable, "-m", "ci", "observe", *args], cwd=project,
                          env={**clean_env(), "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_version_3_facts_round_trip_and_malformed_ones_are_refused() -> None:
    from ci.selection.depmap_format import dump_depmap

    entry = {"complete": True, "items": 1, "ran": 1, "executed": {"pkg/a.py": "1-2"}, "opened": [],
             "duration_s": 1.5, "outcome": "skipped", "skip_reasons": ["no gpu"], "devices": ["cuda", "triton"],
             "device_evidence": ["torch.cuda.init"]}
    text = json.dumps({"format": "ci-depmap", "version": 3, "tier": None, "recorded_at": "2026-12-06T00:00:00+00:00",
                       "sha": None, "shared": {}, "tests": {"tests/test_a.py": entry}})
    depmap = parse_depmap(text, "m.json")
    assert parse_depmap(dump_depmap(depmap), "again.json") == depmap
    assert depmap.tests["tests/test_a.py"].skip_reasons == ("no gpu",)
    assert depmap.tests["tests/test_a.py"].devices == ("cuda", "triton")
    for key, bad in (("duration_s", -1), ("duration_s", "1"), ("outcome", "flaky"), ("skip_reasons", "no gpu"),
                     ("devices", ["tpu"]), ("devices", ["triton", "cuda"]), ("devices", "cuda"),
                     ("device_evidence", [1])):
        with pytest.raises(DepmapError, match=rf"m\.json: .*tests\['tests/test_a\.py'\]\.{key} "):
            parse_depmap(text.replace(json.dumps(entry), json.dumps({**entry, key: bad})), "m.json")


@pytest.fixture(autouse=True)
def _no_make_no_test(request: pytest.FixtureRequest) -> None:
    if "make" in request.node.name and shutil.which("make") is None:
        pytest.skip("make is not installed")


@pytest.mark.parametrize("argv, found", [
    (["python3", "tests/test_calc.py"], "tests/test_calc.py"),
    (["python3", "-u", "-X", "dev", "test_calc.py"], None),  # relative to cwd: the root, not tests/
    (["python3", "-m", "tests.test_calc"], "tests/test_calc.py"),
    (["python3", "-m", "unittest", "-v", "tests.test_calc"], "tests/test_calc.py"),
    (["python3", "-m", "unittest", "tests/test_calc.py"], "tests/test_calc.py"),
    (["python3", "-m", "unittest", "tests.test_calc", "tests.test_fail"], None),  # no one file owns it
    (["python3", "-m", "unittest"], None),  # discovery
    (["python3", "-c", "import tests.test_calc"], None),
    (["python3", "tests/run_suite.py"], None),  # not a test pattern
    (["python3", "pkg/work.py"], None),  # not under a test root
])
def test_a_process_is_the_test_file_its_command_line_runs(project: Path, argv: list[str], found: str | None) -> None:
    from ci.observe.argv_test_file import test_file_of

    assert test_file_of(argv, str(project), str(project), "tests|test_*.py") == found


DEVICE_FILES = {
    "tests/test_cuda.py": "import torch\n\n\ndef test_device():\n    torch.cuda.current_device()\n",
    "tests/test_guarded.py": "import pytest\nimport torch\n\n\n"
                             "@pytest.mark.skipif(not torch.cuda.is_available(), reason='CUDA is not available')\n"
                             "def test_gpu():\n    torch.ones(1, device='cuda')\n",
    "tests/test_kernel.py": """\
import torch
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def test_kernel():
    x = torch.zeros(4)
    add_one[(1,)](x, 4, BLOCK=4)
    assert x.tolist() == [1.0] * 4
""",
    "tests/test_cpu.py": "import torch\n\n\ndef test_sum():\n    assert torch.ones(3).sum().item() == 3\n",
}


def test_devices_touched_or_wanted_are_facts_and_init_and_tiers_move_put_them_on_a_gpu_tier(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    root = tmp_path / "project"
    write_project(root, DEVICE_FILES)
    # The kernel runs on this CPU: it still counts as "triton". monkeypatch puts back what the worker
    # had (tests/quant's conftest sets it for the whole worker process; deleting it broke them).
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    proc, facts = _observe(sys.executable, root, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "tests")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # test_cuda fails on a CPU torch
    tests = facts["tests"]
    assert tests["tests/test_cuda.py"]["devices"] == ["cuda"]
    assert tests["tests/test_cuda.py"]["device_evidence"] == [
        "torch.cuda.init failed: Torch not compiled with CUDA enabled"]
    assert tests["tests/test_guarded.py"]["device_evidence"] == ["skip: CUDA is not available"]
    assert tests["tests/test_kernel.py"]["devices"] == ["triton"]
    assert tests["tests/test_kernel.py"]["device_evidence"] == ["triton interpret tests/test_kernel.py:add_one"]
    assert "devices" not in tests["tests/test_cpu.py"]
    out = tmp_path / "facts.json"
    env = {**clean_env(), "PYTHONPATH": str(REPO)}
    (root / "registry.yaml").unlink()
    init = subprocess.run([sys.executable, "-m", "ci", "--root", str(root), "init", "--observed", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert init.returncode == 0, init.stdout + init.stderr
    assert "observed gpu: tests/test_kernel.py: triton: triton interpret tests/test_kernel.py:add_one; manual" in init.stdout
    from ci.registry import Status, load_registry

    registry = load_registry(root / "registry.yaml")
    gpu = {"tests/test_cuda.py", "tests/test_guarded.py", "tests/test_kernel.py"}
    for path, entry in registry.tests.items():
        assert (entry.status == Status.MANUAL) == (path in gpu), path
        assert entry.est_time == math.ceil(tests[path]["duration_s"] * 1.1) or entry.est_time == 1
    assert registry.tests["tests/test_cuda.py"].timeout == 120  # max(120, 4 x est_time)
    assert "Torch not compiled with CUDA enabled" in registry.tests["tests/test_cuda.py"].reason
    write_project(root, DEVICE_FILES)  # back to every file active on cpu, and a GPU tier to move to
    text = (root / "registry.yaml").read_text()
    (root / "registry.yaml").write_text(text.replace("tiers:\n", "tiers:\n  gpu: {description: gpu, runner_labels: [gpu], gpu_count: 1, arch: sm_90}\n", 1))
    move = subprocess.run([sys.executable, "-m", "ci", "--root", str(root), "tiers", "move", "--to", "gpu",
                           "--observed", str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert move.returncode == 0, move.stdout + move.stderr
    assert "tests/test_guarded.py: [cpu] -> [gpu]; timeout 120" in move.stdout
    assert "observed cuda: skip: CUDA is not available" in move.stdout
    moved = load_registry(root / "registry.yaml")
    assert {p for p, e in moved.tests.items() if e.tiers == ("gpu",)} == gpu
    assert moved.tests["tests/test_cpu.py"].tiers == ("cpu",)


def test_the_observing_process_never_imports_pytest(project: Path) -> None:
    # importing pytest was about a fifth of every observation's fixed CPU cost (0.15 of 0.7 s); the
    # observed command's own pytest processes load it themselves
    out = project.parent / "facts.json"
    env = {**clean_env(), "PYTHONPATH": f"{REPO}{os.pathsep}{project}"}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "ci", "observe", "--out", str(out), "--",
                           sys.executable, "tests/test_calc.py"], cwd=project, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "ci.observe.observed" in imported and "pytest" not in imported and "_pytest" not in imported


@pytest.mark.skipif(not PY312.exists(), reason="no .venv-py312: run python3 ci/bootstrap.py")
def test_the_observing_process_on_312_imports_neither_coverage_nor_slipcovers_core(project: Path) -> None:
    # importing coverage.py was about 0.15 s of CPU of an observation on 3.12, slipcover's core
    # 45 ms more; a map without coverage.py's parts (the 3.12 pytest process writes JSON) needs neither
    out = project.parent / "facts.json"
    env = {**clean_env(), "PYTHONPATH": f"{REPO}{os.pathsep}{project}"}
    proc = subprocess.run([str(PY312), "-X", "importtime", "-m", "ci", "observe", "--out", str(out), "--",
                           "true"], cwd=project, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 1 and "no test file was recorded" in proc.stderr, proc.stderr  # `true` runs none
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "ci.observe.merge" in imported and "ci.observe.options" in imported
    assert not {"coverage", "ci.observe.slipcover_core"} & imported
