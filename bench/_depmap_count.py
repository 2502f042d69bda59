"""Instructions a command's whole process tree executes: the load-independent measure of
``bench depmap --observe --count=...``.

CPU seconds on a shared machine move with its load (pairs of one bench row read +-0.15 apart);
the number of user-space instructions a run executes does not, so a 2 % change shows. Two
counters, chosen by `pick`:

- ``perf``: ``perf stat -e instructions:u`` (the hardware counter, children inherited; costs
  nothing measurable). Needs a PMU and ``kernel.perf_event_paranoid`` <= 2; a VM without a
  virtual PMU reads ``<not supported>``.
- ``callgrind``: ``valgrind --tool=callgrind --trace-children=yes`` (every process of the tree,
  each one's ``Collected`` count summed). Works anywhere valgrind runs, about 40 times slower:
  work that is paced by the clock (the slipcover core's 0.1 s settles) runs more often per test
  than natively, so its share reads high.

Contract: `Counter.wrap` turns ``argv`` into the counted command writing into ``folder`` (empty,
one per run), `Counter.read` gives the instructions counted there (0 when nothing was).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

CHOICES = ("auto", "perf", "callgrind")
_PERF_LINE = re.compile(r"^(\d+),[^,]*,instructions:u", re.MULTILINE)
_COLLECTED = re.compile(r"^==\d+== Collected : (\d+)$", re.MULTILINE)


@dataclass(frozen=True)
class Counter:
    """``perf`` or ``callgrind`` (see the module docstring)."""

    name: str

    def wrap(self, argv: list[str], folder: Path) -> list[str]:
        """``argv`` run under this counter, its counts written into ``folder``."""
        if self.name == "perf":
            return ["perf", "stat", "-e", "instructions:u", "-x", ",", "-o", str(folder / "perf.csv"), "--", *argv]
        return ["valgrind", "--tool=callgrind", "--trace-children=yes", "--callgrind-out-file=/dev/null",
                f"--log-file={folder / 'callgrind.%p.log'}", "--", *argv]

    def read(self, folder: Path) -> int:
        """The user-space instructions of the whole tree counted into ``folder`` by `wrap`'s command."""
        if self.name == "perf":
            path = folder / "perf.csv"
            return sum(map(int, _PERF_LINE.findall(path.read_text(encoding="utf-8")))) if path.is_file() else 0
        return sum(int(n) for log in folder.glob("callgrind.*.log")
                   for n in _COLLECTED.findall(log.read_text(encoding="utf-8", errors="replace")))


def _perf_counts() -> bool:
    if shutil.which("perf") is None:
        return False
    proc = subprocess.run(["perf", "stat", "-e", "instructions:u", "-x", ",", "--", "true"],
                          capture_output=True, text=True, check=False)
    return proc.returncode == 0 and _PERF_LINE.search(proc.stderr) is not None


def pick(choice: str) -> Counter | str:
    """The counter for ``--count=CHOICE`` (`CHOICES`; ``auto``: perf where it counts, else
    callgrind), or a one-line problem naming what is missing and what to do."""
    if choice not in CHOICES:
        return f"--count={choice}: not one of {', '.join(CHOICES)}"
    if choice in ("auto", "perf") and _perf_counts():
        return Counter("perf")
    if choice == "perf":
        return ("--count=perf: `perf stat -e instructions:u` counts nothing here (no PMU, or "
                "kernel.perf_event_paranoid > 2); use --count=callgrind")
    if shutil.which("valgrind") is None:
        return (f"--count={choice}: valgrind is not installed (apt-get install -y valgrind)"
                + ("" if choice == "callgrind" else " and perf counts no instructions here"))
    return Counter("callgrind")
