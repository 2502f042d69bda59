"""A failure's meaningful error line, whether that line is generic, and the infrastructure cause it names.

Contract:
- `error_line(attempt)` is the first line that says what went wrong, as written (numbers kept for
  the reader), at most `MAX_ERROR_CHARS`: the JUnit ``message``'s first line unless it is a
  generic wrapper (`is_generic`: a bare exception type, ``assert False``, ``Failed``, a process
  that "exited with code 1", a pytest-timeout line); then the first ``E`` line of the failure's
  text that is not generic; when every candidate is generic, the message's line followed by
  `` [at <source line>]``, the last ``>`` line pytest marks (the statement that raised), so two
  different bare ``assert`` failures of one test still read apart. ``""`` when the attempt has no
  failure text (a retried attempt: pytest's JUnit keeps none).
- `normalise(text)` is the signature text of a line: run-specific parts replaced (see its doc);
  `ci.history.classify.fingerprint` hashes it. pytest's JUnit wraps an error raised in a fixture
  (``failed on setup with "TimeoutError: ..."``) where the plugin's attempt record keeps the
  exception line itself; the signature is the inner line's, so the two read as one failure.
- `is_generic(line)`: the line, once normalised and
  stripped of its exception type, of assert/comparison words and placeholders, holds no word of
  three letters or more; or it is one of the known wrapper phrases. A generic line never makes a
  failure flaky by its signature alone (`ci.history.verdict`): it matches everything.
- `infra_kind(attempt)`: ``no-gpu`` (also a driver that cannot serve the device: CUDA's errors
  802-804, NVML's driver/library mismatch), ``gpu-held`` (a CUDA out-of-memory error on a device that other
  processes hold: `gpu_held`), ``cuda`` (ROCm's HIP device errors too), ``nccl``, ``oom-kill``, ``disk-full``,
  ``storage``, ``job-timeout`` (the executor's limit for the whole job ran out: a Modal function's
  timeout, a GitHub job's maximum execution time), ``lost-runner`` or ``signal`` when the failure's
  own exception line (the message's first line, or the last ``E`` lines) names that runner-level
  cause, else ``""``.
- `service(line)`: the remote service (host) a line says failed or could not be reached (a hub's
  5xx, a registry timing out), or ``""``. One such failure is a hiccup (`environment_kind`'s
  ``remote``, which tests flake with); many tests failing so at once is an outage
  (`ci.history.outages`). An assertion is never infra, whatever string it
  quotes: ``AssertionError: 'NCCL error' in log`` is the test's own check failing. Nor is a device
  error that a kernel's own bug raises on any machine (`KERNEL_FAULT`: an illegal memory access, a
  misaligned address, a device-side assert, a bad launch configuration, a CUDA call's invalid
  argument, a build with no code for the device's architecture): the code's, like a segfault
  in a test that reads out of bounds; a machine that raises them for code that passes elsewhere is
  still found by `ci.history.runners.runner_only`.
- `is_check(line)`: the line is the test's own check failing (an assertion, a tolerance
  comparison, ``pytest.fail``): never a service's or a machine's words (`ci.history.outages`).
- `environment_kind(line)`: ``startup``, ``port``, ``connection``, ``watchdog``, ``remote`` or
  ``worker-crash`` when the line is an error whose usual cause is the test's surroundings rather
  than the code under test (a server that did not come up in time, a port still held, a refused or
  reset connection, a collective's watchdog timeout, a remote service's HTTP 429 or 502-504, a
  crashed pytest-xdist worker), else ``""``. A prior for the verdicts, never a verdict by itself: a change can
  make a server hang too.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ci.results.junit import Attempt

MAX_ERROR_CHARS = 300
NO_GPU, CUDA, NCCL, OOM_KILL, LOST_RUNNER, SIGNAL = "no-gpu", "cuda", "nccl", "oom-kill", "lost-runner", "signal"
DISK_FULL, STORAGE = "disk-full", "storage"
GPU_HELD, JOB_TIMEOUT = "gpu-held", "job-timeout"
INFRA_KINDS = (NO_GPU, GPU_HELD, CUDA, NCCL, OOM_KILL, LOST_RUNNER, SIGNAL, DISK_FULL, STORAGE, JOB_TIMEOUT)

MISSING_GPU = re.compile(
    r"no CUDA GPUs are available|no CUDA-capable device|Found no NVIDIA driver|NVIDIA driver on your system is too old"
    r"|CUDA driver version is insufficient|Torch not compiled with CUDA enabled|cudaErrorNoDevice"
    r"|RuntimeError: No HIP GPUs are available|hipErrorNoDevice|no ROCm-capable device"
    # the machine's driver cannot serve the device (CUDA's errors 802-804, as torch's cudaGetDeviceCount()
    # and nvidia-smi word them): an image whose driver does not fit its CUDA, a fabric manager not up
    r"|system has unsupported display driver / cuda driver combination|cudaErrorSystemDriverMismatch"
    r"|forward compatibility was attempted on non supported HW|cudaErrorCompatNotSupportedOnDevice"
    r"|Error 802: system not yet initialized|cudaErrorSystemNotReady|Driver/library version mismatch", re.I)
# Order matters: the first that matches names the cause (an NCCL error that wraps a CUDA one is NCCL's).
_INFRA = (
    (NO_GPU, MISSING_GPU),
    # a collective's watchdog timeout (DistBackendError: ... Watchdog caught collective operation
    # timeout) is not here: a hang in the test's own code or a slow peer times out the same way,
    # so it is the test's failure, flaky or not, unless an NCCL error names a fault
    (NCCL, re.compile(r"\bNCCL (?:error|communicator was aborted|WARN)|\bnccl(?:System|Internal|UnhandledCuda|Invalid"
                      r"Usage|Remote)Error\b", re.I)),
    # ROCm's HIP runtime words its device faults as CUDA's (``HIP error: ...``, ``hipError...``)
    (CUDA, re.compile(r"\b(?:CUDA|HIP) error\b|\b(?:cuda|hip)Error\w*|CUDA driver error|uncorrectable ECC error|\bXid\b"
                      r"|CUBLAS_STATUS_(?:EXECUTION_FAILED|INTERNAL_ERROR|NOT_INITIALIZED)", re.I)),
    (OOM_KILL, re.compile(r"\bOut of memory: Killed process|\boom[-_ ]kill|exit(?:ed)? (?:with )?(?:status|code) "
                          r"(?:-9|137)\b|killed by signal 9\b|\bSIGKILL\b|^Killed$", re.I | re.M)),
    (DISK_FULL, re.compile(r"No space left on device|\bENOSPC\b|Disk quota exceeded|\bEDQUOT\b", re.I)),
    # a mount or disk failing under the test (an NFS or FUSE model cache gone stale, a disk's I/O
    # error, a file system remounted read-only): the machine's storage, not the code's
    (STORAGE, re.compile(r"Stale file handle|\bESTALE\b|\[Errno 5\] Input/output error|\bEIO\b"
                         r"|Read-only file system|\bEROFS\b|Transport endpoint is not connected", re.I)),
    # the executor's time limit for the whole job ran out (a Modal function's, a GitHub job's), killing
    # whichever test was under way: not a test's own timeout (pytest-timeout names the test)
    (JOB_TIMEOUT, re.compile(r"\bFunctionTimeoutError\b|\bFunction \S+ timed out after\b"
                             r"|job running on runner .{0,80} has exceeded the maximum execution time", re.I)),
    # also a job whose worker, container or cloud instance was taken away under it (terminated by the
    # executor's worker, preempted, evicted): the machine left, whatever test was running
    (LOST_RUNNER, re.compile(r"runner has received a shutdown signal|lost communication with the server"
                             r"|The self-hosted runner .{0,80} lost|runner .{0,40} (?:went offline|disconnected)"
                             r"|\bwas terminated by the (?:\w+ )?worker\b|\b(?:container|pod|instance|node) (?:was |has been )?"
                             r"(?:preempted|evicted)\b", re.I)),
    (SIGNAL, re.compile(r"Fatal Python error: (?:Segmentation fault|Bus error|Aborted)|(?:killed|terminated) by signal"
                        r"|exited with signal|<Signals\.SIG[A-Z]+|exit(?:ed)? (?:with )?(?:status|code) -(?:[1-9]|[12]\d|3[01])\b",
                        re.I)),
)
# torch's CUDA out-of-memory words: the device's capacity and what is free, then what this process
# holds: "Including non-PyTorch memory, this process has X" (its whole use, as NVML counts it: torch >=
# 2.1) or, without that, what its PyTorch allocated; the rest of the used memory is held by other
# processes (or the driver). torch 2.1 spelled "capacty". "Process N has X memory in use" is not read
# as another's: in a container NVML's pid is not the process's own, so torch lists itself that way.
_CUDA_OOM = re.compile(r"CUDA out of memory\b.*?total capaci?ty of ([\d.]+) ([GM]iB) of which ([\d.]+) ([GM]iB) "
                       r"is free", re.I | re.S)
_OOM_OWN = (re.compile(r"this process has ([\d.]+) ([GM]iB) memory in use", re.I),
            re.compile(r"Of the allocated memory ([\d.]+) ([GM]iB) is allocated by PyTorch", re.I))
HELD_SHARE = 0.5  # at least half of the device held outside the test's own allocations: another process's


def _gib(number: str, unit: str) -> float:
    return float(number) / (1024 if unit.lower() == "mib" else 1)


def gpu_held(line: str) -> bool:
    """Whether ``line`` is torch's CUDA out-of-memory error on a device that other processes hold:
    at least `HELD_SHARE` of its capacity is in use but not this process's (its whole use when torch
    names it, "this process has X memory in use", else what its PyTorch allocated).
    A test that asks for too much fills the device with its own allocations; this is a leftover
    or neighbouring process on the machine. Without torch's numbers it is not told (``False``)."""
    found = _CUDA_OOM.search(line)
    if found is None:
        return False
    mine = next((m for m in (pattern.search(line, found.end()) for pattern in _OOM_OWN) if m), None)
    if mine is None:
        return False
    total, free, own = (_gib(m.group(i), m.group(i + 1)) for m, i in ((found, 1), (found, 3), (mine, 1)))
    return total > 0 and (total - free - own) >= HELD_SHARE * total


# A remote service (a model hub, a package index) that failed or could not be reached: a host named
# with an HTTP 429/5xx or a connection, timeout or name-resolution failure. A local server (localhost,
# 127.x) refusing is the test's surroundings (`environment_kind`), and a 404 the code's own request.
_HOST = re.compile(r"(?:https?://|host=['\"])(?!(?:localhost|127\.[\d.]+|0\.0\.0\.0|\[::1\])\b)"
                   r"([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)")
_UNREACHABLE = re.compile(r"\b(?:429 Client Error|5\d\d Server Error)\b|Too Many Requests|Service Unavailable"
                          r"|Bad Gateway|Gateway Time-?out|Max retries exceeded|timed out|Connect(?:ion)?Timeout"
                          r"|Connection (?:refused|reset|aborted)|RemoteDisconnected|Remote end closed"
                          r"|name resolution|Name or service not known|getaddrinfo failed|Could not resolve host"
                          r"|Could not fetch URL|couldn't connect to|SSLError|ProxyError", re.I)
# huggingface_hub's words for a hub it could not reach (no URL on the line): the hub is the service
_HUB_DOWN = re.compile(r"LocalEntryNotFoundError|We couldn't connect to '?https?://huggingface\.co"
                       r"|cannot find the requested files in the local cache", re.I)
HUB = "huggingface.co"
# Device errors a kernel of the code under test raises itself, on any machine (cudaErrorIllegalAddress,
# cudaErrorMisalignedAddress, cudaErrorAssert, cudaErrorInvalidConfiguration, cudaErrorLaunchOutOfResources),
# and the runtime's answers to a call the code got wrong, which CUDA's documentation lays on the caller:
# cudaErrorInvalidValue (a parameter out of range), cudaErrorIllegalInstruction, and a build without code
# for the device's architecture (cudaErrorInvalidDeviceFunction, cudaErrorNoKernelImageForDevice)
KERNEL_FAULT = re.compile(r"illegal memory access|misaligned address|device-side assert(?:ion)? triggered"
                          r"|invalid configuration argument|too many resources requested for launch"
                          r"|(?:CUDA|HIP) error: invalid argument\b|cudaErrorInvalidValue|illegal instruction was encountered"
                          r"|invalid device function|no kernel image is available for execution", re.I)
# Errors whose usual cause is the machine or its neighbours (load, a leftover process), not the code.
_ENVIRONMENT = (
    ("startup", re.compile(r"\b(?:server|engine|router|worker)s?\b[^.]{0,40}\b(?:failed to start|did not start|"
                           r"not (?:ready|healthy|up) (?:in|after|within))|timed? ?out waiting for (?:the )?"
                           r"(?:server|engine|health|port)", re.I)),
    ("port", re.compile(r"Address already in use|\bEADDRINUSE\b", re.I)),
    ("connection", re.compile(r"Connection (?:refused|reset by peer|aborted)|\bECONN(?:REFUSED|RESET)\b"
                              r"|RemoteDisconnected|Remote end closed connection", re.I)),
    ("watchdog", re.compile(r"Watchdog caught collective operation timeout", re.I)),
    # a model hub or other remote service refusing or timing out (HTTP 429, 502-504): not the code's
    ("remote", re.compile(r"\b(?:429 Client Error|50[234] Server Error)\b|Too Many Requests|Bad Gateway"
                          r"|Gateway Time-?out|Service Unavailable", re.I)),
    # pytest-xdist's record of a worker process that died mid-test (the log: "node down")
    ("worker-crash", re.compile(r"\bworker '?gw\d+'? crashed while running|node down: Not properly terminated",
                                re.I)),
)
_ASSERTION = re.compile(r"\s*(?:(?:[\w]+\.)*(?:AssertionError|AssertError)\b|assert\b|Failed: (?!Timeout))")

_TYPE_PREFIX = re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failed|Failure)\b:?")
_FILLER = re.compile(r"<n>|<addr>|<tmp>|<path>|<id>|\b(?:assert|is|not|in|and|or|None|True|False|where|true|false"
                     r"|Failed|failed|error|Error)\b|[^A-Za-z]", re.I)
_WORD = re.compile(r"[A-Za-z]{3,}")
_WRAPPERS = re.compile(
    r"^(?:.*(?:exited with (?:exit )?code|returned non-zero exit status|process completed with exit code"
    r"|terminated with exit code|exit status <n>)\b.*|Failed: Timeout .*|Timeout .*|collection failure"
    r"|(?:AssertionError: )?(?:False is not true|True is not false|unexpectedly None|<n> != <n>|<n> not greater than <n>"
    r"|<n> not less than <n>|<n> not greater than or equal to <n>|<n> not less than or equal to <n>))$", re.I)


_HEX = re.compile(r"0x[0-9a-fA-F]+")
_TMP = re.compile(r"(?:/tmp|/var/folders|/private/var|\S*/pytest-of-[^/\s]+)/\S*|\btmp[A-Za-z0-9_]{6,}\b")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:/[\w.+@-]+){2,}/?")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_LONG_HEX = re.compile(r"\b[0-9a-fA-F]{12,}\b")
_NUMBER = re.compile(r"(?<!\w)[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_LINE_NO = re.compile(r"(\.py|\bline)[: ]\s*\d+")
_SPACE = re.compile(r"\s+")
_PHASE = re.compile(r'^failed on (?:setup|teardown) with "(.*)"$', re.S)
MAX_FINGERPRINT_TEXT = 300


def _unwrapped(text: str) -> str:
    """The line pytest's ``failed on setup with "..."`` (or teardown) wrapper quotes, else ``text``."""
    wrapped = _PHASE.match(text.strip())
    return wrapped.group(1) if wrapped else text


@lru_cache(maxsize=4096)  # is_generic and the fingerprint normalise the same line, one after the other
def normalise(text: str) -> str:
    """One line with the run-specific parts replaced: ``0x...`` -> ``<addr>``, temporary
    directories and ``tmpXXXXXX`` names -> ``<tmp>``, other absolute paths -> ``<path>``, UUIDs and
    long hex ids -> ``<id>``, line numbers (``x.py:12``, ``line 12``) and other numbers -> ``<n>``;
    whitespace folded; at most `MAX_FINGERPRINT_TEXT` characters. pytest's ``failed on setup with
    "..."`` wrapper is dropped for the line it quotes."""
    text = _unwrapped(text)
    text = _HEX.sub("<addr>", text)
    text = _TMP.sub("<tmp>", text)
    text = _PATH.sub("<path>", text)
    text = _UUID.sub("<id>", text)
    text = _LONG_HEX.sub("<id>", text)
    text = _LINE_NO.sub(r"\1:<n>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:MAX_FINGERPRINT_TEXT]


def is_generic(line: str) -> bool:
    """True when ``line`` names no particular cause (see the module docstring)."""
    text = normalise(line)
    if not text or _WRAPPERS.match(text):
        return True
    rest = _FILLER.sub(" ", _TYPE_PREFIX.sub("", text, count=1))
    return _WORD.search(rest) is None


def _e_lines(detail: str) -> list[str]:
    return [line[1:].strip() for line in detail.splitlines() if line.startswith("E ") and line[1:].strip()]


def _continuation(line: str) -> bool:
    """pytest's explanation lines under an ``E`` line: ``+  where ...``, diff markers, ``At index``."""
    return line.startswith(("+", "-", "?", "where ", "At index", "Full diff", "Use -v", "...", "Omitting"))


def _source_line(detail: str) -> str:
    marked = [line[1:].strip() for line in detail.splitlines() if line.startswith(">") and line[1:].strip()]
    return marked[-1] if marked else ""


def error_line(attempt: Attempt) -> str:
    """The first meaningful error line of a failed attempt (see the module docstring)."""
    first = attempt.message.strip().splitlines()[0].strip() if attempt.message.strip() else ""
    candidates = [first] if first else []
    candidates += [line for line in _e_lines(attempt.detail) if not _continuation(line)]
    for line in candidates:
        if not is_generic(line):
            return line[:MAX_ERROR_CHARS]
    if not candidates:
        return ""
    source = _source_line(attempt.detail)
    text = f"{candidates[0]} [at {source}]" if source else candidates[0]
    return text[:MAX_ERROR_CHARS]


def infra_kind(attempt: Attempt) -> str:
    """The runner-level cause this failure names, or ``""`` (see the module docstring)."""
    first = attempt.message.strip().splitlines()[0].strip() if attempt.message.strip() else ""
    e_lines = [line for line in _e_lines(attempt.detail) if not _continuation(line)]
    raised = first or (e_lines[-1] if e_lines else "")
    if _ASSERTION.match(raised):
        return ""  # the test's own check failed, whatever text it quotes
    lines = ([first] if first else []) + e_lines[-3:]
    if not lines and attempt.detail.strip():
        lines = attempt.detail.strip().splitlines()[-3:]
    for line in lines:
        if _ASSERTION.match(line):
            continue
        if gpu_held(line):
            return GPU_HELD
        for kind, pattern in _INFRA:
            if pattern.search(line):
                return "" if kind == CUDA and KERNEL_FAULT.search(line) else kind
    return ""


def service(line: str) -> str:
    """The remote service (its host) a line says failed or could not be reached, or ``""``: an
    HTTP 429/5xx, a refused, reset or timed-out connection or a failed name lookup naming a host
    other than this machine, or huggingface_hub's words for an unreachable hub (``huggingface.co``).
    An assertion quoting such text is the test's own check (``""``)."""
    if _ASSERTION.match(line):
        return ""
    if _HUB_DOWN.search(line):
        return HUB
    host = _HOST.search(line)
    return host.group(1).lower() if host and _UNREACHABLE.search(line) else ""


def is_check(line: str) -> bool:
    """Whether ``line`` is the test's own check failing: an assertion (``AssertionError``, a bare
    ``assert``, ``pytest.fail``'s ``Failed:``, torch.testing's and numpy's tolerance errors, which
    are AssertionErrors), also inside pytest's ``failed on setup with "..."`` wrapper. The test ran
    to its comparison and got a wrong value: that names no service and no machine."""
    return bool(_ASSERTION.match(_unwrapped(line)))


def environment_kind(line: str) -> str:
    """The environmental class of an error line, or ``""`` (see the module docstring); an
    assertion is the test's own check, whatever it quotes, also inside pytest's ``failed on setup
    with "..."`` wrapper (`is_check`): a fixture's assertion that a server answered is no port in use."""
    if is_check(line):
        return ""
    return next((kind for kind, pattern in _ENVIRONMENT if pattern.search(line)), "")
