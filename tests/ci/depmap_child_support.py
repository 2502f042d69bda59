"""The small recorded project and the child interpreters the tests of a recording's subprocesses
share (`tests/ci/test_depmap_child.py`, `tests/ci/test_depmap_kill_guard.py`): a repository with
one module, a parts directory, and the recorder's start-up hook installed in this interpreter."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ci.observe.startup import install

REPO = Path(__file__).resolve().parents[2]
WORK = "def work(n):\n    total = 0\n    for i in range(n):\n        total += i\n    return total\n\n\ndef idle():\n    return 0\n"


def project(tmp_path: Path) -> tuple[Path, Path]:
    """A repository with one module, an empty parts directory, and the hook installed where a
    recording installs it: this interpreter's site-packages, beside coverage.py's own hook."""
    root, parts = tmp_path / "repo", tmp_path / "parts"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "work.py").write_text(WORK)
    parts.mkdir()
    assert install() is not None
    return root, parts


def coverage_ini(tmp_path: Path, root: Path, parts: Path) -> Path:
    """A coverage.py configuration measuring ``root`` into ``parts`` (its own subprocess hook)."""
    ini = tmp_path / "cov.ini"
    ini.write_text(f"[run]\ndata_file = {parts / 'cov'}\nparallel = True\ncontext = tests/test_x.py\n"
                   f"include =\n    {root}/*\n")
    return ini


def child_env(root: Path, parts: Path, **extra: str) -> dict[str, str]:
    """This environment without any recording's variables, plus one naming ``parts``, ``root`` and
    the test ``tests/test_x.py``; ``extra`` on top (``CI_DEPMAP_CHILD_CORE="slipcover"`` starts
    the recorder's hook)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CI_DEPMAP", "COVERAGE_"))}
    env.update(PYTHONPATH=f"{root}{os.pathsep}{REPO}", CI_DEPMAP_PARTS=str(parts), CI_DEPMAP_ROOT=str(root),
               CI_DEPMAP_TEST="tests/test_x.py", **extra)
    return env


def child_argv(body: str) -> list[str]:
    """The command line of a Python child running ``body``."""
    # start-up reads site-packages (both hooks, in name order); reading it once more, as where a
    # venv's lib64 links to its lib, must not start a second recording
    return [sys.executable, "-c", f"import site, sysconfig; site.addsitedir(sysconfig.get_paths()['purelib'])\n{body}"]


def recorded_lines(parts: Path) -> dict[str, dict[str, list[int]]]:
    """context -> file name -> lines, from every child's log in ``parts``."""
    found: dict[str, dict[str, list[int]]] = {}
    for part in parts.glob("clines.*.jsonl"):
        for record in part.read_text().splitlines():
            for context, files in json.loads(record).items():
                for path, lines in files.items():  # a line twice would be a second recording
                    found.setdefault(context, {}).setdefault(os.path.basename(path), []).extend(lines)
    return {c: {f: sorted(lines) for f, lines in files.items()} for c, files in found.items()}
