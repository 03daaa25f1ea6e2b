"""Measured step rows under the held-out splits: a held-out workload's, model's or load stage's
step cycles are as held out as its requests (evaluator.judge_data.row_mask), and in-sample the
fits read each stage's training window of rows, as of requests (step_scoring.row_stages)."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from evaluator import fit_program
from evaluator.holdout import make_split
from evaluator.program import parse_program
from seeds import seed_sources

# (kind, value, held(row's experiment, row's stage)): which rows each split must not fit on
CASES = [("workload", "general", lambda e, st: e.workload == "general"),
         ("model", "llama-2-70b", lambda e, st: e.model == "llama-2-70b"),
         ("load", None, lambda e, st: st != min(e.stages, key=lambda s: s.rate).index)]


@pytest.fixture(scope="module")
def program():
    return parse_program(seed_sources()["measured_per_layer"])


def _scaled(evaluator, which, factor):
    """A copy of the evaluator whose step-row targets are multiplied by `factor` where
    `which(experiment, stage)`; its held-out views are made afresh (sharing reference states)."""
    ev = copy.copy(evaluator)
    ev._splits = {}
    exps = {e.id: e for e in evaluator.all_exps}
    ev.step_rows = {}
    for m, rows in evaluator.step_rows.items():
        hit = np.array([which(exps[x], int(s)) for x, s in zip(rows.experiment, rows.stage)], bool)
        r = rows.select(np.ones(len(hit), bool))
        r.target_us = np.where(hit, r.target_us * factor, r.target_us)
        ev.step_rows[m] = r
    return ev


def _fit(ev, split, program):
    view = ev.for_split(split)
    return fit_program.surrogate_fit(view, program, program.compiled())


def test_rows_carry_their_stage_and_train_in_its_window(evaluator):
    """Every row is placed in a load stage of its experiment, and the rows that train are those
    in the first train_fraction of their stage's time: both stages of a two-stage run train."""
    exps = {e.id: e for e in evaluator.all_exps}
    assert evaluator.step_rows, "the shared data has step rows"
    for rows in evaluator.step_rows.values():
        for x in np.unique(rows.experiment):
            m = rows.experiment == x
            stages = {s.index for s in exps[x].stages}
            assert set(np.unique(rows.stage[m])) == stages
            for s in stages:
                part = rows.train[m & (rows.stage == s)]
                assert 0.5 < part.mean() < 0.9  # about train_fraction of the stage's rows (0.7)


@pytest.mark.parametrize("kind,value,held", CASES, ids=[c[0] for c in CASES])
def test_held_out_step_rows_never_reach_the_fit(evaluator, program, kind, value, held):
    """Triple the measured step cycles of the held-out part: the split's fitted constants do
    not move. Scale the fitted part's instead and they do (the test can fail)."""
    split = make_split(evaluator.all_exps, kind, value)
    view = evaluator.for_split(split)
    exps = {e.id: e for e in evaluator.all_exps}
    n_held = sum(int(held(exps[x], int(s))) for r in evaluator.step_rows.values() for x, s in zip(r.experiment, r.stage))
    assert n_held > 0, "the case must hold step rows out"
    for rows in view.fit_rows.values():
        assert not any(held(exps[x], int(s)) for x, s in zip(rows.experiment, rows.stage))
    base = _fit(evaluator, split, program)
    moved = _fit(_scaled(evaluator, held, 3.0), split, program)
    for k in base:
        np.testing.assert_array_equal(moved[k], base[k], err_msg=f"{kind}: held-out step rows reached the fit")
    fitted = _fit(_scaled(evaluator, lambda e, s: not held(e, s), 3.0), split, program)
    assert any(not np.allclose(fitted[k], base[k], rtol=1e-3) for k in base if k in fitted)


def test_a_step_clock_in_another_unit_is_refused(data_dir, tmp_path):
    """`ts_start_ns` written in microseconds squeezes a 20-minute run into 1.2 s: every row would
    land in the first stage without a word. The loader names the experiment and the unit."""
    import sys
    from pathlib import Path

    import pandas as pd

    from evaluator.data import load
    from evaluator.errors import DataError
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from hostile import make_tiny_data
    root = make_tiny_data(data_dir, tmp_path / "d", trace=True)
    assert load(str(root)).steps is not None  # as shipped: nanoseconds, accepted
    path = root / "steps" / "steps.parquet"
    df = pd.read_parquet(path)
    df["ts_start_ns"] = df["ts_start_ns"] // 1000
    df.to_parquet(path)
    with pytest.raises(DataError, match=r"step rows span 1.21 s .*\(nanoseconds expected\)"):
        load(str(root))
