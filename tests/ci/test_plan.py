"""`ci.selection.plan.plan` selection, not-run listing, sharding options and renderings; the `ci plan` CLI."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from ci.commands import plan as plan_cmd
from ci.selection.plan import PlanError, plan, to_json, to_text
from ci.selection.shard_ids import matrix_entries, to_github_matrix
from ci.registry import parse_registry
from ci.selection.shard import ShardBudgetError

REGISTRY = textwrap.dedent("""\
    version: 1
    run_all_paths: [ci/, pyproject.toml]
    tiers:
      cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
      gpu_h100: {description: h100, runner_labels: [self-hosted, gpu-h100], gpu_count: 1, arch: sm_90}
    tests:
      tests/quant/test_q.py:
        tiers: [cpu, gpu_h100]
        est_time: 30
        owner: q
        status: active
        depends_on: [fp4kv/quant/]
      tests/mem/test_pool.py:
        tiers: [cpu]
        est_time: 20
        owner: m
        status: active
        depends_on: [fp4kv/mem_cache/pool.py]
      tests/mem/test_other.py: {tiers: [cpu], est_time: 5, owner: m, status: active}
      tests/manual/test_m.py: {tiers: [cpu], est_time: 9, owner: m, status: manual, reason: needs a model}
      tests/q/test_broken.py:
        tiers: [cpu]
        est_time: 4
        owner: m
        status: quarantined
        reason: flaky allocator
        issue: https://example.invalid/issues/7
      tests/gpu/test_only.py: {tiers: [gpu_h100], est_time: 60, owner: g, status: active}
    """)


@pytest.fixture(scope="module")
def registry():
    reg, problems = parse_registry(REGISTRY, "registry.yaml")
    assert problems == []
    return reg


def _every_test_once(p, registry, tier):
    listed = [t.path for t in p.selected] + [n.path for n in p.not_run]
    assert sorted(listed) == sorted(e.path for e in registry.tests_for_tier(tier, include_inactive=True))


def test_no_change_filter_selects_every_active_test_and_lists_the_rest(registry):
    p = plan(registry, "cpu")
    _every_test_once(p, registry, "cpu")
    assert [t.path for t in p.selected] == ["tests/quant/test_q.py", "tests/mem/test_pool.py",
                                             "tests/mem/test_other.py"]
    not_run = {n.path: n for n in p.not_run}
    assert not_run["tests/manual/test_m.py"].reason == "manual: needs a model"
    assert not_run["tests/q/test_broken.py"].reason == \
        "quarantined: flaky allocator (https://example.invalid/issues/7)"
    # Under --tier the plugin skips inactive files even when named: the command must opt in.
    assert not_run["tests/manual/test_m.py"].command == \
        "python -m ci run --tier cpu tests/manual/test_m.py -- --include-inactive"


def test_changed_source_selects_only_dependents(registry):
    p = plan(registry, "cpu", changed_files=["fp4kv/quant/e2m1.py", "README.md"])
    _every_test_once(p, registry, "cpu")
    assert [t.path for t in p.selected] == ["tests/quant/test_q.py"]
    assert p.selected[0].why == "changed: fp4kv/quant/e2m1.py (depends_on fp4kv/quant)"
    reasons = {n.path: n.reason for n in p.not_run}
    assert reasons["tests/mem/test_pool.py"] == "not affected by the change"
    assert reasons["tests/manual/test_m.py"].startswith("manual")


def test_exact_file_dependency_and_own_path(registry):
    p = plan(registry, "cpu", changed_files=["fp4kv/mem_cache/pool.py", "tests/mem/test_other.py"])
    assert {t.path for t in p.selected} == {"tests/mem/test_pool.py", "tests/mem/test_other.py"}
    p = plan(registry, "cpu", changed_files=["fp4kv/mem_cache/pool.pyc", "fp4kv/quant_extra/x.py"])
    assert p.selected == ()  # prefix matching is per path component, not per character


def test_not_affected_active_test_command_needs_no_opt_in(registry):
    p = plan(registry, "cpu", changed_files=["fp4kv/quant/x.py"])
    commands = {n.path: n.command for n in p.not_run}
    assert commands["tests/mem/test_pool.py"] == "python -m ci run --tier cpu tests/mem/test_pool.py"


def test_changed_test_support_selects_the_tests_beside_and_below_it(registry):
    p = plan(registry, "cpu", changed_files=["tests/mem/pool_testutil.py"])
    assert {t.path for t in p.selected} == {"tests/mem/test_pool.py", "tests/mem/test_other.py"}
    assert p.selected[0].why == "changed: tests/mem/pool_testutil.py (test support beside or above the test)"
    p = plan(registry, "cpu", changed_files=["tests/conftest.py"])
    assert len(p.selected) == 3  # a root conftest is loaded by every test
    p = plan(registry, "cpu", changed_files=["tests/mem/test_unregistered_neighbour.py", "tests/memory/x.py"])
    assert p.selected == ()  # another test file, or a sibling folder, is not support


def test_test_support_follows_the_projects_test_roots_and_patterns():
    """Another layout (SGLang's): tests under test/registered, named *_test.py."""
    text = textwrap.dedent("""\
        version: 1
        project: {test_roots: [test/registered], test_patterns: ["*_test.py"]}
        tiers:
          cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
        tests:
          test/registered/core/abort_test.py: {tiers: [cpu], est_time: 1, owner: me, status: active}
        """)
    registry, problems = parse_registry(text)
    assert problems == []
    p = plan(registry, "cpu", changed_files=["test/registered/util.py"])
    assert [(t.path, t.why) for t in p.selected] == [
        ("test/registered/core/abort_test.py", "changed: test/registered/util.py (test support beside or above the test)")]
    for not_support in (["test/registered/core/other_test.py"], ["tests/util.py"], ["test/util.py"]):
        assert plan(registry, "cpu", changed_files=not_support).selected == (), not_support


def test_run_all_path_selects_everything_active(registry):
    p = plan(registry, "cpu", changed_files=["ci/selection/plan.py"])
    assert len(p.selected) == 3
    assert p.run_all_trigger == "ci/selection/plan.py (run_all_paths: ci)"
    assert {n.path for n in p.not_run} == {"tests/manual/test_m.py", "tests/q/test_broken.py"}


def test_empty_change_list_selects_nothing_but_lists_everything(registry):
    p = plan(registry, "gpu_h100", changed_files=[])
    assert not p.has_tests
    assert {n.path for n in p.not_run} == {"tests/quant/test_q.py", "tests/gpu/test_only.py"}
    assert to_github_matrix([p]) == '{"include":[]}'
    assert p.makespan == 0 and len(p.shards) == 1


def test_durations_override_est_time(registry):
    p = plan(registry, "cpu", durations={"tests/mem/test_other.py": 100.0})
    times = {t.path: (t.time, t.time_source) for t in p.selected}
    assert times["tests/mem/test_other.py"] == (100.0, "durations")
    assert times["tests/quant/test_q.py"] == (30.0, "est_time")


def test_shards_and_bounds(registry):
    p = plan(registry, "cpu", shards=2)
    assert [s.tests for s in p.shards] == [("tests/quant/test_q.py",),
                                           ("tests/mem/test_pool.py", "tests/mem/test_other.py")]
    assert p.makespan == 30 and p.lower_bound == 30
    assert p.shard(2, 2).est_time == 25
    with pytest.raises(PlanError, match="3 asked of a plan with 2"):
        p.shard(1, 3)


def test_a_shard_count_is_ascii_and_at_most_a_matrix(repo):
    """`--shards` takes what a GitHub matrix can run (256 jobs): 10**12 allocated a plan of 10**12
    shards, a MemoryError; the child's address space is capped so a regression cannot eat the machine."""
    import resource
    import sys

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    for value in ("1000000000000", "257", "٣"):
        proc = subprocess.run([sys.executable, "-m", "ci", "plan", "--registry", str(repo / "registry.yaml"),
                               "--tier", "cpu", "--shards", value], capture_output=True, text=True, timeout=120,
                              preexec_fn=cap, cwd=Path(__file__).resolve().parents[2])
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert f"argument --shards: must be a whole number from 1 to 256 in ASCII digits, got {value!r}" in proc.stderr
    assert plan_cmd.main(["--registry", str(repo / "registry.yaml"), "--tier", "cpu", "--shards", "256"]) == 0


def test_shard_budget(registry):
    assert len(plan(registry, "cpu", shard_budget=30).shards) == 2
    assert len(plan(registry, "cpu", shard_budget=55).shards) == 1
    with pytest.raises(ShardBudgetError, match="tests/quant/test_q.py alone takes 30.0s"):
        plan(registry, "cpu", shard_budget=10)


def test_bad_arguments(registry):
    with pytest.raises(PlanError, match="unknown tier 'gpu_x'; known tiers: cpu, gpu_h100"):
        plan(registry, "gpu_x")
    with pytest.raises(PlanError, match="either shards or shard_budget"):
        plan(registry, "cpu", shards=2, shard_budget=100)


def test_github_matrix_shape(registry):
    plans = [plan(registry, "cpu", shards=2), plan(registry, "gpu_h100", shards=3)]
    matrix = json.loads(to_github_matrix(plans))
    assert set(matrix) == {"include"}
    entries = matrix["include"]
    # gpu_h100 has 2 tests on 3 shards: the empty third shard gets no runner
    assert [(e["tier"], e["shard"], e["shards"]) for e in entries] == [
        ("cpu", 1, 2), ("cpu", 2, 2), ("gpu_h100", 1, 3), ("gpu_h100", 2, 3)]
    for e in entries:
        assert set(e) == {"tier", "shard", "shards", "runner", "tests", "est_time", "ids"} and e["ids"] == ""
        assert isinstance(e["runner"], list) and all(isinstance(x, str) for x in e["runner"])
        assert isinstance(e["est_time"], float)
    assert entries[1]["tests"] == "tests/mem/test_pool.py tests/mem/test_other.py"
    assert entries[2]["runner"] == ["self-hosted", "gpu-h100"]
    assert matrix_entries(plans) == entries


def test_text_and_json_renderings(registry):
    p = plan(registry, "cpu", changed_files=["fp4kv/quant/a.py"], shards=1)
    text = to_text([p])
    assert "tier cpu: 1 selected, 4 not run (1 changed files)" in text
    assert "run it: python -m ci run --tier cpu tests/mem/test_pool.py" in text
    data = json.loads(to_json([p]))["plans"][0]
    assert data["tier"] == "cpu" and data["has_tests"] is True
    assert len(data["not_run"]) == 4 and data["not_run"][0]["command"].startswith("python -m ci run")


# -- CLI -----------------------------------------------------------------------------------------

@pytest.fixture
def repo(tmp_path, registry):
    (tmp_path / "registry.yaml").write_text(REGISTRY)
    for path in registry.tests:  # plan never selects a registered path that is not a file
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("def test_ok():\n    pass\n")
    return tmp_path


def test_cli_changed_files_github_output(repo, capsys, monkeypatch):
    (repo / "changed.txt").write_text("# comment\nfp4kv/quant/x.py\n\n")
    out_file = repo / "gh_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out_file))
    rc = plan_cmd.main(["--registry", str(repo / "registry.yaml"), "--gpu-tiers", "--changed-files",
                        str(repo / "changed.txt"), "--format", "github-matrix", "--github-output"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert [e["tests"] for e in printed["include"]] == ["tests/quant/test_q.py"]
    lines = out_file.read_text().splitlines()
    assert lines == [f"matrix={json.dumps(printed, separators=(',', ':'))}", "has_tests=true"]


def test_cli_empty_selection_says_has_tests_false(repo, capsys, monkeypatch):
    (repo / "changed.txt").write_text("docs/x.md\n")
    out_file = repo / "gh_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out_file))
    rc = plan_cmd.main(["--registry", str(repo / "registry.yaml"), "--all-tiers", "--changed-files",
                        str(repo / "changed.txt"), "--format", "github-matrix", "--github-output"])
    assert rc == 0
    assert out_file.read_text() == 'matrix={"include":[]}\nhas_tests=false\n'


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_cli_base_uses_git_diff(repo, capsys):
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    _git(repo, "checkout", "-q", "-b", "topic")
    (repo / "fp4kv" / "mem_cache").mkdir(parents=True)
    (repo / "fp4kv" / "mem_cache" / "pool.py").write_text("x = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "change")
    rc = plan_cmd.main(["--registry", str(repo / "registry.yaml"), "--tier", "cpu", "--base", "main",
                        "--format", "json"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)["plans"][0]
    assert data["changed_files"] == ["fp4kv/mem_cache/pool.py"]
    assert [t["path"] for t in data["selected"]] == ["tests/mem/test_pool.py"]

    rc = plan_cmd.main(["--registry", str(repo / "registry.yaml"), "--tier", "cpu", "--base", "no-such-ref"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "git -c core.quotepath=off diff --name-only --no-renames --relative no-such-ref...HEAD" in err
    assert "fetch-depth: 0" in err


def test_cli_base_lists_both_sides_of_a_rename(repo, capsys):
    """A file moved out of a depends_on folder still selects the tests that depended on it."""
    (repo / "fp4kv" / "mem_cache").mkdir(parents=True)
    (repo / "fp4kv" / "mem_cache" / "pool.py").write_text("x = 1\n" * 20)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    _git(repo, "checkout", "-q", "-b", "topic")
    (repo / "fp4kv" / "moved").mkdir()
    _git(repo, "mv", "fp4kv/mem_cache/pool.py", "fp4kv/moved/pool.py")
    _git(repo, "commit", "-q", "-m", "move")
    rc = plan_cmd.main(["--registry", str(repo / "registry.yaml"), "--tier", "cpu", "--base", "main",
                        "--format", "json"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)["plans"][0]
    assert data["changed_files"] == ["fp4kv/mem_cache/pool.py", "fp4kv/moved/pool.py"]
    assert [t["path"] for t in data["selected"]] == ["tests/mem/test_pool.py"]


def test_cli_errors_exit_2_with_message(repo, capsys):
    assert plan_cmd.main(["--registry", str(repo / "registry.yaml"), "--tier", "nope"]) == 2
    assert "unknown tier 'nope'" in capsys.readouterr().err
    assert plan_cmd.main(["--registry", str(repo / "registry.yaml"), "--tier", "cpu",
                          "--changed-files", str(repo / "missing.txt")]) == 2
    assert "cannot read changed-files list" in capsys.readouterr().err
    (repo / "d.json").write_text('{"a": "slow"}')
    assert plan_cmd.main(["--registry", str(repo / "registry.yaml"), "--tier", "cpu",
                          "--durations", str(repo / "d.json")]) == 2
    assert "path -> seconds" in capsys.readouterr().err


# -- selection from the import graph (ci plan builds it from the tree) ------------------------------

GRAPH_REGISTRY = textwrap.dedent("""\
    version: 1
    run_all_paths: [ci/]
    tiers:
      cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
    tests:
      tests/quant/test_q.py: {tiers: [cpu], est_time: 3, owner: q, status: active}
      tests/mem/test_pool.py: {tiers: [cpu], est_time: 2, owner: m, status: active, depends_on: [data/golden.bin]}
      tests/quant: {tiers: [cpu], est_time: 9, owner: q, status: active}
    """)
GRAPH_TREE = {
    "registry.yaml": GRAPH_REGISTRY,
    "ci/__init__.py": "",
    "fp4kv/__init__.py": "",
    "fp4kv/quant/__init__.py": "from fp4kv.quant.mx_block16 import quantize\n",
    "fp4kv/quant/mx_block16.py": "from fp4kv.quant.e2m1 import encode\n\ndef quantize(x):\n    return encode(x)\n",
    "fp4kv/quant/e2m1.py": "def encode(x):\n    return x\n",
    "fp4kv/mem/pool.py": "def pool():\n    from fp4kv.quant import quantize\n    return quantize\n",
    "fp4kv/mem/__init__.py": "",
    "data/golden.bin": "\0",
    "tests/quant/test_q.py": "from fp4kv.quant import quantize\n\ndef test_q():\n    assert quantize(1) == 1\n",
    "tests/mem/test_pool.py": "from fp4kv.mem.pool import pool\n\ndef test_pool():\n    assert pool()\n",
}


@pytest.fixture
def graph_repo(tmp_path):
    for rel, body in GRAPH_TREE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    return tmp_path


def plan_json(repo: Path, changed: list[str], capsys) -> dict:
    (repo / "changed.txt").write_text("\n".join(changed) + "\n")
    rc = plan_cmd.main(["--registry", str(repo / "registry.yaml"), "--tier", "cpu", "--changed-files",
                        str(repo / "changed.txt"), "--format", "json"])
    assert rc == 0
    return json.loads(capsys.readouterr().out)["plans"][0]


def test_cli_selects_by_imports_and_says_why(graph_repo, capsys):
    data = plan_json(graph_repo, ["fp4kv/quant/e2m1.py"], capsys)
    assert {t["path"]: t["why"] for t in data["selected"]} == {
        "tests/quant/test_q.py": "imports fp4kv/quant/e2m1.py via fp4kv.quant.mx_block16",
        "tests/mem/test_pool.py": "imports fp4kv/quant/e2m1.py via fp4kv.quant.mx_block16"}
    assert data["uncovered"] == []
    data = plan_json(graph_repo, ["data/golden.bin", "fp4kv/mem/pool.py"], capsys)
    assert {t["path"]: t["why"] for t in data["selected"]} == {
        "tests/mem/test_pool.py": "changed: data/golden.bin (depends_on data/golden.bin)"}
    assert (graph_repo / ".ci-cache" / "import-records.json").is_file()


def test_cli_warns_about_changes_no_test_covers(graph_repo, capsys):
    (graph_repo / "changed.txt").write_text("docs/notes.md\nfp4kv/quant/e2m1.py\nscripts/tool.py\n")
    rc = plan_cmd.main(["--registry", str(graph_repo / "registry.yaml"), "--tier", "cpu",
                        "--changed-files", str(graph_repo / "changed.txt")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "      tests/quant/test_q.py  (imports fp4kv/quant/e2m1.py via fp4kv.quant.mx_block16)" in out
    assert out.splitlines()[-2:] == [
        "warning: docs/notes.md changed but is covered by no test (no test imports it, no depends_on or "
        "run_all_paths entry names it)",
        "warning: scripts/tool.py changed but is covered by no test (no test imports it, no depends_on or "
        "run_all_paths entry names it)"]
    assert plan_json(graph_repo, ["docs/notes.md"], capsys)["uncovered"] == ["docs/notes.md"]


def test_cli_a_deleted_module_selects_the_tests_that_still_import_it(graph_repo, capsys):
    (graph_repo / "fp4kv" / "quant" / "e2m1.py").unlink()
    data = plan_json(graph_repo, ["fp4kv/quant/e2m1.py"], capsys)
    assert {t["path"] for t in data["selected"]} == {"tests/quant/test_q.py", "tests/mem/test_pool.py"}
    assert data["selected"][0]["why"] == "imports fp4kv/quant/e2m1.py (deleted) via fp4kv.quant.mx_block16"


def test_cli_a_registry_key_naming_a_directory_is_never_selected(graph_repo, capsys):
    """Issue 13: `tests/quant` would run every test in the directory."""
    for changed in (None, ["tests/quant/test_q.py"], ["ci/x.py"]):
        args = ["--registry", str(graph_repo / "registry.yaml"), "--tier", "cpu", "--format", "json"]
        if changed is not None:
            (graph_repo / "changed.txt").write_text("\n".join(changed) + "\n")
            args += ["--changed-files", str(graph_repo / "changed.txt")]
        assert plan_cmd.main(args) == 0
        data = json.loads(capsys.readouterr().out)["plans"][0]
        assert "tests/quant" not in {t["path"] for t in data["selected"]}
        (entry,) = [n for n in data["not_run"] if n["path"] == "tests/quant"]
        assert entry == {"path": "tests/quant", "command": "", "decided_by": "rule",
                         "reason": "tests/quant is a directory, not a test file (registry keys name files); "
                                   "never selected"}
