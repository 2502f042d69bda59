"""The page's style sheet and script, inline (the page loads nothing, from anywhere).

The script draws the two big tables from the page's data block (`ci.report.grid_js`), shows a
failing cell's tip (`ci.report.tip_js`), filters every table (and, by tier, the plans) and opens
a cell's run. Its keys: ``/`` focuses the text filter; ``t``, ``o`` and ``s`` focus the tier,
owner and status selects (ordinary form controls: arrows or first letters choose); ``g`` toggles
hide-green (the matrix keeps only failing and recently flaky rows); Escape clears every filter.
The filters are kept in the URL's fragment (``#tier=cpu&text=foo&hide=green``, by
``history.replaceState``), so a reload or a shared link opens with them; a fragment without
``=`` (a section's anchor) leaves them as they are.
"""

from __future__ import annotations

import base64
import hashlib

from ci.report.grid_js import GRID_JS
from ci.report.tip_js import TIP_JS

CSS = """
:root{--pass:#009E73;--fail:#D55E00;--flaky:#E69F00;--broken:#CC79A7;--skipped:#56B4E9;--q:#7f7f7f;
--manual:#c8c8c8;--none:#f2f2f2;--ink:#1b1b1b;--muted:#5d5d5d;--line:#d6d6d6}
*{box-sizing:border-box}
body{font:13px/1.35 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);margin:0;background:#fff}
header{padding:10px 16px;border-bottom:1px solid var(--line);background:#fafafa}
h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 6px;scroll-margin-top:56px}
.meta{color:var(--muted)}
nav a{margin-right:12px}
main{padding:0 16px 24px}
#filters{position:sticky;top:0;min-height:40px;background:#fff;padding:8px 0;border-bottom:1px solid var(--line);z-index:2;
display:flex;flex-wrap:wrap;gap:4px 12px;align-items:center}
#filters input[type=search]{width:30em;max-width:100%}
table{border-collapse:collapse}
th,td{padding:1px 6px;text-align:left;white-space:nowrap}
thead th{position:sticky;top:40px;background:#fff;border-bottom:1px solid var(--line)}
tbody tr:nth-child(even){background:#fafafa}
.num{text-align:right;font-variant-numeric:tabular-nums}
.vgrid{background:#fff;position:relative;overflow:auto;width:max-content;max-height:70vh;max-width:100%;border:1px solid var(--line);margin-bottom:4px}
.vhead{position:sticky;top:0;z-index:1;display:flex;align-items:flex-end;width:max-content;min-width:100%;background:#fff;
border-bottom:1px solid var(--line);font-weight:700}
.vbody{position:relative;contain:strict}
.vr{position:absolute;left:0;right:0;height:20px;line-height:20px;display:flex;contain:strict}
.vr.odd{background:#fafafa}
.vgrid .t,.vgrid .nm,.vgrid .num,.vgrid .spc,.vgrid .drift{flex:none;padding:0 6px;white-space:nowrap;overflow:hidden;
text-overflow:ellipsis}
.vgrid .t{width:90px}.vgrid .nm{width:300px}.vgrid .num{width:76px;text-align:right}.vgrid .spc{width:190px}
.vgrid .drift{width:130px}
.nm{max-width:300px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.mid{display:flex}.mid .hd{flex:0 0 auto;max-width:25%;overflow:hidden;text-overflow:ellipsis}
.mid .tl{flex:0 1 auto;min-width:0;overflow:hidden;text-overflow:ellipsis;direction:rtl}
.mid .tl>span{direction:ltr;unicode-bidi:isolate}
.vgrid .err{flex:none;width:300px;padding:0 6px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;
font:12px/20px ui-monospace,Menlo,Consolas,monospace}
.i,.inf{background:#000;color:#F0E442}
.vgrid .err.inf{font-weight:700}
.vgrid .err .cul{font-weight:700}
.vgrid .c,.vhead .r{flex:none;width:20px;padding:0;text-align:center}
.vgrid .c,td.c{width:20px;min-width:20px;padding:0;text-align:center;font-weight:700;border:1px solid #fff}
.vgrid .c{cursor:pointer}
[data-c]:focus{outline:2px solid var(--ink);outline-offset:-2px}
.vhead .r{font-size:10px;font-weight:400;display:flex;flex-direction:column;align-items:center;gap:3px}
.vhead .r a,.vhead .r .au,.vhead .r .prn{writing-mode:vertical-rl;text-decoration:none;color:var(--muted)}
.vhead .r .au{max-height:64px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;color:var(--ink)}
.vgrid .since{flex:none;width:150px;padding:0 6px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;
color:var(--fail);font-weight:700}
.vgrid .c[data-n]{position:relative}
.vgrid .c[data-n]::after{content:attr(data-n);position:absolute;right:1px;top:-6px;font-size:8px;font-weight:400}
#tip{position:fixed;z-index:5;max-width:min(560px,100vw - 8px);background:#fff;color:var(--ink);border:1px solid var(--ink);
padding:6px 8px;box-shadow:0 2px 8px rgba(0,0,0,.25);white-space:pre-wrap;overflow-wrap:anywhere}
#tip[hidden]{display:none}
#tip .tt{font-weight:700}#tip .tn,#tip .tm{font:12px ui-monospace,Menlo,Consolas,monospace}
#tip .tv{font-style:italic}
#tip.pinned{outline:2px solid var(--fail)}
#pull td.why-failed{max-width:420px;overflow:hidden;text-overflow:ellipsis}
header,p,h2,h3{overflow-wrap:anywhere}
.p{background:var(--pass);color:#fff}.f{background:var(--fail);color:#fff}.k{background:var(--flaky);color:#000}
.b{background:var(--broken);color:#000}.s{background:var(--skipped);color:#000}.q{background:var(--q);color:#fff}
.m{background:var(--manual);color:#000}.n{background:var(--none);color:var(--muted)}
.legend span.c{display:inline-block;width:18px;text-align:center;font-weight:700;margin:0 3px 0 10px}
.drift{color:var(--fail);font-weight:700}
.hidden{display:none}
.plan{content-visibility:auto;contain-intrinsic-size:auto 400px}
code{font:12px ui-monospace,Menlo,Consolas,monospace}
svg text{font:11px system-ui,sans-serif}
.sp{width:120px;height:18px}.sp polyline{fill:none;stroke:#0072B2;vector-effect:non-scaling-stroke}
.sp line{stroke:#7f7f7f;stroke-dasharray:3 2;vector-effect:non-scaling-stroke}
.count{color:var(--muted);font-weight:400;font-size:12px}
.empty{color:var(--muted)}
.wide{max-width:100%;overflow:auto}.wide thead th{top:0}
#runners tr.bad td{font-weight:700}
#pools li{overflow-wrap:anywhere}
.atfault{margin:4px 0 0;font-weight:700}
@media (max-width:700px){
header{padding:8px}main{padding:0 8px 16px}
#filters{position:static}
#filters input[type=search]{width:100%}
.legend{font-size:11px}
.vgrid .t{width:52px}.vgrid .nm{width:170px}.vgrid .since{width:64px}
.mid .hd{flex:0 1 auto;min-width:0;max-width:none}.mid .tl{flex:0 0 auto;max-width:100%}
.vgrid .err{order:1}
}
"""

FILTER_JS = r"""
(function(){
  var f = {tier: document.getElementById('f-tier'), owner: document.getElementById('f-owner'),
           status: document.getElementById('f-status'), text: document.getElementById('f-text')};
  var green = document.getElementById('f-green');  // checked: hide green rows (#hide=green)
  var SHORTCUT = {t: 'tier', o: 'owner', s: 'status'}, KEYS = ['tier', 'owner', 'status', 'text'];
  function typing(el){ return el && (el.tagName === 'SELECT' || (el.tagName === 'INPUT' && el.type !== 'checkbox')); }
  var rows = Array.prototype.slice.call(document.querySelectorAll('tr[data-tier]'));  // the small tables
  var plans = Array.prototype.slice.call(document.querySelectorAll('div.plan'));  // by tier only
  function fromUrl(){  // #tier=cpu&text=foo; a plain anchor (#flaky-h) leaves the filters as they are
    var h = window.location.hash.slice(1); if (h.indexOf('=') < 0) return false;
    var q = new URLSearchParams(h);
    KEYS.forEach(function(k){
      var v = q.get(k) || '', el = f[k];
      if (el.tagName === 'SELECT' && v && !Array.prototype.some.call(el.options, function(o){ return o.value === v; })) v = '';
      el.value = v;
    });
    green.checked = q.get('hide') === 'green';
    return true;
  }
  function toUrl(){
    var q = new URLSearchParams();
    KEYS.forEach(function(k){ if (f[k].value) q.set(k, f[k].value); });
    if (green.checked) q.set('hide', 'green');
    var s = q.toString(), here = window.location.hash.slice(1);
    if (s === here || (!s && here.indexOf('=') < 0)) return;
    history.replaceState(null, '', s ? '#' + s : window.location.pathname + window.location.search);
  }
  function apply(){
    var tier = f.tier.value, owner = f.owner.value, status = f.status.value, text = f.text.value.toLowerCase();
    var shown = HUD.filter(tier, owner, status, text, green.checked);
    TIP.hide(true);
    rows.forEach(function(r){
      var ok = (!tier || r.dataset.tier === tier) && (!owner || r.dataset.owner === owner)
        && (!status || (' ' + r.dataset.status + ' ').indexOf(' ' + status + ' ') >= 0)
        && (!text || r.dataset.text.toLowerCase().indexOf(text) >= 0);
      r.classList.toggle('hidden', !ok);
      var t = r.closest('table').id; shown[t] = (shown[t] || 0) + (ok ? 1 : 0);
    });
    plans.forEach(function(p){ p.classList.toggle('hidden', !!tier && p.dataset.tier !== tier); });
    document.querySelectorAll('[data-count-of]').forEach(function(el){
      el.textContent = (shown[el.dataset.countOf] || 0) + ' of ' + el.dataset.total + ' shown';
    });
    toUrl();
  }
  ['tier', 'owner', 'status'].forEach(function(k){ f[k].addEventListener('change', apply); });
  f.text.addEventListener('input', apply);
  green.addEventListener('change', apply);
  window.addEventListener('hashchange', function(){ if (fromUrl()) apply(); });
  document.addEventListener('keydown', function(e){
    if (e.key === '/' && document.activeElement !== f.text) { e.preventDefault(); f.text.focus(); f.text.select(); }
    else if (SHORTCUT[e.key] && !typing(e.target)) { e.preventDefault(); f[SHORTCUT[e.key]].focus(); }
    else if (e.key === 'g' && !typing(e.target)) { e.preventDefault(); green.checked = !green.checked; apply(); }
    else if (e.key === 'Escape') {
      f.tier.value = ''; f.owner.value = ''; f.status.value = ''; f.text.value = ''; green.checked = false; apply();
      if (document.activeElement) document.activeElement.blur();
    }
  });
  fromUrl();
  apply();
})();
"""

JS = TIP_JS + GRID_JS + FILTER_JS


def script_hash() -> str:
    """The CSP source that allows `JS` and no other script: ``'sha256-...'``."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(JS.encode()).digest()).decode() + "'"
