"""The coverage.py config of a recording's Python subprocesses (``COVERAGE_PROCESS_START``).

Apart from `ci.observe.record` because `ci observe` writes it too, in a process that must not
import pytest (about 0.15 s of every observation's fixed cost).
"""

from __future__ import annotations

import os
from pathlib import Path

from ci.observe.files import TEST_ENV, RepoFiles

SUBPROCESS_PLUGIN = "ci.observe.coverage_child"


def write_child_config(parts: Path, files: RepoFiles, core: str) -> Path:
    """The coverage.py config (``COVERAGE_PROCESS_START``) of the subprocesses that the start-up hook
    of `ci.observe.startup` does not measure: contexts from `TEST_ENV`, data files in ``parts``."""
    config = parts / "coverage.ini"
    config.write_text("[run]\n" + "".join(f"{k} = {v}\n" for k, v in {
        "data_file": parts / "cov", "parallel": "True", "sigterm": "True",
        # sysmon where the child's interpreter has it (coverage falls back to ctrace, silenced, where not)
        "core": "ctrace" if core == "ctrace" else "sysmon", "disable_warnings": "no-sysmon",
        "context": "${" + TEST_ENV + "}", "plugins": SUBPROCESS_PLUGIN,
        "include": "\n    " + "\n    ".join(os.path.join(r, "*") for r in files.roots),
        "omit": "\n    " + "\n    ".join(p + "*" for p in files.excluded)}.items()), encoding="utf-8")
    return config
