"""Broken vs failed, and the fingerprint of a failure.

Contract:
- `kind_of` maps one JUnit attempt to ``pass``, ``skip``, ``fail`` or ``broken``. Broken is a
  failure the code caused for certain, never evidence of flakiness and never to be retried: an
  ``ImportError``, ``ModuleNotFoundError``, ``SyntaxError`` (and its ``IndentationError`` /
  ``TabError`` subclasses), a collection error (pytest's ``classname=""`` testcase or its
  ``collection failure`` message), or a missing GPU (`MISSING_GPU`). The exception type is read
  from the failure's ``message`` attribute (``Type: text``) or, failing that, from the last ``E``
  line of its text, so a traceback that merely mentions ImportError on the way is not broken.
- `fingerprint` normalises the failure's meaningful line (`ci.history.errors.error_line`: the
  message's first line unless it is a generic wrapper, else the first specific ``E`` line; hex
  addresses, temporary names, paths, line numbers and numbers replaced by `normalise`) so one cause
  gives one fingerprint across tests and runs: ``(hash, normalised text)``.
- A quarantined test's failure is reported by pytest as an xfail (a ``<skipped>``): the plugin
  writes its reason as `quarantined_reason` does, naming the failure, and `kind_of` reads such a
  skip back as the failure it was (``fail``, or ``broken``), so quarantined runs keep counting.
- `RERUN_EXCEPT` are the regular expressions a rerun plugin should never retry (pytest-rerunfailures'
  ``rerun_except``): the same broken types.
"""

from __future__ import annotations

import hashlib
import re

from ci.history.errors import MISSING_GPU, error_line, normalise
from ci.history.model import BROKEN, FAIL, PASS, SKIP
from ci.results.junit import ERROR, FAILED, PASSED, SKIPPED, Attempt

BROKEN_TYPES = frozenset({"ImportError", "ModuleNotFoundError", "SyntaxError", "IndentationError", "TabError"})
RERUN_EXCEPT = tuple(rf"\b{t}\b" for t in sorted(BROKEN_TYPES)) + (f"(?i){MISSING_GPU.pattern}",)

QUARANTINED = "quarantined (registry.yaml): "
_FAILED_WITH = "; failed with: "


def quarantined_reason(reason: str, failure: str = "") -> str:
    """The xfail reason of a quarantined test: ``reason``, and when it failed, the failure's
    first line (``Type: text``), which `quarantined_failure` reads back."""
    text = QUARANTINED + " ".join(reason.split())
    first = failure.strip().splitlines()[0] if failure.strip() else ""
    return text + (_FAILED_WITH + first if first else "")


def quarantined_failure(attempt: Attempt) -> Attempt | None:
    """A quarantined test's failure hidden in a skip, as the failed attempt it was; else None."""
    if attempt.outcome != SKIPPED or not attempt.message.startswith(QUARANTINED):
        return None
    _, _, failure = attempt.message.partition(_FAILED_WITH)
    return Attempt(FAILED, attempt.time, failure or "quarantined test failed", "")


_TYPE_AT_START = re.compile(r"\s*((?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failed)))\b")
_E_LINE = re.compile(r"^E\s+((?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failed)))\b", re.M)


def exception_type(attempt: Attempt) -> str:
    """The failure's exception class name (last dotted part), ``""`` if none can be read."""
    match = _TYPE_AT_START.match(attempt.message)
    if match:
        return match.group(2)
    found = _E_LINE.findall(attempt.detail)
    return found[-1][1] if found else ""


def is_broken(attempt: Attempt, classname: str) -> bool:
    """True when this failed attempt is breakage (see the module docstring)."""
    if attempt.outcome not in (FAILED, ERROR):
        return False
    if (classname == "" and attempt.outcome == ERROR) or attempt.message == "collection failure":
        return True
    if exception_type(attempt) in BROKEN_TYPES:
        return True
    return bool(MISSING_GPU.search(attempt.message) or MISSING_GPU.search(_last_e_lines(attempt.detail)))


def kind_of(attempt: Attempt, classname: str, *, retried: bool, final_broken: bool) -> str:
    """``pass`` / ``skip`` / ``fail`` / ``broken`` for one attempt. A ``retried`` attempt (one
    pytest-rerunfailures ran again) failed whatever its element says; it is broken when the
    case's final attempt is (the same breakage, retried)."""
    hidden = quarantined_failure(attempt)
    if hidden is not None:
        return BROKEN if is_broken(hidden, classname) else FAIL
    if retried and attempt.outcome in (PASSED, SKIPPED):
        return BROKEN if final_broken else FAIL
    if attempt.outcome == PASSED:
        return PASS
    if attempt.outcome == SKIPPED:
        return SKIP
    return BROKEN if is_broken(attempt, classname) or (retried and final_broken) else FAIL


def fingerprint(attempt: Attempt) -> tuple[str, str]:
    """``(12 hex digits, normalised text)`` of a failed attempt: the signature of its
    `ci.history.errors.error_line`, the same across tests, tiers and runs for one cause;
    ``("", "")`` when it has no text (a retried attempt of a JUnit without `ci.pytest_attempts`)."""
    return signature(error_line(quarantined_failure(attempt) or attempt))


def signature(line: str) -> tuple[str, str]:
    """``(12 hex digits, normalised text)`` of an error line (`fingerprint` of the attempt it came
    from); ``("", "")`` for an empty line."""
    text = normalise(line)
    if not text:
        return "", ""
    return hashlib.sha256(text.encode()).hexdigest()[:12], text


def _last_e_lines(detail: str, count: int = 3) -> str:
    lines = [line[1:].strip() for line in detail.splitlines() if line.startswith("E ")]
    return "\n".join(lines[-count:])
