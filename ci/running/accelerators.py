"""The probes of the backends torch.cuda does not cover: Intel XPU, Ascend NPU and TPU.

Each imports its runtime lazily and returns a `Hardware` (no device, and why, when the runtime is
missing or sees nothing):

* ``xpu``: ``torch.xpu`` (``is_available``, ``device_count``, ``get_device_name``,
  ``get_device_properties(i).total_memory``);
* ``npu``: ``torch_npu``, which registers ``torch.npu`` with the same calls;
* ``tpu``: ``jax.devices("tpu")`` (``device_kind`` such as ``TPU v5 lite``; memory from
  ``memory_stats()["bytes_limit"]`` where it reports one), else ``torch_xla``'s runtime (TPU count
  only). Without either, TPUs cannot be checked here, and the source says so.

ROCm shares torch.cuda with CUDA (`ci.running.hardware.probe_torch` tells them apart by
``torch.version.hip``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ci.running.devices import Device, Hardware

GIB = 2**30


# Each runtime is imported by name (selection sees the imports); any failure, a broken install
# included, means "no such runtime here", which the probe's source then says.
def _torch() -> Any | None:
    try:
        import torch
    except Exception:  # noqa: BLE001
        return None
    return torch


def _torch_npu() -> Any | None:
    try:
        import torch_npu
    except Exception:  # noqa: BLE001
        return None
    return torch_npu


def _jax() -> Any | None:
    try:
        import jax
    except Exception:  # noqa: BLE001
        return None
    return jax


def _xla_runtime() -> Any | None:
    try:
        import torch_xla.runtime as runtime
    except Exception:  # noqa: BLE001
        return None
    return runtime


def _torch_devices(api: Any, backend: str, what: str) -> Hardware:
    """Devices of a torch device module shaped like torch.cuda (torch.xpu, torch.npu)."""
    if not api.is_available():
        return Hardware((), source=f"{what}: not available")
    devices = []
    for i in range(api.device_count()):
        memory = getattr(api.get_device_properties(i), "total_memory", None)
        devices.append(Device(None, str(api.get_device_name(i)), None if memory is None else memory / GIB,
                              backend=backend))
    return Hardware(tuple(devices), source=what)


def probe_xpu() -> Hardware:
    """Intel GPUs, through ``torch.xpu``."""
    torch = _torch()
    if torch is None:
        return Hardware((), source="xpu: torch not installed")
    if getattr(torch, "xpu", None) is None:
        return Hardware((), source="xpu: this torch has no torch.xpu")
    return _torch_devices(torch.xpu, "xpu", "torch.xpu")


def probe_npu() -> Hardware:
    """Ascend NPUs, through ``torch_npu`` (which adds ``torch.npu``)."""
    if _torch_npu() is None:
        return Hardware((), source="npu: torch_npu not installed")
    torch = _torch()
    if torch is None or getattr(torch, "npu", None) is None:
        return Hardware((), source="npu: torch_npu did not register torch.npu")
    return _torch_devices(torch.npu, "npu", "torch_npu")


def _jax_tpus(jax: Any) -> Hardware:
    try:
        found = jax.devices("tpu")
    except RuntimeError as exc:  # jax raises RuntimeError when the platform is absent
        return Hardware((), source=f"jax: no TPU ({str(exc).splitlines()[0] if str(exc) else 'RuntimeError'})")
    devices = []
    for d in found:
        stats = d.memory_stats() if hasattr(d, "memory_stats") else None
        limit = (stats or {}).get("bytes_limit")
        devices.append(Device(None, str(getattr(d, "device_kind", "")), None if limit is None else limit / GIB,
                              backend="tpu"))
    return Hardware(tuple(devices), source="jax")


def _xla_tpus(runtime: Any) -> Hardware:
    if runtime.device_type() != "TPU":
        return Hardware((), source=f"torch_xla: device type {runtime.device_type()!r}, not TPU")
    count = runtime.global_runtime_device_count()
    return Hardware((Device(None, "", None, backend="tpu"),) * count,
                    source="torch_xla (no device names or memory: a tier's device_name and min_memory_gib fail here)")


def probe_tpu() -> Hardware:
    """TPUs, through jax if importable, else torch_xla's runtime; else none, saying they cannot
    be checked here."""
    jax = _jax()
    if jax is not None:
        return _jax_tpus(jax)
    runtime = _xla_runtime()
    if runtime is not None:
        return _xla_tpus(runtime)
    return Hardware((), source="tpu: neither jax nor torch_xla is importable, so TPUs cannot be checked here")


PROBES: dict[str, Callable[[], Hardware]] = {"xpu": probe_xpu, "npu": probe_npu, "tpu": probe_tpu}

__all__ = ["PROBES", "probe_npu", "probe_tpu", "probe_xpu"]
