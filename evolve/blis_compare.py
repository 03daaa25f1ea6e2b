"""BLIS's per-request replay results scored like StepEvolve scores its own simulator.

    rows = compare_rows(gt, {"evolved": results_by_exp, "trained-physics": ...})

For each experiment x load stage, on the same requests `evolve show` reports (the later
1 - train_fraction of each stage's arrivals, failed requests left out: Evaluator's test part),
the errors |pred - measured| / measured of mean E2E, mean TTFT and per-output-token time
sum(e2e - ttft) / sum(N - 1) with N = the profile's output_len, as evaluator.evaluate does.
BLIS results are its `--results-path` JSON: [{request_id, ttft_us, e2e_us, ...}]; a request
BLIS did not finish is counted in `missing` and left out of its stage's means.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from evaluator.data import GroundTruth, per_token_time
from evaluator.evaluate import Evaluator

__all__ = ["BlisCompareError", "read_results", "compare_rows", "summary", "RESULTS_PREFIX"]

RESULTS_PREFIX = "results-"


class BlisCompareError(ValueError):
    """Missing or unreadable BLIS results."""


def read_results(results_dir: str | Path) -> dict[str, dict[str, Path]]:
    """{latency model: {experiment id: results file}} found as <dir>/<experiment>/results-<model>.json."""
    root = Path(results_dir)
    if not root.is_dir():
        raise BlisCompareError(f"{root}: no such directory (expected the output of evolve export-blis-traces)")
    found: dict[str, dict[str, Path]] = {}
    for f in sorted(root.glob(f"*/{RESULTS_PREFIX}*.json")):
        found.setdefault(f.stem[len(RESULTS_PREFIX):], {})[f.parent.name] = f
    if not found:
        raise BlisCompareError(f"{root}: no <experiment>/{RESULTS_PREFIX}<latency-model>.json files "
                               "(run replay.sh there first)")
    return found


def _load(path: Path) -> dict[int, tuple[float, float]]:
    try:
        data = json.loads(path.read_text())
        return {int(r["request_id"]): (float(r["ttft_us"]), float(r["e2e_us"])) for r in data}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BlisCompareError(f"{path}: not a BLIS --results-path file ({e})") from None


def _err(pred: float, meas: float) -> float | None:
    if not (math.isfinite(pred) and math.isfinite(meas)) or meas == 0:
        return None
    return abs(pred - meas) / meas


def compare_rows(gt: GroundTruth, results: Mapping[str, Mapping[str, Path]],
                 train_fraction: float = 0.7) -> list[dict]:
    """One row per experiment x stage with the measured means and, per latency model, BLIS's
    means and errors (keys '<model>:e2e_err' etc.)."""
    if gt.requests is None:
        raise BlisCompareError(f"{gt.source}: no request traces; BLIS results are per request (trace mode only)")
    ev = Evaluator(gt, train_fraction=train_fraction)
    rows = []
    for e in gt.experiments:
        every = gt.requests[gt.requests["experiment_id"] == e.id]
        if every.empty or e.id not in ev.wl:
            continue
        # the replay carries every request sent, failed ones too (evaluator.workload); only the
        # measured successes are scored
        ok = ~every["has_error"].to_numpy(bool) if "has_error" in every.columns else np.ones(len(every), bool)
        ids = (every["request_index"].to_numpy(np.int64) if "request_index" in every.columns
               else np.arange(len(every), dtype=np.int64))
        wl = ev.wl[e.id]
        report = ~ev.train_mask[e.id]
        sims = {name: _load(files[e.id]) for name, files in results.items() if e.id in files}
        for s in e.stages:
            sel = report & (wl.stage == s.index) & ok
            if not sel.any():
                continue
            me2e, mttft = wl.measured_e2e_s[sel], wl.measured_ttft_s[sel]
            meas = (float(me2e.mean()), float(mttft.mean()), per_token_time(me2e, mttft, wl.gen_len[sel]))
            row = {"experiment": e.id, "model": e.model, "workload": e.workload, "stage": s.index,
                   "rate": s.rate, "n_requests": int(sel.sum()),
                   "meas_e2e_s": meas[0], "meas_ttft_s": meas[1], "meas_itl_s": meas[2]}
            for name, sim in sims.items():
                got = np.array([sim.get(int(i), (math.nan, math.nan)) for i in ids[sel]], np.float64) / 1e6
                have = np.isfinite(got[:, 1])
                row[f"{name}:missing"] = int((~have).sum())
                if not have.any():
                    pred = (math.nan, math.nan, math.nan)
                else:
                    ttft, e2e = got[have, 0], got[have, 1]
                    pred = (float(e2e.mean()), float(ttft.mean()), per_token_time(e2e, ttft, wl.gen_len[sel][have]))
                for k, p, m in zip(("e2e", "ttft", "itl"), pred, meas):
                    row[f"{name}:pred_{k}_s"] = p if math.isfinite(p) else None
                    row[f"{name}:{k}_err"] = _err(p, m)
            rows.append(row)
    return rows


def summary(rows: list[dict], names: list[str]) -> dict[str, dict[str, float | None]]:
    """Mean / worst error per source over the rows (None where a source has no value)."""
    out = {}
    for n in names:
        d = {}
        for k in ("e2e", "ttft", "itl"):
            v = [r[f"{n}:{k}_err"] for r in rows if r.get(f"{n}:{k}_err") is not None]
            d[f"{k}_mean"] = float(np.mean(v)) if v else None
            d[f"{k}_worst"] = float(np.max(v)) if v else None
        d["missing"] = int(sum(r.get(f"{n}:missing", 0) for r in rows))
        out[n] = d
    return out
