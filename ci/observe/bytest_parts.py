"""What `ci observe --by-test` shares without pytest: its variable, the plugin's name, where it
cannot record, and the merge of its parts (`ci.observe.bytest` writes them; see there).

Contract: `read_parts` skips a part it cannot read; a file is ``complete`` when every id any
process collected finished in some process; an id's seconds are the most any process reported.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ci.selection.depmap_format import ByTest

BYTEST_ENV = "CI_OBSERVE_BYTEST"  # the parts directory of an observation with --by-test
PLUGIN = "ci.observe.bytest"


def refusal(core: str) -> str | None:
    """Why ``--by-test`` cannot record beside the per-file recorder's ``core``; None when it can."""
    if core == "ctrace":
        return ("--by-test measures with coverage.py's C tracer, which the per-file recorder's core ctrace already "
                "uses in this process (CPython 3.11 with slipcover, or 3.12+, records both)")
    return None


def read_parts(parts: Path) -> dict[str, ByTest]:
    """Every ``bytest.*.json`` part in ``parts`` merged per test file (see the module docstring)."""
    ids: dict[str, dict[str, dict[str, set[int]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(set)))
    own: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    collected: dict[str, set[str]] = defaultdict(set)
    finished: dict[str, set[str]] = defaultdict(set)
    seconds: dict[str, dict[str, float]] = defaultdict(dict)
    for part in sorted(parts.glob("bytest.*.json")):
        try:
            data = json.loads(part.read_text(encoding="utf-8"))
            for test, entry in data.items():
                collected[test].update(entry["collected"])
                finished[test].update(entry["finished"])
                for node, files in entry["ids"].items():
                    for path, lines in files.items():
                        ids[test][node][path].update(lines)
                for path, lines in entry["file"].items():
                    own[test][path].update(lines)
                for node, spent in entry.get("seconds", {}).items():
                    seconds[test][node] = max(float(spent), seconds[test].get(node, 0.0))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    out = {}
    for test in collected:
        nodes = {n: {p: frozenset(v) for p, v in ids[test].get(n, {}).items()} for n in collected[test]}
        out[test] = ByTest(nodes, {p: frozenset(v) for p, v in own[test].items()},
                           complete=collected[test] <= finished[test],
                           seconds={n: s for n, s in seconds[test].items() if n in nodes})
    return out
