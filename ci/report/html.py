"""Render a `Report` as one self-contained HTML page.

Contract:
- Every string from the history or the registry passes through `esc` (text and attributes); a
  link is kept only when it is ``http://`` or ``https://`` (a ``javascript:`` run URL is shown as
  text, never as a link). A Content-Security-Policy allows this page's own script and style
  (by hash) and nothing else: no other script runs, nothing is fetched from anywhere.
- The page is whole without the script (static HTML and inline SVG); the script filters rows.
- Cells are one short element each (a class and a letter), so 2,000 files x 30 runs stay about
  a megabyte.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections import Counter
from typing import Iterable

from ci.report.assets import CSS, JS, script_hash
from ci.report.model import LETTERS, MEANING, STATUSES, PullView, Report, Run, TierPlan

CLASS = {"pass": "p", "fail": "f", "flaky": "k", "broken": "b", "skipped": "s", "quarantined": "q", "manual": "m",
         "not-run": "n"}
GANTT_WIDTH = 900.0
LANE = 16


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def safe_url(url: str) -> str:
    """``url`` if it is an http(s) link, else empty."""
    return url if url.lower().startswith(("https://", "http://")) else ""


def link(url: str, label: str) -> str:
    href = safe_url(url)
    return f'<a href="{esc(href)}">{esc(label)}</a>' if href else esc(label)


def _secs(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def render(report: Report) -> str:
    """The page (a str; the writer encodes it as UTF-8)."""
    style = "'sha256-" + base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode() + "'"
    csp = f"default-src 'none'; script-src {script_hash()}; style-src {style}; img-src data:"
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>CI HUD: {esc(report.repo)}</title><style>{CSS}</style></head><body>",
        _header(report), "<main>", _filters(report), _matrix(report), _flaky(report), _durations(report),
        _plans(report.plans), _pull(report.pull), "</main>", f"<script>{JS}</script></body></html>",
    ]
    return "".join(parts)


def _header(report: Report) -> str:
    legend = "".join(f'<span class="c {CLASS[s]}">{LETTERS[s]}</span>{esc(MEANING[s])}' for s in STATUSES)
    return (f"<header><h1>CI HUD: {esc(report.repo or '(no history yet)')}</h1>"
            f'<div class="meta">generated {esc(report.generated)}; {len(report.runs)} run(s) of the default '
            f"branch, {len({r.file for r in report.rows})} file(s). The same data: "
            '<a href="report.json">report.json</a></div>'
            '<nav><a href="#matrix-h">matrix</a><a href="#flaky-h">flaky</a><a href="#durations-h">durations</a>'
            '<a href="#plan-h">plan</a><a href="#pull-h">pull request</a></nav>'
            f'<div class="legend">{legend}</div></header>')


def _options(values: Iterable[str], every: str) -> str:
    return f'<option value="">{esc(every)}</option>' + "".join(
        f'<option value="{esc(v)}">{esc(v)}</option>' for v in sorted(set(values)) if v)


def _filters(report: Report) -> str:
    tiers = [r.tier for r in report.rows] + [p.tier for p in report.plans]
    owners = [r.owner for r in report.rows] + [f.owner for f in report.flaky]
    return ('<div id="filters">'
            f'<label>tier <select id="f-tier">{_options(tiers, "every tier")}</select></label>'
            f'<label>owner <select id="f-owner">{_options(owners, "every owner")}</select></label>'
            f'<label>status <select id="f-status">{_options(STATUSES, "every status")}</select></label>'
            '<label>text <input id="f-text" type="search" placeholder="/ filters by file or test; t, o, s: the selects; Esc clears" '
            'autocomplete="off"></label></div>')


def _row_attrs(tier: str, owner: str, statuses: Iterable[str], text: str) -> str:
    return (f' data-tier="{esc(tier)}" data-owner="{esc(owner)}" data-status="{esc(" ".join(sorted(set(statuses))))}"'
            f' data-text="{esc(text)}"')


def _count(table: str, total: int) -> str:
    return f' <span class="count" data-count-of="{table}" data-total="{total}">{total} shown</span>'


def run_label(run: Run, shas: Counter[str]) -> str:
    """A column's label: the short sha, or the run id where several shown runs share the sha."""
    return run.run_id[-7:] if shas[run.sha] > 1 and run.run_id else run.sha[:7]


def _matrix(report: Report) -> str:
    shas = Counter(r.sha for r in report.runs)
    heads = "".join(f'<th class="r" title="{esc(r.sha)} run {esc(r.run_id)} {esc(r.event)} {esc(r.started)}">'
                    f"{link(r.url, run_label(r, shas))}</th>" for r in report.runs)
    body = []
    for row in report.rows:
        # the shortest valid cell: an unquoted class, no end tag (HTML closes a td at the next one)
        cells = "".join(f"<td class={CLASS[s]}>{LETTERS[s]}" for s in row.cells)
        body.append(f"<tr{_row_attrs(row.tier, row.owner, row.cells or ('not-run',), row.file)}>"
                    f'<th scope="row">{esc(row.tier)}</th><th scope="row">{esc(row.file)}</th>{cells}</tr>')
    return (f'<h2 id="matrix-h">Tier x file, last {len(report.runs)} run(s), oldest left{_count("matrix", len(report.rows))}'
            f'</h2><table id="matrix" class="mx"><thead><tr><th>tier</th><th>file</th>{heads}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def _interval_svg(low: float, score: float, high: float, top: float) -> str:
    def x(v: float) -> float:
        return round(2 + 116 * v / top, 1)
    return (f'<svg width="120" height="12" role="img" aria-label="interval {low:.3f} to {high:.3f}">'
            f'<line x1="2" x2="118" y1="6" y2="6" stroke="#d6d6d6"/>'
            f'<rect class="ci" x="{x(low)}" y="2" width="{max(1.0, x(high) - x(low)):.1f}" height="8" fill="#E69F00"/>'
            f'<line x1="{x(score)}" x2="{x(score)}" y1="0" y2="12" stroke="#000"/></svg>')


def _flaky(report: Report) -> str:
    if not report.flaky:
        return '<h2 id="flaky-h">Flaky tests</h2><p class="empty">No flaky test in the history.</p>'
    top = max(f.high for f in report.flaky) or 1.0
    body = []
    for f in report.flaky:
        examples = " ".join(link(u, f"run {i + 1}") for i, u in enumerate(f.examples))
        body.append(f"<tr{_row_attrs(f.tier, f.owner, ('flaky',), f.node)}><td class=\"num\">{f.rank}</td>"
                    f"<td>{esc(f.node)}</td><td>{esc(f.tier)}</td><td>{esc(f.owner)}</td>"
                    f'<td class="num">{f.score:.3f}</td><td class="num">[{f.low:.3f}, {f.high:.3f}]</td>'
                    f"<td>{_interval_svg(f.low, f.score, f.high, top)}</td>"
                    f'<td class="num">{f.failures}/{f.trials}</td><td>{examples}</td></tr>')
    return (f'<h2 id="flaky-h">Flaky tests, most certainly flaky first{_count("flaky", len(report.flaky))}</h2>'
            f'<table id="flaky"><thead><tr><th>#</th><th>test</th><th>tier</th><th>owner</th><th>score</th>'
            f"<th>{report.level:.0%} interval</th><th></th><th>failed/trials</th><th>example runs</th></tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def _spark(times: tuple[float | None, ...], est: float | None) -> str:
    """Seconds per run as a polyline in a 0..100 box (integer points, style in the sheet: 2,000
    rows stay small)."""
    values = [t for t in times if t is not None]
    top = max(values + [est or 0.0]) or 1.0
    n = max(1, len(times) - 1)
    points = " ".join(f"{round(100 * i / n)},{round(95 - 90 * t / top)}" for i, t in enumerate(times) if t is not None)
    y = round(95 - 90 * (est or 0.0) / top)
    est_line = f'<line x2="100" y1="{y}" y2="{y}"/>' if est else ""
    return f'<svg class="sp" viewBox="0 0 100 100" preserveAspectRatio="none">{est_line}<polyline points="{points}"/></svg>'


def _durations(report: Report) -> str:
    rows = report.durations
    times = {(r.tier, r.file): r.times for r in report.rows}
    body = []
    for d in rows:
        flags = []
        if d.drift:
            flags.append("drift")
        if d.over_timeout:
            flags.append("over timeout")
        flag = f'<span class="drift">{esc(", ".join(flags))}</span>' if flags else ""
        spark = _spark(times[(d.tier, d.file)], d.est_time)
        body.append(f"<tr{_row_attrs(d.tier, d.owner, ('drift',) if d.drift else ('timing',), d.file)}>"
                    f"<td>{esc(d.tier)}</td><td>{esc(d.file)}</td><td class=\"num\">{d.samples}</td>"
                    f'<td class="num">{d.p50:.1f}</td><td class="num">{d.p90:.1f}</td>'
                    f'<td class="num">{_secs(d.est_time)}</td><td class="num">{_secs(d.timeout)}</td>'
                    f"<td>{spark}</td><td>{flag}</td></tr>")
    return (f'<h2 id="durations-h">Duration per file (seconds){_count("durations", len(rows))}</h2>'
            '<table id="durations"><thead><tr><th>tier</th><th>file</th><th>runs</th><th>p50</th><th>p90</th>'
            f"<th>est_time</th><th>timeout</th><th>per run (dashed: est_time)</th><th></th></tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def _gantt(p: TierPlan) -> str:
    scale = GANTT_WIDTH / (max(p.makespan, p.lower_bound) or 1.0)
    left, height = 60, LANE * len(p.shards) + 30
    parts = [f'<svg class="gantt" data-tier="{esc(p.tier)}" width="{GANTT_WIDTH + left + 10:.0f}" height="{height}" '
             f'role="img" aria-label="shards of tier {esc(p.tier)}">']
    for i, lane in enumerate(p.shards):
        y = 4 + i * LANE
        parts.append(f'<text x="2" y="{y + 11}">shard {lane.index}</text>')
        for j, bar in enumerate(lane.bars):
            fill = "#0072B2" if j % 2 == 0 else "#56B4E9"
            x, width = left + bar.start * scale, max(0.5, bar.length * scale)
            parts.append(f'<rect class="bar" data-file="{esc(bar.file)}" data-shard="{lane.index}" '
                         f'x="{x:.2f}" y="{y}" width="{width:.2f}" '
                         f'height="{LANE - 3}" fill="{fill}"><title>{esc(bar.file)}: {bar.length:.1f} s</title></rect>')
            name = bar.file.rsplit("/", 1)[-1]
            if width > 7 * len(name) + 8:  # a label only where it fits inside its bar
                parts.append(f'<text x="{x + 3:.2f}" y="{y + 10}" fill="#fff">{esc(name)}</text>')
    bottom = 4 + LANE * len(p.shards)
    for cls, value, dash, label in (("makespan", p.makespan, "", "makespan"), ("bound", p.lower_bound, "4 3", "lower bound")):
        x = left + value * scale
        parts.append(f'<line class="{cls}" x1="{x:.2f}" x2="{x:.2f}" y1="0" y2="{bottom}" stroke="#D55E00" '
                     f'stroke-dasharray="{dash}"/><text x="{x - 3:.2f}" text-anchor="end" '
                     f'y="{bottom + (12 if cls == "makespan" else 24)}">{label} {value:.0f} s</text>')
    parts.append("</svg>")
    return "".join(parts)


def _plans(plans: tuple[TierPlan, ...]) -> str:
    out = ['<h2 id="plan-h">The plan per tier: one bar per test file, shards as lanes</h2>']
    if not plans:
        out.append('<p class="empty">No plan given.</p>')
    for p in plans:
        out.append(f'<div class="plan" data-tier="{esc(p.tier)}"><h3>{esc(p.tier)}: {p.selected} selected, '
                   f"{p.not_run} not run, {len(p.shards)} shard(s), makespan {p.makespan:.0f} s, lower bound "
                   f"{p.lower_bound:.0f} s</h3>{_gantt(p) if p.selected else ''}</div>")
    return "".join(out)


def _pull(view: PullView | None) -> str:
    if view is None:
        return '<h2 id="pull-h">Pull request</h2><p class="empty">No pull request asked for (--pr N).</p>'
    body = []
    for t in view.tests:
        body.append(f"<tr{_row_attrs(t.tier, t.owner, (t.status,), t.file)}><td>{esc(t.tier)}</td><td>{esc(t.file)}</td>"
                    f"<td>{'selected' if t.selected else 'not selected'}</td><td>{esc(t.why)}</td>"
                    f'<td class="c {CLASS[t.status]}">{LETTERS[t.status]}</td><td>{esc(t.status)}</td>'
                    f"<td>{'<code>' + esc(t.rerun) + '</code>' if t.rerun else ''}</td></tr>")
    changed = ", ".join(esc(c) for c in view.changed) or "(none given)"
    return (f'<h2 id="pull-h">Pull request #{view.pr} at {esc(view.sha[:12] or "(no report yet)")}'
            f'{_count("pull", len(view.tests))}</h2><p>changed: {changed}</p>'
            '<table id="pull"><thead><tr><th>tier</th><th>file</th><th>selection</th><th>why</th><th></th>'
            f"<th>result</th><th>run it</th></tr></thead><tbody>{''.join(body)}</tbody></table>")
