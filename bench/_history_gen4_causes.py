"""The fourth history's planted causes for one seed (`bench._history_gen4`): flaky tests, main's
breakages, the runner image that breaks tests on one runner, and pull requests' own bugs; and how
one test's attempts come out in one job (`attempts`), with the truth label they earn."""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench._history_gen4_text import Failure
from bench._history_gen4_world import Breakage, Flake, Infra, TestSpec, close_text

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of "
       "79.10 GiB of which 2.31 GiB is free. Of the allocated memory 71.02 GiB is allocated by PyTorch")
TRITON_CACHE = ("FileNotFoundError: [Errno 2] No such file or directory: "
                "'.triton/cache/Q2Y3ZJ7K/_rms_norm_forward_kernel.json.tmp.pid_4113_881'")
PTX = "RuntimeError: Triton Error [CUDA]: the provided PTX was compiled with an unsupported toolchain."
CLOSE = "AssertionError: Tensor-likes are not close!"
OWN_BUGS = (
    (CLOSE, close_text(4096, 4096, 3.25, 1e-05, 7)),
    ("triton.compiler.errors.CompilationError: at 14:8:", "E       triton.compiler.errors.CompilationError: at 14:8:\n"
     "E       ValueError('Cannot make_shape_compatible: incompatible dimensions at index 0: 128 and 64')"),
    ("TypeError: LigerRMSNormFunction.forward() got an unexpected keyword argument 'offset'",
     "E       TypeError: LigerRMSNormFunction.forward() got an unexpected keyword argument 'offset'"),
)


def _pick(specs: list[TestSpec], file_part: str, name_part: str, taken: set[str]) -> list[str]:
    nodes = [s.node for s in specs if file_part in s.file and name_part in s.name and s.node not in taken]
    taken.update(nodes)
    return nodes


def flakes(rng: random.Random, specs: list[TestSpec], taken: set[str], fix_pr: int) -> list[Flake]:
    """bf16 tolerance (4-10 %), the atomics test (12 %, fixed by ``fix_pr``), CUDA OOM on the
    largest shape (2 %), a Triton cache race (1 %), a bf16 convergence test (15 %)."""
    out: list[Flake] = []
    bf16 = [n for n in _pick(specs, "test_cross_entropy", "bfloat16", set()) +
            _pick(specs, "test_kl_div", "bfloat16", set()) if n not in taken]
    for node in rng.sample(bf16, 3):
        taken.add(node)
        bad = rng.randint(1, 6)
        out.append(Flake(node, rng.choice((0.04, 0.06, 0.1)), CLOSE,
                         close_text(bad, 131072000, rng.uniform(0.016, 0.05), 0.01, rng.randrange(4096))))
    for node in _pick(specs, "test_embedding", "32000-4096", taken):
        out.append(Flake(node, 0.12, CLOSE, close_text(rng.randint(1, 3), 4096 * 32000, 0.0039, 0.0, 11),
                         fixed_by=fix_pr))
    for node in _pick(specs, "test_fused_linear_cross_entropy", "2-4-512-128256", taken):
        out.append(Flake(node, 0.02, OOM, "E       " + OOM))
    for node in rng.sample([s.node for s in specs if "rms_norm.py" in s.file and s.node not in taken], 2):
        taken.add(node)
        out.append(Flake(node, 0.01, TRITON_CACHE, "E       " + TRITON_CACHE))
    for node in _pick(specs, "test_mini_models", "bfloat16-mini_gemma2", taken):
        out.append(Flake(node, 0.15, CLOSE, close_text(2, 32000, 0.03125, 0.01, 3)))
    return out


def breakages(rng: random.Random, specs: list[TestSpec], taken: set[str], commits: int) -> list[Breakage]:
    """A GEGLU change breaking its bf16/fp16 cases, reverted 10-14 commits later; a race in the
    fused add-RMSNorm kernel failing 40 % of attempts from its commit on (fixed 18 later, if
    the history goes that far)."""
    start = max(2, commits // 4 + rng.randint(-2, 2))
    geglu = tuple(_pick(specs, "test_geglu", "bfloat16", taken) + _pick(specs, "test_geglu", "float16", taken))
    revert = Breakage("geglu", geglu, start, min(commits, start + rng.randint(10, 14)), 1.0, CLOSE,
                      close_text(18342, 262144, 0.71875, 0.01, 5))
    race_at = commits // 2 + rng.randint(0, 3)
    race_nodes = tuple(_pick(specs, "test_fused_add_rms_norm", "bfloat16", taken))
    race = Breakage("race", race_nodes, race_at, race_at + 18 if race_at + 18 < commits else None, 0.4, CLOSE,
                    close_text(97, 524288, 0.125, 0.01, 40))
    return [revert, race]


def infra(rng: random.Random, specs: list[TestSpec], taken: set[str], hours: float) -> Infra:
    """The image update on ``gpu-runner-3`` from about a third of the history, 16-24 hours."""
    nodes = tuple(_pick(specs, "test_qwen2vl_mrope", "", taken) + _pick(specs, "test_rope", "bfloat16", taken))
    start = hours * rng.uniform(0.3, 0.4)
    return Infra("gpu-runner-3", start, start + rng.uniform(16, 24), nodes)


@dataclass(frozen=True)
class Code:
    """What a job's code is: main commit ``commit``, plus a pull request's ``own`` broken nodes
    (node -> its failure) and the flake fixes it holds (``fixed``, pull request numbers);
    ``base`` the main commit it is compared with when that is older (a merge-queue batch: a
    breakage the batch itself brings in is the batch's own, ``new``)."""

    commit: int
    own: dict[str, Failure]
    fixed: frozenset[int] = frozenset()
    base: int | None = None


def attempts(rng: random.Random, node: str, code: Code, reruns: int, in_image: bool,
             flake: Flake | None, broken: list[Breakage]) -> tuple[list[Failure], bool, tuple[str, str] | None]:
    """One test's failed attempts in one job, whether its last attempt passed, and its truth
    (label, why) when an attempt failed; a failing attempt is rerun up to ``reruns`` times."""
    failures: list[Failure] = []
    for _ in range(reruns + 1):
        failure = None
        if in_image:
            failure = Failure(PTX, "E       " + PTX)
        elif node in code.own:
            failure = code.own[node]
        for b in broken:
            if failure is None and rng.random() < b.rate:
                failure = Failure(b.error, b.text)
        if failure is None and flake is not None and flake.fixed_by not in code.fixed:
            if rng.random() < flake.rate:
                failure = Failure(flake.error, flake.text)
        if failure is None:
            return failures, True, _truth(failures, in_image, node in code.own, broken, code)
        failures.append(failure)
    return failures, False, _truth(failures, in_image, node in code.own, broken, code)


def _truth(failures: list[Failure], in_image: bool, own: bool, broken: list[Breakage],
           code: Code) -> tuple[str, str] | None:
    if not failures:
        return None
    if in_image:
        return "infra", "runner image update on gpu-runner-3"
    if own:
        return "new", "the pull request's own change"
    if broken and code.base is not None and all(b.start > code.base for b in broken):
        return "new", f"the {broken[0].name} breakage, brought in by the queued batch itself"
    if broken:
        return "broken_on_main", f"main's {broken[0].name} breakage"
    return "flaky", "flaky test"
