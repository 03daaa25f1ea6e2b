"""`evolve evaluate PROGRAM.py` in a killable worker process, under the search's time limit.

A compiled numba loop cannot be interrupted (docs/architecture.md, fact 8), so a program whose
fit or simulation runs away (300 constants, a runaway queue) would hold the command forever
in-process. The evaluation runs in a spawned worker, like a search candidate
(`evolve.workers`): the worker reads the data, calibrates the reference states (and prepares
the held-out views) before it reports ready, then evaluates; the parent kills it when the
evaluation (and, with --breakdown, the breakdown) takes longer than the limit. The default
limit is the search's per-candidate one (`RunConfig.timeout_s`, x HELDOUT_TIMEOUT_FACTOR with
--holdout).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import stat

from evaluator.data import load
from evaluator.errors import DataError
from evaluator.evaluate import Evaluator
from evaluator.fit_starts import evaluate_starts
from evaluator.program import parse_program
from evaluator.records import Evaluation
from evolve.config import RunConfig
from evolve.lifeline import die_with_parent
from evolve.workers import HELDOUT_TIMEOUT_FACTOR

READY_LIMIT_S = 900.0  # reading the data and calibrating before the clock starts


class EvaluateError(Exception):
    """One line for the user: the worker ran out of time, died, or crashed."""


def regular_file_text(path: str) -> str:
    """The text of a program file; OSError/ValueError with one line for a FIFO, a device or a
    directory (opening a FIFO would block until a writer comes)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
        raise ValueError(f"is {kind}, not a program file")
    with open(path, "rb") as f:
        return f.read().decode("utf-8")


def default_time_limit(heldout: bool) -> float:
    return RunConfig().timeout_s * (HELDOUT_TIMEOUT_FACTOR if heldout else 1)


def _main(conn, source, data, train_fraction, heldout, breakdown, starts=1):
    die_with_parent()
    try:
        try:
            gt = load(data)
        except DataError as e:
            conn.send(("data-error", str(e)))
            return
        ev = Evaluator(gt, train_fraction=train_fraction)
        ev.reference_states()
        if heldout:
            ev.prepare_heldout()
        conn.send(("ready", None))
        prog = parse_program(source)
        res = ev.evaluate(prog, heldout=heldout)
        conn.send(("evaluated", res.to_json()))
        if breakdown and res.valid:
            conn.send(("breakdown", ev.breakdown(prog, res)))
        if starts > 1:
            conn.send(("starts", evaluate_starts(ev, prog, starts, heldout=heldout, first=res)))
        conn.send(("done", None))
    except BaseException as e:  # noqa: BLE001 - one line to the parent, never a traceback
        conn.send(("crash", f"{type(e).__name__}: {e}"[:500]))


def evaluate_in_worker(source: str, data, train_fraction: float, heldout: tuple, breakdown: bool,
                       time_limit_s: float, starts: int = 1):
    """(Evaluation, breakdown parts or None, records per fit start or None); DataError for the
    data, EvaluateError otherwise. starts > 1: also the program fitted from that many start
    points (`evaluator.fit_starts`), each under the time limit."""
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_main, args=(send, source, data, train_fraction, tuple(heldout), breakdown, starts),
                       daemon=True)
    proc.start()
    send.close()

    def wait(limit: float, what: str):
        if not recv.poll(limit):
            if proc.is_alive():
                raise EvaluateError(f"{what} took longer than the time limit of {limit:g} s (--time-limit S); "
                                    "the worker was killed")
        try:
            return recv.recv()
        except (EOFError, OSError):
            proc.join(5)
            raise EvaluateError(f"the evaluation worker died during the {what} (exit code {proc.exitcode})") from None

    try:
        kind, val = wait(READY_LIMIT_S, "reading the data")
        if kind == "data-error":
            raise DataError(val)
        if kind == "crash":
            raise EvaluateError(f"evaluation crashed: {val}")
        kind, val = wait(time_limit_s, "evaluation")
        if kind == "crash":
            raise EvaluateError(f"evaluation crashed: {val}")
        res = Evaluation.from_json(val)
        parts = None
        if breakdown and res.valid:
            kind, val = wait(time_limit_s, "breakdown")
            if kind == "crash":
                raise EvaluateError(f"breakdown crashed: {val}")
            parts = val
        records = None
        if starts > 1:
            kind, val = wait(time_limit_s * (starts - 1), f"evaluation from {starts} fit starts")
            if kind == "crash":
                raise EvaluateError(f"evaluation from other fit starts crashed: {val}")
            records = val
        return res, parts, records
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        recv.close()
