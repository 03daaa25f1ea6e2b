"""The judge: fit a candidate's constants, simulate every experiment, score against measurements.

`Evaluator` is the facade every caller holds; the work is in modules of their own
(docs/architecture.md, "judge"): `judge_data` (the ground truth as the judge reads it, under
its split, which `Evaluator` extends), `judge_states` (reference states, probes and constraints
the fits read), `fit_program` (the fit per group, its refinement and checks), `replay` (every
experiment simulated: a `Replay`; `screen_race`: a screen's, model by model, stopped once it
cannot clear the cascade's gate), `scoring` (from a `Replay` to the `Evaluation`) and
`holdout_views` (the evaluator under each held-out split).

Honest by construction: constants and request overheads are fitted on the training part and
errors are reported on the held-out part. Default split: inside each load stage, requests
(and step rows) in the first `train_fraction` of the stage's time train, the rest test.
Holdouts (`evaluator.holdout.Split`): leave one model out (constants fitted globally on the
other models), leave one workload out (per-model constants fitted on the model's other
workloads) or leave the high load out (fitted on each experiment's lowest-rate stage); the
held-out stages are then scored on all their requests. `holdout_objectives=True` adds all
of them to every evaluation (`evaluator.holdout.holdout_scores`).
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from evaluator import fit_program, holdout_views, judge_states, scoring
from evaluator.components import MEASURED_NAMES, SPREAD_NAMES
from evaluator.fingerprint import fingerprint
from evaluator.holdout import KINDS, Split, holdout_scores
from evaluator.judge_data import JudgeData
from evaluator.records import Evaluation, unpinned, unpinned_reason
from evaluator.screen_gate import Gate
from evaluator.screen_race import gated_replay, stopped_evaluation

__all__ = ["Evaluation", "Evaluator"]


class Evaluator(JudgeData):
    """Fit and score programs on one ground truth (`JudgeData`'s constructor: the split, the
    train fraction, held-out objectives, client timeouts)."""

    def evaluate(self, program, constants: dict[str, list[float]] | None = None,
                 overheads: dict[str, dict] | None = None, fit: bool = True, refine: bool = True,
                 start: dict[str, list[float]] | None = None, heldout: bool | None = None,
                 pinned: bool = False, gate: Gate | None = None) -> Evaluation:
        """Fit (surrogate, then optionally refine on the candidate's own simulation) and score.

        `heldout`: also score the held-out splits, every kind (True) or the kinds named (a
        tuple of `evaluator.holdout.KINDS`); default: the evaluator's `holdout_objectives`. Their
        objectives and detail land in the same Evaluation. The in-sample part is then not
        refined: the held-out fits are surrogate fits on reference states, and the in-sample
        figures they are reported next to (and whose overheads LOWO and LOMO take) are made
        the same way.

        `start`: constants of an earlier surrogate fit of this program (the cascade's screen),
        used instead of repeating that fit; the result is the same whichever worker runs it.

        `pinned`: refuse, right after the fit and before any simulation, a program with a
        constant the data cannot pin (`Evaluation.identifiability` names it; the search's
        screens under `RunConfig.pinned_only`: such a program is never handed over).

        `gate`: what a screen must clear to earn its full evaluation (`evaluator.screen_gate`);
        the screen then stops replaying once it cannot (`evaluator.screen_race`: only its
        record changes, never whether it clears the gate).
        """
        t0 = time.perf_counter()
        heldout = self.holdout_objectives if heldout is None else heldout
        kinds = KINDS if heldout is True else tuple(heldout or ())
        why = fit_program.refusal(self, program)  # no constants can make it a time: before any fit
        if why:
            return scoring.invalid(why, t0)
        f = program.compiled()
        refine = fit and refine and constants is None and not kinds
        wanted = pinned and fit and constants is None and not refine
        consts, why, ident = fit_program.checked_constants(self, program, f, constants, fit, start, wanted)
        surrogate = consts  # what a screen (or a full job started from it) fingerprints
        if why is not None:
            return scoring.invalid(why, t0, consts)
        if unpinned(ident):
            return replace(scoring.invalid(unpinned_reason(ident), t0, consts), identifiability=ident)
        measured, spread = (not names.isdisjoint(program.params) for names in (MEASURED_NAMES, SPREAD_NAMES))
        gate = None if refine or kinds or overheads is not None else gate  # a screen's fitted overheads only
        run, stop = gated_replay(self, f, consts, gate, program, record=refine, measured=measured, spread=spread)
        n_steps = run.n_steps
        if run.error is not None:
            return scoring.invalid(run.error, t0, consts)
        if refine:
            consts, run, more = fit_program.refine(self, program, f, consts, run, measured, spread)
            n_steps += more
        ev = scoring.score(self, f, consts, run, overheads) if stop is None else stopped_evaluation(consts, stop)
        if ev.valid and self.split is None:  # a split view's would be dropped by join_splits
            ev = replace(ev, fingerprint=fingerprint(self, f, surrogate))
        if ev.valid and fit and constants is None and self.diagnostics:
            ev = replace(ev, identifiability=ident or fit_program.identifiability(self, program, consts,
                                                                                   run if refine else None))
        if kinds and ev.valid:
            ev = holdout_scores(self, program, ev, fit=fit and constants is None, overheads=overheads, kinds=kinds)
        return replace(ev, sim_steps=n_steps, seconds=time.perf_counter() - t0,
                       objectives={**ev.objectives, "complexity": float(program.complexity.total)})

    def breakdown(self, program, evaluation: Evaluation) -> list[dict]:
        """Where the time goes, per reported experiment x stage (`scoring.breakdown`)."""
        return scoring.breakdown(self, program, evaluation)

    # -------------------------------------------------------------- held-out views
    def for_split(self, split: Split, simulate_fit: bool = True) -> "Evaluator":
        """This evaluator under `split`, made once (`holdout_views.for_split`)."""
        return holdout_views.for_split(self, split, simulate_fit)

    def evaluate_split(self, program, label: str, main_overheads: dict | None = None) -> Evaluation:
        """One held-out split by its label, as a worker runs it (`holdout_views.evaluate_split`)."""
        return holdout_views.evaluate_split(self, program, label, main_overheads)

    def prepare_heldout(self) -> None:
        """Every split view a run uses, with its fitting states, made now (`holdout_views`)."""
        holdout_views.prepare_heldout(self)

    def extrapolating_branches(self, program, constants: dict) -> list[str]:
        """Conditionals only this view's held-out states switch (`holdout_views`)."""
        return holdout_views.extrapolating_branches(self, program, constants)

    # -------------------------------------------------------------- what the fits read
    def reference_states(self) -> dict[str, np.ndarray]:
        """The calibrated roofline's batch states, made once (`judge_states.reference_states`)."""
        return judge_states.reference_states(self)

    def split_reference(self, lowest_stage: bool) -> dict[str, np.ndarray]:
        """Reference states of the held-out splits (`judge_states.split_reference`)."""
        return judge_states.split_reference(self, lowest_stage)

    def shared_states(self, heldout: bool) -> dict:
        """What a run computes once and hands to every worker (`holdout_views.shared_states`)."""
        return holdout_views.shared_states(self, heldout)

    def adopt_states(self, shared: dict) -> None:
        """Take states made by `shared_states` on an evaluator of the same ground truth."""
        holdout_views.adopt_states(self, shared)

    def grids(self) -> dict[str, np.ndarray]:
        """Extrapolation grid per model, made once (`judge_states.grids`)."""
        return judge_states.grids(self)

    # -------------------------------------------------------------- checks on a program
    def unphysical(self, f, consts: dict, params=()) -> str | None:
        """Why these constants make the program unphysical, or None (`fit_program.unphysical`)."""
        return fit_program.unphysical(self, f, consts, params)

    def kernels_missing(self, program) -> str | None:
        """Why a program reading measured components cannot be scored here, or None."""
        return fit_program.kernels_missing(self, program)
