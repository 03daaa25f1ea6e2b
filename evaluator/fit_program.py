"""Fit a program's constants per fitting group and check what the fit gives.

The surrogate fit (`surrogate_fit`) reads reference states (`judge_states`); the refinement
(`refine`) refits on the candidate's own `Replay` and keeps the refit only where its
training-part loss is not worse; `unphysical` is the physical rules on every group's probes
and grids, `identifiability` which constants the fitting states pin down, `refusal` what stops
a program before any fit. The numerics are `evaluator.fitting`'s.
"""
from __future__ import annotations

import numpy as np

from evaluator import physics
from evaluator.components import COMPONENTS, MEASURED_NAMES
from evaluator.fitting import fit_constants, subsample
from evaluator.identify import program_identifiability
from evaluator.judge_data import JudgeData
from evaluator.judge_states import constraints, grids, probe, reference_stage_states, stage_states
from evaluator.program_grad import compiled_gradient
from evaluator.records import UNPHYSICAL
from evaluator.replay import Replay, replay
from evaluator.scoring import train_loss

IDENTIFY_ROWS = 5000  # evenly spaced fitting states for the identifiability report (~20 ms a group)


def kernels_missing(data: JudgeData, program) -> str | None:
    """Why a program that reads measured components cannot be scored here (their values would
    be NaN: no kernel tables for some model), else None."""
    if MEASURED_NAMES.isdisjoint(program.params):
        return None
    return next((e.kernel_missing for e in data.all_exps if e.kernels is None), None)


def refusal(data: JudgeData, program) -> str | None:
    """Why no constants can make this program a usable step time here, before any fit: a
    measured component without kernel tables, or a form that cannot be a time."""
    return kernels_missing(data, program) or program.units_violation()


def checked_constants(data: JudgeData, program, f, constants, fit: bool, start,
                      wanted: bool) -> tuple[dict, str | None, dict | None]:
    """The constants to simulate first and their checks: (constants, why unphysical or None,
    the screen's identifiability or None). Constants given, the declared ones (fit=False) or an
    earlier surrogate fit's (`start`, the cascade's screen) are checked whole; a fit made now is
    `checked_fit` (it stops at the first group that refuses the program)."""
    groups = data.groups()
    if constants is not None:
        consts = {k: np.asarray(v, np.float64) for k, v in constants.items()}
    elif not fit:
        consts = {k: program.initial_constants.copy() for k in groups}
    elif start is not None and set(start) >= set(groups):
        consts = {k: np.asarray(start[k], np.float64) for k in groups}
    else:
        return checked_fit(data, program, f, wanted)
    why = unphysical(data, f, consts, program.params)
    return consts, why, None if why else screen_identifiability(data, program, consts, wanted)


def surrogate_fit(data: JudgeData, program, f) -> dict[str, np.ndarray]:
    """Constants per fitting group, fitted on the reference states, step rows and constraints."""
    return {key: _fit_group(data, program, f, key, exps) for key, exps in data.groups().items()}


def _fit_group(data: JudgeData, program, f, key: str, exps) -> np.ndarray:
    """One fitting group's surrogate fit (`surrogate_fit`)."""
    st = [s for e in exps for s in reference_stage_states(data, e)]
    x, _ = fit_constants(f, compiled_gradient(program), program.initial_constants, st, data.rows_for(exps),
                         constraints(data, key, exps).for_program(program.params))
    return x


def checked_fit(data: JudgeData, program, f, pinned: bool) -> tuple[dict, str | None, dict | None]:
    """`surrogate_fit`, each group checked as soon as it is fitted, so a refused program costs
    the groups up to the first that refuses it, not all (issue 31: a quarter of a run's screens
    are refused after their fit, most on the first group). (constants, why, identifiability).

    The order is `unphysical`'s (sorted groups), and each group's physical rules come before its
    identifiability: an unphysical program gets the very reason `unphysical` gives after a whole
    fit. `pinned` (`screen_identifiability`'s `wanted`): a group with a constant the data cannot
    pin ends it too; its reason then names the groups fitted so far (a later group could have
    been unphysical: the program is refused either way). Constants, when all groups pass, are
    `surrogate_fit`'s bit for bit."""
    consts: dict[str, np.ndarray] = {}
    ident: dict[str, dict] | None = {} if pinned and data.diagnostics else None
    by_model = grids(data)
    for key, exps in sorted(data.groups().items()):
        consts[key] = _fit_group(data, program, f, key, exps)
        why = _group_unphysical(data, f, key, exps, consts[key], program.params, by_model)
        if why:
            return consts, why, ident
        if ident is not None and program.constants:
            ident[key] = _group_identifiability(data, program, exps, consts[key], None)
            if ident[key]["unpinned"]:
                return consts, None, ident
    return {key: consts[key] for key in data.groups()}, None, ident


def refine(data: JudgeData, program, f, consts: dict, first: Replay, measured: bool,
           spread: bool) -> tuple[dict, Replay, int]:
    """Refit on the candidate's own batch states (`first`, recorded), simulate again, and keep
    the refit only where it pays: its training-part loss must not be worse (a refit can tip a
    near-saturated stage into a runaway queue), nor may it break a physical rule.
    (constants, replay, steps the second replay simulated)."""
    new = {}
    for key, exps in data.groups().items():
        st = [s for e in exps for s in stage_states(data, e, first.results[e.id].states)]
        new[key], _ = fit_constants(f, compiled_gradient(program), consts[key], st, data.rows_for(exps),
                                    constraints(data, key, exps).for_program(program.params))
    if unphysical(data, f, new, program.params) is not None:
        return consts, first, 0
    second = replay(data, f, new, record=False, measured=measured, spread=spread)
    if second.error is None and train_loss(data, f, new, second) <= train_loss(data, f, consts, first):
        return new, second, second.n_steps
    return consts, first, second.n_steps


def unphysical(data: JudgeData, f, consts: dict, params=()) -> str | None:
    """Why these constants make the program unphysical (`evaluator.physics`), or None:
    below the hardware floor or above its ceiling on a probe state or the grid, or faster
    with more work."""
    by_model = grids(data)
    for key, exps in sorted(data.groups().items()):
        c = consts.get(key)
        if c is not None:
            why = _group_unphysical(data, f, key, exps, c, params, by_model)
            if why:
                return why
    return None


def _group_unphysical(data: JudgeData, f, key, exps, c, params, by_model) -> str | None:
    """`unphysical` of one fitting group's constants `c`."""
    models = data.models_of(key, exps)
    why = (physics.check_program(f, c, probe(data, key, exps), None)
           or physics.check_by_model(f, {m: c for m in models}, None, {m: by_model[m] for m in models},
                                     physics.measured_read(params)))
    return f"{UNPHYSICAL}{why}" if why else None


def screen_identifiability(data: JudgeData, program, consts, wanted: bool) -> dict[str, dict] | None:
    """`identifiability` on the reference states, made before any simulation where `wanted` (a
    screen that refuses an unpinned program, `Evaluator.evaluate(pinned=True)`) and the judge
    keeps diagnostics; else None. It is the one the evaluation then stores."""
    return identifiability(data, program, consts, None) if wanted and data.diagnostics else None


def identifiability(data: JudgeData, program, consts, fitted_on: Replay | None) -> dict[str, dict]:
    """Per fitting group: which constants the fitting states pin down (`evaluator.identify`),
    on the states the fit saw (the candidate's own when refined, `fitted_on`; else the
    reference) plus the real step rows with a measured cycle."""
    if not program.constants:
        return {}
    return {key: _group_identifiability(data, program, exps, consts[key], fitted_on)
            for key, exps in sorted(data.groups().items()) if key in consts}


def _group_identifiability(data: JudgeData, program, exps, c, fitted_on: Replay | None) -> dict:
    """`identifiability` of one fitting group's constants `c`."""
    parts = []
    for e in exps:
        if fitted_on is not None and len(fitted_on.results[e.id].states):
            parts += [st.X for st in stage_states(data, e, fitted_on.results[e.id].states)]
        else:
            parts += [st.X for st in reference_stage_states(data, e)]
    parts += [r.X[r.train & r.has_target] for r in data.rows_for(exps)]
    X = np.vstack(parts) if parts else np.zeros((0, len(COMPONENTS)))
    X = np.ascontiguousarray(X[subsample(len(X), IDENTIFY_ROWS)])
    ident = program_identifiability(program, c, X)
    return {"rank": ident.rank, "n_constants": ident.n_constants, "unpinned": ident.unpinned(),
            "summary": ident.summary()}
