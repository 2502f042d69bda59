"""Rename hints read the newest removal from history, and the pull request at a subject's end
(issue #32's mutation survivors), against a real git repository built here.

- A name removed, brought back and removed again is explained by the *last* removal: its commit,
  its pull request and the definition it added (`ci.imports.renames.find_renames`).
- A commit's pull request is the ``(#N)`` that ends its subject (GitHub's squash-merge suffix),
  nothing else: not an ``(#N)`` inside the subject, not ``#N`` without parentheses.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ci.imports.renames import _pr, find_renames
from tests.ci.tree_testutil import write

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def commit(root: Path, message: str, text: str) -> str:
    """Commit ``text`` as pkg/m.py; the new commit's short hash."""
    write(root, {"pkg/__init__.py": "", "pkg/m.py": text})
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "--short", "HEAD")


def test_a_name_removed_twice_is_explained_by_its_newest_removal(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    commit(tmp_path, "Add the module (#1)", "class Old:\n    pass\n")
    first = commit(tmp_path, "Rename Old to Mid (#2)", "class Mid:\n    pass\n")
    commit(tmp_path, "Bring Old back (#3)", "class Mid:\n    pass\n\n\nclass Old:\n    pass\n")
    last = commit(tmp_path, "Rename Old to New, after (#2) (#4)", "class Mid:\n    pass\n\n\nclass New:\n    pass\n")
    assert first != last
    found = find_renames(tmp_path, {("pkg/m.py", "Old")})
    rename = found[("pkg/m.py", "Old")]
    assert (rename.commit, rename.pr, rename.replacement) == (last, "4", "New")
    assert rename.describe() == f"renamed to New in {last} (#4)"


@pytest.mark.parametrize("subject, pr", [
    ("Rename the quantizer (#21954)", "21954"),
    ("Rename the quantizer (#21954)  ", "21954"),         # trailing blanks
    ("Follow-up to (#12) (#34)", "34"),                   # the last one is the merge's
    ("Follow-up to (#12), no number of its own", None),   # an (#N) inside the subject is a reference
    ("Fix #56", None),                                   # no parentheses: an issue reference
    ("Fix (#56x)", None),
    ("Handle the case (see #56)", None),                 # "#56)" without its "(": a reference
    ("Fix (# 56)", None),
    ("Fix (#)", None),
])
def test_the_pull_request_is_the_number_that_ends_the_subject(subject: str, pr: str | None) -> None:
    assert _pr(subject) == pr
