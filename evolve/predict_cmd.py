"""`evolve predict`: a stored program on a deployment nobody measured (docs/predict.md).

The command parses the user's figures, loads the program with its stored constants (archive
id or file + constants JSON), and hands them to `evaluator.predict`; it prints a table, strict
JSON (`--json`: null, never NaN) or writes an offline Plotly page (`--html FILE`). Every
error is one line.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def add_parser(sub) -> None:
    """The `predict` subcommand's flags."""
    p = sub.add_parser("predict", help="predict a deployment and workload nobody measured with a stored program "
                                       "(its constants never refitted): latencies, throughput, failures, band, knee")
    p.add_argument("program", help="archive program id, or a program file (with --constants)")
    p.add_argument("--archive", default="archive.db", metavar="PATH")
    p.add_argument("--constants", metavar="JSON",
                   help="for a program file: its fit, as `evolve evaluate PROGRAM --json` prints it")
    p.add_argument("--data", metavar="DIR", default=None,
                   help="ground truth: models, measured KV blocks, kernel tables, traces and the fit's data for "
                        "the overhead law and the regimes (default: the archive run's --data, else the embedded table)")
    d = p.add_argument_group("deployment")
    d.add_argument("--model", help="a model of the data, a shipped config (evaluator/model_configs) or a config.json")
    d.add_argument("--tp", type=int, default=None, help="tensor parallelism (default: the data's, else 1)")
    d.add_argument("--max-num-seqs", type=int, default=None, help="default: the data's (128)")
    d.add_argument("--max-num-batched-tokens", type=int, default=None, help="default: the data's (2048)")
    d.add_argument("--max-model-len", type=int, default=None, help="default: the data's (4096)")
    d.add_argument("--block-size", type=int, default=None, help="KV block size (default 16)")
    d.add_argument("--kv-blocks", type=int, default=None,
                   help="KV blocks per GPU (default: measured for this model/TP, else estimated from GPU memory)")
    d.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="for the estimated KV blocks (vLLM's default 0.9)")
    w = p.add_argument_group("workload")
    w.add_argument("--rate", type=str, default=None, help="one arrival rate (req/s)")
    w.add_argument("--rates", type=str, default=None, help="a sweep: LO:HI:N (e.g. 1:20:10) or R1,R2,...")
    w.add_argument("--trace", metavar="EXPERIMENT", help="replay a measured experiment of --data (id or a unique part)")
    w.add_argument("--requests", metavar="FILE", help="replay a CSV/parquet trace: arrival_time_us (or arrival_s), "
                                                      "input_tokens, output_tokens")
    w.add_argument("--prompt-tokens", metavar="MEAN[:STD]", default=None, help="prompt length (default 550)")
    w.add_argument("--output-tokens", metavar="MEAN[:STD]", default=None, help="output length (default 250)")
    w.add_argument("--workload-from", metavar="EXPERIMENT",
                   help="prompt/output lengths, prompt pool and timeout of a measured experiment")
    w.add_argument("--prompt-pool", type=int, default=None,
                   help="distinct prompts cycled through (prefix cache; default: every prompt unique)")
    w.add_argument("--system-prompt-tokens", type=int, default=None, help="shared system prompt of the pool's groups")
    w.add_argument("--num-requests", type=int, default=None, help="requests per rate (default: rate x --duration)")
    w.add_argument("--duration", type=float, default=600.0, help="seconds of arrivals per rate (default 600)")
    w.add_argument("--timeout", type=float, default=None, help="client timeout in s (default: the data's, 300)")
    w.add_argument("--seed", type=int, default=0, help="Poisson arrivals and length draws")
    o = p.add_argument_group("output")
    o.add_argument("--slo", action="append", metavar="KEY=LIMIT",
                   help="e.g. ttft_p90=2 (seconds) or fail=0.01; repeatable: the knee meets all")
    o.add_argument("--overheads", choices=("auto", "law", "fitted", "mean"), default="auto",
                   help="request overheads: the model's fitted ones at its measured TP, else the cross-model law "
                        "(auto); always the law; always the fitted ones; the fitted models' mean (the judge's "
                        "leave-one-model-out rule, for comparison)")
    o.add_argument("--json", action="store_true", help="strict JSON (null where undefined)")
    o.add_argument("--html", metavar="FILE", help="write an offline Plotly page of the sweep")
    p.set_defaults(func=cmd_predict)


def _fail(msg: str):
    sys.exit(f"error: {msg}")


def _load_program(args):
    """(StoredProgram, data dir or None) for an archive id or a program file."""
    from evaluator.predict import PredictError, load_program_file, stored_from_record
    if Path(args.program).is_file() or not args.program.isdigit():
        if not args.constants:
            _fail(f"{args.program}: a program file needs --constants JSON (its fit: `evolve evaluate "
                  f"{args.program} --json`)")
        sp = load_program_file(args.program, args.constants)
        return sp, args.data if args.data is not None else sp.data
    from evolve.archive import Archive
    from evolve.archive_check import ArchiveError
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
    """Everything `predict` needs from the flags; PredictError / DataError on bad input."""
    from evaluator.components import MEASURED_NAMES
    from evaluator.data import load
    from evaluator.predict import (PredictError, Spec, deployment_of, find_experiment, make_deployment, parse_dist,
                                   parse_rates, parse_slo, requests_file_workload, spec_from_experiment)
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
    stored, data = _load_program(args)
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
        from evaluator.failed_requests import DEFAULT_TIMEOUT_S
        requests = requests_file_workload(args.requests, args.timeout or DEFAULT_TIMEOUT_S)
    return stored, gt, dep, dict(rates=rates, spec=spec, trace=trace, requests=requests, slo=slo,
                                 overheads_mode=args.overheads)


def cmd_predict(args) -> int:
    from evaluator.errors import DataError
    from evaluator.predict import PredictError, predict
    from evolve.views.format import clean_json
    try:
        stored, gt, dep, kw = build(args)
        res = predict(stored, gt, dep, **kw)
    except (PredictError, DataError) as e:
        _fail(str(e))
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
    from evolve.views.format import fmt_missing
    return fmt_missing(v, lambda x: fmt.format(x * scale))


def _band(v) -> str:
    from evolve.views.format import fmt_missing
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
    from evolve.views.plots import PALETTE
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
        band_trace("ttft", s, 1, 1, PALETTE[j])
        band_trace("e2e", s, 2, 1, PALETTE[j])
        band_trace("itl", s, 3, 1, PALETTE[j], 1e3)
    fig.add_trace(go.Scatter(x=x, y=[p["throughput_tok_s"] for p in pts], mode="lines+markers", name="tok/s",
                             line={"color": PALETTE[2]}), row=2, col=1)
    fig.add_trace(go.Scatter(x=x, y=[p["fail"] for p in pts], mode="lines+markers", name="failed",
                             line={"color": PALETTE[1]}), row=2, col=2)
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
    import html

    import plotly.io as pio
    from evolve.views.format import clean_json
    fig = predict_figure(res)
    body = pio.to_html(fig, full_html=False, include_plotlyjs=True)
    blob = html.escape(json.dumps(clean_json(res), indent=1, allow_nan=False))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>evolve predict</title></head><body>{body}"
            f"<details><summary>prediction (JSON)</summary><pre>{blob}</pre></details></body></html>")


def main(argv=None) -> int:  # for `python -m evolve.predict_cmd`
    ap = argparse.ArgumentParser(prog="evolve")
    add_parser(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(["predict", *(argv if argv is not None else sys.argv[1:])])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
