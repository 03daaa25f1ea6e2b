"""Peak-speed vs measured components on a grid of batch states (`evolve components`, `report`,
`show`): what each physics says a step costs, beside the real step cycles measured near it.

The grid and its values come from evaluator.measured.component_grid; this module only lays
them out (a rich table, a Plotly figure, plain JSON) and says how each model's kernel tables
were obtained (Experiment.kernel_notes, e.g. llama-2-7b's scaled head layout).
"""
from __future__ import annotations

import html
import math
from collections.abc import Mapping

import plotly.graph_objects as go
from rich.table import Table

from evaluator.data import DataError, GroundTruth
from evaluator.measured import MEASURED_COMPONENTS, PEAK_TIME_COMPONENTS, component_grid
from evolve.views.format import MISSING

__all__ = ["components_data", "components_table", "components_figure", "kernel_notes"]

_SHORT = {"t_prefill_gemm": "pf gemm", "t_prefill_attn": "pf attn", "t_decode_gemm": "dec gemm",
          "t_decode_kv": "dec kv", "t_weights": "weights", "t_allreduce": "allred", "t_lm_head": "lm head",
          "t_gemm_measured": "gemm", "t_decode_attn_measured": "dec attn", "t_prefill_attn_measured": "pf attn",
          "t_allreduce_measured": "allred", "t_moe_measured": "moe", "t_step_measured": "STEP"}
_STACK = MEASURED_COMPONENTS[:-1]  # the parts of t_step_measured


def kernel_notes(gt: GroundTruth) -> dict[str, list[str]]:
    """model -> how its kernel tables were obtained (or why there are none)."""
    out: dict[str, list[str]] = {}
    for e in gt.experiments:
        if e.model in out:
            continue
        if e.kernels is None:
            out[e.model] = [e.kernel_missing or "no kernel tables"]
        else:
            out[e.model] = list(e.kernel_notes) or [f"all kernel layouts measured (TP {e.tp})"]
    return out


def components_data(gt: GroundTruth, models: list[str] | None = None) -> dict[str, dict]:
    """model -> {"notes", "grid" (rows of component_grid, [] without tables), "error"}."""
    notes = kernel_notes(gt)
    out = {}
    for m in models or gt.models:
        if m not in notes:
            raise DataError(f"model {m!r} not in the ground truth (have {', '.join(gt.models)})")
        try:
            out[m] = {"notes": notes[m], "grid": component_grid(gt, m), "error": None}
        except DataError as e:
            out[m] = {"notes": notes[m], "grid": [], "error": str(e)}
    return out


def _us(v) -> str:
    if v is None or not math.isfinite(v):
        return MISSING
    return f"{v / 1000:.2f}" if v >= 1000 else f"{v / 1000:.3f}"


def components_table(model: str, data: Mapping) -> Table:
    """One row per grid point: peak-speed components, measured components, nearby real cycles (ms)."""
    t = Table(title=f"{model}: peak-speed vs measured components (ms) on a grid of batch states",
              caption="; ".join(data["notes"]))
    for c in ("D", "ctx", "P"):
        t.add_column(c, justify="right")
    for c in PEAK_TIME_COMPONENTS:
        t.add_column(f"peak\n{_SHORT[c]}", justify="right", style="dim")
    for c in MEASURED_COMPONENTS:
        t.add_column(f"meas\n{_SHORT[c]}", justify="right", style="bold" if c == "t_step_measured" else None)
    t.add_column("real cycle\nmedian (n)", justify="right")
    for r in data["grid"]:
        cyc = MISSING if not r["measured_cycle_n"] else f"{_us(r['measured_cycle_median_us'])} ({r['measured_cycle_n']})"
        t.add_row(str(r["decodes"]), str(r["context"]), str(r["prefill_chunk"]),
                  *(_us(r[c]) for c in PEAK_TIME_COMPONENTS), *(_us(r[c]) for c in MEASURED_COMPONENTS), cyc)
    return t


def components_figure(model: str, data: Mapping) -> go.Figure:
    """Measured components stacked per grid point, the sum of the peak-speed ones and the real
    step cycles measured near each point, in ms."""
    rows = data["grid"]
    x = [f"D{r['decodes']} c{r['context']} P{r['prefill_chunk']}" for r in rows]
    fig = go.Figure()
    for c in _STACK:
        fig.add_bar(x=x, y=[r[c] / 1000 for r in rows], name=f"measured {_SHORT[c]}")
    fig.add_scatter(x=x, y=[sum(r[c] for c in PEAK_TIME_COMPONENTS) / 1000 for r in rows], mode="markers",
                    name="sum of peak-speed components", marker=dict(symbol="line-ew-open", size=14, color="#333"))
    fig.add_scatter(x=x, y=[None if r["measured_cycle_median_us"] is None else r["measured_cycle_median_us"] / 1000
                            for r in rows], mode="markers", name="real step cycle nearby (median)",
                    marker=dict(symbol="diamond", size=8, color="#d62728"),
                    text=[f"n = {r['measured_cycle_n']}" for r in rows])
    fig.update_layout(barmode="stack", template="plotly_white", height=460,
                      title=dict(text=html.escape(f"{model}: measured vs peak-speed components"), x=0.5),
                      margin=dict(l=70, r=20, t=50, b=150),
                      legend=dict(orientation="h", yanchor="top", y=-0.35, x=0, font=dict(size=11)))
    fig.update_yaxes(title_text="ms per step", type="log")
    fig.update_xaxes(title_text="decodes D, context c (tokens per request), prefill chunk P", tickangle=-60,
                     tickfont=dict(size=9))
    return fig
