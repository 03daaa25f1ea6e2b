"""The evaluator's held-out views: the judge under each `evaluator.holdout.Split`.

A view is a shallow copy of the evaluator that shares its workloads, step rows and model
vectors, fits on reference states calibrated per experiment on the split's fitted part alone
(`judge_states.split_reference`) and keeps fitting caches of its own. Views are made once per
split and kept on the evaluator; `prepare_heldout` makes every one a run uses up front.
"""
from __future__ import annotations

import copy
import time
from dataclasses import replace

import numpy as np

from evaluator.branches import conditionals, unsupported_branches
from evaluator.holdout import KINDS, Split, reuses_main_overheads, split_by_label, split_evaluation, splits_of
from evaluator.judge_data import JudgeData
from evaluator.judge_states import (branch_states, fit_caches, prepare, reference_states,
                                    released, split_reference, take_caches)
from evaluator.records import Evaluation


def for_split(judge: JudgeData, split: Split, simulate_fit: bool = True):
    """A view of `judge` under `split`, sharing its workloads, step rows and reference states
    (made once per split and kept). simulate_fit=False simulates only the held-out
    experiments (their request overheads must then be given to `evaluate`)."""
    key = (split.label, simulate_fit)
    if key not in judge._splits:
        view = copy.copy(judge)
        view.holdout_objectives = False
        view.diagnostics = False
        view._splits = {}
        view._reference = split_reference(judge, lowest_stage=split.kind == "load")
        view.set_split(split)
        if not simulate_fit:
            view.exps = view.report_exps
        judge._splits[key] = view
    return judge._splits[key]


def prepare_heldout(judge: JudgeData) -> None:
    """Make every held-out split's view, with what its fits read (reference and stage
    states, probes, constraints, branch states: `judge_states.prepare`), now: a worker does
    this as it starts (finding it made where it adopted shared states), so the first full
    jobs do not pay it inside their time limit and the split jobs' seconds (which order
    them, `evolve.workers.Executor`) measure the candidate. Views as a run uses them
    (`reuses_main_overheads`)."""
    for split in (s for kind in KINDS for s in splits_of(judge.all_exps, kind)):
        prepare(for_split(judge, split, simulate_fit=not reuses_main_overheads(split)))


def shared_states(judge: JudgeData, heldout: bool) -> dict:
    """Everything a worker would otherwise recompute from the ground truth, made once: what
    the evaluator's fits read of its reference states (`judge_states.prepare`) and, with
    `heldout`, what every held-out view of a run reads (`prepare_heldout`), with the states
    themselves `judge_states.Released` to their step counts. An executor computes them once
    per run and hands them to every worker (`adopt_states`). `judge` keeps its states."""
    prepare(judge)
    out = {"reference": released(reference_states(judge)), "caches": {None: fit_caches(judge)}}
    if heldout:
        prepare_heldout(judge)
        out["split"] = {key: released(split_reference(judge, key == "lowest")) for key in ("all", "lowest")}
        out["caches"].update({key: fit_caches(view) for key, view in judge._splits.items()})
    return out


def adopt_states(judge: JudgeData, shared: dict) -> None:
    """Take what `shared_states` made on an evaluator of the same ground truth and train
    fraction: the released states, the evaluator's fitting caches, and its held-out views
    with theirs. Views other than those can no longer be made (their states are released)."""
    judge._reference = shared["reference"]
    judge._split_refs.update(shared.get("split", {}))
    judge._splits = {}
    caches = shared.get("caches", {})
    take_caches(judge, caches.get(None, {}))
    for key, got in caches.items():
        if key is not None:
            take_caches(for_split(judge, split_by_label(judge.all_exps, key[0]), simulate_fit=key[1]), got)


def evaluate_split(judge: JudgeData, program, label: str, main_overheads: dict | None = None) -> Evaluation:
    """One held-out split of a full evaluation, named by its label (`Split.label`), as an
    executor's worker runs it (`evaluator.holdout.split_evaluation`); `main_overheads`: the
    in-sample evaluation's request overheads (LOMO takes the other models' mean)."""
    t0 = time.perf_counter()  # the split view's first use makes its reference states too
    res = split_evaluation(judge, program, split_by_label(judge.all_exps, label), main_overheads)
    return replace(res, seconds=time.perf_counter() - t0)


def extrapolating_branches(view: JudgeData, program, constants: dict) -> list[str]:
    """The program's conditionals that never switched on the states these constants were
    fitted on (this view's fitted experiments: reference states and step rows) but take
    their other way on its reported experiments' states (`evaluator.branches`)."""
    if not conditionals(program):
        return []
    consts = {k: np.asarray(v, np.float64) for k, v in constants.items()}
    fitted, held = [], []
    for e in view.fit_exps:
        c = view.consts_for(e, consts)
        X = branch_states(view, e, "fit")
        if c is not None and len(X):
            fitted.append((X, c))
    for model in sorted({e.model for e in view.fit_exps} & set(view.fit_rows)):
        c = view.consts_for(next(e for e in view.fit_exps if e.model == model), consts)
        rows = view.fit_rows[model]
        if c is not None:
            fitted.append((rows.X[rows.has_target], c))
    for e in view.report_exps:
        c = view.consts_for(e, consts)
        X = branch_states(view, e, "report")
        if c is not None and len(X):
            held.append((X, c))
    return unsupported_branches(program, fitted, held)
