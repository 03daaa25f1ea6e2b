"""Analytical components against hand-computed values (Llama-2-7B TP1, Mixtral-8x7B TP2)."""
import numpy as np
import pytest

from evaluator import component_table as table
from evaluator.component_table import KERNEL_PATH, Row, TableError, kernel_source
from evaluator.components import (COMPONENT_DOCS, COMPONENTS, MODEL_FIELDS, COMPONENT_INDEX as CI, batch_aggregates,
                                  fill_components, model_vector)
from evaluator.data import DEFAULT_HW

LLAMA7B = dict(layers=32, hidden=4096, n_heads=32, n_kv_heads=32, ffn=11008, n_experts=0, top_k=0, vocab=32000)
MIXTRAL = dict(layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn=14336, n_experts=8, top_k=2, vocab=32000)


def comps(arch, tp, P, D, n_p, n_d, B, K, ctx_max=None):
    out = np.zeros(len(CI))
    ctx = (K / n_d if n_d else 0.0) if ctx_max is None else ctx_max  # no spread unless given
    fill_components(model_vector(arch, tp, DEFAULT_HW), P, D, n_p, n_d, B, K, ctx, out)
    return {k: out[i] for k, i in CI.items()}


def test_llama7b_by_hand():
    c = comps(LLAMA7B, 1, 512.0, 64.0, 2.0, 64.0, 66.0, 40000.0)
    attn = 4 * 4096 * 4096  # q, k, v, o with nq = nkv
    mlp = 3 * 4096 * 11008
    per_tok = 32 * (attn + mlp)  # 6.48e9 params in the layers
    flops = 989.5e12
    assert c["t_prefill_gemm"] == pytest.approx(2 * 512 * per_tok / flops * 1e6)
    assert c["t_decode_gemm"] == pytest.approx(2 * 64 * per_tok / flops * 1e6)
    # causal attention of 2 chunks of 256 tokens: 4 * L * h * P * (P / n) / 2
    assert c["t_prefill_attn"] == pytest.approx(4 * 32 * 4096 * 512 * 256 / 2 / flops * 1e6)
    # KV read: K tokens * (K and V) * L * 4096 * 2 bytes
    assert c["t_decode_kv"] == pytest.approx(40000 * 2 * 32 * 4096 * 2 / 3.35e12 * 1e6)
    # weights: 2 bytes * (layers + embedding + lm head) ~ 13.5 GB -> ~4.0 ms at 3.35 TB/s
    w = 2 * (per_tok + 2 * 32000 * 4096)
    assert c["t_weights"] == pytest.approx(w / 3.35e12 * 1e6)
    assert 3900 < c["t_weights"] < 4100
    assert c["t_allreduce"] == 0.0  # TP1
    assert c["t_lm_head"] == pytest.approx(2 * (2 + 64) * 32000 * 4096 / flops * 1e6)
    assert (c["P"], c["D"], c["B"], c["K"], c["layers"], c["tp"]) == (512, 64, 66, 40000, 32, 1)


def test_mixtral_moe_and_tp():
    c = comps(MIXTRAL, 2, 0.0, 1.0, 0.0, 1.0, 1.0, 1000.0)
    hd = 128
    attn = 4096 * 4096 + 2 * 4096 * 8 * hd + 4096 * 4096
    mlp = 3 * 4096 * 14336
    # one decode token hits top-2 of 8 experts: expected distinct experts = 8 * (1 - 0.75) = 2
    w = 2 * (32 * (attn + 2 * mlp) + 2 * 32000 * 4096) / 2
    assert c["t_weights"] == pytest.approx(w / 3.35e12 * 1e6)
    assert c["t_decode_gemm"] == pytest.approx(2 * 32 * (attn + 2 * mlp) / 2 / 989.5e12 * 1e6)
    # a full batch hits essentially all 8 experts: weights approach the full 93 GB / TP
    big = comps(MIXTRAL, 2, 2048.0, 0.0, 4.0, 0.0, 4.0, 1000.0)
    full = 2 * (32 * (attn + 8 * mlp) + 2 * 32000 * 4096) / 2 / 3.35e12 * 1e6
    assert big["t_weights"] == pytest.approx(full, rel=1e-6)
    # ring all-reduce: 2 per layer, (TP-1)/TP * 2 of the activation bytes over 450 GB/s
    assert big["t_allreduce"] == pytest.approx(2 * 32 * 2048 * 4096 * 2 * 2 * 0.5 / 450e9 * 1e6)
    assert c["t_prefill_gemm"] == 0.0 and c["t_prefill_attn"] == 0.0


def test_batch_aggregates_rules():
    # request A: prefill chunk of 100 at progress 0 (input 300); B: decode at progress 400 (input 350)
    P, D, n_p, n_d, B, K, ctx = batch_aggregates([0, 400], [100, 1], [300, 350])
    assert (P, D, n_p, n_d, B) == (100, 1, 1, 1, 2)
    assert K == 112 + 416  # ceil(100/16)*16 + ceil(401/16)*16
    assert ctx == 401  # the decoding request's tokens after this step (the prefill chunk is no decode)
    assert batch_aggregates([1200, 2000, 1500], [1, 1, 1], [1000, 1000, 1000])[6] == 2001


CODELLAMA_TP2 = dict(layers=48, hidden=8192, n_heads=64, n_kv_heads=8, ffn=22016, n_experts=0, top_k=0, vocab=32000)
LLAMA70B_TP4 = dict(layers=80, hidden=8192, n_heads=64, n_kv_heads=8, ffn=28672, n_experts=0, top_k=0, vocab=32000)


@pytest.mark.parametrize("arch,tp,measured_ms", [(CODELLAMA_TP2, 2, 1.7), (LLAMA70B_TP4, 4, 2.5)])
def test_longest_context_term_has_the_order_of_the_h100_measurement(arch, tp, measured_ms):
    """DESIGN 3b, measured on an H100: 128 decodes whose contexts spread uniformly over
    1,080-2,530 tokens cost 1.7 ms (codellama-34b TP2) and 2.5 ms (llama-2-70b TP4) more per
    step than the same batch at the mean. t_decode_kv_max - t_decode_kv (the batch read as if
    every request held the longest context) has that order: within a factor of two."""
    n, lo, hi = 128, 1080, 2530
    K = n * (lo + hi) / 2.0
    spread = comps(arch, tp, 0.0, n, 0.0, n, n, K, ctx_max=hi)
    flat = comps(arch, tp, 0.0, n, 0.0, n, n, K)
    assert flat["t_decode_kv_max"] == pytest.approx(flat["t_decode_kv"])  # no spread: the same read
    extra_ms = (spread["t_decode_kv_max"] - spread["t_decode_kv"]) / 1e3
    assert measured_ms / 2 < extra_ms < 2 * measured_ms, extra_ms
    # bytes per token by hand: 2 (K, V) x layers x 8 KV heads x 128 x 2 bytes / TP, at 3.35 TB/s
    per_tok = 2 * arch["layers"] * 8 * 128 * 2 / tp
    assert spread["t_decode_kv_max"] == pytest.approx(n * hi * per_tok / DEFAULT_HW["hbm_bw"] * 1e6, rel=1e-9)


def test_spread_wait_is_the_longest_context_excess_and_never_negative():
    """t_decode_spread is what t_decode_kv_max adds to the KV held: the same difference on a
    decode-only batch, 0 at the mean context, and 0 (not negative) when prefilling requests'
    KV makes K exceed n_decode * ctx_max, so mean-context step + spread never falls as the
    spread widens."""
    arch, tp, n = CODELLAMA_TP2, 2, 128
    K = n * 1805.0
    spread = comps(arch, tp, 0.0, n, 0.0, n, n, K, ctx_max=2530)
    assert spread["t_decode_spread"] == pytest.approx(spread["t_decode_kv_max"] - spread["t_decode_kv"], rel=1e-12)
    assert spread["t_decode_spread"] > 0
    assert comps(arch, tp, 0.0, n, 0.0, n, n, K)["t_decode_spread"] == 0.0
    mixed = comps(arch, tp, 1024.0, 8, 1.0, 8, 9, 1024.0 + 8 * 600, ctx_max=650)  # a long prefill beside 8 decodes
    assert mixed["t_decode_kv_max"] < mixed["t_decode_kv"] and mixed["t_decode_spread"] == 0.0
    wider = [comps(arch, tp, 0.0, n, 0.0, n, n, K, ctx_max=c)["t_decode_spread"] for c in (1805, 2000, 2300, 2530)]
    assert wider == sorted(wider)


def test_the_numba_kernel_is_the_generated_one():
    assert KERNEL_PATH.read_text() == kernel_source(), "stale: run python -m evaluator.component_table"
    assert fill_components.__module__ == "evaluator.components_kernel"


def test_public_names_come_from_the_table():
    measured = tuple(r.name for b in table.BLOCKS for r in b.rows)
    # the measured components come after the peak-speed ones: archived programs keep their indices
    late = tuple(r.name for r in table.LATE_ROWS)  # appended after them for the same reason
    assert COMPONENTS == tuple(r.name for r in table.COMPONENT_ROWS) + measured + late
    assert late == ("t_decode_kv_max", "ctx_max", "t_decode_spread")
    assert measured[-1] == "t_step_measured" and COMPONENTS.index("t_gemm_measured") == 15
    assert list(COMPONENT_DOCS) == list(COMPONENTS) and all(COMPONENT_DOCS.values())
    assert MODEL_FIELDS == table.MODEL_FIELDS


@pytest.mark.parametrize("formula, match", [
    ("P + nobody", "neither an input"),
    ("abs(P)", "only HELPERS"),
    ("P % 2.0", "Mod is not allowed"),
    ("1.0 + (P if D > 0.0 else D)", "only allowed as the whole formula"),
    ("P +", "invalid syntax"),
])
def test_the_table_refuses_what_both_generators_cannot_translate(monkeypatch, formula, match):
    monkeypatch.setattr(table, "INTERMEDIATES", table.INTERMEDIATES + (Row("bad", formula),))
    with pytest.raises(TableError, match=match):
        kernel_source()


def test_a_formula_may_call_a_helper(monkeypatch):
    monkeypatch.setitem(table.HELPERS, "twice", table.Helper("twice", "evaluator.helpers_x:double", "unused"))
    monkeypatch.setattr(table, "INTERMEDIATES", table.INTERMEDIATES + (Row("doubled", "twice(P) + 1.0"),))
    src = kernel_source()
    assert "from evaluator.helpers_x import double as twice\n" in src
    assert "    doubled = twice(P) + 1.0\n" in src
