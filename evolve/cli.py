"""The `evolve` command line: one subcommand per stage of the data flow."""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table


def _pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{100 * x:.1f}%"


def _load_gt(args):
    from evaluator.data import DataError, load
    try:
        return load(args.data)
    except DataError as e:
        sys.exit(f"error: {e}")


def cmd_baselines(args) -> int:
    from evaluator.baselines import BASELINES, baseline_records, run_baselines
    from evaluator.evaluate import Evaluator
    gt = _load_gt(args)
    ev = Evaluator(gt, train_fraction=args.train_fraction)
    res = run_baselines(ev)
    if args.json:
        print(json.dumps({"mode": gt.mode, "source": gt.source, "records": baseline_records(res)}, indent=1))
        return 0
    con = Console(width=None if sys.stdout.isatty() else 200)
    t = Table(title=f"Baselines on {gt.source} ({gt.mode} mode, held-out last "
                    f"{100 * (1 - args.train_fraction):.0f}% of each stage)")
    t.add_column("experiment")
    t.add_column("st")
    for b in BASELINES:
        for m in ("E2E", "TTFT", "ITL"):
            t.add_column(f"{b}\n{m}", justify="right")
    t.add_column("step MAPE\n" + "/".join(b[:5] for b in BASELINES), justify="right")
    keys = [(r["experiment"], r["stage"]) for r in res[BASELINES[0]].rows] or \
        sorted({(r["experiment"], r["stage"]) for b in BASELINES for r in res[b].rows})
    index = {b: {(r["experiment"], r["stage"]): r for r in res[b].rows} for b in BASELINES}
    for k in keys:
        cells = []
        for b in BASELINES:
            r = index[b].get(k)
            cells += [_pct(r and r["e2e_err"]), _pct(r and r["ttft_err"]), _pct(r and r["itl_err"])]
        step = "/".join(_pct(res[b].steps.get(k[0], {}).get("step_mape")) for b in BASELINES) \
            if any(k[0] in res[b].steps for b in BASELINES) else ""
        e = gt.experiment(k[0])
        t.add_row(f"{e.model}/{e.workload}", str(k[1]), *cells, step)
    means = []
    for b in BASELINES:
        o = res[b].objectives
        means += [_pct(o.get("e2e_mean")), _pct(o.get("ttft_mean")), _pct(o.get("itl_mean"))]
    t.add_row("[bold]mean[/bold]", "", *means,
              "/".join(_pct(res[b].objectives.get("step_mape")) for b in BASELINES), end_section=True)
    con.print(t)
    for b in BASELINES:
        if not res[b].valid:
            con.print(f"[red]{b}: invalid: {res[b].error}[/red]")
    return 0


def cmd_make_default(args) -> int:
    from evaluator.data import DataError, build_default_table, load_ground_truth
    try:
        gt = load_ground_truth(args.data)
    except DataError as e:
        sys.exit(f"error: {e}")
    out = Path(args.output)
    out.write_text(json.dumps(build_default_table(gt), indent=1, sort_keys=True) + "\n")
    print(f"wrote {out} ({len(gt.experiments)} experiments)")
    return 0


def cmd_ingest(args) -> int:
    from evaluator.ingest import IngestError, ingest_request_lifecycle, ingest_step_traces, write_ground_truth
    steps = reqs = None
    try:
        if args.traces:
            steps = ingest_step_traces(args.traces, args.experiment, args.model, args.workload, args.tp)
        if args.lifecycle:
            reqs = ingest_request_lifecycle(args.lifecycle, args.experiment)
    except IngestError as e:
        sys.exit(f"error: {e}")
    if steps is None and reqs is None:
        sys.exit("error: give --traces and/or --lifecycle")
    write_ground_truth(steps, reqs, args.out)
    print(f"ingested {0 if steps is None else len(steps)} step rows, "
          f"{0 if reqs is None else len(reqs)} requests into {args.out}")
    return 0


def cmd_evaluate(args) -> int:
    from evaluator.evaluate import Evaluator
    from evolve.program import ProgramError, parse_program
    try:
        prog = parse_program(Path(args.program).read_text())
    except (OSError, ProgramError) as e:
        sys.exit(f"error: {args.program}: {e}")
    gt = _load_gt(args)
    res = Evaluator(gt, train_fraction=args.train_fraction).evaluate(prog)
    print(json.dumps(res.to_dict() if args.json else
                     {"valid": res.valid, "error": res.error, "objectives": res.objectives,
                      "seconds": res.seconds}, indent=1, default=float))
    return 0 if res.valid else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evolve", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    def data_opts(sp):
        sp.add_argument("--data", metavar="DIR", default=None,
                        help="ground-truth directory (layout of shared/data); default: the embedded table")
        sp.add_argument("--train-fraction", type=float, default=0.7,
                        help="time-ordered split inside each load stage (default 0.7)")

    b = sub.add_parser("baselines", help="fit and score the three baselines")
    data_opts(b)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_baselines)

    e = sub.add_parser("evaluate", help="fit and score one program file")
    data_opts(e)
    e.add_argument("program")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_evaluate)

    m = sub.add_parser("make-default", help="regenerate the embedded workload table from a data dir")
    m.add_argument("--data", required=True, metavar="DIR")
    m.add_argument("-o", "--output", default=str(Path(__file__).resolve().parent.parent / "evaluator"
                                                 / "default_workloads.json"))
    m.set_defaults(func=cmd_make_default)

    i = sub.add_parser("ingest", help="convert vLLM OTEL traces / inference-perf lifecycle files")
    i.add_argument("--traces", help="vLLM OTEL traces.json (OTLP JSON lines)")
    i.add_argument("--lifecycle", help="inference-perf per_request_lifecycle_metrics.json")
    i.add_argument("--experiment", required=True)
    i.add_argument("--model", default="")
    i.add_argument("--workload", default="")
    i.add_argument("--tp", type=int, default=1)
    i.add_argument("--out", required=True, metavar="DIR")
    i.set_defaults(func=cmd_ingest)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
