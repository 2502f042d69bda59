"""The second, small virtual environment ``.venv-py312``: CPython 3.12 with the CI half's packages
that the recorder's ``sysmon`` core needs (standard library only; `ci.bootstrap` calls `ensure`).

The recorder measures with coverage.py's ``sys.monitoring`` core on CPython 3.12+
(docs/depmaps.md), and ``tests/ci/test_observe_sysmon.py`` runs pytest under this environment to
test it on a real 3.12 wherever the suite runs. Only what the recorder and the pytest plugin
import goes in (`PACKAGES`), pinned by the same constraints file as ``.venv``.

Contract: `find_python312` returns a CPython 3.12 executable (``$CI_PYTHON312``, else the
newest ``3.12.*`` under pyenv's root, ``$PYENV_ROOT`` or ``~/.pyenv``, else ``python3.12`` on
``PATH``; each but the first only if it runs as CPython 3.12), or None. `ensure` makes ``.venv-py312`` (or remakes it when its stamp, the
interpreter and what was installed, differs) and returns None when it is ready, else one line
naming the problem and what to do.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

DIRNAME = ".venv-py312"
PYTHON_ENV = "CI_PYTHON312"
PACKAGES = ("pytest", "pyyaml", "coverage", "requests")  # what the recorder and ci.pytest_plugin import


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", name))


def _is_312(python: str) -> bool:
    """Whether ``python`` runs and is CPython 3.12 (a pyenv shim on PATH may name one it cannot run)."""
    try:
        proc = subprocess.run([python, "-c", "import sys; print(sys.implementation.name, *sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=30)
    except OSError:
        return False
    return proc.returncode == 0 and proc.stdout.split() == ["cpython", "3", "12"]


def find_python312(environ: dict[str, str] | None = None) -> str | None:
    """See the module docstring."""
    env = os.environ if environ is None else environ
    if env.get(PYTHON_ENV):
        return env[PYTHON_ENV]
    root = Path(env.get("PYENV_ROOT") or Path.home() / ".pyenv")
    versions = sorted((p for p in (root / "versions").glob("3.12.*") if re.fullmatch(r"3\.12\.\d+", p.name)),
                      key=lambda p: _version_key(p.name), reverse=True)
    candidates = [str(v / "bin" / "python3.12") for v in versions] + [shutil.which("python3.12", path=env.get("PATH"))]
    return next((c for c in candidates if c and _is_312(c)), None)


def _stamp(python: str, constraints: Path) -> str:
    digest = hashlib.sha256(constraints.read_bytes() if constraints.is_file() else b"").hexdigest()
    return json.dumps({"python": os.path.realpath(python), "packages": list(PACKAGES), "constraints": digest})


def _ready(venv_dir: Path, stamp: str) -> bool:
    stamp_file = venv_dir / ".bootstrap-stamp"
    return stamp_file.is_file() and stamp_file.read_text(encoding="utf-8") == stamp \
        and (venv_dir / "bin" / "python").exists()


def is_ready(root: Path, constraints: Path) -> bool:
    """Whether `ensure` would find ``.venv-py312`` up to date and do nothing."""
    python = find_python312()
    return python is not None and _ready(root / DIRNAME, _stamp(python, constraints))


def ensure(root: Path, constraints: Path) -> str | None:
    """See the module docstring."""
    python = find_python312()
    if python is None:
        return (f"no CPython 3.12 found for {DIRNAME}/ (the sysmon recorder's tests): install one "
                f"(`pyenv install 3.12`) or name it in ${PYTHON_ENV}")
    venv_dir, stamp = root / DIRNAME, _stamp(python, constraints)
    stamp_file = venv_dir / ".bootstrap-stamp"
    if _ready(venv_dir, stamp):
        return None
    made = subprocess.run([python, "-m", "venv", "--clear", str(venv_dir)], capture_output=True, text=True)
    if made.returncode != 0:
        return f"{python} -m venv {venv_dir} failed (exit {made.returncode}): {made.stderr.strip()[-300:]}"
    cmd = [str(venv_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           *PACKAGES, *(["-c", str(constraints)] if constraints.is_file() else [])]
    installed = subprocess.run(cmd, capture_output=True, text=True)
    if installed.returncode != 0:
        return f"installing into {DIRNAME}/ failed (exit {installed.returncode}): {installed.stderr.strip()[-300:]}"
    stamp_file.write_text(stamp, encoding="utf-8")
    return None
