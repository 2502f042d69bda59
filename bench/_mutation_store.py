"""The per-mutant results file of ``bench mutation``: one JSON line per mutant run.

Contract:
- `append_result` writes one line and flushes and fsyncs it before returning, so a kill loses at
  most the mutant being run (append-only: `ci.atomic_write`'s whole-file replace would rewrite
  every earlier line per mutant, and an append of one line is what a resume needs).
- `load_results` reads the file back: the last line, when it is not valid JSON of the expected
  shape (a write cut short by a kill), is dropped and reported in ``warnings``; a bad line
  anywhere else is an error naming the file and line (`ResultsError`), never skipped silently.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


class ResultsError(ValueError):
    """A results file that is corrupt before its last line; the message names file and line."""


@dataclass(frozen=True)
class MutantResult:
    """What one mutant did: the test files that failed under it (all of the universe when the run
    gave no verdict: ``broken`` says why), its wall seconds and pytest's exit status."""

    id: str
    path: str
    line: int
    operator: str
    diff: str
    failing: tuple[str, ...]
    wall: float
    exit: int | None
    broken: str = ""


def append_result(path: Path, result: MutantResult) -> None:
    """Append ``result`` as one line; durable when this returns."""
    line = json.dumps(asdict(result), sort_keys=True) + "\n"
    with open(path, "a", encoding="utf-8") as out:
        out.write(line)
        out.flush()
        os.fsync(out.fileno())


def _parse(text: str) -> MutantResult:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not an object")
    data["failing"] = tuple(data["failing"])
    return MutantResult(**data)


def load_results(path: Path) -> tuple[dict[str, MutantResult], list[str]]:
    """Results by mutant id, and warnings (a torn last line dropped). A missing file is empty."""
    if not path.exists():
        return {}, []
    lines = path.read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out: dict[str, MutantResult] = {}
    warnings: list[str] = []
    for number, text in enumerate(lines, 1):
        try:
            result = _parse(text.decode("utf-8"))
        except (ValueError, TypeError, KeyError) as exc:
            if number == len(lines):
                warnings.append(f"{path}:{number}: dropped a torn last line (a run killed mid-write?): {exc}")
                _truncate_to(path, lines[:-1])
                break
            raise ResultsError(f"{path}:{number}: not a mutant result line: {exc}") from None
        out[result.id] = result
    return out, warnings


def _truncate_to(path: Path, kept: list[bytes]) -> None:
    """Cut the torn line off, so the next append starts on a line of its own."""
    size = sum(len(line) + 1 for line in kept)
    with open(path, "r+b") as fh:
        fh.truncate(size)
        fh.flush()
        os.fsync(fh.fileno())


__all__ = ["MutantResult", "ResultsError", "append_result", "load_results"]
