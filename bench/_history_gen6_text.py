"""The sixth history's JUnit, as pytest (xunit1) + pytest-rerunfailures + `ci.pytest_attempts` write it,
and each cause's failure text as the real tools print it (HF hub, CUDA, pytest-timeout, a segfault).

Contract: `report_xml` is one job's ``<testsuites>``: a retried attempt is an empty ``<testcase>``
(with the ``ci.attempt.*`` properties when ``attempt_text``), the last attempt a ``<failure>``,
``<error>``, ``<skipped>`` or nothing; a job that crashed lists the tests that ran, then the
crashed one as an ``<error>`` the job's wrapper adds from the exit code.
"""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from bench._history_gen6_world import Test
from ci.results.junit import ATTEMPT_ERROR, ATTEMPT_OUTCOME, ATTEMPT_TEXT


@dataclass(frozen=True)
class Fail:
    """One failed attempt: ``element`` failure or error, the message line and pytest's text."""

    element: str
    message: str
    detail: str


@dataclass(frozen=True)
class Case:
    """One test in a job: its attempts in order (None passed, a `Fail` failed) or ``skipped``."""

    test: Test
    attempts: tuple[Fail | None, ...]
    seconds: float
    skipped: str = ""


def _frame(path: str, line: int, code: str) -> str:
    return f'  File "{path}", line {line}, in <module>\n    {code}\n'


def text_for(cause: str, test: Test, detail: str = "") -> Fail:
    """The failure a ``cause`` makes of ``test`` (``detail``: the breakage's own error line)."""
    head = f"{test.file}:{40 + len(test.name)}: in {test.name.split('[')[0]}\n"
    if cause == "hf_outage":
        msg = ("OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it "
               "in the cached files and it looks like meta-llama/Llama-3.1-8B-Instruct is not the path to a "
               "directory containing a file named config.json.")
        body = (head + "vllm/transformers_utils/config.py:212: in get_config\n"
                "huggingface_hub/file_download.py:1457: in _get_metadata_or_catch_error\n"
                "E   requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: "
                "https://huggingface.co/api/models/meta-llama/Llama-3.1-8B-Instruct/revision/main\n"
                f"E   {msg}")
        return Fail("failure", msg, body)
    if cause == "disk_full":
        msg = "OSError: [Errno 28] No space left on device: '/root/.cache/vllm/torch_compile_cache/3f2a/rank_0'"
        return Fail("failure", msg, head + "torch/_inductor/codecache.py:611: in write_atomic\nE   " + msg)
    if cause == "image_bump":
        msg = "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasLtMatmul( ... )`"
        return Fail("failure", msg, head + "vllm/_custom_ops.py:388: in cutlass_scaled_mm\nE   " + msg +
                    "\nE   CUDA kernel errors might be asynchronously reported at some other API call")
    if cause == "order":
        msg = "AssertionError: assert 9 == 1"
        return Fail("failure", msg, head + "E   AssertionError: expected one compiled graph, found 9 "
                    "(torch._dynamo.config.cache_size_limit was left at 64)\nE   assert 9 == 1")
    if cause == "timeout":
        msg = "Failed: Timeout (>300.0s) from pytest-timeout."
        body = ("+++++++++++++++++++++++++++++++++++ Timeout +++++++++++++++++++++++++++++++++++\n"
                "~~~~~~~~~~~~~~~~~~~~~~ Stack of Thread-7 (140213) ~~~~~~~~~~~~~~~~~~~~~~\n"
                + _frame("/usr/lib/python3.12/threading.py", 1012, "self._target(*self._args)")
                + _frame("vllm/distributed/device_communicators/shm_broadcast.py", 471, "self.wait_for_ready()")
                + "+++++++++++++++++++++++++++++++++++ Timeout +++++++++++++++++++++++++++++++++++\n"
                + head + "E   " + msg)
        return Fail("failure", msg, body)
    if cause == "flaky":
        msg = "TimeoutError: engine core did not report ready within 120 s"
        return Fail("failure", msg, head + "vllm/v1/engine/core_client.py:530: in _wait_for_engine_startup\nE   "
                    + msg)
    if cause == "pr_segv":
        msg = "Fatal Python error: Segmentation fault (exit code 139; the job wrote no JUnit after this test)"
        return Fail("error", msg, "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f3a (most "
                    "recent call first):\n" + _frame("vllm/_custom_ops.py", 912, "torch.ops._C.paged_attention_v2(")
                    + f'  File "{test.file}", line 88 in {test.name.split("[")[0]}')
    msg = detail or "AssertionError: outputs differ"
    return Fail("failure", msg, head + "E   " + msg)


def _props(fail: Fail) -> str:
    outcome = "error" if fail.element == "error" else "failed"
    rows = [(ATTEMPT_OUTCOME, outcome), (ATTEMPT_ERROR, fail.message), (ATTEMPT_TEXT, fail.detail)]
    inner = "".join(f"<property name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in rows)
    return f"<properties>{inner}</properties>"


def _case(case: Case, attempt_text: bool) -> str:
    test = case.test
    open_tag = (f"<testcase classname={quoteattr(test.classname)} name={quoteattr(test.name)} "
                f"file={quoteattr(test.file)} line=\"{10 + len(test.name)}\"")
    each = case.seconds / max(1, len(case.attempts))
    out = []
    for index, fail in enumerate(case.attempts):
        tag = f'{open_tag} time="{each:.3f}">'
        last = index == len(case.attempts) - 1
        if case.skipped and last:
            out.append(f'{tag}<skipped type="pytest.skip" message={quoteattr(case.skipped)}>'
                       f"{escape(case.skipped)}</skipped></testcase>")
        elif fail is None:
            out.append(tag[:-1] + "/>")
        elif not last:
            out.append(tag + (_props(fail) if attempt_text else "") + "</testcase>")
        else:
            props = _props(fail) if attempt_text else ""
            out.append(f"{tag}{props}<{fail.element} message={quoteattr(fail.message)}>{escape(fail.detail)}"
                       f"</{fail.element}></testcase>")
    return "".join(out)


def report_xml(cases: list[Case], attempt_text: bool, hostname: str) -> str:
    """One job's JUnit report, in the order its tests ran."""
    failures = sum(1 for c in cases if c.attempts and c.attempts[-1] and c.attempts[-1].element == "failure")
    errors = sum(1 for c in cases if c.attempts and c.attempts[-1] and c.attempts[-1].element == "error")
    skipped = sum(1 for c in cases if c.skipped)
    total = sum(c.seconds for c in cases)
    body = "".join(_case(c, attempt_text) for c in cases)
    return (f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="{errors}" '
            f'failures="{failures}" skipped="{skipped}" tests="{len(cases)}" time="{total:.3f}" '
            f'timestamp="2026-09-01T06:00:00" hostname={quoteattr(hostname)}>{body}</testsuite></testsuites>')
