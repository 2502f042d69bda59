"""Every GitHub workflow parses, runs every registry tier somewhere, calls only commands and
scripts that exist, and plans with the nightly's recorded durations, falling back to est_time
(the plan and shard steps' scripts are run here, against a throw-away git repository)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from ci.__main__ import COMMANDS
from ci.registry import load_registry
from workflow_support import (ROOT, WORKFLOW_DIR, WORKFLOWS, ci_run_args, git, load_workflow, needs, plan_repo,
                              run_scripts, run_step, step_named, triggers, uses)

# `python -m mod [cmd]`, `python3 -m`, `.venv/bin/python -m`
MODULE_CALL = re.compile(r"(?:^|[\s;&|(])(?:\S*/)?python3?(?:\.\d+)? -m ([\w.]+)((?:[ \t]+[^\s;&|]+)*)")
SCRIPT = re.compile(r"(?<![\w/.$-])((?:\.?[\w-]+/)+[\w.-]+\.(?:py|sh))\b|(?<![\w/])(\.ci/[\w.-]+)")
EXPRESSION = re.compile(r"\$\{\{.*?\}\}")


def module_calls(script: str) -> list[tuple[str, list[str]]]:
    """(module, argv) per `python -m module ...` in a shell script (folded lines joined)."""
    text = EXPRESSION.sub("1", script.replace("\\\n", " "))  # `${{ x }}` -> a plausible value
    return [(m.group(1), shlex.split(m.group(2))) for m in MODULE_CALL.finditer(text)]


def test_there_are_workflows():
    names = {p.name for p in WORKFLOWS}
    assert {"pr.yml", "pr-gpu.yml", "gpu.yml"} <= names


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_structure(path):
    wf = load_workflow(path)
    assert wf.get("on"), f"{path.name}: no triggers"
    assert isinstance(wf.get("permissions"), dict), f"{path.name}: declare minimal top-level permissions"
    assert wf["jobs"], f"{path.name}: no jobs"
    for job_id, job in wf["jobs"].items():
        assert "runs-on" in job, f"{path.name}: job {job_id} has no runs-on"
        for need in needs(job):
            assert need in wf["jobs"], f"{path.name}: job {job_id} needs unknown job {need}"


def test_pr_workflow_runs_lint_and_the_cpu_tier_on_hosted_runners_only():
    wf = load_workflow(WORKFLOW_DIR / "pr.yml")
    assert triggers(wf) == {"pull_request", "merge_group", "workflow_dispatch"} and "concurrency" in wf
    assert list(wf["jobs"]) == ["cpu"] and wf["jobs"]["cpu"]["runs-on"] == "ubuntu-latest"
    scripts = "\n".join(s for _, s in run_scripts(wf))
    for expected in ("python3 ci/bootstrap.py", "-m ci lint --format github", "-m ci run --tier cpu"):
        assert expected in scripts, expected
    assert sum(uses(s, "actions/upload-artifact") for s in wf["jobs"]["cpu"]["steps"]) == 1


def test_jobs_off_github_hosted_runners_bootstrap_without_the_browser():
    """A self-hosted (GPU) runner has no browser and no root: the job sets up with `--no-browser`
    (no GPU test needs one); GitHub-hosted jobs keep the README's full set-up."""
    bootstraps = {}
    for path in WORKFLOWS:
        wf = load_workflow(path)
        for job_id, script in run_scripts(wf):
            if "ci/bootstrap.py" in script:
                hosted = str(wf["jobs"][job_id]["runs-on"]).startswith("ubuntu-")
                bootstraps[f"{path.name}:{job_id}"] = (hosted, script.strip())
    rerun = bootstraps.pop("rerun-test-dispatch.yml:run")[1]  # any tier's runner: chosen by its labels
    assert {where: script for where, (hosted, script) in bootstraps.items() if not hosted} == {
        "gpu.yml:gpu": 'python3 ci/bootstrap.py --no-browser --no-py312 --venv-cache "${RUNNER_TOOL_CACHE:?}/fp4kv-venv"',
        "pr-gpu.yml:gpu": 'python3 ci/bootstrap.py --no-browser --no-py312 --venv-cache "${RUNNER_TOOL_CACHE:?}/fp4kv-venv-pr"'}
    assert bootstraps["pr.yml:cpu"] == (True, "python3 ci/bootstrap.py")
    self_hosted = "--no-browser --no-py312 --venv-cache /runner/_tool/fp4kv-venv-rerun"
    for labels, argv in (('["ubuntu-latest"]', ""), ('["self-hosted", "linux", "gpu-h100"]', self_hosted),
                         ('["self-hosted", "ubuntu-h100"]', self_hosted), ('["ubuntu-self-hosted-ish"]', "")):
        assert _run_bootstrap_step(rerun, labels) == f"ci/bootstrap.py {argv}".strip(), labels


def _run_bootstrap_step(script: str, labels: str) -> str:
    """What the step's script runs as ``python3``, with the tier's runner labels as the bot sends them."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        fake = Path(tmp, "python3")
        fake.write_text('#!/bin/sh\necho "$*"\n')
        fake.chmod(0o755)
        env = {"PATH": f"{tmp}:/usr/bin:/bin", "RUNNER_LABELS": labels, "RUNNER_TOOL_CACHE": "/runner/_tool"}
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], env=env,
                              capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout.strip()


def test_pr_gpu_workflow_gates_plans_and_shards_the_gpu_tiers():
    wf = load_workflow(WORKFLOW_DIR / "pr-gpu.yml")
    assert triggers(wf) == {"pull_request_target", "issue_comment"}  # issue_comment: /ok-to-test-gpu <sha>
    assert wf["on"]["pull_request_target"]["types"] == ["opened", "synchronize", "reopened", "labeled"]
    assert wf["on"]["issue_comment"]["types"] == ["created"]
    jobs = wf["jobs"]
    assert "-m tools.approval --event \"$GITHUB_EVENT_PATH\"" in step_named(jobs["approval"], "Decide")["run"]
    plan = step_named(jobs["plan"], "Plan GPU tiers")["run"]
    for expected in ("-m ci plan --gpu-tiers --base", "--format github-matrix --github-output", "--durations",
                     '--depmaps-from-store --store "$STORE"'):
        assert plan.count(expected) == (1 if expected == "--durations" else 2), expected  # both tries
    gpu = jobs["gpu"]
    assert needs(gpu) == ["approval", "plan"] and gpu["runs-on"] == "${{ matrix.runner }}"
    assert gpu["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert gpu["if"] == "${{ needs.approval.outputs.run == 'true' && needs.plan.outputs.has_tests == 'true' }}"
    run = step_named(gpu, "Run shard")  # the plan's files (tests/ci/test_workflow_depmaps.py runs it)
    assert "--shard" not in run["run"] and "--record-depmap" not in run["run"]
    assert run["env"]["TESTS"] == "${{ matrix.tests }}" and run["env"]["SHARD"] == "${{ matrix.shard }}"
    assert sum(uses(s, "actions/upload-artifact") for s in gpu["steps"]) == 1


def _tiers_planned(argv: list[str], registry) -> set[str]:
    if "--all-tiers" in argv:
        return set(registry.tiers)
    if "--gpu-tiers" in argv:
        return {t.name for t in registry.tiers.values() if t.needs_gpu}
    return {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--tier"}


def test_every_tier_runs_on_its_runner_labels_somewhere():
    registry = load_registry(ROOT / "registry.yaml")
    covered: set[str] = set()
    for path in WORKFLOWS:
        wf = load_workflow(path)
        planned: dict[str, set[str]] = {}  # plan job id -> tiers in its matrix
        for job_id, script in run_scripts(wf):
            for module, argv in module_calls(script):
                if module == "ci" and argv[:1] == ["plan"] and "github-matrix" in argv:
                    planned.setdefault(job_id, set()).update(_tiers_planned(argv, registry))
        for job_id, job in wf["jobs"].items():
            runs_on = job["runs-on"]
            if runs_on == "${{ matrix.runner }}":
                matrix = str(job.get("strategy", {}).get("matrix", ""))
                for plan_job, tiers in planned.items():
                    if f"needs.{plan_job}.outputs.matrix" in matrix:
                        covered |= tiers
                continue
            labels = [runs_on] if isinstance(runs_on, str) else list(runs_on)
            scripts = " ".join(s for j, s in run_scripts(wf) if j == job_id)
            for tier in registry.tiers.values():
                if labels == list(tier.runner_labels) and re.search(rf"--tier {tier.name}\b", scripts):
                    covered.add(tier.name)
    assert set(registry.tiers) - covered == set(), "tiers no workflow runs"


def _calls():
    out = []
    for path in WORKFLOWS:
        for job_id, script in run_scripts(load_workflow(path)):
            out += [(f"{path.name}:{job_id}:{module}:{' '.join(argv[:1])}", module, argv)
                    for module, argv in module_calls(script)]
    return out


@pytest.mark.parametrize("where,module,argv", _calls(), ids=[c[0] for c in _calls()])
def test_called_modules_and_commands_exist(where, module, argv, capsys):
    if module == "pip":
        return  # installs a package; nothing of ours to check
    assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"
    if module == "ci":
        command = argv[0]
        assert command in COMMANDS, f"{where}: `python -m ci {command}` is not a command"
        mod = importlib.import_module(f"ci.commands.{command.replace('-', '_')}")  # as the dispatcher maps it
        if hasattr(mod, "build_parser"):
            rest = argv[1:]
            if "--" in rest:
                rest = rest[:rest.index("--")]
            mod.build_parser().parse_args(rest)  # raises SystemExit(2) on an unknown or bad option
        else:  # a peer's command without build_parser: `--help` must succeed and list our options
            try:
                code = mod.main(["--help"])
            except SystemExit as exc:
                code = exc.code
            assert code in (0, None), f"{where}: `python -m ci {command} --help` exited {code}"
            usage = capsys.readouterr().out
            for option in (a.split("=")[0] for a in argv[1:] if a.startswith("--")):
                assert option in usage, f"{where}: {command} has no option {option}"
    elif module == "bench":
        from bench.__main__ import available
        assert all(a in available() for a in argv if not a.startswith("-"))


def test_referenced_scripts_exist():
    missing, found = [], set()
    for path in WORKFLOWS:
        for job_id, script in run_scripts(load_workflow(path)):
            for m in SCRIPT.finditer(EXPRESSION.sub("", script)):
                ref = m.group(1) or m.group(2)
                if ref.startswith(("reports/", "origin/")) or "/bin/" in ref:
                    continue
                found.add(ref)
                if not (ROOT / ref).exists():
                    missing.append(f"{path.name}:{job_id}: {ref}")
    assert "ci/bootstrap.py" in found
    assert missing == []


def test_the_checks_themselves_catch_mistakes():
    script = ".venv/bin/python -m ci run --tier ${{ matrix.tier }} --shard ${{ matrix.shard }}/2 \\\n  --bogus\n" \
             "python3 -m ci nosuch && python3 tools/missing.py"
    calls = module_calls(script)
    assert calls == [("ci", ["run", "--tier", "1", "--shard", "1/2", "--bogus"]), ("ci", ["nosuch"])]
    assert "nosuch" not in COMMANDS
    from ci.commands.run import build_parser
    with pytest.raises(SystemExit):
        build_parser().parse_args(calls[0][1][1:])
    assert [m.group(1) for m in SCRIPT.finditer(script)] == ["tools/missing.py"]


# -- recorded durations: nightly saves them, every plan restores them, est_time when absent --------

PLAN_STEPS = {"gpu.yml": "Plan every GPU tier", "pr-gpu.yml": "Plan GPU tiers for this change"}
DURATIONS_FILE = "ci-durations/durations.json"
HEAVY = "tests/quant/test_nvfp4.py"  # a GPU-tier file that a change under fp4kv/quant selects


@pytest.fixture
def pr_repo(tmp_path: Path) -> Path:
    return plan_repo(tmp_path)


def _plan_step(name: str) -> dict:
    wf = load_workflow(WORKFLOW_DIR / name)
    (step,) = [s for job in wf["jobs"].values() for s in job.get("steps", []) if s.get("id") == "plan"]
    assert step["name"] == PLAN_STEPS[name]
    return step


def _run_plan(name: str, repo: Path, tmp_path: Path, base_ref: str = "main"):
    step = _plan_step(name)
    env = {k: v.replace("${{ github.base_ref }}", base_ref).replace("${{ github.repository }}", "acme/gpu")
           for k, v in step["env"].items()}
    assert env["DURATIONS"] == DURATIONS_FILE and "${{" not in "".join(env.values())
    output = tmp_path / "github_output"
    output.write_text("", encoding="utf-8")
    result = run_step(step["run"], {**env, "GITHUB_OUTPUT": str(output)}, repo, tmp_path / "scratch")
    outputs = [line.split("=", 1) for line in output.read_text(encoding="utf-8").splitlines()]
    return result, outputs


def _gpu_tiers() -> list[str]:
    return [t.name for t in load_registry(ROOT / "registry.yaml").tiers.values() if t.needs_gpu]


def _est_time_of(matrix: dict, path: str) -> float:
    (entry,) = [e for e in matrix["include"] if e["tier"] == "gpu_h100" and path in e["tests"].split()]
    return entry["est_time"]


@pytest.mark.parametrize("name", sorted(PLAN_STEPS))
def test_plan_step_uses_recorded_durations(name, pr_repo, tmp_path):
    (pr_repo / "ci-durations").mkdir()
    (pr_repo / DURATIONS_FILE).write_text(json.dumps({HEAVY: 1234.0}), encoding="utf-8")
    result, outputs = _run_plan(name, pr_repo, tmp_path)
    assert result.returncode == 0, result.stderr
    keys = [k for k, _ in outputs]
    assert sorted(keys) == ["durations", "has_tests", "matrix"], keys  # one plan wrote, once
    out = dict(outputs)
    assert out["durations"] == "true" and out["has_tests"] == "true"
    assert _est_time_of(json.loads(out["matrix"]), HEAVY) >= 1234  # registry est_times are all < 100


@pytest.mark.parametrize("name", sorted(PLAN_STEPS))
def test_plan_step_falls_back_to_est_time_without_durations(name, pr_repo, tmp_path):
    result, outputs = _run_plan(name, pr_repo, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "::notice::no recorded durations" in result.stdout
    # no failed first try to explain away in the log; pr-gpu.yml's plan also says it found no maps
    said = [line for line in result.stderr.splitlines() if line.startswith("python -m ci plan:")]
    no_store = [line for line in said if "not read from the history store" in line and "no history there yet" in line]
    assert said == no_store and len(no_store) == (len(_gpu_tiers()) if name == "pr-gpu.yml" else 0), said
    out = dict(outputs)
    assert sorted(k for k, _ in outputs) == ["durations", "has_tests", "matrix"]
    assert out["durations"] == "false" and out["has_tests"] == "true"
    registry = load_registry(ROOT / "registry.yaml")
    assert _est_time_of(json.loads(out["matrix"]), HEAVY) >= registry.tests[HEAVY].est_time
    assert _est_time_of(json.loads(out["matrix"]), HEAVY) < 1234


@pytest.mark.parametrize("bad", ["{not json", '{"tests/quant/test_nvfp4.py": "slow"}', "\udcff"])
def test_plan_step_warns_and_falls_back_on_a_durations_file_it_rejects(bad, pr_repo, tmp_path):
    (pr_repo / "ci-durations").mkdir()
    (pr_repo / DURATIONS_FILE).write_bytes(bad.encode("utf-8", "surrogateescape"))
    result, outputs = _run_plan("pr-gpu.yml", pr_repo, tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"::warning::ci plan rejected {DURATIONS_FILE}" in result.stdout
    assert sorted(k for k, _ in outputs) == ["durations", "has_tests", "matrix"]  # the failed try wrote nothing
    assert dict(outputs)["durations"] == "false"


def _push_plan(repo: Path, tmp_path: Path, before: str) -> tuple[set[str], list[str]]:
    jobs = load_workflow(WORKFLOW_DIR / "gpu.yml")["jobs"]
    (step,) = [s for s in jobs["plan"]["steps"] if s.get("id") == "pushplan"]
    # a queued batch (merge_group) is planned the same way, against main before the batch
    assert step["if"] == "${{ github.event_name == 'push' || github.event_name == 'merge_group' }}"
    assert _plan_step("gpu.yml")["if"] == "${{ github.event_name != 'push' && github.event_name != 'merge_group' }}"
    assert step["env"]["BEFORE"] == "${{ github.event.before || github.event.merge_group.base_sha }}"
    output = tmp_path / "github_output"
    output.write_text("", encoding="utf-8")
    result = run_step(step["run"], {"DURATIONS": DURATIONS_FILE, "BEFORE": before, "GITHUB_OUTPUT": str(output)},
                      repo, tmp_path / "scratch")
    assert result.returncode == 0, result.stderr
    out = dict(line.split("=", 1) for line in output.read_text(encoding="utf-8").splitlines())
    assert out["durations"] == "false"
    files = {f for e in json.loads(out["matrix"]).get("include", []) for f in e["tests"].split()}
    return files, (repo / "changed.txt").read_text().split()


def test_push_plan_step_plans_what_the_push_changed(pr_repo, tmp_path):
    """gpu.yml on a push: the per-commit GPU tiers for the files changed since the commit before it;
    with no usable "before" (a new branch's zeros, a force push's unknown commit) every file counts."""
    def head() -> str:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=pr_repo, capture_output=True, text=True,
                              check=True).stdout.strip()

    origin = subprocess.run(["git", "rev-parse", "origin/main"], cwd=pr_repo, capture_output=True, text=True,
                            check=True).stdout.strip()
    quant, changed = _push_plan(pr_repo, tmp_path, origin)
    assert changed == ["fp4kv/quant/nvfp4.py"] and HEAVY in quant
    before = head()
    (pr_repo / "NOTES.txt").write_text("a push that touches no code\n")
    git(pr_repo, "add", "NOTES.txt")
    git(pr_repo, "commit", "-qm", "notes")
    nothing, changed = _push_plan(pr_repo, tmp_path, before)
    assert changed == ["NOTES.txt"] and nothing == set()
    for unusable in ("0" * 40, "f" * 40):
        everything, listed = _push_plan(pr_repo, tmp_path, unusable)
        assert "registry.yaml" in listed and "NOTES.txt" in listed and quant <= everything


def test_both_workflows_list_a_moves_old_path_and_a_non_ascii_path_as_itself(pr_repo, tmp_path):
    """gpu.yml's push plan and pr-gpu.yml's changed-files step list a change as `ci plan --base`
    does: a `git mv` shows its old path too (a test importing the old module is selected), and
    with no usable base every tracked file, a non-ASCII name as itself (not git's octal quoting)."""
    before = subprocess.run(["git", "rev-parse", "HEAD"], cwd=pr_repo, capture_output=True, text=True,
                            check=True).stdout.strip()
    git(pr_repo, "mv", "fp4kv/quant/nvfp4.py", "fp4kv/quant/nvfp4_moved.py")
    (pr_repo / "NOTES-ü.txt").write_text("ü\n")
    git(pr_repo, "add", ".")
    git(pr_repo, "commit", "-qm", "move nvfp4")
    moved = {"fp4kv/quant/nvfp4.py", "fp4kv/quant/nvfp4_moved.py", "NOTES-ü.txt"}
    selected, changed = _push_plan(pr_repo, tmp_path, before)
    assert set(changed) == moved and HEAVY in selected
    _, everything = _push_plan(pr_repo, tmp_path, "0" * 40)
    assert "NOTES-ü.txt" in everything
    plan = load_workflow(WORKFLOW_DIR / "pr-gpu.yml")["jobs"]["plan"]
    (step,) = [s for s in plan["steps"] if s.get("name") == "The pull request's changed files"]
    for base, expected in ((before, moved), ("", set(everything))):
        result = run_step(step["run"], {"BASE_SHA": base}, pr_repo, tmp_path / "scratch-pr")
        assert result.returncode == 0, result.stderr
        assert set((pr_repo / "changed.txt").read_text(encoding="utf-8").split()) == expected


def test_plan_step_fallback_does_not_hide_a_real_error(pr_repo, tmp_path):
    result, outputs = _run_plan("pr-gpu.yml", pr_repo, tmp_path, base_ref="no-such-branch")
    assert result.returncode != 0 and outputs == []
    assert "no-such-branch" in result.stderr


@pytest.mark.parametrize("use_durations", ["true", "false"])
def test_shard_step_passes_the_plans_durations_to_ci_run(use_durations, tmp_path):
    """gpu.yml: shard i/N must be cut from the same times the plan used. The step runs against a
    stand-in `.venv/bin/python` that records its argv, which `ci run`'s own parser then reads.
    (pr-gpu.yml runs the plan's files instead: tests/ci/test_workflow_depmaps.py.)"""
    wf = load_workflow(WORKFLOW_DIR / "gpu.yml")
    gpu = wf["jobs"]["gpu"]
    step = step_named(gpu, "Run shard")
    assert step["env"]["USE_DURATIONS"] == "${{ needs.plan.outputs.durations }}"
    assert gpu["defaults"]["run"]["shell"] == "bash"
    assert step["env"]["TESTS"] == "${{ matrix.tests }}" and step["env"]["EVENT"] == "${{ github.event_name }}"
    env = {"TIER": "gpu_h100", "SHARD": "2", "SHARDS": "3", "BASE_REF": "main", "USE_DURATIONS": use_durations,
           "RECORD_DEPMAP": "true", "EVENT": "schedule", "TESTS": "tests/quant/test_a.py tests/quant/test_b.py"}
    args = ci_run_args(step["run"], env, tmp_path)
    assert (args.tier, args.shard, args.junit, args.paths) == ("gpu_h100", "2/3", "reports/junit-gpu_h100-2.xml", [])
    assert args.durations == (DURATIONS_FILE if use_durations == "true" else None)
    assert args.base is None and args.record_depmap == "reports/depmap-gpu_h100-2-of-3.json"
    assert args.workers == "1"  # the job's GPUs serve one test at a time
    # a push: the files its plan put in this shard (selected from the push's changes), not 2/3 of the tier
    args = ci_run_args(step["run"], {**env, "EVENT": "push"}, tmp_path / "push")
    assert (args.shard, args.paths) == (None, ["tests/quant/test_a.py", "tests/quant/test_b.py"])
    # a queued batch likewise: the files the batch changed since main before it
    args = ci_run_args(step["run"], {**env, "EVENT": "merge_group"}, tmp_path / "queue")
    assert (args.shard, args.paths) == (None, ["tests/quant/test_a.py", "tests/quant/test_b.py"])
    assert args.record_depmap == "reports/depmap-gpu_h100-2-of-3.json" and args.workers == "1"


def test_durations_cache_is_saved_and_restored_under_one_path_and_prefix():
    nightly = load_workflow(WORKFLOW_DIR / "gpu.yml")
    (save,) = [s for s in nightly["jobs"]["durations"]["steps"] if uses(s, "actions/cache/save")]
    assert save["with"]["path"] == DURATIONS_FILE
    assert f"--json {DURATIONS_FILE}" in step_named(nightly["jobs"]["durations"], "Measured durations")["run"]
    for name in PLAN_STEPS:
        jobs = load_workflow(WORKFLOW_DIR / name)["jobs"]
        (restore,) = [s for s in jobs["plan"]["steps"] if uses(s, "actions/cache/restore")
                      and s["with"]["path"] == DURATIONS_FILE]
        prefix = restore["with"]["restore-keys"]
        # the cache version hashes the path: restore must name exactly what save saved
        assert restore["with"]["path"] == save["with"]["path"]
        assert save["with"]["key"].startswith(prefix) and restore["with"]["key"].startswith(prefix)
        assert restore["with"]["key"] != save["with"]["key"]
        if name == "pr-gpu.yml":  # its shards run the plan's files: they need no durations
            assert "durations" not in jobs["plan"]["outputs"]
            assert not [s for job in jobs.values() for s in job["steps"]
                        if uses(s, "actions/upload-artifact") and s["with"]["name"] == "plan-durations"]
            continue
        # gpu.yml plans a push in a step of its own (`pushplan`); either step's outputs are the job's
        plans = ("steps.plan", "steps.pushplan")
        assert jobs["plan"]["outputs"]["durations"] == "${{ " + " || ".join(f"{p}.outputs.durations" for p in plans) + " }}"
        (upload,) = [s for s in jobs["plan"]["steps"]
                     if uses(s, "actions/upload-artifact") and s["with"]["name"] == "plan-durations"]
        (download,) = [s for s in jobs["gpu"]["steps"] if uses(s, "actions/download-artifact")]
        assert upload["with"]["name"] == download["with"]["name"] and upload["with"]["path"] == DURATIONS_FILE
        assert download["with"]["path"] == str(Path(DURATIONS_FILE).parent)
        assert upload["if"] == "${{ " + " || ".join(f"{p}.outputs.durations == 'true'" for p in plans) + " }}"
        assert download["if"] == "${{ needs.plan.outputs.durations == 'true' }}"


@pytest.mark.parametrize("labels,workers", [('["self-hosted", "gpu-h100"]', "1"), ('"ubuntu-latest"', "auto")])
def test_rerun_dispatch_runs_one_worker_on_a_gpu_runner(labels, workers, tmp_path):
    """A self-hosted (GPU) runner's tests share its GPUs one at a time: one xdist worker (a test
    killed at its timeout still ends only its worker); a hosted runner uses every core."""
    job = load_workflow(WORKFLOW_DIR / "rerun-test-dispatch.yml")["jobs"]["run"]
    step = step_named(job, "Run the requested tests")
    assert step["env"]["RUNNER_LABELS"] == "${{ inputs.runner }}"
    args = ci_run_args(step["run"], {"TIER": "gpu_h100", "TESTS": "tests/a.py tests/b.py", "RUNNER_LABELS": labels},
                       tmp_path)
    assert (args.tier, args.workers, args.paths) == ("gpu_h100", workers, ["tests/a.py", "tests/b.py"])
