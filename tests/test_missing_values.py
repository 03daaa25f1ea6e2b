"""One convention for a missing or undefined value: "—" in every table (terminal frontier table,
run summary, `show`, the HTML report, the UI), null in JSON; and progress lines in a log are
whole lines (issue 32)."""
from __future__ import annotations

import io
import json
import math
import re
import threading
import urllib.request
from types import SimpleNamespace

import pytest
from rich.console import Console

from evaluator.records import Evaluation
from evolve.archive import Archive
from evolve.views.format import MISSING, clean_json, fmt_err, fmt_missing, fmt_num

SRC = "ALPHA = 1.0\nBETA = 2.0\n\ndef predict_step_time(P, D):\n    return ALPHA * P + BETA * D + {k}.0\n"
# "nan", "inf" or a lone ASCII dash as a table cell
BAD_CELL = re.compile(r"(?<![\w.])(nan|inf|-inf)(?![\w.])|(?<=[│|\s])-(?=\s*[│|])", re.I)


def _eval(k: int, nan_itl: bool) -> Evaluation:
    e = 0.3 * 0.8 ** k
    rows = [{"experiment": "exp-a", "model": "m", "workload": "chat", "stage": 0, "rate": 2.0, "n_requests": 40,
             "pred_e2e_s": 1 + e, "meas_e2e_s": 1.0, "e2e_err": e, "pred_ttft_s": 0.1, "meas_ttft_s": 0.1,
             "ttft_err": math.nan, "pred_itl_s": math.nan, "meas_itl_s": 0.01, "itl_err": None}]
    obj = {"step_mape": math.nan, "e2e_mean": e, "e2e_worst": e, "ttft_mean": e,
           "itl_mean": math.nan if nan_itl else e, "complexity": 4.0 + k}
    return Evaluation(valid=True, rows=rows, objectives=obj, constants={"m": [1.0, math.nan]},
                      steps={"exp-a": {"step_mape": math.nan, "spearman_duration": None, "n": 0}})


@pytest.fixture
def archive(tmp_path):
    a = Archive(tmp_path / "m.db")
    run = a.start_run({"population": 2}, seed=0, data_fingerprint="missing", budget=3)
    ids, parent = [], []
    for k in range(3):
        ids.append(a.add_candidate(run, SRC.format(k=k), parents=parent, operator="seed" if k == 0 else "mutate",
                                   generation=k, evaluation=_eval(k, nan_itl=k != 1)))
        parent = [ids[-1]]
    a.close()
    return tmp_path / "m.db", run, ids


def _text(fn) -> str:
    con = Console(record=True, width=250, file=io.StringIO())
    fn(con)
    return con.export_text()


def _check_cells(text: str) -> None:
    assert MISSING in text
    bad = BAD_CELL.search(text)
    assert bad is None, f"{bad.group(0)!r} in:\n{text}"


def test_formatters():
    for v in (None, math.nan, math.inf, -math.inf, "x"):
        assert fmt_err(v) == MISSING and fmt_num(v) == MISSING and fmt_missing(v, str) == MISSING
    assert fmt_err(0.123) == "12.3%" and fmt_num(3.0) == "3"
    # a held-out regime in its unit, in every view: the overload failures in points
    from evolve.views.format import fmt_objective
    assert fmt_objective("overload_fail", 0.265) == "26.5 pts" and fmt_objective("long_e2e", 0.265) == "26.5%"
    assert fmt_objective("lomo_e2e", 12.0) == "12x" and fmt_objective("overload_fail", math.nan) == MISSING
    assert clean_json({"a": math.nan, "b": [math.inf, 1.0]}) == {"a": None, "b": [None, 1.0]}


def test_terminal_frontier_and_show(archive):
    from evolve.views.tables import frontier_table, render_frontier, show_program
    path, run, ids = archive
    a = Archive(path, readonly=True)
    rows = frontier_table(a, run)
    assert rows and any(isinstance(r["itl_mean"], float) and math.isnan(r["itl_mean"]) for r in rows)
    _check_cells(_text(lambda con: render_frontier(rows, con)))
    _check_cells(_text(lambda con: show_program(a, ids[0], con)))


def test_frontier_json_is_strict_with_null(archive, capsys):
    from evolve.cli import main
    path, run, _ = archive
    main(["frontier", "--json", "--archive", str(path)])
    out = capsys.readouterr().out
    rows = json.loads(out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert any(r["itl_mean"] is None for r in rows) and all(r["step_mape"] is None for r in rows)
    main(["frontier", "--archive", str(path)])
    _check_cells(capsys.readouterr().out)
    main(["show", str(rows[0]["id"]), "--archive", str(path)])
    _check_cells(capsys.readouterr().out)


def test_run_summary_and_progress_line():
    from evolve.cli import _pct
    from evolve.progress_log import progress_line
    assert _pct(None) == _pct(math.nan) == _pct(math.inf) == MISSING and _pct(0.05) == "5.0%"
    archive = SimpleNamespace(get_run=lambda run_id: {"n_evaluated": 3})
    search = SimpleNamespace(archive=archive, run_id="run-x", cfg=SimpleNamespace(budget=9, holdout=True), planned=9,
                             state=SimpleNamespace(frontier=[SimpleNamespace(objectives={"lowo_e2e": math.nan})]),
                             llm=None)
    line = progress_line(search, 0.0)
    assert f"best held-out (worst regime) {MISSING}," in line and "\n" not in line
    # the best program's worst regime is named and printed in its unit: the overload failures in
    # points (a difference of two fractions), not as a percentage
    held = {"lowo_e2e": 0.03, "lomo_e2e": 0.05, "load_e2e": 0.04, "long_e2e": 0.087, "overload_fail": 0.265}
    worse = {**held, "overload_fail": 0.4}
    search.state.frontier = [SimpleNamespace(objectives=worse), SimpleNamespace(objectives=held)]
    line = progress_line(search, 0.0)
    assert "3/9 evaluations, best held-out (worst regime: overload failures) 26.5 pts," in line, line
    search.state.frontier = [SimpleNamespace(objectives={**held, "overload_fail": 0.01})]
    assert "best held-out (worst regime: long-decode error) 8.7%," in progress_line(search, 0.0)


def test_report_html(archive, tmp_path):
    from evolve.views.report import report_html
    path, run, ids = archive
    out = report_html(Archive(path, readonly=True), tmp_path / "r.html", run=run, program_id=ids[0])
    html = open(out).read()
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", html)
    assert MISSING in cells
    assert not [c for c in cells if c.strip().lower() in ("nan", "inf", "-inf", "-", "none")], \
        sorted({c for c in cells if c.strip().lower() in ("nan", "inf", "-inf", "-", "none")})


def test_ui_api_null_and_page_dash(archive):
    from evolve.views.server import make_server
    path, run, ids = archive
    srv, thread = make_server(str(path), "127.0.0.1", 0)
    try:
        host, port = srv.server_address[:2]
        base = f"http://{host}:{port}"
        for route in (f"/api/points?run={run}", f"/api/program/{ids[0]}"):
            with urllib.request.urlopen(base + route, timeout=60) as r:
                body = r.read().decode()
            assert "NaN" not in body and "Infinity" not in body
            json.loads(body, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
        from importlib import resources
        js = resources.files("evolve.views").joinpath("static/app.js").read_text()
        # the page's own formatters write "—" for anything not a finite number
        assert 'if (!fin(v)) return "—";' in js
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


class _Racy(io.StringIO):
    """A stream whose every write() lets another thread run (to catch a line written in parts)."""

    def write(self, s):
        n = super().write(s)
        threading.Event().wait(0.001)
        return n


def test_progress_log_lines_are_whole():
    from evolve.progress_log import ProgressLog

    class Boom:
        run_id = "run-y"

        @property
        def archive(self):
            raise RuntimeError("database is locked\n  (background on this error at: https://sqlalche.me/e/20/e3q8)")

    stream = _Racy()
    log = ProgressLog(Boom(), interval_s=0.01, stream=stream)
    with log:
        for _ in range(30):  # another writer on the same stream meanwhile
            stream.write("other output line\n")
            threading.Event().wait(0.002)
    lines = stream.getvalue().splitlines()
    prog = [ln for ln in lines if ln.startswith("progress")]
    assert prog and all(ln == "other output line" or ln.startswith("progress: unavailable (RuntimeError: "
                                                                    "database is locked (background") for ln in lines)
    assert all(ln.endswith(")") for ln in prog)


def test_no_rich_bar_when_stderr_is_not_a_terminal(monkeypatch):
    """Piped: no rich bar (its last frame would be cut to 80 columns mid-word); ProgressLog
    writes the lines. On a terminal the bar is live, on stderr."""
    import sys
    from evolve.cli import _progress_bar
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    bar = _progress_bar()
    assert bar.disable
    with bar:
        t = bar.add_task("run", total=3, run="run-z", label="E2E", best=MISSING, itl=MISSING, step=MISSING, front=0)
        bar.update(t, completed=3, best="12.3%")
    assert sys.stderr.getvalue() == ""

    class Tty(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.setattr(sys, "stderr", Tty())
    bar = _progress_bar()
    assert not bar.disable and bar.console.stderr
    assert _progress_bar(quiet=True).disable


HELD = {"lowo_e2e": 0.04, "lomo_e2e": 0.09, "load_e2e": 0.05, "long_e2e": math.inf, "overload_fail": math.nan}


@pytest.fixture
def heldout_archive(tmp_path):
    """A run whose programs carry held-out regimes, two of them not scored (inf, NaN)."""
    from dataclasses import replace
    a = Archive(tmp_path / "h.db")
    run = a.start_run({}, seed=0, data_fingerprint="missing", budget=2)
    ids = []
    for k in range(2):
        e = _eval(k, nan_itl=True)
        ids.append(a.add_candidate(run, SRC.format(k=k), operator="seed", generation=k,
                                   evaluation=replace(e, objectives={**e.objectives, **HELD})))
    a.close()
    return tmp_path / "h.db", run, ids


def test_unscored_regimes_are_dashes_in_every_table_and_null_in_json(heldout_archive, tmp_path, capsys, gt):
    """A regime that could not be scored: "—" in the terminal frontier, the report's first screen
    and its frontier table, null in `frontier --json` and in the UI's API."""
    from evolve.cli import main
    from evolve.views.report import report_html
    from evolve.views.server import make_server
    from evolve.views.tables import frontier_table, render_frontier
    path, run, ids = heldout_archive
    a = Archive(path, readonly=True)
    text = _text(lambda con: render_frontier(frontier_table(a, run), con))
    _check_cells(text)
    assert "long-decode error" in text
    main(["frontier", "--json", "--archive", str(path)])
    rows = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert rows and all(r["long_e2e"] is None and r["overload_fail"] is None for r in rows)
    assert all(r["duplicate_of"] is None and isinstance(r["duplicates"], list) for r in rows)
    page = open(report_html(a, tmp_path / "r.html", run=run, gt=gt), encoding="utf-8").read()
    card = page[page.index('id="recommended"'):page.index("</section>")]
    assert re.search(r'long-decode error[^<]*</div><div class="v">—</div>', card), card
    assert "nan" not in card.lower().replace("nan%", "") and "inf" not in re.sub(r"<[^>]+>", "", card).lower()
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", page)
    assert MISSING in cells and not [c for c in cells if c.strip().lower() in ("nan", "inf", "-inf", "-", "none")]
    srv, thread = make_server(str(path), "127.0.0.1", 0)
    try:
        host, port = srv.server_address[:2]
        for route in (f"/api/points?run={run}", f"/api/program/{ids[0]}"):
            with urllib.request.urlopen(f"http://{host}:{port}{route}", timeout=120) as r:
                body = json.loads(r.read(), parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
            if "points" in body:
                assert all(p["long_e2e"] is None and p["ranked_error"] is None for p in body["points"])
            else:
                assert {r["key"]: r["value"] for r in body["regimes"]}["long_e2e"] is None
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def test_the_overload_failures_are_in_points_in_every_view(tmp_path, capsys, gt):
    """The overload regime is a difference of two failed fractions: `show`, the terminal frontier,
    the report (frontier, regime cells, best so far) print it in points, never as a percentage."""
    from dataclasses import replace

    from evolve.cli import main
    from evolve.views.report import report_html
    a = Archive(tmp_path / "o.db")
    run = a.start_run({}, seed=0, data_fingerprint="missing", budget=2)
    e = _eval(0, nan_itl=False)
    held = {"lowo_e2e": 0.04, "lomo_e2e": 0.09, "load_e2e": 0.05, "long_e2e": 0.087, "overload_fail": 0.265}
    pid = a.add_candidate(run, SRC.format(k=0), operator="seed", generation=0,
                          evaluation=replace(e, objectives={**e.objectives, **held}))
    a.close()
    main(["show", str(pid), "--archive", str(tmp_path / "o.db")])
    out = " ".join(capsys.readouterr().out.split())
    assert "overload_fail 26.5 pts" in out and "26.5%" not in out, out
    main(["frontier", "--archive", str(tmp_path / "o.db")])
    out = capsys.readouterr().out
    assert "26.5 pts" in out and "26.5%" not in out, out
    page = open(report_html(Archive(tmp_path / "o.db", readonly=True), tmp_path / "r.html", run=run, gt=gt),
                encoding="utf-8").read()
    text = re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.S))
    assert "26.5 pts" in text and "26.5%" not in text
    assert "best error so far 26.5 pts" in " ".join(text.split())


def test_progress_bar_never_cuts_a_field_on_a_narrow_terminal():
    """The live bar on a terminal of any width: whole fields only (the least important dropped
    first), never wider than the terminal, the evaluation count kept longest."""
    from evolve.progress_log import fit_fields, fitted_line, task_fields

    class Task:
        fields = {"run": "run-0-30dae753", "label": "held-out (worst regime)", "best": "33.6%", "itl": MISSING,
                  "step": "4.1%", "front": 48}
        completed, total, elapsed, visible = 57, 200, 3725.0, True
    whole = {t for _, t in task_fields(Task)}
    for width in range(8, 161):
        line = fitted_line(Task, width)
        assert len(line) <= width, (width, line)
        parts = [p for p in line.split("  ") if p]
        bars = [p for p in parts if set(p) <= set("━─")]
        assert len(bars) <= 1 and all(p in whole for p in parts if p not in bars), (width, line)
        if width >= len("57/200"):
            assert "57/200" in parts, (width, line)
    assert fitted_line(Task, 200).count("  ") >= 7  # wide: every field and the bar
    assert fit_fields([(0, "abcdefghij")], 5) == ["abcd…"]  # one field wider than the terminal: marked as cut


def test_progress_lines_in_a_log_file_are_never_cut(tmp_path):
    """In a log file the lines are as long as they need to be: no 80-column wrap or cut."""
    from evolve.progress_log import ProgressLog
    archive = SimpleNamespace(get_run=lambda run_id: {"n_evaluated": 12})
    held = {"lowo_e2e": 0.031, "lomo_e2e": 0.244, "load_e2e": 0.272, "long_e2e": 0.336}
    search = SimpleNamespace(archive=archive, run_id="run-0-" + "f" * 60, cfg=SimpleNamespace(budget=200, holdout=True),
                             planned=200, state=SimpleNamespace(frontier=[SimpleNamespace(objectives=held)]), llm=None)
    with open(tmp_path / "run.log", "w") as f:
        with ProgressLog(search, interval_s=0.01, stream=f):
            threading.Event().wait(0.05)
    lines = (tmp_path / "run.log").read_text().splitlines()
    assert lines and all(ln.startswith(f"progress {search.run_id}: 12/200 evaluations, best held-out "
                                       "(worst regime: long-decode error) 33.6%, ") and ln.endswith("LLM none") for ln in lines)
    assert max(map(len, lines)) > 80
