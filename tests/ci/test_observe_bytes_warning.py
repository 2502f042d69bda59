"""Recording must not change an outcome under ``python -bb``: the recorder's check for code it
already instrumented compared its string mark with every constant, so a recorded child started with
``-bb`` that ran code holding a bytes constant died of ``BytesWarning`` (click's
``test_path_dash_no_byteswarning`` failed observed and passed plain)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ci.observe.probe_cache import MARK, is_marked
from tests.ci.depmap_support import clean_env, write_project

REPO = Path(__file__).resolve().parents[2]

FILES = {
    "pkg/__init__.py": "",
    "pkg/raw.py": 'HEAD = b"\\x89PNG"\n\n\ndef is_png(data):\n    return data.startswith(HEAD)\n',
    "tests/test_raw.py": (
        "import subprocess\nimport sys\n\n\n"
        "def test_child_under_bb_runs_bytes_code():\n"
        "    program = 'import pkg.raw; assert pkg.raw.is_png(pkg.raw.HEAD); print(\"ok\")'\n"
        "    proc = subprocess.run([sys.executable, '-bb', '-c', program], capture_output=True, text=True)\n"
        "    assert (proc.returncode, proc.stdout, proc.stderr) == (0, 'ok\\n', '')\n"),
}


def test_is_marked_compares_only_strings_even_under_bb() -> None:
    program = ("import warnings; warnings.simplefilter('error', BytesWarning)\n"
               "from ci.observe.probe_cache import MARK, is_marked\n"
               "assert not is_marked((b'__slipcover__', 1, None))\n"
               "assert is_marked((b'x', MARK)) and is_marked((MARK,))\n"
               "print('ok')")
    proc = subprocess.run([sys.executable, "-bb", "-c", program], capture_output=True, text=True, cwd=REPO,
                          env={**clean_env(), "PYTHONPATH": str(REPO)})
    assert (proc.returncode, proc.stdout.strip()) == (0, "ok"), proc.stderr
    assert not is_marked(("__slipcover", "x")) and is_marked(("x", MARK))


def test_an_observed_child_started_with_bb_runs_code_with_bytes_constants(tmp_path: Path) -> None:
    root = tmp_path / "project"
    write_project(root, FILES)
    out = tmp_path / "facts.json"
    env = {**clean_env(), "PYTHONPATH": f"{REPO}{os.pathsep}{root}",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "ci", "observe", "--out", str(out), "--", sys.executable, "-m",
                           "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0",
                           "tests/test_raw.py"], cwd=root, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entry = json.loads(out.read_text())["tests"]["tests/test_raw.py"]
    assert (entry["complete"], entry["outcome"]) == (True, "passed")
    # the child was heard: is_png's body ran only there
    assert entry["executed"]["pkg/raw.py"] == "1,4-5"
