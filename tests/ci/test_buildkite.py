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


# Buildkite's upload-time interpolation (https://buildkite.com/docs/pipelines/configure/environment-variables
# #runtime-variable-interpolation), after buildkite/interpolate's parser.go at 74a2a5fb, which the
# agent's upload runs on every string value (not on keys): `\\` stays itself; `$$` and `\$` are an
# escaped "$" (`$$X` -> `$X`, `$${X}` -> `${X}`); `$(` is left to the shell; `$NAME` and
# `${NAME[op word]}` expand (`?` with NAME unset fails the upload); any other "$" not last is an error.
_ESCAPED_TAIL = re.compile(r"\{[^}]*\}|[A-Za-z][A-Za-z0-9_]*")
_EXPANSION = re.compile(r"\{([A-Za-z][A-Za-z0-9_]*)(?:(:-|-|\?|:)([^}]*))?\}|([A-Za-z][A-Za-z0-9_]*)")


class UploadFailed(Exception):
    """`buildkite-agent pipeline upload` would refuse the pipeline."""


def _interpolate_at_upload(text: str, env: dict[str, str] | None = None) -> str:
    """What ``buildkite-agent pipeline upload`` makes of ``text`` with ``env`` set (default:
    nothing set; the parallel-job variables are set on each job, later)."""
    env = env or {}
    out, i = [], 0
    while i < len(text):
        if text.startswith("\\\\", i):
            out.append("\\\\")
            i += 2
        elif text.startswith(("\\$", "$$"), i):
            tail = _ESCAPED_TAIL.match(text, i + 2)
            out.append("$" + (tail[0] if tail else ""))
            i = tail.end() if tail else i + 2
        elif text.startswith("$(", i):
            out.append("$(")
            i += 2
        elif text[i] == "$" and i < len(text) - 1:
            m = _EXPANSION.match(text, i + 1)
            if m is None:
                raise UploadFailed(f"bad expansion at {text[i:i + 10]!r}")
            name, op, word = m[1] or m[4], m[2], m[3]
            if op == "?" and name not in env:
                raise UploadFailed(f"{name}: {word}")
            unset = name not in env if op == "-" else not env.get(name)
            out.append(word if op in ("-", ":-") and unset else env.get(name, ""))
            i = m.end()
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _uploaded(value: object, env: dict[str, str] | None = None) -> object:
    """A whole pipeline value as the agent uploads it: every string interpolated, keys untouched."""
    if isinstance(value, str):
        return _interpolate_at_upload(value, env)
    if isinstance(value, list):
        return [_uploaded(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _uploaded(v, env) for k, v in value.items()}
    return value


# Stands in for `python -m ci run` in the job's shell: one argument a line; the file that
# --changed-files names is replaced by its lines, joined with "|".
_FAKE_CI_RUN = ('python() { shift 3; while [ $# -gt 0 ]; do printf "%s\\n" "$1"; '
                'if [ "$1" = --changed-files ]; then paste -sd"|" "$2"; shift; fi; shift; done; }; ')


def _as_the_job_runs_it(step: dict, job: int, count: int) -> list[str]:
    """The argv the job's shell gives ``ci run``: the agent interpolates the step at upload, then
    bash runs the command with the step's env and the parallel-job variables of each job."""
    uploaded = _uploaded(step)
    env = {"BUILDKITE_PARALLEL_JOB": str(job), "BUILDKITE_PARALLEL_JOB_COUNT": str(count), "PATH": "/usr/bin:/bin",
           **uploaded.get("env", {})}
    return subprocess.run(["bash", "-c", _FAKE_CI_RUN + uploaded["command"]], env=env, capture_output=True,
                          text=True, check=True).stdout.split("\n")[:-1]


@pytest.mark.parametrize("job, shard", [(0, "1/3"), (1, "2/3"), (2, "3/3")])
def test_each_parallel_job_runs_its_own_one_based_shard_with_the_plans_selection(tmp_path, job, shard):
    (tmp_path / "durations.json").write_text("{}")
    (tmp_path / "changed.txt").write_text("tests/test_a.py\ntests/test_b.py\ntests/test_c.py\n")
    pipeline = plan(tmp_path, "--tier", "gpu_h100", "--shards", "3", "--changed-files", str(tmp_path / "changed.txt"),
                    "--durations", str(tmp_path / "durations.json"))
    [step] = [s for s in pipeline["steps"] if s["key"] == "tier-gpu_h100"]
    argv = _as_the_job_runs_it(step, job, 3)
    # the list travels in the step, not as the planning agent's path: any agent can read it
    assert argv == ["--tier", "gpu_h100", "--shard", shard, "--durations", str(tmp_path / "durations.json"),
                    "--changed-files", "tests/test_a.py|tests/test_b.py|tests/test_c.py"]
    assert parse_shard_spec(argv[3]) == (job + 1, 3)


def test_a_dollar_in_a_path_survives_the_upload(tmp_path):
    weird = tmp_path / "dur$HOME.json"
    weird.write_text("{}")
    [step, *_] = plan(tmp_path, "--tier", "gpu_h100", "--durations", str(weird))["steps"]
    assert _as_the_job_runs_it(step, 0, 1)[-1] == str(weird)
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


# A tier's steps as vLLM runs them: `.buildkite/test_areas/kernels.yaml` (vLLM at 28be48fa)
# gives `depends_on: image-build` and `working_dir: /vllm-workspace/`; its generator wraps each
# step in the docker plugin (options as the plugin's README names them) on the per-commit image.
VLLM_TIER = """\
  gpu_vllm:
    description: vLLM-style H100 steps in the per-commit image
    runner_labels: [gpu-h100]
    gpu_count: 1
    arch: sm_90
    buildkite_queue: gpu_1_queue
    env:
      LIGER_KERNEL_IMPL: cutedsl
      HOSTILE: "${X?boom} $HOME \\\\\\\\$$"
    buildkite:
      command_prefix: cd /vllm-workspace
      interpolate: [plugins]
      depends_on: image-build
      agents: {gpu: h100}
      priority: 1
      retry:
        automatic:
          - exit_status: -1
            limit: 1
      plugins:
        - docker#v5.2.0:
            image: public.ecr.aws/q9t5s3a7/vllm-ci-test-repo:$BUILDKITE_COMMIT
            always-pull: true
            propagate-environment: true
            gpus: all
            mount-buildkite-agent: false
            volumes: ["/dev/shm:/dev/shm", "/fsx/hf_cache:/root/.cache/huggingface"]
            environment: [HF_TOKEN]
      artifact_paths: ["reports/$HOME/*.xml"]
"""


def _vllm_plan(tmp_path: Path, tier_block: str, *args: str) -> subprocess.CompletedProcess:
    registry = REGISTRY.replace("tests:\n", tier_block + "tests:\n", 1).replace(
        "    tiers: [gpu_h100]\n    est_time: 60", "    tiers: [gpu_h100, gpu_vllm]\n    est_time: 60")
    if "  gpu_vllm:" not in tier_block:
        registry = registry.replace(", gpu_vllm]", "]")
    write(tmp_path, {"registry.yaml": registry, **{f"tests/test_{n}.py": "def test_x():\n    pass\n"
                                                   for n in ("a", "b", "c", "flaky")}})
    return subprocess.run([sys.executable, "-m", "ci", "plan", "--registry", str(tmp_path / "registry.yaml"),
                           "--format", "buildkite", "--tier", "gpu_vllm", *args], cwd=ROOT, capture_output=True,
                          text=True, check=False)


def test_a_vllm_shaped_template_is_merged_valid_and_uploads_as_written(tmp_path):
    result = _vllm_plan(tmp_path, VLLM_TIER)
    assert result.returncode == 0, result.stderr
    pipeline = yaml.safe_load(result.stdout)
    VALIDATOR.validate(pipeline)
    [step] = pipeline["steps"]
    assert list(step)[:5] == ["label", "key", "command", "agents", "timeout_in_minutes"]  # the plan's own first
    uploaded = _uploaded(step, {"BUILDKITE_COMMIT": "abc123", "HOME": "/root"})
    assert uploaded["agents"] == {"gpu": "h100", "queue": "gpu_1_queue"}
    assert uploaded["command"] == "cd /vllm-workspace && python -m ci run --tier gpu_vllm"
    assert uploaded["depends_on"] == "image-build" and uploaded["priority"] == 1
    assert uploaded["retry"] == {"automatic": [{"exit_status": -1, "limit": 1}]}
    # `interpolate: [plugins]`: the image tag is the commit's; everything else arrives as written
    docker = uploaded["plugins"][0]["docker#v5.2.0"]
    assert docker["image"] == "public.ecr.aws/q9t5s3a7/vllm-ci-test-repo:abc123" and docker["gpus"] == "all"
    assert uploaded["artifact_paths"] == ["reports/$HOME/*.xml"]
    assert uploaded["env"] == {"LIGER_KERNEL_IMPL": "cutedsl", "HOSTILE": "${X?boom} $HOME \\\\$$"}


@pytest.mark.parametrize("queue", ["gpu-$HOME", "${X?boom}", "q$$", "$(id)"])
def test_a_queue_reaches_buildkite_as_written(tmp_path, queue):
    """Without the escape `gpu-$HOME` routed to `gpu-/root` and `${X?boom}` failed the upload."""
    tier = VLLM_TIER.replace("buildkite_queue: gpu_1_queue", f"buildkite_queue: '{queue}'")
    result = _vllm_plan(tmp_path, tier)
    assert result.returncode == 0, result.stderr
    [step] = yaml.safe_load(result.stdout)["steps"]
    assert _uploaded(step, {"HOME": "/root"})["agents"]["queue"] == queue


@pytest.mark.parametrize("edit, message", [
    (("      depends_on: image-build", "      command: make"),
     "buildkite: sets 'command', which `ci plan` computes for each step"),
    (("      depends_on: image-build", "      env: {A: b}"), "buildkite: sets 'env'; give the tier an 'env:'"),
    (("      agents: {gpu: h100}", "      agents: {queue: x}"), "buildkite: agents sets 'queue'"),
    (("      interpolate: [plugins]", "      interpolate: [plugin]"), "interpolate names 'plugin'"),
    (("      LIGER_KERNEL_IMPL: cutedsl", "      LIGER-IMPL: cutedsl"), "env name must match"),
    (("      LIGER_KERNEL_IMPL: cutedsl", "      LIGER_KERNEL_IMPL: 1"), "env LIGER_KERNEL_IMPL must be str"),
    (("      priority: 1", "      priority: ~"), "buildkite priority is null"),
])
def test_a_bad_template_or_env_is_one_line_at_its_place(tmp_path, edit, message):
    result = _vllm_plan(tmp_path, VLLM_TIER.replace(*edit))
    assert (result.returncode, result.stdout) == (2, "")
    where = (tmp_path / "registry.yaml").read_text().splitlines().index(edit[1]) + 1
    problem = next(line for line in result.stderr.splitlines() if "registry.yaml:" in line)
    assert f"registry.yaml:{where}:" in problem and message in problem, result.stderr


def test_a_backslash_before_a_dollar_is_refused_not_mangled(tmp_path):
    result = _vllm_plan(tmp_path, VLLM_TIER.replace("LIGER_KERNEL_IMPL: cutedsl", "LIGER_KERNEL_IMPL: 'a\\$b'"))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("python -m ci plan: tier 'gpu_vllm' env LIGER_KERNEL_IMPL 'a\\\\$b' has a "
                                    "backslash before a '$'") and len(result.stderr.splitlines()) == 1


HOSTILE_NAMES = ["tests/test_a.py", "tests/$HOME.py", "tests/${X?boom}.py", "tests/a'; touch pwned; '.py",
                 'tests/"$(id)".py', "tests/a b.py", "tests/`id`.py"]


def test_changed_files_travel_in_the_step_hostile_names_included(tmp_path):
    (tmp_path / "changed.txt").write_text("\n".join(HOSTILE_NAMES) + "\n")
    [step, *_] = plan(tmp_path, "--tier", "gpu_h100", "--changed-files", str(tmp_path / "changed.txt"))["steps"]
    (tmp_path / "changed.txt").unlink()  # the job reads nothing of the planning agent's
    argv = _as_the_job_runs_it(step, 0, 1)
    assert argv == ["--tier", "gpu_h100", "--changed-files", "|".join(sorted(HOSTILE_NAMES))]
    assert not (tmp_path / "pwned").exists() and not (ROOT / "pwned").exists()


def test_a_changed_files_list_too_big_for_a_step_is_one_line(tmp_path):
    (tmp_path / "changed.txt").write_text("".join(f"tests/test_a.py{i:05d}\n" for i in range(4000)) + "tests/test_a.py\n")
    write(tmp_path, {"registry.yaml": REGISTRY, "tests/test_a.py": "def test_x():\n    pass\n"})
    result = subprocess.run([sys.executable, "-m", "ci", "plan", "--registry", str(tmp_path / "registry.yaml"),
                             "--format", "buildkite", "--tier", "cpu", "--changed-files", str(tmp_path / "changed.txt")],
                            cwd=ROOT, capture_output=True, text=True, check=False)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("python -m ci plan: the --changed-files list is ") and "--base" in result.stderr
    assert len(result.stderr.splitlines()) == 1
