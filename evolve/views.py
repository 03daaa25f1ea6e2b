"""Presentation of the archive: terminal tables (rich) and a self-contained HTML report.

    rows = frontier_table(archive, run)          # plain dicts, sorted by complexity
    render_frontier(rows, console)
    show_program(archive, 42, console, baseline_rows=blackbox_eval.rows)
    report_html(archive, "report.html", run=run, baselines={"blackbox": blackbox_eval})

The HTML page has no external reference at all (no CDN, no fonts, no scripts): every
plot is inline SVG generated here, tooltips are SVG <title> elements.
"""
from __future__ import annotations

import html
import math
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from evolve.pareto import VECTOR_ORDER, _hv2d, pareto_front

METRICS = ("complexity", "step_mape", "e2e_mean", "e2e_worst", "ttft_mean", "itl_mean")
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f")
BASELINE_COLORS = ("#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#bcbd22")


def _bcolor(j: int) -> str:
    return BASELINE_COLORS[j % len(BASELINE_COLORS)]


# ---------------------------------------------------------------- small helpers

def finite_or_none(v) -> float | None:
    """float(v) when it is a finite number, else None (NaN, inf, None, junk)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _fmt_err(v) -> str:
    x = finite_or_none(v)
    if x is None:
        return "—" if v is None else str(v)
    return f"{100 * x:.1f}%" if x < 10 else f"{x:.3g}x"


def _fmt(v, digits=3) -> str:
    x = finite_or_none(v)
    if x is None:
        return "—" if v is None else str(v)
    if x == int(x) and abs(x) < 1e6:
        return str(int(x))
    return f"{x:.{digits}g}"


def _rows_of(baseline) -> list[dict]:
    """Experiment-stage rows of an Evaluation, an archive record, or a list of rows."""
    if baseline is None:
        return []
    if isinstance(baseline, Mapping):
        if "evaluation" in baseline and isinstance(baseline["evaluation"], Mapping):
            return list(baseline["evaluation"].get("rows") or [])
        return list(baseline.get("rows") or [])
    if hasattr(baseline, "rows"):
        return list(baseline.rows or [])
    return list(baseline)


def _objectives_of(baseline) -> dict:
    if isinstance(baseline, Mapping):
        ev = baseline.get("evaluation") if isinstance(baseline.get("evaluation"), Mapping) else baseline
        return dict(ev.get("objectives") or {})
    return dict(getattr(baseline, "objectives", None) or {})


def _row_key(r: Mapping) -> tuple[str, int]:
    return (str(r.get("experiment")), int(r.get("stage") or 0))


def _mean(xs) -> float | None:
    xs = [x for x in (finite_or_none(v) for v in xs) if x is not None]
    return sum(xs) / len(xs) if xs else None


def _baselines_map(baselines) -> dict[str, Any]:
    if baselines is None:
        return {}
    if isinstance(baselines, Mapping):
        return dict(baselines)
    return {"baseline": baselines}


# ---------------------------------------------------------------- terminal

def frontier_table(archive, run: str | None = None) -> list[dict]:
    """One plain dict per frontier program, sorted by complexity (then e2e_mean)."""
    out = []
    for r in archive.frontier(run):
        obj = r.get("objectives") or {}
        cx = finite_or_none(obj.get("complexity"))
        d = {"id": r["id"], "complexity": int(cx) if cx is not None and cx == int(cx) else
             (cx if cx is not None else r.get("complexity"))}
        for k in ("step_mape", "e2e_mean", "e2e_worst", "ttft_mean", "itl_mean"):
            d[k] = obj.get(k)
        d.update(components=list(r.get("components") or []), run=r.get("run_id"), generation=r.get("generation"),
                 operator=r.get("operator"), llm_model=r.get("llm_model"))
        out.append(d)

    def key(d):
        e = finite_or_none(d["e2e_mean"])
        return (d["complexity"] if d["complexity"] is not None else 10**9, e if e is not None else math.inf, d["id"])
    return sorted(out, key=key)


def render_frontier(rows: Sequence[Mapping], console, title: str = "Pareto frontier") -> None:
    from rich.table import Table
    t = Table(title=title, header_style="bold")
    t.add_column("id", justify="right")
    t.add_column("cplx", justify="right")
    for k in ("e2e_mean", "e2e_worst", "ttft_mean", "itl_mean", "step_mape"):
        t.add_column(k, justify="right")
    t.add_column("components")
    t.add_column("run")
    t.add_column("gen", justify="right")
    for r in rows:
        t.add_row(str(r["id"]), _fmt(r.get("complexity")), *(_fmt_err(r.get(k)) for k in
                  ("e2e_mean", "e2e_worst", "ttft_mean", "itl_mean", "step_mape")),
                  ", ".join(r.get("components") or []), str(r.get("run") or ""), _fmt(r.get("generation")))
    if not rows:
        console.print("[yellow]no evaluated programs yet[/yellow]")
        return
    console.print(t)


def _const_names(source: str) -> list[str]:
    try:
        from evaluator.program import parse_program
        return parse_program(source).const_names
    except Exception:  # noqa: BLE001 - display only; fall back to a regex over module-level names
        return re.findall(r"^([A-Za-z][A-Za-z0-9_]*)\s*=", source, flags=re.M)


def go_cap_status(rec: Mapping) -> str | None:
    """None if the program fits the Go emitter's cap, else the reason (Complexity.within)."""
    from evaluator.program import Complexity
    if rec.get("n_ops") is None:
        return "unknown (program did not parse)"
    return Complexity(rec["n_ops"], rec["n_cond"], rec["n_consts"]).within()


def show_program(archive, program_id: int, console, baseline_rows=None) -> dict | None:
    """Print one program: source, fitted constants per model, errors per experiment-stage
    (next to the baseline's, if given), step metrics, lineage and the Go cap check."""
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.table import Table
    rec = archive.program(program_id)
    if rec is None:
        console.print(f"[red]no program {program_id}[/red]")
        return None
    ev = rec.get("evaluation") or {}
    head = (f"program #{rec['id']}  run {rec['run_id']}  generation {rec['generation']}  "
            f"operator {rec['operator']}" + (f"  llm {rec['llm_model']}" if rec.get("llm_model") else ""))
    status = "accepted" if rec["valid"] else f"rejected: {rec['reject_reason']}"
    cap = go_cap_status(rec)
    cx = (f"complexity {rec['complexity']} = {rec['n_ops']} ops + {rec['n_cond']} cond + {rec['n_consts']} consts"
          if rec.get("complexity") is not None else "complexity unknown")
    console.print(Panel(f"{status}\n{cx}\nGo cap: " + ("fits" if cap is None else f"[red]exceeds ({cap})[/red]"),
                        title=head, expand=False))
    console.print(Syntax(rec["source"], "python", line_numbers=False))
    # fitted constants per model
    consts = ev.get("constants") or {}
    if consts:
        names = _const_names(rec["source"])
        t = Table(title="fitted constants", header_style="bold")
        t.add_column("model")
        width = max(len(v) for v in consts.values())
        for j in range(width):
            t.add_column(names[j] if j < len(names) else f"c{j}", justify="right")
        for model, vals in sorted(consts.items()):
            t.add_row(model, *(f"{v:.6g}" for v in vals))
        console.print(t)
    if ev:
        obj = ev.get("objectives") or {}
        line = "  ".join(f"{k} {_fmt_err(obj.get(k)) if k != 'complexity' else _fmt(obj.get(k))}"
                         for k in ("e2e_mean", "e2e_worst", "ttft_mean", "itl_mean", "step_mape", "complexity"))
        console.print(f"[bold]{ev.get('stage', '')} evaluation[/bold] " + ("" if ev.get("valid") else
                      f"[red]INVALID: {ev.get('error')}[/red] ") + line)
    # per experiment-stage errors
    rows = ev.get("rows") or []
    base = {_row_key(r): r for r in _rows_of(baseline_rows)}
    if rows:
        t = Table(title="errors per experiment and stage (held-out part)", header_style="bold")
        for c in ("experiment", "stage", "rate"):
            t.add_column(c, justify="right" if c != "experiment" else "left")
        for m in ("e2e", "ttft", "itl"):
            t.add_column(f"{m} err", justify="right")
            if base:
                t.add_column(f"{m} base", justify="right", style="dim")
        for r in rows:
            b = base.get(_row_key(r), {})
            cells = [str(r.get("experiment")), str(r.get("stage")), _fmt(r.get("rate"))]
            for m in ("e2e", "ttft", "itl"):
                cells.append(_fmt_err(r.get(f"{m}_err")))
                if base:
                    cells.append(_fmt_err(b.get(f"{m}_err")) if b else "—")
            t.add_row(*cells)
        console.print(t)
    steps = ev.get("steps") or {}
    if steps:
        t = Table(title="per-step scoring", header_style="bold")
        for c in ("experiment", "step MAPE", "spearman(duration)", "n"):
            t.add_column(c, justify="left" if c == "experiment" else "right")
        for k, v in sorted(steps.items()):
            t.add_row(k, _fmt_err(v.get("step_mape")), _fmt(v.get("spearman_duration")), _fmt(v.get("n")))
        console.print(t)
    # lineage
    lin = archive.lineage(program_id)
    if len(lin) > 1 or rec.get("parent_ids"):
        t = Table(title="lineage", header_style="bold")
        for c in ("depth", "id", "operator", "llm", "gen", "cplx", "e2e_mean", "parents"):
            t.add_column(c, justify="right" if c not in ("operator", "llm", "parents") else "left")
        for a in lin:
            t.add_row(str(a["depth"]), str(a["id"]), a["operator"], a.get("llm_model") or "", _fmt(a["generation"]),
                      _fmt(a["complexity"]), _fmt_err((a.get("objectives") or {}).get("e2e_mean")),
                      ", ".join(map(str, a["parent_ids"])))
        console.print(t)
    return rec


# ---------------------------------------------------------------- SVG primitives

def _nice_step(span: float, n: int) -> float:
    raw = span / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


class _Axis:
    def __init__(self, values, log: bool = False, lo0: bool = False, pad: float = 0.05):
        vals = [v for v in values if v is not None and math.isfinite(v) and (v > 0 or not log)]
        self.log = log and bool(vals)
        if not vals:
            vals = [0.0, 1.0]
        lo, hi = min(vals), max(vals)
        if self.log:
            lo, hi = math.log10(lo), math.log10(hi)
            if hi - lo < 1e-9:
                lo, hi = lo - 0.5, hi + 0.5
            span = hi - lo
            self.lo, self.hi = lo - pad * span, hi + pad * span
        else:
            if lo0:
                lo = min(lo, 0.0)
            if hi - lo < 1e-12:
                lo, hi = lo - 0.5, hi + 0.5
            step = _nice_step(hi - lo, 5)
            self.lo = math.floor(lo / step) * step if not (lo0 and lo >= 0) else 0.0
            self.hi = math.ceil(hi / step) * step
            if self.hi <= self.lo:
                self.hi = self.lo + step
            self.step = step

    def t(self, v: float) -> float:
        """Value -> [0, 1]."""
        if self.log:
            v = math.log10(max(v, 1e-300))
        return (v - self.lo) / (self.hi - self.lo)

    def ticks(self) -> list[tuple[float, str]]:
        if self.log:
            out = []
            d0, d1 = math.floor(self.lo), math.ceil(self.hi)
            mults = (1, 2, 5) if d1 - d0 <= 3 else (1,)
            for d in range(d0, d1 + 1):
                for m in mults:
                    v = m * 10.0 ** d
                    if self.lo - 1e-9 <= math.log10(v) <= self.hi + 1e-9:
                        out.append((v, _fmt(v, 2)))
            return out
        n = int(round((self.hi - self.lo) / self.step))
        return [(self.lo + i * self.step, _fmt(self.lo + i * self.step, 3)) for i in range(n + 1)]


class _Plot:
    """A plotting area with axes, grid and labels; marks are appended as SVG strings."""

    def __init__(self, xaxis: _Axis, yaxis: _Axis, x_label: str, y_label: str, width=600, height=380,
                 title: str = "", x_fmt=None, y_fmt=None):
        self.x, self.y = xaxis, yaxis
        self.w, self.h = width, height
        self.ml, self.mr, self.mt, self.mb = 70, 20, 36 if title else 16, 52
        self.title, self.x_label, self.y_label = title, x_label, y_label
        self.x_fmt, self.y_fmt = x_fmt, y_fmt
        self.marks: list[str] = []
        self.legend: list[tuple[str, str, str]] = []  # (label, color, shape)

    def px(self, v) -> float:
        return self.ml + self.x.t(v) * (self.w - self.ml - self.mr)

    def py(self, v) -> float:
        return self.h - self.mb - self.y.t(v) * (self.h - self.mt - self.mb)

    def point(self, x, y, color, tip: str, shape="circle", r=4.0, fill=None, stroke=None, opacity=0.85):
        X, Y = self.px(x), self.py(y)
        fill = fill if fill is not None else color
        st = f' stroke="{stroke}" stroke-width="1.5"' if stroke else ""
        t = f"<title>{html.escape(tip)}</title>"
        if shape == "square":
            self.marks.append(f'<rect x="{X - r:.1f}" y="{Y - r:.1f}" width="{2 * r:.1f}" height="{2 * r:.1f}" '
                              f'fill="{fill}" fill-opacity="{opacity}"{st}>{t}</rect>')
        elif shape == "diamond":
            pts = f"{X:.1f},{Y - r - 1:.1f} {X + r + 1:.1f},{Y:.1f} {X:.1f},{Y + r + 1:.1f} {X - r - 1:.1f},{Y:.1f}"
            self.marks.append(f'<polygon points="{pts}" fill="{fill}" fill-opacity="{opacity}"{st}>{t}</polygon>')
        else:
            self.marks.append(f'<circle cx="{X:.1f}" cy="{Y:.1f}" r="{r}" fill="{fill}" fill-opacity="{opacity}"'
                              f'{st}>{t}</circle>')

    def line(self, pts, color, width=2.0, dash: str | None = None, step: bool = False, tip: str | None = None):
        if not pts:
            return
        coords = []
        prev = None
        for x, y in pts:
            if step and prev is not None:
                coords.append(f"{self.px(x):.1f},{self.py(prev):.1f}")
            coords.append(f"{self.px(x):.1f},{self.py(y):.1f}")
            prev = y
        d = f' stroke-dasharray="{dash}"' if dash else ""
        t = f"<title>{html.escape(tip)}</title>" if tip else ""
        self.marks.append(f'<polyline points="{" ".join(coords)}" fill="none" stroke="{color}" '
                          f'stroke-width="{width}"{d}>{t}</polyline>')

    def raw(self, s: str):
        self.marks.append(s)

    def _legend_layout(self) -> list[tuple[str, str, str, float, float]]:
        """(label, color, shape, x, y) of each legend entry, wrapped over rows."""
        out, x, row = [], float(self.ml), 0
        top = 36 if self.title else 16
        for lab, col, shape in self.legend:
            wd = 21 + 7 * len(lab) + 18
            if x + wd > self.w - self.mr and x > self.ml:
                x, row = float(self.ml), row + 1
            out.append((lab, col, shape, x, top + 8 + 18 * row))
            x += wd
        return out

    def svg(self, note: str = "") -> str:
        grow = 0
        if self.legend:  # make room for the legend rows above the plotting area
            rows = 1 + max(round((y - (36 if self.title else 16) - 8) / 18) for *_, y in self._legend_layout())
            grow = 18 * rows + 6
            self.mt += grow
            self.h += grow
        w, h, ml, mr, mt, mb = self.w, self.h, self.ml, self.mr, self.mt, self.mb
        out = [f'<svg class="plot" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
               f'aria-label="{html.escape(self.title or self.y_label)}">',
               f'<rect x="{ml}" y="{mt}" width="{w - ml - mr}" height="{h - mt - mb}" fill="#fff" stroke="#999"/>']
        if self.title:
            out.append(f'<text x="{w / 2:.0f}" y="20" text-anchor="middle" class="ttl">{html.escape(self.title)}</text>')
        for v, lab in self.x.ticks():
            X = self.px(v)
            out.append(f'<line x1="{X:.1f}" y1="{mt}" x2="{X:.1f}" y2="{h - mb}" class="grid"/>')
            lab = self.x_fmt(v) if self.x_fmt else lab
            out.append(f'<text x="{X:.1f}" y="{h - mb + 16}" text-anchor="middle" class="tick">{html.escape(lab)}</text>')
        for v, lab in self.y.ticks():
            Y = self.py(v)
            out.append(f'<line x1="{ml}" y1="{Y:.1f}" x2="{w - mr}" y2="{Y:.1f}" class="grid"/>')
            lab = self.y_fmt(v) if self.y_fmt else lab
            out.append(f'<text x="{ml - 6}" y="{Y + 4:.1f}" text-anchor="end" class="tick">{html.escape(lab)}</text>')
        out.append(f'<text x="{(ml + w - mr) / 2:.0f}" y="{h - 12}" text-anchor="middle" class="lab">'
                   f'{html.escape(self.x_label)}</text>')
        out.append(f'<text transform="translate(16,{(mt + h - mb) / 2:.0f}) rotate(-90)" text-anchor="middle" '
                   f'class="lab">{html.escape(self.y_label)}</text>')
        # marks were placed before the legend made room: shift them down by the same amount
        out.append(f'<g transform="translate(0,{grow})">{"".join(self.marks)}</g>')
        # legend: a row (wrapping if needed) between the title and the plotting area
        for lab, col, shape, lx, cy in self._legend_layout():
            if shape == "line":
                out.append(f'<line x1="{lx}" y1="{cy}" x2="{lx + 16}" y2="{cy}" stroke="{col}" stroke-width="2.5"/>')
            elif shape == "square":
                out.append(f'<rect x="{lx + 3}" y="{cy - 5}" width="10" height="10" fill="{col}"/>')
            elif shape == "ring":
                out.append(f'<circle cx="{lx + 8}" cy="{cy}" r="5" fill="none" stroke="{col}" stroke-width="2"/>')
            else:
                out.append(f'<circle cx="{lx + 8}" cy="{cy}" r="5" fill="{col}"/>')
            out.append(f'<text x="{lx + 21}" y="{cy + 4}" class="leg">{html.escape(lab)}</text>')
        if note:
            out.append(f'<text x="{ml + 4}" y="{h - mb - 6}" class="note">{html.escape(note)}</text>')
        out.append("</svg>")
        return "".join(out)


def _use_log(vals) -> bool:
    v = [x for x in vals if x is not None and x > 0]
    return bool(v) and max(v) / min(v) > 30


def _pct(v: float) -> str:
    return f"{100 * v:.3g}%" if v < 10 else f"{v:.3g}x"


def _bar_chart(categories: list[str], groups: list[tuple[str, str, list[float | None]]], y_label: str,
               title: str) -> str:
    """Grouped bars, one group per category (experiment-stage), one bar per series."""
    vals = [v for _, _, vs in groups for v in vs if v is not None]
    log = _use_log(vals)
    if log:
        floor = min(v for v in vals if v > 0) / 2 if any(v > 0 for v in vals) else 1e-4
        yaxis = _Axis(vals + [floor], log=True, pad=0.02)
    else:
        yaxis = _Axis(vals + [0.0], lo0=True)
    n_cat, n_grp = max(len(categories), 1), max(len(groups), 1)
    slot = max(10 * n_grp + 14, 34)
    width = max(620, 70 + 20 + slot * n_cat)
    xaxis = _Axis([0.0, float(n_cat)])
    xaxis.lo, xaxis.hi, xaxis.step = 0.0, float(n_cat), float(n_cat + 1)
    p = _Plot(xaxis, yaxis, "", y_label, width=width, height=400, title=title, y_fmt=_pct)
    p.mb = 110
    p.x.ticks = lambda: []  # category labels drawn below
    plot_w = p.w - p.ml - p.mr
    cw = plot_w / n_cat
    bw = min(18.0, (cw - 8) / n_grp)
    base_y = p.h - p.mb if log else p.py(0.0)
    for ci, cat in enumerate(categories):
        x0 = p.ml + ci * cw + (cw - bw * n_grp) / 2
        for gi, (name, col, vs) in enumerate(groups):
            v = vs[ci] if ci < len(vs) else None
            if v is None:
                continue
            vv = max(v, 10 ** yaxis.lo) if log else v
            y = p.py(vv)
            p.raw(f'<rect x="{x0 + gi * bw:.1f}" y="{min(y, base_y):.1f}" width="{bw - 1:.1f}" '
                  f'height="{abs(base_y - y):.1f}" fill="{col}"><title>{html.escape(f"{name} · {cat}: {_pct(v)}")}'
                  f'</title></rect>')
        cx = p.ml + (ci + 0.5) * cw
        p.raw(f'<text transform="translate({cx:.1f},{p.h - p.mb + 12}) rotate(-40)" text-anchor="end" '
              f'class="tick">{html.escape(cat)}</text>')
    p.legend = [(name, col, "square") for name, col, _ in groups]
    return p.svg()


# ---------------------------------------------------------------- HTML report

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1280px;color:#222;
padding:0 16px;line-height:1.4}
h1{font-size:22px;margin-bottom:4px} h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
.muted{color:#666;font-size:13px} .plots{display:flex;flex-wrap:wrap;gap:16px}
svg.plot{background:#fafafa;border:1px solid #e3e3e3;border-radius:4px;max-width:100%;height:auto}
svg .grid{stroke:#eee;stroke-width:1} svg .tick{font-size:11px;fill:#555} svg .lab{font-size:13px;fill:#222}
svg .ttl{font-size:14px;font-weight:600;fill:#222} svg .leg{font-size:12px;fill:#222} svg .note{font-size:11px;fill:#888}
table{border-collapse:collapse;font-size:13px;margin:8px 0} th,td{padding:4px 8px;border-bottom:1px solid #eee;text-align:right}
th{background:#f4f4f4;position:sticky;top:0} td.l,th.l{text-align:left} tr.chosen td{background:#fff6d5}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:10px;overflow:auto;font-size:12.5px}
details{margin:4px 0} summary{cursor:pointer} .bad{color:#b00} .ok{color:#070}
"""


def _e2e_c(rec) -> tuple[float | None, float | None]:
    obj = rec.get("objectives") or {}
    c = finite_or_none(obj.get("complexity"))
    if c is None:
        c = finite_or_none(rec.get("complexity"))
    return c, finite_or_none(obj.get("e2e_mean"))


def _progress(evals: list[dict], ref: tuple[float, float]):
    """Per run: [(index, best e2e so far, hypervolume so far)] over valid evaluations."""
    by_run: dict[str, list] = {}
    for i, r in enumerate(evals, start=1):
        by_run.setdefault(r["run_id"], []).append((i, r))
    out = {}
    for run, items in by_run.items():
        best, front, hv, series = math.inf, [], 0.0, []
        for k, (i, r) in enumerate(items, start=1):
            if r.get("eval_valid"):
                c, e = _e2e_c(r)
                if e is not None:
                    best = min(best, e)
                if c is not None and e is not None and c < ref[0] and e < ref[1]:
                    if not any(fc <= c and fe <= e for fc, fe in front):
                        front = [(fc, fe) for fc, fe in front if not (c <= fc and e <= fe)] + [(c, e)]
                        hv = _hv2d(front, ref)
            series.append((k, best if math.isfinite(best) else None, hv))
        out[run] = series
    return out


def _table_html(rows: list[dict], chosen: int | None) -> str:
    cols = [("id", "l"), ("run", "l"), ("gen", ""), ("operator", "l"), ("cplx", ""), ("e2e_mean", ""),
            ("e2e_worst", ""), ("ttft_mean", ""), ("itl_mean", ""), ("step_mape", ""), ("components", "l")]
    h = ["<table><thead><tr>" + "".join(f'<th class="{c}">{n}</th>' for n, c in cols) + "</tr></thead><tbody>"]
    for r in rows:
        cls = ' class="chosen"' if r["id"] == chosen else ""
        cells = [f'<a href="#p{r["id"]}">#{r["id"]}</a>', html.escape(str(r.get("run") or "")),
                 _fmt(r.get("generation")), html.escape(str(r.get("operator") or "")), _fmt(r.get("complexity"))]
        cells += [_fmt_err(r.get(k)) for k in ("e2e_mean", "e2e_worst", "ttft_mean", "itl_mean", "step_mape")]
        cells.append(html.escape(", ".join(r.get("components") or [])))
        h.append(f"<tr{cls}>" + "".join(f'<td class="{c}">{v}</td>' for v, (_, c) in zip(cells, cols)) + "</tr>")
    h.append("</tbody></table>")
    return "".join(h)


def _program_html(rec: dict, baselines: dict[str, Any]) -> str:
    ev = rec.get("evaluation") or {}
    cap = go_cap_status(rec)
    parts = [f'<h2 id="p{rec["id"]}">Program #{rec["id"]}</h2>',
             f'<p class="muted">run {html.escape(str(rec["run_id"]))} · generation {rec["generation"]} · operator '
             f'{html.escape(str(rec["operator"]))}' + (f' · LLM {html.escape(rec["llm_model"])}' if rec.get("llm_model")
                                                      else "")
             + f' · parents {", ".join("#" + str(p) for p in rec["parent_ids"]) or "none"}'
             + f' · complexity {rec.get("complexity")} ({rec.get("n_ops")} ops, {rec.get("n_cond")} cond, '
             f'{rec.get("n_consts")} consts) · Go cap: '
             + ('<span class="ok">fits</span>' if cap is None else f'<span class="bad">{html.escape(cap)}</span>')
             + "</p>",
             f"<pre>{html.escape(rec['source'])}</pre>"]
    consts = ev.get("constants") or {}
    if consts:
        names = _const_names(rec["source"])
        width = max(len(v) for v in consts.values())
        hdr = "".join(f"<th>{html.escape(names[j] if j < len(names) else f'c{j}')}</th>" for j in range(width))
        body = "".join(f'<tr><td class="l">{html.escape(m)}</td>' + "".join(f"<td>{v:.6g}</td>" for v in vals) + "</tr>"
                       for m, vals in sorted(consts.items()))
        parts.append(f'<p class="muted">fitted constants per model</p><table><tr><th class="l">model</th>{hdr}</tr>'
                     f"{body}</table>")
    rows = ev.get("rows") or []
    if rows:
        cats = [f"{r.get('experiment')} · s{r.get('stage')}" for r in rows]
        keys = [_row_key(r) for r in rows]
        bmaps = {name: {_row_key(r): r for r in _rows_of(b)} for name, b in baselines.items()}
        charts = []
        for m, lab in (("e2e", "E2E"), ("ttft", "TTFT"), ("itl", "ITL")):
            groups = [(f"#{rec['id']}", PALETTE[0], [finite_or_none(r.get(f"{m}_err")) for r in rows])]
            for j, (name, bm) in enumerate(bmaps.items(), start=1):
                groups.append((name, _bcolor(j - 1), [finite_or_none(bm.get(k, {}).get(f"{m}_err")) for k in keys]))
            charts.append(_bar_chart(cats, groups, f"{lab} relative error", f"{lab} error per experiment and stage"))
        parts.append('<div class="plots">' + "".join(charts) + "</div>")
    return "".join(parts)


def report_html(archive, out_path, run: str | None = None, program_id: int | None = None,
                baselines: Mapping[str, Any] | None = None) -> str:
    """Write ONE self-contained HTML page; returns its path.

    baselines: name -> Evaluation (or archive record, or list of experiment-stage rows).
    program_id: the program detailed at the bottom (default: best e2e_mean in scope)."""
    baselines = _baselines_map(baselines)
    evals = archive.evaluations(run, stage="full")
    valid = [r for r in evals if r.get("eval_valid")]
    front = archive.frontier(run)
    front_ids = {r["id"] for r in front}
    ftable = frontier_table(archive, run)
    chosen = archive.program(program_id) if program_id is not None else archive.best(run)
    chosen_id = chosen["id"] if chosen else None
    runs = [r for r in archive.runs() if run is None or r["id"] == run]

    # -------- Pareto plot: complexity vs E2E
    pts = [(r, *_e2e_c(r)) for r in valid]
    pts = [(r, c, e) for r, c, e in pts if c is not None and e is not None]
    base_pts = []
    for j, (name, b) in enumerate(baselines.items(), start=1):
        obj = _objectives_of(b)
        c, e = finite_or_none(obj.get("complexity")), finite_or_none(obj.get("e2e_mean"))
        if e is None:
            e = _mean(x.get("e2e_err") for x in _rows_of(b))
        if c is not None and e is not None:
            base_pts.append((name, _bcolor(j - 1), c, e))
    ys = [e for _, _, e in pts] + [e for *_, e in base_pts]
    log_y = _use_log(ys)
    p = _Plot(_Axis([c for _, c, _ in pts] + [c for _, _, c, _ in base_pts], lo0=True),
              _Axis(ys, log=log_y), "complexity (operations + conditionals + constants)", "mean E2E error",
              width=620, height=420, title="Complexity vs E2E error", y_fmt=_pct)
    front2 = sorted({(c, e) for c, e in pareto_front([(c, e) for _, c, e in pts])})
    if front2:
        p.line(front2, "#d62728", width=1.5, dash="4 3", step=True, tip="2-D front (complexity, E2E)")
    for r, c, e in sorted(pts, key=lambda t: t[0]["id"] in front_ids):
        on = r["id"] in front_ids
        tip = (f"#{r['id']} ({r['operator']}, gen {r['generation']}) complexity {c:g}, E2E {_pct(e)}"
               + (" — on the frontier" if on else ""))
        p.point(c, e, "#d62728" if on else "#9aa7b5", tip, r=5 if on else 3.5, opacity=0.95 if on else 0.6)
    for name, col, c, e in base_pts:
        p.point(c, e, col, f"baseline {name}: complexity {c:g}, E2E {_pct(e)}", shape="square", r=5)
    if chosen and chosen_id in {r["id"] for r, _, _ in pts}:
        c, e = _e2e_c(chosen)
        p.point(c, e, "#000", f"#{chosen_id} (detailed below)", r=8, fill="none", stroke="#000", opacity=1)
    p.legend = [("evaluated", "#9aa7b5", "circle"), ("frontier (all objectives)", "#d62728", "circle")]
    p.legend += [(f"baseline {n}", col, "square") for n, col, _, _ in base_pts]
    if chosen_id is not None:
        p.legend.append((f"detailed: #{chosen_id}", "#000", "ring"))
    n_hidden = len(evals) - len(pts)
    note = f"{n_hidden} invalid / non-finite evaluations not shown" if n_hidden else ""
    pareto_svg = p.svg(note if pts else "no valid full evaluations yet")

    # -------- TTFT vs ITL
    tp = [(r, finite_or_none((r.get("objectives") or {}).get("itl_mean")), finite_or_none((r.get("objectives") or {}).get("ttft_mean")))
          for r in valid]
    tp = [t for t in tp if t[1] is not None and t[2] is not None]
    bt = []
    for j, (name, b) in enumerate(baselines.items(), start=1):
        rows = _rows_of(b)
        obj = _objectives_of(b)
        x = finite_or_none(obj.get("itl_mean")) if obj.get("itl_mean") is not None else _mean(r.get("itl_err") for r in rows)
        y = finite_or_none(obj.get("ttft_mean")) if obj.get("ttft_mean") is not None else _mean(r.get("ttft_err") for r in rows)
        if x is not None and y is not None:
            bt.append((name, _bcolor(j - 1), x, y))
    xs, ys = [x for _, x, _ in tp] + [x for *_, x, _ in bt], [y for *_, y in tp] + [y for *_, y in bt]
    q = _Plot(_Axis(xs, log=_use_log(xs)), _Axis(ys, log=_use_log(ys)), "mean ITL (per-token time) error",
              "mean TTFT error", width=620, height=420, title="TTFT error vs ITL error", x_fmt=_pct, y_fmt=_pct)
    for r, x, y in sorted(tp, key=lambda t: t[0]["id"] in front_ids):
        on = r["id"] in front_ids
        q.point(x, y, "#d62728" if on else "#9aa7b5", f"#{r['id']} TTFT {_pct(y)}, ITL {_pct(x)}",
                r=5 if on else 3.5, opacity=0.95 if on else 0.6)
    for name, col, x, y in bt:
        q.point(x, y, col, f"baseline {name}: TTFT {_pct(y)}, ITL {_pct(x)}", shape="square", r=5)
    q.legend = [("evaluated", "#9aa7b5", "circle"), ("frontier", "#d62728", "circle")]
    q.legend += [(f"baseline {n}", col, "square") for n, col, _, _ in bt]
    ttft_svg = q.svg()

    # -------- progress
    cmax = max([c for _, c, _ in pts] + [1.0])
    ref = (cmax + 1.0, 1.0)
    prog = _progress(evals, ref)
    n_max = max((len(s) for s in prog.values()), default=1)
    bests = [b for s in prog.values() for _, b, _ in s if b is not None]
    g1 = _Plot(_Axis([1.0, float(max(n_max, 2))]), _Axis(bests, log=_use_log(bests)), "evaluation index (full stage)",
               "best mean E2E error so far", width=620, height=340, title="Search progress: best E2E error", y_fmt=_pct)
    hvs = [h for s in prog.values() for *_, h in s]
    g2 = _Plot(_Axis([1.0, float(max(n_max, 2))]), _Axis(hvs + [0.0], lo0=True), "evaluation index (full stage)",
               "hypervolume", width=620, height=340,
               title=f"Search progress: hypervolume (complexity, E2E) w.r.t. ({ref[0]:g}, 100%)")
    for j, (rid, s) in enumerate(sorted(prog.items())):
        col = PALETTE[j % len(PALETTE)]
        g1.line([(i, b) for i, b, _ in s if b is not None], col, step=True, tip=f"{rid}")
        g2.line([(i, h) for i, _, h in s], col, step=True, tip=f"{rid}")
        if s:
            i, b, h = s[-1]
            if b is not None:
                g1.point(i, b, col, f"{rid}: best {_pct(b)} after {i} evaluations", r=3)
            g2.point(i, h, col, f"{rid}: hypervolume {h:.4g} after {i} evaluations", r=3)
        g1.legend.append((rid, col, "line"))
        g2.legend.append((rid, col, "line"))
    prog_svgs = g1.svg() + g2.svg()

    # -------- page
    title = f"StepEvolve report — {run}" if run else "StepEvolve report — all runs"
    run_rows = "".join(
        f'<tr><td class="l">{html.escape(r["id"])}</td><td class="l">{html.escape(r["status"])}</td>'
        f'<td>{r["seed"]}</td><td>{r["n_evaluated"]}</td><td>{_fmt(r["budget"])}</td>'
        f'<td class="l">{html.escape(str(r["data_fingerprint"] or ""))[:16]}</td>'
        f'<td class="l">{time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created_at"]))}</td></tr>' for r in runs)
    llm = archive.llm_stats(run)
    body = [f"<h1>{html.escape(title)}</h1>",
            f'<p class="muted">generated {time.strftime("%Y-%m-%d %H:%M:%S")} from {html.escape(str(archive.path))} · '
            f"{len(evals)} full evaluations ({len(valid)} valid) · frontier {len(front)} programs · "
            f"LLM calls {llm['calls']} ({llm['prompt_tokens'] + llm['completion_tokens']} tokens, "
            f"${llm['cost_usd']:.4f}). Errors are relative (|pred − meas| / meas) on the held-out part; "
            f"hover a mark for details.</p>",
            '<table><tr><th class="l">run</th><th class="l">status</th><th>seed</th><th>evaluated</th><th>budget</th>'
            f'<th class="l">data</th><th class="l">started</th></tr>{run_rows}</table>',
            "<h2>Pareto view</h2>", f'<div class="plots">{pareto_svg}{ttft_svg}</div>',
            "<h2>Frontier</h2>", _table_html(ftable, chosen_id)]
    if baselines:
        brow = []
        for name, b in baselines.items():
            obj, rows = _objectives_of(b), _rows_of(b)
            vals = {k: obj.get(k) for k in VECTOR_ORDER}
            for k, m in (("e2e_mean", "e2e_err"), ("ttft_mean", "ttft_err"), ("itl_mean", "itl_err")):
                if vals[k] is None:
                    vals[k] = _mean(r.get(m) for r in rows)
            if vals["e2e_worst"] is None and rows:
                vals["e2e_worst"] = max((finite_or_none(r.get("e2e_err")) or 0.0) for r in rows)
            brow.append(f'<tr><td class="l">{html.escape(name)}</td><td>{_fmt(vals["complexity"])}</td>'
                        + "".join(f"<td>{_fmt_err(vals[k])}</td>" for k in
                                  ("e2e_mean", "e2e_worst", "ttft_mean", "itl_mean", "step_mape")) + "</tr>")
        body.append('<p class="muted">baselines (same evaluator)</p><table><tr><th class="l">baseline</th><th>cplx</th>'
                    "<th>e2e_mean</th><th>e2e_worst</th><th>ttft_mean</th><th>itl_mean</th><th>step_mape</th></tr>"
                    + "".join(brow) + "</table>")
    body.append("<h2>Search progress</h2>" + f'<div class="plots">{prog_svgs}</div>')
    if chosen:
        body.append(_program_html(chosen, baselines))
    others = [r for r in front if r["id"] != chosen_id]
    if others:
        body.append("<h2>Frontier sources</h2>")
        for r in others:
            body.append(f'<details id="p{r["id"]}"><summary>#{r["id"]} · complexity {r.get("complexity")} · E2E '
                        f'{_fmt_err((r.get("objectives") or {}).get("e2e_mean"))}</summary>'
                        f"<pre>{html.escape(r['source'])}</pre></details>")
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
    from pathlib import Path
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return str(out)
