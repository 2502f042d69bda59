"""What the ninth history's failures say, and its JUnit: pytest's xunit1 (``junit_family=xunit1``:
``file`` on each testcase, the classname the module's dotted path), one ``<testcase>`` per test
(Liger runs no rerun plugin), ``<failure>`` for a failed call and ``<error>`` for a test the
terminated Modal container never finished.

The texts follow their real sources: ``test/utils.py``'s ``assert_verbose_allclose`` ("Number of
mismatched elements: N" and "Mismatch at index ..."), ``torch.testing.assert_close`` ("Tensor-likes
are not close!" / "Mismatched elements: 3 / 4096"), torch's CUDA out-of-memory and ECC errors,
huggingface_hub's HTTP errors. The Modal outage's line (`MODAL_TERMINATED`) is this history's own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from bench._history_gen9_world import Case

MODAL_TERMINATED = ("modal.exception.RemoteError: Function call fc-{fc} was terminated by the Modal worker: "
                    "grpclib.exceptions.StreamTerminatedError: Stream reset by remote party, error_code: 2")
MODAL_TIMEOUT = "modal.exception.FunctionTimeoutError: Function liger_tests timed out after 5400.0 seconds"
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2f} GiB. GPU 0 has a total capacity "
       "of 79.19 GiB of which {free:.2f} GiB is free. Process {pid} has {used:.2f} GiB memory in use. Of the "
       "allocated memory {alloc:.2f} GiB is allocated by PyTorch")
HUB = ("huggingface_hub.errors.HfHubHTTPError: {code} for url: https://huggingface.co/api/models/{repo}/revision/main "
       "(Request ID: Root=1-{rid})")
HUB_CODES = ("429 Client Error: Too Many Requests", "502 Server Error: Bad Gateway",
             "503 Server Error: Service Unavailable", "504 Server Error: Gateway Time-out")
HUB_REPOS = ("Qwen/Qwen2-VL-7B-Instruct", "google/gemma-3-4b-it", "llava-hf/llava-1.5-7b-hf",
             "HuggingFaceTB/SmolVLM2-256M-Video-Instruct")


@dataclass(frozen=True)
class Outcome:
    """One case's result in one report: ``kind`` passed, failed or error; ``message`` its line."""

    case: Case
    kind: str
    seconds: float
    message: str = ""
    detail: str = ""


def broken(case: Case, sha: str) -> tuple[str, str]:
    """A real bug's failure: the same text every time (the wrong numbers are the code's)."""
    rng = random.Random(f"{case.node}{sha}")
    if case.convergence:
        n = rng.randint(40, 400)
        text = (f"AssertionError: Number of mismatched elements: {n}\nMismatch at index (0, {rng.randint(0, 31)}): "
                f"tensor1[(0, 7)] = {rng.uniform(2, 9):.4f}, tensor2[(0, 7)] = {rng.uniform(2, 9):.4f}")
    elif case.kernel:
        total = rng.choice((4096, 16384, 65536))
        n = rng.randint(total // 8, total // 2)
        text = (f"AssertionError: Tensor-likes are not close!\n\nMismatched elements: {n} / {total} "
                f"({100 * n / total:.1f}%)\nGreatest absolute difference: {rng.uniform(0.1, 3):.4f} at index "
                f"(0, {rng.randint(0, 255)}) (up to 1e-05 allowed)")
    else:
        name = case.function.rsplit("_", 1)[-1]
        text = f"AssertionError: assert 'Liger{name.capitalize()}ForCausalLM.forward' == '{name}_lce_forward'"
    return text.split("\n")[0], text


def flake(case: Case, rng: random.Random) -> tuple[str, str]:
    """A tolerance assertion that a few elements miss on this run's GPU scheduling."""
    if case.convergence:
        text = (f"AssertionError: Number of mismatched elements: {rng.randint(1, 3)}\nMismatch at index "
                f"(0, {rng.randint(0, 31)}): tensor1[(0, {rng.randint(0, 31)})] = {rng.uniform(2, 9):.6f}, "
                f"tensor2[(0, {rng.randint(0, 31)})] = {rng.uniform(2, 9):.6f}")
    else:
        total = rng.choice((4096, 8192, 16384))
        n = rng.randint(1, 4)
        text = (f"AssertionError: Tensor-likes are not close!\n\nMismatched elements: {n} / {total} "
                f"({100 * n / total:.1f}%)\nGreatest absolute difference: {rng.uniform(1e-4, 5e-2):.6f} at index "
                f"({rng.randint(0, 7)}, {rng.randint(0, 4095)}) (up to 1e-05 allowed)")
    return text.split("\n")[0], text


def oom(rng: random.Random) -> tuple[str, str]:
    text = OOM.format(tried=rng.uniform(0.5, 4), free=rng.uniform(0.1, 1.5), pid=rng.randint(1000, 40000),
                      used=rng.uniform(60, 78), alloc=rng.uniform(1, 12))
    return text, text


def hub(rng: random.Random) -> tuple[str, str]:
    text = HUB.format(code=rng.choice(HUB_CODES), repo=rng.choice(HUB_REPOS), rid=f"{rng.getrandbits(64):016x}")
    return text, text


def modal_terminated(rng: random.Random) -> tuple[str, str]:
    text = MODAL_TERMINATED.format(fc=f"01J{rng.getrandbits(80):020X}"[:26])
    return text, text


def junit(outcomes: list[Outcome], suite: str) -> str:
    """The report pytest (xunit1) would write for ``outcomes``, in order."""
    failures = sum(1 for o in outcomes if o.kind == "failed")
    errors = sum(1 for o in outcomes if o.kind == "error")
    total = sum(o.seconds for o in outcomes)
    lines = ['<?xml version="1.0" encoding="utf-8"?>', "<testsuites>",
             f'<testsuite name={quoteattr(suite)} errors="{errors}" failures="{failures}" skipped="0" '
             f'tests="{len(outcomes)}" time="{total:.3f}">']
    for o in outcomes:
        head = (f'<testcase classname={quoteattr(o.case.classname)} name={quoteattr(o.case.name)} '
                f'file={quoteattr(o.case.file)} time="{o.seconds:.3f}"')
        if o.kind == "passed":
            lines.append(head + " />")
        else:
            tag = "failure" if o.kind == "failed" else "error"
            lines.append(f"{head}><{tag} message={quoteattr(o.message)}>{escape(o.detail)}</{tag}></testcase>")
    lines += ["</testsuite>", "</testsuites>"]
    return "\n".join(lines) + "\n"
