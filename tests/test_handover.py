"""The hand-over chosen on its shortlist's worst fit start (evolve.handover), on the real data:
the start evaluations a worker makes equal the in-process ones, they are kept, a second pass
fits nothing again, and a program whose other basin extrapolates badly loses."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator.fit_starts import evaluate_starts, worst_objectives
from evaluator.holdout import split_labels
from evaluator.objectives import ideal_point
from evaluator.program import parse_program
from evaluator.records import Evaluation
from evolve.archive import Archive
from evolve.handover import choose

ROOT = Path(__file__).resolve().parents[1]
ONE_CONSTANT = "SCALE = 1.0\n\n\ndef predict_step_time(t_step_measured, t_decode_spread):\n" \
               "    return SCALE * t_step_measured + t_decode_spread\n"
NO_CONSTANT = "def predict_step_time(t_step_measured, t_decode_spread):\n    return t_step_measured + t_decode_spread\n"


def _regimes(**kw):
    base = {"e2e_mean": 0.02, "lowo_e2e": 0.02, "lomo_e2e": 0.05, "load_e2e": 0.03, "long_e2e": 0.08,
            "overload_fail": 0.25}
    return {**base, **kw}


def _starts(*regimes):
    return [{"start": i, "valid": True, "error": None, "e2e_mean": r.get("e2e_mean"),
             "regimes": {k: v for k, v in r.items() if k != "e2e_mean"}} for i, r in enumerate(regimes)]


def test_a_program_whose_other_basin_extrapolates_badly_is_not_handed_over():
    flippy = {"id": 1, "objectives": _regimes(long_e2e=0.05)}  # best from its declared start...
    steady = {"id": 2, "objectives": _regimes(long_e2e=0.07)}
    ideal = ideal_point([flippy["objectives"], steady["objectives"]])
    starts = {1: _starts(flippy["objectives"], _regimes(long_e2e=0.17)),  # ...17% from another start
              2: _starts(steady["objectives"], steady["objectives"])}
    best, regrets = choose([flippy, steady], starts, ideal)
    assert best["id"] == 2
    assert regrets == pytest.approx([0.12, 0.02])
    # without the starts, the declared figures decide
    assert choose([flippy, steady], {}, ideal)[0]["id"] == 1
    assert worst_objectives(flippy["objectives"], []) == flippy["objectives"]
    # an unscored start figure (INVALID) is no worst case: only scored starts count
    odd = _starts(flippy["objectives"], _regimes(long_e2e=math.inf))
    assert worst_objectives(flippy["objectives"], odd)["long_e2e"] == 0.05


def test_the_ideal_point_comes_from_competitive_programs():
    """A corner of the front that gives up another regime entirely, or a program some regime of
    which could not be scored, does not set the floor the hand-over measures from."""
    good = _regimes(overload_fail=0.25, long_e2e=0.10)
    other = _regimes(overload_fail=0.26, long_e2e=0.06)
    absurd = _regimes(lomo_e2e=4.06, overload_fail=0.13)  # 406% off on an unseen model
    unscored = _regimes(lowo_e2e=math.nan, load_e2e=math.nan, overload_fail=0.05, long_e2e=0.03)
    ideal = ideal_point([good, other, absurd, unscored])
    assert ideal["overload_fail"] == 0.25 and ideal["long_e2e"] == 0.06 and ideal["lomo_e2e"] == 0.05
    # no program scored in every regime: the lowest finite error of each, as before
    assert ideal_point([unscored])["overload_fail"] == 0.05


@pytest.fixture(scope="module")
def small_ev(small_data):
    """The judge on the small ground truth (tests/conftest.py): the hand-over refits on it."""
    from evaluator.data import load_ground_truth
    from evaluator.evaluate import Evaluator
    return Evaluator(load_ground_truth(small_data))


@pytest.fixture(scope="module")
def handover_archive(tmp_path_factory, small_ev, small_data):
    """A run of two held-out full evaluations on the small ground truth: a one-constant program
    and the same without its constant."""
    path = tmp_path_factory.mktemp("ho") / "a.db"
    a = Archive(path)
    run = a.start_run({"data": str(small_data), "holdout": True, "handover_starts": 2}, seed=0, budget=2)
    evs = {}
    for src in (ONE_CONSTANT, NO_CONSTANT):
        ev = small_ev.evaluate(parse_program(src), heldout=True)
        assert ev.valid, ev.error
        evs[src] = ev
        a.add_candidate(run, src, operator="seed", evaluation=ev)
    a.close()
    return path, run, evs


def _handover(path, run, *extra, env=None):
    return subprocess.run([sys.executable, "-m", "evolve.cli", "handover", run, "--archive", str(path),
                           "--workers", "1", *extra], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=None if env is None else {**os.environ, **env})


def test_handover_command_fits_the_shortlist_from_its_starts_once(handover_archive, small_ev):
    path, run, evs = handover_archive
    # --shortlist 1 weighs the first program alone; the full pass then fits only the other
    phases = path.parent / "phases.txt"
    first = _handover(path, run, "--starts", "2", "--shortlist", "1", env={"STEPEVOLVE_PHASE_FILE": str(phases)})
    assert first.returncode == 0, first.stderr
    assert "fitting 1 of the 1 best programs" in first.stderr
    # its start ran as the search runs a candidate: a screen, then one job per held-out split
    # (which any free worker takes), not one whole job
    took = [line.split()[0] for line in phases.read_text().splitlines()]
    assert took[0] == "start-screen" and took.count("start-split") == len(split_labels(small_ev.all_exps)) > 1
    assert "start-full" not in took
    a = Archive(path, readonly=True)
    assert sum(bool(p["evaluation"].get("fit_starts")) for p in map(a.program, _ids(a, run))) == 1
    a.close()
    r = _handover(path, run, "--starts", "2")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "fitting 1 of the 2 best programs" in r.stderr
    a = Archive(path, readonly=True)
    rec = {src: a.program(pid) for src, pid in zip((ONE_CONSTANT, NO_CONSTANT), _ids(a, run))}
    one = rec[ONE_CONSTANT]["evaluation"]["fit_starts"]
    assert one["starts"] == 2 and len(one["records"]) == 2
    # the worker's start 1 is the in-process one; start 0 is the archived evaluation
    local = evaluate_starts(small_ev, parse_program(ONE_CONSTANT), 2, first=evs[ONE_CONSTANT])
    assert one["records"][1]["start_constants"] == local[1]["start_constants"]
    assert one["records"][1]["valid"] == local[1]["valid"]
    for k, v in local[1]["regimes"].items():
        assert one["records"][1]["regimes"][k] == pytest.approx(v, rel=1e-9, abs=1e-12)
    assert one["records"][0]["regimes"] == local[0]["regimes"]
    # a program without constants has one start: its figures stand as they are
    assert len(rec[NO_CONSTANT]["evaluation"]["fit_starts"]["records"]) == 1
    json.dumps(one, allow_nan=False)  # strict JSON
    chosen = a.get_run(run)["recommended"]
    assert chosen in {rec[ONE_CONSTANT]["id"], rec[NO_CONSTANT]["id"]}
    assert f"hands over #{chosen}" in r.stdout
    a.close()
    # a second pass (a resumed run's hand-over) fits nothing again and chooses the same
    again = _handover(path, run, "--starts", "2")
    assert again.returncode == 0, again.stderr
    assert "hand-over: fitting" not in again.stderr
    assert Archive(path, readonly=True).get_run(run)["recommended"] == chosen


def _ids(a, run):
    return [p["id"] for p in a.programs(run)]


def test_handover_command_refuses_what_it_cannot_weigh(tmp_path, handover_archive):
    path, run, _ = handover_archive
    r = _handover(path, "run-9-nope")
    assert r.returncode != 0 and r.stderr.strip().startswith("error: no search run") and "Traceback" not in r.stderr
    r = _handover(tmp_path / "none.db", run)
    assert r.returncode != 0 and r.stderr.strip() == f"error: no archive at {tmp_path / 'none.db'}"
    a = Archive(tmp_path / "in.db")
    rid = a.start_run({"holdout": False}, seed=0, budget=1)
    a.add_candidate(rid, NO_CONSTANT, operator="seed", evaluation=Evaluation(valid=True, objectives={"e2e_mean": 0.1}))
    a.close()
    r = _handover(tmp_path / "in.db", rid)
    assert r.returncode != 0 and "--no-holdout" in r.stderr and len(r.stderr.strip().splitlines()) == 1
