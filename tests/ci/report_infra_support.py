"""A history with a bad runner (for tests/ci/test_report_infra.py): nine push commits ``c0``..``c8``
of the default branch, each with three reports on tier gpu_h100, shards 0 and 1 on runner
``h100-03`` and shard 2 on one of the pool's three others (`GOODS`, ``h100-01`` at c0, c3, c6):

- shard 0, `LONG_A`: a CUDA error (infra) at c0, c2, c4, c6 and c8; passes between.
- shard 1, `LONG_B`: a CUDA error at c1, c3, c5, c7 and c8; passes between. `LONG_A` and `LONG_B`
  share their first 60 characters. Also `HOSTILE_FILE`, whose test is named `HOSTILE_TEST`: it
  fails at c8 only, with `HOSTILE_ERROR` (markup, Markdown, a long line): a real failure.
- shard 2, ``tests/test_ok.py``: passes, except an NCCL error (infra) at c3; and `OK_MORE` more
  tests of that file that pass, so ``h100-03``'s 10 failed test runs of 27 stand out from the
  pool's other three runners' 1 of 81 (`ci.history.runners.out_of_line`).

So ``h100-03``, one runner of four, has infra failures in 10 of its 18 reports (out of line with
its pool) and ``h100-01`` in 1 of 3 (not); failing now: `LONG_A` and `LONG_B` (infra) and
`HOSTILE_FILE` (a test failure).

`build_pool_history`: the same commits, the four runners taking the four files' shards in turn, and
from c5 on every test failing with a CUDA error on every runner (a driver update): each runner has
infra failures in 4 of its 9 reports, none is out of line, and each test's spell is the pool's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import open_store
from tests.ci.history_support import Case, write_report
from tests.ci.tree_testutil import write

REPO = "acme/infra"
COMMITS = 9
SHAS = [f"c{i}" + "0" * 6 + f"{i:x}" * 4 for i in range(COMMITS)]
PREFIX = "test/registered/attention/test_attention_backend_flashinfer_"  # 60 characters
LONG_A, LONG_B = PREFIX + "decode_paged_kv.py", PREFIX + "prefill_ragged.py"
HOSTILE_FILE = "tests/test_hostile.py"
HOSTILE_TEST = "<img src=x onerror=alert(1)>"
HOSTILE_ERROR = ('AssertionError: <img src=x onerror="window.__pwned=5"> **bold** [x](javascript:1) '
                 + "expected the paged KV cache to hold every token " * 3 + "THE END")
CUDA = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
NCCL = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"
BAD, GOOD = "h100-03", "h100-01"
GOODS = (GOOD, "h100-02", "h100-04")
POOL = (GOOD, "h100-02", BAD, "h100-04")
DRIVER_UPDATE = 5  # the first commit of `build_pool_history` failing everywhere
FILES = [LONG_A, LONG_B, HOSTILE_FILE, "tests/test_ok.py"]
OK_MORE = 8  # more passing tests on h100-01: enough test runs for h100-03 to be out of line with it

REGISTRY = "version: 1\ntiers:\n" + (
    "  gpu_h100: {description: h100, runner_labels: [gpu-h100], gpu_count: 1, arch: sm_90}\n"
    "tests:\n") + "".join(f'  {p}: {{tiers: [gpu_h100], est_time: 1, owner: "@gpu", status: active}}\n' for p in FILES)


def write_repo(root: Path) -> Path:
    """The repository (registry and test files) under ``root``; its registry path."""
    write(root, {"registry.yaml": REGISTRY, **{p: "def test_x():\n    pass\n" for p in FILES}})
    return root / "registry.yaml"


def _case(file: str, error: str, name: str = "test_x") -> Case:
    return Case(file, name, "failed", error, f"E   {error}") if error else Case(file, name)


def _shards(commit: int) -> list[tuple[str, str, list[Case]]]:
    """(shard, runner, cases) of one commit."""
    return [("0", BAD, [_case(LONG_A, CUDA if commit % 2 == 0 else "")]),
            ("1", BAD, [_case(LONG_B, CUDA if commit % 2 or commit == 8 else ""),
                        _case(HOSTILE_FILE, HOSTILE_ERROR if commit == 8 else "", HOSTILE_TEST)]),
            ("2", GOODS[commit % 3], [_case("tests/test_ok.py", NCCL if commit == 3 else "")]
             + [_case("tests/test_ok.py", "", f"test_{i}") for i in range(OK_MORE)])]


def build_history(store_location: str, directory: Path) -> None:
    """Ingest the history of the module docstring into the store at ``store_location``."""
    _ingest(store_location, directory, _shards)


def _pool_shards(commit: int) -> list[tuple[str, str, list[Case]]]:
    """(shard, runner, cases) of one commit of `build_pool_history`."""
    return [(str(k), POOL[(k + commit) % len(POOL)], [_case(f, CUDA if commit >= DRIVER_UPDATE else "")])
            for k, f in enumerate(FILES)]


def build_pool_history(store_location: str, directory: Path) -> None:
    """Ingest the pool-wide history of the module docstring into the store at ``store_location``."""
    _ingest(store_location, directory, _pool_shards)


def _ingest(store_location: str, directory: Path, shards: Callable[[int], list[tuple[str, str, list[Case]]]]) -> None:
    with open_store(store_location) as store:
        for commit, sha in enumerate(SHAS):
            for shard, runner, cases in shards(commit):
                ident = RunIdentity(REPO, sha, "push", "gpu_h100", runner=runner, shard=shard, run_id=str(commit),
                                    run_url=f"https://ci.example/run/{commit}")
                assert ingest(store, prepare(write_report(directory, cases), ident)).added
