"""`HostKVMirror`: host-memory copy of a KV pool's raw storage, for offloading tokens (HiCache-like).

The peer's offload copied the FP4 data but not the scale buffers, so restored tokens decoded with
whatever scales happened to be in the destination rows. Here a row always travels as data + scales
of every stream, and the per-layer nvfp4 global scales travel with them.

nvfp4 global scales are recorded per host row (per layer and stream): the scale the row was
encoded with. So backups from pools with different global scales (``mirror.pool`` reassigned to
a pool of the same layout) can share one mirror without one overwriting another's scale. A
restore adopts the recorded scale; host rows whose layer was backed up with different global
scales cannot be restored together into one pool layer (one scale per layer), so such a restore
raises ValueError before writing anything.
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
    buffers ``[host_size, ...]`` per stream, plus (nvfp4) ``row_global_scales[(layer_id, stream)]``,
    fp32 ``[host_size]``: the global scale each host row was encoded with (NaN: none, the row was
    never backed up or its layer's scale was unset, i.e. it holds only zero blocks).

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
        self.row_global_scales: dict[tuple[int, str], torch.Tensor] = {}
        for name, lay in pool.layouts.items():
            if lay.has_global_scale:
                for layer_id in self._layers():
                    self.row_global_scales[(layer_id, name)] = torch.full((host_size,), float("nan"))
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
        ``host_loc`` (int64 on CPU, distinct): data, scales and the layers' global scales (recorded
        per host row). Empty locations are validated and copy nothing."""
        self._check(device_loc, host_loc, writes_device=False)
        if host_loc.numel() == 0:
            return
        for layer_id in self._layers():
            for name, rows in self.pool.read_raw_rows(layer_id, device_loc).items():
                i = layer_id - self.pool.start_layer
                scatter_rows(self.data[name][i], host_loc, rows.data.to(_CPU))
                host_scales = self.scales[name][i]
                if host_scales is not None:
                    scatter_rows(host_scales, host_loc, rows.scales.to(_CPU))  # type: ignore[union-attr]
                g, state = self.pool.global_scale_state(layer_id, name)
                if g is not None:
                    value = float(g) if state is not ScaleState.UNSET else float("nan")
                    self.row_global_scales[(layer_id, name)].index_fill_(0, host_loc, value)

    def restore(self, host_loc: torch.Tensor, device_loc: torch.Tensor) -> None:
        """Copy host rows ``host_loc`` back to pool rows ``device_loc`` (distinct except slot 0) of
        every layer, data and scales together. Global scales recorded at backup are adopted by
        the pool. Raises ValueError before writing anything if the rows of one layer were backed
        up with different global scales, or if the pool's scale for a layer is already fixed at a
        different value (the rows would decode wrongly). Empty locations are validated and copy
        nothing (no scale is adopted)."""
        self._check(device_loc, host_loc, writes_device=True)
        if host_loc.numel() == 0:
            return
        self.pool.adopt_global_scales(self._scales_of_rows(host_loc))
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

    def _scales_of_rows(self, host_loc: torch.Tensor) -> dict[tuple[int, str], float]:
        """``{(layer_id, stream): scale}`` the rows ``host_loc`` were encoded with (layers whose rows
        recorded none are left out); ValueError if rows of one layer disagree."""
        out: dict[tuple[int, str], float] = {}
        for key, per_row in self.row_global_scales.items():
            recorded = per_row.index_select(0, host_loc)
            values = recorded[~recorded.isnan()].unique()
            if values.numel() > 1:
                layer_id, name = key
                raise ValueError(f"host rows {host_loc.tolist()} of layer {layer_id} {name} were backed up "
                                 f"with different nvfp4 global scales {values.tolist()}; one pool layer "
                                 f"has one scale, so they cannot be restored together")
            if values.numel() == 1:
                out[key] = float(values[0])
        return out

    def size_bytes(self) -> int:
        """Host bytes held: data + scale buffers of every layer and stream (the per-row global-scale
        record, 4 bytes per row, layer and nvfp4 stream, is bookkeeping and not counted)."""
        return sum(t.nbytes for bufs in (*self.data.values(), *self.scales.values())
                   for t in bufs if t is not None)
