"""What each shard's job runs when a plan narrowed files to node ids, and the GitHub matrix that
carries it.

A shard's ids text is what `ci.pytest_ids` reads (``--ci-ids FILE``): one line per node id of a
file narrowed to ids, one per file of the shard that runs whole (`shard_ids_text`). A job gets it
as a value (a matrix entry's ``ids``, a Buildkite step's `IDS_ENV`) that its command writes to a
file, so ten thousand ids need no command line. The value goes through an environment variable
(one string of it must stay under Linux's 128 KiB) and the matrix through ``$GITHUB_OUTPUT``
(1 MB per job): `carried_ids` keeps a shard's text at most `MAX_SHARD_IDS_BYTES` and all of
them together at most `MAX_PLAN_IDS_BYTES`; a shard over either runs its files whole (more than
the plan selected, never less) and a note says so.

Pure: no file system, never prints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from ci.selection.plan import Plan, PlanShard, ids_lines

MAX_SHARD_IDS_BYTES = 64 * 1024
MAX_PLAN_IDS_BYTES = 512 * 1024
IDS_ENV = "CI_IDS"  # the Buildkite step's variable holding its ids text


@dataclass(frozen=True)
class CarriedIds:
    """The ids text per (tier, shard index), "" for a shard that runs its files whole; ``notes``
    name each shard whose text was too large to carry."""

    texts: dict[tuple[str, int], str]
    notes: tuple[str, ...]

    def of(self, plan: Plan, shard: PlanShard) -> str:
        return self.texts.get((plan.tier.name, shard.index), "")


def shard_ids_text(plan: Plan, shard: PlanShard) -> str:
    """The ids file for ``shard`` of ``plan`` (its files in shard order), or "" when no file of it
    is narrowed to ids (the job runs its files whole, as without a map)."""
    narrowed = {t.path: t.node_ids for t in plan.selected if t.node_ids is not None}
    if not narrowed.keys() & set(shard.tests):
        return ""
    return ids_lines(shard.tests, {path: ids for path, ids in narrowed.items() if ids})


def carried_ids(plans: Sequence[Plan]) -> CarriedIds:
    """Every non-empty shard's ids text within the byte limits (module docstring), in plan order."""
    texts: dict[tuple[str, int], str] = {}
    notes: list[str] = []
    total = 0
    for p in plans:
        for s in p.shards:
            text = shard_ids_text(p, s)
            size = len(text.encode("utf-8"))
            if size > MAX_SHARD_IDS_BYTES or total + size > MAX_PLAN_IDS_BYTES:
                limit = (f"over {MAX_SHARD_IDS_BYTES} for one shard" if size > MAX_SHARD_IDS_BYTES
                         else f"past {MAX_PLAN_IDS_BYTES} for the plan")
                notes.append(f"tier {p.tier.name} shard {s.index}/{s.count}: its node ids take {size} bytes, "
                             f"{limit}; it runs its files whole")
                continue
            total += size
            texts[(p.tier.name, s.index)] = text
    return CarriedIds(texts, tuple(notes))


def matrix_entries(plans: Sequence[Plan], carried: CarriedIds | None = None) -> list[dict[str, object]]:
    """One ``strategy.matrix`` include entry per non-empty shard (empty shards need no runner);
    ``ids`` is the shard's ids text ("" when it runs its files whole)."""
    carried = carried if carried is not None else carried_ids(plans)
    return [
        {"tier": p.tier.name, "shard": s.index, "shards": s.count, "runner": list(p.tier.runner_labels),
         "tests": " ".join(s.tests), "est_time": round(s.est_time, 1), "ids": carried.of(p, s)}
        for p in plans for s in p.shards if s.tests
    ]


def to_github_matrix(plans: Sequence[Plan], carried: CarriedIds | None = None) -> str:
    """``{"include": [...]}`` for ``fromJSON``. ``{"include": []}`` when nothing is selected: a
    workflow must guard the matrix job with the ``has_tests`` output (GitHub rejects an empty matrix)."""
    return json.dumps({"include": matrix_entries(plans, carried)}, separators=(",", ":"))
