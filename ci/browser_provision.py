"""Find or install the headless browser the test suite needs (standard library only; used by
`ci/bootstrap.py` before anything is installed).

`ensure_browser` returns a `BrowserOutcome`: the browser's path, or one line that says exactly
what to run. It finds one where `ci.browser_locate.find_browser` does; otherwise, on Linux with
``apt-get``, it installs Debian's ``chromium`` as root, or through ``sudo -n`` where sudo needs no
password. It never asks for a password and never guesses another package manager: anything else
ends in the line naming the command for a person to run. Each step is announced through ``say``
before it runs (the install takes about half a minute).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

if __package__:
    from ci.browser_locate import find_browser, is_executable
else:  # imported by ``python3 ci/bootstrap.py``: ci/ itself is sys.path[0]
    from browser_locate import find_browser, is_executable

PACKAGE = "chromium"
INSTALL_TIMEOUT_S = 900.0
LOCK_WAIT_S = 300  # how long apt waits for dpkg's lock; within INSTALL_TIMEOUT_S
AGAIN = "then run `python3 ci/bootstrap.py` again"


@dataclass(frozen=True)
class BrowserOutcome:
    """``path``: the browser to start, or None; then ``error`` is one line naming what to run."""

    path: str | None
    error: str | None = None
    installed: bool = False


def _fail(line: str) -> BrowserOutcome:
    return BrowserOutcome(None, line)


def _runnable(path: str, search: str) -> bool:
    """``path`` is an executable file, or a command name ``search`` (a PATH) resolves."""
    return is_executable(path) or shutil.which(path, path=search) is not None


def _privilege(euid: int, search: str) -> list[str] | None:
    """The prefix that makes apt-get run as root: none for root, ``sudo -n`` where sudo needs no
    password, None where neither works."""
    if euid == 0:
        return []
    sudo = shutil.which("sudo", path=search)
    if sudo is None:
        return None
    try:
        probe = subprocess.run([sudo, "-n", "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [sudo, "-n"] if probe.returncode == 0 else None


def ensure_browser(say: Callable[[str], None], *, env: Mapping[str, str] | None = None,
                   locations: Sequence[str] | None = None, platform: str = sys.platform,
                   euid: int | None = None, timeout_s: float = INSTALL_TIMEOUT_S) -> BrowserOutcome:
    """Find the browser, or install Debian's chromium where this process may; see the module doc.
    ``env`` (default ``os.environ``) supplies ``PATH`` and ``CHROMIUM`` for the search and the
    install; ``locations``, ``platform`` and ``euid`` default to this machine's."""
    env = dict(os.environ if env is None else env)
    search = env.get("PATH", os.defpath)
    found = find_browser(env, locations)
    if found is not None:
        if env.get("CHROMIUM") and not _runnable(found, search):
            return _fail(f"CHROMIUM={found} is not an executable file: point it at a Chromium or Chrome, "
                         f"or unset it, {AGAIN}")
        say(f"browser: {found}")
        return BrowserOutcome(found)

    manual = f"install Chromium or Google Chrome, or set CHROMIUM=/path/to/it, {AGAIN}"
    if not platform.startswith("linux"):
        return _fail(f"no Chromium or Chrome found (the HUD's browser tests need one): {manual}")
    apt = shutil.which("apt-get", path=search)
    if apt is None:
        return _fail(f"no Chromium or Chrome found and no apt-get to install one: {manual}")
    prefix = _privilege(os.geteuid() if euid is None else euid, search)
    if prefix is None:
        return _fail(f"no Chromium or Chrome found, and installing one needs root: run "
                     f"`sudo apt-get install -y {PACKAGE}`, {AGAIN}")

    env_tool = shutil.which("env", path=search) or "/usr/bin/env"
    noninteractive = [env_tool, "DEBIAN_FRONTEND=noninteractive"]  # survives sudo's reset environment
    # a fresh machine's unattended-upgrades, or a second bootstrap, may hold dpkg's lock for a while:
    # wait for it (apt 1.9+; older apt ignores the option) instead of failing at once
    wait = ["-o", f"DPkg::Lock::Timeout={LOCK_WAIT_S}"]
    steps = (["update", "-qq"], ["install", "-y", "-qq", PACKAGE])
    say(f"browser: none found; installing Debian's {PACKAGE} with "
        f"`{'sudo -n ' if prefix else ''}apt-get update && apt-get install -y {PACKAGE}` (about 30 s)")
    for step in steps:
        shown = " ".join(["apt-get", *step])
        try:
            result = subprocess.run([*prefix, *noninteractive, apt, *wait, *step], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
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
    found = find_browser(env, locations)
    if found is None:
        return _fail(f"apt-get installed {PACKAGE} but no browser is on PATH or in the usual places: "
                     f"set CHROMIUM=/path/to/it, {AGAIN}")
    say(f"browser: installed {found}")
    return BrowserOutcome(found, installed=True)
