"""A numba-compiled discrete-step simulation of the vLLM V1 scheduler, driven by a candidate.

Per step (docs/architecture.md, fact 1), as `Scheduler.schedule` does at
vllm-project/vllm@00024d314514900f361ad072af6931e403b7f589 (vllm/v1/core/sched/scheduler.py):
every running request is scheduled in order while the token budget lasts (a decode takes 1
token, an unfinished prefill a chunk of what is left of the budget); the rest of the budget
(`max_num_batched_tokens`, the experiment's) admits waiting requests FCFS while fewer than
max_num_seqs run. A prompt longer than the budget is prefilled in chunks over several steps;
with chunked prefill off (`chunked_prefill=False`) a waiting request whose remaining prompt
does not fit the budget left stops admission for the step, as vLLM's `break` does (vLLM
refuses to start with a budget below max_model_len then, so every admissible prompt fits an
empty step). A request whose prompt + output exceeds max_model_len fails at once without load
(vLLM's input validation; `SimResult.rejected`). KV blocks of the experiment's block size are
allocated as tokens are scheduled; when a running request cannot get a block the most
recently admitted running request is preempted (its blocks freed, recomputed later from the
front of the queue). No count ever goes negative and a step never schedules more tokens than
the budget or runs more than max_num_seqs requests (a Hypothesis property test,
tests/test_server_config.py).

Prefix caching, three modes (`prefix_cache=`; "off" is vLLM with prefix caching disabled: no hits):
- "lru" (default when the workload carries prompt identity): vLLM V1's block pool
  (`evaluator/kv_cache.py`): full blocks keep their hashes in an LRU free queue until a new
  allocation evicts them, shared blocks are reference-counted, and a request scheduled from
  the waiting queue hits the longest chain of its full blocks still cached (at most
  prompt - 1 tokens; a preempted request may hit its own blocks, generated ones included).
- "always-hit": the workload's fixed `cached_len` (a prompt seen before is always cached);
  the cached prefix is counted against the free blocks as if it were a private copy.

The clock advances by the candidate's predicted step cycle. A request's first token is
emitted at the end of the step that finishes its prefill; a decode step emits one token.

Client timeout (`timeout_us`, docs/failed_requests.md): a request not finished within that time
of its arrival is aborted, as vLLM does when the client disconnects: at the first step boundary
past its deadline it leaves the waiting queue or the running batch and its KV blocks are freed
(cached ones stay cached); one that would finish in the step its deadline falls in has timed
out too. Its reported E2E is the timeout, its TTFT the first token if that came in time, else
the timeout (`SimResult.timed_out` marks them).

Speed: most running requests, most of the time, just decode: one token a step, a KV block
needed every 16 steps. Such a request becomes a *member* once every request before it in the
running order is one: members advance implicitly (their token counts are stored minus the
steps since the last write-back), each keeps one pending event (a block to allocate, a block
of its shared prompt to register, its last token) in a ring of the next steps, and the
members' share of a step's aggregates is kept as running sums (a filled block of generated
tokens gets its private hash when the member finishes or is written back, in one call:
only this request after a preemption, or an eviction once the block is freed, can see it). A
step then costs its events and the other requests (prefill chunks, admissions), not the
batch; a step of members alone has its predicted cycle looked up by (batch, KV blocks) once
seen (the program is a pure function). A client deadline aborts members in place (they leave
holes); members short of blocks preempt the requests behind them, last first, as the
request-by-request step does (a member preempted so is written back alone and leaves a hole).
Only where the requests behind the last member short of a block might not free enough, or the
holes fill the positions, are the members written back and the step handled request by
request (the overloaded 7b reasoning replay, always short of blocks, fell from ~74 to ~42 ms
when preemptions stopped forcing write-backs). The operations, their
order and the floating-point sums are those of the request-by-request step, so results are
bit-identical (`simulate(..., fast=False)` runs every step request by request; tests compare
the two under KV pressure, client timeouts and abort storms).

The predictor is a *parameter* of type `PREDICTOR_TYPE` (a first-class function type), so the
simulator is compiled once and any candidate compiled with the fixed signature plugs in.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numba
import numpy as np

from evaluator import kv_cache as kv
from evaluator.components import N_COMPONENTS, PREDICTOR_TYPE, fill_components, fill_context

# status codes returned by simulate()
OK = 0
BAD_PREDICTION = 1  # NaN, infinite or < 1 us
STEP_LIMIT = 2  # runaway: more steps than allowed

# columns of SimResult.req_stats (one row per request)
HIT = 0  # prompt tokens served from the cache when first scheduled
IDEAL_HIT = 1  # what always-hit would have served (prompt or system prompt seen before)
EVICTIONS = 2  # cached blocks evicted to allocate for this request
PREEMPTIONS = 3  # times this request was preempted
T_DECODE = 4  # decode phase: share of decode-only cost of the steps it decoded in (us)
T_PREFILL = 5  # ... extra cost of fresh prefill chunks riding in those steps
T_RECOMPUTE = 6  # ... extra cost of prompt tokens recomputed because their blocks were evicted
T_PREEMPT = 7  # ... extra cost of preempted requests' recompute, and its own re-prefill steps
RESTART_HIT = 8  # tokens served from the cache on restarts after preemption
N_REQ_STATS = 9

PREFIX_MODES = ("auto", "lru", "always-hit", "off")
NO_CTX = -(1 << 62)  # no member: below any stored context
MEMO = 1 << 15  # slots of the steady steps' cycle memo (open addressing, filled to 3/4 at most)

_F1 = numba.float64[::1]
_I1 = numba.int64[::1]
_SIM_ARGS = (PREDICTOR_TYPE, _F1, _F1, _F1, _I1, _I1, _I1, numba.int64, numba.int64, numba.int64,
             numba.int64, numba.int64, numba.boolean,
             numba.boolean, _I1, _I1, _I1, numba.int64, numba.boolean, numba.float64, numba.boolean, numba.boolean, numba.boolean)


@numba.njit(cache=True, inline="always")
def _mark_seen(seen, full, block, n_sys, c_sys, c_prompt, prompt_len):
    """Remember contents whose blocks have been computed (for the always-hit comparison)."""
    if c_sys >= 0 and full >= n_sys:
        seen[c_sys] = True
    if c_prompt >= 0 and full >= (prompt_len - 1) // block:
        seen[c_prompt] = True


@numba.njit(cache=True, inline="always")
def _next_event(blocks, computed, n_cached, fin_at, block, lru, s, n_shared):
    """A member's next event step after step s (scalars only): the step its next token needs a
    block, fills one whose hash others can hit (lru: a block of its shared prompt, registered
    in the table), or is its last. `computed` is stored minus the steps of the stretch, so the
    step in which its end reaches x is x - computed.

    A filled block past the shared prefix (`n_shared` blocks) gets a hash only this request
    can find (after a preemption) and that only an eviction of the freed block observes; a
    member holds its blocks, so those registrations wait for its finish or the write-back
    (one call for all of them, not one per block), which halves a decoding member's events."""
    nx = min(blocks * block - computed + 1, fin_at)
    if lru and n_cached < n_shared:
        nx = min(nx, max(s + 1, (n_cached + 1) * block - computed))
    return nx


@numba.njit(cache=True, inline="always")
def _register_full(r, full, node, dup, table, req_blk, n_cached, block, n_sys, grp_c, prm_c, ubase, prompt_len,
                   mb, seen_p):
    """Give request r's blocks that became full since n_cached[r], up to block `full`, their
    hashes (lru mode), and remember the contents they complete."""
    if full > n_cached[r]:
        kv.register_row(node, dup, table, req_blk, r, n_cached[r], full, block, n_sys[r], grp_c[r], prm_c[r],
                        ubase + r, prompt_len[r], mb)
        n_cached[r] = full
        _mark_seen(seen_p, full, block, n_sys[r], grp_c[r], prm_c[r], prompt_len[r])


@numba.njit(cache=True, inline="always")
def _write_back(r, steps, lru, computed, generated, target, node, dup, table, req_blk, n_cached, block, n_sys,
                grp_c, prm_c, ubase, prompt_len, mb, seen_p):
    """Member r's stored counts made true again (they are kept minus the `steps` it advanced
    implicitly), and the private blocks it filled since its last event given their hashes."""
    computed[r] += steps
    generated[r] += steps
    target[r] = computed[r] + 1
    if lru:
        _register_full(r, min(computed[r], prompt_len[r] + generated[r] - 1) // block, node, dup, table, req_blk,
                       n_cached, block, n_sys, grp_c, prm_c, ubase, prompt_len, mb, seen_p)


@numba.njit(cache=True, inline="always")
def _preempt(v, lru, node, cnt, req_blk, blocks, blocks_held_before, n_cached, computed, target,
             prompt_len, generated, restarted, stats):
    """Preempt running request v (vLLM: the last of the running queue) to recompute it later:
    its blocks are freed (cached ones stay cached); returns how many it held. The caller moves
    it to the front of the waiting queue."""
    held = blocks[v]
    if lru:
        blocks_held_before[v] = held
        kv.release_row(node, cnt, req_blk, v, held)
        n_cached[v] = 0
    blocks[v] = 0
    computed[v] = 0
    target[v] = prompt_len[v] + generated[v]
    restarted[v] = True
    stats[v, PREEMPTIONS] += 1.0
    return held


@numba.njit(cache=True, inline="always")
def _drop_waiting(wq, w_head, w_len, n_front, arrival_us, t, timeout_us, gone, timed_out):
    """Abort the waiting requests past their client deadline (they hold no blocks), keeping the
    others' order; returns (w_head, w_len, n_front, how many were aborted). `wq` is a ring of
    capacity len(wq) holding w_len ids from w_head: first the n_front preempted requests (any
    arrival order), then arrivals in arrival order, of which those past the deadline are a
    prefix. So the scan stops at the first arrival still in time, and the head's survivors
    move up to it: the cost is the head and the aborted, not the queue."""
    cap = wq.shape[0]
    dropped = 0
    a = n_front
    while a < w_len and t - arrival_us[wq[(w_head + a) % cap]] >= timeout_us:
        r = wq[(w_head + a) % cap]
        gone[r] = True
        timed_out[r] = True
        dropped += 1
        a += 1
    k = a  # the survivors end up in positions [k, w_len)
    for b in range(n_front - 1, -1, -1):
        r = wq[(w_head + b) % cap]
        if t - arrival_us[r] >= timeout_us:
            gone[r] = True
            timed_out[r] = True
            dropped += 1
            n_front -= 1
        else:
            k -= 1
            wq[(w_head + k) % cap] = r
    return (w_head + k) % cap, w_len - k, n_front, dropped


@numba.njit(cache=True, inline="always")
def _tail_frees(deficit, running, gone, after, n_run, lru, node, req_blk, blocks):
    """Whether preempting live running requests behind position `after` (the last member short
    of a block this step), last first, frees at least `deficit` blocks; counted low (a block
    another request also holds is not counted), so that members short of blocks can preempt
    them without a write-back: every victim stands behind every member it frees a block for."""
    got = 0
    j = n_run - 1
    while j > after and got < deficit:
        v = running[j]
        j -= 1
        if gone[v]:
            continue
        if lru:
            for a in range(blocks[v]):
                if node[req_blk[v, a], kv.REF] == 1:
                    got += 1
        else:
            got += blocks[v]
    return got >= deficit


@numba.njit(_SIM_ARGS, cache=True, error_model="numpy")
def _simulate(predict, consts, model, arrival_us, prompt_len, cached_len, gen_len,
              kv_blocks, max_seqs, max_tokens, block, max_steps, record,
              lru, n_sys, grp_c, prm_c, ubase, breakdown, timeout_us, fast, spread, chunked):
    n = arrival_us.shape[0]
    first_us = np.full(n, -1.0)
    done_us = np.full(n, -1.0)
    gone = np.zeros(n + 1, np.bool_)  # finished or timed out; [n]: a member position left by a preempted member
    gone[n] = True
    HOLE = n
    timed_out = np.zeros(n, np.bool_)
    oldest = 0  # first request (arrival order) not gone: the only one whose deadline can pass first
    computed = np.zeros(n, np.int64)  # tokens with KV computed
    target = prompt_len.copy()  # prefill target (grows after preemption: prompt + generated)
    generated = np.zeros(n, np.int64)
    blocks = np.zeros(n, np.int64)
    stats = np.zeros((n, N_REQ_STATS))
    n_run = 0
    # waiting queue: ring buffer of request ids (preempted ones are pushed at the front)
    cap = n + 1
    wq = np.empty(cap, np.int64)
    w_head = 0
    w_len = 0
    n_front = 0  # preempted requests at the head of the queue; the rest are arrivals in arrival order
    next_arr = 0
    free_blocks = kv_blocks
    # ---- block pool (lru mode only; sized 1 otherwise)
    mb = 1
    if lru:
        for r in range(n):
            mb = max(mb, (prompt_len[r] + gen_len[r] + block - 1) // block + 1)
    n_pool = kv_blocks - 1 if lru else 0  # vLLM keeps one block as the null block
    n_keys = ubase * mb if lru else 1  # shared contents; private keys lie above
    node, dup, table, cnt = kv.new_pool(max(n_pool, 0), n_keys)
    req_blk = np.empty((n if lru else 1, mb), np.int32)
    n_cached = np.zeros(n, np.int64)  # blocks of r registered in the table
    n_shared = np.zeros(n, np.int64)  # r's leading blocks whose keys are shared
    for r in range(n if lru else 0):
        n_shared[r] = kv.shared_blocks(block, n_sys[r], grp_c[r], prm_c[r], prompt_len[r])
    blocks_held_before = np.zeros(n, np.int64)  # blocks r held when last preempted
    hit0 = np.zeros(n, np.int64)  # first-admission hit (tokens)
    ideal0 = np.zeros(n, np.int64)  # always-hit equivalent of it
    restarted = np.zeros(n, np.bool_)  # preempted at least once: its prefill is recompute
    seen_p = np.zeros(ubase + 1, np.bool_)  # content ids whose blocks were computed before
    comp = np.zeros(N_COMPONENTS)
    # every row a run may write, allocated once and not zeroed (only the rows written become
    # resident; the rows kept are copied out at the end): an array the loop could replace (grown
    # by doubling before) costs numba a reference-count update at every step (~7% of a replay)
    rec = np.empty((max_steps if record else 1, 8))  # P, D, n_prefill, n_decode, B, K, t_start, ctx_max
    # Members (see the module docstring): running[0:first_x) are decoders that advance
    # implicitly (a member's computed/generated hold its values minus s, the steps since the
    # members were last written back); running[first_x:n_run) are handled one by one.
    # Finished members leave holes until the next write-back, hence twice max_seqs positions.
    steady = fast and not breakdown and max_tokens >= max_seqs
    rcap = 2 * max_seqs
    running = np.empty(rcap, np.int64)
    new_tok = np.zeros(rcap, np.int64)
    first_x = 0  # members before this position, the others from it
    n_mem = 0  # live members
    n_live = 0  # live running requests (n_run counts positions, holes included)
    s = 0
    tot_blocks = 0  # blocks held by live members
    want_ctx = spread or record  # the longest decoding context is computed only where it is read
    # the members' longest context as stored (minus s, so it may be negative): it changes only
    # as members join and finish, so it is kept instead of searched every step (stale: search)
    mem_ctx = NO_CTX
    stale = False
    W = 1
    while W <= 2 * block + 1:
        W *= 2
    # ring[s % W]: positions of members with an event at step s (a member aborted by its
    # client leaves its pending event there until its step: up to rcap per slot)
    ring = np.empty((W, rcap), np.int64)
    ring_n = np.zeros(W, np.int64)
    fin_at = np.zeros(rcap, np.int64)  # step s in which the member at a position finishes
    fin_list = np.empty(max_seqs, np.int64)
    memo_k = np.full(MEMO, -1, np.int64)  # predicted cycle of members-only steps by (blocks, batch)
    memo_v = np.empty(MEMO)
    # a program that reads the longest context: its members-only steps differ in that alone,
    # so their other components are looked up by (blocks, batch) instead; rows in the order
    # they were made (memo_v holds a row's index), so only the rows in use touch memory
    memo_c = np.empty((MEMO - MEMO // 4 if spread else 1, N_COMPONENTS))
    n_memo = 0
    n_steps = 0
    n_preempt = 0
    t = 0.0
    finished = 0
    status = 0
    while finished < n:
        # admit arrivals
        while next_arr < n and arrival_us[next_arr] <= t:
            wq[(w_head + w_len) % cap] = next_arr
            w_len += 1
            next_arr += 1
        deadline = False
        if timeout_us > 0.0:
            while oldest < n and gone[oldest]:
                oldest += 1
            deadline = oldest < next_arr and t - arrival_us[oldest] >= timeout_us
        if deadline:
            # the client gave up: abort every request past its deadline, running or waiting, in
            # running order; a member leaves a hole, as a finished one does, its private blocks
            # given their hashes first, as at a write-back (the members stay members)
            for j in range(first_x):
                r = running[j]
                if gone[r] or t - arrival_us[r] < timeout_us:
                    continue
                if lru:
                    _register_full(r, min(computed[r] + s, prompt_len[r] + generated[r] + s - 1) // block, node,
                                   dup, table, req_blk, n_cached, block, n_sys, grp_c, prm_c, ubase, prompt_len, mb,
                                   seen_p)
                    kv.release_row(node, cnt, req_blk, r, blocks[r])
                else:
                    free_blocks += blocks[r]
                tot_blocks -= blocks[r]
                blocks[r] = 0
                gone[r] = True
                timed_out[r] = True
                finished += 1
                n_mem -= 1
                n_live -= 1
                if computed[r] == mem_ctx:
                    stale = True
            k = first_x
            for j in range(first_x, n_run):
                r = running[j]
                if t - arrival_us[r] >= timeout_us:
                    if lru:
                        kv.release_row(node, cnt, req_blk, r, blocks[r])
                    else:
                        free_blocks += blocks[r]
                    blocks[r] = 0
                    gone[r] = True
                    timed_out[r] = True
                    finished += 1
                    n_live -= 1
                else:
                    running[k] = r
                    k += 1
            n_run = k
            w_head, w_len, n_front, dropped = _drop_waiting(wq, w_head, w_len, n_front, arrival_us, t, timeout_us,
                                                            gone, timed_out)
            finished += dropped
            if finished >= n:
                break
        q = (s + 1) & (W - 1)
        if first_x > 0:
            # members stay members unless this step must see every request: a block shortage
            # (preemption); or the holes (finished and aborted members) fill the positions
            leave = n_mem == 0 or n_run - n_live >= max_seqs
            if not leave:
                k = ring_n[q]
                for a in range(1, k):  # this step's events in running order
                    x = ring[q, a]
                    b = a - 1
                    while b >= 0 and ring[q, b] > x:
                        ring[q, b + 1] = ring[q, b]
                        b -= 1
                    ring[q, b + 1] = x
                need = 0
                last = -1  # position of the last member short of a block
                free_now = cnt[kv.FREE] if lru else free_blocks
                for a in range(k if k > free_now else 0):  # each needs one block at most
                    r = running[ring[q, a]]
                    if not gone[r] and computed[r] + s + 1 > blocks[r] * block:
                        need += 1
                        last = ring[q, a]
                short = need - free_now
                # short of blocks: the members preempt the requests behind them, last first, as
                # the request-by-request step would (each member needs one block at most); only
                # where those behind the last one short might not free enough: write back
                leave = short > 0 and not _tail_frees(short, running, gone, last, n_run, lru, node, req_blk, blocks)
            if leave:  # write the members back: everyone is handled one by one
                k = 0
                for j in range(first_x):
                    r = running[j]
                    if gone[r]:
                        continue
                    _write_back(r, s, lru, computed, generated, target, node, dup, table, req_blk, n_cached, block,
                                n_sys, grp_c, prm_c, ubase, prompt_len, mb, seen_p)
                    running[k] = r
                    k += 1
                for j in range(first_x, n_run):
                    running[k] = running[j]
                    k += 1
                n_run = k
                first_x = 0
                n_mem = 0
                mem_ctx = NO_CTX
                stale = False
                tot_blocks = 0
                s = 0
                ring_n[:] = 0
        if n_live == 0 and w_len == 0:
            t = arrival_us[next_arr]
            continue
        budget = max_tokens
        # 1) running requests, in order: the members' events (a block needed or filled, the
        # last token), each taking one token; then the others
        n_fin = 0
        if first_x > 0:
            s += 1
            k = ring_n[q]
            ring_n[q] = 0
            for a in range(k):
                j = ring[q, a]
                r = running[j]
                if gone[r]:  # aborted by its client (its pending event only)
                    continue
                end = computed[r] + s
                if end > blocks[r] * block:
                    while (cnt[kv.FREE] if lru else free_blocks) < 1:  # the tail covers it (`_tail_frees`)
                        if n_run > first_x:  # the last request handled one by one
                            n_run -= 1
                            v = running[n_run]
                        else:  # the last live member: written back alone (before this step's token)
                            p = first_x - 1
                            while gone[running[p]]:
                                p -= 1
                            v = running[p]
                            running[p] = HOLE  # its pending event is skipped, as an aborted member's
                            if computed[v] == mem_ctx:
                                stale = True
                            _write_back(v, s - 1, lru, computed, generated, target, node, dup, table, req_blk,
                                        n_cached, block, n_sys, grp_c, prm_c, ubase, prompt_len, mb, seen_p)
                            tot_blocks -= blocks[v]
                            n_mem -= 1
                        held = _preempt(v, lru, node, cnt, req_blk, blocks, blocks_held_before,
                                        n_cached, computed, target, prompt_len, generated, restarted, stats)
                        if not lru:
                            free_blocks += held
                        w_head = (w_head - 1 + cap) % cap
                        wq[w_head] = v
                        w_len += 1
                        n_front += 1
                        n_live -= 1
                        n_preempt += 1
                    if lru:
                        e0 = cnt[kv.EVICTED]
                        kv.allocate(node, dup, table, cnt, 1, req_blk, r, blocks[r])
                        stats[r, EVICTIONS] += cnt[kv.EVICTED] - e0
                    else:
                        free_blocks -= 1
                    blocks[r] += 1
                    tot_blocks += 1
                if lru and (fin_at[j] == s or n_cached[r] < n_shared[r]):
                    # its private blocks wait (module docstring): once its shared ones are all
                    # registered, only its last event registers any (no division at the others)
                    full = min(end, prompt_len[r] + generated[r] + s - 1) // block
                    if fin_at[j] != s:
                        full = min(full, n_shared[r])
                    if full > n_cached[r]:  # written out: `_register_full` here made every replay ~50% slower
                        kv.register_row(node, dup, table, req_blk, r, n_cached[r], full, block, n_sys[r],
                                        grp_c[r], prm_c[r], ubase + r, prompt_len[r], mb)
                        n_cached[r] = full
                        _mark_seen(seen_p, full, block, n_sys[r], grp_c[r], prm_c[r], prompt_len[r])
                if fin_at[j] == s:
                    fin_list[n_fin] = j
                    n_fin += 1
                else:
                    q2 = _next_event(blocks[r], computed[r], n_cached[r], fin_at[j], block, lru, s, n_shared[r]) & (W - 1)
                    ring[q2, ring_n[q2]] = j
                    ring_n[q2] += 1
            budget -= n_mem
        i = first_x
        while i < n_run:
            r = running[i]
            if computed[r] < target[r]:
                want = min(target[r] - computed[r], budget)
            else:
                want = 1 if budget > 0 else 0
            if want == 0:
                new_tok[i] = 0
                i += 1
                continue
            end = computed[r] + want
            held = blocks[r] * block
            if held - block < end <= held:
                need = 0  # the common case, without an integer division (~13% of a simulation)
            else:
                need = (end + block - 1) // block - blocks[r]
            avail = cnt[kv.FREE] if lru else free_blocks
            while need > avail and n_run - 1 > i:
                # preempt the last running request: its blocks are freed (cached ones stay cached)
                v = running[n_run - 1]
                held = _preempt(v, lru, node, cnt, req_blk, blocks, blocks_held_before,
                                n_cached, computed, target, prompt_len, generated, restarted, stats)
                if not lru:
                    free_blocks += held
                avail = cnt[kv.FREE] if lru else free_blocks
                w_head = (w_head - 1 + cap) % cap
                wq[w_head] = v
                w_len += 1
                n_front += 1
                n_run -= 1
                n_live -= 1
                n_preempt += 1
            if need > avail:
                new_tok[i] = 0  # cannot grow even alone: wait for blocks
                i += 1
                continue
            if lru:
                if need > 0:
                    e0 = cnt[kv.EVICTED]
                    kv.allocate(node, dup, table, cnt, need, req_blk, r, blocks[r])
                    stats[r, EVICTIONS] += cnt[kv.EVICTED] - e0
                lim = min(computed[r] + want, prompt_len[r] + generated[r])
                if lim >= (n_cached[r] + 1) * block:  # blocks that became full get their hashes
                    full = lim // block
                    kv.register_row(node, dup, table, req_blk, r, n_cached[r], full, block, n_sys[r],
                                    grp_c[r], prm_c[r], ubase + r, prompt_len[r], mb)
                    n_cached[r] = full
                    _mark_seen(seen_p, full, block, n_sys[r], grp_c[r], prm_c[r], prompt_len[r])
            else:
                free_blocks -= need
            blocks[r] += need
            new_tok[i] = want
            budget -= want
            i += 1
        # 2) admit waiting requests FCFS
        while w_len > 0 and n_live < max_seqs and budget > 0:
            r = wq[w_head]
            start = 0
            n_hit = 0
            evictable = 0
            if lru:
                # longest chain of full blocks still cached, at most num_tokens - 1 tokens
                # (written out here, not called: this runs every step a request waits, and a call
                # with array arguments costs atomic reference counting in numba)
                max_hit = (prompt_len[r] + generated[r] - 1) // block
                while n_hit < max_hit:
                    k = kv.chain_key(n_hit, block, n_sys[r], grp_c[r], prm_c[r], ubase + r, prompt_len[r], mb)
                    if k < n_keys:
                        b = table[k, 0]
                    elif n_hit < blocks_held_before[r] and node[req_blk[r, n_hit], kv.KEY] == k:
                        b = req_blk[r, n_hit]  # its own block from before its preemption
                    else:
                        b = -1
                    if b < 0:
                        break
                    req_blk[r, n_hit] = b
                    if node[b, kv.REF] == 0:
                        evictable += 1
                    n_hit += 1
                start = n_hit * block
            elif generated[r] == 0 and cached_len[r] > 0:
                start = cached_len[r]
            if not chunked and target[r] - start > budget:
                break  # vLLM without chunked prefill: the whole prompt in one step, or wait
            want = min(target[r] - start, budget)
            need = (start + want + block - 1) // block
            if lru:
                need = need - n_hit + evictable
                if need > cnt[kv.FREE]:
                    break
            elif need > free_blocks:
                break
            w_head = (w_head + 1) % cap
            w_len -= 1
            if n_front > 0:
                n_front -= 1
            computed[r] = start
            if lru:
                kv.touch_row(node, cnt, req_blk, r, n_hit)
                n_new = need - evictable
                if n_new > 0:
                    e0 = cnt[kv.EVICTED]
                    kv.allocate(node, dup, table, cnt, n_new, req_blk, r, n_hit)
                    stats[r, EVICTIONS] += cnt[kv.EVICTED] - e0
                blocks[r] = n_hit + n_new
                n_cached[r] = n_hit
                full = min(start + want, prompt_len[r] + generated[r]) // block
                kv.register_row(node, dup, table, req_blk, r, n_hit, full, block, n_sys[r],
                                grp_c[r], prm_c[r], ubase + r, prompt_len[r], mb)
                n_cached[r] = max(n_hit, full)
                if restarted[r]:
                    stats[r, RESTART_HIT] += start
                else:
                    # what "a prompt seen before is always cached" would have given
                    ideal = 0
                    if prm_c[r] >= 0 and seen_p[prm_c[r]]:
                        ideal = ((prompt_len[r] - 1) // block) * block
                    elif grp_c[r] >= 0 and seen_p[grp_c[r]]:
                        ideal = min(n_sys[r], (prompt_len[r] - 1) // block) * block
                    hit0[r] = start
                    ideal0[r] = max(ideal, start)
                    stats[r, HIT] = start
                    stats[r, IDEAL_HIT] = ideal0[r]
                _mark_seen(seen_p, full, block, n_sys[r], grp_c[r], prm_c[r], prompt_len[r])
            else:
                blocks[r] = need
                free_blocks -= need
                if generated[r] == 0 and not restarted[r]:
                    stats[r, HIT] = start
                    stats[r, IDEAL_HIT] = start
            running[n_run] = r
            new_tok[n_run] = want
            n_run += 1
            n_live += 1
            budget -= want
        # 3) aggregates -> components -> predicted step cycle
        P = 0.0
        D = float(n_mem)  # the members decode one token each
        n_p = 0.0
        n_d = D
        K = float(tot_blocks * block)
        K_dec = K
        ctx = 0.0  # the longest decoding context after this step (members: stored + s)
        if want_ctx and n_mem > 0:
            if stale:
                mem_ctx = NO_CTX
                for j in range(first_x):
                    if not gone[running[j]]:
                        mem_ctx = max(mem_ctx, computed[running[j]])
                stale = False
            ctx = max(ctx, float(mem_ctx + s))
        P_rec = 0.0  # prefill tokens recomputed because their cached blocks were evicted
        P_pre = 0.0  # prefill tokens recomputed after a preemption
        for j in range(first_x, n_run):
            r = running[j]
            if new_tok[j] == 0:
                K += blocks[r] * block
                K_dec += blocks[r] * block
                continue
            end = computed[r] + new_tok[j]
            kr = blocks[r] * block  # the blocks it holds after this step's tokens
            if not kr - block < end <= kr:
                kr = ((end + block - 1) // block) * block
            if computed[r] < prompt_len[r]:
                P += new_tok[j]
                n_p += 1.0
                if breakdown:
                    if restarted[r]:
                        P_pre += new_tok[j]
                    else:
                        lo = max(computed[r], hit0[r])
                        hi = min(computed[r] + new_tok[j], ideal0[r])
                        if hi > lo:
                            P_rec += hi - lo
            else:
                D += new_tok[j]
                n_d += 1.0
                K_dec += kr
                ctx = max(ctx, float(end))
            K += kr
        if P + D == 0.0:
            # nothing schedulable (KV exhausted by a lone request): wait for the next arrival
            # or, with a client timeout, the next deadline
            wake = arrival_us[next_arr] if next_arr < n else np.inf
            if timeout_us > 0.0 and oldest < n:
                wake = min(wake, arrival_us[oldest] + timeout_us)
            if wake < np.inf:
                t = max(t, wake)
                continue
            status = 2
            break
        h = -1  # memo slot of a members-only step
        key = 0
        found = False
        if first_x == n_run:
            # members only: the step depends on (batch, blocks) alone, and most pairs recur, so
            # their predicted cycle is looked up (the program is a pure function); with spread,
            # on the longest context too, so only the components that do not read it are
            key = tot_blocks * (max_seqs + 1) + n_mem
            h = (key * 2654435761) & (MEMO - 1)
            while memo_k[h] >= 0 and memo_k[h] != key:
                h = (h + 1) & (MEMO - 1)
            found = memo_k[h] == key
        if found and not spread:
            dt = memo_v[h]
        else:
            if found:
                comp[:] = memo_c[int(memo_v[h])]
                fill_context(model, n_d, K, ctx, comp)
            else:
                fill_components(model, P, D, n_p, n_d, float(n_live), K, ctx, comp)
            dt = predict(comp, consts)
            if not (dt >= 1.0) or not np.isfinite(dt):
                status = 1
                break
            if h >= 0 and not found and n_memo < MEMO - MEMO // 4:
                memo_k[h] = key
                if spread:  # the row of its components
                    memo_c[n_memo] = comp
                    memo_v[h] = n_memo
                else:
                    memo_v[h] = dt
                n_memo += 1
        if breakdown and D > 0.0:
            base = dt
            if P > 0.0:
                fill_components(model, 0.0, D, 0.0, n_d, float(n_live) - n_p, K_dec, ctx, comp)
                base = predict(comp, consts)
            extra = dt - base
            f_rec = P_rec / P if P > 0.0 else 0.0
            f_pre = P_pre / P if P > 0.0 else 0.0
            for j in range(n_run):
                r = running[j]
                if new_tok[j] == 0 or generated[r] == 0 or computed[r] < prompt_len[r]:
                    continue
                if computed[r] + new_tok[j] < target[r]:
                    stats[r, T_PREEMPT] += dt  # re-prefilling its own generated tokens
                    continue
                stats[r, T_DECODE] += base
                stats[r, T_PREFILL] += extra * (1.0 - f_rec - f_pre)
                stats[r, T_RECOMPUTE] += extra * f_rec
                stats[r, T_PREEMPT] += extra * f_pre
        if breakdown:
            for j in range(n_run):
                r = running[j]
                if new_tok[j] > 0 and generated[r] > 0 and computed[r] < prompt_len[r]:
                    stats[r, T_PREEMPT] += dt  # re-prefilling its prompt after a preemption
        if record:
            rec[n_steps, 0] = P
            rec[n_steps, 1] = D
            rec[n_steps, 2] = n_p
            rec[n_steps, 3] = n_d
            rec[n_steps, 4] = n_live
            rec[n_steps, 5] = K
            rec[n_steps, 6] = t
            rec[n_steps, 7] = ctx
        t += dt
        n_steps += 1
        if n_steps >= max_steps:
            status = 2
            break
        # 4) apply the step: emit tokens, finish requests; members first (their last tokens),
        # then the others, of which the leading decoders become members
        for a in range(n_fin):
            r = running[fin_list[a]]
            done_us[r] = t - arrival_us[r]
            gone[r] = True
            if timeout_us > 0.0 and done_us[r] > timeout_us:
                timed_out[r] = True
            if lru:
                kv.release_row(node, cnt, req_blk, r, blocks[r])
            else:
                free_blocks += blocks[r]
            tot_blocks -= blocks[r]
            blocks[r] = 0
            finished += 1
            n_mem -= 1
            n_live -= 1
            if computed[r] == mem_ctx:
                stale = True
        join = steady
        j = first_x
        k = first_x
        while j < n_run:
            r = running[j]
            nt = new_tok[j]
            keep = True
            if nt > 0:
                computed[r] += nt
                if computed[r] >= target[r]:
                    generated[r] += 1
                    if generated[r] == 1:
                        first_us[r] = t - arrival_us[r]
                    if generated[r] >= gen_len[r]:
                        done_us[r] = t - arrival_us[r]
                        gone[r] = True
                        if timeout_us > 0.0 and done_us[r] > timeout_us:
                            timed_out[r] = True  # the client left during this step
                        if lru:
                            kv.release_row(node, cnt, req_blk, r, blocks[r])
                        else:
                            free_blocks += blocks[r]
                        blocks[r] = 0
                        finished += 1
                        n_live -= 1
                        keep = False
                    else:
                        target[r] = computed[r] + 1  # next step decodes one token
            if keep:
                c = computed[r]
                slack = blocks[r] * block - c
                if (join and target[r] == c + 1 and generated[r] >= 1 and prompt_len[r] + generated[r] == c + 1
                        and 0 <= slack <= block):
                    # a decoder with only members before it becomes one (values stored minus s)
                    computed[r] -= s
                    generated[r] -= s
                    target[r] = computed[r] + 1
                    tot_blocks += blocks[r]
                    mem_ctx = max(mem_ctx, computed[r])
                    n_mem += 1
                    fin_at[k] = gen_len[r] - generated[r]
                    q2 = _next_event(blocks[r], computed[r], n_cached[r], fin_at[k], block, lru, s, n_shared[r]) & (W - 1)
                    ring[q2, ring_n[q2]] = k
                    ring_n[q2] += 1
                    first_x = k + 1
                else:
                    join = False
                running[k] = r
                k += 1
            j += 1
        n_run = k
    return status, first_us, done_us, n_steps, n_preempt, rec[:n_steps].copy() if record else rec[:0], stats, timed_out


@dataclass
class Workload:
    """One experiment's request stream as the simulator consumes it."""
    arrival_us: np.ndarray  # float64, sorted
    prompt_len: np.ndarray  # int64
    cached_len: np.ndarray  # int64: prompt tokens served from the prefix cache (always-hit mode)
    gen_len: np.ndarray  # int64: tokens generated (>= 1)
    stage: np.ndarray  # int64 load-stage index per request
    measured_e2e_s: np.ndarray | None = None
    measured_ttft_s: np.ndarray | None = None
    prompt_id: np.ndarray | None = None  # int64 prompt-pool slot per request (-1 = unique prompt)
    group_id: np.ndarray | None = None  # int64 system-prompt group per request (-1 = none)
    system_prompt_len: int = 0  # tokens of the group's shared system prompt
    measured_failed: np.ndarray | None = None  # bool: the request failed in the measurement
    timeout_us: float = 0.0  # the client's total timeout (0 = none)

    @cached_property
    def stage_masks(self) -> dict[int, np.ndarray]:
        """Per load stage (ascending), its requests: every scoring of every replay asks for
        them, and `np.unique` over the stage column was ~1% of a screen (issue 31)."""
        return {int(s): self.stage == s for s in np.unique(self.stage)}

    @cached_property
    def derived(self) -> dict:
        """What is derived from this request stream alone, kept once made: every replay and
        scoring of the experiment asks for the same (`_content_ids`; `scoring._tails`' measured
        percentiles, by the requests selected; a held-out view's part, by its stages). Keyed
        by what it is made from, never by who asks; never written to by those who read it."""
        return {}


@dataclass
class SimResult:
    status: int
    ttft_us: np.ndarray
    e2e_us: np.ndarray
    n_steps: int
    n_preempted: int
    states: np.ndarray  # recorded steps (P, D, n_prefill, n_decode, B, K, t, ctx_max) if requested
    req_stats: np.ndarray = field(default_factory=lambda: np.zeros((0, N_REQ_STATS)))  # see HIT..
    prefix_cache: str = "always-hit"  # the mode that ran
    breakdown: bool = False  # whether the T_* columns were filled
    timed_out: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # aborted by the client timeout
    rejected: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # longer than max_model_len: failed

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def aborted(self) -> np.ndarray:
        """Per request: failed for the client: aborted by its timeout or rejected by the server
        (longer than max_model_len); all False for a result made without the masks."""
        out = self.timed_out if len(self.timed_out) else np.zeros(len(self.e2e_us), bool)
        return out | self.rejected if len(self.rejected) else out

    @property
    def n_evictions(self) -> int:
        return int(self.req_stats[:, EVICTIONS].sum()) if len(self.req_stats) else 0


def _content_ids(wl: Workload, block: int):
    """Per request: key of its system-prompt blocks, of its other prompt blocks, and how many
    system-prompt blocks it has; contents are numbered groups first, then prompts. Made once
    per workload and block size (`Workload.derived`)."""
    key = ("content", block)
    if key not in wl.derived:
        wl.derived[key] = _make_content_ids(wl, block)
    return wl.derived[key]


def _make_content_ids(wl: Workload, block: int):
    n = len(wl.arrival_us)
    pid = np.full(n, -1, np.int64) if wl.prompt_id is None else np.asarray(wl.prompt_id, np.int64)
    gid = np.full(n, -1, np.int64) if wl.group_id is None else np.asarray(wl.group_id, np.int64)
    n_groups = int(gid.max()) + 1 if n and gid.max() >= 0 else 0
    n_prompts = int(pid.max()) + 1 if n and pid.max() >= 0 else 0
    grp_c = np.where(gid >= 0, gid, -1).astype(np.int64)
    prm_c = np.where(pid >= 0, n_groups + pid, -1).astype(np.int64)
    n_sys = np.where(gid >= 0, int(wl.system_prompt_len) // block, 0).astype(np.int64)
    return n_sys, grp_c, prm_c, n_groups + n_prompts


def simulate(predict, consts, model_vec, wl: Workload, kv_blocks: int, max_seqs: int = 128,
             max_tokens: int = 2048, block: int = 16, max_steps: int = 5_000_000,
             record: bool = False, prefix_cache: str = "auto", breakdown: bool = False,
             timeout_us: float | None = None, fast: bool = True, spread: bool = False,
             max_model_len: int | None = None, chunked_prefill: bool = True) -> SimResult:
    """Run one experiment; `predict` is a numba function of signature PREDICTOR_TYPE.

    prefix_cache: "lru" (vLLM's block pool), "always-hit" (the workload's cached_len),
    "auto" = lru when the workload carries prompt identity, else always-hit, or "off" (vLLM
    with prefix caching disabled: no hits; the pool less its null block, as lru).
    breakdown=True fills the per-request time attribution read by `time_breakdown_by_stage`.
    timeout_us: the client timeout (module docstring); None = the workload's, 0 = none.
    fast=False runs every step through the general step (the steady-decode stretches off):
    the same result, bit for bit, only slower; tests compare the two.
    spread=True: the program reads the longest decoding context (ctx_max, t_decode_kv_max), so
    steps of members alone are not looked up by (batch, blocks), which do not determine it.
    max_model_len: a request whose prompt + output exceeds it fails at once (vLLM answers 400;
    `SimResult.rejected`, E2E and TTFT 0) and puts no load on the server; None = no limit.
    chunked_prefill=False: a waiting request is admitted only when its whole remaining prompt
    fits the step's token budget (vLLM's scheduler stops admitting at the first that does not).
    """
    if prefix_cache not in PREFIX_MODES:
        raise ValueError(f"prefix_cache must be one of {PREFIX_MODES}, not {prefix_cache!r}")
    off = prefix_cache == "off"
    lru = prefix_cache == "lru" or (prefix_cache == "auto" and wl.prompt_id is not None)
    f8 = lambda a: np.require(a, np.float64, ["C", "W"])  # noqa: E731
    i8 = lambda a: np.require(a, np.int64, ["C", "W"])  # noqa: E731
    n_sys, grp_c, prm_c, ubase = _content_ids(wl, int(block))
    timeout = float(wl.timeout_us if timeout_us is None else timeout_us)
    if not timeout >= 0.0:
        raise ValueError(f"timeout_us must be >= 0 (0 = none), not {timeout!r}")
    n = len(wl.arrival_us)
    rejected = np.zeros(n, bool)
    if max_model_len is not None:
        rejected = np.asarray(wl.prompt_len, np.int64) + np.asarray(wl.gen_len, np.int64) > int(max_model_len)
    keep = np.flatnonzero(~rejected) if rejected.any() else slice(None)
    cached = np.zeros(n, np.int64) if off else wl.cached_len
    sub = lambda a: i8(np.asarray(a)[keep])  # noqa: E731
    status, first, done, n_steps, n_pre, rec, stats, timed_out = _simulate(
        predict, f8(consts), f8(model_vec), f8(np.asarray(wl.arrival_us)[keep]), sub(wl.prompt_len), sub(cached),
        sub(wl.gen_len), int(kv_blocks) - (1 if off else 0), int(max_seqs), int(max_tokens),
        int(block), int(max_steps), bool(record),
        bool(lru and not off), sub(n_sys), sub(grp_c), sub(prm_c), int(ubase), bool(breakdown),
        timeout if np.isfinite(timeout) else 0.0, bool(fast), bool(spread), bool(chunked_prefill))
    if timed_out.any():  # what the client recorded: it gave up at the timeout
        first = np.where(timed_out & ((first < 0) | (first > timeout)), timeout, first)
        done = np.where(timed_out, timeout, done)
    if rejected.any():  # back to one entry per request of the workload
        full = lambda a, fill: np.full((n,) + a.shape[1:], fill, a.dtype)  # noqa: E731
        first2, done2, to2, st2 = full(first, 0.0), full(done, 0.0), full(timed_out, False), full(stats, 0.0)
        first2[keep], done2[keep], to2[keep], st2[keep] = first, done, timed_out, stats
        first, done, timed_out, stats = first2, done2, to2, st2
    mode = "off" if off else "lru" if lru else "always-hit"
    return SimResult(int(status), first, done, int(n_steps), int(n_pre), rec, stats,
                     mode, bool(breakdown), timed_out, rejected)


def outcomes_by_stage(result: SimResult, wl: Workload, mask=None) -> list[dict]:
    """Per load stage: requests, how many finished and how many the client timeout aborted
    (the two sum to the requests of a completed simulation)."""
    out = []
    to = result.aborted
    for s, m in _stage_groups(result, wl, mask):
        n_to = int((to & m).sum())
        out.append({"stage": s, "requests": int(m.sum()), "finished": int((m & ~to & (result.e2e_us >= 0)).sum()),
                    "timed_out": n_to})
    return out


def _stage_groups(result: SimResult, wl: Workload, mask):
    if mask is None:
        yield from wl.stage_masks.items()
        return
    keep = np.asarray(mask, bool)
    for s, in_stage in wl.stage_masks.items():
        yield s, keep & in_stage


def cache_stats_by_stage(result: SimResult, wl: Workload, mask=None) -> list[dict]:
    """Per load stage: prompt tokens, tokens served from the prefix cache when each request was
    first scheduled, hit rate, what always-hit would have served, evictions and preemptions
    (attributed to the request that caused / suffered them). `mask` restricts the requests."""
    out = []
    for s, m in _stage_groups(result, wl, mask):
        st = result.req_stats[m]  # one gather; its columns hold whole counts, so every sum is exact
        prompt = float(wl.prompt_len[m].sum())
        hit = float(st[:, HIT].sum())
        ideal = float(st[:, IDEAL_HIT].sum())
        out.append({
            "stage": s, "requests": int(m.sum()), "prompt_tokens": int(prompt),
            "cached_tokens": int(hit), "hit_rate": hit / prompt if prompt else None,
            "always_hit_tokens": int(ideal), "always_hit_rate": ideal / prompt if prompt else None,
            "recomputed_tokens": int(ideal - hit),
            "restart_cached_tokens": int(st[:, RESTART_HIT].sum()),
            "evictions": int(st[:, EVICTIONS].sum()), "preemptions": int(st[:, PREEMPTIONS].sum()),
            "mode": result.prefix_cache,
        })
    return out


BREAKDOWN_PARTS = ("decode", "prefill", "recompute", "preempt", "queue")


def time_breakdown_by_stage(result: SimResult, wl: Workload, mask=None) -> list[dict]:
    """Per load stage: the simulated time per output token, sum(e2e - ttft) / sum(N - 1), split
    into what the requests' decode phases were spent on (seconds per output token):
      decode    - the decode-only cost of the steps they decoded in (the same step predicted
                  without its prefill chunks; the whole step when it had none);
      prefill   - the rest of those steps, for fresh prefill chunks riding along;
      recompute - the same, for prompt tokens recomputed because their cached blocks were evicted;
      preempt   - the same, for preempted requests' recompute, plus the steps in which a request
                  re-prefilled its own context after being preempted;
      queue     - the remainder: steps in which the request was not scheduled (preempted and
                  waiting, or stalled for blocks).
    The parts sum to per_token_s. Needs simulate(..., breakdown=True)."""
    if not result.breakdown:
        raise ValueError("time_breakdown_by_stage needs simulate(..., breakdown=True)")
    st = result.req_stats
    out = []
    for s, m in _stage_groups(result, wl, mask):
        m = m & (wl.gen_len >= 2) & (result.e2e_us >= 0) & ~result.aborted
        tokens = float((wl.gen_len[m] - 1).sum())
        span = float((result.e2e_us[m] - result.ttft_us[m]).sum())
        parts = {"decode": st[m, T_DECODE].sum(), "prefill": st[m, T_PREFILL].sum(),
                 "recompute": st[m, T_RECOMPUTE].sum(), "preempt": st[m, T_PREEMPT].sum()}
        parts["queue"] = span - sum(parts.values())
        row = {"stage": s, "requests": int(m.sum()), "output_tokens": int(tokens),
               "per_token_s": span / tokens / 1e6 if tokens else None}
        for k in BREAKDOWN_PARTS:
            row[f"{k}_s"] = float(parts[k]) / tokens / 1e6 if tokens else None
        out.append(row)
    return out
