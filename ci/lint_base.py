"""Lint the tree a change started from: the merge base of a ref and HEAD, for ``lint --base``.

The merge base's files are written to a temporary directory with git's plumbing (``read-tree``
into a private index file, ``checkout-index``): the repository's worktree list, index and refs
are never touched, git itself refuses paths behind symlinks, and the directory is removed when
the lint returns or raises (the command turns SIGTERM into an exit so that this also holds when
a CI job is cancelled). Only the registry root's subtree is written. That tree is linted without
history hints (the gate compares problems by `ci.lint_gate.ProblemKey`, which leaves hints out).

A merge base without the registry (the change adopts fp4kv-ci) is linted with the change's
registry, so that its old broken imports are still old.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ci.lint import lint_repo
from ci.registry import Problem

TEMP_PREFIX = "ci-lint-base-"
_ENV = {"GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0", "GIT_EXTERNAL_DIFF": "", "LC_ALL": "C"}
# Large-file filters would download (or fail) while writing the base tree; lint reads no such file.
_NO_FILTERS = ["-c", "filter.lfs.process=", "-c", "filter.lfs.smudge=", "-c", "filter.lfs.required=false"]


class BaseRefError(RuntimeError):
    """The merge base cannot be found or written; the message names the ref and why."""


@dataclass(frozen=True)
class BaseLint:
    """``merge_base``: its short hash; ``problems``: lint's at that commit (info included);
    ``renamed``: root-relative old path -> new path for files the change renamed."""

    merge_base: str
    problems: list[Problem]
    renamed: dict[str, str]


def _git(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """git's stdout; `BaseRefError` with git's first stderr line when it fails."""
    try:
        proc = subprocess.run(["git", "-c", "core.quotepath=off", *args], cwd=cwd, capture_output=True,
                              env={**os.environ, **_ENV, **(env or {})})
    except OSError as exc:
        raise BaseRefError(f"cannot run git: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise BaseRefError(detail[0] if detail else f"git {args[0]} exited {proc.returncode}")
    return proc.stdout.decode("utf-8", "replace")


def merge_base(root: Path, ref: str) -> str:
    """The full hash of the merge base of ``ref`` and HEAD in the repository holding ``root``."""
    try:
        shallow = _git(["rev-parse", "--is-shallow-repository"], root).strip() == "true"
    except BaseRefError:
        raise BaseRefError(f"--base {ref}: {root} is not in a git checkout") from None
    fetch = ("the checkout is shallow: fetch full history (actions/checkout with fetch-depth: 0)" if shallow
             else "is it fetched?")
    if ref.startswith("-") or not ref.strip():
        raise BaseRefError(f"--base {ref!r}: not a git ref")
    try:
        commit = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], root).strip()
    except BaseRefError:
        raise BaseRefError(f"--base {ref}: no such commit in this repository ({fetch})") from None
    try:
        return _git(["merge-base", commit, "HEAD"], root).strip()
    except BaseRefError as exc:
        raise BaseRefError(f"--base {ref}: no merge base with HEAD ({fetch}; git: {exc})") from None


def renamed_files(root: Path, base: str) -> dict[str, str]:
    """Old path -> new path, relative to ``root``, for files renamed between ``base`` and the
    working tree (git's rename detection)."""
    out = _git(["diff", "--name-status", "-M", "-z", "--relative", base, "--"], root)
    fields = out.split("\0")
    renamed: dict[str, str] = {}
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i]
        if status[:1] in ("R", "C"):
            if status[:1] == "R":
                renamed[fields[i + 1]] = fields[i + 2]
            i += 3
        else:
            i += 2
    return renamed


def write_tree(root: Path, commit: str, into: Path) -> Path:
    """Write ``commit``'s files of the subtree at ``root`` into ``into``; returns that subtree's
    directory there."""
    top = Path(_git(["rev-parse", "--show-toplevel"], root).strip())
    prefix = _git(["rev-parse", "--show-prefix"], root).strip().rstrip("/")
    index = into / "index"
    tree = into / "tree"
    tree.mkdir()
    private = {"GIT_INDEX_FILE": str(index)}
    _git(["read-tree", f"{commit}:{prefix}" if prefix else commit], top, private)
    _git([*_NO_FILTERS, "checkout-index", "--all", "--force", f"--prefix={tree}{os.sep}"], top, private)
    return tree


def _remove(scratch: Path) -> None:
    """Remove ``scratch``; a SIGTERM that interrupts the removal (the command turns it into
    SystemExit) leaves the second pass to finish it."""
    try:
        shutil.rmtree(scratch, ignore_errors=True)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)


def lint_merge_base(root: Path, ref: str, registry: Path) -> BaseLint:
    """Lint's problems at the merge base of ``ref`` and HEAD for the repository at ``root``, whose
    registry is ``registry``. Raises `BaseRefError` (bad ref, no merge base, git failing)."""
    root = Path(root)
    base = merge_base(root, ref)
    renamed = renamed_files(root, base)
    # Named before the `try` and made inside it: a SIGTERM between making it and entering the
    # `try` (tempfile.mkdtemp's window) would leave it behind.
    scratch = Path(tempfile.gettempdir()) / f"{TEMP_PREFIX}{secrets.token_hex(8)}"
    try:
        scratch.mkdir(mode=0o700)
        tree = write_tree(root, base, scratch)
        try:
            inside = Path(registry).resolve().relative_to(root.resolve())
        except ValueError:
            inside = None  # a registry outside the root: the same file judges both trees
        base_registry = tree / inside if inside is not None else Path(registry)
        if inside is not None and not base_registry.is_file():
            base_registry.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(registry, base_registry)
        problems = lint_repo(tree, base_registry, info=True, history=False)
    finally:
        _remove(scratch)
    return BaseLint(base[:9], problems, renamed)


__all__ = ["BaseLint", "BaseRefError", "TEMP_PREFIX", "lint_merge_base", "merge_base", "renamed_files", "write_tree"]
