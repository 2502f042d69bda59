"""What `ci observe` costs an adopter's own command: ``bench depmap --observe``.

``python -m bench depmap --observe [--cwd=DIR] [--python=PY] [--repeat=N] [--logs=DIR] -- COMMAND...``
runs COMMAND in DIR (a tree with a ``registry.yaml``) plain and under ``PY -m ci observe --out
FACTS -- COMMAND`` (the path adopters use; PY is this interpreter by default and needs ``ci``
importable), alternating plain, observed, plain, observed, ... for ``N`` pairs (2 by default), in
this one process, so a change in the machine's load hits both alike. Each run's cost is the CPU
time (user + system) of the process tree it waited for (`bench._depmap_overhead.run_argv`); the
1-minute load average is read at each run's end. With ``--count=perf|callgrind|auto`` each run
also runs under an instruction counter (`bench._depmap_count`): its user-space instructions, the
whole tree's, are counted beside its CPU seconds (under callgrind those are valgrind's own).

Contract: `compare_observed` returns one `Run` per run in the order run, each round's pairs
next to each other (the ``against`` pair first); `pair_ratios` is each pair's observed CPU over
its plain CPU, for one recorder's pairs (``""``: the ``ci`` as given; ``"against"``). `verdict` is MET when the median pair ratio is within
`GOAL` of 1 for the ``ci`` as given (the ``against`` pairs are reported beside it, never
judged), the median of the instruction ratios when counted (a pair's two runs are next to
each other in time, so a load change between pairs cancels in its ratio, where the best of each
mode can come from different loads; instructions do not move with load at all), and UNJUDGED
when the runs did not all end with the same exit status and the same test counts (recording must
not change outcomes; a suite with known failures is judged as long as they are the same failures
in number).
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench._depmap_count import Counter
from bench._depmap_overhead import plain_env, run_argv

GOAL = 0.10
# pytest's last line ("== 3 failed, 10 passed, 2 skipped in 1.2s ==") and unittest's ("Ran 5 tests")
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)\b")
_RAN = re.compile(r"^Ran (\d+) tests?\b", re.MULTILINE)
_WROTE = re.compile(r"ci observe: wrote .*\((\d+) test file\(s\), (\d+) not complete\)")


@dataclass(frozen=True)
class Run:
    """One run of the command: wall and CPU seconds, exit status, test counts, load at its end;
    ``entries``: for an observed run, "N test file(s), M not complete" from `ci observe`;
    ``instructions``: counted by a `Counter`, 0 when none counted; ``recorder``: whose pair it is
    in ("" the ``ci`` as given, "against" the ``--against`` copy's)."""

    observed: bool
    wall: float
    cpu: float
    code: int
    counts: str
    load: float
    entries: str = ""
    instructions: int = 0
    recorder: str = ""


def outcome_counts(output: str) -> str:
    """The outcome counts of the last test summary in ``output`` ("10 passed, 3 failed"; warnings
    left out, they vary with what measures the run), or "" when there is none."""
    for line in reversed(output.splitlines()):
        found = [(int(n), word) for n, word in _COUNT.findall(line) if not word.startswith("warning")]
        if found and (" in " in line or line.startswith("=")):
            return ", ".join(f"{n} {word}" for n, word in found)
    ran = _RAN.findall(output)
    return f"{ran[-1]} ran" if ran else ""


def compare_observed(cwd: Path, command: list[str], python: str, repeat: int, logs: Path | None = None,
                     counter: Counter | None = None, against: Path | None = None) -> list[Run]:
    """See the module docstring; ``logs``: a folder for each run's output (``plain.<i>.log``,
    ``observed.<i>.log``; ``against-plain.<i>.log``, ``against-observed.<i>.log``), else a
    temporary one; ``counter``: counts each run's instructions; ``against``: a folder put first
    on ``PYTHONPATH`` for one more pair per round."""
    runs: list[Run] = []
    recorders: list[tuple[str, dict[str, str] | None]] = [("", None)]
    if against is not None:
        path = os.environ.get("PYTHONPATH", "")
        recorders.insert(0, ("against", plain_env({"PYTHONPATH": str(against) + (os.pathsep + path if path else "")})))
    with tempfile.TemporaryDirectory(prefix="bench-observe-") as tmp:
        folder = logs if logs is not None else Path(tmp)
        for i in range(repeat):
            for recorder, env in recorders:
                for observed in (False, True):
                    prefix = f"{recorder}-" if recorder else ""
                    log = folder / f"{prefix}{'observed' if observed else 'plain'}.{i}.log"
                    facts = Path(tmp) / f"{prefix}facts.{i}.json"
                    argv = [python, "-m", "ci", "observe", "--out", str(facts), "--", *command] if observed else command
                    counts = Path(tmp) / f"counts.{len(runs)}"
                    counts.mkdir()
                    wall, cpu, code = run_argv(counter.wrap(argv, counts) if counter else argv, cwd, log, env)
                    text = log.read_text(encoding="utf-8", errors="replace")
                    wrote = _WROTE.findall(text)
                    entries = f"{wrote[-1][0]} test file(s), {wrote[-1][1]} not complete" if wrote else ""
                    runs.append(Run(observed, wall, cpu, code, outcome_counts(text), os.getloadavg()[0], entries,
                                    counter.read(counts) if counter else 0, recorder))
    return runs


def _pairs(runs: list[Run], recorder: str) -> list[tuple[Run, Run]]:
    """``recorder``'s (plain, observed) pairs, in the order run."""
    return [(a, b) for a, b in zip(runs[::2], runs[1::2]) if a.recorder == recorder]


def pair_ratios(runs: list[Run], recorder: str = "") -> list[float]:
    """Each of ``recorder``'s pairs' observed CPU seconds over its plain CPU seconds, in the order run."""
    return [b.cpu / a.cpu for a, b in _pairs(runs, recorder) if a.cpu > 0]


def instruction_ratios(runs: list[Run], recorder: str = "") -> list[float]:
    """Each of ``recorder``'s pairs' observed instructions over its plain instructions; [] when none were counted."""
    return [b.instructions / a.instructions for a, b in _pairs(runs, recorder) if a.instructions > 0]


def verdict(runs: list[Run]) -> str:
    """MET, MISSED or UNJUDGED (see the module docstring)."""
    if len({(r.code, r.counts) for r in runs}) != 1:
        return "UNJUDGED (exit status or test counts differ between runs)"
    ratios = instruction_ratios(runs) or pair_ratios(runs)  # the ``ci`` as given: "against" is a reference
    if not ratios:
        return "UNJUDGED (no pair with CPU time)"
    return "MET" if statistics.median(ratios) <= 1 + GOAL else "MISSED"


def table_rows(runs: list[Run]) -> list[tuple[object, ...]]:
    """Rows for `bench.table.format_table` (`HEADERS`), one per run in the order run."""
    per_round = 2 * len({r.recorder for r in runs})
    return [(i // per_round + 1, f"{r.recorder + ' ' if r.recorder else ''}{'observed' if r.observed else 'plain'}",
             f"{r.wall:.1f}", f"{r.cpu:.2f}", f"{r.load:.2f}", r.code, r.counts or "-", r.entries or "-", f"{r.instructions:,}" if r.instructions else "-")
            for i, r in enumerate(runs)]


HEADERS = ("pair", "mode", "wall s", "CPU s", "load (1 min)", "exit", "tests", "map", "instructions")


def _median_line(what: str, ratios: list[float]) -> str:
    if not ratios:
        return f"{what}, observed / plain: no pair"
    median = statistics.median(ratios)
    return (f"{what}, observed / plain: median of {len(ratios)} pair(s) x{median:.3f} ({median - 1:+.1%}), "
            f"spread x{min(ratios):.3f} to x{max(ratios):.3f}; per pair x {', '.join(f'{r:.3f}' for r in ratios)}")


def summary(runs: list[Run]) -> str:
    """The median pair ratio with the spread of the pairs (lowest to highest), each pair's ratio,
    the best CPU of each mode and their ratio, and the verdict, one line; when instructions were
    counted, first a line of the same for them (the verdict's measure then); with ``against``
    pairs, first their CPU (and instructions) line, named so, never judged."""
    given = [r for r in runs if not r.recorder]
    plain = min(r.cpu for r in given if not r.observed)
    observed = min(r.cpu for r in given if r.observed)
    head = ""
    if any(r.recorder == "against" for r in runs):
        against = instruction_ratios(runs, "against")
        head = ((_median_line("against: instructions", against) + "\n") if against else "") + \
            _median_line("against: CPU", pair_ratios(runs, "against")) + "\n"
    counted = instruction_ratios(runs)
    head += (_median_line("instructions", counted) + " (the verdict's measure)\n") if counted else ""
    return (f"{head}{_median_line('CPU', pair_ratios(runs))}; best CPU s: plain {plain:.2f}, "
            f"observed {observed:.2f} (x{observed / plain:.3f}); goal median <= +{GOAL:.0%}: {verdict(runs)}")
