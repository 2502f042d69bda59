"""The third labelled history's story (`bench._history_gen3`): what breaks main and when, which
pull requests break their own tests, when the stuck GPU and the Hugging Face outages happen.

Main's breakages, placed by the share of the history they land at (so a quick history has them
too), each a window of main commits ``[start, end)`` in which its tests fail on every attempt:

- only the fp8 cases of a parametrized kernel test (three of its nine), fixed seven commits later;
- one test, fixed by a forward fix three commits later (not a revert);
- a test that also flakes on downloads, now failing with an assertion instead;
- a dependency bump (transformers) breaking 15 tests across three tiers at once: most fixed four
  commits later, two (an ImportError, which the plugin never reruns) five commits after that;
- a test broken by a pull request that merged although its own runs failed it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench._history_gen3_world import ALWAYS, TEST, TIERS

AUTHORS = ("wgu", "mhassan", "kzhou", "tlin", "rsato", "apetrova", "dnoor", "jkim", "lfernandes", "ozeng",
           "bcho", "ymori")
# What a pull request's own bug looks like when it reaches a test.
OWN_BUGS = (
    "AssertionError: assert ['Hello, my name is John'] == ['Hello, my name is']",
    "TypeError: forward() missing 1 required positional argument: 'positions'",
    "RuntimeError: shape '[4, 32, 128]' is invalid for input of size 65536",
    "AttributeError: 'SchedulerOutput' object has no attribute 'num_scheduled_tokens'",
    "KeyError: 'model.layers.0.mlp.experts.w13_weight'",
    "ValueError: Unsupported head size: 80. Supported head sizes are: [64, 128, 256]",
)
_LLAMA = "tests/models/language/generation/test_common.py::test_models"
_MERGED_NODE = "tests/models/quantization/test_fp8.py::test_models[kv-fp8]"


@dataclass(frozen=True)
class Breakage:
    """Tests broken on main from commit ``start`` until the fix at commit ``end`` (exclusive);
    ``errors`` aligned with ``nodes``; ``once``: an ImportError, which the plugin does not rerun."""

    name: str
    nodes: tuple[str, ...]
    errors: tuple[str, ...]
    start: int
    end: int
    once: bool = False

    def error(self, node: str) -> str:
        """What ``node`` fails with while broken."""
        return self.errors[self.nodes.index(node)]


@dataclass
class PullRequest:
    """A pull request: its pushes (time, sha, base commit index), the tiers it touches (and so
    runs), and the tests it breaks itself from push ``breaks_from`` until push ``breaks_until``."""

    number: int
    author: str
    tiers: tuple[str, ...]
    pushes: list[tuple[float, str, int]] = field(default_factory=list)
    breaks: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    breaks_from: int = 0
    breaks_until: int = 1 << 30
    merged_at: int | None = None  # the main commit it became, if the story merges it


def sha(rng: random.Random) -> str:
    """A random 40-digit commit id."""
    return f"{rng.getrandbits(160):040x}"


def breakages(commits: int) -> list[Breakage]:
    """Main's planted breakages for a history of ``commits`` commits (see the module docstring)."""
    at = [round(commits * share) for share in (0.15, 0.3, 0.42, 0.55, 0.75)]
    fp8 = tuple(f"tests/kernels/attention/test_flash_attn.py::test_varlen_with_paged_kv[fp8-{b}]" for b in (16, 32, 64))
    dep_models = ("meta-llama/Llama-3.2-1B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "google/gemma-2-2b-it",
                  "microsoft/Phi-3.5-mini-instruct", "ibm-granite/granite-3.0-2b-instruct", "allenai/OLMo-1B-hf")
    configs = ("LlamaConfig", "Qwen2Config", "Gemma2Config", "Phi3Config", "GraniteConfig", "OlmoConfig")
    dep_nodes = tuple(f"{_LLAMA}[{m}]" for m in dep_models) + tuple(
        f"tests/models/language/pooling/test_embedding.py::test_models[{m}]"
        for m in ("BAAI/bge-base-en-v1.5", "intfloat/e5-small", "Alibaba-NLP/gte-base-en-v1.5")) + (
        "tests/entrypoints/llm/test_generate.py::test_chat_template",
        "tests/entrypoints/openai/test_completion.py::test_echo_logprobs",
        "tests/basic_correctness/test_basic_correctness.py::test_models[llama-XFORMERS]",
        "tests/basic_correctness/test_preemption.py::test_chunked_prefill_recompute")
    dep_errors = tuple(f"AttributeError: '{c}' object has no attribute 'rope_theta'" for c in configs) + (
        "TypeError: BertModel.forward() got an unexpected keyword argument 'output_attentions'",) * 3 + (
        "TypeError: apply_chat_template() got an unexpected keyword argument 'return_assistant_tokens_mask'",
        "AssertionError: assert ' Paris' == 'Paris'",
        "AttributeError: 'LlamaConfig' object has no attribute 'rope_theta'",
        "AttributeError: 'LlamaConfig' object has no attribute 'rope_theta'")
    late = ("tests/models/language/generation/test_mistral.py::test_mistral_format",
            "tests/models/language/generation/test_mistral.py::test_mistral_function_calling")
    return [
        Breakage("fp8 cases of a parametrized test", fp8, tuple(
            f"NotImplementedError: FlashAttention does not support fp8 KV cache with block_size={b}" for b in (16, 32, 64)),
            at[0], at[0] + 7),
        Breakage("fixed forward three commits later", ("tests/entrypoints/openai/test_chat.py::test_tool_choice",),
                 ("openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': \"'auto' tool choice "
                  "requires --enable-auto-tool-choice and --tool-call-parser to be set\", 'code': 400}",),
                 at[1], at[1] + 3),
        Breakage("a download-flaky test, another message", ("tests/entrypoints/openai/test_chat.py::test_chat_streaming",),
                 ("AssertionError: assert 'length' == 'stop'",), at[2], at[2] + 5),
        Breakage("transformers bump", dep_nodes, dep_errors, at[3], at[3] + 4),
        Breakage("transformers bump, fixed late", late, (
            "ImportError: cannot import name 'MistralCommonTokenizer' from 'transformers.tokenization_mistral_common'",) * 2,
            at[3], at[3] + 9, once=True),
        Breakage("merged although its own runs failed", (_MERGED_NODE,),
                 ("ValueError: kv_cache_dtype 'fp8_e5m2' is not supported with the FLASHINFER backend",),
                 at[4], at[4] + 4),
    ]


def main_tiers(index: int, rng: random.Random, broken: list[Breakage]) -> tuple[str, ...]:
    """The tiers a main commit's push runs: the areas it touches (all of them for the dependency
    bump, the broken tests' for a breakage or its fix) and the fast check."""
    names = [t.name for t in TIERS if t.name != ALWAYS]
    touched = set(rng.sample(names, rng.choice((1, 1, 2))))
    for b in broken:
        if index in (b.start, b.end):
            tiers = {TEST[n].tier for n in b.nodes}
            touched |= set(names) if len(tiers) > 2 else tiers
    return tuple(t for t in [*names, ALWAYS] if t in touched or t == ALWAYS)


def pull_requests(rng: random.Random, count: int, times: list[float], broken: list[Breakage],
                  self_break: float) -> list[PullRequest]:
    """``count`` pull requests on bases 0-10 commits behind main, 1-3 pushes each; ``self_break``
    of them break a test of their own; one more is the one the last breakage merges."""
    end = times[-1]
    planted = {n for b in broken for n in b.nodes}
    names = [t.name for t in TIERS if t.name != ALWAYS]
    prs: list[PullRequest] = []
    for p in range(count):
        pr = PullRequest(20000 + 3 * p + rng.randint(0, 2), rng.choice(AUTHORS), ())
        pr.tiers = (*rng.sample(names, rng.choice((1, 1, 2))), ALWAYS)
        when = rng.uniform(0, end - 3)
        base = _head(times, when) - rng.choices(range(11), weights=(8, 8, 6, 5, 4, 3, 2, 2, 1, 1, 1))[0]
        for push in range(rng.choice((1, 1, 2, 2, 3))):
            if push and rng.random() < 0.25:  # rebased onto main's head on this push
                base = _head(times, when) - rng.randint(0, 2)
            pr.pushes.append((when, sha(rng), max(0, base)))
            when += rng.uniform(1.0, 5.0)
        if rng.random() < self_break:
            pool = [t.node for t in TIERS if t.name in pr.tiers for t in t.tests if t.node not in planted]
            pr.breaks = tuple(rng.sample(pool, rng.choice((1, 1, 2))))
            pr.errors = tuple(rng.choice(OWN_BUGS) for _ in pr.breaks)
            pr.breaks_from = rng.randrange(len(pr.pushes))
            if pr.breaks_from < len(pr.pushes) - 1 and rng.random() < 0.5:
                pr.breaks_until = len(pr.pushes) - 1  # fixed on its last push
        prs.append(pr)
    merged = broken[-1]
    opened = times[merged.start] - 7.0
    base = max(0, _head(times, opened) - 2)
    pr = PullRequest(20000 + 3 * count, rng.choice(AUTHORS), (TEST[_MERGED_NODE].tier, ALWAYS),
                     [(opened, sha(rng), base), (opened + 3.0, sha(rng), base)], merged.nodes, merged.errors,
                     merged_at=merged.start)
    prs.append(pr)
    return prs


def _head(times: list[float], when: float) -> int:
    """Main's newest commit at time ``when``."""
    return max(0, sum(1 for t in times if t <= when) - 1)


def windows(rng: random.Random, hours: float, shares: tuple[float, ...], length: tuple[float, float]) -> \
        tuple[tuple[float, float], ...]:
    """Stretches of time starting near each share of ``hours``, each ``length`` hours long."""
    out = []
    for share in shares:
        start = hours * share + rng.uniform(-1.0, 1.0)
        out.append((start, start + rng.uniform(*length)))
    return tuple(out)
