"""``fp4kv-ci culprit --tier T --test FILE[::TEST] --good SHA --bad SHA [--budget RUNS]
[--confidence 0.99] [--runner local]``: which commit between a good and a bad one broke a test,
flake-aware, within a budget of runs (docs/culprit.md).

The candidates are the commits after --good up to --bad on --bad's first-parent line. Each run
tests one commit (``--runner local``: pytest in a temporary git worktree of it, --attempts
attempts, failed only when all fail); `ci.culprit` says which commit to run next and when it is
sure. Every finished run is written to the state file before it is used, so a killed search
rerun with the same arguments repeats no finished run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ci.commands.culprit_local import (LocalRunner, State, WindowError, git, load_state, touches_executed,
                                      window)
from ci.commands.history import add_store_arg
from ci.culprit.model import NoiseModel, Outcome
from ci.culprit.posterior import prior_weights
from ci.culprit.search import Search
from ci.limits import whole_number
from ci.registry import RegistryError, load_registry
from ci.repo_root import REGISTRY_FILENAME, find_repo_root

DEFAULT_FLAKE = 0.05
DEFAULT_RETRY = 0.5
EXIT_FOUND, EXIT_UNSURE, EXIT_BAD_INPUT = 0, 1, 2
PROG = "fp4kv-ci culprit"

EXIT_CODES = f"""\
exit status:
  {EXIT_FOUND}  the culprit found with the asked confidence
  {EXIT_UNSURE}  stopped short (budget spent): the most probable commit is printed
  {EXIT_BAD_INPUT}  bad input: arguments, unknown test or tier, commits not on one first-parent line, or a
     --good that fails / --bad that passes when verified; nothing of the search was run
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n", 1)[1], epilog=EXIT_CODES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", required=True, help="the registry tier the test runs on")
    parser.add_argument("--test", required=True, metavar="FILE[::TEST]", help="a registered test file, or one test of it")
    parser.add_argument("--good", required=True, metavar="SHA", help="a commit where the test passes")
    parser.add_argument("--bad", required=True, metavar="SHA", help="a later commit where it fails")
    parser.add_argument("--budget", type=whole_number(1), default=30, metavar="RUNS",
                        help="the most runs the search may spend (default 30)")
    parser.add_argument("--confidence", type=float, default=0.99, help="stop at this posterior (default 0.99)")
    parser.add_argument("--runner", choices=("local",), default="local",
                        help="where runs happen: local (git worktree + pytest); dispatch is not built yet")
    parser.add_argument("--attempts", type=whole_number(1, 5), default=2, help="attempts per run (default 2)")
    parser.add_argument("--flake-rate", type=float, metavar="F",
                        help=f"the test's flake rate when the history has none (default {DEFAULT_FLAKE})")
    parser.add_argument("--w-low", type=float, default=0.1,
                        help="prior weight of a commit touching nothing the test imports (default 0.1)")
    parser.add_argument("--no-verify", action="store_true", help="do not run --good and --bad first")
    parser.add_argument("--python", metavar="PATH", help="the interpreter that runs pytest (default this one)")
    parser.add_argument("--test-from", metavar="SHA",
                        help="copy the test file from this commit into each probed tree (a test a later fix added)")
    parser.add_argument("--inject-flake", type=float, default=0.0, metavar="F",
                        help="fail each attempt unrun with probability F (to measure the search; default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of --inject-flake's draws (default 0)")
    parser.add_argument("--state", metavar="PATH", help="state file (default .ci-cache/culprit-GOOD-BAD.json)")
    add_store_arg(parser)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _search(args)
    except (WindowError, RegistryError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _search(args: argparse.Namespace) -> int:
    if not 0 < args.confidence < 1:
        raise ValueError(f"--confidence {args.confidence}: give a probability between 0 and 1")
    if args.flake_rate is not None and not 0 <= args.flake_rate < 1:
        raise ValueError(f"--flake-rate {args.flake_rate}: give a rate in [0, 1)")
    root = find_repo_root()
    registry = load_registry(root / REGISTRY_FILENAME)
    file = args.test.split("::", 1)[0]
    if file not in registry.tests:
        raise ValueError(f"--test {args.test}: {file} is not a registered test file of {REGISTRY_FILENAME}")
    if args.tier not in registry.tests[file].tiers:
        raise ValueError(f"--tier {args.tier}: {file} is registered for {', '.join(registry.tests[file].tiers)}, "
                         f"not {args.tier}")
    good, bad, candidates = window(root, args.good, args.bad)
    runner = _runner(args, root, file)
    noise, said = _noise(args, file)
    print(f"{PROG}: {len(candidates)} candidate commit(s) after {good[:12]} up to {bad[:12]}; {said}", flush=True)
    state_path = Path(args.state) if args.state else root / ".ci-cache" / f"culprit-{good[:12]}-{bad[:12]}.json"
    tree = state_path.with_suffix(".tree")
    state = load_state(state_path, State(good, bad, args.test, args.tier, args.attempts))
    if state.runs:
        print(f"{PROG}: resuming: {len(state.runs)} run(s) already done, from {state_path}", flush=True)
    if not args.no_verify:
        for sha, want_fail, flag in ((good, False, "--good"), (bad, True, "--bad")):
            failed = _done(state, sha)
            if failed is None:
                failed = runner.run(root, sha, args.test, args.attempts, tree)
                state.add(state_path, sha, failed)
            if failed != want_fail:
                print(f"{PROG}: {flag} {sha[:12]} {'fails' if failed else 'passes'} {args.test} "
                      f"(all {args.attempts} attempts): give a {flag[2:]} commit", file=sys.stderr)
                return EXIT_BAD_INPUT
    touches = touches_executed(root, registry, file, candidates)
    search = Search(prior_weights(len(candidates), touches, args.w_low), noise, confidence=args.confidence,
                    budget=args.budget, attempts=args.attempts)
    index = {sha: i for i, sha in enumerate(candidates)}
    for run in state.runs:
        if run.sha in index:
            search.record(Outcome(index[run.sha], run.failed, args.attempts))
    while batch := search.next_batch(1):
        sha = candidates[batch[0].index]
        failed = runner.run(root, sha, args.test, args.attempts, tree)
        state.add(state_path, sha, failed)  # written before the search acts on it
        search.record(Outcome(batch[0].index, failed, args.attempts))
        print(f"{PROG}: {sha[:12]} {'failed' if failed else 'passed'}", flush=True)
    result = search.result()
    sha = candidates[result.culprit]
    print(f"{PROG}: culprit {sha} ({git(root, 'log', '-1', '--format=%s', sha)}), probability "
          f"{result.probability:.3f}, {result.runs} run(s) in the window, stopped: {result.stop.value}")
    return EXIT_FOUND if result.probability >= args.confidence else EXIT_UNSURE


def _runner(args: argparse.Namespace, root: Path, file: str) -> LocalRunner:
    """The local runner of --python, --test-from, --inject-flake and --seed; ValueError naming a bad one."""
    if not 0 <= args.inject_flake < 1:
        raise ValueError(f"--inject-flake {args.inject_flake}: give a rate in [0, 1)")
    python = args.python or sys.executable
    if not (Path(python).is_file() and os.access(python, os.X_OK)):
        raise ValueError(f"--python {python}: not an executable file: give the interpreter that has pytest")
    if args.test_from is not None:
        try:
            git(root, "cat-file", "-e", f"{args.test_from}:{file}")
        except WindowError:
            raise ValueError(f"--test-from {args.test_from}: no {file} at that commit: give the commit that "
                             "has the test") from None
    return LocalRunner(python, args.test_from, args.inject_flake, args.seed)


def _done(state: State, sha: str) -> bool | None:
    return next((r.failed for r in state.runs if r.sha == sha), None)


def _noise(args: argparse.Namespace, file: str) -> tuple[NoiseModel, str]:
    """The noise model, and where its rates came from. The flake rate: the history's score for the
    file on the tier, else --flake-rate, else the default. The retry rate r: the history's retries
    after flaky failures (`ci.history.retries`), else max(DEFAULT_RETRY, flake)."""
    node = args.test if "::" in args.test else None
    try:
        from ci.history.flaky import flaky_scores
        from ci.history.retries import retry_rate
        from ci.history.store import open_store

        with open_store(args.store, create=False) as store:
            scores = [s for s in flaky_scores(store, tier=args.tier) if s.file == file
                      and (s.node == args.test or node is None)]
            retry = retry_rate(store, tier=args.tier, file=file, node=node)
    except Exception:  # no history, or one that cannot be read: the rates fall back, and say so
        scores, retry = [], None
    if scores:
        flake, said = max(s.score for s in scores), "flake rate {:.3f} from the test history"
    elif args.flake_rate is not None:
        flake, said = args.flake_rate, "flake rate {:.3f} from --flake-rate"
    else:
        flake, said = DEFAULT_FLAKE, "flake rate {:.3f} (default: no history of this test, no --flake-rate)"
    said = said.format(flake)
    if retry is not None:
        r = retry.mean
        said += f"; retry rate {r:.3f} from {retry.failed} of {retry.retries} retries after a flaky failure failing"
    else:
        r = max(DEFAULT_RETRY, flake)
        said += f"; retry rate {r:.3f} (default max({DEFAULT_RETRY}, f): no retry after a flaky failure in the history)"
    return NoiseModel(flake, retry_fail=max(r, flake)), said
