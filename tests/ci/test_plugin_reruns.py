"""The registry's ``reruns`` never retry breakage: a real pytest process, with pytest-rerunfailures,
on a file with ``reruns: 2`` whose tests raise ImportError, ModuleNotFoundError, SyntaxError, a
missing-GPU RuntimeError, and a plain flaky AssertionError. Each attempt appends a line to a file,
so what ran is counted outside pytest's own report, and the JUnit is read back through the history
classifier. Then every attempt's own text (`ci.pytest_attempts`): a real pytest, serial and under
xdist, whose retried attempts' errors reach the store (SQLite and a real PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ci.history.classify import signature
from ci.history.ingest import case_rows, ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import open_store
from ci.pytest_attempts import MAX_ATTEMPT_CHARS, bounded
from ci.results.junit import ATTEMPT_TEXT, parse_junit
from tests.ci.history_support import pg_server, store_location  # noqa: F401 (fixtures)
from tests.ci.tree_testutil import CPU_REGISTRY_HEAD

ROOT = Path(__file__).resolve().parents[2]
IDENTITY = RunIdentity("acme/gpu", "abc1234", "push", "cpu")

REGISTRY = CPU_REGISTRY_HEAD + """\
  tests/test_seed.py:
    tiers: [cpu]
    est_time: 1
    owner: me
    status: active
    reruns: 2
"""

TESTS = '''\
import os

import pytest

LOG = os.environ["ATTEMPT_LOG"]


def ran(name):
    with open(LOG, "a") as f:
        f.write(name + "\\n")


def test_import_error():
    ran("import_error")
    from os import KVFP4QuantizeUtil  # noqa: F401  (the seed's rename: a name that is not there)


def test_module_not_found():
    ran("module_not_found")
    import fp4kv_no_such_module  # noqa: F401


def test_syntax_error():
    ran("syntax_error")
    compile("def f(:", "<generated>", "exec")


def test_no_gpu():
    ran("no_gpu")
    raise RuntimeError("No CUDA GPUs are available")


def test_chained_import_error():
    ran("chained")
    try:
        import fp4kv_no_such_module  # noqa: F401
    except ImportError as exc:
        raise RuntimeError("plugin load failed") from exc


def test_flaky_assertion():
    ran("flaky")
    assert sum(1 for line in open(LOG) if line == "flaky\\n") == 3, "accuracy 0.81 below 0.85"


@pytest.mark.flaky(reruns=1)
def test_own_marker_is_kept():
    ran("own")
    assert sum(1 for line in open(LOG) if line == "own\\n") == 2
'''


def run_pytest(tmp_path: Path, registry: str, files: dict[str, str], *args: str,
               env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """A real pytest process with the plugin, pytest-rerunfailures and pytest-timeout in a
    throw-away repository; (the process, its xunit1 JUnit report). $ATTEMPT_LOG is a file."""
    (tmp_path / "registry.yaml").write_text(registry)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    junit = tmp_path / "junit.xml"
    # not this suite's own xdist worker's variables: the inner pytest decides by them whether it is a worker
    outer = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    env = {**outer, "ATTEMPT_LOG": str(tmp_path / "attempts.log"), "PYTHONPATH": str(ROOT),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "CI_HARDWARE_OVERRIDE": "none", **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "-p", "pytest_rerunfailures", "-p", "pytest_timeout",
         "-p", "no:cacheprovider", "--junitxml", str(junit), "-o", "junit_family=xunit1", *args, "tests"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return proc, junit


def test_breakage_runs_once_and_a_real_flake_is_still_rerun(tmp_path: Path) -> None:
    proc, junit = run_pytest(tmp_path, REGISTRY, {"tests/test_seed.py": TESTS})
    log = tmp_path / "attempts.log"
    assert proc.returncode == 1, proc.stdout + proc.stderr
    counts: dict[str, int] = {}
    for line in log.read_text().splitlines():
        counts[line] = counts.get(line, 0) + 1
    assert counts == {"import_error": 1, "module_not_found": 1, "syntax_error": 1, "no_gpu": 1, "chained": 1,
                      "flaky": 3, "own": 2}, proc.stdout
    # pytest agrees: 5 failed once, the flake passed on its third attempt, the own marker on its second
    assert "5 failed, 2 passed, 3 rerun" in proc.stdout, proc.stdout[-2000:]

    report = parse_junit(junit, root=tmp_path)
    kinds = {case.name: [row.kind for row in case_rows(case)] for case in report.cases}
    assert kinds["test_import_error"] == ["broken"]
    assert kinds["test_module_not_found"] == ["broken"]
    assert kinds["test_syntax_error"] == ["broken"]
    assert kinds["test_no_gpu"] == ["broken"]
    assert kinds["test_flaky_assertion"] == ["fail", "fail", "pass"]


def test_the_plugin_imports_nothing_above_its_layer() -> None:
    """The plugin sits in 'ci top'; the classifier it now imports is in ci.history, below it. The
    architecture test checks every edge; this one pins the new edge and that it points down."""
    from tests.ci.test_architecture import LAYERS, layer_of, repository_graph

    edges = repository_graph().edges["ci/pytest_plugin.py"]
    targets = {e.target for e in edges}
    assert "ci/history/classify.py" in targets
    plugin = layer_of("ci/pytest_plugin.py")
    above = [t for t in targets if (layer_of(t) or 0) > plugin]
    assert above == [], [(t, LAYERS[layer_of(t)][0]) for t in above]


# --- every attempt's text in the JUnit (ci.pytest_attempts) -> the history ----------------------

ATTEMPT_REGISTRY = REGISTRY.replace("tests/test_seed.py", "tests/test_attempts.py").replace("reruns: 2", "reruns: 1")

ATTEMPT_TESTS = '''\
import os

import pytest

LOG = os.environ["ATTEMPT_LOG"]


def attempt(name):
    with open(LOG, "a") as f:
        f.write(name + "\\n")
    return sum(1 for line in open(LOG) if line == name + "\\n")


def test_flake():
    if attempt("flake") == 1:
        raise RuntimeError("NCCL timeout on rank 3")


def test_always():
    raise ValueError(["", "cache miss on warmup", "allocator out of memory"][attempt("always")])


@pytest.fixture
def device():
    if attempt("setup") == 1:
        raise OSError("setup could not reach the device")


def test_setup_flake(device):
    pass


def test_unprintable():
    if attempt("unprintable") == 1:
        # undecodable bytes only serially: xdist (execnet) cannot send a report holding them at all
        odd = "" if os.environ.get("PYTEST_XDIST_WORKER") else b"\\xff\\xfe".decode("utf-8", "surrogateescape")
        raise RuntimeError("bad \\x00\\x1b[31m" + odd + "y" * 1_000_000 + " end")
'''


def stored(location: str) -> dict[tuple[str, int], tuple[str, str, str, str, str]]:
    """{(test name, attempt): (outcome, kind, error, message, fingerprint)} as the store returns them."""
    with open_store(location, create=False) as store:
        rows = store.fetchall("SELECT n.node, c.attempt, c.outcome, c.kind, c.error, c.message, c.fingerprint "
                              "FROM cases c JOIN nodes n ON n.id = c.node_id")
    return {(node.rsplit("::", 1)[1], int(attempt)): (o, k, e, m, f) for node, attempt, o, k, e, m, f in rows}


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_retried_attempt_keeps_its_own_error_into_the_store(tmp_path: Path, store_location: str,
                                                              workers: str) -> None:
    proc, junit = run_pytest(tmp_path, ATTEMPT_REGISTRY, {"tests/test_attempts.py": ATTEMPT_TESTS},
                             "-p", "xdist", "-n", workers)
    assert "1 failed, 3 passed" in proc.stdout and " 4 rerun " in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    top = ET.parse(junit).getroot()  # the file stays well-formed XML whatever the messages held
    props = [{p.get("name"): p.get("value") for p in case.iter("property")}
             for case in top.iter("testcase") if case.get("name") == "test_unprintable"]
    assert [len(p) for p in props] == [3, 0]  # the retried attempt has them, the pass none
    for value in props[0].values():
        assert len(value) <= MAX_ATTEMPT_CHARS and "\x00" not in value and "\x1b" not in value
    assert "characters cut ...]" in props[0][ATTEMPT_TEXT] and props[0][ATTEMPT_TEXT].rstrip().endswith("RuntimeError")

    with open_store(store_location) as store:
        assert ingest(store, prepare(junit, IDENTITY, root=tmp_path)).added
    rows = stored(store_location)
    nccl = "RuntimeError: NCCL timeout on rank 3"
    assert rows[("test_flake", 0)] == ("failed", "fail", nccl, *reversed(signature(nccl)))
    assert rows[("test_flake", 1)] == ("passed", "pass", "", "", "")
    assert rows[("test_setup_flake", 0)][:3] == ("error", "fail", "OSError: setup could not reach the device")
    # every attempt failed, each with its own message: both kept, two signatures
    assert rows[("test_always", 0)][:3] == ("failed", "fail", "ValueError: cache miss on warmup")
    assert rows[("test_always", 1)][:3] == ("failed", "fail", "ValueError: allocator out of memory")
    assert rows[("test_always", 0)][4] != rows[("test_always", 1)][4] != ""
    outcome, kind, error, message, fingerprint = rows[("test_unprintable", 0)]
    assert (outcome, kind) == ("failed", "fail") and fingerprint
    odd = "#xDCFF#xDCFE" if workers == "0" else ""
    assert error.startswith(f"RuntimeError: bad #x00#x1B[31m{odd}yyy") and len(error) <= MAX_ATTEMPT_CHARS


def test_bounded_cuts_visibly_to_the_limit() -> None:
    for size in (4000, 4001, 4100, 10_000, 1_000_000):
        text = "a" * (size // 2) + "b" * (size - size // 2)
        out = bounded(text)
        assert len(out) == min(size, MAX_ATTEMPT_CHARS)
        if size > MAX_ATTEMPT_CHARS:
            marker = out[out.index("\n[... "):out.index(" ...]\n") + 6]
            assert out.startswith("a") and out.endswith("b")
            assert marker == f"\n[... {size - (MAX_ATTEMPT_CHARS - len(marker))} characters cut ...]\n"
    assert bounded("nul \x00 esc \x1b tab\t") == "nul #x00 esc #x1B tab\t"


CRASH_TESTS = '''\
import os


def test_crash():
    with open(os.environ["ATTEMPT_LOG"], "a") as f:
        f.write("crash\\n")
    if sum(1 for _ in open(os.environ["ATTEMPT_LOG"])) == 1:
        os._exit(1)  # the xdist worker dies mid-test


def test_fine():
    pass
'''


def test_a_crashed_workers_rerun_names_no_test_and_is_skipped(tmp_path: Path) -> None:
    """Real pytest-xdist + pytest-rerunfailures write a crashed worker's test's rerun as a bare
    ``<testcase time="0.000"/>``; it must not become a test named "" in the report."""
    registry = REGISTRY.replace("tests/test_seed.py", "tests/test_crash.py").replace("reruns: 2", "reruns: 1")
    proc, junit = run_pytest(tmp_path, registry, {"tests/test_crash.py": CRASH_TESTS}, "-p", "xdist", "-n", "1")
    assert "2 passed" in proc.stdout and " 1 rerun" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    bare = [case for case in ET.parse(junit).getroot().iter("testcase") if not case.attrib.get("name")]
    assert len(bare) == 1  # what pytest writes today; if this changes, the reader's rule needs a look
    report = parse_junit(junit, root=tmp_path)
    assert sorted(case.name for case in report.cases) == ["test_crash", "test_fine"]
    assert set(report.files) == {"tests/test_crash.py"}
