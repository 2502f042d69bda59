"""Create or refresh the project's virtual environment in ``.venv`` (standard library only).

Idempotent: the environment is reinstalled only when ``pyproject.toml`` or the interpreter
changed since the last successful run (a stamp file in ``.venv`` records both), so the README's
commands cost seconds the second time.

Usage: ``python3 ci/bootstrap.py [--force]``. Exit status 0 when ``.venv`` is ready.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
STAMP = VENV / ".bootstrap-stamp"
EXTRAS = "test"


def _venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def fingerprint(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """What an environment was built from: the project file, the interpreter and the extras."""
    digest = hashlib.sha256(pyproject.read_bytes())
    digest.update(f"{sys.version_info[:3]}|{EXTRAS}".encode())
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="reinstall even if the stamp matches")
    parser.add_argument("--check", action="store_true",
                        help="only report whether .venv is up to date (exit 1 if not); change nothing")
    args = parser.parse_args(argv)

    current = fingerprint()
    up_to_date = _venv_python().exists() and STAMP.exists() and STAMP.read_text().strip() == current
    if args.check:
        print("bootstrap: .venv is up to date" if up_to_date else "bootstrap: .venv needs a bootstrap")
        return 0 if up_to_date else 1

    start = time.monotonic()
    if not _venv_python().exists():
        print(f"bootstrap: creating {VENV.relative_to(ROOT)}/ with {sys.executable}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)

    if up_to_date and not args.force:
        print("bootstrap: .venv is up to date", flush=True)
        return 0

    print(f"bootstrap: installing the project and its [{EXTRAS}] extras into .venv", flush=True)
    STAMP.unlink(missing_ok=True)
    cmd = [str(_venv_python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "-e", f".[{EXTRAS}]"]
    result = subprocess.run(cmd, cwd=ROOT)
    if result.returncode != 0:
        print(f"bootstrap: failed (exit {result.returncode}): {' '.join(cmd)}", file=sys.stderr)
        return result.returncode
    STAMP.write_text(current + "\n")
    print(f"bootstrap: ready in {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
