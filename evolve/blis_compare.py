"""BLIS's per-request replay results scored like StepEvolve scores its own simulator.

    rows = compare_rows(gt, {"evolved": results_by_exp, "trained-physics": ...})

For each experiment x load stage, on the same requests `evolve show` reports (the later
1 - train_fraction of each stage's arrivals, failed requests left out: Evaluator's test part),
the errors |pred - measured| / measured of mean E2E, mean TTFT and per-output-token time
sum(e2e - ttft) / sum(N - 1) with N = the profile's output_len, as evaluator.evaluate does.
BLIS results are its `--results-path` JSON: [{request_id, ttft_us, e2e_us, ...}]; a request
BLIS did not finish is counted in `missing` and left out of its stage's means.

Nothing is dropped silently: every stage (or source, or results file) that cannot be compared
goes into `not_compared` with the reason, e.g.

    rows, skipped = compare(gt, results)
    skipped == [{"experiment": "...", "stage": 0, "source": "blis:evolved",
                 "reason": "no results-evolved.json for this experiment"}, ...]

`stage` is None for a whole experiment (or a results file the data does not know), `source`
None where no source could be compared (no reported requests in the data).

Failed requests (`compare_all`, third part): per experiment (stage None) and per load stage, over
*every* request sent (not only the reported part: BLIS replays them all), the measured failures
(`has_error`: the client gave up at its timeout) against BLIS's, i.e. the requests of the trace
with no entry in BLIS's results file (BLIS writes finished requests only). With the exported
deadlines and horizon those are the requests BLIS timed out at deadline_us (or dropped as larger
than the KV cache); the experiment row adds BLIS's own counters from stdout-<model>.txt
(`timed_out_requests`, `dropped_unservable`, `still_queued`, `still_running`) where replay.sh wrote
it, so the split is visible:

    rows, skipped, failed = compare_all(gt, results)
    failed[0] == {"experiment": "...", "stage": None, "requests": 4800, "failed_meas": 4068,
                  "blis:evolved:failed": 4139, "blis:evolved:blis_counts": {"timed_out_requests": 4139, ...}}
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from evaluator.data import GroundTruth, per_token_time
from evaluator.evaluate import Evaluator

__all__ = ["BlisCompareError", "read_results", "compare", "compare_all", "compare_rows", "not_compared_entry",
           "summary", "blis_counts", "RESULTS_PREFIX", "BLIS_COUNTERS"]

RESULTS_PREFIX = "results-"
# BLIS's aggregate metrics (its stdout JSON) that say what became of the requests it did not finish
BLIS_COUNTERS = ("completed_requests", "timed_out_requests", "dropped_unservable", "still_queued", "still_running")


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
    """{request id: (TTFT us, E2E us)}; a record that is not one BLIS writes is refused, naming
    the file, the record and the value (issue 33: never scored as it happens to convert)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as e:
        raise BlisCompareError(f"{path}: not a BLIS --results-path file ({' '.join(str(e).split())[:200]})") from None
    if not isinstance(data, list):
        raise BlisCompareError(f"{path}: not a BLIS --results-path file (a JSON list of request records expected, "
                               f"got {type(data).__name__})")
    out: dict[int, tuple[float, float]] = {}
    for n, r in enumerate(data):
        if not isinstance(r, dict) or not all(k in r for k in ("request_id", "ttft_us", "e2e_us")):
            raise BlisCompareError(f"{path}: record {n} is not a request record with request_id, ttft_us and e2e_us")
        rid = r["request_id"]
        if isinstance(rid, bool) or not isinstance(rid, int) or rid < 0:
            raise BlisCompareError(f"{path}: record {n}: request_id must be a non-negative integer, got {rid!r}")
        for name in ("ttft_us", "e2e_us"):
            v = r[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise BlisCompareError(f"{path}: record {n}: {name} must be a finite time >= 0 (microseconds), "
                                       f"got {v!r}")
        if r["e2e_us"] < r["ttft_us"]:
            raise BlisCompareError(f"{path}: record {n}: e2e_us {r['e2e_us']!r} is shorter than ttft_us "
                                   f"{r['ttft_us']!r}")
        if rid in out:
            raise BlisCompareError(f"{path}: record {n}: request_id {rid} appears twice")
        out[rid] = (float(r["ttft_us"]), float(r["e2e_us"]))
    return out


def blis_counts(stdout_path: Path) -> dict[str, int] | None:
    """BLIS's request counters (BLIS_COUNTERS) from the first JSON object of its stdout, as
    replay.sh saves it (stdout-<model>.txt); None when the file is absent or has no such object."""
    try:
        text = Path(stdout_path).read_text()
    except OSError:
        return None
    start = text.find("{")
    while start >= 0:
        try:
            obj, _ = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(obj, dict) and "timed_out_requests" in obj:
            return {k: int(obj[k]) for k in BLIS_COUNTERS if isinstance(obj.get(k), (int, float))}
        start = text.find("{", start + 1)
    return None


def _err(pred: float, meas: float) -> float | None:
    if not (math.isfinite(pred) and math.isfinite(meas)) or meas == 0:
        return None
    return abs(pred - meas) / meas


def not_compared_entry(experiment: str, stage: int | None, source: str | None, reason: str) -> dict:
    """One thing blis-compare could not compare (module docstring)."""
    return {"experiment": experiment, "stage": None if stage is None else int(stage), "source": source,
            "reason": reason}


def _results_name(source: str) -> str:
    return f"{RESULTS_PREFIX}{source.split(':', 1)[-1]}.json"


def compare_rows(gt: GroundTruth, results: Mapping[str, Mapping[str, Path]],
                 train_fraction: float = 0.7) -> list[dict]:
    """The rows of compare() (without what could not be compared)."""
    return compare(gt, results, train_fraction)[0]


def compare(gt: GroundTruth, results: Mapping[str, Mapping[str, Path]],
            train_fraction: float = 0.7) -> tuple[list[dict], list[dict]]:
    """(rows, not_compared). One row per experiment x stage with the measured means and, per
    latency model, BLIS's means and errors (keys '<model>:e2e_err' etc.); not_compared lists
    every stage, source or results file left out, with the reason (not_compared_entry)."""
    rows, skipped, _ = compare_all(gt, results, train_fraction)
    return rows, skipped


def _failed_entries(e, stages: np.ndarray, ok: np.ndarray, ids: np.ndarray, sims: Mapping[str, dict],
                    results: Mapping[str, Mapping[str, Path]]) -> list[dict]:
    """The failed-request counts of one experiment: the whole experiment, then each stage."""
    out = []
    for stage in (None, *(s.index for s in e.stages)):
        m = np.ones(len(ids), bool) if stage is None else stages == stage
        d = {"experiment": e.id, "stage": stage, "requests": int(m.sum()), "failed_meas": int((~ok[m]).sum())}
        for name in results:
            sim = sims.get(name)
            d[f"{name}:failed"] = None if sim is None else int(sum(int(i) not in sim for i in ids[m]))
            if stage is None:
                d[f"{name}:blis_counts"] = (None if sim is None else
                                            blis_counts(results[name][e.id].parent / f"stdout-{name.split(':', 1)[-1]}.txt"))
        out.append(d)
    return out


def compare_all(gt: GroundTruth, results: Mapping[str, Mapping[str, Path]],
                train_fraction: float = 0.7) -> tuple[list[dict], list[dict], list[dict]]:
    """(rows, not_compared, failed): compare()'s two parts and the failed-request counts (module
    docstring), one entry per experiment with request rows (stage None) and one per stage."""
    if gt.requests is None:
        raise BlisCompareError(f"{gt.source}: no request traces; BLIS results are per request (trace mode only)")
    ev = Evaluator(gt, train_fraction=train_fraction)
    rows: list[dict] = []
    skipped: list[dict] = []
    failed: list[dict] = []
    known = {e.id for e in gt.experiments}
    for name, files in results.items():
        for exp_id in sorted(set(files) - known):
            skipped.append(not_compared_entry(exp_id, None, name, f"{files[exp_id]}: experiment not in the "
                                              f"ground truth {gt.source}"))
    for e in gt.experiments:
        every = gt.requests[gt.requests["experiment_id"] == e.id]
        if every.empty:
            skipped.append(not_compared_entry(e.id, None, None, "no rows in the ground truth's requests table"))
            continue
        if e.id not in ev.wl:
            skipped.append(not_compared_entry(e.id, None, None, "the evaluator built no workload for it"))
            continue
        # the replay carries every request sent, failed ones too (evaluator.workload); only the
        # measured successes are scored
        ok = ~every["has_error"].to_numpy(bool) if "has_error" in every.columns else np.ones(len(every), bool)
        ids = (every["request_index"].to_numpy(np.int64) if "request_index" in every.columns
               else np.arange(len(every), dtype=np.int64))
        wl = ev.wl[e.id]
        report = ~ev.train_mask[e.id]
        sims = {name: _load(files[e.id]) for name, files in results.items() if e.id in files}
        failed += _failed_entries(e, wl.stage, ok, ids, sims, results)
        for s in e.stages:
            in_stage = wl.stage == s.index
            sel = report & in_stage & ok
            if not sel.any():
                n_stage, n_rep = int(in_stage.sum()), int((report & in_stage).sum())
                why = ("no requests in this stage" if n_stage == 0 else
                       f"none of its {n_stage} requests is in the reported part (the later "
                       f"{1 - train_fraction:.0%} of arrivals)" if n_rep == 0 else
                       f"all {n_rep} reported requests failed in the measurement (has_error)")
                skipped.append(not_compared_entry(e.id, s.index, None, why))
                continue
            for name in results:
                if name not in sims:
                    skipped.append(not_compared_entry(e.id, s.index, name,
                                                      f"no {_results_name(name)} for this experiment"))
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
                    skipped.append(not_compared_entry(e.id, s.index, name, f"no result for any of its {len(have)} "
                                                      "reported requests (BLIS finished none)"))
                else:
                    ttft, e2e = got[have, 0], got[have, 1]
                    pred = (float(e2e.mean()), float(ttft.mean()), per_token_time(e2e, ttft, wl.gen_len[sel][have]))
                bad = []
                for k, p, m in zip(("e2e", "ttft", "itl"), pred, meas):
                    row[f"{name}:pred_{k}_s"] = p if math.isfinite(p) else None
                    row[f"{name}:{k}_err"] = _err(p, m)
                    if have.any() and row[f"{name}:{k}_err"] is None:
                        bad.append(f"{k} (measured {m:.6g} s, BLIS {p:.6g} s)")
                if bad:
                    skipped.append(not_compared_entry(e.id, s.index, name, "no error for " + ", ".join(bad)
                                                      + ": not a finite value over a nonzero measurement"))
            rows.append(row)
    return rows, skipped, failed


def summary(rows: list[dict], names: list[str]) -> dict[str, dict[str, float | None]]:
    """Mean / worst error per source over the rows (None where a source has no value); `stages`:
    how many rows the source's E2E mean is over."""
    out = {}
    for n in names:
        d = {"stages": sum(1 for r in rows if r.get(f"{n}:e2e_err") is not None)}
        for k in ("e2e", "ttft", "itl"):
            v = [r[f"{n}:{k}_err"] for r in rows if r.get(f"{n}:{k}_err") is not None]
            d[f"{k}_mean"] = float(np.mean(v)) if v else None
            d[f"{k}_worst"] = float(np.max(v)) if v else None
        d["missing"] = int(sum(r.get(f"{n}:missing", 0) for r in rows))
        out[n] = d
    return out
