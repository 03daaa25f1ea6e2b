"""Per-token time against the waiting queue, through each long-workload run: measured and simulated.

    .venv/bin/python benchmarks/overload_timeline.py --data ../shared/data [PROGRAM.py] [--bin S] [--json]

Why: under overload the measured time per output token is not a constant of the batch. A run
admits 128 requests at a time, and the mean context of the batch is steady about a minute
after the start; yet the measured per-token time goes on rising while the waiting queue
grows, and falls back as the queue drains. A step model fitted on the short workloads sees no
queue and cannot carry such a term, so this script shows it run by run, beside the same
figures from the simulator with the program's constants fitted on the short workloads (the
long-decode split: what `evolve run` scores as long decode and overload).

Per run whose workload the long-decode split holds out, per bin of first-token time
(default 100 s): successful requests that got their first token in the bin, their measured
per-token time (E2E - TTFT) / (output - 1), the measured waiting queue (requests arrived and
not yet given a first token, failed ones until the client gave up) and the simulated ones.
Also the measured scheduler-call wall time (`steps/step_durations_test.csv`, the last 20% of
each run's sampled steps: see PROVENANCE, it is not the GPU step). Asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.components import SPREAD_NAMES  # noqa: E402
from evaluator.data import load  # noqa: E402
from evaluator.evaluate import Evaluator  # noqa: E402
from evaluator.holdout import make_split, split_evaluation  # noqa: E402
from evaluator.program import parse_program  # noqa: E402
from evaluator.replay import simulate_one  # noqa: E402
from evolve.views.format import clean_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def last_first_token(arrival_s, ttft_s, failed) -> float:
    """When the last successful request got its first token (s from the run's start)."""
    ok = ~failed
    return float((arrival_s[ok] + ttft_s[ok]).max()) if ok.any() else 0.0


def timeline(arrival_s, ttft_s, e2e_s, failed, gen_len, bin_s: float, end: float, timeout_s: float) -> list[dict]:
    """Per bin of first-token time: successes, their mean per-token time (ms) and the queue
    (arrived, not yet given a first token, not yet given up) at the bin's middle. A failed
    request waits until its E2E (the client's timeout where the data leaves E2E empty)."""
    ok = ~failed
    first = arrival_s + np.where(ok, ttft_s, np.inf)
    gave_up = np.where(np.isfinite(e2e_s), e2e_s, timeout_s)
    gone = arrival_s + np.where(ok, ttft_s, gave_up)  # leaves the queue: first token, or gives up
    per_tok = np.where(ok & (gen_len > 1), (e2e_s - ttft_s) / np.maximum(gen_len - 1, 1) * 1e3, np.nan)
    out = []
    for b0 in np.arange(0.0, end + bin_s, bin_s):
        sel = ok & (first >= b0) & (first < b0 + bin_s)
        mid = b0 + bin_s / 2
        waiting = int(((arrival_s <= mid) & (gone > mid)).sum())
        out.append({"t_s": float(b0), "successes": int(sel.sum()),
                    "per_token_ms": float(np.nanmean(per_tok[sel])) if sel.any() else None,
                    "waiting": waiting})
    return out


def scheduler_call_ms(data_dir: Path) -> dict[str, dict]:
    """Median and 90th percentile of the measured schedule() wall time per experiment, ms."""
    path = data_dir / "steps" / "step_durations_test.csv"
    if not path.exists():
        return {}
    import pandas as pd
    d = pd.read_csv(path)
    return {e: {"median_ms": float(g.duration_us.median()) / 1e3, "p90_ms": float(g.duration_us.quantile(0.9)) / 1e3,
                "rows": int(len(g))} for e, g in d.groupby("experiment_id")}


def run(data: str | None, program_path: str, bin_s: float) -> dict:
    gt = load(data)
    ev = Evaluator(gt)
    prog = parse_program(Path(program_path).read_text())
    split = make_split(ev.exps, "long")
    res = split_evaluation(ev, prog, split)
    if not res.valid:
        return {"program": program_path, "error": res.error}
    f = prog.compiled()
    spread = not SPREAD_NAMES.isdisjoint(prog.params)
    sched = scheduler_call_ms(Path(gt.source)) if data else {}
    runs = []
    for e in ev.exps:
        if e.id not in split.report:
            continue
        wl = ev.wl[e.id]
        c = ev.consts_for(e, res.constants)
        r = simulate_one(ev, f, c, e, spread=spread)
        arrival = wl.arrival_us / 1e6
        meas_failed = wl.measured_failed if wl.measured_failed is not None else np.zeros(len(arrival), bool)
        sim_ttft, sim_e2e = r.ttft_us / 1e6, r.e2e_us / 1e6
        end = max(last_first_token(arrival, wl.measured_ttft_s, meas_failed),
                  last_first_token(arrival, sim_ttft, r.aborted))
        meas = timeline(arrival, wl.measured_ttft_s, wl.measured_e2e_s, meas_failed, wl.gen_len, bin_s, end, wl.timeout_us / 1e6)
        sim = timeline(arrival, sim_ttft, sim_e2e, r.aborted, wl.gen_len, bin_s, end, wl.timeout_us / 1e6)
        runs.append({"experiment": e.id, "model": e.model, "measured": meas, "simulated": sim,
                     "failed_measured": float(meas_failed.mean()), "failed_simulated": float(r.aborted.mean()),
                     "scheduler_call": sched.get(e.id)})
    return {"program": program_path, "fitted_on": "the short workloads (long-decode split)", "bin_s": bin_s,
            "runs": runs}


def _cell(row) -> str:
    tok = "—" if row["per_token_ms"] is None else f"{row['per_token_ms']:.1f}"
    return f"{tok:>6s} {row['waiting']:6d}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("program", nargs="?", default=str(ROOT / "seeds" / "roofline.py"))
    ap.add_argument("--data", default=None)
    ap.add_argument("--bin", type=float, default=100.0, help="seconds of first-token time per row")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    out = run(a.data, a.program, a.bin)
    if a.json:
        print(json.dumps(clean_json(out), indent=1))
        return 0
    if "error" in out:
        print(f"{a.program}: invalid under the long-decode split: {out['error']}")
        return 1
    print(f"{a.program}, constants fitted on {out['fitted_on']}")
    for run_ in out["runs"]:
        sc = run_["scheduler_call"]
        sc_txt = f"; schedule() wall time median {sc['median_ms']:.1f} ms, p90 {sc['p90_ms']:.1f} ms" if sc else ""
        print(f"\n{run_['experiment']}: failed measured {100 * run_['failed_measured']:.1f}%, simulated "
              f"{100 * run_['failed_simulated']:.1f}%{sc_txt}")
        print(f"  {'first token s':>13s}  {'measured ms/tok':>15s} {'queue':>6s}  {'simulated ms/tok':>16s} {'queue':>6s}")
        for m, s in zip(run_["measured"], run_["simulated"]):
            print(f"  {m['t_s']:13.0f}  {_cell(m):>22s}  {_cell(s):>23s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
