"""Runtime dependency maps: what recording costs, and what they select:
``python -m bench depmap [--quick | --tier] [--repeat=N] [--workers=N] [--logs=DIR]``, or
``python -m bench depmap --observe [--cwd=DIR] [--python=PY] [--repeat=N] [--logs=DIR]
[--count=auto|perf|callgrind] [--against=DIR] -- COMMAND...`` for `ci observe` of any tree's own
command against the same command plain, alternating, with ``--count`` each run's instructions
counted too, with ``--against`` a pair more per round observed by the ``ci`` in DIR
(`bench._depmap_observe`, `bench._depmap_count`; exit 0 MET, 1 MISSED or unjudged, 2 bad usage), or
``python -m bench depmap --map=PATH`` for step 3 alone with a map recorded before at this
repository's HEAD (a ``bench mutation --tree self`` workdir's ``depmap.json``).

Every timing is pytest over a list of files, ``--repeat=N`` times each (2; --quick and --tier 1),
the modes alternating; best CPU time (user + system of pytest and its children) of each, wall
time beside it (`bench._depmap_overhead`). This repository's suite writes no bytecode (its root
conftest): every process, baseline and recording alike, compiles the modules it imports. Recording means everything a CI recording does
(``CI_DEPMAP``: lines per test file, the "open" audit hook, subprocesses measured).

1. Breakdown (not with --quick or --tier), on the four files whose recording cost the most CPU
   seconds when each small file was run alone (2026-12-04): Python-heavy in-process
   (test_registry), subprocesses (test_docs, test_plugin_reruns) and torch
   (test_oracle_edge_cases); one process (``-n 0``). Modes: baseline; the audit hook alone;
   coverage.py's C tracer alone; both; everything with the tracer; and the slipcover core
   without and with subprocesses. Then the audit events that reach a Python hook in that pytest
   process, counted in one more, untimed, run.
2. Overhead, the goal's table: the cpu tier's files with est_time <= 3 s (one process; --quick:
   one file), or with --tier every file of the cpu tier (``-n WORKERS``, 2 by default: CPU time
   counts every worker, so idle workers hide nothing). Modes: baseline, the default core
   (slipcover where it runs, `ci.observe.options`; each recording shares its probe edits
   between its own processes only, `ci.observe.probe_cache`) and, except with --tier, the
   C tracer (a whole tier repeated takes about 12 minutes a run).
   Goal: <= 10 % more CPU time with the default core, judged only when pytest passed in every
   run (a failing run does other work). Then whether two cores' maps agree. ``--logs=DIR`` keeps
   each run's pytest output there (``<mode index>.<round>.log``): what failed, and how long.
3. Selection: the default core's map, against the static import graph, on this repository's last
   20 first-party commits (--quick: 3; `bench._depmap_history`).

Exit 0 when the goal is met, 1 when it is missed, unjudged or no map was written.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench import _depmap_count, _depmap_observe
from bench._depmap_history import selection_table
from bench._depmap_overhead import (BASELINE, BREAKDOWN, FULL_CTRACE, FULL_SLIPCOVER, Measured,
                                    audit_events, compare, table_rows)
from bench.table import format_table
from ci.registry import Registry, find_repo_root, load_registry
from ci.observe import slipcover_core
from ci.selection.depmap_format import parse_depmap

GOAL = 0.10
QUICK_FILES = ("tests/ci/test_shard.py",)
BREAKDOWN_FILES = ("tests/ci/test_docs.py", "tests/ci/test_registry.py", "tests/ci/test_plugin_reruns.py",
                   "tests/quant/test_oracle_edge_cases.py")
HEADERS = ("mode", "files", "wall s (best)", "CPU s (best)", "x baseline CPU")


def subset(registry: Registry, quick: bool, tier: bool) -> list[str]:
    if quick:
        return list(QUICK_FILES)
    return [e.path for e in registry.tests_for_tier("cpu") if tier or e.est_time <= 3]


def _rows(measured: list[Measured], files: int) -> list[tuple[object, ...]]:
    return [(row[0], files, *row[1:4]) for row in table_rows(measured)]


def _codes(measured: list[Measured]) -> str:
    return ", ".join(f"{m.mode.label}: {','.join(map(str, sorted(m.codes)))}" for m in measured)


def breakdown(root: Path, files: list[str], repeat: int, tmp: Path) -> None:
    modes = BREAKDOWN if slipcover_core.available() else tuple(m for m in BREAKDOWN if "slipcover" not in m.label)
    measured = compare(root, files, modes, repeat, tmp / "breakdown.json")
    print(format_table(HEADERS, _rows(measured, len(files)),
                       title=f"breakdown: {', '.join(files)}; -n 0, {repeat} run(s) of each, alternating"))
    print(f"pytest exit codes: {_codes(measured)}")
    events = audit_events(root, files, FULL_CTRACE)
    top = ", ".join(f"{name} {n:,}" for name, n in sorted(events.items(), key=lambda kv: -kv[1])[:5])
    print(f"audit events in the pytest process (recording everything, from start-up): {sum(events.values()):,} "
          f"({top})")


def headline(root: Path, files: list[str], repeat: int, out: Path, workers: int,
             with_ctrace: bool, logs: Path | None = None) -> tuple[list[Measured], list[Path]]:
    """The goal's table and verdict; returns the measurements and the maps each recording mode wrote."""
    default = FULL_SLIPCOVER if slipcover_core.available() else replace(FULL_CTRACE, label=FULL_CTRACE.label + " (default)")
    modes = (BASELINE, default) + ((FULL_CTRACE,) if with_ctrace and default is FULL_SLIPCOVER else ())
    measured = compare(root, files, modes, repeat, out, workers, logs)
    print(format_table(HEADERS, _rows(measured, len(files)),
                       title=f"overhead: -n {workers}, {repeat} run(s) of each, alternating"))
    print(f"pytest exit codes: {_codes(measured)}")
    base, rec = measured[0].cpu, measured[1].cpu
    print(f"goal: recording CPU overhead <= {GOAL:.0%}: {verdict(measured)} ({(rec / base - 1):+.1%}, {default.label})")
    return measured, [out.with_suffix(f".{i}{out.suffix}") for i in range(1, len(modes))]


def verdict(measured: list[Measured]) -> str:
    """MET or MISSED for the default core (``measured[1]``) against the baseline (``measured[0]``);
    UNJUDGED when pytest did not pass in every run: a failing or interrupted run does other work
    than a passing one, so its CPU time compares with nothing."""
    if any(m.codes != {0} for m in measured):
        return "UNJUDGED (pytest did not pass in every run)"
    return "MET" if measured[1].cpu <= measured[0].cpu * (1 + GOAL) else "MISSED"


def maps_agree(paths: list[Path], labels: list[str]) -> None:
    """One line per later map: whether it holds the same lines per test file as the first."""
    if len(paths) < 2 or not all(p.is_file() for p in paths):
        return
    first, *others = (parse_depmap(p.read_bytes(), p.name) for p in paths)
    for label, other in zip(labels[1:], others):
        differ = sorted(t for t in first.tests.keys() | other.tests.keys() if t not in first.tests
                        or t not in other.tests or first.tests[t] != other.tests[t])
        print(f"maps of '{labels[0]}' and '{label}': {len(first.tests)} and {len(other.tests)} test files, "
              f"{len(differ)} differ in executed lines or opened files{': ' + ', '.join(differ[:5]) if differ else ''}; "
              f"shared lines {'equal' if first.shared == other.shared else 'differ'}")


def observe_main(argv: list[str]) -> int:
    """``--observe``: see the module docstring; argv is everything before ``--``, command after it."""
    options, command = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    known = {"--observe", "--cwd", "--python", "--repeat", "--logs", "--count", "--against"}
    unknown = [a for a in options if a.split("=", 1)[0] not in known]
    value = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in options if "=" in a}
    cwd = Path(value.get("--cwd", "."))
    repeat = value.get("--repeat", "2")
    problem = (f"unknown option {unknown[0]!r}" if unknown
               else "no command: give it after `--` (bench depmap --observe -- python -m pytest tests)" if not command
               else f"--cwd={cwd}: not a directory" if not cwd.is_dir()
               else f"--repeat={repeat}: not a whole number of pairs >= 1" if not repeat.isdigit() or int(repeat) < 1
               else f"--against={value['--against']}: no ci package there" if "--against" in value
               and not Path(value["--against"], "ci", "__main__.py").is_file()
               else "")
    picked = _depmap_count.pick(value["--count"]) if "--count" in value and not problem else None
    counter = picked if isinstance(picked, _depmap_count.Counter) else None
    problem = problem or (picked if isinstance(picked, str) else "")
    if problem:
        print(f"bench depmap --observe: {problem}", file=sys.stderr)
        return 2
    logs = Path(value["--logs"]) if "--logs" in value else None
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    runs = _depmap_observe.compare_observed(cwd.resolve(), command, value.get("--python", sys.executable),
                                            int(repeat), logs, counter,
                                            Path(value["--against"]).resolve() if "--against" in value else None)
    counted = f", instructions by {counter.name}" if counter is not None else ""
    title = f"ci observe vs plain, {repeat} pair(s), alternating{counted}: {' '.join(command)} (in {cwd})"
    print(format_table(_depmap_observe.HEADERS, _depmap_observe.table_rows(runs), title=title))
    print(_depmap_observe.summary(runs))
    return 0 if _depmap_observe.verdict(runs) == "MET" else 1


def main(argv: list[str]) -> int:
    if "--observe" in argv:
        return observe_main(argv)
    quick, tier = "--quick" in argv, "--tier" in argv
    repeat = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--repeat=")), 1 if quick or tier else 2)
    workers = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--workers=")), 2 if tier else 0)
    root = find_repo_root()
    registry = load_registry(root / "registry.yaml")
    given = next((Path(a.split("=", 1)[1]) for a in argv if a.startswith("--map=")), None)
    logs = next((Path(a.split("=", 1)[1]) for a in argv if a.startswith("--logs=")), None)
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    if given is not None:
        try:
            recorded = parse_depmap(given.read_bytes(), str(given)).tests
        except (OSError, ValueError) as exc:
            print(f"bench depmap: --map={given}: {exc}")
            return 1
        print(selection_table(root, registry, sorted(set(recorded) & set(registry.tests)), given, 20))
        return 0
    files = subset(registry, quick, tier)
    with tempfile.TemporaryDirectory(prefix="bench-depmap-") as tmp:
        if not (quick or tier):
            breakdown(root, list(BREAKDOWN_FILES), repeat, Path(tmp))
            print()
        measured, maps = headline(root, files, repeat, Path(tmp) / "depmap.json", workers, not tier, logs)
        maps_agree(maps, [m.mode.label for m in measured[1:]])
        print()
        if not maps[0].is_file():
            print("bench depmap: the recording run wrote no map; no selection table")
            return 1
        print(selection_table(root, registry, files, maps[0], 3 if quick else 20))
    return 0 if verdict(measured) == "MET" else 1
