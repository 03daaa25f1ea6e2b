"""Terminal views of the archive (`evolve frontier`, `evolve show`), drawn with rich.

    rows = frontier_table(archive, run)          # plain dicts, sorted by complexity
    render_frontier(rows, console)
    show_program(archive, 42, console, baseline_rows=blackbox_eval.rows)
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from evaluator.objectives import BY_NAME, HELDOUT, REGIMES, REGIMES_OPTIONAL, finite_or_none, ranked
from evaluator.units import constant_units as program_units
from evolve.pareto import pareto_front
from evaluator.objectives import FAILURE
from evolve.views.holdout_table import starts_table
from evolve.views.format import (BASELINE_PREFIX, fmt_objective, FAILURE_COLUMNS, cache_cells, complexity_of, const_names, failure_cells,
                                 fmt_err, fmt_missing, fmt_ms, fmt_num, fmt_pts, fmt_rate, fmt_us, go_cap_status, row_key,
                                 rows_of)

ERROR_KEYS = (*HELDOUT, *REGIMES_OPTIONAL, "e2e_mean", "e2e_worst", "ttft_mean", "itl_mean", "step_mape")  # held-out first
CACHE_COLUMNS = ("hit rate", "always-hit", "evictions", "preemptions")  # headers of format.cache_cells


def shown_error_keys(rows) -> list[str]:
    """ERROR_KEYS of a frontier table, without held-out columns no row has (older runs)."""
    return [k for k in ERROR_KEYS if k not in REGIMES or any(r.get(k) is not None for r in rows)]


def search_frontier(archive, run: str | None = None) -> list[dict]:
    """Frontier records of `run`; over all runs, the Pareto front of the search runs alone (a
    stored baseline program would otherwise dominate programs and hide them)."""
    if run is not None:
        return archive.frontier(run)
    items = [(r["id"], r.get("objectives") or {}) for r in archive.evaluations(None, valid_only=True)
             if not str(r["run_id"]).startswith(BASELINE_PREFIX)]  # ranked together in one vector order
    recs = [archive.program(pid) for pid, _ in pareto_front(items, key=lambda it: it[1])]
    return sorted(recs, key=lambda r: (ranked(complexity_of(r)), ranked(r["objectives"].get("e2e_mean")), r["id"]))


DUPLICATE_REL = 1e-3  # behavioural duplicates: every stored figure within 0.1% relative
PREDICTIONS = ("pred_e2e_s", "pred_ttft_s", "pred_itl_s", "pred_fail")  # per experiment-stage row
DUPLICATE_RULE = ("rows collapse programs that behave alike: every stored objective but complexity and every "
                  "per-stage prediction (E2E, TTFT, per-token time, failed share) within 0.1% relative")


def _close(a, b, rel: float = DUPLICATE_REL) -> bool:
    """Both missing/non-finite, or both finite and within `rel` of the larger magnitude."""
    x, y = finite_or_none(a), finite_or_none(b)
    if x is None or y is None:
        return x is None and y is None
    return abs(x - y) <= rel * max(abs(x), abs(y)) or x == y


def same_behaviour(a: Mapping, b: Mapping, rel: float = DUPLICATE_REL) -> bool:
    """Whether two archive records are behavioural duplicates: every stored objective except
    complexity (the one a simpler twin is better on) and every per-stage prediction agree within
    `rel` relative. Different programs often differ only in a constant the fit absorbs; a reader
    wants one row for them, not ten."""
    oa, ob = a.get("objectives") or {}, b.get("objectives") or {}
    if not all(_close(oa.get(k), ob.get(k), rel) for k in (set(oa) | set(ob)) - {"complexity"}):
        return False
    ra = {row_key(r): r for r in rows_of(a)}
    rb = {row_key(r): r for r in rows_of(b)}
    if set(ra) != set(rb):
        return False
    return all(_close(ra[k].get(p), rb[k].get(p), rel) for k in ra for p in PREDICTIONS)


def duplicate_groups(records: Sequence[Mapping], prefer: int | None = None) -> list[list[Mapping]]:
    """Records grouped by `same_behaviour`, each group led by the row a table shows: the
    recommended program (`prefer`) if the group has it, else the simplest (lowest complexity,
    then lowest id). Greedy against each group's leader, so a group never chains drifting twins."""
    order = sorted(records, key=lambda r: (r["id"] != prefer, ranked(complexity_of(r)), r["id"]))
    groups: list[list[Mapping]] = []
    for r in order:
        for g in groups:
            if same_behaviour(g[0], r):
                g.append(r)
                break
        else:
            groups.append([r])
    return groups


def frontier_table(archive, run: str | None = None, collapse: bool = True, usable=None) -> list[dict]:
    """One plain dict per frontier program, sorted by complexity (then e2e_mean); `recommended`
    marks the program the run hands over (`Archive.best_transfer`: the least given up in any
    held-out regime against the best reached there, among programs whose every constant the
    data pins down).

    collapse: behavioural duplicates (`same_behaviour`: every stored objective but complexity and
    every per-stage prediction within 0.1% relative) become one row, the recommended or simplest
    program, with the others' ids in "duplicates"; False (`frontier --all`) keeps every program,
    a collapsed one naming its row's id in "duplicate_of". usable: as `Archive.best_transfer`'s
    (the report passes the served-shapes check; `evolve frontier` loads no data and does not: for
    a finished run both read the program the run fixed, `Archive.set_recommended`)."""
    best = archive.best_transfer(run, skip_prefix=BASELINE_PREFIX, usable=usable)
    best_id = best["id"] if best is not None else None
    recs = search_frontier(archive, run)
    leader_of: dict[int, int] = {}
    dups: dict[int, list[int]] = {}
    for g in duplicate_groups(recs, best_id):
        dups[g[0]["id"]] = sorted(r["id"] for r in g[1:])
        leader_of.update({r["id"]: g[0]["id"] for r in g[1:]})
    out = []
    for r in recs:
        if collapse and r["id"] in leader_of:
            continue
        obj = r.get("objectives") or {}
        cx = finite_or_none(obj.get("complexity"))
        d = {"id": r["id"], "complexity": int(cx) if cx is not None and cx == int(cx) else
             (cx if cx is not None else r.get("complexity"))}
        for k in ERROR_KEYS:
            d[k] = obj.get(k)
        d.update(components=list(r.get("components") or []), run=r.get("run_id"), generation=r.get("generation"),
                 operator=r.get("operator"), llm_model=r.get("llm_model"), recommended=r["id"] == best_id,
                 duplicates=dups.get(r["id"], []), n_duplicates=len(dups.get(r["id"], [])),
                 duplicate_of=leader_of.get(r["id"]))
        out.append(d)

    def key(d):
        e = finite_or_none(d["e2e_mean"])
        return (d["complexity"] if d["complexity"] is not None else 10**9, e if e is not None else math.inf, d["id"])
    return sorted(out, key=key)


# rich (and Pygments, for the source) is imported by the functions that draw: `evolve frontier
# --json` imports this module and draws nothing.

def render_frontier(rows: Sequence[Mapping], console, title: str = "Pareto frontier") -> None:
    """The frontier as one rich table; a "twins" column counts the behavioural duplicates a row
    stands for (the caption states the rule; `frontier --all` lists them)."""
    from rich.table import Table
    if not rows:
        console.print("[yellow]no evaluated programs yet[/yellow]")
        return
    collapsed = any(r.get("duplicates") for r in rows) and not any(r.get("duplicate_of") for r in rows)
    caption = (f"twins +N: {DUPLICATE_RULE}; `evolve frontier --all` lists every program" if collapsed else
               "every frontier program (\"= #N\": behaves as #N, every figure within 0.1%)"
               if any(r.get("duplicate_of") for r in rows) else None)
    runs = {str(r.get("run") or "") for r in rows}
    one_run = len(runs) == 1  # the run goes into the title, not a column repeating it on every row
    t = Table(title=f"{title} of run {next(iter(runs))}" if one_run and runs != {""} else title, header_style="bold",
              caption=caption, caption_justify="left")
    t.add_column("id", justify="right")
    listed = any(r.get("duplicate_of") for r in rows)
    if collapsed or listed:
        t.add_column("twins" if collapsed else "same as", justify="right")
    t.add_column("cplx", justify="right")
    keys = shown_error_keys(rows)
    for k in keys:
        t.add_column(BY_NAME[k].label if k in REGIMES else k, justify="right")
    t.add_column("gen", justify="right")
    if not one_run:
        t.add_column("run")
    t.add_column("components")
    for r in rows:
        twins = (f"+{len(r['duplicates'])}" if r.get("duplicates") else "") if collapsed else \
            (f"= #{r['duplicate_of']}" if r.get("duplicate_of") else "")
        t.add_row(("★ " if r.get("recommended") else "") + str(r["id"]), *([twins] if collapsed or listed else []),
                  fmt_num(r.get("complexity")),
                  *(fmt_objective(k, r.get(k)) for k in keys), fmt_num(r.get("generation")),
                  *([] if one_run else [str(r.get("run") or "")]), ", ".join(r.get("components") or []))
    console.print(t)
    rec = next((r for r in rows if r.get("recommended")), None)
    if rec is not None:
        console.print(f"★ #{rec['id']} is recommended: its worst held-out regime is the lowest among programs "
                      "whose every constant the data pins down and whose physical rules hold on the served "
                      "models' shapes (fixed when its run finished; for a run that did not finish, this command, "
                      "loading no data, skips the served-shapes check that `evolve show`, the report and the UI make)")


def identifiability_lines(ident: dict) -> list[str]:
    """What `show` says about constants the fitting states do not pin down (evaluator.identify):
    one line per model with such constants, or one line saying every constant is pinned."""
    if not ident:
        return []
    bad = [(k, d) for k, d in sorted(ident.items()) if d.get("unpinned")]
    if not bad:
        return ["identifiability: every constant is pinned by the data, for every model"]
    return [f"[yellow]identifiability[/yellow] {k}: {d.get('summary', '')}" for k, d in bad]


def constant_units(source: str) -> dict[str, str]:
    """Each constant's unit (`evaluator.units`); empty for a source that does not parse or
    whose units cannot add up (its rejection reason says so)."""
    from evaluator.program import ProgramError, parse_program
    try:
        program = parse_program(source)
    except ProgramError:
        return {}
    return program_units(program)


def show_program(archive, program_id: int, console, baseline_rows=None, usable=None) -> dict | None:
    """Print one program: source, fitted constants per model, errors per experiment-stage
    (next to the baseline's, if given), step metrics, lineage and the Go cap check.
    usable: `Archive.best_transfer`'s check of the served shapes (the caller holds the data)."""
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
    best = archive.best_transfer(rec["run_id"], usable=usable)
    if best is not None and best["id"] == rec["id"]:
        regimes = ", ".join(f"{BY_NAME[k].label} {fmt_objective(k, v)}" for k, v in (rec.get("objectives") or {}).items()
                            if k in REGIMES)
        console.print(f"[bold]★ recommended for run {rec['run_id']}[/bold]: closest to the run's best error "
                      f"in every held-out regime (its largest gap is least, at its worst fit start where the "
                      f"run weighed them), among "
                      f"programs whose every constant the data pins down"
                      f"{' and whose physical rules hold on the served shapes' if usable else ''} ({regimes})")
    fs = ev.get("fit_starts") or {}
    if fs.get("starts", 1) > 1 and fs.get("spread"):  # weighed by the run's hand-over (evolve.handover)
        console.print(starts_table(fs["spread"], fs["starts"]))
    console.print(Syntax(rec["source"], "python", line_numbers=False))
    consts = ev.get("constants") or {}
    if consts:
        names = const_names(rec["source"])
        t = Table(title="fitted constants", header_style="bold")
        t.add_column("model")
        width = max(len(v) for v in consts.values())
        for j in range(width):
            t.add_column(names[j] if j < len(names) else f"c{j}", justify="right")
        for model, vals in sorted(consts.items()):
            t.add_row(model, *(fmt_missing(v, lambda x: f"{x:.6g}") for v in vals))
        units = constant_units(rec["source"])
        if units:  # what each constant is, whatever its value (evaluator.units)
            t.add_row("[dim]unit[/dim]", *(f"[dim]{units.get(n, '—')}[/dim]" for n in names[:width]))
        console.print(t)
    for line in identifiability_lines(ev.get("identifiability") or {}):
        console.print(line)
    if ev:
        obj = ev.get("objectives") or {}
        line = "  ".join(f"{k} {fmt_objective(k, obj.get(k)) if k != 'complexity' else fmt_num(obj.get(k))}"
                         for k in (*ERROR_KEYS, "complexity"))
        if FAILURE in obj:  # data with failed requests: mean error of the failed fraction
            x = finite_or_none(obj[FAILURE])
            line += f"  {FAILURE} {fmt_pts(None if x is None else 100 * x)}"
        console.print(f"[bold]{ev.get('stage', '')} evaluation[/bold] " + ("" if ev.get("valid") else
                      f"[red]INVALID: {ev.get('error')}[/red] ") + line)
        race = ev.get("race") or {}
        if race.get("why"):  # a screen that stopped replaying (evaluator.screen_race)
            console.print(f"[yellow]screen {race['why']}; the rows below are those models' only "
                          f"(`evolve run --whole-screens` scores every experiment of every screen)[/yellow]",
                          markup=True)
    rows = ev.get("rows") or []
    base = {row_key(r): r for r in rows_of(baseline_rows)}
    if rows:
        t = Table(title="errors per experiment and stage (held-out part)", header_style="bold")
        for c in ("experiment", "stage", "rate"):
            t.add_column(c, justify="right" if c != "experiment" else "left")
        for m in ("e2e", "ttft", "itl"):
            t.add_column(f"{m} err", justify="right")
            if base:
                t.add_column(f"{m} base", justify="right", style="dim")
        for c in CACHE_COLUMNS:  # the simulated prefix cache of the same requests
            t.add_column(c, justify="right", style="dim" if c == "always-hit" else None)
        for c in FAILURE_COLUMNS:  # measured vs simulated failures (client timeout)
            t.add_column(c, justify="right")
        for r in rows:
            b = base.get(row_key(r), {})
            cells = [str(r.get("experiment")), str(r.get("stage")), fmt_num(r.get("rate"))]
            for m in ("e2e", "ttft", "itl"):
                cells.append(fmt_err(r.get(f"{m}_err")))
                if base:
                    cells.append(fmt_err(b.get(f"{m}_err")) if b else "—")
            t.add_row(*cells, *cache_cells(r), *failure_cells(r))
        console.print(t)
    steps = ev.get("steps") or {}
    if steps:
        t = Table(title="per-step scoring", header_style="bold")
        for c in ("experiment", "step MAPE", "spearman(duration)", "n"):
            t.add_column(c, justify="left" if c == "experiment" else "right")
        for k, v in sorted(steps.items()):
            t.add_row(k, fmt_err(v.get("step_mape")), fmt_num(v.get("spearman_duration")), fmt_num(v.get("n")))
        console.print(t)
    lin = archive.lineage(program_id)
    if len(lin) > 1 or rec.get("parent_ids"):
        t = Table(title="lineage", header_style="bold")
        for c in ("depth", "id", "operator", "llm", "gen", "cplx", "e2e_mean", "parents"):
            t.add_column(c, justify="right" if c not in ("operator", "llm", "parents") else "left")
        for a in lin:
            t.add_row(str(a["depth"]), str(a["id"]), a["operator"], a.get("llm_model") or "", fmt_num(a["generation"]),
                      fmt_num(a["complexity"]), fmt_err((a.get("objectives") or {}).get("e2e_mean")),
                      ", ".join(map(str, a["parent_ids"])))
        console.print(t)
    return rec


def _stage_label(r: Mapping) -> str:
    return f"{r['model']}/{r['workload']}" if r.get("model") and r.get("workload") else str(r.get("experiment"))


def render_breakdown(parts: Sequence[Mapping], console) -> None:
    """`evolve evaluate --breakdown`: the rows of `Evaluator.breakdown` as two tables, where
    the time per output token goes, and the predicted step next to the analytical components."""
    from rich.table import Table
    if not parts:
        console.print("[yellow]no breakdown (invalid evaluation or no reported stage)[/yellow]")
        return
    t = Table(title="Where the time goes: ms per output token on the held-out requests (simulated = decode + "
                    "prefill + recompute + preempt + queue; predicted = simulated + request overheads)",
              header_style="bold")
    for c in ("experiment", "st", "rate", "measured", "predicted", "simulated", "decode", "prefill", "recompute",
              "preempt", "queue", "overhead", "hit rate", "always-hit", "evictions", "preemptions"):
        t.add_column(c, justify="left" if c == "experiment" else "right",
                     style="dim" if c in ("overhead", "always-hit") else None)
    for r in parts:
        t.add_row(_stage_label(r), str(r["stage"]), fmt_num(r.get("rate")),
                  *(fmt_ms(r.get(k)) for k in ("meas_itl_s", "pred_itl_s", "sim_per_token_s", "decode_s",
                                               "prefill_s", "recompute_s", "preempt_s", "queue_s", "overhead_s")),
                  fmt_rate(r.get("hit_rate")), fmt_rate(r.get("always_hit_rate")), fmt_num(r.get("evictions")),
                  fmt_num(r.get("preemptions")))
    console.print(t)
    names = list((parts[0].get("components") or {}).keys())
    used = set(parts[0].get("components_used") or ())
    # the step-time components (the measured ones if the program reads one), and any raw quantity it reads
    from evaluator.components import MEASURED_NAMES  # numba: not at import (`evolve frontier`)
    measured = bool(used & MEASURED_NAMES)
    cols = [k for k in names if k.startswith("t_") and (measured or k not in MEASURED_NAMES)] \
        + [k for k in names if not k.startswith("t_") and k in used]
    t = Table(title="Predicted step vs analytical components: means over the simulated decode steps of the "
                    "held-out window (us; * = read by the program)", header_style="bold")
    for c in ("experiment", "st", "steps", "predicted step", *(k + ("*" if k in used else "") for k in cols),
              "largest component"):
        t.add_column(c, justify="left" if c in ("experiment", "largest component") else "right")
    for r in parts:
        comps = r.get("components") or {}
        step = finite_or_none(r.get("pred_step_us"))
        times = {k: finite_or_none(comps.get(k)) for k in cols if k.startswith("t_") and k != "t_step_measured"}
        times = {k: v for k, v in times.items() if v is not None}
        top = max(times, key=times.get, default=None)
        largest = "—" if top is None else top + (f" ({100 * times[top] / step:.0f}% of step)" if step else "")
        t.add_row(_stage_label(r), str(r["stage"]), fmt_num(r.get("n_decode_states")), fmt_us(step),
                  *(fmt_us(comps.get(k)) if k.startswith("t_") else fmt_num(comps.get(k)) for k in cols), largest)
    console.print(t)
