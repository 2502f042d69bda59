"""``python -m bench._culprit_pastread ROOT [--windows N] [--size N] [--files N] [--prefix DIR]``:
what reading a tier's past windows costs ``ci culprit`` (`ci.commands.culprit_learned`: each
found culprit's window read again from git, every candidate judged against an observed map).

On a real clone at ROOT (a work tree: the map's lines are its files' at HEAD): ``--windows``
windows of ``--size`` consecutive first-parent commits back from HEAD (a day of SGLang's is about
40), each with its middle commit as the found culprit, and a map of HEAD naming every line of the
first ``--files`` ``.py`` files under ``--prefix`` (a GPU test that imports a serving stack runs
hundreds). Timed in one process, twice each, alternating: ``history_weights`` as ``ci culprit``
calls it, and the same judgement with one ``git diff PARENT SHA`` per candidate and the window from
a walk of the whole first-parent history (how it read them before); the levels must agree.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from ci.commands.culprit_learned import history_weights
from ci.commands.culprit_prior import _diff, observed_touches
from ci.culprit.prior import Touch, TouchWeights, carry, touch_level
from ci.history.culprits import FoundCulprit
from ci.selection.depmap_format import StoredTestMap, TestMap


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def per_commit_levels(root: Path, stored: StoredTestMap, found: FoundCulprit) -> list[Touch]:
    """The baseline: the window from the whole first-parent walk, one git diff per candidate."""
    line = _git(root, "rev-list", "--first-parent", found.bad).split()
    candidates = line[:line.index(found.good)][::-1]
    entry = stored.entry
    executed = {f: (entry.lines or {}).get(f, frozenset()) for f in entry.executed}
    paths = sorted(executed)
    executed = carry(executed, _diff(root, str(stored.sha), found.good, paths))
    levels, parent = [], found.good
    for sha in candidates:
        diff = _diff(root, parent, sha, paths)
        levels.append(touch_level(diff, executed, entry.opened, entry.executed, {}))
        executed, parent = carry(executed, diff), sha
    return levels


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    root = Path(argv[0])
    opts = {k: v for k, v in zip(argv[1::2], argv[2::2])}
    windows, size, files = (int(opts.get(f"--{k}", d)) for k, d in (("windows", 40), ("size", 40), ("files", 300)))
    prefix = opts.get("--prefix", "")
    head = _git(root, "rev-parse", "HEAD").strip()
    names = sorted(f for f in _git(root, "ls-files", "--", prefix or ".").splitlines() if f.endswith(".py"))[:files]
    lines = {f: frozenset(range(1, 1 + len((root / f).read_text(errors="replace").splitlines()))) for f in names}
    stored = StoredTestMap(TestMap(frozenset(names), complete=True, items=1, ran=1, lines=lines), "bench", "", {}, head)
    line = _git(root, "rev-list", "--first-parent", "HEAD").split()
    if len(line) <= windows * size:
        print(f"{root}: {len(line)} first-parent commits, fewer than {windows} windows of {size}", file=sys.stderr)
        return 2
    found = [FoundCulprit("test.py", line[(i + 1) * size], line[i * size], line[i * size + size // 2])
             for i in range(windows)]

    def now() -> list[Touch]:
        out: list[Touch] = []

        def levels(_test: str, good: str, candidates: list[str]) -> list[Touch]:
            window = observed_touches(root, stored, good, candidates)
            out.extend(window)
            return window
        judged = history_weights(root, found, levels, TouchWeights())
        assert not judged.skipped, judged.skipped
        return out

    def before() -> list[Touch]:
        return [level for f in found for level in per_commit_levels(root, stored, f)]

    times: dict[str, list[float]] = {"per commit (before)": [], "one process a window (now)": []}
    results = {}
    for _ in range(2):
        for label, read in (("per commit (before)", before), ("one process a window (now)", now)):
            start = time.perf_counter()
            results[label] = read()
            times[label].append(time.perf_counter() - start)
    print(f"{windows} windows of {size} commits, map of {len(names)} files ({sum(map(len, lines.values()))} lines) "
          f"at {head[:12]}")
    for label, spent in times.items():
        print(f"  {label}: {min(spent):.1f} s (runs: {', '.join(f'{t:.1f}' for t in spent)})")
    base, ours = (min(t) for t in times.values())
    print(f"  now / before: {ours / base:.3f}x; levels agree: {results['per commit (before)'] == results['one process a window (now)']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
