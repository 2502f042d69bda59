"""Where the headless Chromium (or Chrome) for the HUD's browser tests and screenshots lives.

Standard library only: `ci/bootstrap.py` imports it before anything is installed, and
`ci.report.browser` uses the same answer, so the browser bootstrap found is the one the tests start.

Order: ``$CHROMIUM`` when set (taken as given: a wrong value is reported by whoever starts it),
else the first of `BROWSER_NAMES` on ``PATH``, else the first executable of the platform's usual
install locations (`INSTALL_LOCATIONS`): macOS keeps Chrome inside an app bundle that is never on
``PATH``, and a Debian install lands in ``/usr/bin`` even where a job's ``PATH`` leaves it out.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence

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
