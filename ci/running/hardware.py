"""What accelerators this machine has, and whether a registry `Tier` can run here.

`probe` asks the runtime of a tier's backend (`ci.running.devices` says what fits):

* ``cuda`` and ``rocm``: ``torch.cuda``, which on a ROCm build of torch is HIP; ``torch.version.hip``
  tells them apart. A CUDA device has its compute capability (``sm_90``); a ROCm device its gfx
  target from ``gcnArchName`` (``gfx942:sramecc+:xnack-`` -> ``gfx942``). ``nvlink``: the device
  has at least one active NVLink link (``nvidia-smi nvlink --status``, asked only on CUDA machines
  with two or more GPUs; without nvidia-smi no device counts as linked);
* ``xpu``, ``npu``, ``tpu``: `ci.running.accelerators` (torch.xpu, torch_npu, jax or torch_xla).

The ``cpu`` tier is always satisfied. The runtimes are imported lazily, only when a tier of their
backend is checked, so linting and CPU-only test runs never pay for them. When a tier's backend
finds no device, `LazyHardware` asks the other backends too, so the refusal says what the machine
is (``1x Ascend910B (npu, 61.0 GiB): a npu device, not cuda``).

For tests only: the environment variable ``CI_HARDWARE_OVERRIDE`` replaces the probes with a fake
machine: comma-separated items ``<kind>[x<count>][:name=<device name>][:mem=<GiB>]
[:features=<f1+f2>]``, where kind is ``sm_<cc>`` (CUDA), ``gfx<target>`` (ROCm), ``xpu``, ``npu``
or ``tpu``; or ``none``. Example: ``sm_90x2:name=NVIDIA H100 80GB HBM3:mem=79.6`` (two H100s).
Without ``features=`` a fake CUDA device has its capability's features (fp8/fp4) and no nvlink;
without ``name=`` or ``mem=`` it has none, so it fits no tier that asks for them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from ci.registry import BACKENDS, FEATURES, Tier, default_backend, sm_capability
from ci.running.accelerators import PROBES
from ci.running.devices import Device, Hardware, capability_features, missing, requirement

OVERRIDE_ENV = "CI_HARDWARE_OVERRIDE"


def parse_override(text: str) -> Hardware:
    """Parse a fake machine (see the module docstring). Raises ValueError naming the bad item."""
    devices: list[Device] = []
    for item in (part.strip() for part in text.split(",")):
        if item.lower() in ("", "none", "cpu"):
            continue
        head, *attributes = item.split(":")
        kind = _OVERRIDE_HEAD.fullmatch(head.strip())
        try:
            if kind is None:
                raise ValueError
            arch, count = kind["kind"], int(kind["count"] or 1)
            capability = sm_capability(arch) if arch.startswith("sm_") else None
            backend = default_backend(arch) or arch
            if backend not in BACKENDS:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"{OVERRIDE_ENV}: bad item {item!r}; expected 'sm_<major><minor>[x<count>]' such as 'sm_100x4' "
                f"(or gfx<target>, xpu, npu, tpu for the other backends), optionally followed by ':name=...', "
                f"':mem=<GiB>', ':features=fp8+nvlink', or 'none'") from None
        if count < 1:
            raise ValueError(f"{OVERRIDE_ENV}: bad item {item!r}; the count must be >= 1")
        fields = {"name": "", "mem": None, "features": None}
        for attribute in attributes:
            key, eq, value = attribute.partition("=")
            if not eq or key not in fields:
                raise ValueError(f"{OVERRIDE_ENV}: bad attribute {attribute!r} in {item!r}; "
                                 f"expected name=..., mem=<GiB> or features=<a+b>")
            fields[key] = value
        if fields["features"] is not None:
            features = frozenset(f for f in fields["features"].split("+") if f)
        else:
            features = capability_features(capability) if capability is not None else frozenset()
        unknown = sorted(features - FEATURES.keys())
        if unknown:
            raise ValueError(f"{OVERRIDE_ENV}: unknown feature(s) {', '.join(unknown)} in {item!r}")
        try:
            memory = None if fields["mem"] is None else float(fields["mem"])
        except ValueError:
            raise ValueError(f"{OVERRIDE_ENV}: mem must be a number of GiB in {item!r}") from None
        devices += [Device(capability, fields["name"], memory, features, backend,
                           "" if backend in ("xpu", "npu", "tpu") else arch)] * count
    return Hardware(tuple(devices), source=f"{OVERRIDE_ENV}={text}")


_OVERRIDE_HEAD = re.compile(r"(?P<kind>sm_[0-9]+|gfx[0-9a-f]+|xpu|npu|tpu)(?:x(?P<count>[0-9]+))?")


_NVLINK_GPU = re.compile(r"^GPU (\d+): .*\(UUID: (GPU-[0-9A-Fa-f-]+)\)\s*$")
_NVLINK_UP = re.compile(r"^\s+Link \d+: [0-9.]+ [GMK]?B/s\s*$")


def parse_nvlink_status(text: str) -> set[str]:
    """UUIDs (lower case, ``gpu-...``) of the GPUs with at least one active link, from the output
    of ``nvidia-smi nvlink --status``: per GPU a ``GPU 0: NAME (UUID: GPU-...)`` line, then one
    ``Link N: 26.562 GB/s`` line per active link (``Link N: <inactive>`` otherwise)."""
    linked: set[str] = set()
    current: str | None = None
    for line in text.splitlines():
        header = _NVLINK_GPU.match(line)
        if header:
            current = header.group(2).lower()
        elif current is not None and _NVLINK_UP.match(line):
            linked.add(current)
    return linked


def _nvlinked_uuids() -> tuple[set[str], str]:
    """(linked GPU UUIDs, a note for `Hardware.source`) from nvidia-smi; empty when unavailable."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return set(), "nvlink: nvidia-smi not found"
    try:
        result = subprocess.run([exe, "nvlink", "--status"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return set(), f"nvlink: nvidia-smi failed ({exc})"
    if result.returncode != 0:
        return set(), f"nvlink: nvidia-smi exited {result.returncode}"
    return parse_nvlink_status(result.stdout), "nvlink: nvidia-smi"


def probe(backend: str = "cuda") -> Hardware:
    """The local machine's devices of ``backend``: `CI_HARDWARE_OVERRIDE` if set (every backend),
    else that backend's runtime (cuda and rocm: torch.cuda, whichever torch was built for)."""
    override = os.environ.get(OVERRIDE_ENV)
    if override is not None:
        return parse_override(override)
    if backend in PROBES:
        return PROBES[backend]()
    return probe_torch() if backend in ("cuda", "rocm") else Hardware((), source=f"{backend}: nothing to probe")


def probe_torch() -> Hardware:
    """torch.cuda's devices: CUDA GPUs, or ROCm GPUs on a ROCm build (``torch.version.hip`` set)."""
    try:
        import torch  # lazy: only GPU tiers need it
    except ImportError:
        return Hardware((), source="torch not installed")
    hip = getattr(getattr(torch, "version", None), "hip", None)
    if not torch.cuda.is_available():
        return Hardware((), source=f"torch: {'ROCm (HIP ' + str(hip) + ')' if hip else 'CUDA'} not available")
    count = torch.cuda.device_count()
    if hip:
        devices = []
        for i in range(count):
            props = torch.cuda.get_device_properties(i)
            target = str(getattr(props, "gcnArchName", "")).split(":")[0]
            devices.append(Device(None, props.name, props.total_memory / 2**30, backend="rocm", arch=target))
        return Hardware(tuple(devices), source=f"torch.cuda on ROCm (HIP {hip})")
    linked, note = _nvlinked_uuids() if count >= 2 else (set(), "nvlink: one GPU")
    devices = []
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        capability = (props.major, props.minor)
        uuid = getattr(props, "uuid", None)
        features = capability_features(capability)
        if uuid is not None and f"gpu-{str(uuid).lower().removeprefix('gpu-')}" in linked:
            features |= {"nvlink"}
        devices.append(Device(capability, props.name, props.total_memory / 2**30, features))
    return Hardware(tuple(devices), source=f"torch.cuda; {note}")


class LazyHardware:
    """Probes each backend once, on first use (so a run with only CPU tiers never imports torch)."""

    def __init__(self) -> None:
        self._found: dict[str, Hardware] = {}

    def get(self, backend: str = "cuda") -> Hardware:
        """What `probe` finds for ``backend`` (cuda and rocm share one probe of torch.cuda)."""
        key = "cuda" if backend == "rocm" else backend
        if key not in self._found:
            self._found[key] = probe(backend)
        return self._found[key]

    def missing(self, tier: Tier) -> str | None:
        """Like `missing`, probing only if ``tier`` needs a GPU. When the tier's backend has no
        device here, the other backends are asked too, so the answer says what the machine is."""
        if not tier.needs_gpu:
            return None
        hardware = self.get(tier.backend)
        gap = missing(tier, hardware)
        if gap is None or os.environ.get(OVERRIDE_ENV) is not None \
                or any(d.backend == tier.backend for d in hardware.devices):
            return gap
        for other in ("cuda", *PROBES):
            if other not in (tier.backend, "cuda" if tier.backend == "rocm" else None):
                found = self.get(other)
                if found.devices:
                    hardware = Hardware(hardware.devices + found.devices, hardware.source)
        return missing(tier, hardware)


__all__ = ["OVERRIDE_ENV", "Device", "Hardware", "LazyHardware", "capability_features", "missing",
           "parse_nvlink_status", "parse_override", "probe", "probe_torch", "requirement"]
