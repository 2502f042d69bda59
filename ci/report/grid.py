"""The HUD's two big tables (the matrix and the durations) as compact data plus an empty grid.

Contract:
- The page holds each table once, as data in one ``<script type="application/json"
  id="hud-data">`` block (a data block: never executed, and the CSP's script hash does not cover
  it): a matrix row is ``[tier index, owner index, file, cells]`` with one ASCII letter per cell
  (`CLASS`), and a fifth element only for a row that is not OK or merged several attempts
  somewhere (`_extra`: its state, failing-since column, streak and days, each failing cell's
  text, the attempts per column, its culprit search), so a green page costs what it did; a durations row ``[tier index, owner index, file, samples, p50, p90, est_time,
  timeout, flags (1 drift, 2 over timeout), levels]``. ``<``, ``>`` and ``&`` are written as JSON
  escapes, so no data can end the block or open markup; the script reads it with ``JSON.parse``.
- The grids' headers are static HTML (escaped, run links only http(s)); their rows are drawn by
  the script (`ci.report.grid_js`), only those in view, at a fixed height, so the page's size is
  about one byte per cell and its load time follows what is visible, not files x runs.
- A name column has a bounded width: a long name is cut with an ellipsis and is whole in the
  cell's text (screen readers) and its ``title`` (hover); every run column keeps its place.
"""

from __future__ import annotations

import html
import json
from collections import Counter

from ci.report.model import FAILING_ROW, FLAKY_ROW, FileRow, Report, Run, TierPlan

CLASS = {"pass": "p", "fail": "f", "flaky": "k", "broken": "b", "infra": "i", "skipped": "s", "quarantined": "q",
         "manual": "m", "not-run": "n"}
GANTT_WIDTH, GANTT_LEFT, LANE = 900.0, 60, 16  # a plan's time axis in px, its lane labels' margin, a lane's height
LEVELS = 60  # a sparkline point is one character: chr(65 + round(LEVELS * seconds / top)); " " is no sample


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def safe_url(url: str) -> str:
    """``url`` if it is an http(s) link, else empty."""
    return url if url.lower().startswith(("https://", "http://")) else ""


def link(url: str, label: str) -> str:
    """An ``<a>`` to ``url`` when it is http(s); otherwise only the escaped label, no link at all."""
    href = safe_url(url)
    return f'<a href="{esc(href)}">{esc(label)}</a>' if href else esc(label)


def name_cell(name: str) -> str:
    """A static table's name cell: its first folder, then as much of its end as fits, the middle
    cut (the grids' script does the same); the whole name in its text and ``title``."""
    cut = name.find("/") + 1
    head = f'<span class="hd">{esc(name[:cut])}</span>' if cut else ""
    return (f'<td class="nm" title="{esc(name)}"><span class="mid">{head}<span class="tl"><span>{esc(name[cut:])}'
            "</span></span></span></td>")


_RUNS_PATH = "/actions/runs/"


def forge_base(url: str) -> str:
    """The repository's web address a GitHub-style run URL lives under
    (``https://host/owner/name/actions/runs/1`` -> ``https://host/owner/name``), else ""."""
    safe = safe_url(url)
    return safe[:safe.index(_RUNS_PATH)] if _RUNS_PATH in safe else ""


def run_label(run: Run, shas: Counter[str]) -> str:
    """A column's label: the short sha, or the run id where several shown runs share the sha."""
    return run.run_id[-7:] if shas[run.sha] > 1 and run.run_id else run.sha[:7]


def _levels(times: tuple[float | None, ...], est: float | None) -> str:
    """est_time's level, then one per run (see `LEVELS`), all against the largest of them."""
    top = max([t for t in times if t is not None] + [est or 0.0]) or 1.0
    def one(t: float | None) -> str:
        return " " if t is None else chr(65 + round(LEVELS * t / top))
    return one(est or None) + "".join(one(t) for t in times)


_STATE_CODE = {FAILING_ROW: "f", FLAKY_ROW: "k"}


def _extra(row: FileRow) -> dict[str, object] | None:
    """A matrix row's fifth element (see the module docstring), or None for an OK row of single
    attempts: ``k`` state (f failing, k flaky), ``s`` failing-since column, ``n`` streak, ``d``
    days, ``x`` ``{column: [node, message, failed tests, verdict, infra kind, runner]}``, ``a``
    attempts per column, ``c`` its culprit search ``[sha ("" while searching), probability, found,
    run link, good, bad]``."""
    extra: dict[str, object] = {}
    if row.state in _STATE_CODE:
        extra["k"] = _STATE_CODE[row.state]
    if row.since >= 0:
        extra.update(s=row.since, n=row.streak, d=round(row.since_days, 1))
    if row.failures:
        extra["x"] = {str(f.run): [f.node, f.message, f.failed, f.verdict, f.infra, f.runner] for f in row.failures}
    if row.attempts:
        extra["a"] = list(row.attempts)
    if row.culprit is not None:
        c = row.culprit
        extra["c"] = [c.sha, c.probability, int(c.found), c.url, c.good, c.bad]
    return extra or None


def _matrix_row(row: FileRow, ti: dict[str, int], oi: dict[str, int], fi: dict[str, int]) -> list[object]:
    out: list[object] = [ti[row.tier], oi[row.owner], fi[row.file], "".join(CLASS[s] for s in row.cells)]
    extra = _extra(row)
    return out + [extra] if extra else out


def gantt_scale(p: TierPlan) -> float:
    """Pixels per second of a tier's timeline."""
    return GANTT_WIDTH / (max(p.makespan, p.lower_bound) or 1.0)


def data_block(report: Report) -> str:
    """The ``<script type="application/json">`` element holding the big tables' rows and the
    plans' bars (``[lane, shard, file index, x px, width px, seconds]``); each file name is
    written once (``files``) and rows refer to it by index."""
    tiers = sorted({r.tier for r in report.rows} | {d.tier for d in report.durations})
    owners = sorted({r.owner for r in report.rows} | {d.owner for d in report.durations})
    ti, oi = {t: i for i, t in enumerate(tiers)}, {o: i for i, o in enumerate(owners)}
    fi: dict[str, int] = {}
    for name in [r.file for r in report.rows] + [d.file for d in report.durations] + [
            b.file for p in report.plans for lane in p.shards for b in lane.bars]:
        fi.setdefault(name, len(fi))
    times = {(r.tier, r.file): r.times for r in report.rows}
    data = {
        "runs": len(report.runs), "tiers": tiers, "owners": owners, "files": list(fi),
        "shas": [r.sha for r in report.runs], "started": [r.started for r in report.runs],
        "mx": [_matrix_row(r, ti, oi, fi) for r in report.rows],
        "du": [[ti[d.tier], oi[d.owner], fi[d.file], d.samples, round(d.p50, 1), round(d.p90, 1), d.est_time, d.timeout,
                (1 if d.drift else 0) | (2 if d.over_timeout else 0), _levels(times.get((d.tier, d.file), ()), d.est_time)]
               for d in report.durations],
        "plans": {p.tier: [[i, lane.index, fi[b.file], round(GANTT_LEFT + b.start * gantt_scale(p), 1),
                            round(max(0.5, b.length * gantt_scale(p)), 1), round(b.length, 1)]
                           for i, lane in enumerate(p.shards) for b in lane.bars] for p in report.plans},
    }
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="hud-data">{text}</script>'


def count_of(table: str, total: int) -> str:
    """A table heading's live count (the script rewrites it as rows are filtered)."""
    return f' <span class="count" data-count-of="{table}" data-total="{total}">{total} shown</span>'


def _grid(gid: str, label: str, heads: str) -> str:
    return (f'<div id="{gid}" class="vgrid" role="grid" aria-label="{label}"><div class="vhead" role="row" '
            f'aria-rowindex="1">{heads}</div><div class="vbody" role="rowgroup"></div></div>'
            '<noscript><p class="empty">This table is drawn by the page\'s script; its data is in '
            '<a href="report.json">report.json</a>.</p></noscript>')


def column_head(run: Run, shas: Counter[str]) -> str:
    """A commit's column header: its short sha (a link to the commit where the run URL tells the
    repository's address, else to the run), its author and its pull request (a link likewise);
    ``data-run`` holds the run link a cell opens (absent when the URL is not http(s))."""
    base = forge_base(run.url)
    sha = link(f"{base}/commit/{run.sha}" if base else run.url, run_label(run, shas))
    author = f'<span class="au">{esc(run.author)}</span>' if run.author else ""
    pr = ""
    if run.pr is not None:
        pr = link(f"{base}/pull/{run.pr}", f"#{run.pr}") if base else esc(f"#{run.pr}")
        pr = f'<span class="prn">{pr}</span>'
    title = " ".join(x for x in (run.sha, run.author, f"#{run.pr}" if run.pr is not None else "",
                                 f"{run.runs} runs" if run.runs > 1 else "", f"run {run.run_id}", run.event, run.started)
                     if x)
    target = safe_url(run.url)
    data = f' data-run="{esc(target)}"' if target else ""
    return f'<span class="r" role="columnheader"{data} title="{esc(title)}">{sha}{author}{pr}</span>'


def matrix(report: Report) -> str:
    """The matrix's heading and grid (rows from the data block)."""
    shas = Counter(r.sha for r in report.runs)
    heads = "".join(column_head(r, shas) for r in report.runs)
    return (f'<h2 id="matrix-h">Tier x file, last {len(report.runs)} commit(s), oldest left, failing first'
            f'{count_of("matrix", len(report.rows))}</h2>'
            + _grid("matrix", "tier x file matrix", '<span class="t" role="columnheader">tier</span>'
                    '<span class="nm" role="columnheader">file</span>'
                    '<span class="since" role="columnheader">failing since</span>'
                    f'<span class="err" role="columnheader">error now</span>{heads}'))


def durations(report: Report) -> str:
    """The durations' heading and grid (rows from the data block)."""
    cols = "".join(f'<span class="num" role="columnheader">{h}</span>' for h in ("runs", "p50", "p90", "est_time", "timeout"))
    return (f'<h2 id="durations-h">Duration per file (seconds){count_of("durations", len(report.durations))}</h2>'
            + _grid("durations", "duration per file", '<span class="t" role="columnheader">tier</span>'
                    f'<span class="nm" role="columnheader">file</span>{cols}'
                    '<span class="spc" role="columnheader">per run (dashed: est_time)</span>'
                    '<span class="drift" role="columnheader"></span>'))
