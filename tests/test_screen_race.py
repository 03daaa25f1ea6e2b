"""A screen that stops replaying once it cannot earn its full evaluation (evaluator.screen_race):
its bounds never exceed the true objectives, it stops only where the gate refuses the true
objectives too, the rows it keeps are the whole screen's, and a search with it promotes the
same candidates as one without (tests/test_search.py runs both)."""
import json
import math

import numpy as np
import pytest

from evaluator.objectives import FAILURE, IN_SAMPLE_ORDER, in_sample_loss
from evaluator.program import parse_program
from evaluator.replay import replay
from evaluator.screen_gate import Gate, dominates, lower_bounds
from evaluator.screen_race import model_order, raced_replay
from seeds import seed_sources

GATE_ORDER = ("e2e_mean", "complexity")
REFUSE_ALL = Gate(0.0, GATE_ORDER, ((0.0, 0.0),))  # a perfect, simplest member in the cell and front
ADMIT_ALL = Gate(None, GATE_ORDER, ())  # an empty cell


def _plain(ev):
    d = ev.to_json()
    d.pop("seconds")
    return d


@pytest.fixture(scope="module")
def screens(evaluator):
    """Two seeds screened whole (no gate): the reference every raced screen is checked against."""
    out = {}
    for name in ("linear_physics", "measured_per_layer"):
        p = parse_program(seed_sources()[name])
        out[name] = (p, evaluator.evaluate(p, refine=False, heldout=False))
    return out


def test_models_go_cheapest_first_and_every_model_once(evaluator):
    order = model_order(evaluator)
    assert sorted(order) == sorted({e.model for e in evaluator.exps})
    steps = {m: sum(len(evaluator._reference[e.id]) for e in evaluator.exps if e.model == m) for m in order}
    assert [steps[m] for m in order] == sorted(steps[m] for m in order)


def test_a_gate_that_admits_everything_changes_nothing(evaluator, screens):
    for p, whole in screens.values():
        got = evaluator.evaluate(p, refine=False, heldout=False, gate=ADMIT_ALL)
        assert not got.race
        assert _plain(got) == _plain(whole)


def test_a_stopped_screen_keeps_the_whole_screens_rows_and_bounds_its_objectives(evaluator, screens):
    for p, whole in screens.values():
        got = evaluator.evaluate(p, refine=False, heldout=False, gate=REFUSE_ALL)
        assert got.valid and got.race and got.race["models"] == model_order(evaluator)[:1]
        assert "e2e_mean" not in got.objectives and got.objectives["complexity"] == p.complexity.total
        first = got.race["models"][0]
        assert list(got.rows) == [r for r in whole.rows if r["model"] == first]
        assert got.overheads == {first: whole.overheads[first]}
        assert got.constants == whole.constants
        assert got.sim_steps < whole.sim_steps
        for k, v in got.race["bounds"].items():
            true = whole.objectives.get(k)
            if k != "complexity" and true is not None and math.isfinite(true):
                assert v <= true, (k, v, true)
        assert in_sample_loss(got.race["bounds"]) <= in_sample_loss(whole.objectives)
        assert got.race["why"].startswith(f"stopped after 1 of {got.race['of']} models ({first})")
        back = type(got).from_json(json.loads(json.dumps(got.to_json())))  # the pipe and the archive
        assert back.race == got.race


def test_it_stops_only_where_the_gate_refuses_the_true_objectives(evaluator, screens):
    """Gates around each screen's own figures, on both sides of them: a gate that admits the
    whole screen never stops it, one that refuses it may."""
    rng = np.random.default_rng(0)
    for p, whole in screens.values():
        o = whole.objectives
        c = float(p.complexity.total)
        gates = [Gate(in_sample_loss(o) * f, GATE_ORDER, ((o["e2e_mean"] * g, c - d),))
                 for f, g, d in ((0.999, 0.999, 0.0), (1.0, 1.0, 0.0), (1.001, 0.5, 1.0), (0.5, 1.001, 1.0),
                                 (0.5, 0.999, 1.0), (0.5, 0.2, 0.0))]
        gates += [Gate(in_sample_loss(o) * rng.uniform(0.2, 1.5), GATE_ORDER,
                       tuple((o["e2e_mean"] * rng.uniform(0.05, 1.5), c - rng.integers(0, 3)) for _ in range(3)))
                  for _ in range(4)]
        stopped = 0
        for gate in gates:
            got = evaluator.evaluate(p, refine=False, heldout=False, gate=gate)
            if got.race:
                stopped += 1
                assert not gate.admits({**o, "complexity": c})
                assert not gate.admits(got.race["bounds"])
            else:
                assert _plain(got) == _plain(whole)
        assert 0 < stopped < len(gates)


def test_lower_bounds_count_the_stages_every_model_will_add():
    rows = [{"e2e_err": 0.2, "ttft_err": 0.4, "itl_err": 0.1, "fail_err_pts": 10.0},
            {"e2e_err": None, "ttft_err": None, "itl_err": None, "fail_err_pts": 30.0}]
    b = lower_bounds(rows, n_latency=4, n_failure=5, has_failures=True, complexity=7)
    assert set(IN_SAMPLE_ORDER) <= set(b)
    assert b["e2e_mean"] == pytest.approx(0.05) and b["e2e_worst"] == 0.2 and b["ttft_mean"] == pytest.approx(0.1)
    assert b["itl_mean"] == pytest.approx(0.025) and b[FAILURE] == pytest.approx(0.08) and b["step_mape"] == 0.0
    assert lower_bounds(rows, 0, 5, True, 7) is None  # nothing scored on latency: NaN objectives, never stopped
    assert FAILURE not in lower_bounds(rows, 4, 0, False, 7)
    assert dominates((1, 1), (1, 2)) and not dominates((1, 2), (1, 2)) and not dominates((0, 3), (1, 2))


def test_a_failed_replay_names_the_experiment_the_views_order_fails_first(evaluator):
    """A program that cannot predict on TP 1 and TP 4 (llama-2-7b, then llama-2-70b in the data's
    order; the race replays llama-2-70b first): both replays blame llama-2-7b's first experiment."""
    src = ("C = 1.0\n\n\ndef predict_step_time(t_weights, tp):\n    if tp > 3:\n        return 0.0 * t_weights\n"
           "    if tp < 1.5:\n        return 0.0 * t_weights\n    return C * t_weights\n")
    p = parse_program(src)
    f = p.compiled()
    consts = {m: [1.0] for m in {e.model for e in evaluator.exps}}
    plain = replay(evaluator, f, consts)
    assert plain.error and plain.error.startswith(evaluator.exps[0].id)
    order = model_order(evaluator)
    assert order.index("llama-2-70b") < order.index("llama-2-7b")
    got, stop = raced_replay(evaluator, f, consts, REFUSE_ALL, float(p.complexity.total))
    assert stop is None and got.error == plain.error
    assert set(got.results) == set(plain.results)
