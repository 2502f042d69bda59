"""The sixth labelled history (issue 47, held out): a vLLM-on-Buildkite-like project, written without
reading the verdict rules or the other generators, from pytest's, pytest-rerunfailures', pytest-timeout's
and the Hugging Face hub's documented behaviour. ``python -m bench verdicts --generator gen6``.

Contract: `generate(seed, scale)` is a pure function of its arguments; its `History.runs` are in the
order they finish, each with its reports' JUnit and a truth `Label` for every test whose first attempt
failed. Main commits come about every six hours (a ``push`` run each, a ``nightly`` run at 02:00),
pull requests open against main's head at the time (``pull_request`` runs, a second head when their
own bug gets fixed, sometimes a second run attempt). The causes, none of which the earlier histories
model:

- an HF hub outage: every test that downloads weights fails, every attempt, for hours (infra);
- a torch nightly pin bumped by a main commit breaks the fp8 and MoE kernels on h100 until a pull
  request fixes it (broken_on_main; the fixing pull request's own runs pass them);
- the l4 image's CUDA stack changed with no commit: two fp8 parametrizations fail there (infra);
- one l4 runner's disk fills: tests writing the compile cache fail on it only (infra);
- test order: the rotary compile test fails whenever the inductor-cache file ran before it in the
  same job, which depends on how many test files there are (flaky, every attempt);
- a flake whose rate jumps for a week, pytest-timeout kills with a thread dump (flaky);
- a breakage on a test that l4 skips (skipped is not failed), a breakage hidden behind an older one
  on the same test (the first fix shows the second's error; broken_on_main throughout);
- pull requests' own bugs: a whole test, one parametrization on h100 only, or a segfault that
  leaves the rest of its job without JUnit (new).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from bench._verdicts_records import LABELS, Run
from bench._history_gen6_story import Break, Bug, Setting, run_jobs
from bench._history_gen6_world import (QUICK, RUNNERS, START, History, Scale, Test, Window, base_tests, hours,
                                       model_file, sha)

__all__ = ["LABELS", "QUICK", "History", "Scale", "generate"]

STEP = timedelta(hours=6)
AUTHORS = ("mgoin", "youkaichao", "WoosukKwon", "njhill", "tlrmchlsmth", "ywang96", "DarkLight1337")
PIN = "AttributeError: module 'torch.library' has no attribute 'impl_abstract' (torch 2.10.0.dev pin)"
FP8 = tuple(f"tests/kernels/test_fp8_gemm.py::TestFp8Gemm::test_scaled_mm[{p}]" for p in ("bf16-4096", "fp16-4096"))
PIN_NODES = (*FP8, "tests/kernels/test_moe.py::TestFusedMoe::test_fused_moe[e64-k6]")
PREEMPT = "tests/core/test_scheduler.py::TestScheduler::test_preempt"
DECODE = "tests/kernels/test_attention.py::TestFlashInfer::test_decode_paged"
ABORT = "tests/engine/test_async_engine.py::TestAsyncEngine::test_abort_stream"


def _tests_at(commit: int) -> list[Test]:
    """Main's suite at ``commit``: a model test file lands every eighth commit."""
    tests = base_tests()
    for k in range((commit + 4) // 8):
        tests += model_file(k)
    return tests


def _breaks(n: int, rng: random.Random) -> list[Break]:
    pin = max(2, int(n * rng.uniform(0.2, 0.3)))
    hid = max(pin + 2, int(n * rng.uniform(0.45, 0.55)))
    mask = max(hid + 3, int(n * rng.uniform(0.7, 0.8)))
    return [Break("pin_bump", PIN_NODES, pin, pin + max(3, n // 10), PIN, "h100"),
            Break("hidden", (PREEMPT,), hid, hid + 5,
                  "ImportError: cannot import name 'SchedulerOutputs' from 'vllm.core.scheduler'"),
            Break("hidden", (PREEMPT,), hid + 2, hid + 9, "AssertionError: preempted request was not requeued"),
            Break("masked", (DECODE,), mask, mask + 4,
                  "RuntimeError: paged decode kernel got block_size 32, expected 16")]


def _windows(span: timedelta, rng: random.Random) -> list[Window]:
    weights = tuple(t.node for t in base_tests() if t.weights)
    at = [START + span * rng.uniform(a, b) for a, b in ((0.15, 0.3), (0.4, 0.5), (0.6, 0.7), (0.05, 0.15))]
    return [Window("hf_outage", at[0], at[0] + hours(rng, 3, 6), nodes=weights),
            Window("image_bump", at[1], at[1] + hours(rng, 24, 40), tier="l4", nodes=FP8),
            Window("disk_full", at[2], at[2] + hours(rng, 18, 36), tier="l4",
                   runner=f"l4-{rng.randrange(RUNNERS['l4']) + 1}"),
            Window("flaky_jump", at[3], at[3] + timedelta(days=7), nodes=(ABORT,))]


class _Clock:
    """Run ids and the runs list, kept in the order they finish."""

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.next_id = 9000

    def add(self, event: str, sha_: str, base: int, started: datetime, reports: list, *, pr: int | None = None,
            base_sha: str = "", author: str = "", attempt: int = 1, run_id: str = "") -> Run:
        if not run_id:
            self.next_id += 1
        finished = started + timedelta(minutes=70 + 3 * len(reports))
        run = Run(event, sha_, base, started, finished, run_id or str(self.next_id), attempt, pr, base_sha, author,
                  reports)
        self.runs.append(run)
        return run


def _pr_bugs(n: int, tests: list[Test], rng: random.Random) -> tuple[Bug, ...]:
    roll = rng.random()
    if roll < 0.2:
        t = rng.choice([t for t in tests if not t.rate and t.node not in (PREEMPT, DECODE, ABORT)])
        return (Bug("pr_bug", t.node, error=f"AssertionError: PR #{n} changed {t.name.split('[')[0]}'s output"),)
    if roll < 0.32:
        node = "tests/kernels/test_fp8_gemm.py::TestFp8Gemm::test_scaled_mm[fp16-128]"
        return (Bug("pr_param", node, "h100", f"AssertionError: Tensor-likes are not close! (PR #{n}, fp16 on sm90)"),)
    if roll < 0.4:
        return (Bug("pr_segv", "tests/kernels/test_attention.py::TestFlashInfer::test_prefill_ragged", "h100"),)
    return ()


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The history for ``seed`` at ``scale`` (see the module's docstring)."""
    rng = random.Random(f"gen6-{seed}")
    n = scale.commits
    times = [START + STEP * i + timedelta(minutes=rng.randrange(0, 90)) for i in range(n)]
    shas = [sha(seed, f"main-{i}") for i in range(n)]
    breaks, windows = _breaks(n, rng), _windows(STEP * n, rng)
    clock = _Clock()

    def setting(base: int, when: datetime, tests: list[Test], **kw) -> Setting:
        return Setting(base, when, tests, breaks=breaks, windows=windows, **kw)

    for i in range(n):
        started = times[i] + timedelta(minutes=5)
        clock.add("push", shas[i], i, started, run_jobs(setting(i, started, _tests_at(i)), rng, scale.attempt_text),
                  author=rng.choice(AUTHORS))
    day = START.replace(hour=2) + timedelta(days=1)
    while day < times[-1]:
        head = max(i for i in range(n) if times[i] <= day)
        clock.add("nightly", shas[head], head, day, run_jobs(setting(head, day, _tests_at(head)), rng,
                                                              scale.attempt_text))
        day += timedelta(days=1)
    pin = breaks[0]
    fixer = min(pin.end, n) - 1  # a pull request against main's last broken commit fixes the pin
    opens = sorted((times[0] + (times[-1] - times[0]) * rng.random(), None) for _ in range(scale.prs))
    opens.append((times[fixer] + timedelta(minutes=20), pin))
    for number, (opened, fixes) in enumerate(opens, start=101):
        base = max(i for i in range(n) if times[i] <= opened)
        tests = _tests_at(base)
        if rng.random() < 0.3:  # a new test file of its own shifts how files fall into jobs
            tests = tests + [Test(f"tests/kernels/test_pr{number}.py", "TestNew", "test_feature", ("h100", "l4"))]
        bugs = () if fixes else _pr_bugs(number, tests, rng)
        author = rng.choice(AUTHORS)
        heads = [(sha(seed, f"pr-{number}-1"), bugs, opened)]
        if bugs and rng.random() < 0.6:
            heads.append((sha(seed, f"pr-{number}-2"), (), opened + hours(rng, 3, 8)))
        for head, head_bugs, when in heads:
            started = when + timedelta(minutes=10)
            fixed = (fixes,) if fixes else ()
            s = setting(base, started, tests, bugs=head_bugs, fixes=fixed)
            run = clock.add("pull_request", head, base, started, run_jobs(s, rng, scale.attempt_text),
                            pr=number, base_sha=shas[base], author=author)
            if run.labels and rng.random() < 0.4:  # "Retry failed jobs", a run attempt later
                again = run.finished + timedelta(minutes=rng.randrange(20, 90))
                s = setting(base, again, tests, bugs=head_bugs, fixes=fixed)
                clock.add("pull_request", head, base, again, run_jobs(s, rng, scale.attempt_text), pr=number,
                          base_sha=shas[base], author=author, attempt=2, run_id=run.run_id)
    runs = sorted(clock.runs, key=lambda r: (r.finished, r.run_id, r.attempt))
    return History(seed, _tests_at(n - 1), shas, runs, windows, breaks)
