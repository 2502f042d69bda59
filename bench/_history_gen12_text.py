"""gen12's JUnit and failure texts, as DeepSpeed's GPU jobs would write them.

DeepSpeed's unit jobs run ``cd tests; pytest --forked -n 4 unit/`` then ``pytest --forked -m
'sequential' unit/``: pytest's rootdir is ``tests/`` (its ``pytest.ini``), so `junit_xml` writes
pytest's default ``xunit2`` family, one ``<testsuite>`` per invocation in one ``<testsuites>``,
classnames relative to ``tests/`` (``unit.comm.test_dist.TestInit``). There is no rerun plugin: each
test has one ``<testcase>``. With ``attempt_text`` a failed testcase also carries the
``ci.attempt.*`` properties the registry's pytest plugin writes (`ci.pytest_attempts`), as that
plugin would write them on the final attempt. Failure texts follow DeepSpeed's own harness
(``tests/unit/common.py``: ``Worker N exited with code 1``, pytest-forked's ``CRASHED with signal``)
and what torch, NCCL, CUDA and the Hugging Face hub print.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from xml.sax.saxutils import escape, quoteattr

from ci.results.junit import ATTEMPT_ERROR, ATTEMPT_OUTCOME, ATTEMPT_TEXT

# Failure kinds -> (exception line template, traceback tail template). {node} {rank} {port} {gpu} are filled.
TEXTS: dict[str, tuple[str, str]] = {
    "tolerance": ("AssertionError: Tensor-likes are not close!",
                  "    torch.testing.assert_close(ds_out, ref_out, rtol=rtol, atol=atol)\n"
                  "E   AssertionError: Tensor-likes are not close!\n"
                  "E   \n"
                  "E   Mismatched elements: {count} / 8192 (0.{frac}%)\n"
                  "E   Greatest absolute difference: 0.0{gap} at index (3, {idx}) (up to 0.01 allowed)\n"
                  "E   Greatest relative difference: 0.0{rel} at index (3, {idx}) (up to 0.01 allowed)\n"),
    "port": ("Failed: Worker {rank} exited with code 1",
             "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
             "address. The server socket has failed to bind to [::]:{port} (errno: 98 - Address already in use). "
             "The server socket has failed to bind to 0.0.0.0:{port} (errno: 98 - Address already in use).\n"
             "[rank{rank}]: Worker {rank} exited with code 1\n"),
    "nccl": ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
             "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
             "    dist.all_reduce(tensor, group=group)\n"
             "  File \"/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py\", line 2501, "
             "in all_reduce\n    work = group.allreduce([tensor], opts)\n"
             "E   torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
             "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
             "E   ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device "
             "error.\nE   Last error:\nE   socketProgress: Connection closed by remote peer\n"),
    "timeout": ("Failed: Worker {rank} hung.",
                "[rank{rank}]:[E1017 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=41, OpType=ALLGATHER, NumelIn=4096, NumelOut=8192, Timeout(ms)=600000) "
                "ran for 600013 milliseconds before timing out.\nFailed: Worker {rank} hung.\n"),
    "crash": ("{where}: running the test CRASHED with signal 11",
              "{where}: running the test CRASHED with signal 11\n"),
    "jit_lock": ("RuntimeError: Error building extension 'fused_adam'",
                 "  File \"deepspeed/ops/op_builder/builder.py\", line 524, in jit_load\n"
                 "    op_module = load(name=self.name, sources=self.strip_empty_entries(sources),\n"
                 "FileNotFoundError: [Errno 2] No such file or directory: "
                 "'/home/runner/.cache/torch_extensions/py310_cu121/fused_adam/fused_adam.so'\n"
                 "E   RuntimeError: Error building extension 'fused_adam'\n"),
    # infra
    "ecc": ("RuntimeError: CUDA error: uncorrectable ECC error encountered",
            "    torch.cuda.synchronize()\nE   RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
            "E   CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
            "below might be incorrect.\nE   For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
            "NVRM: Xid (PCI:0000:{gpu}:00): 48, pid=31877, name=python, An uncorrectable double bit error (DBE) "
            "has been detected on GPU in the framebuffer at partition 6, subpartition 0.\n"),
    "xid79": ("RuntimeError: CUDA error: unspecified launch failure",
              "E   RuntimeError: CUDA error: unspecified launch failure\n"
              "NVRM: Xid (PCI:0000:{gpu}:00): 79, pid=0, name=python, GPU has fallen off the bus.\n"),
    "oom_other": ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {rank} has a total "
                  "capacity of 31.74 GiB of which 1.12 GiB is free. Process 2219 has 27.83 GiB memory in use.",
                  "    model = model.to(get_accelerator().device_name())\n"
                  "E   torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {rank} has a "
                  "total capacity of 31.74 GiB of which 1.12 GiB is free. Process 2219 has 27.83 GiB memory in use. "
                  "Including non-PyTorch memory, this process has 2.71 GiB memory in use.\n"),
    "hub": ("OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the "
            "cached files and it looks like {model} is not the path to a directory containing a file named "
            "config.json.",
            "requests.exceptions.ReadTimeout: (ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', "
            "port=443): Read timed out. (read timeout=10)\"), '(Request ID: 3f1c0a8e)')\n"
            "E   OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in "
            "the cached files and it looks like {model} is not the path to a directory containing a file named "
            "config.json.\n"),
    "disk": ("OSError: [Errno 28] No space left on device",
             "  File \"deepspeed/ops/op_builder/builder.py\", line 524, in jit_load\n"
             "E   OSError: [Errno 28] No space left on device: '/tmp/torch_extensions/py310_cu121'\n"),
    # code
    "broken": ("{error}", "{frame}\nE   {error}\n"),
    "env": ("{error}", "{frame}\nE   {error}\n"),
}
MODELS = ("gpt2", "facebook/opt-125m", "bigscience/bloom-560m", "EleutherAI/gpt-neo-125M", "bert-base-uncased")


@dataclass(frozen=True)
class Case:
    """One testcase to write: ``classname`` dotted from ``tests/``, ``name`` with its ids, its
    ``time``, and a failure ``kind`` (a `TEXTS` key) with fills, or ``skip`` for a skip message."""

    node: str
    classname: str
    name: str
    time: float
    kind: str = ""
    fills: tuple[tuple[str, str], ...] = ()
    skip: str = ""


def failure_text(case: Case) -> tuple[str, str]:
    """(message, traceback text) of a failed case."""
    where = f"{case.node.split('::')[0][len('tests/'):]}:{40 + len(case.name) % 60}"
    fills = dict(case.fills, where=where)
    head, tail = TEXTS[case.kind]
    return head.format(**fills), f"{where}: \n{tail.format(**fills)}"


def fills_for(kind: str, rng: random.Random) -> tuple[tuple[str, str], ...]:
    """Random details for a kind's text (ranks, ports, element counts), drawn from ``rng``."""
    return (("rank", str(rng.randrange(4))), ("port", str(29500 + rng.randrange(4000))),
            ("gpu", f"{rng.choice((0x1b, 0x3d, 0x5e, 0x86, 0xb1))}".rjust(2, "0")),
            ("count", str(rng.randrange(1, 90))), ("frac", str(rng.randrange(1, 99))),
            ("gap", str(rng.randrange(11, 99))), ("rel", str(rng.randrange(11, 99))),
            ("idx", str(rng.randrange(4096))), ("model", rng.choice(MODELS)))


def suite_xml(cases: list[Case], started: datetime, host: str, attempt_text: bool) -> str:
    """One ``<testsuite>`` as pytest's xunit2 writer lays it out."""
    failures = sum(1 for c in cases if c.kind)
    skipped = sum(1 for c in cases if c.skip)
    total_time = sum(c.time for c in cases)
    parts = [f'<testsuite name="pytest" errors="0" failures="{failures}" skipped="{skipped}" tests="{len(cases)}" '
             f'time="{total_time:.3f}" timestamp="{started.isoformat()}" hostname={quoteattr(host)}>']
    for case in cases:
        attrs = f'classname={quoteattr(case.classname)} name={quoteattr(case.name)} time="{case.time:.3f}"'
        if case.kind:
            message, text = failure_text(case)
            props = ""
            if attempt_text:
                props = ("<properties>" + "".join(
                    f"<property name={quoteattr(k)} value={quoteattr(v)} />"
                    for k, v in ((ATTEMPT_OUTCOME, "failed"), (ATTEMPT_ERROR, message), (ATTEMPT_TEXT, text)))
                    + "</properties>")
            parts.append(f"<testcase {attrs}>{props}<failure message={quoteattr(message)}>{escape(text)}"
                         f"</failure></testcase>")
        elif case.skip:
            parts.append(f"<testcase {attrs}><skipped type=\"pytest.skip\" message={quoteattr(case.skip)}>"
                         f"{escape(case.skip)}</skipped></testcase>")
        else:
            parts.append(f"<testcase {attrs} />")
    parts.append("</testsuite>")
    return "".join(parts)


def report_xml(suites: list[str]) -> str:
    """The job's report: its invocations' suites in one ``<testsuites>``."""
    return '<?xml version="1.0" encoding="utf-8"?><testsuites>' + "".join(suites) + "</testsuites>"
