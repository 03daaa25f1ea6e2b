"""Plain progress lines for `evolve run` when stderr is not a terminal (CI logs, nohup, files).

The rich progress bar only redraws a terminal; in a log a long run was silent for hours. A
daemon thread writes one line at least every `interval_s` (30 s) whatever the search is doing
(a single full evaluation can take minutes):

    progress run-0-ab12cd34: 48/200 evaluations, best held-out E2E 6.1%, 0.41 eval/s, LLM $0.0123

Each line is whole: one write of the line and its newline, whitespace inside it (a multi-line
error message) collapsed to single spaces, never wrapped or cut to a width; a missing best
error is "—" as in every table (evolve.views.format.MISSING). cli.py draws no rich bar then.
"""
from __future__ import annotations

import math
import sys
import threading
import time

from evaluator.objectives import finite_or_none
from evolve.views.format import MISSING

HELDOUT = ("lowo_e2e", "lomo_e2e", "load_e2e")


def best_error(members, holdout: bool) -> tuple[str, float]:
    """(label, value): the lowest mean held-out E2E error among the members (in-sample E2E
    when the run ranks in-sample only); NaN when none is finite."""
    best = math.nan
    for m in list(members):
        o = m.objectives
        keys = HELDOUT if holdout else ("e2e_mean",)
        vals = [finite_or_none(o.get(k)) for k in keys]
        if vals and all(v is not None for v in vals):
            v = sum(vals) / len(vals)
            best = v if math.isnan(best) else min(best, v)
    return ("held-out E2E" if holdout else "E2E"), best


def progress_line(search, started: float) -> str:
    run = search.archive.get_run(search.run_id) or {}
    n = int(run.get("n_evaluated") or 0)
    label, best = best_error(search.state.frontier, search.cfg.holdout)
    rate = n / max(time.monotonic() - started, 1e-9)
    spend = f"LLM {search.spend.text()}" if search.llm is not None else "LLM none"
    err = MISSING if math.isnan(best) else f"{100 * best:.1f}%"
    return one_line(f"progress {search.run_id}: {n}/{search.cfg.budget} evaluations, best {label} {err}, "
                    f"{rate:.2f} eval/s, {spend}")


def one_line(text: str) -> str:
    """text on one line: every run of whitespace (newlines included) as one space."""
    return " ".join(str(text).split())


class ProgressLog:
    """Background writer of `progress_line` every interval_s until stopped."""

    def __init__(self, search, interval_s: float = 30.0, stream=None):
        self.search, self.interval_s = search, interval_s
        self.stream = stream or sys.stderr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="progress-log")
        self.started = time.monotonic()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        self._write()  # the last figures

    def _write(self) -> None:
        if getattr(self.search, "run_id", None) is None:
            return
        try:
            line = progress_line(self.search, self.started)
        except Exception as e:  # noqa: BLE001 - a log line must never end the run
            line = one_line(f"progress: unavailable ({type(e).__name__}: {e})")
        try:  # the line and its newline in one write: another thread's output cannot split it
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken log must not end the run either
            pass

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._write()
