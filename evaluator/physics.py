"""Physical rules every step-time program must obey, checked on probe states and an extrapolation grid.

The components are times at peak hardware speed, so no real step can be shorter than
    floor = max(t_prefill_gemm + t_prefill_attn + t_decode_gemm + t_lm_head, t_weights + t_decode_kv)
(t_decode_kv scaled by the share (n_prefill + n_decode) / B of running requests scheduled: the
others' KV is not read; in vLLM every running request is scheduled, so real rows are unchanged)
(compute at peak FLOP/s, or the bytes that must cross HBM at peak bandwidth), and a step must not get
faster when it is given more work: the prediction is non-decreasing in P, D, K, n_decode and B, each
with the others fixed, when one more prefill request brings its tokens (P and n_prefill), and
when the same KV is spread more unevenly over the decoding requests (ctx_max). A program that breaks either is worthless in a simulator outside the measured
range, however well it fits inside it.

One module, shared by the judge (invalid with the reason stored) and by emit-go (never emitted).

Measured (benchmarks/floor_check.py): the real step cycles sit above the floor except 4 of 1,967
rows. Those are pipelining, not a wrong floor: vLLM's async scheduling (default since late 2025) lets
schedule(N+1) start while step N still runs on the GPU, so one start-to-start delta is not bound by its
own step's work, but every pair of consecutive deltas is (worst pair 1.18x the sum of the two floors).

The floor is deliberately generous: it leaves out the TP all-reduce (it could in principle overlap)
and counts each distinct KV block once (prefix-shared blocks are read once per request). For MoE the
weight bytes use the expected number of distinct experts the step's tokens hit (exact for one token,
above 99.7% of the experts from 20 tokens on); no MoE step rows exist to check it against.

Tolerances: relative 1e-9 for float noise, both for the floor and for monotonicity.

A ceiling too: no step is predicted above CEILING (10) times its hardware floor, the floor taken
with every running request's KV read (`ceiling_us`). The 1,967 real step cycles reach at most
4.0x the floor (codellama-34b 3.1x, llama-2-70b 4.0x; benchmarks/floor_check.py), so the rule
costs a physical program nothing. What it catches is a pole or a runaway term: a trace run on
the 16 experiments (2026-11-26) handed over `t_step_measured / (1 + A * (1 + B * t_decode_spread
* ...))`, whose fit put the pole on the grid's widest spread, 3e11 us (3.4 days) for one step of
128 decodes on llama-2-70b; it is monotone and above the floor, so nothing else stopped it.

One measured exception: vLLM's decode-attention kernel is faster when the same KV is spread over
more requests (more blocks in flight), so the measured components (`t_*_measured`) can fall by a
few % when a decoder joins at a fixed K (docs/kernels.md). A program may fall along a grid line
as far as the measured components it reads fall there (relatively), never further: that fall is
the hardware's, not the formula's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from evaluator.components import (COMPONENT_INDEX, MEASURED_NAMES, N_COMPONENTS, components_for_model_spread,
                                  mean_context)
from evaluator.server_config import DEFAULT_MAX_MODEL_LEN  # noqa: F401 (re-exported; each experiment carries its own)
from evaluator.step_scoring import predict_rows

REL_TOL = 1e-9  # float noise allowed below the floor / along a line of growing work
CEILING = 10.0  # no step above this many times `ceiling_us`'s floor (measured steps: at most 4.0x)

_CI = COMPONENT_INDEX


def _compute_us(X: np.ndarray) -> np.ndarray:
    """The step's FLOPs at peak (us) per component row: both the floor and the ceiling take it."""
    return X[:, _CI["t_prefill_gemm"]] + X[:, _CI["t_prefill_attn"]] + X[:, _CI["t_decode_gemm"]] \
        + X[:, _CI["t_lm_head"]]


def floor_us(X: np.ndarray) -> np.ndarray:
    """Hardware floor (us) per component row: the larger of compute at peak and HBM bytes at peak."""
    X = np.asarray(X, np.float64)
    compute = _compute_us(X)
    # KV is read by the requests scheduled this step: a state whose other running requests
    # sit out (B > n_prefill + n_decode, as on the grid's B lines) reads only their share
    B = X[:, _CI["B"]]
    share = np.where(B > 0, np.minimum(1.0, (X[:, _CI["n_prefill"]] + X[:, _CI["n_decode"]]) / np.maximum(B, 1e-300)), 1.0)
    memory = X[:, _CI["t_weights"]] + X[:, _CI["t_decode_kv"]] * share
    return np.maximum(compute, memory)


def ceiling_us(X: np.ndarray) -> np.ndarray:
    """The most a step may take (us) per component row: CEILING times the floor with the KV of
    every running request read (a state whose running requests sit out is not made cheaper
    for the ceiling than vLLM, which schedules them all, would make it)."""
    X = np.asarray(X, np.float64)
    compute = _compute_us(X)
    return CEILING * np.maximum(compute, X[:, _CI["t_weights"]] + X[:, _CI["t_decode_kv"]])


def describe_state(x: np.ndarray) -> str:
    """One-line description of a component row by its aggregates (what a reader can picture);
    the longest decoding context where it is above the mean (a spread of contexts)."""
    def g(name):
        v = float(x[_CI[name]])
        return f"{v:.0f}" if v < 1e5 else f"{v:.2g}"
    spread = x[_CI["ctx_max"]] > mean_context(x[_CI["K"]], x[_CI["n_decode"]]) * (1.0 + 1e-9) + 1e-9
    return (f"P={g('P')} D={g('D')} K={g('K')} B={g('B')} n_prefill={g('n_prefill')} "
            f"n_decode={g('n_decode')}{' ctx_max=' + g('ctx_max') if spread else ''} "
            f"(layers={g('layers')} tp={g('tp')})")


# ---------------------------------------------------------------- extrapolation grid

def _k_levels(k_lo: float, capacity: float) -> list[float]:
    """KV tokens held: from what the batch needs at least up to the whole cache, roughly geometric."""
    out = [k_lo]
    for k in (1e3, 4e3, 1.6e4, 6.4e4, 2.56e5):
        if k_lo < k < capacity:
            out.append(k)
    if capacity > k_lo:
        out.extend([capacity / 2.0, capacity] if capacity / 2.0 > out[-1] else [capacity])
    return out


def _k_min(P: float, n_decode: float, block: int) -> float:
    """Fewest KV tokens a state can hold: its prefill chunk plus one block per decoding request."""
    return block * (math.ceil(P / block) + n_decode)


def extrapolation_grid(experiment, model_vec: np.ndarray) -> np.ndarray:
    """Lines of batch states that each step one aggregate upwards, everything else fixed.

    Returns an array of shape (n_lines, n_points, N_COMPONENTS): component rows recomputed with
    `components_for_model` for every state; a prediction must be non-decreasing along axis 1.
    Covers batches up to `max_num_seqs` decodes, KV held up to the cache capacity
    (`kv_blocks * block_size`, at most `max_model_len` tokens per running request), full
    `max_batched_tokens` prefill chunks and mixed steps. Lines:
      P        prefill tokens (n_prefill fixed; lines with one prefill start at the pure-decode step)
      P+n_prefill one more prefill request of 16 or 256 tokens
      ctx_max  the longest decoding context, from the mean up to what the batch's KV allows
      D        decode tokens with n_decode fixed (more than one token per request, as speculative decoding)
      D+n_decode one more decoding request of one token (how D grows in vLLM and BLIS)
      K        KV tokens held, from the fewest the batch can hold up to the full cache
      n_decode decoding requests with D fixed
      B        running requests not scheduled this step, up to max_num_seqs
    Shorter lines are padded by repeating their last state (equal predictions pass).
    """
    S = float(experiment.max_num_seqs)
    T = float(experiment.max_batched_tokens)
    blk = int(experiment.block_size)
    cap = float(experiment.kv_blocks * experiment.block_size)
    max_len = float(getattr(experiment, "max_model_len", DEFAULT_MAX_MODEL_LEN))  # the experiment's

    def k_max(B, k_lo):
        """Most KV tokens B running requests can hold: the cache, or B full-length contexts."""
        return max(k_lo, min(cap, B * max_len))

    p_levels = (0.0, 1.0, 16.0, 128.0, 512.0, 1024.0, T)
    d_levels = (0.0, 1.0, 8.0, 32.0, 64.0, 96.0, S)
    lines: list[list[tuple]] = []  # each state: (P, D, n_prefill, n_decode, B, K)

    def b_levels(lo):
        return sorted({lo, min(S, lo + 1.0), math.floor((lo + S) / 2.0), S})

    # P lines: n_prefill in {1, 4}; D = n_decode in a few levels; K low/full; B tight/full.
    for n_p in (1.0, 4.0):
        for D in (0.0, 1.0, 32.0, S - n_p):
            if D < 0 or D > S - n_p:  # no more decodes than max_num_seqs leaves (never a negative count)
                continue
            ps = [p for p in p_levels if n_p <= p <= T - D]
            if T - D >= n_p:
                ps = sorted(set(ps) | {T - D})
            if not ps:
                continue
            k_lo = _k_min(ps[-1], D, blk)
            for B in sorted({n_p + D, S}):
                for K in sorted({k_lo, k_max(B, k_lo)}):
                    line = [(p, D, n_p, D, B, K) for p in ps]
                    if n_p == 1.0 and D > 0:  # the same batch without its prefill chunk
                        line.insert(0, (0.0, D, 0.0, D, B, K))
                    lines.append(line)
    # D lines with n_decode fixed, and D+n_decode lines (one more decoding request).
    for P, n_p in ((0.0, 0.0), (1.0, 1.0), (512.0, 1.0), (1024.0, 4.0)):
        if P > T or n_p > S:  # a chunk above the token budget is never scheduled: D = T - P < 0 is no state
            continue
        top = min(S - n_p, T - P)
        ds = sorted({d for d in d_levels if d <= top} | {top})
        k_lo = _k_min(P, top, blk)
        for B in sorted({n_p + top, S}):
            for K in sorted({k_lo, k_max(B, k_lo)}):
                lines.append([(P, d, n_p, d, B, K) for d in ds if P + d > 0])
                for n_d in (1.0, 8.0):
                    if n_d <= top:
                        lines.append([(P, d, n_p, n_d, B, K) for d in ds if d >= n_d])
                # n_decode lines: D fixed at the top, n_decode from 1 up to D
                nds = sorted({n for n in (1.0, 8.0, 32.0, 64.0) if n <= top} | {top})
                if top >= 1:
                    lines.append([(P, top, n_p, n, B, K) for n in nds])
    # P+n_prefill lines: one more prefill request of c tokens, the rest fixed (how prefill work
    # grows as requests arrive: a program must not get cheaper per step for it)
    for chunk in (16.0, 256.0):
        for D in (0.0, 32.0):
            nps = [n for n in (1.0, 2.0, 4.0, 8.0) if n * chunk + D <= T and n + D <= S]
            if len(nps) < 2:
                continue
            k_lo = _k_min(nps[-1] * chunk, D, blk)
            for B in sorted({nps[-1] + D, S}):
                lines.append([(n * chunk, D, n, D, B, k_lo) for n in nps])
    # K lines and B lines over a few mixed and pure batches.
    for P, n_p in ((0.0, 0.0), (16.0, 1.0), (T / 2.0, 1.0), (T, 1.0), (T / 2.0, 4.0)):
        for D in (0.0, 1.0, 8.0, 64.0, S - max(n_p, 1.0)):
            if P + D == 0 or P + D > T or n_p + D > S or D < 0:
                continue
            k_lo = _k_min(P, D, blk)
            for B in sorted({n_p + D, S}):
                lines.append([(P, D, n_p, D, B, k) for k in _k_levels(k_lo, k_max(B, k_lo))])
            # B lines hold K fixed: at the least the batch needs, and at what its own requests can hold
            for K in sorted({k_lo, k_max(n_p + D, k_lo)}):
                lines.append([(P, D, n_p, D, b, K) for b in b_levels(n_p + D)])
    # ctx_max lines: the same decoding batch and KV held, its longest context from the mean up to
    # what the others leave it (a wider spread of contexts must not make a step faster)
    for D in (8.0, 64.0, S):
        if D > S or D > T:
            continue
        for K in (D * 512.0, D * 1024.0):
            if K > cap:
                continue
            top = min(max_len, K - (D - 1.0) * blk)
            mean = K / D
            if top <= mean:
                continue
            lines.append([(0.0, D, 0.0, D, D, K, mean + f * (top - mean)) for f in (0.0, 0.25, 0.5, 1.0)])
    lines = [ln for ln in lines if ln]
    width = max(len(ln) for ln in lines)
    flat = [ln[i] if i < len(ln) else ln[-1] for ln in lines for i in range(width)]
    # every other state: each decoding request at the mean context (no spread)
    flat = [st if len(st) == 7 else (*st, mean_context(st[5], st[3])) for st in flat]
    a = np.array(flat, np.float64)
    c = lambda j: np.ascontiguousarray(a[:, j])  # noqa: E731
    X = components_for_model_spread(np.ascontiguousarray(model_vec, np.float64), c(0), c(1), c(2), c(3), c(4), c(5),
                                    c(6))
    return np.ascontiguousarray(X.reshape(len(lines), width, N_COMPONENTS))


def model_grids(gt) -> dict[str, np.ndarray]:
    """One extrapolation grid per model (its first experiment: limits and cache are per model)."""
    out: dict[str, np.ndarray] = {}
    for e in gt.experiments:
        if e.model not in out:
            out[e.model] = extrapolation_grid(e, e.model_vec(gt.hardware))
    return out


def grid_rows(grid: np.ndarray) -> np.ndarray:
    """The grid's states as a plain component matrix (for the floor check or as fitting probes)."""
    return np.ascontiguousarray(np.asarray(grid, np.float64).reshape(-1, N_COMPONENTS))


# ---------------------------------------------------------------- the checks

def _stepped(a: np.ndarray, b: np.ndarray) -> str:
    """Which aggregates grew from state a to state b, e.g. '+D+n_decode'."""
    names = [n for n in ("P", "D", "K", "n_prefill", "n_decode", "B", "ctx_max") if b[_CI[n]] != a[_CI[n]]]
    return "".join(f"+{n}" for n in names) or "+nothing"


def _fmt_us(v: float) -> str:
    return f"{v / 1000:.4g} ms" if abs(v) >= 1000 else f"{v:.4g} us"


def floor_violation(pred: np.ndarray, X: np.ndarray) -> str | None:
    """None if every prediction lies between the hardware floor and the ceiling (`ceiling_us`),
    else the worst offender: a non-finite prediction, then the furthest below the floor, then
    the furthest above the ceiling."""
    fl = floor_us(X)
    bad = ~np.isfinite(pred)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return f"non-finite prediction at {describe_state(X[i])}: {pred[i]}"
    short = pred < fl * (1.0 - REL_TOL)
    if short.any():
        i = int(np.argmin(np.where(short, pred / fl, np.inf)))
        return (f"below the hardware floor at {describe_state(X[i])}: {pred[i]:.0f} us < floor {fl[i]:.0f} us "
                f"({int(short.sum())} of {len(pred)} states below)")
    top = ceiling_us(X)
    over = pred > top * (1.0 + REL_TOL)
    if not over.any():
        return None
    i = int(np.argmax(np.where(over, pred / top, -np.inf)))
    return (f"above {CEILING:g}x the hardware floor at {describe_state(X[i])}: {_fmt_us(pred[i])} > "
            f"{_fmt_us(top[i])}, a pole or a runaway term (measured steps reach 4x; {int(over.sum())} of "
            f"{len(pred)} states above)")


def measured_read(params) -> list[int]:
    """Component indices of the measured components a program reads (their falls are allowed)."""
    return sorted(COMPONENT_INDEX[n] for n in params if n in MEASURED_NAMES)


def allowed_fall(a: np.ndarray, b: np.ndarray, read: list[int]) -> np.ndarray:
    """Per pair of states (rows a -> b), the largest relative fall of the measured components
    read: how far a prediction may fall there (0 where nothing measured is read or falls)."""
    if not read:
        return np.zeros(len(a))
    ca, cb = a[:, read], b[:, read]
    rel = (ca - cb) / np.maximum(np.maximum(np.abs(ca), np.abs(cb)), 1e-300)
    return np.maximum(0.0, np.nan_to_num(rel, nan=0.0).max(axis=1))


def monotonicity_violation(pred: np.ndarray, grid: np.ndarray, read: list[int] | None = None) -> str | None:
    """None if predictions never fall along any line of the grid (further than the measured
    components in `read` fall there), else the steepest fall."""
    n_lines, width, _ = grid.shape
    p = pred.reshape(n_lines, width)
    if not np.isfinite(p).all():
        i = int(np.flatnonzero(~np.isfinite(p).ravel())[0])
        return f"non-finite prediction at {describe_state(grid.reshape(-1, N_COMPONENTS)[i])}: {pred[i]}"
    lo, hi = p[:, :-1], p[:, 1:]
    scale = np.maximum(np.abs(lo), np.abs(hi))
    allow = allowed_fall(grid[:, :-1].reshape(-1, N_COMPONENTS), grid[:, 1:].reshape(-1, N_COMPONENTS),
                         read or []).reshape(lo.shape)
    drop = (lo - hi) - (REL_TOL + allow) * scale
    if not (drop > 0).any():
        return None
    rel = np.where(drop > 0, (lo - hi) / np.maximum(scale, 1e-300), -np.inf)
    li, j = np.unravel_index(int(np.argmax(rel)), rel.shape)
    a, b = grid[li, j], grid[li, j + 1]
    return (f"gets faster with more work: {_stepped(a, b)} at {describe_state(a)}: "
            f"{_fmt_us(p[li, j])} -> {_fmt_us(p[li, j + 1])} ({int((drop > 0).sum())} falls on the grid)")


def floor_residuals(pred: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Relative shortfall below the floor per state (0 where physical): a soft penalty for fitting,
    so the fit lands on constants the hard check then accepts. `floor` = `floor_us(X)`, computed once."""
    return np.maximum(0.0, (floor - pred) / np.maximum(floor, 1e-9))


def monotone_residuals(pred: np.ndarray, grid_shape: tuple) -> np.ndarray:
    """Relative fall per consecutive pair of states on the grid's lines (0 where non-decreasing)."""
    p = pred.reshape(grid_shape[0], grid_shape[1])
    lo, hi = p[:, :-1], p[:, 1:]
    return np.maximum(0.0, (lo - hi) / np.maximum(np.maximum(np.abs(lo), np.abs(hi)), 1e-9)).ravel()


def check_program(predict, consts, probes: np.ndarray | None, grid: np.ndarray | None,
                  read: list[int] | None = None) -> str | None:
    """None if the program is physical with these constants, else a one-line reason.

    predict: compiled f(x, c) (`Program.compiled()`); consts: one constant vector (one model's);
    probes: component rows (2-D) to hold the floor on; grid: lines from `extrapolation_grid`
    to hold the floor and monotonicity on. Either may be None. read: `measured_read(params)`.
    """
    c = np.ascontiguousarray(consts, dtype=np.float64)
    if probes is not None and len(probes):
        X = np.ascontiguousarray(probes, dtype=np.float64)
        why = floor_violation(predict_rows(predict, X, c), X)
        if why:
            return why
    if grid is not None and grid.size:
        G = grid_rows(grid)
        pred = predict_rows(predict, G, c)
        why = floor_violation(pred, G) or monotonicity_violation(pred, np.asarray(grid), read)
        if why:
            return why
    return None


def check_by_model(predict, consts: dict, probes: dict | None, grids: dict, read: list[int] | None = None) -> str | None:
    """Every model's check; constants keyed by model, or one shared vector under '*'.

    The reason names the model: "llama-2-70b: below the hardware floor at ...".
    """
    probes = probes or {}
    for model in sorted(grids):
        c = consts.get(model, consts.get("*"))
        if c is None:
            continue
        why = check_program(predict, c, probes.get(model), grids[model], read)
        if why:
            return f"{model}: {why}"
    return None


# ---------------------------------------------------------------- for the fit

@dataclass(frozen=True)
class Constraints:
    """The states a fit must keep physical, stacked once per fitting group: predictions between
    `floor` and `ceiling` on every row of X, and X[lo] <= X[hi] along every consecutive grid pair."""
    X: np.ndarray
    floor: np.ndarray
    ceiling: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    allow: np.ndarray | None = None  # per pair: relative fall allowed (`for_program`)

    def for_program(self, params) -> "Constraints":
        """These constraints with the falls of the measured components the program reads allowed."""
        read = measured_read(params)
        if not read:
            return self
        return Constraints(self.X, self.floor, self.ceiling, self.lo, self.hi,
                           allowed_fall(self.X[self.lo], self.X[self.hi], read))


def constraints(probes: np.ndarray | None, grids) -> Constraints:
    """Probe rows (floor only) and the grids' rows (floor and monotonicity), one matrix."""
    blocks = [np.asarray(probes, np.float64)] if probes is not None and len(probes) else []
    lo, hi = [], []
    base = sum(len(b) for b in blocks)
    for G in grids:
        n_lines, width, _ = G.shape
        idx = base + np.arange(n_lines * width).reshape(n_lines, width)
        lo.append(idx[:, :-1].ravel())
        hi.append(idx[:, 1:].ravel())
        blocks.append(grid_rows(G))
        base += n_lines * width
    X = np.ascontiguousarray(np.vstack(blocks)) if blocks else np.zeros((0, N_COMPONENTS))
    cat = lambda a: np.concatenate(a).astype(np.int64) if a else np.zeros(0, np.int64)  # noqa: E731
    return Constraints(X, floor_us(X), ceiling_us(X), cat(lo), cat(hi))


def constraint_residuals(pred: np.ndarray, c: Constraints, floor_margin: float = 0.0,
                         mono_margin: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(relative shortfall below the floor or excess above the ceiling per row, relative fall
    per grid pair beyond what the measured components allow); zero where physical. Non-finite
    predictions count as a full shortfall. The margins aim inside the rules (the fit's
    penalties); the checks use none."""
    floor = c.floor * (1.0 + floor_margin)
    ceiling = c.ceiling * (1.0 - floor_margin)
    p = np.where(np.isfinite(pred), pred, -floor)
    below = floor_residuals(p, floor) + np.maximum(0.0, (p - ceiling) / np.maximum(ceiling, 1e-9))
    a, b = p[c.lo], p[c.hi]
    allow = c.allow if c.allow is not None else 0.0
    fall = np.maximum(0.0, (a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-9) - allow + mono_margin)
    return below, fall


def floor_report(predict, consts, grid: np.ndarray, params=()) -> str:
    """One line for a prompt or a reader: where on the extrapolation grid the prediction comes
    closest to the hardware floor, and how it compares at the heaviest state (the most work)."""
    G = grid_rows(grid)
    pred = predict_rows(predict, G, np.ascontiguousarray(consts, dtype=np.float64))
    fl = floor_us(G)
    read = measured_read(params or ())
    if not np.isfinite(pred).all():
        return "non-finite predictions on the grid"
    ratio = pred / np.maximum(fl, 1e-9)
    i = int(np.argmin(ratio))
    j = int(np.argmax(fl))
    why = monotonicity_violation(pred, np.asarray(grid), read)
    return (f"closest to the floor {ratio[i]:.2f}x at {describe_state(G[i])}; heaviest state "
            f"{describe_state(G[j])}: {_fmt_us(pred[j])} vs floor {_fmt_us(fl[j])} ({ratio[j]:.2f}x)"
            + (f"; {why}" if why else "; never faster with more work on the grid"))
