"""Held-out figures per regime for the seeds (or given program files): the issue-29 table.

    .venv/bin/python benchmarks/regime_figures.py --data ../shared/data [PROGRAM.py ...] [--json]

Per program, every held-out split scored as a full evaluation scores it (evaluator.holdout):
  long decode  constants fitted on the short workloads, per model on the long one: mean E2E and
               per-token error, failed fraction measured -> predicted, and the simulated
               successes' TTFT next to the measured successes';
  LOMO         one vector fitted on the other models: mean E2E error per held-out model;
  LOWO         on the short folds: mean E2E error per held-out workload;
  regimes      the objectives and the worst of them (what a run hands over on).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.data import load  # noqa: E402
from evaluator.evaluate import Evaluator  # noqa: E402
from evaluator.objectives import regime_errors  # noqa: E402
from evaluator.program import parse_program  # noqa: E402
from evolve.views.format import clean_json  # noqa: E402
from seeds import seed_sources  # noqa: E402


def _mean(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else None


def figures(ev: Evaluator, name: str, program) -> dict:
    t0 = time.perf_counter()
    res = ev.evaluate(program, heldout=True)
    out = {"program": name, "valid": res.valid, "error": res.error, "seconds": time.perf_counter() - t0}
    if not res.valid:
        return out
    out["regimes"] = regime_errors(res.objectives)
    out["worst_regime"] = max(out["regimes"].values())
    long = res.holdout.get("long", {})
    out["long_errors"] = long.get("errors") or {}
    out["long"] = {r["model"]: {"e2e_err": r["e2e_err"], "itl_err": r["itl_err"], "meas_fail": r["meas_fail"],
                                "pred_fail": r["pred_fail"], "meas_ttft_s": r["meas_ttft_s"],
                                "pred_ttft_served_s": r.get("pred_ttft_served_s")}
                   for r in long.get("rows", [])}
    for kind, key in (("model", "lomo"), ("workload", "lowo")):
        b = res.holdout.get(kind, {})
        per: dict[str, list] = {}
        for r in b.get("rows", []):
            per.setdefault(r["split"].partition(":")[2], []).append(r["e2e_err"])
        out[key] = {k: _mean(v) for k, v in per.items()}
        out[key].update({k.partition(":")[2]: math.inf for k in b.get("errors") or {}})
    return out


def _pct(x) -> str:
    return "—" if x is None else ("inf" if not math.isfinite(x) else f"{100 * x:.1f}%")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("programs", nargs="*", help="program files (default: every seed)")
    ap.add_argument("--data", default=None, help="ground-truth directory (default: the embedded table)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    ev = Evaluator(load(args.data))
    ev.reference_states()
    progs = [(Path(p).stem, parse_program(Path(p).read_text())) for p in args.programs] or \
        [(n, parse_program(s)) for n, s in sorted(seed_sources().items())]
    rows = [figures(ev, n, p) for n, p in progs]
    if args.json:
        print(json.dumps(clean_json(rows), indent=1, allow_nan=False))
        return 0
    print(f"load average {os.getloadavg()[0]:.1f}; data {args.data or 'embedded default'}")
    for r in rows:
        if not r["valid"]:
            print(f"{r['program']}: invalid ({r['error']})")
            continue
        regimes = ", ".join(f"{k} {_pct(v)}" for k, v in r["regimes"].items())
        print(f"{r['program']}: worst regime {_pct(r['worst_regime'])} ({regimes}); {r['seconds']:.1f} s")
        for m, x in r["long"].items():
            ttft = "—" if x["pred_ttft_served_s"] is None or x["meas_ttft_s"] is None else \
                f"{x['meas_ttft_s']:.0f} -> {x['pred_ttft_served_s']:.0f} s"
            print(f"   long {m:14s} E2E {_pct(x['e2e_err']):>7} per-token {_pct(x['itl_err']):>7} "
                  f"failed {100 * x['meas_fail']:.1f}% -> {100 * x['pred_fail']:.1f}%  TTFT of successes {ttft}")
        for m, v in r["long_errors"].items():
            print(f"   long: not scored ({v})")
        print("   LOMO " + ", ".join(f"{k} {_pct(v)}" for k, v in r["lomo"].items()))
        print("   LOWO " + ", ".join(f"{k} {_pct(v)}" for k, v in r["lowo"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
