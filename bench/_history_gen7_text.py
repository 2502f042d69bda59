"""gen7's JUnit XML and failure texts: a report as pytest (xunit1, with pytest-rerunfailures'
one ``<testcase>`` per attempt) writes it, each failed attempt's text either as `ci.pytest_attempts`
records it (``ci.attempt.*`` properties) or, for stock pytest, nowhere but on the final attempt.

The texts are modelled on SGLang's own failures: a server that does not come up in time
(``popen_launch_server``), NCCL, a port in use, CUDA out of memory, a runner with a bad GPU, a pool
whose runners cannot pull the image; and a regression's assertion naming the module the breaking
commit touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import quoteattr, escape

from ci.results.junit import ATTEMPT_ERROR, ATTEMPT_OUTCOME, ATTEMPT_TEXT

FLAKE_KINDS = ("server_timeout", "nccl", "port", "oom")
# (element, error line) per cause; {n} a number that changes per attempt, {m} a module file
ERRORS = {
    "server_timeout": ("error", "TimeoutError: Server failed to start within the timeout period."),
    "nccl": ("failure", "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:{n}, "
                        "unhandled system error, NCCL version 2.27.3"),
    "port": ("error", "OSError: [Errno 98] Address already in use: ('127.0.0.1', {n})"),
    "oom": ("failure", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {n}.00 MiB. GPU 0 has a "
                       "total capacity of 79.11 GiB"),
    "bad_runner": ("error", "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    "outage": ("error", "RuntimeError: Failed to pull image lmsysorg/sglang:dev: toomanyrequests: "
                        "You have reached your pull rate limit"),
    "broken": ("failure", "AssertionError: {m}: {n} != {n2} (regression)"),
    "new": ("failure", "AssertionError: {m}: {n} != {n2} (this change)"),
}


@dataclass(frozen=True)
class Attempt:
    """One attempt of one test: ``cause`` a key of `ERRORS` (its text filled) or None (passed)."""

    cause: str | None
    error: str = ""
    seconds: float = 1.0


def error_text(cause: str, n: int, module: str = "") -> str:
    """The error line of ``cause`` with its number ``n`` (and the module ``module`` for a regression)."""
    return ERRORS[cause][1].format(n=n, n2=n + 7, m=module)


def _traceback(file: str, line: int, error: str) -> str:
    return (f'{file}:{line}: in test\n    self.run_case()\n{file}:{line + 3}: in run_case\n'
            f'    raise\nE   {error}')


def _properties(outcome: str, error: str, text: str) -> str:
    rows = "".join(f'<property name={quoteattr(k)} value={quoteattr(v)}/>'
                   for k, v in ((ATTEMPT_OUTCOME, outcome), (ATTEMPT_ERROR, error), (ATTEMPT_TEXT, text)))
    return f"<properties>{rows}</properties>"


def case_xml(file: str, classname: str, name: str, line: int, attempts: list[Attempt], attempt_text: bool) -> str:
    """Every attempt of one test as ``<testcase>`` elements, the last one the outcome."""
    out = []
    head = f'<testcase classname={quoteattr(classname)} name={quoteattr(name)} file={quoteattr(file)} line="{line}"'
    for index, attempt in enumerate(attempts):
        seconds = f'time="{attempt.seconds:.3f}"'
        if attempt.cause is None:
            out.append(f"{head} {seconds}/>")
            continue
        element = ERRORS[attempt.cause][0]
        text = _traceback(file, line, attempt.error)
        if index < len(attempts) - 1:  # a rerun attempt: pytest writes it empty
            body = _properties("error" if element == "error" else "failed", attempt.error, text) if attempt_text else ""
            out.append(f"{head} {seconds}>{body}</testcase>" if body else f"{head} {seconds}/>")
        else:
            message = quoteattr(attempt.error if element == "failure" else f"failed on setup with \"{attempt.error}\"")
            out.append(f"{head} {seconds}><{element} message={message}>{escape(text)}</{element}></testcase>")
    return "".join(out)


def report_xml(cases: list[str], failures: int, errors: int, seconds: float) -> str:
    """One JUnit report holding ``cases`` (already written by `case_xml`)."""
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" '
            f'errors="{errors}" failures="{failures}" skipped="0" tests="{len(cases)}" time="{seconds:.3f}">'
            + "".join(cases) + "</testsuite></testsuites>")
