"""`evolve report`: ONE self-contained HTML page over the archive, readable offline.

    report_html(archive, "report.html", run=run, baselines={"blackbox": blackbox_eval})

The plots are Plotly figures (evolve.views.plots); plotly.js, which the plotly Python package
ships, is inlined once in the page head, so the file fetches nothing from anywhere and can
be mailed or archived as is.
"""
from __future__ import annotations

import html
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import plotly.io as pio
from plotly.offline import get_plotlyjs

from evaluator.objectives import BY_NAME, HELDOUT, ORDER
from evolve.views.format import (BASELINE_PREFIX, FAILURE_COLUMNS, baselines_map, cache_cells, const_names,
                                 failure_cells, fmt_err, fmt_missing, fmt_num, go_cap_status, mean, objectives_of,
                                 rows_of)
from evolve.views.plots import pareto_figure, progress_figure, stage_errors_figure, ttft_itl_figure
from evolve.views.components_view import components_figure
from evolve.views.holdout_table import holdout_summary, split_errors
from evolve.views.tables import frontier_table, search_frontier, shown_error_keys

PLOT_CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["sendDataToCloud"]}

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1280px;color:#222;
padding:0 16px;line-height:1.4}
h1{font-size:22px;margin-bottom:4px} h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
.muted{color:#666;font-size:13px}
.plots{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:16px}
@media (max-width:1100px){.plots{grid-template-columns:minmax(0,1fr)}}
.plot{background:#fff;border:1px solid #e3e3e3;border-radius:4px;min-width:0;margin:8px 0}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{padding:4px 8px;border-bottom:1px solid #eee;text-align:right}
th{background:#f4f4f4;position:sticky;top:0} td.l,th.l{text-align:left} tr.chosen td{background:#fff6d5}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:10px;overflow:auto;font-size:12.5px}
details{margin:4px 0} summary{cursor:pointer} .bad{color:#b00} .ok{color:#070}
"""


def _plot(fig, div_id: str) -> str:
    return ('<div class="plot">' + pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                                               config=PLOT_CONFIG) + "</div>")


def _table_html(rows: list[dict], chosen: int | None) -> str:
    errs = shown_error_keys(rows)
    cols = [("id", "l"), ("run", "l"), ("gen", ""), ("operator", "l"), ("cplx", "")] \
        + [(BY_NAME[k].label if k in HELDOUT else k, "") for k in errs] + [("components", "l")]
    h = ["<table><thead><tr>" + "".join(f'<th class="{c}">{n}</th>' for n, c in cols) + "</tr></thead><tbody>"]
    for r in rows:
        cls = ' class="chosen"' if r["id"] == chosen else ""
        cells = [f'<a href="#p{r["id"]}">#{r["id"]}</a>', html.escape(str(r.get("run") or "")),
                 fmt_num(r.get("generation")), html.escape(str(r.get("operator") or "")), fmt_num(r.get("complexity"))]
        cells += [fmt_err(r.get(k)) for k in errs]
        cells.append(html.escape(", ".join(r.get("components") or [])))
        h.append(f"<tr{cls}>" + "".join(f'<td class="{c}">{v}</td>' for v, (_, c) in zip(cells, cols)) + "</tr>")
    h.append("</tbody></table>")
    return "".join(h)


def _baseline_table(baselines: dict[str, Any]) -> str:
    brow = []
    for name, b in baselines.items():
        obj, rows = objectives_of(b), rows_of(b)
        vals = {k: obj.get(k) for k in ORDER}
        for k, m in (("e2e_mean", "e2e_err"), ("ttft_mean", "ttft_err"), ("itl_mean", "itl_err")):
            if vals[k] is None:
                vals[k] = mean(r.get(m) for r in rows)
        if vals["e2e_worst"] is None and rows:
            vals["e2e_worst"] = max((r.get("e2e_err") or 0.0) for r in rows)
        brow.append(f'<tr><td class="l">{html.escape(name)}</td><td>{fmt_num(vals["complexity"])}</td>'
                    + "".join(f"<td>{fmt_err(vals[k])}</td>" for k in
                              ("e2e_mean", "e2e_worst", "ttft_mean", "itl_mean", "step_mape")) + "</tr>")
    return ('<p class="muted">baselines (same evaluator)</p><table><tr><th class="l">baseline</th><th>cplx</th>'
            "<th>e2e_mean</th><th>e2e_worst</th><th>ttft_mean</th><th>itl_mean</th><th>step_mape</th></tr>"
            + "".join(brow) + "</table>")


def _program_html(rec: dict, baselines: dict[str, Any]) -> str:
    ev = rec.get("evaluation") or {}
    cap = go_cap_status(rec)
    parts = [f'<h2 id="p{rec["id"]}">Program #{rec["id"]}</h2>',
             f'<p class="muted">run {html.escape(str(rec["run_id"]))} · generation {rec["generation"]} · operator '
             f'{html.escape(str(rec["operator"]))}'
             + (f' · LLM {html.escape(rec["llm_model"])}' if rec.get("llm_model") else "")
             + f' · parents {", ".join("#" + str(p) for p in rec["parent_ids"]) or "none"}'
             + f' · complexity {rec.get("complexity")} ({rec.get("n_ops")} ops, {rec.get("n_cond")} cond, '
             f'{rec.get("n_consts")} consts) · Go cap: '
             + ('<span class="ok">fits</span>' if cap is None else f'<span class="bad">{html.escape(cap)}</span>')
             + "</p>",
             f"<pre>{html.escape(rec['source'])}</pre>"]
    consts = ev.get("constants") or {}
    if consts:
        names = const_names(rec["source"])
        width = max(len(v) for v in consts.values())
        hdr = "".join(f"<th>{html.escape(names[j] if j < len(names) else f'c{j}')}</th>" for j in range(width))
        body = "".join(f'<tr><td class="l">{html.escape(m)}</td>' + "".join(f"<td>{fmt_missing(v, lambda x: f'{x:.6g}')}</td>" for v in vals) + "</tr>"
                       for m, vals in sorted(consts.items()))
        parts.append(f'<p class="muted">fitted constants per model</p><table><tr><th class="l">model</th>{hdr}</tr>'
                     f"{body}</table>")
    rows = ev.get("rows") or []
    if rows:
        hdr = "".join(f"<th>{c}</th>" for c in ("stage", "rate", "E2E err", "TTFT err", "ITL err", "hit rate",
                                                 "always-hit", "evictions", "preemptions", *FAILURE_COLUMNS))
        body = "".join(
            f'<tr><td class="l">{html.escape(str(r.get("experiment")))}</td><td>{fmt_num(r.get("stage"))}</td>'
            f'<td>{fmt_num(r.get("rate"))}</td>'
            + "".join(f"<td>{fmt_err(r.get(k))}</td>" for k in ("e2e_err", "ttft_err", "itl_err"))
            + "".join(f"<td>{html.escape(c)}</td>" for c in (*cache_cells(r), *failure_cells(r))) + "</tr>"
            for r in rows)
        parts.append('<p class="muted">errors and simulated prefix cache per experiment and load stage (held-out '
                     'part; hit rate = prompt tokens served from the cache, always-hit = what an always-hitting '
                     'cache would serve; failed = measured share of the requests that failed, failed sim = '
                     'the share the simulated client timeout aborted, fail err in points)</p>'
                     f'<table class="stages"><tr><th class="l">experiment</th>{hdr}</tr>'
                     f"{body}</table>")
    parts.append(_holdout_html(ev))
    fig = stage_errors_figure(rec, baselines)
    if fig is not None:
        parts.append(_plot(fig, "plot-stage-errors"))
    return "".join(parts)


def _holdout_html(ev: Mapping) -> str:
    """Held-out errors per split kind and per split (nothing for records without them)."""
    if not ev.get("holdout"):
        return ""
    body = "".join(
        f'<tr><td class="l">{html.escape(r["kind"])}</td><td class="l">{html.escape(r["title"])}</td>'
        + "".join(f"<td>{fmt_err(r[k])}</td>" for k in ("e2e", "e2e_worst", "ttft", "itl"))
        + f'<td class="l bad">{html.escape("; ".join(f"{k}: {v}" for k, v in r["errors"].items()))}</td></tr>'
        for r in holdout_summary(ev))
    splits = "".join(f'<tr><td class="l">{html.escape(k)}</td><td>{fmt_err(v)}</td></tr>'
                     for k, v in split_errors(ev).items())
    return ('<p class="muted">held-out errors: constants fitted without the held-out part (the in-sample time '
            'split first, for comparison)</p><table class="holdout"><tr><th class="l">split</th><th class="l"></th>'
            "<th>E2E</th><th>worst E2E</th><th>TTFT</th><th>ITL</th><th class=\"l\">not scored</th></tr>"
            f'{body}</table><table class="holdout-splits"><tr><th class="l">held out</th><th>mean E2E</th></tr>'
            f"{splits}</table>")


def _components_html(components: Mapping[str, Mapping]) -> str:
    """Peak-speed vs measured components per model (evolve.views.components_view)."""
    parts = ["<h2>Peak-speed vs measured components</h2>",
             '<p class="muted">vLLM\'s measured kernels (aiconfigurator tables, H100, vLLM 0.14) summed per '
             "step, stacked, beside the sum of the peak-speed components and the real step cycles measured "
             "near each batch state (log scale). <code>evolve components --data DIR</code> prints the "
             "values.</p>", '<div class="plots">']
    for i, (model, d) in enumerate(sorted(components.items())):
        notes = "; ".join(d.get("notes") or [])
        if d.get("error") or not d.get("grid"):
            parts.append(f'<p class="bad">{html.escape(model)}: {html.escape(str(d.get("error")))}</p>')
            continue
        parts.append(f'<div><p class="muted">{html.escape(model)}: {html.escape(notes)}</p>'
                     + _plot(components_figure(model, d), f"plot-components-{i}") + "</div>")
    return "".join(parts) + "</div>"


def report_html(archive, out_path, run: str | None = None, program_id: int | None = None,
                baselines: Mapping[str, Any] | None = None, components: Mapping[str, Mapping] | None = None) -> str:
    """Write ONE self-contained HTML page; returns its path.

    components: model -> evolve.views.components_view.components_data entry (optional section).

    baselines: name -> Evaluation (or archive record, or list of experiment-stage rows).
    program_id: the program detailed at the bottom (default: `Archive.best_transfer` in scope).
    The stored baseline runs ("baselines-...") are shown as baselines, never as search runs."""
    baselines = baselines_map(baselines)
    searched = lambda r: not str(r.get("run_id")).startswith(BASELINE_PREFIX)  # noqa: E731
    evals = [r for r in archive.evaluations(run, stage="full") if searched(r)]
    valid = [r for r in evals if r.get("eval_valid")]
    front = [r for r in search_frontier(archive, run) if searched(r)]
    front_ids = {r["id"] for r in front}
    if program_id is not None:
        chosen = archive.program(program_id)
    else:
        chosen = archive.best_transfer(run, skip_prefix=BASELINE_PREFIX)
    chosen_id = chosen["id"] if chosen else None
    runs = [r for r in archive.runs() if (run is None and not r["id"].startswith(BASELINE_PREFIX)) or r["id"] == run]

    title = f"StepEvolve report — {run}" if run else "StepEvolve report — all runs"
    run_rows = "".join(
        f'<tr><td class="l">{html.escape(r["id"])}</td><td class="l">{html.escape(r["status"])}</td>'
        f'<td>{r["seed"]}</td><td>{r["n_evaluated"]}</td><td>{fmt_num(r["budget"])}</td>'
        f'<td class="l">{html.escape(str(r["data_fingerprint"] or ""))[:16]}</td>'
        f'<td class="l">{time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created_at"]))}</td></tr>' for r in runs)
    llm = archive.llm_stats(run)
    body = [f"<h1>{html.escape(title)}</h1>",
            f'<p class="muted">generated {time.strftime("%Y-%m-%d %H:%M:%S")} from {html.escape(str(archive.path))} · '
            f"{len(evals)} full evaluations ({len(valid)} valid) · frontier {len(front)} programs · "
            f"LLM calls {llm['calls']} ({llm['prompt_tokens'] + llm['completion_tokens']} tokens, "
            f"${llm['cost_usd']:.4f}). Errors are relative (|pred − meas| / meas) on the held-out part; "
            f"hover a mark for details, drag to zoom, double-click to reset.</p>",
            '<table><tr><th class="l">run</th><th class="l">status</th><th>seed</th><th>evaluated</th><th>budget</th>'
            f'<th class="l">data</th><th class="l">started</th></tr>{run_rows}</table>',
            "<h2>Pareto view</h2>",
            '<div class="plots">' + _plot(pareto_figure(evals, front_ids, baselines, chosen), "plot-pareto")
            + _plot(ttft_itl_figure(evals, front_ids, baselines), "plot-ttft-itl") + "</div>",
            "<h2>Frontier</h2>", _table_html([r for r in frontier_table(archive, run)
                                               if not str(r.get("run")).startswith(BASELINE_PREFIX)], chosen_id)]
    if baselines:
        body.append(_baseline_table(baselines))
    body.append("<h2>Search progress</h2>" + _plot(progress_figure(evals), "plot-progress"))
    if components:
        body.append(_components_html(components))
    if chosen:
        body.append(_program_html(chosen, baselines))
    others = [r for r in front if r["id"] != chosen_id]
    if others:
        body.append("<h2>Frontier sources</h2>")
        for r in others:
            body.append(f'<details id="p{r["id"]}"><summary>#{r["id"]} · complexity {r.get("complexity")} · E2E '
                        f'{fmt_err((r.get("objectives") or {}).get("e2e_mean"))}</summary>'
                        f"<pre>{html.escape(r['source'])}</pre></details>")
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style>"
            f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
            + "\n".join(body) + "</body></html>\n")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return str(out)
