"""The closing lines of ``ci import-suites``: where registrations were read, and every per-commit
suite left on no tier, one line each with its file count and the flag that would place it, so
none is buried among the notes above them."""

from __future__ import annotations

from typing import Iterable

from ci.adopt.suite_import import LeftOut
from ci.adopt.suite_runner import SourceFolder


def summary_lines(folders: Iterable[SourceFolder], left_out: list[LeftOut], *, include_label_gated: bool) -> list[str]:
    """The summary, one string per line (see the module docstring)."""
    read = ", ".join(f"{f.folder}/**/{f.pattern} ({f.where})" for f in folders)
    lines = [f"summary: registrations read from {read}"]
    if include_label_gated:
        lines.append("summary: label-gated suites mapped like any other (--include-label-gated)")
    if not left_out:
        lines.append("summary: every per-commit suite runs on a tier")
        return lines
    files = sum(x.files for x in left_out)
    lines.append(f"summary: {len(left_out)} per-commit suite(s) left on no tier ({files} file registration(s); "
                 f"those files are manual unless another suite places them):")
    width = max(len(x.suite) for x in left_out)
    lines += [f"  {x.suite:<{width}}  {x.files:>4} file(s)  {x.why}; {x.flag}" for x in left_out]
    return lines


__all__ = ["summary_lines"]
