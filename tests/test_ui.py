"""`evolve ui` end to end: a real archive of a short run, the JSON API, the static files, the
page and its Plotly plots in headless Chromium (Debian's /usr/bin/chromium driven by the
playwright package; install both with scripts/install_browser.sh), the Go view against
`evolve emit-go`, and reads while another process holds the write lock."""
from __future__ import annotations

import copy
import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from importlib import resources

import numpy as np
import plotly
import pytest

from evolve.archive import Archive
from evolve.search import RunConfig, Search
from evolve.cli import main as cli_main
from evolve.views import make_server

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

OVERCAP_SRC = ('"""Deliberately over the Go cap (34 operations)."""\nA = 1.0\nB0 = 2.0\n\n\n'
               "def predict_step_time(t_prefill_gemm, t_decode_gemm, B):\n"
               "    return B0 + " + " + ".join(["A * t_prefill_gemm"] * 16) + " + t_decode_gemm * B\n")
DEAD_SRC = textwrap.dedent('''\
    """A threshold no batch reaches (at most 128 running requests): the emitter drops it."""
    SCALE_W = 3.0
    SCALE_KV = 7.0


    def predict_step_time(t_weights, t_decode_kv, t_prefill_gemm, t_prefill_attn, t_decode_gemm, t_lm_head, B):
        compute = t_prefill_gemm + t_prefill_attn + t_decode_gemm + t_lm_head
        if B > 1000000:
            return 2.0 * SCALE_W * max(t_weights, compute) + SCALE_KV * t_decode_kv + B
        return SCALE_W * max(t_weights, compute) + SCALE_KV * t_decode_kv + B
    ''')
HOSTILE_SRC = textwrap.dedent('''\
    """</pre><img src=x onerror="window.__xss=1"><script>window.__xss=2</script> & <b>bold</b>"""
    SCALE_W = 3.0
    SCALE_KV = 7.0


    def predict_step_time(t_weights, t_decode_kv, t_prefill_gemm, t_prefill_attn, t_decode_gemm, t_lm_head, B):
        compute = t_prefill_gemm + t_prefill_attn + t_decode_gemm + t_lm_head
        return SCALE_W * max(t_weights, compute) + SCALE_KV * t_decode_kv + B
    ''')


def _chromium() -> str | None:
    for c in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def built(tmp_path_factory, small_data):
    """A real archive: a 7-evaluation offline run on the small ground truth (tests/conftest.py),
    plus three extra programs stored in the same run (one over the Go cap, one with hostile
    text, one with a dead conditional)."""
    path = tmp_path_factory.mktemp("ui") / "archive.db"
    archive = Archive(path)
    search = Search(RunConfig(budget=7, seed=1, workers=1, generation_size=2, data=str(small_data)), archive)
    run = search.start()
    search.loop()
    best = archive.best(run)
    assert best is not None, "the short run produced no valid program"
    ev = copy.deepcopy(best["evaluation"])
    extra = {}
    for k, (name, src) in enumerate((("overcap", OVERCAP_SRC), ("hostile", HOSTILE_SRC), ("dead", DEAD_SRC))):
        e = copy.deepcopy(ev)
        e["objectives"] = dict(e["objectives"])
        e["objectives"].pop("complexity", None)  # the archive fills in the program's own
        e["objectives"]["e2e_mean"] = e["objectives"]["e2e_mean"] * (1.5 + 0.2 * k)  # never better than `best`
        if name in ("dead", "hostile"):  # two constants per model, as the program declares (physical ones)
            e["constants"] = {m: [3.0, 7.0] for m in e["constants"]}
        extra[name] = archive.add_candidate(run, src, operator=f"test:{name}", generation=99, evaluation=e,
                                            count=False)
    archive.close()
    return {"path": path, "run": run, "best": best["id"], **extra}


@pytest.fixture(scope="module")
def server(built):
    srv, thread = make_server(str(built["path"]), "127.0.0.1", 0)
    host, port = srv.server_address[:2]
    yield f"http://{host}:{port}"
    srv.shutdown()
    srv.server_close()
    thread.join(5)


def get(base, path, timeout=120):
    """(status, parsed JSON body)."""
    try:
        with urllib.request.urlopen(base + path, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        body = e.read().decode()
        assert "Traceback" not in body
        return e.code, json.loads(body)


try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:  # the browser tests skip without playwright (see the browser fixture)
    PlaywrightTimeout = TimeoutError


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium not found (/usr/bin/chromium): run scripts/install_browser.sh")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="the playwright package is missing: run scripts/install_browser.sh")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    ctx = browser.new_context(viewport={"width": 1500, "height": 950})
    pg = ctx.new_page()
    pg.set_default_timeout(60_000)
    errors, foreign = [], []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("request", lambda r: foreign.append(r.url) if not r.url.startswith(server) else None)
    yield pg
    ctx.close()
    assert not errors, errors
    assert not foreign, f"the page made external requests: {foreign}"


# ---------------------------------------------------------------- API

def test_api_shapes(server, built):
    st, runs = get(server, "/api/runs")
    assert st == 200 and runs["default"] == built["run"]
    assert [r["id"] for r in runs["runs"]] == [built["run"]]
    assert {"id", "status", "n_evaluated", "budget", "seed", "created_at"} <= set(runs["runs"][0])

    st, pts = get(server, f"/api/points?run={built['run']}")
    assert st == 200 and pts["run"] == built["run"]
    keys = {"id", "complexity", "e2e_mean", "ttft_mean", "itl_mean", "step_mape", "frontier"}
    assert pts["points"] and all(keys <= set(p) for p in pts["points"])
    ids = {p["id"] for p in pts["points"]}
    assert {built["best"], built["overcap"], built["hostile"], built["dead"]} <= ids
    front = {p["id"] for p in pts["points"] if p["frontier"]}
    # the frontier is built on the held-out errors and complexity: `best` (lowest in-sample E2E)
    # need not be on it; the over-cap copy of its evaluation, worse and more complex, never is
    assert front and built["overcap"] not in front
    lo, hi = pts["complexity_range"]
    assert lo <= hi and all(lo <= p["complexity"] <= hi for p in pts["points"])

    # the run's history: one entry per full evaluation, the best ranked error (the worst held-out
    # regime) never rising, the hypervolume (the run summary's figure) never falling
    hist = pts["history"]["runs"][built["run"]]
    assert [i for i, _, _ in hist] == list(range(1, pts["n_total"] + 1))
    bests = [b for _, b, _ in hist if b is not None]
    assert pts["history"]["label"] == "worst held-out regime error"
    ranked = [p["ranked_error"] for p in pts["points"] if p["ranked_error"] is not None]
    assert bests == sorted(bests, reverse=True) and bests[-1] == pytest.approx(min(ranked))
    assert [h for *_, h in hist] == sorted(h for *_, h in hist)
    # the program to take, its regimes, and the frontier's behavioural duplicates
    rec_id = pts["recommended"]
    assert rec_id == Archive(built["path"], readonly=True).best_transfer(built["run"])["id"]
    assert [p["id"] for p in pts["points"] if p["recommended"]] == [rec_id]
    keys = [k for k, *_ in pts["regimes"]]
    assert keys[:3] == ["lowo_e2e", "lomo_e2e", "load_e2e"] and all(k in pts["points"][0] for k in keys)
    # each regime says its unit: the overload failures are a difference of fractions, in points
    assert {k: points for k, _, points in pts["regimes"]} == {k: k == "overload_fail" for k in keys}
    from evolve.views.history import worst_regime_key
    for p in pts["points"]:
        if p["ranked_error"] is not None:
            assert p["ranked_points"] == (worst_regime_key({k: p[k] for k in keys}) == "overload_fail")
    for p in pts["points"]:
        assert p["duplicate_of"] is None or p["duplicate_of"] in {q["id"] for q in pts["points"] if q["duplicates"]}

    st, cut = get(server, f"/api/points?run={built['run']}&max_complexity={lo}")
    assert st == 200 and 1 <= len(cut["points"]) < len(pts["points"])
    assert all(p["complexity"] <= lo for p in cut["points"])
    st, every = get(server, "/api/points?run=")  # all runs: its own Pareto flags
    assert st == 200 and {p["id"] for p in every["points"]} == ids

    st, rec = get(server, f"/api/program/{built['best']}")
    assert st == 200 and rec["id"] == built["best"] and "predict_step_time" in rec["source"]
    ev = rec["evaluation"]
    assert ev["valid"] and ev["rows"] and ev["constants"]
    assert {"experiment", "stage", "e2e_err", "ttft_err", "itl_err"} <= set(ev["rows"][0])
    assert rec["go_cap"] is None and rec["const_names"]
    st, best = get(server, f"/api/program/{rec_id}")
    assert best["recommended"] and [r["key"] for r in best["regimes"]] == keys
    assert sum(r["worst"] for r in best["regimes"]) == 1
    assert all(r["points"] == (r["key"] == "overload_fail") for r in best["regimes"])
    heads = [h for h, _ in best["coverage"]]
    assert heads == ["Fitted on", "Seen", "Held-out error per regime", "Held-out misses (beyond 10% or 5 points)",
                     "Not validated for", "Physical on served shapes"]

    st, go = get(server, f"/api/program/{built['best']}/go")
    assert st == 200 and go["ok"] and "package latency" in go["code"] and go["models"]
    st, go = get(server, f"/api/program/{built['overcap']}/go")
    assert st == 200 and not go["ok"] and "exceeds the Go emission cap" in go["error"]

    st, base = get(server, f"/api/baselines?run={built['run']}")  # computed once (~10 s), then cached
    assert st == 200 and base["run"] == built["run"] and base["baselines"]
    assert base["best"] in base["baselines"]
    assert all({"valid", "objectives", "rows"} <= set(b) for b in base["baselines"].values())
    t0 = time.perf_counter()
    assert get(server, f"/api/baselines?run={built['run']}")[1] == base
    assert time.perf_counter() - t0 < 2.0
    # the stored baselines run is not offered as a run
    assert [r["id"] for r in get(server, "/api/runs")[1]["runs"]] == [built["run"]]


@pytest.mark.parametrize("path,status", [
    ("/api/program/999999", 404), ("/api/program/abc", 404), ("/api/program/-1", 404),
    ("/api/program/99999999999999999999999", 404), ("/api/program/999999/go", 404), ("/api/nope", 404),
    ("/nope", 404), ("/api/points?run=no-such-run", 404), ("/api/baselines?run=no-such-run", 404),
    ("/api/points?max_complexity=abc", 400), ("/api/points?max_complexity=nan", 400),
    ("/static/server.py", 404), ("/static/../server.py", 404), ("/static/%2e%2e/server.py", 404),
    ("/static/", 404), ("/static/plotly.min.js/x", 404), ("/evolve/views/server.py", 404),
])
def test_api_errors(server, path, status):
    st, body = get(server, path)
    assert st == status and isinstance(body.get("error"), str)


def test_page_is_self_contained(server):
    with urllib.request.urlopen(server + "/", timeout=30) as r:
        page = r.read().decode()
        csp = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    script_src = next(d for d in csp.split(";") if d.strip().startswith("script-src"))
    assert script_src.split()[1:] == ["'self'"]  # no inline script, no eval, no other origin
    assert "http://" not in page and "https://" not in page and "//cdn" not in page
    assert "<script>" not in page  # every script is a file of this server
    refs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert sorted(refs) == ["/static/app.css", "/static/app.js", "/static/plotly.min.js"]
    for ref in refs:
        with urllib.request.urlopen(server + ref, timeout=30) as r:
            body = r.read()
            assert r.status == 200 and r.headers["Content-Security-Policy"] == csp
            assert r.headers["Content-Type"].startswith("text/css" if ref.endswith(".css") else "text/javascript")
        if ref.endswith("plotly.min.js"):  # the copy the plotly package ships, not a download
            shipped = resources.files("plotly") / "package_data" / "plotly.min.js"
            assert body == shipped.read_bytes() and plotly.__version__ == "6.9.0"


def test_ui_go_equals_cli_emit_go(server, built, tmp_path):
    """The Go view shows what `evolve emit-go` writes, dead-branch simplification included."""
    for key in ("best", "dead"):
        out = tmp_path / f"{key}.go"
        assert cli_main(["emit-go", str(built[key]), "--archive", str(built["path"]), "-o", str(out)]) == 0
        st, go = get(server, f"/api/program/{built[key]}/go")
        assert st == 200 and go["ok"], go
        assert go["code"] == out.read_text()
    # the dead threshold is gone from the code and the page says so
    assert go["note"].startswith("simplified: 1 conditional")
    kept = tmp_path / "kept.go"
    assert cli_main(["emit-go", str(built["dead"]), "--archive", str(built["path"]), "-o", str(kept),
                     "--no-simplify"]) == 0
    n_if = lambda code: sum(ln.strip().startswith("if ") for ln in code.splitlines())  # noqa: E731
    assert n_if(kept.read_text()) == n_if(go["code"]) + 1


def test_reads_while_another_process_holds_the_write_lock(server, built):
    holder = textwrap.dedent(f"""
        import sqlite3, sys, time
        c = sqlite3.connect({str(built['path'])!r}, isolation_level=None, timeout=30)
        c.execute("BEGIN IMMEDIATE")
        c.execute("INSERT INTO runs (id, created_at, config, seed, status, n_evaluated) "
                  "VALUES ('lock-holder', 0, '{{}}', 0, 'running', 0)")
        print("locked", flush=True)
        time.sleep(3)
        c.execute("ROLLBACK")
        print("released", flush=True)
    """)
    for path in (f"/api/program/{built['best']}", f"/api/program/{built['best']}/go"):
        get(server, path)  # the run's data, loaded once for the coverage and the Go view, is not what is timed
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        for path in (f"/api/points?run={built['run']}", f"/api/program/{built['best']}", "/api/runs",
                     f"/api/program/{built['best']}/go"):
            t0 = time.perf_counter()
            st, body = get(server, path, timeout=10)
            dt = time.perf_counter() - t0
            assert st == 200, body
            assert dt < 2.0, f"{path} took {dt:.2f} s while another process held the write lock"
            if path == "/api/runs":
                assert "lock-holder" not in {r["id"] for r in body["runs"]}
        assert proc.poll() is None, "the lock holder finished before the reads: the test proved nothing"
        assert proc.stdout.readline().strip() == "released"
    finally:
        proc.wait(10)


# ---------------------------------------------------------------- the page in Chromium

# Plotly draws each trace in a group with the class "trace<uid>"; app.js names its program
# traces "evaluated" and "frontier", the ring around the selected program "selected".
PROGRAM_POINTS = "#plot g.traceevaluated path.point, #plot g.tracefrontier path.point"
_POINT_XY = """pid => {
  const gd = document.getElementById("plot");
  const centre = (el) => { const r = el.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2, r.width / 2]; };
  for (const uid of ["frontier", "evaluated"]) {
    const t = gd.data.find((d) => d.uid === uid), i = t ? t.customdata.indexOf(pid) : -1;
    if (i < 0) continue;
    const mine = gd.querySelectorAll("g.trace" + uid + " path.point")[i];
    const others = [...gd.querySelectorAll("path.point")].filter((el) => el !== mine).map(centre);
    return [centre(mine), others];
  }
  return null;
}"""


def _hover_spots(mine, others):
    """Spots inside the mark of `mine`, the one farthest from every other mark first: Plotly's
    tooltip names the closest mark, so a user moves to the free side of a crowded point."""
    cx, cy, r = mine
    spots = [(cx, cy)] + [(cx + f * r * math.cos(a), cy + f * r * math.sin(a))
                          for f in (0.5, 0.9) for a in np.linspace(0, 2 * math.pi, 16, endpoint=False)]
    clearance = lambda s: min((math.hypot(s[0] - x, s[1] - y) for x, y, _ in others), default=math.inf)
    return sorted(spots, key=clearance, reverse=True)[:8]


def _points(page) -> int:
    return page.locator(PROGRAM_POINTS).count()


def _click_point(page, pid: int) -> None:
    """Click program `pid` as a user does: Plotly clicks the point it hovers, and where marks
    overlap (a baseline square, a neighbour) the user moves until the tooltip names it."""
    # the last redraw after loading: the baselines' reference lines
    page.wait_for_function("() => Number(document.getElementById('plot').dataset.baselines || 0) > 0")
    found = page.evaluate(_POINT_XY, pid)
    assert found is not None, f"program {pid} is not plotted"
    mine, others = found
    for x, y in _hover_spots(mine, others):
        page.mouse.move(x - 40, y - 40)
        page.mouse.move(x, y)
        try:
            page.wait_for_selector("#plot .hoverlayer .hovertext", timeout=5_000)
        except PlaywrightTimeout:
            continue
        if not (page.locator("#plot .hoverlayer .hovertext").first.text_content() or "").startswith(f"#{pid} "):
            continue
        page.mouse.click(x, y)
        page.wait_for_function("id => document.querySelector('#pid')?.textContent === 'Program #' + id", arg=pid)
        return
    # its mark lies wholly under another program's (equal objectives: 16 experiments make such
    # ties): a user then opens it by its link, which the deep-link test checks on its own
    page.evaluate("id => { const h = new URLSearchParams(location.hash.slice(1)); h.set('p', id);"
                  " location.hash = h.toString(); }", pid)
    page.reload()
    page.wait_for_function("id => document.querySelector('#pid')?.textContent === 'Program #' + id", arg=pid)


def test_page_plot_panel_and_filter(page, server, built, tmp_path):
    _, pts = get(server, f"/api/points?run={built['run']}")
    page.goto(server + "/")
    page.wait_for_function("([sel, n]) => document.querySelectorAll(sel).length === n",
                           arg=[PROGRAM_POINTS, len(pts["points"])])
    assert _points(page) == len(pts["points"])
    assert page.locator("#run").input_value() == built["run"]
    n_front = sum(p["frontier"] for p in pts["points"])
    assert page.locator("#plot g.tracefrontier path.point").count() == n_front
    rows = [p for p in pts["points"] if p["frontier"] and p["duplicate_of"] is None]  # duplicates collapsed
    assert page.locator("#ftable tbody tr").count() == len(rows)

    # the first screen, without a click: the recommended program, its regimes and coverage
    rec_id = pts["recommended"]
    page.wait_for_function("id => document.querySelector('#pid')?.textContent === 'Program #' + id", arg=rec_id)
    page.wait_for_selector("#coverage li")
    assert "★ recommended" in page.locator("#rectag").inner_text()
    regimes = page.locator("#regimes").inner_text().upper()
    for _, label, points in pts["regimes"]:
        assert label.upper() in regimes
        if points:  # the overload failures in points, as every view prints them
            assert re.search(label.upper() + r"[^0-9]*[0-9.]+ PTS", regimes), regimes
    assert "WORST" in regimes
    cov = page.locator("#coverage").inner_text()
    assert "Fitted on:" in cov and "Not validated for:" in cov
    height = page.viewport_size["height"]
    for sel in ("#pid", "#regimes", "#coverage"):
        box = page.locator(sel).bounding_box()
        assert box and box["y"] >= 0 and box["y"] + box["height"] <= height, (sel, box)
    assert page.evaluate("() => document.getElementById('panel').scrollTop") == 0
    assert page.locator(f"#ftable tbody tr[data-id='{rec_id}']").inner_text().startswith("★")
    page.screenshot(path=str(tmp_path / "ui-first-screen.png"))
    # the frontier table sorts by any column: the worst regime, ascending, then descending
    page.click("#ftable th[data-key='ranked_error']")
    vals = [p["ranked_error"] for p in rows if p["ranked_error"] is not None]
    first = page.locator("#ftable tbody tr").first.get_attribute("data-id")
    assert {p["id"]: p["ranked_error"] for p in rows}[int(first)] == min(vals)
    page.click("#ftable th[data-key='ranked_error']")
    first = page.locator("#ftable tbody tr").first.get_attribute("data-id")
    assert {p["id"]: p["ranked_error"] for p in rows}[int(first)] == max(vals)
    # the search history: best E2E and hypervolume of the run
    assert page.locator("#history g.trace path.js-line").count() == 2

    # click a frontier point: id, source, constants, error table and plot, Go code
    pid = built["best"]
    _click_point(page, pid)
    page.wait_for_selector("#pid")
    assert page.locator("#pid").inner_text() == f"Program #{pid}"
    rec = get(server, f"/api/program/{pid}")[1]
    line = next(ln.strip() for ln in rec["source"].splitlines() if "return" in ln)
    assert line in page.locator("#src").inner_text()
    page.wait_for_selector("#gocode")
    assert "package latency" in page.locator("#gocode").inner_text()
    assert page.locator("#errtable tbody tr").count() == len(rec["evaluation"]["rows"])
    # predicted vs measured: one mark per experiment-stage and metric with both figures
    n_marks = sum(1 for r in rec["evaluation"]["rows"] for m in ("e2e", "ttft", "itl")
                  if (r.get(f"meas_{m}_s") or 0) > 0 and (r.get(f"pred_{m}_s") or 0) > 0)
    page.wait_for_function("n => document.querySelectorAll('#pmplot .scatterlayer path.point').length === n",
                           arg=n_marks)
    # the best baseline's errors arrive next to the program's, in the table and in the bar plot
    page.wait_for_function("() => (document.querySelector('#basenote') || {}).textContent?.includes('is the baseline')")
    n_rows = len(rec["evaluation"]["rows"])
    page.wait_for_function("n => document.querySelectorAll('#errplot .barlayer g.point').length >= n",
                           arg=2 * 3 * n_rows - 3)  # this program and the baseline, 3 metrics (a few bars may be empty)
    ring = "() => document.getElementById('plot').data.find((t) => t.uid === 'selected').customdata"
    assert page.evaluate(ring) == [pid]
    assert page.locator("#plot g.traceselected path.point").count() == 1
    # held-out errors: the run scored its full evaluations on the held-out splits
    # in-sample + 4 kinds (LOWO, LOMO, high load, long decode) + overload
    assert page.locator("#holdout table").first.locator("tbody tr").count() == 6
    page.screenshot(path=str(tmp_path / "ui.png"), full_page=True)

    # the complexity filter: fewer (or as many) points, matching the API
    lo = pts["complexity_range"][0]
    want = len(get(server, f"/api/points?run={built['run']}&max_complexity={lo}")[1]["points"])
    page.fill("#cx", str(int(lo)))
    page.press("#cx", "Enter")
    page.wait_for_function("([sel, n]) => document.querySelectorAll(sel).length === n", arg=[PROGRAM_POINTS, want])
    assert _points(page) == want <= len(pts["points"])

    # log scale redraws the same points on a log axis
    page.check("#logy")
    page.wait_for_function("() => document.getElementById('plot').layout.yaxis.type === 'log'")
    assert _points(page) == want


def test_page_overcap_refusal_and_escaping(page, server, built):
    page.goto(server + "/")
    page.wait_for_selector("#plot g.tracefrontier path.point")
    _click_point(page, built["overcap"])
    page.wait_for_selector("#gorefuse")
    assert "exceeds the Go emission cap" in page.locator("#gorefuse").inner_text()
    assert "over Go cap" in page.locator("#panel").inner_text()

    _click_point(page, built["hostile"])
    page.wait_for_function("id => document.querySelector('#pid')?.textContent === 'Program #' + id",
                           arg=built["hostile"])
    src = page.locator("#src").inner_text()
    assert '<script>window.__xss=2</script>' in src and "<b>bold</b>" in src
    page.wait_for_selector("#gocode, #gorefuse")  # its borrowed constants do not fit: refused
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("#panel img, #panel script, #panel b").count() == 0

    # deep link: the hash selects the program after a reload
    page.goto(f"{server}/#run={built['run']}&p={built['best']}")
    page.reload()
    page.wait_for_function("id => document.querySelector('#pid')?.textContent === 'Program #' + id",
                           arg=built["best"])


def test_api_program_carries_heldout_summary(server, built):
    st, rec = get(server, f"/api/program/{built['best']}")
    assert st == 200
    kinds = [r["kind"] for r in rec["holdout_summary"]]
    assert kinds == ["in-sample", "LOWO", "LOMO", "high load", "long decode", "overload"]
    assert set(rec["objectives"]) >= {"lowo_e2e", "lomo_e2e", "load_e2e"}
    assert any(k.startswith("model:") for k in rec["holdout_splits"])


def test_api_program_carries_the_hand_over_starts(server, built):
    """A program the run's hand-over weighed (evolve.handover) carries its regimes' range over
    the fit starts, the line `show` and the report print; one it did not weigh carries none."""
    from evaluator.fit_starts import spread
    from evaluator.objectives import regime_errors
    from evolve.views.holdout_table import starts_text
    st, rec = get(server, f"/api/program/{built['dead']}")
    assert st == 200 and "fit_starts_text" not in rec
    obj = rec["objectives"]
    low = {k: v * 0.9 for k, v in regime_errors(obj).items()}  # a second start 10% lower in every regime
    records = [{"start": 0, "valid": True, "error": None, "e2e_mean": obj["e2e_mean"], "regimes": regime_errors(obj)},
               {"start": 1, "valid": True, "error": None, "e2e_mean": obj["e2e_mean"], "regimes": low}]
    fs = {"starts": 2, "seed": 0, "records": records, "spread": spread(records)}
    a = Archive(built["path"])
    a.set_fit_starts(built["dead"], fs)
    a.close()
    st, rec = get(server, f"/api/program/{built['dead']}")
    assert st == 200 and rec["fit_starts_text"] == starts_text(rec["evaluation"]["fit_starts"])
    assert rec["fit_starts_text"].startswith("fitted from 2 start points (2 scored)") and " to " in rec["fit_starts_text"]
