"""``python -m tests.ci.verdict_replay_bench [--quick] [--seeds 11-14]``: the verdict tests' replay
(`tests.ci.verdict_replay.Replay`, through its public API: its own ingest and asks) scored in
`bench.verdicts`' table, beside the second generator's. It lives here because the replay does and
bench may not import tests; tests may import bench. The replay asks each pull request once, so its
table has no end-of-history columns. ``--quick``: 8 pull requests per seed.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from bench._verdicts_score import Judged, Score
from bench.verdicts import UsageError, flag_value, parse_seeds, report
from tests.ci.verdict_replay import Replay

DEFAULT_SEEDS = (11, 12, 13, 14)


def score_replay(seed: int, quick: bool = False) -> Score:
    """The replay of ``seed``: each (truth, verdict) pair it returns, the final-failing ones as
    failed every attempt, the ones that passed on retry apart."""
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        kwargs = {"prs": 8} if quick else {}
        replay = Replay(seed=seed, **kwargs).replay(str(Path(tmp) / "h.sqlite"), Path(tmp))
    score = Score("replay", seed)
    score.at_time = [Judged(truth, True, v.verdict, v.detail) for _, truth, v in replay.pairs]
    score.at_time += [Judged(truth, False, v.verdict, v.detail) for _, truth, v in replay.retried_pairs]
    return score


def main(argv: list[str]) -> int:
    try:
        given = flag_value(argv, "--seeds")
        seeds = parse_seeds(given) if given is not None else DEFAULT_SEEDS
    except UsageError as exc:
        print(f"python -m tests.ci.verdict_replay_bench: {exc}", file=sys.stderr)
        return 2
    print(report("replay", [score_replay(seed, "--quick" in argv) for seed in seeds]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
