"""The judge: fit a candidate's constants, simulate every experiment, score against measurements.

Honest by construction: constants and request overheads are fitted on the training part and
errors are reported on the held-out part. Default split: inside each load stage, requests
(and step rows) in the first `train_fraction` of the stage's time train, the rest test.
Holdouts (`evaluator.holdout.Split`): leave one model out (constants fitted globally on the
other models), leave one workload out (per-model constants fitted on the model's other
workloads) or leave the high load out (fitted on each experiment's lowest-rate stage); the
held-out stages are then scored on all their requests. `holdout_objectives=True` adds all
three to every evaluation (`evaluator.holdout.holdout_scores`).

Failed requests (docs/failed_requests.md): every request sent is simulated under the client
timeout; per stage the predicted failure fraction is scored against the measured one (points),
and E2E / TTFT / per-token errors are over the requests that succeeded in the measurement
(none for a stage whose measured requests mostly failed). `fail_mean` joins the objectives
only where the data has failures, so objective vectors on data without them do not change.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import replace

import numpy as np

from evaluator import physics
from evaluator.server_config import sim_limits
from evaluator.components import COMPONENT_INDEX, COMPONENTS, MEASURED_NAMES, MODEL_FIELDS, SPREAD_NAMES
from evaluator.data import GroundTruth, per_token_time
from evaluator.holdout import (KINDS, Split, holdout_scores, make_split, reuses_main_overheads, split_by_label,
                               split_evaluation, splits_of)
from evaluator.fingerprint import fingerprint
from evaluator.fitting import (MAX_STATES_PER_STAGE, Overheads, StageStates, fit_constants, fit_overheads,
                               states_to_components, subsample)
from evaluator.objectives import FAILURE, selection_loss
from evaluator.identify import program_identifiability
from evaluator.program import parse_program
from evaluator.program_grad import compiled_gradient
from evaluator.records import Evaluation, StageScore
from evaluator.simulator import (BREAKDOWN_PARTS, SimResult, cache_stats_by_stage, outcomes_by_stage, simulate,
                                 time_breakdown_by_stage)
from evaluator.step_scoring import build_step_rows, predict_rows, step_metrics
from evaluator.units import units_violation
from evaluator.branches import MAX_ROWS as MAX_BRANCH_ROWS, conditionals, unsupported_branches
from evaluator.workload import build_workload
from seeds import seed_sources

MAX_STEPS = 5_000_000
RUNAWAY_FACTOR = 5
RUNAWAY_MIN_STEPS = 500_000
REFERENCE_SEED = "roofline"  # the physical program whose calibrated states seed every fit
IDENTIFY_ROWS = 5000  # evenly spaced fitting states for the identifiability report (~20 ms a group)
MOSTLY_FAILED = 0.5  # a stage whose measured failure fraction is above this is scored on it alone

def _edge_states(kv_tokens: float, max_len: float = physics.DEFAULT_MAX_MODEL_LEN, max_seqs: int = 128,
                 budget: int = 2048) -> np.ndarray:
    """A grid of batch states at the edges of what a simulation can visit: KV held from one
    block up to what the batch can hold (the cache, or every request at max_model_len);
    prefill chunks up to the token budget, decodes up to max_num_seqs (the experiment's)."""
    out = []
    for P in sorted({p for p in (0, 1, 16, 256, budget) if p <= budget}):
        for n_p in (0, 1, 8):
            if (P == 0) != (n_p == 0) or P < n_p or n_p > max_seqs:
                continue
            for D in sorted({d for d in (0, 1, 8, 64, max_seqs - n_p) if d <= max_seqs - n_p}):
                if P + D == 0:
                    continue
                most = min(kv_tokens, (n_p + D) * max_len)
                for K in sorted({min(k, most) for k in (16.0, 1e4, 1e5, kv_tokens)}):
                    out.append((P, D, n_p, D, n_p + D, K, 0.0))
    return np.array(out, np.float64)


class Evaluator:
    def __init__(self, gt: GroundTruth, train_fraction: float = 0.7, holdout: tuple | Split | None = None,
                 global_fit: bool = False, seed: int = 0, holdout_objectives: bool = False,
                 timeouts: bool = True):
        """holdout: a `Split`, or ("model" | "workload", name) / ("load", None) for one.
        holdout_objectives: score every evaluation under all held-out splits as well.
        timeouts: abort simulated requests at each experiment's client timeout (False: never)."""
        self.gt = gt
        self.timeouts = timeouts
        self.train_fraction = train_fraction
        self.all_exps = list(gt.experiments)
        self.hw = gt.hardware
        self.mv = {e.id: e.model_vec(self.hw) for e in self.all_exps}
        # without the kernel tables: simulating a program that reads no measured component
        # skips their lookups (~0.25 us a step, 7-15% of a full evaluation)
        self.mv_arch = {k: np.ascontiguousarray(v[:len(MODEL_FIELDS)]) for k, v in self.mv.items()}
        self.wl = {e.id: build_workload(e, gt, seed) for e in self.all_exps}
        self.step_rows = build_step_rows(gt, train_fraction)
        self.train_mask = {e.id: self._train_mask(e) for e in self.all_exps}
        self.failed = {e.id: self._failed_mask(e) for e in self.all_exps}
        # the failure objective exists only where some measured request failed
        self.has_failures = any(m.any() for m in self.failed.values()) or \
            any(s.n_failed for e in self.all_exps for s in e.stages)
        self.holdout_objectives = holdout_objectives
        # diagnostics nobody reads in a held-out split's view (`for_split`): which constants the
        # data pins down, and the per-experiment step MAPE and rank correlation (a split's
        # Evaluation contributes its rows, constants and errors only: `holdout.kind_block`)
        self.diagnostics = True
        self._reference: dict[str, np.ndarray] | None = None
        self._grids: dict[str, np.ndarray] | None = None
        self._splits: dict[tuple, "Evaluator"] = {}  # held-out views of this evaluator, made once
        self._split_refs: dict[str, dict[str, np.ndarray]] = {}  # their reference states
        if holdout is not None and not isinstance(holdout, Split):
            holdout = make_split(self.all_exps, *holdout)
        self._set_split(holdout, global_fit)

    def _set_split(self, split: Split | None, global_fit: bool = False) -> None:
        self.split = split
        self.holdout = None if split is None else (split.kind, split.value)
        self.global_fit = global_fit or (split is not None and split.global_fit)
        if split is None:
            self.exps = self.fit_exps = self.report_exps = self.all_exps
        else:
            self.exps = [e for e in self.all_exps if e.id in split.fit or e.id in split.report]
            self.fit_exps = [e for e in self.all_exps if e.id in split.fit]
            self.report_exps = [e for e in self.all_exps if e.id in split.report]
        self._probe_cache: dict[str, np.ndarray] = {}
        self._ref_states_cache: dict[str, list[StageStates]] = {}
        self._cons_cache: dict[str, physics.Constraints] = {}

    def for_split(self, split: Split, simulate_fit: bool = True) -> "Evaluator":
        """A view of this evaluator under `split`, sharing its workloads, step rows and
        reference states (made once per split and kept). simulate_fit=False simulates only the
        held-out experiments (their request overheads must then be given to `evaluate`)."""
        key = (split.label, simulate_fit)
        if key not in self._splits:
            view = copy.copy(self)
            view.holdout_objectives = False
            view.diagnostics = False
            view._splits = {}
            view._reference = self.split_reference(lowest_stage=split.kind == "load")
            view._set_split(split)
            if not simulate_fit:
                view.exps = view.report_exps
            self._splits[key] = view
        return self._splits[key]

    # -------------------------------------------------------------- splits
    def _train_mask(self, e) -> np.ndarray:
        wl = self.wl[e.id]
        t = wl.arrival_us / 1e6
        cut = np.array([s.start_s + self.train_fraction * s.duration_s for s in e.stages])
        train = t < cut[wl.stage]
        for s in e.stages:  # a burst (every request at one instant) splits by send order instead
            idx = np.flatnonzero(wl.stage == s.index)
            if len(idx) > 1 and t[idx].min() == t[idx].max():
                train[idx] = np.arange(len(idx)) < math.ceil(self.train_fraction * len(idx))
        return train

    def _failed_mask(self, e) -> np.ndarray:
        """Requests that failed in the measurement (none in spec mode: see `_measured_failure`)."""
        wl = self.wl[e.id]
        return np.zeros(len(wl.stage), bool) if wl.measured_failed is None else wl.measured_failed.astype(bool)

    def _measured_failure(self, e, stage, sel) -> float | None:
        """Measured failed fraction of the selected requests of a stage (the stage file's counts
        in spec mode)."""
        if self.wl[e.id].measured_failed is None:
            return e.stages[stage].failed_fraction or 0.0
        return float(self.failed[e.id][sel].mean()) if sel.any() else None

    def _part(self, e, part: str) -> np.ndarray:
        """The requests of experiment `e` in the training or reported part."""
        if self.split is not None:
            stages = (self.split.fit if part == "train" else self.split.report).get(e.id, ())
            return np.isin(self.wl[e.id].stage, stages)
        m = self.train_mask[e.id]
        return m if part == "train" else ~m

    def _measured(self, e, stage, mask) -> tuple[float, float, float]:
        """Measured mean E2E (s), TTFT (s), per-token time (s) of the selected requests."""
        wl = self.wl[e.id]
        st = e.stages[stage]
        sel = mask & (wl.stage == stage) & ~self.failed[e.id]
        if wl.measured_e2e_s is None or not sel.any():
            return st.e2e_s, st.ttft_s, st.itl_s
        e2e, ttft = wl.measured_e2e_s[sel], wl.measured_ttft_s[sel]
        return float(e2e.mean()), float(ttft.mean()), per_token_time(e2e, ttft, wl.gen_len[sel])

    # -------------------------------------------------------------- fitting helpers
    def _stage_states(self, e, states: np.ndarray) -> list[StageStates]:
        out = []
        train = self._part(e, "train")
        for s in e.stages:
            lo, hi = s.start_s * 1e6, (s.start_s + self.train_fraction * s.duration_s) * 1e6
            if self.split is not None:
                if s.index not in self.split.fit.get(e.id, ()):
                    continue
                hi = (s.start_s + s.duration_s) * 1e6
            m = (states[:, 6] >= lo) & (states[:, 6] < hi) & (states[:, 1] > 0)
            idx = np.flatnonzero(m)
            if len(idx) < 10:
                continue
            idx = idx[subsample(len(idx), MAX_STATES_PER_STAGE)]
            st = states[idx]
            fail = self._measured_failure(e, s.index, train & (self.wl[e.id].stage == s.index))
            if fail is not None and fail > MOSTLY_FAILED:
                continue  # its few successes say little about the per-token time
            _, ttft, itl = self._measured(e, s.index, train)
            if not math.isfinite(itl):
                continue
            out.append(StageStates(e.id, s.index, states_to_components(st, self.mv[e.id]),
                                   np.ascontiguousarray(st[:, 1]), itl * 1e6,
                                   np.ascontiguousarray(st[:, 2]), ttft * 1e6))
        return out

    def _reference_stage_states(self, e) -> list[StageStates]:
        """`_stage_states` of the reference states, made once per experiment (every surrogate
        fit and identifiability report reads them)."""
        if e.id not in self._ref_states_cache:
            self._ref_states_cache[e.id] = self._stage_states(e, self.reference_states()[e.id])
        return self._ref_states_cache[e.id]

    def _groups(self) -> dict[str, list]:
        """Fitting groups: one per model, or one for all when fitting globally."""
        g: dict[str, list] = {}
        for e in self.fit_exps:
            g.setdefault("*" if self.global_fit else e.model, []).append(e)
        return g

    def _state_probes(self, e, states: np.ndarray) -> np.ndarray:
        """Components of a subsample of recorded states plus the edge grid of one experiment."""
        st = states[subsample(len(states), 1000)]
        edges = _edge_states(e.kv_blocks * e.block_size, e.max_model_len, e.max_num_seqs, e.max_batched_tokens)
        return np.vstack([states_to_components(st, self.mv[e.id]), states_to_components(edges, self.mv[e.id])])

    def _probes(self, group_exps) -> np.ndarray:
        """Component rows covering what a simulation of these experiments visits."""
        ref = self.reference_states()
        parts = [self._state_probes(e, ref[e.id]) for e in group_exps]
        for rows in self._rows_for(group_exps):
            parts.append(rows.X)  # all of them: validity is checked on every real row
        X = np.vstack(parts)
        work = X[:, COMPONENT_INDEX["P"]] + X[:, COMPONENT_INDEX["D"]]
        return np.ascontiguousarray(X[work > 0])  # a row that computes no token has no floor to hold

    def _rows_for(self, group_exps) -> list:
        models = {e.model for e in group_exps}
        return [self.step_rows[m] for m in sorted(models) if m in self.step_rows]

    def reference_states(self) -> dict[str, np.ndarray]:
        """Batch states from a calibrated roofline-seed simulation, computed once per evaluator."""
        if self._reference is None:
            groups = self._groups()
            self._reference = self._calibrated_states(groups, {e.id: k for k, ex in groups.items() for e in ex})
        return self._reference

    def shared_states(self, heldout: bool) -> dict:
        """Everything a worker would otherwise recompute from the ground truth: the reference
        states, and with `heldout` the held-out splits' reference states. A distributed
        executor computes them once per run and hands them to every worker (`adopt_states`)."""
        out = {"reference": self.reference_states()}
        if heldout:
            out["split"] = {key: self.split_reference(key == "lowest") for key in ("all", "lowest")}
        return out

    def prepare_heldout(self) -> None:
        """Make every held-out split's view, with what its fits read (reference and stage
        states, probes, constraints), now: a worker does this as it starts, so the first full
        jobs do not pay it inside their time limit and the split jobs' seconds (which order
        them, `evolve.workers.Executor`) measure the candidate. Views as a run uses them
        (`reuses_main_overheads`)."""
        for split in (s for kind in KINDS for s in splits_of(self.all_exps, kind)):
            view = self.for_split(split, simulate_fit=not reuses_main_overheads(split))
            for key, exps in view._groups().items():
                for e in exps:
                    view._reference_stage_states(e)
                view._constraints(key, exps)

    def adopt_states(self, shared: dict) -> None:
        """Take states made by `shared_states` on an evaluator of the same ground truth."""
        self._reference = shared["reference"]
        self._ref_states_cache = {}
        self._split_refs.update(shared.get("split", {}))

    def split_reference(self, lowest_stage: bool) -> dict[str, np.ndarray]:
        """Reference states for held-out splits: every experiment calibrated on its own data
        alone (on its lowest-rate stage alone for leave-high-load-out), so the states a split
        fits on carry nothing of the experiments or stages it holds out."""
        key = "lowest" if lowest_stage else "all"
        if key not in self._split_refs:
            exps = [e for e in self.all_exps if len(e.stages) > 1 or not lowest_stage]
            view = copy.copy(self)
            view._set_split(make_split(exps, "load") if lowest_stage else None)
            view.exps = exps
            self._split_refs[key] = view._calibrated_states({e.id: [e] for e in exps}, {e.id: e.id for e in exps})
        return self._split_refs[key]

    def _calibrated_states(self, groups: dict[str, list], key_of: dict[str, str]) -> dict[str, np.ndarray]:
        """Simulate the roofline seed calibrated per group (refitted twice on its own states) and
        record states: the states a physical program visits (a queue builds as for the candidates)."""
        ref = parse_program(seed_sources()[REFERENCE_SEED])
        f, g = ref.compiled(), compiled_gradient(ref)
        consts = {key: ref.initial_constants.copy() for key in groups}
        states = {}
        for rnd in range(3):
            for e in self.exps:
                c = consts.get(key_of.get(e.id), np.mean(list(consts.values()), axis=0))
                r = self._sim(f, c, e, record=True, measured=False, timeouts=self.has_failures)
                if r.ok or rnd == 0:  # keep the earlier round's states if the refit misbehaves
                    states[e.id] = r.states
            if rnd == 2:
                break
            for key, exps in groups.items():
                st = [s for e in exps for s in self._stage_states(e, states[e.id])]
                probes = np.ascontiguousarray(np.vstack([self._state_probes(e, states[e.id]) for e in exps]))
                consts[key], _ = fit_constants(f, g, consts[key], st, [], physics.constraints(probes, []))
        return states

    def _probe(self, key, exps) -> np.ndarray:
        if key not in self._probe_cache:
            self._probe_cache[key] = self._probes(exps)
        return self._probe_cache[key]

    def grids(self) -> dict[str, np.ndarray]:
        """Extrapolation grid per model (`evaluator.physics.extrapolation_grid`), made once."""
        if self._grids is None:
            self._grids = physics.model_grids(self.gt)
        return self._grids

    def _models_of(self, key, exps) -> list[str]:
        """Models a constant vector serves: its group's, and under a global fit every model."""
        return sorted({e.model for e in exps} | {e.model for e in self.exps if self._key(e) == key})

    def _constraints(self, key, exps) -> physics.Constraints:
        """Probe states and the served models' grids, stacked once per fitting group."""
        if key not in self._cons_cache:
            grids = self.grids()
            self._cons_cache[key] = physics.constraints(self._probe(key, exps),
                                                        [grids[m] for m in self._models_of(key, exps)])
        return self._cons_cache[key]

    def unphysical(self, f, consts: dict, params=()) -> str | None:
        """Why these constants make the program unphysical (`evaluator.physics`), or None:
        below the hardware floor on a probe state or the grid, or faster with more work."""
        grids = self.grids()
        for key, exps in sorted(self._groups().items()):
            c = consts.get(key)
            if c is None:
                continue
            models = self._models_of(key, exps)
            why = (physics.check_program(f, c, self._probe(key, exps), None)
                   or physics.check_by_model(f, {m: c for m in models}, None, {m: grids[m] for m in models},
                                             physics.measured_read(params)))
            if why:
                return f"unphysical: {why}"
        return None

    def _key(self, e) -> str:
        return "*" if self.global_fit else e.model

    def _sim(self, f, consts, e, record=False, measured=True, timeouts=True, spread=False) -> SimResult:
        # A candidate needing many times the steps of the calibrated reference predicts
        # step times far too short (requests decode alone): stop it early as a runaway
        # instead of simulating tens of millions of steps.
        limit = MAX_STEPS
        if self._reference is not None:
            limit = max(RUNAWAY_MIN_STEPS, RUNAWAY_FACTOR * len(self._reference[e.id]))
        mv = self.mv[e.id] if measured else self.mv_arch[e.id]
        return simulate(f, consts, mv, self.wl[e.id], e.kv_blocks, e.max_num_seqs,
                        e.max_batched_tokens, e.block_size, max_steps=limit, record=record,
                        timeout_us=self._timeout() if timeouts else 0.0, spread=spread, **sim_limits(e))

    def _timeout(self) -> float | None:
        """The simulate() timeout: each workload's client timeout, or 0 (none) when turned off.
        The reference calibration uses it only on data with failures: its first round runs the
        roofline's uncalibrated constants, which overload two of the 12 real experiments into
        300 s queues that the real server never had (llama-2-7b and mixtral general)."""
        return None if self.timeouts else 0.0

    # -------------------------------------------------------------- main entry
    def evaluate(self, program, constants: dict[str, list[float]] | None = None,
                 overheads: dict[str, dict] | None = None, fit: bool = True, refine: bool = True,
                 start: dict[str, list[float]] | None = None, heldout: bool | None = None) -> Evaluation:
        """Fit (surrogate, then optionally refine on the candidate's own simulation) and score.

        `heldout`: also score the held-out splits, every kind (True) or the kinds named (a
        tuple of `evaluator.holdout.KINDS`); default: the evaluator's `holdout_objectives`. Their
        objectives and detail land in the same Evaluation. The in-sample part is then not
        refined: the held-out fits are surrogate fits on reference states, and the in-sample
        figures they are reported next to (and whose overheads LOWO and LOMO take) are made
        the same way.

        `start`: constants of an earlier surrogate fit of this program (the cascade's screen),
        used instead of repeating that fit; the result is the same whichever worker runs it.
        """
        t0 = time.perf_counter()
        heldout = self.holdout_objectives if heldout is None else heldout
        kinds = KINDS if heldout is True else tuple(heldout or ())
        missing = self.kernels_missing(program)
        if missing:
            return self._invalid(missing, t0)
        dims = units_violation(program)  # no constants can make it a time: refused before any fit
        if dims:
            return self._invalid(dims, t0)
        f = program.compiled()
        x0 = program.initial_constants
        groups = self._groups()
        if constants is not None:
            consts = {k: np.asarray(v, np.float64) for k, v in constants.items()}
        elif not fit:
            consts = {k: x0.copy() for k in groups}
        elif start is not None and set(start) >= set(groups):
            consts = {k: np.asarray(start[k], np.float64) for k in groups}
        else:
            consts = {}
            for key, exps in groups.items():
                st = [s for e in exps for s in self._reference_stage_states(e)]
                consts[key], _ = fit_constants(f, compiled_gradient(program), x0, st, self._rows_for(exps),
                                               self._constraints(key, exps).for_program(program.params))
        refine = fit and refine and constants is None and not kinds
        surrogate = consts  # what a screen (or a full job started from it) fingerprints
        why = self.unphysical(f, consts, program.params)
        if why is not None:
            return self._invalid(why, t0, consts)
        measured = not MEASURED_NAMES.isdisjoint(program.params)
        spread = not SPREAD_NAMES.isdisjoint(program.params)
        results, bad = self._simulate_all(f, consts, record=refine, measured=measured, spread=spread)
        n_steps = sum(r.n_steps for r in results.values())
        if bad is not None:
            return self._invalid(bad, t0, consts)
        if refine:
            # Refinement: refit on the candidate's own batch states, simulate again, and keep
            # the refit only where it pays: its training-part loss must not be worse (a refit
            # can tip a near-saturated stage into a runaway queue).
            new = {}
            for key, exps in groups.items():
                st = [s for e in exps for s in self._stage_states(e, results[e.id].states)]
                new[key], _ = fit_constants(f, compiled_gradient(program), consts[key], st, self._rows_for(exps),
                                         self._constraints(key, exps).for_program(program.params))
            if self.unphysical(f, new, program.params) is None:  # a refit that breaks a physical rule is not kept
                results2, bad2 = self._simulate_all(f, new, record=False, measured=measured, spread=spread)
                n_steps += sum(r.n_steps for r in results2.values())
            else:
                bad2 = "unphysical"
            if bad2 is None and self._train_loss(f, new, results2) <= self._train_loss(f, consts, results):
                consts, results = new, results2
        ev = self._score(f, consts, results, overheads)
        if ev.valid:
            ev = replace(ev, fingerprint=fingerprint(self, f, surrogate))
        if ev.valid and fit and constants is None and self.diagnostics:
            ev = replace(ev, identifiability=self._identifiability(program, consts, results if refine else None))
        if kinds and ev.valid:
            ev = holdout_scores(self, program, ev, fit=fit and constants is None, overheads=overheads, kinds=kinds)
        return replace(ev, sim_steps=n_steps, seconds=time.perf_counter() - t0,
                       objectives={**ev.objectives, "complexity": float(program.complexity.total)})

    def evaluate_split(self, program, label: str, main_overheads: dict | None = None) -> Evaluation:
        """One held-out split of a full evaluation, named by its label (`Split.label`), as an
        executor's worker runs it (`evaluator.holdout.split_evaluation`); `main_overheads`: the
        in-sample evaluation's request overheads (LOMO takes the other models' mean)."""
        t0 = time.perf_counter()  # the split view's first use makes its reference states too
        res = split_evaluation(self, program, split_by_label(self.all_exps, label), main_overheads)
        return replace(res, seconds=time.perf_counter() - t0)

    def _identifiability(self, program, consts, results) -> dict[str, dict]:
        """Per fitting group: which constants the fitting states pin down (`evaluator.identify`),
        on the states the fit saw (the candidate's own when refined, else the reference) plus
        the real step rows with a measured cycle."""
        if not program.constants:
            return {}
        out = {}
        for key, exps in sorted(self._groups().items()):
            if key not in consts:
                continue
            parts = []
            for e in exps:
                if results is not None and len(results[e.id].states):
                    parts += [st.X for st in self._stage_states(e, results[e.id].states)]
                else:
                    parts += [st.X for st in self._reference_stage_states(e)]
            parts += [r.X[r.train & r.has_target] for r in self._rows_for(exps)]
            X = np.vstack(parts) if parts else np.zeros((0, len(COMPONENTS)))
            X = np.ascontiguousarray(X[subsample(len(X), IDENTIFY_ROWS)])
            ident = program_identifiability(program, consts[key], X)
            out[key] = {"rank": ident.rank, "n_constants": ident.n_constants, "unpinned": ident.unpinned(),
                        "summary": ident.summary()}
        return out

    def extrapolating_branches(self, program, constants: dict) -> list[str]:
        """The program's conditionals that never switched on the states these constants were
        fitted on (this view's fitted experiments: reference states and step rows) but take
        their other way on its reported experiments' states (`evaluator.branches`)."""
        if not conditionals(program):
            return []
        consts = {k: np.asarray(v, np.float64) for k, v in constants.items()}
        fitted, held = [], []
        for e in self.fit_exps:
            c = self._consts_for(e, consts)
            if c is not None:
                fitted += [(st.X, c) for st in self._reference_stage_states(e)]
        for model in sorted({e.model for e in self.fit_exps} & set(self.step_rows)):
            c = self._consts_for(next(e for e in self.fit_exps if e.model == model), consts)
            rows = self.step_rows[model]
            if c is not None:
                fitted.append((rows.X[rows.has_target], c))
        ref = self.reference_states()
        for e in self.report_exps:
            c = self._consts_for(e, consts)
            st = ref.get(e.id)
            if c is not None and st is not None and len(st):
                held.append((states_to_components(st[subsample(len(st), MAX_BRANCH_ROWS)], self.mv[e.id]), c))
        return unsupported_branches(program, fitted, held)

    def kernels_missing(self, program) -> str | None:
        """Why a program that reads measured components cannot be scored here (their values would
        be NaN: no kernel tables for some model), else None."""
        if MEASURED_NAMES.isdisjoint(program.params):
            return None
        return next((e.kernel_missing for e in self.all_exps if e.kernels is None), None)

    def _simulate_all(self, f, consts, record=False, measured=True, spread=False) -> tuple[dict[str, SimResult], str | None]:
        """Simulate every experiment; (results, why invalid or None)."""
        results = {}
        for e in self.exps:
            c = self._consts_for(e, consts)
            if c is None:
                return results, f"no constants for model {e.model}"
            r = self._sim(f, c, e, record=record, measured=measured, spread=spread)
            if not r.ok:
                why = ("invalid prediction (NaN, inf or < 1 us)" if r.status == 1 else
                       f"runaway simulation (over {r.n_steps} steps: predicted steps far too short)")
                return results, f"{e.id}: {why}"
            results[e.id] = r
        return results, None

    def _fit_overheads(self, results) -> dict[str, Overheads]:
        """Request overheads per model, fitted on the training requests of the fitted
        experiments that both the measurement and the simulation saw finish; a model with none
        of them (e.g. held out) takes the mean of the others."""
        by_model: dict[str, list] = {}
        for e in self.fit_exps:
            by_model.setdefault(e.model, []).append(e)
        ovh: dict[str, Overheads] = {}
        for model, group in by_model.items():
            groups = []
            for e in group:
                r, wl = results[e.id], self.wl[e.id]
                m = self._part(e, "train")
                served = ~self.failed[e.id] & ~r.aborted
                for s in e.stages:
                    g = m & (wl.stage == s.index) & served  # requests both ends saw finish
                    if not g.any():
                        continue
                    if wl.measured_e2e_s is not None:
                        mt, me = wl.measured_ttft_s[g] * 1e6, wl.measured_e2e_s[g] * 1e6
                    else:  # spec mode: the stage means
                        mt, me = np.full(g.sum(), s.ttft_s * 1e6), np.full(g.sum(), s.e2e_s * 1e6)
                    groups.append((r.ttft_us[g], r.e2e_us[g], mt, me))
            ovh[model] = fit_overheads(groups)
        if ovh:
            mean = Overheads(**{k: float(np.mean([getattr(o, k) for o in ovh.values()]))
                                for k in Overheads().as_dict()})
            for e in self.exps:
                ovh.setdefault(e.model, mean)
        return ovh

    def _train_loss(self, f, consts, results) -> float:
        """`selection_loss` on the training part only."""
        return selection_loss(self._score(f, consts, results, None, part="train").objectives)

    def _consts_for(self, e, consts):
        key = self._key(e)
        if key in consts:
            return consts[key]
        if self.holdout and self.holdout[0] == "model" and "*" in consts:
            return consts["*"]
        return None

    def _invalid(self, why: str, t0: float, consts=None) -> Evaluation:
        return Evaluation.invalid(why, seconds=time.perf_counter() - t0,
                                  constants={k: [float(x) for x in v] for k, v in (consts or {}).items()})

    def _score(self, f, consts, results, overheads_in, part: str = "test") -> Evaluation:
        """Errors per experiment x stage on the reported (held-out) part; part="train" scores
        the fitting experiments' training part instead (no step rows), for model selection."""
        constants = {k: [float(x) for x in v] for k, v in consts.items()}
        scores: list[StageScore] = []
        steps: dict[str, dict] = {}
        # request-level overheads, fitted per model on the training requests
        if overheads_in is not None:
            ovh = {k: Overheads(**v) for k, v in overheads_in.items()}
        else:
            ovh = self._fit_overheads(results)
        overheads = {k: v.as_dict() for k, v in ovh.items()}
        # per experiment x stage errors on the reported part
        train = part == "train"
        for e in (self.fit_exps if train else self.report_exps):
            r, wl, o = results[e.id], self.wl[e.id], ovh[e.model]
            ttft = r.ttft_us + o.queueing_us + o.queueing_per_input_token_us * wl.prompt_len
            e2e = r.e2e_us + o.queueing_us + o.queueing_per_input_token_us * wl.prompt_len \
                + o.output_token_us * wl.gen_len + o.post_decode_us
            timed_out = r.aborted
            if timed_out.any():  # the client saw the timeout, whatever the overheads
                ttft = np.where(timed_out, np.minimum(ttft, r.e2e_us), ttft)
                e2e = np.where(timed_out, r.e2e_us, e2e)
            mask = self._part(e, "train" if train else "test")
            cache = {c["stage"]: c for c in cache_stats_by_stage(r, wl, mask)}  # the reported requests'
            outcome = {c["stage"]: c for c in outcomes_by_stage(r, wl, mask)}
            for s in e.stages:
                every = mask & (wl.stage == s.index)
                if not every.any():
                    continue
                sel = every & ~self.failed[e.id]  # latencies: over the measured successes
                cs, oc = cache.get(s.index, {}), outcome.get(s.index, {})
                mfail = self._measured_failure(e, s.index, every)
                pfail = float(timed_out[every].mean())
                row = {"experiment": e.id, "model": e.model, "workload": e.workload, "stage": s.index,
                       "rate": s.rate, "n_requests": int(every.sum())}
                if sel.any() and not (mfail is not None and mfail > MOSTLY_FAILED):
                    me2e, mttft, mitl = self._measured(e, s.index, mask)
                    pe2e, pttft = float(e2e[sel].mean()) / 1e6, float(ttft[sel].mean()) / 1e6
                    # per-token time over the requests the simulation finished too: a timed-out
                    # request's span (timeout - first token) is no decode measurement and, clamped
                    # at the timeout, hides a simulated step that is too slow (docs/failed_requests.md)
                    both = sel & ~timed_out
                    both = both if both.any() else sel
                    pitl = per_token_time(e2e[both], ttft[both], wl.gen_len[both]) / 1e6
                    row.update({"pred_e2e_s": pe2e, "meas_e2e_s": me2e, "e2e_err": abs(pe2e - me2e) / me2e,
                                "pred_ttft_s": pttft, "meas_ttft_s": mttft, "ttft_err": abs(pttft - mttft) / mttft,
                                "pred_itl_s": pitl, "meas_itl_s": mitl, "itl_err": abs(pitl - mitl) / mitl})
                else:  # mostly failed in the measurement: scored on its failure fraction alone
                    row.update({k: None for k in ("pred_e2e_s", "meas_e2e_s", "e2e_err", "pred_ttft_s",
                                                  "meas_ttft_s", "ttft_err", "pred_itl_s", "meas_itl_s", "itl_err")})
                served = every & ~timed_out  # what the client's summary shows: the successes' TTFT
                row["pred_ttft_served_s"] = float(ttft[served].mean()) / 1e6 if served.any() else None
                row.update({
                    "sim_steps": r.n_steps, "preempted": r.n_preempted,
                    # prefix cache of these requests (None where they have no prompt tokens)
                    "hit_rate": cs.get("hit_rate"), "always_hit_rate": cs.get("always_hit_rate"),
                    "evictions": int(cs.get("evictions", 0)), "preemptions": int(cs.get("preemptions", 0)),
                    # failures: measured and simulated fraction of the stage's requests, error in points
                    "n_failed_meas": int(self.failed[e.id][every].sum()),
                    "finished": int(oc.get("finished", 0)), "timed_out": int(oc.get("timed_out", 0)),
                    "meas_fail": mfail, "pred_fail": pfail,
                    "fail_err_pts": None if mfail is None else 100.0 * abs(pfail - mfail),
                    # server settings no file of the experiment stated (evaluator.server_config)
                    "defaults_used": e.defaults_named,
                })
                scores.append(row)
        # per-step scoring on the real step rows
        report_models = set() if train or (self.split is not None and self.split.kind == "load") \
            else {e.model for e in self.report_exps}
        for model, rows in self.step_rows.items():
            if model not in report_models:
                continue
            e0 = next(e for e in self.exps if e.model == model)
            c = self._consts_for(e0, consts)
            pred = predict_rows(f, rows.X, np.ascontiguousarray(c))
            work = rows.X[:, COMPONENT_INDEX["P"]] + rows.X[:, COMPONENT_INDEX["D"]] > 0  # idle rows run nothing
            if not np.all(np.isfinite(pred[work]) & (pred[work] >= 1.0)):
                return self._invalid(f"invalid prediction on real step rows of {model}", time.perf_counter())
            if self.diagnostics:
                steps.update(step_metrics(pred, rows, "test" if self.holdout is None else "all"))
        timed = [x for x in scores if x["e2e_err"] is not None]  # stages scored on latency
        e2e = [x["e2e_err"] for x in timed]
        mape = [v["step_mape"] for v in steps.values() if math.isfinite(v["step_mape"])]
        objectives = {
            "step_mape": float(np.mean(mape)) if mape else math.nan,
            "e2e_mean": float(np.mean(e2e)) if e2e else math.nan,
            "e2e_worst": float(np.max(e2e)) if e2e else math.nan,
            "ttft_mean": float(np.mean([x["ttft_err"] for x in timed])) if timed else math.nan,
            "itl_mean": float(np.mean([x["itl_err"] for x in timed])) if timed else math.nan,
        }
        if self.has_failures:  # mean failure-fraction error, as a fraction (0.01 = one point)
            fails = [x["fail_err_pts"] / 100.0 for x in scores if x["fail_err_pts"] is not None]
            objectives[FAILURE] = float(np.mean(fails)) if fails else math.nan
        return Evaluation(valid=True, constants=constants, overheads=overheads, rows=tuple(scores), steps=steps,
                          objectives=objectives)

    # -------------------------------------------------------------- where the time goes
    def breakdown(self, program, evaluation: Evaluation) -> list[dict]:
        """Where the time goes, per reported experiment x stage, for an evaluation of `program`.

        Each reported experiment is simulated again with the evaluation's fitted constants
        (breakdown=True, states recorded) and its reported requests give: the measured,
        predicted and simulated per-output-token times (s), the simulated one split into
        decode / prefill / recompute / preempt / queue (`time_breakdown_by_stage`, the parts
        sum to sim_per_token_s), the request overheads' share (overhead_s: pred_itl_s =
        sim_per_token_s + overhead_s), the prefix-cache counters (`cache_stats_by_stage`), and
        over the simulated decode states (D > 0) of the stage's reported window: the program's
        mean predicted step (us) next to the mean of every analytical component. Plain floats,
        None where undefined (strict JSON).
        """
        if not evaluation.valid:
            raise ValueError(f"cannot break down an invalid evaluation: {evaluation.error}")
        f = program.compiled()
        consts = {k: np.asarray(v, np.float64) for k, v in evaluation.constants.items()}
        ovh = {k: Overheads(**v) for k, v in evaluation.overheads.items()}
        scored = {(r["experiment"], int(r["stage"])): r for r in evaluation.rows}
        used = set(program.components_used())
        fin = lambda x: None if x is None or not math.isfinite(x) else float(x)  # noqa: E731
        out = []
        for e in self.report_exps:
            c = self._consts_for(e, consts)
            if c is None:
                raise ValueError(f"the evaluation has no constants for model {e.model}")
            wl = self.wl[e.id]
            r = simulate(f, c, self.mv[e.id], wl, e.kv_blocks, e.max_num_seqs, e.max_batched_tokens,
                         e.block_size, max_steps=MAX_STEPS, record=True, breakdown=True, timeout_us=self._timeout(),
                         spread=not SPREAD_NAMES.isdisjoint(program.params), **sim_limits(e))
            if not r.ok:
                raise ValueError(f"{e.id}: the simulation with the fitted constants failed (status {r.status})")
            mask = self._part(e, "test")
            times = {b["stage"]: b for b in time_breakdown_by_stage(r, wl, mask)}
            cache = {b["stage"]: b for b in cache_stats_by_stage(r, wl, mask)}
            o = ovh.get(e.model, Overheads())
            for s in e.stages:
                sel = mask & (wl.stage == s.index)
                if not sel.any():
                    continue
                row = scored.get((e.id, s.index), {})
                tb, cs = times.get(s.index, {}), cache.get(s.index, {})
                n = wl.gen_len[sel & (wl.gen_len >= 2)]
                denom = float((n - 1).sum())
                overhead = ((o.output_token_us * float(n.sum()) + o.post_decode_us * len(n)) / denom / 1e6
                            if denom else None)
                lo = s.start_s + (0.0 if self.holdout is not None else self.train_fraction * s.duration_s)
                hi = s.start_s + s.duration_s
                st = r.states[(r.states[:, 6] >= lo * 1e6) & (r.states[:, 6] < hi * 1e6) & (r.states[:, 1] > 0)]
                if len(st):
                    X = np.ascontiguousarray(states_to_components(st, self.mv[e.id]))
                    step = fin(float(predict_rows(f, X, np.ascontiguousarray(c)).mean()))
                    comps = {k: fin(float(v)) for k, v in zip(COMPONENTS, X.mean(axis=0))}
                else:
                    step, comps = None, {k: None for k in COMPONENTS}
                d = {"experiment": e.id, "model": e.model, "workload": e.workload, "stage": s.index,
                     "rate": s.rate, "n_requests": int(sel.sum()),
                     "meas_itl_s": fin(row.get("meas_itl_s")), "pred_itl_s": fin(row.get("pred_itl_s")),
                     "sim_per_token_s": fin(tb.get("per_token_s")), "overhead_s": fin(overhead)}
                for k in BREAKDOWN_PARTS:
                    d[f"{k}_s"] = fin(tb.get(f"{k}_s"))
                d.update({"prefix_cache": cs.get("mode", r.prefix_cache),
                          "hit_rate": fin(cs.get("hit_rate")), "always_hit_rate": fin(cs.get("always_hit_rate")),
                          "prompt_tokens": int(cs.get("prompt_tokens", 0)),
                          "cached_tokens": int(cs.get("cached_tokens", 0)),
                          "recomputed_tokens": int(cs.get("recomputed_tokens", 0)),
                          "evictions": int(cs.get("evictions", 0)), "preemptions": int(cs.get("preemptions", 0)),
                          "n_decode_states": int(len(st)), "pred_step_us": step, "components": comps,
                          "components_used": [k for k in COMPONENTS if k in used]})
                out.append(d)
        return out
