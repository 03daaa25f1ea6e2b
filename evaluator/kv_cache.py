"""vLLM V1's KV block pool with prefix caching, as flat numba arrays (used by the simulator).

Follows `vllm/v1/core/block_pool.py`, `kv_cache_utils.py` (FreeKVCacheBlockQueue) and
`single_type_kv_cache_manager.py` as read at vllm-project/vllm@c59cb794 (see
docs/architecture.md), with the free order of the v0.15 series the data was collected on:

- a fixed number of blocks (vLLM reserves one as the null block: usable = total - 1);
- a full block is identified by its prefix chain; here (content, block index), where content
  is the group's system prompt for a block lying entirely inside it, the prompt for the other
  full prompt blocks, and the request itself for blocks holding generated tokens (a chain
  that includes its own sampled tokens can only be hit by that request after preemption);
- reference counts: a cached block hit by a running request is shared, held once;
- a doubly linked free queue in LRU order: a block whose reference count drops to 0 goes to
  the tail, cached or not (a request frees its blocks last-first, so its tail blocks are
  evicted first); allocation pops the head and evicts the hash it carries; a cache hit on a
  block in the queue removes it from the queue ("touch");
- duplicates are not merged: two requests that computed the same block concurrently both
  register it, and a lookup returns the first registered (vLLM's BlockHashToBlockMap).

State is a tuple of arrays (no jitclass, so the simulator stays cached on disk):
  nxt, prv: free-queue links, size n + 1 (index n is the sentinel; nxt[n] = head, prv[n] = tail)
  ref: reference count per block; bkey: key per block (-1 = no hash); dup: next / previous
  block with the same key; table: key -> first / last block with that key (-1 = miss), for
  shared contents only
  (keys >= table size are private to one request and are found through that request's own
  block list, which keeps the table small); cnt[0] = free blocks, cnt[1] = evictions so far.
"""
from __future__ import annotations

import numba
import numpy as np

FREE = 0  # cnt[FREE]: blocks in the free queue (eviction candidates included)
EVICTED = 1  # cnt[EVICTED]: cached blocks evicted so far


@numba.njit(cache=True)
def new_pool(n_blocks, n_keys):
    """All blocks free, in id order, none cached."""
    s = n_blocks
    nxt = np.empty(n_blocks + 1, np.int64)
    prv = np.empty(n_blocks + 1, np.int64)
    for b in range(n_blocks):
        nxt[b] = b + 1
        prv[b] = b - 1
    if n_blocks > 0:
        prv[0] = s
        nxt[n_blocks - 1] = s
        nxt[s] = 0
        prv[s] = n_blocks - 1
    else:
        nxt[s] = s
        prv[s] = s
    ref = np.zeros(n_blocks, np.int64)
    bkey = np.full(n_blocks, -1, np.int64)
    dup = np.full((2, n_blocks), -1, np.int64)  # [0]: next, [1]: previous block with the same key
    table = np.full((2, n_keys), -1, np.int32)  # [0]: first block with the key, [1]: last
    cnt = np.zeros(2, np.int64)
    cnt[FREE] = n_blocks
    return nxt, prv, ref, bkey, dup, table, cnt


@numba.njit(cache=True, inline="always")
def chain_key(i, block, n_sys, c_sys, c_prompt, c_own, prompt_len, mb):
    """Key of a request's block i (scalars only): its group's system prompt, its prompt, or
    its own content (generated tokens, or a prompt without identity)."""
    if i < n_sys and c_sys >= 0:
        return c_sys * mb + i
    if (i + 1) * block <= prompt_len and c_prompt >= 0:
        return c_prompt * mb + i
    return c_own * mb + i


@numba.njit(cache=True, inline="always")
def shared_blocks(block, n_sys, c_sys, c_prompt, prompt_len):
    """How many of a request's leading blocks have shared keys (scalars only): `chain_key` of
    block i is a system-prompt or prompt key, found by other requests, exactly for i below it."""
    return max(n_sys if c_sys >= 0 else 0, prompt_len // block if c_prompt >= 0 else 0)


# The operations work on a request's whole block list (one call per request event) and are
# written out without helper calls: in numba every call with array arguments, inlined or
# not, costs atomic reference-count updates, which made a per-block helper the hot spot.

@numba.njit(cache=True)
def allocate(nxt, prv, ref, bkey, dup, table, cnt, n, blk, row, col):
    """Pop n blocks from the LRU head (caller checked cnt[FREE] >= n) into blk[row, col:col+n];
    a block that still carries a hash is evicted from the cache."""
    s = nxt.shape[0] - 1
    n_shared = table.shape[1]
    for j in range(n):
        b = nxt[s]
        nxt[s] = nxt[b]  # unlink the head
        prv[nxt[b]] = s
        k = bkey[b]
        if k >= 0:
            if k < n_shared:  # unlink from the key's list (private keys are not in the table)
                nx = dup[0, b]
                pv = dup[1, b]
                if pv >= 0:
                    dup[0, pv] = nx
                else:
                    table[0, k] = nx
                if nx >= 0:
                    dup[1, nx] = pv
                else:
                    table[1, k] = pv
                dup[0, b] = -1
                dup[1, b] = -1
            bkey[b] = -1
            cnt[EVICTED] += 1
        ref[b] = 1
        blk[row, col + j] = b
    cnt[FREE] -= n


@numba.njit(cache=True)
def touch_row(nxt, prv, ref, cnt, blk, row, n):
    """Cache hits on blk[row, :n] take a reference; blocks still in the free queue leave it."""
    for q in range(n):
        b = blk[row, q]
        if ref[b] == 0:
            nxt[prv[b]] = nxt[b]
            prv[nxt[b]] = prv[b]
            cnt[FREE] -= 1
        ref[b] += 1


@numba.njit(cache=True)
def release_row(nxt, prv, ref, cnt, blk, row, n):
    """Drop a request's references on blk[row, :n], last block first: a block reaching 0 joins
    the free-queue tail with its hash, so the request's tail blocks are evicted first."""
    s = nxt.shape[0] - 1
    for q in range(n - 1, -1, -1):
        b = blk[row, q]
        ref[b] -= 1
        if ref[b] == 0:
            t = prv[s]
            nxt[t] = b
            prv[b] = t
            nxt[b] = s
            prv[s] = b
            cnt[FREE] += 1


@numba.njit(cache=True)
def register_row(bkey, dup, table, blk, row, lo, hi, block, n_sys, c_sys, c_prompt, c_own,
                 prompt_len, mb):
    """Blocks lo..hi-1 of a request became full: give them their keys; shared keys go to the
    end of the key's list (a lookup returns the first block registered)."""
    n_shared = table.shape[1]
    for q in range(lo, hi):
        b = blk[row, q]
        k = chain_key(q, block, n_sys, c_sys, c_prompt, c_own, prompt_len, mb)
        bkey[b] = k
        if k >= n_shared:  # private to one request: found through its own block list
            continue
        t = table[1, k]
        dup[0, b] = -1
        dup[1, b] = t
        if t < 0:
            table[0, k] = b
        else:
            dup[0, t] = b
        table[1, k] = b
