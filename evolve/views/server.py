"""`evolve ui`: a small local web app over the archive (standard-library HTTP server).

    serve("archive.db")                          # blocks; http://127.0.0.1:8765/
    server, thread = make_server("archive.db", "127.0.0.1", 0)   # tests: ephemeral port
    ...; server.shutdown(); server.server_close()

GET /  (or /index.html)                static/index.html; it loads /static/app.css,
                                       /static/app.js and /static/plotly.min.js (the copy the
                                       plotly package ships): nothing from any other origin
GET /static/<name>                     only those three names (a fixed table, no path lookup)
GET /api/runs                          {"archive", "runs": [run...], "default": run id}
GET /api/points?run=&max_complexity=   {"run", "max_complexity", "points": [point...],
                                       "n_total", "n_unplottable", "complexity_range": [lo, hi],
                                       "recommended": id (Archive.best_transfer; the page opens on it),
                                       "regimes": [[key, label, in points]...], "ranked_label",
                                       "history": {"ref", "label", "runs": {run: [[i, best, hv]...]}}}
                                       point = {id, complexity, e2e_mean, e2e_worst, ttft_mean,
                                       itl_mean, step_mape, the held-out regimes, ranked_error,
                                       ranked_points (the worst regime is in points), frontier,
                                       recommended, duplicates, duplicate_of, operator, generation,
                                       run_id}; best and hv: evolve.views.history
GET /api/program/<id>                  the archive record (program + full evaluation) plus
                                       "const_names", "go_cap" (None = fits the Go cap),
                                       "recommended" (bool), "regimes" [{key, label, value, worst, points}],
                                       "fit_starts_text" (the regimes' range over the fit starts,
                                       where the run's hand-over weighed the program)
                                       and "coverage" ([[heading, text]...]: what `show` prints)
                                       or "coverage_error"
GET /api/program/<id>/go               {"program_id", "ok", "code" | "error", "models"}: what
                                       `evolve emit-go` writes with its defaults (same function,
                                       dead-branch simplification included); "ok" is false
                                       (HTTP 200) when the emitter refuses the program
GET /api/baselines?run=                {"run", "best", "baselines": {name: {valid, error,
                                       objectives, rows}}}; computed once per run, then cached
                                       in memory (stored in the archive the first time)

Errors are JSON ({"error": ...}) with 400 / 403 / 404 / 405 / 500 and never carry a traceback.
`run=` empty means all runs except the stored baseline runs ("baselines-...").

The server only reads, except for that one-time baseline computation. Every request opens
the archive read-only (no schema check, which would take the write lock), so each read is a
`BEGIN DEFERRED` transaction over WAL and never waits for a search writing to the file.
All text from the archive is inserted into the page with textContent (program source is
untrusted); the Content-Security-Policy allows scripts and requests from this origin only.
"""
from __future__ import annotations

import contextlib
import json
import re
import socket
import sys
import threading
import traceback
import webbrowser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from evaluator.coverage import coverage, coverage_lines
from evaluator.served_shapes import usable_check
from evaluator.data import load
from evaluator.objectives import BY_NAME, REGIMES, Caps, finite_or_none
from evolve.archive import Archive
from evolve.archive_check import ArchiveError, check_archive_file
from evolve.spend import Spend
from evolve.baselines_store import stored_baselines
from evolve.pareto import pareto_front
from evolve.views.holdout_table import holdout_summary, split_errors, starts_text
from evolve.views.format import BASELINE_PREFIX, clean_json, complexity_of, const_names, go_cap_status
from evolve.views.go_view import GoView
from evolve.views.history import (HV_REF, progress_series, ranked_error, ranked_error_label, worst_regime,
                                  worst_regime_key)
from evolve.views.tables import duplicate_groups

__all__ = ["make_server", "serve", "UIError"]

_ID_RE = re.compile(r"^[0-9]{1,15}$")
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; "
        "img-src 'self' data:; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _static_table() -> dict[str, tuple[object, str]]:
    """Route -> (resource, content type). The only files the server ever reads for a URL."""
    here = resources.files("evolve.views") / "static"
    return {"index.html": (here / "index.html", "text/html; charset=utf-8"),
            "static/app.js": (here / "app.js", "text/javascript; charset=utf-8"),
            "static/app.css": (here / "app.css", "text/css; charset=utf-8"),
            "static/plotly.min.js": (resources.files("plotly") / "package_data" / "plotly.min.js",
                                     "text/javascript; charset=utf-8")}


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
    """A missing, damaged or foreign archive is refused before the server starts."""
    try:
        check_archive_file(path, must_exist=True)
    except ArchiveError as e:
        raise ValueError(str(e)) from None


# ---------------------------------------------------------------- the application

class _App:
    """What the handlers share: the archive path, the static files and the in-memory caches."""

    def __init__(self, archive_path: str | Path):
        self.path = Path(archive_path).expanduser().resolve()
        _check_archive(self.path)
        self.static = {route: (res.read_bytes(), ctype) for route, (res, ctype) in _static_table().items()}
        self._lock = threading.Lock()
        self._baselines: dict[str, dict] = {}
        self._baseline_locks: dict[str, threading.Lock] = {}
        self.go_view = GoView(load)
        self._dup_cache: dict[tuple, tuple[dict, dict]] = {}
        self._gt: dict[str, object] = {}
        self._gt_lock = threading.Lock()
        self._usable: dict[str, object] = {}  # data key -> served_shapes.usable_check (caches verdicts)

    def ground_truth(self, data):
        """The ground truth of a run's data source (None: the embedded default), loaded once."""
        key = json.dumps(data)
        with self._gt_lock:
            if key not in self._gt:
                self._gt[key] = load(data)
            return self._gt[key]

    def usable(self, a: Archive, run: str | None):
        """`best_transfer`'s served-shapes check with the run's data (all runs: the first search
        run's), so the UI names the program `show` and the report name; None without data."""
        runs = [a.get_run(run)] if run else [r for r in a.runs() if not r["id"].startswith(BASELINE_PREFIX)]
        data = ((runs[0] or {}).get("config") or {}).get("data") if runs else None
        try:
            gt = self.ground_truth(data)
        except Exception:  # noqa: BLE001 - the run's data may be gone: the rule without the check
            return None
        with self._gt_lock:
            return self._usable.setdefault(json.dumps(data), usable_check(gt))

    # ------------------------------------------------------------ runs
    def runs(self) -> dict:
        with _open(self.path) as a:
            runs = a.runs()
            out = self._run_rows(a, runs)
        return {"archive": str(self.path), "runs": out, "default": out[-1]["id"] if out else None}

    @staticmethod
    def _run_rows(a: Archive, runs: list[dict]) -> list[dict]:
        out = []
        for r in runs:
            if r["id"].startswith(BASELINE_PREFIX):
                continue
            cfg = r.get("config") or {}
            out.append({"id": r["id"], "status": r["status"], "seed": r["seed"], "n_evaluated": r["n_evaluated"],
                        "budget": r["budget"], "created_at": r["created_at"], "finished_at": r["finished_at"],
                        "data": cfg.get("data"), "llm": cfg.get("llm"), "data_fingerprint": r["data_fingerprint"],
                        "llm_spend": Spend.of_run(a, r["id"], cfg.get("max_llm_cost"),
                                                  cfg.get("max_llm_tokens")).summary() if cfg.get("llm") else None})
        return out

    @staticmethod
    def _run_or_404(a: Archive, run: str | None) -> str | None:
        if not run:
            return None
        if a.get_run(run) is None:
            raise UIError(404, f"no run {run!r}")
        return run

    # ------------------------------------------------------------ points
    def points(self, run: str | None, max_complexity: float | None) -> dict:
        with _open(self.path) as a:
            run = self._run_or_404(a, run)
            evals = a.evaluations(run, stage="full")
            front_ids = set(a.frontier_ids(run)) if run else set()
            if run and not front_ids:  # no stored membership yet: computed front of the run
                front_ids = {r["id"] for r in a.frontier(run, computed=True)}
        evals = [r for r in evals if not str(r["run_id"]).startswith(BASELINE_PREFIX)]
        plottable = []
        for r in evals:
            c, e = complexity_of(r), finite_or_none((r.get("objectives") or {}).get("e2e_mean"))
            if r.get("eval_valid") and c is not None and e is not None:
                plottable.append((r, c, e))
        if not run:  # all runs: the Pareto front of everything shown (objective dicts: one shared vector order)
            front_ids = {r["id"] for r in pareto_front([r for r, _, _ in plottable],
                                                       key=lambda r: r.get("objectives") or {})}
        with _open(self.path) as a:
            rec = a.best_transfer(run, skip_prefix=BASELINE_PREFIX, usable=self.usable(a, run))
            rec_id = rec["id"] if rec else None
            leader_of, dups = self._duplicates(a, sorted(r["id"] for r, _, _ in plottable if r["id"] in front_ids),
                                               rec_id)
        cs = [c for _, c, _ in plottable]
        regimes = [k for k in REGIMES if any(k in (r.get("objectives") or {}) for r, _, _ in plottable)]
        pts = []
        for r, c, e in plottable:
            if max_complexity is not None and c > max_complexity:
                continue
            obj = r.get("objectives") or {}
            wk = worst_regime_key(obj)
            pts.append({"id": r["id"], "complexity": c, "e2e_mean": e,
                        **{k: finite_or_none(obj.get(k)) for k in ("e2e_worst", "ttft_mean", "itl_mean", "step_mape")},
                        **{k: finite_or_none(obj.get(k)) for k in regimes},
                        "ranked_error": ranked_error(obj), "worst_regime": None if wk is None else BY_NAME[wk].label,
                        "ranked_points": wk is not None and BY_NAME[wk].points,
                        "frontier": r["id"] in front_ids, "recommended": r["id"] == rec_id,
                        "duplicates": dups.get(r["id"], []), "duplicate_of": leader_of.get(r["id"]),
                        "operator": r.get("operator"), "generation": r.get("generation"), "run_id": r["run_id"]})
        label = ranked_error_label(r.get("objectives") for r in evals)
        history = {"ref": list(HV_REF), "label": label,
                   "runs": {rid: [list(t) for t in s] for rid, s in sorted(progress_series(evals).items())}}
        return {"run": run or "", "max_complexity": max_complexity, "points": pts, "n_total": len(evals),
                "n_unplottable": len(evals) - len(plottable), "recommended": rec_id,
                "regimes": [[k, BY_NAME[k].label, BY_NAME[k].points] for k in regimes], "ranked_label": label,
                "complexity_range": [min(cs), max(cs)] if cs else None, "history": history}

    def _duplicates(self, a: Archive, front: list[int], rec_id: int | None) -> tuple[dict, dict]:
        """(duplicate id -> the row's id, row id -> its duplicates) among the frontier programs
        (tables.duplicate_groups reads each one's rows); cached per frontier, as a stored
        evaluation never changes (the complexity slider asks again and again)."""
        key = (tuple(front), rec_id)
        with self._lock:
            hit = self._dup_cache.get(key)
        if hit is not None:
            return hit
        full = [r for r in (a.program(i) for i in front) if r is not None]
        leader_of, dups = {}, {}
        for g in duplicate_groups(full, rec_id):
            dups[g[0]["id"]] = sorted(r["id"] for r in g[1:])
            leader_of.update({r["id"]: g[0]["id"] for r in g[1:]})
        with self._lock:
            if len(self._dup_cache) > 64:
                self._dup_cache.clear()
            self._dup_cache[key] = (leader_of, dups)
        return leader_of, dups

    # ------------------------------------------------------------ programs
    @staticmethod
    def _record(a: Archive, pid: str) -> dict:
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
        with _open(self.path) as a:
            rec = self._record(a, pid)
            best = a.best_transfer(rec["run_id"], usable=self.usable(a, rec["run_id"]))
            run = a.get_run(rec["run_id"]) or {}
        obj = rec.get("objectives") or {}
        worst = worst_regime(obj)
        rec["recommended"] = best is not None and best["id"] == rec["id"]
        rec["regimes"] = [{"key": k, "label": BY_NAME[k].label, "value": finite_or_none(obj.get(k)),
                           "worst": BY_NAME[k].label == worst, "points": BY_NAME[k].points}
                          for k in REGIMES if k in obj]
        if (rec.get("evaluation") or {}).get("valid"):  # where it holds: the statement `show` prints
            try:
                gt = self.ground_truth((run.get("config") or {}).get("data"))
                rec["coverage"] = [list(ln.partition(": ")[::2]) for ln in coverage_lines(coverage(gt, obj, rec))]
            except Exception as e:  # noqa: BLE001 - the run's data may be gone: said, not fatal
                rec["coverage_error"] = f"the run's data cannot be read ({type(e).__name__}: {e})"
        rec["const_names"] = const_names(rec["source"])
        rec["go_cap"] = go_cap_status(rec)
        rec["baseline_run"] = str(rec["run_id"]).startswith(BASELINE_PREFIX)
        ev = rec.get("evaluation") or {}
        if ev.get("holdout"):  # the same summary `evolve show` prints
            rec["holdout_summary"] = holdout_summary(ev)
            rec["holdout_splits"] = split_errors(ev)
        fs = ev.get("fit_starts") or {}
        if fs.get("starts", 1) > 1 and fs.get("spread"):  # weighed by the run's hand-over (evolve.handover)
            rec["fit_starts_text"] = starts_text(fs)
        return rec

    def go(self, pid: str) -> dict:
        """What `evolve emit-go PID` writes with its defaults."""
        with _open(self.path) as a:
            rec = self._record(a, pid)
            run = a.get_run(rec["run_id"]) or {}
        return self.go_view.emit(rec, (run.get("config") or {}).get("data"))

    # ------------------------------------------------------------ baselines
    def baselines(self, run: str | None) -> dict:
        with _open(self.path) as a:
            run = self._run_or_404(a, run)
        key = run or ""
        with self._lock:
            lock = self._baseline_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._baselines:
                archive = Archive(self.path, readonly=True)  # a viewer: computed here, never stored
                try:
                    evs = stored_baselines(archive, run)
                except Exception as e:  # noqa: BLE001 - e.g. the run's data directory is gone
                    traceback.print_exc(file=sys.stderr)
                    raise UIError(500, f"the baselines could not be computed: {type(e).__name__}: {e}") from None
                finally:
                    archive.close()
                out = {name: {"valid": bool(ev.valid), "error": ev.error, "objectives": dict(ev.objectives or {}),
                              "rows": list(ev.rows or [])} for name, ev in evs.items()}
                ok = {k: v for k, v in out.items()
                      if v["valid"] and finite_or_none(v["objectives"].get("e2e_mean")) is not None}
                best = min(ok, key=lambda k: ok[k]["objectives"]["e2e_mean"]) if ok else None
                self._baselines[key] = {"run": key, "best": best, "baselines": out}
            return self._baselines[key]


# ---------------------------------------------------------------- HTTP

class _Handler(BaseHTTPRequestHandler):
    server_version = "StepEvolveUI/1"
    protocol_version = "HTTP/1.1"
    timeout = 30  # seconds a connection may sit without a whole request line: then it is closed

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
        body = json.dumps(clean_json(obj), allow_nan=False, separators=(",", ":")).encode()
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
            route = url.path.strip("/") or "index.html"
            if route in app.static:
                return self._send(200, *app.static[route])
            if route == "favicon.ico":
                return self._send(204, b"", "image/x-icon")
            parts = [p for p in url.path.split("/") if p]
            if parts[0] != "api":
                raise UIError(404, "not found")
            api = parts[1:]
            if api == ["runs"]:
                return self._json(200, app.runs())
            if api == ["points"]:
                mc = q.get("max_complexity", "")
                mcv = None
                if mc.strip():
                    mcv = finite_or_none(mc)
                    if mcv is None:
                        raise UIError(400, "max_complexity must be a finite number")
                return self._json(200, app.points(q.get("run") or None, mcv))
            if api == ["baselines"]:
                return self._json(200, app.baselines(q.get("run") or None))
            if len(api) == 2 and api[0] == "program":
                return self._json(200, app.program(api[1]))
            if len(api) == 3 and api[0] == "program" and api[2] == "go":
                return self._json(200, app.go(api[1]))
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
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        super().__init__(addr, _Handler)
        self.app = app
        self.verbose = verbose

    def handle_error(self, request, client_address) -> None:
        """A client that went away (reset, broken pipe, idle past the timeout) is ordinary; any
        other failure is one line in the log, never socketserver's traceback (issue 33)."""
        e = sys.exc_info()[1]
        if isinstance(e, (ConnectionError, TimeoutError)):
            return
        print(f"ui: a request from {client_address[0]} failed: {type(e).__name__}: "
              f"{' '.join(str(e).split())[:200]}", file=sys.stderr)


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
        webbrowser.open(url)
    try:
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
