"""The physical rules on the shipped configs' shapes (evaluator/served_shapes.py): the verdicts,
the coverage line and the recommendation that prefers a program usable for the served models.

Hand-checkable deployments (80 GB x 0.9 = 72 GB usable, bf16 weights): Llama-3.1-70B has 141 GB
of weights, so TP2 (70.5 GB a GPU); Mixtral-8x22B 281 GB, so TP4; the 7-12B models TP1."""
from __future__ import annotations

import json

import numpy as np
import pytest

from evaluator.coverage import coverage, coverage_lines
from evaluator.data import load
from evaluator.physics import check_by_model, measured_read, model_grids
from evaluator.predict import StoredProgram
from evaluator.program import parse_program
from evaluator.records import Evaluation
from evaluator.served_shapes import (HOLDS, NOT_CHECKABLE, VIOLATED, check_served_shapes, served_deployments,
                                     served_line)
from evolve.archive import Archive
from evolve.views.tables import frontier_table
from seeds import seed_sources

ROOFLINE = seed_sources()["roofline"]
# physical on every deployment of the data (at most 32 layers a GPU: llama-2-7b at TP1), half the
# work below the floor where a GPU holds more than 30 layers of a model over 60 layers deep:
# Llama-3.1-70B at TP2 (40 a GPU), none of the data's (llama-2-70b runs at TP4: 20 a GPU)
DEEP_ONLY = """S = 2.0

def predict_step_time(t_prefill_gemm, t_prefill_attn, t_decode_gemm, t_lm_head, t_weights, t_decode_kv, layers, tp):
    work = max(t_prefill_gemm + t_prefill_attn + t_decode_gemm + t_lm_head, t_weights + t_decode_kv)
    if layers > 60.0:
        if layers > tp * 30.0:
            return 0.5 * work
    return S * work
"""
EXPECTED_TP = {"Llama-3.1-70B-Instruct": 2, "Llama-3.1-8B-Instruct": 1, "Mistral-Nemo-Instruct-2407": 1,
               "Mixtral-8x22B-v0.1": 4, "Qwen2.5-7B-Instruct": 1}


@pytest.fixture(scope="module")
def embedded():
    return load(None)  # kernel tables only for the measured deployments


def stored(source: str, **consts) -> StoredProgram:
    p = parse_program(source)
    vals = [float(consts.get(n, v)) for n, v in zip(p.const_names, p.initial_constants)]
    return StoredProgram(p, {"*": vals}, {}, {}, {}, ["llama-2-7b"], "test")


def by_model(results) -> dict:
    return {r.model: r for r in results}


def test_each_config_at_the_smallest_tp_that_fits(embedded):
    deps = served_deployments(embedded)
    assert {m: d.tp for m, d in deps.items()} == EXPECTED_TP
    e = embedded.experiments[0]
    assert all(d.max_num_seqs == e.max_num_seqs and d.max_batched_tokens == e.max_batched_tokens for d in deps.values())


@pytest.mark.parametrize("efficiency", [1.0, 1.5])
def test_roofline_holds_on_every_served_shape(embedded, efficiency):
    res = check_served_shapes(stored(ROOFLINE, EFFICIENCY=efficiency), embedded)
    assert {r.model: (r.tp, r.status) for r in res} == {m: (tp, HOLDS) for m, tp in EXPECTED_TP.items()}


def test_a_program_below_the_floor_only_at_a_served_shape_is_flagged_by_name(embedded):
    prog = parse_program(DEEP_ONLY)  # the data's own check passes it
    assert check_by_model(prog.compiled(), {"*": np.array([2.0])}, None, model_grids(embedded),
                          measured_read(prog.params)) is None
    res = by_model(check_served_shapes(stored(DEEP_ONLY), embedded))
    bad = res.pop("Llama-3.1-70B-Instruct")
    assert bad.status == VIOLATED and bad.tp == 2
    assert bad.why.startswith("llama-3.1-70b: below the hardware floor") and "layers=80 tp=2" in bad.why
    assert all(r.status == HOLDS for r in res.values())


def test_measured_kernel_program_without_tables_is_not_checkable(monkeypatch):
    from evaluator import predict, served_shapes
    from evaluator.data import load_default_table
    gt = load(None)
    table = load_default_table()  # as before `evolve make-default` embedded the shipped configs' tables
    table["kernels"] = {k: v for k, v in table["kernels"].items()
                        if k.split("@")[0] in {e.model for e in gt.experiments}}
    monkeypatch.setattr(predict, "load_default_table", lambda: table)
    monkeypatch.setattr(served_shapes, "_DEPLOYMENTS", {})
    res = check_served_shapes(stored(seed_sources()["measured"]), gt)
    assert all(r.status == NOT_CHECKABLE for r in res)
    assert all("component t_step_measured cannot be computed" in r.why for r in res)
    line = served_line(res)  # nothing checked: the line must not read as a verdict ("none")
    assert line.startswith("Physical on served shapes: not checked here; not checkable: ")
    assert "none" not in line and all(r.name in line for r in res)


def test_measured_kernel_program_with_the_data_tables_holds(gt):
    res = check_served_shapes(stored(seed_sources()["measured"]), gt)
    assert {r.model: r.status for r in res} == {m: HOLDS for m in EXPECTED_TP}


def test_the_embedded_default_checks_measured_kernel_programs(embedded):
    """The embedded table holds each shipped config's kernel tables at its served TP, so a program on
    measured kernels is checked there as on the data: a violation is found, not passed as unknown."""
    res = check_served_shapes(stored(seed_sources()["measured"]), embedded)
    assert {r.model: (r.tp, r.status) for r in res} == {m: (tp, HOLDS) for m, tp in EXPECTED_TP.items()}
    below = stored(seed_sources()["measured"].replace("return OVERHEAD + t_step_measured",
                                                      "return 0.0 * OVERHEAD + 0.1 * t_step_measured"))
    bad = by_model(check_served_shapes(below, embedded))
    assert all(r.status == VIOLATED and "below the hardware floor" in r.why for r in bad.values())


def test_coverage_states_the_served_shapes(embedded, tmp_path):
    a = Archive(tmp_path / "c.db")
    run = a.start_run({}, seed=0, data_fingerprint="x", budget=1)
    pid = a.add_candidate(run, DEEP_ONLY, operator="seed",
                          evaluation=Evaluation(valid=True, rows=[], objectives={"e2e_mean": 0.1},
                                                constants={"*": [2.0]}))
    cov = coverage(embedded, {"e2e_mean": 0.1}, a.program(pid))
    json.dumps(cov, allow_nan=False)  # strict JSON
    assert [r["status"] for r in cov["served_shapes"]].count(VIOLATED) == 1
    line = coverage_lines(cov)[-1]
    assert line.startswith("Physical on served shapes: Llama-3.1-8B-Instruct TP1 ✓")
    assert "; violated: Llama-3.1-70B-Instruct TP2 (llama-3.1-70b: below the hardware floor" in line
    assert "served_shapes" not in coverage(embedded, {"e2e_mean": 0.1})  # no program: no such line


def test_best_transfer_prefers_a_program_physical_on_the_served_shapes(embedded, tmp_path):
    from evaluator.served_shapes import usable_check
    a = Archive(tmp_path / "b.db")
    run = a.start_run({}, seed=0, data_fingerprint="x", budget=2)

    def add(src, consts, err):
        return a.add_candidate(run, src, operator="seed", evaluation=Evaluation(
            valid=True, rows=[], objectives={"e2e_mean": err}, constants={"*": consts}))
    violating = add(DEEP_ONLY, [2.0], 0.05)
    holding = add(ROOFLINE, [15000.0, 1.5], 0.10)
    assert a.best_transfer(run)["id"] == violating  # the lower loss, without the check
    usable = usable_check(embedded)
    asked = []
    assert a.best_transfer(run, usable=lambda r: asked.append(r["id"]) or usable(r))["id"] == holding
    assert asked == [violating, holding]  # lazily, best first, until one passes
    assert a.best_transfer(run, usable=lambda r: False)["id"] == violating  # none holds: the best anyway
    # the report's frontier table (and the UI, which passes the same check) marks the same one
    rows = frontier_table(a, run, usable=usable)
    assert [r["id"] for r in rows if r["recommended"]] == [holding]
    # once the run fixes its choice, every view names it, the check or not (`evolve frontier`)
    a.set_recommended(run, a.best_transfer(run, usable=usable, fresh=True)["id"])
    assert a.best_transfer(run)["id"] == holding
    assert [r["id"] for r in frontier_table(a, run) if r["recommended"]] == [holding]
    assert a.best_transfer(run, usable=lambda r: False, fresh=True)["id"] == violating  # fresh: chosen again
