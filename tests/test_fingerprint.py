"""Behavioural fingerprints: twins are found, programs that part ways beyond the data are not,
and the search records a twin instead of paying for its full evaluation."""
import json
import sqlite3

import pytest

from evaluator.fingerprint import TWIN_TOL, twins
from evaluator.program import parse_program
from evolve.archive import Archive
from evolve.config import RunConfig
from evolve.search import Candidate, Search
from seeds import seed_sources

ROOFLINE = seed_sources()["roofline"]
HEAD = "OVERHEAD = 15000.0\nEFFICIENCY = 1.5\n\n\n" \
       "def predict_step_time(t_prefill_gemm, t_prefill_attn, t_decode_gemm, t_decode_kv, t_weights, ctx_max):\n"
# the roofline written another way: the same function of its components
SAME = HEAD + "    return OVERHEAD + max(EFFICIENCY * (t_prefill_gemm + t_prefill_attn + t_decode_gemm), " \
              "EFFICIENCY * t_weights + EFFICIENCY * t_decode_kv)\n"


@pytest.fixture(scope="module")
def prints(evaluator):
    out = {}
    for name, src in (("roofline", ROOFLINE), ("same", SAME),
                      ("measured", seed_sources()["measured"])):
        ev = evaluator.evaluate(parse_program(src), refine=False)
        assert ev.valid, (name, ev.error)
        out[name] = ev.fingerprint
    return out


def test_a_program_written_another_way_is_a_twin(prints):
    assert len(prints["roofline"]) == len(prints["same"]) > 100
    assert twins(prints["roofline"], prints["same"])


def test_other_behaviour_is_not_a_twin(prints):
    assert not twins(prints["roofline"], prints["measured"])


def test_probes_reach_beyond_the_data(evaluator, gt):
    """Programs that agree on the data can part ways at longer contexts and fuller caches:
    the probe set holds such states for every model (held-out errors are judged there)."""
    from evaluator.components import COMPONENT_INDEX
    from evaluator.fingerprint import probe_rows
    rows = probe_rows(evaluator)
    K, ctx = COMPONENT_INDEX["K"], COMPONENT_INDEX["ctx_max"]
    for key, P in rows.items():
        exps = [e for e in gt.experiments if e.model == key]
        assert P[:, ctx].max() > 4 * max(e.max_model_len if hasattr(e, "max_model_len") else 4096 for e in exps)
        assert P[:, K].max() >= 0.99 * min(e.kv_blocks * e.block_size for e in exps)


def test_twins_tolerance_and_degenerate_prints():
    a = (100.0, 200.0, 300.0)
    assert twins(a, tuple(x * (1 + TWIN_TOL / 2) for x in a))
    assert not twins(a, tuple(x * (1 + TWIN_TOL * 3) for x in a))
    assert not twins((), ())
    assert not twins(a, a[:2])
    assert not twins(a, (100.0, None, 300.0))


def test_fingerprint_round_trips_through_the_archive(evaluator, tmp_path):
    from evaluator.records import Evaluation
    ev = evaluator.evaluate(parse_program(ROOFLINE), refine=False)
    assert Evaluation.from_json(json.loads(json.dumps(ev.to_json()))).fingerprint == ev.fingerprint


def test_the_search_records_a_twin_and_skips_its_full_evaluation(tmp_path):
    arch = Archive(tmp_path / "t.db")
    s = Search(RunConfig(budget=20, seed=1, workers=1, generation_size=4, holdout=False), arch)
    try:
        run_id = s.start()
        seed_id = arch.find_by_hash(run_id, parse_program(ROOFLINE).hash)
        s.generation = 1
        s._evaluate_batch([Candidate(parse_program(SAME), (seed_id,), "test")], screen=True)
    finally:
        s.close()
    con = sqlite3.connect(tmp_path / "t.db")
    got = dict(((src.strip(), (stage, twin)) for src, stage, twin in con.execute(
        "select p.source, e.stage, e.twin_of from programs p join evaluations e on e.program_id = p.id")))
    con.close()
    assert got[SAME.strip()] == ("screen", seed_id)  # recorded, counted, its full evaluation skipped
    counts = arch.work_counts(run_id)
    assert counts["twins"] == 1 and counts["full"] >= len(seed_sources())


def test_a_simpler_twin_is_no_twin():
    """A candidate that behaves like a member but is simpler keeps its way to the frontier (it
    would dominate the member on complexity): only a member no more complex makes it a twin."""
    from evolve.search import Member, SearchState
    fp = (100.0, 200.0, 300.0)
    st = SearchState()
    st.add(Member(7, parse_program(ROOFLINE), {"e2e_mean": 0.1, "e2e_worst": 0.2, "ttft_mean": 0.1,
                                               "itl_mean": 0.1, "complexity": 10.0}, 0, fp))
    assert st.twin_of(fp, 10.0) == 7 and st.twin_of(fp, 12.0) == 7
    assert st.twin_of(fp, 9.0) is None
    assert st.twin_of(tuple(x * 1.01 for x in fp), 12.0) is None


def test_twin_of_matches_twins_on_every_member():
    """SearchState.twin_of compares a print with all members at once; it names the member the
    pairwise `twins` would, as members arrive (prints near the tolerance, None values, other
    lengths, empty prints, complexities on either side)."""
    import random
    from evolve.search import Member, SearchState
    rnd = random.Random(3)
    base = [rnd.uniform(10.0, 1e5) for _ in range(40)]
    prog = parse_program(ROOFLINE)

    def near(scale):
        return tuple(x * (1 + rnd.choice((-1, 1)) * rnd.uniform(0, scale)) for x in base)

    def reference(members, fp, cx):
        return next((m.id for m in members if m.objectives["complexity"] <= cx and twins(fp, m.fingerprint)), None)

    st = SearchState()
    objs = {"e2e_mean": 0.1, "e2e_worst": 0.2, "ttft_mean": 0.1, "itl_mean": 0.1}
    found = 0
    for k in range(120):
        kind = rnd.random()
        fp = (near(TWIN_TOL * 0.4) if kind < 0.4 else near(TWIN_TOL * 0.7) if kind < 0.6 else near(0.5) if kind < 0.8 else
              () if kind < 0.85 else near(0)[:30] if kind < 0.9 else near(0)[:5] + (None,) + near(0)[6:])
        cx = float(rnd.randint(5, 15))
        got = st.twin_of(fp, cx)
        assert got == reference(st.members, fp, cx), k
        found += got is not None
        st.members.append(Member(k, prog, {**objs, "complexity": cx}, 0, fp))  # as add() appends
    assert found > 20
