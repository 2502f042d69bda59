"""Write the HUD into a directory: ``index.html`` and ``report.json``, each replaced atomically.

Contract: the JSON is written first, the page second (the page links to the JSON, so a reader of
the page never finds its JSON missing); each goes through `ci.atomic_write`, so a killed writer
leaves the old file or the new one whole. Text that cannot be encoded as UTF-8 (a lone surrogate
from a non-UTF-8 test id) is written as U+FFFD, never refused. ``report.json`` holds every field
of `ci.report.model.Report` (``asdict``), with ``schema`` = `JSON_SCHEMA`.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

from ci.atomic_write import atomic_write_bytes
from ci.report.html import render
from ci.report.model import Report

JSON_SCHEMA = 4  # 2: a column is a commit (runs merged); rows carry triage, failures, attempts; 3: the infra
#                  status, a failure's infra kind and runner, and the runners with infra failures; 4: a runner's
#                  `why` (out of line with its pool) and the `pools` (tests failing on a whole pool)
_SURROGATE = re.compile("[\ud800-\udfff]")
PAGE = "index.html"
DATA = "report.json"


def to_json(report: Report) -> str:
    """``report`` as JSON text (every field; ASCII-only, so any test id survives)."""
    return json.dumps({"schema": JSON_SCHEMA, **asdict(report)}, separators=(",", ":"))


def write_report(report: Report, directory: str | Path) -> tuple[Path, Path]:
    """Write the page and its JSON into ``directory`` (created); their paths. OSError when either
    cannot be written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    data, page = out / DATA, out / PAGE
    atomic_write_bytes(data, to_json(report).encode("ascii"))
    atomic_write_bytes(page, _SURROGATE.sub("\ufffd", render(report)).encode("utf-8"))
    return page, data
