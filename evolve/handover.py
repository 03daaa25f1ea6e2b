"""The program a run hands over, chosen on its worst fit start (issue 29: "says where it holds").

A program's constants are fitted locally (SciPy's trust region from its declared constants), and
some programs have optima of nearly equal training loss that extrapolate apart: the trace run of
2026-11-27 handed over #476, 0.3% off on codellama's reasoning workload from one basin and 16.9%
from the other, depending on which step rows the fit read. The figure a user was shown held for
one start point only.

So at the end of a run (and on `evolve handover RUN`), the HANDOVER_SHORTLIST programs first in
`Archive.best_transfer`'s order are fitted again from `starts - 1` seeded start points each
(`evaluator.fit_starts`: log-normal multiples of the declared constants), every held-out split
scored; each program's regimes are then taken at their worst over its valid starts
(`fit_starts.worst_objectives`), and the hand-over is the shortlisted program whose worst-start
figures give up least against the run's ideal point (`evaluator.objectives.handover_regrets`,
the ideal from the declared-start figures of every program the rule chose among; ties: the
declared-start order). A program with no constants, or one that lands in the same basin from
every start, keeps its figures.

The start evaluations run on the run's executor, as the search's candidates do: a screen, then
its held-out splits as jobs of their own (`evolve run` keeps the search's workers up for them:
a new pool made the shared states again, ~15-20 s of both cores idle). Each program's starts
are written to its evaluation (`Archive.set_fit_starts`) as soon as they are all in, so a
killed hand-over loses only the programs in flight, and a `--resume` takes the stored ones.
"""
from __future__ import annotations

from collections.abc import Callable

from evaluator.fit_starts import spread, start_points, start_record, worst_objectives
from evaluator.objectives import handover_regrets, has_heldout, regime_errors
from evaluator.program import ProgramError, parse_program
from evaluator.records import Evaluation
from evolve.archive import Archive
from evolve.config import HANDOVER_SHORTLIST, HANDOVER_STARTS
from evolve.workers import Executor, Job

START_SEED = 0  # the same starts in every run and process


def stored_starts(record: dict, n_starts: int, seed: int = START_SEED) -> list[dict] | None:
    """The start records stored with a program for this many starts and seed, or None."""
    fs = (record.get("evaluation") or {}).get("fit_starts") or {}
    if fs.get("starts") == n_starts and fs.get("seed") == seed and fs.get("records"):
        return fs["records"]
    return None


def choose(shortlist: list[dict], starts: dict[int, list[dict]], ideal: dict) -> tuple[dict, list[float]]:
    """The shortlisted record whose worst-start objectives give up least against `ideal`, and
    every shortlisted program's worst-start regret (in shortlist order; ties: the earlier)."""
    worst = [worst_objectives(r["objectives"], starts.get(r["id"]) or []) for r in shortlist]
    regrets = handover_regrets(worst, ideal)
    best = min(range(len(shortlist)), key=lambda i: (regrets[i], i))
    return shortlist[best], regrets


def hand_over(archive: Archive, run_id: str, pool_factory: Callable[[], Executor], n_starts: int = HANDOVER_STARTS,
              usable: Callable[[dict], bool] | None = None, shortlist_size: int = HANDOVER_SHORTLIST,
              say: Callable[[str], None] | None = None) -> dict | None:
    """Choose, fix (`Archive.set_recommended`) and return the program `run_id` hands over.
    `pool_factory()` gives the executor the start evaluations run on (asked only when some
    are missing; closed by the caller). n_starts <= 1, or a run without held-out objectives:
    the declared-start choice, as `Archive.best_transfer` makes it."""
    shortlist, ideal = archive.transfer_shortlist(run_id, usable=usable, n=max(1, shortlist_size))
    if not shortlist:
        archive.set_recommended(run_id, None)
        return None
    if n_starts <= 1 or not has_heldout(shortlist[0]["objectives"]):
        archive.set_recommended(run_id, shortlist[0]["id"])
        return shortlist[0]
    starts = {r["id"]: s for r in shortlist if (s := stored_starts(r, n_starts)) is not None}
    todo = [r for r in shortlist if r["id"] not in starts]
    if todo:
        if say:
            say(f"hand-over: fitting {len(todo)} of the {len(shortlist)} best programs again from {n_starts} start "
                f"points each, to choose on their worst start")
        starts.update(_evaluate_starts(archive, todo, n_starts, pool_factory))
    best, _ = choose(shortlist, starts, ideal)
    archive.set_recommended(run_id, best["id"])
    return archive.program(best["id"])


def _evaluate_starts(archive: Archive, todo: list[dict], n_starts: int,
                     pool_factory: Callable[[], Executor]) -> dict[int, list[dict]]:
    """Fit each program of `todo` from its extra start points on the executor (started only if
    some program has constants); store and return each program's start records (start 0: its
    archived evaluation) as soon as all of them are in.

    Each start runs as the search runs a candidate: a screen (the in-sample fit from that start),
    then a full job carrying it, which an executor with held-out splits cuts into one job per
    split, before the screens still waiting (so a kill loses the programs in flight, not every
    start). The result is the one a whole full job makes (`Executor._join`, bit for bit: the
    README job's four programs' stored starts are identical), and the split jobs keep every
    worker busy to the end: 12 whole jobs of 3-13 s could keep at most 12 workers busy, and the
    longest decided when the last finished."""
    programs, screens, owner, got, out = {}, [], {}, {}, {}
    for rec in todo:
        try:
            program = parse_program(rec["source"])
        except ProgramError:  # archived as valid, so not expected; such a program keeps one start
            program = None
        points = start_points(program, n_starts, START_SEED) if program is not None else []
        programs[rec["id"]] = (rec, program, points)
        got[rec["id"]] = {}
        for i, x in enumerate(points[1:], 1):
            screens.append(Job(index=len(screens), source=program.with_constants(x), kind="screen", batch=-1))
            owner[screens[-1].index] = (rec["id"], i)
    for pid, (rec, program, points) in programs.items():  # nothing to run: only the declared start
        if len(points) <= 1:
            out[pid] = _store(archive, rec, program, points, {}, n_starts)

    def each(job: Job, res: Evaluation) -> list[Job]:
        if job.kind == "screen" and res.valid:  # its held-out splits next, before other screens
            return [Job(job.index, job.source, "full", res.constants, screen=res, batch=-1)]
        # a full job back, or a start refused in-sample (a whole full job ends the same way)
        pid, i = owner[job.index]
        got[pid][i] = res
        rec, program, points = programs[pid]
        if len(got[pid]) == len(points) - 1:
            out[pid] = _store(archive, rec, program, points, got[pid], n_starts)
        return []

    if screens:
        pool_factory().run(screens, each)
    return out


def _store(archive: Archive, rec: dict, program, points, results: dict[int, Evaluation], n_starts: int) -> list[dict]:
    """The program's start records: start 0 from its archived evaluation, the others from
    `results`; written to the archive with their spread."""
    declared = rec["evaluation"]
    names, x0 = (program.const_names, points[0]) if program is not None and points else ((), ())
    records = [start_record(names, 0, x0, declared["valid"], declared.get("error"), rec["objectives"])]
    records += [start_record(names, i, points[i], results[i].valid, results[i].error, results[i].objectives)
                for i in range(1, len(points))]
    archive.set_fit_starts(rec["id"], {"starts": n_starts, "seed": START_SEED, "records": records,
                                       "spread": spread(records)})
    return records
