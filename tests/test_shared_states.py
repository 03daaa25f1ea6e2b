"""The states a run shares with its workers (issue 31, memory): made once, released to what the
fits read, and scoring bit-identically to states a worker makes itself."""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest

from evaluator.data import load
from evaluator.evaluate import Evaluator
from evaluator.holdout import split_labels
from evaluator.judge_states import Released
from evaluator.program import parse_program
from seeds import seed_sources


@pytest.fixture(scope="module")
def gt():
    return load(None)  # the embedded default: what the README's main job runs on


@pytest.fixture(scope="module")
def shared(gt):
    """Made as a pool's helper makes them, through a pickle as a worker reads them."""
    return pickle.loads(pickle.dumps(Evaluator(gt).shared_states(True), protocol=pickle.HIGHEST_PROTOCOL))


@pytest.fixture(scope="module")
def adopted(gt, shared):
    ev = Evaluator(gt)
    ev.adopt_states(shared)
    ev.prepare_heldout()  # as a worker does: finds every view and reading made
    return ev


def _wire(ev):
    out = ev.to_json()
    out.pop("seconds", None)
    return out


def test_shared_states_hold_no_recorded_states(shared, adopted):
    """Only step counts stay of the states; reading a row of one raises instead of scoring
    on something else."""
    states = [shared["reference"], *shared["split"].values()]
    assert all(isinstance(v, Released) and len(v) > 0 for s in states for v in s.values())
    for view in [adopted, *adopted._splits.values()]:
        assert not any(isinstance(v, np.ndarray) for v in view._reference.values())
    with pytest.raises(TypeError):
        next(iter(shared["reference"].values()))[:, 6]


def test_views_share_their_fitting_states_through_a_pickle(shared):
    """Held-out views that fit an experiment on the same states and stages hold one list."""
    lowo = [c["_ref_states_cache"] for key, c in shared["caches"].items() if key and key[0].startswith("workload:")]
    pairs = [(a, b, e) for i, a in enumerate(lowo) for b in lowo[i + 1:] for e in set(a) & set(b) if a[e]]
    assert pairs  # two LOWO views fit the third workload's experiments, all their stages
    assert all(a[e] is b[e] for a, b, e in pairs)


@pytest.mark.parametrize("seed", ["roofline", "regime_switch"])  # regime_switch: a conditional (branch states)
def test_adopted_states_score_bit_identically(gt, adopted, seed):
    """A worker on shared states scores exactly as one that made its own: in-sample with the
    held-out splits, and each split job as a run cuts it."""
    own = Evaluator(gt)
    p = parse_program(seed_sources()[seed])
    assert _wire(adopted.evaluate(p, heldout=True)) == _wire(own.evaluate(p, heldout=True))
    screen_a, screen_o = adopted.evaluate(p, refine=False), own.evaluate(p, refine=False)
    assert _wire(screen_a) == _wire(screen_o)
    assert _wire(adopted.evaluate(p)) == _wire(own.evaluate(p))  # refined: the candidate's own states
    for label in split_labels(gt.experiments):
        assert _wire(adopted.evaluate_split(p, label, screen_a.overheads)) == \
            _wire(own.evaluate_split(p, label, screen_o.overheads)), label


def test_pool_states_file_is_unlinked_and_loads(tmp_path):
    """The pool's helper leaves one open, already unlinked file (nothing to clean up after a
    killed driver) that a worker reads through /proc."""
    from evolve.workers import _load_states, shared_states_file
    f = shared_states_file(mp.get_context("spawn"), None, 0.7, False)
    assert f is not None
    try:
        assert os.fstat(f.fileno()).st_nlink == 0
        got = _load_states(f"/proc/{os.getpid()}/fd/{f.fileno()}")
        assert got is not None and "split" not in got
        assert all(isinstance(v, Released) for v in got["reference"].values())
    finally:
        f.close()
