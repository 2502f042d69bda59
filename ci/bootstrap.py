"""Create or refresh the project's virtual environment in ``.venv`` (standard library only).

A stamp in ``.venv`` records what the environment was built from: the interpreter (its resolved
path and full ``sys.version``) and a hash of ``pyproject.toml`` with the extras. `decide` compares
it with the present and picks one action:

- no ``.venv``: create it with this interpreter, then install;
- ``.venv`` made by another interpreter (a different path or version), no readable stamp, or no
  working python in it: delete and recreate it with this interpreter, then install. Installing
  into the old one is no fix: its python, site-packages and compiled wheels belong to the old
  interpreter;
- the same interpreter, but ``pyproject.toml`` or the extras changed, the last install did not
  finish, or ``--force``: install into the existing ``.venv``;
- otherwise nothing, so the README's commands cost a fraction of a second the second time.

Then the one thing the test suite needs outside Python, a headless Chromium or Chrome for the
HUD's browser tests: found where `ci.browser_locate` looks (and refused unless its ``--version``
names Chromium or Chrome), or installed (Debian's ``chromium`` through ``/usr/bin/apt-get``, as
root or with ``/usr/bin/sudo -n``, in a clean environment) by `ci.browser_provision`; where neither
works, bootstrap exits 1 with one line naming the command to run. ``--no-browser`` leaves the
browser out (neither looked for nor installed, so nothing runs as root): for machines that run no
browser test, such as the GPU jobs.

Usage: ``python3 ci/bootstrap.py [--force | --check] [--no-browser]``. Exit status 0 when ``.venv``
and the browser (unless left out) are ready; ``--check`` changes nothing, prints the decision and
its reason, and exits 1 unless both are.
The root is this file's parent directory: bootstrap runs before anything is installed.
"""

from __future__ import annotations

import argparse
import enum
import hashlib
import json
import os
import subprocess
import sys
import time
import venv
from dataclasses import dataclass
from pathlib import Path

if __package__:
    from ci.atomic_write import atomic_write_text
    from ci.browser_provision import ensure_browser, locate_browser
    from ci.py312_env import ensure as ensure_py312, is_ready as py312_ready
    from ci.regular_file import MAX_CONFIG_BYTES, read_regular
else:  # run as ``python3 ci/bootstrap.py``: ci/ itself is sys.path[0]
    from atomic_write import atomic_write_text
    from browser_provision import ensure_browser, locate_browser
    from py312_env import ensure as ensure_py312, is_ready as py312_ready
    from regular_file import MAX_CONFIG_BYTES, read_regular

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
STAMP = VENV / ".bootstrap-stamp"
EXTRAS = "fp4kv,test"
CONSTRAINTS = ROOT / "ci" / "constraints.txt"  # optional: pins of this repository's own environment


@dataclass(frozen=True)
class Interpreter:
    """``path``: the resolved executable a venv is made from; ``version``: its ``sys.version``."""

    path: str
    version: str

    def describe(self) -> str:
        return f"{self.path} ({(self.version.split() or ['unknown version'])[0]})"


@dataclass(frozen=True)
class Stamp:
    """What ``.venv`` was built from; ``project`` is None until an install has succeeded."""

    interpreter: Interpreter
    project: str | None

    def to_text(self) -> str:
        return json.dumps({"interpreter": {"path": self.interpreter.path, "version": self.interpreter.version},
                           "project": self.project}, indent=1) + "\n"

    @classmethod
    def from_text(cls, text: str) -> Stamp | None:
        """The stamp, or None for anything unreadable (including an older bootstrap's format)."""
        try:
            data = json.loads(text)
            interp, project = data["interpreter"], data["project"]
            stamp = cls(Interpreter(interp["path"], interp["version"]), project)
        except (ValueError, TypeError, KeyError):
            return None
        fields = (stamp.interpreter.path, stamp.interpreter.version)
        if not all(isinstance(f, str) for f in fields) or not isinstance(project, (str, type(None))):
            return None
        return stamp


class Action(enum.Enum):
    NOTHING = "up to date"
    INSTALL = "install into the existing .venv"
    CREATE = "create .venv"
    RECREATE = "delete and recreate .venv"


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str


def decide(recorded: Stamp | None, current: Stamp, *, venv_exists: bool, venv_python_exists: bool,
           force: bool = False) -> Decision:
    """What to do with ``.venv``, given its stamp (``recorded``) and the present (``current``)."""
    if not venv_exists:
        return Decision(Action.CREATE, "there is no .venv yet")
    if not venv_python_exists:
        return Decision(Action.RECREATE, ".venv has no working python")
    if recorded is None:
        return Decision(Action.RECREATE, "no readable stamp says which interpreter made .venv")
    if recorded.interpreter != current.interpreter:
        return Decision(Action.RECREATE, f"the interpreter changed: .venv was made by "
                                         f"{recorded.interpreter.describe()}, this is {current.interpreter.describe()}")
    if force:
        return Decision(Action.INSTALL, "--force")
    if recorded.project is None:
        return Decision(Action.INSTALL, "the last install did not finish")
    if recorded.project != current.project:
        return Decision(Action.INSTALL, f"pyproject.toml, the [{EXTRAS}] extras or {CONSTRAINTS.name} changed")
    return Decision(Action.NOTHING, "the stamp matches this interpreter and pyproject.toml")


def current_interpreter() -> Interpreter:
    """The interpreter a venv made now would use (``venv`` builds from ``sys._base_executable``)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    if not os.path.exists(base):  # run from inside a venv whose home has no plain ``python``
        base = os.path.join(os.path.dirname(base), "python{}.{}".format(*sys.version_info))
    return Interpreter(os.path.realpath(base), " ".join(sys.version.split()))


def project_fingerprint(pyproject: Path, extras: str = EXTRAS, constraints: Path | None = None) -> str:
    """sha256 of the project file, the extras installed and the constraints file (if any)."""
    digest = hashlib.sha256(read_regular(pyproject, MAX_CONFIG_BYTES))
    digest.update(f"|{extras}|".encode())
    if constraints is not None and constraints.is_file():
        digest.update(read_regular(constraints, MAX_CONFIG_BYTES))
    return digest.hexdigest()


def _venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _read_stamp() -> Stamp | None:
    try:
        return Stamp.from_text(read_regular(STAMP, MAX_CONFIG_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def _create(clear: bool) -> None:
    """Make ``.venv`` with this interpreter; ``clear`` empties an existing one first."""
    if clear and VENV.exists() and not (VENV / "pyvenv.cfg").is_file() and any(VENV.iterdir()):
        raise RuntimeError(f"{VENV} has no pyvenv.cfg, so it is not a virtual environment; "
                           f"refusing to delete it (remove it yourself)")
    venv.EnvBuilder(with_pip=True, clear=clear).create(VENV)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true", help="reinstall even if the stamp matches")
    mode.add_argument("--check", action="store_true",
                      help="only report what a bootstrap would do and why (exit 1 unless up to date)")
    parser.add_argument("--no-browser", action="store_true",
                        help="leave the browser out (machines that run no browser test, e.g. GPU jobs)")
    args = parser.parse_args(argv)

    current = Stamp(current_interpreter(), project_fingerprint(ROOT / "pyproject.toml", constraints=CONSTRAINTS))
    decision = decide(_read_stamp() if VENV.exists() else None, current, venv_exists=VENV.exists(),
                      venv_python_exists=_venv_python().exists(), force=args.force)
    if args.check:
        browser = None if args.no_browser else locate_browser()
        if decision.action is Action.NOTHING:
            print("bootstrap: .venv is up to date")
        else:
            print(f"bootstrap: .venv needs a bootstrap ({decision.action.value}): {decision.reason}")
        if args.no_browser:
            print(f"bootstrap: {LEFT_OUT}")
        else:
            print("bootstrap: browser: none found (a bootstrap installs one)" if browser is None else
                  f"bootstrap: browser: {browser.path or browser.error}")
        return 0 if decision.action is Action.NOTHING and (args.no_browser or browser and browser.path) else 1
    if decision.action is Action.NOTHING:
        print("bootstrap: .venv is up to date", flush=True)
        return _provision_py312() or _provision_browser(args.no_browser)

    start = time.monotonic()
    print(f"bootstrap: {decision.action.value}: {decision.reason}", flush=True)
    if decision.action in (Action.CREATE, Action.RECREATE):
        print(f"bootstrap: creating {VENV.name}/ with {current.interpreter.describe()}", flush=True)
        try:
            _create(clear=decision.action is Action.RECREATE)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            print(f"bootstrap: cannot create {VENV}: {exc}", file=sys.stderr)
            return 1
    atomic_write_text(STAMP, Stamp(current.interpreter, None).to_text())  # this interpreter, not installed yet

    print(f"bootstrap: installing the project and its [{EXTRAS}] extras into {VENV.name}/", flush=True)
    cmd = [str(_venv_python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "-e", f".[{EXTRAS}]", *(["-c", str(CONSTRAINTS)] if CONSTRAINTS.is_file() else [])]
    result = subprocess.run(cmd, cwd=ROOT)
    if result.returncode != 0:
        print(f"bootstrap: failed (exit {result.returncode}): {' '.join(cmd)}", file=sys.stderr)
        return result.returncode
    atomic_write_text(STAMP, current.to_text())
    print(f"bootstrap: .venv ready in {time.monotonic() - start:.0f} s", flush=True)
    return _provision_py312() or _provision_browser(args.no_browser)


LEFT_OUT = ("browser: left out (--no-browser): the HUD's browser tests need one; "
            "run `python3 ci/bootstrap.py` without it to add one")


def _provision_py312() -> int:
    """Make or refresh ``.venv-py312``, the small CPython 3.12 environment of the sysmon recorder's
    tests (`ci.py312_env`); 0 when ready, else 1 after the line that says what to do."""
    if py312_ready(ROOT, CONSTRAINTS):
        return 0
    start = time.monotonic()
    problem = ensure_py312(ROOT, CONSTRAINTS)
    if problem is not None:
        print(f"bootstrap: {problem}", file=sys.stderr, flush=True)
        return 1
    print(f"bootstrap: .venv-py312 ready in {time.monotonic() - start:.0f} s", flush=True)
    return 0


def _provision_browser(left_out: bool) -> int:
    """Find or install the browser (see the module doc); 0 when there is one, else 1 after the
    line that says what to run. ``left_out``: look for none, say so, 0."""
    if left_out:
        print(f"bootstrap: {LEFT_OUT}", flush=True)
        return 0
    outcome = ensure_browser(lambda line: print(f"bootstrap: {line}", flush=True))
    if outcome.path is None:
        print(f"bootstrap: {outcome.error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
