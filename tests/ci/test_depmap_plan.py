"""`ci plan` with runtime dependency maps judged by file (version-1 maps, a list of changed paths):
maps in a real store (SQLite, and PostgreSQL for the store's own round trip), map files, and every
way a map must not be trusted. Line-level selection is `test_depmap_lines.py`'s.

By file, a map can only add to the static graph (a module-level change reaches every importer,
whatever it executed): test_a and test_c import pkg.a, test_b imports pkg.b. The maps (written
here by hand, the oracle) say what each test really executed: test_a runs pkg/a.py, test_b runs
pkg/b.py and opens pkg/data.json, and in some maps also runs pkg/a.py through a plugin no import
names; test_c was added after the maps were recorded.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.history.depmaps import latest_maps
from ci.history.store import open_store
from ci.selection.depmap_format import DepmapError, parse_depmap
from tests.ci.history_support import pg_server, store_location  # noqa: F401 (fixtures)
from tests.ci.tree_testutil import CPU_REGISTRY_HEAD, write

TESTS = ("tests/test_a.py", "tests/test_b.py", "tests/test_c.py")
IMPORT_A = ["tests/test_a.py", "tests/test_c.py"]  # what the static graph selects for pkg/a.py
IDENTITY = ["--repo", "o/r", "--event", "nightly", "--tier", "cpu"]
SHA1, SHA2 = "a" * 40, "b" * 40


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def fa():\n    return 1\n",
        "pkg/b.py": "def fb():\n    return 2\n",
        "pkg/data.json": "{}\n",
        "tests/test_a.py": "from pkg import a\n\ndef test_a():\n    assert a.fa() == 1\n",
        "tests/test_b.py": "from pkg import b\n\ndef test_b():\n    assert b.fb() == 2\n",
        "tests/test_c.py": "from pkg import a\n\ndef test_c():\n    assert a.fa() == 1\n",
    })
    entries = "".join(f"  {t}:\n    tiers: [cpu]\n    est_time: 10\n    owner: me\n    status: active\n" for t in TESTS)
    (tmp_path / "registry.yaml").write_text(CPU_REGISTRY_HEAD + entries)
    return tmp_path


def entry(executed: list[str], opened: list[str] = (), complete: bool = True, ran: int = 1) -> dict:
    return {"complete": complete, "items": 1, "ran": ran, "executed": list(executed), "opened": list(opened)}


def depmap(path: Path, tests: dict, *, days_old: float = 1.0, tier: str | None = "cpu") -> Path:
    when = (datetime.now(timezone.utc) - timedelta(days=days_old)).isoformat(timespec="seconds")
    path.write_text(json.dumps({"format": "ci-depmap", "version": 1, "tier": tier, "recorded_at": when,
                                "tests": tests}))
    return path


MAPS = {
    "tests/test_a.py": entry(["pkg/__init__.py", "pkg/a.py", "tests/test_a.py"]),
    "tests/test_b.py": entry(["pkg/b.py", "tests/test_b.py"], ["pkg/data.json"]),
}
# test_b also runs pkg/a.py through a plugin that no import statement names
PLUGIN_MAPS = {**MAPS, "tests/test_b.py": entry(["pkg/a.py", "pkg/b.py", "tests/test_b.py"], ["pkg/data.json"])}


def plan_json(project: Path, capsys: pytest.CaptureFixture[str], changed: list[str], *extra: str) -> dict:
    changes = project / "changed.txt"
    changes.write_text("".join(f"{c}\n" for c in changed))
    capsys.readouterr()
    rc = ci_main(["plan", "--registry", str(project / "registry.yaml"), "--tier", "cpu",
                  "--changed-files", str(changes), "--format", "json", *extra])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)["plans"][0]
    return {"selected": {t["path"]: t["why"] for t in out["selected"]},
            "not_run": {t["path"]: t["reason"] for t in out["not_run"]}}


def ingest(project: Path, path: Path, store: str, sha: str = SHA1, run_id: str = "11") -> int:
    return ci_main(["history", "ingest", str(path), *IDENTITY, "--sha", sha, "--run-id", run_id, "--store", store])


def test_the_static_graph_alone_selects_the_importers(project: Path, capsys) -> None:
    plan = plan_json(project, capsys, ["pkg/a.py"])
    assert sorted(plan["selected"]) == IMPORT_A


def test_maps_from_the_store_select_what_executed_the_change(project: Path, capsys) -> None:
    store = str(project / "h.sqlite")
    assert ingest(project, depmap(project / "m.json", MAPS), store) == 0
    plan = plan_json(project, capsys, ["pkg/a.py"], "--depmaps-from-store", "--store", store)
    assert plan["selected"]["tests/test_a.py"] == f"executed pkg/a.py in run 11 at {SHA1[:12]}"
    # test_c has no map: the static graph decides, and says so
    assert plan["selected"]["tests/test_c.py"].endswith("; no map: static graph")
    assert plan["selected"]["tests/test_c.py"].startswith("imports pkg/a.py")
    assert set(plan["selected"]) == {"tests/test_a.py", "tests/test_c.py"}
    assert "map of run 11" in plan["not_run"]["tests/test_b.py"]


def test_an_opened_data_file_selects_the_test_that_read_it(project: Path, capsys) -> None:
    plan = plan_json(project, capsys, ["pkg/data.json"], "--depmap", str(depmap(project / "m.json", MAPS)))
    assert set(plan["selected"]) == {"tests/test_b.py"}
    assert plan["selected"]["tests/test_b.py"].startswith("opened pkg/data.json in map ")


def test_the_newest_map_of_a_test_wins(project: Path, capsys) -> None:
    store = str(project / "h.sqlite")
    assert ingest(project, depmap(project / "old.json", MAPS, days_old=3), store, SHA1, "1") == 0
    newer = {"tests/test_a.py": entry(["pkg/b.py", "tests/test_a.py"])}
    assert ingest(project, depmap(project / "new.json", newer, days_old=1), store, SHA2, "2") == 0
    plan = plan_json(project, capsys, ["pkg/b.py"], "--depmaps-from-store", "--store", store)
    assert plan["selected"]["tests/test_a.py"] == f"executed pkg/b.py in run 2 at {SHA2[:12]}"
    assert plan["selected"]["tests/test_b.py"] == f"executed pkg/b.py in run 1 at {SHA1[:12]}"


@pytest.mark.parametrize("bad, why", [
    ({**MAPS, "tests/test_b.py": entry(["tests/test_b.py"], complete=False)}, "is partial"),
    ({**MAPS, "tests/test_b.py": entry(["tests/test_b.py"], ran=0)}, "all skipped"),
])
def test_a_partial_or_all_skipped_entry_falls_back_to_the_static_graph(project: Path, capsys, bad, why) -> None:
    plan = plan_json(project, capsys, ["pkg/b.py"], "--depmap", str(depmap(project / "m.json", bad)))
    assert why in plan["selected"]["tests/test_b.py"] and plan["selected"]["tests/test_b.py"].endswith("static graph")
    assert "tests/test_a.py" in plan["not_run"]


def test_a_map_adds_what_no_import_names_and_never_drops_an_importer(project: Path, capsys) -> None:
    plan = plan_json(project, capsys, ["pkg/a.py"], "--depmap", str(depmap(project / "m.json", PLUGIN_MAPS)))
    assert plan["selected"]["tests/test_b.py"].startswith("executed pkg/a.py in map ")
    # test_a's map holds pkg/a.py; test_c has none: the graph
    assert set(plan["selected"]) == set(TESTS)


@pytest.mark.parametrize("limit, used", [("1.9", False), ("2.1", True), ("0", False)])
def test_a_map_older_than_the_limit_is_not_used(project: Path, capsys, limit: str, used: bool) -> None:
    path = depmap(project / "m.json", PLUGIN_MAPS, days_old=2)
    plan = plan_json(project, capsys, ["pkg/a.py"], "--depmap", str(path), "--depmap-max-age", limit)
    assert ("tests/test_b.py" in plan["selected"]) is used
    if not used:
        assert "is 2.0 days old (limit" in plan["not_run"]["tests/test_b.py"]


def test_a_map_from_the_future_is_never_fresh(project: Path, capsys) -> None:
    """A skewed clock or a crafted recorded_at: its age was negative, so it never aged out, and in
    the store it stayed every test's newest map. Its age is unknown: warned, and not used."""
    future = depmap(project / "future.json", PLUGIN_MAPS, days_old=-3650)
    when = json.loads(future.read_text())["recorded_at"]
    plan = plan_json(project, capsys, ["pkg/a.py"], "--depmap", str(future))
    assert sorted(plan["selected"]) == IMPORT_A  # test_b's map (it ran pkg/a.py) is not used
    changes = project / "changed.txt"
    rc = ci_main(["plan", "--registry", str(project / "registry.yaml"), "--tier", "cpu", "--changed-files",
                  str(changes), "--depmap", str(future)])
    err = capsys.readouterr().err
    assert rc == 0 and err.count("\n") == 1 and str(future) in err and f"recorded_at {when} is in the future" in err
    store = str(project / "h.sqlite")
    assert ingest(project, future, store) == 2
    err = capsys.readouterr().err
    assert str(future) in err and f"recorded_at {when} is in the future" in err
    # one stored with a sane time and moved into the future afterwards must not shadow a newer map
    assert ingest(project, depmap(project / "old.json", MAPS, days_old=3), store, SHA1, "1") == 0
    assert ingest(project, depmap(project / "new.json", PLUGIN_MAPS, days_old=1), store, SHA2, "2") == 0
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE depmaps SET recorded_at = '2999-01-01T00:00:00+00:00' WHERE run_id = '1'")
    capsys.readouterr()
    rc = ci_main(["plan", "--registry", str(project / "registry.yaml"), "--tier", "cpu", "--changed-files",
                  str(changes), "--format", "json", "--depmaps-from-store", "--store", store])
    out, err = capsys.readouterr()
    assert rc == 0 and "recorded_at 2999-01-01T00:00:00+00:00 is in the future" in err and "run 1 at" in err
    selected = {t["path"]: t["why"] for t in json.loads(out)["plans"][0]["selected"]}
    assert selected["tests/test_b.py"] == f"executed pkg/a.py in run 2 at {SHA2[:12]}"


@pytest.mark.parametrize("text", [
    "{not json", '{"format": "ci-depmap", "version": 2, "tier": "cpu", "recorded_at": "x", "tests": {}}',
    '{"format": "ci-depmap", "version": 1, "tier": "cpu", "recorded_at": "2026-12-01T00:00:00", "tests": {}}',
    json.dumps({"format": "ci-depmap", "version": 1, "tier": "cpu", "recorded_at": "2026-12-01T00:00:00+00:00",
                "tests": {"tests/test_a.py": {"complete": True, "items": 1, "ran": 1, "executed": ["/etc/passwd"],
                                               "opened": []}}}),
    json.dumps({"format": "ci-depmap", "version": 1, "tier": "cpu", "recorded_at": "2026-12-01T00:00:00+00:00",
                "tests": {"tests/test_a.py": {"complete": True, "items": 1, "ran": 1, "executed": []}}}),
])
def test_a_corrupt_map_file_is_a_warning_and_the_static_graph_selects(project: Path, capsys, text: str) -> None:
    path = project / "corrupt.json"
    path.write_text(text)
    changes = project / "changed.txt"
    changes.write_text("pkg/a.py\n")
    rc = ci_main(["plan", "--registry", str(project / "registry.yaml"), "--tier", "cpu", "--changed-files",
                  str(changes), "--format", "json", "--depmap", str(path)])
    out, err = capsys.readouterr()
    assert rc == 0
    assert err.count("\n") == 1 and str(path) in err and "map ignored" in err and "Traceback" not in err
    assert sorted(t["path"] for t in json.loads(out)["plans"][0]["selected"]) == IMPORT_A


def test_a_missing_store_is_a_warning_not_an_empty_plan(project: Path, capsys) -> None:
    plan = plan_json(project, capsys, ["pkg/a.py"], "--depmaps-from-store", "--store", str(project / "none.sqlite"))
    assert sorted(plan["selected"]) == IMPORT_A


def test_a_corrupt_stored_entry_is_ignored_with_a_warning(project: Path, capsys) -> None:
    store = str(project / "h.sqlite")
    assert ingest(project, depmap(project / "m.json", MAPS), store) == 0
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE depmap_tests SET executed = '../outside.py' WHERE test_file = 'tests/test_b.py'")
    changes = project / "changed.txt"
    changes.write_text("pkg/b.py\n")
    capsys.readouterr()
    assert ci_main(["plan", "--registry", str(project / "registry.yaml"), "--tier", "cpu", "--changed-files",
                    str(changes), "--depmaps-from-store", "--store", store]) == 0
    out, err = capsys.readouterr()
    assert "'tests/test_b.py' does not read back; ignored" in err
    assert "tests/test_b.py  (imports pkg/b.py" in out and "no map: static graph" in out


def test_a_map_nested_too_deep_is_one_warning_in_plan_and_a_refusal_in_ingest(project: Path, capsys) -> None:
    """`[` x 100,000 made json raise RecursionError, which no caller caught: `ci plan` ended in a
    traceback. Through the real CLI, as a user meets it; and a stored row nested so is one bad entry."""
    deep = project / "deep.json"
    deep.write_text("[" * 100_000)
    changes = project / "changed.txt"
    changes.write_text("pkg/a.py\n")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "ci", "plan", "--registry", str(project / "registry.yaml"), "--tier",
                           "cpu", "--changed-files", str(changes), "--format", "json", "--depmap", str(deep)],
                          cwd=repo, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and str(deep) in proc.stderr and "nested deeper" in proc.stderr
    assert "map ignored" in proc.stderr
    assert sorted(t["path"] for t in json.loads(proc.stdout)["plans"][0]["selected"]) == IMPORT_A
    store = project / "h.sqlite"
    proc = subprocess.run([sys.executable, "-m", "ci", "history", "ingest", str(deep), *IDENTITY, "--sha", SHA1,
                           "--store", str(store)], cwd=repo, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and str(deep) in proc.stderr and not store.exists()
    assert ingest(project, depmap(project / "m.json", MAPS), str(store)) == 0
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE depmap_tests SET lines = ? WHERE test_file = 'tests/test_b.py'", ("[" * 100_000,))
    with open_store(str(store), create=False) as opened:
        got = latest_maps(opened, "cpu")
    assert set(got.tests) == {"tests/test_a.py"} and "'tests/test_b.py' does not read back" in got.problems[0]


def test_run_all_paths_and_a_changed_test_file_still_select(project: Path, capsys) -> None:
    path = str(depmap(project / "m.json", MAPS))
    assert sorted(plan_json(project, capsys, ["ci/x.py"], "--depmap", path)["selected"]) == list(TESTS)
    plan = plan_json(project, capsys, ["tests/test_b.py"], "--depmap", path)
    assert plan["selected"] == {"tests/test_b.py": "changed: tests/test_b.py"}


def test_a_map_of_another_tier_is_not_used(project: Path, capsys) -> None:
    plan = plan_json(project, capsys, ["pkg/a.py"], "--depmap",
                     str(depmap(project / "m.json", PLUGIN_MAPS, tier="gpu")))
    assert sorted(plan["selected"]) == IMPORT_A  # test_b's gpu map, which holds pkg/a.py, is not read


def test_ingest_refuses_a_bad_map_and_writes_nothing(project: Path, capsys) -> None:
    store = project / "h.sqlite"
    bad = project / "bad.json"
    bad.write_text('{"format": "ci-depmap", "version": 1}')
    good = depmap(project / "m.json", MAPS)
    capsys.readouterr()
    assert ci_main(["history", "ingest", str(good), str(bad), *IDENTITY, "--sha", SHA1, "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "nothing was written" in err
    assert not store.exists()
    assert ingest(project, depmap(project / "gpu.json", MAPS, tier="gpu"), str(store)) == 2
    assert "recorded on tier 'gpu'" in capsys.readouterr().err


def test_ingest_refuses_a_map_of_an_unscored_run_and_writes_nothing(project: Path, capsys) -> None:
    """A pull request's code wrote it: `ci plan` trusts every stored map, so it is never stored,
    and neither is the JUnit beside it (one bad argument writes nothing)."""
    store = project / "h.sqlite"
    path = depmap(project / "m.json", MAPS)
    junit = project / "j.xml"
    junit.write_text('<testsuite name="pytest" tests="1"><testcase classname="tests.test_a" name="test_a" '
                     'file="tests/test_a.py" time="0.1"/></testsuite>')
    capsys.readouterr()
    argv = ["history", "ingest", str(junit), str(path), *IDENTITY, "--sha", SHA1, "--store", str(store)]
    assert ci_main([*argv, "--unscored"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "unscored" in err and "nothing was written" in err
    assert not store.exists()
    assert ci_main(argv) == 0  # the same files, scored: stored
    with open_store(str(store), create=False) as opened:
        assert opened.fetchall("SELECT event FROM depmaps") == [("nightly",)]


def test_the_store_round_trip_on_both_databases(project: Path, store_location: str, capsys) -> None:
    path = depmap(project / "m.json", MAPS)
    assert ingest(project, path, store_location) == 0
    assert ingest(project, path, store_location) == 0
    assert "already stored" in capsys.readouterr().out
    with open_store(store_location, create=False) as store:
        got = latest_maps(store, "cpu")
        assert latest_maps(store, "cpu", repo="other/repo").tests == {}
        assert store.fetchall("SELECT COUNT(*) FROM depmaps") == [(1,)]
    assert got.problems == ()
    assert {t: (sorted(m.entry.executed), sorted(m.entry.opened)) for t, m in got.tests.items()} == {
        t: (e["executed"], e["opened"]) for t, e in MAPS.items()}
    assert got.tests["tests/test_a.py"].origin == f"run 11 at {SHA1[:12]}"


@pytest.mark.parametrize("field, value, said", [
    ("items", -1, "whole number >= 0"), ("ran", True, "whole number >= 0"), ("complete", 1, "true or false"),
    ("executed", ["a/../b.py"], "not a repo-relative path"), ("opened", ["./x"], "not a repo-relative path"),
    ("executed", "pkg/a.py", "must be a list"),
])
def test_the_parser_names_the_bad_field(field: str, value: object, said: str) -> None:
    bad = {**entry(["pkg/a.py"]), field: value}
    text = json.dumps({"format": "ci-depmap", "version": 1, "tier": None, "recorded_at": "2026-12-01T00:00:00Z",
                       "tests": {"tests/test_a.py": bad}})
    with pytest.raises(DepmapError, match=said) as info:
        parse_depmap(text, "m.json")
    assert str(info.value).startswith("m.json: ")
    ok = json.dumps({"format": "ci-depmap", "version": 1, "tier": None, "recorded_at": "2026-12-01T01:00:00+01:00",
                     "tests": {"tests/test_a.py": entry(["pkg/a.py"])}})
    assert parse_depmap(ok, "m.json").tests["tests/test_a.py"].executed == {"pkg/a.py"}


def test_the_dirty_list_round_trips_and_a_bad_one_is_named() -> None:
    from ci.selection.depmap_format import DepMap, TestMap, dump_depmap

    depmap = DepMap("cpu", "2026-12-01T00:00:00+00:00", {"tests/test_a.py": TestMap(
        frozenset({"pkg/a.py"}), complete=False, items=1, ran=1, lines={"pkg/a.py": frozenset({1})})},
        sha=SHA1, dirty=frozenset({"pkg/a.py"}))
    assert parse_depmap(dump_depmap(depmap), "m.json") == depmap
    data = json.loads(dump_depmap(depmap))
    data["dirty"] = ["/etc/passwd"]
    with pytest.raises(DepmapError, match="m.json: .*\"dirty\" holds '/etc/passwd', not a repo-relative path"):
        parse_depmap(json.dumps(data), "m.json")


def test_a_changed_test_file_is_never_judged_by_its_old_map() -> None:
    """Its old map says what the old file ran: the edit may import anything. `plan` selects it by
    its own path first; the map selection itself must hand it to the static graph too."""
    from ci.selection.depmap_format import StoredTestMap, TestMap
    from ci.selection.depmap_select import select_by_maps

    now = datetime.now(timezone.utc)
    stored = StoredTestMap(TestMap(frozenset({"pkg/a.py"}), ran=1, items=1), "run 1 at abc", now.isoformat())
    got = select_by_maps({"tests/test_a.py": stored}, ["tests/test_a.py"], ["tests/test_a.py"], now=now)
    assert got.decided == {} and got.fallback == {"tests/test_a.py": "the test file changed since its map"}
    assert got.why("tests/test_a.py", "changed: tests/test_a.py").endswith("since its map: static graph")
    unchanged = select_by_maps({"tests/test_a.py": stored}, ["tests/test_a.py"], ["pkg/a.py"], now=now)
    assert unchanged.decided["tests/test_a.py"].why == "executed pkg/a.py in run 1 at abc"
    ahead = StoredTestMap(stored.entry, "run 2 at abc", (now + timedelta(minutes=6)).isoformat())
    future = select_by_maps({"tests/test_a.py": ahead}, ["tests/test_a.py"], ["pkg/a.py"], now=now)
    assert future.decided == {} and "has a time in the future" in future.fallback["tests/test_a.py"]
    skewed = StoredTestMap(stored.entry, "run 3 at abc", (now + timedelta(minutes=4)).isoformat())
    assert "tests/test_a.py" in select_by_maps({"tests/test_a.py": skewed}, ["tests/test_a.py"], ["pkg/a.py"],
                                               now=now).decided  # inside the clock skew allowed


def test_the_store_reads_only_maps_inside_the_age_limit_and_keeps_time_order_across_offsets(
        project: Path, capsys) -> None:
    store = str(project / "h.sqlite")
    old = depmap(project / "old.json", {**MAPS, "tests/test_c.py": entry(["pkg/a.py"])}, days_old=20)
    newer = {"tests/test_a.py": entry(["pkg/b.py", "tests/test_a.py"])}
    # one hour later in UTC, though its local time (-05:00) reads earlier as text
    when = datetime.now(timezone.utc) - timedelta(days=1)
    text = json.loads(depmap(project / "new.json", newer).read_text())
    text["recorded_at"] = when.astimezone(timezone(timedelta(hours=-5))).isoformat(timespec="seconds")
    (project / "new.json").write_text(json.dumps(text))
    earlier = json.loads(depmap(project / "mid.json", MAPS).read_text())
    earlier["recorded_at"] = (when - timedelta(hours=1)).astimezone(timezone(timedelta(hours=5))).isoformat()
    (project / "mid.json").write_text(json.dumps(earlier))
    assert ingest(project, old, store, SHA1, "1") == 0
    assert ingest(project, project / "mid.json", store, SHA1, "2") == 0
    assert ingest(project, project / "new.json", store, SHA2, "3") == 0
    with open_store(store, create=False) as opened:
        got = latest_maps(opened, "cpu", since=datetime.now(timezone.utc) - timedelta(days=14))
        every = latest_maps(opened, "cpu")
    assert got.tests["tests/test_a.py"].origin == f"run 3 at {SHA2[:12]}"
    assert got.tests["tests/test_b.py"].origin == f"run 2 at {SHA1[:12]}"
    assert "tests/test_c.py" not in got.tests  # its one map is 20 days old: not even read
    assert every.tests["tests/test_c.py"].origin == f"run 1 at {SHA1[:12]}"
    assert every.tests["tests/test_a.py"].origin == f"run 3 at {SHA2[:12]}"
