"""The HUD's two big tables (the matrix and the durations) as compact data plus an empty grid.

Contract:
- The page holds each table once, as data in one ``<script type="application/json"
  id="hud-data">`` block (a data block: never executed, and the CSP's script hash does not cover
  it): a matrix row is ``[tier index, owner index, file, cells]`` with one ASCII letter per cell
  (`CLASS`), a durations row ``[tier index, owner index, file, samples, p50, p90, est_time,
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

from ci.report.model import Report, Run, TierPlan

CLASS = {"pass": "p", "fail": "f", "flaky": "k", "broken": "b", "skipped": "s", "quarantined": "q", "manual": "m",
         "not-run": "n"}
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


def run_label(run: Run, shas: Counter[str]) -> str:
    """A column's label: the short sha, or the run id where several shown runs share the sha."""
    return run.run_id[-7:] if shas[run.sha] > 1 and run.run_id else run.sha[:7]


def _levels(times: tuple[float | None, ...], est: float | None) -> str:
    """est_time's level, then one per run (see `LEVELS`), all against the largest of them."""
    top = max([t for t in times if t is not None] + [est or 0.0]) or 1.0
    def one(t: float | None) -> str:
        return " " if t is None else chr(65 + round(LEVELS * t / top))
    return one(est or None) + "".join(one(t) for t in times)


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
        "mx": [[ti[r.tier], oi[r.owner], fi[r.file], "".join(CLASS[s] for s in r.cells)] for r in report.rows],
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


def matrix(report: Report) -> str:
    """The matrix's heading and grid (rows from the data block)."""
    shas = Counter(r.sha for r in report.runs)
    heads = "".join(f'<span class="r" role="columnheader" title="{esc(r.sha)} run {esc(r.run_id)} {esc(r.event)} '
                    f'{esc(r.started)}">{link(r.url, run_label(r, shas))}</span>'
                    for r in report.runs)
    return (f'<h2 id="matrix-h">Tier x file, last {len(report.runs)} run(s), oldest left'
            f'{count_of("matrix", len(report.rows))}</h2>'
            + _grid("matrix", "tier x file matrix", '<span class="t" role="columnheader">tier</span>'
                    f'<span class="nm" role="columnheader">file</span>{heads}'))


def durations(report: Report) -> str:
    """The durations' heading and grid (rows from the data block)."""
    cols = "".join(f'<span class="num" role="columnheader">{h}</span>' for h in ("runs", "p50", "p90", "est_time", "timeout"))
    return (f'<h2 id="durations-h">Duration per file (seconds){count_of("durations", len(report.durations))}</h2>'
            + _grid("durations", "duration per file", '<span class="t" role="columnheader">tier</span>'
                    f'<span class="nm" role="columnheader">file</span>{cols}'
                    '<span class="spc" role="columnheader">per run (dashed: est_time)</span>'
                    '<span class="drift" role="columnheader"></span>'))
