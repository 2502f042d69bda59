"""`ci plan --format buildkite`: a pipeline that Buildkite's published schema accepts, one step per
tier on its queue, parallelism per shard, the shard each job runs, quarantined files soft-failing."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from ci.selection.buildkite import SETUP_MINUTES
from ci.selection.shard import parse_shard_spec
from tests.ci.tree_testutil import CPU_TIER_BLOCK, write

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = Path(__file__).parent / "buildkite_pipeline_schema"
SCHEMA = json.loads((SCHEMA_DIR / "schema.json").read_text())
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)

REGISTRY = "version: 1\ntiers:\n" + CPU_TIER_BLOCK + """\
  gpu_h100:
    description: one H100
    runner_labels: [gpu-h100]
    gpu_count: 1
    arch: sm_90
    buildkite_queue: nvidia-h100
  mi300:
    description: one MI300X
    runner_labels: [amd]
    gpu_count: 1
    arch: gfx942
tests:
  tests/test_a.py:
    tiers: [cpu, gpu_h100]
    est_time: 100
    timeout: 400
    owner: o
    status: active
  tests/test_b.py:
    tiers: [gpu_h100]
    est_time: 60
    timeout: 240
    owner: o
    status: active
  tests/test_c.py:
    tiers: [gpu_h100]
    est_time: 50
    owner: o
    status: active
  tests/test_flaky.py:
    tiers: [gpu_h100]
    est_time: 10
    timeout: 130
    owner: o
    status: quarantined
    reason: flaky
    issue: https://example.org/issues/1
"""


def plan(tmp_path: Path, *args: str) -> dict:
    write(tmp_path, {"registry.yaml": REGISTRY, **{f"tests/test_{n}.py": "def test_x():\n    pass\n"
                                                   for n in ("a", "b", "c", "flaky")}})
    result = subprocess.run([sys.executable, "-m", "ci", "plan", "--registry", str(tmp_path / "registry.yaml"),
                             "--format", "buildkite", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return yaml.safe_load(result.stdout)


def test_the_schema_copy_is_the_pinned_one():
    source = json.loads((SCHEMA_DIR / "SOURCE.json").read_text())
    assert hashlib.sha256((SCHEMA_DIR / "schema.json").read_bytes()).hexdigest() == source["sha256"]
    assert (SCHEMA_DIR / "LICENSE").read_text().startswith("MIT License")
    jsonschema.Draft7Validator.check_schema(SCHEMA)


def test_the_pipeline_is_valid_and_has_a_step_per_tier(tmp_path):
    pipeline = plan(tmp_path, "--all-tiers", "--shards", "2")
    VALIDATOR.validate(pipeline)
    steps = {s["key"]: s for s in pipeline["steps"]}
    assert list(steps) == ["tier-cpu", "tier-gpu_h100", "tier-gpu_h100-quarantined"]  # mi300 has no tests
    h100 = steps["tier-gpu_h100"]
    assert h100["agents"] == {"queue": "nvidia-h100"} and steps["tier-cpu"]["agents"] == {"queue": "cpu"}
    assert h100["parallelism"] == 2 == steps["tier-cpu"]["parallelism"]
    assert h100["label"] == "gpu_h100: 3 test file(s) in 2 shards"
    # LPT: test_a (100 s) alone, test_b + test_c (110 s) together; the step's timeout is the
    # larger shard's file timeouts: 240 + derived max(120, 4 x 50) = 440 s -> 8 min, plus setup
    assert h100["timeout_in_minutes"] == 8 + SETUP_MINUTES
    assert "soft_fail" not in h100
    quarantined = steps["tier-gpu_h100-quarantined"]
    assert quarantined["soft_fail"] is True and quarantined["env"] == {"CI_RUN_QUARANTINED": "1"}
    assert quarantined["command"] == "python -m ci run --tier gpu_h100 tests/test_flaky.py"
    assert quarantined["timeout_in_minutes"] == 3 + SETUP_MINUTES  # 130 s -> 3 min
    assert quarantined["agents"] == {"queue": "nvidia-h100"}


def test_one_shard_needs_no_parallelism(tmp_path):
    pipeline = plan(tmp_path, "--tier", "gpu_h100")
    VALIDATOR.validate(pipeline)
    step = pipeline["steps"][0]
    assert "parallelism" not in step and step["command"] == "python -m ci run --tier gpu_h100"
    assert step["timeout_in_minutes"] == 14 + SETUP_MINUTES  # 400 + 240 + 200 = 840 s: exactly 14 min


# buildkite/interpolate's grammar (parser.go at 74a2a5fb, which the agent's upload runs): `$$` and
# `\$` are an escaped "$"; `$(` is left to the shell; `${NAME...}` and `$NAME` expand; any other
# "$" is itself.
_UPLOAD_VARIABLE = re.compile(r"\$\$|\\\$|\$\(|\$\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|\$([A-Za-z][A-Za-z0-9_]*)")


def _interpolate_at_upload(text: str) -> str:
    """What ``buildkite-agent pipeline upload`` makes of ``text`` in a step where the
    parallel-job variables are not set (they are set on each job, later)."""
    def one(match: re.Match) -> str:
        if match[0] in ("$$", "\\$"):
            return "$"
        if match[0] == "$(":
            return "$("
        return ""  # a variable: not set while uploading
    return _UPLOAD_VARIABLE.sub(one, text)


def _as_the_job_runs_it(command: str, job: int, count: int) -> list[str]:
    """The argv the job's shell gives ``ci run``: the agent interpolates at upload, then bash
    expands the parallel-job variables the agent sets on each job."""
    uploaded = _interpolate_at_upload(command)
    assert uploaded.startswith("python -m ci run ")
    script = "printf '%s\\n' " + uploaded.removeprefix("python -m ci run ")
    env = {"BUILDKITE_PARALLEL_JOB": str(job), "BUILDKITE_PARALLEL_JOB_COUNT": str(count), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout.split("\n")[:-1]


@pytest.mark.parametrize("job, shard", [(0, "1/3"), (1, "2/3"), (2, "3/3")])
def test_each_parallel_job_runs_its_own_one_based_shard_with_the_plans_selection(tmp_path, job, shard):
    (tmp_path / "durations.json").write_text("{}")
    (tmp_path / "changed.txt").write_text("tests/test_a.py\ntests/test_b.py\ntests/test_c.py\n")
    pipeline = plan(tmp_path, "--tier", "gpu_h100", "--shards", "3", "--changed-files", str(tmp_path / "changed.txt"),
                    "--durations", str(tmp_path / "durations.json"))
    [step] = [s for s in pipeline["steps"] if s["key"] == "tier-gpu_h100"]
    argv = _as_the_job_runs_it(step["command"], job, 3)
    assert argv == ["--tier", "gpu_h100", "--shard", shard, "--changed-files", str(tmp_path / "changed.txt"),
                    "--durations", str(tmp_path / "durations.json")]
    assert parse_shard_spec(argv[3]) == (job + 1, 3)


def test_a_dollar_in_a_path_survives_the_upload(tmp_path):
    weird = tmp_path / "dur$HOME.json"
    weird.write_text("{}")
    [step, *_] = plan(tmp_path, "--tier", "gpu_h100", "--durations", str(weird))["steps"]
    assert _as_the_job_runs_it(step["command"], 0, 1)[-1] == str(weird)
    assert shlex.split(_interpolate_at_upload(step["command"]))[-1] == str(weird)


def test_nothing_selected_is_an_empty_valid_pipeline(tmp_path):
    (tmp_path / "changed.txt").write_text("README.md\n")
    pipeline = plan(tmp_path, "--tier", "mi300", "--changed-files", str(tmp_path / "changed.txt"))
    assert pipeline == {"steps": []}
    VALIDATOR.validate(pipeline)


GOOD_STEP = {"label": "gpu_h100", "key": "tier-gpu_h100", "command": "python -m ci run --tier gpu_h100",
             "agents": {"queue": "gpu"}, "parallelism": 2, "timeout_in_minutes": 20, "soft_fail": True}


@pytest.mark.parametrize("field, value", [
    ("parallelism", "2"),                                       # a string, not an integer
    ("timeout_in_minutes", 0),                                  # minimum 1
    ("key", "0f2c1a9e-5b7d-4c3e-9a1b-2d3e4f5a6b7c"),            # must not look like a UUID
    ("key", "tier gpu"),                                        # no spaces
    ("soft_fail", "yes"),
    ("agents", "gpu"),
    ("queue", "gpu"),                                           # not a step key: agents: {queue: ...}
])
def test_the_schema_can_fail(field, value):
    """The check is not a formality: each of these breaks one field of a valid step."""
    assert VALIDATOR.is_valid({"steps": [GOOD_STEP]})
    broken = copy.deepcopy(GOOD_STEP)
    broken[field] = value
    assert not VALIDATOR.is_valid({"steps": [broken]})


def test_dependency_maps_are_refused_for_buildkite(tmp_path):
    """`ci run --shard` re-plans without --depmap, so a pipeline planned with maps would run
    other shards than the ones planned: one line, exit 2."""
    write(tmp_path, {"registry.yaml": REGISTRY, "map.json": "{}"})
    result = subprocess.run([sys.executable, "-m", "ci", "plan", "--registry", str(tmp_path / "registry.yaml"),
                             "--tier", "cpu", "--format", "buildkite", "--depmap", str(tmp_path / "map.json")],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("python -m ci plan: --format buildkite cannot use runtime dependency maps")
    assert len(result.stderr.splitlines()) == 1
