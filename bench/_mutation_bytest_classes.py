"""The built by-test-id rows (`bench._mutation_bytest_built`) by mutant class: where the
wall-clock ratio parts from the est-time ratio.

Each row with a verdict, both wall-clocks and both est-times falls into the first class that fits:

1. ``every file whole``: no selected file was narrowed to ids and the est-time is the static
   graph's or more (a module-level change, a cached function run outside any test);
2. ``static graph is one file``: the static graph selects a single file (``static_files``; rows
   written before that key existed are left out of the table, and counted);
3. ``a few ids``: est-time at most `FEW_IDS` of the static graph's;
4. ``many ids or files``: the rest.

Per class: how many mutants, and the mean of the per-mutant est-time and wall-clock ratios.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean
from typing import Mapping, Sequence

from bench.table import format_table, ratio

FEW_IDS = 0.16  # the line the first by-id tables drew (docs/depmaps.md): about 3 s of ids against rich's 20 s
CLASSES = ("every file whole", "static graph is one file", "a few ids", "many ids or files")


@dataclass(frozen=True)
class ClassRow:
    """One class's mutants and its mean ratios (``None`` for a class no mutant fell into)."""

    name: str
    mutants: int
    est_ratio: float | None
    wall_ratio: float | None


def mutant_class(row: Mapping[str, object]) -> str | None:
    """The class of one built row (see the module docstring); ``None`` when it lacks ``static_files``.
    A row without both est-times or both wall-clocks is a `KeyError` naming the key."""
    est = float(row["selected_est"]) / float(row["static_est"])
    if row.get("narrowed") == 0 and est >= 1.0:
        return CLASSES[0]
    if row.get("static_files") is None:
        return None
    if row["static_files"] == 1:
        return CLASSES[1]
    return CLASSES[2] if est <= FEW_IDS else CLASSES[3]


def by_class(rows: Sequence[Mapping[str, object]]) -> tuple[list[ClassRow], int]:
    """(one `ClassRow` per class in `CLASSES` order, rows left out for want of ``static_files``).
    Rows with a ``broken`` verdict or a zero static side are not counted at all."""
    groups: dict[str, list[Mapping[str, object]]] = {name: [] for name in CLASSES}
    unknown = 0
    for row in rows:
        if row.get("broken") or not row.get("static_wall") or not row.get("static_est"):
            continue
        name = mutant_class(row)
        if name is None:
            unknown += 1
        else:
            groups[name].append(row)
    out = []
    for name, members in groups.items():
        est = [float(r["selected_est"]) / float(r["static_est"]) for r in members]
        wall = [float(r["selected_wall"]) / float(r["static_wall"]) for r in members]
        out.append(ClassRow(name, len(members), fmean(est) if est else None, fmean(wall) if wall else None))
    return out, unknown


def class_table(rows: Sequence[Mapping[str, object]]) -> str:
    """`by_class` as a plain-text table (empty string when no row has a class)."""
    classes, unknown = by_class(rows)
    if not any(c.mutants for c in classes):
        return ""
    body = [[c.name, str(c.mutants), ratio(c.est_ratio) if c.est_ratio is not None else "-",
             ratio(c.wall_ratio) if c.wall_ratio is not None else "-"] for c in classes]
    title = "by mutant class (mean of per-mutant ratios)" + (
        f"; {unknown} row(s) without static_files left out" if unknown else "")
    return format_table(["class", "mutants", "est-time x static", "wall-clock x static"], body, title=title)
