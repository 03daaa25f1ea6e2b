"""Measured kernel tables as ground truth: read them, repair them, reduce them per model.

Why: the analytical components are times at peak hardware speed, so every efficiency would
have to be fitted from end-to-end timings, which these data cannot pin down (docs/architecture.md, fact 9).
NVIDIA aiconfigurator measured vLLM 0.14's own kernels on H100 SXM (GEMM by m, n, k; paged
FlashAttention decode by batch and context; prefill attention by batch and length; the custom
all-reduce by message size; the fused MoE by tokens). Summed per layer at a model's per-GPU
shapes they give a step time with no fitted constant, for any model whose config we have.

Pipeline:
  read_kernel_tables(data_dir)   validated raw rows (one-line DataError: file, row, column)
  reduce_model(tables, arch, tp, hw) -> Reduction(flat, notes)
      picks the model's shapes, repairs the measurements (below), and packs the few small
      tables one model needs into ONE flat float64 array (layout: FLAT_* below), which
      `evaluator.measured.fill_measured` reads in numba and the Go code can carry verbatim.
  reduce_for_model(...) -> the flat array only.

Repair (why): single measurements carry outliers (e.g. GEMM n=2560, k=8192 takes 753 us at
m=4096 and 421 us at m=8192). Two facts about any kernel bound them and are applied until
nothing changes, along every axis where work can be padded or split:
  - padding: more work is never faster (t(x) <= t(x') for x <= x'; running min from the right);
  - splitting: t(x) <= ceil(x / x') * t(x') (run the work as smaller calls; token/batch axes).
Missing cells (big batch x long context was not measured) are filled along the batch axis in
proportion (a batch splits), then repaired like the rest. Context/length axes get padding only.

Tables kept per model (all per layer and per call, us): dense GEMMs of one layer by tokens m
(QKV + O + gate-up + down at the per-GPU n, k, bilinear in n and k); LM head by sampled rows;
decode attention by (batch, context = isl + step); prefill attention by (batch, chunk length);
all-reduce by tokens (message elements / hidden), CUDA-graph and eager; fused MoE by tokens.

Heads missing from the decode table (llama-2-7b at TP1: 32 query / 32 KV heads; the table stops
at 8 KV heads): the nearest layout with the same query heads (else the nearest) is used and its
context-dependent part (t(b, c) - t(b, c_min), the KV bytes read) is scaled by the KV-bytes
ratio; the per-call part is kept. `Reduction.notes` says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np
import pandas as pd

from evaluator.errors import DataError

AIC_DIR = Path("kernels") / "aiconfigurator-h100-vllm-0.14.0"
MHA_DIR = Path("kernels") / "mha"

# Required columns per aiconfigurator file, split into text and numeric (numeric > 0, finite).
AIC_FILES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "gemm": (("gemm_dtype",), ("m", "n", "k", "latency")),
    "generation_attention": (("kv_cache_dtype",),
                             ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim",
                              "latency")),
    "context_attention": (("kv_cache_dtype",),
                          ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "latency")),
    "custom_allreduce": (("allreduce_dtype", "backend"), ("num_gpus", "message_size", "latency")),
    "moe": (("moe_dtype", "kernel_source", "distribution"),
            ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
             "latency")),
}
MHA_DECODE_COLUMNS = ("batch_size", "kv_len", "latency_us")
MHA_PREFILL_COLUMNS = ("seq_len", "latency_us")

# CUDA graphs cover steps up to this many tokens (vLLM V1 default capture sizes end at 512);
# larger steps run eagerly, and vLLM's custom all-reduce then pays its eager cost.
GRAPH_MAX_TOKENS = 512
ALLREDUCES_PER_LAYER = 2  # after attention and after the MLP

# ---------------------------------------------------------------- flat layout
# Header (float64 slots), then the tables. A 1-D table at offset o: [n, x_0..x_{n-1}, y_0..y_{n-1}].
# A 2-D table at offset o: [nx, ny, x_0.., y_0.., v(ix, iy) row-major by x]. Offsets < 0: absent.
FLAT_VERSION = 1.0
H_VERSION, H_LAYERS, H_TP, H_PEAK, H_BW, H_NVLINK, H_GRAPH_MAX = 0, 1, 2, 3, 4, 5, 6
H_GEMM_FLOP_TOK, H_GEMM_BYTES = 7, 8  # per layer: FLOPs per token, weight bytes (dense part)
H_LM_FLOP_TOK, H_LM_BYTES = 9, 10
H_KV_BYTES_TOK, H_DEC_FLOP_TOK = 11, 12  # per layer per context token of one request
H_PRE_FLOP = 13  # per layer: FLOPs = H_PRE_FLOP * n * (q*c + q*q/2)
H_AR_BYTES_TOK, H_AR_RING = 14, 15  # bytes per token per all-reduce, ring factor 2(tp-1)/tp
H_MOE_FLOP_TOK, H_MOE_BYTES = 16, 17  # per layer: FLOPs per token, bytes of top_k experts
H_AR_PER_LAYER = 18
H_OFF_GEMM, H_OFF_LM, H_OFF_DEC, H_OFF_PRE, H_OFF_AR_GRAPH, H_OFF_AR_EAGER, H_OFF_MOE = 19, 20, 21, 22, 23, 24, 25
HEADER = 32


@dataclass
class KernelTables:
    """Validated raw rows: aiconfigurator frames by op, and the mha/ micro-benchmarks."""
    source: str
    aic: dict[str, pd.DataFrame]
    mha_decode: dict[tuple[int, int, int, int], pd.DataFrame] = field(default_factory=dict)  # (nq, nkv, hd, tp)
    mha_prefill: dict[tuple[int, int, int], pd.DataFrame] = field(default_factory=dict)  # (nq, nkv, hd)
    memo: dict = field(default_factory=dict, repr=False)  # derived grids shared by every model


@dataclass
class Reduction:
    """What one model needs from the kernel tables: the flat array and how it was obtained."""
    flat: np.ndarray
    notes: list[str]
    layout: dict  # per-GPU shapes used (for `show` and docs)


# ---------------------------------------------------------------- reading

def _read_parquet(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise DataError(f"{path}: missing (kernel table)")
    try:
        return pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise DataError(f"{path}: cannot read parquet ({type(e).__name__})") from None


def _validate(df: pd.DataFrame, path: Path, text: tuple[str, ...], numeric: tuple[str, ...]) -> pd.DataFrame:
    """Check columns; numeric ones must be finite and positive. Error names file, row, column."""
    for c in text + numeric:
        if c not in df.columns:
            raise DataError(f"{path}: missing column '{c}'")
    out = df.reset_index(drop=True)
    for c in numeric:
        v = pd.to_numeric(out[c], errors="coerce").to_numpy(np.float64)
        bad = ~np.isfinite(v) | (v <= 0)
        if c in ("step",):  # decode step may be 0 in other dumps
            bad = ~np.isfinite(v) | (v < 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(f"{path}: row {i}: column '{c}' must be a positive number (got {out[c].iloc[i]!r})")
        out[c] = v
    for c in text:
        s = out[c]
        bad = s.isna().to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(f"{path}: row {i}: column '{c}' is empty")
        out[c] = s.astype(str)
    return out


def _read_csv(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except Exception as e:
        raise DataError(f"{path}: cannot read CSV ({type(e).__name__})") from None
    return _validate(df, path, (), columns)


def _layout_from_name(path: Path, parts: int) -> tuple[int, ...]:
    """'64-8-128-tp4.csv' -> (64, 8, 128, 4); '64-8-128.csv' -> (64, 8, 128)."""
    fields = path.stem.replace("tp", "").split("-")
    try:
        vals = tuple(int(x) for x in fields)
    except ValueError:
        vals = ()
    if len(vals) != parts or min(vals) <= 0:
        raise DataError(f"{path}: file name must be <nq>-<nkv>-<head_dim>{'-tp<N>' if parts == 4 else ''}.csv")
    return vals


def read_kernel_tables(data_dir: str | Path) -> KernelTables:
    """Read and validate data_dir/kernels/{aiconfigurator-h100-vllm-0.14.0, mha}."""
    root = Path(data_dir)
    aic_root = root / AIC_DIR
    if not aic_root.is_dir():
        raise DataError(f"{aic_root}: missing (kernel tables directory)")
    aic = {}
    for op, (text, numeric) in AIC_FILES.items():
        path = aic_root / f"{op}_perf.parquet"
        aic[op] = _validate(_read_parquet(path), path, text, numeric)
    tables = KernelTables(str(root), aic)
    for path in sorted((root / MHA_DIR / "decode" / "h100").glob("*.csv")):
        tables.mha_decode[_layout_from_name(path, 4)] = _read_csv(path, MHA_DECODE_COLUMNS)
    for path in sorted((root / MHA_DIR / "prefill" / "h100").glob("*.csv")):
        tables.mha_prefill[_layout_from_name(path, 3)] = _read_csv(path, MHA_PREFILL_COLUMNS)
    return tables


# ---------------------------------------------------------------- repair

@numba.njit(cache=True)
def _split_pass(y, x):
    """In place, in order: y[i] = min(y[i], min_j<i ceil(x[i] / x[j]) y[j]) (numba: ~2,700
    calls per gemm grid took 0.9 s in numpy)."""
    for i in range(1, len(y)):
        best = y[i]
        for j in range(i):
            v = np.ceil(x[i] / x[j] - 1e-12) * y[j]
            if v < best:
                best = v
        y[i] = best


def repair_1d(y: np.ndarray, x: np.ndarray, split: bool = True, rounds: int = 4) -> np.ndarray:
    """Padding (non-decreasing) and, if `split`, splitting (t(x_i) <= ceil(x_i/x_j) t(x_j))."""
    y = np.asarray(y, np.float64).copy()
    for _ in range(rounds):
        before = y.copy()
        if split:
            _split_pass(y, np.asarray(x, np.float64))
        y = np.minimum.accumulate(y[::-1])[::-1]
        if np.array_equal(y, before):
            break
    return y


def repair_nd(v: np.ndarray, axes: dict[int, tuple[np.ndarray, bool]], rounds: int = 6) -> np.ndarray:
    """Apply repair_1d along each listed axis (axis -> (knots, split?)) until nothing changes."""
    v = v.copy()
    for _ in range(rounds):
        before = v.copy()
        for ax, (x, split) in axes.items():
            v = np.apply_along_axis(repair_1d, ax, v, x, split, 2)
        if np.array_equal(v, before):
            break
    return v


def fill_along_batch(v: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """Fill NaN cells of v[batch, y] in proportion from the largest measured smaller batch."""
    v = v.copy()
    for j in range(v.shape[1]):
        for i in range(v.shape[0]):
            if np.isnan(v[i, j]):
                prev = [p for p in range(i) if not np.isnan(v[p, j])]
                if prev:
                    p = prev[-1]
                    v[i, j] = v[p, j] * batch[i] / batch[p]
    if np.isnan(v).any():  # a whole column missing at small batch: copy the next longer column
        for j in range(v.shape[1] - 2, -1, -1):
            col = np.isnan(v[:, j])
            v[col, j] = v[col, j + 1]
    if np.isnan(v).any():
        raise DataError("kernel table: too few measured cells to fill the grid")
    return v


# ---------------------------------------------------------------- interpolation (numba, Go-portable)

@numba.njit(cache=True, error_model="numpy", inline="always")
def _bracket(flat, start, n, x):
    """Knot pair (lo, hi) and weight for x clamped to [knot_0, knot_n-1]."""
    if x <= flat[start]:
        return 0, 0, 0.0
    if x >= flat[start + n - 1]:
        return n - 1, n - 1, 0.0
    lo = 0
    hi = n - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if flat[start + mid] <= x:
            lo = mid
        else:
            hi = mid
    return lo, hi, (x - flat[start + lo]) / (flat[start + hi] - flat[start + lo])


@numba.njit(cache=True, error_model="numpy", inline="always")
def lin1(flat, off, x):
    """1-D table at `off`: linear between knots, first value below, proportional above."""
    n = int(flat[off])
    xs = off + 1
    ys = off + 1 + n
    if x <= flat[xs]:
        return flat[ys]
    if x >= flat[xs + n - 1]:
        return flat[ys + n - 1] * x / flat[xs + n - 1]
    lo, hi, w = _bracket(flat, xs, n, x)
    return flat[ys + lo] + w * (flat[ys + hi] - flat[ys + lo])


@numba.njit(cache=True, error_model="numpy", inline="always")
def _at_row(flat, voff, ny, i0, i1, wx, j):
    return (1.0 - wx) * flat[voff + i0 * ny + j] + wx * flat[voff + i1 * ny + j]


@numba.njit(cache=True, error_model="numpy", inline="always")
def lin2(flat, off, x, y):
    """2-D table at `off` (x = batch, y = length/context): bilinear inside; clamped below;
    proportional beyond the last x; along the last segment beyond the last y."""
    nx = int(flat[off])
    ny = int(flat[off + 1])
    xs = off + 2
    ys = xs + nx
    voff = ys + ny
    i0, i1, wx = _bracket(flat, xs, nx, x)
    j0, j1, wy = _bracket(flat, ys, ny, y)
    v = (1.0 - wy) * _at_row(flat, voff, ny, i0, i1, wx, j0) + wy * _at_row(flat, voff, ny, i0, i1, wx, j1)
    ymax = flat[ys + ny - 1]
    if y > ymax and ny > 1:
        ylast = flat[ys + ny - 2]
        slope = (_at_row(flat, voff, ny, i0, i1, wx, ny - 1) - _at_row(flat, voff, ny, i0, i1, wx, ny - 2)) / (
            ymax - ylast)
        if slope > 0.0:
            v += (y - ymax) * slope
    xmax = flat[xs + nx - 1]
    if x > xmax:
        v *= x / xmax
    return v


# ---------------------------------------------------------------- per-model shapes

def _head_dim(arch: dict) -> int:
    return int(arch.get("head_dim") or arch["hidden"] // arch["n_heads"])


def _gemm_grid(tables: KernelTables):
    """bf16 GEMM latency (us) as a repaired grid v[m, n, k] (computed once per tables)."""
    if "gemm" not in tables.memo:
        tables.memo["gemm"] = _build_gemm_grid(tables)
    return tables.memo["gemm"]


def _build_gemm_grid(tables: KernelTables):
    g = tables.aic["gemm"]
    g = g[g["gemm_dtype"] == "bfloat16"]
    if g.empty:
        raise DataError(f"{tables.source}/{AIC_DIR}/gemm_perf.parquet: no bfloat16 rows")
    ms, ns, ks = (np.sort(g[c].unique()) for c in ("m", "n", "k"))
    v = np.full((len(ms), len(ns), len(ks)), np.nan)
    mi = np.searchsorted(ms, g["m"]); ni = np.searchsorted(ns, g["n"]); ki = np.searchsorted(ks, g["k"])
    v[mi, ni, ki] = g["latency"].to_numpy() * 1e3
    # holes (e.g. n = k = 65,536): scale the nearest smaller n (then k) by the size ratio
    for a, b, c in zip(*np.nonzero(np.isnan(v))):
        if b > 0 and not np.isnan(v[a, b - 1, c]):
            v[a, b, c] = v[a, b - 1, c] * ns[b] / ns[b - 1]
        elif c > 0 and not np.isnan(v[a, b, c - 1]):
            v[a, b, c] = v[a, b, c - 1] * ks[c] / ks[c - 1]
    if np.isnan(v).any():
        raise DataError(f"{tables.source}/{AIC_DIR}/gemm_perf.parquet: bfloat16 grid has unfillable holes")
    v = repair_nd(v, {0: (ms.astype(float), True), 1: (ns.astype(float), True), 2: (ks.astype(float), False)})
    return ms.astype(float), ns.astype(float), ks.astype(float), v


def _interp_axis(knots: np.ndarray, x: float) -> tuple[int, int, float, float]:
    """(i0, i1, w, scale): value = ((1-w) v[i0] + w v[i1]) * scale; beyond the top: proportional."""
    if x <= knots[0]:
        return 0, 0, 0.0, 1.0
    if x >= knots[-1]:
        return len(knots) - 1, len(knots) - 1, 0.0, x / knots[-1]
    i = int(np.searchsorted(knots, x)) - 1
    return i, i + 1, (x - knots[i]) / (knots[i + 1] - knots[i]), 1.0


def gemm_curve(grid, n: float, k: float) -> np.ndarray:
    """GEMM time (us) at every m knot for one (n, k): bilinear in n and k (exact for a + b*n*k),
    proportional beyond the largest n or k (the roofline scales with n*k)."""
    ms, ns, ks, v = grid
    n0, n1, wn, sn = _interp_axis(ns, n)
    k0, k1, wk, sk = _interp_axis(ks, k)
    t = ((1 - wn) * (1 - wk) * v[:, n0, k0] + wn * (1 - wk) * v[:, n1, k0]
         + (1 - wn) * wk * v[:, n0, k1] + wn * wk * v[:, n1, k1])
    return t * sn * sk


def _layouts(df: pd.DataFrame) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in zip(df["num_heads"], df["num_key_value_heads"])}


def _nearest_layout(have: set[tuple[int, int]], nq: int, nkv: int) -> tuple[int, int]:
    same_q = [l for l in have if l[0] == nq]
    pool = same_q or list(have)
    return min(pool, key=lambda l: (abs(math.log(l[1] / nkv)), abs(math.log(l[0] / nq))))


def _attention_grid(df: pd.DataFrame, path: str, nq: int, nkv: int, hd: int, y_col: str,
                    notes: list[str], what: str):
    """Repaired grid v[batch, y] (us) for one head layout; nearest layout scaled by KV bytes."""
    d = df[(df["kv_cache_dtype"] == "bfloat16")]
    if d.empty:
        raise DataError(f"{path}: no bfloat16 rows")
    hds = d["head_dim"].unique()
    d = d[d["head_dim"] == hds[np.argmin(np.abs(np.log(hds / hd)))]]  # hd itself when measured
    if d.empty:
        raise DataError(f"{path}: no bfloat16 rows")
    have = _layouts(d)
    lay = (nq, nkv) if (nq, nkv) in have else _nearest_layout(have, nq, nkv)
    d = d[(d["num_heads"] == lay[0]) & (d["num_key_value_heads"] == lay[1])]
    bs = np.sort(d["batch_size"].unique()).astype(float)
    ys = np.sort(d[y_col].unique()).astype(float)
    v = np.full((len(bs), len(ys)), np.nan)
    agg = d.groupby(["batch_size", y_col])["latency"].min()
    for (b, y), t in agg.items():
        v[np.searchsorted(bs, b), np.searchsorted(ys, y)] = t * 1e3
    v = fill_along_batch(v, bs)
    v = repair_nd(v, {0: (bs, True), 1: (ys, False)})
    hd_scale = hd / float(d["head_dim"].iloc[0])
    if lay != (nq, nkv) or hd_scale != 1.0:
        ratio = (nkv / lay[1]) * hd_scale if what.startswith("decode") else (nq / lay[0]) * hd_scale
        base = v[:, :1]
        v = base + (v - base) * ratio
        notes.append(f"{what}: layout {nq} query / {nkv} KV heads (head_dim {hd}) not measured; using "
                     f"{lay[0]} / {lay[1]} (head_dim {int(d['head_dim'].iloc[0])}) with its "
                     f"context-dependent part scaled x{ratio:.3g} "
                     f"({'KV bytes' if what.startswith('decode') else 'attention FLOPs'})")
    return bs, ys, v, lay


def _allreduce_curve(df: pd.DataFrame, path: str, tp: int, hidden: int, backend: str, notes: list[str]):
    d = df[(df["allreduce_dtype"] == "bfloat16") & (df["backend"] == backend)]
    if d.empty:
        raise DataError(f"{path}: no bfloat16 rows for backend {backend!r}")
    gpus = np.sort(d["num_gpus"].unique())
    g = tp if tp in gpus else int(gpus[np.argmin(np.abs(np.log(gpus / tp)))])
    if g != tp and backend.endswith("graph"):
        notes.append(f"all-reduce: {tp} GPUs not measured; using {g} GPUs")
    d = d[d["num_gpus"] == g].sort_values("message_size")
    x = d["message_size"].to_numpy(float) / hidden  # message_size counts elements: tokens x hidden
    y = d["latency"].to_numpy() * 1e3
    return x, repair_1d(y, x)


def _moe_curve(df: pd.DataFrame, path: str, arch: dict, tp: int, notes: list[str]):
    d = df[(df["moe_dtype"] == "bfloat16") & (df["distribution"] == "balanced") & (df["moe_ep_size"] == 1)]
    if d.empty:
        raise DataError(f"{path}: no bfloat16 balanced rows")
    h, inter, E, k = arch["hidden"], arch["ffn"], arch["n_experts"], arch["top_k"]
    exact = d[(d["hidden_size"] == h) & (d["inter_size"] == inter) & (d["num_experts"] == E) & (d["topk"] == k)
              & (d["moe_tp_size"] == tp)]
    scale = 1.0
    if exact.empty:
        cand = d.assign(_cost=np.abs(np.log(d["hidden_size"] * d["inter_size"] / d["moe_tp_size"]
                                            / (h * inter / tp)))
                        + np.abs(np.log(d["num_experts"] / E)) + np.abs(np.log(d["topk"] / k)))
        best = cand.sort_values("_cost").iloc[0]
        exact = d[(d["hidden_size"] == best.hidden_size) & (d["inter_size"] == best.inter_size)
                  & (d["num_experts"] == best.num_experts) & (d["topk"] == best.topk)
                  & (d["moe_tp_size"] == best.moe_tp_size)]
        scale = (h * inter / tp * E) / (best.hidden_size * best.inter_size / best.moe_tp_size * best.num_experts)
        notes.append(f"moe: shape h={h} inter={inter} E={E} top{k} tp{tp} not measured; using h="
                     f"{int(best.hidden_size)} inter={int(best.inter_size)} E={int(best.num_experts)} "
                     f"top{int(best.topk)} tp{int(best.moe_tp_size)} scaled x{scale:.3g} by expert bytes")
    if (exact["kernel_source"] == "vllm_fused_moe").any():
        exact = exact[exact["kernel_source"] == "vllm_fused_moe"]
    agg = exact.groupby("num_tokens")["latency"].min().sort_index()
    x = agg.index.to_numpy(float)
    return x, repair_1d(agg.to_numpy() * 1e3 * scale, x)


# ---------------------------------------------------------------- packing

def _pack_1d(x, y) -> list[float]:
    return [float(len(x)), *map(float, x), *map(float, y)]


def _pack_2d(x, y, v) -> list[float]:
    return [float(len(x)), float(len(y)), *map(float, x), *map(float, y), *map(float, np.ravel(v))]


def reduce_model(tables: KernelTables, arch: dict, tp: int, hw: dict) -> Reduction:
    """Everything one model at one TP needs, packed into one flat array (see FLAT layout)."""
    notes: list[str] = []
    L, h, vocab = int(arch["layers"]), int(arch["hidden"]), int(arch["vocab"])
    nq_all, nkv_all, ffn = int(arch["n_heads"]), int(arch["n_kv_heads"]), int(arch["ffn"])
    hd = _head_dim(arch)
    if nq_all % tp or nkv_all % tp and nkv_all >= tp:
        notes.append(f"heads {nq_all}/{nkv_all} do not divide by TP {tp}; rounded up per GPU")
    nq = max(1, -(-nq_all // tp))
    nkv = max(1, -(-nkv_all // tp))  # vLLM replicates KV heads when nkv < tp
    moe = int(arch.get("n_experts") or 0) > 1
    src = tables.source

    # dense GEMMs of one layer at the per-GPU shapes (column-parallel n, row-parallel k)
    grid = _gemm_grid(tables)
    shapes = [((nq + 2 * nkv) * hd, h), (h, nq * hd)]  # QKV, O
    if moe:
        shapes.append((int(arch["n_experts"]), h))  # router (replicated)
    else:
        shapes += [(2 * ffn // tp, h), (h, ffn // tp)]  # gate-up, down
    ms = grid[0]
    layer = sum(gemm_curve(grid, n, k) for n, k in shapes)
    layer = repair_1d(layer, ms)
    lm = repair_1d(gemm_curve(grid, -(-vocab // tp), h), ms)
    gemm_flop_tok = 2.0 * sum(n * k for n, k in shapes)
    gemm_bytes = 2.0 * sum(n * k for n, k in shapes)

    gen_path = f"{src}/{AIC_DIR}/generation_attention_perf.parquet"
    gen = tables.aic["generation_attention"].assign(ctx=lambda d: d["isl"] + d["step"])
    db, dc, dv, dlay = _attention_grid(gen, gen_path, nq, nkv, hd, "ctx", notes, "decode attention")
    ctx_path = f"{src}/{AIC_DIR}/context_attention_perf.parquet"
    pb, pl, pv, play = _attention_grid(tables.aic["context_attention"], ctx_path, nq, nkv, hd, "isl", notes,
                                       "prefill attention")

    parts: list[float] = []
    header = np.zeros(HEADER)
    header[H_VERSION] = FLAT_VERSION
    header[H_LAYERS] = L
    header[H_TP] = tp
    header[H_PEAK] = hw["peak_flops"]
    header[H_BW] = hw["hbm_bw"]
    header[H_NVLINK] = hw["nvlink_bw"]
    header[H_GRAPH_MAX] = GRAPH_MAX_TOKENS
    header[H_GEMM_FLOP_TOK] = gemm_flop_tok
    header[H_GEMM_BYTES] = gemm_bytes
    header[H_LM_FLOP_TOK] = 2.0 * -(-vocab // tp) * h
    header[H_LM_BYTES] = 2.0 * -(-vocab // tp) * h
    header[H_KV_BYTES_TOK] = 2.0 * nkv * hd * 2.0
    header[H_DEC_FLOP_TOK] = 4.0 * nq * hd
    header[H_PRE_FLOP] = 4.0 * nq * hd
    header[H_AR_BYTES_TOK] = 2.0 * h
    header[H_AR_RING] = 2.0 * (tp - 1) / tp
    header[H_AR_PER_LAYER] = ALLREDUCES_PER_LAYER
    for k in (H_OFF_AR_GRAPH, H_OFF_AR_EAGER, H_OFF_MOE):
        header[k] = -1.0

    def add(slot, values):
        header[slot] = HEADER + len(parts)
        parts.extend(values)

    add(H_OFF_GEMM, _pack_1d(ms, layer))
    add(H_OFF_LM, _pack_1d(ms, lm))
    add(H_OFF_DEC, _pack_2d(db, dc, dv))
    add(H_OFF_PRE, _pack_2d(pb, pl, pv))
    if tp > 1:
        ar_path = f"{src}/{AIC_DIR}/custom_allreduce_perf.parquet"
        gx, gy = _allreduce_curve(tables.aic["custom_allreduce"], ar_path, tp, h, "vllm_graph", notes)
        ex, ey = _allreduce_curve(tables.aic["custom_allreduce"], ar_path, tp, h, "vllm_eager", notes)
        ey = np.maximum(ey, np.interp(ex, gx, gy))  # eager is never faster: the step time may only rise
        add(H_OFF_AR_GRAPH, _pack_1d(gx, gy))
        add(H_OFF_AR_EAGER, _pack_1d(ex, ey))
    if moe:
        moe_path = f"{src}/{AIC_DIR}/moe_perf.parquet"
        add(H_OFF_MOE, _pack_1d(*_moe_curve(tables.aic["moe"], moe_path, arch, tp, notes)))
        e_inter = int(arch["top_k"]) * 3.0 * h * ffn / tp
        header[H_MOE_FLOP_TOK] = 2.0 * e_inter
        header[H_MOE_BYTES] = 2.0 * e_inter  # at least top_k experts' weights are read
    flat = np.concatenate([header, np.asarray(parts, np.float64)])
    layout = {"layers": L, "tp": tp, "q_heads_per_gpu": nq, "kv_heads_per_gpu": nkv, "head_dim": hd,
              "decode_layout_used": dlay, "prefill_layout_used": play, "gemm_shapes_nk": shapes,
              "lm_head_nk": (-(-vocab // tp), h), "moe": moe}
    return Reduction(flat, notes, layout)


def reduce_for_model(tables: KernelTables, arch: dict, tp: int, hw: dict) -> np.ndarray:
    """The flat float64 array `fill_measured` reads (notes: use reduce_model)."""
    return reduce_model(tables, arch, tp, hw).flat
