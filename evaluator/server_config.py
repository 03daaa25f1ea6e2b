"""The vLLM server settings of one experiment: read from its data, every default named.

A simulator that assumes the server it replays answers questions about the wrong server, so
every setting vLLM has and the simulator reads comes from the experiment's files, in this
order: `exp-config.yaml` (vLLM's own argument names), then `requests/replay_experiment_meta.csv`
(`cfg_*` columns), then the model's `config.json` (max_model_len only, as vLLM derives it),
then the default below. A default that was used is named in `Experiment.defaults_used` and in
every scored row of the evaluation (`defaults_used`), so an output never hides an assumption.

| setting (exp-config.yaml) | default when no file states it | why that default |
|---|---|---|
| tensor_parallelism | 1 | vLLM's `--tensor-parallel-size` default |
| max_num_seqs | 1024 | `vllm serve` (V1) on a GPU of >= 70 GiB that is not an A100, the H100 here (as `evaluator.ingest.SERVER_DEFAULTS`) |
| max_num_batched_tokens | 8192 | `vllm serve` (V1) on an H100 (the same) |
| max_model_len | the model's `max_position_embeddings`, else 4096 | vLLM derives it from the model config; 4096 is every shared experiment's |
| block_size | 16 | vLLM's KV block size on CUDA |
| kv_blocks_total_gpu | estimated: 80 GB x 0.9 per GPU minus the weights, over the KV bytes of a block | vLLM's memory budget at gpu_memory_utilization 0.9 |
| enable_chunked_prefill | true | always on in the vLLM V1 engine unless disabled |
| enable_prefix_caching | true | on by default in vLLM V1 for generative models |
| vllm_version | unknown (null) | not used by the simulator; reported |

What vLLM refuses, the loader refuses (one line naming the file and the field), as read at
vllm-project/vllm@01230b40128e570a58e54e75f7e55c4d5cd9246d `vllm/config/scheduler.py`
(`SchedulerConfig.verify_max_model_len`): max_num_batched_tokens below max_num_seqs, and with
chunked prefill off max_num_batched_tokens below max_model_len (a prompt must then fit one
step). A KV cache that cannot hold one max_model_len sequence is refused at vLLM's start-up too
(`check_enough_kv_cache_memory`). Requests: vLLM rejects a prompt of max_model_len tokens or
more (vllm-project/vllm@009daaeebfb0ce2813f970f2173ea9c8eee09092
`vllm/v1/engine/input_processor.py`, `_validate_prompt_len`), and its OpenAI server answers 400
when prompt + max_tokens exceeds max_model_len: the simulator fails such a request at once
(`evaluator.simulator`, `SimResult.rejected`).
"""
from __future__ import annotations

DEFAULT_TP = 1
DEFAULT_MAX_NUM_SEQS = 1024  # every shared experiment states 128
DEFAULT_MAX_BATCHED_TOKENS = 8192  # every shared experiment states 2048
DEFAULT_MAX_MODEL_LEN = 4096
DEFAULT_BLOCK_SIZE = 16
DEFAULT_CHUNKED_PREFILL = True
DEFAULT_PREFIX_CACHING = True

VLLM_SCHEDULER_REF = ("vllm-project/vllm@00024d314514900f361ad072af6931e403b7f589 "
                      "vllm/v1/core/sched/scheduler.py (Scheduler.schedule)")
VLLM_CONFIG_REF = ("vllm-project/vllm@01230b40128e570a58e54e75f7e55c4d5cd9246d vllm/config/scheduler.py "
                   "(SchedulerConfig.verify_max_model_len)")

# exp-config.yaml key -> (replay-meta column or None, why the default)
SETTINGS = {
    "tensor_parallelism": ("cfg_tensor_parallelism", f"{DEFAULT_TP} (vLLM's --tensor-parallel-size default)"),
    "max_num_seqs": ("cfg_max_num_seqs", f"{DEFAULT_MAX_NUM_SEQS} (`vllm serve` default on an H100)"),
    "max_num_batched_tokens": ("cfg_max_num_batched_tokens",
                               f"{DEFAULT_MAX_BATCHED_TOKENS} (`vllm serve` default on an H100)"),
    "max_model_len": (None, "the model's max_position_embeddings (as vLLM derives it), "
                            f"else {DEFAULT_MAX_MODEL_LEN}"),
    "block_size": ("cfg_block_size", f"{DEFAULT_BLOCK_SIZE} (vLLM's KV block size on CUDA)"),
    "kv_blocks_total_gpu": ("cfg_kv_blocks_total_gpu",
                            "estimated (80 GB x 0.9 per GPU minus the weights, over the KV bytes of a block)"),
    "enable_chunked_prefill": (None, "true (always on in vLLM V1 unless disabled)"),
    "enable_prefix_caching": (None, "true (on by default in vLLM V1)"),
    "vllm_version": (None, "unknown (not stated)"),
}


def _meta(meta_row, column):
    """A replay-meta value, or None where the column is absent or empty."""
    if meta_row is None or column is None or not hasattr(meta_row, column):
        return None
    v = getattr(meta_row, column)
    try:
        if v != v:  # NaN: an empty cell
            return None
    except TypeError:
        return None
    return int(v)


def resolve(cfg: dict, meta_row=None, model_max_len: int | None = None) -> tuple[dict, list[str]]:
    """Every setting of SETTINGS from the (schema-checked) exp-config mapping, the replay-meta
    row and the model's max_position_embeddings: (values by exp-config key, with
    kv_blocks_total_gpu None where it must be estimated; the defaults used, as
    "key=value (why)")."""
    out: dict = {}
    used: list[str] = []
    for key, (column, why) in SETTINGS.items():
        v = cfg.get(key) if isinstance(cfg, dict) else None
        if v is None:
            v = _meta(meta_row, column)
        if v is None:
            if key == "max_model_len" and model_max_len:
                v = int(model_max_len)
                used.append(f"max_model_len={v} (the model config's max_position_embeddings, as vLLM derives it)")
                out[key] = v
                continue
            used.append(f"{key}={why}")
            v = {"tensor_parallelism": DEFAULT_TP, "max_num_seqs": DEFAULT_MAX_NUM_SEQS,
                 "max_num_batched_tokens": DEFAULT_MAX_BATCHED_TOKENS, "max_model_len": DEFAULT_MAX_MODEL_LEN,
                 "block_size": DEFAULT_BLOCK_SIZE, "enable_chunked_prefill": DEFAULT_CHUNKED_PREFILL,
                 "enable_prefix_caching": DEFAULT_PREFIX_CACHING}.get(key)
        out[key] = v
    return out, used


def limit_error(max_num_seqs: int, max_batched_tokens: int, max_model_len: int, chunked_prefill: bool,
                kv_blocks: int, block_size: int) -> tuple[str, str] | None:
    """(field, why) for a combination vLLM refuses to start with, else None."""
    if max_batched_tokens < max_num_seqs:
        return ("max_num_batched_tokens", f"must be >= max_num_seqs ({max_num_seqs}): vLLM refuses "
                f"max_num_batched_tokens {max_batched_tokens} < max_num_seqs, got {max_batched_tokens}")
    if not chunked_prefill and max_batched_tokens < max_model_len:
        return ("max_num_batched_tokens", f"must be >= max_model_len ({max_model_len}) with "
                f"enable_chunked_prefill false: vLLM refuses it (a prompt must fit one step), got {max_batched_tokens}")
    if kv_blocks * block_size < max_model_len:
        return ("kv_blocks_total_gpu", f"x block_size ({block_size}) must hold one max_model_len "
                f"({max_model_len}) sequence: vLLM refuses to start, got {kv_blocks} blocks")
    return None


def sim_limits(e) -> dict:
    """The simulate() keywords an experiment's server sets beyond the four positional limits
    (kv_blocks, max_num_seqs, max_num_batched_tokens, block_size)."""
    return {"max_model_len": int(e.max_model_len), "chunked_prefill": bool(e.chunked_prefill),
            "prefix_cache": "auto" if e.prefix_caching else "off"}
