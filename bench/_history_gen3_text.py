"""The third labelled history's text: failure messages as the real tools print them, and JUnit
as ``ci run`` writes it (pytest's xunit1 with pytest-rerunfailures' empty rerun elements, each
failed attempt carrying the ``ci.attempt.*`` properties of `ci.pytest_attempts`).

The messages are those of the libraries in a vLLM CI log: huggingface_hub's HTTP errors and a
reset connection, pytest-timeout, torch's CUDA OOM, pytest-xdist's crashed worker, torch
distributed's EADDRINUSE, `torch.testing.assert_close`, and a GPU stuck after an ECC error.
Numbers in them vary from run to run; the kind of each message does not.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from bench._history_gen3_world import DOWNLOAD, NUMERIC, OOM, PORT, TIMEOUT, XDIST, Test
from ci.results.junit import ATTEMPT_ERROR, ATTEMPT_OUTCOME, ATTEMPT_TEXT

FAILED, ERROR = "failed", "error"


@dataclass(frozen=True)
class Failure:
    """One failed attempt: ``outcome`` failed (the call) or error (setup), the exception line
    (type: first message line), pytest's longrepr text, and the whole exception (``message``, what
    pytest writes as the final ``<failure>``'s message; ``""``: the text is the message)."""

    outcome: str
    error: str
    text: str
    message: str = ""
    crash: bool = False  # an xdist worker died under it: written as xdist and rerunfailures do


def _longrepr(test: Test, error: str, frames: str = "") -> str:
    body = "\n".join(f"E   {line}" for line in error.splitlines())
    return f"{frames}\n{body}\n\n{test.file}:{test.line}: {error.split(':', 1)[0]}"


def failure(test: Test, error: str, *, setup: bool = False, frames: str = "") -> Failure:
    """A failure whose exception reads ``error`` (its first line is the error line)."""
    return Failure(ERROR if setup else FAILED, error.splitlines()[0], _longrepr(test, error, frames), error)


def flake(kind: str, test: Test, rng: random.Random, worker: int = 0) -> Failure:
    """One flaky attempt of ``test`` of ``kind`` (`bench._history_gen3_world.FLAKE_KINDS`)."""
    if kind == DOWNLOAD:
        repo = test.name.partition("[")[2].rstrip("]") or "facebook/opt-125m"
        repo = repo if "/" in repo else "meta-llama/Llama-3.2-1B-Instruct"
        url = f"https://huggingface.co/api/models/{repo}/revision/main"
        pick = rng.random()
        if pick < 0.45:
            error = (f"huggingface_hub.errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: {url}\n"
                     f"Request ID: Root=1-{rng.getrandbits(32):08x}-{rng.getrandbits(48):012x}")
        elif pick < 0.75:
            error = f"huggingface_hub.errors.HfHubHTTPError: 504 Server Error: Gateway Time-out for url: {url}"
        else:
            error = ("requests.exceptions.ConnectionError: ('Connection aborted.', "
                     "ConnectionResetError(104, 'Connection reset by peer'))")
        frames = ("    @pytest.fixture(scope=\"module\")\n    def server():\n>       with RemoteOpenAIServer(MODEL_NAME, args)"
                  " as remote_server:\n\nvllm/transformers_utils/config.py:612: in get_config\n"
                  "    config_dict, _ = PretrainedConfig.get_config_dict(model)")
        return failure(test, error, setup=True, frames=frames)
    if kind == TIMEOUT:
        limit = rng.choice((300.0, 600.0, 900.0))
        return failure(test, f"Failed: Timeout (>{limit}s) from pytest-timeout.",
                       frames="+++++++++++++++++++ Timeout +++++++++++++++++++\n~~~~ Stack of MainThread ~~~~\n"
                              "  File \"vllm/v1/engine/core_client.py\", line 682, in get_output\n"
                              "    outputs = self.outputs_queue.get()")
    if kind == OOM:
        want, free, used = rng.choice((1.0, 2.0, 3.5)), rng.uniform(0.1, 1.4), rng.uniform(6, 14)
        return failure(test, f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {want:.2f} GiB. GPU 0 "
                       f"has a total capacity of 22.05 GiB of which {free:.2f} GiB is free. Process "
                       f"{rng.randint(2000, 90000)} has {used:.2f} GiB memory in use. Including non-PyTorch memory, "
                       f"this process has {22.05 - free - used:.2f} GiB memory in use.",
                       frames="vllm/worker/gpu_model_runner.py:2210: in profile_run\n    hidden_states = self._dummy_run(")
    if kind == XDIST:  # the log says "[gwN] node down: Not properly terminated"; the JUnit only this
        message = f"worker 'gw{worker}' crashed while running '{test.node}'"
        return Failure(ERROR, message, message, message, crash=True)
    if kind == PORT:
        port = rng.choice((29500, 29501, rng.randint(40000, 60000)))
        if rng.random() < 0.5:
            error = (f"torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                     f"network address. port: {port}, useIpv6: false, code: -98, name: EADDRINUSE, message: "
                     f"address already in use")
        else:
            error = "OSError: [Errno 98] Address already in use"
        return failure(test, error, frames="vllm/distributed/parallel_state.py:1041: in init_distributed_environment\n"
                                           "    torch.distributed.init_process_group(")
    if kind == NUMERIC:
        bad, total = rng.randint(1, 12), rng.choice((4096, 16384, 65536))
        diff, allowed = rng.uniform(0.011, 0.09), 0.01
        return failure(test, f"AssertionError: Tensor-likes are not close!\n\nMismatched elements: {bad} / {total} "
                       f"({100 * bad / total:.1f}%)\nGreatest absolute difference: {diff:.4f} at index "
                       f"({rng.randint(0, 63)}, {rng.randint(0, 127)}) (up to {allowed} allowed)",
                       frames=">       torch.testing.assert_close(out, ref_out, atol=1e-2, rtol=1e-2)")
    raise ValueError(f"unknown flake kind {kind!r}")


def stuck_gpu(test: Test, first: bool) -> Failure:
    """A test on a GPU stuck after an uncorrectable ECC error (Xid 48): the first test to meet it
    reads the ECC error, every later one finds the device unusable."""
    if first:
        return failure(test, "RuntimeError: CUDA error: uncorrectable ECC error encountered\nCUDA kernel errors "
                             "might be asynchronously reported at some other API call, so the stacktrace below "
                             "might be incorrect.")
    return failure(test, "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n"
                         "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", setup=True)


def _attr(value: str) -> str:
    return quoteattr(value, {"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})


def testcase(test: Test, attempts: list[Failure | None], seconds: list[float], attempt_text: bool) -> str:
    """``test``'s elements for one run: a passed attempt bare; a retried failed attempt as
    pytest-rerunfailures leaves it (an empty element, with the ``ci.attempt.*`` properties when
    ``attempt_text``); the last failed attempt with ``<failure>`` (or ``<error>`` at setup, as
    pytest words it: ``failed on setup with "..."``) and the properties. A crashed xdist worker's
    attempt is what pytest-xdist 3.8 + pytest-rerunfailures 16.7 write (checked with a real
    ``-n 2 --reruns 1`` run): retried, a bare ``<testcase time="0.000"/>`` with no name at all;
    last, an ``<error>`` "failed on setup with" the crash line, with no ``line`` and no properties."""
    head = (f'<testcase classname={_attr(test.classname)} name={_attr(test.name)} file={_attr(test.file)} '
            f'line="{test.line}" time="{{:.3f}}"')
    out = []
    for index, (attempt, secs) in enumerate(zip(attempts, seconds)):
        start = head.format(secs)
        if attempt is not None and attempt.crash:
            out.append('<testcase time="0.000" />' if index < len(attempts) - 1 else
                       f'<testcase classname={_attr(test.classname)} name={_attr(test.name)} file={_attr(test.file)} '
                       f'time="0.000"><error message={_attr(f"failed on setup with {chr(34)}{attempt.message}{chr(34)}")}>'
                       f'{escape(attempt.text)}</error></testcase>')
            continue
        if attempt is None:
            out.append(start + " />")
            continue
        props = ""
        if attempt_text:
            props = ("<properties>" + "".join(f"<property name={_attr(k)} value={_attr(v)} />" for k, v in
                                              ((ATTEMPT_OUTCOME, attempt.outcome), (ATTEMPT_ERROR, attempt.error),
                                               (ATTEMPT_TEXT, attempt.text))) + "</properties>")
        if index < len(attempts) - 1:
            out.append(f"{start}>{props}</testcase>" if props else start + " />")
            continue
        whole = attempt.message or attempt.text
        tag, message = ("error", f'failed on setup with "{whole}"') if attempt.outcome == ERROR else ("failure", whole)
        out.append(f"{start}>{props}<{tag} message={_attr(message)}>{escape(attempt.text)}</{tag}></testcase>")
    return "".join(out)


def junit_xml(cases: list[str], failures: int, errors: int, seconds: float, host: str, stamp: str) -> str:
    """One shard's report around its testcase elements (``cases``), as pytest 8 writes it."""
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" '
            f'errors="{errors}" failures="{failures}" skipped="0" tests="{len(cases)}" time="{seconds:.3f}" '
            f'timestamp="{stamp}" hostname={_attr(host)}>' + "".join(cases) + "</testsuite></testsuites>")
