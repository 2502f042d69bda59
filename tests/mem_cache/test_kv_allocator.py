"""Token and page allocators: exhaustion, reuse, and every misuse rejected without state change."""

from __future__ import annotations

import pytest
import torch

from fp4kv.mem_cache import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from kvpool_testutil import make_mha, randn


def test_hands_out_every_slot_once_then_none():
    alloc = TokenToKVPoolAllocator(10)
    a = alloc.alloc(4)
    b = alloc.alloc(6)
    assert a.dtype == torch.int64 and alloc.available_size() == 0
    assert sorted(torch.cat([a, b]).tolist()) == list(range(1, 11))  # never slot 0
    assert alloc.alloc(1) is None
    assert alloc.alloc(0).numel() == 0


def test_not_enough_free_returns_none_and_allocates_nothing():
    alloc = TokenToKVPoolAllocator(5)
    alloc.alloc(3)
    assert alloc.alloc(3) is None
    assert alloc.available_size() == 2
    assert alloc.alloc(2).numel() == 2


def test_reuse_after_free():
    alloc = TokenToKVPoolAllocator(4)
    first = alloc.alloc(4)
    alloc.free(first[1:3])
    assert alloc.available_size() == 2
    again = alloc.alloc(2)
    assert sorted(again.tolist()) == sorted(first[1:3].tolist())
    alloc.free([int(i) for i in first])  # lists of ints are accepted too
    assert alloc.available_size() == 4


@pytest.mark.parametrize("bad,exc,msg", [
    ([0], ValueError, "padding slot"),
    ([2, 0], ValueError, "padding slot"),
    ([11], IndexError, r"out of range \[1, 10\]: \[11\]"),
    ([-3, 2], IndexError, r"\[-3\]"),
    ([9], ValueError, r"not currently allocated .*\[9\]"),   # never handed out
    ([2, 2], ValueError, r"repeated in one free call: \[2\]"),
    (torch.tensor([2], dtype=torch.int32), ValueError, "int64"),
    ("2", ValueError, "list of ints"),
])
def test_bad_free_is_rejected_and_state_unchanged(bad, exc, msg):
    alloc = TokenToKVPoolAllocator(10)
    held = alloc.alloc(5)  # slots 1..5
    free_before, used_before = alloc._ids._free.clone(), alloc._ids._in_use.clone()
    with pytest.raises(exc, match=msg):
        alloc.free(bad)
    assert torch.equal(alloc._ids._free, free_before) and torch.equal(alloc._ids._in_use, used_before)
    alloc.free(held)  # every held slot was still held
    assert alloc.available_size() == 10


def test_double_free():
    alloc = TokenToKVPoolAllocator(4)
    held = alloc.alloc(2)
    alloc.free(held[:1])
    with pytest.raises(ValueError, match=rf"double free.*\[{int(held[0])}\]"):
        alloc.free(held)
    assert alloc.available_size() == 3


@pytest.mark.parametrize("n", [-1, 1.5, True, "3"])
def test_bad_alloc_size(n):
    alloc = TokenToKVPoolAllocator(4)
    with pytest.raises(ValueError, match="int >= 0"):
        alloc.alloc(n)
    assert alloc.available_size() == 4


def test_paged_alloc_rounds_up_to_whole_pages():
    alloc = PagedTokenToKVPoolAllocator(16, 4)
    assert alloc.num_pages == 4 and alloc.available_size() == 16
    tokens = alloc.alloc(5)
    assert tokens.numel() == 8 and alloc.available_size() == 8 and alloc.available_pages() == 2
    pages = tokens.view(2, 4)
    assert torch.equal(pages - pages[:, :1], torch.arange(4).expand(2, 4))  # contiguous pages
    assert bool((pages[:, 0] % 4 == 0).all()) and int(tokens.min()) >= 4  # aligned, not page 0
    assert int(tokens.max()) < 16 + 4  # within the pool's size + page_size rows
    assert alloc.alloc(9) is None and alloc.available_size() == 8
    rest = alloc.alloc(8)
    assert set(rest.tolist()).isdisjoint(tokens.tolist())
    alloc.free(tokens.flip(0))  # any order
    assert alloc.available_size() == 8


def test_paged_misuse():
    alloc = PagedTokenToKVPoolAllocator(16, 4)
    tokens = alloc.alloc(4)
    with pytest.raises(ValueError, match="partial pages"):
        alloc.free(tokens[:3])
    with pytest.raises(ValueError, match="padding page"):
        alloc.free(torch.arange(0, 4))
    with pytest.raises(IndexError, match="out of range"):
        alloc.free(torch.arange(20, 24))
    with pytest.raises(ValueError, match="repeated"):
        alloc.free(torch.cat([tokens, tokens[:1]]))
    assert alloc.available_pages() == 3
    page = tokens[:1] // 4
    alloc.free_pages(page)
    with pytest.raises(ValueError, match="double free"):
        alloc.free_pages(page)
    assert alloc.available_pages() == 4
    with pytest.raises(ValueError, match="multiple of page_size"):
        PagedTokenToKVPoolAllocator(10, 4)


def test_allocated_slots_are_valid_pool_locations():
    pool = make_mha("fp4_e2m1", size=16, page_size=4)
    alloc = PagedTokenToKVPoolAllocator(16, 4)
    loc = alloc.alloc(16)
    pool.set_kv_buffer(0, loc, randn(16, 2, 32), randn(16, 2, 32))
    assert pool.get_kv(0, loc)[0].shape == (16, 2, 32)
