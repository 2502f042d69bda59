"""`HostKVMirror`: host-memory copy of a KV pool's raw storage, for offloading tokens (HiCache-like).

The peer's offload copied the FP4 data but not the scale buffers, so restored tokens decoded with
whatever scales happened to be in the destination rows. Here a row always travels as data + scales
of every stream, and the per-layer nvfp4 global scales travel with them.
"""

from __future__ import annotations

import torch

from fp4kv.mem_cache.codec import EncodedRows
from fp4kv.mem_cache.rows import gather_rows, scatter_rows
from fp4kv.mem_cache.token_store import ScaleState, TokenKVStore
from fp4kv.mem_cache.validate import check_loc

_CPU = torch.device("cpu")


class HostKVMirror:
    """``host_size`` host rows mirroring ``pool``'s raw layout for every layer: data and scale
    buffers ``[host_size, ...]`` per stream, plus a snapshot of each layer's global scales.

    Host buffers are pinned when the pool is on CUDA (``pin_memory=None``), so copies can overlap.
    Host rows are plain storage: no padding slot, every row ``0..host_size-1`` is usable.
    """

    def __init__(self, pool: TokenKVStore, host_size: int, pin_memory: bool | None = None):
        if not isinstance(pool, TokenKVStore):
            raise ValueError(f"pool must be a token-to-KV pool, got {type(pool).__name__}")
        if not isinstance(host_size, int) or isinstance(host_size, bool) or host_size < 1:
            raise ValueError(f"host_size must be an int >= 1, got {host_size!r}")
        self.pool = pool
        self.host_size = host_size
        pin = (pool.device.type == "cuda" and torch.cuda.is_available()) if pin_memory is None else pin_memory
        self.pin_memory = pin
        self.data: dict[str, list[torch.Tensor]] = {}
        self.scales: dict[str, list[torch.Tensor | None]] = {}
        self.global_scales: dict[tuple[int, str], float] = {}  # only scales that were set at backup
        for name, lay in pool.layouts.items():
            self.data[name] = [torch.zeros((host_size, *lay.data_shape), dtype=lay.data_dtype,
                                           pin_memory=pin) for _ in range(pool.layer_num)]
            self.scales[name] = [
                None if lay.scale_shape is None else
                torch.zeros((host_size, *lay.scale_shape), dtype=torch.uint8, pin_memory=pin)
                for _ in range(pool.layer_num)]

    def _layers(self) -> range:
        return range(self.pool.start_layer, self.pool.end_layer)

    def _check(self, device_loc: torch.Tensor, host_loc: torch.Tensor, writes_device: bool) -> None:
        check_loc(device_loc, self.pool.rows, self.pool.device, name="device_loc",
                  reject_duplicates=writes_device)
        check_loc(host_loc, self.host_size, _CPU, name="host_loc",
                  reject_duplicates=not writes_device, padding_slot=None)
        if device_loc.numel() != host_loc.numel():
            raise ValueError(f"device_loc has {device_loc.numel()} slots but host_loc has {host_loc.numel()}")

    def backup(self, device_loc: torch.Tensor, host_loc: torch.Tensor) -> None:
        """Copy rows ``device_loc`` (int64 on the pool's device) of every layer to host rows
        ``host_loc`` (int64 on CPU, distinct): data, scales and the layers' global scales."""
        self._check(device_loc, host_loc, writes_device=False)
        for layer_id in self._layers():
            for name, rows in self.pool.read_raw_rows(layer_id, device_loc).items():
                i = layer_id - self.pool.start_layer
                scatter_rows(self.data[name][i], host_loc, rows.data.to(_CPU))
                host_scales = self.scales[name][i]
                if host_scales is not None:
                    scatter_rows(host_scales, host_loc, rows.scales.to(_CPU))  # type: ignore[union-attr]
                g, state = self.pool.global_scale_state(layer_id, name)
                if g is not None and state is not ScaleState.UNSET:
                    self.global_scales[(layer_id, name)] = float(g)

    def restore(self, host_loc: torch.Tensor, device_loc: torch.Tensor) -> None:
        """Copy host rows ``host_loc`` back to pool rows ``device_loc`` (distinct except slot 0) of
        every layer, data and scales together. Global scales recorded at backup are adopted by
        the pool; if the pool's scale for a layer is already fixed at a different value, raises
        ValueError before writing anything (the rows would decode wrongly)."""
        self._check(device_loc, host_loc, writes_device=True)
        self.pool.adopt_global_scales(dict(self.global_scales))
        dev = self.pool.device
        for layer_id in self._layers():
            i = layer_id - self.pool.start_layer
            rows = {}
            for name in self.pool.layouts:
                host_scales = self.scales[name][i]
                rows[name] = EncodedRows(
                    gather_rows(self.data[name][i], host_loc).to(dev),
                    None if host_scales is None else gather_rows(host_scales, host_loc).to(dev))
            self.pool.write_raw_rows(layer_id, device_loc, rows)

    def size_bytes(self) -> int:
        """Host bytes held: data + scale buffers of every layer and stream."""
        return sum(t.nbytes for bufs in (*self.data.values(), *self.scales.values())
                   for t in bufs if t is not None)
