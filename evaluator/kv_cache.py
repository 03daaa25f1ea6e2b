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
  node: one row of int64 per block, [NXT, PRV, REF, KEY]: the free-queue links (size n + 1:
  row n is the sentinel; node[n, NXT] = head, node[n, PRV] = tail), the reference count and
  the block's key (-1 = no hash). One row holds what every operation on a block reads and
  writes, so a block costs one cache line, not one per field (the pool's random accesses
  are most of a replay's memory traffic: with the links, count and key in four arrays the 16
  experiments' replays took 5-9% longer, benchmarks/bench_replay.py).
  dup: next / previous block with the same key (int32); table: key -> first / last block
  with that key (-1 = miss), for shared contents only (keys >= table size are private to
  one request and are found through that request's own block list, which keeps the table
  small); cnt[0] = free blocks, cnt[1] = evictions so far.
"""
from __future__ import annotations

import numba
import numpy as np

FREE = 0  # cnt[FREE]: blocks in the free queue (eviction candidates included)
EVICTED = 1  # cnt[EVICTED]: cached blocks evicted so far
NXT, PRV, REF, KEY = 0, 1, 2, 3  # columns of a block's row in `node`


@numba.njit(cache=True)
def new_pool(n_blocks, n_keys):
    """All blocks free, in id order, none cached."""
    s = n_blocks
    node = np.empty((n_blocks + 1, 4), np.int64)
    for b in range(n_blocks):
        node[b, NXT] = b + 1
        node[b, PRV] = b - 1
        node[b, REF] = 0
        node[b, KEY] = -1
    node[s, REF] = 0
    node[s, KEY] = -1
    if n_blocks > 0:
        node[0, PRV] = s
        node[n_blocks - 1, NXT] = s
        node[s, NXT] = 0
        node[s, PRV] = n_blocks - 1
    else:
        node[s, NXT] = s
        node[s, PRV] = s
    dup = np.full((n_blocks, 2), -1, np.int32)  # [b, 0]: next, [b, 1]: previous block with the same key
    table = np.full((n_keys, 2), -1, np.int32)  # [k, 0]: first block with the key, [k, 1]: last
    cnt = np.zeros(2, np.int64)
    cnt[FREE] = n_blocks
    return node, dup, table, cnt


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
def allocate(node, dup, table, cnt, n, blk, row, col):
    """Pop n blocks from the LRU head (caller checked cnt[FREE] >= n) into blk[row, col:col+n];
    a block that still carries a hash is evicted from the cache."""
    s = node.shape[0] - 1
    n_shared = table.shape[0]
    for j in range(n):
        b = node[s, NXT]
        nx = node[b, NXT]
        node[s, NXT] = nx  # unlink the head
        node[nx, PRV] = s
        k = node[b, KEY]
        if k >= 0:
            if k < n_shared:  # unlink from the key's list (private keys are not in the table)
                dn = dup[b, 0]  # the next and previous block with the same key
                dp = dup[b, 1]
                if dp >= 0:
                    dup[dp, 0] = dn
                else:
                    table[k, 0] = dn
                if dn >= 0:
                    dup[dn, 1] = dp
                else:
                    table[k, 1] = dp
                dup[b, 0] = -1
                dup[b, 1] = -1
            node[b, KEY] = -1
            cnt[EVICTED] += 1
        node[b, REF] = 1
        blk[row, col + j] = b
    cnt[FREE] -= n


@numba.njit(cache=True)
def touch_row(node, cnt, blk, row, n):
    """Cache hits on blk[row, :n] take a reference; blocks still in the free queue leave it."""
    for q in range(n):
        b = blk[row, q]
        if node[b, REF] == 0:
            nx = node[b, NXT]
            pv = node[b, PRV]
            node[pv, NXT] = nx
            node[nx, PRV] = pv
            cnt[FREE] -= 1
        node[b, REF] += 1


@numba.njit(cache=True)
def release_row(node, cnt, blk, row, n):
    """Drop a request's references on blk[row, :n], last block first: a block reaching 0 joins
    the free-queue tail with its hash, so the request's tail blocks are evicted first."""
    s = node.shape[0] - 1
    for q in range(n - 1, -1, -1):
        b = blk[row, q]
        node[b, REF] -= 1
        if node[b, REF] == 0:
            t = node[s, PRV]
            node[t, NXT] = b
            node[b, PRV] = t
            node[b, NXT] = s
            node[s, PRV] = b
            cnt[FREE] += 1


@numba.njit(cache=True)
def register_row(node, dup, table, blk, row, lo, hi, block, n_sys, c_sys, c_prompt, c_own,
                 prompt_len, mb):
    """Blocks lo..hi-1 of a request became full: give them their keys; shared keys go to the
    end of the key's list (a lookup returns the first block registered)."""
    n_shared = table.shape[0]
    for q in range(lo, hi):
        b = blk[row, q]
        k = chain_key(q, block, n_sys, c_sys, c_prompt, c_own, prompt_len, mb)
        node[b, KEY] = k
        if k >= n_shared:  # private to one request: found through its own block list
            continue
        t = table[k, 1]
        dup[b, 0] = -1
        dup[b, 1] = t
        if t < 0:
            table[k, 0] = b
        else:
            dup[t, 0] = b
        table[k, 1] = b
