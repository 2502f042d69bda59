"""Merge queues: a ``merge_group`` run tests main before a batch plus the batch's pull requests.

Contract:
- `tail_pr(ref)`: the pull request a merge queue's ref names, the batch's last
  (``refs/heads/gh-readonly-queue/<base>/pr-<N>-<sha>``, GitHub's ``merge_group.head_ref``);
  `ValueError` naming the ref when it is not a queue's.
- `parse_batch(text)`: pull request numbers written ``12,15`` or ``#12 #15``, in order, each once;
  `ValueError` naming the first that is not one.
- `batch_verdicts(verdicts, batch)`: a queue run's verdicts, which `ci.history.verdict.judge` gives
  against the run's ``base_sha`` (main before the batch) as for a pull request against its merge
  base. A ``new`` failure (one main's base does not fail, judged on a history) is the batch's:
  its detail says "new in this batch (PRs #a, #b)". Every other verdict is unchanged.
- A queue run counts as main's evidence only at a commit main's order holds (`ci.history.mainline`:
  git's first-parent history, or a commit a push or nightly ran): GitHub fast-forwards main to the
  batch's merge commit when the batch lands, so then the queue run is one more run of main's commit;
  a batch that failed or was dequeued never lands and its run is left out (docs/history.md#merge-queues).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Sequence

from ci.history.verdict import NEW, NO_HISTORY, Verdict
from ci.limits import MAX_INT4

_QUEUE_REF = re.compile(r"(?:refs/heads/)?gh-readonly-queue/(?P<base>.+)/pr-(?P<pr>[0-9]+)-(?P<sha>[0-9a-fA-F]{7,64})\Z")
_NUMBER = re.compile(r"#?([0-9]+)\Z")


def tail_pr(ref: str) -> int:
    """The pull request number a merge queue's ref ends with (the batch's tail)."""
    found = _QUEUE_REF.match(ref)
    if found is None or not 0 < int(found["pr"]) <= MAX_INT4:
        raise ValueError(f"--head-ref {ref!r} is not a merge queue's ref "
                         "(refs/heads/gh-readonly-queue/<base>/pr-<N>-<sha>)")
    return int(found["pr"])


def parse_batch(text: str) -> tuple[int, ...]:
    """Pull request numbers from ``12,15`` / ``#12 #15``; () for an empty text."""
    out: list[int] = []
    for word in text.replace(",", " ").split():
        found = _NUMBER.match(word)
        if found is None or not 0 < int(found[1]) <= MAX_INT4:
            raise ValueError(f"--batch {word!r} is not a pull request number (1 to {MAX_INT4})")
        if int(found[1]) not in out:
            out.append(int(found[1]))
    return tuple(out)


def batch_text(batch: Sequence[int]) -> str:
    """``PRs #12, #15`` (``PR #12``), or "PRs not known" for an unknown batch."""
    if not batch:
        return "PRs not known"
    return ("PR " if len(batch) == 1 else "PRs ") + ", ".join(f"#{n}" for n in batch)


def batch_verdicts(verdicts: Sequence[Verdict], batch: Sequence[int]) -> list[Verdict]:
    """``verdicts`` of a merge_group run, each judged ``new`` on a history reworded as the batch's."""
    return [replace(v, detail=f"new in this batch ({batch_text(batch)}): " + v.detail.removeprefix("new: "))
            if v.verdict == NEW and not v.detail.startswith(NO_HISTORY) else v for v in verdicts]
