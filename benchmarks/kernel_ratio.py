"""How far vLLM's measured kernels alone predict the real step cycle (issue 16, figure 1).

For every model with real step rows, over the decode-only rows with a measured cycle
(next_step_start_delta_us), prints the median / p10 / p90 of measured cycle / t_step_measured,
the median remainder (cycle - t_step_measured, the CPU and launch time per step), and the same
over all rows with a cycle (mixed prefill+decode steps included). No fitted constant.

    .venv/bin/python benchmarks/kernel_ratio.py [--data DIR] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.data import DataError, load_ground_truth  # noqa: E402
from evaluator.measured import (MEASURED_INDEX, kernel_tables_for, measured_matrix,  # noqa: E402
                                model_reductions, step_aggregates)

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def ratio_figures(gt) -> dict[str, dict]:
    tables = kernel_tables_for(gt)
    reds = model_reductions(gt, tables)
    out = {}
    if gt.steps is None:
        return out
    for model in sorted(gt.steps["model_key"].unique()):
        s = gt.steps[(gt.steps["model_key"] == model) & gt.steps["next_step_start_delta_us"].notna()]
        agg = step_aggregates(s)
        M = measured_matrix(reds[model].flat, *agg)
        pred = M[:, MEASURED_INDEX["t_step_measured"]]
        cyc = s["next_step_start_delta_us"].to_numpy(np.float64)
        decode_only = (agg[0] == 0) & (agg[1] > 0)
        fig = {"notes": reds[model].notes}
        for name, sel in (("decode_only", decode_only), ("all_rows", np.ones(len(s), bool))):
            r = cyc[sel] / pred[sel]
            fig[name] = {
                "n": int(sel.sum()),
                "median": float(np.median(r)), "p10": float(np.percentile(r, 10)),
                "p90": float(np.percentile(r, 90)),
                "remainder_median_us": float(np.median(cyc[sel] - pred[sel])),
                "remainder_p10_us": float(np.percentile(cyc[sel] - pred[sel], 10)),
                "remainder_p90_us": float(np.percentile(cyc[sel] - pred[sel], 90)),
                "t_step_measured_median_us": float(np.median(pred[sel])),
                "components_median_us": {k: float(np.median(M[sel, i])) for k, i in MEASURED_INDEX.items()},
            }
        out[model] = fig
    return out


def speed(gt, n: int = 1_000_000) -> float:
    """ns per fill_measured call (through measured_matrix, compiled), on random batch states."""
    red = next(iter(model_reductions(gt).values()))
    rng = np.random.default_rng(0)
    D = rng.integers(0, 129, n).astype(float)
    P = rng.choice([0.0, 512.0, 2048.0], n)
    n_p = (P > 0).astype(float)
    K = D * rng.integers(16, 4096, n) + P
    measured_matrix(red.flat, P[:10], D[:10], n_p[:10], D[:10], D[:10] + n_p[:10], K[:10])
    t = time.perf_counter()
    measured_matrix(red.flat, P, D, n_p, D, D + n_p, K)
    return (time.perf_counter() - t) / n * 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        figs = ratio_figures(load_ground_truth(a.data))
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(figs, indent=2, allow_nan=False))
        return 0
    print(f"{'model':<16} {'rows':<12} {'n':>5} {'median':>7} {'p10':>6} {'p90':>6} {'rest med us':>12} "
          f"{'rest p10-p90 us':>16} {'t_step med us':>14}")
    for model, fig in figs.items():
        for name in ("decode_only", "all_rows"):
            f = fig[name]
            print(f"{model:<16} {name:<12} {f['n']:>5} {f['median']:>7.3f} {f['p10']:>6.3f} {f['p90']:>6.3f} "
                  f"{f['remainder_median_us']:>12.0f} {f['remainder_p10_us']:>7.0f}-{f['remainder_p90_us']:<8.0f} "
                  f"{f['t_step_measured_median_us']:>14.0f}")
        for n in fig["notes"]:
            print(f"  note: {n}")
    print(f"fill_measured: {speed(load_ground_truth(a.data)):.0f} ns per step (1e6 random states)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
