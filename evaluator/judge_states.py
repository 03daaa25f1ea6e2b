"""What the judge's fits read: batch states, probe rows and physical constraints.

Every fit starts from reference states, the batch states of the roofline seed calibrated on its
own simulation (docs/architecture.md, fact 6): `reference_states` for the evaluator's view,
`split_reference` for the held-out splits (each experiment calibrated on its fitted part alone).
From states, `stage_states` makes the per-stage fitting targets, `probes` the rows the physical
rules are checked on (with `edge_states` and the real step rows) and `constraints` stacks those
with each served model's extrapolation grid. Each is made once per view and cached on it.

The recorded states themselves are large (a row per simulated step: ~70 MB in-sample and
~110 MB for the held-out splits on the embedded data) while what the fits read of them is
small (subsamples of a few thousand rows per experiment). `shared_states` makes every view's
readings once and hands on those, with the states `Released` to their step counts
(`holdout_views.shared_states`): a worker that adopts them never holds the states.
"""
from __future__ import annotations

import copy
import math

import numpy as np

from evaluator import physics
from evaluator.branches import MAX_ROWS as MAX_BRANCH_ROWS
from evaluator.components import COMPONENT_INDEX
from evaluator.fitting import MAX_STATES_PER_STAGE, StageStates, fit_constants, states_to_components, subsample
from evaluator.holdout import make_split
from evaluator.judge_data import MOSTLY_FAILED, JudgeData
from evaluator.program import parse_program
from evaluator.program_grad import compiled_gradient
from evaluator.replay import simulate_one
from seeds import seed_sources

REFERENCE_SEED = "roofline"  # the physical program whose calibrated states seed every fit


def edge_states(kv_tokens: float, max_len: float = physics.DEFAULT_MAX_MODEL_LEN, max_seqs: int = 128,
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


# -------------------------------------------------------------- fitting targets
def stage_states(data: JudgeData, e, states: np.ndarray) -> list[StageStates]:
    """The fitting targets of experiment `e` from recorded `states`: per fitted stage, a
    subsample of its training window's decode states with the measured per-token time and TTFT."""
    out = []
    train = data.part(e, "train")
    for s in e.stages:
        lo, hi = s.start_s * 1e6, (s.start_s + data.train_fraction * s.duration_s) * 1e6
        if data.split is not None:
            if s.index not in data.split.fit.get(e.id, ()):
                continue
            hi = (s.start_s + s.duration_s) * 1e6
        m = (states[:, 6] >= lo) & (states[:, 6] < hi) & (states[:, 1] > 0)
        idx = np.flatnonzero(m)
        if len(idx) < 10:
            continue
        idx = idx[subsample(len(idx), MAX_STATES_PER_STAGE)]
        st = states[idx]
        fail = data.measured_failure(e, s.index, train & (data.wl[e.id].stage == s.index))
        if fail is not None and fail > MOSTLY_FAILED:
            continue  # its few successes say little about the per-token time
        _, ttft, itl = data.measured(e, s.index, train)
        if not math.isfinite(itl):
            continue
        out.append(StageStates(e.id, s.index, states_to_components(st, data.mv[e.id]),
                               np.ascontiguousarray(st[:, 1]), itl * 1e6,
                               np.ascontiguousarray(st[:, 2]), ttft * 1e6))
    return out


def reference_stage_states(data: JudgeData, e) -> list[StageStates]:
    """`stage_states` of the reference states, made once per experiment (every surrogate
    fit and identifiability report reads them). Views that fit `e` on the same states and
    stages share one list (`JudgeData._stage_memo`: the held-out views of a run hold ~30 MB
    fewer copies, and a pickle of their caches keeps the sharing)."""
    if e.id not in data._ref_states_cache:
        ref = reference_states(data)
        stages = None if data.split is None else tuple(sorted(data.split.fit.get(e.id, ())))
        data._ref_states_cache[e.id] = _shared_by_views(data, ("stage", e.id, stages), ref,
                                                        lambda: stage_states(data, e, ref[e.id]))
    return data._ref_states_cache[e.id]


def _shared_by_views(data: JudgeData, key: tuple, ref: dict, make):
    """`make()`, made once for every view on the same reference states `ref` and kept in
    `JudgeData._stage_memo` (shared by the views: a pickle of their caches keeps the sharing)
    with the states it was made from, so another `ref` that reuses a freed id is not served."""
    got = data._stage_memo.get((id(ref), *key))
    if got is None or got[0] is not ref:
        got = data._stage_memo[(id(ref), *key)] = (ref, make())
    return got[1]


# -------------------------------------------------------------- reference states
def reference_states(data: JudgeData) -> dict[str, np.ndarray]:
    """Batch states from a calibrated roofline-seed simulation, computed once per evaluator."""
    if data._reference is None:
        groups = data.groups()
        data._reference = calibrated_states(data, groups, {e.id: k for k, ex in groups.items() for e in ex})
    return data._reference


def split_reference(data: JudgeData, lowest_stage: bool) -> dict[str, np.ndarray]:
    """Reference states for held-out splits: every experiment calibrated on its own data
    alone (on its lowest-rate stage alone for leave-high-load-out), so the states a split
    fits on carry nothing of the experiments or stages it holds out."""
    key = "lowest" if lowest_stage else "all"
    if key not in data._split_refs:
        exps = [e for e in data.all_exps if len(e.stages) > 1 or not lowest_stage]
        view = copy.copy(data)
        view.set_split(make_split(exps, "load") if lowest_stage else None)
        view.exps = exps
        data._split_refs[key] = calibrated_states(view, {e.id: [e] for e in exps}, {e.id: e.id for e in exps})
    return data._split_refs[key]


def calibrated_states(data: JudgeData, groups: dict[str, list], key_of: dict[str, str]) -> dict[str, np.ndarray]:
    """Simulate the roofline seed calibrated per group (refitted twice on its own states) and
    record states: the states a physical program visits (a queue builds as for the candidates)."""
    ref = parse_program(seed_sources()[REFERENCE_SEED])
    f, g = ref.compiled(), compiled_gradient(ref)
    consts = {key: ref.initial_constants.copy() for key in groups}
    states = {}
    for rnd in range(3):
        for e in data.exps:
            c = consts.get(key_of.get(e.id), np.mean(list(consts.values()), axis=0))
            r = simulate_one(data, f, c, e, record=True, measured=False, timeouts=data.has_failures)
            if r.ok or rnd == 0:  # keep the earlier round's states if the refit misbehaves
                states[e.id] = r.states.copy()  # exactly its steps: not the recording's grown buffer
        if rnd == 2:
            break
        for key, exps in groups.items():
            st = [s for e in exps for s in stage_states(data, e, states[e.id])]
            probe_rows = np.ascontiguousarray(np.vstack([state_probes(data, e, states[e.id]) for e in exps]))
            consts[key], _ = fit_constants(f, g, consts[key], st, [], physics.constraints(probe_rows, []))
    return states


class Released:
    """What a view keeps of one experiment's reference states once everything its fits and
    checks read of them is made (`prepare`): the step count, the runaway limit of
    `replay.simulate_one`. The rows are gone; reading one raises (TypeError)."""
    __slots__ = ("n_steps",)

    def __init__(self, n_steps: int):
        self.n_steps = int(n_steps)

    def __len__(self) -> int:
        return self.n_steps

    def __reduce__(self):
        return Released, (self.n_steps,)

    def __repr__(self) -> str:
        return f"Released({self.n_steps})"


FIT_CACHES = ("_ref_states_cache", "_probe_cache", "_cons_cache", "_branch_cache")  # what `prepare` fills


def prepare(data: JudgeData) -> None:
    """Make everything this view reads of its reference states: each fitted experiment's
    fitting targets, each fitting group's probes and constraints, and (a held-out view) its
    reported experiments' branch states."""
    for key, exps in data.groups().items():
        for e in exps:
            reference_stage_states(data, e)
        constraints(data, key, exps)
    if data.split is not None:
        for e in data.fit_exps:
            branch_states(data, e, "fit")
        for e in data.report_exps:
            branch_states(data, e, "report")


def released(states: dict) -> dict:
    """`states` with every array `Released` to its step count (a new dict)."""
    return {k: Released(len(v)) for k, v in states.items()}


def fit_caches(view: JudgeData) -> dict:
    """What `prepare` made on a view, by cache (to hand to another process). A group's probe
    rows are the head of its constraints' rows: they go as their count alone."""
    out = {name: dict(getattr(view, name)) for name in FIT_CACHES}
    for key, P in out["_probe_cache"].items():
        cons = out["_cons_cache"].get(key)
        if cons is not None and len(P) and np.array_equal(cons.X[:len(P)], P):
            out["_probe_cache"][key] = len(P)
    return out


def take_caches(view: JudgeData, caches: dict) -> None:
    """Set a view's fitting caches to ones `fit_caches` gave (made from the same states)."""
    for name in FIT_CACHES:
        setattr(view, name, dict(caches.get(name, {})))
    for key, P in view._probe_cache.items():
        if isinstance(P, int):
            view._probe_cache[key] = view._cons_cache[key].X[:P]


# -------------------------------------------------------------- probes and constraints
def state_probes(data: JudgeData, e, states: np.ndarray) -> np.ndarray:
    """Components of a subsample of recorded states plus the edge grid of one experiment."""
    st = states[subsample(len(states), 1000)]
    edges = edge_states(e.kv_blocks * e.block_size, e.max_model_len, e.max_num_seqs, e.max_batched_tokens)
    return np.vstack([states_to_components(st, data.mv[e.id]), states_to_components(edges, data.mv[e.id])])


def probes(data: JudgeData, group_exps) -> np.ndarray:
    """Component rows covering what a simulation of these experiments visits."""
    ref = reference_states(data)
    parts = [state_probes(data, e, ref[e.id]) for e in group_exps]
    for m in sorted({e.model for e in group_exps} & set(data.step_rows)):
        parts.append(data.step_rows[m].X)  # all of them: validity is checked on every real row (states, no targets)
    X = np.vstack(parts)
    work = X[:, COMPONENT_INDEX["P"]] + X[:, COMPONENT_INDEX["D"]]
    return np.ascontiguousarray(X[work > 0])  # a row that computes no token has no floor to hold


def probe(data: JudgeData, key, exps) -> np.ndarray:
    """`probes` of one fitting group, made once per view."""
    if key not in data._probe_cache:
        data._probe_cache[key] = probes(data, exps)
    return data._probe_cache[key]


def branch_states(data: JudgeData, e, side: str) -> np.ndarray:
    """Components of a subsample of experiment `e`'s reference states in the stages a held-out
    view fits on (`side="fit"`: the stages its fit read, not a mostly failed one it skipped)
    or reports on (`"report"`), where the view looks for conditionals its fitted states never
    switched (`holdout_views.extrapolating_branches`). Both sides hold every state of their
    stages, prefill-only steps included. (The fit's stage states keep decode states only:
    traced against those, a `D > 0` test looked unfitted wherever a held-out stage had a
    prefill-only step, as every workload has, and the verdict fell to the sign of the
    threshold's rounding drift.) Made once per view, the arrays shared by views on the same
    reference states; empty if the view has no states of `e` in those stages."""
    key = (e.id, side)
    if key in data._branch_cache:
        return data._branch_cache[key]
    if side == "fit":
        stages = {st.stage for st in reference_stage_states(data, e)}
    else:
        stages = set(data.split.report.get(e.id, ())) if data.split is not None else set()
    ref = reference_states(data)

    def make() -> np.ndarray:
        st = ref.get(e.id)
        if st is None or not len(st) or not stages:
            return np.zeros((0, 0))
        t = st[:, 6]
        inside = np.zeros(len(st), np.bool_)
        for s in e.stages:
            if s.index in stages:
                inside |= (t >= s.start_s * 1e6) & (t < (s.start_s + s.duration_s) * 1e6)
        idx = np.flatnonzero(inside)
        if not len(idx):
            return np.zeros((0, 0))
        return states_to_components(st[idx[subsample(len(idx), MAX_BRANCH_ROWS)]], data.mv[e.id])

    data._branch_cache[key] = _shared_by_views(data, ("branch", e.id, tuple(sorted(stages))), ref, make)
    return data._branch_cache[key]


def grids(data: JudgeData) -> dict[str, np.ndarray]:
    """Extrapolation grid per model (`evaluator.physics.extrapolation_grid`), made once."""
    if data._grids is None:
        data._grids = physics.model_grids(data.gt)
    return data._grids


def constraints(data: JudgeData, key, exps) -> physics.Constraints:
    """Probe states and the served models' grids, stacked once per fitting group."""
    if key not in data._cons_cache:
        by_model = grids(data)
        data._cons_cache[key] = physics.constraints(probe(data, key, exps),
                                                    [by_model[m] for m in data.models_of(key, exps)])
    return data._cons_cache[key]
