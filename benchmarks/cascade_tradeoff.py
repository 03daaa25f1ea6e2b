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

It then says what today's full evaluations bought (improved their cell / entered the frontier
only / neither) and replays races, the other lever: a full evaluation that scores some held-out
splits first and stops once the candidate can no longer improve its cell (its worst regime so
far is at least the cell elite's selection loss) and a frontier member is no worse on the
regimes known and complexity; the CPU it saves is the share of the splits left unscored
(`RACES`, measured).

Recorded 2026-11-27 (embedded default, seed 0 at 00c78f9 / seed 1 at 62ec977, 2,000 proposals):
  full evaluations bought: 58 / 63 cell improvements, 187 / 133 frontier entries only, 138 / 137 neither
  race: long decode + overload first        stops 245 / 216, 42% of full-evaluation CPU, loses 121 of 212 / 60 of 105 final-frontier programs
  race: long decode + overload + LOMO first stops 222 / 195, 26%, loses 99 / 40
  race: LOMO first                          stops 44 / 30, 5-7%, loses 15 / 3
  none loses the recommended program. Not adopted: a third of the full evaluations buy
  nothing, but no rule over partial evidence finds them without losing frontier programs
  that are undominated on the splits it has not scored.

Adopted 2026-11-28 ("today" above, `RunConfig.pinned_only`): a screen with a constant the data
cannot pin (`evaluator.identify`, on the reference states, the same constants and states as the
full evaluation's check) gets no full evaluation; the run refuses it right after its fit. The
hand-over never takes such a program while a pinned one exists, so the frontier programs this
rule refuses are exactly the unpinned ones. Replayed on the recorded runs (first order: the
replay cannot admit a screen the run refused, which the sparser frontier would let through):
  README job (3468e9c, seed 0): 427 -> 94 full evaluations, 97 of 123 frontier programs lost,
                                recommended #1173 kept; the unpinned full evaluations were 1,524 of
                                the run's 1,848 full-evaluation seconds
  trace run (9f6d339, seed 0):  499 -> 145, 83 of 142 lost, recommended #772 kept (1,728 of 2,407 s)
Measured by running it (benchmarks/main_job.py, embedded default, seed 0, 2 workers): with the
rule at the cascade only, 248 full evaluations, 1,714 screens only (591 unpinned), 38 twins; with
the refusal before the screen's simulation as well, see benchmarks/main_job.py.

Stricter cell tests. The table recorded here on 2026-11-28 was wrong: the replay handed each
rule the screen's in-sample objectives without `fail_mean`, so a screen's in-sample loss lacked
the failure term its cell's members carried and every screen looked better than them ("a margin
buys nothing": every rule kept nearly every full evaluation). Fixed 2026-11-29 (the failure
objective is part of what a screen has); replayed on the recorded runs (full evaluations kept /
final-frontier programs lost; * loses the recommended program):
                                         README job (1c1b892)        trace run of 2026-11-28 (#652)
  today (would_enter, every constant pinned)   246 / 0               260 / 0
  improves its cell only                       245 / 1               253 / 5
  empty cell, or beats its elite by 5%         134 / 56 *            179 / 25
  empty cell, or beats its elite by 20%         44 / 95 *            106 / 53
  empty cell, or beats every member             88 / 78 *            106 / 59
  would_enter and within 50% of the front      103 / 55 *            203 / 10
  empty cell only                               17 / 102 *            18 / 81 *
  races: LOMO first                            stops 32 (8% of full CPU), loses 3; stops 86 (20%), loses 24
The full evaluations enter on the cell test (245 of 246): a screen beats its cell elite's in-
sample loss, which is easy, since the elite is chosen on held-out errors. Every stricter in-sample
test loses the README job's hand-over (#1343), whose in-sample loss is not its cell's best: on
in-sample evidence alone no rule separates the ~40% of full evaluations that buy nothing (96 of
246 here) from those that enter the frontier. Not adopted.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.objectives import (FAILURE, IN_SAMPLE_ORDER, has_heldout, in_sample_loss, objective_vector,  # noqa: E402
                                  ranked, selection_loss)
from evaluator.records import unpinned  # noqa: E402
from evaluator.screen_gate import dominates as _dominates  # noqa: E402
from evolve.search import GATE_ORDER, Member, SearchState  # noqa: E402
from evolve.archive import Archive  # noqa: E402
from evolve.archive_check import readonly_connect  # noqa: E402
from evolve.pareto import cell_key  # noqa: E402

INVALID = 1e300


def screen_view(objectives: dict) -> dict:
    """What the screen of a recorded full evaluation had: its in-sample objectives, the failure
    objective included (`in_sample_loss` reads it; without it every screen looked better than its
    cell's members by their failure term, the error in this file's 2026-11-28 table)."""
    return {k: v for k, v in objectives.items() if k in (*IN_SAMPLE_ORDER, FAILURE)}


def _cell_improves(state: SearchState, o: dict, rec: dict, margin: float = 0.0) -> bool:
    """An empty cell, or an in-sample loss below (1 - margin) x the cell elite's (margin 0: the
    cell half of `SearchState.would_enter`)."""
    cur = state.cells.get(cell_key(rec))
    return cur is None or in_sample_loss(o) < (1.0 - margin) * in_sample_loss(cur.objectives)


def _cell_best_in_sample(state: SearchState, o: dict, rec: dict) -> bool:
    """An empty cell, or an in-sample loss below every cell member's (not only the elite's,
    which is chosen on held-out errors and so is often beaten in-sample by any screen)."""
    key = cell_key(rec)
    losses = [in_sample_loss(m.objectives) for m in state.members if cell_key(m.program) == key]
    return not losses or in_sample_loss(o) < min(losses)


def _undominated(state: SearchState, o: dict) -> bool:
    order = GATE_ORDER if any(has_heldout(f.objectives) for f in state.frontier) else IN_SAMPLE_ORDER
    return not _dominated_on(state, o, order)


def _near_front(state: SearchState, o: dict, margin: float) -> bool:
    """Mean E2E within `margin` (relative) of the best frontier member no more complex."""
    simpler = [ranked(f.objectives.get("e2e_mean")) for f in state.frontier
               if ranked(f.objectives.get("complexity")) <= ranked(o.get("complexity"))]
    return not simpler or ranked(o.get("e2e_mean")) <= (1.0 + margin) * min(simpler)


def _dominated_on(state: SearchState, o: dict, order: tuple[str, ...]) -> bool:
    """Whether a frontier member is no worse than `o` on `order`, and better on one."""
    v = objective_vector(o, order)
    return any(_dominates(objective_vector(f.objectives, order), v) for f in state.frontier)


def _race_stops(state: SearchState, o: dict, rec: dict, keys: tuple[str, ...]) -> bool:
    """A race that scores the splits holding `keys` first would stop here: the candidate can no
    longer improve its cell (its worst regime so far is at least the elite's `selection_loss`,
    which is at least every regime's error) and a frontier member is no worse on what is known."""
    cur = state.cells.get(cell_key(rec))
    known = [ranked(o.get(k)) for k in keys if k in o]
    if cur is None or not known or max(known) <= selection_loss(cur.objectives):
        return False
    return _dominated_on(state, o, (*(k for k in keys if k in o), "complexity"))


# Held-out-first races (item 3's other lever): which splits run first, and the share of a full
# evaluation's CPU the rest costs (measured 2026-11-27 on 6 programs of 6-10 constants of a
# README run, embedded default, CPU seconds of `Evaluator.evaluate_split` per kind: in-sample
# 0.63 s, LOWO 1.29 s, LOMO 0.80 s, high load 0.39 s, long decode 0.61 s of 3.71 s in all).
RACES = {
    "race: long decode + overload first": (("long_e2e", "overload_fail"), (1.29 + 0.80 + 0.39) / 3.71),
    "race: long decode + overload + LOMO first": (("long_e2e", "overload_fail", "lomo_e2e"), (1.29 + 0.39) / 3.71),
    "race: LOMO first": (("lomo_e2e",), (1.29 + 0.39 + 0.61) / 3.71),
}


def rules():
    """name -> rule(state before the candidate, its in-sample objectives, its record)."""
    return {
        "before 2026-11-28 (would_enter: cell or undominated)": lambda st, o, r: st.would_enter(o, r),
        "today (would_enter, every constant pinned)": lambda st, o, r: st.would_enter(o, r) and not r["unpinned"],
        "undominated only": lambda st, o, r: _undominated(st, o),
        "improves its cell only": lambda st, o, r: _cell_improves(st, o, r),
        "empty cell, or beats its elite by 5%": lambda st, o, r: _cell_improves(st, o, r, 0.05),
        "empty cell, or beats its elite by 20%": lambda st, o, r: _cell_improves(st, o, r, 0.20),
        "empty cell only": lambda st, o, r: st.cells.get(cell_key(r)) is None,
        "empty cell, or beats every cell member in-sample": lambda st, o, r: _cell_best_in_sample(st, o, r),
        "would_enter and within 50% of the front": lambda st, o, r: st.would_enter(o, r) and _near_front(st, o, 0.5),
        "would_enter and within 20% of the front": lambda st, o, r: st.would_enter(o, r) and _near_front(st, o, 0.2),
        "would_enter and within 5% of the front": lambda st, o, r: st.would_enter(o, r) and _near_front(st, o, 0.05),
    }


def _identifiability(path) -> dict:
    """program id -> its evaluation's identifiability (what the screen and the full evaluation
    share), read straight from the archive file."""
    con = readonly_connect(path)
    try:
        return {pid: json.loads(v) if v else {} for pid, v in
                con.execute("SELECT program_id, identifiability FROM evaluations")}
    finally:
        con.close()


def _replay_rule(recs, admits, frontier: set, rec_id) -> dict:
    """One promotion rule over the recorded candidates in order: `admits(state, objectives,
    record)` decides each full evaluation of the run (seeds always pass); the members so far
    make the state. Full evaluations spent, final-frontier programs and the recommended one
    refused, and what the admitted ones bought."""
    state = SearchState()
    spent, lost, rec_lost = 0, 0, False
    bought = {"improved_cell": 0, "entered_frontier": 0, "neither": 0}
    for r in recs:
        o = r["objectives"]
        seed = r["operator"] == "seed"  # seeds are fully evaluated whatever the rule
        if r["stage"] != "full" and not seed:
            continue  # screened only in the run: refused by every rule at least as strict
        if seed or admits(state, o, r):
            spent += 1
            entered, improved = state.add(Member(r["id"], r, o, 0))
            if not seed:
                bought["improved_cell" if improved else "entered_frontier" if entered else "neither"] += 1
        else:
            lost += r["id"] in frontier
            rec_lost = rec_lost or r["id"] == rec_id
    return {"full_evaluations": spent, "frontier_lost": lost, "recommended_lost": rec_lost, "bought": bought}


def replay(archive: Archive, run_id: str) -> dict:
    """Each rule's full evaluations and final-frontier programs refused, replayed in order."""
    recs = [r for r in archive.evaluations(run_id, stage=None) if r.get("objectives")]
    ident = _identifiability(archive.path)
    for r in recs:
        r["unpinned"] = bool(unpinned(ident.get(r["id"])))
    frontier = set(archive.frontier_ids(run_id))
    best = archive.best_transfer(run_id)
    rec_id = best["id"] if best else None
    out = {"run": run_id, "candidates": len(recs), "frontier": len(frontier), "recommended": rec_id,
           "full_evaluations_recorded": sum(r["stage"] == "full" for r in recs), "rules": [], "races": []}
    for name, rule in rules().items():
        got = _replay_rule(recs, lambda st, o, r: rule(st, screen_view(o), r), frontier, rec_id)
        out["rules"].append({"rule": name, **got})
    for name, (keys, rest) in RACES.items():
        got = _replay_rule(recs, lambda st, o, r: not _race_stops(st, o, r, keys), frontier, rec_id)
        stopped = out["full_evaluations_recorded"] - got["full_evaluations"]
        out["races"].append({"rule": name, "stopped": stopped, **got,
                             "cpu_saved_share": stopped * rest / max(out["full_evaluations_recorded"], 1)})
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
    print(f"{'rule':53s} {'full evals':>10s} {'frontier lost':>14s} {'recommended lost':>17s}")
    for r in out["rules"]:
        print(f"{r['rule']:53s} {r['full_evaluations']:10d} {r['frontier_lost']:14d} {str(r['recommended_lost']):>17s}")
    b = out["rules"][0]["bought"]
    print(f"what the recorded full evaluations bought: {b['improved_cell']} improved their cell, {b['entered_frontier']} "
          f"entered the frontier only, {b['neither']} neither")
    print(f"{'race (held-out splits first, stop when hopeless)':53s} {'stopped':>10s} {'CPU saved':>10s} "
          f"{'frontier lost':>14s} {'recommended lost':>17s}")
    for r in out["races"]:
        print(f"{r['rule']:53s} {r['stopped']:10d} {100 * r['cpu_saved_share']:9.0f}% {r['frontier_lost']:14d} "
              f"{str(r['recommended_lost']):>17s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
