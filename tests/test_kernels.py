"""Kernel tables as ground truth and the measured components built on them (real tables, real numba)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from evaluator import kernels as kt
from evaluator.components import COMPONENT_INDEX, N_COMPONENTS, fill_components
from evaluator.data import DataError
from evaluator.measured import (MEASURED_COMPONENTS, MEASURED_DOCS, MEASURED_INDEX, N_MEASURED, component_grid,
                                decode_attn_us, fill_measured, measured_matrix, mha_decode_ratio,
                                model_reductions, step_aggregates)

STEP = MEASURED_INDEX["t_step_measured"]


@pytest.fixture(scope="module")
def tables(data_dir):
    return kt.read_kernel_tables(data_dir)


@pytest.fixture(scope="module")
def reds(gt, tables):
    return model_reductions(gt, tables)


def _exp(gt, model):
    return next(e for e in gt.experiments if e.model == model)


def _measure(flat, P, D, n_p, n_d, B, K):
    out = np.empty(N_MEASURED)
    fill_measured(flat, float(P), float(D), float(n_p), float(n_d), float(B), float(K), out)
    return out


# ---------------------------------------------------------------- reading and errors

def test_reads_all_tables(tables):
    assert set(tables.aic) == set(kt.AIC_FILES)
    assert len(tables.aic["gemm"]) == 26040
    assert (64, 8, 128, 4) in tables.mha_decode and (32, 32, 128) in tables.mha_prefill


def _copy_aic(data_dir, tmp_path):
    dst = tmp_path / "data"
    shutil.copytree(data_dir / kt.AIC_DIR, dst / kt.AIC_DIR)
    return dst


def test_bad_value_names_file_row_column(data_dir, tmp_path):
    root = _copy_aic(data_dir, tmp_path)
    path = root / kt.AIC_DIR / "custom_allreduce_perf.parquet"
    df = pd.read_parquet(path)
    df.loc[7, "latency"] = -1.0
    df.to_parquet(path)
    with pytest.raises(DataError) as e:
        kt.read_kernel_tables(root)
    msg = str(e.value)
    assert "custom_allreduce_perf.parquet" in msg and "row 7" in msg and "'latency'" in msg
    assert "\n" not in msg


def test_missing_column_and_file_and_corrupt(data_dir, tmp_path):
    root = _copy_aic(data_dir, tmp_path)
    path = root / kt.AIC_DIR / "moe_perf.parquet"
    pd.read_parquet(path).drop(columns=["topk"]).to_parquet(path)
    with pytest.raises(DataError, match=r"moe_perf.parquet: missing column 'topk'"):
        kt.read_kernel_tables(root)
    path.write_bytes(b"not parquet")
    with pytest.raises(DataError, match=r"moe_perf.parquet: cannot read parquet"):
        kt.read_kernel_tables(root)
    path.unlink()
    with pytest.raises(DataError, match=r"moe_perf.parquet: missing"):
        kt.read_kernel_tables(root)
    with pytest.raises(DataError, match=r"kernel tables directory"):
        kt.read_kernel_tables(tmp_path / "nowhere")


def test_bad_mha_file(data_dir, tmp_path):
    root = _copy_aic(data_dir, tmp_path)
    d = root / kt.MHA_DIR / "decode" / "h100"
    d.mkdir(parents=True)
    (d / "64-8-128-tp4.csv").write_text("dtype,kv_dtype,batch_size,kv_len,latency_us\nbf16,bf16,1,1024,abc\n")
    with pytest.raises(DataError, match=r"64-8-128-tp4.csv: row 0: column 'latency_us'"):
        kt.read_kernel_tables(root)
    (d / "64-8-128-tp4.csv").unlink()
    (d / "sixty-tp4.csv").write_text("batch_size,kv_len,latency_us\n1,1,1\n")
    with pytest.raises(DataError, match=r"sixty-tp4.csv: file name"):
        kt.read_kernel_tables(root)


# ---------------------------------------------------------------- repair and reduction

def test_repair_removes_outliers_and_keeps_order():
    x = np.array([1, 2, 4, 8, 16], float)
    y = np.array([5.0, 4.0, 6.0, 30.0, 14.0])  # 2 is faster than 1, 8 slower than 16 and than 2 x t(4)
    r = kt.repair_1d(y, x)
    assert np.all(np.diff(r) >= 0)
    assert r[0] == 4.0 and r[3] <= 12.0 and r[4] == 14.0
    assert np.all(r <= y)


def test_reductions_and_layout_notes(reds):
    assert set(reds) == {"llama-2-7b", "llama-2-70b", "codellama-34b", "mixtral-8x7b"}
    for model, red in reds.items():
        assert red.flat.dtype == np.float64 and red.flat.ndim == 1
        assert red.flat[kt.H_VERSION] == kt.FLAT_VERSION
        assert all(np.isfinite(red.flat))
    assert reds["llama-2-70b"].layout["decode_layout_used"] == (16, 2)
    assert not reds["llama-2-70b"].notes and not reds["codellama-34b"].notes
    (note,) = reds["llama-2-7b"].notes
    assert "32 query / 32 KV heads" in note and "32 / 8 (head_dim 128)" in note
    assert reds["llama-2-7b"].flat[kt.H_OFF_AR_GRAPH] < 0  # TP 1: no all-reduce table
    assert reds["mixtral-8x7b"].flat[kt.H_OFF_MOE] > 0 and reds["llama-2-70b"].flat[kt.H_OFF_MOE] < 0


def test_measured_knots_reproduce_the_table(reds, tables):
    """At a measured point the interpolation returns the (repaired) measurement itself."""
    g = tables.aic["generation_attention"]
    row = g[(g.num_heads == 16) & (g.num_key_value_heads == 2) & (g.kv_cache_dtype == "bfloat16")
            & (g.batch_size == 32) & (g.step == 1023)]
    assert decode_attn_us(reds["llama-2-70b"].flat, 32.0, 1024.0) == pytest.approx(row.latency.iloc[0] * 1e3, rel=0.02)


def test_unmeasured_model_gets_nearest_tables_with_notes(tables, gt):
    """A model nobody measured: its shapes come from its config, the rest from the nearest tables."""
    arch = dict(layers=40, hidden=5120, n_heads=40, n_kv_heads=8, ffn=17408, n_experts=16, top_k=4,
                vocab=151936, head_dim=64)
    red = kt.reduce_model(tables, arch, 3, gt.hardware)
    text = " | ".join(red.notes)
    assert "do not divide by TP 3" in text and "3 GPUs not measured; using 4 GPUs" in text
    assert "head_dim 64" in text and "moe: shape h=5120" in text
    small = _measure(red.flat, 0, 8, 0, 8, 8, 8 * 500)
    big = _measure(red.flat, 2048, 128, 1, 128, 129, 128 * 4000 + 2048)
    assert np.all(np.isfinite(big)) and np.all(big >= small) and big[STEP] > small[STEP] > 0


# ---------------------------------------------------------------- the component function

def test_empty_step_and_dense_vs_moe(reds):
    for red in reds.values():
        assert np.all(_measure(red.flat, 0, 0, 0, 0, 0, 0) == 0.0)
    dense = _measure(reds["llama-2-70b"].flat, 100, 32, 1, 32, 33, 32 * 700 + 100)
    moe = _measure(reds["mixtral-8x7b"].flat, 100, 32, 1, 32, 33, 32 * 700 + 100)
    tp1 = _measure(reds["llama-2-7b"].flat, 100, 32, 1, 32, 33, 32 * 700 + 100)
    assert dense[MEASURED_INDEX["t_moe_measured"]] == 0.0 and moe[MEASURED_INDEX["t_moe_measured"]] > 0.0
    assert tp1[MEASURED_INDEX["t_allreduce_measured"]] == 0.0 and dense[MEASURED_INDEX["t_allreduce_measured"]] > 0
    for v in (dense, moe, tp1):
        assert v[STEP] == pytest.approx(v[:STEP].sum())


def test_monotone_and_never_faster_than_peak(gt, reds):
    """More work is never faster, inside and far beyond the measured range, and no component
    beats the peak-speed roofline of the same work."""
    rng = np.random.default_rng(0)
    peak = np.empty(N_COMPONENTS)
    for model, red in reds.items():
        mv = _exp(gt, model).model_vec(gt.hardware)
        for _ in range(300):
            P = float(rng.choice([0, rng.integers(1, 20000)]))
            n_p = float(rng.integers(1, 8)) if P else 0.0
            D = float(rng.integers(0, 3000))
            K = P + D * float(rng.integers(1, 200000))
            base = _measure(red.flat, P, D, n_p, D, D + n_p, K)
            # more prefill at the same K; one more decoder bringing the mean context; more KV
            for dP, dD, dK in ((1 + P * 0.3, 0, 0), (0, 1, max(K, 1.0) / max(D, 1.0)), (0, 0, 1 + K * 0.5),
                               (0, 0, 1)):
                more = _measure(red.flat, P + dP, D + dD, n_p if P else 1.0, D + dD, D + dD + n_p, K + dK)
                assert np.all(more >= base * (1 - 1e-12)), (model, P, D, K, dP, dD, dK)
            fill_components(mv, P, D, n_p, D, D + n_p, K, K / D if D else 0.0, peak)
            c = COMPONENT_INDEX
            gemm_moe = base[MEASURED_INDEX["t_gemm_measured"]] + base[MEASURED_INDEX["t_moe_measured"]]
            assert gemm_moe >= (peak[c["t_prefill_gemm"]] + peak[c["t_decode_gemm"]]) * (1 - 1e-9)
            assert base[1] >= peak[c["t_decode_kv"]] * (1 - 1e-9)


def test_matrix_matches_single_calls(gt, reds):
    s = gt.steps[gt.steps["model_key"] == "codellama-34b"].head(200)
    agg = step_aggregates(s)
    M = measured_matrix(reds["codellama-34b"].flat, *agg)
    for i in (0, 57, 199):
        assert np.array_equal(M[i], _measure(reds["codellama-34b"].flat, *(a[i] for a in agg)))
    assert M.shape == (200, len(MEASURED_COMPONENTS)) and set(MEASURED_DOCS) == set(MEASURED_COMPONENTS)


# ---------------------------------------------------------------- against measurements

def test_real_decode_steps_are_a_bit_longer_than_the_kernels(gt, reds):
    """Issue 16: the kernels alone explain most of a decode-only step; the cycle adds a small,
    positive CPU/launch remainder. Measured here: median ratio 1.11 (codellama-34b), 1.17 (70b)."""
    for model in ("codellama-34b", "llama-2-70b"):
        s = gt.steps[(gt.steps["model_key"] == model) & gt.steps["next_step_start_delta_us"].notna()
                     & (gt.steps["prefill_tokens"] == 0)]
        M = measured_matrix(reds[model].flat, *step_aggregates(s))
        r = s["next_step_start_delta_us"].to_numpy() / M[:, STEP]
        assert 1.0 < np.median(r) < 1.25, model
        assert np.percentile(r, 90) / np.percentile(r, 10) < 1.15, model  # the kernels track the load


def test_agrees_with_mha_microbenchmarks(tables, reds):
    """The independent mha/ decode benchmarks, in the served range (batch >= 16, 1k-4k context)."""
    for model, lay in (("llama-2-70b", (64, 8, 128, 4)), ("codellama-34b", (64, 8, 128, 2)),
                       ("llama-2-7b", (32, 32, 128, 1))):
        r = mha_decode_ratio(tables, reds[model].flat, *lay, min_batch=16, min_ctx=1024)
        r = r[np.isfinite(r)]
        assert len(r) > 5 and 0.85 < np.median(r) < 1.15, model


def test_component_grid(gt, tables):
    rows = component_grid(gt, "llama-2-70b", tables)
    assert len(rows) == 3 * 5 * 5
    json.dumps(rows, allow_nan=False)
    assert {r["decodes"] for r in rows} >= {1, 128} and max(r["context"] for r in rows) == 4096
    assert max(r["prefill_chunk"] for r in rows) == 2048
    assert all(set(MEASURED_COMPONENTS) <= set(r) and "t_weights" in r for r in rows)
    s = gt.steps[(gt.steps["model_key"] == "llama-2-70b") & gt.steps["next_step_start_delta_us"].notna()
                 & (gt.steps["decode_tokens"] > 0)]
    assert sum(r["measured_cycle_n"] for r in rows) == len(s)
    with_cycles = [r for r in rows if r["measured_cycle_n"] >= 20]
    assert with_cycles and all(r["measured_cycle_median_us"] > r["t_step_measured"] for r in with_cycles)
    with pytest.raises(DataError, match="not in the ground truth"):
        component_grid(gt, "gpt-5", tables)
