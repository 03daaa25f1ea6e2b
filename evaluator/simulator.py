"""A numba-compiled discrete-step simulation of the vLLM V1 scheduler, driven by a candidate.

Per step (DESIGN.md section 1): every running request is scheduled in order (a decode takes
1 token, an unfinished prefill takes a chunk of the remaining budget); the rest of the
2048-token budget admits waiting requests FCFS while fewer than max_num_seqs run, with
chunked prefill. KV blocks of 16 tokens are allocated as tokens are computed; when a running
request cannot get a block the most recently admitted running request is preempted (its
blocks freed, recomputed later from the front of the queue). A prompt whose shared system
prefix is already cached skips those full blocks (prefix caching).

The clock advances by the candidate's predicted step cycle. A request's first token is
emitted at the end of the step that finishes its prefill; a decode step emits one token.

The predictor is a *parameter* of type `PREDICTOR_TYPE` (a first-class function type), so the
simulator is compiled once and any candidate compiled with the fixed signature plugs in.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from evaluator.components import N_COMPONENTS, PREDICTOR_TYPE, fill_components

# status codes returned by simulate()
OK = 0
BAD_PREDICTION = 1  # NaN, infinite or < 1 us
STEP_LIMIT = 2  # runaway: more steps than allowed


_F1 = numba.float64[::1]
_I1 = numba.int64[::1]
_SIM_ARGS = (PREDICTOR_TYPE, _F1, _F1, _F1, _I1, _I1, _I1, numba.int64, numba.int64, numba.int64,
             numba.int64, numba.int64, numba.boolean)


@numba.njit(_SIM_ARGS, cache=True, error_model="numpy")
def _simulate(predict, consts, model, arrival_us, prompt_len, cached_len, gen_len,
              kv_blocks, max_seqs, max_tokens, block, max_steps, record):
    n = arrival_us.shape[0]
    first_us = np.full(n, -1.0)
    done_us = np.full(n, -1.0)
    computed = np.zeros(n, np.int64)  # tokens with KV computed
    target = prompt_len.copy()  # prefill target (grows after preemption: prompt + generated)
    generated = np.zeros(n, np.int64)
    blocks = np.zeros(n, np.int64)
    running = np.empty(max_seqs, np.int64)
    n_run = 0
    # waiting queue: ring buffer of request ids (preempted ones are pushed at the front)
    cap = n + 1
    wq = np.empty(cap, np.int64)
    w_head = 0
    w_len = 0
    next_arr = 0
    free_blocks = kv_blocks
    comp = np.zeros(N_COMPONENTS)
    new_tok = np.zeros(max_seqs, np.int64)
    rec_n = max_steps if record else 1
    rec = np.zeros((rec_n, 7))  # P, D, n_prefill, n_decode, B, K, t_start
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
        if n_run == 0 and w_len == 0:
            t = arrival_us[next_arr]
            continue
        budget = max_tokens
        # 1) running requests, in order
        i = 0
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
            need = (computed[r] + want + block - 1) // block - blocks[r]
            while need > free_blocks and n_run - 1 > i:
                # preempt the last running request
                v = running[n_run - 1]
                free_blocks += blocks[v]
                blocks[v] = 0
                computed[v] = 0
                target[v] = prompt_len[v] + generated[v]
                w_head = (w_head - 1 + cap) % cap
                wq[w_head] = v
                w_len += 1
                n_run -= 1
                n_preempt += 1
            if need > free_blocks:
                new_tok[i] = 0  # cannot grow even alone: wait for blocks
                i += 1
                continue
            blocks[r] += need
            free_blocks -= need
            new_tok[i] = want
            budget -= want
            i += 1
        # 2) admit waiting requests FCFS
        while w_len > 0 and n_run < max_seqs and budget > 0:
            r = wq[w_head]
            start = 0
            if generated[r] == 0 and cached_len[r] > 0:
                start = cached_len[r]
            want = min(target[r] - start, budget)
            need = (start + want + block - 1) // block
            if need > free_blocks:
                break
            w_head = (w_head + 1) % cap
            w_len -= 1
            computed[r] = start
            blocks[r] = need
            free_blocks -= need
            running[n_run] = r
            new_tok[n_run] = want
            n_run += 1
            budget -= want
        # 3) aggregates -> components -> predicted step cycle
        P = 0.0
        D = 0.0
        n_p = 0.0
        n_d = 0.0
        K = 0.0
        for j in range(n_run):
            r = running[j]
            if new_tok[j] == 0:
                K += blocks[r] * block
                continue
            if computed[r] < prompt_len[r]:
                P += new_tok[j]
                n_p += 1.0
            else:
                D += new_tok[j]
                n_d += 1.0
            K += ((computed[r] + new_tok[j] + block - 1) // block) * block
        if P + D == 0.0:
            # nothing schedulable (KV exhausted by a lone request): wait for the next arrival
            if next_arr < n:
                t = max(t, arrival_us[next_arr])
                continue
            status = 2
            break
        fill_components(model, P, D, n_p, n_d, float(n_run), K, comp)
        dt = predict(comp, consts)
        if not (dt >= 1.0) or not np.isfinite(dt):
            status = 1
            break
        if record and n_steps < rec_n:
            rec[n_steps, 0] = P
            rec[n_steps, 1] = D
            rec[n_steps, 2] = n_p
            rec[n_steps, 3] = n_d
            rec[n_steps, 4] = n_run
            rec[n_steps, 5] = K
            rec[n_steps, 6] = t
        t += dt
        n_steps += 1
        if n_steps >= max_steps:
            status = 2
            break
        # 4) apply the step: emit tokens, finish requests
        j = 0
        k = 0
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
                        free_blocks += blocks[r]
                        blocks[r] = 0
                        finished += 1
                        keep = False
                    else:
                        target[r] = computed[r] + 1  # next step decodes one token
            if keep:
                running[k] = r
                k += 1
            j += 1
        n_run = k
    return status, first_us, done_us, n_steps, n_preempt, rec[:n_steps] if record else rec[:0]


@dataclass
class Workload:
    """One experiment's request stream as the simulator consumes it."""
    arrival_us: np.ndarray  # float64, sorted
    prompt_len: np.ndarray  # int64
    cached_len: np.ndarray  # int64: prompt tokens served from the prefix cache
    gen_len: np.ndarray  # int64: tokens generated (>= 1)
    stage: np.ndarray  # int64 load-stage index per request
    measured_e2e_s: np.ndarray | None = None
    measured_ttft_s: np.ndarray | None = None


@dataclass
class SimResult:
    status: int
    ttft_us: np.ndarray
    e2e_us: np.ndarray
    n_steps: int
    n_preempted: int
    states: np.ndarray  # recorded steps (P, D, n_prefill, n_decode, B, K, t) if requested

    @property
    def ok(self) -> bool:
        return self.status == OK


def simulate(predict, consts, model_vec, wl: Workload, kv_blocks: int, max_seqs: int = 128,
             max_tokens: int = 2048, block: int = 16, max_steps: int = 5_000_000,
             record: bool = False) -> SimResult:
    """Run one experiment; `predict` is a numba function of signature PREDICTOR_TYPE."""
    f8 = lambda a: np.require(a, np.float64, ["C", "W"])  # noqa: E731
    i8 = lambda a: np.require(a, np.int64, ["C", "W"])  # noqa: E731
    status, first, done, n_steps, n_pre, rec = _simulate(
        predict, f8(consts), f8(model_vec), f8(wl.arrival_us), i8(wl.prompt_len), i8(wl.cached_len),
        i8(wl.gen_len), int(kv_blocks), int(max_seqs), int(max_tokens),
        int(block), int(max_steps), bool(record))
    return SimResult(int(status), first, done, int(n_steps), int(n_pre), rec)
