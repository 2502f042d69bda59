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

Then ``.venv-py312`` (`ci.py312_env`), the small CPython 3.12 environment the recorder's 3.12
tests run in, from pyenv's or PATH's 3.12; ``--no-py312`` leaves it out (the GPU jobs run no such
test).

``--venv-cache DIR`` (the self-hosted GPU jobs, whose checkout deletes ``.venv`` before every job)
keeps the environment outside the checkout, in ``DIR/<key>``, and makes ``.venv`` a link to it. The
key (`cache_key`) hashes everything that decides the content: the interpreter, the project
fingerprint (``pyproject.toml``, extras, constraints, so the torch spec), the checkout's path (the
editable install points there) and pip's index settings (where the CUDA build comes from). A
matching complete environment is reused without running pip; any other is deleted and built
again. All of it happens under an exclusive ``flock`` on ``DIR/<key>.lock``, so two jobs on one
host never build or read it at once, and the stamp is written last, so an install killed midway
(its lock released by its death) is never reused.

Usage: ``python3 ci/bootstrap.py [--force | --check] [--no-browser] [--no-py312] [--venv-cache DIR]``. Exit
status 0 when ``.venv`` and the browser (unless left out) are ready; ``--check`` changes nothing,
prints the decision and its reason, and exits 1 unless both are; 2 for bad arguments.
The root is this file's parent directory: bootstrap runs before anything is installed.
"""

from __future__ import annotations

import argparse
import enum
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import venv
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

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
STAMP_NAME = ".bootstrap-stamp"
# Where pip finds the torch build: part of a cached environment's key.
PIP_SOURCES = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS")
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


def cache_key(current: Stamp, root: Path, environ: dict[str, str]) -> str:
    """The name of the cached environment for this interpreter, project, checkout and pip sources."""
    parts = [current.interpreter.path, current.interpreter.version, current.project or "", str(root),
             *(f"{name}={environ.get(name, '')}" for name in PIP_SOURCES)]
    return "venv-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def _venv_python(venv_dir: Path) -> Path:
    return venv_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _read_stamp(venv_dir: Path) -> Stamp | None:
    try:
        return Stamp.from_text(read_regular(venv_dir / STAMP_NAME, MAX_CONFIG_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def _create(venv_dir: Path, clear: bool) -> None:
    """Make ``venv_dir`` with this interpreter; ``clear`` empties an existing one first."""
    if clear and venv_dir.exists() and not (venv_dir / "pyvenv.cfg").is_file() and any(venv_dir.iterdir()):
        raise RuntimeError(f"{venv_dir} has no pyvenv.cfg, so it is not a virtual environment; "
                           f"refusing to delete it (remove it yourself)")
    venv.EnvBuilder(with_pip=True, clear=clear).create(venv_dir)


def _decide_for(venv_dir: Path, current: Stamp, force: bool) -> Decision:
    exists = venv_dir.exists()
    return decide(_read_stamp(venv_dir) if exists else None, current, venv_exists=exists,
                  venv_python_exists=_venv_python(venv_dir).exists(), force=force)


def _build(venv_dir: Path, current: Stamp, decision: Decision) -> int:
    """Carry out ``decision`` on ``venv_dir`` (create it if asked, install, stamp); the exit status."""
    start = time.monotonic()
    print(f"bootstrap: {decision.action.value}: {decision.reason}", flush=True)
    if decision.action in (Action.CREATE, Action.RECREATE):
        print(f"bootstrap: creating {venv_dir.name}/ with {current.interpreter.describe()}", flush=True)
        try:
            _create(venv_dir, clear=decision.action is Action.RECREATE)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            print(f"bootstrap: cannot create {venv_dir}: {exc}", file=sys.stderr)
            return 1
    stamp = venv_dir / STAMP_NAME
    atomic_write_text(stamp, Stamp(current.interpreter, None).to_text())  # this interpreter, not installed yet

    print(f"bootstrap: installing the project and its [{EXTRAS}] extras into {venv_dir.name}/", flush=True)
    cmd = [str(_venv_python(venv_dir)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "-e", f".[{EXTRAS}]", *(["-c", str(CONSTRAINTS)] if CONSTRAINTS.is_file() else [])]
    result = subprocess.run(cmd, cwd=ROOT)
    if result.returncode != 0:
        print(f"bootstrap: failed (exit {result.returncode}): {' '.join(cmd)}", file=sys.stderr)
        return result.returncode
    atomic_write_text(stamp, current.to_text())
    print(f"bootstrap: {venv_dir.name} ready in {time.monotonic() - start:.0f} s", flush=True)
    return 0


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created if missing); the kernel drops it when
    the holder dies, so a killed build never blocks the next one."""
    import fcntl  # POSIX only, like the self-hosted runners that use --venv-cache

    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _cached(cache: Path, current: Stamp, check: bool) -> int:
    """``--venv-cache``: reuse or rebuild ``cache/<key>`` under its lock, then link ``.venv`` to it."""
    target = cache / cache_key(current, ROOT, dict(os.environ))
    if VENV.exists() and not VENV.is_symlink():
        print(f"bootstrap: {VENV} is a directory, not the link --venv-cache makes; remove it and run again",
              file=sys.stderr)
        return 2
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with _exclusive(cache / f"{target.name}.lock"):
            decision = _decide_for(target, current, force=False)
            if check:
                linked = VENV.resolve() == target.resolve()
                ok = decision.action is Action.NOTHING and linked
                print(f"bootstrap: {target}: " + ("up to date, .venv links to it" if ok else
                      decision.reason if decision.action is not Action.NOTHING else ".venv does not link to it"))
                return 0 if ok else 1
            if decision.action is Action.NOTHING:
                print(f"bootstrap: reusing {target}: {decision.reason}", flush=True)
            else:
                reason = decision.reason
                if target.exists():  # half built (killed midway) or unreadable: never reused, never repaired
                    shutil.rmtree(target)
                    reason += f"; deleted the unfinished {target.name}"
                status = _build(target, current, Decision(Action.CREATE, reason))
                if status:
                    return status
        link = VENV.with_name(f".venv.{os.getpid()}.tmp")
        link.unlink(missing_ok=True)
        link.symlink_to(target, target_is_directory=True)
        os.replace(link, VENV)
    except OSError as exc:
        print(f"bootstrap: cannot use --venv-cache {cache}: {exc}", file=sys.stderr)
        return 1
    print(f"bootstrap: .venv -> {target}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true", help="reinstall even if the stamp matches")
    mode.add_argument("--check", action="store_true",
                      help="only report what a bootstrap would do and why (exit 1 unless up to date)")
    parser.add_argument("--no-browser", action="store_true",
                        help="leave the browser out (machines that run no browser test, e.g. GPU jobs)")
    parser.add_argument("--no-py312", action="store_true",
                        help="leave out .venv-py312, the CPython 3.12 environment of the recorder's 3.12 tests "
                             "(machines that run no such test, e.g. GPU jobs)")
    parser.add_argument("--venv-cache", metavar="DIR", type=Path,
                        help="keep the environment in DIR/<key>, outside the checkout, and link .venv to it "
                             "(self-hosted runners, whose checkout deletes .venv)")
    args = parser.parse_args(argv)
    if args.venv_cache is not None and (args.force or not args.venv_cache.is_absolute()):
        parser.error(f"--venv-cache {args.venv_cache}: " + (
            "--force would rebuild an environment other jobs may be using; delete its folder instead"
            if args.force else "give an absolute folder"))

    current = Stamp(current_interpreter(), project_fingerprint(ROOT / "pyproject.toml", constraints=CONSTRAINTS))
    if args.venv_cache is not None:
        status = _cached(args.venv_cache, current, args.check)
        return status or (0 if args.check else _provision_extras(args))
    decision = _decide_for(VENV, current, args.force)
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
        return _provision_extras(args)
    return _build(VENV, current, decision) or _provision_extras(args)


LEFT_OUT = ("browser: left out (--no-browser): the HUD's browser tests need one; "
            "run `python3 ci/bootstrap.py` without it to add one")


def _provision_extras(args: argparse.Namespace) -> int:
    """What the test suite needs beside .venv, each unless its flag leaves it out."""
    return (0 if args.no_py312 else _provision_py312()) or _provision_browser(args.no_browser)


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
