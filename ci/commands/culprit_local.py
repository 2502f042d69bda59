"""What ``ci culprit`` does outside the search: the window from git, the prior from what the
test executes, running the test at a commit (``--runner local``) and the resumable state file."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol, Sequence

from ci.atomic_write import atomic_write_text
from ci.registry import Registry
from ci.regular_file import MAX_CONFIG_BYTES, UnreadableFile, read_regular


class WindowError(ValueError):
    """The commits given do not make a window (one line, named problem)."""


class RunnerError(RuntimeError):
    """A runner could not get a run's outcome (a GitHub failure, a cancelled run): the search stops
    where it is, one line naming the problem; the same command resumes it."""


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if done.returncode:
        raise WindowError(f"git {' '.join(args)}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'failed'}")
    return done.stdout.strip()


def window(root: Path, good: str, bad: str) -> tuple[str, str, list[str]]:
    """(good sha, bad sha, the candidates after good up to bad in first-parent order). WindowError
    when either is unknown or good is not on bad's first-parent line."""
    shas = []
    for flag, ref in (("--good", good), ("--bad", bad)):
        try:
            shas.append(git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"))
        except WindowError:
            raise WindowError(f"{flag} {ref}: not a commit of {root}") from None
    # bad's first-parent line down to what good reaches (not the whole history: a window is read
    # per past culprit too); good is on that line when the last commit listed has good as parent
    line = [row.split() for row in git(root, "rev-list", "--first-parent", "--parents", shas[1], f"^{shas[0]}",
                                       "--").splitlines()]
    if not line or line[-1][1:2] != [shas[0]]:
        raise WindowError(f"--good {good} is not an ancestor of --bad {bad} on its first-parent line: "
                          "give two commits of one first-parent history, good before bad")
    return shas[0], shas[1], [row[0] for row in reversed(line)]


def touches_executed(root: Path, registry: Registry, test: str, candidates: list[str]) -> list[bool]:
    """For each candidate, whether it changes the test file or a file in its import closure (the
    selection layer's static closure at the working tree; the one place this import lives)."""
    from ci.selection.deps import TestDependencies

    executed = set(TestDependencies(root, registry, cache=None).closure(test)) | {test}
    if not candidates:
        return []
    # against the first parent: a merge on the line changes what its side branch brought (a plain
    # ``diff-tree MERGE`` lists nothing for a merge)
    parent = git(root, "rev-parse", "--verify", "--quiet", f"{candidates[0]}^1^{{commit}}")
    return [bool(executed & set(part.splitlines())) for part in diff_parts(root, parent, candidates, ("--name-only",))]


def diff_parts(root: Path, good: str, candidates: Sequence[str], options: Sequence[str],
               paths: Sequence[str] = ()) -> list[str]:
    """Each candidate's ``git diff-tree OPTIONS PARENT SHA -- PATHS`` output, PARENT its predecessor
    in ``good, *candidates`` (its first parent on a first-parent line), from one ``git diff-tree
    --stdin`` process: a window costs one process, not one a commit. WindowError when git fails."""
    if not candidates:
        return []
    pairs = "".join(f"{sha} {parent}\n" for parent, sha in zip((good, *candidates), candidates))
    done = subprocess.run(["git", "-C", str(root), "-c", "core.quotepath=off", "diff-tree", "--stdin", "--always",
                           "-r", *options, "--", *paths], input=pairs, capture_output=True, text=True)
    if done.returncode:
        raise WindowError(f"git diff-tree --stdin: {done.stderr.strip() or 'failed'}")
    # each commit's part starts with a line that is its sha alone (--always: an empty part too); no
    # line of a patch or a name list is a bare sha (a patch's lines start with a marker or a keyword)
    parts: list[list[str]] = []
    for line in done.stdout.splitlines():
        if len(parts) < len(candidates) and line == candidates[len(parts)]:
            parts.append([])
        elif parts:
            parts[-1].append(line)
    if len(parts) != len(candidates):
        raise WindowError(f"git diff-tree --stdin gave {len(parts)} of {len(candidates)} commits' diffs")
    return ["\n".join(part) + "\n" for part in parts]


@dataclass(frozen=True)
class LocalRunner:
    """How ``--runner local`` runs the test: with ``python`` (``--python``, default this
    interpreter); with the test file taken from commit ``test_from`` (``--test-from``: a test a
    later fix added, absent at the probed commits); and, to measure the search on a real but
    deterministic regression, each attempt failing without being run with probability
    ``inject_flake`` (``--inject-flake``, drawn from ``random.Random(seed)``)."""

    python: str = sys.executable
    test_from: str | None = None
    inject_flake: float = 0.0
    seed: int = 0
    _rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)

    def run(self, root: Path, sha: str, target: str, attempts: int, tree: Path) -> tuple[int, tuple[str, ...]]:
        """Run ``target`` (FILE or FILE::TEST) with pytest at ``sha`` in a git worktree at ``tree``,
        up to ``attempts`` times until one passes; the number of attempts that failed (``attempts``:
        the run failed) and each failed attempt's error signature (`junit_signature` of its JUnit
        report; "" for an injected failure or a report that names no failure). The worktree is
        removed after, and first when a killed run left it behind."""
        signatures: list[str] = []
        _remove_tree(root, tree)
        git(root, "worktree", "add", "--detach", "--quiet", str(tree), sha)
        try:
            if self.test_from is not None:
                file = target.split("::", 1)[0]
                (tree / file).parent.mkdir(parents=True, exist_ok=True)
                (tree / file).write_text(git(root, "show", f"{self.test_from}:{file}") + "\n")
            report = tree.parent / f"{tree.name}.junit.xml"  # outside the tree: never part of what is tested
            for failed in range(attempts):
                if self._rng.random() < self.inject_flake:
                    signatures.append("")  # an injected failure has no message
                    continue
                report.unlink(missing_ok=True)
                done = subprocess.run([self.python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                       f"--junitxml={report}", target],
                                      cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
                if done.returncode == 0:
                    return failed, tuple(signatures)
                signatures.append(junit_signature(report) or "")
            return attempts, tuple(signatures)
        finally:
            (tree.parent / f"{tree.name}.junit.xml").unlink(missing_ok=True)
            _remove_tree(root, tree)


def junit_signature(report: Path) -> str | None:
    """The error signature (`ci.history.classify.fingerprint`'s hash, as the verdicts compare
    failures) of the first failed test in the JUnit ``report``; None when the report is missing,
    unreadable or names no failure with text."""
    from ci.history.classify import fingerprint
    from ci.results.junit import ERROR, FAILED, JUnitError, parse_junit

    try:
        cases = parse_junit(report).cases
    except (JUnitError, OSError):
        return None
    failed = next((c.attempts[-1] for c in cases if c.outcome in (FAILED, ERROR) and c.attempts), None)
    return (fingerprint(failed)[0] or None) if failed is not None else None


def _remove_tree(root: Path, tree: Path) -> None:
    subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], capture_output=True)
    shutil.rmtree(tree, ignore_errors=True)
    git(root, "worktree", "prune")


@dataclass(frozen=True)
class RunResult:
    """What a runner says of one run: whether every attempt failed, where to see it (a run's URL;
    None for a local run), and how many attempts failed (the run stops at its first pass; None
    when the runner cannot say): the search weighs a pass after a failure as the weaker evidence;
    and each failed attempt's error signature, in order ("" where the runner cannot read one);
    ``note``: why a signature is missing, when the runner can say (the answer prints it)."""

    failed: bool
    link: str | None = None
    failures: int | None = None
    signatures: tuple[str, ...] = ()
    note: str = ""


class BatchRunner(Protocol):
    """Runs the search's probes, up to ``slots`` at once. ``run_batch`` is given (run number, sha)
    pairs, the run number being the run's place in the search (the same again when a killed search
    resumes and asks for the same runs), and returns one `RunResult` each, in order."""

    slots: int

    def run_batch(self, runs: Sequence[tuple[int, str]]) -> list[RunResult]: ...

    def about(self, sha: str) -> str:
        """What the runner's side knows of the culprit ``sha`` (its pull request), "" for nothing;
        never raises: a failed lookup is said in the text."""


@dataclass(frozen=True)
class LocalBatch:
    """``--runner local`` as a `BatchRunner`: one run at a time, in a worktree at ``tree``."""

    runner: LocalRunner
    root: Path
    target: str
    attempts: int
    tree: Path
    slots: int = 1

    def run_batch(self, runs: Sequence[tuple[int, str]]) -> list[RunResult]:
        said = [self.runner.run(self.root, sha, self.target, self.attempts, self.tree) for _, sha in runs]
        return [RunResult(count == self.attempts, None, count, signatures) for count, signatures in said]

    def about(self, sha: str) -> str:
        return ""


@dataclass(frozen=True)
class Run:
    """One finished run: the commit, whether every attempt failed, its link (if any) and how many
    attempts failed (None: not known, as in a state file an older ``ci`` wrote) and each failed
    attempt's error signature ("" unknown; none at all from an older ``ci``), and the runner's
    note on a signature it could not read."""

    sha: str
    failed: bool
    link: str | None = None
    failures: int | None = None
    signatures: Sequence[str] = ()
    note: str = ""


@dataclass
class State:
    """Every finished run of one search (identity + results), written before it is acted on."""

    good: str
    bad: str
    target: str
    tier: str
    attempts: int
    runs: list[Run] = field(default_factory=list)

    def matches(self, other: "State") -> bool:
        return (self.good, self.bad, self.target, self.tier, self.attempts) == \
               (other.good, other.bad, other.target, other.tier, other.attempts)

    def add(self, path: Path, sha: str, result: RunResult) -> None:
        self.runs.append(Run(sha, result.failed, result.link, result.failures, result.signatures, result.note))
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(asdict(self), indent=1) + "\n")


def load_state(path: Path, fresh: State) -> State:
    """The state at ``path`` when it is this search's; else ``fresh`` (also when it is missing or
    not this search's JSON). Read with `read_regular`: a FIFO, a device or an oversized file at
    ``path`` raises `ValueError` naming it (never blocks, never reads without end)."""
    try:
        data = json.loads(read_regular(path, MAX_CONFIG_BYTES))
    except UnreadableFile as exc:
        raise ValueError(f"--state {path}: {exc.strerror}: give the path of a regular file") from None
    except (OSError, ValueError):
        return fresh
    try:
        found = State(**{**data, "runs": [Run(**r) for r in data["runs"]]})
    except (ValueError, TypeError, KeyError):
        return fresh
    counts_fit = all(r.failures is None or (isinstance(r.failures, int) and 0 <= r.failures <= found.attempts
                                            and r.failed == (r.failures == found.attempts))
                    and isinstance(r.signatures, (list, tuple)) and all(isinstance(x, str) for x in r.signatures)
                    and isinstance(r.note, str)
                    for r in found.runs)
    return found if counts_fit and found.matches(fresh) else fresh
