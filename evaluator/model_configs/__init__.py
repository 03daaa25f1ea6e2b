"""Model architectures from Hugging Face ``config.json``, honoured field by field.

A config becomes the architecture dict the evaluator reads (``Experiment.arch``, packed by
``evaluator.components.model_vector`` and reduced by ``evaluator.kernels``). Every field the
config states is used as stated; a value is derived only where the field is absent:

================================  =============  ==============================================
config.json field                 arch key       when absent
================================  =============  ==============================================
num_hidden_layers                 layers         required
hidden_size                       hidden         required
num_attention_heads               n_heads        required
num_key_value_heads               n_kv_heads     = num_attention_heads (no GQA)
head_dim                          head_dim       hidden_size / num_attention_heads (key absent)
intermediate_size                 ffn            required for dense models
num_local_experts | num_experts   n_experts      0 (dense)
num_experts_per_tok               top_k          0 (dense); required when n_experts > 1
moe_intermediate_size             ffn (MoE)      intermediate_size is the expert size (Mixtral)
shared_expert_intermediate_size   shared_ffn     key absent (no shared expert)
tie_word_embeddings               tie_word_...   false: embedding and LM head are two matrices
vocab_size                        vocab          required
================================  =============  ==============================================

Optional keys are present only when the config states them (and, for the flag, only when it
is true), so the architectures of the four models in the bundled data keep exactly their
eight keys and values. Language-model fields nested under ``text_config`` (multimodal
configs) are read from there. Multi-head latent attention (``kv_lora_rank``, DeepSeek) has
no representation here and is refused rather than given wrong shapes.

Shipped configs: the ``<name>/config.json`` folders beside this file, copied from the
models' published Hugging Face ``config.json``. :func:`load_arch` takes a shipped name
(``"Llama-3.1-8B-Instruct"``, an HF id such as ``"meta-llama/Llama-3.1-8B-Instruct"``,
case-insensitive) or a path to a config.json (or its folder).

Per-GPU shapes follow vLLM's tensor parallelism: query heads, the MLP (and every expert's)
intermediate size and the vocabulary are split over TP; KV heads are split when TP divides
them and replicated (one per GPU) when TP is a multiple of them. :func:`per_gpu_shapes`
raises :class:`ModelConfigError` with a one-line message where they do not divide.
"""
from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from evaluator.errors import DataError

__all__ = ["ModelConfigError", "arch_from_config", "read_config", "read_arch_file", "shipped_models",
           "shipped_config_path", "load_arch", "head_dim", "per_gpu_shapes", "weight_params",
           "weight_bytes", "kv_bytes_per_token"]

BYTES_BF16 = 2


class ModelConfigError(DataError):
    """A config.json that cannot describe the model, or a TP its shapes do not split by."""


def _int_field(cfg: dict, key: str, source: str, *, required: bool = True, minimum: int = 1) -> int | None:
    if key not in cfg or cfg[key] is None:
        if required:
            raise ModelConfigError(f"{source}: missing field '{key}'")
        return None
    v = cfg[key]
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ModelConfigError(f"{source}: field '{key}' must be an integer, got {v!r}")
    if v < minimum:
        raise ModelConfigError(f"{source}: field '{key}' must be >= {minimum}, got {v}")
    return v


def arch_from_config(cfg: dict, source: str = "config.json") -> dict:
    """The architecture dict of a Hugging Face config (see the module table)."""
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{source}: a config.json must be a JSON object")
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
        source = f"{source} (text_config)"
    if cfg.get("kv_lora_rank"):
        raise ModelConfigError(f"{source}: field 'kv_lora_rank': multi-head latent attention is not modelled")
    layers = _int_field(cfg, "num_hidden_layers", source)
    hidden = _int_field(cfg, "hidden_size", source)
    n_heads = _int_field(cfg, "num_attention_heads", source)
    n_kv = _int_field(cfg, "num_key_value_heads", source, required=False)
    if n_kv is None:
        n_kv = n_heads
    if n_heads % n_kv:
        raise ModelConfigError(f"{source}: field 'num_key_value_heads' {n_kv} does not divide "
                               f"num_attention_heads {n_heads}")
    hd = _int_field(cfg, "head_dim", source, required=False)
    if hd is None and hidden % n_heads:
        raise ModelConfigError(f"{source}: missing field 'head_dim', and hidden_size {hidden} is not a "
                               f"multiple of num_attention_heads {n_heads}")
    n_experts = None
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        n_experts = _int_field(cfg, key, source, required=False, minimum=0)
        if n_experts is not None:
            break
    n_experts = n_experts or 0
    top_k = _int_field(cfg, "num_experts_per_tok", source, required=False, minimum=0) or 0
    moe = n_experts > 1
    if moe and top_k < 1:
        raise ModelConfigError(f"{source}: missing field 'num_experts_per_tok' for a model with {n_experts} experts")
    if moe and top_k > n_experts:
        raise ModelConfigError(f"{source}: field 'num_experts_per_tok' {top_k} > {n_experts} experts")
    moe_ffn = _int_field(cfg, "moe_intermediate_size", source, required=False) if moe else None
    dense_ffn = _int_field(cfg, "intermediate_size", source, required=moe_ffn is None)
    arch: dict[str, Any] = {
        "layers": layers,
        "hidden": hidden,
        "n_heads": n_heads,
        "n_kv_heads": n_kv,
        "ffn": moe_ffn if moe_ffn is not None else dense_ffn,
        "n_experts": n_experts,
        "top_k": top_k,
        "vocab": _int_field(cfg, "vocab_size", source),
    }
    if hd is not None:
        arch["head_dim"] = hd
    if moe:
        shared = _int_field(cfg, "shared_expert_intermediate_size", source, required=False, minimum=0)
        if shared is None and cfg.get("n_shared_experts") and moe_ffn is not None:
            shared = _int_field(cfg, "n_shared_experts", source) * moe_ffn
        if shared:
            arch["shared_ffn"] = shared
    tie = cfg.get("tie_word_embeddings", False)
    if not isinstance(tie, bool) and tie is not None:
        raise ModelConfigError(f"{source}: field 'tie_word_embeddings' must be true or false, got {tie!r}")
    if tie:
        arch["tie_word_embeddings"] = True
    return arch


def read_config(path: str | os.PathLike) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text()
    except OSError as e:
        raise ModelConfigError(f"{p}: cannot read ({e.strerror})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"{p}: not valid JSON ({e.msg} at line {e.lineno})") from None


def read_arch_file(path: str | os.PathLike) -> dict:
    p = Path(path)
    return arch_from_config(read_config(p), str(p / "config.json" if p.is_dir() else p))


def _root():
    return resources.files(__name__)


def shipped_models() -> list[str]:
    """Names of the configs shipped in the package."""
    return sorted(e.name for e in _root().iterdir() if e.is_dir() and (e / "config.json").is_file())


def shipped_config_path(name: str) -> Path | None:
    """The shipped config.json of a model name or HF id (case-insensitive), else None."""
    want = str(name).rstrip("/").split("/")[-1].lower()
    for m in shipped_models():
        if m.lower() == want:
            return Path(str(_root() / m / "config.json"))
    return None


def load_arch(name_or_path: str | os.PathLike) -> dict:
    """Architecture of a shipped model (name or HF id) or of a config.json path / folder."""
    p = Path(name_or_path)
    if p.exists():
        return read_arch_file(p)
    shipped = shipped_config_path(str(name_or_path))
    if shipped is None:
        raise ModelConfigError(f"{name_or_path}: no such config.json and no shipped model of that name "
                               f"(shipped: {', '.join(shipped_models())})")
    return read_arch_file(shipped)


# ---------------------------------------------------------------- shapes and bytes

def head_dim(arch: dict) -> int:
    """Stated head_dim, else hidden / n_heads."""
    return int(arch.get("head_dim") or arch["hidden"] // arch["n_heads"])


def per_gpu_shapes(arch: dict, tp: int) -> dict:
    """Per-GPU shapes at tensor parallelism ``tp`` (vLLM's split; see the module docstring)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ModelConfigError(f"tp must be a positive integer, got {tp!r}")
    nq, nkv, ffn = arch["n_heads"], arch["n_kv_heads"], arch["ffn"]
    if nq % tp:
        raise ModelConfigError(f"TP {tp} does not divide num_attention_heads {nq}")
    if nkv % tp and tp % nkv:
        raise ModelConfigError(f"TP {tp} neither divides nor is a multiple of num_key_value_heads {nkv}")
    if ffn % tp:
        raise ModelConfigError(f"TP {tp} does not divide the MLP intermediate size {ffn}")
    hd = head_dim(arch)
    q_heads, kv_heads = nq // tp, max(1, nkv // tp)
    shapes = {
        "tp": tp,
        "head_dim": hd,
        "q_heads": q_heads,
        "kv_heads": kv_heads,
        "kv_replicas": max(1, tp // nkv),
        "qkv_out": (q_heads + 2 * kv_heads) * hd,  # fused QKV GEMM: n (k = hidden)
        "o_in": q_heads * hd,                      # O projection: k (n = hidden)
        "ffn": ffn // tp,                          # per expert for MoE
        "vocab": -(-arch["vocab"] // tp),          # LM head rows per GPU
        "n_experts": arch.get("n_experts", 0) or 0,
        "top_k": arch.get("top_k", 0) or 0,
    }
    if arch.get("shared_ffn"):
        if arch["shared_ffn"] % tp:
            raise ModelConfigError(f"TP {tp} does not divide shared_expert_intermediate_size {arch['shared_ffn']}")
        shapes["shared_ffn"] = arch["shared_ffn"] // tp
    return shapes


def weight_params(arch: dict) -> int:
    """Parameters of the matmul weights and embeddings (all experts; norms, biases and the MoE
    router left out, as in the components' t_weights). A tied embedding is counted once."""
    h, L, nq, nkv = arch["hidden"], arch["layers"], arch["n_heads"], arch["n_kv_heads"]
    hd = head_dim(arch)
    attn = h * nq * hd + 2 * h * nkv * hd + nq * hd * h
    mlp = 3 * h * arch["ffn"] * max(1, arch.get("n_experts", 0) or 0) + 3 * h * (arch.get("shared_ffn") or 0)
    embeddings = (1 if arch.get("tie_word_embeddings") else 2) * arch["vocab"] * h
    return L * (attn + mlp) + embeddings


def weight_bytes(arch: dict, dtype_bytes: int = BYTES_BF16) -> int:
    return dtype_bytes * weight_params(arch)


def kv_bytes_per_token(arch: dict, tp: int = 1, dtype_bytes: int = BYTES_BF16) -> int:
    """KV cache bytes one token takes on one GPU: K and V, every layer, the GPU's KV heads."""
    kv_heads = per_gpu_shapes(arch, tp)["kv_heads"] if tp > 1 else arch["n_kv_heads"]
    return 2 * arch["layers"] * kv_heads * head_dim(arch) * dtype_bytes

