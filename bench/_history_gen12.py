"""gen12: a labelled history on DeepSpeed's real skeleton, held out from the verdict rules (issue 47).

Real (`bench/_history_gen12_data.json`, read by `bench._history_gen12_extract` from DeepSpeed's
mirror): 250 consecutive first-parent commits of master from a36db9cc1 (2024-10-17) with their
times, authors, pull requests and touched files; the unit test files and tests alive at each; the
GPU workflows that run ``tests/unit`` as each commit holds them (``nv-torch-latest-v100``,
``nv-inference``, ``nv-a6000``, ``nv-nightly``, ``nv-h100``, ``nv-torch-nightly-v100``: events,
path filters, pools, pytest markers); the windows its reverts and fixes close and the dependency
pins that end outside breakages.

Simulated (`bench._history_gen12_runs`, `bench._history_gen12_jobs`): each merged pull request's
pushes on its branch (``pull_request`` runs of the workflows its files pass the path filters of,
cancel-in-progress per workflow and ref), its ``merge_group`` run on master's tip (none for a pull
request that opened a breakage: it was merged around the queue), the nightly ``schedule`` runs at
00:00 UTC, re-runs of failed jobs, flaky tests, infra faults and lost runners. Everything is drawn
from ``random.Random`` seeded by the seed: the same seed gives the same history.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench._history_gen12_runs import simulate
from bench._history_gen12_world import World, load
from bench._verdicts_records import Run


@dataclass(frozen=True)
class Scale:
    """The history's size and rates. ``first``/``count``: the commits used (indexes into the data);
    ``flaky_share``: the share of tests that flake, at rates drawn per test (0.8 % to 12 %);
    ``pr_break``: the share of pull requests whose early pushes break their own tests;
    ``rerun_failed``: the chance an author re-runs a run's failed jobs; ``infra_rate``: a job's
    chance of an infra fault that fails tests; ``lost_rate``: a job's chance of a lost runner (no
    JUnit); ``attempt_text``: each failed attempt's error also written as the registry plugin's
    ``ci.attempt.*`` testcase properties (False: stock pytest JUnit, ``--stock-junit``)."""

    first: int = 0
    count: int = 250
    flaky_share: float = 0.02
    pr_break: float = 0.35
    rerun_failed: float = 0.6
    infra_rate: float = 0.025
    lost_rate: float = 0.01
    attempt_text: bool = True


# 30 commits around the libuv revert (index 173-180) and the transformers pin of index 183.
QUICK = Scale(first=160, count=30)


@dataclass
class History:
    """A generated history: its seed, its runs in the order they finish, and the world they ran in."""

    seed: int
    runs: list[Run]
    world: World
    scale: Scale

    @property
    def checkout_files(self) -> tuple[str, ...]:
        """The unit test files a checkout holds (the harness ingests inside them)."""
        return tuple(sorted(self.world.files))


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The labelled history for ``seed`` at ``scale`` (deterministic)."""
    world = load(seed, scale.flaky_share)
    return History(seed, simulate(world, seed, scale), world, scale)
