"""The two rerun workflows agree with the bot (inputs, run-name, report command) and keep their
security rules; and no test skips because first-party code is missing."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys
from typing import Any

import pytest

import ci.commands.run as ci_run
from ci.registry import load_registry
from tools.rerun.__main__ import build_parser
from tools.rerun.comment_lines import COMMAND_NAMES
from tools.rerun.dispatch import DISPATCH_WORKFLOW, run_name
from tools.rerun.fake_expressions import evaluate, render
from tools.rerun.fake_github import FakeGitHub, render_run_name
from tools.rerun.github import MAX_DISPATCH_INPUTS
from tools.rerun.pr_runs import RunTitle, parse_title

from rerun_support import ROOT, comment_payload, load_workflow, pr_workflow_run_names, pull_request_payload


def _steps(data: dict[str, Any], job: str | None = None) -> list[dict[str, Any]]:
    jobs = data["jobs"]
    return (jobs[job] if job else next(iter(jobs.values())))["steps"]


def checkout_depth(data: dict[str, Any], job: str | None = None) -> int:
    (checkout,) = [s for s in _steps(data, job) if str(s.get("uses", "")).startswith("actions/checkout@")]
    return int(checkout["with"].get("fetch-depth", 1))


def _expressions_in_scripts(steps: list[dict[str, Any]]) -> list[str]:
    return [step["run"] for step in steps if "${{" in step.get("run", "")]


def test_comment_workflow_trigger_permissions_and_checkout() -> None:
    text = (ROOT / ".github" / "workflows" / "rerun-test.yml").read_text(encoding="utf-8")
    data = load_workflow("rerun-test.yml")
    assert data["on"] == {"issue_comment": {"types": ["created"]}}
    (job,) = data["jobs"].values()
    assert data["permissions"] == {} and job["permissions"] == {
        "actions": "write", "issues": "write", "pull-requests": "write", "contents": "read"}
    assert "github.event.issue.pull_request" in job["if"]
    assert "contains(github.event.comment.body, 'rerun')" in job["if"]
    assert checkout_depth(data) == 0  # /culprit's window: the default branch's whole history
    (checkout,) = [s for s in _steps(data) if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert checkout["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    assert checkout["with"]["persist-credentials"] is False
    assert "pull_request.head" not in text and "head_ref" not in text
    runs = [s["run"] for s in _steps(data) if "run" in s]
    assert runs[0] == 'python3 -m pip install "pyyaml>=6.0" "requests>=2.31" "psycopg[binary]>=3.1"'
    # the history's URL (a secret) reaches the bot, which runs the default branch's code only
    assert [s.get("env") for s in _steps(data) if "run" in s][-1] == {
        "GITHUB_TOKEN": "${{ secrets.GITHUB_TOKEN }}", "CI_HISTORY_STORE": "${{ secrets.CI_HISTORY_URL }}"}
    assert runs[-1] == 'python3 -m tools.rerun handle --event "$GITHUB_EVENT_PATH"'
    assert _expressions_in_scripts(_steps(data)) == []


def test_the_comment_prefilter_lets_every_command_and_the_look_alikes_through() -> None:
    """GitHub's `contains` is case-insensitive; the bot answers look-alikes with what to type."""
    needles = re.findall(r"contains\(github\.event\.comment\.body, '([^']+)'\)",
                         load_workflow("rerun-test.yml")["jobs"]["handle"]["if"])
    bodies = [f"/{name} x" for name in COMMAND_NAMES] + [
        "\uff0frerun-test x.py", "\u2215rerun-test x.py", "/\u200brerun-test x.py", "/rerun-test\u00a0x.py",
        "/rerun\u2013test x.py", "/ReRun-Test x.py", "\uff0fculprit x.py", "/Culprit\u00a0x.py"]
    assert all(any(n.lower() in body.lower() for n in needles) for body in bodies)


def test_the_bot_runs_on_pyyaml_and_requests_alone() -> None:
    """rerun-test.yml installs only those two: the bot must never import torch or triton."""
    code = ("import sys, tools.rerun.__main__, tools.rerun.handler, tools.rerun.server, tools.rerun.report; "
            "heavy = sorted({'torch', 'triton', 'numpy'} & set(sys.modules)); "
            "sys.exit(f'bot imported {heavy}' if heavy else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_dispatch_workflow_matches_the_inputs_the_bot_sends(fake: FakeGitHub, make_handler) -> None:
    outcome = make_handler(dry_run=True).handle(comment_payload("/rerun-test test_pack.py::t[1]", comment_id=31))
    sent = outcome.dispatches[0].inputs
    data = load_workflow(DISPATCH_WORKFLOW)
    declared = data["on"]["workflow_dispatch"]["inputs"]
    assert set(declared) == set(sent) and len(declared) <= MAX_DISPATCH_INPUTS == 25
    assert all(spec["type"] == "string" for spec in declared.values())
    assert {k for k, spec in declared.items() if spec.get("required")} == {"pr", "sha", "tier", "runner", "tests"}
    # The run-name GitHub gives the run is the one the bot looks for.
    assert render_run_name(data["run-name"], sent) == run_name(sent) == outcome.dispatches[0].run_name
    assert "comment 31" in run_name(sent)
    assert data["jobs"]["run"]["runs-on"] == "${{ fromJSON(inputs.runner) }}"
    assert data["permissions"] == {} and data["jobs"]["run"]["permissions"] == {"contents": "read"}
    assert "${{ inputs.part }}" in data["concurrency"]["group"]  # shards of one tier run side by side


def test_pr_gpu_run_names_say_whose_run_it_is() -> None:
    """pr-gpu.yml's runs carry the base branch's SHA; its run-name, as GitHub renders it for each of
    its events, is what `pr_runs` finds the PR's runs by (PR and head SHA, or PR and comment)."""
    data = load_workflow("pr-gpu.yml")
    assert set(data["on"]) == {"pull_request_target", "issue_comment"}
    template = pr_workflow_run_names()["pr-gpu.yml"]
    pr_event = {"github": {"event_name": "pull_request_target", "event": pull_request_payload(7, "a" * 40)}}
    comment_event = {"github": {"event_name": "issue_comment", "event": comment_payload("/ok-to-test-gpu abcdef1",
                                                                                      number=7, comment_id=99)}}
    assert render(template, pr_event) == f"pr-gpu PR #7 ({'a' * 40})"
    assert render(template, comment_event) == "pr-gpu PR #7 comment 99"
    assert parse_title(render(template, pr_event)) == RunTitle(7, "a" * 40, None)
    assert parse_title(render(template, comment_event)) == RunTitle(7, None, 99)
    dispatch = {"pr": "7", "sha": "b" * 40, "tier": "t", "part": "1/2", "comment_id": "5"}
    assert parse_title(run_name(dispatch)) == RunTitle(7, "b" * 40, 5)
    assert parse_title("pr-gpu PR #77 comment 5").pr == 77 and parse_title("nightly").pr is None


def test_the_fakes_expressions_follow_github() -> None:
    contexts = {"github": {"event": {"n": 0, "s": "x", "t": True}}, "inputs": {"a": "A"}}
    assert evaluate("github.event.missing || 'd'", contexts) == "d"
    assert evaluate("github.event.n || github.event.s", contexts) == "x"  # 0 is falsy
    assert evaluate("github.event.s && 'yes' || 'no'", contexts) == "yes"
    assert evaluate("github.event.missing && 'yes'", contexts) is None
    assert evaluate("!github.event.t", contexts) is False and evaluate("(1 == 1) && 'X' == 'x'", contexts) is True
    assert evaluate("format('{0}-{1}', inputs.a, 'it''s')", contexts) == "A-it's"
    assert render("n=${{ github.event.n }} m=${{ github.event.missing }}", contexts) == "n=0 m="
    for bad in ("secrets.TOKEN", "toJSON(github)", "github.event['n']", "inputs.a ||"):
        with pytest.raises(ValueError, match="the fake cannot evaluate"):
            evaluate(bad, contexts)


def test_dispatch_workflow_checks_out_sha_and_never_splices_inputs_into_scripts() -> None:
    data = load_workflow(DISPATCH_WORKFLOW)
    steps = _steps(data, "run")
    (checkout,) = [s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert checkout["with"]["ref"] == "${{ inputs.sha }}"
    for job in data["jobs"].values():
        assert _expressions_in_scripts(job["steps"]) == []
    (run,) = [s for s in steps if "ci run" in s.get("run", "")]
    assert run["env"] == {"TIER": "${{ inputs.tier }}", "TESTS": "${{ inputs.tests }}", "RUNNER_LABELS": "${{ inputs.runner }}"}
    assert '-m ci run --tier "$TIER"' in run["run"] and '"${tests[@]}"' in run["run"]
    assert any(str(s.get("uses", "")).startswith("actions/upload-artifact@") for s in steps)
    assert (ROOT / "ci" / "bootstrap.py").is_file()


def test_the_report_job_has_least_permissions_and_runs_the_default_branch_code() -> None:
    data = load_workflow(DISPATCH_WORKFLOW)
    report = data["jobs"]["report"]
    assert report["needs"] == "run" and report["runs-on"] == "ubuntu-latest"
    assert "always()" in report["if"] and "inputs.comment_id != ''" in report["if"]
    # a culprit search's probe (PR #0, comment_id its search key) has no reply to write into
    runs_when = report["if"].removeprefix("${{").removesuffix("}}").replace("always()", "true")
    probe, rerun = {"pr": "0", "comment_id": "1234567"}, {"pr": "42", "comment_id": "101"}
    assert [evaluate(runs_when, {"inputs": i}) for i in (probe, rerun)] == [False, True]
    assert report["permissions"] == {"contents": "read", "pull-requests": "write"}
    steps = report["steps"]
    (checkout,) = [s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert "ref" not in checkout.get("with", {}) and checkout["with"]["persist-credentials"] is False
    assert not any("bootstrap" in s.get("run", "") for s in steps)  # no PR code, no .venv from the run job
    upload = next(s for s in _steps(data, "run") if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    download = next(s for s in steps if str(s.get("uses", "")).startswith("actions/download-artifact@"))
    assert download["with"]["name"] == upload["with"]["name"]
    last = steps[-1]
    assert last["if"] == "always()" and "tools.rerun report" in last["run"]
    assert set(last["env"]) == {"GITHUB_TOKEN", "PR", "COMMENT_ID", "TIER", "PART", "RUN_URL", "SLOT", "SHA",
                                "CI_HISTORY_STORE"}
    # the history's URL (a secret) reaches only this job, which runs the default branch's code
    assert last["env"]["CI_HISTORY_STORE"] == "${{ secrets.CI_HISTORY_URL }}"
    assert "secrets.CI_HISTORY_URL" not in str(data["jobs"]["run"])


def test_the_report_command_in_the_workflow_parses(monkeypatch) -> None:
    """The CLI accepts exactly what the report step passes (env values stand in for the inputs)."""
    step = load_workflow(DISPATCH_WORKFLOW)["jobs"]["report"]["steps"][-1]
    env = {"PR": "42", "COMMENT_ID": "101", "TIER": "gpu_b200", "PART": "2/3",
           "RUN_URL": "https://github.com/o/r/actions/runs/1", "SLOT": "5/9", "SHA": "a" * 40}
    argv = shlex.split(re.sub(r'"\$(\w+)"', lambda m: shlex.quote(env[m[1]]), step["run"]))
    assert argv[:4] == ["python3", "-m", "tools.rerun", "report"]
    args = build_parser().parse_args(argv[3:])
    assert (args.pr, args.comment_id, args.tier, args.part, args.junit, args.slot, args.sha) == (
        42, 101, "gpu_b200", "2/3", "reports/junit-rerun.xml", "5/9", "a" * 40)
    run_step = next(s for s in _steps(load_workflow(DISPATCH_WORKFLOW), "run") if "ci run" in s.get("run", ""))
    assert "--junit reports/junit-rerun.xml" in run_step["run"]


def test_ci_run_accepts_what_the_dispatch_workflow_passes() -> None:
    args = ci_run.build_parser().parse_args(
        ["--tier", "gpu_b200", "--junit", "reports/junit-rerun.xml", "tests/quant/test_x.py::test_y[bf16]",
         "tests/quant/test_z.py"])
    assert args.tier == "gpu_b200" and args.paths == ["tests/quant/test_x.py::test_y[bf16]", "tests/quant/test_z.py"]


def test_the_culprit_workflow_takes_the_bots_inputs_and_keeps_its_state_across_a_rerun() -> None:
    """culprit.yml: the inputs the bot (and the nightly's auto-culprit) send, exactly; one job on a
    hosted runner that runs the default branch's code only; the state restored and saved
    (always) under keys made of the inputs; the run-name the bot looks its run up by."""
    from tools.rerun.cmd_culprit import CULPRIT_WORKFLOW, CulpritRequest, culprit_run_name

    data = load_workflow(CULPRIT_WORKFLOW)
    declared = data["on"]["workflow_dispatch"]["inputs"]
    sent = CulpritRequest("gpu_b200", "tests/x.py::t[1]", "a" * 40, "b" * 40, 30, 9).inputs(42, 101)
    assert list(declared) == ["tier", "test", "good", "bad", "budget", "runners", "comment_id", "pr"] == list(sent)
    assert all(spec["type"] == "string" for spec in declared.values())
    for inputs in (sent, {**sent, "comment_id": "", "pr": ""}):  # from a comment; from the auto-culprit
        assert render_run_name(data["run-name"], inputs) == culprit_run_name(inputs)
    (job,) = data["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest" and data["permissions"] == {}
    assert job["permissions"] == {"contents": "read", "actions": "write", "pull-requests": "write"}
    assert checkout_depth(data) == 0 and _expressions_in_scripts(job["steps"]) == []
    (checkout,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert "ref" not in checkout["with"]  # the default branch: no PR code meets the write token
    restore, save = (next(s for s in job["steps"] if str(s.get("uses", "")).startswith(f"actions/cache/{kind}@"))
                     for kind in ("restore", "save"))
    assert save["if"] == "always()" and restore["with"]["path"] == save["with"]["path"] == "culprit-state"
    assert restore["with"]["key"] == save["with"]["key"] and "github.run_attempt" in save["with"]["key"]
    for name in ("tier", "test", "good", "bad"):
        assert f"inputs.{name}" in save["with"]["key"]
        assert all(f"inputs.{name}" in k for k in restore["with"]["restore-keys"].splitlines())
    names = [s.get("name", s.get("uses")) for s in job["steps"]]
    assert names.index(restore["name"]) < names.index("Search") < names.index(save["name"])


def test_the_culprit_workflows_search_command_parses(monkeypatch) -> None:
    """`ci culprit` with the dispatch runner accepts exactly what the search step passes, and its
    --state is inside the cached folder."""
    from ci.commands.culprit import build_parser as culprit_parser
    from tools.rerun.culprit_dispatch import DispatchPlugin

    step = next(s for s in load_workflow("culprit.yml")["jobs"]["search"]["steps"] if s.get("name") == "Search")
    env = {"GITHUB_REPOSITORY": "o/r", "GITHUB_REF_NAME": "main", "TIER": "gpu_b200", "TEST": "tests/x.py::t[1]",
           "GOOD": "a" * 40, "BAD": "b" * 40, "BUDGET": "30", "RUNNERS": "2", "PR": "", "COMMENT_ID": "",
           "RUN_URL": "https://github.com/o/r/actions/runs/1"}
    argv = shlex.split(re.sub(r'"\$(\w+)"', lambda m: shlex.quote(env[m[1]]), step["run"]))
    assert argv[:4] == ["python3", "-m", "tools.rerun", "culprit"]
    args = culprit_parser((DispatchPlugin(),)).parse_args(argv[4:])
    assert (args.runner, args.repo, args.ref, args.tier, args.test, args.good, args.bad, args.budget, args.runners,
            args.pr, args.comment_id) == ("dispatch", "o/r", "main", "gpu_b200", "tests/x.py::t[1]", "a" * 40,
                                          "b" * 40, 30, 2, "", "")
    assert args.state.startswith("culprit-state/") and set(step["env"]) - {"GITHUB_TOKEN", "CI_HISTORY_STORE"} \
        == set(env) - {"GITHUB_REPOSITORY", "GITHUB_REF_NAME"}


# -- no test skips because first-party code is missing ---------------------------------------------

def _first_party() -> set[str]:
    names = set(load_registry(ROOT / "registry.yaml").project.first_party)
    names |= {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    return names


def skips_on_missing_first_party(source: str, first_party: set[str]) -> list[str]:
    """``importorskip("<first-party>")`` calls, and ``try: import <first-party>`` blocks whose
    ImportError handler skips, in one test file's source: each as ``line: text``."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "importorskip":
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and str(arg.value).split(".")[0] in first_party:
                found.append(f"{node.lineno}: importorskip({arg.value!r})")
        if isinstance(node, ast.Try):
            imported = [a.name for n in node.body if isinstance(n, ast.Import) for a in n.names]
            imported += [n.module or "" for n in node.body if isinstance(n, ast.ImportFrom)]
            if not any(name.split(".")[0] in first_party for name in imported):
                continue
            for handler in node.handlers:
                if "skip" in ast.unparse(handler):
                    found.append(f"{node.lineno}: try: import {', '.join(imported)} ... except: skip")
    return sorted(found, key=lambda hit: int(hit.split(":")[0]))


def test_no_test_skips_because_first_party_code_is_missing() -> None:
    first_party = _first_party()
    assert {"ci", "fp4kv", "tools"} <= first_party
    offenders = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        hits = skips_on_missing_first_party(path.read_text(encoding="utf-8"), first_party)
        if hits:
            offenders[path.relative_to(ROOT).as_posix()] = hits
    assert offenders == {}, "a rename must fail these tests, not skip them"


def test_the_skip_scan_finds_what_it_looks_for() -> None:
    source = ("import pytest\nrun = pytest.importorskip('ci.commands.run')\ntorch = pytest.importorskip('torch')\n"
              "try:\n    from fp4kv.quant import x\nexcept ImportError:\n    pytest.skip('gone')\n")
    assert skips_on_missing_first_party(source, {"ci", "fp4kv"}) == [
        "2: importorskip('ci.commands.run')", "4: try: import fp4kv.quant ... except: skip"]
