"""The real skeleton of the fifteenth history, read from ``_history_gen15_data.json``: PEFT's main
commits, the CI shape in force at each, the test catalogue (real files, classes, functions and
parametrize ids) and the breakage windows, with what the data does not say drawn from the seed.

Contract: `load_world(seed, ...)` is deterministic per seed. A window's ``start`` is a real commit
index (a revert's or an ``introduced in #N`` fix's culprit) or None; a window with no culprit is a
dependency's or platform's: its onset is drawn 6-36 hours before the fix (transformers main, which
tests-main.yml installs, shows a transformers break 5-15 days before that). A window's tests are
the fix's own test files, else the files its touched ``src/peft/tuners/<method>`` maps to, else
test_decoder_models.py (where PEFT's prompt-learning and cache tests live); a subject naming GPU or
nightly breaks only the nightly GPU jobs' tests.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("_history_gen15_data.json")
GPU_FILES = frozenset({"tests/test_gpu_examples.py", "tests/test_common_gpu.py", "tests/test_gptqmodel.py",
                       "tests/bnb/test_bnb_regression.py", "tests/regression/test_regression.py"})
NIGHTLY_FILES = ("tests/test_decoder_models.py", "tests/test_encoder_decoder_models.py",
                 "tests/test_gptqmodel.py", "tests/test_gpu_examples.py", "tests/test_common_gpu.py",
                 "tests/regression/test_regression.py")
HUB_FILES = frozenset({"tests/test_decoder_models.py", "tests/test_encoder_decoder_models.py",
                       "tests/test_feature_extraction_models.py", "tests/test_seq_classifier.py",
                       "tests/test_hub_features.py", "tests/test_auto.py", "tests/test_helpers.py",
                       "tests/test_adaption_prompt.py", "tests/test_multitask_prompt_tuning.py",
                       "tests/test_stablediffusion.py", "tests/test_target_parameters.py"})
TRANSFORMERS_API = re.compile(r"(?i)transformers|dynamiccache|key_cache|max_cache_len|prefix tuning")


@dataclass(frozen=True)
class Commit:
    """One first-parent commit of main, as the data holds it."""

    index: int
    sha: str
    time: datetime
    author: str
    pr: int | None
    subject: str
    files: tuple[str, ...]
    docs_only: bool


@dataclass(frozen=True)
class Shape:
    """tests.yml, the Makefile and nightly.yml as they stand from commit ``index`` on."""

    index: int
    python: tuple[str, ...]
    os: tuple[str, ...]
    fail_fast: bool
    cancel_in_progress: bool
    make_test: str
    cron: str
    gpu_groups: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Case:
    """One collected test: ``file`` repository path, ``cls`` "" at module level, ``name`` with ids."""

    file: str
    cls: str
    name: str

    @property
    def node(self) -> str:
        return "::".join(p for p in (self.file, self.cls, self.name) if p)

    @property
    def classname(self) -> str:
        module = self.file[:-3].replace("/", ".")
        return f"{module}.{self.cls}" if self.cls else module


@dataclass(frozen=True)
class Window:
    """Commits in [start, end) (or runs after ``onset`` on a base before ``end``) fail ``cases``."""

    kind: str
    start: int | None
    end: int
    subject: str
    cases: tuple[Case, ...]
    onset: datetime
    main_onset: datetime
    gpu_only: bool
    os_only: str

    def breaks(self, base: int, when: datetime, *, transformers_main: bool = False) -> bool:
        """Whether a run of code at commit ``base`` started ``when`` sees this window's failures."""
        if base >= self.end:
            return False
        if self.start is not None:
            return base >= self.start
        return when >= (self.main_onset if transformers_main else self.onset)


@dataclass(frozen=True)
class World:
    commits: tuple[Commit, ...]
    shapes: tuple[Shape, ...]
    catalogue: dict[str, tuple[Case, ...]]
    spans: dict[str, tuple[int, int]]
    windows: tuple[Window, ...]

    def shape_at(self, index: int) -> Shape:
        return [s for s in self.shapes if s.index <= index][-1]

    def files_at(self, index: int) -> list[str]:
        """The test files commit ``index``'s tree holds that have collectable tests."""
        return [f for f, (lo, hi) in self.spans.items() if lo <= index <= hi and self.catalogue.get(f)]

    def base_at(self, when: datetime) -> int:
        """The newest commit of main at time ``when`` (0 before the first)."""
        best = 0
        for commit in self.commits:
            if commit.time <= when:
                best = commit.index
        return best


@lru_cache(maxsize=1)
def raw_data() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


def catalogue(tests: dict[str, list], cases_per_func: int, funcs_per_file: int) -> dict[str, tuple[Case, ...]]:
    """Each file's first ``funcs_per_file`` real functions, each as up to ``cases_per_func`` of its
    real parametrized cases (a function whose ids the data lacks stands as one case of that name)."""
    out: dict[str, tuple[Case, ...]] = {}
    for path, funcs in tests.items():
        cases = []
        for cls, name, _count, ids in funcs[:funcs_per_file]:
            names = [f"{name}[{i}]" for i in ids[:cases_per_func]] or [name]
            cases += [Case(path, cls, n) for n in names]
        out[path] = tuple(cases)
    return out


def _window_files(files: list[str], tests: list[str], known: dict[str, tuple[Case, ...]]) -> list[str]:
    chosen = [f for f in tests if known.get(f)]
    if not chosen:
        methods = {m.group(1) for f in files if (m := re.match(r"src/peft/tuners/([a-z_]+)/", f))}
        chosen = sorted(f"tests/test_{m}.py" for m in methods if known.get(f"tests/test_{m}.py"))
    return chosen or ["tests/test_decoder_models.py"]


def load_world(seed: int, cases_per_func: int, funcs_per_file: int) -> World:
    """The skeleton with the seed's draws (window onsets and which of a file's cases break)."""
    data = raw_data()
    rng = random.Random(f"gen15-world-{seed}")
    commits = tuple(Commit(i, c["sha"], datetime.fromtimestamp(c["time"], timezone.utc), c["author"], c["pr"],
                           c["subject"], tuple(c["files"]), c["docs_only"]) for i, c in enumerate(data["commits"]))
    shapes = tuple(Shape(s["index"], tuple(s["python"]), tuple(s["os"]), s["fail_fast"], s["cancel_in_progress"],
                         s["make_test"], s["nightly_cron"], tuple(sorted(s["gpu_groups"].items())))
                   for s in data["ci"])
    known = catalogue(data["tests"], cases_per_func, funcs_per_file)
    spans = {f: (lo, hi) for f, (lo, hi) in data["test_files"].items()}
    windows = []
    for w in data["windows"]:
        fix = commits[w["end"]]
        if not any(f.startswith(("src/", "tests/")) for f in fix.files):
            continue  # an example's or docs' fix: no test of the suite broke
        files = _window_files(list(fix.files), w["tests"], known)
        pool = [c for f in files for c in known[f]]
        cases = tuple(sorted(rng.sample(pool, min(len(pool), 1)), key=lambda c: c.node))
        onset = fix.time - timedelta(hours=rng.uniform(6, 36))
        early = TRANSFORMERS_API.search(w["subject"]) is not None
        main_onset = onset - timedelta(days=rng.uniform(5, 15)) if early else onset
        gpu_only = re.search(r"(?i)\bgpu\b|nightly", w["subject"]) is not None or all(f in GPU_FILES for f in files)
        os_only = "windows-latest" if re.search(r"(?i)windows", w["subject"]) else ""
        windows.append(Window(w["kind"], w["start"], w["end"], w["subject"], cases, onset, main_onset,
                              gpu_only, os_only))
    return World(commits, shapes, known, spans, tuple(windows))
