"""``python -m bench adoption --quick`` on a small git repository shaped like SGLang's, made here
(the benchmark needs SGLang's history, and without ``--repo`` test_bench_quick.py only sees it say
so): its lint, suites and runs tables row by row, its closing summary, and a clean repository after.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from sglang_like import SGLANG_LIKE, write
from test_bench_quick import is_ratio, read_tables, run_bench

# -- bench adoption on a repository shaped like SGLang's ------------------------------------------

# SGLang's python/sglang/test/ci/ci_register.py, reduced to what bench/_sglang_suites.py uses: the
# register calls (no-ops when a test runs) and collect_tests, which reads them back with ast.
CI_REGISTER = '''\
import ast
import enum
from dataclasses import dataclass


class HWBackend(enum.Enum):
    CPU = "cpu"
    CUDA = "cuda"


@dataclass
class CIRegistry:
    filename: str
    backend: HWBackend
    effective_suite: str
    est_time: float
    nightly: bool = False
    disabled: str | None = None


def register_cpu_ci(**kwargs):
    pass


def register_cuda_ci(**kwargs):
    pass


def collect_tests(files, sanity_check=True):
    found = []
    for filename in files:
        with open(filename) as f:
            module = ast.parse(f.read())
        for node in module.body:
            call = node.value if isinstance(node, ast.Expr) else None
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id.startswith("register_"):
                kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
                suite = kw.get("suite") or f"{kw['stage']}-test-{kw['runner_config']}"
                backend = HWBackend[call.func.id[len("register_"):-len("_ci")].upper()]
                found.append(CIRegistry(filename, backend, suite, kw["est_time"], kw.get("nightly", False),
                                        kw.get("disabled")))
    return found
'''
# SGLang's test/run_suite.py, reduced: its suite lists, and run_a_suite globbing test/registered only.
RUN_SUITE = '''\
import glob
import os

from sglang.test.ci.ci_register import HWBackend, collect_tests
from sglang.test.ci.ci_utils import run_unittest_files

HW_MAPPING = {"cpu": HWBackend.CPU, "cuda": HWBackend.CUDA}
PER_COMMIT_SUITES = {
    HWBackend.CPU: ["base-a-test-cpu"],
    # extra-a: label-gated PR opt-in suites in pr-test-extra.yml
    HWBackend.CUDA: ["stage-b-test-1-gpu-small", "stage-b-test-1-gpu-large", "extra-a-test-1-gpu-small"],
}


def run_a_suite(args):
    script_dir = os.path.dirname(os.path.abspath(__file__))
    files = glob.glob(os.path.join(script_dir, "registered", "**", "*.py"), recursive=True)
    tests = [t for t in collect_tests(files) if t.backend == HW_MAPPING[args.hw] and t.effective_suite == args.suite
             and not t.nightly and t.disabled is None]
    return run_unittest_files(tests)
'''
PR_TEST_EXTRA = '''\
on: {pull_request: {}}
jobs:
  extra-a-test-1-gpu-small:
    if: contains(github.event.pull_request.labels.*.name, 'run-ci-extra')
    runs-on: gpu
    steps: [{run: python3 run_suite.py --hw cuda --suite extra-a-test-1-gpu-small}]
'''
PR_TEST = '''\
on: {pull_request: {}}
jobs:
  small: {runs-on: gpu, steps: [{run: python3 run_suite.py --hw cuda --suite stage-b-test-1-gpu-small}]}
'''


def _registered(backend: str, arguments: str) -> str:
    return (f"from sglang.test.ci.ci_register import register_{backend}_ci\n\nregister_{backend}_ci({arguments})\n\n\n"
            "def test_ok():\n    assert True\n")


SUITES = {
    "python/sglang/test/ci/__init__.py": "",
    "python/sglang/test/ci/ci_register.py": CI_REGISTER,
    "python/sglang/test/ci/ci_utils.py": "def run_unittest_files(tests, **kwargs):\n    return 0\n",
    "test/run_suite.py": RUN_SUITE,
    "test/registered/core/test_small.py": _registered("cuda", 'est_time=30, suite="stage-b-test-1-gpu-small"'),
    "test/registered/core/test_large.py": _registered("cuda", 'est_time=60, stage="stage-b", runner_config="1-gpu-large"'),
    "test/registered/core/test_off.py": _registered("cuda", 'est_time=9, suite="stage-b-test-1-gpu-small", disabled="hangs"'),
    "test/registered/cpu/test_cpu.py": _registered("cpu", 'est_time=5, suite="base-a-test-cpu"'),
    "test/registered/core/test_extra.py": _registered("cuda", 'est_time=40, suite="extra-a-test-1-gpu-small"'),
    # parked: it registers itself, and SGLang's runner never reads test/manual
    "test/manual/test_parked.py": _registered("cuda", 'est_time=20, suite="stage-b-test-1-gpu-small"'),
    ".github/workflows/pr-test.yml": PR_TEST,
    ".github/workflows/pr-test-extra.yml": PR_TEST_EXTRA,
    # the seed bug: a stale import of a name the package no longer has
    "test/registered/core/test_seed.py": "from sglang.srt.utils import KVFP4QuantizeUtil\n\n\n"
                                         "def test_seed():\n    assert KVFP4QuantizeUtil\n",
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@example.com",
                           "-c", "commit.gpgsign=false", *args], capture_output=True, text=True, check=True).stdout


def test_adoption_on_a_tiny_sglang_shaped_repository(tmp_path: Path) -> None:
    repo = tmp_path / "sglang"
    write(repo, {**SGLANG_LIKE, **SUITES})
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "a tree shaped like SGLang's")
    result = run_bench("adoption", "--quick", f"--repo={repo}", "--commits=HEAD")
    why = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-4000:]}"
    assert result.returncode == 0, why
    lint, suites, runs = read_tables(result.stdout)
    assert lint.header == ("commit", "sha", "test files", "problems", "L003", "L009 (info)", "other", "I001", "I002",
                           "KVFP4QuantizeUtil hits", "init s", "lint s", "ast.parse s", "lint / parse")
    row = lint.row("HEAD")
    # test/registered: 7 files, test/manual: 2; sgl-kernel/tests is outside every pytest configuration
    assert (row["sha"], row["test files"], row["problems"], row["I001"], row["KVFP4QuantizeUtil hits"]) == (
        _git(repo, "rev-parse", "--short", "HEAD").strip(), "9", "1", "1", "1"), why
    assert is_ratio(row["lint / parse"]), why
    assert suites.header == ("tier", "suites", "SGLang runs", "ours", "only SGLang", "only ours")
    # per tier: suites mapped, SGLang's files, ours, only SGLang's, only ours (test_off is disabled:
    # SGLang skips it, and the import makes it manual)
    assert {r[0]: r[1:] for r in suites.rows if r[1] != "0"} == {
        "cpu": ("1", "1", "1", "0", "0"), "gpu_1_small": ("1", "1", "1", "0", "0"),
        "gpu_1_large": ("1", "1", "1", "0", "0")}, why
    # GPU seconds of a PR by hand: test_small 30 x 1 GPU + test_large 60 x 1 = 90 (SGLang's default run);
    # the label-gated test_extra adds 40, the parked test_parked 20
    assert runs.header == ("import", "entries", "active", "parked active", "label-gated active", "GPU s per PR",
                           "vs SGLang")
    assert [r[1:] for r in runs.rows] == [
        ("9", "3", "0 of 1", "0 of 1", "90", "1.00x"),
        ("9", "4", "0 of 1", "1 of 1", "130", "1.44x"),
        ("9", "5", "1 of 1", "1 of 1", "150", "1.67x"),
        ("", "", "", "", "90", "1.00x")], why
    closing = result.stdout.split("its closing summary:\n", 1)[1]
    assert closing.startswith("summary: registrations read from test/registered/**/*.py (test/run_suite.py:"), why
    assert "  extra-a-test-1-gpu-small     1 file(s)  label-gated: label run-ci-extra (pr-test-extra.yml); " \
           "--include-label-gated\n" in closing, why
    assert "\n  test/registered/core/test_seed.py:1:1: I001 'sglang.srt.utils' has no name 'KVFP4QuantizeUtil'\n" \
        in result.stdout, why
    assert _git(repo, "worktree", "list").count("\n") == 1  # its temporary worktree is gone
    assert _git(repo, "status", "--porcelain") == ""
