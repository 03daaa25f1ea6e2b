"""Ground truth in: read and validate a ground-truth directory, or the embedded default.

Layout (see docs/ingest.md and docs/architecture.md): experiments/<id>/{exp-config.yaml, profile.yaml,
stage_N_lifecycle_metrics.json}, optional requests/, steps/, model_configs/, hardware/.
Everything else in the project consumes the `GroundTruth` built here, so every figure is
checked once, with an error that names the file and the field.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from evaluator import kernels as kt
from evaluator.components import model_vector
from evaluator.errors import DataError
from evaluator.failed_requests import DEFAULT_TIMEOUT_S, FAILED_FORM, error_mask, failed_form, recovered_prompts
from evaluator.gt_contract import check_contract, check_file, check_regular_files, check_table
from evaluator.model_configs import arch_from_config, kv_bytes_per_token, shipped_config_path, weight_bytes
from evaluator import server_config as sc

DEFAULT_TABLE = "default_workloads.json"

# H100 SXM figures used when hardware/ is absent (the datasheet in the shared data).
DEFAULT_HW = {"name": "H100 SXM", "peak_flops": 989.5e12, "hbm_bw": 3.35e12, "nvlink_bw": 450e9}

STEP_COLUMNS = ("experiment_id", "step_id", "prefill_tokens", "decode_tokens", "num_prefill_reqs",
                "num_decode_reqs", "running_depth", "kv_blocks_total_gpu", "kv_blocks_free_gpu",
                "duration_us", "next_step_start_delta_us")
REQUEST_COLUMNS = ("experiment_id", "arrival_time_us", "input_tokens", "output_tokens", "e2e_s", "ttft_s")


@dataclass
class Stage:
    index: int
    rate: float  # requests / s
    duration_s: float
    start_s: float
    n_requests: int = 0
    mean_input: float = 0.0
    mean_output: float = 0.0
    e2e_s: float = math.nan  # measured means
    ttft_s: float = math.nan
    itl_s: float = math.nan  # true per-output-token time (ratio of sums), see docs/architecture.md, fact 3
    reported_itl_s: float = math.nan  # inference-perf's inter_token_latency mean
    itl_source: str = "requests"
    n_failed: int = 0  # measured failed requests (has_error rows, or the stage file's failures.count)

    @property
    def failed_fraction(self) -> float | None:
        """Measured share of the stage's requests that failed (None without any request)."""
        total = self.n_requests + self.n_failed
        return self.n_failed / total if total else None


@dataclass
class Experiment:
    id: str
    model: str  # short model key, e.g. "llama-2-70b"
    model_id: str
    workload: str
    tp: int
    kv_blocks: int
    max_num_seqs: int
    max_batched_tokens: int
    block_size: int
    system_prompt_len: int
    question_len: int
    output_len: int
    num_groups: int
    prompt_pool: int  # distinct prompts inference-perf cycles through (groups x prompts)
    ignore_eos: bool
    arch: dict
    stages: list[Stage] = field(default_factory=list)
    # vLLM's measured kernels reduced for this model (evaluator.kernels flat array), set by the
    # loaders; None with `kernel_missing` saying why (no kernels/ beside the data)
    kernels: np.ndarray | None = field(default=None, repr=False, compare=False)
    kernel_notes: list[str] = field(default_factory=list, compare=False)
    kernel_missing: str = field(default="", compare=False)
    # the client's total timeout: inference-perf's load.request_timeout, else aiohttp's default
    request_timeout_s: float = DEFAULT_TIMEOUT_S
    # the rest of the server (evaluator.server_config): read from the data, defaults named
    max_model_len: int = sc.DEFAULT_MAX_MODEL_LEN
    chunked_prefill: bool = sc.DEFAULT_CHUNKED_PREFILL
    prefix_caching: bool = sc.DEFAULT_PREFIX_CACHING
    vllm_version: str | None = None
    # "setting=value (why)" for every server setting no file stated (evaluator.server_config)
    defaults_used: list[str] = field(default_factory=list, compare=False)

    @property
    def defaults_named(self) -> list[str]:
        """The settings that took a default, by name (what every scored row carries)."""
        return [d.split("=", 1)[0] for d in self.defaults_used]

    @property
    def generated_len(self) -> int:
        """Tokens the server generates per request when it is fixed (ignore_eos with max_tokens =
        output_len), else 0 = use the measured per-request counts. The client-side counts are
        re-tokenized text: they do not correlate with E2E at all (r = 0.00 in every experiment)
        and undercount for llama-2-7b, so the fixed length is the better truth."""
        return self.output_len if self.ignore_eos and self.output_len > 0 else 0

    def model_vec(self, hw: dict) -> np.ndarray:
        """MODEL_FIELDS, then the kernel tables if any (what fill_components reads)."""
        return model_vector(self.arch, self.tp, hw, self.kernels)


@dataclass
class GroundTruth:
    source: str
    experiments: list[Experiment]
    hardware: dict
    requests: pd.DataFrame | None = None
    steps: pd.DataFrame | None = None

    @property
    def models(self) -> list[str]:
        return sorted({e.model for e in self.experiments})

    @property
    def mode(self) -> str:
        return "trace" if self.requests is not None else "spec"

    def experiment(self, exp_id: str) -> Experiment:
        for e in self.experiments:
            if e.id == exp_id:
                return e
        raise KeyError(exp_id)

    def fingerprint(self) -> str:
        """Stable hash of everything the evaluator reads, stored with every run."""
        h = hashlib.sha256()
        h.update(json.dumps([_plain(e) for e in self.experiments], sort_keys=True, default=str).encode())
        h.update(json.dumps(self.hardware, sort_keys=True).encode())
        for e in self.experiments:
            if e.kernels is not None:  # the measured components read them
                h.update(np.ascontiguousarray(e.kernels).tobytes())
        for df in (self.requests, self.steps):
            if df is not None:
                h.update(pd.util.hash_pandas_object(df, index=False).values.tobytes())
        return h.hexdigest()[:16]


# ---------------------------------------------------------------- helpers

_KERNEL_FIELDS = ("kernels", "kernel_notes", "kernel_missing", "defaults_used")
# server settings added later: left out of the table and the fingerprint at the value every
# experiment had before they were read (so data that states them keeps its fingerprint)
_LEGACY_SERVER = {"max_model_len": sc.DEFAULT_MAX_MODEL_LEN, "chunked_prefill": True, "prefix_caching": True,
                  "vllm_version": None}


def _plain(e: Experiment) -> dict:
    """asdict without the kernel tables (stored and hashed on their own); the failure fields
    only where they differ from their defaults, so data without failures keeps the
    fingerprint (and embedded table) it had before they existed."""
    d = asdict(e)
    for k in _KERNEL_FIELDS:
        d.pop(k)
    if d["request_timeout_s"] == DEFAULT_TIMEOUT_S:
        d.pop("request_timeout_s")
    for k, v in _LEGACY_SERVER.items():
        if d[k] == v:
            d.pop(k)
    for s in d["stages"]:
        if not s["n_failed"]:
            s.pop("n_failed")
    return d


_CONFIG_KEY = {"max_model_len": "max_model_len", "chunked_prefill": "enable_chunked_prefill",
               "prefix_caching": "enable_prefix_caching", "vllm_version": "vllm_version"}


def _yaml_value(v) -> str:
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def kernel_key(e: Experiment) -> str:
    return f"{e.model}@tp{e.tp}"


def attach_kernels(experiments: list[Experiment], root: Path, hw: dict) -> None:
    """Reduce root/kernels/aiconfigurator-... once per (model, TP) onto the experiments; without
    that directory, say on each experiment why its measured components are NaN."""
    aic = root / kt.AIC_DIR
    if not aic.is_dir():
        for e in experiments:
            e.kernel_missing = f"measured components need the kernel tables in {aic}"
        return
    tables = kt.read_kernel_tables(root)
    done: dict[str, kt.Reduction] = {}
    for e in experiments:
        key = kernel_key(e)
        if key not in done:
            done[key] = kt.reduce_model(tables, e.arch, e.tp, hw)
        e.kernels, e.kernel_notes = done[key].flat, list(done[key].notes)


def _load_yaml(path: Path):
    try:
        text = path.read_text()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DataError(f"{path}: not valid YAML/JSON ({' '.join(str(e).split())})") from None  # one line


def _get(obj, keys: str, path: Path, kind=float):
    cur = obj
    for k in keys.split("."):
        if not isinstance(cur, dict) or k not in cur:
            raise DataError(f"{path}: missing field '{keys}'")
        cur = cur[k]
    try:
        val = kind(cur)
    except (TypeError, ValueError):
        raise DataError(f"{path}: field '{keys}' is not a {kind.__name__} ({cur!r})") from None
    if kind is float and not math.isfinite(val):
        raise DataError(f"{path}: field '{keys}' is not finite")
    return val


def model_short_name(model_id: str) -> str:
    """'meta-llama/Llama-2-70b-hf' -> 'llama-2-70b'; 'mistralai/Mixtral-8x7B-v0.1' -> 'mixtral-8x7b'."""
    name = model_id.split("/")[-1].lower()
    for suffix in ("-instruct-hf", "-hf", "-instruct"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name.startswith("mixtral"):
        name = "-".join(name.split("-")[:2])
    return name


def _workload_of(exp_id: str) -> str:
    return exp_id.rsplit("-", 1)[-1]


def read_arch(config_path: Path) -> dict:
    """A Hugging Face config.json, every stated field honoured (evaluator.model_configs)."""
    cfg = _load_yaml(config_path)
    check_file("model-config", cfg, config_path)  # schema at the edge (evaluator.gt_contract)
    return arch_from_config(cfg, str(config_path))


def read_hardware(hw_dir: Path) -> dict:
    path = hw_dir / "h100-sxm.json"
    if not path.exists():
        return dict(DEFAULT_HW)
    d = _load_yaml(path)
    check_file("hardware", d, path)
    bf16 = _get(d, "compute.bf16_tensor_core", path)
    sparse = bool(d.get("compute", {}).get("with_sparsity", False))
    return {
        "name": str(d.get("name", "H100")),
        "peak_flops": bf16 * 1e12 / (2.0 if sparse else 1.0),  # dense bf16
        "hbm_bw": _get(d, "memory.bandwidth_tb_s", path) * 1e12,
        "nvlink_bw": _get(d, "interconnect.nvlink_bandwidth_gb_s", path) * 1e9 / 2.0,  # per direction
    }


def estimate_kv_blocks(arch: dict, tp: int, block_size: int = 16, gpu_mem_gb: float = 80.0,
                       utilization: float = 0.9) -> int:
    """Fallback when the KV capacity is not recorded: vLLM's memory budget minus weights, per GPU
    (stated head_dim, replicated KV heads, tied embeddings: evaluator.model_configs)."""
    free = gpu_mem_gb * 1e9 * utilization - weight_bytes(arch) / tp
    per_block = block_size * kv_bytes_per_token(arch, tp)
    return max(1, int(free / per_block))


# ---------------------------------------------------------------- directory reader

def load_ground_truth(data_dir: str | Path) -> GroundTruth:
    """Read a ground-truth directory (layout of ../shared/data); validate as we go."""
    root = Path(data_dir)
    check_regular_files(root)  # a FIFO named like a data file would block the reader forever
    exp_root = root / "experiments"
    if not exp_root.is_dir():
        raise DataError(f"{exp_root}: missing (experiments/ is required in a ground-truth directory)")
    hw = read_hardware(root / "hardware")
    meta = {}
    meta_path = root / "requests" / "replay_experiment_meta.csv"
    if meta_path.exists():
        m = pd.read_csv(meta_path)
        for col in ("experiment_id", "cfg_kv_blocks_total_gpu"):
            if col not in m.columns:
                raise DataError(f"{meta_path}: missing column '{col}'")
        check_table("replay-meta", m, meta_path)
        meta = {r.experiment_id: r for r in m.itertuples()}
    requests = _read_requests(root / "requests" / "requests.parquet")
    steps = _read_steps(root / "steps" / "steps.parquet")
    arch_cache: dict[str, dict] = {}
    experiments = []
    for d in sorted(p for p in exp_root.iterdir() if p.is_dir()):
        experiments.append(_read_experiment(d, root, hw, meta.get(d.name), arch_cache, requests))
    if not experiments:
        raise DataError(f"{exp_root}: no experiment directories")
    attach_kernels(experiments, root, hw)
    ids = {e.id for e in experiments}
    if requests is not None:
        unknown = set(requests["experiment_id"]) - ids
        if unknown:
            raise DataError(f"{root / 'requests/requests.parquet'}: experiment_id {sorted(unknown)[0]!r} "
                            "has no experiments/ directory")
        requests = _recover_failed(requests, experiments)
    if steps is not None:
        steps = steps[steps["experiment_id"].isin(ids)].reset_index(drop=True)
        model_of = {e.id: e.model for e in experiments}
        steps["model_key"] = steps["experiment_id"].map(model_of)
    return GroundTruth(str(root), experiments, hw, requests, steps)


def _read_requests(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise DataError(f"{path}: cannot read parquet ({e})") from None
    for c in REQUEST_COLUMNS:
        if c not in df.columns:
            raise DataError(f"{path}: missing column '{c}'")
    if "has_error" not in df.columns:
        df["has_error"] = False
    df["has_error"] = error_mask(df)
    _check_request_rows(df, path)
    check_table("requests", df, path)
    return df.sort_values(["experiment_id", "arrival_time_us"], kind="stable").reset_index(drop=True)


def _first_bad(df: pd.DataFrame, bad: np.ndarray, path: Path, column: str, rule: str) -> None:
    """One line naming the file, the row (as stored), its experiment and the column."""
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        v = df[column].iloc[i]
        v = v.item() if isinstance(v, np.generic) else v
        raise DataError(f"{path}: row {df.index[i]} (experiment {df['experiment_id'].iloc[i]}): "
                        f"column '{column}' {rule} (got {v!r})")


def _check_request_rows(df: pd.DataFrame, path: Path) -> None:
    """Every row a request that was sent: a success with its timings, a failure with a reply
    (tokens counted), or a failure in the form of docs/failed_requests.md (no reply)."""
    err = df["has_error"].to_numpy()
    failed = failed_form(df)
    num = lambda c: pd.to_numeric(df[c], errors="coerce").to_numpy(np.float64)  # noqa: E731
    inp, out, arr, e2e, ttft = (num(c) for c in ("input_tokens", "output_tokens", "arrival_time_us", "e2e_s",
                                                 "ttft_s"))
    _first_bad(df, ~(arr >= 0), path, "arrival_time_us", "must be >= 0")
    _first_bad(df, ~(inp >= 1) & ~failed, path, "input_tokens", f"must be >= 1 ({FAILED_FORM})")
    _first_bad(df, ~(out >= 0), path, "output_tokens", "must be >= 0")
    _first_bad(df, ~err & (ttft < 0), path, "ttft_s", "must be >= 0")
    _first_bad(df, ~err & (e2e < ttft), path, "e2e_s", "must be >= ttft_s (e2e < ttft)")
    _first_bad(df, ~err & ~(e2e >= 0), path, "e2e_s", "must be >= 0 for a successful request")
    _first_bad(df, err & (e2e < 0), path, "e2e_s", "must be >= 0 or missing for a failed request")


def _recover_failed(requests: pd.DataFrame, experiments: list[Experiment]) -> pd.DataFrame:
    """Failed rows without a prompt count get the prompt of their pool slot (evaluator.failed_requests);
    data without such rows is returned as it came (same frame, same fingerprint)."""
    missing_all = failed_form(requests)
    if not missing_all.any():
        return requests
    requests = requests.copy()
    for e in experiments:
        rows = np.flatnonzero((requests["experiment_id"] == e.id).to_numpy())
        missing = missing_all[rows]
        if not missing.any():
            continue
        sub = requests.iloc[rows]
        index = (sub["request_index"].to_numpy(np.int64) if "request_index" in sub.columns
                 else np.arange(len(sub), dtype=np.int64))
        prompt = sub["input_tokens"].to_numpy(np.int64)
        ok = ~missing & (prompt >= 1)
        fallback = float(prompt[ok].mean()) if ok.any() else float(max(1, e.system_prompt_len + e.question_len))
        stage = stage_of(e, sub["arrival_time_us"].to_numpy(np.float64) / 1e6)
        filled = recovered_prompts(index, prompt, missing, stage, e.prompt_pool, fallback)
        requests.iloc[rows, requests.columns.get_loc("input_tokens")] = filled
    return requests


def _read_steps(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        df = pd.read_parquet(path)
    except Exception as e:
        raise DataError(f"{path}: cannot read parquet ({e})") from None
    for c in STEP_COLUMNS:
        if c not in df.columns:
            raise DataError(f"{path}: missing column '{c}'")
    for c in STEP_COLUMNS[1:-1]:
        if df[c].isna().any() or (df[c] < 0).any():
            raise DataError(f"{path}: column '{c}' has missing or negative values "
                            f"(first at row {int(np.flatnonzero((df[c].isna() | (df[c] < 0)).to_numpy())[0])})")
    check_table("steps", df, path)
    return df.sort_values(["experiment_id", "step_id"], kind="stable").reset_index(drop=True)


def _read_experiment(d: Path, root: Path, hw: dict, meta_row, arch_cache, requests) -> Experiment:
    cfg_path = d / "exp-config.yaml"
    cfg = _load_yaml(cfg_path)
    if not isinstance(cfg, dict):
        raise DataError(f"{cfg_path}: expected a mapping")
    check_file("exp-config", cfg, cfg_path)
    model_id = str(_get(cfg, "model", cfg_path, str))
    prof_path = d / "profile.yaml"
    prof = _load_yaml(prof_path)
    check_file("profile", prof, prof_path)
    sp = prof.get("data", {}).get("shared_prefix", {}) if isinstance(prof, dict) else {}
    stages_cfg = prof.get("load", {}).get("stages") if isinstance(prof, dict) else None
    if not stages_cfg:
        raise DataError(f"{prof_path}: missing field 'load.stages'")
    resolved = d / "inference_perf_resolved_config.yaml"
    num_groups = int(sp.get("num_unique_system_prompts", 1) or 1)
    timeout = _request_timeout(prof, prof_path)
    if resolved.exists():  # what inference-perf actually used (PROVENANCE caveat 4)
        rcfg = _load_yaml(resolved) or {}
        check_file("resolved-config", rcfg, resolved)
        timeout = _request_timeout(rcfg, resolved) or timeout
        rsp = ((rcfg.get("data") or {}) if isinstance(rcfg, dict) else {}).get("shared_prefix") or {}
        num_groups = int(rsp.get("num_groups") or num_groups)
        prompts_per_group = int(rsp.get("num_prompts_per_group") or 1)
    else:
        prompts_per_group = int(sp.get("num_users_per_system_prompt", 1) or 1)
    arch_name = model_id.split("/")[-1]
    cfg_json = root / "model_configs" / arch_name / "config.json"
    if arch_name not in arch_cache:
        if cfg_json.exists():
            arch_cache[arch_name] = read_arch(cfg_json)
        else:
            arch_cache[arch_name] = _embedded_arch(model_id, cfg_json)
    arch = arch_cache[arch_name]
    server, defaults = sc.resolve(cfg, meta_row, _max_position(cfg_json, arch_cache))
    tp = int(server["tensor_parallelism"])
    kv_blocks = server["kv_blocks_total_gpu"]
    if kv_blocks is None:
        kv_blocks = estimate_kv_blocks(arch, tp, int(server["block_size"]))
        defaults = [f"kv_blocks_total_gpu={kv_blocks} (estimated: 80 GB x 0.9 per GPU minus the weights, over the "
                    f"KV bytes of a block)" if x.startswith("kv_blocks_total_gpu=") else x for x in defaults]
    exp = Experiment(
        id=d.name,
        model=model_short_name(model_id),
        model_id=model_id,
        workload=_workload_of(d.name),
        tp=tp,
        kv_blocks=kv_blocks,
        max_num_seqs=int(server["max_num_seqs"]),
        max_batched_tokens=int(server["max_num_batched_tokens"]),
        block_size=int(server["block_size"]),
        system_prompt_len=int(sp.get("system_prompt_len", 0)),
        question_len=int(sp.get("question_len", 0)),
        output_len=int(sp.get("output_len", 0)),
        num_groups=num_groups,
        prompt_pool=num_groups * prompts_per_group,
        ignore_eos=bool((prof.get("server") or {}).get("ignore_eos", False)),
        arch=arch,
        request_timeout_s=timeout or DEFAULT_TIMEOUT_S,
        max_model_len=int(server["max_model_len"]),
        chunked_prefill=bool(server["enable_chunked_prefill"]),
        prefix_caching=bool(server["enable_prefix_caching"]),
        vllm_version=server["vllm_version"],
        defaults_used=defaults,
    )
    start = 0.0
    for i, st in enumerate(stages_cfg):
        rate = _get(st, "rate", prof_path)
        dur = _get(st, "duration", prof_path)
        if rate <= 0 or dur <= 0:
            raise DataError(f"{prof_path}: load.stages[{i}] rate and duration must be positive")
        stage = Stage(index=i, rate=rate, duration_s=dur, start_s=start)
        start += dur
        _fill_stage_measurements(stage, d / f"stage_{i}_lifecycle_metrics.json", len(stages_cfg) == 1,
                                 d / "summary_lifecycle_metrics.json", exp.generated_len)
        exp.stages.append(stage)
    if requests is not None:
        _fill_from_requests(exp, requests[requests["experiment_id"] == exp.id])
    return exp


def _max_position(cfg_json: Path, cache: dict) -> int | None:
    """The model config's max_position_embeddings (vLLM's default max_model_len), if stated."""
    key = ("max_position", str(cfg_json))
    if key not in cache:
        v = None
        if cfg_json.exists():
            c = _load_yaml(cfg_json)
            c = c.get("text_config", c) if isinstance(c, dict) and "max_position_embeddings" not in c else c
            m = c.get("max_position_embeddings") if isinstance(c, dict) else None
            if isinstance(m, int) and not isinstance(m, bool) and m >= 1:
                v = m
        cache[key] = v
    return cache[key]


def _request_timeout(cfg, path: Path) -> float | None:
    """`load.request_timeout` in seconds, or None when unset (null: the client's default)."""
    v = ((cfg.get("load") or {}) if isinstance(cfg, dict) else {}).get("request_timeout")
    if v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise DataError(f"{path}: field 'load.request_timeout' is not a number ({v!r})") from None
    if not (math.isfinite(x) and x > 0):
        raise DataError(f"{path}: field 'load.request_timeout' must be positive seconds or null ({v!r})")
    return x


def _fill_stage_measurements(stage: Stage, path: Path, single: bool, summary: Path, n_tokens: int) -> None:
    if not path.exists() and single and summary.exists():
        path = summary
    if not path.exists():
        raise DataError(f"{path}: missing (one lifecycle-metrics file per load stage)")
    d = _load_yaml(path)
    check_file("stage-summary", d, path)
    stage.n_requests = _get(d, "successes.count", path, int)
    failures = d.get("failures") if isinstance(d, dict) else None
    if isinstance(failures, dict) and failures.get("count") is not None:
        stage.n_failed = _get(d, "failures.count", path, int)
    stage.e2e_s = _get(d, "successes.latency.request_latency.mean", path)
    stage.ttft_s = _get(d, "successes.latency.time_to_first_token.mean", path)
    stage.reported_itl_s = _get(d, "successes.latency.inter_token_latency.mean", path)
    stage.mean_input = _get(d, "successes.prompt_len.mean", path)
    stage.mean_output = _get(d, "successes.output_len.mean", path)
    stage.itl_s = per_token_from_reported(stage.reported_itl_s, n_tokens)
    stage.itl_source = "reported-relation"


def per_token_from_reported(reported_itl_s: float, n_tokens: int) -> float:
    """True per-output-token time from inference-perf's reported ITL/TPOT.

    The inference-perf build used here timestamps every line of the SSE stream, the blank
    separator lines included, so N generated tokens (+ [DONE]) give 2(N+1) timestamps and
    TPOT = (last - first) / (2N + 1) = tau * (N - 1) / (2N + 1) (fixed upstream later).
    This reproduces sum(e2e - ttft) / sum(N - 1) from the requests within 0.1% in all 12
    experiments. Without a fixed N it falls back to the observed factor of 2.013.
    """
    if n_tokens and n_tokens > 1:
        return reported_itl_s * (2 * n_tokens + 1) / (n_tokens - 1)
    return reported_itl_s * 2.013


def stage_of(exp: Experiment, arrival_s: np.ndarray) -> np.ndarray:
    """Stage index of each arrival time (seconds from the experiment start)."""
    bounds = np.array([s.start_s + s.duration_s for s in exp.stages[:-1]])
    return np.searchsorted(bounds, arrival_s, side="right")


def _fill_from_requests(exp: Experiment, req: pd.DataFrame) -> None:
    """Measured stage means from the per-request rows (ratio of sums for per-token time)."""
    if req.empty:
        return
    err = req["has_error"].to_numpy(bool)
    ok = req[~err]
    st = stage_of(exp, ok["arrival_time_us"].to_numpy() / 1e6)
    st_err = stage_of(exp, req["arrival_time_us"].to_numpy()[err] / 1e6)
    for s in exp.stages:
        s.n_failed = int((st_err == s.index).sum())
        g = ok[st == s.index]
        if g.empty:
            if s.n_failed:  # every request of the stage failed: nothing succeeded to average
                s.n_requests = 0
            continue
        s.n_requests = len(g)
        s.mean_input = float(g["input_tokens"].mean())
        s.mean_output = float(g["output_tokens"].mean())
        s.e2e_s = float(g["e2e_s"].mean())
        s.ttft_s = float(g["ttft_s"].mean())
        out = g["output_tokens"].to_numpy()
        if exp.generated_len:
            out = np.full(len(g), exp.generated_len)
        s.itl_s = per_token_time(g["e2e_s"].to_numpy(), g["ttft_s"].to_numpy(), out)
        s.itl_source = "requests"


def per_token_time(e2e, ttft, out) -> float:
    """sum(e2e - ttft) / sum(out - 1) over requests with at least 2 output tokens."""
    m = out >= 2
    denom = float(np.sum(out[m] - 1))
    return float(np.sum(e2e[m] - ttft[m]) / denom) if denom > 0 else math.nan


# ---------------------------------------------------------------- embedded default

def _embedded_arch(model_id: str, missing: Path) -> dict:
    table = load_default_table()
    for e in table["experiments"]:
        if e["model_id"] == model_id:
            return dict(e["arch"])
    shipped = shipped_config_path(model_id)  # configs shipped in evaluator/model_configs
    if shipped is not None:
        return read_arch(shipped)
    raise DataError(f"{missing}: missing, and model {model_id!r} is neither in the embedded default table "
                    f"nor shipped in evaluator/model_configs")


def build_default_table(gt: GroundTruth) -> dict:
    """The compact table embedded in the package: workload facts and measured means only."""
    exps = []
    kernels = {}
    for e in gt.experiments:
        d = _plain(e)
        if e.kernels is not None:
            kernels[kernel_key(e)] = {"flat": [float(v) for v in e.kernels], "notes": list(e.kernel_notes)}
        for s in d["stages"]:
            for k in ("mean_input", "mean_output", "e2e_s", "ttft_s", "itl_s", "reported_itl_s", "rate",
                      "duration_s", "start_s"):
                s[k] = round(float(s[k]), 6)
        exps.append(d)
    return {
        "about": "Derived by `evolve make-default` from a ground-truth directory: per experiment the "
                 "vLLM config, load stages, prompt/output lengths and measured stage means "
                 "(E2E, TTFT, per-output-token time as sum(e2e-ttft)/sum(out-1)); per model and TP "
                 "(the data's models and the shipped configs, at every TP where they fit) the kernel "
                 "tables reduced from aiconfigurator's measured vLLM kernels "
                 "(evaluator.kernels flat arrays). No raw rows.",
        "hardware": gt.hardware,
        "experiments": exps,
        "kernels": kernels,
    }


def load_default_table() -> dict:
    text = resources.files("evaluator").joinpath(DEFAULT_TABLE).read_text()
    return json.loads(text)


def load_default() -> GroundTruth:
    """The embedded default: workload-spec mode on the 16 measured experiments."""
    t = load_default_table()
    exps = []
    kernels = t.get("kernels", {})
    for d in t["experiments"]:
        stages = [Stage(**s) for s in d.pop("stages")]
        e = Experiment(**d, stages=stages)
        # the table keeps a server setting only where it differs from the value every shared
        # experiment had (`_plain`); the others are named as that value
        e.defaults_used = [f"{_CONFIG_KEY[k]}={_yaml_value(getattr(e, k))} (not in the embedded table: the shared "
                           "experiments' setting)" for k in _LEGACY_SERVER if k not in d]
        k = kernels.get(kernel_key(e))
        if k is None:
            e.kernel_missing = f"measured components need kernel tables for {kernel_key(e)} in the embedded table"
        else:
            e.kernels, e.kernel_notes = np.asarray(k["flat"], np.float64), list(k["notes"])
        exps.append(e)
    return GroundTruth("embedded", exps, t["hardware"])


def load(data: str | Path | None) -> GroundTruth:
    """`--data DIR` if given, else the embedded default; checked against the contract
    (evaluator.gt_contract). Any reader failure on malformed files is a DataError."""
    try:
        gt = load_default() if data is None else load_ground_truth(data)
    except DataError:
        raise
    except (MemoryError, RecursionError, OSError, ValueError, TypeError, KeyError, AttributeError,
            IndexError, ArithmeticError) as e:  # malformed files the readers do not name a field for
        raise DataError(f"{data}: cannot read the ground truth ({type(e).__name__}: {e})"[:500]) from None
    check_contract(gt)
    return gt
