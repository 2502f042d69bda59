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
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Protocol, Sequence

from ci.commands.culprit_local import (BatchRunner, LocalBatch, LocalRunner, Run, RunnerError, State, WindowError,
                                      git, load_state, window)
from ci.commands.culprit_prior import check_map_files, choose_prior
from ci.commands.culprit_signature import breakage_signature, flake_match, same_signature
from ci.commands.history import add_store_arg
from ci.culprit.model import (DEFAULT_BUDGET, FALSE_PASS_LEVEL, FALSE_PASS_PRIOR, NoiseModel, Outcome,
                              false_pass_bound)
from ci.culprit.search import Search
from ci.limits import whole_number
from ci.results.summary import append_step_summary
from ci.registry import RegistryError, load_registry
from ci.repo_root import REGISTRY_FILENAME, find_repo_root

if TYPE_CHECKING:
    from ci.history.culprits import FoundCulprit

DEFAULT_FLAKE = 0.05
DEFAULT_RETRY = 0.5
EXIT_FOUND, EXIT_UNSURE, EXIT_BAD_INPUT, EXIT_UNWRITABLE = 0, 1, 2, 3
PROG = "fp4kv-ci culprit"

EXIT_CODES = f"""\
exit status:
  {EXIT_FOUND}  the culprit found with the asked confidence
  {EXIT_UNSURE}  stopped short (budget spent: the most probable commit is printed; or the runner failed: rerun
     the same command to resume)
  {EXIT_BAD_INPUT}  bad input: arguments, unknown test or tier, commits not on one first-parent line, or a
     --good that fails / --bad that passes when verified; nothing of the search was run
  {EXIT_UNWRITABLE}  $GITHUB_STEP_SUMMARY, a runner's reply or the history store could not be written (the answer is printed)
"""


class RunnerPlugin(Protocol):
    """A runner ``ci`` does not hold itself (the bot's ``dispatch``, in ``tools/``, which ``ci`` never
    imports): it adds its own options and builds a `BatchRunner` from them, raising `ValueError`
    with a one-line message for bad input before anything runs."""

    name: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def make(self, args: argparse.Namespace, root: Path, state_path: Path) -> BatchRunner: ...


@dataclass(frozen=True)
class Answer:
    """A finished search: the culprit commit, its subject and probability, every run it used (the
    verification runs included) and why it stopped; ``found`` when the confidence was reached."""

    sha: str
    subject: str
    probability: float
    runs: tuple[Run, ...]
    window_runs: int
    stop: str
    found: bool
    about: str = ""  # the runner's word on the culprit: its pull request
    good: str = ""  # the window, as full commits
    bad: str = ""
    candidates: int = 0


class BadWindow(ValueError):
    """--good fails or --bad passes when verified (those runs are spent; nothing else runs)."""


def build_parser(plugins: Sequence[RunnerPlugin] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n", 1)[1], epilog=EXIT_CODES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", required=True, help="the registry tier the test runs on")
    parser.add_argument("--test", required=True, metavar="FILE[::TEST]", help="a registered test file, or one test of it")
    parser.add_argument("--good", required=True, metavar="SHA", help="a commit where the test passes")
    parser.add_argument("--bad", required=True, metavar="SHA", help="a later commit where it fails")
    parser.add_argument("--budget", type=whole_number(1), default=DEFAULT_BUDGET, metavar="RUNS",
                        help="the most runs the search may spend (default 30)")
    parser.add_argument("--confidence", type=float, default=0.99, help="stop at this posterior (default 0.99)")
    parser.add_argument("--runner", choices=("local", *(p.name for p in plugins)), default="local",
                        help="where runs happen: local (git worktree + pytest)"
                             + "".join(f", {p.name}" for p in plugins))
    parser.add_argument("--runners", type=whole_number(1, 64), default=1, metavar="N",
                        help="probes run at once (the tier's free runners; default 1; local runs one)")
    parser.add_argument("--attempts", type=whole_number(1, 5), default=2, help="attempts per run (default 2)")
    parser.add_argument("--flake-rate", type=float, metavar="F",
                        help=f"the test's flake rate when the history has none (default {DEFAULT_FLAKE})")
    parser.add_argument("--w-low", type=float, default=0.1,
                        help="with no map: prior weight of a commit touching nothing the test imports (default 0.1)")
    parser.add_argument("--depmap", action="append", default=[], metavar="FILE",
                        help="a runtime map (repeatable; the store's maps are read too): the prior from the lines "
                             "the test executed, else its static import closure")
    parser.add_argument("--no-verify", action="store_true", help="do not run --good and --bad first")
    parser.add_argument("--python", metavar="PATH", help="the interpreter that runs pytest (default this one)")
    parser.add_argument("--test-from", metavar="SHA",
                        help="copy the test file from this commit into each probed tree (a test a later fix added)")
    parser.add_argument("--inject-flake", type=float, default=0.0, metavar="F",
                        help="fail each attempt unrun with probability F (to measure the search; default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of --inject-flake's draws (default 0)")
    parser.add_argument("--state", metavar="PATH", help="state file (default .ci-cache/culprit-GOOD-BAD.json)")
    add_store_arg(parser)
    for plugin in plugins:
        plugin.add_arguments(parser)
    return parser


# Told how a search ended: (arguments, the answer or None, the problem when there is none, whether
# rerunning resumes it); returns what could not be written, or None.
Ending = Callable[[argparse.Namespace, "Answer | None", str, bool], "str | None"]


def main(argv: list[str], plugins: Sequence[RunnerPlugin] = (), prog: str = PROG, on_end: Ending | None = None) -> int:
    """The command; ``plugins`` add runners (``python -m tools.rerun culprit`` adds ``dispatch``).
    ``on_end`` is told the answer, or the problem that stopped the search once its arguments
    parsed (the bot's reply); what it could not write makes the exit status 3 after an answer."""
    if "dispatch" not in {p.name for p in plugins} and "dispatch" in _runner_value(argv):
        print(f"{prog}: --runner dispatch is the bot's runner (tools/, which ci does not import): run "
              "`python -m tools.rerun culprit --runner dispatch --repo OWNER/NAME --workflow FILE ...`",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    args = build_parser(plugins).parse_args(argv)

    def end(answer: Answer | None, problem: str = "", resumable: bool = False) -> str | None:
        unwritten = on_end(args, answer, problem, resumable) if on_end is not None else None
        if unwritten:
            print(f"{prog}: the answer was not written: {unwritten}", file=sys.stderr)
        return unwritten
    try:
        answer = search(args, {p.name: p for p in plugins}, say=lambda line: print(f"{prog}: {line}", flush=True))
    except (WindowError, RegistryError, ValueError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        end(None, str(exc))
        return EXIT_BAD_INPUT
    except RunnerError as exc:
        print(f"{prog}: stopped: {exc}", file=sys.stderr)
        end(None, f"stopped: {exc}", resumable=True)
        return EXIT_UNSURE
    for run in answer.runs:
        if run.link:
            print(f"{prog}: run {run.sha[:12]} {'failed' if run.failed else 'passed'}: {run.link}"
                  + (f" ({run.note})" if run.note else ""))
    pull = f", {answer.about}" if answer.about else ""
    print(f"{prog}: culprit {answer.sha} ({answer.subject}){pull}, probability {answer.probability:.3f}, "
          f"{answer.window_runs} run(s) in the window, stopped: {answer.stop}")
    try:
        stored = store_answer(args, answer)
    except Exception as exc:  # StoreError, or a driver's own: the answer is printed, not stored
        from ci.history.store import failure_text

        print(f"{prog}: cannot store the answer in the history: {failure_text(exc, args.store)}", file=sys.stderr)
        return EXIT_UNWRITABLE
    if stored:
        print(f"{prog}: {stored}")
    try:
        append_step_summary(summary_markdown(args.test, args.tier, answer))
    except OSError as exc:
        print(f"{prog}: cannot append to $GITHUB_STEP_SUMMARY: {exc}", file=sys.stderr)
        end(answer)
        return EXIT_UNWRITABLE
    if end(answer):
        return EXIT_UNWRITABLE
    return EXIT_FOUND if answer.found else EXIT_UNSURE


def summary_markdown(test: str, tier: str, answer: Answer) -> str:
    """The answer as the step summary shows it: the culprit, its probability and PR, every run."""
    def code(text: str) -> str:  # a code span the text (a commit subject, not ours) cannot end early
        return "`" + text.replace("`", "'").replace("\n", " ") + "`"

    verdict = "found" if answer.found else f"most probable (stopped: {answer.stop})"
    lines = [f"### Culprit of {code(test)} on {code(tier)}", "",
             f"{code(answer.sha[:12])} {code(answer.subject)}: {verdict}, probability {answer.probability:.3f}"
             + (f"; {code(answer.about)}" if answer.about else ""), "",
             f"{len(answer.runs)} run(s), {answer.window_runs} in the window:", "",
             "| commit | result | run |", "|---|---|---|"]
    lines += [f"| {code(r.sha[:12])} | {'failed' if r.failed else 'passed'} | "
              f"{f'[run]({r.link})' if r.link else '—'} |" for r in answer.runs]
    return "\n".join(lines) + "\n"


def search_run_url(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> str:
    """This search's own run, the one link both the bot's reply and the stored answer give: the
    dispatch runner's ``--run-url``, else $GITHUB_SERVER_URL/$GITHUB_REPOSITORY/actions/runs/$GITHUB_RUN_ID;
    "" when neither says."""
    env = os.environ if env is None else env
    if getattr(args, "run_url", ""):
        return str(args.run_url)
    if env.get("GITHUB_SERVER_URL") and env.get("GITHUB_REPOSITORY") and env.get("GITHUB_RUN_ID"):
        return f"{env['GITHUB_SERVER_URL']}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
    return ""


def store_answer(args: argparse.Namespace, answer: Answer, env: Mapping[str, str] | None = None) -> str:
    """Write ``answer`` to the history when one is configured (--store, else $CI_HISTORY_STORE) and
    exists (`ci.history.culprits.record_answer`: one transaction, onto its request's row); what was
    done, in words ("" when no store is configured). The repository is the dispatch runner's
    ``--repo``, else $GITHUB_REPOSITORY, else the one repository the store names for the window
    (`ci.history.culprits.window_repos`; ValueError when none or several); the run's link is
    `search_run_url`'s. Store failures raise."""
    from ci.history.culprits import CulpritAnswer, record_answer, window_repos
    from ci.history.location import ENV_VAR, describe
    from ci.history.store import StoreMissing, open_store

    env = os.environ if env is None else env
    location = args.store or env.get(ENV_VAR)
    if not location:
        return ""
    try:
        with open_store(location, create=False) as store:
            store.migrate()  # the culprits table (a store an older ci wrote has none yet)
            repo = getattr(args, "repo", None) or env.get("GITHUB_REPOSITORY", "")  # the dispatch runner's --repo
            if not repo:
                found = window_repos(store, answer.good, answer.bad)
                if len(found) != 1:
                    raise ValueError(f"no repository to store the answer under: $GITHUB_REPOSITORY is not set and "
                                     f"the history names {', '.join(found) or 'none'} for {answer.good[:12]}.."
                                     f"{answer.bad[:12]}: set GITHUB_REPOSITORY=OWNER/NAME")
                repo = found[0]
            record_answer(store, CulpritAnswer(
                repo, args.tier, args.test, answer.good, answer.bad, answer.sha, answer.probability, len(answer.runs),
                answer.stop, answer.found, args.budget, args.runners, answer.candidates, search_run_url(args, env),
                tuple(r.link for r in answer.runs if r.link)))
    except StoreMissing:
        return f"note: no history at {describe(location)}: the answer is not stored"
    return f"answer stored in the history ({describe(location)})"


def _runner_value(argv: Sequence[str]) -> set[str]:
    return {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--runner"} | \
           {a.split("=", 1)[1] for a in argv if a.startswith("--runner=")}


def search(args: argparse.Namespace, plugins: Mapping[str, RunnerPlugin],
           say: Callable[[str], None] = lambda line: None) -> Answer:
    """Run the search ``args`` describe (`build_parser`'s options) to its stop. Bad input raises
    `ValueError` (`WindowError`, `BadWindow`, `RegistryError`) with a one-line message, before
    any run for everything but the verification's outcome. ``say`` is given each progress line."""
    if not 0 < args.confidence < 1:
        raise ValueError(f"--confidence {args.confidence}: give a probability between 0 and 1")
    if args.flake_rate is not None and not 0 <= args.flake_rate < 1:
        raise ValueError(f"--flake-rate {args.flake_rate}: give a rate in [0, 1)")
    check_map_files(args.depmap)
    root = find_repo_root()
    registry = load_registry(root / REGISTRY_FILENAME)
    file = args.test.split("::", 1)[0]
    if file not in registry.tests:
        raise ValueError(f"--test {args.test}: {file} is not a registered test file of {REGISTRY_FILENAME}")
    if args.tier not in registry.tests[file].tiers:
        raise ValueError(f"--tier {args.tier}: {file} is registered for {', '.join(registry.tests[file].tiers)}, "
                         f"not {args.tier}")
    good, bad, candidates = window(root, args.good, args.bad)
    state_path = Path(args.state) if args.state else root / ".ci-cache" / f"culprit-{good[:12]}-{bad[:12]}.json"
    runner = plugins[args.runner].make(args, root, state_path) if args.runner in plugins else \
        LocalBatch(_runner(args, root, file), root, args.test, args.attempts, state_path.with_suffix(".tree"))
    noise, said, flaky, found = _noise(args, file)
    say(f"{len(candidates)} candidate commit(s) after {good[:12]} up to {bad[:12]}; {said}")
    state = load_state(state_path, State(good, bad, args.test, args.tier, args.attempts))
    if state.runs:
        say(f"resuming: {len(state.runs)} run(s) already done, from {state_path}")
    slots = min(args.runners, runner.slots)

    def run(shas: list[str]) -> list[bool]:
        failed = []
        for start in range(0, len(shas), slots):
            chunk = shas[start:start + slots]
            results = runner.run_batch([(len(state.runs) + k, sha) for k, sha in enumerate(chunk)])
            for sha, result in zip(chunk, results):
                state.add(state_path, sha, result)  # before it is used
                counted = f" ({result.failures} of {args.attempts} attempts failed)" if result.failures else ""
                say(f"{sha[:12]} {'failed' if result.failed else 'passed'}{counted}"
                    + (f" ({result.link})" if result.link else ""))
                failed.append(result.failed)
        return failed

    if not args.no_verify:  # one after another on one slot: a failing --good spends no run of --bad
        checks = [(good, False, "--good"), (bad, True, "--bad")]
        for start in range(0, 2, slots):
            chunk = checks[start:start + slots]
            run([sha for sha, _, _ in chunk if _done(state, sha) is None])
            for sha, want_fail, flag in chunk:
                failed = _done(state, sha)
                if failed != want_fail:
                    raise BadWindow(f"{flag} {sha[:12]} {'fails' if failed else 'passes'} {args.test} "
                                    f"(all {args.attempts} attempts): give a {flag[2:]} commit")
    prior = choose_prior(root, registry, file, args.tier, good, candidates, map_files=args.depmap, store=args.store,
                         w_low=args.w_low, found=found)
    for problem in prior.problems:
        say(f"warning: {problem}")
    say(prior.said)
    breakage = breakage_signature(state.runs, bad)
    if breakage is not None:
        m, said = flake_match(flaky, breakage)
        noise = replace(noise, flake_match=m)
    say(said if breakage is not None else "no breakage signature (--bad not verified, its attempts failed with "
        "different or unreadable messages): runs weigh by pass/fail and failed attempts only")
    search_ = Search(list(prior.weights), noise, confidence=args.confidence,
                     budget=args.budget, attempts=args.attempts, detail=True)  # both runners count failed attempts
    index = {sha: i for i, sha in enumerate(candidates)}

    def record(runs: Sequence[Run]) -> None:
        for done in runs:
            if done.sha in index:
                search_.record(Outcome(index[done.sha], done.failed, args.attempts, done.failures,
                                       same_signature(done, breakage)))
    record(state.runs)
    while batch := search_.next_batch(slots):
        start = len(state.runs)
        run([candidates[p.index] for p in batch])
        record(state.runs[start:])
    result = search_.result()
    sha = candidates[result.culprit]
    return Answer(sha, git(root, "log", "-1", "--format=%s", sha), result.probability, tuple(state.runs),
                  result.runs, result.stop.value, result.probability >= args.confidence, runner.about(sha),
                  good, bad, len(candidates))


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


def _noise(args: argparse.Namespace, file: str) -> tuple[NoiseModel, str, Counter[str], list[FoundCulprit]]:
    """The noise model, where its rates came from, and the test's flaky failures per error signature
    (`flaky_fingerprints`, for m once the breakage's signature is known): one read of the history. The flake rate: the history's score for the
    file on the tier, else --flake-rate, else the default. The retry rate r: the history's retries
    after flaky failures (`ci.history.retries`), else max(DEFAULT_RETRY, flake). The false-pass
    rate p: `false_pass_bound` of the tier's known breakage windows (`ci.history.false_pass`). The
    tier's found culprits (`found_culprits`, the prior's weights learned from them) in the same read."""
    node = args.test if "::" in args.test else None
    try:
        from ci.commands.culprit_learned import PAST_LIMIT
        from ci.history.culprits import found_culprits
        from ci.history.false_pass import false_passes
        from ci.history.flaky import flaky_scores
        from ci.history.retries import flaky_fingerprints, retry_rate
        from ci.history.store import open_store

        with open_store(args.store, create=False) as store:
            scores = [s for s in flaky_scores(store, tier=args.tier) if s.file == file
                      and (s.node == args.test or node is None)]
            retry = retry_rate(store, tier=args.tier, file=file, node=node)
            broken = false_passes(store, tier=args.tier)
            flaky = flaky_fingerprints(store, tier=args.tier, file=file, node=node)
            found = found_culprits(store, args.tier, PAST_LIMIT)
    except Exception:  # no history, or one that cannot be read: the rates fall back, and say so
        scores, retry, broken, flaky, found = [], None, None, Counter(), []
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
    passes, attempts = (broken.passes, broken.attempts) if broken else (0, 0)
    p = false_pass_bound(passes, attempts)
    prior = "Beta({:g}, {:g})".format(*FALSE_PASS_PRIOR)
    said += (f"; false-pass rate {p:.4f}, the {FALSE_PASS_LEVEL:.0%} quantile of p's posterior from {passes} of "
             f"{attempts} attempts passing in {broken.windows} known breakage window(s) of the tier ({prior} prior)"
             if broken and broken.windows else f"; false-pass rate {p:.4f}, the {FALSE_PASS_LEVEL:.0%} quantile of "
             f"p's {prior} prior (no known breakage window of the tier in the history)")
    return NoiseModel(flake, p, max(r, flake)), said, flaky, found
