"""Held-out splits (evaluator.holdout): which data each split fits on and scores, that nothing
of the held-out part reaches the fit, and the objectives the search ranks on."""
from __future__ import annotations

import copy
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from evaluator.data import load
from evaluator.evaluate import Evaluator
from evaluator.holdout import (KINDS, OVERLOADED, PREFIX, collapsed, holdout_scores, long_workloads, make_split,
                               misses, overload_error, ranked_error, request_context, splits_of, summarize,
                               worst_model)
from evaluator.objectives import (HELDOUT, HELDOUT_ORDER, IN_SAMPLE_ORDER, objective_vector, regime_errors,
                                  selection_loss, vector_order)
from evaluator.program import parse_program
from evaluator.records import Evaluation
from evolve.pareto import pareto_front
from seeds import seed_sources


@pytest.fixture(scope="module")
def gt():
    return load(None)  # the embedded default: 4 models x 4 workloads, stage summaries


@pytest.fixture(scope="module")
def ev(gt):
    e = Evaluator(gt)
    e.reference_states()
    return e


@pytest.fixture(scope="module")
def roofline():
    return parse_program(seed_sources()["roofline"])


@pytest.fixture(scope="module")
def scored(ev, roofline):
    return ev.evaluate(roofline, heldout=True)


# ---------------------------------------------------------------- the splits themselves

def test_workload_and_model_splits_partition_the_experiments(gt):
    exps = gt.experiments
    long = long_workloads(exps)
    assert long == {"reasoning"}  # 100 + 934 + 1,448 tokens against at most 150 + 600 + 251
    for kind in ("workload", "model"):
        # LOWO runs on the short workloads: the long one has a split of its own
        pool = [e for e in exps if kind == "model" or e.workload not in long]
        splits = splits_of(exps, kind)
        names = {(e.workload if kind == "workload" else e.model) for e in pool}
        assert {s.value for s in splits} == names
        for s in splits:
            assert set(s.fit).isdisjoint(s.report)
            assert set(s.fit) | set(s.report) == {e.id for e in pool}
            held = {e.id for e in pool if (e.workload if kind == "workload" else e.model) == s.value}
            assert set(s.report) == held
            assert s.global_fit == (kind == "model")
        exps_kind = pool
        # every experiment is held out exactly once
        assert sorted(i for s in splits for i in s.report) == sorted(e.id for e in exps_kind)


def test_load_split_fits_the_lowest_rate_stage_and_scores_the_others(gt):
    s = make_split(gt.experiments, "load")
    multi = [e for e in gt.experiments if len(e.stages) > 1]
    assert set(s.fit) == set(s.report) == {e.id for e in multi}
    for e in multi:
        low = min(e.stages, key=lambda st: st.rate)
        assert s.fit[e.id] == (low.index,)
        assert set(s.report[e.id]) == {st.index for st in e.stages} - {low.index}
        assert all(st.rate > low.rate for st in e.stages if st.index in s.report[e.id])


@pytest.mark.parametrize("kind,value,msg", [("nope", None, "holdout kind"), ("model", "gpt-9", "no experiment with model"),
                                            ("workload", None, "no experiment with workload")])
def test_bad_split_names_what_is_wrong(gt, kind, value, msg):
    with pytest.raises(ValueError, match=msg):
        make_split(gt.experiments, kind, value)


def test_one_workload_cannot_be_left_out(gt):
    one = [e for e in gt.experiments if e.workload == "general"]
    assert splits_of(one, "workload") == []
    single_stage = [e for e in gt.experiments if len(e.stages) == 1]
    assert splits_of(single_stage, "load") == []


# ---------------------------------------------------------------- scoring

def test_heldout_objectives_rows_and_json(scored, gt):
    assert scored.valid, scored.error
    for kind in KINDS:
        block = scored.holdout[kind]
        assert not block["errors"]
        name = f"{PREFIX[kind]}_e2e"
        assert math.isfinite(scored.objectives[name]) and scored.objectives[name] >= 0
        timed = [ranked_error(r, kind) for r in block["rows"] if r["e2e_err"] is not None]  # not the mostly failed
        by_model = {}
        for r in block["rows"]:
            if r["e2e_err"] is not None:
                by_model.setdefault(r["model"], []).append(ranked_error(r, kind))
        head = max(np.mean(v) for v in by_model.values()) if kind == "model" else np.mean(timed)
        assert scored.objectives[name] == pytest.approx(head)  # LOMO: its worst held-out model
        assert block["objectives"][f"{PREFIX[kind]}_e2e_worst"] >= block["objectives"][name]
        for r in block["rows"]:
            split = make_split(gt.experiments, *r["split"].split(":")) if ":" in r["split"] \
                else make_split(gt.experiments, r["split"])
            assert r["stage"] in split.report[r["experiment"]], r  # only held-out stages are scored
    assert set(scored.holdout["model"]["constants"]["model:llama-2-7b"]) == {"*"}  # one vector for all models
    json.dumps(scored.holdout, allow_nan=False)  # all finite here: strict JSON
    back = Evaluation.from_json(json.loads(json.dumps(scored.to_json())))  # one converter each way
    assert back.holdout["load"]["rows"] == scored.holdout["load"]["rows"]
    # the in-sample part is the unrefined evaluation, whatever the held-out splits scored
    plain = Evaluator(gt).evaluate(parse_program(seed_sources()["roofline"]), refine=False)
    for k in IN_SAMPLE_ORDER:
        assert plain.objectives[k] == pytest.approx(scored.objectives[k], rel=1e-12, nan_ok=True)


def test_fit_never_sees_the_held_out_part(gt, roofline):
    """Change every measurement of the held-out part: the split's fitted constants must not move
    (and its errors must, since they are scored against those measurements)."""
    ev = Evaluator(gt)
    cases = [("workload", "general", lambda e, s: e.workload == "general"),
             ("model", "llama-2-7b", lambda e, s: e.model == "llama-2-7b"),
             ("load", None, lambda e, s: len(e.stages) > 1 and s.index != min(e.stages, key=lambda x: x.rate).index)]
    for kind, value, held in cases:
        split = make_split(gt.experiments, kind, value)
        base = ev.for_split(split).evaluate(roofline, refine=False)
        gt2 = copy.deepcopy(gt)
        for e in gt2.experiments:
            e.stages = [replace(s, itl_s=s.itl_s * 1.7, e2e_s=s.e2e_s * 1.7, ttft_s=s.ttft_s * 3) if held(e, s) else s
                        for s in e.stages]
        moved = Evaluator(gt2).for_split(make_split(gt2.experiments, kind, value)).evaluate(roofline, refine=False)
        assert base.valid and moved.valid
        for k in base.constants:
            np.testing.assert_allclose(moved.constants[k], base.constants[k], rtol=1e-9, err_msg=f"{kind} leaks")
        assert moved.objectives["e2e_mean"] != pytest.approx(base.objectives["e2e_mean"], rel=1e-3)


def test_a_failing_split_makes_the_objective_infinite(ev, roofline, scored):
    """A split that cannot be scored ranks as invalid, with its reason kept."""
    broken = Evaluation(valid=True, overheads={}, objectives=dict(scored.objectives))
    out = holdout_scores(ev, roofline, broken)  # LOMO then simulates the fitted models too
    assert math.isfinite(out.objectives["lomo_e2e"])
    bad = holdout_scores(ev, parse_program("def predict_step_time(D):\n    return -1.0 * D\n"), scored)
    for kind in KINDS:
        assert bad.objectives[f"{PREFIX[kind]}_e2e"] == math.inf
        assert bad.holdout[kind]["errors"]


def test_long_decode_split_fits_on_shorter_contexts_only(gt):
    """Fitted per model on the short workloads, scored on the long one; found from the data
    (the widest gap of at least 1.5x in request context), not from a workload's name."""
    (s,) = splits_of(gt.experiments, "long")
    by_id = {e.id: e for e in gt.experiments}
    assert {by_id[i].workload for i in s.report} == {"reasoning"} and len(s.report) == 4
    assert {by_id[i].workload for i in s.fit} == {"codegen", "general", "roleplay"} and not s.global_fit
    longest_fit = max(request_context(by_id[i]) for i in s.fit)
    assert min(request_context(by_id[i]) for i in s.report) >= 1.5 * longest_fit
    short = [e for e in gt.experiments if e.workload != "reasoning"]
    assert long_workloads(short) == frozenset() and splits_of(short, "long") == []
    with pytest.raises(ValueError, match="long-decode split needs"):
        make_split(short, "long")


def test_long_decode_and_overload_objectives(scored):
    """`long_e2e` is the long split's mean error: E2E on a stage below overload (codellama's
    0.08% failed), per-token time on one the measurement overloaded with latencies left (70b:
    33% failed; mixtral's and 7b's mostly failed, no latency); `overload_fail` the mean
    failed-fraction error over its overloaded stages (70b, mixtral, 7b reasoning)."""
    b = scored.holdout["long"]
    assert not b["errors"]
    by_model = {r["model"]: r for r in b["rows"]}
    ranked = [by_model["codellama-34b"]["e2e_err"], by_model["llama-2-70b"]["itl_err"]]
    assert None not in ranked and by_model["llama-2-70b"]["e2e_err"] != by_model["llama-2-70b"]["itl_err"]
    assert by_model["mixtral-8x7b"]["itl_err"] is None and by_model["llama-2-7b"]["itl_err"] is None
    assert scored.objectives["long_e2e"] == pytest.approx(np.mean(ranked))
    assert b["objectives"]["long_e2e_worst"] == pytest.approx(max(ranked))
    over = [r for r in b["rows"] if r["meas_fail"] > OVERLOADED]
    assert {r["model"] for r in over} == {"llama-2-7b", "llama-2-70b", "mixtral-8x7b"}
    over += [r for r in b["rows"] if r["meas_fail"] <= OVERLOADED < r["pred_fail"]]  # a collapse only simulated
    assert scored.objectives["overload_fail"] == pytest.approx(np.mean([abs(r["pred_fail"] - r["meas_fail"])
                                                                       for r in over]))
    assert set(regime_errors(scored.objectives)) == {"lowo_e2e", "lomo_e2e", "load_e2e", "long_e2e", "overload_fail"}
    assert vector_order([scored.objectives]) == (*HELDOUT, "complexity", "long_e2e", "overload_fail")


def test_an_overloaded_stage_ranks_long_decode_on_its_per_token_time():
    """Only the long-decode regime swaps E2E for the per-token time, and only on a stage the
    measurement overloaded: elsewhere (and in LOMO, LOWO, high load) E2E is what is ranked,
    and a stage without latencies (mostly failed) counts in none of them."""
    calm = {"e2e_err": 0.10, "itl_err": 0.02, "ttft_err": 0.3, "meas_fail": 0.0008}
    queued = {"e2e_err": 0.30, "itl_err": 0.04, "ttft_err": 0.5, "meas_fail": 0.33}
    lost = {"e2e_err": None, "itl_err": None, "ttft_err": None, "meas_fail": 0.69}
    assert [ranked_error(r, "long") for r in (calm, queued, lost)] == [0.10, 0.04, None]
    assert [ranked_error(r, "model") for r in (calm, queued, lost)] == [0.10, 0.30, None]
    long = summarize([calm, queued, lost], {}, "long")
    assert long["long_e2e"] == pytest.approx(0.07) and long["long_e2e_worst"] == pytest.approx(0.10)
    assert long["long_itl"] == pytest.approx(0.03)  # the diagnostics stay per kind of error
    assert summarize([calm, queued, lost], {}, "model")["lomo_e2e"] == pytest.approx(0.20)
    assert math.isinf(summarize([calm], {"long": "runaway"}, "long")["long_e2e"])


def test_lomo_ranks_the_worst_held_out_model():
    """LOMO's objective is the mean error of each held-out model's stages at the worst model (the
    target is per model): three models that transfer well do not hide one that does not; a
    model whose stages all mostly failed (no latency) is left to the overload objective."""
    def row(model, e2e):
        return {"model": model, "e2e_err": e2e, "itl_err": e2e, "ttft_err": 0.1, "meas_fail": 0.0}
    rows = [row("a", 0.02), row("a", 0.04), row("b", 0.01), row("c", 0.01), row("d", 0.12), row("d", 0.08),
            {**row("e", None), "itl_err": None, "meas_fail": 0.85}]
    out = summarize(rows, {}, "model")
    assert out["lomo_e2e"] == pytest.approx(0.10)  # d's mean; the mean over stages would be 0.0467
    assert out["lomo_e2e_worst"] == pytest.approx(0.12)
    assert summarize(rows, {}, "workload")["lowo_e2e"] == pytest.approx(np.mean([0.02, 0.04, 0.01, 0.01, 0.12, 0.08]))
    assert worst_model([rows[-1]]) == math.inf


def test_a_collapse_only_the_simulation_has_is_scored_and_named():
    """The overload objective and the misses see failures predicted where the measurement had
    none (the trace run's #1567: codellama reasoning 15.8% simulated, 0.1% measured), not only
    failures missed; a stage below OVERLOADED in both counts in neither; and the objective exists
    only where the measurement overloaded a held-out stage, whatever the program predicts."""
    def row(model, meas, pred):
        return {"model": model, "workload": "reasoning", "stage": 0, "e2e_err": 0.05, "itl_err": 0.02,
                "meas_fail": meas, "pred_fail": pred, "fail_err_pts": 100 * abs(pred - meas)}
    queued, calm = row("70b", 0.333, 0.372), row("7b", 0.0, 0.004)
    spurious = row("codellama", 0.0008, 0.158)
    assert collapsed(spurious) and not collapsed(queued) and not collapsed(calm)
    blocks = {"long": {"rows": [queued, calm, spurious], "errors": {}}}
    assert overload_error(blocks) == pytest.approx(np.mean([0.039, 0.1572]))
    assert overload_error({"long": {"rows": [queued, calm], "errors": {}}}) == pytest.approx(0.039)
    found = {(m["kind"], m["model"]) for m in misses(blocks) if m["measure"] == "failed"}
    assert found == {("overload", "codellama")}
    assert overload_error({"long": {"rows": [calm, spurious], "errors": {}}}) is None  # no measured overload
    assert misses({"long": {"rows": [calm, spurious], "errors": {}}})[0]["model"] == "codellama"


# ---------------------------------------------------------------- ranking

def test_selection_is_on_the_worst_regime():
    """One bad regime is not diluted by good ones: a program 40% off on long decode ranks
    below one 12% off everywhere, whatever its mean."""
    even = {"e2e_mean": 0.05, "lowo_e2e": 0.12, "lomo_e2e": 0.12, "load_e2e": 0.12, "long_e2e": 0.12,
            "overload_fail": 0.12}
    spiky = {**even, "lowo_e2e": 0.01, "lomo_e2e": 0.01, "load_e2e": 0.01, "overload_fail": 0.01, "long_e2e": 0.4}
    assert np.mean(list(regime_errors(spiky).values())) < np.mean(list(regime_errors(even).values()))
    assert selection_loss(even) < selection_loss(spiky)
    broken = {**even, "overload_fail": math.inf}  # a regime that could not be scored
    assert selection_loss(broken) > selection_loss(spiky)



def test_handover_measures_each_regime_from_its_best(tmp_path):
    """The program a run hands over: the least given up in any regime against the best reached
    there (`handover_regrets`), so a regime whose floor no program gets under (here overload,
    45 points at best) does not decide alone; the search's own ranking stays the raw worst."""
    from evaluator.objectives import handover_regrets
    from evolve.archive import Archive
    base = {"e2e_mean": 0.05, "lowo_e2e": 0.02, "lomo_e2e": 0.06, "load_e2e": 0.03}
    flat = {**base, "long_e2e": 0.18, "overload_fail": 0.45}  # raw worst 45: lowest
    long_ok = {**base, "lowo_e2e": 0.025, "long_e2e": 0.09, "overload_fail": 0.47}  # gives up 2 points there
    worse = {**base, "long_e2e": 0.20, "overload_fail": 0.60}
    assert selection_loss(flat) < selection_loss(long_ok) < selection_loss(worse)
    r = handover_regrets([flat, long_ok, worse])
    assert r == pytest.approx([0.09, 0.02, 0.15])  # flat gives up 9 on long decode
    assert handover_regrets([flat]) == [0.0]
    broken = {**base, "long_e2e": math.inf, "overload_fail": 0.40}
    assert handover_regrets([flat, broken])[1] > 1e6  # an unscored regime is never handed over
    no_heldout = {"e2e_mean": 0.03}
    assert handover_regrets([no_heldout]) == [selection_loss(no_heldout)]
    a = Archive(tmp_path / "h.db")
    run = a.start_run({}, seed=0, data_fingerprint="x", budget=3)
    ids = [a.add_candidate(run, f"def predict_step_time(t_weights):\n    return t_weights * {i + 1}\n",
                           operator="seed", evaluation=Evaluation(valid=True, rows=[], objectives=o,
                                                                  constants={"*": []}))
           for i, o in enumerate((flat, long_ok, worse))]
    assert a.best_transfer(run)["id"] == ids[1]

def test_ranking_uses_heldout_errors_when_every_record_has_them():
    a = {"e2e_mean": 0.01, "complexity": 5, "lowo_e2e": 0.5, "lomo_e2e": 0.5, "load_e2e": 0.5}
    b = {"e2e_mean": 0.20, "complexity": 5, "lowo_e2e": 0.1, "lomo_e2e": 0.1, "load_e2e": 0.1}
    assert vector_order([a, b]) == HELDOUT_ORDER
    assert pareto_front([a, b]) == [b]  # in-sample accuracy alone does not win
    assert selection_loss(b) < selection_loss(a)
    c = {"e2e_mean": 0.01, "complexity": 5}
    assert vector_order([a, c]) == IN_SAMPLE_ORDER  # mixed: rank on what all of them have
    assert len(objective_vector(a)) == len(HELDOUT) + 1
    assert pareto_front([a, c]) == [a, c]


# ---------------------------------------------------------------- the command line

def test_cli_evaluate_holdout_one_kind_strict_json(capsys):
    from evolve.cli import main as cli_main
    assert cli_main(["evaluate", "seeds/roofline.py", "--holdout", "load", "--json"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert set(out["holdout"]) == {"load"}
    assert out["objectives"]["load_e2e"] == pytest.approx(out["holdout"]["load"]["objectives"]["load_e2e"])
    assert all(r["split"] == "load" and r["stage"] >= 1 for r in out["holdout"]["load"]["rows"])
    with pytest.raises(SystemExit):
        cli_main(["evaluate", "seeds/roofline.py", "--holdout", "moon"])
    assert "invalid choice" in capsys.readouterr().err


def test_cli_baselines_holdout_table(capsys):
    from evolve.cli import main as cli_main
    assert cli_main(["baselines", "--holdout"]) == 0
    text = capsys.readouterr().out
    assert "Held-out errors" in text and "LOMO" in text and "model:llama-2-7b" in text


def test_an_executor_joins_split_jobs_into_the_one_process_evaluation(ev):
    """A full job cut into one job per held-out split, the screen standing for its in-sample
    part, joins (in whatever order the splits come back) into what one process makes."""
    from evaluator.holdout import split_labels
    from evolve.workers import Executor, Job
    p = parse_program(seed_sources()["linear_physics"])
    wire = lambda e: Evaluation.from_json(json.loads(json.dumps(e.to_json())))  # noqa: E731  (as a pool sends it)
    screen = wire(ev.evaluate(p, refine=False))
    whole = ev.evaluate(p, start=screen.constants, heldout=True)
    labels = split_labels(ev.all_exps)
    assert len(labels) == 9 and labels[-2:] == ["load", "long"]  # 3 LOWO (short folds), 4 LOMO, load, long
    ex = Executor(60.0, True, labels)
    full = Job(0, p.source, "full", screen.constants, screen=screen)
    ex.submit(Job(1, p.source, "screen"))
    ex.submit(full, first=True)  # its splits go before the queued screen
    assert [j.split for j in ex.pending] == labels + [None]
    cut = ex.pending[:-1]
    back = {j.split: wire(ev.evaluate_split(p, j.split, j.overheads)) for j in cut}
    ex._poll = lambda: [(j, back[j.split]) for j in reversed(cut[2:])]
    assert ex.poll() == []  # two splits still out
    ex._poll = lambda: [(j, back[j.split]) for j in cut[:2]]
    (job, joined), = ex.poll()
    assert job is full
    # the worker time the candidate took, its screen's included (the archive's seconds)
    assert joined.seconds == pytest.approx(screen.seconds + sum(r.seconds for r in back.values()))
    assert joined.seconds > screen.seconds > 0
    a, b = whole.to_json(), joined.to_json()
    assert b.pop("seconds") > 0 and a.pop("seconds") > 0
    assert json.dumps(a) == json.dumps(b)
    # a split that failed on its worker fails its kind only, as in one process
    ex.submit(full)
    cut = list(ex.pending[-9:])
    # the next full job is cut slowest split first, as the splits just measured (longest first)
    assert set(ex._split_seconds) == set(labels)
    assert [j.split for j in cut] == sorted(labels, key=lambda label: -ex._split_seconds[label])
    ex._poll = lambda: [(j, Evaluation(valid=False, error="worker died") if j.split == "load" else
                         wire(ev.evaluate_split(p, j.split, j.overheads))) for j in cut]
    (_, joined), = ex.poll()
    assert joined.holdout["load"]["errors"] == {"load": "worker died"}
    assert math.isinf(joined.objectives["load_e2e"]) and joined.objectives["lowo_e2e"] == whole.objectives["lowo_e2e"]


def test_prepared_split_views_are_the_ones_a_run_uses(gt, ev):
    """A worker prepares every split view as it starts (`Evaluator.prepare_heldout`): the
    split jobs of a run then make no view and no fitting state of their own, and score the
    same as on an evaluator that made them on first use."""
    from evaluator.holdout import split_labels
    p = parse_program(seed_sources()["linear_physics"])
    fresh = Evaluator(gt)
    fresh.prepare_heldout()
    caches = lambda e: {k: (set(v._ref_states_cache), set(v._cons_cache), set(v._probe_cache))  # noqa: E731
                        for k, v in e._splits.items()}
    made = caches(fresh)
    assert len(made) == 9 and all(refs and cons for refs, cons, _ in made.values())
    screen = fresh.evaluate(p, refine=False)
    for label in split_labels(fresh.all_exps):
        got = fresh.evaluate_split(p, label, screen.overheads)
        want = ev.evaluate_split(p, label, ev.evaluate(p, refine=False).overheads)
        assert got.objectives == want.objectives and got.constants == want.constants, label
    assert caches(fresh) == made
