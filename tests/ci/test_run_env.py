"""`ci run` applies the registry's env: the tier's to the run, an entry's to its file, one pytest per
distinct env, the part reports joined (a real `python -m ci run` in a tmp project)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ci.results.junit import parse_junit
from tests.ci.test_run import FAST_CHILD

# -- env: on the tier and the entry ----------------------------------------------------------------

ENV_REGISTRY = textwrap.dedent("""\
    version: 1
    tiers:
      cpu:
        {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu,
         env: {TIER_VAR: from-tier, SHARED: tier}}
    tests:
      tests/test_a.py: {tiers: [cpu], est_time: 3, owner: t, status: active,
                        env: {IMPL: "cute $HOME 'q'", SHARED: entry}}
      tests/test_b.py: {tiers: [cpu], est_time: 2, owner: t, status: active}
      tests/test_c.py: {tiers: [cpu], est_time: 1, owner: t, status: active,
                        env: {SHARED: entry, IMPL: "cute $HOME 'q'"}}
    """)
# Each test prints the environment it saw and asserts it; a process-wide variable shows whether
# files of different env shared a pytest.
ENV_TEST = textwrap.dedent("""\
    import os
    def test_env():
        print("SAW", {{k: os.environ.get(k) for k in ("TIER_VAR", "SHARED", "IMPL")}})
        assert os.environ["TIER_VAR"] == "from-tier"
        assert os.environ["SHARED"] == {shared!r}
        assert os.environ.get("IMPL") == {impl!r}
        assert os.environ.setdefault("CI_TEST_PROCESS", {group!r}) == {group!r}
    """)


def _env_repo(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "registry.yaml").write_text(ENV_REGISTRY)
    (root / "pytest.ini").write_text("[pytest]\n")
    impl = "cute $HOME 'q'"
    for name, shared, value, group in (("a", "entry", impl, "entry"), ("b", "tier", None, "tier"),
                                       ("c", "entry", impl, "entry")):
        (root / "tests" / f"test_{name}.py").write_text(ENV_TEST.format(shared=shared, impl=value, group=group))
    return root


def ci_run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "GITHUB_STEP_SUMMARY")}
    env.update(FAST_CHILD, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run([sys.executable, "-m", "ci", "run", "--registry", str(root / "registry.yaml"),
                           "--workers", "0", *args], cwd=root, env=env, capture_output=True, text=True, timeout=180)


def test_run_applies_tier_and_entry_env_one_pytest_per_env_and_joins_the_reports(tmp_path):
    root = _env_repo(tmp_path / "repo")
    proc = ci_run(root, "--tier", "cpu", "--junit", str(root / "out" / "j.xml"), "--", "-q", "-s")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    # a and c (same env, not adjacent in the plan) share one pytest; b runs in another; no shell saw the value
    starts = [line for line in out.splitlines() if line.startswith("ci run: env ")]
    assert len(starts) == 2, out
    assert starts[0].startswith("ci run: env IMPL=\"cute $HOME 'q'\" SHARED='entry' TIER_VAR='from-tier': ")
    assert starts[0].endswith("tests/test_a.py tests/test_c.py -q -s")
    assert starts[1].startswith("ci run: env SHARED='tier' TIER_VAR='from-tier': ") and starts[1].endswith("tests/test_b.py -q -s")
    assert "SAW {'TIER_VAR': 'from-tier', 'SHARED': 'tier', 'IMPL': None}" in out
    report = parse_junit(root / "out" / "j.xml")
    assert sorted(report.files) == ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py"]
    assert sorted(p.name for p in (root / "out").iterdir()) == ["j.xml"]  # the parts are gone
    # an explicit file gets its entry's env (and the tier's when named)
    proc = ci_run(root, "--tier", "cpu", "--junit", str(root / "j1.xml"), "tests/test_c.py")
    assert proc.returncode == 0 and proc.stdout.count("ci run: env ") == 1, proc.stdout + proc.stderr


def test_run_env_groups_a_failure_in_one_keeps_the_other_and_refuses_one_depmap(tmp_path):
    root = _env_repo(tmp_path / "repo")
    (root / "tests" / "test_a.py").write_text("def test_env():\n    assert False\n")
    proc = ci_run(root, "--tier", "cpu", "--junit", str(root / "j.xml"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = parse_junit(root / "j.xml")
    assert {f: (r.passed, r.failed) for f, r in report.files.items()} == {
        "tests/test_a.py": (0, 1), "tests/test_b.py": (1, 0), "tests/test_c.py": (1, 0)}
    proc = ci_run(root, "--tier", "cpu", "--record-depmap", str(root / "map.json"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("python -m ci run: --record-depmap records one pytest run, but these files need 2: "
                                  "their registry env differs (IMPL=\"cute $HOME 'q'\" SHARED='entry' TIER_VAR='from-tier'; "
                                  "SHARED='tier' TIER_VAR='from-tier'); record them in separate runs"), proc.stderr
