"""The ground truth as the judge reads it: workloads, model vectors, step rows and which requests
train and which are scored, under the evaluator's split (docs/architecture.md, "judge").

`JudgeData` is what every judge module takes: `judge_states` (what the fits read), `replay`
(simulation), `scoring`, `fit_program` and `holdout_views`. It answers questions about the
data only; the underscored attributes are the caches those modules fill, kept here so that a
held-out view (`holdout_views.for_split`, a shallow copy) shares or resets them in one place.
"""
from __future__ import annotations

import math

import numpy as np

from evaluator import physics
from evaluator.components import MODEL_FIELDS
from evaluator.data import GroundTruth, per_token_time
from evaluator.fitting import StageStates
from evaluator.holdout import Split, make_split
from evaluator.step_scoring import UNPLACED, build_step_rows
from evaluator.workload import build_workload

MOSTLY_FAILED = 0.5  # a stage whose measured failure fraction is above this is scored on it alone


class JudgeData:
    """The experiments, workloads and measurements one evaluator (or one of its held-out views)
    fits and scores, and which requests of them train and which are reported."""

    def __init__(self, gt: GroundTruth, train_fraction: float = 0.7, holdout: tuple | Split | None = None,
                 global_fit: bool = False, seed: int = 0, holdout_objectives: bool = False,
                 timeouts: bool = True):
        """holdout: a `Split`, or ("model" | "workload", name) / ("load", None) for one.
        holdout_objectives: score every evaluation under all held-out splits as well.
        timeouts: abort simulated requests at each experiment's client timeout (False: never)."""
        if not (isinstance(train_fraction, (int, float)) and 0.0 <= train_fraction <= 1.0):  # NaN too
            raise ValueError(f"train_fraction must be a number within [0, 1], not {train_fraction!r}")
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
        self._reference: dict[str, np.ndarray] | None = None  # judge_states.reference_states
        self._grids: dict[str, np.ndarray] | None = None  # judge_states.grids
        self._splits: dict[tuple, JudgeData] = {}  # held-out views of this evaluator, made once
        self._split_refs: dict[str, dict[str, np.ndarray]] = {}  # their reference states
        self._stage_memo: dict[tuple, tuple] = {}  # judge_states._shared_by_views: stage and branch states
        if holdout is not None and not isinstance(holdout, Split):
            holdout = make_split(self.all_exps, *holdout)
        self.set_split(holdout, global_fit)

    def set_split(self, split: Split | None, global_fit: bool = False) -> None:
        """Fit and score under `split` (None: the in-sample time split); the fitting caches,
        which depend on it, start empty."""
        self.split = split
        self.holdout = None if split is None else (split.kind, split.value)
        self.global_fit = global_fit or (split is not None and split.global_fit)
        if split is None:
            self.exps = self.fit_exps = self.report_exps = self.all_exps
        else:
            self.exps = [e for e in self.all_exps if e.id in split.fit or e.id in split.report]
            self.fit_exps = [e for e in self.all_exps if e.id in split.fit]
            self.report_exps = [e for e in self.all_exps if e.id in split.report]
        self.fit_rows = self._fit_rows(split)  # the step rows its fits read, per model
        self._probe_cache: dict[str, np.ndarray] = {}
        self._ref_states_cache: dict[str, list[StageStates]] = {}
        self._cons_cache: dict[str, physics.Constraints] = {}
        self._branch_cache: dict[tuple, np.ndarray] = {}  # judge_states.branch_states, by (experiment, side)

    # -------------------------------------------------------------- which requests train
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
        """Requests that failed in the measurement (none in spec mode: see `measured_failure`)."""
        wl = self.wl[e.id]
        return np.zeros(len(wl.stage), bool) if wl.measured_failed is None else wl.measured_failed.astype(bool)

    def part(self, e, part: str) -> np.ndarray:
        """The requests of experiment `e` in the training or reported part."""
        if self.split is not None:  # made once per set of stages, kept with the workload (`Workload.derived`)
            wl = self.wl[e.id]
            key = ("stages", tuple((self.split.fit if part == "train" else self.split.report).get(e.id, ())))
            if key not in wl.derived:
                wl.derived[key] = np.isin(wl.stage, key[1])
            return wl.derived[key]
        m = self.train_mask[e.id]
        return m if part == "train" else ~m

    # -------------------------------------------------------------- what was measured
    def measured_failure(self, e, stage, sel) -> float | None:
        """Measured failed fraction of the selected requests of a stage (the stage file's counts
        in spec mode)."""
        if self.wl[e.id].measured_failed is None:
            return e.stages[stage].failed_fraction or 0.0
        return float(self.failed[e.id][sel].mean()) if sel.any() else None

    def measured(self, e, stage, mask) -> tuple[float, float, float]:
        """Measured mean E2E (s), TTFT (s), per-token time (s) of the selected requests."""
        wl = self.wl[e.id]
        st = e.stages[stage]
        sel = mask & (wl.stage == stage) & ~self.failed[e.id]
        if wl.measured_e2e_s is None or not sel.any():
            return st.e2e_s, st.ttft_s, st.itl_s
        e2e, ttft = wl.measured_e2e_s[sel], wl.measured_ttft_s[sel]
        return float(e2e.mean()), float(ttft.mean()), per_token_time(e2e, ttft, wl.gen_len[sel])

    # -------------------------------------------------------------- fitting groups
    def groups(self) -> dict[str, list]:
        """Fitting groups: one per model, or one for all when fitting globally."""
        g: dict[str, list] = {}
        for e in self.fit_exps:
            g.setdefault("*" if self.global_fit else e.model, []).append(e)
        return g

    def key(self, e) -> str:
        """The fitting group of experiment `e`."""
        return "*" if self.global_fit else e.model

    def consts_for(self, e, consts):
        """The constant vector experiment `e` runs with (LOMO: the global one), or None."""
        key = self.key(e)
        if key in consts:
            return consts[key]
        if self.holdout and self.holdout[0] == "model" and "*" in consts:
            return consts["*"]
        return None

    def row_mask(self, rows, split: Split | None, side: str) -> np.ndarray:
        """Which of a model's step rows lie in the split's fitted (`side="fit"`) or reported
        (`"report"`) stages: a held-out workload's, model's or load stage's measured step cycles
        are as held out as its requests. A row without a known stage (`UNPLACED`) counts only
        where every stage of its experiment is on that side."""
        stages = split.fit if side == "fit" else split.report
        keep = np.zeros(len(rows.experiment), bool)
        for exp_id in np.unique(rows.experiment):
            e = next((x for x in self.all_exps if x.id == exp_id), None)
            if e is None or exp_id not in stages:
                continue
            m = rows.experiment == exp_id
            st = rows.stage[m] if rows.stage is not None else np.full(int(m.sum()), UNPLACED)
            whole = set(stages[exp_id]) >= {s.index for s in e.stages}
            keep[m] = np.isin(st, stages[exp_id]) | ((st == UNPLACED) & whole)
        return keep

    def _fit_rows(self, split: Split | None) -> dict:
        """The step rows per model that fits under `split` read; in-sample, every row (the fits
        read its training window, `StepRows.train`). Under a split, all rows of the fitted
        stages train, as all their requests do."""
        if split is None:
            return dict(self.step_rows)
        out = {}
        for model, rows in self.step_rows.items():
            keep = self.row_mask(rows, split, "fit")
            if keep.any():
                out[model] = rows.select(keep, np.ones(len(keep), bool))
        return out

    def rows_for(self, group_exps) -> list:
        """The real step rows of these experiments' models that this view fits on (`fit_rows`)."""
        models = {e.model for e in group_exps}
        return [self.fit_rows[m] for m in sorted(models) if m in self.fit_rows]

    def models_of(self, key, exps) -> list[str]:
        """Models a constant vector serves: its group's, and under a global fit every model."""
        return sorted({e.model for e in exps} | {e.model for e in self.exps if self.key(e) == key})

    def timeout(self) -> float | None:
        """The simulate() timeout: each workload's client timeout, or 0 (none) when turned off.
        The reference calibration uses it only on data with failures: its first round runs the
        roofline's uncalibrated constants, which overload two of the 12 real experiments into
        300 s queues that the real server never had (llama-2-7b and mixtral general)."""
        return None if self.timeouts else 0.0
