"""Terminal views, the report's Plotly figures and the one-file HTML report (also opened in
headless Chromium), on a hand-filled archive."""
from __future__ import annotations

import json
import math
import os
import re
import shutil

import pytest
from plotly.offline import get_plotlyjs
from rich.console import Console

from evaluator.evaluate import Evaluation
from evolve.archive import Archive
from evolve.cli import main as cli_main
from evolve.views import frontier_table, go_cap_status, render_frontier, report_html, show_program
from evolve.views.tables import duplicate_groups
from evolve.views.history import front_hypervolume, ranked_error
from evolve.views.plots import (pareto_figure, predicted_measured_figure, progress_series, regime_figure,
                                stage_errors_figure, ttft_itl_figure)

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
    assert ids[6] not in {r["id"] for r in rows}  # the invalid evaluation (generation 5) never is
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


def _figures(page: str) -> dict[str, dict]:
    """div id -> {"data", "layout"} of every Plotly.newPlot call in the page."""
    out = {}
    dec = json.JSONDecoder()
    for m in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', page):
        data, end = dec.raw_decode(page, m.end())
        rest = page[end:].lstrip().lstrip(",").lstrip()
        layout, _ = dec.raw_decode(rest)
        out[m.group(1)] = {"data": data, "layout": layout}
    return out


def _trace(fig, name):
    return next(t for t in fig["data"] if t.get("name") == name)


def test_report_html_self_contained(filled, tmp_path):
    a, run, ids = filled
    blackbox = make_eval(0.5, complexity=7)
    out = report_html(a, tmp_path / "out" / "report.html", run=run,
                      baselines={"blackbox": blackbox, "roofline-rows": make_eval(0.35).rows})
    page = open(out, encoding="utf-8").read()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # plotly.js inlined exactly once, nothing loaded from anywhere
    assert page.count("* plotly.js v") == 1 and page.count("<script") == 1 + 5
    ours = page.replace(get_plotlyjs(), "")  # the rest: our markup and the figures
    assert "<script src" not in ours and "<link" not in ours and "http://" not in ours and "https://" not in ours
    figs = _figures(page)
    assert set(figs) == {"plot-pareto", "plot-ttft-itl", "plot-progress", "plot-stage-errors", "plot-pred-meas"}
    front = {r["id"] for r in a.frontier(run)}
    assert set(_trace(figs["plot-pareto"], "frontier (all objectives)")["customdata"]) == front
    shown = set(_trace(figs["plot-pareto"], "evaluated")["customdata"]) | front
    assert ids[6] not in shown and shown == set(ids) - {ids[6]}  # every valid evaluation, never the invalid one
    # baselines are reference lines (the rows-only one at its rows' mean), never marks that stretch the axes
    assert not [t for t in figs["plot-pareto"]["data"] if t.get("name") == "baselines"]
    text = json.dumps(figs["plot-pareto"]["layout"].get("annotations"))
    assert "baseline blackbox" in text and "roofline-rows" in text
    ttft = figs["plot-ttft-itl"]
    named = json.dumps(ttft["layout"].get("annotations")) + json.dumps([t.get("text") for t in ttft["data"]])
    assert "blackbox" in named and "roofline-rows" in named  # a mark inside the axes, else named at the edge
    bars = [t for t in figs["plot-stage-errors"]["data"] if t["type"] == "bar"]
    assert len(bars) == 3 * 3  # E2E, TTFT, ITL x (program, two baselines)
    for pid in frontier_table(a, run):
        assert f"#{pid['id']}" in page
    assert f"Program #{ids[-1]}" in page  # default detailed program: the recommended one (best in-sample here)
    assert page.index('id="recommended"') < page.index('id="plot-pareto"')  # the answer before any plot
    assert "blackbox" in page and "roofline-rows" in page
    assert "complexity" in page and "hypervolume" in page and "TTFT" in page


def test_report_figures_content(filled):
    a, run, ids = filled
    evals = a.evaluations(run, stage="full")
    front = {r["id"] for r in a.frontier(run)}
    blackbox = make_eval(0.5, complexity=7)
    near = make_eval(0.06, complexity=7)  # among the candidates: a line inside the axes
    outlier = make_eval(40.0, complexity=3)  # a baseline 100x off: named at the top, never the axis' scale
    chosen = a.program(ids[-1])
    fig = pareto_figure(evals, front, {"near": near, "rows": make_eval(0.05).rows, "outlier": outlier},
                        chosen, recommended_id=ids[-2])
    by = {t.name: t for t in fig.data}
    assert set(by) == {"2-D front (complexity, E2E)", "evaluated", "frontier (all objectives)",
                       f"★ recommended: #{ids[-2]}", f"detailed: #{ids[-1]}"}
    e2e = {r["id"]: r["objectives"]["e2e_mean"] for r in evals if r["eval_valid"]}
    for name in ("evaluated", "frontier (all objectives)"):
        for pid, y in zip(by[name].customdata, by[name].y):
            assert y == pytest.approx(e2e[pid])
    assert list(by[f"detailed: #{ids[-1]}"].y) == [pytest.approx(e2e[ids[-1]])]
    assert list(by[f"★ recommended: #{ids[-2]}"].y) == [pytest.approx(e2e[ids[-2]])]
    assert min(by["2-D front (complexity, E2E)"].y) == pytest.approx(min(e2e.values()))
    # the y axis fits the candidates, not the outlier baseline; the baselines are lines, the outlier named above
    lo, hi = fig.layout.yaxis.range
    top = 10 ** hi if fig.layout.yaxis.type == "log" else hi
    fmax = max(e2e[i] for i in front if i in e2e)
    assert fmax <= top <= 3.5 * fmax < outlier.objectives["e2e_mean"]  # every frontier program inside
    lines = {round(sh.y0, 9) for sh in fig.layout.shapes}
    assert lines == {round(near.objectives["e2e_mean"], 9), round(sum(r["e2e_err"] for r in make_eval(0.05).rows) / 3, 9)}
    notes = " ".join(an.text for an in fig.layout.annotations)
    assert "baseline near" in notes and "baseline rows" in notes and "above the plot: baseline outlier" in notes
    n_above = sum(v > top for v in e2e.values())
    assert n_above and f"{n_above} evaluated above the plot" in notes  # runaway programs are counted, not plotted

    tf = ttft_itl_figure(evals, front, {"rows": make_eval(0.02).rows, "far": make_eval(40.0)})
    t = {tr.name: tr for tr in tf.data}
    rows = make_eval(0.02).rows
    assert list(t["baselines"].x) == [pytest.approx(sum(r["itl_err"] for r in rows) / 3)]  # inside: a mark
    assert list(t["baselines"].text) == ["rows"]
    assert "outside the plot: baseline far" in " ".join(an.text for an in tf.layout.annotations)

    bars = stage_errors_figure(chosen, {"blackbox": blackbox}).data
    assert [b.name for b in bars] == [f"#{ids[-1]}", "blackbox"] * 3
    assert list(bars[0].y) == [r["e2e_err"] for r in chosen["evaluation"]["rows"]]
    assert list(bars[3].y) == [r["ttft_err"] for r in blackbox.rows]
    assert stage_errors_figure({"id": 1, "evaluation": {}}, {}) is None

    # predicted vs measured per stage, one panel per metric with the y = x line
    pm = predicted_measured_figure(chosen)
    marks = [tr for tr in pm.data if tr.mode == "markers"]
    assert len(marks) == 3 and list(marks[0].x) == [r["meas_e2e_s"] for r in chosen["evaluation"]["rows"]]
    assert list(marks[2].y) == pytest.approx([1e3 * r["pred_itl_s"] for r in chosen["evaluation"]["rows"]])  # ms
    assert list(marks[0].y) == [r["pred_e2e_s"] for r in chosen["evaluation"]["rows"]]
    assert predicted_measured_figure({"id": 1, "evaluation": {}}) is None
    assert regime_figure(chosen) is None  # no held-out errors in this archive

    series = progress_series(evals)[run]  # no held-out splits here: best = in-sample mean E2E
    assert [i for i, _, _ in series] == list(range(1, len(evals) + 1))
    bests = [b for _, b, _ in series]
    hvs = [h for *_, h in series]
    assert bests == sorted(bests, reverse=True) and bests[-1] == pytest.approx(min(e2e.values()))
    assert hvs == sorted(hvs) and hvs[-1] > 0
    # one hypervolume: the report's last point is the summary's figure over the run's frontier
    assert hvs[-1] == pytest.approx(front_hypervolume(a.frontier(run)))


def test_best_so_far_is_the_ranked_heldout_error():
    """With held-out splits, "best so far" and the hypervolume are on the worst held-out regime
    (what the search ranks on), not on the in-sample error."""
    held = lambda w, e, c: {"run_id": "r", "eval_valid": True, "complexity": c,  # noqa: E731
                            "objectives": {"e2e_mean": e, "lowo_e2e": w, "lomo_e2e": w / 2, "load_e2e": w / 3,
                                           "long_e2e": w / 4, "complexity": c}}
    evals = [held(0.30, 0.01, 5), held(0.10, 0.20, 6), held(0.20, 0.005, 4)]
    s = progress_series(evals)["r"]
    assert [b for _, b, _ in s] == [0.30, 0.10, 0.10]
    assert ranked_error(evals[1]["objectives"]) == 0.10
    assert ranked_error({**evals[1]["objectives"], "long_e2e": math.inf}) is None  # an unscored regime
    assert s[-1][2] == pytest.approx(front_hypervolume(evals)) and s[-1][2] > s[0][2]
    rec = {"id": 9, "objectives": evals[1]["objectives"]}
    bars = regime_figure(rec).data[0]
    assert list(bars.y) == [0.10, 0.05, 0.10 / 3, 0.025] and list(bars.marker.color).count("#d62728") == 1


def test_report_html_all_runs_chosen_program_and_empty(filled, tmp_path):
    a, run, ids = filled
    run2 = a.start_run({}, seed=4)
    a.add_candidate(run2, BASE.format(k=42), evaluation=make_eval(0.01))
    page = open(report_html(a, tmp_path / "all.html", program_id=ids[1]), encoding="utf-8").read()
    assert f"Program #{ids[1]}" in page and run in page and run2 in page
    figs = _figures(page)
    assert {t["name"] for t in figs["plot-progress"]["data"]} == {run, run2}
    empty = Archive(tmp_path / "empty.db")
    page = open(report_html(empty, tmp_path / "empty.html"), encoding="utf-8").read()
    figs = _figures(page)
    assert set(figs) == {"plot-pareto", "plot-ttft-itl", "plot-progress"}
    assert "no valid full evaluations yet" in json.dumps(figs["plot-pareto"]["layout"])


# ---------------------------------------------------------------- the report in a real browser

def _chromium() -> str | None:
    for c in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _heldout_archive(path):
    """An archive whose programs carry every held-out regime; returns (archive, run, ids)."""
    from dataclasses import replace
    a = Archive(path)
    run = a.start_run({}, seed=1)
    ids = []
    for k in range(6):
        e = make_eval(0.3 * 0.8 ** k, complexity=4 + k)
        w = 0.5 * 0.7 ** k
        obj = {**e.objectives, "lowo_e2e": w / 3, "lomo_e2e": w, "load_e2e": w / 2, "long_e2e": w * 1.2,
               "overload_fail": w / 4}
        ids.append(a.add_candidate(run, BASE.format(k=k), operator="seed", generation=k,
                                   evaluation=replace(e, objectives=obj)))
    return a, run, ids


def test_report_opens_in_chromium_without_errors(gt, tmp_path):
    """The page as a reader gets it: the recommended program (id, error per held-out regime,
    coverage, source) on the first screen without a click, every figure drawn by the inlined
    plotly.js, no console error, no request beyond the file itself."""
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium not found (/usr/bin/chromium): run scripts/install_browser.sh")
    sync_api = pytest.importorskip("playwright.sync_api", reason="run scripts/install_browser.sh")
    a, run, ids = _heldout_archive(tmp_path / "h.db")
    best = a.best_transfer(run)
    out = report_html(a, tmp_path / "r.html", run=run, baselines={"blackbox": make_eval(0.5, complexity=7)}, gt=gt)
    url = (tmp_path / "r.html").resolve().as_uri()
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True,
                              args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            pg = b.new_page(viewport={"width": 1300, "height": 900})
            errors, requests = [], []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            pg.on("request", lambda r: requests.append(r.url))
            pg.goto(url)
            pg.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length === 6")
            pg.screenshot(path=str(tmp_path / "report.png"), full_page=False)
            # the first screen: everything of the recommended program lies above the fold
            first = pg.evaluate("""() => { const q = (s) => document.querySelector(s).getBoundingClientRect();
                return {card: q('#recommended').bottom, regimes: q('#rec-regimes').bottom,
                        coverage: q('#rec-coverage').bottom, source: q('#rec-source').top,
                        y: window.scrollY, h: window.innerHeight}; }""")
            assert first["y"] == 0 and max(first["card"], first["regimes"], first["coverage"]) <= first["h"], first
            card = pg.locator("#recommended").inner_text()
            assert f"Recommended: program #{best['id']}" in card
            for label in ("LOWO E2E", "LOMO worst-model E2E", "high-load E2E", "long-decode error", "overload failures"):
                assert label in card
            assert "long-decode error (worst)" in card  # the regime it is ranked on
            assert "Fitted on:" in card and "Not validated for:" in card and "predict_step_time" in card
            # the Pareto plot: the recommended star and every frontier program inside the axes
            assert pg.locator("#plot-pareto .scatterlayer .trace path.point").count() >= len(ids)
            assert pg.locator("#plot-regimes .barlayer path").count() == 5
            assert pg.locator("#plot-stage-errors .barlayer path").count() >= 3 * 2 * 3
        finally:
            b.close()
    assert not errors, errors
    assert [u for u in requests if not u.startswith("file://") and not u.startswith("data:")] == [], requests
    assert out.endswith("r.html")


def test_frontier_cli_json_is_strict(filled, capsys):
    """`evolve frontier --json`: null for a non-finite objective (never Infinity/NaN), baselines-run
    programs left out."""
    a, run, ids = filled
    ev = make_eval(0.001)
    best = a.add_candidate(run, BASE.format(k=77), operator="llm:improve", generation=9,
                           evaluation=Evaluation(valid=True, rows=ev.rows, objectives={**ev.objectives,
                                                                                       "step_mape": math.inf},
                                                 constants=ev.constants, overheads=ev.overheads))
    bl = a.start_run({}, seed=0, run_id="baselines-0123")
    a.add_candidate(bl, BASE.format(k=99), operator="baseline:blackbox", evaluation=make_eval(0.0001))
    assert cli_main(["frontier", "--archive", str(a.path), "--json"]) == 0

    def no_constants(name):
        raise AssertionError(f"non-strict JSON constant {name}")
    rows = json.loads(capsys.readouterr().out, parse_constant=no_constants)
    by_id = {r["id"]: r for r in rows}
    assert best in by_id and by_id[best]["step_mape"] is None and by_id[best]["e2e_mean"] > 0
    assert all(not str(r["run"]).startswith("baselines-") for r in rows)
    # exactly one program is marked as the one to take: the run's best_transfer
    marked = [r["id"] for r in rows if r["recommended"]]
    assert marked == [a.best_transfer(None, skip_prefix="baselines-")["id"]]


def test_the_recommended_program_is_the_best_worst_regime_and_marked_everywhere(tmp_path, capsys):
    """Held-out regimes: the program with the lowest WORST regime is handed over, even when
    another has the lower mean; frontier (table and JSON) and show mark it."""
    from evolve.archive import Archive
    from rich.console import Console
    a = Archive(tmp_path / "r.db")
    run = a.start_run({}, seed=0)
    ids = {}
    for name, k, regimes in (("even", 1, (0.12, 0.12, 0.12, 0.12, 0.12)), ("spiky", 2, (0.01, 0.01, 0.01, 0.4, 0.01))):
        ev = make_eval(0.01, complexity=5 + k)
        obj = {**ev.objectives, **dict(zip(("lowo_e2e", "lomo_e2e", "load_e2e", "long_e2e", "overload_fail"), regimes))}
        ids[name] = a.add_candidate(run, BASE.format(k=k), operator="seed", evaluation=Evaluation(
            valid=True, rows=ev.rows, objectives=obj, constants=ev.constants, overheads=ev.overheads))
    assert a.best_transfer(run)["id"] == ids["even"]
    assert cli_main(["frontier", "--archive", str(a.path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["id"]: r["recommended"] for r in rows} == {ids["even"]: True, ids["spiky"]: False}
    assert {r["id"]: r["long_e2e"] for r in rows} == {ids["even"]: 0.12, ids["spiky"]: 0.4}
    assert cli_main(["frontier", "--archive", str(a.path)]) == 0
    assert f"★ #{ids['even']} is recommended" in capsys.readouterr().out
    con = Console(record=True, width=400)
    show_program(a, ids["even"], con)
    text = con.export_text()
    assert f"★ recommended for run {run}" in text and "long-decode error 12.0%" in text
    con = Console(record=True, width=200)
    show_program(a, ids["spiky"], con)
    assert "recommended" not in con.export_text()


def test_views_asked_for_no_run_name_the_runs_hand_over(tmp_path, capsys):
    """`evolve frontier` and the report with no --run: an archive of one finished run names the
    program that run handed over (it showed a fresh choice over the run's programs: the README
    job's summary said "use #5" while `evolve frontier` starred #266 and the report #263); an
    archive of several finished runs names the best of their hand-overs."""
    a = Archive(tmp_path / "one.db")
    run = a.start_run({}, seed=0)
    regimes = {"even": (0.12, 0.12, 0.12, 0.12, 0.12), "spiky": (0.01, 0.01, 0.01, 0.4, 0.01),
               "fine": (0.05, 0.05, 0.05, 0.05, 0.05)}
    ids = {}

    def add(r, name, k):
        ev = make_eval(0.01, complexity=5 + k)
        obj = {**ev.objectives, **dict(zip(("lowo_e2e", "lomo_e2e", "load_e2e", "long_e2e", "overload_fail"),
                                           regimes[name]))}
        ids[name] = a.add_candidate(r, BASE.format(k=k), operator="seed", evaluation=Evaluation(
            valid=True, rows=ev.rows, objectives=obj, constants=ev.constants, overheads=ev.overheads))
    add(run, "even", 1)
    add(run, "spiky", 2)
    assert a.best_transfer(None)["id"] == ids["even"]  # not finished: the fresh choice
    a.set_recommended(run, ids["spiky"])  # the run's hand-over (its worst fit start decided)
    assert a.best_transfer(None)["id"] == ids["spiky"]
    assert [r["id"] for r in frontier_table(a, None) if r["recommended"]] == [ids["spiky"]]
    assert cli_main(["frontier", "--archive", str(a.path)]) == 0
    assert f"★ #{ids['spiky']} is recommended" in capsys.readouterr().out
    page = open(report_html(a, tmp_path / "r.html"), encoding="utf-8").read()
    assert f"Recommended: program #{ids['spiky']}" in page
    other = a.start_run({}, seed=1)
    add(other, "fine", 3)
    assert a.best_transfer(None)["id"] == ids["fine"]  # a run not finished: afresh over every program
    a.set_recommended(other, ids["even"])
    assert a.best_transfer(None)["id"] == ids["even"]  # the better of the two hand-overs, not "fine"


def test_report_plots_peak_vs_measured_components(filled, gt, tmp_path):
    from evolve.views.components_view import components_data
    a, run, _ = filled
    comps = components_data(gt, ["llama-2-70b", "llama-2-7b"])
    page = open(report_html(a, tmp_path / "c.html", run=run, components=comps), encoding="utf-8").read()
    figs = _figures(page)
    assert {"plot-components-0", "plot-components-1"} <= set(figs)
    f70 = figs["plot-components-0"]  # models in name order
    bars = [t for t in f70["data"] if t["type"] == "bar"]
    assert [t["name"] for t in bars] == ["measured gemm", "measured dec attn", "measured pf attn", "measured allred",
                                         "measured moe"]
    grid = comps["llama-2-70b"]["grid"]
    step = [sum(t["y"][i] for t in bars) for i in range(len(grid))]
    assert step == pytest.approx([r["t_step_measured"] / 1000 for r in grid], rel=1e-9)
    cyc = _trace(f70, "real step cycle nearby (median)")["y"]
    assert sum(v is not None for v in cyc) == sum(r["measured_cycle_n"] > 0 for r in grid) > 0
    assert "scaled x4" in page  # llama-2-7b's decode attention layout note


def test_report_details_the_best_on_heldout_errors(tmp_path):
    """Where programs carry held-out errors, the report's default program is the best on them,
    not the best in-sample fit, among programs whose every constant the data pins down."""
    a = Archive(tmp_path / "h.db")
    run = a.start_run({}, seed=1)
    held = {"lowo_e2e": 0.05, "lomo_e2e": 0.08, "load_e2e": 0.06}
    overfit = make_eval(0.01)
    overfit = Evaluation(**{**overfit.__dict__, "objectives": {**overfit.objectives, **held}})
    transfer = make_eval(0.05)
    transfer = Evaluation(**{**transfer.__dict__, "objectives": {**transfer.objectives, "lowo_e2e": 0.02,
                                                                 "lomo_e2e": 0.03, "load_e2e": 0.02}})
    # better still on held-out errors, but with a constant no data pins (held by the prior)
    unpinned = Evaluation(**{**transfer.__dict__, "objectives": {**transfer.objectives, "lowo_e2e": 0.01},
                             "identifiability": {"llama": {"rank": 1, "n_constants": 2, "unpinned": ["BETA1"]}}})
    a.add_candidate(run, BASE.format(k=1), operator="seed", evaluation=overfit)
    good = a.add_candidate(run, BASE.format(k=2), operator="seed", evaluation=transfer)
    loose = a.add_candidate(run, BASE.format(k=3), operator="seed", evaluation=unpinned)
    page = open(report_html(a, tmp_path / "h.html", run=run), encoding="utf-8").read()
    assert f"Program #{good}" in page
    assert a.best_transfer(run)["id"] == good
    only_loose = a.start_run({}, seed=2)
    loose2 = a.add_candidate(only_loose, BASE.format(k=4), operator="seed", evaluation=unpinned)
    assert a.best_transfer(only_loose)["id"] == loose2  # no pinned program: the best of the rest
    assert loose != loose2
    a.close()


def test_frontier_collapses_behavioural_duplicates(tmp_path, capsys):
    """Programs whose every stored objective but complexity and every per-stage prediction lie
    within 0.1% are one row (the simplest, or the recommended one), with a count and the ids;
    `--all` lists them all; a twin 1% off is its own row."""
    from dataclasses import replace
    a = Archive(tmp_path / "d.db")
    run = a.start_run({}, seed=0)
    held = {"lowo_e2e": 0.05, "lomo_e2e": 0.06, "load_e2e": 0.04}

    def ev(scale, cx, bump=1.0):
        e = make_eval(scale, complexity=cx)
        rows = [{**r, "pred_e2e_s": r["pred_e2e_s"] * bump} for r in e.rows]
        return replace(e, rows=rows, objectives={**e.objectives, **{k: v * bump for k, v in held.items()}})
    simple = a.add_candidate(run, BASE.format(k=1), operator="seed", evaluation=ev(0.02, 5))
    twin = a.add_candidate(run, BASE.format(k=2), operator="seed", evaluation=ev(0.02 * 0.9996, 6, 0.9996))
    other = a.add_candidate(run, BASE.format(k=3), operator="seed", evaluation=ev(0.02 * 1.01, 4, 1.01))
    front = {r["id"] for r in a.frontier(run, computed=True)}
    assert {simple, twin, other} <= front  # the other is simpler but 1% worse held out
    rows = frontier_table(a, run)
    by = {r["id"]: r for r in rows}
    assert a.best_transfer(run)["id"] == twin  # better held out: the recommended one leads its group
    lead, dup = twin, simple
    assert set(by) & {simple, twin} == {lead} and by[lead]["duplicates"] == [dup] and by[lead]["recommended"]
    assert by[lead]["n_duplicates"] == 1
    assert other in by and by[other]["duplicates"] == []  # 1% apart: a different behaviour
    full = {r["id"]: r for r in frontier_table(a, run, collapse=False)}
    assert {simple, twin} <= set(full) and full[dup]["duplicate_of"] == lead
    assert cli_main(["frontier", "--archive", str(a.path), "--json"]) == 0
    js = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert js[lead]["duplicates"] == [dup] and dup not in js
    assert cli_main(["frontier", "--archive", str(a.path), "--json", "--all"]) == 0
    assert dup in {r["id"] for r in json.loads(capsys.readouterr().out)}
    assert cli_main(["frontier", "--archive", str(a.path)]) == 0
    out = capsys.readouterr().out
    assert "+1" in out and "0.1% relative" in out and "--all" in out
    recs = [a.program(i) for i in (twin, simple, other)]
    groups = duplicate_groups(recs)  # nothing recommended: the simplest leads
    assert [[r["id"] for r in g] for g in groups] == [[other], [simple, twin]]
    a.close()
