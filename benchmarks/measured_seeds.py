"""Issue 16's figures: vLLM's measured kernels vs the peak-speed components, as seeds.

Run: .venv/bin/python benchmarks/measured_seeds.py [--data DIR] [--json OUT]
1. Per model, real step cycle / t_step_measured (no fitted constant; benchmarks/kernel_ratio.py).
2. Per seed over the peak-speed components and over the measured ones, side by side: mean and
   worst E2E, TTFT and per-token error in % in-sample (time split), leave-one-workload-out,
   leave-one-model-out (one constant vector shared by all models) and leave-high-load-out, the
   LOMO E2E error per held-out model, and the fitted constants (in-sample per model, LOMO per
   held-out model). Asserts nothing (figures, not tests).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaluator.components import MEASURED_NAMES  # noqa: E402
from evaluator.data import load  # noqa: E402
from evaluator.evaluate import Evaluator  # noqa: E402
from evaluator.program import parse_program  # noqa: E402
from evolve.views.holdout_table import holdout_summary, split_errors  # noqa: E402
from kernel_ratio import ratio_figures  # noqa: E402
from seeds import seed_sources  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PEAK_SEEDS = ("roofline", "linear_physics", "blackbox")


def _pct(v) -> str:
    return "inv" if v is None or not math.isfinite(v) else f"{100 * v:.1f}"


def seed_figures(ev: Evaluator, names: list[str]) -> dict[str, dict]:
    out = {}
    for name in names:
        p = parse_program(seed_sources()[name])
        t = time.perf_counter()
        res = ev.evaluate(p, heldout=True)
        fig = {"valid": res.valid, "error": res.error, "seconds": round(time.perf_counter() - t, 1),
               "reads_measured": bool(MEASURED_NAMES & set(p.params)), "constant_names": p.const_names}
        if res.valid:
            fig["splits"] = {r["kind"]: {k: r[k] for k in ("e2e", "e2e_worst", "ttft", "itl")}
                             for r in holdout_summary(res)}
            fig["split_errors"] = {k: v for k, v in split_errors(res).items()}
            fig["constants_in_sample"] = {m: [float(x) for x in c] for m, c in res.constants.items()}
            lomo = (res.holdout or {}).get("model", {}).get("constants", {})
            fig["constants_lomo"] = {label: {m: [float(x) for x in c] for m, c in cs.items()}
                                     for label, cs in lomo.items()}
            fig["holdout_errors"] = {k: b.get("errors") for k, b in (res.holdout or {}).items() if b.get("errors")}
        out[name] = fig
        print(_line(name, fig), flush=True)
    return out


def _line(name: str, fig: dict) -> str:
    if not fig["valid"]:
        return f"{name}: invalid ({fig['error']})"
    cells = " | ".join(f"{k} " + "/".join(_pct(v[x]) for x in ("e2e", "e2e_worst", "ttft", "itl"))
                       for k, v in fig["splits"].items())
    lomo = {k.split(":", 1)[1]: _pct(v) for k, v in fig["split_errors"].items() if k.startswith("model:")}
    consts = {m: [round(x, 2) for x in c] for m, c in fig["constants_in_sample"].items()}
    lomo_c = {k.split(":", 1)[1]: [round(x, 2) for x in next(iter(c.values()))]  # one vector shared by all
              for k, c in fig["constants_lomo"].items()}
    return (f"{name} ({', '.join(fig['constant_names']) or 'no constants'}; {fig['seconds']} s): {cells}\n"
            f"    LOMO E2E per held-out model {lomo}\n    constants in-sample {consts}\n"
            f"    constants LOMO (shared, per held-out model) {lomo_c}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="ground-truth dir; 'embedded' for the default")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    a = ap.parse_args(argv)
    gt = load(None if a.data == "embedded" else a.data)
    figs: dict = {"data": gt.source}
    if gt.steps is not None:
        figs["ratio"] = ratio_figures(gt)
        for m, f in figs["ratio"].items():
            d = f["decode_only"]
            print(f"{m}: cycle / t_step_measured decode-only median {d['median']:.3f} "
                  f"(p10 {d['p10']:.3f}, p90 {d['p90']:.3f}, n {d['n']}); all rows {f['all_rows']['median']:.3f}")
    print("cells: mean E2E / worst E2E / TTFT / per-token error, %")
    ev = Evaluator(gt)
    measured = sorted(k for k, v in seed_sources().items() if MEASURED_NAMES & set(parse_program(v).params))
    figs["seeds"] = seed_figures(ev, [*PEAK_SEEDS, *measured])
    if a.json:
        Path(a.json).write_text(json.dumps(figs, indent=1, default=lambda v: None if not math.isfinite(v) else v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
