"""Model configs honoured field by field (evaluator.model_configs), and the shipped configs."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from evaluator.components import MI, MODEL_FIELDS, model_vector
from evaluator.data import DEFAULT_HW, _embedded_arch, estimate_kv_blocks, read_arch
from evaluator.errors import DataError
from evaluator.model_configs import (ModelConfigError, arch_from_config, head_dim, kv_bytes_per_token, load_arch,
                                     per_gpu_shapes, shipped_config_path, shipped_models, weight_bytes, weight_params)

DATA = Path(os.environ.get("STEPEVOLVE_DATA", "/work/shared/data"))

# A small config whose every figure is checked by hand below: head_dim 32 is stated and is
# not hidden / heads (= 16), GQA 4 query heads over 2 KV heads.
SMALL = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 32, "intermediate_size": 128, "vocab_size": 100}


def test_small_config_shapes_by_hand():
    arch = arch_from_config(SMALL)
    assert arch == {"layers": 2, "hidden": 64, "n_heads": 4, "n_kv_heads": 2, "ffn": 128, "n_experts": 0,
                    "top_k": 0, "vocab": 100, "head_dim": 32}
    # per layer: q 64*4*32 = 8192, k+v 2*64*2*32 = 8192, o 4*32*64 = 8192, mlp 3*64*128 = 24576
    # -> 49152; two layers 98304; embedding + LM head 2*100*64 = 12800
    assert weight_params(arch) == 111104
    assert weight_bytes(arch) == 222208
    # K and V, 2 layers, 2 KV heads of 32, 2 bytes
    assert kv_bytes_per_token(arch, 1) == 2 * 2 * 2 * 32 * 2 == 512
    s1 = per_gpu_shapes(arch, 1)
    assert (s1["q_heads"], s1["kv_heads"], s1["head_dim"], s1["qkv_out"], s1["o_in"], s1["ffn"], s1["vocab"]) \
        == (4, 2, 32, (4 + 2 * 2) * 32, 128, 128, 100)
    s2 = per_gpu_shapes(arch, 2)
    assert (s2["q_heads"], s2["kv_heads"], s2["qkv_out"], s2["o_in"], s2["ffn"], s2["vocab"]) \
        == (2, 1, (2 + 2) * 32, 64, 64, 50)
    assert kv_bytes_per_token(arch, 2) == 256
    s4 = per_gpu_shapes(arch, 4)  # 2 KV heads over 4 GPUs: each GPU holds one (replicated twice)
    assert (s4["q_heads"], s4["kv_heads"], s4["kv_replicas"], s4["qkv_out"], s4["ffn"]) == (1, 1, 2, 96, 32)
    assert kv_bytes_per_token(arch, 4) == 256
    with pytest.raises(ModelConfigError, match="^TP 8 does not divide num_attention_heads 4$"):
        per_gpu_shapes(arch, 8)
    # the model vector carries the stated head_dim, not hidden / heads
    v = model_vector(arch, 2, DEFAULT_HW)
    assert v[MI["head_dim"]] == 32.0


def test_tied_embeddings_counted_once():
    arch = arch_from_config({**SMALL, "tie_word_embeddings": True})
    assert arch["tie_word_embeddings"] is True
    assert weight_params(arch) == 98304 + 100 * 64
    assert "tie_word_embeddings" not in arch_from_config({**SMALL, "tie_word_embeddings": False})


def test_absent_fields_are_derived():
    cfg = {k: v for k, v in SMALL.items() if k not in ("head_dim", "num_key_value_heads")}
    arch = arch_from_config(cfg)
    assert arch["n_kv_heads"] == 4 and "head_dim" not in arch
    assert head_dim(arch) == 16
    assert kv_bytes_per_token(arch, 1) == 2 * 2 * 4 * 16 * 2
    assert arch_from_config({**cfg, "num_key_value_heads": None})["n_kv_heads"] == 4


def test_mistral_nemo_head_dim():
    """Mistral-Nemo states head_dim 128 with hidden 5120 and 32 heads (5120 / 32 = 160)."""
    arch = load_arch("mistralai/Mistral-Nemo-Instruct-2407")
    assert arch["head_dim"] == 128 and arch["hidden"] == 5120 and arch["n_heads"] == 32
    s = per_gpu_shapes(arch, 1)
    assert s["qkv_out"] == (32 + 2 * 8) * 128 == 6144  # not 48 * 160
    assert s["o_in"] == 4096
    assert kv_bytes_per_token(arch, 1) == 2 * 40 * 8 * 128 * 2 == 163840
    assert model_vector(arch, 1, DEFAULT_HW)[MI["head_dim"]] == 128.0


def test_moe_fields():
    mixtral = {**SMALL, "num_local_experts": 8, "num_experts_per_tok": 2}
    a = arch_from_config(mixtral)
    assert (a["n_experts"], a["top_k"], a["ffn"]) == (8, 2, 128)
    # all experts' weights are held: 8 * 3*64*128 per layer
    assert weight_params(a) == 2 * (24576 + 8 * 24576) + 12800
    qwen_moe = {**SMALL, "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 32,
                "shared_expert_intermediate_size": 256}
    q = arch_from_config(qwen_moe)
    assert (q["n_experts"], q["top_k"], q["ffn"], q["shared_ffn"]) == (60, 4, 32, 256)
    assert weight_params(q) == 2 * (24576 + 60 * 3 * 64 * 32 + 3 * 64 * 256) + 12800
    s = per_gpu_shapes(q, 2)
    assert (s["ffn"], s["shared_ffn"], s["n_experts"], s["top_k"]) == (16, 128, 60, 4)
    # intermediate_size alone is the expert size when moe_intermediate_size is absent (Mixtral)
    assert arch_from_config({**qwen_moe, "moe_intermediate_size": None})["ffn"] == 128


@pytest.mark.parametrize("change, field", [
    ({"num_local_experts": 8}, "num_experts_per_tok"),
    ({"num_key_value_heads": 3}, "num_key_value_heads"),
    ({"head_dim": None, "hidden_size": 66}, "head_dim"),
    ({"kv_lora_rank": 512}, "kv_lora_rank"),
    ({"num_hidden_layers": "32"}, "num_hidden_layers"),
    ({"hidden_size": 0}, "hidden_size"),
    ({"vocab_size": None}, "vocab_size"),
    ({"intermediate_size": None}, "intermediate_size"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
])
def test_malformed_config_names_the_field(change, field):
    with pytest.raises(ModelConfigError) as ei:
        arch_from_config({**SMALL, **change}, "cfg.json")
    msg = str(ei.value)
    assert msg.startswith("cfg.json: ") and f"'{field}'" in msg and "\n" not in msg
    assert isinstance(ei.value, DataError)


def test_text_config_nested():
    arch = arch_from_config({"architectures": ["X"], "text_config": dict(SMALL)})
    assert arch["head_dim"] == 32 and arch["layers"] == 2


# ---------------------------------------------------------------- the bundled four: unchanged

BUNDLED = {  # what read_arch gave before field-by-field reading, and the model vector head
    "Llama-2-7b-hf": ({"layers": 32, "hidden": 4096, "n_heads": 32, "n_kv_heads": 32, "ffn": 11008,
                       "n_experts": 0, "top_k": 0, "vocab": 32000}, 1, [6976, 15559, 32725, 67058]),
    "Llama-2-70b-hf": ({"layers": 80, "hidden": 8192, "n_heads": 64, "n_kv_heads": 8, "ffn": 28672,
                        "n_experts": 0, "top_k": 0, "vocab": 32000}, 4, [1, 1153, 28619, 83551]),
    "Mixtral-8x7B-v0.1": ({"layers": 32, "hidden": 4096, "n_heads": 32, "n_kv_heads": 8, "ffn": 14336,
                           "n_experts": 8, "top_k": 2, "vocab": 32000}, 2, [1, 24126, 92791, 230120]),
    "CodeLlama-34b-Instruct-hf": ({"layers": 48, "hidden": 8192, "n_heads": 64, "n_kv_heads": 8, "ffn": 22016,
                                   "n_experts": 0, "top_k": 0, "vocab": 32000}, 2, [1434, 24323, 70099, 161652]),
}


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_models_unchanged(name):
    path = DATA / "model_configs" / name / "config.json"
    if not path.exists():
        pytest.skip(f"{path} not available")
    arch = read_arch(path)
    want, tp, blocks = BUNDLED[name]
    assert arch == want and list(arch) == list(want)  # same keys, same order (the fingerprint)
    v = model_vector(arch, tp, DEFAULT_HW)
    expect = np.array([want["layers"], want["hidden"], want["n_heads"], want["n_kv_heads"], 128.0, want["ffn"],
                       want["n_experts"], want["top_k"], want["vocab"], tp, DEFAULT_HW["peak_flops"],
                       DEFAULT_HW["hbm_bw"], DEFAULT_HW["nvlink_bw"]], dtype=np.float64)
    assert len(MODEL_FIELDS) == len(expect)
    assert np.array_equal(v, expect)
    assert [estimate_kv_blocks(arch, t) for t in (1, 2, 4, 8)] == blocks


# ---------------------------------------------------------------- shipped configs

# name -> (layers, hidden, heads, kv heads, head_dim, ffn, experts, top_k, vocab)
SHIPPED = {
    "Llama-3.1-8B-Instruct": (32, 4096, 32, 8, 128, 14336, 0, 0, 128256),
    "Llama-3.1-70B-Instruct": (80, 8192, 64, 8, 128, 28672, 0, 0, 128256),
    "Qwen2.5-7B-Instruct": (28, 3584, 28, 4, 128, 18944, 0, 0, 152064),
    "Mixtral-8x22B-v0.1": (56, 6144, 48, 8, 128, 16384, 8, 2, 32768),
    "Mistral-Nemo-Instruct-2407": (40, 5120, 32, 8, 128, 14336, 0, 0, 131072),
}


def test_shipped_list():
    assert set(SHIPPED) <= set(shipped_models())
    for name in SHIPPED:
        assert json.loads(shipped_config_path(name).read_text())["architectures"]


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_config_shapes(name):
    L, h, nq, nkv, hd, ffn, E, k, vocab = SHIPPED[name]
    arch = load_arch(name)
    assert load_arch(shipped_config_path(name)) == arch  # by path
    assert load_arch(shipped_config_path(name).parent) == arch  # by folder
    assert load_arch(f"someorg/{name.lower()}") == arch  # HF id, any case
    assert (arch["layers"], arch["hidden"], arch["n_heads"], arch["n_kv_heads"], head_dim(arch), arch["ffn"],
            arch["n_experts"], arch["top_k"], arch["vocab"]) == (L, h, nq, nkv, hd, ffn, E, k, vocab)
    for tp in (1, 2, 4, 8):
        if nq % tp:
            with pytest.raises(ModelConfigError) as ei:
                per_gpu_shapes(arch, tp)
            assert str(ei.value) == f"TP {tp} does not divide num_attention_heads {nq}"
            continue
        s = per_gpu_shapes(arch, tp)
        q, kv = nq // tp, max(1, nkv // tp)
        assert (s["q_heads"], s["kv_heads"], s["head_dim"]) == (q, kv, hd)
        assert s["qkv_out"] == (q + 2 * kv) * hd and s["o_in"] == q * hd
        assert s["ffn"] * tp == ffn and s["vocab"] == -(-vocab // tp)
        assert kv_bytes_per_token(arch, tp) == 2 * L * kv * hd * 2
        assert model_vector(arch, tp, DEFAULT_HW)[MI["head_dim"]] == hd


def test_shipped_known_figures():
    """Published totals: Llama-3.1-8B 8.03 B parameters, 70B 70.6 B, Mixtral-8x22B 141 B
    (norms and the router left out here: well under 0.1%)."""
    assert abs(weight_params(load_arch("Llama-3.1-8B-Instruct")) / 8.03e9 - 1) < 0.003
    assert abs(weight_params(load_arch("Llama-3.1-70B-Instruct")) / 70.55e9 - 1) < 0.003
    assert abs(weight_params(load_arch("Mixtral-8x22B-v0.1")) / 140.6e9 - 1) < 0.005
    # Qwen2.5-7B: 28 heads do not split over 8 GPUs; 4 KV heads over 8 would be replicated
    with pytest.raises(ModelConfigError, match="^TP 8 does not divide num_attention_heads 28$"):
        per_gpu_shapes(load_arch("Qwen2.5-7B-Instruct"), 8)


def test_unknown_model_one_line_error():
    with pytest.raises(ModelConfigError) as ei:
        load_arch("nobody/No-Such-Model-7B")
    assert "No-Such-Model-7B" in str(ei.value) and "\n" not in str(ei.value)


def test_evaluator_falls_back_to_shipped_configs(tmp_path):
    arch = _embedded_arch("meta-llama/Llama-3.1-8B-Instruct", tmp_path / "model_configs" / "x" / "config.json")
    assert arch == load_arch("Llama-3.1-8B-Instruct")
    with pytest.raises(DataError, match="neither in the embedded default table nor shipped"):
        _embedded_arch("nobody/No-Such-Model", tmp_path / "config.json")
