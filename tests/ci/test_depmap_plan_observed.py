"""Facts flow to the plan by default (issue #46, item 3): `ci history ingest` keeps a version-3
map's facts, and `ci plan` reads the store without being asked, takes each test file's newest
complete observation (file by file, not one whole map), and says who decided each file, in every
format, Buildkite included. Real stores (SQLite, pgserver's PostgreSQL) and a real git repository."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from ci.__main__ import main as ci_main
from ci.history.depmaps import latest_maps
from ci.history.store import open_store
from tests.ci.history_support import pg_server, store_location  # noqa: F401 (fixtures)
from tests.ci.test_buildkite import VALIDATOR, _interpolate_at_upload
from tests.ci.test_depmap_plan import IDENTITY, MAPS, entry, project  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
SHA1, SHA2 = "1" * 40, "2" * 40


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def _map(path: Path, tests: dict, *, days_old: float, version: int = 1, sha: str | None = None) -> Path:
    when = (datetime.now(timezone.utc) - timedelta(days=days_old)).isoformat(timespec="seconds")
    data = {"format": "ci-depmap", "version": version, "tier": "cpu", "recorded_at": when, "tests": tests}
    if version > 1:
        data.update(sha=sha, shared={})
    path.write_text(json.dumps(data))
    return path


def _ingest(path: Path, store: str, sha: str, run_id: str) -> int:
    return ci_main(["history", "ingest", str(path), *IDENTITY, "--sha", sha, "--run-id", run_id, "--store", store])


def test_version_3_facts_are_stored_and_read_back_on_both_databases(project: Path, store_location: str) -> None:
    facts = {"tests/test_a.py": {**entry([]), "executed": {"pkg/a.py": "1-2"}, "duration_s": 12.5,
                                 "outcome": "passed"},
             "tests/test_b.py": {**entry([], ran=0), "executed": {}, "outcome": "skipped",
                                 "skip_reasons": ["needs a GPU", "no triton"]}}
    assert _ingest(_map(project / "m.json", facts, days_old=1, version=3, sha=SHA1), store_location, SHA1, "7") == 0
    with open_store(store_location, create=False) as store:
        got = latest_maps(store, "cpu").tests
        assert store.fetchall("SELECT map_version FROM depmaps") == [(3,)]
    a, b = got["tests/test_a.py"].entry, got["tests/test_b.py"].entry
    assert (a.duration_s, a.outcome, a.skip_reasons) == (12.5, "passed", ())
    assert (b.duration_s, b.outcome, b.skip_reasons) == (None, "skipped", ("needs a GPU", "no triton"))


@pytest.fixture
def two_maps(project: Path) -> tuple[Path, str]:
    """A git repository with two stored maps: last night's covers test_a only partially and
    test_b completely; the day before's covers test_a completely. test_c has none."""
    _git(project, "init", "-q")
    _git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base", "--allow-empty")
    _git(project, "add", "-A")
    _git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tree")
    store = str(project / "h.sqlite")
    older = {"tests/test_a.py": entry(["pkg/a.py", "tests/test_a.py"])}
    newer = {"tests/test_a.py": entry(["pkg/b.py"], complete=False),
             "tests/test_b.py": entry(["pkg/a.py", "pkg/b.py", "tests/test_b.py"])}
    assert _ingest(_map(project / "old.json", older, days_old=2), store, SHA1, "1") == 0
    assert _ingest(_map(project / "new.json", newer, days_old=1), store, SHA2, "2") == 0
    (project / "pkg/a.py").write_text("def fa():\n    return 3\n")
    _git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "change pkg/a.py")
    return project, store


def _plan(project: Path, store: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ci", "plan", "--registry", str(project / "registry.yaml"),
                           "--tier", "cpu", "--base", "HEAD~1", "--store", store, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_plan_takes_each_files_newest_complete_observation_by_default(two_maps: tuple[Path, str]) -> None:
    project, store = two_maps
    proc = _plan(project, store, "--format", "json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    plan = json.loads(proc.stdout)["plans"][0]
    selected = {t["path"]: (t["decided_by"], t["why"]) for t in plan["selected"]}
    # test_a: last night's entry is partial, so the day before's complete one decides
    assert selected["tests/test_a.py"] == ("observation", f"executed pkg/a.py in run 1 at {SHA1[:12]}")
    # test_b: only last night's map holds it; no import names pkg/a.py, the observation does
    assert selected["tests/test_b.py"] == ("observation", f"executed pkg/a.py in run 2 at {SHA2[:12]}")
    assert selected["tests/test_c.py"][0] == "static graph"
    assert selected["tests/test_c.py"][1].endswith("; no map: static graph")
    assert plan["decided"].startswith(f"2 files by observation (newest from run 2 at {SHA2[:12]} at ")
    assert plan["decided"].endswith("), 1 by the static graph")
    text = _plan(project, store).stdout
    assert f"  decided: {plan['decided']}\n" in text
    assert f"      observation   tests/test_a.py  (executed pkg/a.py in run 1 at {SHA1[:12]})\n" in text
    assert "      static graph  tests/test_c.py  (imports pkg/a.py" in text


def test_no_store_or_opting_out_plans_by_the_static_graph_alone(two_maps: tuple[Path, str]) -> None:
    project, store = two_maps
    for proc in (_plan(project, str(project / "none.sqlite"), "--format", "json"),
                 _plan(project, store, "--format", "json", "--no-depmaps-from-store")):
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        plan = json.loads(proc.stdout)["plans"][0]
        assert plan["decided"] is None
        assert sorted(t["path"] for t in plan["selected"]) == ["tests/test_a.py", "tests/test_c.py"]
    proc = _plan(project, str(project / "none.sqlite"), "--depmaps-from-store")
    assert proc.returncode == 0 and "warning: maps of tier cpu not read" in proc.stderr


def test_the_step_summary_counts_who_decided(two_maps: tuple[Path, str], tmp_path: Path) -> None:
    project, store = two_maps
    summary = tmp_path / "summary.md"
    proc = subprocess.run([sys.executable, "-m", "ci", "plan", "--registry", str(project / "registry.yaml"),
                           "--tier", "cpu", "--base", "HEAD~1", "--store", store], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**_env(), "GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 0, proc.stderr
    assert f"- `cpu`: 2 files by observation (newest from run 2 at {SHA2[:12]} at " in summary.read_text()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}


def test_buildkite_runs_the_planned_files_by_name_and_carries_no_map_path(two_maps: tuple[Path, str]) -> None:
    """The jobs do not have the planning agent's maps: a shard that re-planned without them would
    not be the shard planned here. So each step names its files; the pipeline stays valid."""
    project, store = two_maps
    hostile = project / "maps $(touch x)"
    hostile.mkdir()
    mapfile = _map(hostile / "m.json", {"tests/test_b.py": entry(["pkg/a.py"])}, days_old=0.5)
    proc = _plan(project, store, "--format", "buildkite", "--shards", "2", "--depmap", str(mapfile))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    pipeline = yaml.safe_load(proc.stdout)
    assert list(VALIDATOR.iter_errors(pipeline)) == []
    assert str(hostile) not in proc.stdout and "depmap" not in proc.stdout and store not in proc.stdout
    steps = pipeline["steps"]
    assert [s["key"] for s in steps] == ["tier-cpu-shard-1", "tier-cpu-shard-2"]
    assert all("parallelism" not in s and "--shard" not in s["command"] for s in steps)
    ran = sorted(word for s in steps for word in shlex.split(s["command"])[6:])
    assert ran == ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py"]
    assert all(s["command"].startswith("python -m ci run --tier cpu tests/") for s in steps)


def test_a_pinned_step_passes_a_hostile_file_name_through_the_upload_as_written(two_maps: tuple[Path, str]) -> None:
    project, store = two_maps
    name = "tests/test_d$HOME $(touch pwned);x.py"
    (project / name).write_text("from pkg import a\n\n\ndef test_d():\n    assert a.fa() == 3\n")
    with (project / "registry.yaml").open("a") as fh:
        fh.write(f"  '{name}':\n    tiers: [cpu]\n    est_time: 10\n    owner: me\n    status: active\n")
    _git(project, "add", "-A")
    _git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a hostile name")
    proc = _plan(project, store, "--format", "buildkite")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    pipeline = yaml.safe_load(proc.stdout)
    assert list(VALIDATOR.iter_errors(pipeline)) == []
    (step,) = pipeline["steps"]
    # the commit adds only that file: the plan selects it (its own path), and the job gets its name
    assert shlex.split(_interpolate_at_upload(step["command"])) == ["python", "-m", "ci", "run", "--tier", "cpu", name]
