"""Held-out splits: how well a program's constants transfer to data they were not fitted on.

A step-time model is put into a simulator to answer questions nobody measured, so the judge
scores every program under three kinds of split, each a list of `Split`s taken in turn:

  workload  leave one workload out (LOWO): per-model constants fitted on the model's other
            workloads; every stage of the held-out workload scored on all its requests;
  model     leave one model out (LOMO): one constant vector for every model, fitted on the
            other models, so model differences must come from the components (weights,
            FLOPs, KV bytes, TP); ranked on its worst held-out model (`worst_model`);
  load      leave the high load out: fitted on the lowest-rate stage of each experiment with
            several stages, scored on its higher-rate stages (load extrapolation);
  long      long decode: per-model constants fitted on the workloads whose requests hold
            shorter contexts, scored on the workloads whose requests run to much longer ones
            (`long_workloads`: a gap of at least LONG_RATIO in prompt + output length). LOWO then
            runs on the short workloads only, so the two never blend.
            A stage the measurement overloaded is ranked on its per-token time here, not
            its E2E (`ranked_error`): its successes' E2E is their wait in the queue, which
            the overload objective scores.

Overload: the failure fraction of the held-out stages that were overloaded in the measurement
(more than OVERLOADED of their requests failed at the client's timeout) is its own objective,
`overload_fail` (`overload_error`): scored on the long-decode split where it has such stages,
else on every held-out split's. A stage of the same splits that the simulation overloads and
the measurement did not (a collapse nobody measured: the trace run's #1567 failed 15.8% of
codellama's reasoning requests, measured 0.1%) is scored with them, so the objective sees
failures predicted where none happened as well as failures missed.

Request overheads (queueing, post-decode) are fitted like the constants, on the fitted part
only, on a simulation with the split's own constants. For LOMO the held-out model takes the
mean of the other models' overheads from the in-sample evaluation: those were fitted on the
other models' own requests with constants fitted per model, so nothing of the held-out model
leaks in, and only the held-out model's experiments need simulating. LOWO cannot take that
shortcut (the in-sample constants saw the held-out workload), so it simulates the fitted
workloads too: two thirds of its simulations exist only to fit overheads.

Measured step rows (`JudgeData.row_mask`) follow the split as the requests do: a fit reads
only the rows of its fitted experiments' fitted stages (until 2026-11-27 it read every row of
the model, so the workload and load splits fitted on the held-out part's measured cycles).

Leakage left, by design: the batch states the surrogate fit reads come from the evaluator's
reference simulation, calibrated per model on all its stages (docs/architecture.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from evaluator.records import Evaluation

KINDS = ("workload", "model", "load", "long")
PREFIX = {"workload": "lowo", "model": "lomo", "load": "load", "long": "long"}  # objective name prefixes
KIND_LABEL = {"workload": "LOWO", "model": "LOMO", "load": "high load", "long": "long decode",
              "overload": "overload"}  # short names in tables and coverage lines
TITLE = {"workload": "leave one workload out", "model": "leave one model out", "load": "leave high load out",
         "long": "long decode (fitted on shorter contexts; an overloaded stage ranked on its per-token time)"}
LONG_RATIO = 1.5  # a workload is long when its requests' final context is this much above the next shorter one's
OVERLOADED = 0.01  # a stage whose measured failed fraction exceeds this was overloaded


def request_context(e) -> float:
    """Tokens a request of experiment `e` holds when it finishes: its prompt (the profile's
    system prompt and question) plus the tokens it generates."""
    return float(e.system_prompt_len + e.question_len + e.generated_len)


def long_workloads(exps) -> frozenset:
    """The workloads whose requests run to much longer contexts than the others': those above
    the widest gap (a ratio of at least LONG_RATIO) between consecutive workloads ranked by
    their longest `request_context`; empty where no such gap exists."""
    ctx: dict[str, float] = {}
    for e in exps:
        ctx[e.workload] = max(ctx.get(e.workload, 0.0), request_context(e))
    names = sorted(ctx, key=lambda n: (ctx[n], n))
    gaps = [(ctx[hi] / max(ctx[lo], 1.0), hi) for lo, hi in zip(names, names[1:])]
    gaps = [g for g in gaps if g[0] >= LONG_RATIO]
    if not gaps:
        return frozenset()
    cut = ctx[max(gaps)[1]]
    return frozenset(n for n in names if ctx[n] >= cut)


@dataclass(frozen=True, eq=False)
class Split:
    """Which stages of which experiments constants are fitted on, and which are scored."""
    kind: str  # "workload" | "model" | "load"
    value: str | None  # the held-out workload or model; None for load
    fit: dict[str, tuple[int, ...]]  # experiment id -> stage indices fitted on (all requests)
    report: dict[str, tuple[int, ...]]  # experiment id -> stage indices scored (all requests)
    global_fit: bool  # one constant vector for all models

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.value}" if self.value is not None else self.kind


def make_split(exps, kind: str, value: str | None = None) -> Split:
    """One split of experiments `exps`; ValueError names what is wrong with (kind, value)."""
    if kind not in KINDS:
        raise ValueError(f"holdout kind must be one of {', '.join(KINDS)}, not {kind!r}")
    every = lambda e: tuple(s.index for s in e.stages)  # noqa: E731
    if kind == "load":
        multi = [e for e in exps if len(e.stages) > 1]
        if not multi:
            raise ValueError("leave-high-load-out needs an experiment with several load stages")
        low = {e.id: min(e.stages, key=lambda s: (s.rate, s.index)).index for e in multi}
        return Split("load", None, {e.id: (low[e.id],) for e in multi},
                     {e.id: tuple(s.index for s in e.stages if s.index != low[e.id]) for e in multi}, False)
    if kind == "long":
        long = long_workloads(exps)
        if not long:
            raise ValueError(f"the long-decode split needs a workload whose requests run to contexts at least "
                             f"{LONG_RATIO:g}x longer than the others'")
        fitted = {e.model for e in exps if e.workload not in long}
        return Split("long", None, {e.id: every(e) for e in exps if e.workload not in long},
                     {e.id: every(e) for e in exps if e.workload in long and e.model in fitted}, False)
    if kind == "workload":
        long = long_workloads(exps)
        if value not in long:  # LOWO on the short folds: the long workloads have a split of their own
            exps = [e for e in exps if e.workload not in long]
    key = (lambda e: e.model) if kind == "model" else (lambda e: e.workload)
    names = sorted({key(e) for e in exps})
    if value not in names:
        raise ValueError(f"no experiment with {kind} {value!r} (have: {', '.join(names)})")
    if len(names) < 2:
        raise ValueError(f"leave-one-{kind}-out needs at least two {kind}s")
    return Split(kind, value, {e.id: every(e) for e in exps if key(e) != value},
                 {e.id: every(e) for e in exps if key(e) == value}, kind == "model")


def splits_of(exps, kind: str) -> list[Split]:
    """Every split of one kind, in a fixed order (empty where the data cannot make one)."""
    if kind == "load":
        return [make_split(exps, "load")] if any(len(e.stages) > 1 for e in exps) else []
    if kind == "long":
        return [make_split(exps, "long")] if long_workloads(exps) else []
    pool = exps
    if kind == "workload":  # the short folds; make_split leaves the long workloads out of their fits
        long = long_workloads(exps)
        pool = [e for e in exps if e.workload not in long]
    names = sorted({(e.model if kind == "model" else e.workload) for e in pool})
    return [make_split(exps, kind, n) for n in names] if len(names) > 1 else []


def _mean(xs) -> float:
    return float(np.mean(xs)) if len(xs) else math.inf


def overloaded(row: dict) -> bool:
    """Whether a held-out stage row was overloaded in the measurement: more than OVERLOADED of
    its requests failed (the overload objective's stages; long decode ranks them per token)."""
    return row.get("meas_fail") is not None and row["meas_fail"] > OVERLOADED


def collapsed(row: dict) -> bool:
    """Whether the simulation overloaded a held-out stage the measurement did not: more than
    OVERLOADED of its requests failed in the simulation only (the overload objective scores
    it too: a predicted collapse is as wrong for a capacity planner as a missed one)."""
    return (not overloaded(row) and row.get("meas_fail") is not None and row.get("pred_fail") is not None
            and row["pred_fail"] > OVERLOADED)


def ranked_error(row: dict, kind: str) -> float | None:
    """The latency error a held-out stage is ranked on: its mean E2E error, but on the
    long-decode split a stage the measurement overloaded (more than OVERLOADED of its requests
    failed) is ranked on its per-token time. There the successes' E2E is mostly their wait in
    a collapsing queue (70b reasoning: 119 s of ~160 s), which the overload regime scores by
    the failed fraction: ranked on E2E, the queue counted twice and the long-context step time,
    what the regime is for, hardly at all (the README job's archive, embedded default, ranked
    a program 33% off on codellama reasoning and 8.7% per token on 70b reasoning above one
    11% and 2.5% off). None where the stage has no latency (it mostly failed)."""
    if kind == "long" and overloaded(row):
        return row.get("itl_err")
    return row.get("e2e_err")


def summarize(rows: list[dict], errors: dict[str, str], kind: str) -> dict[str, float]:
    """Objectives of one kind from its held-out rows (`<prefix>_e2e` on `ranked_error`):
    infinite when any split failed. LOMO's is its worst held-out model (`worst_model`), the
    others' the mean over their held-out stages."""
    prefix = PREFIX[kind]
    if errors or not rows:
        return {f"{prefix}_e2e": math.inf, f"{prefix}_e2e_worst": math.inf,
                f"{prefix}_ttft": math.inf, f"{prefix}_itl": math.inf}
    ranked = [x for x in (ranked_error(r, kind) for r in rows) if x is not None]
    head = worst_model(rows) if kind == "model" else _mean(ranked)
    rows = [r for r in rows if r["e2e_err"] is not None]  # stages that mostly failed: no latency
    return {f"{prefix}_e2e": head,
            f"{prefix}_e2e_worst": float(max(ranked, default=math.inf)),
            f"{prefix}_ttft": _mean([r["ttft_err"] for r in rows]),
            f"{prefix}_itl": _mean([r["itl_err"] for r in rows])}


def worst_model(rows: list[dict]) -> float:
    """LOMO's objective: the mean ranked error of each held-out model's stages, at its worst
    model. A user asks how far the step model carries to the model they have, and the target is
    per model (issue 29: every held-out model under 10%): a mean over the models let one that
    transfers badly hide behind three that transfer well (the README job's #1166: 6.9% on
    average, llama-2-70b 9.0% and codellama-34b's reasoning run 30.8%). A model whose stages all
    mostly failed has no latency to rank (the overload objective scores it); infinite where no
    model has one."""
    by_model: dict[str, list] = {}
    for r in rows:
        x = ranked_error(r, "model")
        if x is not None:
            by_model.setdefault(r.get("model"), []).append(x)
    return max((_mean(errs) for errs in by_model.values()), default=math.inf)


def _lomo_overheads(main_overheads: dict, held_out: str) -> dict | None:
    """The other models' in-sample overheads, and their mean for the held-out model."""
    others = {m: dict(o) for m, o in main_overheads.items() if m != held_out}
    if not others:
        return None
    keys = next(iter(others.values())).keys()
    return {**others, held_out: {k: float(np.mean([o[k] for o in others.values()])) for k in keys}}


def reuses_main_overheads(split: Split) -> bool:
    """Whether a run gives this split the in-sample request overheads instead of fitting its
    own (LOMO: the held-out model has none), so its view simulates only the held-out
    experiments. `split_evaluation` and the views a worker prepares follow this one rule."""
    return split.kind == "model"


def split_evaluation(evaluator, program, split: Split, main_overheads: dict | None = None,
                     fit: bool = True, overheads: dict | None = None):
    """Fit and score `program` under one split (no refinement: the surrogate fit on the split's
    reference states): the split view's Evaluation. `main_overheads`: the in-sample
    evaluation's request overheads, which LOMO reuses (without them, LOMO also simulates the
    fitted models to fit overheads). fit=False: nothing fitted (the program's own constants
    and the given `overheads`), e.g. the uncalibrated roofline: the split only re-scores it."""
    ovh = overheads
    if ovh is None and reuses_main_overheads(split) and main_overheads is not None:
        ovh = _lomo_overheads(main_overheads, split.value)
    view = evaluator.for_split(split, simulate_fit=ovh is None)
    res = view.evaluate(program, overheads=ovh, fit=fit, refine=False)
    if res.valid and fit:  # a threshold only the held-out data crosses decides nothing fitted
        found = view.extrapolating_branches(program, res.constants)
        if found:
            return Evaluation.invalid(f"branch on a threshold the fitted data never crossed: {found[0]}",
                                      seconds=res.seconds, constants=res.constants)
    return res


def kind_block(kind: str, results) -> dict:
    """The held-out detail of one kind from its splits' Evaluations, `results` in split order
    as (label, Evaluation): rows tagged with their split, errors, constants and objectives."""
    rows, errors, constants = [], {}, {}
    for label, res in results:
        if not res.valid:
            errors[label] = res.error or "invalid"
            continue
        rows += [{**r, "split": label} for r in res.rows]
        constants[label] = res.constants
    return {"title": TITLE[kind], "objectives": summarize(rows, errors, kind),
            "rows": rows, "errors": errors, "constants": constants}


def join_splits(main, results, kinds=KINDS):
    """`main` (an in-sample Evaluation) with the held-out `kinds` attached from the splits'
    Evaluations, `results` as (label, Evaluation) in `split_labels` order, wherever they were
    computed: objectives `lowo_e2e`, `lomo_e2e`, `load_e2e` added (complexity, when present,
    stays last) and the per-kind detail (`kind_block`) in `holdout`. A kind without splits
    scores infinite, as one whose every split failed."""
    blocks = {kind: kind_block(kind, [(label, res) for label, res in results if _kind_of(label) == kind])
              for kind in kinds
              if kind in ALWAYS_SCORED or any(_kind_of(label) == kind for label, _ in results)}
    objectives = {k: v for k, v in main.objectives.items() if k != "complexity"}
    for kind, b in blocks.items():
        objectives[f"{PREFIX[kind]}_e2e"] = b["objectives"][f"{PREFIX[kind]}_e2e"]
    overload = overload_error(blocks)
    if overload is not None:
        objectives[OVERLOAD] = overload
    if "complexity" in main.objectives:
        objectives["complexity"] = main.objectives["complexity"]
    return replace(main, objectives=objectives, holdout=blocks)


ALWAYS_SCORED = ("workload", "model", "load")  # scored infinite where the data has no split of theirs; "long" only where it has one
OVERLOAD = "overload_fail"


def overload_error(blocks: dict) -> float | None:
    """Mean error of the predicted failed fraction (|pred - measured|, 0.01 = one point) over the
    held-out stages that were overloaded in the measurement, or in the simulation only
    (`collapsed`): those of the long-decode split where it has any overloaded stage, else those
    of every held-out split. Infinite if a split that holds such a stage could not be scored;
    None where no held-out stage was overloaded in the measurement (no objective: whether a
    program has this objective never depends on its own predictions)."""
    rows = overload_rows(blocks)
    if not any(overloaded(r) for r in rows):
        if "long" in blocks and blocks["long"]["errors"]:
            return math.inf  # the split that would hold the overloaded stages failed
        return None
    if any(b["errors"] for b in _overload_blocks(blocks)):
        return math.inf
    return float(np.mean([r["fail_err_pts"] / 100.0 for r in rows]))


MISS_ERR = 0.10  # misses: a held-out experiment's error beyond this (issue 29's bar for an unseen model)
MISS_PTS = 5.0  # misses: an overloaded stage's failed fraction off by more than this many points


def _overload_blocks(blocks: dict) -> list[dict]:
    """The kinds whose overloaded stages the overload objective scores: long decode where it
    has any, else every kind."""
    if "long" in blocks and any(overloaded(r) for r in blocks["long"]["rows"]):
        return [blocks["long"]]
    return list(blocks.values())


def overload_rows(blocks: dict) -> list[dict]:
    """The held-out stage rows the overload objective scores (and `misses` checks): those the
    measurement overloaded and those only the simulation did (`collapsed`)."""
    return [r for b in _overload_blocks(blocks) for r in b["rows"] if overloaded(r) or collapsed(r)]


def misses(blocks: dict) -> list[dict]:
    """Where the held-out errors break the bars a capacity planner holds a step model to: per
    kind and held-out experiment, the mean of its stages' ranked errors (`ranked_error`: per
    output token on an overloaded long-decode stage) above MISS_ERR; each stage overloaded in
    the measurement or the simulation (`overload_rows`) whose failed fraction is off by more than
    MISS_PTS; and each split that could not be scored. The
    regime means hide them: the trace run's hand-over is 8.7% off on long decode on average and
    14.5% on codellama's reasoning run, and fails 26.5 points too few on average but mixtral's
    69% entirely."""
    out = []
    for kind in KINDS:
        b = blocks.get(kind)
        if not isinstance(b, dict):
            continue
        out += [{"kind": kind, "split": label, "measure": "not scored", "why": str(why)}
                for label, why in (b.get("errors") or {}).items()]
        by_exp: dict[tuple, list] = {}
        for r in b.get("rows") or []:  # rows stored by older versions may lack a name: skipped
            if r.get("model") is not None and r.get("workload") is not None:
                by_exp.setdefault((r["model"], r["workload"]), []).append(r)
        for (model, workload), rows in by_exp.items():
            errs = [x for x in (ranked_error(r, kind) for r in rows) if x is not None]
            mean = float(np.mean(errs)) if errs else 0.0
            if not mean <= MISS_ERR:  # NaN and infinity too: a prediction that blew up (error null)
                per_token = kind == "long" and any(overloaded(r) for r in rows)
                out.append({"kind": kind, "model": model, "workload": workload,
                            "measure": "per-token" if per_token else "E2E",
                            "error": mean if math.isfinite(mean) else None})
    for r in overload_rows({k: b for k, b in blocks.items() if isinstance(b, dict) and "rows" in b}):
        if r.get("fail_err_pts") is not None and r["fail_err_pts"] > MISS_PTS and r.get("model") is not None:
            out.append({"kind": "overload", "model": r["model"], "workload": r.get("workload"), "measure": "failed",
                        "meas": r["meas_fail"], "pred": r.get("pred_fail"), "error": r["fail_err_pts"] / 100.0})
    return out


def holdout_scores(evaluator, program, main, fit: bool = True, overheads: dict | None = None, kinds=KINDS):
    """`main` (an in-sample Evaluation) with the held-out `kinds` scored here, split after
    split (`split_evaluation`; LOMO reuses `main`'s overheads). An executor may instead run the
    splits on its workers and `join_splits` their results: the Evaluation is the same."""
    results = [(split.label, split_evaluation(evaluator, program, split, main.overheads, fit, overheads))
               for kind in kinds for split in splits_of(evaluator.all_exps, kind)]
    return join_splits(main, results, kinds)


def split_labels(exps) -> list[str]:
    """Labels of every split of every kind, in the order `holdout_scores` takes them."""
    return [s.label for kind in KINDS for s in splits_of(exps, kind)]


def _kind_of(label: str) -> str:
    """The kind of a split from its `Split.label` ("workload:codegen" -> "workload")."""
    return label.partition(":")[0]


def split_by_label(exps, label: str) -> Split:
    """The split of `exps` called `label` (as `Split.label`); ValueError if there is none."""
    kind, value = _kind_of(label), label.partition(":")[2]
    if kind not in KINDS:
        raise ValueError(f"unknown held-out split {label!r}")
    return make_split(exps, kind, value or None)
