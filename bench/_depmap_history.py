"""``bench depmap``'s selection table: what `plan` would have selected on this repository's last
commits with line-level runtime maps, against the static import graph.

The map is recorded at one commit R (``DepMap.sha``; HEAD when the bench recorded it), so its
line numbers are R's. Each of the last N first-parent non-merge commits C before R is replayed as
if its change were made on top of R and judged by R's map, graph and registry:

1. the lines C touched: the new side of ``git diff -U0 C^ C`` (`new_side_lines`: for a pure
   deletion after new line ``s``, the insertion point ``s`` and ``s + 1``); a file C deleted, or
   one git shows no hunks for (binary, mode or empty file), is judged by file;
2. carried to R's lines through the hunks of ``git diff -U0 C R`` (`carry_lines`: a line outside
   every hunk shifts by the hunks before it; a line inside a hunk that changed later maps to the
   hunk's whole new range, or its insertion point when the hunk removed it); a file deleted since
   C is judged by file;
3. their scopes in R's source (`ci.selection.edit_scopes.diff_scopes`; a module-level scope
   narrowed to the names C redefined, judged from the file before and after C:
   `with_commit_names`), then
   `ci.selection.depmap_select.select_by_maps` with those scopes for maps of commit R, the
   static graph's importers as the module-level reach and the references of every Python file
   at R (`ci.selection.reach`), and `ci.selection.plan.plan` with the
   registry's ``run_all_paths`` and without them.

Two more rows change one scope alone, without run-all paths, for every non-test Python file some
map holds (what R's source parses into): each function body (as if one line of it changed), and
each file's module level. Counts and est_time are of the recorded test files only.

Contract: `selection_table` returns the table's text (the bench command prints it);
`new_side_lines` is pure (`carry_lines` is `ci.selection.diff_hunks`'); the git readers return
None where git cannot answer (a root commit, a commit missing from a shallow clone) and the
commit is left out of the table.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from bench.table import format_table, ratio
from ci.registry import Registry
from ci.selection.deps import Impact, TestDependencies
from ci.selection.depmap_format import StoredTestMap, maps_of_file, parse_depmap
from ci.selection.depmap_select import select_by_maps
from ci.selection.diff_hunks import FileDiff, Hunk, carry_lines, file_diffs, insertion_point
from ci.selection.edit_scopes import Scope, diff_scopes, scopes_of
from ci.selection.git_lines import read_at as git_read_at
from ci.selection.module_definitions import changed_definitions
from ci.selection.reach import ReferenceIndex
from ci.selection.plan import PlannedTest, plan

_GIT = ("git", "-c", "core.quotepath=off")
_DIFF = ("diff", "-U0", "--no-renames", "--no-color", "--no-ext-diff")
Lines = Mapping[str, "frozenset[int] | None"]


# -- pure: lines of a commit, carried to a later commit ---------------------------------------------

def new_side_lines(part: FileDiff) -> frozenset[int] | None:
    """The new-side lines one file's hunks touch: every added or replacing line, and for a pure
    deletion after new line ``s`` the lines ``s`` and ``s + 1``. None when the file was deleted or
    its hunks are unknown (binary): judged by file."""
    if part.new_path is None or part.hunks is None:
        return None
    lines: set[int] = set()
    for hunk in part.hunks:
        lines |= (set(range(hunk.new_start, hunk.new_start + hunk.new_count)) if hunk.new_count
                  else insertion_point(hunk.new_start))
    return frozenset(lines)


# -- git --------------------------------------------------------------------------------------------

def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    try:
        proc = subprocess.run([*_GIT, *args], cwd=root, capture_output=True, check=False, timeout=300)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc if proc.returncode == 0 else None


def first_parent_commits(root: Path, ref: str, n: int) -> list[str]:
    """The last ``n`` first-parent non-merge commits up to ``ref``, newest first ([] if git fails)."""
    proc = _git(root, "rev-list", "--first-parent", "--no-merges", f"-n{n}", ref)
    return proc.stdout.decode().split() if proc is not None else []


@dataclass(frozen=True)
class CommitChange:
    """What commit ``sha`` changed: its paths (old and new sides, renames as delete + add) and,
    per path, the lines it touched in the reference commit's numbering (None: judged by file)."""

    sha: str
    changed: tuple[str, ...]
    lines: Lines


def commit_change(root: Path, sha: str, ref: str) -> CommitChange | None:
    """``sha``'s change carried to ``ref`` (see the module docstring); None when git cannot tell
    (a root commit, a commit or ``ref`` not in this clone)."""
    names = _git(root, "diff", "--name-only", "-z", "--no-renames", f"{sha}^", sha)
    own = _git(root, *_DIFF, f"{sha}^", sha)
    if names is None or own is None:
        return None
    changed = tuple(sorted({p for p in names.stdout.decode().split("\0") if p}))
    touched = {part.new_path: new_side_lines(part) for part in file_diffs(own.stdout.decode())
               if part.new_path is not None}
    carried = [p for p in changed if touched.get(p) is not None]
    later = _git(root, *_DIFF, sha, ref, "--", *carried) if carried else None
    if carried and later is None:
        return None
    since = {part.old_path: part for part in file_diffs(later.stdout.decode()) if part.old_path} if later else {}
    lines: dict[str, frozenset[int] | None] = {}
    for path in changed:
        own_lines, part = touched.get(path), since.get(path)
        if own_lines is None or part is None:  # judged by file, or untouched since: same numbers
            lines[path] = own_lines
        elif part.new_path is None or part.hunks is None:  # deleted since, or binary
            lines[path] = None
        else:
            lines[path] = carry_lines(own_lines, part.hunks)
    return CommitChange(sha, changed, lines)


def read_at(root: Path, ref: str, path: str) -> bytes | None:
    """``path``'s text at commit ``ref``; None when it has none there."""
    proc = _git(root, "show", f"{ref}:./{path}")
    return proc.stdout if proc is not None else None


def with_commit_names(root: Path, sha: str, scopes: Mapping[str, tuple[Scope, ...] | None]
                      ) -> dict[str, tuple[Scope, ...] | None]:
    """``scopes`` with each module-level scope narrowed to the names commit ``sha`` redefined in
    that file (`ci.selection.module_definitions`, from the file before and after ``sha``), where
    that is all the commit did at module level there."""
    out = dict(scopes)
    for path, found in scopes.items():
        if not found or not any(scope.is_module for scope in found):
            continue
        before, after = read_at(root, f"{sha}^", path), read_at(root, sha, path)
        names = changed_definitions(before, after) if before is not None and after is not None else None
        if names is not None:
            out[path] = tuple(replace(scope, names=names) if scope.is_module else scope for scope in found)
    return out


def function_scopes(source: str | bytes) -> tuple[Scope, ...]:
    """Every function body `scopes_of` knows in ``source`` (kernels and module level left out;
    () when it does not parse), each as if its first line changed."""
    count = len(source.splitlines())
    return tuple(s for s in scopes_of(source, range(1, count + 1)) or () if not s.is_module)


# -- selection ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Selected:
    """Recorded test files a plan selected: how many, and their est_time summed (s)."""

    count: int = 0
    est: float = 0.0

    def __add__(self, other: Selected) -> Selected:
        return Selected(self.count + other.count, self.est + other.est)

    def cell(self) -> str:
        return f"{self.count}/{self.est:.0f}"


@dataclass
class Judge:
    """One map, graph and registry, asked what a change selects among the recorded ``files``."""

    registry: Registry
    tier: str
    files: Sequence[str]
    maps: Mapping[str, StoredTestMap]
    map_sha: str | None
    graph: TestDependencies
    now: datetime
    references: ReferenceIndex | None = None
    _impacts: dict[tuple[str, ...], Impact] = field(default_factory=dict)
    _static: dict[tuple[tuple[str, ...], bool], Selected] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._bare = replace(self.registry, run_all_paths=())

    def impact(self, changed: Sequence[str]) -> Impact:
        key = tuple(sorted(set(changed)))
        if key not in self._impacts:
            self._impacts[key] = self.graph.impact(key)
        return self._impacts[key]

    def reach(self, path: str) -> Mapping[str, str]:
        return self.impact([path]).reasons

    def _count(self, tests: Iterable[PlannedTest]) -> Selected:
        chosen = {t.path for t in tests} & set(self.files)
        return Selected(len(chosen), sum(self.registry.tests[p].est_time for p in chosen))

    def select(self, changed: Sequence[str], scopes: Mapping[str, tuple[Scope, ...] | None] | None,
               run_all: Sequence[bool]) -> list[Selected]:
        """For each of ``run_all`` (with the registry's run_all_paths or without them): the graph's
        selection of ``changed``, then the maps' with ``scopes`` (R's numbering) for maps of R."""
        impact = self.impact(changed)
        chosen = select_by_maps(self.maps, self.files, changed, now=self.now, module_reach=self.reach,
                                scopes_for=lambda sha: scopes if sha is not None and sha == self.map_sha else None,
                                references_for=lambda sha, paths: self.references if sha == self.map_sha else None,
                                imports_of=self.graph.imports_of)
        out: list[Selected] = []
        for with_run_all in run_all:
            registry = self.registry if with_run_all else self._bare
            key = (impact.changed or (), with_run_all)
            if key not in self._static:  # the graph's answer depends on the files alone, not the lines
                self._static[key] = self._count(plan(registry, self.tier, changed, impact=impact).selected)
            out += [self._static[key], self._count(plan(registry, self.tier, changed, impact=impact,
                                                        maps=chosen).selected)]
        return out


def _ratio(mapped: Selected, static: Selected) -> str:
    return ratio(mapped.est / static.est) if static.est and mapped.est else ""  # 0/x: the cells say it


def commit_rows(root: Path, judge: Judge, ref: str, n: int) -> list[tuple[object, ...]]:
    """One row per replayable commit of the last ``n`` up to ``ref``, then the total row ``all``."""
    rows: list[tuple[object, ...]] = []
    totals = [Selected()] * 4
    for sha in first_parent_commits(root, ref, n):
        change = commit_change(root, sha, ref)
        if change is None:
            continue
        scopes = with_commit_names(root, sha, diff_scopes(change.lines, lambda path: read_at(root, ref, path)))
        cells = judge.select(change.changed, scopes, (True, False))
        totals = [a + b for a, b in zip(totals, cells)]
        rows.append((sha[:9], len(change.changed), *(c.cell() for c in cells), _ratio(cells[3], cells[2])))
    rows.append(("all", "", *(f"-/{c.est:.0f}" for c in totals), _ratio(totals[3], totals[2])))
    return rows


def scope_rows(root: Path, judge: Judge, ref: str) -> list[tuple[object, ...]]:
    """The two rows of one scope changed alone (no run-all paths), summed over every function body
    and over every module level of the non-test Python files some map holds."""
    sources = sorted({p for m in judge.maps.values() for p in m.entry.files if p.endswith(".py")}
                     - set(judge.registry.tests))
    bodies, modules = [Selected(), Selected()], [Selected(), Selected()]
    n_bodies = n_files = 0
    for path in sources:
        text = read_at(root, ref, path)
        if text is None:
            continue
        n_files += 1
        module = Scope("<module>", None, None, 1)
        modules = [a + b for a, b in zip(modules, judge.select([path], {path: (module,)}, (False,)))]
        for scope in function_scopes(text):
            n_bodies += 1
            bodies = [a + b for a, b in zip(bodies, judge.select([path], {path: (scope,)}, (False,)))]
    return [(f"each of {n_bodies} function bodies alone", 1, "", "", bodies[0].cell(), bodies[1].cell(),
             _ratio(bodies[1], bodies[0])),
            (f"module level of each of {n_files} files alone", 1, "", "", modules[0].cell(), modules[1].cell(),
             _ratio(modules[1], modules[0]))]


HEADERS = ("commit", "changed", "graph", "map", "graph, no run-all", "map, no run-all", "x graph est (no run-all)")


def selection_table(root: Path, registry: Registry, files: Sequence[str], map_path: Path, n: int) -> str:
    """The table (see the module docstring) for the map at ``map_path`` over the recorded
    ``files``, on the last ``n`` commits up to the map's commit (HEAD when it names none)."""
    depmap = parse_depmap(map_path.read_bytes(), map_path.name)
    ref_proc = _git(root, "rev-parse", depmap.sha or "HEAD")
    ref = ref_proc.stdout.decode().strip() if ref_proc is not None else depmap.sha or "HEAD"
    tracked = _git(root, "ls-tree", "-r", "--name-only", ref)
    python = [p for p in (tracked.stdout.decode(errors="replace").splitlines() if tracked is not None else [])
              if p.endswith(".py")]
    judge = Judge(registry, depmap.tier or "cpu", list(files), maps_of_file(depmap, map_path.name), depmap.sha,
                  TestDependencies(root, registry), datetime.now(timezone.utc),
                  ReferenceIndex(git_read_at(root, ref, python)))
    rows = commit_rows(root, judge, ref, n) + scope_rows(root, judge, ref)
    usable = sum(t.usable for t in depmap.tests.values())
    title = (f"selected of the {len(files)} recorded files, count/est s ({len(depmap.tests)} in the map, {usable} "
             f"usable, line level: {'yes' if depmap.sha else 'no, the map names no commit'}); this simulates each "
             f"commit's change made on top of HEAD ({ref[:9]}), judged by HEAD's map and graph")
    return format_table(HEADERS, rows, title=title)
