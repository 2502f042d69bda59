"""`TokenKVStore`: the per-layer, per-token storage that the MHA and MLA pools are built on.

A store holds one or more *streams* (``k`` and ``v`` for MHA, ``kv`` for the MLA latent). Each
stream has, per layer, a data buffer ``[rows, *data_shape]``, for FP4 a uint8 scale buffer
``[rows, *scale_shape]``, and for nvfp4 an fp32 global scale. ``rows = size + page_size``; row 0 is
the padding slot. Data and scales of a row are always written together, after every argument is
validated and every stream is encoded, so a rejected or failing call writes nothing.
"""

from __future__ import annotations

import enum
import math
from collections import OrderedDict
from dataclasses import dataclass

import torch

from fp4kv.mem_cache.codec import EncodedRows, NVFP4Codec, StorageLayout, make_codec
from fp4kv.mem_cache.kv_dtype import KVCacheFormat, parse_kv_cache_dtype
from fp4kv.mem_cache.rows import gather_rows, scatter_rows
from fp4kv.mem_cache.validate import check_loc, check_rows, resolve_device
from fp4kv.quant.nvfp4 import is_valid_global_scale


@dataclass(frozen=True)
class StreamSpec:
    """One stored tensor per token: ``name`` (``k``/``v``/``kv``), ``heads`` x ``dim`` values."""

    name: str
    heads: int
    dim: int


@dataclass(frozen=True)
class RawBuffers:
    """The raw storage of one stream in one layer (views of the live buffers, not copies).

    ``data``: ``[rows, *data_shape]`` in the storage dtype (uint8 for FP4: two E2M1 codes per byte,
    element 2j in the low nibble). ``scales``: uint8 ``[rows, *scale_shape]`` (FP4 only).
    ``global_scale``: fp32 0-dim tensor, the nvfp4 dequantization multiplier (nvfp4 only; 1.0
    while unset, when every stored block is zero and decodes to 0 whatever the scale).
    """

    data: torch.Tensor
    scales: torch.Tensor | None
    global_scale: torch.Tensor | None

    def nbytes(self) -> int:
        return sum(t.nbytes for t in (self.data, self.scales, self.global_scale) if t is not None)


class ScaleState(enum.Enum):
    UNSET = "unset"            # no nonzero data written, no calibration: the next write computes it
    CALIBRATED = "calibrated"  # set via the API, no data written with it yet: may still change
    FIXED = "fixed"            # data was written with it: never changes again


class TokenKVStore:
    """Shared machinery of the token-to-KV pools; see `MHATokenToKVPool` for the public contract.

    ``dequant_cache_layers``: FP4 only. 0 (default) means ``get_*_buffer`` dequantizes the whole
    layer on every call (use ``get_kv(layer_id, loc)`` on hot paths). N > 0 keeps the dequantized
    buffers of the N most recently read layers and updates them in place on every write to those
    layers (write-through), so they never go stale; they cost ``rows*heads*dim`` compute-dtype
    elements per stream each. Treat returned cached buffers as read-only.
    """

    def __init__(self, size: int, page_size: int, dtype: object, layer_num: int,
                 device: torch.device | str, start_layer: int, streams: list[StreamSpec],
                 compute_dtype: torch.dtype | None = None, dequant_cache_layers: int = 0):
        for label, value, low in (("size", size, 1), ("page_size", page_size, 1),
                                  ("layer_num", layer_num, 1), ("start_layer", start_layer, 0),
                                  ("dequant_cache_layers", dequant_cache_layers, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{label} must be an int >= {low}, got {value!r}")
        self.fmt: KVCacheFormat = parse_kv_cache_dtype(dtype)
        self.codec = make_codec(self.fmt)
        self.size = size
        self.page_size = page_size
        self.rows = size + page_size
        self.layer_num = layer_num
        self.start_layer = start_layer
        self.end_layer = start_layer + layer_num  # exclusive
        self.device = resolve_device(device)
        plain = self.fmt.torch_dtype
        if compute_dtype is None:
            compute_dtype = plain if plain in (torch.bfloat16, torch.float16) else torch.bfloat16
        if compute_dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise ValueError(f"compute_dtype must be bfloat16, float16 or float32, got {compute_dtype}")
        self.compute_dtype = compute_dtype
        self.dtype = plain if plain is not None else torch.uint8  # storage dtype of data buffers
        self.streams = {s.name: s for s in streams}
        self.layouts: dict[str, StorageLayout] = {
            s.name: self.codec.storage_layout(s.heads, s.dim) for s in streams}
        self._data: dict[str, list[torch.Tensor]] = {}
        self._scales: dict[str, list[torch.Tensor | None]] = {}
        self._gscale: dict[str, list[torch.Tensor | None]] = {}
        self._gstate: dict[str, list[ScaleState]] = {}
        for name, lay in self.layouts.items():
            self._data[name] = [torch.zeros((self.rows, *lay.data_shape), dtype=lay.data_dtype,
                                            device=self.device) for _ in range(layer_num)]
            self._scales[name] = [
                None if lay.scale_shape is None else
                torch.zeros((self.rows, *lay.scale_shape), dtype=torch.uint8, device=self.device)
                for _ in range(layer_num)]
            self._gscale[name] = [
                torch.ones((), dtype=torch.float32, device=self.device) if lay.has_global_scale
                else None for _ in range(layer_num)]
            self._gstate[name] = [ScaleState.UNSET] * layer_num
        self._cache_capacity = dequant_cache_layers * len(streams)
        self._cache: OrderedDict[tuple[int, str], torch.Tensor] = OrderedDict()

    # -- layers --------------------------------------------------------------------------------
    def _index(self, layer_id: int) -> int:
        """Global layer id -> index into the per-layer lists; IndexError if not in this pool."""
        if not isinstance(layer_id, int) or isinstance(layer_id, bool):
            raise IndexError(f"layer_id must be an int, got {layer_id!r}")
        if not self.start_layer <= layer_id < self.end_layer:
            raise IndexError(f"layer_id {layer_id} not in this pool's layers "
                             f"[{self.start_layer}, {self.end_layer})")
        return layer_id - self.start_layer

    # -- global scales (nvfp4) -----------------------------------------------------------------
    def _set_global_scale(self, layer_id: int, values: dict[str, object]) -> None:
        idx = self._index(layer_id)
        if not self.layouts[next(iter(values))].has_global_scale:
            raise ValueError(f"global scales only exist for nvfp4 pools; this pool is {self.fmt.value}")
        parsed: dict[str, float] = {}
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    raise ValueError(f"{name} scale must be a scalar, got shape {tuple(value.shape)}")
                value = float(value.reshape(()).item())
            fp32 = float(torch.tensor(float(value), dtype=torch.float32)) \
                if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
            # The quantizer's own check: positive, and 448 * 6 * g finite in fp32 (the largest
            # value the format can then represent); a scale it would refuse is refused here.
            if not is_valid_global_scale(fp32):
                raise ValueError(f"{name} global scale must be a positive fp32 number with 448 * 6 * "
                                 f"scale finite in fp32 (the nvfp4 dequantization multiplier, about "
                                 f"amax/(448*6)), got {value!r}")
            parsed[name] = fp32
        for name, fp32_value in parsed.items():  # check all before changing any
            current = float(self._gscale[name][idx])  # type: ignore[arg-type]
            if self._gstate[name][idx] is ScaleState.FIXED and fp32_value != current:
                raise ValueError(
                    f"layer {layer_id} {name} global scale is fixed at {current!r}: data was already "
                    f"written with it; refusing to change it to {fp32_value!r}")
        for name, value in parsed.items():
            if self._gstate[name][idx] is not ScaleState.FIXED:
                self._gscale[name][idx].fill_(value)  # type: ignore[union-attr]
                self._gstate[name][idx] = ScaleState.CALIBRATED

    def _global_scale(self, layer_id: int, name: str) -> float | None:
        """The stream's global scale, or None while it is unset (or the format has none)."""
        idx = self._index(layer_id)
        g = self._gscale[name][idx]
        if g is None or self._gstate[name][idx] is ScaleState.UNSET:
            return None
        return float(g)

    def _scale_for_write(self, idx: int, name: str, x: torch.Tensor) -> tuple[torch.Tensor | None, bool]:
        """The global scale to encode ``x`` with, and whether it becomes fixed by this write."""
        g = self._gscale[name][idx]
        if g is None:
            return None, False
        if self._gstate[name][idx] is not ScaleState.UNSET:
            return g, True
        computed = NVFP4Codec.compute_global_scale(x)
        if computed is not None:
            return computed, True
        # All zeros: every block scale and code is 0 whatever g is, so keep the scale unset.
        return g, False

    def global_scale_state(self, layer_id: int, name: str) -> tuple[torch.Tensor | None, ScaleState]:
        """The live fp32 global-scale tensor of one stream (None if the format has none) and its state."""
        idx = self._index(layer_id)
        return self._gscale[name][idx], self._gstate[name][idx]

    def adopt_global_scales(self, scales: dict[tuple[int, str], float]) -> None:
        """Fix ``{(layer_id, stream): value}`` because rows encoded with them are about to be
        written (host restore). All are checked first: a FIXED scale that differs raises
        ValueError and nothing changes."""
        for (layer_id, name), value in scales.items():
            idx = self._index(layer_id)
            g = self._gscale[name][idx]
            if g is None:
                raise ValueError(f"stream {name} of this {self.fmt.value} pool has no global scale")
            if self._gstate[name][idx] is ScaleState.FIXED and float(g) != value:
                raise ValueError(f"layer {layer_id} {name} global scale is fixed at {float(g)!r} on the "
                                 f"device; rows encoded with {value!r} cannot be restored into it")
        for (layer_id, name), value in scales.items():
            idx = self._index(layer_id)
            self._gscale[name][idx].fill_(value)  # type: ignore[union-attr]
            self._gstate[name][idx] = ScaleState.FIXED

    # -- writes --------------------------------------------------------------------------------
    def _write(self, layer_id: int, loc: torch.Tensor, inputs: dict[str, torch.Tensor]) -> None:
        """Validate everything, encode every stream, then write data + scales of every stream."""
        idx = self._index(layer_id)
        check_loc(loc, self.rows, self.device, reject_duplicates=True)
        tokens = loc.numel()
        extra = (self.fmt.torch_dtype,) if self.fmt is KVCacheFormat.FP8_E4M3 else ()
        for name, x in inputs.items():
            spec = self.streams[name]
            check_rows(x, f"cache_{name}", tokens, spec.heads, spec.dim, self.device, extra)
        if tokens == 0:
            return  # an empty write is validated, then writes nothing and fixes no scale
        encoded: dict[str, EncodedRows] = {}
        used: dict[str, torch.Tensor | None] = {}
        fixes: list[tuple[str, torch.Tensor]] = []
        for name, x in inputs.items():
            g, fixes_scale = self._scale_for_write(idx, name, x)
            encoded[name] = self.codec.encode(x, g)
            used[name] = g
            if fixes_scale and g is not None:
                fixes.append((name, g))
        self._store_rows(idx, loc, encoded, used)
        for name, g in fixes:  # only once the rows encoded with them are stored
            self._gscale[name][idx].copy_(g)  # type: ignore[union-attr]
            self._gstate[name][idx] = ScaleState.FIXED

    def _store_rows(self, idx: int, loc: torch.Tensor, encoded: dict[str, EncodedRows],
                    global_scales: dict[str, torch.Tensor | None] | None = None) -> None:
        """Scatter encoded rows; ``global_scales`` (per stream, default: the layer's own) is what
        the rows were encoded with, used to update cached dequantized layers."""
        for name, rows in encoded.items():
            scatter_rows(self._data[name][idx], loc, rows.data)
            scales = self._scales[name][idx]
            if scales is not None:
                scatter_rows(scales, loc, rows.scales)  # type: ignore[arg-type]
            cached = self._cache.get((idx, name))
            if cached is not None:  # write-through: decode only the written rows
                g = self._gscale[name][idx] if global_scales is None else global_scales[name]
                scatter_rows(cached, loc, self.codec.decode(rows.data, rows.scales, g, self.compute_dtype))

    # -- reads ---------------------------------------------------------------------------------
    def _decode(self, idx: int, name: str, data: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
        return self.codec.decode(data, scales, self._gscale[name][idx], self.compute_dtype)

    def _read_rows(self, layer_id: int, loc: torch.Tensor, name: str) -> torch.Tensor:
        idx = self._index(layer_id)
        check_loc(loc, self.rows, self.device)
        cached = self._cache.get((idx, name))
        if cached is not None:
            return gather_rows(cached, loc)
        scales = self._scales[name][idx]
        return self._decode(idx, name, gather_rows(self._data[name][idx], loc),
                            None if scales is None else gather_rows(scales, loc))

    def _full(self, layer_id: int, name: str) -> torch.Tensor:
        """Whole-layer buffer: the storage itself for plain dtypes, else dequantized."""
        idx = self._index(layer_id)
        if not self.fmt.is_fp4:
            return self._data[name][idx]
        key = (idx, name)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        full = self._decode(idx, name, self._data[name][idx], self._scales[name][idx])
        if self._cache_capacity:
            self._cache[key] = full
            while len(self._cache) > self._cache_capacity:
                self._cache.popitem(last=False)
        return full

    # -- raw access ----------------------------------------------------------------------------
    def _raw(self, layer_id: int, name: str) -> RawBuffers:
        idx = self._index(layer_id)
        return RawBuffers(self._data[name][idx], self._scales[name][idx], self._gscale[name][idx])

    def read_raw_rows(self, layer_id: int, loc: torch.Tensor) -> dict[str, EncodedRows]:
        """Copies of the stored data and scales of rows ``loc`` of every stream (for offload)."""
        idx = self._index(layer_id)
        check_loc(loc, self.rows, self.device)
        out = {}
        for name in self.streams:
            scales = self._scales[name][idx]
            out[name] = EncodedRows(gather_rows(self._data[name][idx], loc),
                                    None if scales is None else gather_rows(scales, loc))
        return out

    def write_raw_rows(self, layer_id: int, loc: torch.Tensor, rows: dict[str, EncodedRows]) -> None:
        """Write stored rows (from `read_raw_rows` of a pool with the same layout) at ``loc``.

        Data and scales of every stream are written together; cached dequantized layers are
        updated. The caller is responsible for the global scales (see `HostKVMirror`).
        """
        idx = self._index(layer_id)
        check_loc(loc, self.rows, self.device, reject_duplicates=True)
        if set(rows) != set(self.streams):
            raise ValueError(f"raw rows for streams {sorted(rows)}; this pool has {sorted(self.streams)}")
        for name, r in rows.items():
            lay = self.layouts[name]
            want = (loc.numel(), *lay.data_shape)
            if tuple(r.data.shape) != want or r.data.dtype != lay.data_dtype:
                raise ValueError(f"raw {name} data has shape {tuple(r.data.shape)} ({r.data.dtype}); "
                                 f"expected {list(want)} ({lay.data_dtype})")
            if lay.scale_shape is not None:
                want_s = (loc.numel(), *lay.scale_shape)
                if r.scales is None or tuple(r.scales.shape) != want_s or r.scales.dtype != torch.uint8:
                    got = None if r.scales is None else (tuple(r.scales.shape), r.scales.dtype)
                    raise ValueError(f"raw {name} scales are {got}; expected {list(want_s)} uint8")
        self._store_rows(idx, loc, {n: EncodedRows(r.data.to(self.device), None if r.scales is None
                                                   else r.scales.to(self.device))
                                    for n, r in rows.items()})

    def stream_bytes(self, name: str) -> int:
        """Bytes of every buffer of one stream over all layers: data + scales + global scales."""
        idx_range = range(self.layer_num)
        return sum(self._raw(self.start_layer + i, name).nbytes() for i in idx_range)

    def bytes_per_token(self) -> float:
        """Data + scale bytes per token slot over all layers and streams (global scales excluded)."""
        total = 0
        for lay in self.layouts.values():
            elem = torch.empty((), dtype=lay.data_dtype).element_size()
            total += math.prod(lay.data_shape) * elem + (math.prod(lay.scale_shape) if lay.scale_shape else 0)
        return float(total * self.layer_num)
