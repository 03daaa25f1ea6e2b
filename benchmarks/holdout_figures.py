"""Held-out figures of the seeds and baselines, and the cost of a full evaluation with them.

Run: .venv/bin/python benchmarks/holdout_figures.py [--data DIR] [--archive PATH [--top N]]
Prints, per program, mean / worst E2E, TTFT and per-token error in % on the in-sample time split
and under leave-one-workload-out, leave-one-model-out and leave-high-load-out, the LOMO error per
held-out model, and seconds per full evaluation without and with the held-out splits (seeds).
--always-hit replays every prompt seen before as a cache hit (the simulator before vLLM's LRU
block pool, issue 17's "before"); the default is the faithful pool. --focus names experiments
(substring) whose in-sample stage rows are printed too (default: llama-2-7b general).
--archive: also the best N programs of the archive's newest run by what it ranks on (the mean
of the held-out E2E errors), read from their stored evaluations (the judge is not run again),
with their formula. Asserts nothing (figures, not tests).
"""
from __future__ import annotations

import argparse
import dataclasses
import time

from evaluator.baselines import BASELINES, evaluate_baseline
from evaluator.data import load
from evaluator.evaluate import Evaluator
from evaluator.objectives import selection_loss
from evaluator.program import parse_program
from evolve.views.holdout_table import holdout_summary, split_errors
from seeds import seed_sources


def _cells(ev) -> str:
    def f(r):
        return "/".join("inv" if r[k] is None or r[k] == float("inf") else f"{100 * r[k]:.1f}"
                        for k in ("e2e", "e2e_worst", "ttft", "itl"))
    rows = {r["kind"]: f(r) for r in holdout_summary(ev)}
    lomo = {k: round(100 * v, 1) for k, v in split_errors(ev).items() if k.startswith("model:")}
    return " | ".join(f"{k} {v}" for k, v in rows.items()) + f" | LOMO per model {lomo}"


def _focus(ev, needle: str) -> str:
    """In-sample E2E / TTFT / per-token error (%) of the focus experiment's reported stages."""
    cells = [f"stage {r['stage']} {100 * r['e2e_err']:.1f}/{100 * r['ttft_err']:.1f}/{100 * r['itl_err']:.1f}"
             f" hit {r.get('hit_rate', float('nan')):.2f}"
             for r in ev.rows if needle in r["experiment"]]
    return f"    {needle} in-sample (E2E/TTFT/ITL %): " + ("; ".join(cells) or "-")


def _archive_best(path: str, top: int) -> None:
    """The newest run's best full evaluations by `selection_loss`, from the stored records."""
    from evolve.archive import Archive
    a = Archive(path, readonly=True)
    run = a.runs()[-1]["id"]
    recs = [a.program(r["id"]) for r in a.evaluations(run, stage="full") if r.get("eval_valid")]
    recs.sort(key=lambda r: (selection_loss(r["objectives"]), r["id"]))
    for r in recs[:top]:
        ev = r["evaluation"]
        print(f"run {run} program #{r['id']} (complexity {r['objectives']['complexity']:.0f}): {_cells(ev)}")
        print("    " + r["source"].strip().replace("\n", "\n    "))
    a.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=None, help="ground-truth dir (default: the embedded default)")
    ap.add_argument("--always-hit", action="store_true", help="prompts seen before always hit the cache")
    ap.add_argument("--focus", default="llama-2-7b-tp1-general")
    ap.add_argument("--archive", default=None, help="also report the best programs of this archive's newest run")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--skip-seeds", action="store_true", help="only the archive's programs")
    args = ap.parse_args()
    if args.archive:
        _archive_best(args.archive, args.top)
        if args.skip_seeds:
            return
    gt = load(args.data)
    t = time.perf_counter()
    ev = Evaluator(gt)
    if args.always_hit:
        ev.wl = {k: dataclasses.replace(w, prompt_id=None, group_id=None) for k, w in ev.wl.items()}
    print("prefix cache:", "always-hit" if args.always_hit else "vLLM LRU block pool")
    ev.reference_states()
    print(f"reference states {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    ev.split_reference(False)
    ev.split_reference(True)
    print(f"held-out reference states {time.perf_counter() - t:.1f} s")
    for name, src in sorted(seed_sources().items()):
        p = parse_program(src)
        t = time.perf_counter()
        ev.evaluate(p)
        t_full = time.perf_counter() - t
        t = time.perf_counter()
        res = ev.evaluate(p, heldout=True)
        print(f"seed {name}: full {t_full:.2f} s, with held-out {time.perf_counter() - t:.2f} s | {_cells(res)}")
        print(_focus(res, args.focus))
    ev.holdout_objectives = True
    for name in BASELINES:
        res = evaluate_baseline(ev, name)
        print(f"baseline {name}: {_cells(res)}" + (f" (invalid: {res.error})" if not res.valid else ""))
        print(_focus(res, args.focus))


if __name__ == "__main__":
    main()
