"""The script of the HUD's failure tip: why a matrix cell failed, on hover and on click.

Contract:
- One ``<div id="tip" role="tooltip">`` in the page; `TIP.show(cell, info, pinned)` fills it
  through ``textContent`` only (a test name or message holding markup is shown as the text it
  is) and places it beside the cell, inside the window. ``info``: title, node, message, failed
  (how many tests failed), verdict, url (the run; an ``<a>`` only when given, and the page gives
  only http(s) links).
- Hover shows it unpinned (leaving the grid hides it); a click, or Enter on a cell, pins it and
  puts the focus in it, so its run link is one Enter away; Escape inside it, or a click outside
  it, closes it and gives the focus back to its cell.
"""

TIP_JS = r"""
var TIP = (function(){
  var box = document.getElementById('tip'), pinned = false, owner = null;
  function line(cls, text){ var d = document.createElement('div'); d.className = cls; d.textContent = text; return d; }
  function show(el, info, pin){
    box.replaceChildren(line('tt', info.title));
    if (info.node) box.appendChild(line('tn', info.node + (info.failed > 1 ? ' (and ' + (info.failed - 1) + ' more failed)' : '')));
    if (info.message) box.appendChild(line('tm', info.message));
    if (info.verdict) box.appendChild(line('tv', 'verdict: ' + info.verdict));
    if (info.url) { var a = document.createElement('a'); a.href = info.url; a.textContent = 'open the run'; box.appendChild(a); }
    box.hidden = false; pinned = !!pin; owner = el; box.classList.toggle('pinned', pinned);
    var r = el.getBoundingClientRect(), top = r.bottom + 4;
    box.style.left = Math.max(0, Math.min(window.innerWidth - box.offsetWidth - 4, r.left)) + 'px';
    if (top + box.offsetHeight > window.innerHeight) top = Math.max(0, r.top - box.offsetHeight - 4);
    box.style.top = top + 'px';
    if (pinned) { var link = box.querySelector('a'); (link || box).focus({preventScroll: true}); }
  }
  function hide(force){
    if (pinned && !force) return;
    var back = pinned && box.contains(document.activeElement) ? owner : null;
    box.hidden = true; pinned = false; owner = null;
    if (back && back.isConnected) back.focus({preventScroll: true});
  }
  box.addEventListener('keydown', function(e){ if (e.key === 'Escape') { e.stopPropagation(); hide(true); } });
  document.addEventListener('click', function(e){ if (pinned && !box.contains(e.target) && e.target !== owner) hide(true); });
  return {show: show, hide: hide};
})();
"""
