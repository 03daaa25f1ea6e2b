"""What a stricter cascade would have saved, and lost, on a recorded run (issue 31, item 3).

Run: .venv/bin/python benchmarks/cascade_tradeoff.py ARCHIVE [--run RUN] [--json]

The cascade screens every candidate (surrogate fit, one simulation) and gives the full
evaluation (every held-out split: ~4x a screen) only to those that would improve their
MAP-Elites cell or are not dominated on (in-sample mean E2E, complexity) by the frontier
(`evolve.search.SearchState.would_enter`). This replays that decision and stricter ones over the
run's candidates in evaluation order, each against the members evaluated before it, and counts
the full evaluations each rule would have spent and the programs of the run's final frontier
(and its recommended program) that the rule would have refused. A first-order estimate: a
stricter screen also changes the parents of later generations, which no replay can tell.
With held-out objectives the screen's in-sample objectives are the stored ones (the full
evaluation starts from the screen's constants and does not refine), so the replay is exact
for the first decision.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.objectives import (IN_SAMPLE_ORDER, has_heldout, in_sample_loss, objective_vector,  # noqa: E402
                                  ranked)
from evolve.search import GATE_ORDER, Member, SearchState, _dominates  # noqa: E402
from evolve.archive import Archive  # noqa: E402
from evolve.pareto import cell_key  # noqa: E402

INVALID = 1e300


def _cell_improves(state: SearchState, o: dict, rec: dict) -> bool:
    cur = state.cells.get(cell_key(rec))
    return cur is None or in_sample_loss(o) < in_sample_loss(cur.objectives)


def _undominated(state: SearchState, o: dict) -> bool:
    order = GATE_ORDER if any(has_heldout(f.objectives) for f in state.frontier) else IN_SAMPLE_ORDER
    v = objective_vector(o, order)
    return not any(_dominates(objective_vector(f.objectives, order), v) for f in state.frontier)


def _near_front(state: SearchState, o: dict, margin: float) -> bool:
    """Mean E2E within `margin` (relative) of the best frontier member no more complex."""
    simpler = [ranked(f.objectives.get("e2e_mean")) for f in state.frontier
               if ranked(f.objectives.get("complexity")) <= ranked(o.get("complexity"))]
    return not simpler or ranked(o.get("e2e_mean")) <= (1.0 + margin) * min(simpler)


def rules():
    """name -> rule(state before the candidate, its in-sample objectives, its record)."""
    return {
        "today (would_enter: cell or undominated)": lambda st, o, r: st.would_enter(o, r),
        "undominated only": lambda st, o, r: _undominated(st, o),
        "improves its cell only": lambda st, o, r: _cell_improves(st, o, r),
        "today and within 50% of the front": lambda st, o, r: st.would_enter(o, r) and _near_front(st, o, 0.5),
        "today and within 20% of the front": lambda st, o, r: st.would_enter(o, r) and _near_front(st, o, 0.2),
        "today and within 5% of the front": lambda st, o, r: st.would_enter(o, r) and _near_front(st, o, 0.05),
    }


def replay(archive: Archive, run_id: str) -> dict:
    """Each rule's full evaluations and final-frontier programs refused, replayed in order."""
    recs = [r for r in archive.evaluations(run_id, stage=None) if r.get("objectives")]
    frontier = set(archive.frontier_ids(run_id))
    best = archive.best_transfer(run_id)
    rec_id = best["id"] if best else None
    out = {"run": run_id, "candidates": len(recs), "frontier": len(frontier), "recommended": rec_id,
           "full_evaluations_recorded": sum(r["stage"] == "full" for r in recs), "rules": []}
    for name, rule in rules().items():
        state = SearchState()
        spent, lost, rec_lost = 0, 0, False
        for r in recs:
            o = r["objectives"]
            seed = r["operator"] == "seed"  # seeds are fully evaluated whatever the rule
            if r["stage"] != "full" and not seed:
                continue  # screened only in the run: refused by every rule at least as strict
            if seed or rule(state, {k: v for k, v in o.items() if k in IN_SAMPLE_ORDER}, r):
                spent += 1
                state.add(Member(r["id"], r, o, 0))
            else:
                lost += r["id"] in frontier
                rec_lost = rec_lost or r["id"] == rec_id
        out["rules"].append({"rule": name, "full_evaluations": spent, "frontier_lost": lost,
                             "recommended_lost": rec_lost})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archive")
    ap.add_argument("--run")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    arch = Archive(a.archive, readonly=True)
    run_id = a.run or arch.runs()[-1]["id"]
    out = replay(arch, run_id)
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"run {out['run']}: {out['candidates']} candidates, {out['full_evaluations_recorded']} full evaluations, "
          f"final frontier {out['frontier']}, recommended #{out['recommended']}")
    print(f"{'rule':45s} {'full evals':>10s} {'frontier lost':>14s} {'recommended lost':>17s}")
    for r in out["rules"]:
        print(f"{r['rule']:45s} {r['full_evaluations']:10d} {r['frontier_lost']:14d} {str(r['recommended_lost']):>17s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
