"""The script of the HUD's two big tables (the matrix and the durations), as a string.

Contract:
- The rows come from the page's JSON data block (``<script type="application/json" id="hud-data">``,
  read with ``JSON.parse``, never evaluated); text goes into the DOM only through ``textContent``
  and ``title``, never as markup.
- A grid renders only the rows in (or near) its scroll box's view: rows are absolutely placed at
  ``ROW`` px each, so the page's cost follows what is visible, not files x runs.
- Filtering (`HUD.filter`) works on the data of every row, rendered or not, and re-renders.
- Keyboard: one cell of each grid is in the tab order (roving tabindex); arrows, Home/End,
  PageUp/PageDown, Ctrl+Home/End move it, scrolling a row that is not rendered yet into view and
  rendering it first; Enter on a matrix cell does what a click does: a failing or flaky cell pins
  its failure tip (`ci.report.tip_js`), any other opens its run (the column header's
  ``data-run``).
- The matrix draws a failing-since cell and an error cell per row (for a row failing now, its
  latest failure's error line, inline: cut with an ellipsis, whole in its text and ``title``; an
  infra failure is marked ``!`` with its kind and runner, class ``inf``), a failing-since cell (the streak's first commit, its failing runs and
  days; "≤" where no earlier result is shown, so it may have begun before), a small count on a
  cell that merged several attempts, and shows a failing cell's tip on hover; `HUD.filter`'s
  ``hideGreen`` keeps only failing and flaky rows.
"""

GRID_JS = r"""
var HUD = (function(){
  var ROW = 20, OVER = 12;
  var DATA = JSON.parse(document.getElementById('hud-data').textContent);
  var KIND = {p: 'pass', f: 'fail', k: 'flaky', b: 'broken', i: 'infra', s: 'skipped', q: 'quarantined', m: 'manual',
              n: 'not-run'};
  var LETTER = {p: '\u2713', f: '\u2717', k: '~', b: 'B', i: '!', s: 'S', q: 'Q', m: 'M', n: '\u00b7'};
  function span(cls, text, role){
    var s = document.createElement('span'); s.className = cls; s.textContent = text;
    if (role) s.setAttribute('role', role); return s;
  }
  function grid(box, rows, opts){
    var body = box.querySelector('.vbody'), head = box.querySelector('.vhead');
    var g = {box: box, rows: rows, shown: rows.map(function(_, i){ return i; }), r: 0, c: 0, a: -1, b: -1,
             cols: opts.cols, draw: opts.draw, open: opts.open};
    body.style.width = head.scrollWidth + 'px';
    function place(){
      body.style.height = (g.shown.length * ROW) + 'px';
      box.setAttribute('aria-rowcount', String(g.shown.length + 1));
    }
    var drawn = {};  // position in g.shown -> its row element, for the rows drawn now
    function draw(i){
      var row = document.createElement('div');
      row.className = i % 2 ? 'vr odd' : 'vr'; row.setAttribute('role', 'row');
      row.setAttribute('aria-rowindex', String(i + 2)); row.style.top = (i * ROW) + 'px';
      row.dataset.pos = String(i);
      opts.draw(row, rows[g.shown[i]], g.shown[i]);
      var cells = row.querySelectorAll('[data-c]');
      for (var j = 0; j < cells.length; j++) cells[j].tabIndex = (i === g.r && j === g.c) ? 0 : -1;
      return row;
    }
    g.cell = function(){ var row = drawn[g.r]; return row ? row.querySelector('[data-c="' + g.c + '"]') : null; };
    function rove(r, c){  // the one cell in the tab order
      var old = g.cell(); if (old) old.tabIndex = -1;
      g.r = r; g.c = c; var el = g.cell(); if (el) el.tabIndex = 0;
    }
    // Draws the rows in view (and OVER more each side); keeps those already drawn unless ``force``.
    g.render = function(force){
      var top = Math.max(0, box.scrollTop), h = box.clientHeight || 600;
      var first = Math.floor(top / ROW), last = Math.ceil((top + h) / ROW);
      if (!force && first >= g.a && last <= g.b) return;
      var a = Math.max(0, first - OVER), b = Math.min(g.shown.length, last + OVER), p;
      var inside = box.contains(document.activeElement);
      if (force) { body.replaceChildren(); drawn = {}; }
      for (p in drawn) if (p < a || p >= b) { body.removeChild(drawn[p]); delete drawn[p]; }
      g.a = a; g.b = b;
      var frag = document.createDocumentFragment();
      for (var i = a; i < b; i++) if (!drawn[i]) { drawn[i] = draw(i); frag.appendChild(drawn[i]); }
      body.appendChild(frag);
      if (!inside && (g.r < a || g.r >= b) && g.shown.length) rove(Math.min(g.shown.length - 1, first), g.c);
      if (inside && !box.contains(document.activeElement)) { var el = g.cell(); if (el) el.focus({preventScroll: true}); }
    };
    g.filter = function(keep){
      g.shown = []; for (var i = 0; i < rows.length; i++) if (keep(rows[i])) g.shown.push(i);
      g.r = 0; place(); g.render(true); return g.shown.length;
    };
    g.move = function(r, c){
      if (!g.shown.length) return;
      rove(Math.max(0, Math.min(g.shown.length - 1, r)), Math.max(0, Math.min(g.cols - 1, c)));
      var headH = head.offsetHeight, view = box.clientHeight - headH;
      if (g.r * ROW < box.scrollTop) box.scrollTop = g.r * ROW;
      else if ((g.r + 1) * ROW > box.scrollTop + view) box.scrollTop = (g.r + 1) * ROW - view;
      g.render(false);
      var el = g.cell(); if (el) { el.tabIndex = 0; el.focus(); }
    };
    box.addEventListener('scroll', function(){ g.render(false); });  // scroll events come once a frame
    box.addEventListener('keydown', function(e){
      var page = Math.max(1, Math.floor((box.clientHeight - head.offsetHeight) / ROW) - 1), r = g.r, c = g.c;
      if (!e.target.hasAttribute('data-c')) return;
      if (e.key === 'ArrowDown') r++; else if (e.key === 'ArrowUp') r--;
      else if (e.key === 'ArrowRight') c++; else if (e.key === 'ArrowLeft') c--;
      else if (e.key === 'PageDown') r += page; else if (e.key === 'PageUp') r -= page;
      else if (e.key === 'Home') { if (e.ctrlKey) r = 0; c = 0; }
      else if (e.key === 'End') { if (e.ctrlKey) r = g.shown.length - 1; c = g.cols - 1; }
      else if (e.key === 'Enter' && g.open) { g.open(g.shown[g.r], g.c, g.cell()); e.preventDefault(); return; }
      else return;
      e.preventDefault(); g.move(r, c);
    });
    box.addEventListener('click', function(e){
      var el = e.target.closest('[data-c]'); if (!el) return;
      rove(+el.closest('.vr').dataset.pos, +el.dataset.c);
      if (g.open) g.open(g.shown[g.r], g.c, el);
    });
    if (opts.hover) {
      box.addEventListener('mouseover', function(e){
        var el = e.target.closest('[data-c]'); if (el) opts.hover(g.shown[+el.closest('.vr').dataset.pos], +el.dataset.c, el);
      });
      box.addEventListener('mouseleave', function(){ TIP.hide(false); });
    }
    place(); g.render(true);
    return g;
  }
  // A name keeps its first folder and as much of its end as fits: the middle gives way (the tail
  // is cut at its start); the text is the whole name (copy, screen readers), and so is the title.
  function names(row, tier, file){
    row.dataset.tier = tier; row.dataset.file = file;
    row.appendChild(span('t', tier, 'rowheader'));
    var nm = span('nm mid', '', 'rowheader'), cut = file.indexOf('/') + 1; nm.title = file;
    if (cut) nm.appendChild(span('hd', file.slice(0, cut)));
    var tl = span('tl', ''); tl.appendChild(span('', file.slice(cut))); nm.appendChild(tl); row.appendChild(nm);
  }
  var heads = document.querySelectorAll('#matrix .vhead .r');  // data-run: the run a cell opens (http(s) only)
  function since(d){
    var x = d[4]; if (!x || x.s === undefined) return null;
    var text = DATA.shas[x.s].slice(0, 7) + ' \u00b7 ' + x.n + (x.n > 1 ? ' runs' : ' run') + (x.d > 0 ? ', ' + x.d + ' d' : '');
    return (/[pkfbi]/.test(d[3].slice(0, x.s)) ? '' : '\u2264 ') + text;
  }
  function failure(d, c){ return d[4] && d[4].x && d[4].x[c]; }
  function cause(x){ return x[4] ? 'infra ' + x[4] + (x[5] ? ' on ' + x[5] : '') : ''; }
  function culprit(c){  // [sha, probability, found, run link, good, bad]: its search, first in the error cell
    var el = document.createElement(c[3] ? 'a' : 'span'), at = c[4].slice(0, 7) + '..' + c[5].slice(0, 7);
    el.className = 'cul'; if (c[3]) el.href = c[3];
    el.textContent = c[0] ? 'culprit ' + c[0].slice(0, 7) + ' (' + (100 * c[1]).toFixed(1) + '%' + (c[2] ? '' : ', unsure') + ')'
                          : 'culprit: searching';
    el.title = (c[0] ? 'culprit ' + c[0] + ', probability ' + c[1].toFixed(3) + (c[2] ? '' : ' (stopped short)')
                     : 'culprit search requested, no answer yet') + ' in ' + at + (c[3] ? '; opens the search run' : '');
    return el;
  }
  function errCell(d){  // a failing row's latest failure, inline, after its culprit search
    var x = d[4] && d[4].k === 'f' && d[4].x, keys = x ? Object.keys(x) : [], last = keys.length ? x[keys[keys.length - 1]] : null;
    var el = span('err', '', 'gridcell'); if (!last) return el;
    if (d[4].c) { el.appendChild(culprit(d[4].c)); el.appendChild(document.createTextNode(' \u00b7 ')); }
    el.appendChild(document.createTextNode((last[4] ? '! ' + cause(last) + ': ' : '') + last[1]));
    el.title = last[0] + '\n' + last[1] + (last[3] ? '\nverdict: ' + last[3] : '') + (d[4].c ? '\n' + el.firstChild.title : '');
    if (last[4]) el.classList.add('inf');
    return el;
  }
  function tipInfo(d, c){
    var x = failure(d, c); if (!x) return null;
    var n = d[4].a ? d[4].a[c] : 1, url = heads[c] && heads[c].dataset.run;
    return {title: DATA.tiers[d[0]] + ' ' + DATA.files[d[2]] + ' at ' + DATA.shas[c].slice(0, 7) + ': ' + KIND[d[3][c]]
            + (n > 1 ? ' (' + n + ' attempts)' : '') + (x[4] ? ' (' + cause(x) + ')' : ''), node: x[0], message: x[1], failed: x[2], verdict: x[3], url: url};
  }
  var mx = grid(document.getElementById('matrix'), DATA.mx, {cols: DATA.runs,
    draw: function(row, d){
      names(row, DATA.tiers[d[0]], DATA.files[d[2]]);
      var text = since(d), sc = span('since', text || '', 'gridcell');
      if (text) { sc.title = DATA.shas[d[4].s] + ' ' + DATA.started[d[4].s]; row.classList.add('failing'); }
      row.appendChild(sc); row.appendChild(errCell(d));
      for (var j = 0; j < d[3].length; j++) {
        var s = span('c ' + d[3][j], LETTER[d[3][j]], 'gridcell'), n = d[4] && d[4].a ? d[4].a[j] : 1, x = failure(d, j);
        s.dataset.c = String(j); if (n > 1) s.dataset.n = String(n);
        s.setAttribute('aria-label', KIND[d[3][j]] + (x && x[4] ? ' (' + cause(x) + ')' : '') + (n > 1 ? ', ' + n + ' attempts' : '')
                       + (x ? ': ' + x[0] + ': ' + x[1] : ''));
        row.appendChild(s);
      }
    },
    hover: function(i, c, el){ var info = tipInfo(DATA.mx[i], c); if (info) TIP.show(el, info, false); else TIP.hide(false); },
    open: function(i, c, el){
      var info = tipInfo(DATA.mx[i], c); if (info && el) { TIP.show(el, info, true); return; }
      var url = heads[c] && heads[c].dataset.run; if (url) window.location.href = url;
    }});
  function secs(v){ return v === null ? '' : v.toFixed(1); }
  function spark(levels){
    var NS = 'http://www.w3.org/2000/svg', svg = document.createElementNS(NS, 'svg');
    svg.setAttribute('class', 'sp'); svg.setAttribute('viewBox', '0 0 100 100'); svg.setAttribute('preserveAspectRatio', 'none');
    var n = Math.max(1, levels.length - 2), pts = [];
    for (var i = 1; i < levels.length; i++) if (levels[i] !== ' ')
      pts.push(Math.round(100 * (i - 1) / n) + ',' + (95 - 1.5 * (levels.charCodeAt(i) - 65)));
    if (levels[0] !== ' ') {
      var y = 95 - 1.5 * (levels.charCodeAt(0) - 65), l = document.createElementNS(NS, 'line');
      l.setAttribute('x2', '100'); l.setAttribute('y1', y); l.setAttribute('y2', y); svg.appendChild(l);
    }
    var p = document.createElementNS(NS, 'polyline'); p.setAttribute('points', pts.join(' ')); svg.appendChild(p);
    return svg;
  }
  var du = grid(document.getElementById('durations'), DATA.du, {cols: 8,
    draw: function(row, d){
      names(row, DATA.tiers[d[0]], DATA.files[d[2]]);
      [d[3], d[4].toFixed(1), d[5].toFixed(1), secs(d[6]), secs(d[7])].forEach(function(v){ row.appendChild(span('num', String(v), 'gridcell')); });
      var sp = span('spc', '', 'gridcell'); sp.appendChild(spark(d[9])); row.appendChild(sp);
      row.appendChild(span('drift', [d[8] & 1 ? 'drift' : '', d[8] & 2 ? 'over timeout' : ''].filter(Boolean).join(', '), 'gridcell'));
      for (var j = 1; j < row.children.length; j++) row.children[j].dataset.c = String(j - 1);  // file .. flags
    }});
  // The plans' bars: [lane, shard, file, x, width, seconds], drawn into each tier's timeline frame.
  document.querySelectorAll('svg.gantt').forEach(function(svg){
    var NS = 'http://www.w3.org/2000/svg', bars = DATA.plans[svg.dataset.tier] || [], frag = document.createDocumentFragment(), nth = {};
    bars.forEach(function(b){
      var file = DATA.files[b[2]], y = 4 + b[0] * 16, r = document.createElementNS(NS, 'rect'), t = document.createElementNS(NS, 'title');
      r.setAttribute('class', 'bar'); r.dataset.file = file; r.dataset.shard = String(b[1]);
      r.setAttribute('x', b[3]); r.setAttribute('y', y); r.setAttribute('width', b[4]); r.setAttribute('height', 13);
      var n = nth[b[0]] = (nth[b[0]] || 0) + 1;  // alternate colours along a lane
      r.setAttribute('fill', n % 2 ? '#0072B2' : '#56B4E9');
      t.textContent = file + ': ' + b[5].toFixed(1) + ' s'; r.appendChild(t); frag.appendChild(r);
      var name = file.slice(file.lastIndexOf('/') + 1);
      if (b[4] > 7 * name.length + 8) {  // a label only where it fits inside its bar
        var l = document.createElementNS(NS, 'text'); l.setAttribute('x', b[3] + 3); l.setAttribute('y', y + 10);
        l.setAttribute('fill', '#fff'); l.textContent = name; frag.appendChild(l);
      }
    });
    svg.insertBefore(frag, svg.querySelector('line'));
  });
  function statuses(d){ var out = {}; for (var j = 0; j < d[3].length; j++) out[KIND[d[3][j]]] = 1;
    if (!d[3].length) out['not-run'] = 1; return out; }
  return {filter: function(tier, owner, status, text, hideGreen){
    function base(d){ return (!tier || DATA.tiers[d[0]] === tier) && (!owner || DATA.owners[d[1]] === owner)
      && (!text || DATA.files[d[2]].toLowerCase().indexOf(text) >= 0); }
    return {matrix: mx.filter(function(d){ return base(d) && (!status || statuses(d)[status] === 1)
                                          && (!hideGreen || !!(d[4] && d[4].k)); }),
            durations: du.filter(function(d){ return base(d) && (!status || status === ((d[8] & 1) ? 'drift' : 'timing')); })};
  }, grids: {matrix: mx, durations: du}};
})();
"""
