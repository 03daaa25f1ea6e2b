"""The BLIS subcommands: `emit-go` (file, patch or checkout), `export-blis-traces` and
`blis-compare`. Kept out of evolve/cli.py, which only registers them (`register`)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from evaluator.errors import DataError
from evaluator.objectives import Caps
from evolve.archive_check import ArchiveError
from evolve.views.format import clean_json

# The commands import what they run (the evaluator, the Go emitter, SQLAlchemy, rich) when they
# run: `evolve --help` builds these parsers and must not load numba, SciPy or Plotly.

__all__ = ["register", "cmd_emit_go", "cmd_export_blis_traces", "cmd_blis_compare"]


def _fail(msg: str) -> None:
    sys.exit(f"error: {msg}")


def _archive(path: str):
    from evolve.archive import Archive
    if not Path(path).is_file():
        _fail(f"{path}: no such archive")
    try:
        return Archive(path, readonly=True)
    except ArchiveError as e:
        _fail(str(e))


def _load(data):
    from evaluator.data import load
    try:
        return load(data)
    except DataError as e:
        _fail(str(e))


def _pct(v) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


# ----------------------------------------------------------------- emit-go

def cmd_emit_go(args) -> int:
    from evaluator.data import load
    from go_emit import GoEmitError, emit_record
    from go_emit.blis_patch import GO_FILE, apply_in_place, blis_patch
    from go_emit.names import parse_alias
    # what does not exist is named first: an unknown id or archive, then the missing output
    archive = _archive(args.archive)
    rec = archive.program(args.program_id)
    if rec is None:
        _fail(f"no program {args.program_id} in {args.archive}")
    if not (args.output or args.blis_patch or args.blis_dir):
        _fail("give -o FILE.go, --blis-patch FILE.patch or --blis-dir DIR")
    if (args.blis_patch or args.blis_dir) and (args.package != "latency" or args.interface != "blis"):
        _fail("--blis-patch/--blis-dir need --package latency --interface blis (BLIS's sim/latency)")
    run = archive.get_run(rec["run_id"]) or {}
    try:
        aliases = dict(parse_alias(a) for a in args.alias or [])
        gt = load((run.get("config") or {}).get("data"))
        out = emit_record(rec, gt, package=args.package, interface=args.interface,
                          caps=Caps(args.max_ops, args.max_cond, args.max_consts), simplify=not args.no_simplify,
                          aliases=aliases)
        if out.note:
            print(out.note)
        if args.output:
            Path(args.output).write_text(out.code)
            print(f"wrote {args.output}: program {args.program_id}, models {', '.join(out.models)}")
        if args.blis_patch:
            patch = blis_patch(out.code, args.blis_dir)
            Path(args.blis_patch).write_text(patch)
            against = args.blis_dir or "BLIS main f90a1e3a"
            if not patch.strip():
                print(f"wrote {args.blis_patch}: empty, {against} already has this model and its wiring")
            else:
                print(f"wrote {args.blis_patch}: {GO_FILE} and the backend wiring, against {against} "
                      f"(apply with: git apply {args.blis_patch})")
        elif args.blis_dir:
            written = apply_in_place(out.code, args.blis_dir)
            print(f"updated {args.blis_dir}: " + (", ".join(written) if written else "already up to date"))
    except (DataError, GoEmitError, OSError) as e:
        _fail(str(e))
    return 0


# ----------------------------------------------------------------- traces

def cmd_export_blis_traces(args) -> int:
    from evolve.blis_traces import BlisExportError, export_blis_traces
    if not Path(args.data).is_dir():
        _fail(f"{args.data}: no such directory")
    gt = _load(args.data)
    try:
        files = export_blis_traces(gt, args.output, args.data)
    except (BlisExportError, OSError) as e:
        _fail(str(e))
    n = sum(1 for f in files if f.name == "trace.csv")
    print(f"wrote {n} experiments' TraceV2 files, {Path(args.output) / 'replay.sh'} and experiments.json "
          f"under {args.output}")
    print(f"replay them from a BLIS checkout: BLIS=./blis LATENCY_MODEL=evolved sh {Path(args.output) / 'replay.sh'}")
    return 0


# ----------------------------------------------------------------- compare

def _add_program(rows: list[dict], archive_path: str, program_id: int, skipped: list[dict]) -> str:
    from evolve.blis_compare import not_compared_entry
    rec = _archive(archive_path).program(program_id)
    if rec is None:
        _fail(f"no program {program_id} in {archive_path}")
    name = f"stepevolve#{program_id}"
    mine = {(r["experiment"], int(r["stage"])): r for r in (rec.get("evaluation") or {}).get("rows") or []}
    for r in rows:
        m = mine.get((r["experiment"], int(r["stage"])))
        if m is None:
            skipped.append(not_compared_entry(r["experiment"], r["stage"], name,
                                              f"program {program_id} has no evaluation row for this stage "
                                              f"in {archive_path}"))
            m = {}
        for k in ("e2e", "ttft", "itl"):
            r[f"{name}:{k}_err"] = m.get(f"{k}_err")
    return name


def _not_compared_lines(skipped: list[dict]) -> list[str]:
    """One line per thing left out: `EXPERIMENT stage S (SOURCE): reason`."""
    out = []
    for x in skipped:
        where = x["experiment"] + ("" if x["stage"] is None else f" stage {x['stage']}")
        out.append(f"  {where}{'' if x['source'] is None else ' (' + x['source'] + ')'}: {x['reason']}")
    return out


def cmd_blis_compare(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from evolve.blis_compare import BlisCompareError, compare_all, read_results, summary
    try:
        found = read_results(args.results_dir)
    except BlisCompareError as e:
        _fail(str(e))
    if args.latency_model:
        missing = [m for m in args.latency_model if m not in found]
        if missing:
            _fail(f"no results for {', '.join(missing)} in {args.results_dir} (found: {', '.join(found)})")
        found = {m: found[m] for m in args.latency_model}
    gt = _load(args.data)
    names = [f"blis:{m}" for m in found]
    try:
        rows, skipped, failed = compare_all(gt, {f"blis:{m}": files for m, files in found.items()},
                                            args.train_fraction)
    except BlisCompareError as e:
        _fail(str(e))
    if args.program is not None:
        names.append(_add_program(rows, args.archive, args.program, skipped))
    if args.json:
        print(json.dumps(clean_json({"rows": rows, "summary": summary(rows, names), "not_compared": skipped,
                                     "failed": failed}), indent=1, allow_nan=False))
        return 0
    t = Table(title="errors per experiment and stage (held-out part): BLIS replays"
              + (" vs StepEvolve's simulator" if args.program is not None else ""), header_style="bold")
    for c in ("experiment", "stage", "rate", "n"):
        t.add_column(c, justify="left" if c == "experiment" else "right")
    for n in names:
        for k in ("e2e", "ttft", "itl"):
            t.add_column(f"{k} err\n{n}", justify="right")
    for r in rows:
        t.add_row(r["experiment"], str(r["stage"]), f"{r['rate']:g}", str(r["n_requests"]),
                  *(_pct(r.get(f"{n}:{k}_err")) for n in names for k in ("e2e", "ttft", "itl")))
    s = summary(rows, names)
    t.add_row("mean", "", "", "", *(_pct(s[n][f"{k}_mean"]) for n in names for k in ("e2e", "ttft", "itl")))
    t.add_row("worst", "", "", "", *(_pct(s[n][f"{k}_worst"]) for n in names for k in ("e2e", "ttft", "itl")))
    con = Console(width=None if sys.stdout.isatty() else 250)
    con.print(t)
    for n in names:
        if s[n]["missing"]:
            con.print(f"{n}: {s[n]['missing']} reported requests have no BLIS result (not finished) "
                      "and are left out of the means")
    if skipped:
        con.print(f"not compared ({len(skipped)}; left out of the means):", markup=False, highlight=False)
        for line in _not_compared_lines(skipped):
            con.print(line, markup=False, highlight=False, soft_wrap=True)
    else:
        con.print("every stage compared for every source", highlight=False)
    _print_failed(con, failed, [n for n in names if n.startswith("blis:")])
    return 0


def _print_failed(con, failed: list[dict], sources: list[str]) -> None:
    """The failed-request table: every experiment where the measurement or a BLIS replay has failures."""
    from rich.table import Table
    show = {x["experiment"] for x in failed if x["stage"] is None
            and (x["failed_meas"] or any(x.get(f"{n}:failed") for n in sources))}
    if not show:
        con.print("failed requests: none, measured or in BLIS", highlight=False)
        return
    t = Table(title="failed requests, every request sent (measured: the client timed out; BLIS: no result, "
                    "i.e. timed out at deadline_us or dropped)", header_style="bold")
    for c in ("experiment", "stage", "requests", "failed\nmeasured"):
        t.add_column(c, justify="left" if c == "experiment" else "right")
    for n in sources:
        t.add_column(f"failed\n{n}", justify="right")
        t.add_column(f"vs measured\n{n}", justify="right")
    n_stages = {}
    for x in failed:
        if x["stage"] is not None:
            n_stages[x["experiment"]] = n_stages.get(x["experiment"], 0) + 1
    for x in failed:  # a one-stage experiment's stage row repeats its "all" row
        if x["experiment"] not in show or (x["stage"] is not None and n_stages[x["experiment"]] == 1):
            continue
        cells = []
        for n in sources:
            b = x.get(f"{n}:failed")
            cells += ["—" if b is None else str(b),
                      "—" if b is None or not x["failed_meas"] else f"{100 * (b - x['failed_meas']) / x['failed_meas']:+.1f}%"]
        t.add_row(x["experiment"], "all" if x["stage"] is None else str(x["stage"]), str(x["requests"]),
                  str(x["failed_meas"]), *cells)
    con.print(t)
    for x in failed:
        for n in sources:
            c = x.get(f"{n}:blis_counts")
            if x["experiment"] in show and x["stage"] is None and c:
                con.print(f"{x['experiment']} ({n}) BLIS counters: "
                          + ", ".join(f"{k} {v}" for k, v in c.items()), highlight=False, soft_wrap=True)
    quiet = len({x["experiment"] for x in failed}) - len(show)
    if quiet:
        con.print(f"no failed request in the other {quiet} experiment(s): none measured, none in BLIS "
                  "where it has results", highlight=False)


# ----------------------------------------------------------------- registration

def add_emit_go_options(g) -> None:
    """The BLIS options of `emit-go` (the parser itself stays in evolve/cli.py)."""
    g.add_argument("--alias", action="append", metavar="NAME=MODEL",
                   help="one more name the constructor accepts for a fitted model (repeatable); the "
                        "experiments' Hugging Face ids are added automatically, any case")
    g.add_argument("--blis-patch", metavar="FILE.patch",
                   help="write the whole BLIS change (new file, backend registration, dispatch, help, "
                        "BLIS's backend-list test) as a git patch; against --blis-dir if given, else "
                        "BLIS main f90a1e3a")
    g.add_argument("--blis-dir", metavar="DIR",
                   help="a BLIS checkout: without --blis-patch, apply the change there in place")
    g.set_defaults(func=cmd_emit_go)


def register(sub, data_opts) -> None:
    """Add export-blis-traces and blis-compare to the `evolve` subparsers."""
    x = sub.add_parser("export-blis-traces", help="the measured request traces as BLIS TraceV2 files "
                                                  "plus a replay script with each experiment's flags")
    x.add_argument("--data", metavar="DIR", required=True, help="ground-truth directory with requests/")
    x.add_argument("-o", "--output", required=True, metavar="OUT_DIR")
    x.set_defaults(func=cmd_export_blis_traces)

    c = sub.add_parser("blis-compare", help="BLIS replay results scored like `evolve show` (E2E, TTFT, "
                                            "per-token error per experiment and stage)")
    c.add_argument("results_dir", metavar="RESULTS_DIR", help="the export-blis-traces directory after replay.sh")
    data_opts(c)
    c.add_argument("--latency-model", action="append", metavar="NAME",
                   help="only these BLIS backends' results (default: every results-*.json found)")
    c.add_argument("--program", type=int, metavar="ID", help="also show this program's own errors from --archive")
    c.add_argument("--archive", default="archive.db", metavar="PATH")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_blis_compare)
