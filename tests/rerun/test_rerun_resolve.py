"""The bot, `ci run` and `ci plan` agree on what a target may run (issue #22): only a registry key
that names a regular file. A key naming a directory, or a dangling link, is never dispatched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ci.commands import plan as plan_cmd
from ci.commands import run as run_cmd
from ci.registry import load_registry
from tools.rerun.resolve import Kind, resolve_target

REGISTRY = """\
version: 1
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
  gpu: {description: gpu, runner_labels: [gpu], gpu_count: 1, arch: sm_90}
tests:
"""
KEYS = ["tests/test_ok.py", "tests/somedir", "tests/somedir/test_in.py", "tests/test_dangling.py",
        "tests/other/test_gone.py"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    entries = "".join(f"  {k}: {{tiers: [cpu, gpu], est_time: 1, timeout: 120, owner: me, status: active}}\n"
                      for k in KEYS)
    (tmp_path / "registry.yaml").write_text(REGISTRY + entries)
    (tmp_path / "tests/somedir").mkdir(parents=True)
    (tmp_path / "tests/test_ok.py").write_text("def test_ok():\n    pass\n")
    (tmp_path / "tests/somedir/test_in.py").write_text("def test_in():\n    pass\n")
    (tmp_path / "tests/test_dangling.py").symlink_to("nowhere.py")
    return tmp_path


def planned(repo: Path, capsys) -> list[str]:
    assert plan_cmd.main(["--registry", str(repo / "registry.yaml"), "--tier", "gpu", "--format", "json"]) == 0
    return sorted(t["path"] for t in json.loads(capsys.readouterr().out)["plans"][0]["selected"])


def test_the_bot_dispatches_exactly_what_plan_selects(repo, capsys):
    registry = load_registry(repo / "registry.yaml")
    dispatched = sorted(k for k in KEYS if resolve_target(registry, repo, k).kind is Kind.RESOLVED)
    assert dispatched == planned(repo, capsys) == ["tests/somedir/test_in.py", "tests/test_ok.py"]


@pytest.mark.parametrize("target, detail, candidates", [
    ("tests/somedir", "tests/somedir is a directory, not a test file (registry keys name files)",
     ("tests/somedir/test_in.py",)),
    ("somedir", "tests/somedir is a directory, not a test file (registry keys name files)",
     ("tests/somedir/test_in.py",)),
    ("tests/test_dangling.py", "tests/test_dangling.py does not exist", ()),
    ("test_dangling.py::test_x", "tests/test_dangling.py does not exist", ()),
])
def test_a_key_plan_never_selects_is_unknown_with_what_it_is(repo, target, detail, candidates):
    r = resolve_target(load_registry(repo / "registry.yaml"), repo, target)
    assert (r.kind, r.path, r.tiers, r.detail) == (Kind.UNKNOWN, None, (), detail)
    if candidates:
        assert r.candidates == candidates


def test_ci_run_refuses_a_directory_or_a_dangling_key_before_starting_pytest(repo, capsys, monkeypatch):
    started = []
    monkeypatch.setattr(run_cmd, "run_invocation", lambda inv: started.append(inv) or 0)
    (repo / "tests/unregistered").mkdir()
    rc = run_cmd.main(["--registry", str(repo / "registry.yaml"), "--workers", "0", "tests/somedir",
                       "tests/test_dangling.py::test_x", "tests", "tests/unregistered"])
    err = capsys.readouterr().err
    assert (rc, started) == (2, [])
    assert err.splitlines()[1:] == [
        "  tests/somedir is a directory, not a test file (registry keys name files)",
        "  tests/test_dangling.py::test_x does not exist",
        "  tests is not a registered test file but a directory holding tests/other/test_gone.py, "
        "tests/somedir, tests/somedir/test_in.py and 2 more: name the files",
        f"  tests/unregistered is not registered in {repo / 'registry.yaml'}",
    ]
