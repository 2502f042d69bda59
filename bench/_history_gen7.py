"""The seventh labelled history (held out, real skeleton): SGLang's own main branch, 251 first-parent
commits ``732b81d5..5338e444`` (2026-06-17 .. 06-23), with a simulated CI on top.

Real (from ``bench/_history_gen7_data.json``, made by `bench._history_gen7_extract`):

* every main commit: sha, committer time, author, subject, the test-relevant files it touched;
* the pull requests: the merged commits themselves, numbered from their ``(#NNNN)``, each with
  that commit's own diff;
* the tests: registered per-commit CUDA test files of the span's first commit (their tier from
  ``register_cuda_ci(stage=..., runner_config=...)``, their class, method and line names), and
  the SGLang modules each imports (two levels);
* the breakage windows: SGLang's reverts and fixes, and the tests they break
  (`bench._history_gen7_story` states the rules).

Real too: main is tested by pr-test.yml's scheduled full run (cron 11:00 and 23:00 UTC, stored as
``nightly`` runs of the newest main commit then), not on every push.

Simulated (``random.Random(seed)``, rates per attempt unless said):

* which test files a run holds: every window's files and a fixed sample of the rest (`Scale.files`);
* when a pull request's CI ran: 20 min to 8 h before its merge; its merge base is the newest main
  commit then (real times); its run shows its own breakage (label ``new``) with `CATCH`, else the
  breaking test was not run on it;
* flakes, every test file one kind by tier: multi-GPU tiers NCCL errors, kernel-unit tiers CUDA out
  of memory, the others a server start-up timeout or a port in use; the rate per file 0 (60 %),
  2 %, 5 % or 10 % (`FLAKE_RATES`), each attempt on its own; pytest-rerunfailures reruns a failed
  test once (two attempts), a failed pull request run is rerun (GitHub's "re-run all jobs",
  attempt 2) with `RERUN`;
* infra: in each pool runner ``-03`` has a bad GPU for 6 h at a seeded time (every test of a job on
  it errors, every attempt), and one pool is out for 2 h (a job of that tier that starts then errors
  every test: its image cannot be pulled).

Truth: a failing test is ``infra`` when its job ran on a bad runner or in the outage, else ``new``
when its pull request's own diff breaks it, else ``broken_on_main`` when its run's main commit is
in a window, else ``flaky``.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from bench._history_gen2 import Breakage, History, TestSpec
from bench._history_gen7_story import Skeleton, Test, Window, load
from bench._history_gen7_text import Attempt, case_xml, error_text, report_xml
from bench._verdicts_records import Label, Report, Run

FLAKE_RATES = ((0.6, 0.0), (0.2, 0.02), (0.12, 0.05), (0.08, 0.10))
CATCH = 0.7
RERUN = 0.3
ATTEMPTS = 2
RUNNERS = 6
SHARDED = {"base-b-1-gpu-small": 2, "base-b-1-gpu-large": 2}
BAD_HOURS, OUTAGE_HOURS = 6, 2
SCHEDULE = (11, 23)  # UTC hours of pr-test.yml's scheduled full runs


@dataclass(frozen=True)
class Scale:
    """How much history: the first ``commits`` of the span, the first ``prs`` pull requests (None:
    all), ``files`` test files; ``attempt_text`` JUnit as `ci run` writes it (else stock pytest)."""

    commits: int = 251
    prs: int | None = None
    files: int = 40
    attempt_text: bool = True


QUICK = Scale(commits=24, prs=14, files=14)


@dataclass(frozen=True)
class World:
    """The seeded parts: flake kind and rate per file, the bad runners and the outage."""

    flakes: dict[str, tuple[str, float]]
    bad: dict[str, tuple[datetime, datetime]]  # runner -> when its GPU is bad
    outage: tuple[str, datetime, datetime]  # tier, from, to


def when(text: str) -> datetime:
    """A commit's ISO time (its committer's offset) in UTC."""
    return datetime.fromisoformat(text).astimezone(timezone.utc)


def pick_files(skeleton: Skeleton, scale: Scale, windows: list[Window], rng: random.Random) -> list[Test]:
    """The tests of every window's files and a seeded sample of the others, ``scale.files`` files in all."""
    broken = sorted({f for w in windows for f in w.files})
    rest = sorted({t.file for t in skeleton.tests} - set(broken))
    chosen = set(broken) | set(rng.sample(rest, max(0, min(len(rest), scale.files - len(broken)))))
    return [t for t in skeleton.tests if t.file in chosen]


def flake_kind(test: Test, rng: random.Random) -> str:
    gpus = int((re.search(r"(\d+)-gpu", test.tier) or re.search("(1)", "1")).group(1))
    if gpus > 1:
        return "nccl"
    if "kernel-unit" in test.tier:
        return "oom"
    return rng.choice(("server_timeout", "port"))


def make_world(tests: list[Test], commits, rng: random.Random) -> World:
    flakes = {}
    for file in sorted({t.file for t in tests}):
        test = next(t for t in tests if t.file == file)
        roll, rate = rng.random(), 0.0
        for share, value in FLAKE_RATES:
            if roll < share:
                rate = value
                break
            roll -= share
        flakes[file] = (flake_kind(test, rng), rate)
    first, last = when(commits[0].time), when(commits[-1].time)
    span = max(1.0, (last - first).total_seconds())
    tiers = sorted({t.tier for t in tests})
    bad = {}
    for tier in tiers[:2]:
        start = first + timedelta(seconds=rng.uniform(0, span))
        bad[f"{tier}-03"] = (start, start + timedelta(hours=BAD_HOURS))
    start = first + timedelta(seconds=rng.uniform(0, span))
    return World(flakes, bad, (rng.choice(tiers), start, start + timedelta(hours=OUTAGE_HOURS)))


def head_sha(merge_sha: str) -> str:
    """A pull request's head sha (simulated: the squash merge keeps none)."""
    return hashlib.sha1(f"gen7 pull request head of {merge_sha}".encode()).hexdigest()


class Builder:
    """Writes the runs of one seed."""

    def __init__(self, skeleton: Skeleton, scale: Scale, seed: int):
        self.rng = random.Random(seed)
        self.commits = skeleton.commits[:scale.commits]
        self.windows = [w for w in skeleton.windows if w.start < len(self.commits)]
        self.tests = pick_files(skeleton, scale, self.windows, self.rng)
        self.world = make_world(self.tests, self.commits, self.rng)
        self.scale = scale
        self.next_id = 21_000_000_000

    def window_of(self, file: str, base: int) -> Window | None:
        return next((w for w in self.windows if w.start <= base < w.end and file in w.files), None)

    def cause(self, test: Test, base: int, own: int | None, runner: str, tier: str, started: datetime,
              catch: bool) -> tuple[str, str, bool]:
        """(label, error cause, fails every attempt) of ``test``, or label "" when it passes."""
        low, high = self.world.bad.get(runner, (None, None))
        if low and low <= started < high:
            return "infra", "bad_runner", True
        out_tier, out_low, out_high = self.world.outage
        if tier == out_tier and out_low <= started < out_high:
            return "infra", "outage", True
        if own is not None:
            mine = next((w for w in self.windows if w.start == own and test.file in w.files), None)
            if mine and catch:
                return "new", "new", True
            if any(w.end == own and w.start <= base and test.file in w.files for w in self.windows):
                return "", "", False  # the pull request is the revert or fix: its own diff passes
        if self.window_of(test.file, base):
            return "broken_on_main", "broken", True
        return "flaky", "", False

    def attempts(self, test: Test, cause: tuple[str, str, bool], base: int) -> tuple[list[Attempt], str]:
        label, kind, always = cause
        seconds = lambda: round(self.rng.uniform(5, 120), 3)  # noqa: E731
        if label and always:
            w = self.window_of(test.file, base) or next((w for w in self.windows if test.file in w.files), None)
            module = (sorted(test.touches & set(w.touched)) or [test.file])[0] if w else test.file
            error = error_text(kind, self.rng.randrange(100, 999) if kind in ("broken", "new") else
                               self.rng.randrange(1000, 65000), module.rsplit("/", 1)[-1])
            return [Attempt(kind, error, seconds()) for _ in range(ATTEMPTS)], label
        flake, rate = self.world.flakes[test.file]
        out = []
        while len(out) < ATTEMPTS:
            if rate and self.rng.random() < rate:
                out.append(Attempt(flake, error_text(flake, self.rng.randrange(1000, 65000)), seconds()))
            else:
                out.append(Attempt(None, "", seconds()))
                break
        return out, ("flaky" if out[0].cause else "")

    def run(self, event: str, sha: str, base: int, started: datetime, author: str, pr: int | None = None,
            own: int | None = None, attempt: int = 1, run_id: str = "", catch: bool = True) -> Run:
        """One run of every kept tier at main commit ``base`` (a pull request's own commit ``own``)."""
        if not run_id:
            self.next_id += 1
            run_id = str(self.next_id)
        reports, finished = [], started
        for tier in sorted({t.tier for t in self.tests}):
            files = sorted({t.file for t in self.tests if t.tier == tier})
            shards = min(SHARDED.get(tier, 1), len(files))
            for shard in range(shards):
                runner = f"{tier}-{self.rng.randrange(1, RUNNERS + 1):02d}"
                begin = started + timedelta(minutes=self.rng.uniform(1, 20))
                cases, labels, failures, errors, total = [], [], 0, 0, 0.0
                for test in (t for t in self.tests if t.tier == tier and files.index(t.file) % shards == shard):
                    tries, label = self.attempts(test, self.cause(test, base, own, runner, tier, begin, catch), base)
                    classname = test.file[:-3].replace("/", ".") + (f".{test.cls}" if test.cls else "")
                    cases.append(case_xml(test.file, classname, test.name, test.line, tries, self.scale.attempt_text))
                    total += sum(a.seconds for a in tries)
                    if label:
                        labels.append(Label(test.node, tier, label, tries[-1].cause is not None, tries[0].cause or ""))
                    if tries[-1].cause:
                        failures += tries[-1].cause not in ("server_timeout", "port", "bad_runner", "outage")
                        errors += tries[-1].cause in ("server_timeout", "port", "bad_runner", "outage")
                reports.append(Report(tier, shard, shards, runner, report_xml(cases, failures, errors, total), labels))
                finished = max(finished, begin + timedelta(seconds=total))
        base_sha = self.commits[base].sha if event == "pull_request" else ""
        return Run(event, sha, base, started, finished, run_id, attempt, pr, base_sha, author, reports)

    def runs(self) -> list[Run]:
        out = []
        first, last = when(self.commits[0].time), when(self.commits[-1].time)
        tick = first.replace(hour=SCHEDULE[0], minute=0, second=0)
        while tick <= last + timedelta(hours=12):  # pr-test.yml's cron: the newest main commit then
            if tick >= first:
                head = max(c.index for c in self.commits if when(c.time) <= tick)
                out.append(self.run("nightly", self.commits[head].sha, head, tick, "github-actions[bot]"))
            tick += timedelta(hours=SCHEDULE[1] - SCHEDULE[0])
        prs = [c for c in self.commits if c.pr is not None and c.index > 0][:self.scale.prs]
        for c in prs:
            started = when(c.time) - timedelta(minutes=self.rng.uniform(20, 480))
            base = max([b.index for b in self.commits[:c.index] if when(b.time) <= started] or [0])
            sha = head_sha(c.sha)
            catch = self.rng.random() < CATCH
            first = self.run("pull_request", sha, base, started, c.author, c.pr, c.index, catch=catch)
            out.append(first)
            if first.labels and self.rng.random() < RERUN:
                again = first.finished + timedelta(minutes=self.rng.uniform(5, 60))
                out.append(self.run("pull_request", sha, base, again, c.author, c.pr, c.index, 2, first.run_id, catch))
        return sorted(out, key=lambda r: (r.finished, r.run_id, r.attempt))


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The history of ``seed`` at ``scale``: every run, labelled, in the order runs finish."""
    builder = Builder(load(), scale, seed)
    specs = [TestSpec(t.tier, t.file.split("/")[2] if t.file.count("/") > 2 else "", t.file, t.cls, t.name, t.line,
                      builder.world.flakes[t.file][1], builder.world.flakes[t.file][0]) for t in builder.tests]
    breakages = [Breakage(t.node, t.tier, w.kind, w.start, w.end, builder.commits[w.end].subject if w.end <
                          len(builder.commits) else "") for w in builder.windows for t in builder.tests
                 if t.file in w.files]
    return History(seed, specs, breakages, [c.sha for c in builder.commits], builder.runs())
