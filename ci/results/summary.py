"""Per-file run summary (counts, time, est_time drift) as a plain-text table or Markdown.

Drift is ``(measured - est_time) / est_time`` in percent; an entry is flagged when both
``|drift| > threshold_pct`` and ``|measured - est_time| > min_seconds`` (tiny files are noisy).
Measured time is the sum of the file's testcase times (under xdist that is summed worker time).

With verdicts (`FailureLine`, computed by the caller: `ci.history.verdict` sits above this layer),
the Markdown starts with the verdict line (the headline, ``3 passed, 1 failed: broken on main since
abc1234``), then the table, then each failing test with its verdict, detail and error line; the
text form adds the verdict line and the failing tests after the table.

`unexcused_skips` tells a run in which nothing ran (every test skipped) from one that tested
something: the caller fails a GPU tier's run on it, naming the grouped skip reasons.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Mapping, Sequence

from ci.atomic_write import atomic_write_bytes
from ci.regular_file import MAX_REPORT_BYTES, read_regular
from ci.results.junit import SKIPPED, CaseResult, FileResult

DEFAULT_THRESHOLD_PCT = 25.0
DEFAULT_MIN_SECONDS = 5.0


@dataclass(frozen=True)
class FailureLine:
    """One failing test as the summary shows it: its verdict (``broken_on_main``, ``flaky``,
    ``infra``, ``new``), the verdict's one-line detail and the failure's error line."""

    node: str
    verdict: str
    detail: str
    error: str = ""


@dataclass(frozen=True)
class SummaryRow:
    file: str
    result: FileResult
    est_time: float | None  # None: the file is not in the registry

    @property
    def drift_pct(self) -> float | None:
        if self.est_time is None or self.est_time <= 0:
            return None
        return (self.result.time - self.est_time) / self.est_time * 100.0


@dataclass(frozen=True)
class Summary:
    rows: tuple[SummaryRow, ...]  # sorted by file
    total: FileResult
    wall_time: float
    threshold_pct: float
    min_seconds: float

    @property
    def drifting(self) -> tuple[SummaryRow, ...]:
        return tuple(r for r in self.rows if _drifts(r, self.threshold_pct, self.min_seconds))

    def slowest(self, n: int = 5) -> tuple[SummaryRow, ...]:
        return tuple(sorted(self.rows, key=lambda r: (-r.result.time, r.file))[:n])


def summarize(files: Mapping[str, FileResult], est_times: Mapping[str, float], wall_time: float,
              threshold_pct: float = DEFAULT_THRESHOLD_PCT, min_seconds: float = DEFAULT_MIN_SECONDS) -> Summary:
    """Build the summary of one run from its per-file results and the registry's est_times."""
    rows = tuple(SummaryRow(f, files[f], est_times.get(f)) for f in sorted(files))
    total = FileResult("TOTAL")
    for r in rows:
        for name in ("tests", "passed", "failed", "skipped", "errors", "reruns"):
            setattr(total, name, getattr(total, name) + getattr(r.result, name))
        total.time += r.result.time
    return Summary(rows, total, wall_time, threshold_pct, min_seconds)


@dataclass(frozen=True)
class SkipGroup:
    """``count`` tests skipped for one ``reason`` (pytest's skip message), in ``files``."""

    reason: str
    count: int
    files: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.count} skipped: {self.reason} ({', '.join(self.files)})"


MAX_REASON_CHARS = 200


def unexcused_skips(cases: Sequence[CaseResult], may_skip: Collection[str]) -> tuple[SkipGroup, ...]:
    """The skips to blame when every test of ``cases`` was skipped: those of the files not in
    ``may_skip`` (entries marked ``may_skip: true``), grouped by reason, most first. ``()`` when a
    test passed, failed or errored, when there is no test, or when every file that skipped is in
    ``may_skip``. An xfail counts as a skip: JUnit reports it as one."""
    if not cases or any(c.outcome != SKIPPED for c in cases):
        return ()
    groups: dict[str, dict[str, None]] = {}
    counts: dict[str, int] = {}
    for case in cases:
        if case.file in may_skip:
            continue
        message = case.attempts[-1].message if case.attempts else ""
        reason = (message.strip().splitlines() or ["(no reason given)"])[0][:MAX_REASON_CHARS]
        groups.setdefault(reason, {})[case.file or "(unknown file)"] = None
        counts[reason] = counts.get(reason, 0) + 1
    return tuple(SkipGroup(r, counts[r], tuple(groups[r])) for r in sorted(groups, key=lambda r: (-counts[r], r)))


def _drifts(row: SummaryRow, threshold_pct: float, min_seconds: float) -> bool:
    drift = row.drift_pct
    return (drift is not None and abs(drift) > threshold_pct
            and abs(row.result.time - (row.est_time or 0.0)) > min_seconds)


_HEAD = ("file", "tests", "passed", "failed", "skipped", "errors", "reruns", "time s", "est s", "drift")


def _cells(row: SummaryRow) -> list[str]:
    r = row.result
    drift = row.drift_pct
    return [row.file or "(unknown file)", str(r.tests), str(r.passed), str(r.failed), str(r.skipped),
            str(r.errors), str(r.reruns), f"{r.time:.1f}",
            "-" if row.est_time is None else f"{row.est_time:.0f}",
            "-" if drift is None else f"{drift:+.0f}%"]


def _total_cells(s: Summary) -> list[str]:
    t = s.total
    return ["TOTAL", str(t.tests), str(t.passed), str(t.failed), str(t.skipped), str(t.errors),
            str(t.reruns), f"{t.time:.1f}", "", ""]


def failures_text(headline: str, failures: Sequence[FailureLine]) -> str:
    """``verdict: <headline>`` and one block per failing test (plain text); ``""`` without a headline."""
    if not headline:
        return ""
    lines = [f"verdict: {headline}"]
    for f in failures:
        lines.append(f"  {f.verdict:<14}  {f.node}")
        lines.append(f"      {f.detail}")
        if f.error:
            lines.append(f"      {f.error}")
    return "\n".join(lines)


def _md(text: str) -> str:
    """One line, no backtick to end a code span early (the text is a test's, not ours)."""
    return text.replace("`", "'").replace("\r", " ").replace("\n", " ")


def to_text(s: Summary) -> str:
    table = [list(_HEAD)] + [_cells(r) for r in s.rows] + [_total_cells(s)]
    widths = [max(len(row[i]) for row in table) for i in range(len(_HEAD))]
    fmt = lambda row: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                for i, (c, w) in enumerate(zip(row, widths)))
    lines = [fmt(table[0]), fmt(["-" * w for w in widths])] + [fmt(r) for r in table[1:]]
    lines.append(f"wall time {s.wall_time:.1f}s")
    if s.rows:
        lines.append("slowest: " + ", ".join(f"{r.file} {r.result.time:.1f}s" for r in s.slowest()))
    for r in s.drifting:
        lines.append(f"drift: {r.file} took {r.result.time:.1f}s, est_time {r.est_time:.0f}s "
                     f"({r.drift_pct:+.0f}%); update it with `python -m ci durations --write`")
    for r in s.rows:
        if r.est_time is None:
            lines.append(f"unregistered: {r.file or '(unknown file)'} is not in registry.yaml")
    return "\n".join(lines)


def to_markdown(s: Summary, title: str = "Test summary", headline: str = "",
                failures: Sequence[FailureLine] = ()) -> str:
    """The step summary: the verdict line (``headline``) first when given, the table, then the
    failing tests with their verdicts and error lines."""
    lines = [f"### {title}", ""]
    if headline:
        lines += [f"**{_md(headline)}**", ""]
    lines += ["| " + " | ".join(_HEAD) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(_HEAD) - 1)) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |" for r in s.rows]
    lines.append("| " + " | ".join(f"**{c}**" if c else "" for c in _total_cells(s)) + " |")
    lines.append("")
    lines.append(f"Wall time {s.wall_time:.1f}s.")
    if s.drifting:
        lines.append("")
        lines.append(f"Drift over {s.threshold_pct:.0f}% (and {s.min_seconds:.0f}s):")
        lines += [f"- `{r.file}`: {r.result.time:.1f}s vs est_time {r.est_time:.0f}s ({r.drift_pct:+.0f}%)"
                  for r in s.drifting]
    if failures:
        lines += ["", "Failing tests:", ""]
        for f in failures:
            lines.append(f"- **{f.verdict}** `{_md(f.node)}`: {_md(f.detail)}")
            if f.error:
                lines.append(f"  <br>`{_md(f.error)}`")
    return "\n".join(lines) + "\n"


def append_step_summary(markdown: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Append to ``$GITHUB_STEP_SUMMARY`` when set; returns the file written, or None.

    The append is a crash-safe rewrite (`ci.atomic_write`): the file ends up with the earlier
    steps' text plus all of ``markdown``, or unchanged. Raises OSError when it cannot be written.
    """
    target = (os.environ if env is None else env).get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    try:
        earlier = read_regular(path, MAX_REPORT_BYTES)
    except FileNotFoundError:
        earlier = b""
    atomic_write_bytes(path, earlier + markdown.encode("utf-8"))
    return path
