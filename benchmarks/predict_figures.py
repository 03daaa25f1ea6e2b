"""Figures for `evolve predict` (issue 30, item 3; docs/predict.md).

(a) Transfer without refit: for each of the four models, fit a program on the other three
    (one constant vector for all: `Evaluator(global_fit=True)`, held-out splits scored for the
    band), store the fit as `evolve evaluate --json` would, then `evolve predict` every
    experiment of the fourth model from the stored constants (trace replay on its measured
    deployment). E2E and TTFT error per stage beside the band printed, and how often the truth
    fell inside it.
(b) A sweep for codellama-34b at TP 1, 2 and 4 over 10 rates with the measured-kernel seed
    fitted on all four models: the knee for TTFT p90 <= 2 s, and the wall time of each
    `evolve predict` command (a fresh process, imports and data included) and of its prediction.

    .venv/bin/python benchmarks/predict_figures.py --data ../shared/data [--out DIR] [--programs measured,roofline]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import evaluator.data  # noqa: E402
from functools import lru_cache  # noqa: E402

evaluator.data.load = lru_cache(maxsize=4)(evaluator.data.load)  # `evolve predict` reads the data once here
from evaluator.data import load  # noqa: E402
from evaluator.evaluate import Evaluator  # noqa: E402
from evaluator.program import parse_program  # noqa: E402
from evolve.cli import build_parser  # noqa: E402
from evolve.predict_run import build  # noqa: E402
from evolve.views.format import clean_json  # noqa: E402
from evaluator.predict import predict  # noqa: E402
from seeds import seed_sources  # noqa: E402

MOSTLY_FAILED = 0.5  # the judge's rule: a stage whose measured requests mostly failed has no latency to compare


def subset(gt, models):
    """The ground truth restricted to `models` (requests and steps too)."""
    exps = [e for e in gt.experiments if e.model in models]
    ids = {e.id for e in exps}
    req = gt.requests[gt.requests["experiment_id"].isin(ids)] if gt.requests is not None else None
    steps = gt.steps[gt.steps["experiment_id"].isin(ids)] if gt.steps is not None else None
    return replace(gt, experiments=exps, requests=req, steps=steps)


def fit_json(gt, source: str, path: Path, global_fit: bool) -> dict:
    """Fit and score like `evolve evaluate --holdout` (held-out splits for the band); written
    as its --json output is."""
    t0 = time.perf_counter()
    ev = Evaluator(gt, global_fit=global_fit).evaluate(parse_program(source), heldout=True)
    d = clean_json(ev.to_json())
    path.write_text(json.dumps(d, allow_nan=False))
    return {"valid": ev.valid, "error": ev.error, "seconds": time.perf_counter() - t0}


def predict_cli(argv: list[str]) -> dict:
    """The `evolve predict` code path (parser, build, predict) in this process."""
    args = build_parser().parse_args(["predict", *argv])
    stored, gt, dep, kw = build(args)
    return predict(stored, gt, dep, **kw)


def transfer(data: str, out: Path, programs: list[str], modes=("auto", "mean")) -> list[dict]:
    gt = load(data)
    models = sorted({e.model for e in gt.experiments})
    rows = []
    for name in programs:
        src = seed_sources()[name]
        prog_file = out / f"{name}.py"
        prog_file.write_text(src)
        for held in models:
            fitted = [m for m in models if m != held]
            fit = out / f"{name}-without-{held}.json"
            info = fit_json(subset(gt, fitted), src, fit, global_fit=True)
            print(f"# {name}: fitted on {', '.join(fitted)} in {info['seconds']:.0f} s "
                  f"({'valid' if info['valid'] else info['error']})", flush=True)
            if not info["valid"]:
                continue
            for mode, e in ((mode, x) for mode in modes for x in gt.experiments if x.model == held):
                res = predict_cli([str(prog_file), "--constants", str(fit), "--data", data, "--trace", e.id,
                                   "--overheads", mode])
                for p, s in zip(res["points"], e.stages):
                    m = p.get("measured") or {}
                    r = {"program": name if mode == "auto" else f"{name}/{mode}", "model": held, "experiment": e.id, "workload": e.workload,
                         "stage": s.index, "rate": s.rate, "regimes": p["regimes"], "band": p["band"],
                         "pred_fail": p["fail"], "meas_fail": m.get("fail"), "seconds": res["seconds"],
                         "overheads": res["overheads"]["source"]}
                    for k in ("e2e", "ttft", "itl"):
                        pred, meas = p[k]["mean"], m.get(f"{k}_mean")
                        ok = meas is not None and pred is not None and np.isfinite(meas) and \
                            (m.get("fail") or 0.0) <= MOSTLY_FAILED
                        r[f"pred_{k}"], r[f"meas_{k}"] = pred, meas
                        r[f"{k}_err"] = abs(pred - meas) / meas if ok else None
                        b = p["band"].get(k)
                        r[f"{k}_in_band"] = (abs(pred - meas) <= b * pred) if ok and b is not None and np.isfinite(b) \
                            else None
                    rows.append(r)
    return rows


def summarize_transfer(rows: list[dict]) -> dict:
    out = {}
    for name in sorted({r["program"] for r in rows}):
        rs = [r for r in rows if r["program"] == name]
        s = {}
        for k in ("e2e", "ttft", "itl"):
            errs = [r[f"{k}_err"] for r in rs if r[f"{k}_err"] is not None]
            inb = [r[f"{k}_in_band"] for r in rs if r[f"{k}_in_band"] is not None]
            s[k] = {"median": float(np.median(errs)) if errs else None, "mean": float(np.mean(errs)) if errs else None,
                    "worst": float(np.max(errs)) if errs else None, "n": len(errs),
                    "in_band": f"{sum(inb)}/{len(inb)}"}
        out[name] = s
    return out


def sweep(data: str, out: Path, rates: str) -> list[dict]:
    gt = load(data)
    src = seed_sources()["measured"]
    prog_file = out / "measured.py"
    prog_file.write_text(src)
    fit = out / "measured-all.json"
    info = fit_json(gt, src, fit, global_fit=False)
    print(f"# measured: fitted per model on all four in {info['seconds']:.0f} s", flush=True)
    res = []
    for tp in (1, 2, 4):
        argv = [str(prog_file), "--constants", str(fit), "--data", data, "--model", "codellama-34b", "--tp", str(tp),
                "--rates", rates, "--workload-from", "codellama-34b-tp2-general", "--slo", "ttft_p90=2"]
        t0, c0 = time.perf_counter(), os.times()
        proc = subprocess.run([str(ROOT / ".venv" / "bin" / "evolve"), "predict", *argv, "--json"],
                              capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        c1 = os.times()
        cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
        if proc.returncode:
            print(f"TP {tp}: {proc.stderr.strip()}")
            continue
        d = json.loads(proc.stdout)
        k = d["knee"]
        res.append({"tp": tp, "kv_blocks": d["deployment"]["kv_blocks"], "kv_source": d["deployment"]["kv_source"],
                    "knee": k["rate"], "knee_within_band": k["rate_within_band"], "wall_s": wall, "cpu_s": cpu,
                    "predict_s": d["seconds"], "overheads": d["overheads"]["source"],
                    "points": [(p["rate"], p["ttft"]["p90"], p["e2e"]["mean"], p["throughput_tok_s"], p["fail"],
                                p["regimes"], p["band"]["ttft"]) for p in d["points"]]})
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("STEPEVOLVE_DATA", str(ROOT.parent / "shared" / "data")))
    ap.add_argument("--out", default="/tmp/predict_figures")
    ap.add_argument("--programs", default="measured,roofline")
    ap.add_argument("--rates", default="1:60:10")
    ap.add_argument("--only", choices=("a", "b"), default=None)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), flush=True)
    report = {}
    if a.only in (None, "a"):
        rows = transfer(a.data, out, a.programs.split(","))
        report["transfer_rows"] = rows
        report["transfer"] = summarize_transfer(rows)
        print("\n(a) transfer without refit (fitted on three models, the fourth predicted per stage)")
        print(f"{'program':9s} {'model':14s} {'workload':9s} st {'rate':>5s} {'E2E err':>8s} {'band':>6s} {'in':>3s}"
              f" {'TTFT err':>8s} {'band':>6s} {'in':>3s} {'fail p/m':>11s} regimes")
        for r in rows:
            f = lambda v: "—" if v is None else f"{100 * v:.1f}%"  # noqa: E731
            yn = lambda v: "—" if v is None else ("yes" if v else "no")  # noqa: E731
            print(f"{r['program']:9s} {r['model']:14s} {r['workload']:9s} {r['stage']:2d} {r['rate']:5.1f} "
                  f"{f(r['e2e_err']):>8s} {f(r['band']['e2e']):>6s} {yn(r['e2e_in_band']):>3s} "
                  f"{f(r['ttft_err']):>8s} {f(r['band']['ttft']):>6s} {yn(r['ttft_in_band']):>3s} "
                  f"{f(r['pred_fail'])}/{f(r['meas_fail'])} {','.join(r['regimes'])}")
        print(json.dumps(report["transfer"], indent=1))
        print("overheads:", sorted({r["overheads"] for r in rows})[:2])
    if a.only in (None, "b"):
        report["sweep"] = sweep(a.data, out, a.rates)
        print("\n(b) codellama-34b sweep, SLO TTFT p90 <= 2 s")
        for s in report["sweep"]:
            print(f"TP {s['tp']}: {s['kv_blocks']} KV blocks ({s['kv_source']}); knee {s['knee']} req/s "
                  f"(within band {s['knee_within_band']}); evolve predict wall {s['wall_s']:.1f} s "
                  f"(CPU {s['cpu_s']:.1f} s), "
                  f"prediction {s['predict_s']:.2f} s")
            for p in s["points"]:
                print("   rate %6.2f  TTFT p90 %8.3f s  E2E %7.2f s  %6.0f tok/s  fail %.3f  %s  band ±%s" % (
                    p[0], p[1], p[2], p[3] or 0, p[4], ",".join(p[5]) or "in-sample",
                    "—" if p[6] is None else f"{100 * p[6]:.0f}%"))
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    (out / "predict_figures.json").write_text(json.dumps(clean_json(report), indent=1, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
