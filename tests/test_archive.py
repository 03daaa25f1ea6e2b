"""Archive (SQLite, several processes) and Pareto utilities. Real files in tmp_path, no simulator."""
from __future__ import annotations

import math
import multiprocessing as mp
import sqlite3
import time

import pytest

from dataclasses import replace

from evaluator.objectives import INVALID, ORDER
from evaluator.program import parse_program
from evaluator.records import Evaluation
from evolve.archive import Archive, ArchiveError
from evolve.pareto import all_cell_keys, cell_key, hypervolume, objective_vector, pareto_front, pareto_ranks, select_nsga2

SRC_A = """A = 1000.0
B0 = 2.0

def predict_step_time(P, D):
    return A + B0 * P + D
"""
SRC_B = """OVERHEAD = 15000.0
SCALE = 1.5

def predict_step_time(t_weights, t_decode_kv, B):
    if B > 8:
        return OVERHEAD + SCALE * (t_weights + t_decode_kv)
    return OVERHEAD + t_weights
"""


def variant(k: int) -> str:
    """Structurally distinct programs (the literal is part of the canonical form)."""
    return SRC_A.replace("+ D\n", f"+ D + {k}.0\n")


def ev(e2e: float, complexity: float | None = None, valid: bool = True, **extra) -> Evaluation:
    obj = {"step_mape": 0.2, "e2e_mean": e2e, "e2e_worst": 2 * e2e, "ttft_mean": e2e, "itl_mean": e2e / 2}
    obj.update(extra)
    if complexity is not None:
        obj["complexity"] = complexity
    rows = [{"experiment": "m-chat", "model": "m", "workload": "chat", "stage": 0, "rate": 1.0,
             "e2e_err": e2e, "ttft_err": e2e, "itl_err": e2e / 2}]
    return Evaluation(valid=valid, error=None if valid else "runaway simulation", objectives=obj, rows=tuple(rows),
                      constants={"m": [1000.0, 2.0]}, steps={"m-chat": {"step_mape": 0.2, "spearman_duration": 0.9,
                                                                        "n": 10}}, sim_steps=123, seconds=0.5)


@pytest.fixture
def arch(tmp_path):
    a = Archive(tmp_path / "archive.db")
    yield a
    a.close()


# ---------------------------------------------------------------- SQLite setup

def test_wal_mode_and_pragmas(arch, tmp_path):
    assert arch.journal_mode() == "wal"
    with arch.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    # WAL is a property of the file: a plain sqlite3 connection sees it too
    con = sqlite3.connect(tmp_path / "archive.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "programs", "evaluations", "llm_calls", "frontier", "cells"} <= tables
    con.close()


def test_write_transactions_begin_immediate(arch):
    seen = []
    from sqlalchemy import event

    @event.listens_for(arch.engine, "before_cursor_execute")
    def spy(conn, cursor, statement, *a):
        seen.append(statement)

    run = arch.start_run({}, seed=1)
    arch.get_run(run)
    begins = [s for s in seen if s.startswith("BEGIN")]
    assert begins[0] == "BEGIN IMMEDIATE"  # the write
    assert begins[1] == "BEGIN DEFERRED"  # the read does not take the write lock


# ---------------------------------------------------------------- runs

def test_runs_lifecycle(arch):
    run = arch.start_run({"pop": 8, "model": "x"}, seed=7, data_fingerprint="fp1", budget=100)
    assert run.startswith("run-7-") and len(run) == len("run-7-") + 8
    r = arch.get_run(run)
    assert r["status"] == "running" and r["config"] == {"pop": 8, "model": "x"} and r["budget"] == 100
    assert r["n_evaluated"] == 0 and r["data_fingerprint"] == "fp1"
    assert arch.bump_evaluated(run) == 1
    assert arch.bump_evaluated(run, 4) == 5
    arch.finish_run(run, "interrupted")
    assert arch.get_run(run)["status"] == "interrupted" and arch.get_run(run)["finished_at"] is not None
    arch.set_run_status(run, "running")
    assert arch.get_run(run)["finished_at"] is None
    with pytest.raises(ValueError):
        arch.finish_run(run, "exploded")
    with pytest.raises(ArchiveError):
        arch.finish_run("run-nope", "finished")
    run2 = arch.start_run({}, seed=8)
    assert [x["id"] for x in arch.runs()] == [run, run2]
    assert arch.get_run("missing") is None


# ---------------------------------------------------------------- programs and evaluations

def test_add_program_fields_duplicates_and_rejects(arch):
    run = arch.start_run({}, seed=1)
    prog = parse_program(SRC_B)
    pid = arch.add_program(run, prog, parents=[], operator="seed")
    rec = arch.program(pid)
    assert rec["canonical_hash"] == prog.hash and rec["valid"] and rec["reject_reason"] is None
    assert (rec["complexity"], rec["n_ops"], rec["n_cond"], rec["n_consts"]) == (
        prog.complexity.total, prog.complexity.operations, prog.complexity.conditionals, prog.complexity.constants)
    assert rec["components"] == prog.components_used() and rec["evaluation"] is None
    assert arch.find_by_hash(run, prog.hash) == pid
    # same structure, different constant values and names -> duplicate, stored as rejected
    dup_src = SRC_B.replace("OVERHEAD", "BASE").replace("15000.0", "9.0")
    dup = arch.add_program(run, dup_src, parents=[pid], operator="llm:improve", generation=1, llm_model="m")
    d = arch.program(dup)
    assert not d["valid"] and d["reject_reason"] == f"duplicate of {pid}"
    assert arch.find_by_hash(run, prog.hash) == pid
    # same program in another run is not a duplicate
    run2 = arch.start_run({}, seed=2)
    assert arch.program(arch.add_program(run2, SRC_B))["valid"]
    assert arch.find_by_hash(run2, prog.hash) != pid
    # unparseable source: rejected with the parser's reason, no hash
    bad = arch.program(arch.add_program(run, "def predict_step_time(P):\n    import os\n", operator="llm"))
    assert not bad["valid"] and bad["canonical_hash"] is None and bad["reject_reason"]
    # explicit rejection keeps the hash but is not findable
    capped = arch.program(arch.add_program(run, variant(1), valid=False, reject_reason="over cap"))
    assert capped["reject_reason"] == "over cap" and arch.find_by_hash(run, capped["canonical_hash"]) is None
    assert [p["id"] for p in arch.programs(run)] == [pid]
    assert len(arch.programs(run, include_rejected=True)) == 4


def test_add_candidate_stores_and_counts(arch):
    run = arch.start_run({}, seed=1)
    p0 = arch.add_program(run, SRC_A)
    pid = arch.add_candidate(run, variant(1), parents=[p0], operator="llm:improve", generation=1,
                             evaluation=ev(0.1), llm_model="openai/x")
    rec = arch.program(pid)
    assert rec["parent_ids"] == [p0] and rec["llm_model"] == "openai/x" and rec["operator"] == "llm:improve"
    e = rec["evaluation"]
    assert e["stage"] == "full" and e["valid"] and e["rows"][0]["e2e_err"] == 0.1 and e["sim_steps"] == 123
    assert e["objectives"]["complexity"] == rec["complexity"]  # filled from the program when absent
    assert arch.get_run(run)["n_evaluated"] == 1
    # a duplicate candidate: stored as rejected, no evaluation, not counted
    dup = arch.add_candidate(run, variant(1), parents=[p0], operator="llm:improve", evaluation=ev(0.05))
    assert arch.program(dup)["reject_reason"] == f"duplicate of {pid}" and arch.program(dup)["evaluation"] is None
    assert arch.get_run(run)["n_evaluated"] == 1
    # invalid evaluation is stored (and counted) with inf objectives; NaN kept in JSON, NULL in columns
    bad = Evaluation(valid=False, error="runaway", objectives={k: math.inf for k in ORDER})
    pb = arch.add_candidate(run, variant(2), evaluation=bad)
    assert arch.program(pb)["evaluation"]["valid"] is False
    pn = arch.add_candidate(run, variant(3), evaluation=ev(math.nan))
    assert math.isnan(arch.program(pn)["objectives"]["e2e_mean"])
    assert arch.get_run(run)["n_evaluated"] == 3
    assert [i for i, _ in arch.evaluated(run)] == [pid, pb, pn]
    # the typed record comes back whole through the one converter pair
    assert arch.evaluation(pid) == ev(0.1, complexity=arch.program(pid)["complexity"])
    assert arch.evaluation(dup) is None


def test_evaluation_json_round_trip():
    e = ev(0.1, complexity=7)
    assert Evaluation.from_json(e.to_json()) == e
    with pytest.raises(ValueError):
        Evaluation.from_json({"objectives": {}})  # not an evaluation record
    with pytest.raises(Exception):
        e.valid = False  # frozen


def test_add_candidate_is_atomic(arch):
    run = arch.start_run({}, seed=1)
    broken = replace(ev(0.1), rows=ev(0.1).rows + ({"experiment": object()},))  # not JSON-serialisable:
    # fails inside the transaction
    with pytest.raises(Exception):
        arch.add_candidate(run, SRC_A, evaluation=broken)
    assert arch.programs(run, include_rejected=True) == []  # no orphan program row
    assert arch.get_run(run)["n_evaluated"] == 0
    # and the same candidate goes in cleanly afterwards (no stale duplicate)
    pid = arch.add_candidate(run, SRC_A, evaluation=ev(0.1))
    assert arch.program(pid)["valid"] and arch.get_run(run)["n_evaluated"] == 1


def test_add_evaluation_upserts_stage(arch):
    run = arch.start_run({}, seed=1)
    pid = arch.add_program(run, SRC_A)
    arch.add_evaluation(pid, ev(0.5), stage="screen")
    assert arch.program(pid)["evaluation"]["stage"] == "screen"
    assert arch.frontier(run) == []  # frontier is over full evaluations
    arch.add_evaluation(pid, ev(0.2), stage="full")
    e = arch.program(pid)["evaluation"]
    assert e["stage"] == "full" and e["objectives"]["e2e_mean"] == 0.2
    assert [r["id"] for r in arch.frontier(run)] == [pid]
    with pytest.raises(ValueError):
        arch.add_evaluation(pid, ev(0.2), stage="bogus")
    with pytest.raises(ArchiveError):
        arch.add_evaluation(999, ev(0.2))


def test_bulk_seeds(arch):
    run = arch.start_run({}, seed=1)
    items = [SRC_A, {"source": SRC_B, "evaluation": ev(0.3)}, {"program": parse_program(variant(5)),
                                                                 "evaluation": ev(0.2), "operator": "baseline"},
             SRC_A.replace("1000.0", "5.0"), "not python ("]
    ids = arch.add_programs_bulk(run, items, count=True)
    assert len(ids) == 5
    recs = [arch.program(i) for i in ids]
    assert [r["valid"] for r in recs] == [True, True, True, False, False]
    assert recs[3]["reject_reason"] == f"duplicate of {ids[0]}"
    assert recs[2]["operator"] == "baseline" and recs[1]["evaluation"]["objectives"]["e2e_mean"] == 0.3
    assert arch.get_run(run)["n_evaluated"] == 2


def test_frontier_cells_lineage(arch):
    run = arch.start_run({}, seed=1)
    p0 = arch.add_candidate(run, SRC_A, operator="seed", evaluation=ev(0.30, complexity=7))
    p1 = arch.add_candidate(run, variant(1), [p0], "llm:improve", 1, ev(0.10, complexity=9))
    p2 = arch.add_candidate(run, variant(2), [p1], "llm:improve", 2, ev(0.20, complexity=12))  # dominated by p1
    p3 = arch.add_candidate(run, variant(3), [p1, p0], "llm:crossover", 3, ev(0.05, complexity=15))
    p4 = arch.add_candidate(run, variant(4), [p3], "llm:improve", 4, ev(0.01, complexity=3, valid=False))
    assert [r["id"] for r in arch.frontier(run)] == [p0, p1, p3]  # computed, sorted by complexity; invalid skipped
    arch.set_frontier(run, [p3, p1])
    assert [r["id"] for r in arch.frontier(run)] == [p1, p3]  # stored membership wins
    assert [r["id"] for r in arch.frontier(run, computed=True)] == [p0, p1, p3]
    arch.set_frontier(run, [p0])
    assert arch.frontier_ids(run) == [p0]  # replaced, not appended
    # all runs: computed on the fly across runs
    run2 = arch.start_run({}, seed=2)
    q = arch.add_candidate(run2, variant(9), evaluation=ev(0.01, complexity=8))
    assert [r["id"] for r in arch.frontier()] == [p0, q]
    assert arch.best()["id"] == q and arch.best(run)["id"] == p3
    # cells
    arch.set_cells(run, {"c0-9|k2": p1, "c10-14|k2": p2})
    arch.set_cells(run, {"c0-9|k2": p1, "c15-19|k2": p3})
    assert arch.cells(run) == {"c0-9|k2": p1, "c15-19|k2": p3}
    assert arch.cells(run, records=True)["c15-19|k2"]["source"] == variant(3)
    # lineage: breadth first, each ancestor once
    lin = arch.lineage(p4)
    assert [(r["id"], r["depth"]) for r in lin] == [(p4, 0), (p3, 1), (p1, 2), (p0, 2)]
    assert lin[1]["operator"] == "llm:crossover" and "rows" not in lin[1]["evaluation"]
    ev_list = arch.evaluations(run)
    assert [r["id"] for r in ev_list] == [p0, p1, p2, p3, p4] and ev_list[-1]["eval_valid"] is False


def test_llm_cache(arch):
    run = arch.start_run({}, seed=1)
    assert arch.get("k1") is None
    rec = {"model": "openai/x", "reply_text": "```python\n...```", "prompt_tokens": 10, "completion_tokens": 20,
           "cost_usd": None, "latency_s": 0.5, "finish_reason": "stop", "seed": 3, "messages": [{"role": "user"}]}
    arch.put("k1", rec)
    assert arch.get("k1") == rec
    cache = arch.llm_cache(run)
    cache.put("k2", dict(rec, reply_text="other", cost_usd=0.01))
    assert cache.get("k2")["reply_text"] == "other"
    cache.put("k2", dict(rec, reply_text="newer", cost_usd=0.02))  # replace, no unique violation
    assert arch.get("k2")["reply_text"] == "newer"
    s = arch.llm_stats(run)
    assert s["calls"] == 1 and s["prompt_tokens"] == 10 and s["cost_usd"] == pytest.approx(0.02)
    assert arch.llm_stats()["calls"] == 2
    pid = arch.add_candidate(run, SRC_A, evaluation=ev(0.1), llm_cache_key="k1")
    from sqlalchemy import text
    with arch.engine.connect() as c:
        row = c.execute(text("SELECT run_id, program_id, reply FROM llm_calls WHERE cache_key='k1'")).one()
    assert tuple(row) == (run, pid, rec["reply_text"])


def test_llm_cache_used_by_mutator_interface(arch):
    from evolve.llm import DictCache
    for name in ("get", "put"):
        assert callable(getattr(arch, name)) and callable(getattr(DictCache(), name))


# ---------------------------------------------------------------- several processes

def _bump_worker(archive: Archive, run_id: str, n: int) -> None:
    # the Archive arrives pickled (path only) and builds its own engine in this process
    for _ in range(n):
        archive.bump_evaluated(run_id)


def test_concurrent_read_modify_write(tmp_path):
    arch = Archive(tmp_path / "c.db")
    run = arch.start_run({}, seed=1)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_bump_worker, args=(arch, run, 200)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert arch.get_run(run)["n_evaluated"] == 600


def _holding_writer(path: str, run_id: str, ready, release) -> None:
    a = Archive(path)
    with a._write() as s, s.begin():
        row = a._new_program(s, run_id, variant(77), [], "llm", 1, None, True, None)
        a._put_evaluation(s, row.id, ev(0.001, complexity=1), "full")
        ready.set()
        release.wait(30)  # keep the write transaction open


def test_reader_not_blocked_by_writer(tmp_path):
    arch = Archive(tmp_path / "r.db")
    run = arch.start_run({}, seed=1)
    p0 = arch.add_candidate(run, SRC_A, evaluation=ev(0.3, complexity=7))
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    w = ctx.Process(target=_holding_writer, args=(str(tmp_path / "r.db"), run, ready, release))
    w.start()
    try:
        assert ready.wait(60)
        t0 = time.perf_counter()
        front = arch.frontier(run)  # reads while the writer holds the lock
        assert arch.program(p0)["valid"]
        elapsed = time.perf_counter() - t0
        assert [r["id"] for r in front] == [p0]  # uncommitted candidate invisible
        assert elapsed < 2.0
    finally:
        release.set()
        w.join(60)
    assert w.exitcode == 0
    front = arch.frontier(run)  # committed now: the new candidate dominates p0 on every objective
    assert len(front) == 1 and front[0]["source"] == variant(77)


# ---------------------------------------------------------------- pareto

def _obj(e2e, worst, ttft, itl, mape, cx):
    return {"e2e_mean": e2e, "e2e_worst": worst, "ttft_mean": ttft, "itl_mean": itl, "step_mape": mape,
            "complexity": cx}


def test_objective_vector_order_and_nan():
    v = objective_vector(_obj(0.1, 0.2, 0.3, 0.4, 0.5, 6))
    assert v == (0.1, 0.2, 0.3, 0.4, 0.5, 6.0)
    assert objective_vector({"e2e_mean": math.nan, "complexity": math.inf}) == (INVALID,) * 6
    assert objective_vector({"e2e_mean": -math.inf})[0] == INVALID


def test_pareto_front_hand_made():
    a = {"id": "a", "objectives": _obj(0.1, 0.2, 0.1, 0.1, 0.1, 10)}
    b = {"id": "b", "objectives": _obj(0.2, 0.3, 0.2, 0.2, 0.2, 12)}  # dominated by a
    c = {"id": "c", "objectives": _obj(0.3, 0.3, 0.3, 0.3, 0.3, 5)}  # simpler: non-dominated
    d = {"id": "d", "objectives": _obj(*(math.nan,) * 6)}  # invalid: worst everywhere -> dominated
    e = {"id": "e", "objectives": _obj(0.1, 0.2, 0.1, 0.1, 0.1, 10)}  # equal to a: both kept
    f = {"id": "f", "objectives": _obj(math.nan, 0.5, 0.5, 0.5, 0.5, 5)}  # NaN e2e -> dominated by c
    items = [a, b, c, d, e, f]
    assert [x["id"] for x in pareto_front(items)] == ["a", "c", "e"]
    assert pareto_ranks(items)[3] > 0 and pareto_ranks(items)[0] == 0
    # Evaluation objects and raw vectors work too
    assert pareto_front([ev(0.1, 5), ev(0.2, 6)])[0].objectives["e2e_mean"] == 0.1
    assert pareto_front([(1, 2), (2, 1), (2, 2)]) == [(1, 2), (2, 1)]
    assert pareto_front([]) == []
    # an all-NaN item alone is still "the front" (nothing dominates it)
    assert pareto_front([d]) == [d]


def test_select_nsga2():
    pts = [(1, 5), (2, 4), (3, 3), (4, 2), (5, 1), (3, 5), (5, 5), (6, 6)]
    chosen = select_nsga2(pts, 5)
    assert sorted(chosen) == sorted(pts[:5])
    assert select_nsga2(pts, 0) == [] and select_nsga2(pts, 100) == pts
    assert len(select_nsga2([{"objectives": _obj(0.1 * i, 1, 1, 1, 1, 10 - i)} for i in range(10)], 4)) == 4


def test_hypervolume_2d_and_3d():
    # staircase (1,3),(2,2),(3,1) to ref (4,4): 3*1 + 2*1 + 1*1 = 6
    assert hypervolume([(1, 3), (2, 2), (3, 1)], (4, 4)) == pytest.approx(6.0)
    # dominated / outside-ref / NaN points add nothing
    assert hypervolume([(1, 3), (2, 2), (3, 1), (3, 3), (5, 0), (math.nan, 1)], (4, 4)) == pytest.approx(6.0)
    assert hypervolume([], (4, 4)) == 0.0
    assert hypervolume([(0, 0)], (2, 3)) == pytest.approx(6.0)
    # 3-D: boxes [0,2]x[0,2]x[1,2] (4) and [1,2]x[1,2]x[0,2] (2) overlap in a unit cube -> 5
    assert hypervolume([(0, 0, 1), (1, 1, 0)], (2, 2, 2)) == pytest.approx(5.0)


def test_cell_key_bins():
    def rec(c, n):
        return {"complexity": c, "components": [f"x{i}" for i in range(n)]}
    assert cell_key(rec(0, 1)) == "c0-9|k1"
    assert cell_key(rec(9, 2)) == "c0-9|k2"
    assert cell_key(rec(10, 3)) == "c10-14|k3"
    assert cell_key(rec(14, 4)) == "c10-14|k4"
    assert cell_key(rec(15, 5)) == "c15-19|k5+"
    assert cell_key(rec(19, 9)) == "c15-19|k5+"
    assert cell_key(rec(20, 1)) == "c20-29|k1"
    assert cell_key(rec(29, 1)) == "c20-29|k1"
    assert cell_key(rec(30, 1)) == "c30+|k1"
    assert cell_key(rec(300, 0)) == "c30+|k1"
    prog = parse_program(SRC_B)  # 3 components
    assert cell_key(prog) == f"c{'0-9' if prog.complexity.total < 10 else '10-14'}|k3"
    assert len(all_cell_keys()) == 25 and len(set(all_cell_keys())) == 25
