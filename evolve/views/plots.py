"""The report's figures as Plotly figures (built here, drawn by plotly.js in the page).

Each builder takes plain archive records and returns a `plotly.graph_objects.Figure`, so the
content of a plot (which points, which values) is testable without a browser. Hover texts go
through `html.escape`: plotly.js renders a small subset of HTML in them, and operator names
or run ids are archive text.
"""
from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from evaluator.objectives import finite_or_none
from evolve.pareto import hypervolume, pareto_front
from evolve.views.format import complexity_of, mean, objectives_of, pct, row_key, rows_of

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f")
BASELINE_COLORS = ("#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#bcbd22")
EVALUATED, FRONTIER = "#9aa7b5", "#d62728"
CX_LABEL = "complexity (operations + conditionals + constants)"


def baseline_color(j: int) -> str:
    return BASELINE_COLORS[j % len(BASELINE_COLORS)]


def use_log(vals) -> bool:
    """A log axis when the positive values span more than 30x (errors of runaway programs)."""
    v = [x for x in vals if x is not None and x > 0]
    return bool(v) and max(v) / min(v) > 30


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, *, log_x=False, log_y=False,
            pct_x=False, pct_y=False, height=420) -> go.Figure:
    fig.update_layout(title=dict(text=html.escape(title), x=0.5, font=dict(size=15)), template="plotly_white",
                      height=height, margin=dict(l=70, r=20, t=50, b=110), hovermode="closest",
                      legend=dict(orientation="h", yanchor="top", y=-0.2, x=0, font=dict(size=11)))
    fig.update_xaxes(title_text=x_title, type="log" if log_x else "linear", tickformat=".3~%" if pct_x else None)
    fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear", tickformat=".3~%" if pct_y else None)
    return fig


def _note(fig: go.Figure, text: str) -> None:
    if text:
        fig.add_annotation(text=html.escape(text), xref="paper", yref="paper", x=0, y=0, xanchor="left",
                           yanchor="bottom", showarrow=False, font=dict(size=11, color="#888"))


def baseline_points(baselines: Mapping[str, Any], x_key: str, y_key: str) -> list[tuple[str, str, float, float]]:
    """(name, color, x, y) per baseline with both objectives; a missing error objective falls
    back to the mean over the baseline's rows (a bare list of rows has no objectives)."""
    out = []
    for j, (name, b) in enumerate(baselines.items()):
        obj, rows = objectives_of(b), rows_of(b)

        def val(k):
            v = finite_or_none(obj.get(k))
            if v is None and k.endswith("_mean") and k != "complexity":
                v = mean(r.get(k.replace("_mean", "_err")) for r in rows)
            return v
        x, y = val(x_key), val(y_key)
        if x is not None and y is not None:
            out.append((name, baseline_color(j), x, y))
    return out


def pareto_figure(evals: Sequence[Mapping], front_ids: set[int], baselines: Mapping[str, Any],
                  chosen: Mapping | None = None) -> go.Figure:
    """Complexity vs mean E2E error: every valid full evaluation, the frontier, the 2-D
    (complexity, E2E) staircase, the baselines and the program detailed in the report."""
    pts = [(r, complexity_of(r), finite_or_none((r.get("objectives") or {}).get("e2e_mean")))
           for r in evals if r.get("eval_valid")]
    pts = [(r, c, e) for r, c, e in pts if c is not None and e is not None]
    base = baseline_points(baselines, "complexity", "e2e_mean")
    fig = go.Figure()
    stair = sorted({(c, e) for c, e in pareto_front([(c, e) for _, c, e in pts])})
    if stair:
        fig.add_trace(go.Scatter(x=[c for c, _ in stair], y=[e for _, e in stair], mode="lines", line_shape="hv",
                                 line=dict(color=FRONTIER, width=1.5, dash="dash"), name="2-D front (complexity, E2E)",
                                 hoverinfo="skip"))
    for on, name, color, size in ((False, "evaluated", EVALUATED, 7),
                                  (True, "frontier (all objectives)", FRONTIER, 10)):
        sel = [(r, c, e) for r, c, e in pts if (r["id"] in front_ids) == on]
        fig.add_trace(go.Scatter(
            x=[c for _, c, _ in sel], y=[e for _, _, e in sel], mode="markers", name=name,
            customdata=[r["id"] for r, _, _ in sel],
            marker=dict(color=color, size=size, opacity=0.95 if on else 0.6, line=dict(width=0.5, color="#fff")),
            hovertext=[html.escape(f"#{r['id']} ({r.get('operator')}, gen {r.get('generation')})") +
                       f"<br>complexity {c:g}<br>E2E {pct(e)}" + ("<br>on the frontier" if on else "")
                       for r, c, e in sel], hoverinfo="text"))
    if base:
        fig.add_trace(go.Scatter(x=[c for *_, c, _ in base], y=[e for *_, e in base], mode="markers+text",
                                 name="baselines", text=[html.escape(n) for n, *_ in base], textposition="top center",
                                 marker=dict(symbol="square", size=11, color=[col for _, col, *_ in base]),
                                 hovertext=[html.escape(f"baseline {n}") + f"<br>complexity {c:g}<br>E2E {pct(e)}"
                                            for n, _, c, e in base], hoverinfo="text"))
    if chosen is not None and chosen.get("id") in {r["id"] for r, _, _ in pts}:
        c, e = complexity_of(chosen), finite_or_none((chosen.get("objectives") or {}).get("e2e_mean"))
        fig.add_trace(go.Scatter(x=[c], y=[e], mode="markers", name=f"detailed: #{chosen['id']}",
                                 marker=dict(symbol="circle-open", size=18, color="#000", line=dict(width=2)),
                                 hovertext=[f"#{chosen['id']} (detailed below)"], hoverinfo="text"))
    ys = [e for *_, e in pts] + [e for *_, e in base]
    _layout(fig, "Complexity vs E2E error", CX_LABEL, "mean E2E error", log_y=use_log(ys), pct_y=True)
    n_hidden = len(evals) - len(pts)
    _note(fig, "no valid full evaluations yet" if not pts else
          (f"{n_hidden} invalid / non-finite evaluations not shown" if n_hidden else ""))
    return fig


def ttft_itl_figure(evals: Sequence[Mapping], front_ids: set[int], baselines: Mapping[str, Any]) -> go.Figure:
    """Mean TTFT error against mean per-token (ITL) error: the two ways a step model can be wrong."""
    pts = []
    for r in evals:
        obj = r.get("objectives") or {}
        x, y = finite_or_none(obj.get("itl_mean")), finite_or_none(obj.get("ttft_mean"))
        if r.get("eval_valid") and x is not None and y is not None:
            pts.append((r, x, y))
    base = baseline_points(baselines, "itl_mean", "ttft_mean")
    fig = go.Figure()
    for on, name, color, size in ((False, "evaluated", EVALUATED, 7), (True, "frontier", FRONTIER, 10)):
        sel = [(r, x, y) for r, x, y in pts if (r["id"] in front_ids) == on]
        fig.add_trace(go.Scatter(x=[x for _, x, _ in sel], y=[y for *_, y in sel], mode="markers", name=name,
                                 customdata=[r["id"] for r, _, _ in sel],
                                 marker=dict(color=color, size=size, opacity=0.95 if on else 0.6),
                                 hovertext=[f"#{r['id']}<br>TTFT {pct(y)}<br>ITL {pct(x)}" for r, x, y in sel],
                                 hoverinfo="text"))
    if base:
        fig.add_trace(go.Scatter(x=[x for *_, x, _ in base], y=[y for *_, y in base], mode="markers", name="baselines",
                                 marker=dict(symbol="square", size=11, color=[col for _, col, *_ in base]),
                                 hovertext=[html.escape(f"baseline {n}") + f"<br>TTFT {pct(y)}<br>ITL {pct(x)}"
                                            for n, _, x, y in base], hoverinfo="text"))
    xs, ys = [x for _, x, _ in pts] + [x for *_, x, _ in base], [y for *_, y in pts] + [y for *_, y in base]
    return _layout(fig, "TTFT error vs ITL error", "mean ITL (per-token time) error", "mean TTFT error",
                   log_x=use_log(xs), log_y=use_log(ys), pct_x=True, pct_y=True)


def progress_series(evals: Sequence[Mapping], ref: tuple[float, float]) -> dict[str, list]:
    """Per run: [(evaluation index, best E2E so far or None, 2-D hypervolume so far)] over the
    run's full evaluations in archive order; the hypervolume is of (complexity, E2E) w.r.t. ref."""
    by_run: dict[str, list] = {}
    for r in evals:
        by_run.setdefault(r["run_id"], []).append(r)
    out = {}
    for run, items in by_run.items():
        best, front, hv, series = math.inf, [], 0.0, []
        for k, r in enumerate(items, start=1):
            if r.get("eval_valid"):
                c, e = complexity_of(r), finite_or_none((r.get("objectives") or {}).get("e2e_mean"))
                if e is not None:
                    best = min(best, e)
                if c is not None and e is not None and c < ref[0] and e < ref[1]:
                    if not any(fc <= c and fe <= e for fc, fe in front):
                        front = [(fc, fe) for fc, fe in front if not (c <= fc and e <= fe)] + [(c, e)]
                        hv = hypervolume(front, ref)
            series.append((k, best if math.isfinite(best) else None, hv))
        out[run] = series
    return out


def progress_figure(evals: Sequence[Mapping]) -> go.Figure:
    """Search history per run: best mean E2E error so far and the (complexity, E2E)
    hypervolume so far, against the index of the full evaluation."""
    cmax = max([c for c in (complexity_of(r) for r in evals if r.get("eval_valid")) if c is not None] + [1.0])
    ref = (cmax + 1.0, 1.0)
    prog = progress_series(evals, ref)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("best mean E2E error so far",
                                        f"hypervolume (complexity, E2E) w.r.t. ({ref[0]:g}, 100%)"))
    for j, (rid, s) in enumerate(sorted(prog.items())):
        col = PALETTE[j % len(PALETTE)]
        pts = [(i, b) for i, b, _ in s if b is not None]
        fig.add_trace(go.Scatter(x=[i for i, _ in pts], y=[b for _, b in pts], mode="lines", line_shape="hv",
                                 line=dict(color=col, width=2), name=html.escape(rid), legendgroup=rid,
                                 hovertemplate="after %{x} evaluations: best E2E %{y:.3~%}<extra>"
                                 + html.escape(rid) + "</extra>"), row=1, col=1)
        fig.add_trace(go.Scatter(x=[i for i, *_ in s], y=[h for *_, h in s], mode="lines", line_shape="hv",
                                 line=dict(color=col, width=2), name=html.escape(rid), legendgroup=rid,
                                 showlegend=False, hovertemplate="after %{x} evaluations: hypervolume %{y:.4g}"
                                 "<extra>" + html.escape(rid) + "</extra>"), row=1, col=2)
    bests = [b for s in prog.values() for _, b, _ in s if b is not None]
    _layout(fig, "Search progress", "", "", height=380)
    fig.update_xaxes(title_text="evaluation index (full stage)")
    fig.update_yaxes(type="log" if use_log(bests) else "linear", tickformat=".3~%", row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=2)
    fig.update_layout(legend=dict(y=-0.25, yanchor="top"))
    return fig


def stage_labels(rows: Sequence[Mapping]) -> list[str]:
    """"model · workload · s<stage>" per row, or the experiment id where those would repeat."""
    short = [f"{r.get('model')} · {r.get('workload')} · s{r.get('stage')}" for r in rows]
    if all(r.get("model") and r.get("workload") for r in rows) and len(set(short)) == len(short):
        return short
    return [f"{r.get('experiment')} · s{r.get('stage')}" for r in rows]


def stage_errors_figure(rec: Mapping, baselines: Mapping[str, Any]) -> go.Figure | None:
    """E2E, TTFT and ITL error of one program per experiment and load stage, next to every
    baseline's error on the same stage (grouped bars); None without rows."""
    rows = (rec.get("evaluation") or {}).get("rows") or []
    if not rows:
        return None
    cats = stage_labels(rows)
    keys = [row_key(r) for r in rows]
    bmaps = {name: {row_key(r): r for r in rows_of(b)} for name, b in baselines.items()}
    metrics = (("e2e", "E2E"), ("ttft", "TTFT"), ("itl", "ITL"))
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[f"{lab} relative error per experiment and stage" for _, lab in metrics])
    allvals = []
    for i, (m, lab) in enumerate(metrics, start=1):
        series = [(f"#{rec['id']}", PALETTE[0], [finite_or_none(r.get(f"{m}_err")) for r in rows])]
        for j, (name, bm) in enumerate(bmaps.items()):
            series.append((name, baseline_color(j), [finite_or_none(bm.get(k, {}).get(f"{m}_err")) for k in keys]))
        for name, col, vals in series:
            allvals += [v for v in vals if v is not None]
            fig.add_trace(go.Bar(x=cats, y=vals, name=html.escape(name), marker_color=col, legendgroup=name,
                                 showlegend=i == 1, hovertemplate="%{x}: %{y:.3~%}<extra>" + html.escape(name)
                                 + f" · {lab}</extra>"), row=i, col=1)
    _layout(fig, f"Program #{rec['id']}: errors per experiment and stage vs the baselines", "", "", height=1000)
    fig.update_layout(barmode="group", legend=dict(y=1.03, yanchor="bottom"), margin=dict(t=60, b=40),
                      title_text="")  # the page's heading names the program; the legend takes the top
    fig.update_yaxes(type="log" if use_log(allvals) else "linear", tickformat=".3~%")
    fig.update_xaxes(tickangle=-40, type="category", automargin=True)  # ids that start like dates stay labels
    return fig
