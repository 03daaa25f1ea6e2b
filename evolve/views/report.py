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

from evaluator.coverage import coverage, coverage_lines
from evaluator.served_shapes import usable_check
from evaluator.objectives import BY_NAME, HELDOUT, ORDER, REGIMES, finite_or_none, has_heldout
from evolve.views.format import (BASELINE_PREFIX, FAILURE_COLUMNS, baselines_map, cache_cells, const_names,
                                 failure_cells, fmt_err, fmt_missing, fmt_num, fmt_objective, go_cap_status, mean,
                                 objectives_of, rows_of)
from evolve.views.history import front_hypervolume, ranked_error, worst_regime, worst_regime_key
from evolve.views.plots import (pareto_figure, predicted_measured_figure, progress_figure, regime_figure,
                                stage_errors_figure, ttft_itl_figure)
from evolve.views.components_view import components_figure
from evolve.views.holdout_table import holdout_summary, split_errors, starts_text
from evolve.views.tables import DUPLICATE_RULE, frontier_table, search_frontier, shown_error_keys

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
th,td{padding:4px 8px;border-bottom:1px solid #eee;text-align:right} table.frontier td{white-space:nowrap}
.tw{overflow-x:auto;max-width:100%}
th{background:#f4f4f4;position:sticky;top:0} td.l,th.l{text-align:left} tr.chosen td{background:#fff6d5}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:10px;overflow:auto;font-size:12.5px}
details{margin:4px 0} summary{cursor:pointer} .bad{color:#b00} .ok{color:#070}
#recommended{border:2px solid #f5b301;border-radius:8px;padding:10px 14px;margin:10px 0 4px;background:#fffdf5}
#recommended h2{margin:0 0 6px;border:0;font-size:19px;padding:0}
.recgrid{display:grid;grid-template-columns:minmax(0,1.15fr) minmax(0,1fr);gap:16px;align-items:start}
@media (max-width:900px){.recgrid{grid-template-columns:minmax(0,1fr)}}
.regimes{display:flex;flex-wrap:wrap;gap:6px;margin:4px 0 8px}
.regime{border:1px solid #e3e3e3;border-radius:6px;padding:3px 8px;background:#fff}
.regime .k{font-size:11px;color:#666} .regime .v{font-size:16px;font-weight:600}
.regime.worst{border-color:#d62728} .regime.worst .v{color:#b00}
.regime.ins{border-style:dashed;background:transparent} .regime.ins .v{color:#555;font-weight:500}
.coverage{font-size:12.5px;margin:0;padding-left:0;list-style:none} .coverage li{margin:2px 0}
.coverage b{color:#444} #recommended pre{margin:0;max-height:360px;white-space:pre-wrap;overflow-wrap:anywhere}
"""


def _plot(fig, div_id: str) -> str:
    return ('<div class="plot">' + pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                                               config=PLOT_CONFIG) + "</div>")


def _table_html(rows: list[dict], chosen: int | None) -> str:
    errs = shown_error_keys(rows)
    cols = [("id", "l"), ("twins", ""), ("run", "l"), ("gen", ""), ("operator", "l"), ("cplx", "")] \
        + [(BY_NAME[k].label if k in REGIMES else k, "") for k in errs] + [("components", "l")]
    h = ['<div class="tw"><table class="frontier"><thead><tr>' + "".join(f'<th class="{c}">{n}</th>' for n, c in cols)
         + "</tr></thead><tbody>"]
    for r in rows:
        cls = ' class="chosen"' if r["id"] == chosen else ""
        twins = r.get("duplicates") or []
        cells = [("★ " if r.get("recommended") else "") + f'<a href="#p{r["id"]}">#{r["id"]}</a>',
                 f'<span title="{html.escape(", ".join("#" + str(i) for i in twins))}">+{len(twins)}</span>'
                 if twins else "", html.escape(str(r.get("run") or "")),
                 fmt_num(r.get("generation")), html.escape(str(r.get("operator") or "")), fmt_num(r.get("complexity"))]
        cells += [fmt_objective(k, r.get(k)) for k in errs]
        cells.append(html.escape(", ".join(r.get("components") or [])))
        h.append(f"<tr{cls}>" + "".join(f'<td class="{c}">{v}</td>' for v, (_, c) in zip(cells, cols)) + "</tr>")
    h.append("</tbody></table></div>")
    if any(r.get("duplicates") for r in rows):
        h.append(f'<p class="muted">twins +N: {html.escape(DUPLICATE_RULE)} (hover for their ids; '
                 "<code>evolve frontier --all</code> lists them).</p>")
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
    figs = [(regime_figure(rec), "plot-regimes"), (predicted_measured_figure(rec), "plot-pred-meas")]
    figs = [_plot(f, i) for f, i in figs if f is not None]
    if figs:
        parts.append('<div class="plots">' + "".join(figs) + "</div>")
    fig = stage_errors_figure(rec, baselines)
    if fig is not None:
        parts.append(_plot(fig, "plot-stage-errors"))
    return "".join(parts)


def regime_cells(objectives: Mapping) -> list[tuple[str, str, bool]]:
    """(label, error, is the worst) per held-out regime the program was scored on, in
    `REGIMES` order, as `show` prints them."""
    worst = worst_regime(objectives)
    return [(BY_NAME[k].label, fmt_objective(k, objectives.get(k)), BY_NAME[k].label == worst)
            for k in REGIMES if k in objectives]


def coverage_items(cov: Mapping | None, regimes: bool = True) -> list[tuple[str, str]]:
    """(heading, text) of each coverage line (`evaluator.coverage.coverage_lines`, the text
    `show` prints); regimes=False leaves out the per-regime line where they are shown beside it."""
    if not cov:
        return []
    out = []
    for line in coverage_lines(cov):
        head, _, text = line.partition(": ")
        if regimes or not head.startswith("Held-out error"):
            out.append((head, text))
    return out


def _recommended_html(rec: Mapping | None, run: str | None, cov: Mapping | None, cov_error: str | None,
                      detailed_id: int | None) -> str:
    """The report's first screen: the program to take, its error per held-out regime, its
    coverage statement and its source, before any plot."""
    if rec is None:
        return ('<section id="recommended"><h2>No recommended program yet</h2><p class="muted">no valid full '
                "evaluation in this scope.</p></section>")
    obj = rec.get("objectives") or {}
    held = has_heldout(obj)
    fs = (rec.get("evaluation") or {}).get("fit_starts") or {}
    weighed = fs.get("starts", 1) > 1 and fs.get("spread")
    why = ("closest to the run’s best error in every held-out regime (its largest gap is least"
           + (f", at its worst of {fs['starts']} fit starts" if weighed else "")
           + ") among programs whose every constant the data pins down"
           if held else "the lowest in-sample loss (this run scored no held-out splits)")
    regimes = "".join(f'<div class="regime{" worst" if w else ""}"><div class="k">{html.escape(lab)}'
                      f'{" (worst)" if w else ""}</div><div class="v">{v}</div></div>'
                      for lab, v, w in regime_cells(obj))
    regimes += (f'<div class="regime ins" title="the time split: a diagnostic, not what the run ranks on">'
                f'<div class="k">in-sample E2E</div><div class="v">{fmt_err(obj.get("e2e_mean"))}'
                f'</div></div>')
    cap = go_cap_status(rec)
    items = coverage_items(cov, regimes=not held)
    cov_html = ('<ul class="coverage">' + "".join(f"<li><b>{html.escape(h)}:</b> {html.escape(t)}</li>"
                                                  for h, t in items) + "</ul>") if items else \
        f'<p class="muted">coverage: {html.escape(cov_error or "the run’s data was not given")}</p>'
    scope = f"run {html.escape(str(rec.get('run_id')))}" if run else f"all runs (#{rec['id']} is from run " \
        f"{html.escape(str(rec.get('run_id')))})"
    more = (f' · <a href="#p{rec["id"]}">details below</a>' if detailed_id == rec["id"] else
            f' · the details below are of <a href="#p{detailed_id}">#{detailed_id}</a>'
            if detailed_id is not None else "")
    return (f'<section id="recommended"><h2>★ Recommended: program #{rec["id"]}</h2>'
            f'<p class="muted">{scope} · {why} · complexity {fmt_num(rec.get("complexity"))} · Go cap: '
            + ('<span class="ok">fits</span>' if cap is None else f'<span class="bad">{html.escape(cap)}</span>')
            + f' · <code>evolve emit-go {rec["id"]}</code>{more}</p>'
            f'<div class="recgrid"><div><div class="muted">held-out error per regime '
            f'(constants fitted without the held-out part)</div><div class="regimes" id="rec-regimes">{regimes}</div>'
            + (f'<div class="muted" id="rec-starts">{html.escape(starts_text(fs))}</div>' if weighed else "")
            + f'<div class="muted">coverage: where it holds</div><div id="rec-coverage">{cov_html}</div></div>'
            f'<div><pre id="rec-source">{html.escape(rec["source"])}</pre></div></div></section>')


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
                baselines: Mapping[str, Any] | None = None, components: Mapping[str, Mapping] | None = None,
                gt=None) -> str:
    """Write ONE self-contained HTML page; returns its path.

    It opens with the recommended program (`Archive.best_transfer` in scope): its error per
    held-out regime, its coverage statement (from `gt`, the run's ground truth, when given) and
    its source, so the answer is on the first screen; the plots and tables follow.

    components: model -> evolve.views.components_view.components_data entry (optional section).
    baselines: name -> Evaluation (or archive record, or list of experiment-stage rows).
    program_id: the program detailed further down (default: the recommended one).
    The stored baseline runs ("baselines-...") are shown as baselines, never as search runs."""
    baselines = baselines_map(baselines)
    searched = lambda r: not str(r.get("run_id")).startswith(BASELINE_PREFIX)  # noqa: E731
    evals = [r for r in archive.evaluations(run, stage="full") if searched(r)]
    valid = [r for r in evals if r.get("eval_valid")]
    front = [r for r in search_frontier(archive, run) if searched(r)]
    front_ids = {r["id"] for r in front}
    usable = usable_check(gt) if gt is not None else None  # physical on the shipped configs' shapes
    recommended = archive.best_transfer(run, skip_prefix=BASELINE_PREFIX, usable=usable)
    chosen = archive.program(program_id) if program_id is not None else recommended
    chosen_id = chosen["id"] if chosen else None
    rec_id = recommended["id"] if recommended else None
    runs = [r for r in archive.runs() if (run is None and not r["id"].startswith(BASELINE_PREFIX)) or r["id"] == run]
    cov, cov_error = None, None
    if recommended is not None and gt is not None:
        try:
            cov = coverage(gt, recommended.get("objectives"), recommended)
        except Exception as e:  # noqa: BLE001 - a statement that cannot be made is said, the page still written
            cov_error = f"cannot be computed ({type(e).__name__}: {e})"

    title = f"StepEvolve report — {run}" if run else "StepEvolve report — all runs"
    run_rows = "".join(
        f'<tr><td class="l">{html.escape(r["id"])}</td><td class="l">{html.escape(r["status"])}</td>'
        f'<td>{r["seed"]}</td><td>{r["n_evaluated"]}</td><td>{fmt_num(r["budget"])}</td>'
        f'<td class="l">{html.escape(str(r["data_fingerprint"] or ""))[:16]}</td>'
        f'<td class="l">{time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created_at"]))}</td></tr>' for r in runs)
    llm = archive.llm_stats(run)
    hv = front_hypervolume(valid)
    ranked = [(e, r) for r in valid if (e := ranked_error(r.get("objectives"))) is not None]
    best, best_rec = min(ranked, key=lambda t: t[0], default=(None, None))
    best_key = worst_regime_key((best_rec or {}).get("objectives")) or "e2e_mean"
    body = [f"<h1>{html.escape(title)}</h1>",
            f'<p class="muted">generated {time.strftime("%Y-%m-%d %H:%M:%S")} from {html.escape(str(archive.path))} · '
            f"{len(evals)} full evaluations ({len(valid)} valid) · frontier {len(front)} programs · "
            f"hypervolume {hv:.3f} · LLM calls {llm['calls']} ({llm['prompt_tokens'] + llm['completion_tokens']} "
            f"tokens, ${llm['cost_usd']:.4f}). Errors are relative (|pred − meas| / meas) on data the constants "
            "did not see.</p>",
            _recommended_html(recommended, run, cov, cov_error, chosen_id),
            '<table><tr><th class="l">run</th><th class="l">status</th><th>seed</th><th>evaluated</th><th>budget</th>'
            f'<th class="l">data</th><th class="l">started</th></tr>{run_rows}</table>',
            "<h2>Pareto view</h2>",
            '<p class="muted">Hover a mark for details, drag to zoom, double-click to reset. The axes fit the '
            "candidates; the baselines are the dotted reference lines.</p>",
            '<div class="plots">' + _plot(pareto_figure(evals, front_ids, baselines, chosen, rec_id), "plot-pareto")
            + _plot(ttft_itl_figure(evals, front_ids, baselines), "plot-ttft-itl") + "</div>",
            "<h2>Frontier</h2>", _table_html([r for r in frontier_table(archive, run, usable=usable)
                                               if not str(r.get("run")).startswith(BASELINE_PREFIX)], chosen_id)]
    if baselines:
        body.append(_baseline_table(baselines))
    body.append("<h2>Search progress</h2>"
                f'<p class="muted">best error so far {fmt_objective(best_key, best)} (what the search ranks on: '
                f"the worst held-out regime, in-sample E2E for runs without held-out splits); hypervolume {hv:.3f}, "
                "the figure the run summary prints.</p>" + _plot(progress_figure(evals), "plot-progress"))
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
