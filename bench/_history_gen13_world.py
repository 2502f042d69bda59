"""The real skeleton of the thirteenth history (`bench._history_gen13`), read from the committed
`DATA`: main's commits, each qa level's JUnit files and the tests each runs at a given commit, and
which tests a real breakage window breaks.

A test is a pytest node ``file::[Class::]name[params]``; a parametrized function keeps at most
``max_params`` of its instances (its literal count when the file spells it out, else 2-6, fixed by
its name so every seed sees the same suite), named by its real argnames as pytest names objects
(``dtype0-bs1``)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("_history_gen13_data.json")
# The pool each level's job runs on (assumed: the repository does not name its internal runners).
LEVEL_POOL = {"L0_pytorch_unittest": "h100-1g", "L0_pytorch_debug_unittest": "h100-1g", "L0_jax_unittest": "h100-1g",
              "L1_pytorch_distributed_unittest": "h100-8g", "L1_jax_distributed_unittest": "h100-8g",
              "L1_pytorch_onnx_unittest": "h100-1g", "L2_jax_unittest": "b200-1g"}


def stable(*parts: object) -> int:
    """A seed-independent integer from ``parts`` (Python's ``hash`` changes per process)."""
    return int(hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:12], 16)


@dataclass(frozen=True)
class Commit:
    index: int
    sha: str
    time: datetime
    author: str
    pr: int | None
    subject: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class Case:
    """One test node as pytest's JUnit names it: ``classname`` and ``name`` as written, ``node`` the
    repository-relative pytest id the labels use."""

    node: str
    file: str
    classname: str
    name: str


@dataclass(frozen=True)
class JUnitFile:
    """One ``--junitxml`` file of a level: its name and the cases it holds, in run order."""

    xml: str
    cases: tuple[Case, ...]


@dataclass(frozen=True)
class Window:
    culprit: int
    end: int
    kind: str
    subject: str
    fix_subject: str
    files: tuple[str, ...]


@lru_cache(maxsize=1)
def load() -> dict:
    return json.loads(DATA.read_text())


def commits() -> list[Commit]:
    data = load()
    return [Commit(i, c["sha"], datetime.fromisoformat(c["time"]), c["author"], c["pr"], c["subject"],
                   tuple(c["files"])) for i, c in enumerate(data["commits"])]


def windows() -> list[Window]:
    return [Window(w["culprit"], w["end"], w["kind"], w["culprit_subject"], w["end_subject"], tuple(w["files"]))
            for w in load()["windows"]]


def levels() -> tuple[str, ...]:
    return tuple(load()["scripts"])


def _classname(file: str, cls: str, config: str) -> str:
    # run with ``-c tests/jax/pytest.ini``, pytest's rootdir is that file's folder: classnames start there
    root = config.rsplit("/", 1)[0] + "/" if config else ""
    module = file[len(root):] if root and file.startswith(root) else file
    dotted = module[:-3].replace("/", ".")
    return f"{dotted}.{cls}" if cls else dotted


def _ids(argnames: list[str], count: int, limit: int) -> list[str]:
    if not argnames:
        return [""]
    out = []
    for k in range(min(count, limit)):
        out.append("[" + "-".join(f"{a}{(k + j) % max(count, 1)}" for j, a in enumerate(argnames)) + "]")
    return out


def _selected(file: str, cls: str, name: str, keyword: str) -> bool:
    if not keyword:
        return True
    text = f"{file} {cls} {name}".lower()
    if keyword.startswith("not "):
        return keyword[4:].lower() not in text
    return keyword.lower() in text


@lru_cache(maxsize=4096)
def junit_files(level: str, commit: int, max_params: int, max_functions: int) -> tuple[JUnitFile, ...]:
    """The JUnit files the level's script (as of ``commit``, an index into all of `DATA`'s commits)
    writes, with their cases: each file's first ``max_functions`` selected test functions."""
    data = load()
    versions = [v for v in data["scripts"][level] if v["from"] <= commit]
    out = []
    for index in (versions[-1]["jobs"] if versions else []):
        job = data["jobs"][index]
        files = data["dirs"].get(job["path"], [job["path"]])
        cases: list[Case] = []
        for file in files:
            if file in job["ignore"]:
                continue
            chosen = [fn for fn in data["tests"].get(file, []) if _selected(file, fn["cls"], fn["name"], job["keyword"])]
            for fn in chosen[:max_functions]:
                count = fn["count"] or 2 + stable(file, fn["name"]) % 5
                for ids in _ids(fn["argnames"], count, max_params):
                    inner = f"{fn['cls']}::" if fn["cls"] else ""
                    cases.append(Case(f"{file}::{inner}{fn['name']}{ids}", file,
                                      _classname(file, fn["cls"], job["config"]), fn["name"] + ids))
        if cases:
            out.append(JUnitFile(job["xml"], tuple(cases)))
    return tuple(out)


def related_tests(files: tuple[str, ...], run_files: set[str]) -> list[str]:
    """The run test files a change is about: those it touched, then those named after a touched
    source module (``grouped_linear.py`` -> ``test_grouped_linear.py``), then by a shared word."""
    touched = [f for f in files if f in run_files]
    stems = {Path(f).stem for f in files if f.startswith("transformer_engine/")}
    named = sorted(f for f in run_files if Path(f).stem.removeprefix("test_") in stems)
    words = {w for f in files if f.startswith("transformer_engine/") for w in re.split(r"[_/.]", f[19:])
             if len(w) > 4 and w not in ("pytorch", "common", "module", "tensor", "utils", "extensions")}
    worded = sorted(f for f in run_files if any(w in Path(f).stem for w in words))
    out: list[str] = []
    for f in touched + named + worded:
        if f not in out:
            out.append(f)
    return out
