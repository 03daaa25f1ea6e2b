"""The measured components inside the alphabet: the same values in step rows, the simulator and
the embedded default; NaN and a one-line reason without kernel tables; the seeds that use them."""
from __future__ import annotations

import math

import numpy as np
import pytest

from evaluator.component_table import LATE_ROWS
from evaluator.components import COMPONENT_INDEX, COMPONENTS, MEASURED_NAMES, MODEL_FIELDS
from evaluator.data import load_default, load_ground_truth
from evaluator.evaluate import Evaluator
from evaluator.measured import MEASURED_COMPONENTS, measured_matrix, step_aggregates
from evaluator.program import parse_program
from evaluator.step_scoring import build_step_rows
from seeds import seed_sources

MEASURED_SEEDS = sorted(k for k, v in seed_sources().items() if MEASURED_NAMES & set(parse_program(v).params))


def test_measured_components_come_after_the_peak_speed_ones_and_seeds_use_them():
    # then only the longest-context formulas (evaluator.component_table.LATE_ROWS)
    late = len(LATE_ROWS)
    assert COMPONENTS[-len(MEASURED_COMPONENTS) - late:-late] == MEASURED_COMPONENTS
    assert {"measured", "measured_per_request"} <= set(MEASURED_SEEDS)


def test_step_rows_carry_the_measured_components(gt):
    rows = build_step_rows(gt)
    cols = [COMPONENT_INDEX[c] for c in MEASURED_COMPONENTS]
    for model, r in rows.items():
        e = next(e for e in gt.experiments if e.model == model)
        assert e.kernels is not None and e.model_vec(gt.hardware).shape[0] == len(MODEL_FIELDS) + len(e.kernels)
        s = gt.steps[gt.steps["model_key"] == model]
        want = measured_matrix(e.kernels, *step_aggregates(s))
        assert np.array_equal(r.X[:, cols], want)
        assert np.isfinite(want).all() and (want[:, -1] > 0).mean() > 0.99


def test_the_embedded_default_carries_the_same_tables(gt):
    emb = {(e.model, e.tp): e.kernels for e in load_default().experiments}
    for e in gt.experiments:
        assert np.array_equal(emb[(e.model, e.tp)], e.kernels), e.model


@pytest.fixture(scope="module")
def no_kernels(data_dir, tmp_path_factory):
    """The real ground truth without kernels/ (everything else linked)."""
    root = tmp_path_factory.mktemp("nokernels")
    for p in data_dir.iterdir():
        if p.name != "kernels":
            (root / p.name).symlink_to(p)
    return load_ground_truth(root)


def test_without_kernel_tables_measured_programs_are_invalid_with_the_reason(no_kernels):
    e = no_kernels.experiments[0]
    assert e.kernels is None and e.model_vec(no_kernels.hardware).shape[0] == len(MODEL_FIELDS)
    rows = build_step_rows(no_kernels)
    r = next(iter(rows.values()))
    assert np.isnan(r.X[:, [COMPONENT_INDEX[c] for c in MEASURED_COMPONENTS]]).all()
    assert np.isfinite(r.X[:, :COMPONENT_INDEX[MEASURED_COMPONENTS[0]]]).all()
    ev = Evaluator(no_kernels)
    res = ev.evaluate(parse_program(seed_sources()["measured"]))
    assert not res.valid
    assert res.error == f"measured components need the kernel tables in {no_kernels.source}/kernels/" \
                        "aiconfigurator-h100-vllm-0.14.0"
    assert "\n" not in res.error


def test_without_kernel_tables_other_programs_are_unaffected(no_kernels, evaluator):
    prog = parse_program(seed_sources()["roofline"])
    a = Evaluator(no_kernels).evaluate(prog, refine=False)
    b = evaluator.evaluate(prog, refine=False)
    assert a.valid and b.valid and a.objectives == pytest.approx(b.objectives, rel=1e-9)


@pytest.mark.parametrize("name", MEASURED_SEEDS)
def test_measured_seeds_evaluate_validly(evaluator, name):
    prog = parse_program(seed_sources()[name])
    res = evaluator.evaluate(prog)
    assert res.valid, res.error
    assert all(math.isfinite(v) for v in res.objectives.values())
    # one fitted constant set per model, all finite
    assert set(res.constants) == set(evaluator.gt.models)


def test_spec_mode_evaluates_measured_seed():
    gt = load_default()
    assert all(e.kernels is not None for e in gt.experiments)
    res = Evaluator(gt).evaluate(parse_program(seed_sources()["measured"]))
    assert res.valid, res.error


def test_the_spread_wait_carries_the_measured_kernels_to_the_long_workload(evaluator):
    """DESIGN 3b: the kernel tables hold per kernel at long contexts, but a batch whose contexts
    spread costs more than its mean context says. Fitted on the short workloads only, the seed
    that adds that wait (t_decode_spread, no constant on it) is nearer the long workload's
    measured time per output token than the same seed without it, on the two models the
    reasoning runs did not overload into mostly failures (codellama-34b, llama-2-70b)."""
    def per_token(name):
        ev = evaluator.evaluate(parse_program(seed_sources()[name]), heldout=("long",))
        assert ev.valid, ev.error
        return {r["model"]: r["itl_err"] for r in ev.holdout["long"]["rows"]}
    with_wait, without = per_token("measured_spread"), per_token("measured_per_layer")
    for model in ("codellama-34b", "llama-2-70b"):
        assert with_wait[model] is not None and with_wait[model] < without[model], (model, with_wait, without)
