"""The records a labelled history generator fills and the verdict harness (`bench._verdicts_score`)
reads: each failing test's truth (`Label`, one of `LABELS`), each job's JUnit (`Report`) and each
run attempt (`Run`). A generator that needs more (a killed shard, a cancelled run's load)
subclasses them; what the harness ingests and scores is only these fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

LABELS = ("broken_on_main", "new", "infra", "flaky")


@dataclass(frozen=True)
class Label:
    """The truth of one test with a failed attempt in one run: ``label`` one of `LABELS`,
    ``every_attempt`` whether its final attempt failed too, ``why`` the generator's planted cause."""

    node: str
    tier: str
    label: str
    every_attempt: bool
    why: str


@dataclass(frozen=True)
class Report:
    """One job's JUnit as it uploaded it: shard ``shard`` (0-based) of its tier's ``shards``, on
    ``runner``, with the labels of its failed tests (a generator may keep them on the `Run`)."""

    tier: str
    shard: int
    shards: int
    runner: str
    xml: str
    labels: list[Label] = field(default_factory=list)


@dataclass
class Run:
    """One CI run attempt: ``commit`` the default branch commit its code holds (a pull request's
    merge base), ``reports`` its jobs' JUnit in the order they were written, ``batch`` a merge
    queue run's pull requests."""

    event: str
    sha: str
    commit: int
    started: datetime
    finished: datetime
    run_id: str
    attempt: int = 1
    pr: int | None = None
    base_sha: str = ""
    author: str = ""
    reports: list[Report] = field(default_factory=list)
    batch: tuple[int, ...] = field(default=(), kw_only=True)

    @property
    def labels(self) -> list[Label]:
        return [label for report in self.reports for label in report.labels]


class History(Protocol):
    """What the harness reads of a generator's history: its seed and its runs in the order they
    finish (gen3's runs are its own `Run`, with these fields and labels kept on the run). A history
    whose JUnit names no ``file`` (pytest's default xunit2) may also have ``checkout_files``: the
    repository paths a checkout holds that settle which file a classname is (test files and pytest
    configs); the harness ingests inside a tree of them, as `ci history ingest` runs in a checkout."""

    seed: int
    runs: list[Run]
