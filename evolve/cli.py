"""The `evolve` command line: one subcommand per stage of the data flow."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import math
import sqlite3
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from evaluator.errors import DataError
from evaluator.objectives import Caps, finite_or_none, has_heldout, selection_loss
from evolve import blis_cmds
from evolve.config import HANDOVER_SHORTLIST, HANDOVER_STARTS
from evolve.archive_check import ArchiveError, describe_db_error
from evolve.views.format import BASELINE_PREFIX, MISSING, clean_json, fmt_missing, fmt_objective, fmt_rate

# Each command imports what it runs (numba, SciPy, pandas, Plotly, Ray, SQLAlchemy, the
# evaluator, rich) when it runs: `evolve --help` and `evolve frontier` load none of the heavy
# ones (tests/test_startup.py; start-up time: benchmarks/bench_startup.py).
if TYPE_CHECKING:
    from rich.console import Console

    from evolve.archive import Archive
    from evolve.config import RunConfig

def _pct(x) -> str:
    x = finite_or_none(x)
    return MISSING if x is None else f"{100 * x:.1f}%"


def _console() -> Console:
    """Full-width tables when piped (a terminal keeps its own width)."""
    from rich.console import Console
    return Console(width=None if sys.stdout.isatty() else 200)


def _load_gt(args):
    from evaluator.data import load
    try:
        return load(args.data)
    except DataError as e:
        sys.exit(f"error: {e}")


def cmd_baselines(args) -> int:
    from rich.table import Table

    from evaluator.baselines import BASELINES, baseline_records, run_baselines
    from evaluator.evaluate import Evaluator
    from evolve.views.holdout_table import holdout_summary, holdout_table, split_errors, split_table
    gt = _load_gt(args)
    ev = Evaluator(gt, train_fraction=args.train_fraction, holdout_objectives=args.holdout)
    res = run_baselines(ev)
    if args.json:
        out = {"mode": gt.mode, "source": gt.source, "records": baseline_records(res)}
        if args.holdout:
            out["holdout"] = {b: {"summary": holdout_summary(r), "splits": split_errors(r)} for b, r in res.items()}
        print(json.dumps(clean_json(out), indent=1, allow_nan=False))
        return 0
    con = _console()
    t = Table(title=f"Baselines on {gt.source} ({gt.mode} mode, held-out last "
                    f"{100 * (1 - args.train_fraction):.0f}% of each stage)")
    # whole names (the other columns give way): 16 experiments with failure columns cut them
    t.add_column("experiment", no_wrap=True, min_width=max(len(f"{e.model}/{e.workload}") for e in gt.experiments))
    t.add_column("st")
    for b in BASELINES:
        for m in ("E2E", "TTFT", "ITL"):
            t.add_column(f"{b}\n{m}", justify="right")
    t.add_column("step MAPE\n" + "/".join(b[:5] for b in BASELINES), justify="right")
    t.add_column("failed\nmeasured", justify="right")  # and aborted by the simulated client timeout:
    t.add_column("failed sim\n" + "/".join(b[:5] for b in BASELINES), justify="right")
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
        rows = [index[b].get(k) or {} for b in BASELINES]
        meas = next((r.get("meas_fail") for r in rows if r.get("meas_fail") is not None), None)
        t.add_row(f"{e.model}/{e.workload}", str(k[1]), *cells, step, fmt_rate(meas),
                  "/".join(fmt_rate(r.get("pred_fail")) for r in rows))
    means = []
    for b in BASELINES:
        o = res[b].objectives
        means += [_pct(o.get("e2e_mean")), _pct(o.get("ttft_mean")), _pct(o.get("itl_mean"))]
    t.add_row("[bold]mean[/bold]", "", *means,
              "/".join(_pct(res[b].objectives.get("step_mape")) for b in BASELINES), "", "", end_section=True)
    con.print(t)
    if args.holdout:
        con.print(holdout_table(res))
        con.print(split_table(res))
    for b in BASELINES:
        if not res[b].valid:
            con.print(f"[red]{b}: invalid: {res[b].error}[/red]")
    return 0


def cmd_make_default(args) -> int:
    from evaluator.data import load_ground_truth
    from evaluator.served_shapes import default_table
    try:
        gt = load_ground_truth(args.data)
    except DataError as e:
        sys.exit(f"error: {e}")
    out = Path(args.output)
    table = default_table(gt)
    out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out} ({len(gt.experiments)} experiments, kernel tables for {len(table['kernels'])} deployments)")
    return 0


def cmd_ingest(args) -> int:
    from evaluator.ingest import IngestError, ingest_request_lifecycle, ingest_run, ingest_step_traces, write_ground_truth
    if args.inputs:  # any format, detected: the whole ground-truth layout (docs/ingest.md)
        if args.traces or args.lifecycle:
            sys.exit("error: give input files or --traces/--lifecycle, not both")
        try:
            lines = ingest_run(args.inputs, args.out, args.experiment, model=args.model or None,
                               model_config=args.model_config, tp=args.tp, workload=args.workload,
                               max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                               block_size=args.block_size, kv_blocks=args.kv_blocks)
        except (IngestError, ValueError) as e:
            sys.exit(f"error: {e}")
        except (RecursionError, OverflowError) as e:  # JSON nested thousands deep, a number beyond any float
            sys.exit(f"error: {', '.join(args.inputs)}: not a benchmark file ({' '.join(str(e).split())[:120]})")
        print("\n".join(lines))
        return 0
    steps = reqs = None
    try:
        if args.traces:
            steps = ingest_step_traces(args.traces, args.experiment, args.model, args.workload, args.tp or 1)
        if args.lifecycle:
            reqs = ingest_request_lifecycle(args.lifecycle, args.experiment)
    except IngestError as e:
        sys.exit(f"error: {e}")
    except (RecursionError, OverflowError) as e:  # JSON nested thousands deep, a number beyond any float
        sys.exit(f"error: {args.traces if steps is None and args.traces else args.lifecycle}: not a trace or "
                 f"lifecycle file ({' '.join(str(e).split())[:120]})")
    if steps is None and reqs is None:
        sys.exit("error: give --traces and/or --lifecycle")
    write_ground_truth(steps, reqs, args.out)
    print(f"ingested {0 if steps is None else len(steps)} step rows, "
          f"{0 if reqs is None else len(reqs)} requests into {args.out}")
    return 0


def _regimes_and_units(prog, objectives) -> dict:
    """The held-out error per regime (null where a regime could not be scored) and each
    constant's unit, for `evaluate`'s output."""
    from evaluator.objectives import REGIMES
    from evaluator.units import constant_units
    return {"regimes": {k: objectives.get(k) for k in REGIMES if k in objectives},
            "constant_units": constant_units(prog)}


def cmd_evaluate(args) -> int:
    from evaluator.fit_starts import spread
    from evaluator.holdout import KINDS, misses
    from evaluator.program import ProgramError, parse_program
    from evolve.evaluate_file import EvaluateError, default_time_limit, evaluate_in_worker, regular_file_text
    from evolve.views.holdout_table import holdout_table, split_table, starts_table
    from evolve.views.tables import render_breakdown
    try:  # a FIFO, device or directory is refused before it is opened (a FIFO would block)
        prog = parse_program(regular_file_text(args.program))
    except (OSError, ValueError, ProgramError) as e:
        sys.exit(f"error: {args.program}: {getattr(e, 'strerror', None) or e}")
    # --holdout [KIND]: every kind, or the one asked for
    heldout = () if not args.holdout else KINDS if args.holdout == "all" else (args.holdout,)
    limit = args.time_limit if args.time_limit is not None else default_time_limit(bool(heldout))
    try:  # in a killable worker under the search's per-candidate limit; --breakdown: the reported
        # experiments simulated again with the fitted constants; --starts: fitted from other starts
        res, parts, records = evaluate_in_worker(prog.source, args.data, args.train_fraction, heldout,
                                                 args.breakdown, limit, starts=args.starts)
    except EvaluateError as e:
        sys.exit(f"error: {args.program}: {e}")
    starts = None if records is None else {"records": records, "spread": spread(records)}
    # the held-out experiments and stages beyond the bars, which the regime means hide
    missed = {"misses": misses(res.holdout)} if res.holdout else {}
    if args.json:
        out = res.to_json()
        out.update(_regimes_and_units(prog, res.objectives), **missed)
        if args.breakdown:
            out["breakdown"] = parts
        if starts is not None:
            out["fit_starts"] = starts
        print(json.dumps(clean_json(out), indent=1, allow_nan=False))
    else:
        print(json.dumps(clean_json({"valid": res.valid, "error": res.error, "objectives": res.objectives,
                                     **_regimes_and_units(prog, res.objectives), **missed,
                                     "seconds": res.seconds}),
                         indent=1, allow_nan=False))
        if args.breakdown:
            render_breakdown(parts or [], _console())
        if res.holdout:
            _console().print(holdout_table({Path(args.program).name: res}))
            _console().print(split_table({Path(args.program).name: res}))
        if starts is not None:
            _console().print(starts_table(starts["spread"], args.starts))
    return 0 if res.valid else 1


def _progress_bar(quiet: bool = False):
    """The live bar of `evolve run`, on stderr, only while stderr is a terminal; on a narrow
    terminal it drops whole fields (progress_log.fitted_line), never cuts one. In a log (stderr
    piped or a file) there is none: rich would print its last frame once, cut to 80 columns in
    the middle of a word; ProgressLog writes whole plain lines there instead."""
    from rich.console import Console

    from evolve.progress_log import live_bar  # one line fitted to the width: whole fields, never half a word
    return live_bar(Console(stderr=True), disable=quiet or not sys.stderr.isatty())


def _run_one(cfg: RunConfig, archive: Archive, resume: str | None = None, quiet: bool = False) -> dict:
    from evolve.progress_log import ProgressLog, best_error
    from evolve.search import Search
    prog = _progress_bar(quiet)
    task = prog.add_task("run", total=cfg.budget, run="starting", label="E2E", best=MISSING, itl=MISSING, step=MISSING,
                         front=0)

    def update(search):
        run = archive.get_run(search.run_id)
        fr = search.state.frontier
        best = min(fr, key=lambda m: selection_loss(m.objectives), default=None)
        o = best.objectives if best else {}
        label, err = best_error(fr, cfg.holdout)
        prog.update(task, completed=run["n_evaluated"], run=search.run_id, label=label, best=err,
                    itl=_pct(o.get("itl_mean")),
                    step=_pct(_best_step_mape(fr)),
                    front=len(fr))

    search = Search(cfg, archive, progress=update)
    prog.update(task, total=search.planned)
    if not resume and search.planned > cfg.budget and not quiet:
        print(f"note: every run starts by evaluating the {search.planned} seed programs; --budget {cfg.budget} "
              f"is fewer, so this run evaluates them and stops", file=sys.stderr, flush=True)
    # in a log (stderr not a terminal) one plain line at least every 30 s
    log = ProgressLog(search, float(os.environ.get("STEPEVOLVE_PROGRESS_S", 30))) \
        if not quiet and not sys.stderr.isatty() else contextlib.nullcontext()
    with prog, log:
        try:
            if resume:
                search.resume(resume)
            else:
                search.start()
            out = search.loop(keep_pool=True)  # the hand-over below runs on the same workers
        except BaseException as e:
            search.close()
            if isinstance(e, _db_errors()) and getattr(search, "run_id", None) is not None:
                # the archive cannot be written any more (disk full, I/O error)
                raise ArchiveError(f"{describe_db_error(archive.path, e)}; every candidate written is kept: "
                                   f"continue with --resume {search.run_id}") from None
            raise
    try:
        run = archive.get_run(search.run_id)
        out["n_evaluated"] = run["n_evaluated"]
        out["work"] = archive.work_counts(search.run_id)
        out["hypervolume"] = search.state.hv()
        from evaluator.served_shapes import usable_check
        from evolve.handover import hand_over
        # held-out errors first, every constant pinned, physical on the shipped configs' shapes,
        # then the shortlist's worst fit start; fixed in the archive: every view names this one
        say = None if quiet else (lambda line: print(line, file=sys.stderr, flush=True))
        best = hand_over(archive, search.run_id, search._pool, cfg.handover_starts, usable=usable_check(search._gt),
                         say=say)
    finally:
        memo = getattr(getattr(search, "pool", None), "memo", None)
        search.close()
    out["recalled"] = memo.hits if memo is not None else 0  # jobs answered with earlier runs' answers (evolve.judge_memo)
    out["repeated"] = memo.repeats if memo is not None else 0  # jobs this run asked again
    fr = search.state.frontier
    from evaluator.holdout import misses
    out["best"] = {"id": best["id"], **best["objectives"]} if best else None
    fs = ((best or {}).get("evaluation") or {}).get("fit_starts")
    out["best_starts"] = fs if fs and fs.get("starts", 1) > 1 else None
    held = ((best or {}).get("evaluation") or {}).get("holdout")
    out["best_misses"] = misses(held) if held else None  # what its regime means hide
    out["best_step_mape"] = _best_step_mape(fr)
    out["llm_spend_text"] = search.spend.text() if cfg.llm else None
    return out


def _best_step_mape(members) -> float:
    """Lowest finite per-step MAPE among the members (NaN if none has one)."""
    mapes = [finite_or_none(m.objectives.get("step_mape")) for m in members]
    return min((x for x in mapes if x is not None), default=math.nan)


def _write_archive(path):
    from evolve.archive import Archive
    try:
        return Archive(path)
    except ArchiveError as e:
        sys.exit(f"error: {e}")


def cmd_run(args) -> int:
    from rich.console import Console

    from evolve.config import config_from_args
    from evolve.ray_pool import RayExecutorError, check_address
    if args.resume and args.resume.startswith(BASELINE_PREFIX):
        sys.exit(f"error: {args.resume!r} holds the stored baselines, not a search run: nothing to resume")
    if args.resume and not Path(args.archive).exists():  # a typo must not leave an empty archive behind
        sys.exit(f"error: no run {args.resume!r}: no archive at {args.archive}")
    archive = _write_archive(args.archive)
    stored = None
    if args.resume:
        run = archive.get_run(args.resume)
        if run is None:
            sys.exit(f"error: no run {args.resume!r} in {args.archive}")
        stored = run["config"]
        changed = _resume_changes(args, stored)
        if changed:  # never silently ignored: the stored settings are what the run continues with
            sys.exit(f"error: --resume {args.resume} continues with its stored settings; it may change --budget, "
                     f"--workers, --executor, --ray-address, --no-reuse and the LLM spend caps, not {', '.join(changed)}")
    cfg = config_from_args(args, stored)
    from evaluator.objectives import JUDGE_REVISION
    if cfg.judge != JUDGE_REVISION:  # its stored scores keep their meaning; the new ones are today's
        print(f"note: run {args.resume} was scored under judge revision {cfg.judge} and continues under revision "
              f"{JUDGE_REVISION} (evaluator/objectives.py says what changed): its stored programs keep their "
              f"scores, so compare them with new ones with care or start a new run")
    from evolve.llm import unpriced_cap
    unpriced = unpriced_cap(cfg)  # a cost cap nobody can price would not hold
    if unpriced:
        sys.exit(f"error: {unpriced}")
    if cfg.ray_address and cfg.executor != "ray":
        sys.exit("error: --ray-address needs --executor ray")
    if cfg.executor == "ray" and cfg.ray_address:
        try:
            check_address(cfg.ray_address)  # before the run is stored: a typo costs nothing
        except RayExecutorError as e:
            sys.exit(f"error: {e}")
    from evolve.workers import ExecutorError
    try:
        out = _run_one(cfg, archive, resume=args.resume)
    except (RayExecutorError, ExecutorError) as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        print("interrupted: the archive keeps every finished candidate; continue with --resume RUN")
        return 130
    con = Console(soft_wrap=not sys.stdout.isatty())  # in a log each summary line stays whole
    con.print(f"run {out['run_id']}: {out['n_evaluated']} evaluations in {out['seconds']:.0f} s "
              f"({out['n_evaluated'] / max(out['seconds'], 1e-9):.2f}/s), frontier {len(out['frontier'])}, "
              f"hypervolume {out['hypervolume']:.3f}, killed {out['killed']}, "
              f"known programs redrawn {out.get('skipped_duplicates', 0)}")
    w = out.get("work") or {}
    stopped = ""
    if w.get("stopped"):  # evaluator.screen_race
        stopped = f"; {w['stopped']} stopped replaying once they could not earn a full evaluation"
        if out.get("rescreened"):
            stopped += f" ({out['rescreened']} screened again: the gate fell before their turn)"
    con.print(f"work: {w.get('full', 0)} full evaluations, {w.get('screen', 0)} screens only "
              f"({w.get('unpinned', 0)} of them with a constant the data cannot pin"
              f"{': refused after their fit' if cfg.pinned_only else ''}{stopped}), "
              f"{w.get('twins', 0)} twins (screened, then skipped: they behave like an earlier program)")
    if out.get("recalled"):
        con.print(f"reused: {out['recalled']} jobs answered from this archive's earlier runs under the same judge "
                  f"(data, code and numeric stack), by no worker (--no-reuse judges them again)")
    if out.get("repeated"):
        con.print(f"repeated: {out['repeated']} jobs this run had already judged (the same program, start and "
                  f"split asked again), answered with that answer")
    ahead = out.get("ahead") or {}
    if ahead.get("submitted"):
        con.print(f"idle workers: {ahead['submitted']} screens of the next generation run ahead, "
                  f"{ahead['used']} of them taken by it")
    if out.get("llm_spend_text"):
        con.print(f"LLM spend: {out['llm_spend_text']}")
    if out["best"]:
        b = out["best"]
        held = ""
        if has_heldout(b):
            from evaluator.objectives import BY_NAME, REGIMES
            held = "held-out: " + ", ".join(f"{BY_NAME[k].label} {fmt_objective(k, b[k])}"
                                            for k in REGIMES if k in b) + "; in-sample "
        con.print(f"use #{b['id']} (closest to the best error of every held-out regime): "
                  f"{held}E2E {_pct(b['e2e_mean'])} "
                  f"(worst {_pct(b['e2e_worst'])}), TTFT {_pct(b['ttft_mean'])}, ITL {_pct(b['itl_mean'])}, "
                  f"step MAPE {_pct(b['step_mape'])}, complexity {b['complexity']:.0f}")
        if out.get("best_starts"):
            from evolve.views.holdout_table import starts_text
            con.print(f"  {starts_text(out['best_starts'])}; chosen among the {HANDOVER_SHORTLIST} best on its "
                      f"worst start", markup=False)
        if out.get("best_misses") is not None:
            from evaluator.coverage import misses_line
            con.print(f"  {misses_line(out['best_misses'])}", markup=False)
    return 0


def _resume_changes(args, stored: dict) -> list[str]:
    """Flags given with --resume that differ from both their default and the stored run's value."""
    from evolve.config import RESUMABLE, SPEND_CAPS, RunConfig, config_from_args
    given = config_from_args(args)
    default = config_from_args(build_parser().parse_args(["run"]))
    kept = RunConfig.from_json(stored)
    names = {"holdout": "--no-holdout", "timeout_s": "--timeout", "caps": "--max-ops/--max-cond/--max-consts",
             "pinned_only": "--promote-unpinned", "screen_race": "--whole-screens"}
    return [names.get(f, "--" + f.replace("_", "-")) for f in RunConfig.__dataclass_fields__
            if f not in RESUMABLE + SPEND_CAPS and getattr(given, f) != getattr(default, f)
            and getattr(given, f) != getattr(kept, f)]


def cmd_pilot(args) -> int:
    from rich.table import Table

    from evolve.config import config_from_args
    from evolve.ray_pool import RayExecutorError, check_address
    from evolve.workers import ExecutorError
    if args.ray_address and args.executor != "ray":  # as `run` says: never silently ignored
        sys.exit("error: --ray-address needs --executor ray")
    if args.executor == "ray" and args.ray_address:
        try:
            check_address(args.ray_address)  # before any run is stored
        except RayExecutorError as e:
            sys.exit(f"error: {e}")
    archive = _write_archive(args.archive)
    outs = []
    for k in range(args.runs):
        try:
            outs.append(_run_one(config_from_args(args, seed=args.seed + k), archive))
        except (RayExecutorError, ExecutorError) as e:
            sys.exit(f"error: {e}")
    t = Table(title=f"pilot: {args.runs} runs x budget {args.budget}, seeds {args.seed}..{args.seed + args.runs - 1}")
    for c in ("metric", "median", "min", "max", *[o["run_id"] for o in outs]):
        t.add_column(c, justify="right")
    metrics = {
        "best mean E2E error": [o["best"]["e2e_mean"] if o["best"] else math.nan for o in outs],
        "best per-step MAPE": [o["best_step_mape"] for o in outs],
        "frontier size": [float(len(o["frontier"])) for o in outs],
        "hypervolume": [o["hypervolume"] for o in outs],
        "seconds": [o["seconds"] for o in outs],
    }
    for name, vals in metrics.items():
        a = sorted(x for x in (finite_or_none(v) for v in vals) if x is not None)  # NaN/inf left out
        mid = (a[(len(a) - 1) // 2] + a[len(a) // 2]) / 2 if a else math.nan
        fmt = _pct if "error" in name or "MAPE" in name else (lambda x: fmt_missing(x, lambda y: f"{y:.3g}"))
        t.add_row(name, fmt(mid), fmt(a[0] if a else None), fmt(a[-1] if a else None), *[fmt(v) for v in vals])
    _console().print(t)
    return 0


def _best_baseline(baselines):
    ok = {k: v for k, v in baselines.items() if v.valid}
    return min(ok.items(), key=lambda kv: selection_loss(kv[1].objectives)) if ok else (None, None)


def _program_or_exit(archive, args) -> dict:
    rec = archive.program(args.program_id)
    if rec is None:
        sys.exit(f"error: no program {args.program_id} in {args.archive}")
    return rec


def _read_archive(path):
    from evolve.archive import Archive
    try:
        return Archive(path, readonly=True)
    except ArchiveError as e:
        sys.exit(f"error: {e}")


def _known_run_or_exit(archive, run_id: str | None, path) -> None:
    """--run of a viewer names a run of the archive (else one line and exit 1, not an empty view)."""
    if run_id is not None and archive.get_run(run_id) is None:
        sys.exit(f"error: no run {run_id!r} in {path}")


def cmd_handover(args) -> int:
    """Choose a run's hand-over again on its shortlist's worst fit start (`evolve.handover`): for a
    run made before the rule, or with another number of starts. Its data must be readable."""
    from evolve.archive import Archive
    from evolve.config import RunConfig
    from evolve.handover import hand_over
    from evolve.judge_memo import memo_for
    from evolve.workers import ExecutorError, WorkerPool
    from evaluator.data import load
    from evaluator.holdout import split_labels
    from evaluator.served_shapes import usable_check
    if not Path(args.archive).exists():
        sys.exit(f"error: no archive at {args.archive}")
    archive = _write_archive(args.archive)
    run = archive.get_run(args.run)
    if run is None or args.run.startswith(BASELINE_PREFIX):
        sys.exit(f"error: no search run {args.run!r} in {args.archive}")
    cfg = RunConfig.from_json(run["config"] or {})
    if not cfg.holdout:
        sys.exit(f"error: run {args.run} ranked on in-sample errors only (--no-holdout): it has no held-out "
                 f"regimes to weigh fit starts on")
    try:
        gt = load(cfg.data)
    except DataError as e:
        sys.exit(f"error: the run's data cannot be read: {e}")
    pools = []

    def pool():  # as the run's: a start's full job is cut into its held-out splits
        pools.append(WorkerPool(cfg.data, cfg.train_fraction, args.workers, cfg.timeout_s, heldout=True,
                                splits=split_labels(gt.experiments)))
        if cfg.reuse:  # starts this archive has judged already (evolve.judge_memo)
            pools[-1].memo = memo_for(archive, gt, cfg.train_fraction)
        return pools[-1]
    before = run.get("recommended")
    try:
        best = hand_over(archive, args.run, pool, args.starts, usable=usable_check(gt), shortlist_size=args.shortlist,
                         say=lambda line: print(line, file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        print("interrupted: the starts of every program already fitted are kept; run it again to finish")
        return 130
    except ExecutorError as e:
        sys.exit(f"error: {e}")
    finally:
        for p in pools:
            p.close()
    if best is None:
        print(f"run {args.run}: no valid full evaluation to hand over")
        return 1
    fs = (best.get("evaluation") or {}).get("fit_starts")
    print(f"run {args.run} hands over #{best['id']}" + (f" (was #{before})" if before not in (None, best["id"]) else ""))
    if fs and fs.get("starts", 1) > 1:
        from evolve.views.holdout_table import starts_text
        print(f"  {starts_text(fs)}")
    return 0


def cmd_migrate(args) -> int:
    """Upgrade an archive written by an older version (viewers never do), after a backup."""
    from evolve.archive import Archive
    out = Archive.migrate(args.archive)
    if out["backup"] is None:
        print(f"{out['path']}: schema {out['from']} is current, nothing to do")
    else:
        print(f"{out['path']}: schema {out['from']} -> {out['to']}"
              f" (added {', '.join(out['added']) or 'nothing'}); backup {out['backup']}")
    return 0


def cmd_ui(args) -> int:
    _read_archive(args.archive).close()  # missing, damaged or older archive: one line, no server
    from evolve.views.server import serve
    try:
        serve(args.archive, host=args.host, port=args.port, open_browser=False)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    return 0


def cmd_predict(args) -> int:
    from evolve.predict_run import cmd_predict as predict  # loads numba and SciPy: only when it runs
    return predict(args)


def cmd_frontier(args) -> int:
    from evolve.views.tables import frontier_table, render_frontier
    archive = _read_archive(args.archive)
    _known_run_or_exit(archive, args.run, args.archive)
    rows = frontier_table(archive, args.run, collapse=not args.all)
    rows = [r for r in rows if not str(r.get("run", "")).startswith(BASELINE_PREFIX)]
    if args.json:
        print(json.dumps(clean_json(rows), indent=1, allow_nan=False))
    else:
        render_frontier(rows, _console())
    return 0


def cmd_show(args) -> int:
    from evolve.baselines_store import stored_baselines
    from evolve.spend import Spend
    from evolve.views.holdout_table import holdout_table, split_table
    from evaluator.served_shapes import usable_check
    from evolve.views.tables import show_program
    archive = _read_archive(args.archive)
    rec = _program_or_exit(archive, args)
    name, base = _best_baseline(stored_baselines(archive, rec["run_id"]))
    con = _console()
    if name:
        con.print(f"baseline shown alongside: {name} (lowest mean E2E error of the three)")
    gt = _run_gt(archive, rec["run_id"])
    show_program(archive, args.program_id, con, baseline_rows=base.rows if base else None,
                 usable=usable_check(gt) if gt is not None else None)
    run = archive.get_run(rec["run_id"]) or {}
    if (run.get("config") or {}).get("llm"):
        cfg = run["config"]
        con.print(f"LLM spend of run {rec['run_id']}: "
                  + Spend.of_run(archive, rec["run_id"], cfg.get("max_llm_cost"), cfg.get("max_llm_tokens")).text())
    if (rec.get("evaluation") or {}).get("holdout"):
        named = {f"#{rec['id']}": rec["evaluation"], **({name: base} if base is not None else {})}
        con.print(holdout_table(named))
        con.print(split_table(named))
    _show_kernel_notes(archive, rec, con)
    _show_coverage(archive, rec, con, gt)
    return 0


def _run_gt(archive, run_id: str):
    """The run's ground truth, or None when it cannot be read (`_show_coverage` says why)."""
    from evaluator.data import load
    try:
        return load(_run_data(archive, run_id))
    except DataError:
        return None


def _show_coverage(archive, rec: dict, con, gt=None) -> None:
    """Where the program holds (evaluator.coverage): what its constants saw, its held-out error
    per regime, what it was never validated for and the physical rules on the shipped configs'
    shapes; from the run's data."""
    from evaluator.coverage import coverage, coverage_lines
    from evaluator.data import load
    if not (rec.get("evaluation") or {}).get("valid"):
        return
    try:
        gt = gt if gt is not None else load(_run_data(archive, rec["run_id"]))
    except DataError as e:
        con.print(f"coverage: the run's data cannot be read ({e})")
        return
    for line in coverage_lines(coverage(gt, rec.get("objectives"), rec)):
        con.print(line, markup=False)


def _run_data(archive, run_id: str | None) -> str | None:
    """The --data of a run (None: the embedded default)."""
    run = archive.get_run(run_id) if run_id else None
    return ((run or {}).get("config") or {}).get("data")


def _show_kernel_notes(archive, rec: dict, con) -> None:
    """For a program reading measured components: where each model's kernel tables came from,
    e.g. a head layout that was not measured and was scaled from the nearest one."""
    from evaluator.components import MEASURED_NAMES
    from evaluator.data import load
    from evaluator.program import ProgramError, parse_program
    from evolve.views.components_view import kernel_notes
    try:
        used = MEASURED_NAMES & set(parse_program(rec["source"]).params)
    except ProgramError:
        return
    if not used:
        return
    data = _run_data(archive, rec["run_id"])
    try:
        notes = kernel_notes(load(data))
    except DataError as e:
        con.print(f"[red]measured components: cannot read the run's data ({e})[/red]")
        return
    con.print(f"[bold]measured components[/bold] ({', '.join(sorted(used))}) from vLLM's kernel tables "
              f"({data or 'embedded default'}):")
    for model, lines in sorted(notes.items()):
        con.print(f"  {model}: " + "; ".join(lines))


def cmd_report(args) -> int:
    from evaluator.data import load
    from evolve.baselines_store import stored_baselines
    from evolve.views.components_view import components_data
    from evolve.views.report import report_html
    archive = _read_archive(args.archive)
    _known_run_or_exit(archive, args.run, args.archive)
    if Path(args.output).is_dir():
        sys.exit(f"error: {args.output}: is a directory (-o names the report file)")
    if args.program is not None and archive.program(args.program) is None:
        sys.exit(f"error: no program {args.program} in {args.archive}")
    data = args.data if args.data is not None else _run_data(archive, args.run)
    try:
        gt = load(data)  # the components section and the recommended program's coverage statement
        comps = components_data(gt)
    except DataError as e:
        gt = comps = None
        print(f"note: no components section and no coverage statement ({e})", file=sys.stderr)
    path = report_html(archive, args.output, run=args.run, program_id=args.program,
                       baselines=stored_baselines(archive, args.run), components=comps, gt=gt)
    print(f"wrote {path}")
    return 0


def cmd_components(args) -> int:
    from evolve.views.components_view import components_data, components_table
    gt = _load_gt(args)
    try:
        data = components_data(gt, [args.model] if args.model else None)
    except DataError as e:
        sys.exit(f"error: {e}")
    if args.json:
        print(json.dumps(clean_json({"source": gt.source, "mode": gt.mode, "models": data}), indent=1,
                         allow_nan=False))
        return 0
    con = _console()
    for model, d in data.items():
        if d["error"]:
            con.print(f"[red]{model}: {d['error']}[/red]")
            continue
        con.print(components_table(model, d))
    return 0


def _int_at_least(lo: int, hi: int = 2**63 - 1):
    """argparse type: an integer in [lo, hi] (a budget of 0 or a negative worker count is a
    typo; hi keeps ids inside SQLite's integers)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not lo <= v <= hi:
            rng = f">= {lo}" if hi == 2**63 - 1 else f"in [{lo}, {hi}]"
            raise argparse.ArgumentTypeError(f"must be {rng}, got {v}")
        return v
    parse.__name__ = f"integer >= {lo}"
    return parse


def _float_range(lo: float, hi: float = math.inf, lo_open: bool = True, hi_open: bool = True):
    """argparse type: a finite float inside (lo, hi); NaN and inf are refused (NaN once hung a run)."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        below = v <= lo if lo_open else v < lo
        above = v >= hi if hi_open else v > hi
        if not math.isfinite(v) or below or above:
            rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
            raise argparse.ArgumentTypeError(f"must be a finite number in {rng}, got {text!r}")
        return v
    parse.__name__ = "number"
    return parse


POSITIVE_INT = _int_at_least(1)
NON_NEGATIVE_INT = _int_at_least(0)
POSITIVE = _float_range(0.0)
NON_NEGATIVE = _float_range(0.0, lo_open=False)
FRACTION = _float_range(0.0, 1.0)


PORT = _int_at_least(0, 65535)


class _HoldoutChoices:
    """argparse choices of `evaluate --holdout`: "all" and evaluator.holdout.KINDS, imported when
    a value is checked (that module loads numpy; `evolve --help` does not need it)."""

    def _kinds(self) -> tuple:
        from evaluator.holdout import KINDS
        return ("all", *KINDS)

    def __contains__(self, value) -> bool:
        return value in self._kinds()

    def __iter__(self):
        return iter(self._kinds())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evolve", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    def data_opts(sp):
        sp.add_argument("--data", metavar="DIR", default=None,
                        help="ground-truth directory (layout of shared/data); default: the embedded table")
        sp.add_argument("--train-fraction", type=FRACTION, default=0.7,
                        help="time-ordered split inside each load stage (default 0.7)")

    def caps_opts(sp):
        d = Caps()
        sp.add_argument("--max-ops", type=NON_NEGATIVE_INT, default=d.ops, help=f"Go cap: operations (default {d.ops})")
        sp.add_argument("--max-cond", type=NON_NEGATIVE_INT, default=d.conditionals,
                        help=f"Go cap: conditionals (default {d.conditionals})")
        sp.add_argument("--max-consts", type=NON_NEGATIVE_INT, default=d.constants,
                        help=f"Go cap: named constants (default {d.constants})")

    def run_opts(sp):
        data_opts(sp)
        caps_opts(sp)
        sp.add_argument("--budget", type=POSITIVE_INT, default=2000,
                        help="candidate evaluations, the seed programs included (default 2000; every run "
                             "evaluates all its seeds first)")
        sp.add_argument("--seed", type=NON_NEGATIVE_INT, default=0)
        sp.add_argument("--archive", default="archive.db", metavar="PATH")
        sp.add_argument("--workers", type=POSITIVE_INT, default=2, help="evaluation processes (default 2)")
        sp.add_argument("--generation-size", type=POSITIVE_INT, default=8, help="candidates proposed per generation")
        sp.add_argument("--timeout", type=POSITIVE, default=60.0,
                        help="wall-clock limit per candidate (s); 4x for a full evaluation with held-out splits")
        sp.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="where candidates are evaluated: local processes (default) or a Ray cluster "
                             "(docs/distributed.md); the archive is the same for a seed either way")
        sp.add_argument("--ray-address", metavar="ADDR",
                        help="a running Ray cluster (host:port, as `ray start --head` prints); "
                             "default: start a local one with --workers CPUs")
        sp.add_argument("--no-holdout", action="store_true",
                        help="rank on the in-sample (time split) errors only: no held-out splits, ~4x cheaper")
        sp.add_argument("--promote-unpinned", action="store_true",
                        help="also give the full evaluation to screened programs with a constant the data "
                             "cannot pin down (default: not; the hand-over never takes them)")
        sp.add_argument("--whole-screens", action="store_true",
                        help="replay every experiment in every screen, so each stores its whole in-sample "
                             "score (default: a screen stops once it cannot earn a full evaluation; the "
                             "same programs get one either way)")
        sp.add_argument("--no-reuse", action="store_true",
                        help="judge every job again, even one this archive holds the answer to under the "
                             "same judge (default: such a job is answered from the archive, by no worker: "
                             "the same seed run again replays; evolve/judge_memo.py)")
        sp.add_argument("--handover-starts", type=POSITIVE_INT, default=HANDOVER_STARTS, metavar="N",
                        help=f"fit the {HANDOVER_SHORTLIST} best programs again from N start points each at the end and "
                             f"hand over the one whose worst start holds best (default {HANDOVER_STARTS}; 1: "
                             f"choose on the declared constants alone)")

    r = sub.add_parser("run", help="evolve step-time programs (the main job)")
    run_opts(r)
    r.add_argument("--llm", metavar="MODEL", help="litellm model string; default: the offline operator")
    r.add_argument("--llm-base", metavar="URL", help="API base URL (OpenAI-compatible servers, Ollama...)")
    r.add_argument("--replay", metavar="RUN", help="replay cached LLM replies only (no network)")
    r.add_argument("--resume", metavar="RUN", help="continue a killed or finished run (a run that stored "
                                                   "nothing starts again from its stored config)")
    r.add_argument("--max-llm-cost", type=POSITIVE, metavar="USD", default=None,
                   help="LLM spend cap in USD for the whole run (stored with it, kept on --resume); at the cap "
                        "the run goes on with the offline operator")
    r.add_argument("--max-llm-tokens", type=POSITIVE_INT, metavar="N", default=None,
                   help="LLM token cap (prompt + completion) for the whole run; at the cap the run goes on "
                        "with the offline operator")
    r.add_argument("--llm-price-in", type=NON_NEGATIVE, metavar="USD_PER_MTOK", default=None,
                   help="the model's price per million prompt tokens (needed by --max-llm-cost when litellm "
                        "does not know the model; stored with the run)")
    r.add_argument("--llm-price-out", type=NON_NEGATIVE, metavar="USD_PER_MTOK", default=None,
                   help="the model's price per million completion tokens")
    r.add_argument("--llm-timeout", type=POSITIVE, metavar="S", default=None,
                   help="total deadline of one LLM call in seconds: connect, first byte and the whole reply "
                        "(default 120); a call past it is recorded as failed")
    r.set_defaults(func=cmd_run)

    ho = sub.add_parser("handover", help="choose a run's hand-over again, on the worst of several fit starts "
                                         "of its best programs (what `run` does at its end)")
    ho.add_argument("run", metavar="RUN")
    ho.add_argument("--archive", default="archive.db", metavar="PATH")
    ho.add_argument("--starts", type=POSITIVE_INT, default=HANDOVER_STARTS, metavar="N",
                    help=f"start points per program, the declared constants first (default {HANDOVER_STARTS})")
    ho.add_argument("--shortlist", type=POSITIVE_INT, default=HANDOVER_SHORTLIST, metavar="N",
                    help=f"programs weighed, the first N in the declared-start order (default {HANDOVER_SHORTLIST}; "
                         f"each one past the stored ones costs a full evaluation per extra start)")
    ho.add_argument("--workers", type=POSITIVE_INT, default=2)
    ho.set_defaults(func=cmd_handover)

    pl = sub.add_parser("pilot", help="K independent runs with seeds S..S+K-1 and their spread")
    run_opts(pl)
    pl.add_argument("--runs", type=POSITIVE_INT, default=3)
    pl.set_defaults(func=cmd_pilot)

    g = sub.add_parser("emit-go", help="write an archived program as a BLIS LatencyModel in Go")
    g.add_argument("program_id", type=NON_NEGATIVE_INT)
    g.add_argument("--archive", default="archive.db", metavar="PATH")
    g.add_argument("-o", "--output", metavar="FILE.go")
    g.add_argument("--package", default="latency")
    g.add_argument("--interface", choices=("blis", "legacy5"), default="blis")
    caps_opts(g)
    g.add_argument("--no-simplify", action="store_true",
                   help="emit the program as archived, dead conditionals included")
    blis_cmds.add_emit_go_options(g)  # --alias, --blis-patch, --blis-dir
    blis_cmds.register(sub, data_opts)  # export-blis-traces, blis-compare
    from evolve import predict_cmd  # its flags, standard library only
    predict_cmd.add_parser(sub, cmd_predict)  # predict (docs/predict.md)

    f = sub.add_parser("frontier", help="the Pareto-optimal programs, sorted by complexity")
    f.add_argument("--archive", default="archive.db", metavar="PATH")
    f.add_argument("--run", default=None)
    f.add_argument("--json", action="store_true")
    f.add_argument("--all", action="store_true",
                   help="every frontier program (default: behavioural duplicates collapse into one row)")
    f.set_defaults(func=cmd_frontier)

    sh = sub.add_parser("show", help="one program: source, constants, errors vs the best baseline, lineage")
    sh.add_argument("program_id", type=NON_NEGATIVE_INT)
    sh.add_argument("--archive", default="archive.db", metavar="PATH")
    sh.set_defaults(func=cmd_show)

    rp = sub.add_parser("report", help="one self-contained HTML report")
    rp.add_argument("--archive", default="archive.db", metavar="PATH")
    rp.add_argument("--run", default=None)
    rp.add_argument("--program", type=NON_NEGATIVE_INT, default=None, help="program detailed (default: the run's recommended program)")
    rp.add_argument("-o", "--output", default="report.html")
    rp.add_argument("--data", metavar="DIR", default=None,
                    help="ground truth for the components section (default: the run's --data)")
    rp.set_defaults(func=cmd_report)

    c = sub.add_parser("components", help="peak-speed vs measured (kernel-table) components on a grid of "
                                          "batch states, beside the real step cycles near each point")
    data_opts(c)
    c.add_argument("--model", default=None, help="one model (default: every model)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_components)

    u = sub.add_parser("ui", help="local web app over the archive (127.0.0.1)")
    u.add_argument("--archive", default="archive.db", metavar="PATH")
    u.add_argument("--host", default="127.0.0.1")
    u.add_argument("--port", type=PORT, default=8765)
    u.set_defaults(func=cmd_ui)

    mg = sub.add_parser("migrate", help="upgrade an archive written by an older version (backup first: "
                                        "PATH.bak-<timestamp>); the viewers never change an archive")
    mg.add_argument("--archive", default="archive.db", metavar="PATH")
    mg.set_defaults(func=cmd_migrate)

    b = sub.add_parser("baselines", help="fit and score the three baselines")
    data_opts(b)
    b.add_argument("--json", action="store_true")
    b.add_argument("--holdout", action="store_true",
                   help="also fit and score them leaving out each workload, each model and the high load")
    b.set_defaults(func=cmd_baselines)

    e = sub.add_parser("evaluate", help="fit and score one program file")
    data_opts(e)
    e.add_argument("program")
    e.add_argument("--json", action="store_true")
    e.add_argument("--breakdown", action="store_true",
                   help="then simulate again with the fitted constants: per experiment and stage, where the time "
                        "per output token goes, the prefix cache, and the predicted step next to the components")
    e.add_argument("--time-limit", type=POSITIVE, metavar="S", default=None,
                   help="wall-clock limit of the evaluation in seconds (default: the search's per-candidate "
                        "limit, 60 s, 4x with --holdout); the worker is killed past it")
    e.add_argument("--holdout", nargs="?", const="all", choices=_HoldoutChoices(), metavar="KIND",
                   help="also fit and score leaving out each workload / each model / the high load "
                        "(workload, model, load; default all three)")
    e.add_argument("--starts", type=POSITIVE_INT, default=1, metavar="N",
                   help="also fit from N-1 more start points (seeded multiples of the declared constants) and "
                        "print each regime's range over them: how far the data pins the figures down (default 1)")
    e.set_defaults(func=cmd_evaluate)

    m = sub.add_parser("make-default", help="regenerate the embedded workload table from a data dir")
    m.add_argument("--data", required=True, metavar="DIR")
    m.add_argument("-o", "--output", default=str(Path(__file__).resolve().parent.parent / "evaluator"
                                                 / "default_workloads.json"))
    m.set_defaults(func=cmd_make_default)

    i = sub.add_parser("ingest", help="convert a benchmark run (vLLM OTEL traces, inference-perf, guidellm, "
                                      "vllm bench serve) into the ground-truth layout")
    i.add_argument("inputs", nargs="*", metavar="FILE",
                   help="files of one run, format detected: OTLP traces (fork step events and/or upstream request "
                        "spans), inference-perf lifecycle, guidellm report, vllm bench serve --save-detailed JSON; "
                        "writes experiments/<id>/, requests/, steps/ and model_configs/")
    i.add_argument("--traces", help="vLLM OTEL traces.json (OTLP JSON lines): steps/ only")
    i.add_argument("--lifecycle", help="inference-perf per_request_lifecycle_metrics.json: requests/ only")
    i.add_argument("--experiment", required=True)
    i.add_argument("--model", default="", help="HF model id (default: what the file names)")
    i.add_argument("--model-config", metavar="PATH", help="the model's Hugging Face config.json "
                                                           "(default: shipped in evaluator/model_configs)")
    i.add_argument("--workload", default="")
    i.add_argument("--tp", type=POSITIVE_INT, default=None, help="tensor parallelism (default 1)")
    i.add_argument("--max-num-seqs", type=POSITIVE_INT, default=None, help="server setting (default 1024)")
    i.add_argument("--max-num-batched-tokens", type=POSITIVE_INT, default=None, help="server setting (default 8192)")
    i.add_argument("--block-size", type=POSITIVE_INT, default=None, help="KV block size (default 16)")
    i.add_argument("--kv-blocks", type=POSITIVE_INT, default=None,
                   help="KV blocks per GPU as vLLM logged them (default: estimated from the model)")
    i.add_argument("--out", required=True, metavar="DIR")
    i.set_defaults(func=cmd_ingest)
    return p


def _check_combinations(p: argparse.ArgumentParser, args) -> None:
    """Flags that only make sense together: refused by the parser, never silently ignored."""
    if args.cmd != "run":
        return
    if args.resume is None:
        for flag, val in (("--replay", args.replay), ("--llm-base", args.llm_base),
                          ("--max-llm-cost", args.max_llm_cost), ("--max-llm-tokens", args.max_llm_tokens),
                          ("--llm-price-in", args.llm_price_in), ("--llm-price-out", args.llm_price_out),
                          ("--llm-timeout", args.llm_timeout)):
            if val is not None and not args.llm:
                p.error(f"{flag} needs --llm MODEL")


def _db_errors() -> tuple:
    """sqlite3's errors, and SQLAlchemy's once a command has loaded it (none can come before)."""
    sa = sys.modules.get("sqlalchemy.exc")
    return (sqlite3.Error,) if sa is None else (sqlite3.Error, sa.SQLAlchemyError)


def _note_exit(code) -> None:
    """Tell the LLM client (if this command loaded it) the code the process leaves with: a call
    stuck past its deadline makes it leave at once with it (`evolve.llm._leave_if_stuck`)."""
    llm = sys.modules.get("evolve.llm")
    if llm is not None:
        llm.note_exit_code(code)


def main(argv=None) -> int:
    try:
        rc = _main(argv)
    except SystemExit as e:
        _note_exit(e.code)
        raise
    _note_exit(rc)
    return rc


def _main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    _check_combinations(p, args)
    try:
        return args.func(args)
    except (ArchiveError, DataError) as e:
        sys.exit(f"error: {e}")
    except OSError as e:  # a file the command reads or writes: a directory given as -o, no permission...
        sys.exit(f"error: {e}")
    except _db_errors() as e:  # the archive failed under us (locked, read-only, damaged)
        sys.exit(f"error: {describe_db_error(Path(getattr(args, 'archive', '') or '.'), e)}")


if __name__ == "__main__":
    sys.exit(main())
