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
