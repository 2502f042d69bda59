"""What the import check says of a missing name in a git checkout: what really happened to it,
found in history (`ci.imports.renames`), against real git repositories built here; spelling only
where there is no history to ask."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ci.imports.check import check_imports
from ci.imports.renames import Rename, find_renames, replacement_in

from tree_testutil import write

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}


# What the backend holds besides the renamed class: enough that git sees the new file as a copy.
BODY = "".join(f"\n\ndef step_{i}(x):\n    return x + {i}\n" for i in range(20))


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def commit(root: Path, message: str, files: dict[str, str] | None = None, remove: tuple[str, ...] = ()) -> str:
    if files:
        write(root, files)
    for rel in remove:
        (root / rel).unlink()
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "--short", "HEAD")


def messages(root: Path) -> list[str]:
    return [f"{p.path}:{p.line}: {p.message}" for p in check_imports(root, ("pkg",), history=True)]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q", "-b", "main")
    commit(tmp_path, "Add the package (#1)", {
        "pkg/__init__.py": "",
        "pkg/quant.py": "class KVFP4QuantizeUtil:\n    pass\n\n\nclass NVFP4KVQuantizeUtil:\n    pass\n",
        "pkg/a.py": "def helper():\n    return 1\n\n\ndef keep():\n    return 2\n",
        "pkg/b.py": "X = 1\n",
        "pkg/old_backend.py": "class NSAMetadata:\n    pass\n\n\ndef build():\n    return NSAMetadata()\n" + BODY,
    })
    return tmp_path


def test_a_renamed_class_names_its_new_name_commit_and_pull_request(repo: Path) -> None:
    """The seed: spelling alone suggests the wrong class (NVFP4...); history knows the rename."""
    sha = commit(repo, "Strategy abstraction for FP4 KV (#21954)", {
        "pkg/quant.py": "class FP4Recipe:\n    pass\n\n\nclass BlockFP4KVQuantizeUtil:\n    pass\n\n\n"
                        "class NVFP4KVQuantizeUtil:\n    pass\n"})
    write(repo, {"pkg/pool.py": "def alloc():\n    from pkg.quant import KVFP4QuantizeUtil\n    return KVFP4QuantizeUtil\n"})
    assert messages(repo) == [f"pkg/pool.py:2: 'pkg.quant' has no name 'KVFP4QuantizeUtil' "
                              f"(renamed to BlockFP4KVQuantizeUtil in {sha} (#21954))"]


def test_without_history_the_hint_is_spelling(repo: Path) -> None:
    commit(repo, "rename", {"pkg/quant.py": "class BlockFP4KVQuantizeUtil:\n    pass\n\n\n"
                                            "class NVFP4KVQuantizeUtil:\n    pass\n"})
    write(repo, {"pkg/pool.py": "from pkg.quant import KVFP4QuantizeUtil\n"})
    spelled = [p.message for p in check_imports(repo, ("pkg",), history=False)]
    assert spelled == ["'pkg.quant' has no name 'KVFP4QuantizeUtil' (did you mean 'NVFP4KVQuantizeUtil'?)"]
    # Out of time, history cannot tell: it says so rather than let spelling guess.
    unread = find_renames(repo, {("pkg/quant.py", "KVFP4QuantizeUtil")}, total_seconds=0)
    assert unread[("pkg/quant.py", "KVFP4QuantizeUtil")].describe() == (
        "git history could not be read in time: cannot tell what 'KVFP4QuantizeUtil' was renamed to; "
        "lint again, or run `git log -G KVFP4QuantizeUtil -- pkg/quant.py`")
    (repo / ".git").rename(repo / "not-git")  # a plain folder: no history to ask
    assert [p.message for p in check_imports(repo, ("pkg",), history=True)] == spelled


def test_a_removed_function_that_lives_elsewhere_now(repo: Path) -> None:
    sha = commit(repo, "Move helper to b", {"pkg/a.py": "def keep():\n    return 2\n",
                                            "pkg/b.py": "X = 1\n\n\ndef helper():\n    return 1\n"})
    write(repo, {"pkg/use.py": "from pkg.a import helper\n"})
    assert messages(repo) == [f"pkg/use.py:1: 'pkg.a' has no name 'helper' (removed in {sha}; defined in pkg.b)"]


def test_a_name_that_never_existed_gets_spelling(repo: Path) -> None:
    write(repo, {"pkg/use.py": "from pkg.a import helpr\n"})
    assert messages(repo) == ["pkg/use.py:1: 'pkg.a' has no name 'helpr' (did you mean 'helper'?)"]


def test_a_file_renamed_with_its_classes_is_followed(repo: Path) -> None:
    """SGLang's NSA -> DSA: the backend moved to a new file under new names, and the old file
    became a shim that still imports the old names from the new one."""
    git(repo, "mv", "pkg/old_backend.py", "pkg/new_backend.py")
    sha = commit(repo, "Rename NSA to DSA (#25821)", {
        "pkg/new_backend.py": "class DSAMetadata:\n    pass\n\n\ndef build():\n    return DSAMetadata()\n" + BODY,
        "pkg/old_backend.py": "from pkg.new_backend import NSAMetadata, build\n"})
    assert messages(repo) == [f"pkg/old_backend.py:1: 'pkg.new_backend' has no name 'NSAMetadata' "
                              f"(renamed to DSAMetadata in {sha} (#25821))"]


def test_the_newest_creation_of_a_path_is_the_one_followed(repo: Path) -> None:
    """new_backend.py existed once before (added, deleted); the file there now is the renamed
    old backend, and that is whose history counts."""
    commit(repo, "An unrelated module of the same name", {"pkg/new_backend.py": "Y = 2\n"})
    commit(repo, "Drop it", remove=("pkg/new_backend.py",))
    git(repo, "mv", "pkg/old_backend.py", "pkg/new_backend.py")
    sha = commit(repo, "Rename NSA to DSA (#25821)", {
        "pkg/new_backend.py": "class DSAMetadata:\n    pass\n\n\ndef build():\n    return DSAMetadata()\n" + BODY})
    write(repo, {"pkg/use.py": "from pkg.new_backend import NSAMetadata\n"})
    assert messages(repo) == [f"pkg/use.py:1: 'pkg.new_backend' has no name 'NSAMetadata' "
                              f"(renamed to DSAMetadata in {sha} (#25821))"]


def test_many_names_are_answered_in_a_few_walks(repo: Path) -> None:
    sha = commit(repo, "Drop and rename (#7)", {"pkg/a.py": "def keep():\n    return 2\n\n\ndef helper2():\n    return 1\n",
                                                 "pkg/quant.py": "class NVFP4KVQuantizeUtil:\n    pass\n"})
    found = find_renames(repo, {("pkg/a.py", "helper"), ("pkg/quant.py", "KVFP4QuantizeUtil"),
                                ("pkg/a.py", "never_there"), ("pkg/a.py", "bad name; rm -rf /")})
    # helper2 was added at the end of the file, not in helper's place: no rename is claimed
    assert found == {("pkg/a.py", "helper"): Rename("pkg/a.py", "helper", sha, "7", None),
                     ("pkg/quant.py", "KVFP4QuantizeUtil"): Rename("pkg/quant.py", "KVFP4QuantizeUtil", sha, "7", None)}
    assert found[("pkg/quant.py", "KVFP4QuantizeUtil")].describe() == f"removed in {sha} (#7)"


@pytest.mark.parametrize(("diff", "name", "replacement"), [
    ("@@ -1 +1 @@\n-class Old:\n+class New:\n", "Old", "New"),
    # the hunk adds several: the one at the same indentation, closest in spelling
    ("@@ -1,2 +1,3 @@\n-class KVFP4Util:\n+class Recipe(Enum):\n+class BlockFP4KVUtil:\n+    def KVFP4Utils(self):\n",
     "KVFP4Util", "BlockFP4KVUtil"),
    ("@@ -4 +4 @@\n-    def old_method(self):\n+    def new_method(self):\n", "old_method", "new_method"),
    ("@@ -1 +1 @@\n-LIMIT = 3\n+MAX_LIMIT: int = 3\n", "LIMIT", "MAX_LIMIT"),
    ("@@ -1 +0,0 @@\n-def gone():\n@@ -9 +9 @@\n-x = 1\n+def unrelated():\n", "gone", None),  # other hunk: not its place
    ("@@ -1 +1 @@\n-class Old:\n+# a comment\n", "Old", None),
    ("", "Old", None),
])
def test_replacement_in(diff: str, name: str, replacement: str | None) -> None:
    assert replacement_in(diff, name) == replacement
