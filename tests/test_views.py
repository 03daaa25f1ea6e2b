"""Terminal views and the self-contained HTML report, on a hand-filled archive."""
from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from evaluator.evaluate import Evaluation
from evolve.archive import Archive
from evolve.views import frontier_table, go_cap_status, render_frontier, report_html, show_program

BASE = """BETA0 = 15000.0
BETA1 = 2.0

def predict_step_time(P, D):
    return BETA0 + BETA1 * P + D + {k}.0
"""
ROOF = """OVERHEAD = 15000.0
SCALE = 1.5

def predict_step_time(t_weights, t_decode_kv, B):
    if B > 8:
        return OVERHEAD + SCALE * (t_weights + t_decode_kv)
    return OVERHEAD + t_weights
"""
EXPS = [("llama-chat", 0, 2.0), ("llama-chat", 1, 4.0), ("qwen-code", 0, 1.0)]


def make_eval(scale: float, complexity: float | None = None, valid: bool = True) -> Evaluation:
    if not valid:
        return Evaluation(valid=False, error="runaway simulation",
                          objectives={k: math.inf for k in ("step_mape", "e2e_mean", "e2e_worst", "ttft_mean",
                                                            "itl_mean", "complexity")})
    rows = []
    for i, (exp, stage, rate) in enumerate(EXPS):
        e = scale * (1 + 0.3 * i)
        rows.append({"experiment": exp, "model": exp.split("-")[0], "workload": exp.split("-")[1], "stage": stage,
                     "rate": rate, "n_requests": 50, "pred_e2e_s": 1 + e, "meas_e2e_s": 1.0, "e2e_err": e,
                     "pred_ttft_s": 0.1, "meas_ttft_s": 0.1, "ttft_err": 2 * e, "pred_itl_s": 0.01,
                     "meas_itl_s": 0.01, "itl_err": e / 2, "sim_steps": 1000, "preempted": 0})
    obj = {"step_mape": 1.5 * scale, "e2e_mean": sum(r["e2e_err"] for r in rows) / 3,
           "e2e_worst": max(r["e2e_err"] for r in rows), "ttft_mean": sum(r["ttft_err"] for r in rows) / 3,
           "itl_mean": sum(r["itl_err"] for r in rows) / 3}
    if complexity is not None:
        obj["complexity"] = complexity
    return Evaluation(valid=True, rows=rows, objectives=obj,
                      constants={"llama": [14000.0, 1.25], "qwen": [12000.0, 0.75]},
                      overheads={"llama": {"queueing_us": 10.0}},
                      steps={"llama-chat": {"step_mape": 0.12, "spearman_duration": 0.8, "n": 99}},
                      sim_steps=3000, seconds=0.2)


@pytest.fixture
def filled(tmp_path):
    a = Archive(tmp_path / "v.db")
    run = a.start_run({"population": 4}, seed=3, data_fingerprint="abcdef0123456789", budget=50)
    seed = a.add_candidate(run, BASE.format(k=0), operator="seed", evaluation=make_eval(0.4))
    roof = a.add_candidate(run, ROOF, operator="seed", evaluation=make_eval(0.3))
    ids = [seed, roof]
    for g in range(1, 9):
        ids.append(a.add_candidate(run, BASE.format(k=g), parents=[ids[-1]], operator="llm:improve", generation=g,
                                   evaluation=make_eval(0.4 * 0.8 ** g, valid=g != 5), llm_model="openai/coder"))
    a.put("key-1", {"model": "openai/coder", "reply_text": "x", "prompt_tokens": 100, "completion_tokens": 50,
                    "cost_usd": 0.001, "latency_s": 0.2})
    yield a, run, ids
    a.close()


def test_frontier_table(filled):
    a, run, ids = filled
    rows = frontier_table(a, run)
    assert rows, "frontier should not be empty"
    assert [r["complexity"] for r in rows] == sorted(r["complexity"] for r in rows)
    for r in rows:
        assert set(r) >= {"id", "complexity", "step_mape", "e2e_mean", "e2e_worst", "ttft_mean", "itl_mean",
                          "components", "run", "generation"}
        assert r["run"] == run
    assert ids[-1] in {r["id"] for r in rows}  # the best-error program is on the front
    assert ids[5] not in {r["id"] for r in rows}  # invalid evaluation never is
    assert frontier_table(a, None) == rows  # one run: same front over all runs


def test_render_and_show_program(filled):
    a, run, ids = filled
    con = Console(record=True, width=160)
    render_frontier(frontier_table(a, run), con)
    best = ids[-1]
    rec = show_program(a, best, con, baseline_rows=make_eval(0.5).rows)
    out = con.export_text()
    assert rec["id"] == best
    assert "Pareto frontier" in out and str(best) in out
    assert "BETA0" in out and "BETA1" in out and "14000" in out  # fitted constants with their names
    assert "e2e base" in out and "llama-chat" in out  # baseline errors next to the program's
    assert "Go cap: fits" in out and "lineage" in out and "openai/coder" in out
    assert "per-step scoring" in out
    show_program(a, 999, con)
    assert "no program 999" in con.export_text()
    render_frontier([], con)


def test_go_cap_status():
    assert go_cap_status({"n_ops": 3, "n_cond": 0, "n_consts": 2}) is None
    assert "conditionals" in go_cap_status({"n_ops": 3, "n_cond": 4, "n_consts": 2})
    assert go_cap_status({"n_ops": None}).startswith("unknown")


def _svgs(page: str) -> list[str]:
    return re.findall(r"<svg\b.*?</svg>", page, flags=re.S)


def test_report_html_self_contained(filled, tmp_path):
    a, run, ids = filled
    blackbox = make_eval(0.5, complexity=7)
    out = report_html(a, tmp_path / "out" / "report.html", run=run,
                      baselines={"blackbox": blackbox, "roofline-rows": make_eval(0.35).rows})
    page = open(out, encoding="utf-8").read()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    svgs = _svgs(page)
    assert len(svgs) >= 7  # pareto, ttft/itl, progress x2, error bars x3
    for s in svgs:  # every plot is well-formed markup with hover tooltips
        ET.fromstring(s)
    assert page.count("<title>") > 20
    for pid in frontier_table(a, run):
        assert f"#{pid['id']}" in page
    assert f"Program #{ids[-1]}" in page  # default detailed program: best e2e_mean
    assert "blackbox" in page and "roofline-rows" in page
    assert "http://" not in page and "https://" not in page  # nothing fetched from anywhere
    assert "<script" not in page and "<link" not in page and "src=" not in page
    assert "complexity" in page and "hypervolume" in page and "TTFT" in page


def test_report_html_all_runs_chosen_program_and_empty(filled, tmp_path):
    a, run, ids = filled
    run2 = a.start_run({}, seed=4)
    a.add_candidate(run2, BASE.format(k=42), evaluation=make_eval(0.01))
    page = open(report_html(a, tmp_path / "all.html", program_id=ids[1]), encoding="utf-8").read()
    assert f"Program #{ids[1]}" in page and run in page and run2 in page
    assert "http" not in page
    for s in _svgs(page):
        ET.fromstring(s)
    empty = Archive(tmp_path / "empty.db")
    page = open(report_html(empty, tmp_path / "empty.html"), encoding="utf-8").read()
    assert "<svg" in page and "http" not in page
    for s in _svgs(page):
        ET.fromstring(s)
