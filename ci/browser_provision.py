"""Find or install the headless browser the test suite needs (standard library only; used by
`ci/bootstrap.py` before anything is installed).

`ensure_browser` returns a `BrowserOutcome`: the browser's path, or one line that says exactly
what to run. It finds one where `ci.browser_locate.find_browser` does, and takes it only if
`ci.browser_locate.browser_problem` finds it is one; otherwise, on Linux with ``/usr/bin/apt-get``,
it installs Debian's ``chromium`` as root, or through ``/usr/bin/sudo -n`` where sudo needs no
password. It never asks for a password and never guesses another package manager: anything else
ends in the line naming the command for a person to run. The command is announced through ``say``
exactly as it runs, before it runs (the install takes about half a minute).

What runs as root is named by absolute system path (`APT_GET`, `SUDO`, `ENV`), never looked up on
the caller's ``PATH``, and gets `ROOT_ENV` and nothing else of the caller's environment (no
``LD_PRELOAD``, no ``PYTHONPATH``): ``env -i`` sets it again after sudo, which keeps what its
sudoers let through.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

if __package__:
    from ci.browser_locate import SYSTEM_PATH, browser_problem, find_browser, is_executable
else:  # imported by ``python3 ci/bootstrap.py``: ci/ itself is sys.path[0]
    from browser_locate import SYSTEM_PATH, browser_problem, find_browser, is_executable

PACKAGE = "chromium"
INSTALL_TIMEOUT_S = 900.0
LOCK_WAIT_S = 300  # how long apt waits for dpkg's lock; within INSTALL_TIMEOUT_S
AGAIN = "then run `python3 ci/bootstrap.py` again"
APT_GET = "/usr/bin/apt-get"
SUDO = "/usr/bin/sudo"
ENV = "/usr/bin/env"
ROOT_ENV = {"PATH": SYSTEM_PATH, "DEBIAN_FRONTEND": "noninteractive"}


@dataclass(frozen=True)
class BrowserOutcome:
    """``path``: the browser to start, or None; then ``error`` is one line naming what to run."""

    path: str | None
    error: str | None = None
    installed: bool = False


def _fail(line: str) -> BrowserOutcome:
    return BrowserOutcome(None, line)


def _executable(path: str, search: str) -> str | None:
    """``path`` if it is an executable file, else the command named ``path`` on ``search`` (a PATH)."""
    return path if is_executable(path) else shutil.which(path, path=search)


def _checked(found: str, search: str, explicit: bool) -> BrowserOutcome:
    """``found`` if it is a browser, else the line naming it (``$CHROMIUM`` when it came from there)."""
    where = f"CHROMIUM={found}" if explicit else found
    fix = "point it at a Chromium or Chrome, or unset it" if explicit else "set CHROMIUM=/path/to/a/chrome"
    path = _executable(found, search)
    if path is None:
        return _fail(f"{where} is not an executable file: {fix}, {AGAIN}")
    problem = browser_problem(path)
    return _fail(f"{where} is not a Chromium or Chrome ({problem}): {fix}, {AGAIN}") if problem else \
        BrowserOutcome(found)


def _privilege(euid: int) -> list[str] | None:
    """The prefix that makes apt-get run as root: none for root, ``sudo -n`` where `SUDO` needs no
    password, None where neither works."""
    if euid == 0:
        return []
    if not is_executable(SUDO):
        return None
    try:
        probe = subprocess.run([SUDO, "-n", "true"], env=ROOT_ENV, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [SUDO, "-n"] if probe.returncode == 0 else None


def locate_browser(env: Mapping[str, str] | None = None,
                   locations: Sequence[str] | None = None) -> BrowserOutcome | None:
    """None where `find_browser` finds nothing; else its answer, refused (``error`` set) unless
    `browser_problem` finds it is a Chromium or Chrome. Arguments as `ensure_browser`'s."""
    env = os.environ if env is None else env
    found = find_browser(env, locations)
    if found is None:
        return None
    return _checked(found, env.get("PATH", os.defpath), explicit=bool(env.get("CHROMIUM")))


def ensure_browser(say: Callable[[str], None], *, env: Mapping[str, str] | None = None,
                   locations: Sequence[str] | None = None, platform: str = sys.platform,
                   euid: int | None = None, timeout_s: float = INSTALL_TIMEOUT_S) -> BrowserOutcome:
    """Find the browser, or install Debian's chromium where this process may; see the module doc.
    ``env`` (default ``os.environ``) supplies ``PATH`` and ``CHROMIUM`` for the search only;
    ``locations``, ``platform`` and ``euid`` default to this machine's."""
    env = dict(os.environ if env is None else env)
    outcome = locate_browser(env, locations)
    if outcome is not None:
        if outcome.path is not None:
            say(f"browser: {outcome.path}")
        return outcome

    manual = f"install Chromium or Google Chrome, or set CHROMIUM=/path/to/it, {AGAIN}"
    if not platform.startswith("linux"):
        return _fail(f"no Chromium or Chrome found (the HUD's browser tests need one): {manual}")
    if not is_executable(APT_GET):
        return _fail(f"no Chromium or Chrome found and no {APT_GET} to install one: {manual}")
    if not is_executable(ENV):
        return _fail(f"no Chromium or Chrome found and no {ENV} to run {APT_GET} in a clean environment: {manual}")
    prefix = _privilege(os.geteuid() if euid is None else euid)
    if prefix is None:
        return _fail(f"no Chromium or Chrome found, and installing one needs root: run "
                     f"`sudo apt-get install -y {PACKAGE}`, {AGAIN}")

    clean = [ENV, "-i", *(f"{name}={value}" for name, value in ROOT_ENV.items())]
    # a fresh machine's unattended-upgrades, or a second bootstrap, may hold dpkg's lock for a while:
    # wait for it (apt 1.9+; older apt ignores the option) instead of failing at once
    wait = ["-o", f"DPkg::Lock::Timeout={LOCK_WAIT_S}"]
    steps = (["update", "-qq"], ["install", "-y", "-qq", PACKAGE])
    commands = [[*prefix, *clean, APT_GET, *wait, *step] for step in steps]
    say(f"browser: none found; installing Debian's {PACKAGE} with "
        f"`{' && '.join(shlex.join(command) for command in commands)}` (about 30 s)")
    for step, command in zip(steps, commands):
        shown = " ".join(["apt-get", *step])
        try:
            result = subprocess.run(command, env=ROOT_ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return _fail(f"`{shown}` did not finish in {timeout_s:.0f} s; run "
                         f"`sudo apt-get install -y {PACKAGE}` yourself, {AGAIN}")
        except OSError as exc:
            return _fail(f"cannot run `{shown}` ({exc.strerror}); run `sudo apt-get install -y {PACKAGE}` "
                         f"yourself, {AGAIN}")
        if result.returncode != 0:
            return _fail(f"`{shown}` failed (exit {result.returncode}); run `sudo apt-get install -y {PACKAGE}` "
                         f"yourself (or set CHROMIUM=/path/to/a/chrome), {AGAIN}")
    outcome = locate_browser(env, locations)
    if outcome is None:
        return _fail(f"apt-get installed {PACKAGE} but no browser is on PATH or in the usual places: "
                     f"set CHROMIUM=/path/to/it, {AGAIN}")
    if outcome.path is None:
        return outcome
    say(f"browser: installed {outcome.path}")
    return BrowserOutcome(outcome.path, installed=True)
