"""Branches the fitted data never crossed (evaluator.branches): traced on fitted and held-out
states; the held-out split that relies on one is not scored."""
from __future__ import annotations

import math

import numpy as np
import pytest

from evaluator.branches import branch_counts, conditionals, unsupported_branches
from evaluator.components import COMPONENT_INDEX as CI
from evaluator.components import N_COMPONENTS
from evaluator.data import load
from evaluator.evaluate import Evaluator
from evaluator.program import parse_program

# the trace run's handed-over program #731 (issue 29): a KV threshold only the reasoning runs cross
P731 = """PER_LAYER = 100.0
C = 0.01

def predict_step_time(t_step_measured, layers, K, t_decode_kv):
    return t_step_measured - PER_LAYER * layers + C * (t_step_measured * layers if K > 100000 else t_decode_kv)
"""


def rows(k_values):
    X = np.zeros((len(k_values), N_COMPONENTS))
    X[:, CI["K"]] = k_values
    X[:, CI["t_step_measured"]] = 20000.0
    X[:, CI["layers"]] = 48
    X[:, CI["t_decode_kv"]] = 1000.0
    return X


def test_counts_follow_the_thresholds():
    p = parse_program(P731)
    c = p.initial_constants
    assert len(conditionals(p)) == 1
    counts = branch_counts(p, [(rows([1e3, 5e4, 2e5]), c)])
    assert counts.tolist() == [[2, 1]]  # two below the threshold (false), one above


def test_a_threshold_crossed_only_by_held_out_states_is_reported():
    p = parse_program(P731)
    c = p.initial_constants
    found = unsupported_branches(p, [(rows(np.linspace(1e3, 9e4, 50)), c)], [(rows(np.linspace(5e4, 3e5, 50)), c)])
    assert len(found) == 1 and "`K > 100000` is always false" in found[0]
    # crossed on both sides: nothing to report; never crossed on either: nothing either
    assert unsupported_branches(p, [(rows([1e3, 2e5]), c)], [(rows([3e5]), c)]) == []
    assert unsupported_branches(p, [(rows([1e3]), c)], [(rows([2e3]), c)]) == []


@pytest.fixture(scope="module")
def ev():
    e = Evaluator(load(None))
    e.reference_states()
    return e


def test_long_split_of_731_is_not_scored(ev):
    """Fitted on the short workloads (K never above 1e5), the branch decides every long
    request: the long-decode objective is infinite with the reason kept, and so is the
    overload objective it holds; LOWO on the short folds is scored as usual."""
    res = ev.evaluate(parse_program(P731), heldout=("workload", "long"))
    assert res.valid
    assert math.isinf(res.objectives["long_e2e"]) and math.isinf(res.objectives["overload_fail"])
    (why,) = res.holdout["long"]["errors"].values()
    assert why.startswith("branch on a threshold the fitted data never crossed: `K > 100000`")
    assert math.isfinite(res.objectives["lowo_e2e"]) and not res.holdout["workload"]["errors"]


# a test on D = 0 (prefill-only steps) reached only by steps that prefill: the shape of the
# README run's #364 and #1037, whose split verdicts flipped with the optimizer's tolerance
P_PREFILL_ONLY = """SPLIT_D = 0.0
SPLIT_P = 0.5
SCALE = 1.1

def predict_step_time(t_step_measured, D, n_prefill):
    return (t_step_measured if D > SPLIT_D else SCALE * t_step_measured) if n_prefill > SPLIT_P else t_step_measured
"""


@pytest.mark.parametrize("drift", [1e-12, -1e-12])
def test_a_test_on_prefill_only_steps_is_judged_on_the_same_states_either_side(ev, drift):
    """Every workload has prefill-only steps (D = 0), fitted and held-out alike, so a branch on
    them is not an extrapolation, whichever side of 0 the threshold's rounding drift leaves
    it. (When the fitted side was the fit's decode states only, the +1e-12 drift left LOWO's
    general split unscored.) The states traced hold prefill-only steps on both sides."""
    from evaluator.holdout import split_by_label
    from evaluator.judge_states import branch_states
    p = parse_program(P_PREFILL_ONLY)
    c = np.array(p.initial_constants, np.float64)
    c[p.const_names.index("SPLIT_D")] = drift
    for label in ("workload:general", "model:llama-2-70b", "long"):
        view = ev.for_split(split_by_label(ev.all_exps, label))
        consts = {k: c for k in {view.key(e) for e in view.fit_exps}}
        assert view.extrapolating_branches(p, consts) == [], label
        for side, exps in (("fit", view.fit_exps), ("report", view.report_exps)):
            D = np.concatenate([branch_states(view, e, side)[:, CI["D"]] for e in exps
                                if len(branch_states(view, e, side))])
            assert (D == 0).any() and (D > 0).any(), (label, side)
