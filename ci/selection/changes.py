"""Which files changed: read from a file (one path per line) or from ``git diff`` against a base.

Paths come back repo-relative POSIX, de-duplicated, sorted. Errors raise `ChangesError` with the
reason (missing file, git's own stderr).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ci.regular_file import MAX_REPORT_BYTES, read_regular
from ci.registry import normalize_path


class ChangesError(RuntimeError):
    """The list of changed files could not be obtained."""


def read_changed_files(path: str | Path) -> list[str]:
    """One path per line; blank lines and ``#`` comments are ignored."""
    try:
        text = read_regular(path, MAX_REPORT_BYTES).decode("utf-8")
    except OSError as exc:
        raise ChangesError(f"cannot read changed-files list {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ChangesError(f"cannot read changed-files list {path}: not UTF-8 at byte offset {exc.start}") from exc
    lines = (line.strip() for line in text.splitlines())
    return sorted({normalize_path(line) for line in lines if line and not line.startswith("#")})


def git_changed_files(base: str, cwd: str | Path) -> list[str]:
    """``git diff --name-only BASE...HEAD`` in ``cwd`` (files changed on this branch since BASE),
    relative to ``cwd``: the registry's root may be a subfolder of the git repository (an
    adopter's ``app/``), and its paths are relative to it; changes outside it are left out."""
    # --no-renames: a file moved out of a depends_on folder must show its old path too.
    # core.quotepath=off: a non-ASCII path comes back as itself, not as a quoted octal escape.
    cmd = ["git", "-c", "core.quotepath=off", "diff", "--name-only", "--no-renames", "--relative", f"{base}...HEAD"]
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ChangesError(f"cannot run git: {exc}") from exc
    if proc.returncode != 0:
        detail = proc.stderr.strip() or f"exit status {proc.returncode}"
        raise ChangesError(
            f"`{' '.join(cmd)}` failed in {cwd}: {detail}\n"
            f"(is {base!r} fetched? in GitHub Actions use actions/checkout with fetch-depth: 0)")
    return sorted({normalize_path(line) for line in proc.stdout.splitlines() if line.strip()})
