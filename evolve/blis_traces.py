"""The measured request traces as BLIS TraceV2 files, with the `blis replay` command that
replays each experiment on the server configuration it was measured on.

    files = export_blis_traces(gt, "out/", data_dir="../shared/data")

Per experiment: out/<id>/trace.yaml (TraceV2 header) and out/<id>/trace.csv (the 27 columns
of BLIS's sim/workload/tracev2.go `traceV2Columns`, in that order). out/replay.sh runs every
replay (`BLIS=path/to/blis LATENCY_MODEL=evolved sh out/replay.sh`, from the BLIS checkout so
its defaults.yaml and hardware_config.json are found; `EXPERIMENTS="ID ..."` runs only those) and
records each one's wall time; out/experiments.json lists the experiments and the flags, for
`evolve blis-compare`.

Every replay passes `--horizon` = the trace's latest deadline_us: BLIS's default horizon is twice
the latest arrival, and BLIS schedules no timeout for a request whose deadline lies past the
horizon (sim/simulator.go EnqueueRequest), so on a trace shorter than the client timeout a request
still queued at the horizon would be neither finished nor timed out. With the latest deadline as
horizon every request ends finished or timed out (BLIS's still_queued and still_running are 0).

How the rows map (the same requests StepEvolve's trace mode replays, evaluator.workload):
    arrival_time_us / send_time_us   measured arrival, microseconds from the experiment start
    output_tokens                    the profile's output_len: the server generated exactly that
                                     many under ignore_eos (the client counts re-tokenize text)
    prefix_group / prefix_length     inference-perf sends prompt n % pool (prompt_identity); BLIS
                                     shares a group's first prefix_length tokens, so each pool
                                     prompt is one group whose prefix is its shortest measured
                                     length, and input_tokens holds the rest (0 to a few tokens).
                                     The system prompt shared by different prompts of a group in
                                     the first pass is not represented (first 100 requests only).
    deadline_us                      the client's deadline: arrival_time_us + the experiment's
                                     client timeout (Experiment.request_timeout_s, inference-perf's
                                     load.request_timeout, else its HTTP client's 300 s), in
                                     microseconds. BLIS's TraceRecord.DeadlineUs is an *absolute*
                                     time on the arrival clock (0 = no timeout) and becomes
                                     sim.Request.Deadline unchanged, so BLIS times a request out
                                     where StepEvolve's simulator does (timeout_us after arrival):
                                     its TimeoutEvent at deadline_us takes the request out of the
                                     wait queue or the running batch and frees its KV blocks
                                     (sim/event.go), as vLLM does when the client disconnects
    first/last_chunk_time_us         measured TTFT / E2E after arrival (informational for BLIS)
    status                           "ok", or "error" for has_error rows when the reader keeps
                                     them: they loaded the real server, so BLIS replays them too;
                                     blis-compare scores only the ok rows, like the evaluator.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from evaluator.data import Experiment, GroundTruth, read_arch
from evaluator.workload import prompt_identity

__all__ = ["TRACE_COLUMNS", "BlisExportError", "ReplayFlags", "replay_flags", "timeout_us", "export_blis_traces"]

# BLIS sim/workload/tracev2.go traceV2Columns at f90a1e3a (the optional columns are left out).
TRACE_COLUMNS = (
    "request_id", "client_id", "tenant_id", "slo_class", "session_id", "round_index",
    "prefix_group", "prefix_length", "streaming", "input_tokens", "output_tokens",
    "text_tokens", "image_tokens", "audio_tokens", "video_tokens", "reason_ratio",
    "model", "deadline_us", "server_input_tokens",
    "arrival_time_us", "send_time_us", "first_chunk_time_us", "last_chunk_time_us",
    "num_chunks", "status", "error_message", "finish_reason",
)
HARDWARE = "H100"  # BLIS's hardware_config.json key for the H100 SXM the data was measured on


class BlisExportError(ValueError):
    """The ground truth cannot be exported (no request traces, missing model config)."""


@dataclass(frozen=True)
class ReplayFlags:
    """The server configuration of one experiment, as `blis replay` flags."""
    model: str              # HF id, as the experiment config spells it
    tp: int
    model_config_folder: str
    total_kv_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int

    def args(self, latency_model: str) -> list[str]:
        return ["--model", self.model, "--hardware", HARDWARE, "--tp", str(self.tp),
                "--model-config-folder", self.model_config_folder,
                "--total-kv-blocks", str(self.total_kv_blocks), "--max-num-seqs", str(self.max_num_seqs),
                "--max-num-batched-tokens", str(self.max_num_batched_tokens),
                "--max-model-len", str(self.max_model_len), "--block-size-in-tokens", str(self.block_size),
                "--cache-signal-delay", "0", "--latency-model", latency_model]


def _config_dir(data_dir: Path, e: Experiment) -> Path:
    d = data_dir / "model_configs" / e.model_id.split("/")[-1]
    if not (d / "config.json").is_file():
        raise BlisExportError(f"{d / 'config.json'}: missing (BLIS needs the model's HF config.json)")
    return d


def replay_flags(e: Experiment, data_dir: Path) -> ReplayFlags:
    cfg_dir = _config_dir(data_dir, e)
    cfg = json.loads((cfg_dir / "config.json").read_text())
    max_len = int(cfg.get("max_position_embeddings") or 0)
    read_arch(cfg_dir / "config.json")  # the same checks the evaluator applied
    return ReplayFlags(e.model_id, e.tp, str(cfg_dir.resolve()), e.kv_blocks, e.max_num_seqs,
                       e.max_batched_tokens, max_len, e.block_size)


def _header_yaml(e: Experiment, f: ReplayFlags) -> str:
    return "\n".join([
        "trace_version: 2",
        "time_unit: microseconds",
        "mode: real",
        "warm_up_requests: 0",
        f"workload_spec: {json.dumps('stepevolve:' + e.id)}",
        "server:",
        "  type: vllm",
        f"  model: {json.dumps(e.model_id)}",
        f"  tensor_parallel: {f.tp}",
        f"  max_num_seqs: {f.max_num_seqs}",
        f"  block_size: {f.block_size}",
        f"  max_model_len: {f.max_model_len}",
        "",
    ])


def timeout_us(e: Experiment) -> int:
    """The experiment's client timeout in whole microseconds (> 0: BLIS reads 0 as "no timeout")."""
    t = float(e.request_timeout_s)
    if not np.isfinite(t) or t <= 0:
        raise BlisExportError(f"{e.id}: client timeout {t!r} s is not a positive number of seconds")
    return max(1, int(round(t * 1e6)))


def _rows(e: Experiment, req: pd.DataFrame) -> pd.DataFrame:
    """The TraceV2 data rows of one experiment's requests (module docstring)."""
    n = len(req)
    index = (req["request_index"].to_numpy(np.int64) if "request_index" in req.columns
             else np.arange(n, dtype=np.int64))
    pid, _ = prompt_identity(e, index)
    prompt = req["input_tokens"].to_numpy(np.int64)
    prefix = pd.Series(prompt).groupby(pid).transform("min").to_numpy(np.int64)
    err = req["has_error"].to_numpy(bool) if "has_error" in req.columns else np.zeros(n, bool)
    n_out = (np.full(n, e.generated_len, np.int64) if e.generated_len
             else np.maximum(req["output_tokens"].to_numpy(np.int64), 1))
    arr = req["arrival_time_us"].to_numpy(np.int64)

    def chunk(col: str) -> np.ndarray:  # measured first/last chunk time; 0 = not recorded
        v = req[col].to_numpy(np.float64)
        ok = ~err & np.isfinite(v)
        return np.where(ok, arr + np.round(np.where(ok, v, 0.0) * 1e6).astype(np.int64), 0)

    zero, empty = np.zeros(n, np.int64), np.full(n, "", object)
    cols = {
        "request_id": index, "client_id": empty, "tenant_id": empty, "slo_class": empty, "session_id": empty,
        "round_index": zero, "prefix_group": np.char.add("prompt-", pid.astype(str)), "prefix_length": prefix,
        "streaming": np.full(n, "true", object), "input_tokens": prompt - prefix, "output_tokens": n_out,
        "text_tokens": zero, "image_tokens": zero, "audio_tokens": zero, "video_tokens": zero, "reason_ratio": zero,
        "model": empty, "deadline_us": arr + timeout_us(e), "server_input_tokens": zero,
        "arrival_time_us": arr, "send_time_us": arr, "first_chunk_time_us": chunk("ttft_s"),
        "last_chunk_time_us": chunk("e2e_s"), "num_chunks": n_out,
        "status": np.where(err, "error", "ok"), "error_message": empty, "finish_reason": np.where(err, "", "length"),
    }
    return pd.DataFrame({c: cols[c] for c in TRACE_COLUMNS})


def _script(entries: list[tuple[str, ReplayFlags, int]]) -> str:
    lines = ["#!/bin/sh",
             "# Replays every experiment through BLIS (written by `evolve export-blis-traces`).",
             "# Run from the BLIS checkout (defaults.yaml, hardware_config.json):",
             "#   BLIS=./blis LATENCY_MODEL=evolved sh OUT/replay.sh",
             '#   EXPERIMENTS="ID ..." (space-separated experiment ids) replays only those.',
             "# Results: OUT/<experiment>/results-$LATENCY_MODEL.json (BLIS --results-path), BLIS's",
             "# metrics (timed_out_requests, ...) in OUT/<experiment>/stdout-$LATENCY_MODEL.txt, wall time",
             "# per replay: OUT/wall-$LATENCY_MODEL.tsv. Then: evolve blis-compare OUT --data DIR",
             "# --horizon is each trace's latest deadline_us: every request ends finished or timed out.",
             "set -eu",
             'BLIS="${BLIS:-./blis}"',
             'LATENCY_MODEL="${LATENCY_MODEL:-evolved}"',
             'EXPERIMENTS="${EXPERIMENTS:-}"',
             'OUT="$(cd "$(dirname "$0")" && pwd)"',
             'WALL="$OUT/wall-$LATENCY_MODEL.tsv"',
             f'KNOWN=" {" ".join(e[0] for e in entries)} "',
             'for x in $EXPERIMENTS; do case "$KNOWN" in *" $x "*) ;; *) echo "replay.sh: no experiment $x here '
             '(experiments.json lists them)" >&2; exit 2 ;; esac; done',
             'wanted() { [ -z "$EXPERIMENTS" ] && return 0; case " $EXPERIMENTS " in *" $1 "*) return 0 ;; esac; return 1; }',
             '[ -n "$EXPERIMENTS" ] || : > "$WALL"']
    for exp_id, f, horizon in entries:
        args = " ".join(shlex.quote(a) for a in f.args("LATENCY_MODEL_PLACEHOLDER"))
        args = args.replace("LATENCY_MODEL_PLACEHOLDER", '"$LATENCY_MODEL"')
        d = f'"$OUT/{exp_id}"'
        lines += [f"if wanted {exp_id}; then",
                  "t0=$(date +%s.%N)",
                  f'"$BLIS" replay --trace-header {d}/trace.yaml --trace-data {d}/trace.csv \\',
                  f"    {args} --horizon {int(horizon)} \\",
                  f'    --results-path {d}/results-"$LATENCY_MODEL".json --log error > {d}/stdout-"$LATENCY_MODEL".txt',
                  f't1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" \'BEGIN {{ printf "{exp_id}\\t%.3f\\n", b - a }}\' >> "$WALL"',
                  "fi"]
    return "\n".join(lines) + "\n"


def export_blis_traces(gt: GroundTruth, out_dir: str | Path, data_dir: str | Path) -> list[Path]:
    """Write the TraceV2 files, replay.sh and experiments.json (module docstring); returns the paths."""
    if gt.requests is None:
        raise BlisExportError(f"{gt.source}: no requests/requests.parquet, nothing to replay (trace mode only)")
    out, data_dir = Path(out_dir), Path(data_dir)
    entries, written, manifest = [], [], []
    for e in gt.experiments:
        req = gt.requests[gt.requests["experiment_id"] == e.id]
        if req.empty:
            continue
        f = replay_flags(e, data_dir)
        d = out / e.id
        d.mkdir(parents=True, exist_ok=True)
        (d / "trace.yaml").write_text(_header_yaml(e, f))
        rows = _rows(e, req)
        rows.to_csv(d / "trace.csv", index=False, lineterminator="\n")
        horizon = int(rows["deadline_us"].max())
        written += [d / "trace.yaml", d / "trace.csv"]
        entries.append((e.id, f, horizon))
        manifest.append({"experiment": e.id, "model": e.model, "flags": f.__dict__,
                         "request_timeout_us": timeout_us(e), "horizon_us": horizon,
                         "requests": int(len(req)), "failed": int(req["has_error"].sum())
                         if "has_error" in req.columns else 0})
    if not entries:
        raise BlisExportError(f"{gt.source}: the requests table has no rows for any experiment")
    (out / "replay.sh").write_text(_script(entries))
    (out / "replay.sh").chmod(0o755)
    (out / "experiments.json").write_text(json.dumps({"source": gt.source, "hardware": HARDWARE,
                                                      "experiments": manifest}, indent=1, allow_nan=False))
    return written + [out / "replay.sh", out / "experiments.json"]
