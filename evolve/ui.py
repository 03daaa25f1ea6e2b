"""`evolve ui`: a small local web app over the archive (standard library only).

    serve("archive.db")                          # blocks; http://127.0.0.1:8765/
    server, thread = make_server("archive.db", "127.0.0.1", 0)   # tests: ephemeral port
    ...; server.shutdown(); server.server_close()

GET /                                  one HTML page (inline CSS + JS, no external request):
                                       the frontier plot, run / complexity filters and a side
                                       panel with the clicked program
GET /api/runs                          {"archive", "runs": [run...], "default": run id}
GET /api/points?run=&max_complexity=   {"run", "max_complexity", "points": [point...],
                                       "n_total", "n_unplottable", "complexity_range": [lo, hi]}
                                       point = {id, complexity, e2e_mean, e2e_worst, ttft_mean,
                                       itl_mean, step_mape, frontier, operator, generation, run_id}
GET /api/program/<id>                  the archive record (program + full evaluation) plus
                                       "const_names" and "go_cap" (None = fits the Go cap)
GET /api/program/<id>/go               {"program_id", "ok", "code" | "error", "models"}; "ok" is
                                       false (HTTP 200) when the emitter refuses the program
GET /api/baselines?run=                {"run", "best", "baselines": {name: {valid, error,
                                       objectives, rows}}}; computed once per run, then cached
                                       in memory (evolve.cli._baselines_for stores them in the
                                       archive the first time)

Errors are JSON ({"error": ...}) with 400 / 404 / 500 and never carry a traceback.
`run=` empty means all runs except the stored baseline runs ("baselines-...").

The server only reads, except for that one-time baseline computation. Every request opens
the archive afresh without the schema check (which would take the write lock), so each read
is a `BEGIN DEFERRED` transaction over WAL and never waits for a search writing to the file.
All text from the archive is inserted into the page with textContent (program source is
untrusted); the page sends a Content-Security-Policy that forbids any external request.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import sqlite3
import sys
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from evolve.archive import Archive
from evolve.views import finite_or_none

__all__ = ["make_server", "serve", "UIError"]

BASELINE_PREFIX = "baselines-"
GO_CAPS = (30, 3, 10)  # the defaults of `evolve emit-go`
_ID_RE = re.compile(r"^[0-9]{1,15}$")
_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


class UIError(Exception):
    """An error answered as JSON with its HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# ---------------------------------------------------------------- archive access

@contextlib.contextmanager
def _open(path: Path):
    a = Archive(path, readonly=True)
    try:
        yield a
    finally:
        a.close()


def _check_archive(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"no archive at {path}")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise ValueError(f"{path} is not a StepEvolve archive ({e})") from None
    if not {"runs", "programs", "evaluations"} <= names:
        raise ValueError(f"{path} is not a StepEvolve archive (no runs/programs/evaluations tables)")


def _clean(o):
    """JSON-safe copy: NaN and infinities become None, numpy values plain numbers."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple, set, frozenset)):
        return [_clean(v) for v in o]
    if o is None or isinstance(o, (str, bool, int)):
        return o
    if hasattr(o, "tolist"):
        return _clean(o.tolist())
    if isinstance(o, Path):
        return str(o)
    return str(o)


_fnum = finite_or_none


# ---------------------------------------------------------------- the application

class _App:
    """What the handlers share: the archive path and the in-memory caches."""

    def __init__(self, archive_path: str | Path):
        self.path = Path(archive_path).expanduser().resolve()
        _check_archive(self.path)
        self._lock = threading.Lock()
        self._baselines: dict[str, dict] = {}
        self._baseline_locks: dict[str, threading.Lock] = {}
        self._vectors: dict[str, dict] = {}
        self._vector_locks: dict[str, threading.Lock] = {}

    # ------------------------------------------------------------ runs
    def runs(self) -> dict:
        with _open(self.path) as a:
            runs = a.runs()
        out = []
        for r in runs:
            if r["id"].startswith(BASELINE_PREFIX):
                continue
            cfg = r.get("config") or {}
            out.append({"id": r["id"], "status": r["status"], "seed": r["seed"], "n_evaluated": r["n_evaluated"],
                        "budget": r["budget"], "created_at": r["created_at"], "finished_at": r["finished_at"],
                        "data": cfg.get("data"), "llm": cfg.get("llm"), "data_fingerprint": r["data_fingerprint"]})
        return {"archive": str(self.path), "runs": out, "default": out[-1]["id"] if out else None}

    def _run_or_404(self, a: Archive, run: str | None) -> str | None:
        if not run:
            return None
        if a.get_run(run) is None:
            raise UIError(404, f"no run {run!r}")
        return run

    # ------------------------------------------------------------ points
    def points(self, run: str | None, max_complexity: float | None) -> dict:
        from evolve.pareto import objective_vector, pareto_front
        with _open(self.path) as a:
            run = self._run_or_404(a, run)
            evals = a.evaluations(run, stage="full")
            front_ids = set(a.frontier_ids(run)) if run else set()
            if run and not front_ids:  # no stored membership yet: computed front of the run
                front_ids = {r["id"] for r in a.frontier(run, computed=True)}
        evals = [r for r in evals if not str(r["run_id"]).startswith(BASELINE_PREFIX)]
        plottable = []
        for r in evals:
            obj = r.get("objectives") or {}
            c = _fnum(obj.get("complexity"))
            if c is None:
                c = _fnum(r.get("complexity"))
            e = _fnum(obj.get("e2e_mean"))
            if r.get("eval_valid") and c is not None and e is not None:
                plottable.append((r, c, e))
        if not run:  # all runs: the Pareto front of everything shown
            items = [(r["id"], objective_vector(r.get("objectives") or {})) for r, _, _ in plottable]
            front_ids = {pid for pid, _ in pareto_front(items, key=lambda it: it[1])}
        cs = [c for _, c, _ in plottable]
        pts = []
        for r, c, e in plottable:
            if max_complexity is not None and c > max_complexity:
                continue
            obj = r.get("objectives") or {}
            pts.append({"id": r["id"], "complexity": c, "e2e_mean": e, "e2e_worst": _fnum(obj.get("e2e_worst")),
                        "ttft_mean": _fnum(obj.get("ttft_mean")), "itl_mean": _fnum(obj.get("itl_mean")),
                        "step_mape": _fnum(obj.get("step_mape")), "frontier": r["id"] in front_ids,
                        "operator": r.get("operator"), "generation": r.get("generation"), "run_id": r["run_id"]})
        return {"run": run or "", "max_complexity": max_complexity, "points": pts, "n_total": len(evals),
                "n_unplottable": len(evals) - len(plottable),
                "complexity_range": [min(cs), max(cs)] if cs else None}

    # ------------------------------------------------------------ programs
    def _record(self, a: Archive, pid: str) -> dict:
        if not _ID_RE.match(pid or ""):
            raise UIError(404, f"no program {pid!r}")
        try:
            rec = a.program(int(pid))
        except OverflowError:
            rec = None
        if rec is None:
            raise UIError(404, f"no program {pid}")
        return rec

    def program(self, pid: str) -> dict:
        from evolve.views import _const_names, go_cap_status
        with _open(self.path) as a:
            rec = self._record(a, pid)
        rec["const_names"] = _const_names(rec["source"])
        try:
            rec["go_cap"] = go_cap_status(rec)
        except Exception as e:  # noqa: BLE001 - display only
            rec["go_cap"] = f"unknown ({e})"
        rec["baseline_run"] = str(rec["run_id"]).startswith(BASELINE_PREFIX)
        return rec

    def _model_vectors(self, data) -> dict:
        key = json.dumps(data)
        with self._lock:
            lock = self._vector_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._vectors:
                from evaluator.data import load
                gt = load(data)
                self._vectors[key] = {e.model: e.model_vec(gt.hardware) for e in gt.experiments}
            return self._vectors[key]

    def go(self, pid: str) -> dict:
        """What `evolve emit-go` would write (default package, interface and caps)."""
        from evaluator.program import ProgramError, parse_program
        from go_emit.emit import GoEmitError, emit_go
        with _open(self.path) as a:
            rec = self._record(a, pid)
            run = a.get_run(rec["run_id"]) or {}
        out = {"program_id": rec["id"], "ok": False, "models": []}
        ev = rec.get("evaluation") or {}
        if not ev.get("valid") or not ev.get("constants"):
            out["error"] = f"program {rec['id']} has no valid evaluation with fitted constants"
            return out
        try:
            prog = parse_program(rec["source"])
        except ProgramError as e:
            out["error"] = f"program {rec['id']} does not parse: {e}"
            return out
        over = prog.complexity.within(*GO_CAPS)
        if over is not None:  # the emitter's own refusal, without loading any data
            try:
                emit_go(prog, {}, {}, {}, caps=GO_CAPS)
            except GoEmitError as e:
                out["error"] = str(e)
                return out
        try:
            vectors = self._model_vectors((run.get("config") or {}).get("data"))
        except Exception as e:  # noqa: BLE001 - the data of the run may be gone
            out["error"] = f"cannot load the data of run {rec['run_id']}: {e}"
            return out
        consts = ev["constants"]
        by_model = {m: consts.get(m, consts.get("*")) for m in vectors if m in consts or "*" in consts}
        out["models"] = sorted(by_model)
        try:
            out["code"] = emit_go(prog, by_model, {m: vectors[m] for m in by_model},
                                  {m: (ev.get("overheads") or {}).get(m, {}) for m in by_model},
                                  program_id=str(rec["id"]), scores=dict(ev.get("objectives") or {}), caps=GO_CAPS)
            out["ok"] = True
        except GoEmitError as e:
            out["error"] = str(e)
        return out

    # ------------------------------------------------------------ baselines
    def baselines(self, run: str | None) -> dict:
        with _open(self.path) as a:
            run = self._run_or_404(a, run)
        key = run or ""
        with self._lock:
            lock = self._baseline_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._baselines:
                from evolve.cli import _baselines_for
                archive = Archive(self.path)  # the one place that may write (stores the baselines once)
                try:
                    evs = _baselines_for(archive, run)
                except Exception as e:  # noqa: BLE001 - e.g. the run's data directory is gone
                    traceback.print_exc(file=sys.stderr)
                    raise UIError(500, f"the baselines could not be computed: {type(e).__name__}: {e}") from None
                finally:
                    archive.close()
                out = {}
                for name, ev in evs.items():
                    out[name] = {"valid": bool(ev.valid), "error": ev.error, "objectives": dict(ev.objectives or {}),
                                 "rows": list(ev.rows or [])}
                ok = {k: v for k, v in out.items() if v["valid"] and _fnum(v["objectives"].get("e2e_mean")) is not None}
                best = min(ok, key=lambda k: ok[k]["objectives"]["e2e_mean"]) if ok else None
                self._baselines[key] = {"run": key, "best": best, "baselines": out}
            return self._baselines[key]


# ---------------------------------------------------------------- HTTP

class _Handler(BaseHTTPRequestHandler):
    server_version = "StepEvolveUI/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - quiet unless asked
        if getattr(self.server, "verbose", False):
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", _CSP)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        body = json.dumps(_clean(obj), allow_nan=False, separators=(",", ":")).encode()
        self._send(status, body, "application/json; charset=utf-8")

    def _host_ok(self) -> bool:
        """Refuse foreign Host headers on a loopback server (DNS rebinding)."""
        bound = self.server.server_address[0]
        if bound not in ("127.0.0.1", "::1", "localhost"):
            return True
        host = (self.headers.get("Host") or "").strip().lower()
        if host.startswith("["):
            name = host[1:host.find("]")] if "]" in host else host
        else:
            name = host.rsplit(":", 1)[0] if ":" in host else host
        return name in ("127.0.0.1", "localhost", "::1", "")

    def do_GET(self) -> None:  # noqa: N802
        try:
            if not self._host_ok():
                raise UIError(403, "forbidden host")
            url = urlsplit(self.path)
            q = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            app: _App = self.server.app
            parts = [p for p in url.path.split("/") if p]
            if not parts or parts == ["index.html"]:
                return self._send(200, _PAGE.encode(), "text/html; charset=utf-8")
            if parts == ["favicon.ico"]:
                return self._send(204, b"", "image/x-icon")
            if parts[0] != "api":
                raise UIError(404, "not found")
            route = parts[1:]
            if route == ["runs"]:
                return self._json(200, app.runs())
            if route == ["points"]:
                mc = q.get("max_complexity", "")
                if mc.strip() == "":
                    mcv = None
                else:
                    mcv = _fnum(mc)
                    if mcv is None:
                        raise UIError(400, "max_complexity must be a finite number")
                return self._json(200, app.points(q.get("run") or None, mcv))
            if route == ["baselines"]:
                return self._json(200, app.baselines(q.get("run") or None))
            if len(route) == 2 and route[0] == "program":
                return self._json(200, app.program(route[1]))
            if len(route) == 3 and route[0] == "program" and route[2] == "go":
                return self._json(200, app.go(route[1]))
            raise UIError(404, "not found")
        except UIError as e:
            self._json(e.status, {"error": e.message})
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception:  # noqa: BLE001 - never leak a traceback to the client
            traceback.print_exc(file=sys.stderr)  # the server's log only
            with contextlib.suppress(Exception):
                self._json(500, {"error": "internal error (see the server's log)"})

    do_HEAD = do_GET

    def _not_allowed(self) -> None:
        self.close_connection = True  # the request body is never read
        self._json(405, {"error": "method not allowed (the UI is read-only)"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, app: _App, verbose: bool = False):
        import socket
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        super().__init__(addr, _Handler)
        self.app = app
        self.verbose = verbose


def make_server(archive_path, host: str = "127.0.0.1", port: int = 0, verbose: bool = False):
    """A started server on (host, port) (port 0: any free port) and its thread.
    server.server_address holds the real port; stop with server.shutdown(); server.server_close()."""
    app = _App(archive_path)
    server = _Server((host, int(port)), app, verbose)
    thread = threading.Thread(target=server.serve_forever, name="evolve-ui", daemon=True)
    thread.start()
    return server, thread


def serve(archive_path: str, host: str = "127.0.0.1", port: int = 8765, open_browser: bool = False) -> None:
    """Serve the UI until Ctrl-C."""
    server, thread = make_server(archive_path, host, port)
    h, p = server.server_address[:2]
    shown = f"[{h}]" if ":" in h else h
    url = f"http://{shown}:{p}/"
    print(f"evolve ui: {server.app.path} at {url}  (Ctrl-C to stop)", flush=True)
    if open_browser:
        import webbrowser
        webbrowser.open(url)
    try:
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- the page

_PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>StepEvolve</title>
<style>
:root{--bg:#f6f7f9;--card:#fff;--line:#e3e6eb;--ink:#1d2330;--mute:#667085;--acc:#d92d20;--pt:#98a2b3;
--good:#067647;--bad:#b42318;--code:#f8f9fb}
*{box-sizing:border-box}
html,body{margin:0;height:100%}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;color:var(--ink);
background:var(--bg);display:flex;flex-direction:column}
header{display:flex;align-items:center;gap:18px;flex-wrap:wrap;padding:10px 18px;background:var(--card);
border-bottom:1px solid var(--line)}
header h1{font-size:17px;margin:0;font-weight:650;letter-spacing:.2px}
header .arch{color:var(--mute);font-size:12px;max-width:340px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
header label{display:flex;align-items:center;gap:6px;font-size:13px;color:#344054}
select,input[type=number]{font:inherit;font-size:13px;padding:4px 6px;border:1px solid #d0d5dd;border-radius:6px;
background:#fff;color:var(--ink)}
select{max-width:320px} input[type=number]{width:70px} input[type=range]{width:140px;accent-color:var(--acc)}
#status{margin-left:auto;color:var(--mute);font-size:12.5px}
main{flex:1;display:flex;min-height:0}
#left{flex:1 1 55%;min-width:0;overflow:auto;padding:14px 16px}
#panel{flex:0 0 46%;max-width:760px;min-width:380px;overflow:auto;border-left:1px solid var(--line);
background:var(--card);padding:14px 18px}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:10px 12px;margin-bottom:14px}
.card h2{font-size:14px;margin:2px 2px 8px;font-weight:600}
#plot{display:block;width:100%;height:auto;user-select:none}
#legend{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px;color:#475467;margin:0 4px 2px 64px}
#legend span{display:inline-flex;align-items:center;gap:6px}
.mk{display:inline-block;width:9px;height:9px} .mk.dot{border-radius:50%;background:#98a2b3;opacity:.8}
.mk.dot.front{width:10px;height:10px;background:#d92d20;opacity:1}
.mk.dash{width:16px;height:0;border-top:2px dashed #d92d20} .mk.sq{border-radius:1.5px}
#plot .grid{stroke:#eef0f3} #plot .axis{stroke:#98a2b3} #plot text{fill:#475467;font-size:11px}
#plot .lab{font-size:12.5px;fill:#344054} #plot .plab{font-size:10.5px;fill:#b42318}
#plot circle{cursor:pointer} #plot circle.pt{fill:var(--pt);fill-opacity:.55;stroke:rgba(0,0,0,0);stroke-width:6}
#plot circle.pt:hover{fill-opacity:.9}
#plot circle.front{fill:var(--acc);fill-opacity:.95;stroke:#fff;stroke-width:1.5}
#plot circle.sel{stroke:#101828;stroke-width:2.5}
#plot .fline{fill:none;stroke:var(--acc);stroke-width:1.6;stroke-dasharray:5 3;opacity:.8}
#plot .empty{font-size:14px;fill:#98a2b3}
#tip{position:fixed;pointer-events:none;background:#101828;color:#fff;font-size:12px;padding:6px 8px;border-radius:6px;
white-space:pre;display:none;z-index:10;box-shadow:0 4px 12px rgba(0,0,0,.2)}
table{border-collapse:collapse;font-size:12.5px;width:100%}
th,td{padding:4px 7px;border-bottom:1px solid #eef0f3;text-align:right;white-space:nowrap}
th{background:#f9fafb;color:#475467;font-weight:600;position:sticky;top:0}
td.l,th.l{text-align:left}
#ftable tbody tr{cursor:pointer} #ftable tbody tr:hover td{background:#fef3f2} #ftable tr.sel td{background:#fee4e2}
.muted{color:var(--mute)} .small{font-size:12px}
#panel h2{font-size:18px;margin:0} #panel h3{font-size:13.5px;margin:18px 0 6px;color:#344054}
.ph{display:flex;align-items:center;gap:10px}
.ph .x{margin-left:auto;border:1px solid #d0d5dd;background:#fff;border-radius:6px;cursor:pointer;font-size:14px;
padding:1px 8px;color:#475467}
.meta{color:var(--mute);font-size:12.5px;margin-top:4px}
.chip{display:inline-block;border:1px solid #d0d5dd;border-radius:10px;padding:0 7px;margin:0 2px;font-size:12px;
cursor:pointer;color:#344054;background:#fff}
.chip:hover{border-color:var(--acc);color:var(--acc)}
.tag{display:inline-block;border-radius:10px;padding:0 7px;font-size:11.5px;font-weight:600}
.tag.front{background:#fee4e2;color:#b42318} .tag.ok{background:#dcfae6;color:#067647}
.tag.no{background:#fef0c7;color:#93370d}
.kpis{display:grid;grid-template-columns:repeat(5,1fr);gap:8px;margin-top:12px}
.kpi{border:1px solid var(--line);border-radius:8px;padding:6px 8px;background:#fcfcfd}
.kpi .k{font-size:11px;color:var(--mute);text-transform:uppercase;letter-spacing:.3px}
.kpi .v{font-size:16px;font-weight:650}
.kpi .b{font-size:11.5px;color:var(--mute)}
pre{background:var(--code);border:1px solid var(--line);border-radius:8px;padding:10px 12px;margin:0;overflow:auto;
font:12px/1.5 ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;color:#1d2939}
pre.go{max-height:420px}
.refuse{border:1px solid #fecdca;background:#fef3f2;color:#b42318;border-radius:8px;padding:8px 12px}
td.good{color:var(--good)} td.bad{color:var(--bad)} td.b{color:#98a2b3}
.tw{overflow:auto;max-height:440px;border:1px solid var(--line);border-radius:8px}
.placeholder{color:var(--mute);margin-top:40px;text-align:center}
.err{color:var(--bad)}
</style></head>
<body>
<header>
  <h1>StepEvolve</h1><span class="arch" id="arch"></span>
  <label>Run <select id="run"></select></label>
  <label>Max complexity <input type="range" id="cxr" min="0" max="60" step="1">
    <input type="number" id="cx" min="0" step="1"></label>
  <label><input type="checkbox" id="logy"> log error axis</label>
  <span id="status">loading…</span>
</header>
<main>
  <div id="left">
    <div class="card"><h2>Complexity vs mean E2E error</h2><div id="legend"></div>
      <svg id="plot" role="img" aria-label="frontier plot"></svg></div>
    <div class="card"><h2>Frontier <span class="muted small" id="fcount"></span></h2>
      <div class="tw"><table id="ftable"></table></div></div>
  </div>
  <aside id="panel"><div class="placeholder">Click a point (or a frontier row) to inspect a program.</div></aside>
</main>
<div id="tip"></div>
<script>
"use strict";
const $ = (s) => document.querySelector(s);
const SVGNS = "http://www.w3.org/2000/svg";
function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  setAttrs(e, attrs); addKids(e, kids); return e;
}
function sv(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  setAttrs(e, attrs); addKids(e, kids); return e;
}
function setAttrs(e, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, String(v));
  }
}
function addKids(e, kids) {
  for (const c of kids.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}
const fin = (v) => typeof v === "number" && isFinite(v);
function pct(v) {
  if (!fin(v)) return "—";
  return v < 10 ? (100 * v).toPrecision(3) + "%" : v.toPrecision(3) + "×";
}
function pctTick(v) {
  return fin(v) ? (v < 10 ? Number((100 * v).toPrecision(3)) + "%" : Number(v.toPrecision(3)) + "×") : "";
}
function num(v, d) {
  if (!fin(v)) return "—";
  if (Number.isInteger(v) && Math.abs(v) < 1e6) return String(v);
  return v.toPrecision(d || 4);
}
async function api(path) {
  const r = await fetch(path, {headers: {"Accept": "application/json"}});
  let j = null;
  try { j = await r.json(); } catch (e) { throw new Error("HTTP " + r.status); }
  if (!r.ok) throw new Error((j && j.error) || ("HTTP " + r.status));
  return j;
}

const S = {runs: [], run: "", maxC: null, range: null, points: [], sel: null, baselines: new Map(),
           base: null, token: 0, ptoken: 0};

function readHash() {
  const out = {};
  for (const kv of location.hash.replace(/^#/, "").split("&")) {
    const i = kv.indexOf("=");
    if (i > 0) out[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1));
  }
  return out;
}
function writeHash() {
  const parts = ["run=" + encodeURIComponent(S.run)];
  if (S.logTouched) parts.push("log=" + ($("#logy").checked ? 1 : 0));
  if (S.sel !== null) parts.push("p=" + S.sel);
  history.replaceState(null, "", "#" + parts.join("&"));
}

async function init() {
  const hs = readHash();
  if (hs.log === "1" || hs.log === "0") { $("#logy").checked = hs.log === "1"; S.logTouched = true; }
  let r;
  try { r = await api("/api/runs"); } catch (e) { $("#status").textContent = "error: " + e.message; return; }
  S.runs = r.runs;
  $("#arch").textContent = r.archive; $("#arch").title = r.archive;
  const sel = $("#run");
  sel.append(h("option", {value: ""}, "all runs"));
  for (const run of r.runs) {
    sel.append(h("option", {value: run.id}, `${run.id} · ${run.status} · ${run.n_evaluated} evaluated`));
  }
  const want = hs.run !== undefined && (hs.run === "" || r.runs.some((x) => x.id === hs.run)) ? hs.run : (r.default || "");
  sel.value = want; S.run = want;
  sel.addEventListener("change", () => { S.run = sel.value; S.maxC = null; S.range = null; loadPoints(true); writeHash(); });
  const cxr = $("#cxr"), cx = $("#cx");
  let timer = null;
  const apply = (v) => { S.maxC = v === "" ? null : Number(v); loadPoints(false); };
  cxr.addEventListener("input", () => { cx.value = cxr.value; clearTimeout(timer); timer = setTimeout(() => apply(cxr.value), 120); });
  cx.addEventListener("change", () => { cxr.value = cx.value; clearTimeout(timer); apply(cx.value); });
  cx.addEventListener("keydown", (ev) => { if (ev.key === "Enter") cx.dispatchEvent(new Event("change")); });
  $("#logy").addEventListener("change", () => { S.logTouched = true; drawPlot(); writeHash(); });
  window.addEventListener("resize", () => { clearTimeout(S.rt); S.rt = setTimeout(drawAll, 100); });
  await loadPoints(true);
  if (hs.p && /^[0-9]+$/.test(hs.p)) select(Number(hs.p));
}

async function loadPoints(newRun) {
  const my = ++S.ptoken;
  let url = "/api/points?run=" + encodeURIComponent(S.run);
  if (S.maxC !== null && !newRun) url += "&max_complexity=" + encodeURIComponent(S.maxC);
  $("#status").textContent = "loading…";
  let r;
  try { r = await api(url); } catch (e) { $("#status").textContent = "error: " + e.message; return; }
  if (my !== S.ptoken) return;
  S.points = r.points;
  if (newRun || !S.range) {
    S.range = r.complexity_range;
    if (!S.logTouched) {  // a log axis by default when the errors span more than 20x
      const es = S.points.map((p) => p.e2e_mean).filter((v) => v > 0);
      $("#logy").checked = es.length > 1 && Math.max(...es) / Math.min(...es) > 20;
    }
    const lo = S.range ? Math.floor(S.range[0]) : 0, hi = S.range ? Math.ceil(S.range[1]) : 0;
    for (const el of [$("#cxr"), $("#cx")]) { el.min = lo; el.max = hi; el.value = hi; }
    S.maxC = null;
  }
  const nf = S.points.filter((p) => p.frontier).length;
  $("#status").textContent = `${S.points.length} programs shown · ${nf} on the frontier` +
    (r.n_unplottable ? ` · ${r.n_unplottable} invalid hidden` : "");
  S.base = null;
  drawAll();
  ensureBaselines(S.run).then((b) => { if (S.run === b.run) { S.base = b; drawPlot(); } }).catch(() => {});
}

function ensureBaselines(run) {
  if (!S.baselines.has(run)) {
    const p = api("/api/baselines?run=" + encodeURIComponent(run));
    p.catch(() => S.baselines.delete(run));
    S.baselines.set(run, p);
  }
  return S.baselines.get(run);
}

function drawAll() { drawPlot(); drawTable(); }

// ------------------------------------------------------------ plot
function niceStep(raw) {
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) if (raw <= m * mag) return m * mag;
  return 10 * mag;
}
function linScale(lo, hi, n) {
  if (!(hi > lo)) { hi = lo + 1; }
  const step = niceStep((hi - lo) / n);
  lo = Math.floor(lo / step + 1e-9) * step; hi = Math.ceil(hi / step - 1e-9) * step;
  const ticks = [];
  for (let v = lo; v <= hi + step * 1e-6; v += step) ticks.push(Number(v.toPrecision(12)));
  return {lo, hi, ticks, t: (v) => (v - lo) / (hi - lo)};
}
function logScale(lo, hi) {
  lo = Math.max(lo, 1e-6); hi = Math.max(hi, lo * 1.0001);
  let a = Math.log10(lo / 1.25), b = Math.log10(hi * 1.25);
  if (b - a < 0.6) { const m = (a + b) / 2; a = m - 0.3; b = m + 0.3; }
  const ticks = [];
  const mults = (b - a) <= 3 ? [1, 2, 5] : [1];
  for (let d = Math.floor(a); d <= Math.ceil(b); d++) for (const m of mults) {
    const v = m * Math.pow(10, d), lv = Math.log10(v);
    if (lv >= a - 1e-9 && lv <= b + 1e-9) ticks.push(v);
  }
  return {lo: Math.pow(10, a), hi: Math.pow(10, b), ticks, t: (v) => (Math.log10(Math.max(v, 1e-12)) - a) / (b - a)};
}
const BCOL = ["#16a34a", "#ea8c00", "#7c3aed", "#0891b2", "#c026d3", "#65a30d"];

function baselinePoints() {
  if (!S.base) return [];
  const out = [];
  let j = 0;
  for (const [name, b] of Object.entries(S.base.baselines)) {
    const col = BCOL[j++ % BCOL.length];
    const c = b.objectives.complexity, e = b.objectives.e2e_mean;
    if (b.valid && fin(c) && fin(e) && (S.maxC === null || c <= S.maxC)) out.push({name, c, e, col});
  }
  return out;
}

function drawPlot() {
  const svg = $("#plot");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const W = Math.max(svg.parentNode.clientWidth - 24, 420), H = Math.round(Math.min(Math.max(W * 0.55, 330), 520));
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`); svg.setAttribute("width", W); svg.setAttribute("height", H);
  const ml = 64, mr = 18, mt = 12, mb = 46;
  const pts = S.points, bp = baselinePoints();
  const logy = $("#logy").checked;
  const xs = pts.map((p) => p.complexity).concat(bp.map((b) => b.c));
  const ys = pts.map((p) => p.e2e_mean).concat(bp.map((b) => b.e));
  if (!pts.length) {
    svg.append(sv("text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty"},
      "no valid evaluated programs" + (S.maxC !== null ? " at this complexity" : "")));
    return;
  }
  const X = linScale(Math.min(0, ...xs), Math.max(...xs) * 1.04 + 0.5, 8);
  const Y = logy ? logScale(Math.min(...ys.filter((v) => v > 0)), Math.max(...ys)) : linScale(0, Math.max(...ys) * 1.05, 6);
  const px = (v) => ml + X.t(v) * (W - ml - mr), py = (v) => H - mb - Math.min(Math.max(Y.t(v), -0.02), 1.02) * (H - mt - mb);
  svg.append(sv("rect", {x: ml, y: mt, width: W - ml - mr, height: H - mt - mb, fill: "#fff", stroke: "#d0d5dd"}));
  for (const v of X.ticks) {
    svg.append(sv("line", {x1: px(v), x2: px(v), y1: mt, y2: H - mb, class: "grid"}));
    svg.append(sv("text", {x: px(v), y: H - mb + 15, "text-anchor": "middle"}, num(v)));
  }
  for (const v of Y.ticks) {
    svg.append(sv("line", {x1: ml, x2: W - mr, y1: py(v), y2: py(v), class: "grid"}));
    svg.append(sv("text", {x: ml - 6, y: py(v) + 4, "text-anchor": "end"}, pctTick(v)));
  }
  svg.append(sv("text", {x: (ml + W - mr) / 2, y: H - 8, "text-anchor": "middle", class: "lab"},
    "complexity (operations + conditionals + constants)"));
  svg.append(sv("text", {transform: `translate(15,${(mt + H - mb) / 2}) rotate(-90)`, "text-anchor": "middle", class: "lab"},
    "mean E2E error" + (logy ? " (log)" : "")));
  // the complexity-E2E staircase through the frontier members
  const fr = pts.filter((p) => p.frontier).sort((a, b) => a.complexity - b.complexity || a.e2e_mean - b.e2e_mean);
  const stair = [];
  let best = Infinity;
  for (const p of fr) if (p.e2e_mean < best) { stair.push(p); best = p.e2e_mean; }
  if (stair.length > 1) {
    const c = [];
    stair.forEach((p, i) => {
      if (i) c.push(`${px(p.complexity).toFixed(1)},${py(stair[i - 1].e2e_mean).toFixed(1)}`);
      c.push(`${px(p.complexity).toFixed(1)},${py(p.e2e_mean).toFixed(1)}`);
    });
    svg.append(sv("polyline", {points: c.join(" "), class: "fline"}));
  }
  for (const b of bp) {
    const x = px(b.c), y = py(b.e);
    const r = sv("rect", {x: x - 5, y: y - 5, width: 10, height: 10, fill: b.col, "fill-opacity": 0.9, rx: 1.5});
    r.addEventListener("mousemove", (ev) => tip(ev, `baseline ${b.name}\ncomplexity ${num(b.c)}\nE2E ${pct(b.e)}`));
    r.addEventListener("mouseleave", hideTip);
    svg.append(r);
  }
  const ordered = pts.filter((p) => !p.frontier).concat(fr);
  const labelFront = fr.length <= 14;
  for (const p of ordered) {
    const cls = "pt" + (p.frontier ? " front" : "") + (p.id === S.sel ? " sel" : "");
    const c = sv("circle", {cx: px(p.complexity).toFixed(1), cy: py(p.e2e_mean).toFixed(1),
                            r: p.id === S.sel ? 7.5 : (p.frontier ? 5.5 : 4), class: cls, "data-id": p.id});
    c.addEventListener("click", () => { hideTip(); select(p.id); });
    c.addEventListener("mousemove", (ev) => tip(ev,
      `#${p.id}${p.frontier ? "  (frontier)" : ""}  ${p.operator || ""}\ncomplexity ${num(p.complexity)}\n` +
      `E2E ${pct(p.e2e_mean)}  worst ${pct(p.e2e_worst)}\nTTFT ${pct(p.ttft_mean)}  ITL ${pct(p.itl_mean)}`));
    c.addEventListener("mouseleave", hideTip);
    svg.append(c);
    if (p.frontier && labelFront) {
      svg.append(sv("text", {x: px(p.complexity) + 8, y: py(p.e2e_mean) - 7, class: "plab"}, "#" + p.id));
    }
  }
  drawLegend(bp);
}
function drawLegend(bp) {
  const mk = (cls, style) => h("i", {class: "mk " + cls, style: style || null});
  const items = [[mk("dot"), "evaluated"], [mk("dot front"), "frontier (all objectives)"],
                 [mk("dash"), "complexity–E2E front"]];
  for (const b of bp) items.push([mk("sq", "background:" + b.col), "baseline " + b.name]);
  $("#legend").replaceChildren(...items.map(([m, t]) => h("span", null, m, t)));
}
function tip(ev, text) {
  const t = $("#tip"); t.textContent = text; t.style.display = "block";
  const x = Math.min(ev.clientX + 14, window.innerWidth - t.offsetWidth - 8);
  t.style.left = x + "px"; t.style.top = (ev.clientY + 14) + "px";
}
function hideTip() { $("#tip").style.display = "none"; }

// ------------------------------------------------------------ frontier table
function drawTable() {
  const t = $("#ftable");
  while (t.firstChild) t.removeChild(t.firstChild);
  const fr = S.points.filter((p) => p.frontier).sort((a, b) => a.complexity - b.complexity || a.e2e_mean - b.e2e_mean);
  $("#fcount").textContent = `${fr.length} programs, sorted by complexity`;
  t.append(h("thead", null, h("tr", null, ["id", "cplx", "E2E mean", "E2E worst", "TTFT", "ITL", "step MAPE", "operator", "gen"]
    .map((c, i) => h("th", {class: i === 0 || i === 7 ? "l" : null}, c)))));
  const tb = h("tbody");
  for (const p of fr) {
    tb.append(h("tr", {class: p.id === S.sel ? "sel" : null, "data-id": p.id, onclick: () => select(p.id)},
      h("td", {class: "l"}, "#" + p.id), h("td", null, num(p.complexity)), h("td", null, pct(p.e2e_mean)),
      h("td", null, pct(p.e2e_worst)), h("td", null, pct(p.ttft_mean)), h("td", null, pct(p.itl_mean)),
      h("td", null, pct(p.step_mape)), h("td", {class: "l"}, p.operator || ""), h("td", null, num(p.generation))));
  }
  t.append(tb);
}

// ------------------------------------------------------------ side panel
function markSelected() {
  for (const c of document.querySelectorAll("#plot circle")) {
    const on = Number(c.getAttribute("data-id")) === S.sel;
    c.classList.toggle("sel", on);
    c.setAttribute("r", on ? 7.5 : (c.classList.contains("front") ? 5.5 : 4));
  }
  for (const r of document.querySelectorAll("#ftable tbody tr")) r.classList.toggle("sel", Number(r.dataset.id) === S.sel);
}

async function select(id) {
  S.sel = id; writeHash(); markSelected();
  const my = ++S.token;
  const panel = $("#panel");
  panel.replaceChildren(h("div", {class: "placeholder"}, `loading program #${id}…`));
  let rec;
  try { rec = await api("/api/program/" + id); }
  catch (e) { if (my === S.token) panel.replaceChildren(h("p", {class: "err"}, "error: " + e.message)); return; }
  if (my !== S.token) return;
  renderProgram(rec, my);
}

function closePanel() {
  S.sel = null; S.token++; writeHash(); markSelected();
  $("#panel").replaceChildren(h("div", {class: "placeholder"}, "Click a point (or a frontier row) to inspect a program."));
}

function renderProgram(rec, my) {
  const panel = $("#panel");
  const ev = rec.evaluation || {};
  const obj = ev.objectives || rec.objectives || {};
  const onFront = S.points.some((p) => p.id === rec.id && p.frontier);
  const head = h("div", {class: "ph"}, h("h2", {id: "pid"}, `Program #${rec.id}`),
    onFront ? h("span", {class: "tag front"}, "frontier") : null,
    rec.go_cap === null ? h("span", {class: "tag ok"}, "fits Go cap") : h("span", {class: "tag no"}, "over Go cap"),
    h("button", {class: "x", title: "close", onclick: closePanel}, "×"));
  const parents = (rec.parent_ids || []).map((p) => h("span", {class: "chip", onclick: () => select(p)}, "#" + p));
  const meta = h("div", {class: "meta"},
    `run ${rec.run_id} · generation ${rec.generation} · operator ${rec.operator}` +
    (rec.llm_model ? ` · LLM ${rec.llm_model}` : "") + " · parents ", parents.length ? parents : "none",
    h("br"), rec.complexity !== null && rec.complexity !== undefined ?
      `complexity ${rec.complexity} = ${rec.n_ops} operations + ${rec.n_cond} conditionals + ${rec.n_consts} constants` :
      "complexity unknown",
    ` · Go cap: ${rec.go_cap === null ? "fits" : rec.go_cap}`,
    ev.stage ? ` · ${ev.stage} evaluation` : "", ev.valid === false ? h("span", {class: "err"}, ` · INVALID: ${ev.error}`) : null);
  const kpiBox = h("div", {class: "kpis"});
  const source = h("pre", {class: "src", id: "src"}, rec.source);
  const consts = constTable(rec, ev);
  const errBox = h("div", {id: "errs"});
  const goBox = h("div", {id: "go"}, h("p", {class: "muted small"}, "generating Go…"));
  panel.replaceChildren(head, meta, kpiBox, h("h3", null, "Source"), source,
    ...(consts ? [h("h3", null, "Fitted constants per model"), consts] : []),
    h("h3", null, "Errors per experiment and load stage (held-out part)"), errBox,
    h("h3", null, "Go (BLIS LatencyModel)"), goBox);
  const fill = (b) => {
    if (my !== S.token) return;
    const bname = b && b.best, bev = bname ? b.baselines[bname] : null;
    kpiBox.replaceChildren(...[["e2e_mean", "E2E mean"], ["e2e_worst", "E2E worst"], ["ttft_mean", "TTFT mean"],
      ["itl_mean", "ITL mean"], ["step_mape", "step MAPE"]].map(([k, lab]) => h("div", {class: "kpi"},
        h("div", {class: "k"}, lab), h("div", {class: "v"}, pct(obj[k])),
        h("div", {class: "b"}, bev ? `${bname}: ${pct(bev.objectives[k])}` : (b ? "" : "baseline…")))));
    errBox.replaceChildren(...[errorTable(ev.rows || [], bname, bev, b === null)].flat());
  };
  fill(null);
  ensureBaselines(rec.run_id && !rec.baseline_run && S.runs.some((r) => r.id === rec.run_id) ? rec.run_id : S.run)
    .then(fill).catch((e) => { if (my === S.token) errBox.prepend(h("p", {class: "err small"}, "baselines: " + e.message)); });
  api(`/api/program/${rec.id}/go`).then((g) => {
    if (my !== S.token) return;
    if (g.ok) goBox.replaceChildren(h("p", {class: "muted small"}, `models: ${g.models.join(", ")} · what \`evolve emit-go ${rec.id}\` writes`),
                                    h("pre", {class: "go", id: "gocode"}, g.code));
    else goBox.replaceChildren(h("div", {class: "refuse", id: "gorefuse"}, g.error));
  }).catch((e) => { if (my === S.token) goBox.replaceChildren(h("div", {class: "refuse"}, "error: " + e.message)); });
}

function constTable(rec, ev) {
  const consts = ev.constants || {};
  const models = Object.keys(consts).sort();
  if (!models.length) return null;
  const width = Math.max(...models.map((m) => consts[m].length));
  const names = rec.const_names || [];
  const hd = h("tr", null, h("th", {class: "l"}, "model"),
    Array.from({length: width}, (_, j) => h("th", null, names[j] || `c${j}`)));
  const rows = models.map((m) => h("tr", null, h("td", {class: "l"}, m),
    consts[m].map((v) => h("td", null, fin(v) ? Number(v).toPrecision(5) : "—"))));
  return h("div", {class: "tw"}, h("table", null, h("thead", null, hd), h("tbody", null, rows)));
}

function errorTable(rows, bname, bev, loading) {
  if (!rows.length) return h("p", {class: "muted"}, "no per-experiment rows (invalid or unevaluated program)");
  const key = (r) => `${r.experiment}|${r.stage}`;
  const bmap = new Map(((bev && bev.rows) || []).map((r) => [key(r), r]));
  const hd1 = h("tr", null, h("th", {class: "l", rowspan: 2}, "experiment"), h("th", {rowspan: 2}, "stage"),
    h("th", {rowspan: 2}, "rate"), ["E2E", "TTFT", "ITL"].map((m) => h("th", {colspan: 2, style: "text-align:center"}, m)));
  const hd2 = h("tr", null, ["E2E", "TTFT", "ITL"].map(() => [h("th", null, "this"), h("th", null, "base")]));
  const body = rows.map((r) => {
    const b = bmap.get(key(r));
    const cells = [];
    for (const m of ["e2e", "ttft", "itl"]) {
      const v = r[m + "_err"], bv = b ? b[m + "_err"] : null;
      let cls = null;
      if (fin(v) && fin(bv)) cls = v < bv * 0.98 ? "good" : (v > bv * 1.02 ? "bad" : null);
      cells.push(h("td", {class: cls}, pct(v)), h("td", {class: "b"}, b ? pct(bv) : "—"));
    }
    const label = r.model && r.workload ? `${r.model} · ${r.workload}` : String(r.experiment);
    return h("tr", null, h("td", {class: "l", title: String(r.experiment)}, label), h("td", null, num(r.stage)),
      h("td", null, num(r.rate, 3)), cells);
  });
  const note = bname ? `“base” is the baseline ${bname} (lowest mean E2E error of the baselines); green: this program is better, red: worse.`
    : (loading ? "“base”: the best baseline, being computed (once per run, ~10–20 s)…" : "no valid baseline to compare with");
  return [h("p", {class: "muted small", id: "basenote"}, note),
          h("div", {class: "tw"}, h("table", {id: "errtable"}, h("thead", null, hd1, hd2), h("tbody", null, body)))];
}

init();
</script>
</body></html>
"""
