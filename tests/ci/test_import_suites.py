"""`ci import-suites`: an SGLang-style repository's run_suite.py suites and in-source
register_*_ci() calls become registry entries that `ci lint` accepts; nothing is executed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.registry import Status, load_registry, parse_registry
from ci.adopt.suites import read_registrations, read_run_suite

CONSOLE_SCRIPT = Path(sys.executable).with_name("fp4kv-ci")

# Executing either file would leave a trace: the importer must only read them.
TRAP = "import pathlib\npathlib.Path(__file__).with_suffix('.executed').write_text('ran')\n"

RUN_SUITE = TRAP + textwrap.dedent("""\
    import argparse
    from dataclasses import dataclass


    @dataclass
    class TestFile:
        name: str
        estimated_time: float = 60


    # NOTE: please sort the test cases alphabetically by the test file name
    suites = {
        "per-commit-1-gpu": [
            TestFile("models/test_qwen_models.py", 82),
            TestFile("test_abort.py", 51),
            TestFile("test_srt_endpoint.py", 130),
            # TestFile("test_flashmla.py", 352),
        ],
        "per-commit-2-gpu": [
            TestFile("test_srt_endpoint.py", 200),
            TestFile("test_data_parallelism.py"),
        ],
        "per-commit-4-gpu-b200": [],
        "nightly-8-gpu": [TestFile("test_deepseek_v3_basic.py", 3600)],
        "vllm_dependency_test": [TestFile(name="test_bnb.py", estimated_time=5)],
    }

    suite_amd = {
        "per-commit-amd": [TestFile("test_abort.py", 60), TestFile("test_gone.py", 9)],
    }

    suites.update(suite_amd)
    suites["per-commit-cpu"] = [TestFile("cpu/test_norm.py", 12), TestFile(FILES[0])]


    def main():
        pass
    """)

REGISTERED = TRAP + textwrap.dedent("""\
    from sglang.test.ci.ci_register import register_cpu_ci, register_cuda_ci

    register_cuda_ci(est_time=300, suite="stage-c-test-4-gpu-h100")
    register_cuda_ci(est_time=240, stage="stage-c", runner_config="4-gpu-b200")
    register_cpu_ci(5, "base-a-test-cpu")


    def test_x():
        pass
    """)

TIERS = textwrap.indent(textwrap.dedent("""\
      gpu_h100:
        description: one H100
        runner_labels: [gpu-h100]
        gpu_count: 1
        arch: sm_90
      gpu_h100_x2:
        description: two H100
        runner_labels: [gpu-h100-x2]
        gpu_count: 2
        arch: sm_90
      gpu_b200_x4:
        description: four B200
        runner_labels: [gpu-b200-x4]
        gpu_count: 4
        arch: sm_100
    """), "  ")

PASSING = "def test_x():\n    pass\n"


@pytest.fixture
def sgl_repo(tmp_path: Path) -> Path:
    root = tmp_path / "sglang"
    files = {
        "python/sglang/__init__.py": "",
        # What the registered files import (lint checks it: `sglang` is first-party here).
        "python/sglang/test/__init__.py": "", "python/sglang/test/ci/__init__.py": "",
        "python/sglang/test/ci/ci_register.py": "def register_cuda_ci(**kw):\n    pass\n\n\n"
                                                "def register_cpu_ci(*args, **kw):\n    pass\n",
        "test/srt/run_suite.py": RUN_SUITE,
        "test/srt/models/test_qwen_models.py": PASSING, "test/srt/test_abort.py": PASSING,
        "test/srt/test_srt_endpoint.py": PASSING, "test/srt/test_data_parallelism.py": PASSING,
        "test/srt/test_deepseek_v3_basic.py": PASSING, "test/srt/test_bnb.py": PASSING,
        "test/srt/cpu/test_norm.py": PASSING,
        "test/registered/models/test_gpt_oss_4gpu.py": REGISTERED,   # registered in-source only
        "test/registered/core/test_disabled.py": TRAP + (
            'register_cuda_ci(est_time=30, suite="stage-c-test-4-gpu-h100", disabled="flaky NCCL, see #123")\n'),
        "test/manual/test_by_hand.py": PASSING,                      # in neither
    }
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    assert ci_main(["--root", str(root), "init"]) == 0
    text = (root / "registry.yaml").read_text()
    (root / "registry.yaml").write_text(text.replace("tests:\n", TIERS + "tests:\n", 1))
    return root


MAP = ["--tier-map", "per-commit-1-gpu=gpu_h100", "--tier-map", "per-commit-2-gpu=gpu_h100_x2",
       "--tier-map", "stage-c-test-4-gpu-h100=gpu_h100", "--tier-map", "stage-c-test-4-gpu-b200=gpu_b200_x4",
       "--tier-map", "base-a-test-cpu=cpu", "--tier-map", "per-commit-cpu=cpu", "--tier-map", "per-commit-cpu=gpu_h100",
       "--tier-map", "vllm_dependency_test=cpu"]


def run_import(root: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CONSOLE_SCRIPT), "--root", str(root), "import-suites", "--suites",
                           str(root / "test/srt/run_suite.py"), *MAP, *extra],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_import_suites_end_to_end(sgl_repo, tmp_path):
    result = run_import(sgl_repo, tmp_path, "--output", str(sgl_repo / "registry.yaml"), "--force")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {sgl_repo / 'registry.yaml'}: 10 entries (7 active, 3 manual)")
    assert not list(sgl_repo.rglob("*.executed")), "a suite file was executed"
    registry = load_registry(sgl_repo / "registry.yaml")
    tests = registry.tests

    # duplicates across suites: one entry with both tiers; the larger est_time wins, and says why
    endpoint = tests["test/srt/test_srt_endpoint.py"]
    assert endpoint.tiers == ("gpu_h100", "gpu_h100_x2") and endpoint.est_time == 200
    text = (sgl_repo / "registry.yaml").read_text()
    assert ("est_time: 200  # largest of 200 (per-commit-2-gpu, test/srt/run_suite.py:22), "
            "130 (per-commit-1-gpu, test/srt/run_suite.py:18)") in text
    assert ("note: test/srt/test_srt_endpoint.py: est_time disagrees: 200 (per-commit-2-gpu, test/srt/run_suite.py:22), "
            "130 (per-commit-1-gpu, test/srt/run_suite.py:18); using 200, the largest") in result.stderr
    # TestFile without a time takes the file's own TestFile default; keyword form; a mapped suite
    # wins over an unmapped one for the same file (test_abort: per-commit-amd is unmapped)
    assert tests["test/srt/test_data_parallelism.py"].est_time == 60
    assert (tests["test/srt/test_bnb.py"].tiers, tests["test/srt/test_bnb.py"].est_time) == (("cpu",), 5)
    assert (tests["test/srt/test_abort.py"].tiers, tests["test/srt/test_abort.py"].est_time) == (("gpu_h100",), 51)
    assert tests["test/srt/cpu/test_norm.py"].tiers == ("cpu", "gpu_h100")  # a suite mapped to two tiers

    # registered in-source only: every register_*_ci call, stage+runner_config naming the suite
    gpt = tests["test/registered/models/test_gpt_oss_4gpu.py"]
    assert gpt.tiers == ("cpu", "gpu_h100", "gpu_b200_x4") and gpt.est_time == 300 and gpt.is_active
    disabled = tests["test/registered/core/test_disabled.py"]
    assert disabled.status is Status.MANUAL and disabled.reason == "disabled in source: flaky NCCL, see #123"

    # unmapped suites are listed, their files kept as manual entries saying why
    big = tests["test/srt/test_deepseek_v3_basic.py"]
    assert big.status is Status.MANUAL and big.tiers == ("cpu",) and big.est_time == 3600
    assert big.reason == "only in suite(s) nightly-8-gpu, which --tier-map does not map"
    assert ("unmapped suite 'nightly-8-gpu' (1 file(s), e.g. test/srt/test_deepseek_v3_basic.py): "
            "add --tier-map nightly-8-gpu=<tier>") in result.stderr
    assert "unmapped suite 'per-commit-amd' (2 file(s), e.g. test/srt/test_abort.py)" in result.stderr
    assert "per-commit-4-gpu-b200" not in result.stderr  # an empty suite holds nothing to map

    # in neither: manual, with the reason
    by_hand = tests["test/manual/test_by_hand.py"]
    assert by_hand.status is Status.MANUAL and "not registered in-source" in by_hand.reason

    # what could not be placed is said, not guessed
    assert ("note: test/srt/run_suite.py:35: TestFile without a literal file name; skipped") in result.stderr
    assert "note: test/srt/test_gone.py: registered in test/srt/run_suite.py:31 but not a file here; left out" \
        in result.stderr

    # every GPU entry has a timeout derived from its est_time; and the result lints clean
    for entry in tests.values():
        assert (entry.timeout is not None) == registry.has_gpu_tier(entry), entry.path
    assert endpoint.timeout == 800
    lint = subprocess.run([str(CONSOLE_SCRIPT), "--root", str(sgl_repo), "lint"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (lint.returncode, lint.stdout) == (0, ""), lint.stdout + lint.stderr


def test_import_prints_to_stdout_and_keeps_what_the_registry_knew(sgl_repo, tmp_path):
    text = (sgl_repo / "registry.yaml").read_text().replace(
        '  test/srt/test_abort.py:\n    tiers: [cpu]\n    est_time: 30\n    owner: "@your-github-handle"\n',
        '  test/srt/test_abort.py:\n    tiers: [cpu]\n    est_time: 30\n    owner: "@serving"\n'
        '    depends_on: [python/sglang]\n', 1)
    assert "@serving" in text
    (sgl_repo / "registry.yaml").write_text(text)
    result = run_import(sgl_repo, tmp_path)
    assert result.returncode == 0, result.stderr
    registry, problems = parse_registry(result.stdout, "registry.yaml")
    assert problems == []
    abort = registry.tests["test/srt/test_abort.py"]
    assert (abort.owner, abort.depends_on, abort.tiers) == ("@serving", ("python/sglang",), ("gpu_h100",))
    assert (sgl_repo / "registry.yaml").read_text() == text  # stdout only: nothing written


def test_a_tier_map_to_an_undefined_tier_is_refused(sgl_repo, capsys):
    assert ci_main(["--root", str(sgl_repo), "import-suites", "--suites", str(sgl_repo / "test/srt/run_suite.py"),
                    "--tier-map", "per-commit-1-gpu=gpu_a100"]) == 2
    err = capsys.readouterr().err
    assert f"tier(s) gpu_a100 not defined in {sgl_repo / 'registry.yaml'}; define them under 'tiers:' first " \
           f"(known: cpu, gpu_h100, gpu_h100_x2, gpu_b200_x4)" in err


def test_output_is_not_overwritten_without_force(sgl_repo, capsys):
    before = (sgl_repo / "registry.yaml").read_text()
    assert ci_main(["--root", str(sgl_repo), "import-suites", "--output", str(sgl_repo / "registry.yaml")]) == 2
    assert (sgl_repo / "registry.yaml").read_text() == before


def test_readers_report_what_they_cannot_read(tmp_path):
    suite = tmp_path / "run_suite.py"
    suite.write_text(textwrap.dedent("""\
        suites = {
            NAME: [TestFile("a.py", 1)],
            "s": [TestFile("b.py", TIME), helper("c.py"), TestFile("../../d.py", 2)],
            **more,
        }
        suites.update(other)
        other = make()
        """))
    scan = read_run_suite(suite, tmp_path)
    assert [(r.path, r.suite, r.est_time) for r in scan.registrations] == [("b.py", "s", None)]
    assert scan.warnings == [
        "run_suite.py:2: a suite whose name is not a string literal (or a ** merge); skipped",
        "run_suite.py:3: TestFile('b.py') has a time that is not a number literal; its time is left open",
        "run_suite.py:3: suite 's' holds something other than TestFile(...); skipped",
        "run_suite.py:3: TestFile('../../d.py') points outside the repository; skipped",
        "run_suite.py:4: a suite whose name is not a string literal (or a ** merge); skipped",
        "run_suite.py:7: a suites dict that is not a literal {...}; skipped",
    ]
    test = tmp_path / "test_x.py"
    test.write_text("register_cuda_ci(est_time=T, suite='s')\nregister_cuda_ci(5)\nregister_cuda_ci(5, 's', bogus=1)\n"
                    "def f():\n    register_cuda_ci(1, 'inner')\nregister_npu_ci(7, 'npu', True)\n")
    scan = read_registrations(test, "test_x.py")
    assert [(r.suite, r.est_time, r.how, r.nightly) for r in scan.registrations] == [
        ("s", None, "register_cuda_ci", False), ("npu", 7.0, "register_npu_ci", True)]  # only module level
    assert scan.warnings == [
        "test_x.py:1: register_cuda_ci() has no literal est_time; its time is left open",
        "test_x.py:2: register_cuda_ci() names no literal suite (suite=, or stage= with runner_config=); skipped",
        "test_x.py:3: register_cuda_ci() with an unknown argument bogus; skipped",
    ]
