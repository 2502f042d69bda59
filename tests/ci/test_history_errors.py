"""The meaningful error line, generic lines, infra causes and the signature (`ci.history.errors`),
on hand-picked lines and on JUnit that real pytest wrote."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.history.classify import fingerprint
from ci.history.errors import (MAX_ERROR_CHARS, environment_kind, error_line, infra_kind, is_check, is_generic,
                               normalise, service)
from ci.history.ingest import case_rows
from ci.results.junit import FAILED, Attempt, parse_junit


@pytest.mark.parametrize("line, generic", [
    ("AssertionError", True),
    ("AssertionError: ", True),
    ("assert False", True),
    ("assert 3 == 4", True),
    ("AssertionError: False is not true", True),
    ("AssertionError: 0.62 not greater than 0.65", True),
    ("Failed: Timeout >300.0s", True),
    ("RuntimeError: Server process exited with code 1", True),
    ("subprocess.CalledProcessError: Command '['python', 'x']' returned non-zero exit status 1.", True),
    ("collection failure", True),
    ("", True),
    ("AssertionError: accuracy 0.62 below 0.65", False),
    ("assert 'ok' == 'bad'", False),  # the values compared are words: specific enough
    ("assert result.text == 'Paris'", False),
    ("RuntimeError: shape mismatch: expected [8, 128], got [8, 64]", False),
    ("KeyError: 'input_ids'", False),
    ("ValueError: nan", False),  # three letters: a word
    ("ValueError: na", True),
])
def test_is_generic(line: str, generic: bool) -> None:
    assert is_generic(line) is generic


def att(message: str, detail: str = "") -> Attempt:
    return Attempt(FAILED, 1.0, message, detail)


@pytest.mark.parametrize("attempt, expected", [
    (att("AssertionError: accuracy 0.5 below 0.75"), "AssertionError: accuracy 0.5 below 0.75"),
    # a generic message: the first specific E line speaks
    (att("RuntimeError: Server process exited with code 1",
         "E   RuntimeError: Server process exited with code 1\nE   caused by: KeyError: 'rope_scaling'"),
     "caused by: KeyError: 'rope_scaling'"),
    # every line generic: the statement that raised tells two bare asserts apart
    (att("AssertionError", ">       assert out.ok\nE       AssertionError"), "AssertionError [at assert out.ok]"),
    (att("assert 3 == 4\n +  where 3 = f()", ">       assert f() == 4\nE       assert 3 == 4\nE        +  where 3 = f()"),
     "assert 3 == 4 [at assert f() == 4]"),
    (att("", "E   ValueError: bad dtype fp4\nE   more"), "ValueError: bad dtype fp4"),
    (att(""), ""),
    (att("X" * 1000), "X" * MAX_ERROR_CHARS),
])
def test_error_line(attempt: Attempt, expected: str) -> None:
    assert error_line(attempt) == expected


@pytest.mark.parametrize("message, detail, kind", [
    ("RuntimeError: No CUDA GPUs are available", "", "no-gpu"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "", "cuda"),
    # a kernel's own out-of-bounds access or device assert fails on every machine: the code's, not infra
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "", ""),
    ("", "E   RuntimeError: CUDA error: device-side assert triggered\nE   CUDA kernel errors might be asynchronously "
         "reported at some other API call", ""),
    # ROCm's runtime: a pool without its devices, and a device fault, as PyTorch on ROCm words them
    ("RuntimeError: HIP error: hipErrorNoDevice: no ROCm-capable device is detected", "", "no-gpu"),
    ('failed on setup with "RuntimeError: HIP error: hipErrorNoDevice: no ROCm-capable device is detected"', "",
     "no-gpu"),
    ("RuntimeError: HIP error: hipErrorLaunchFailure: unspecified launch failure", "", "cuda"),
    # the runtime's answer to a call the code got wrong (cudaErrorInvalidValue), and a build without code for
    # the device (cudaErrorNoKernelImageForDevice): the caller's, on any machine; "invalid argument" from
    # anything but the CUDA runtime names no device at all
    ("RuntimeError: CUDA error: invalid argument", "", ""),
    ("", "E   torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device", ""),
    ("RuntimeError: CUDA error: invalid argumentation of the launcher", "", "cuda"),
    # the driver cannot serve the device (CUDA's error 803, as torch and nvidia-smi word it): the machine's image
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
     "NumCudaDevices() that might have already set an error? Error 803: system has unsupported display driver / "
     "cuda driver combination", "", "no-gpu"),
    ("", "E   RuntimeError: nvidia-smi: Failed to initialize NVML: Driver/library version mismatch", "no-gpu"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970", "", "nccl"),
    # a collective that timed out is the test's (a hang, a slow peer), not by itself the machine's
    ("torch.distributed.DistBackendError: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, "
     "OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.", "", ""),
    ("OSError: [Errno 28] No space left on device: '/tmp/torchinductor_root/x.so'", "", "disk-full"),
    ("", "E   RuntimeError: PytorchStreamWriter failed writing file data/0: file write failed\nE   OSError: [Errno 122] "
         "Disk quota exceeded", "disk-full"),
    ("OSError: [Errno 116] Stale file handle: '/root/.cache/huggingface/hub'", "", "storage"),
    ("OSError: [Errno 5] Input/output error: '/mnt/models/llama/model-00001.safetensors'", "", "storage"),
    ("OSError: [Errno 30] Read-only file system: '/data/ckpt'", "", "storage"),
    # a FUSE mount whose daemon died, and the errno names alone (libuv's wording, a C extension's)
    ("OSError: [Errno 107] Transport endpoint is not connected: '/mnt/s3/models'", "", "storage"),
    ("Error: EIO: i/o error, read", "", "storage"),
    ("RuntimeError: reading /mnt/nfs/ckpt/model.pt failed: ESTALE", "", "storage"),
    ("RuntimeError: saving /data/ckpt/model.pt failed: EROFS", "", "storage"),
    ("OSError: [Errno 2] No such file or directory: 'config.json'", "", ""),  # the code's own path
    ("RuntimeError: Server process exited with code -9", "", "oom-kill"),
    ("RuntimeError: Server process exited with code -11", "", "signal"),
    ("RuntimeError: Server process exited with code 1", "", ""),
    ("", "Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):", "signal"),
    ("", "E   RuntimeError: The runner has received a shutdown signal.", "lost-runner"),
    ("modal.exception.RemoteError: Function call fc-01JQ3 was terminated by the Modal worker: grpclib.exceptions."
     "StreamTerminatedError: Stream reset by remote party, error_code: 2", "", "lost-runner"),
    ("RuntimeError: the pod was evicted: The node was low on resource: ephemeral-storage.", "", "lost-runner"),
    ("grpc.aio.AioRpcError: StreamTerminatedError: Stream reset by remote party", "", ""),  # the test's own gRPC
    # an assertion that quotes an infra string is the test's own check
    ("AssertionError: assert 'NCCL error' not in 'log: NCCL error: x'", "", ""),
    ("assert 'CUDA error' not in out", "E   assert 'CUDA error' not in out\nE    +  where 'CUDA error' = f()", ""),
    ("Failed: saw CUDA error in the log", "", ""),
    # the test's assertion over a chained NCCL error: the assertion is what failed (the rule is simple)
    ("AssertionError: server did not answer", "E   RuntimeError: NCCL error in: x\n\nE   AssertionError: server did not answer", ""),
    ("Failed: Timeout >300.0s", "E   Failed: Timeout >300.0s", ""),
    ("AssertionError: accuracy low", "", ""),
    # a CUDA OOM on a device others hold (2.5 of 78 GiB in use is the test's own) is the machine's;
    # one whose memory the test allocated itself, or without torch's numbers, is the test's
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
     "of which 512.00 MiB is free. Process 811 has 78.69 GiB memory in use. Of the allocated memory 2.50 GiB is "
     "allocated by PyTorch, and 120.00 MiB is reserved by PyTorch but unallocated.", "", "gpu-held"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of 79.10 GiB "
     "of which 2.31 GiB is free. Of the allocated memory 71.02 GiB is allocated by PyTorch", "", ""),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 22.05 "
     "GiB of which 1.12 GiB is free.", "", ""),
    # torch >= 2.1 names this process's whole use ("Including non-PyTorch memory, this process has X"): the rest
    # of the device in use, at half of it or more, is other processes'
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 31.74 "
     "GiB of which 1.12 GiB is free. Process 2219 has 27.83 GiB memory in use.",
     "E   torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 31.74 "
     "GiB of which 1.12 GiB is free. Process 2219 has 27.83 GiB memory in use. Including non-PyTorch memory, this "
     "process has 2.71 GiB memory in use.", "gpu-held"),
    ("OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 40.00 GiB of "
     "which 0.00 GiB is free. Including non-PyTorch memory, this process has 20.00 GiB memory in use.", "", "gpu-held"),
    ("OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 40.00 GiB of "
     "which 0.00 GiB is free. Including non-PyTorch memory, this process has 20.01 GiB memory in use.", "", ""),
    ("OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacty of 23.69 GiB of "
     "which 1.11 GiB is free. Process 2006998 has 20.00 GiB memory in use. Including non-PyTorch memory, this process "
     "has 2.58 GiB memory in use.", "", "gpu-held"),  # torch 2.1's spelling
    # a process torch lists by pid may be the test's own (in a container NVML's pid is not its own): not told
    ("OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 23.69 GiB of "
     "which 1.11 GiB is free. Process 2006998 has 22.50 GiB memory in use.", "", ""),
    # torch's documentation's own example: the test's process holds the device itself
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.15 GiB. GPU 0 has a total capacity of 39.56 GiB "
     "of which 6.80 GiB is free. Including non-PyTorch memory, this process has 36.61 GiB memory in use. Of the "
     "allocated memory 31.66 GiB is allocated by PyTorch, and 4.11 GiB is reserved by PyTorch but unallocated.", "", ""),
    # what this process holds as NVML counts it (non-PyTorch memory included), beside another process's 56 GiB
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
     "of which 309.00 MiB is free. Process 84968 has 56.31 GiB memory in use. Including non-PyTorch memory, this "
     "process has 2.87 GiB memory in use.", "", "gpu-held"),
    # 40.00 GiB held elsewhere of 80.00 is half, the boundary (held); 39.50 GiB is below it
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 80.00 GiB "
     "of which 1024.00 MiB is free. Including non-PyTorch memory, this process has 39.00 GiB memory in use.", "",
     "gpu-held"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 80.00 GiB "
     "of which 1.00 GiB is free. Including non-PyTorch memory, this process has 39.50 GiB memory in use.", "", ""),
    # the whole process's 70 GiB counts, not the 2.5 GiB its PyTorch allocated (the rest its own other libraries')
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
     "of which 512.00 MiB is free. Including non-PyTorch memory, this process has 70.00 GiB memory in use. Of the "
     "allocated memory 2.50 GiB is allocated by PyTorch", "", ""),
    # the executor's limit for the whole job, not the test's own timeout
    ("modal.exception.FunctionTimeoutError: Function liger_tests timed out after 5400.0 seconds", "", "job-timeout"),
    ("", "##[error]The job running on runner gpu-7 has exceeded the maximum execution time of 360 minutes.",
     "job-timeout"),
])
def test_infra_kind(message: str, detail: str, kind: str) -> None:
    assert infra_kind(att(message, detail)) == kind


@pytest.mark.parametrize("line, host", [
    ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries "
     "exceeded with url: /api/models (Caused by NewConnectionError('Connection refused'))", "huggingface.co"),
    ("huggingface_hub.errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: https://HF.co/api", "hf.co"),
    ("WARNING: Retrying after connection broken by 'NewConnectionError: Temporary failure in name resolution': "
     "https://pypi.org/simple/torch/", "pypi.org"),
    ("huggingface_hub.errors.LocalEntryNotFoundError: cannot find the requested files in the local cache",
     "huggingface.co"),
    ("ConnectionRefusedError: [Errno 111] Connection refused", ""),  # no host: a local server, `environment_kind`
    ("TimeoutError: timed out waiting for http://127.0.0.1:8000/health", ""),
    ("ValueError: bad url https://huggingface.co/x", ""),  # a host, but no failure to reach it
    ("OSError: We couldn't connect to 'https://huggingface.co' to load this file", "huggingface.co"),
    ("requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: https://huggingface.co/api",
     "huggingface.co"),
    ("ERROR: Could not install packages due to an OSError: HTTPSConnectionPool(host='download.pytorch.org', "
     "port=443): Read timed out.", "download.pytorch.org"),
    # a local server refusing is the test's surroundings, a 404 the code's own request, an assertion the test's
    ("requests.exceptions.ConnectionError: HTTPConnectionPool(host='localhost', port=8000): Max retries exceeded "
     "(Connection refused)", ""),
    ("huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error: Not Found for url: https://huggingface.co/x",
     ""),
    ("AssertionError: assert '503 Server Error for url: https://huggingface.co' not in log", ""),
])
def test_service_names_the_remote_host_that_failed(line: str, host: str) -> None:
    assert service(line) == host


@pytest.mark.parametrize("line, check", [
    ("AssertionError: Tensor-likes are not close!", True),  # torch.testing.assert_close
    ("AssertionError: \nNot equal to tolerance rtol=1e-05, atol=1e-08", True),  # numpy.testing
    ("assert 3 == 4", True),
    ("Failed: DID NOT RAISE <class 'ValueError'>", True),  # pytest.raises / pytest.fail
    ('failed on setup with "AssertionError: Tensor-likes are not close!"', True),  # pytest's setup wrapper
    ("Failed: Timeout >900.0s", False),  # pytest-timeout: the test ran out of time, not a check
    ("OSError: We couldn't connect to 'https://huggingface.co' to load this file", False),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", False),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", False),
    ("ValueError: tolerance 0.001 exceeded", False),  # raised by the code, not a check of the test's
])
def test_is_check_is_the_test_s_own_comparison(line: str, check: bool) -> None:
    assert is_check(line) is check


def test_signature_strips_what_changes_between_runs() -> None:
    a = att("OSError: cannot open /tmp/pytest-of-ci/pytest-12/test_x0/tmpa1b2c3d4/model.bin at 0x7f3a2b at line 45")
    b = att("OSError: cannot open /tmp/pytest-of-ci/pytest-99/test_x1/tmpzzzzyyyy/model.bin at 0x7fffff at line 46")
    c = att("OSError: cannot open model.safetensors")
    assert fingerprint(a) == fingerprint(b) != fingerprint(c)
    assert normalise("File x.py:123 tmpq8w7e6r5 in 12 ms") == "File x.py:<n> <tmp> in <n> ms"
    # the same failure in two tests groups as one
    assert fingerprint(att("KeyError: 'x'")) == fingerprint(att("KeyError: 'x'", "E   KeyError: 'x'"))


@pytest.mark.parametrize("line, kind", [
    ('failed on setup with "TimeoutError: Server failed to start in 600 s"', "startup"),
    ("TimeoutError: timed out waiting for the server to become healthy", "startup"),
    ("OSError: [Errno 98] Address already in use", "port"),
    ("ConnectionRefusedError: [Errno 111] Connection refused", "connection"),
    ("ConnectionResetError: [Errno 104] Connection reset by peer", "connection"),
    ("torch.distributed.DistBackendError: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(", "watchdog"),
    ("huggingface_hub.errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: https://hf.co/api", "remote"),
    ("requests.exceptions.HTTPError: 504 Server Error: Gateway Time-out for url: https://hf.co/api", "remote"),
    ("worker 'gw2' crashed while running 'tests/kernels/test_moe.py::test_moe[bf16]'", "worker-crash"),
    ("AssertionError: assert 'Address already in use' not in log", ""),  # the test's own check
    # the same check raised in a fixture, inside pytest's setup wrapper: still the test's own (as is_check reads it)
    ('failed on setup with "AssertionError: assert \'Address already in use\' not in log"', ""),
    ('failed on teardown with "AssertionError: Connection refused by the mock server"', ""),
    ('failed on setup with "ConnectionRefusedError: [Errno 111] Connection refused"', "connection"),
    ("AssertionError: assert response.status_code == 200, '503 Service Unavailable'", ""),
    ("ValueError: HTTP 404 Client Error: Not Found for url: https://hf.co/api/models/x", ""),  # the code's request
    ("AssertionError: max abs diff 0.0546 > 0.02", ""),
    ("KeyError: 'rope_scaling'", ""),
])
def test_environment_kind(line: str, kind: str) -> None:
    assert environment_kind(line) == kind == environment_kind(normalise(line))


SUITE = textwrap.dedent("""\
    import subprocess

    import pytest

    @pytest.fixture
    def server():
        raise TimeoutError("Server failed to start in 600 s")

    def test_server_setup(server):
        pass

    def test_bare_assert():
        ok = False
        assert ok

    def test_compare():
        assert 1 + 2 == 4

    def test_message():
        assert 0.5 > 0.75, "accuracy 0.5 below 0.75"

    def test_quotes_nccl():
        log = "NCCL error: remote process exited"
        assert "NCCL error" not in log

    def test_cuda():
        raise RuntimeError("CUDA error: uncorrectable ECC error encountered")

    def test_kernel_bug():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def test_wrapped():
        try:
            raise KeyError("rope_scaling")
        except KeyError as exc:
            raise RuntimeError("Server process exited with code 1") from exc
    """)


def test_real_pytest_output(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--junitxml",
                    str(tmp_path / "junit.xml"), str(tmp_path)], cwd=tmp_path, capture_output=True, timeout=120)
    report = parse_junit(tmp_path / "junit.xml", root=tmp_path)
    rows = {case.name: case_rows(case)[-1] for case in report.cases}
    assert rows["test_bare_assert"].error == "assert False [at assert ok]"
    assert rows["test_compare"].error.startswith("assert (1 + 2) == 4") or rows["test_compare"].error == "assert 3 == 4 [at assert 1 + 2 == 4]"
    assert rows["test_message"].error == "AssertionError: accuracy 0.5 below 0.75"
    assert rows["test_quotes_nccl"].infra == "" and "NCCL error" in rows["test_quotes_nccl"].error
    assert rows["test_cuda"].infra == "cuda"
    assert rows["test_kernel_bug"].infra == ""
    assert rows["test_cuda"].error == "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    assert rows["test_wrapped"].error == "KeyError: 'rope_scaling'"
    assert rows["test_wrapped"].message == "KeyError: 'rope_scaling'"  # the signature text follows the error line
    # pytest wraps a fixture's error; the plugin's record of a retried attempt keeps the line itself
    setup = rows["test_server_setup"]
    assert setup.error == 'failed on setup with "TimeoutError: Server failed to start in 600 s"'
    assert setup.fingerprint == fingerprint(att("TimeoutError: Server failed to start in 600 s"))[0]
