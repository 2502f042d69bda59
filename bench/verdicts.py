"""``python -m bench verdicts [--quick] [--seeds 1-5] [--generator gen2|...|gen15] [--merge-group]``:
how often `ci history verdicts` names the true cause of a pull request's failing test (issue 47), on the second labelled
history (`bench._history_gen2`: written from GitHub's and pytest's documented behaviour and real GPU
flakes, independent of the verdict rules; default seeds 1-5) or the third (`bench._history_gen3`:
a vLLM-like suite, written independently of both) or the fourth (`bench._history_gen4`: a
Liger-Kernel-like suite on one GPU tier behind a merge queue, written independently of all three) or
the fifth (`bench._history_gen5`: a PyTorch-CI-like project on CUDA and ROCm pools, held out from
the rules' tuning: scored once, by the lead, when the rules are final) or the sixth
(`bench._history_gen6`: a vLLM-on-Buildkite-like project with causes none of the others model, held
out the same way) or the seventh (`bench._history_gen7`: SGLang's real main branch, pull requests,
tests, reverts and fixes with simulated flakes and infra on top, held out the same way) or the eighth
(`bench._history_gen8`: vLLM's real main branch, Buildkite steps, reverts and fixes, with simulated
flakes, agents and retries on top, held out the same way) or the ninth (`bench._history_gen9`:
Liger-Kernel's real main branch, GitHub Actions workflow on Modal, reverts and fixes, with simulated
flakes, Modal and hub failures and re-runs on top, held out the same way) or the tenth
(`bench._history_gen10`: torchao's real main branch on its GitHub Actions GPU workflows, reverts and
fixes, with simulated flakes, runner, pool and hub failures, re-runs and cancels on top, held out the
same way) or the eleventh
(`bench._history_gen11`: FlashInfer's real main branch, pr-test.yml's fail-fast matrix, real fixes,
with simulated kernel flakes, JIT cache, runner and pool failures and re-runs on top, held out the same way) or the
twelfth (`bench._history_gen12`: DeepSpeed's real master, its GPU workflows' events, path filters and markers,
merge queue and nightlies, real reverts, fixes and dependency pins, with simulated flakes, a bad host, infra
faults, lost runners, re-runs and cancels on top, held out the same way) or
the thirteenth (`bench._history_gen13`: TransformerEngine's real main branch, its qa scripts' per-file
JUnit on ``/te-ci``-triggered pipelines, real reverts and fixes, with simulated flakes, bad hosts, a
full GPU, hub and InfiniBand failures, retries, re-comments and cancels on top, held out the same way) or
the fourteenth (`bench._history_gen14`: bitsandbytes' real main branch, its path-filtered pull-request
and nightly CUDA matrices on T4/A10/L40S pools and one Windows machine, real fixes, with simulated
tolerance and compile flakes, ECC hosts, a stray Windows GPU process, wheel-index outages, a torch
nightly regression, re-runs of failed jobs and cancels on top, held out the same way) or the fifteenth (`bench._history_gen15`:
PEFT's real main branch, its tests.yml CPU matrix on push and pull_request (GPU tests skipped there),
tests-main.yml on transformers main and the nightly GPU groups, real dependency and platform fixes,
with simulated flakes, hub outages, full disks, killed xdist workers, an Xid host, lost runners and
re-runs of failed jobs on top, held out the same way).

Each history is ingested into a fresh SQLite store through the real ingest path in the order its
runs finish, each pull request run judged as pr-gpu.yml judges it (`bench._verdicts_score`).
Printed: per truth label, answers and how many were right at the time, and when the same commits
are asked again at the history's end, with how many answers changed; the flakes that failed every
attempt apart; the five most common wrong (label -> verdict: detail) answers. Issue 47's goals:
>= 95 % right overall, >= 80 % of flakes that failed every attempt, and no flake called
``broken_on_main``. ``--quick``: a 24-commit, 14-PR history. ``--generator replay`` (or ``both``)
is refused with a pointer: the verdict tests' replay lives under tests/, which bench may not
import; tests/ci/verdict_replay_bench.py prints the same table for it. ``--merge-group`` (gen4 only)
stores its merge queue's runs as ``merge_group`` runs of their batch, judged as gpu.yml judges them,
instead of the tail pull request's ``pull_request`` runs (the default, as measured in docs/history.md).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable

from bench import (_history_gen2, _history_gen3, _history_gen4, _history_gen5, _history_gen6, _history_gen7,
                   _history_gen8, _history_gen9)
from bench import _history_gen10, _history_gen11, _history_gen12, _history_gen13, _history_gen14, _history_gen15
from bench._verdicts_records import LABELS
from bench._verdicts_score import Judged, Score, score_history
from bench.table import format_table


@dataclass(frozen=True)
class Generator:
    """A labelled history's ``generate(seed, scale)``, its default scale and its ``--quick`` one
    (each scale a dataclass with an ``attempt_text`` field, for ``--stock-junit``)."""

    generate: Callable[[int, Any], Any]
    scale: Any
    quick: Any


GENERATORS = {"gen2": Generator(_history_gen2.generate, _history_gen2.Scale(), _history_gen2.QUICK),
              "gen3": Generator(_history_gen3.generate, _history_gen3.Scale(), _history_gen3.QUICK),
              "gen4": Generator(_history_gen4.generate, _history_gen4.Scale(), _history_gen4.QUICK),
              "gen5": Generator(_history_gen5.generate, _history_gen5.Scale(), _history_gen5.QUICK),
              "gen6": Generator(_history_gen6.generate, _history_gen6.Scale(), _history_gen6.QUICK),
              "gen7": Generator(_history_gen7.generate, _history_gen7.Scale(), _history_gen7.QUICK),
              "gen8": Generator(_history_gen8.generate, _history_gen8.Scale(), _history_gen8.QUICK),
              "gen9": Generator(_history_gen9.generate, _history_gen9.Scale(), _history_gen9.QUICK),
              "gen10": Generator(_history_gen10.generate, _history_gen10.Scale(), _history_gen10.QUICK),
              "gen11": Generator(_history_gen11.generate, _history_gen11.Scale(), _history_gen11.QUICK),
              "gen12": Generator(_history_gen12.generate, _history_gen12.Scale(), _history_gen12.QUICK),
              "gen13": Generator(_history_gen13.generate, _history_gen13.Scale(), _history_gen13.QUICK),
              "gen14": Generator(_history_gen14.generate, _history_gen14.Scale(), _history_gen14.QUICK),
              "gen15": Generator(_history_gen15.generate, _history_gen15.Scale(), _history_gen15.QUICK)}
DEFAULT_SEEDS = (1, 2, 3, 4, 5)
REPLAY_ELSEWHERE = ("the replay is the verdict tests' own story and bench may not import tests: score it with "
                    "tests/ci/verdict_replay_bench.py (docs/bench.md, verdicts)")
EVERY = "flaky, failed every attempt"
HEADER = ("answers", "right at the time")
HEADER_END = ("answers at the end", "right at the end")


class UsageError(ValueError):
    """Bad command-line input: the message names the flag and what to give."""


def parse_seeds(text: str) -> tuple[int, ...]:
    """``1-5``, ``1,3,7`` or ``4`` as seeds; UsageError naming the value otherwise."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if not low.isascii() or not low.isdigit() or (high and (not high.isascii() or not high.isdigit())):
            raise UsageError(f"--seeds {text!r}: give whole numbers like 1-5 or 1,3,7")
        seeds.extend(range(int(low), int(high or low) + 1))
    if not seeds:
        raise UsageError(f"--seeds {text!r} names no seed (a range runs low to high, like 1-5)")
    return tuple(seeds)


def flag_value(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name:
            if i + 1 == len(argv):
                raise UsageError(f"{name} needs a value")
            return argv[i + 1]
    return None


def label_rows(judged: list[Judged]) -> dict[str, tuple[int, int]]:
    """(right, total) per truth label, for the flakes that failed every attempt, and overall."""
    rows: dict[str, tuple[int, int]] = {}
    groups = [(label, [j for j in judged if j.label == label]) for label in LABELS]
    groups.append((EVERY, [j for j in judged if j.label == "flaky" and j.every_attempt]))
    others = sorted({j.label for j in judged} - set(LABELS))
    groups += [(label, [j for j in judged if j.label == label]) for label in others]
    groups.append(("overall", judged))
    for name, items in groups:
        rows[name] = (sum(j.right for j in items), len(items))
    return rows


def _cells(right: int, total: int) -> list[str]:
    return [str(total) if total else "", f"{right} ({right / total:.1%})" if total else "-"]


def wrong_pairs(judged: list[Judged], top: int = 5) -> list[tuple[str, int]]:
    """The most common wrong answers as ``label -> verdict: detail`` (numbers folded to #)."""
    counts = Counter(f"{j.label} -> {j.verdict}: {re.sub(r'[0-9a-f]{7,40}|[0-9]+', '#', j.detail)[:110]}"
                     for j in judged if not j.right)
    return counts.most_common(top)


def report(name: str, scores: list[Score]) -> str:
    """The table of one generator's scores, summed over its seeds."""
    at_time = [j for s in scores for j in s.at_time]
    at_end = [j for s in scores for j in s.at_end]
    has_end = any(s.changed is not None for s in scores)
    now, end = label_rows(at_time), label_rows(at_end)
    rows = [[label, *_cells(*now[label]), *(_cells(*end.get(label, (0, 0))) if has_end else [])] for label in now]
    seeds = ", ".join(str(s.seed) for s in scores)
    lines = [format_table(["truth label", *HEADER, *(HEADER_END if has_end else ())], rows,
                          f"verdicts on the {name} history, seeds {seeds}")]
    flake_main = sum(1 for j in at_time if j.label == "flaky" and j.verdict == "broken_on_main")
    lines.append(f"flakes called broken_on_main at the time: {flake_main}")
    if has_end:
        changed = sum(s.changed or 0 for s in scores)
        lines.append(f"answers changed between a commit's last ask and the end: {changed} of "
                     f"{sum(s.compared for s in scores)}")
    lines.append("most common wrong answers at the time (label -> verdict: detail):")
    lines += [f"  {count:>4}  {text}" for text, count in wrong_pairs(at_time)] or ["  none"]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    try:
        generator = flag_value(argv, "--generator") or "gen2"
        if generator in ("replay", "both"):
            raise UsageError(f"--generator {generator}: {REPLAY_ELSEWHERE}")
        if generator not in GENERATORS:
            raise UsageError(f"--generator {generator!r} is not one of {', '.join(GENERATORS)}, replay, both")
        if "--merge-group" in argv and generator != "gen4":
            raise UsageError(f"--merge-group: only gen4 has a merge queue, not {generator}")
        given = flag_value(argv, "--seeds")
        seeds = parse_seeds(given) if given is not None else DEFAULT_SEEDS
    except UsageError as exc:
        print(f"python -m bench verdicts: {exc}", file=sys.stderr)
        return 2
    chosen = GENERATORS[generator]
    scale = chosen.quick if "--quick" in argv else chosen.scale
    if "--stock-junit" in argv:  # as pytest + pytest-rerunfailures write it, without the registry plugin
        scale = replace(scale, attempt_text=False)
    if "--merge-group" in argv:
        scale = replace(scale, merge_group=True)
    print(report(generator, [score_history(chosen.generate(seed, scale), generator) for seed in seeds]), flush=True)
    return 0
