"""Render a `Report` as one self-contained HTML page.

Contract:
- Every string from the history or the registry passes through `esc` (text and attributes); a
  link is kept only when it is ``http://`` or ``https://`` (a ``javascript:`` run URL is shown as
  text, never as a link). A Content-Security-Policy allows this page's own script and style
  (by hash) and nothing else: no other script runs, nothing is fetched from anywhere.
- The matrix and the durations are data in the page, drawn by the script only where visible
  (`ci.report.grid`); the rest of the page is whole without the script (static HTML and inline
  SVG), which filters its rows.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Iterable

from ci.report.assets import CSS, JS, script_hash
from ci.report.grid import (CLASS, GANTT_LEFT, GANTT_WIDTH, LANE, count_of, data_block, durations, esc, gantt_scale,
                            link, matrix, name_cell, run_label, safe_url)
from ci.report.model import LETTERS, MEANING, STATUSES, Failure, PullView, Report, TierPlan

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
        _header(report), "<main>", _filters(report), matrix(report),
        '<div id="tip" role="tooltip" tabindex="-1" hidden></div>', _runners(report), _flaky(report),
        durations(report), _plans(report.plans), _pull(report.pull), "</main>", data_block(report), f"<script>{JS}</script></body></html>",
    ]
    return "".join(parts)


def _header(report: Report) -> str:
    legend = "".join(f'<span class="c {CLASS[s]}">{LETTERS[s]}</span>{esc(MEANING[s])}' for s in STATUSES)
    return (f"<header><h1>CI HUD: {esc(report.repo or '(no history yet)')}</h1>"
            f'<div class="meta">generated {esc(report.generated)}; {len(report.runs)} commit(s) of the default '
            f"branch, {len({r.file for r in report.rows})} file(s). The same data: "
            '<a href="report.json">report.json</a></div>'
            '<nav><a href="#matrix-h">matrix</a><a href="#flaky-h">flaky</a><a href="#durations-h">durations</a>'
            '<a href="#runners-h">runners</a><a href="#plan-h">plan</a><a href="#pull-h">pull request</a></nav>'
            f'{_at_fault(report)}<div class="legend">{legend}</div></header>')


def _at_fault(report: Report) -> str:
    """One line naming the runners out of line with their pool and the tiers whose whole pool fails
    tests (`ci.history.runners.pool_review`), where there are any."""
    named = [f"{r.runner or '(unnamed)'} {r.why}" for r in report.runners if r.bad]
    tiers = sorted({p.tier for p in report.pools})
    named += [f"the pool of {t}: {sum(p.tier == t for p in report.pools)} test(s) failing on every runner"
              for t in tiers]
    if not named:
        return ""
    return f'<p class="atfault"><span class="c i">{LETTERS["infra"]}</span> at fault: {esc("; ".join(named))} ' \
           '(<a href="#runners-h">runners</a>)</p>'


def _runners(report: Report) -> str:
    """Every runner with infra failures, the runners out of line with their pool first, then the
    tests failing on a whole pool, in `ci.history.runners`' words."""
    pools = "".join(f'<li><b>the pool of {esc(p.tier)}</b>: <code>{esc(p.node)}</code>: {esc(p.text)}</li>'
                    for p in report.pools)
    pools = f'<h3>Failing on the whole pool (no runner at fault)</h3><ul id="pools">{pools}</ul>' if pools else ""
    if not report.runners:
        return f'<h2 id="runners-h">Runners</h2><p class="empty">No infra failure in the history.</p>{pools}'
    body = []
    mark = f'<span class="c i">{LETTERS["infra"]}</span> out of line'
    for r in report.runners:
        kinds = ", ".join(f"{k} {n}" for k, n in r.kinds)
        words = f"{r.text}; {r.why}" if r.bad else r.text
        body.append(f'<tr class="{"bad" if r.bad else "ok"}"><td>{esc(r.runner or "(unnamed)")}</td>'
                    f'<td>{mark if r.bad else ""}</td><td class="num">{r.infra_reports}</td><td class="num">{r.reports}</td>'
                    f'<td class="num">{r.infra_failures}</td><td>{esc(kinds)}</td><td>{esc(words)}</td></tr>')
    return ('<h2 id="runners-h">Runners with infra failures, those out of line with their pool first</h2>'
            '<div class="wide"><table id="runners"><thead><tr><th>runner</th><th></th>'
            '<th>reports with infra failures</th><th>reports</th><th>infra failures</th><th>kinds</th><th>in words</th>'
            f"</tr></thead><tbody>{''.join(body)}</tbody></table></div>{pools}")


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
            'autocomplete="off"></label>'
            '<label title="g: keep only failing and recently flaky rows in the matrix"><input id="f-green" type="checkbox"> '
            'hide green</label></div>')


def _row_attrs(tier: str, owner: str, statuses: Iterable[str], text: str) -> str:
    return (f' data-tier="{esc(tier)}" data-owner="{esc(owner)}" data-status="{esc(" ".join(sorted(set(statuses))))}"'
            f' data-text="{esc(text)}"')


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
                    f'{name_cell(f.node)}<td>{esc(f.tier)}</td><td>{esc(f.owner)}</td>'
                    f'<td class="num">{f.score:.3f}</td><td class="num">[{f.low:.3f}, {f.high:.3f}]</td>'
                    f"<td>{_interval_svg(f.low, f.score, f.high, top)}</td>"
                    f'<td class="num">{f.failures}/{f.trials}</td><td>{examples}</td></tr>')
    return (f'<h2 id="flaky-h">Flaky tests, most certainly flaky first{count_of("flaky", len(report.flaky))}</h2>'
            f'<div class="wide"><table id="flaky"><thead><tr><th>#</th><th>test</th><th>tier</th><th>owner</th><th>score</th>'
            f"<th>{report.level:.0%} interval</th><th></th><th>failed/trials</th><th>example runs</th></tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _gantt(p: TierPlan) -> str:
    """The timeline's frame: lanes, makespan and bound; its bars are data (`ci.report.grid`)."""
    scale, left, height = gantt_scale(p), GANTT_LEFT, LANE * len(p.shards) + 30
    parts = [f'<svg class="gantt" data-tier="{esc(p.tier)}" width="{GANTT_WIDTH + left + 10:.0f}" height="{height}" '
             f'role="img" aria-label="shards of tier {esc(p.tier)}">']
    for i, lane in enumerate(p.shards):
        y = 4 + i * LANE
        parts.append(f'<text x="2" y="{y + 11}">shard {lane.index}</text>')
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
                   f"{p.lower_bound:.0f} s</h3><div class=\"wide\">{_gantt(p) if p.selected else ''}</div></div>")
    return "".join(out)


def _pull(view: PullView | None) -> str:
    if view is None:
        return '<h2 id="pull-h">Pull request</h2><p class="empty">No pull request asked for (--pr N).</p>'
    body = []
    for t in view.tests:
        body.append(f"<tr{_row_attrs(t.tier, t.owner, (t.status,), t.file)}><td>{esc(t.tier)}</td>{name_cell(t.file)}"
                    f"<td>{'selected' if t.selected else 'not selected'}</td><td>{esc(t.why)}</td>"
                    f'<td class="c {CLASS[t.status]}">{LETTERS[t.status]}</td><td>{esc(t.status)}</td>'
                    f"<td>{'<code>' + esc(t.rerun) + '</code>' if t.rerun else ''}</td>{_why_failed(t.failure)}</tr>")
    changed = ", ".join(esc(c) for c in view.changed) or "(none given)"
    return (f'<h2 id="pull-h">Pull request #{view.pr} at {esc(view.sha[:12] or "(no report yet)")}'
            f'{count_of("pull", len(view.tests))}</h2><p>changed: {changed}</p>'
            '<p>Failing tests first, then those the change selected, then the rest.</p>'
            '<div class="wide"><table id="pull"><thead><tr><th>tier</th><th>file</th><th>selection</th><th>why</th><th></th>'
            f"<th>result</th><th>run it</th><th>why it failed</th></tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def _why_failed(failure: Failure | None) -> str:
    """The pull request row's failure cell: the first failing test, its message and verdict."""
    if failure is None:
        return "<td></td>"
    more = f" (and {failure.failed - 1} more)" if failure.failed > 1 else ""
    infra = f"! infra {failure.infra}" + (f" on {failure.runner}" if failure.runner else "") + ": " if failure.infra else ""
    text = f"{infra}{failure.node}{more}: {failure.message}" + (f" [verdict: {failure.verdict}]" if failure.verdict else "")
    return f'<td class="why-failed{" inf" if infra else ""}" title="{esc(text)}">{esc(text)}</td>'

