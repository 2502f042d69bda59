"""gen8's failure texts and its JUnit, as pytest (xunit1, with ``file``) and pytest-rerunfailures
write it: one ``<testcase>`` per attempt, a rerun attempt empty (with the ``ci.pytest_attempts``
properties when ``attempt_text``), the last one carrying its ``<failure>``.

Flake kinds (`FLAKE_KINDS`) are the real GPU test failures vLLM's CI shows, with their real
exception lines: a huggingface_hub download answered 5xx or 429, the OpenAI server of
``tests/utils.py`` not up in time, NCCL in a multi-GPU step, CUDA out of memory, the server's
port still held. `INFRA_KINDS` are a machine's: a bad agent's GPU, a pool whose model cache
mount went away.
"""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from ci.results.junit import ATTEMPT_ERROR, ATTEMPT_OUTCOME, ATTEMPT_TEXT

FLAKE_KINDS = {
    "hub-5xx": "huggingface_hub.errors.HfHubHTTPError: 503 Server Error: Service Unavailable for url: "
               "https://huggingface.co/api/models/{model}/revision/main",
    "hub-429": "huggingface_hub.errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: "
               "https://huggingface.co/api/models/{model}/tree/main",
    "startup": "RuntimeError: Server failed to start in time.",
    "nccl": "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for details), "
            "NCCL version 2.27.3",
    "oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
           "capacity of 22.05 GiB of which 1.12 GiB is free.",
    "port": "OSError: [Errno 98] Address already in use",
}
INFRA_KINDS = {
    "bad-agent": "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "pool-outage": "OSError: [Errno 116] Stale file handle: '/root/.cache/huggingface/hub'",
}
MODELS = ("facebook/opt-125m", "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-1B-Instruct", "google/gemma-3-4b-it")


@dataclass(frozen=True)
class Attempt:
    """One attempt of one test: ``error`` its exception line, "" when it passed."""

    error: str = ""
    seconds: float = 1.0

    @property
    def failed(self) -> bool:
        return bool(self.error)


def flake_text(kind: str, salt: int) -> str:
    """Kind ``kind``'s exception line (a hub error names one of `MODELS`)."""
    return FLAKE_KINDS[kind].format(model=MODELS[salt % len(MODELS)])


def traceback_text(node: str, error: str) -> str:
    file, _, name = node.partition("::")
    return (f"{file}:42: in {name}\n    outputs = llm.generate(prompts, sampling_params)\n"
            f"vllm/entrypoints/llm.py:412: in generate\n    return self._run_engine(use_tqdm=use_tqdm)\n"
            f"E   {error}")


def _testcase(node: str, attempt: Attempt, last: bool, attempt_text: bool) -> str:
    file, _, name = node.partition("::")
    head = (f'<testcase classname={quoteattr(file[:-3].replace("/", "."))} name={quoteattr(name)} '
            f'file={quoteattr(file)} line="41" time="{attempt.seconds:.3f}"')
    if not attempt.failed:
        return head + " />"
    text = traceback_text(node, attempt.error)
    if last:
        return f"{head}><failure message={quoteattr(attempt.error)}>{escape(text)}</failure></testcase>"
    if not attempt_text:
        return head + " />"  # pytest-rerunfailures' rerun attempt, as stock pytest writes it
    props = "".join(f"<property name={quoteattr(k)} value={quoteattr(v)} />" for k, v in
                    ((ATTEMPT_OUTCOME, "failed"), (ATTEMPT_ERROR, attempt.error), (ATTEMPT_TEXT, text)))
    return f"{head}><properties>{props}</properties></testcase>"


def junit(step: str, cases: list[tuple[str, list[Attempt]]], attempt_text: bool) -> str:
    """One job's JUnit: ``cases`` as (node, attempts), every attempt but the last a rerun."""
    body = [_testcase(node, a, i == len(attempts) - 1, attempt_text)
            for node, attempts in cases for i, a in enumerate(attempts)]
    failures = sum(1 for _, attempts in cases if attempts[-1].failed)
    seconds = sum(a.seconds for _, attempts in cases for a in attempts)
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" '
            f'failures="{failures}" skipped="0" tests="{len(body)}" time="{seconds:.3f}" '
            f'hostname={quoteattr(step)}>' + "".join(body) + "</testsuite></testsuites>\n")
