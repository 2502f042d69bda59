"""What the second history generator's failures say, and its JUnit, written the way pytest 9 with
pytest-rerunfailures and ``-o junit_family=xunit1`` (as `ci run` asks) writes them.

Shape taken from a real run of ``pytest --reruns 1 --junitxml=... -o junit_family=xunit1``: one
``<testcase>`` per attempt; every rerun attempt is an *empty* element (its failure text is not
written); the final attempt carries ``<failure message=...>`` (a failure in the test's body) or
``<error message='failed on setup with "..."'>`` (a fixture or ``setUpClass``, where SGLang's
tests start their server). ``tests``/``failures``/``errors`` count tests, not attempts.

The messages are those real GPU jobs print (SGLang's CI logs, torch, NCCL, the kernel); the
numbers in them vary per failure, as they do there. Nothing here reads `ci.history`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from ci.results.junit import ATTEMPT_ERROR, ATTEMPT_OUTCOME, ATTEMPT_TEXT


@dataclass(frozen=True)
class Failure:
    """One failed attempt: ``element`` is ``failure`` or ``error`` (setup), ``message`` the
    element's attribute, ``detail`` its text (the traceback pytest prints)."""

    element: str
    message: str
    detail: str


def _body(statement: str, exc_line: str, where: str) -> str:
    return f"    def test(self):\n>       {statement}\nE       {exc_line}\n\n{where}"


def _setup(exc_line: str, where: str) -> Failure:
    detail = f"    @classmethod\n    def setUpClass(cls):\n>       cls.process = popen_launch_server(cls.model, cls.base_url)\n" \
             f"E       {exc_line}\n\n{where}"
    return Failure("error", f'failed on setup with "{exc_line}"', detail)


def _call(exc_line: str, statement: str, where: str) -> Failure:
    return Failure("failure", exc_line, _body(statement, exc_line, where))


# --- flakes: the test's own nondeterminism, on any machine ---------------------------------------

def flake(kind: str, rng: random.Random, where: str) -> Failure:
    """A flaky test's failure of ``kind``: ``startup`` (the server did not come up in time),
    ``port`` (a port still held by a previous server), ``nccl`` (a collective's watchdog timeout
    under load), ``numeric`` (a tolerance check; the numbers differ every time) or ``close``
    (torch.testing's tensor comparison, whose first line is always the same)."""
    if kind == "startup":
        return _setup("TimeoutError: Server failed to start in 600 s", where)
    if kind == "port":
        return _setup("OSError: [Errno 98] Address already in use", where)
    if kind == "nccl":
        seq, ms = rng.randint(200, 9000), 600000 + rng.randint(1, 900)
        line = (f"torch.distributed.DistBackendError: [Rank {rng.randint(0, 3)}] Watchdog caught collective operation "
                f"timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={rng.randint(1, 64) * 4096}, "
                f"NumelOut=4096, Timeout(ms)=600000) ran for {ms} milliseconds before timing out.")
        return _call(line, "self.run_tp_decode(tp_size=4)", "test/srt/test_dist.py:88: DistBackendError")
    if kind == "numeric":
        diff = round(rng.uniform(0.0201, 0.06), 4)
        return _call(f"AssertionError: max abs diff {diff} > 0.02", "assert diff <= 0.02, f'max abs diff {diff} > 0.02'",
                     "test/srt/test_kernels.py:51: AssertionError")
    if kind == "close":
        n, got = rng.randint(1, 40), round(rng.uniform(0.011, 0.05), 5)
        line = "AssertionError: Tensor-likes are not close!"
        detail = _body("torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)", line, "") + (
            f"\nE       \nE       Mismatched elements: {n} / 65536 ({n / 655.36:.1f}%)\nE       Greatest absolute "
            f"difference: {got} at index ({rng.randint(0, 127)}, {rng.randint(0, 511)}) (up to 0.01 allowed)\n\n"
            "test/srt/test_kernels.py:77: AssertionError")
        return Failure("failure", line, detail)
    raise ValueError(f"no flake kind {kind!r}")


FLAKE_KINDS = ("startup", "port", "nccl", "numeric", "close")

# --- infra: the machine, whatever the test -------------------------------------------------------

INFRA_KINDS = ("xid", "nccl_system", "oom_kill", "disk")


def infra(kind: str, rng: random.Random, where: str) -> Failure:
    """A machine fault: a GPU that fell off the bus (Xid 79), NCCL's ``unhandled system error`` (a
    broken NIC or shared memory), the OOM killer (exit 137) or a full disk."""
    if kind == "xid":
        line = "RuntimeError: CUDA error: unspecified launch failure"
        detail = _body("torch.cuda.synchronize()", line, where) + (
            "\nE       CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
            f"below might be incorrect.\n[dmesg] NVRM: Xid (PCI:0000:{rng.randint(16, 250):02x}:00): 79, "
            f"pid={rng.randint(1000, 99999)}, GPU has fallen off the bus.")
        return Failure("failure", line, detail)
    if kind == "nccl_system":
        return _call("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                     "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), "
                     "NCCL version 2.21.5", "dist.init_process_group('nccl')", where)
    if kind == "oom_kill":
        return _setup("Exception: Server process exited with code 137. Check server logs for errors.", where)
    if kind == "disk":
        blob = "%040x" % rng.getrandbits(160)
        return _setup("OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/"
                      f"models--meta-llama--Llama-3.1-8B-Instruct/blobs/{blob}.incomplete'", where)
    raise ValueError(f"no infra kind {kind!r}")


# --- breakages: a commit's change, every attempt the same ----------------------------------------

BREAK_LINES = (
    "KeyError: 'rope_scaling'",
    "AttributeError: 'ModelConfig' object has no attribute 'hf_text_config'",
    "ImportError: cannot import name 'fused_moe_triton' from 'sglang.srt.layers.moe'",
    "RuntimeError: The size of tensor a (4096) must match the size of tensor b (2048) at non-singleton dimension 1",
    "AssertionError: output mismatch at token 17: ' Paris' != ' London'",
    "TypeError: forward() got an unexpected keyword argument 'forward_batch'",
)


def breakage(line: str, where: str) -> Failure:
    """The failure a real code change causes: the same line on every attempt and every machine."""
    return _call(line, "self.run_decode()", where)


# --- JUnit ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JUnitCase:
    """One test of a report: its attempts in order (None: passed). Every attempt but the last
    is a rerun pytest-rerunfailures made because it failed."""

    file: str
    classname: str
    name: str
    line: int
    attempts: tuple[Failure | None, ...]
    seconds: float


def _attempt_properties(failure: Failure) -> str:
    """The registry plugin's properties of one failed attempt (`ci.pytest_attempts`)."""
    outcome = "error" if failure.element == "error" else "failed"
    # the plugin's error is the exception line, which pytest's text shows after "E"
    error = next((line[1:].strip() for line in failure.detail.splitlines() if line.startswith("E ")), failure.message)
    values = ((ATTEMPT_OUTCOME, outcome), (ATTEMPT_ERROR, error), (ATTEMPT_TEXT, failure.detail))
    return "<properties>" + "".join(f"<property name={quoteattr(n)} value={quoteattr(v)} />" for n, v in values) \
        + "</properties>"


def junit_xml(cases: list[JUnitCase], hostname: str, timestamp: str, attempt_text: bool = False) -> str:
    """The report pytest writes for ``cases``, byte for byte in its layout (one line, xunit1);
    ``attempt_text``: with the registry plugin's properties on every failed attempt (`Scale`)."""
    final = [c.attempts[-1] for c in cases]
    errors = sum(1 for f in final if f is not None and f.element == "error")
    failures = sum(1 for f in final if f is not None and f.element == "failure")
    total = sum(c.seconds * len(c.attempts) for c in cases)
    out = ['<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" '
           f'errors="{errors}" failures="{failures}" skipped="0" tests="{len(cases)}" time="{total:.3f}" '
           f'timestamp="{timestamp}" hostname={quoteattr(hostname)}>']
    for case in cases:
        head = (f'<testcase classname="{case.classname}" name="{case.name}" file="{case.file}" '
                f'line="{case.line}" time="{case.seconds:.3f}"')
        for attempt in case.attempts[:-1]:
            out.append(head + (f">{_attempt_properties(attempt)}</testcase>" if attempt_text and attempt else " />"))
        last = case.attempts[-1]
        if last is None:
            out.append(head + " />")
        else:
            props = _attempt_properties(last) if attempt_text else ""
            out.append(f"{head}>{props}<{last.element} message={quoteattr(last.message)}>{escape(last.detail)}"
                       f"</{last.element}></testcase>")
    out.append("</testsuite></testsuites>")
    return "".join(out)
