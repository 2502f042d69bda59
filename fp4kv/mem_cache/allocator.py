"""Token-slot allocators for the KV pools.

`TokenToKVPoolAllocator` hands out single token slots ``1..size``; `PagedTokenToKVPoolAllocator`
hands out whole pages (page ``p`` owns slots ``p*page_size .. p*page_size + page_size - 1``,
``p = 1..size/page_size``). Slot 0 (page 0) is the pools' padding slot and is never handed out.
Every call is validated before the state changes: a rejected call leaves the allocator as it was.
"""

from __future__ import annotations

import torch

from fp4kv.mem_cache.validate import resolve_device


def _as_index_tensor(indices: object, name: str) -> torch.Tensor:
    if isinstance(indices, torch.Tensor):
        if indices.dtype != torch.int64 or indices.dim() != 1:
            raise ValueError(f"{name} must be a 1-D int64 tensor, got {indices.dtype} "
                             f"shape {tuple(indices.shape)}")
        return indices
    if isinstance(indices, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool)
                                                   for i in indices):
        return torch.tensor(list(indices), dtype=torch.int64)
    raise ValueError(f"{name} must be a 1-D int64 tensor or a list of ints, got {type(indices).__name__}")


class _IdAllocator:
    """Ids ``1..count``; allocation order is FIFO over the free list (freed ids go to the back)."""

    def __init__(self, count: int, what: str, device: torch.device):
        self.count = count
        self.what = what
        self.device = device
        self._free = torch.arange(1, count + 1, dtype=torch.int64, device=device)
        self._in_use = torch.zeros(count + 1, dtype=torch.bool, device=device)

    def available(self) -> int:
        return int(self._free.numel())

    def alloc(self, n: object) -> torch.Tensor | None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"number of {self.what}s to allocate must be an int >= 0, got {n!r}")
        if n > self._free.numel():
            return None
        out = self._free[:n].clone()
        self._free = self._free[n:]
        self._in_use[out] = True
        return out

    def free(self, ids: torch.Tensor) -> None:
        ids = ids.to(self.device)
        if ids.numel() == 0:
            return
        if bool((ids == 0).any()):
            raise ValueError(f"{self.what} 0 is the padding {self.what} and is never allocated; "
                             f"refusing to free it")
        bad = ids[(ids < 0) | (ids > self.count)]
        if bad.numel():
            raise IndexError(f"{self.what} indices out of range [1, {self.count}]: {bad[:8].tolist()}")
        uniq, counts = torch.unique(ids, return_counts=True)
        if uniq.numel() != ids.numel():
            raise ValueError(f"{self.what} indices repeated in one free call: {uniq[counts > 1][:8].tolist()}")
        not_held = ids[~self._in_use[ids]]
        if not_held.numel():
            raise ValueError(f"{self.what} indices not currently allocated (double free, or never "
                             f"handed out): {not_held[:8].tolist()}")
        self._in_use[ids] = False
        self._free = torch.cat([self._free, ids])

    def is_allocated(self, ids: torch.Tensor) -> torch.Tensor:
        return self._in_use[ids]


class TokenToKVPoolAllocator:
    """Hands out token slots ``1..size`` of a pool built with the same ``size`` (page_size 1)."""

    def __init__(self, size: int, device: torch.device | str = "cpu"):
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"size must be an int >= 1, got {size!r}")
        self.size = size
        self.page_size = 1
        self.device = resolve_device(device)
        self._ids = _IdAllocator(size, "slot", self.device)

    def available_size(self) -> int:
        """Free token slots."""
        return self._ids.available()

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """``need_size`` distinct free slots (int64 ``[need_size]``), or None if fewer are free
        (nothing is allocated then)."""
        return self._ids.alloc(need_size)

    def free(self, indices: torch.Tensor | list[int]) -> None:
        """Return slots. Slot 0, out-of-range, repeated or not-allocated slots raise
        (ValueError / IndexError naming them) and nothing is freed."""
        self._ids.free(_as_index_tensor(indices, "indices"))


class PagedTokenToKVPoolAllocator:
    """Hands out whole pages of ``page_size`` slots; ``size`` must be a multiple of ``page_size``
    (there are ``size / page_size`` pages, ids ``1..``; the pool has ``size + page_size`` rows)."""

    def __init__(self, size: int, page_size: int, device: torch.device | str = "cpu"):
        for label, value in (("size", size), ("page_size", page_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{label} must be an int >= 1, got {value!r}")
        if size % page_size:
            raise ValueError(f"size {size} is not a multiple of page_size {page_size}")
        self.size = size
        self.page_size = page_size
        self.num_pages = size // page_size
        self.device = resolve_device(device)
        self._pages = _IdAllocator(self.num_pages, "page", self.device)
        self._offsets = torch.arange(page_size, dtype=torch.int64, device=self.device)

    def available_size(self) -> int:
        """Free token slots (free pages x page_size)."""
        return self._pages.available() * self.page_size

    def available_pages(self) -> int:
        return self._pages.available()

    def alloc_pages(self, num_pages: int) -> torch.Tensor | None:
        """``num_pages`` free page ids (int64), or None if fewer are free."""
        return self._pages.alloc(num_pages)

    def free_pages(self, page_ids: torch.Tensor | list[int]) -> None:
        """Return pages; misuse raises as in `TokenToKVPoolAllocator.free` and frees nothing."""
        self._pages.free(_as_index_tensor(page_ids, "page_ids"))

    def page_tokens(self, page_ids: torch.Tensor) -> torch.Tensor:
        """Token slots of the given pages, page by page: int64 ``[len(page_ids) * page_size]``."""
        return (page_ids[:, None] * self.page_size + self._offsets[None, :]).reshape(-1)

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """Token slots of ``ceil(need_size / page_size)`` whole pages (so possibly more than
        ``need_size`` slots; the caller uses the first ``need_size``), or None if too few pages."""
        if not isinstance(need_size, int) or isinstance(need_size, bool) or need_size < 0:
            raise ValueError(f"number of slots to allocate must be an int >= 0, got {need_size!r}")
        pages = self._pages.alloc(-(-need_size // self.page_size))
        return None if pages is None else self.page_tokens(pages)

    def free(self, indices: torch.Tensor | list[int]) -> None:
        """Return the token slots of whole pages (any order). Slots that do not make up complete
        pages raise ValueError naming the partial pages; other misuse as in `free_pages`."""
        idx = _as_index_tensor(indices, "indices").to(self.device)
        if idx.numel() == 0:
            return
        if int(idx.min()) < 0:
            raise IndexError(f"negative token indices: {idx[idx < 0][:8].tolist()}")
        pages, counts = torch.unique(idx // self.page_size, return_counts=True)
        uniq_tokens = torch.unique(idx)
        if uniq_tokens.numel() != idx.numel():
            raise ValueError("token indices repeated in one free call")
        partial = pages[counts != self.page_size]
        if partial.numel():
            raise ValueError(f"indices do not cover whole pages; partial pages: {partial[:8].tolist()} "
                             f"(page_size {self.page_size})")
        self._pages.free(pages)
