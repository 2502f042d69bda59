"""gen12's world: DeepSpeed's real commits, tests, workflows and breakages (`bench/_history_gen12_data.json`)
turned into what the simulation (`bench._history_gen12_runs`) draws runs from.

Real, from the data: the commits (sha, time, author, pull request, touched files), the unit test
files alive at each commit and their tests (parametrize ids capped at `MAX_IDS` per function), each
GPU workflow's events, path filters, runner pool and the ``-m`` marker of each ``pytest ... unit/``
line (no ``-m``: pytest.ini's default selection), the windows a revert or a fix closes, and the
dependency pins that end an outside breakage. Simulated, from the seed: which tests of a window's
files it breaks (`Window.nodes`: an outside breakage's among the pinned workflows' files that import
transformers, else any of their files), the start of an outside breakage
(`ENV_LEAD` before its pin: git holds only the end) and the flaky tests with their rates and kinds.
A window longer than `MAX_WINDOW` commits is kept as latent and plants nothing: a test failing on
main for months is not what the project's CI saw (its rollback cites a user's issue).
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

DATA = Path(__file__).with_name("_history_gen12_data.json")
MAX_IDS = 3
MAX_WINDOW = 40
ENV_LEAD = timedelta(hours=30)
# tests/pytest.ini's addopts: markers deselected when a pytest line gives no -m.
EXCLUDED = frozenset({"sequential", "nightly", "inference", "seq_inference", "inference_ops", "inference_v2",
                      "inference_v2_ops", "stable_diffusion", "evaluation"})
POOL_SIZES = {"v100": 10, "a6000": 3, "h100": 2}
_MARK = re.compile(r"-m\s+['\"]([A-Za-z_0-9]+)['\"]")


@dataclass(frozen=True)
class Commit:
    index: int
    sha: str
    time: datetime
    author: str
    subject: str
    pr: int | None
    touched: tuple[str, ...]


@dataclass(frozen=True)
class Node:
    """One collected test: its ``node`` as the history store keys a JUnit case (the file, then each
    dotted part of the classname, then the name: DeepSpeed's pytest runs from ``tests/``, so the
    classname starts ``unit.``), the JUnit classname and name."""

    file: str
    node: str
    classname: str
    name: str
    markers: frozenset[str]
    distributed: bool


@dataclass(frozen=True)
class Workflow:
    """One GPU workflow's shape at a commit: events, path filters, pool and pytest markers."""

    name: str
    events: frozenset[str]
    paths: tuple[str, ...]
    paths_ignore: tuple[str, ...]
    pool: str
    marks: tuple[str | None, ...]


@dataclass(frozen=True)
class Window:
    """Nodes failing for a code reason in ``[start, end)`` (commit indexes; ``env``: also from ``since``)."""

    start: int
    end: int
    kind: str
    why: str
    error: str
    nodes: frozenset[str]
    workflows: frozenset[str] = frozenset()
    since: datetime | None = None


@dataclass(frozen=True)
class Flake:
    rate: float
    kind: str


@dataclass
class World:
    commits: list[Commit]
    files: dict[str, dict]
    workflow_versions: dict[str, list[tuple[int, Workflow | None]]]
    windows: list[Window] = field(default_factory=list)
    latent: list[dict] = field(default_factory=list)
    flaky: dict[str, Flake] = field(default_factory=dict)
    _nodes: dict[str, list[Node]] = field(default_factory=dict)

    def nodes_of(self, path: str) -> list[Node]:
        """The tests of a test file as collected (cached)."""
        if path not in self._nodes:
            self._nodes[path] = expand(path, self.files[path]["tests"])
        return self._nodes[path]

    def alive(self, index: int) -> list[str]:
        """The unit test files present at commit ``index``."""
        return [p for p, f in self.files.items() if f["born"] <= index and (f["gone"] is None or index < f["gone"])]

    def workflow(self, name: str, index: int) -> Workflow | None:
        """The workflow ``name`` as the tree at commit ``index`` holds it."""
        current = None
        for start, shape in self.workflow_versions[name]:
            if start <= index:
                current = shape
        return current

    def selected(self, workflow: Workflow, index: int) -> list[list[Node]]:
        """Per pytest invocation of ``workflow``, the tests it collects at commit ``index``."""
        alive = self.alive(index)
        out = []
        for mark in workflow.marks:
            chosen = []
            for path in alive:
                for node in self.nodes_of(path):
                    if (mark is None and not node.markers & EXCLUDED) or (mark is not None and mark in node.markers):
                        chosen.append(node)
            out.append(chosen)
        return out


def unique_ids(ids: list[str]) -> list[str]:
    """Repeated ids suffixed as pytest 8 does: ``x0``, ``x1`` (``1_0``, ``1_1`` after a digit)."""
    counts = Counter(ids)
    seen: Counter[str] = Counter()
    out = []
    for text in ids:
        if counts[text] > 1:
            out.append(f"{text}{'_' if text[-1:].isdigit() else ''}{seen[text]}")
            seen[text] += 1
        else:
            out.append(text)
    return out


def expand(path: str, tests: list) -> list[Node]:
    """A file's tests as collected: each function times its parametrize ids (product, first `MAX_IDS`)."""
    module = path[len("tests/"):-len(".py")].replace("/", ".")
    nodes = []
    for cls, name, markers, params in tests:
        combos = [(text,) for text in unique_ids(["-".join(ids) for ids in itertools.product(*params)])[:MAX_IDS]] \
            if params else [()]
        classname = f"{module}.{cls}" if cls else module
        for combo in combos:
            full = f"{name}[{combo[0]}]" if combo else name
            node = "::".join((path, *([cls] if cls else []), full))
            nodes.append(Node(path, node, classname, full, frozenset(markers), bool(cls)))
    return nodes


def _workflow(name: str, shape: dict | None) -> Workflow | None:
    if shape is None:
        return None
    marks: list[str | None] = []
    for line in shape["pytest"]:
        if " unit/" in line + " " or line.rstrip().endswith("unit/"):
            found = _MARK.search(line)
            marks.append(found.group(1) if found else None)
    runner = (shape["runners"] or [""])[0]
    pool = next((p for p in POOL_SIZES if p in runner.split(",")), "v100")
    return Workflow(name, frozenset(shape["events"]), tuple(shape["paths"]), tuple(shape["paths_ignore"]),
                    pool, tuple(marks))


def reached_tests(world: World, index: int, sources: list[str], tests: list[str]) -> list[str]:
    """The test files a change reaches: those it names, else the unit tests mirroring its source folders."""
    alive = set(world.alive(index))
    named = [t for t in tests if t in alive]
    if named:
        return named
    found: list[str] = []
    for source in sources:
        parts = source.split("/")[:-1]
        if parts and parts[0] in ("deepspeed", "csrc", "op_builder"):
            parts = parts[1:]
        while parts and not found:
            prefix = "tests/unit/" + "/".join(parts) + "/"
            found = sorted(p for p in alive if p.startswith(prefix))
            parts = parts[:-1]
    return found


def code_error(rng: random.Random, module: str) -> str:
    """A code failure's exception line, naming the changed module."""
    leaf = module.rsplit(".", 1)[-1]
    return rng.choice((
        f"AttributeError: module '{module}' has no attribute '{leaf}_group'",
        f"TypeError: {leaf}() got an unexpected keyword argument 'use_libuv'",
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
        f"ImportError: cannot import name 'get_{leaf}_config' from '{module}'",
        "AssertionError: assert torch.allclose(base_params[0], loaded_params[0])"))


def pick_nodes(world: World, rng: random.Random, files: list[str], most: int) -> list[Node]:
    """1 to ``most`` tests drawn from ``files`` (sorted first, so the draw depends on the seed alone)."""
    pool = [n for f in sorted(files) for n in world.nodes_of(f) if not n.markers & {"skip", "skipif"}]
    return rng.sample(pool, min(len(pool), rng.randint(1, most))) if pool else []


def _plant_windows(world: World, data: dict, rng: random.Random) -> None:
    for raw in data["windows"]:
        start, end = raw["culprit"], raw["end"]
        if end - start > MAX_WINDOW:
            world.latent.append(raw)
            continue
        files = reached_tests(world, start, raw["sources"], raw["tests"])
        nodes = pick_nodes(world, rng, files, 3)
        if not nodes:
            world.latent.append(raw)
            continue
        module = (raw["sources"] or [nodes[0].file])[0][:-3].replace("/", ".")
        why = f"{raw['kind']} window {world.commits[start].sha[:9]}..{world.commits[end].sha[:9]}"
        world.windows.append(Window(start, end, raw["kind"], why, code_error(rng, module),
                                    frozenset(n.node for n in nodes)))
    for pin in data["pins"]:
        end = pin["end"]
        since = world.commits[end].time - ENV_LEAD
        start = next(c.index for c in world.commits if c.time >= since)
        shapes = [w for w in (world.workflow(name, end) for name in pin["workflows"]) if w is not None]
        ran = sorted({n.file for w in shapes for group in world.selected(w, end) for n in group})
        files = [p for p in ran if "transformers" in world.files[p]["imports"]] or ran
        nodes = frozenset(n.node for n in pick_nodes(world, rng, files, 6))
        why = f"outside breakage pinned by {world.commits[end].sha[:9]}"
        error = ("TypeError: LlamaAttention.forward() got an unexpected keyword argument 'position_embeddings'"
                 if rng.random() < 0.5 else
                 "ImportError: cannot import name 'is_torch_greater_or_equal_than_1_13' from "
                 "'transformers.pytorch_utils'")
        world.windows.append(Window(start, end, "env", why, error, nodes, frozenset(pin["workflows"]), since))


FLAKE_KINDS_DIST = ("port", "nccl", "timeout", "crash", "tolerance")
FLAKE_KINDS_OPS = ("tolerance", "tolerance", "jit_lock", "crash")


def _plant_flakes(world: World, rng: random.Random, share: float) -> None:
    every = sorted({n.node: n for p in world.files for n in world.nodes_of(p)}.values(), key=lambda n: n.node)
    for node in every:
        if rng.random() >= share or node.markers & {"skip", "skipif"}:
            continue
        rate = round(min(0.12, 0.008 * (1.0 / max(0.05, rng.random())) ** 0.6), 4)
        kinds = FLAKE_KINDS_OPS if "/ops/" in node.file else FLAKE_KINDS_DIST if node.distributed else ("tolerance", "crash")
        world.flaky[node.node] = Flake(rate, rng.choice(kinds))


def load(seed: int, flaky_share: float) -> World:
    """The world for ``seed``: the data as read, with windows' tests and flakes drawn from the seed."""
    data = json.loads(DATA.read_text(encoding="utf-8"))
    commits = [Commit(i, c["sha"], datetime.fromtimestamp(c["time"], timezone.utc), c["author"], c["subject"],
                      c["pr"], tuple(c["touched"])) for i, c in enumerate(data["commits"])]
    versions = {name: [(v["from"], _workflow(name, v["shape"])) for v in entries]
                for name, entries in data["workflows"].items()}
    world = World(commits, data["test_files"], versions)
    rng = random.Random(f"gen12-world-{seed}")
    _plant_windows(world, data, rng)
    _plant_flakes(world, rng, flaky_share)
    return world
