"""`evolve predict`, run (docs/predict.md): the flags (`evolve.predict_cmd`) turned into a
stored program, a deployment and a workload for `evaluator.predict`, and its answer as a table,
strict JSON (`--json`: null, never NaN) or an offline Plotly page (`--html FILE`). Every error
is one line."""
from __future__ import annotations

import html
import json
import math
import sys
from pathlib import Path

from evaluator.components import MEASURED_NAMES
from evaluator.coverage import coverage, coverage_lines
from evaluator.data import load
from evaluator.errors import DataError
from evaluator.failed_requests import DEFAULT_TIMEOUT_S
from evaluator.predict import (PredictError, Spec, deployment_of, find_experiment, load_program_file, make_deployment,
                               parse_dist, parse_rates, parse_slo, predict, requests_file_workload,
                               spec_from_experiment, stored_from_record)
from evolve.archive import Archive
from evolve.archive_check import ArchiveError
from evolve.views.format import clean_json, fmt_missing


COLORS = ("#1f77b4", "#d62728", "#2ca02c")  # the report's first three (evolve.views.plots.PALETTE)


def _fail(msg: str):
    sys.exit(f"error: {msg}")


def _load_program(args):
    """(StoredProgram, data dir or None) for an archive id or a program file."""
    if Path(args.program).is_file() or not args.program.isdigit():
        if not args.constants:
            _fail(f"{args.program}: a program file needs --constants JSON (its fit: `evolve evaluate "
                  f"{args.program} --json`)")
        sp = load_program_file(args.program, args.constants)
        return sp, args.data if args.data is not None else sp.data
    if not Path(args.archive).exists():
        _fail(f"{args.archive}: no such archive")
    try:
        archive = Archive(args.archive, readonly=True)
    except ArchiveError as e:
        _fail(str(e))
    rec = archive.program(int(args.program))
    if rec is None:
        _fail(f"no program {args.program} in {args.archive}")
    run = archive.get_run(rec["run_id"]) or {}
    data = args.data if args.data is not None else ((run.get("config") or {}).get("data"))
    try:
        return stored_from_record(rec, data), data
    except PredictError:
        raise


def build(args):
    """Everything `predict` needs from the flags; PredictError / DataError on bad input. The
    program first: an unknown id or file is named before any complaint about the other flags."""
    stored, data = _load_program(args)
    sources = [x for x in (args.rate, args.rates, args.trace, args.requests) if x is not None]
    if len(sources) > 1:
        raise PredictError("give one of --rate, --rates, --trace and --requests")
    if not sources:
        raise PredictError("give a workload: --rate R, --rates LO:HI:N, --trace EXPERIMENT or --requests FILE")
    rates = parse_rates(args.rate if args.rate is not None else args.rates) if (args.rate or args.rates) else None
    if args.rate is not None and rates and len(rates) != 1:
        raise PredictError(f"--rate {args.rate!r}: one rate (a sweep is --rates)")
    slo = parse_slo(args.slo)
    for flag, v in (("--num-requests", args.num_requests), ("--prompt-pool", args.prompt_pool)):
        if v is not None and v < 1:
            raise PredictError(f"{flag} must be a positive integer, not {v}")
    for flag, v in (("--duration", args.duration), ("--timeout", args.timeout)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise PredictError(f"{flag} must be a positive number of seconds, not {v}")
    gt = load(data)
    needs = not MEASURED_NAMES.isdisjoint(stored.program.params)
    trace = find_experiment(gt, args.trace) if args.trace else None
    limits = dict(tp=args.tp, max_num_seqs=args.max_num_seqs, max_batched_tokens=args.max_num_batched_tokens,
                  max_model_len=args.max_model_len, block_size=args.block_size, kv_blocks=args.kv_blocks)
    if trace is not None and args.model is None and all(v is None for v in limits.values()):
        dep = deployment_of(trace, gt)
    else:
        model = args.model or (trace.model if trace is not None else None)
        if model is None:
            raise PredictError("give --model (a model of the data, a shipped config name or a config.json path)")
        dep = make_deployment(gt, model, gpu_memory_utilization=args.gpu_memory_utilization, needs_kernels=needs,
                              **limits)
    spec = requests = None
    if rates:
        kw = {"num_requests": args.num_requests, "duration_s": args.duration, "seed": args.seed}
        if args.workload_from:
            spec = spec_from_experiment(find_experiment(gt, args.workload_from), gt, **kw)
        else:
            spec = Spec(**kw)
        if args.prompt_tokens:
            spec.prompt, spec.prompt_samples, spec.source = parse_dist(args.prompt_tokens, "--prompt-tokens"), None, "spec"
        if args.output_tokens:
            spec.output = parse_dist(args.output_tokens, "--output-tokens")
        if args.prompt_pool is not None:
            spec.prompt_pool = args.prompt_pool
        if args.system_prompt_tokens is not None:
            spec.system_prompt_len = args.system_prompt_tokens
        spec.timeout_s = args.timeout if args.timeout is not None else spec.timeout_s
    elif args.requests:
        requests = requests_file_workload(args.requests, args.timeout or DEFAULT_TIMEOUT_S)
    return stored, gt, dep, dict(rates=rates, spec=spec, trace=trace, requests=requests, slo=slo,
                                 overheads_mode=args.overheads)


def cmd_predict(args) -> int:
    try:
        stored, gt, dep, kw = build(args)
        res = predict(stored, gt, dep, **kw)
    except (PredictError, DataError) as e:
        _fail(str(e))
    # where the program holds, as `show` and the Go header say it: read before the table
    res["coverage"] = coverage(gt, stored.objectives, holdout=stored.holdout)
    if args.html:
        Path(args.html).write_text(predict_html(res))
    if args.json:
        print(json.dumps(clean_json(res), indent=1, allow_nan=False))
    else:
        render(res)
        if args.html:
            print(f"wrote {args.html}")
    return 0


# ---------------------------------------------------------------- terminal

def _s(v, scale=1.0, fmt="{:.3g}") -> str:
    return fmt_missing(v, lambda x: fmt.format(x * scale))


def _band(v) -> str:
    return fmt_missing(v, lambda x: f"±{100 * x:.0f}%" if x < 10 else f"±{x:.2g}x")


def render(res: dict, console=None) -> None:
    """The prediction as one rich table with its provenance above and the knee below."""
    from rich.console import Console
    from rich.table import Table
    con = console or Console(width=None if sys.stdout.isatty() else 200)
    dep, wl = res["deployment"], res["workload"]
    con.print(f"program {res['program']}: constants {res['constants']['source']}; overheads {res['overheads']['source']}",
              markup=False)
    con.print(f"deployment: {dep['model']} ({dep['model_id']}) TP {dep['tp']}, max_num_seqs {dep['max_num_seqs']}, "
              f"max_num_batched_tokens {dep['max_num_batched_tokens']}, max_model_len {dep['max_model_len']}, "
              f"{dep['kv_blocks']} KV blocks of {dep['block_size']} ({dep['kv_source']}), {dep['hardware']}"
              + (f"; defaults: {', '.join(dep['defaults'])}" if dep["defaults"] else ""), markup=False)
    con.print("workload: " + ", ".join(f"{k} {v}" for k, v in wl.items() if v is not None), markup=False)
    for line in coverage_lines(res.get("coverage") or {}):
        con.print(f"coverage: {line}", markup=False)
    for w in res["warnings"] + [f"kernels: {n}" for n in dep["kernel_notes"]]:
        con.print(f"warning: {w}", markup=False)
    measured = any("measured" in p for p in res["points"])
    t = Table(title="predicted (seconds; band = held-out error of the regime, docs/predict.md)")
    for col in ("rate", "E2E mean", "p50", "p90", "p99", "TTFT mean", "p50", "p90", "p99", "ITL mean", "p90",
                "tok/s", "fail", "band E2E/TTFT/ITL", "regimes"):
        t.add_column(col, justify="left" if col in ("rate", "regimes") else "right")
    if measured:
        for col in ("meas E2E", "meas TTFT", "meas ITL", "meas fail"):
            t.add_column(col, justify="right")
    for p in res["points"]:
        b = p["band"]
        row = [("~" if p.get("refined") else "") + (p["label"] if not p["label"].endswith("req/s")
                                                     else f"{p['rate']:.3g}"),
               *(_s(p["e2e"][k]) for k in ("mean", "p50", "p90", "p99")),
               *(_s(p["ttft"][k]) for k in ("mean", "p50", "p90", "p99")),
               _s(p["itl"]["mean"], 1e3, "{:.1f}ms"), _s(p["itl"]["p90"], 1e3, "{:.1f}ms"),
               _s(p["throughput_tok_s"], 1, "{:.0f}"), _s(p["fail"], 100, "{:.1f}%"),
               "/".join(_band(b.get(m)) for m in ("e2e", "ttft", "itl")), ",".join(p["regimes"]) or "in-sample"]
        if measured:
            m = p.get("measured") or {}
            row += [_s(m.get("e2e_mean")), _s(m.get("ttft_mean")), _s(m.get("itl_mean"), 1e3, "{:.1f}ms"),
                    _s(m.get("fail"), 100, "{:.1f}%")]
        t.add_row(*row)
    con.print(t)
    notes = sorted({n for p in res["points"] for n in p["band_notes"]})
    if notes:
        con.print("band: " + "; ".join(notes) + " (the band covers the regimes that have one)", markup=False)
    k = res.get("knee")
    if k:
        slo = ", ".join(f"{key} <= {v:g}" for key, v in k["slo"].items())
        if k["rate"] is None:
            con.print(f"knee: no swept rate meets {slo} (not even the lowest)", markup=False)
        else:
            con.print(f"knee: {k['rate']:.3g} req/s is the highest rate meeting {slo}"
                      + (" (every swept rate meets it: raise --rates)" if k["rate"] >= k["swept_max"] else "")
                      + f"; with the band's upper edge: "
                      + (f"{k['rate_within_band']:.3g} req/s" if k["rate_within_band"] is not None else "none"),
                      markup=False)
    con.print(f"{len(res['points'])} points in {res['seconds']:.2f} s", markup=False)


# ---------------------------------------------------------------- HTML

def predict_figure(res: dict):
    """TTFT, E2E and ITL (mean and p90 with the band), throughput and failures against rate."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    pts = [p for p in res["points"]]
    x = [p["rate"] for p in pts]
    fig = make_subplots(rows=2, cols=3, subplot_titles=("TTFT (s)", "E2E (s)", "ITL (ms)", "throughput (tok/s)",
                                                        "failed fraction", ""))
    def val(p, m, s, scale=1.0):
        v = (p.get(m) or {}).get(s)
        return None if v is None or not math.isfinite(v) else v * scale

    def band_trace(m, s, col, row, color, scale=1.0):
        ys = [val(p, m, s, scale) for p in pts]
        bs = [p["band"].get(m) for p in pts]
        up = [None if y is None or b is None or not math.isfinite(b) else y * (1 + b) for y, b in zip(ys, bs)]
        lo = [None if y is None or b is None or not math.isfinite(b) else y * max(0.0, 1 - b) for y, b in zip(ys, bs)]
        fig.add_trace(go.Scatter(x=x, y=up, mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip"),
                      row=row, col=col)
        fig.add_trace(go.Scatter(x=x, y=lo, mode="lines", line={"width": 0}, fill="tonexty", showlegend=False,
                                 fillcolor="rgba(31,119,180,0.15)", hoverinfo="skip"), row=row, col=col)
        fig.add_trace(go.Scatter(x=x, y=ys, mode="lines+markers", name=f"{m.upper()} {s}", line={"color": color}),
                      row=row, col=col)

    for j, s in enumerate(("mean", "p90")):
        band_trace("ttft", s, 1, 1, COLORS[j])
        band_trace("e2e", s, 2, 1, COLORS[j])
        band_trace("itl", s, 3, 1, COLORS[j], 1e3)
    fig.add_trace(go.Scatter(x=x, y=[p["throughput_tok_s"] for p in pts], mode="lines+markers", name="tok/s",
                             line={"color": COLORS[2]}), row=2, col=1)
    fig.add_trace(go.Scatter(x=x, y=[p["fail"] for p in pts], mode="lines+markers", name="failed",
                             line={"color": COLORS[1]}), row=2, col=2)
    for p in pts:
        for m, s, col in (("ttft", "mean", 1), ("e2e", "mean", 2)):
            meas = (p.get("measured") or {}).get(f"{m}_mean")
            if meas is not None and math.isfinite(meas):
                fig.add_trace(go.Scatter(x=[p["rate"]], y=[meas], mode="markers", marker={"symbol": "x", "size": 10,
                              "color": "black"}, name="measured", showlegend=False), row=1, col=col)
    k = res.get("knee") or {}
    if k.get("rate") is not None:
        for col in (1, 2, 3):
            fig.add_vline(x=k["rate"], line_dash="dash", line_color="#d62728", row=1, col=col)
        for key, lim in k["slo"].items():
            if key.startswith("ttft"):
                fig.add_hline(y=lim, line_dash="dot", line_color="#7f7f7f", row=1, col=1)
    dep = res["deployment"]
    fig.update_layout(title=f"{res['program']} on {dep['model']} TP {dep['tp']} ({dep['kv_blocks']} KV blocks)",
                      height=720, template="plotly_white")
    fig.update_xaxes(title_text="arrival rate (req/s)")
    return fig


def predict_html(res: dict) -> str:
    """One self-contained page (plotly.js inline: it opens offline) with the figure and the JSON."""

    import plotly.io as pio
    fig = predict_figure(res)
    body = pio.to_html(fig, full_html=False, include_plotlyjs=True)
    blob = html.escape(json.dumps(clean_json(res), indent=1, allow_nan=False))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>evolve predict</title></head><body>{body}"
            f"<details><summary>prediction (JSON)</summary><pre>{blob}</pre></details></body></html>")
