"""Where the headless Chromium (or Chrome) for the HUD's browser tests and screenshots lives.

Standard library only: `ci/bootstrap.py` imports it before anything is installed, and
`ci.report.browser` uses the same answer, so the browser bootstrap found is the one the tests start.

Order: ``$CHROMIUM`` when set (taken as given: a wrong value is reported by whoever starts it),
else the first of `BROWSER_NAMES` on ``PATH``, else the first executable of the platform's usual
install locations (`INSTALL_LOCATIONS`): macOS keeps Chrome inside an app bundle that is never on
``PATH``, and a Debian install lands in ``/usr/bin`` even where a job's ``PATH`` leaves it out.

Whatever is found is only a candidate: `browser_problem` runs it with ``--version`` and requires an
answer that names Chromium or Chrome, so ``CHROMIUM=/bin/sh`` is refused, not started.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

# The environment of anything run on the caller's behalf that must not inherit the caller's
# LD_PRELOAD, PYTHONPATH or PATH: the system directories and nothing else.
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
VERSION_TIMEOUT_S = 30.0
_VERSION = re.compile(r"(?:Chromium|Google Chrome)(?: for Testing)? \d+\.\d+")

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

INSTALL_LOCATIONS: dict[str, tuple[str, ...]] = {
    "linux": ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome",
              "/usr/bin/google-chrome-stable", "/opt/google/chrome/chrome", "/snap/bin/chromium"),
    "darwin": ("/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
               "/Applications/Chromium.app/Contents/MacOS/Chromium"),
}


def default_locations(platform: str = sys.platform) -> tuple[str, ...]:
    """The usual install locations on ``platform`` (a ``sys.platform`` value); empty if unknown."""
    return next((paths for prefix, paths in INSTALL_LOCATIONS.items() if platform.startswith(prefix)), ())


def is_executable(path: str) -> bool:
    """``path`` is a file this process may execute."""
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_browser(env: Mapping[str, str] | None = None, locations: Sequence[str] | None = None) -> str | None:
    """The browser to start, or None. ``env`` defaults to ``os.environ`` (its ``CHROMIUM`` and
    ``PATH`` are read), ``locations`` to `default_locations()`."""
    env = os.environ if env is None else env
    explicit = env.get("CHROMIUM")
    if explicit:
        return explicit
    path = env.get("PATH", os.defpath)
    on_path = next((found for name in BROWSER_NAMES if (found := shutil.which(name, path=path))), None)
    if on_path:
        return on_path
    return next((p for p in (default_locations() if locations is None else locations) if is_executable(p)), None)


def browser_problem(path: str, timeout_s: float = VERSION_TIMEOUT_S) -> str | None:
    """None when ``path`` (an executable's path) answers ``--version`` within ``timeout_s``, run with
    only `SYSTEM_PATH` in its environment, with a line that starts ``Chromium 1xx.`` or ``Google
    Chrome 1xx.``; otherwise what it did instead, for a message (``printed 'sh: 0: Illegal option'``)."""
    try:
        run = subprocess.run([path, "--version"], env={"PATH": SYSTEM_PATH}, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"`{path} --version` did not finish in {timeout_s:.0f} s"
    except OSError as exc:
        return f"`{path} --version` cannot be run ({exc.strerror or exc})"
    lines = run.stdout.decode("utf-8", "replace").splitlines()
    if any(_VERSION.match(line.strip()) for line in lines):
        return None
    said = next((line.strip() for line in lines if line.strip()), "")
    return f"`{path} --version` printed {said[:80]!r}, not a Chromium or Chrome version"
