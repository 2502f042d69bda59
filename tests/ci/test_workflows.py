"""Every GitHub workflow parses, runs every registry tier somewhere, and calls only commands and
scripts that exist (import-level checks: nothing here runs a job)."""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import yaml

from ci.__main__ import COMMANDS
from ci.registry import find_repo_root, load_registry

ROOT = find_repo_root()
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
# `python -m mod [cmd]`, `python3 -m`, `.venv/bin/python -m`
MODULE_CALL = re.compile(r"(?:^|[\s;&|(])(?:\S*/)?python3?(?:\.\d+)? -m ([\w.]+)((?:[ \t]+[^\s;&|]+)*)")
SCRIPT = re.compile(r"(?<![\w/.$-])((?:\.?[\w-]+/)+[\w.-]+\.(?:py|sh))\b|(?<![\w/])(\.ci/[\w.-]+)")
EXPRESSION = re.compile(r"\$\{\{.*?\}\}")


def load_workflow(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise AssertionError(f"{path}: not a mapping")
    if True in data:  # YAML 1.1: a bare `on` key is the boolean true
        data["on"] = data.pop(True)
    return data


def run_scripts(workflow: dict) -> list[tuple[str, str]]:
    """(job id, run script) for every step with `run:`."""
    return [(job_id, step["run"]) for job_id, job in workflow["jobs"].items()
            for step in job.get("steps", []) if "run" in step]


def module_calls(script: str) -> list[tuple[str, list[str]]]:
    """(module, argv) per `python -m module ...` in a shell script (folded lines joined)."""
    text = EXPRESSION.sub("1", script.replace("\\\n", " "))  # `${{ x }}` -> a plausible value
    return [(m.group(1), shlex.split(m.group(2))) for m in MODULE_CALL.finditer(text)]


def test_there_are_workflows():
    names = {p.name for p in WORKFLOWS}
    assert {"pr.yml", "gpu.yml"} <= names


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_structure(path):
    wf = load_workflow(path)
    assert wf.get("on"), f"{path.name}: no triggers"
    assert isinstance(wf.get("permissions"), dict), f"{path.name}: declare minimal top-level permissions"
    assert wf["jobs"], f"{path.name}: no jobs"
    for job_id, job in wf["jobs"].items():
        assert "runs-on" in job, f"{path.name}: job {job_id} has no runs-on"
        needs = job.get("needs", [])
        for need in [needs] if isinstance(needs, str) else needs:
            assert need in wf["jobs"], f"{path.name}: job {job_id} needs unknown job {need}"
        for step in job.get("steps", []):
            if "uses" in step:
                assert "@" in step["uses"], f"{path.name}: {step['uses']} is not pinned to a version"


def test_pr_workflow_runs_the_documented_steps():
    wf = load_workflow(ROOT / ".github" / "workflows" / "pr.yml")
    assert "pull_request" in wf["on"]
    assert "concurrency" in wf and wf["permissions"] == {"contents": "read"}
    scripts = "\n".join(s for _, s in run_scripts(wf))
    for expected in ("python3 ci/bootstrap.py", "-m ci lint --format github", "-m ci run --tier cpu",
                     "-m ci plan --gpu-tiers --base", "--format github-matrix --github-output",
                     "--shard ${{ matrix.shard }}/${{ matrix.shards }}"):
        assert expected in scripts, expected
    gpu = wf["jobs"]["gpu"]
    assert gpu["runs-on"] == "${{ matrix.runner }}"
    assert gpu["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert gpu["if"] == "${{ needs.plan.outputs.has_tests == 'true' }}"
    uploads = [s for job in wf["jobs"].values() for s in job.get("steps", [])
               if s.get("uses", "").startswith("actions/upload-artifact")]
    assert len(uploads) == 2


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
        mod = importlib.import_module(f"ci.commands.{command}")
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
