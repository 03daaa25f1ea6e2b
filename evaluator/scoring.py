"""From a `Replay` to the `Evaluation`: request overheads, errors per experiment x stage, the
per-step scores on the real step rows, and the objectives; `breakdown` says where the time goes.

Errors are on the reported part (the later requests of each stage, or a split's held-out
stages); the request overheads are fitted on the training part. Failed requests
(docs/failed_requests.md): each stage is scored on its predicted failed fraction against the
measured one (points), and E2E / TTFT / per-token errors over the requests that succeeded in
the measurement (none for a stage that mostly failed). `fail_mean` joins the objectives only
where the data has failures, so objective vectors on data without them do not change.
"""
from __future__ import annotations

import math
import time

import numpy as np

from evaluator.components import COMPONENT_INDEX, COMPONENTS, SPREAD_NAMES
from evaluator.data import per_token_time
from evaluator.fitting import Overheads, fit_overheads, states_to_components
from evaluator.judge_data import MOSTLY_FAILED, JudgeData
from evaluator.objectives import FAILURE, selection_loss
from evaluator.records import Evaluation, StageScore
from evaluator.replay import MAX_STEPS, Replay
from evaluator.server_config import sim_limits
from evaluator.simulator import (BREAKDOWN_PARTS, cache_stats_by_stage, outcomes_by_stage, simulate,
                                 time_breakdown_by_stage)
from evaluator.step_scoring import predict_rows, step_metrics

TAILS = (90, 99)  # SLOs are written on tails: per stage, E2E and TTFT at these percentiles too
TAIL_KEYS = tuple(f"{k}_{m}_p{q}{u}" for m in ("e2e", "ttft") for q in TAILS
                  for k, u in (("pred", "_s"), ("meas", "_s"), ("", "err")))
LATENCY_KEYS = ("pred_e2e_s", "meas_e2e_s", "e2e_err", "pred_ttft_s", "meas_ttft_s", "ttft_err",
                "pred_itl_s", "meas_itl_s", "itl_err") + TAIL_KEYS


def _tails(wl, sel: np.ndarray, e2e: np.ndarray, ttft: np.ndarray) -> dict:
    """Predicted and measured E2E and TTFT percentiles (TAILS) over the stage's measured
    successes, and their relative errors; None where the data has no per-request figures
    (spec mode: the stage means only)."""
    out = {}
    key = sel.tobytes()  # with the measure: the key of its measured tails in `wl.derived`
    for m, pred, meas in (("e2e", e2e, wl.measured_e2e_s), ("ttft", ttft, wl.measured_ttft_s)):
        # both tails from one partition (the same order statistics and interpolation: bit for
        # bit the values of one call per tail); the measured ones are taken once per selection
        ps = [float(p) / 1e6 for p in np.percentile(pred[sel], TAILS)]
        xs = wl.derived.get(("tails", m, key)) if meas is not None else [None] * len(TAILS)
        if xs is None:
            xs = wl.derived[("tails", m, key)] = [float(x) for x in np.percentile(meas[sel], TAILS)]
        for q, p, x in zip(TAILS, ps, xs):
            out.update({f"pred_{m}_p{q}_s": p, f"meas_{m}_p{q}_s": x,
                        f"{m}_p{q}_err": abs(p - x) / x if x else None})
    return out


def invalid(why: str, t0: float, consts=None) -> Evaluation:
    """An invalid Evaluation, with the constants it was made with (if any)."""
    return Evaluation.invalid(why, seconds=time.perf_counter() - t0,
                              constants={k: [float(x) for x in v] for k, v in (consts or {}).items()})


def fit_request_overheads(data: JudgeData, replay: Replay, models=None) -> dict[str, Overheads]:
    """Request overheads per model, fitted on the training requests of the fitted
    experiments that both the measurement and the simulation saw finish; a model with none
    of them (e.g. held out) takes the mean of the others. `models`: only these (each from its
    own experiments alone, as it would be among all), no mean for the others."""
    results = replay.results
    by_model: dict[str, list] = {}
    for e in data.fit_exps:
        if models is None or e.model in models:
            by_model.setdefault(e.model, []).append(e)
    ovh: dict[str, Overheads] = {}
    for model, group in by_model.items():
        groups = []
        for e in group:
            r, wl = results[e.id], data.wl[e.id]
            m = data.part(e, "train")
            served = ~data.failed[e.id] & ~r.aborted
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
    if ovh and models is None:
        mean = Overheads(**{k: float(np.mean([getattr(o, k) for o in ovh.values()]))
                            for k in Overheads().as_dict()})
        for e in data.exps:
            ovh.setdefault(e.model, mean)
    return ovh


def train_loss(data: JudgeData, f, consts, replay: Replay) -> float:
    """`selection_loss` on the training part only (the refinement keeps a refit by it)."""
    return selection_loss(score(data, f, consts, replay, None, part="train").objectives)


def _client_latencies(r, wl, o: Overheads) -> tuple[np.ndarray, np.ndarray]:
    """Per request TTFT and E2E (us) as the client sees them: simulated plus request overheads;
    a timed-out request's at the timeout, whatever the overheads."""
    ttft = r.ttft_us + o.queueing_us + o.queueing_per_input_token_us * wl.prompt_len
    e2e = r.e2e_us + o.queueing_us + o.queueing_per_input_token_us * wl.prompt_len \
        + o.output_token_us * wl.gen_len + o.post_decode_us
    timed_out = r.aborted
    if timed_out.any():
        ttft = np.where(timed_out, np.minimum(ttft, r.e2e_us), ttft)
        e2e = np.where(timed_out, r.e2e_us, e2e)
    return ttft, e2e


def _latency_scored(sel: np.ndarray, mfail: float | None) -> bool:
    """Whether a stage is scored on its latencies (its measured successes `sel`, its measured
    failed fraction `mfail`): not where it mostly failed in the measurement."""
    return bool(sel.any()) and not (mfail is not None and mfail > MOSTLY_FAILED)


def scored_stages(data: JudgeData) -> tuple[int, int]:
    """How many reported stages `score` rates on their latencies, and how many on their failed
    fraction. The measurement alone decides both (as in `_stage_rows`), so they are known
    before any replay (`evaluator.screen_race` bounds a screen's objectives with them)."""
    n_latency = n_failure = 0
    for e in data.report_exps:
        wl, mask = data.wl[e.id], data.part(e, "test")
        for s in e.stages:
            every = mask & (wl.stage == s.index)
            if not every.any():
                continue
            mfail = data.measured_failure(e, s.index, every)
            n_latency += _latency_scored(every & ~data.failed[e.id], mfail)
            n_failure += mfail is not None
    return n_latency, n_failure


def model_rows(data: JudgeData, replay: Replay, model: str) -> tuple[list[StageScore], Overheads]:
    """The stage rows `score` makes for one model's reported experiments, and its request
    overheads, from a replay of that model's experiments alone (each model's overheads are
    fitted on its own requests, so the rows are the ones the whole replay gives)."""
    o = fit_request_overheads(data, replay, models=(model,))[model]
    rows: list[StageScore] = []
    for e in data.report_exps:
        if e.model == model:
            rows += _stage_rows(data, e, replay.results[e.id], o, data.part(e, "test"))
    return rows, o


def _stage_rows(data: JudgeData, e, r, o: Overheads, mask: np.ndarray) -> list[StageScore]:
    """Error rows of one experiment's stages over the requests in `mask`."""
    wl = data.wl[e.id]
    ttft, e2e = _client_latencies(r, wl, o)
    timed_out = r.aborted
    cache = {c["stage"]: c for c in cache_stats_by_stage(r, wl, mask)}  # the reported requests'
    outcome = {c["stage"]: c for c in outcomes_by_stage(r, wl, mask)}
    out = []
    for s in e.stages:
        every = mask & (wl.stage == s.index)
        if not every.any():
            continue
        sel = every & ~data.failed[e.id]  # latencies: over the measured successes
        cs, oc = cache.get(s.index, {}), outcome.get(s.index, {})
        mfail = data.measured_failure(e, s.index, every)
        pfail = float(timed_out[every].mean())
        row = {"experiment": e.id, "model": e.model, "workload": e.workload, "stage": s.index,
               "rate": s.rate, "n_requests": int(every.sum())}
        if _latency_scored(sel, mfail):
            me2e, mttft, mitl = data.measured(e, s.index, mask)
            pe2e, pttft = float(e2e[sel].mean()) / 1e6, float(ttft[sel].mean()) / 1e6
            # per-token time over the requests the simulation finished too: a timed-out
            # request's span (timeout - first token) is no decode measurement and, clamped
            # at the timeout, hides a simulated step that is too slow (docs/failed_requests.md)
            both = sel & ~timed_out
            both = both if both.any() else sel
            pitl = per_token_time(e2e[both], ttft[both], wl.gen_len[both]) / 1e6
            row.update({"pred_e2e_s": pe2e, "meas_e2e_s": me2e, "e2e_err": abs(pe2e - me2e) / me2e,
                        "pred_ttft_s": pttft, "meas_ttft_s": mttft, "ttft_err": abs(pttft - mttft) / mttft,
                        "pred_itl_s": pitl, "meas_itl_s": mitl, "itl_err": abs(pitl - mitl) / mitl,
                        **_tails(wl, sel, e2e, ttft)})
        else:  # mostly failed in the measurement: scored on its failure fraction alone
            row.update({k: None for k in LATENCY_KEYS})
        served = every & ~timed_out  # what the client's summary shows: the successes' TTFT
        row["pred_ttft_served_s"] = float(ttft[served].mean()) / 1e6 if served.any() else None
        row.update({
            "sim_steps": r.n_steps, "preempted": r.n_preempted,
            # prefix cache of these requests (None where they have no prompt tokens)
            "hit_rate": cs.get("hit_rate"), "always_hit_rate": cs.get("always_hit_rate"),
            "evictions": int(cs.get("evictions", 0)), "preemptions": int(cs.get("preemptions", 0)),
            # failures: measured and simulated fraction of the stage's requests, error in points
            "n_failed_meas": int(data.failed[e.id][every].sum()),
            "finished": int(oc.get("finished", 0)), "timed_out": int(oc.get("timed_out", 0)),
            "meas_fail": mfail, "pred_fail": pfail,
            "fail_err_pts": None if mfail is None else 100.0 * abs(pfail - mfail),
            # server settings no file of the experiment stated (evaluator.server_config)
            "defaults_used": e.defaults_named,
        })
        out.append(row)
    return out


def _objectives(data: JudgeData, scores: list[StageScore], steps: dict) -> dict[str, float]:
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
    if data.has_failures:  # mean failure-fraction error, as a fraction (0.01 = one point)
        fails = [x["fail_err_pts"] / 100.0 for x in scores if x["fail_err_pts"] is not None]
        objectives[FAILURE] = float(np.mean(fails)) if fails else math.nan
    return objectives


def score(data: JudgeData, f, consts, replay: Replay, overheads_in, part: str = "test") -> Evaluation:
    """Errors per experiment x stage on the reported (held-out) part; part="train" scores
    the fitting experiments' training part instead (no step rows), for model selection.
    `overheads_in`: request overheads per model to use instead of fitting them."""
    constants = {k: [float(x) for x in v] for k, v in consts.items()}
    steps: dict[str, dict] = {}
    # request-level overheads, fitted per model on the training requests
    if overheads_in is not None:
        ovh = {k: Overheads(**v) for k, v in overheads_in.items()}
    else:
        ovh = fit_request_overheads(data, replay)
    overheads = {k: v.as_dict() for k, v in ovh.items()}
    # per experiment x stage errors on the reported part
    train = part == "train"
    scores: list[StageScore] = []
    for e in (data.fit_exps if train else data.report_exps):
        scores += _stage_rows(data, e, replay.results[e.id], ovh[e.model], data.part(e, "train" if train else "test"))
    # per-step scoring on the real step rows
    report_models = set() if train or (data.split is not None and data.split.kind == "load") \
        else {e.model for e in data.report_exps}
    for model, rows in data.step_rows.items():
        if model not in report_models:
            continue
        e0 = next(e for e in data.exps if e.model == model)
        c = data.consts_for(e0, consts)
        pred = predict_rows(f, rows.X, np.ascontiguousarray(c))
        work = rows.X[:, COMPONENT_INDEX["P"]] + rows.X[:, COMPONENT_INDEX["D"]] > 0  # idle rows run nothing
        if not np.all(np.isfinite(pred[work]) & (pred[work] >= 1.0)):
            return invalid(f"invalid prediction on real step rows of {model}", time.perf_counter())
        if data.diagnostics and data.split is None:
            steps.update(step_metrics(pred, rows, "test"))
        elif data.diagnostics:  # a held-out view: its reported stages' rows only
            keep = data.row_mask(rows, data.split, "report")
            if keep.any():
                steps.update(step_metrics(pred[keep], rows.select(keep), "all"))
    return Evaluation(valid=True, constants=constants, overheads=overheads, rows=tuple(scores), steps=steps,
                      objectives=_objectives(data, scores, steps))


# -------------------------------------------------------------- where the time goes
def breakdown(data: JudgeData, program, evaluation: Evaluation) -> list[dict]:
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
    out = []
    for e in data.report_exps:
        c = data.consts_for(e, consts)
        if c is None:
            raise ValueError(f"the evaluation has no constants for model {e.model}")
        wl = data.wl[e.id]
        r = simulate(f, c, data.mv[e.id], wl, e.kv_blocks, e.max_num_seqs, e.max_batched_tokens,
                     e.block_size, max_steps=MAX_STEPS, record=True, breakdown=True, timeout_us=data.timeout(),
                     spread=not SPREAD_NAMES.isdisjoint(program.params), **sim_limits(e))
        if not r.ok:
            raise ValueError(f"{e.id}: the simulation with the fitted constants failed (status {r.status})")
        out += _breakdown_rows(data, e, r, f, c, ovh.get(e.model, Overheads()), scored, used)
    return out


def _finite(x) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _breakdown_rows(data: JudgeData, e, r, f, c, o: Overheads, scored: dict, used: set) -> list[dict]:
    """`breakdown`'s rows of one experiment from its simulation `r` with constants `c`."""
    fin = _finite
    wl = data.wl[e.id]
    mask = data.part(e, "test")
    times = {b["stage"]: b for b in time_breakdown_by_stage(r, wl, mask)}
    cache = {b["stage"]: b for b in cache_stats_by_stage(r, wl, mask)}
    out = []
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
        lo = s.start_s + (0.0 if data.holdout is not None else data.train_fraction * s.duration_s)
        hi = s.start_s + s.duration_s
        st = r.states[(r.states[:, 6] >= lo * 1e6) & (r.states[:, 6] < hi * 1e6) & (r.states[:, 1] > 0)]
        if len(st):
            X = np.ascontiguousarray(states_to_components(st, data.mv[e.id]))
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
