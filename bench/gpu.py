"""One command checks a GPU machine: ``python -m bench gpu [--interpret] [--registry=PATH]``.

Needs no network and no bootstrap: it runs with the torch and triton the interpreter has, and
prints their versions, the device, CUDA's version and the driver's. Then, in order:

a. every GPU tier of the registry this machine fits, through ``python -m ci run --tier T``
   (`bench._gpu_tiers`): a row per tier, failing on any failure and on any skip outside the
   registry's ``may_skip``/quarantined files; a machine that fits no GPU tier fails the row;
b. each Triton kernel of fp4kv against the torch reference on edge inputs and over a million
   blocks, bit for bit (`bench._gpu_kernels`): a row per kernel;
c. each kernel's bandwidth over a device-to-device copy of the same bytes, goal >= 0.8x: a row
   per kernel, reported, never a failure.

One table at the end; exit 1 when a row of a or b fails, 0 otherwise. Exit 2, with one line,
without CUDA (unless ``--interpret``), without torch or triton, with TRITON_INTERPRET set
without ``--interpret``, or on a bad argument. ``--interpret`` runs b and c on the CPU under
``TRITON_INTERPRET=1`` with small sizes and skips a (how the command is tested without a GPU).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from bench.table import format_table, ratio

ROOT = Path(__file__).resolve().parents[1]
HEADERS = ["check", "detail", "passed", "failed", "skipped", "GB/s", "of copy", "goal", "verdict"]
USAGE = "usage: python -m bench gpu [--interpret] [--registry=PATH]"


class UsageError(ValueError):
    """A bad argument or a machine this command cannot check; the message is the one line to print."""


def parse_args(argv: list[str]) -> tuple[bool, Path]:
    """(--interpret given, the registry file). Raises UsageError naming a bad argument."""
    interpret, registry = False, ROOT / "registry.yaml"
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--interpret":
            interpret = True
        elif arg.startswith("--registry="):
            registry = Path(arg.split("=", 1)[1])
        elif arg == "--registry" and args:
            registry = Path(args.pop(0))
        else:
            raise UsageError(f"unknown argument {arg!r}; {USAGE}")
    if not registry.is_file():
        raise UsageError(f"no registry file {registry}; give --registry=PATH")
    return interpret, registry.resolve()


def _driver() -> str:
    """The NVIDIA driver's version from nvidia-smi, or why it is unknown."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown (no nvidia-smi)"
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({type(exc).__name__})"
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"


def environment(interpret: bool) -> tuple[object, str]:
    """(the torch device to check, a line naming the versions and the device). Imports torch and
    triton (after TRITON_INTERPRET is settled); raises UsageError when one is missing, when the
    variable is set without ``--interpret``, or without CUDA and without ``--interpret``."""
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: it reads it then
        # numpy runs the interpreter and warns of the overflows and NaNs the edge inputs hold on purpose
        warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton")
    elif os.environ.get("TRITON_INTERPRET", "0").strip().lower() not in {"", "0", "false", "off", "no"}:
        raise UsageError("TRITON_INTERPRET is set: the kernels would be interpreted, not compiled; "
                         "unset it, or pass --interpret")
    try:
        import torch
    except ImportError as exc:
        raise UsageError(f"torch is not importable by {sys.executable} ({exc}); install it first") from None
    try:
        import triton
    except ImportError as exc:
        raise UsageError(f"triton is not importable by {sys.executable} ({exc}); install it first") from None
    versions = f"torch {torch.__version__}, triton {triton.__version__}"
    if interpret:
        return torch.device("cpu"), f"{versions}; device: cpu under TRITON_INTERPRET=1 (--interpret)"
    if not torch.cuda.is_available():
        raise UsageError(f"no CUDA device: {versions} (CUDA build: {torch.version.cuda or 'none'}) sees none; "
                         "run it on a GPU machine, or pass --interpret to check the kernels on the CPU")
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    return device, (f"{versions}; device: {props.name} (sm_{props.major}{props.minor}, "
                    f"{props.total_memory / 2 ** 30:.1f} GiB); CUDA {torch.version.cuda}; driver {_driver()}")


def _tier_table_rows(registry_path: Path, interpret: bool) -> tuple[list[list[str]], bool]:
    from bench._gpu_tiers import fitting_tiers, run_tier
    from ci.registry import load_registry

    if interpret:
        return [["GPU tiers", "not run: --interpret (no GPU here)", "-", "-", "-", "-", "-", "-", "skipped"]], True
    fits, gaps = fitting_tiers(load_registry(registry_path))
    if not fits:
        why = "; ".join(f"{t}: {gap}" for t, gap in gaps.items()) or "the registry has no GPU tier"
        print(f"part a: no GPU tier fits this machine ({why})", flush=True)
        return [["GPU tiers", "none fits this machine", "0", "0", "0", "-", "-", "-", "FAIL"]], False
    rows, ok = [], True
    for tier in fits:
        print(f"part a: python -m ci run --tier {tier} ...", flush=True)
        row = run_tier(registry_path, registry_path.parent, tier)
        if row.problem:
            print(f"part a: tier {tier} FAILED: {row.problem}; the end of its output:\n{row.log_tail}", flush=True)
        ok &= row.ok
        skipped = f"{row.skipped} ({row.excused} may_skip)" if row.excused else str(row.skipped)
        rows.append([f"tier {tier}", f"ci run --tier {tier}", str(row.passed), str(row.failed), skipped,
                     "-", "-", "-", "ok" if row.ok else "FAIL"])
    return rows, ok


def main(argv: list[str]) -> int:
    try:
        interpret, registry_path = parse_args(argv)
        device, env_line = environment(interpret)
    except UsageError as exc:
        print(f"python -m bench gpu: {exc}", file=sys.stderr)
        return 2
    from bench import _gpu_kernels as kernels  # imports torch and fp4kv: after the checks above

    print(env_line, flush=True)
    sizes = kernels.INTERPRET_SIZES if interpret else kernels.GPU_SIZES
    rows, ok = _tier_table_rows(registry_path, interpret)
    for row in kernels.exact_rows(device, sizes, lambda line: print(f"part b: {line}", flush=True)):
        if row.first_problem:
            print(f"part b: {row.kernel} MISMATCH: {row.first_problem}", flush=True)
        ok &= row.ok
        rows.append([f"exact {row.kernel}", f"{row.blocks:,} blocks", str(row.cases - row.failed), str(row.failed),
                     "-", "-", "-", "bit-exact", "ok" if row.ok else "FAIL"])
    for speed in kernels.speed_rows(device, sizes):
        met = speed.of_copy >= kernels.GOAL
        rows.append([f"speed {speed.kernel}", f"{speed.shape}, median of {sizes.repeat}", "-", "-", "-",
                     f"{speed.gbps:.3g}", f"{ratio(speed.of_copy)}x", f">= {kernels.GOAL}x",
                     "met" if met else "below goal (reported)"])
    print()
    print(format_table(HEADERS, rows, title=f"python -m bench gpu: {env_line}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
