"""What the commands of one comment will do, planned before anything is written to GitHub.

Each command module (`cmd_rerun_test`, `cmd_rerun_tier`, `cmd_rerun_failed`) turns its commands
into a `Work`; the handler merges them, claims the comment, then carries the work out. Planning only
reads (the registry, the PR, the runs of its head commit), so a plan can be recomputed when a
crashed attempt is resumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.rerun.dispatch import DispatchSpec
from tools.rerun.github import WorkflowRun


@dataclass
class Work:
    """``dispatches``: runs of ``rerun-test-dispatch.yml``; ``reruns``: failed runs whose failed
    jobs are re-run; ``sections``: Markdown shown above the runs table (what was understood);
    ``notes``: Markdown below it (why something does not run). ``complete`` is False when part of
    what the comment asked for will not run."""

    dispatches: list[DispatchSpec] = field(default_factory=list)
    reruns: list[WorkflowRun] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    complete: bool = True

    def merge(self, other: "Work") -> "Work":
        """This work followed by ``other`` (each command module plans its own keys: (tier,
        ``targets``) or (tier, ``i/N``), each once, so nothing is merged away)."""
        return Work(self.dispatches + other.dispatches, self.reruns + other.reruns,
                    self.sections + other.sections, self.notes + other.notes, self.complete and other.complete)

    @property
    def writes(self) -> int:
        """How many GitHub writes (dispatches and re-runs) carrying it out takes."""
        return len(self.dispatches) + len(self.reruns)


__all__ = ["Work"]
