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

from evaluator.objectives import BY_NAME, REGIMES, finite_or_none, has_heldout
from evolve.pareto import pareto_front
from evolve.views.format import complexity_of, fmt_objective, mean, objectives_of, pct, row_key, rows_of
from evolve.views.history import HV_REF, progress_series, ranked_error_label  # noqa: F401 (re-exported)

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


OUTLIER_SPAN = 3.0  # evaluated programs more than this times the frontier's worst error fall above the plot


def candidate_top(vals: Sequence[float], focus: Sequence[float] = ()) -> float | None:
    """The highest error a plot shows: the candidates' largest, but at most OUTLIER_SPAN times
    the largest of `focus` (the frontier): a runaway program must not flatten the front."""
    v = [x for x in vals if x is not None]
    if not v:
        return None
    f = [x for x in focus if x is not None]
    return min(max(v), OUTLIER_SPAN * max(f)) if f else max(v)


def _candidate_range(vals: Sequence[float], log: bool, focus: Sequence[float] = (),
                     lines: Sequence[float] = ()) -> list[float] | None:
    """A y range that fits the candidates (see candidate_top), in plotly's units (log10 on a log
    axis); None without values. Baselines never stretch it: they are reference lines, and
    `lines` below the candidates' top are kept inside."""
    top = candidate_top(vals, focus)
    v = [x for x in (*vals, *lines) if x is not None and x <= top and (x > 0 or not log)] if top is not None else []
    if not v:
        return None
    lo, hi = min(v), max(v)
    if log:
        a, b = math.log10(lo), math.log10(hi)
        pad = max(0.06 * (b - a), 0.06)
        return [a - pad, b + pad]
    pad = max(0.06 * (hi - lo), 0.06 * hi, 1e-9)
    return [0.0, hi + pad]


def add_reference_lines(fig: go.Figure, base: Sequence[tuple[str, str, float]], yrange: list[float] | None,
                        log: bool, row: int | None = None, col: int | None = None) -> None:
    """Each baseline as a labelled horizontal line at its error; one above the candidates'
    range is named at the top edge instead ("↑ name 219%"), so it never squeezes the plot."""
    top = None if yrange is None else (10 ** yrange[1] if log else yrange[1])
    above = []
    for name, color, y in base:
        if top is not None and y > top:
            above.append(f"{name} {pct(y)}")
            continue
        kw = {} if row is None else {"row": row, "col": col}
        fig.add_hline(y=y, line=dict(color=color, width=1.5, dash="dot"),
                      annotation=dict(text=html.escape(f"baseline {name} {pct(y)}"), font=dict(size=11, color=color),
                                      bgcolor="rgba(255,255,255,0.8)"),
                      annotation_position="top right", **kw)
    if above:
        xref, yref = ("paper", "paper") if row is None else (f"x{'' if col == 1 else col} domain",
                                                            f"y{'' if col == 1 else col} domain")
        fig.add_annotation(text=html.escape("↑ above the plot: baseline " + ", ".join(above)), xref=xref, yref=yref,
                           x=1, y=1, xanchor="right", yanchor="bottom", showarrow=False,
                           font=dict(size=11, color="#555"))


def pareto_figure(evals: Sequence[Mapping], front_ids: set[int], baselines: Mapping[str, Any],
                  chosen: Mapping | None = None, recommended_id: int | None = None) -> go.Figure:
    """Complexity vs mean E2E error: every valid full evaluation, the frontier, the 2-D
    (complexity, E2E) staircase, the recommended program (★) and the program detailed in the
    report (ring); the y axis fits the candidates and the baselines are labelled reference lines."""
    pts = [(r, complexity_of(r), finite_or_none((r.get("objectives") or {}).get("e2e_mean")))
           for r in evals if r.get("eval_valid")]
    pts = [(r, c, e) for r, c, e in pts if c is not None and e is not None]
    # every baseline with an E2E error (a rows-only one by its rows' mean): a line needs no complexity
    lines = [(n, col, y) for n, col, _, y in baseline_points(baselines, "e2e_mean", "e2e_mean")]
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
    by_id = {r["id"]: (c, e) for r, c, e in pts}
    if recommended_id in by_id:
        c, e = by_id[recommended_id]
        fig.add_trace(go.Scatter(x=[c], y=[e], mode="markers+text", name=f"★ recommended: #{recommended_id}",
                                 text=[f"★ #{recommended_id}"], textposition="middle right",
                                 textfont=dict(size=12, color="#7a4d00"),
                                 marker=dict(symbol="star", size=18, color="#f5b301", line=dict(width=1, color="#7a4d00")),
                                 hovertext=[f"#{recommended_id}: recommended (closest to the best error of every held-out regime)"],
                                 hoverinfo="text"))
    if chosen is not None and chosen.get("id") in by_id and chosen.get("id") != recommended_id:
        c, e = by_id[chosen["id"]]
        fig.add_trace(go.Scatter(x=[c], y=[e], mode="markers", name=f"detailed: #{chosen['id']}",
                                 marker=dict(symbol="circle-open", size=18, color="#000", line=dict(width=2)),
                                 hovertext=[f"#{chosen['id']} (detailed below)"], hoverinfo="text"))
    ys = [e for *_, e in pts]
    fys = [e for r, _, e in pts if r["id"] in front_ids]
    top = candidate_top(ys, fys)
    log = use_log([y for y in ys if top is None or y <= top])
    yr = _candidate_range(ys, log, fys, [y for *_, y in lines])
    above = [y for y in ys if top is not None and y > top]
    _layout(fig, "Complexity vs E2E error", CX_LABEL, "mean E2E error (in-sample)", log_y=log, pct_y=True)
    if yr is not None:
        fig.update_yaxes(range=yr)
    add_reference_lines(fig, lines, yr, log)
    n_hidden = len(evals) - len(pts)
    notes = [f"{n_hidden} invalid / non-finite evaluations not shown"] if n_hidden else []
    if above:
        notes.append(f"{len(above)} evaluated above the plot (up to {pct(max(above))})")
    _note(fig, "no valid full evaluations yet" if not pts else "; ".join(notes))
    return fig


def ttft_itl_figure(evals: Sequence[Mapping], front_ids: set[int], baselines: Mapping[str, Any]) -> go.Figure:
    """Mean TTFT error against mean per-token (ITL) error: the two ways a step model can be wrong.
    Axes fit the candidates; a baseline inside them is a labelled square, outside them it is
    named at the edge."""
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
    xs, ys = [x for _, x, _ in pts], [y for *_, y in pts]
    fxs = [x for r, x, _ in pts if r["id"] in front_ids]
    fys = [y for r, _, y in pts if r["id"] in front_ids]
    tx, ty = candidate_top(xs, fxs), candidate_top(ys, fys)
    logx, logy = use_log([x for x in xs if x <= tx]) if xs else False, use_log([y for y in ys if y <= ty]) if ys else False
    xr, yr = _candidate_range(xs, logx, fxs), _candidate_range(ys, logy, fys)
    inside = lambda v, r, lg: r is None or (v <= (10 ** r[1] if lg else r[1]))  # noqa: E731
    shown = [b for b in base if inside(b[2], xr, logx) and inside(b[3], yr, logy)]
    if shown:
        fig.add_trace(go.Scatter(x=[x for *_, x, _ in shown], y=[y for *_, y in shown], mode="markers+text",
                                 name="baselines", text=[html.escape(n) for n, *_ in shown], textposition="top center",
                                 marker=dict(symbol="square", size=11, color=[col for _, col, *_ in shown]),
                                 hovertext=[html.escape(f"baseline {n}") + f"<br>TTFT {pct(y)}<br>ITL {pct(x)}"
                                            for n, _, x, y in shown], hoverinfo="text"))
    out = [b for b in base if b not in shown]
    _layout(fig, "TTFT error vs ITL error", "mean ITL (per-token time) error", "mean TTFT error",
            log_x=logx, log_y=logy, pct_x=True, pct_y=True)
    if xr is not None:
        fig.update_xaxes(range=xr)
    if yr is not None:
        fig.update_yaxes(range=yr)
    if out:
        fig.add_annotation(text=html.escape("outside the plot: baseline " + ", ".join(
            f"{n} (ITL {pct(x)}, TTFT {pct(y)})" for n, _, x, y in out)), xref="paper", yref="paper", x=1, y=1,
            xanchor="right", yanchor="bottom", showarrow=False, font=dict(size=11, color="#555"))
    return fig


def progress_figure(evals: Sequence[Mapping]) -> go.Figure:
    """Search history per run: the best ranked error so far (the worst held-out regime, what
    the search ranks on; in-sample E2E for runs without held-out splits) and the hypervolume so
    far (`evolve.views.history`: the figure the run summary prints), against the index of the
    full evaluation."""
    prog = progress_series(evals)
    label = ranked_error_label(r.get("objectives") for r in evals)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=(f"{label}: best so far",
                                        f"hypervolume (complexity, that error) w.r.t. ({HV_REF[0]:g}, 100%)"))
    for j, (rid, s) in enumerate(sorted(prog.items())):
        col = PALETTE[j % len(PALETTE)]
        pts = [(i, b) for i, b, _ in s if b is not None]
        fig.add_trace(go.Scatter(x=[i for i, _ in pts], y=[b for _, b in pts], mode="lines", line_shape="hv",
                                 line=dict(color=col, width=2), name=html.escape(rid), legendgroup=rid,
                                 hovertemplate="after %{x} evaluations: best %{y:.3~%}<extra>"
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


PRED_MEAS = (("e2e", "E2E", "s", 1.0), ("ttft", "TTFT", "s", 1.0), ("itl", "per-token time", "ms", 1e3))


def predicted_measured_figure(rec: Mapping) -> go.Figure | None:
    """Predicted against measured E2E, TTFT and per-token time, one mark per experiment-stage
    (held-out part), on log axes with the y = x line: a mark above the line is over-predicted.
    None without rows."""
    rows = (rec.get("evaluation") or {}).get("rows") or []
    if not rows:
        return None
    labels = stage_labels(rows)
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08,
                        subplot_titles=[f"{lab} ({unit})" for _, lab, unit, _ in PRED_MEAS])
    _layout(fig, f"Program #{rec['id']}: predicted vs measured per experiment and stage", "", "", height=380)
    for i, (m, lab, unit, scale) in enumerate(PRED_MEAS, start=1):
        pts = [(finite_or_none(r.get(f"meas_{m}_s")), finite_or_none(r.get(f"pred_{m}_s")), name)
               for r, name in zip(rows, labels)]
        pts = [(scale * x, scale * y, n) for x, y, n in pts if x is not None and y is not None and x > 0 and y > 0]
        if not pts:
            continue
        lo = min(min(x, y) for x, y, _ in pts) / 1.3
        hi = max(max(x, y) for x, y, _ in pts) * 1.3
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color="#999", dash="dash", width=1),
                                 name="predicted = measured", showlegend=i == 1, hoverinfo="skip"), row=1, col=i)
        fig.add_trace(go.Scatter(
            x=[x for x, _, _ in pts], y=[y for _, y, _ in pts], mode="markers", name=lab,
            marker=dict(color=PALETTE[i - 1], size=9, opacity=0.85), showlegend=False,
            hovertext=[html.escape(n) + f"<br>measured {x:.4g} {unit}<br>predicted {y:.4g} {unit}<br>error {pct(abs(y - x) / x)}"
                       for x, y, n in pts], hoverinfo="text"), row=1, col=i)
        ticks = dict(type="log", range=[math.log10(lo), math.log10(hi)], nticks=4, exponentformat="none", tickangle=0)
        fig.update_xaxes(title_text="measured", row=1, col=i, **ticks)
        fig.update_yaxes(title_text="predicted" if i == 1 else "", row=1, col=i, **ticks)
    fig.update_layout(margin=dict(t=60, b=60), legend=dict(y=-0.18))
    return fig


def regime_figure(rec: Mapping) -> go.Figure | None:
    """The program's held-out error per regime (what the run ranks it on: the worst bar) with
    its in-sample mean E2E error as a reference line; None without held-out errors."""
    obj = rec.get("objectives") or (rec.get("evaluation") or {}).get("objectives") or {}
    if not has_heldout(obj):
        return None
    keys = [k for k in REGIMES if k in obj]
    vals = [finite_or_none(obj.get(k)) for k in keys]
    worst = max((v for v in vals if v is not None), default=None)
    labels = [BY_NAME[k].label for k in keys]
    ys = [v if v is not None else 0 for v in vals]
    fig = go.Figure(go.Bar(
        x=labels, y=ys, marker_color=["#d62728" if v is not None and v == worst else "#1f77b4" for v in vals],
        hovertemplate="%{x}: %{y:.3~%}<extra></extra>", name="held-out error"))
    # the values as a text trace above the bars (bar text made plotly.js log NaN transforms)
    fig.add_trace(go.Scatter(x=labels, y=ys, mode="text", text=[fmt_objective(k, v) if v is not None else "not scored"
                                                               for k, v in zip(keys, vals)],
                             textposition="top center", hoverinfo="skip", name="values"))
    ins = finite_or_none(obj.get("e2e_mean"))
    fin = [v for v in vals if v is not None] + ([ins] if ins is not None else [])
    _layout(fig, f"Program #{rec['id']}: held-out error per regime (red: the worst, what the run ranks on)", "",
            "relative error", pct_y=True, height=340)
    fig.update_yaxes(range=[0, 1.2 * max(fin)] if fin else None)
    fig.update_xaxes(type="category")  # _layout sets a linear axis: the regimes are names
    if ins is not None:
        fig.add_hline(y=ins, line=dict(color="#666", dash="dot", width=1.2),
                      annotation=dict(text=f"in-sample mean E2E {pct(ins)}", font=dict(size=11, color="#555")),
                      annotation_position="top left")
    fig.update_layout(showlegend=False, margin=dict(b=50))
    return fig
