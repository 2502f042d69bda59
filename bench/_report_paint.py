"""The HUD in headless Chromium, for `bench.report`: load, first paint and scrolling.

- **load**: each page opened from file:// in a fresh tab (`ci.report.browser`), best of 3,
  interleaved: the first contentful paint and the time from opening the tab to its load event;
  against a one-line page (what any page costs) and, per size, the same matrix with every cell as
  markup (`bench.report._every_cell_a_tag`: the HUD's old way, alone).
- **scroll**: the matrix's box scrolled 200 px a frame for `FRAMES` frames by
  ``requestAnimationFrame``; the time between frames (a 60 Hz display gives 16.7 ms, so anything
  above it is a frame late) and the frames whose top row was not drawn when the frame began;
  against the every-cell-a-tag page of the same size scrolled the same way (the document, as it
  had no box) and idle frames of the one-line page.
- **tip**: a ``mouseover`` dispatched on each drawn cell that has a failure tip (up to `HOVERS`),
  timed in the page from the event to the tip laid out (``getBoundingClientRect`` forces the
  layout); against the same on passing cells (the handler runs and hides the tip: the baseline).
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.table import format_table
from ci.report.browser import Browser, BrowserError

GOAL_LOAD_MS = {2000: 1000.0, 20000: 3000.0}  # files -> the goal for the load (30 runs); none for others
FRAMES = 120
STEP_PX = 200

HOVERS = 60
_HOVER = """(function(){
  var cells = [...document.querySelectorAll('#matrix .vr .c')], tip = document.getElementById('tip');
  function timed(list){  // [each event's ms, the batch's ms: finer than the page's 0.1 ms clock]
    var start = performance.now(), each = list.slice(0, %d).map(function(c){
      var t = performance.now(); c.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
      tip.getBoundingClientRect(); return performance.now() - t; });
    return [each, performance.now() - start]; }
  var failing = cells.filter(function(c){ return c.getAttribute('aria-label').indexOf(': ') >= 0; });
  var passing = cells.filter(function(c){ return c.getAttribute('aria-label') === 'pass'; });
  return [timed(passing), timed(failing)];
})()""" % HOVERS

_SCROLL = """new Promise(function(done){
  var box = document.getElementById('matrix'), doc = document.scrollingElement, deltas = [], missed = 0, last = 0, n = 0;
  function step(t){
    deltas.push(t - last); last = t;
    if (box) {
      var top = Math.floor(box.scrollTop / 20);
      if (top < box.querySelector('.vbody').offsetHeight / 20 && !box.querySelector('.vr[data-pos="' + top + '"]')) missed++;
      box.scrollTop += %d;
    } else doc.scrollTop += %d;
    if (++n < %d) requestAnimationFrame(step); else done([deltas, missed]);
  }
  requestAnimationFrame(function(t){ last = t; requestAnimationFrame(step); });
})""" % (STEP_PX, STEP_PX, FRAMES)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def paint(root: Path, pages: dict[str, tuple[Path, Path]]) -> int:
    """Print the load table and the scroll table for ``pages`` (size label -> (HUD, every cell a
    tag)); 1 when there is no browser, else 0."""
    blank = root / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body><h1>one line</h1></body></html>")
    order = [("one-line page (baseline)", blank)]
    for size, (hud, cells) in pages.items():
        order += [(f"every cell a tag, {size} (baseline)", cells), (f"the HUD, {size}", hud)]
    loads: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in order}
    scrolls: dict[str, tuple[list[float], int]] = {}
    hovers: dict[str, list[list[float]]] = {}
    try:
        with Browser() as browser:
            for _ in range(3):
                for name, path in order:
                    tab = browser.open(path)
                    loads[name].append((tab.first_paint_ms() or float("nan"), tab.load_ms()))
                    tab.close()
            for name, path in order:
                tab = browser.open(path)
                deltas, missed = tab.eval(_SCROLL)
                scrolls[name] = (deltas, missed)
                tab.close()
            for name, path in order:
                if name.startswith("the HUD"):
                    tab = browser.open(path)
                    hovers[name] = tab.eval(_HOVER)
                    tab.close()
    except BrowserError as exc:
        print(f"\nfirst paint: not measured ({exc})", file=sys.stderr)
        return 1
    base_paint = min(p for p, _ in loads[order[0][0]])
    rows = []
    for name, path in order:
        p, l = min(v[0] for v in loads[name]), min(v[1] for v in loads[name])
        files = int(name.split()[-3]) if name.startswith("the HUD") else 0
        goal = GOAL_LOAD_MS.get(files)
        rows.append([name, f"{path.stat().st_size / 1e6:.2f}", f"{p:.0f}", f"{l:.0f}", f"{p / base_paint:.2f}",
                     f"{goal:.0f}" if goal else "", ("yes" if l <= goal else "NO") if goal else ""])
    print()
    print(format_table(["headless chromium, file://", "MB", "first paint ms", "load ms", "x baseline (paint)",
                        "load goal ms", "met"], rows, title="best of 3, interleaved"))
    base_p95 = _pct(scrolls[order[0][0]][0], 0.95)
    rows = []
    for name, (deltas, missed) in scrolls.items():
        label = "idle frames, one-line page (baseline)" if name == order[0][0] else f"scrolling {name}"
        missed = missed if name.startswith("the HUD") else ""
        rows.append([label, str(len(deltas)), f"{_pct(deltas, 0.5):.1f}", f"{_pct(deltas, 0.95):.1f}",
                     f"{max(deltas):.1f}", str(missed), f"{_pct(deltas, 0.95) / base_p95:.2f}"])
    print()
    print(format_table(["frames", "count", "p50 ms", "p95 ms", "max ms", "top row not drawn", "x baseline (p95)"],
                       rows, title=f"the matrix scrolled {STEP_PX} px a frame by requestAnimationFrame"))
    rows = []
    for name, ((plain, plain_ms), (tips, tips_ms)) in hovers.items():
        base = plain_ms / len(plain) if plain else 0.0
        for label, times, total in ((f"{name}: a passing cell, no tip (baseline)", plain, plain_ms),
                                    (f"{name}: a failing cell's tip", tips, tips_ms)):
            if times:  # the mean is the batch's time over its events: the page's clock ticks in 0.1 ms
                mean = total / len(times)
                rows.append([label, str(len(times)), f"{mean:.3f}", f"{_pct(times, 0.95):.1f}", f"{max(times):.1f}",
                             f"{mean / base:.1f}" if base > 0 else ""])
    print()
    print(format_table(["mouseover on a drawn cell", "count", "mean ms", "p95 ms", "max ms", "x baseline (mean)"], rows,
                       title="the failure tip: from the event to the tip laid out"))
    return 0
