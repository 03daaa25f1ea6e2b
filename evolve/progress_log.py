"""Plain progress lines for `evolve run` when stderr is not a terminal (CI logs, nohup, files).

The rich progress bar only redraws a terminal; in a log a long run was silent for hours. A
daemon thread writes one line at least every `interval_s` (30 s) whatever the search is doing
(a single full evaluation can take minutes):

    progress run-0-ab12cd34: 48/200 evaluations, best held-out (worst regime: long-decode error) 6.1%, 0.41 eval/s, LLM $0.0123

Each line is whole: one write of the line and its newline, whitespace inside it (a multi-line
error message) collapsed to single spaces, never wrapped or cut to a width; a missing best
error is "—" as in every table (evolve.views.format.MISSING). cli.py draws no rich bar then.
"""
from __future__ import annotations

import sys
import threading
import time

from evaluator.objectives import BY_NAME, finite_or_none
from evolve.views.format import MISSING, fmt_err, fmt_objective
from evolve.views.history import ranked_error, worst_regime_key

def best_error(members, holdout: bool) -> tuple[str, str]:
    """(label, text): the lowest error the run ranks on among the members, as printed. Held out:
    the best program's worst regime (evolve.views.history.ranked_error, as the report's and the
    UI's "best so far"), named, in its unit (the overload failures in points: `fmt_objective`); the
    in-sample mean E2E error when the run ranks in-sample only; MISSING when none is finite."""
    best, obj = None, {}
    for m in list(members):
        o = m.objectives or {}
        v = ranked_error(o) if holdout else finite_or_none(o.get("e2e_mean"))
        if v is not None and (best is None or v < best):
            best, obj = v, o
    if not holdout:
        return "E2E", fmt_err(best)
    if best is None:
        return "held-out (worst regime)", MISSING
    key = worst_regime_key(obj)
    return f"held-out (worst regime: {BY_NAME[key].label})", fmt_objective(key, best)


def progress_line(search, started: float) -> str:
    run = search.archive.get_run(search.run_id) or {}
    n = int(run.get("n_evaluated") or 0)
    label, err = best_error(search.state.frontier, search.cfg.holdout)
    rate = n / max(time.monotonic() - started, 1e-9)
    spend = f"LLM {search.spend.text()}" if search.llm is not None else "LLM none"
    return one_line(f"progress {search.run_id}: {n}/{search.planned} evaluations, best {label} {err}, "
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


# ---------------------------------------------------------------- the live bar on a terminal

MIN_BAR = 10  # the bar itself is drawn only where at least this many columns are left


def fit_fields(fields, width: int) -> list[str]:
    """The fields (display order, each (priority, text); 0 = kept longest) that fit on one line
    of `width` columns joined by two spaces: whole fields are dropped, the least important first,
    so a narrow terminal loses a field, never half a word."""
    keep = list(fields)
    while len(keep) > 1 and len("  ".join(t for _, t in keep)) > width:
        worst = max(range(len(keep)), key=lambda i: (keep[i][0], i))
        del keep[worst]
    if keep and len(keep[0][1]) > width:  # a lone field wider than the terminal: cut with an ellipsis
        return [keep[0][1][:max(width - 1, 0)] + "…"]
    return [t for _, t in keep]


def task_fields(task) -> list[tuple[int, str]]:
    """The run's progress as (priority, text) fields, in display order."""
    f = task.fields
    done = int(task.completed)
    total = int(task.total) if task.total is not None else None
    elapsed = int(task.elapsed or 0)
    return [(2, str(f.get("run", ""))), (0, f"{done}/{total}" if total is not None else str(done)),
            (1, f"best {f.get('label', '')} {f.get('best', MISSING)}"), (4, f"ITL {f.get('itl', MISSING)}"),
            (5, f"step {f.get('step', MISSING)}"), (3, f"frontier {f.get('front', 0)}"),
            (6, f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}")]


def fitted_line(task, width: int) -> str:
    """One line of the live bar that fits `width` columns: the fields `fit_fields` keeps, and a
    bar of ━ in the columns left over (none below MIN_BAR)."""
    fields = task_fields(task)
    texts = fit_fields(fields, width)
    free = width - len("  ".join(texts)) - 2
    if free >= MIN_BAR and task.total:
        n = min(free, 40)
        filled = int(round(n * min(max(task.completed / task.total, 0.0), 1.0)))
        bar = "━" * filled + "─" * (n - filled)
        first = texts[:1] if texts and texts[0] == fields[0][1] else []
        texts = first + [bar] + texts[len(first):]
    return "  ".join(texts)


def live_bar(console, disable: bool):
    """rich's Progress drawing `fitted_line` per task at the console's current width (a
    resized terminal is followed)."""
    from rich.progress import Progress
    from rich.text import Text

    class FittedProgress(Progress):
        def get_renderables(self):
            width = console.width  # rich asks for a first frame before self.live (and self.console) exist
            for task in self.tasks:
                if task.visible:
                    yield Text(fitted_line(task, width), no_wrap=True, overflow="crop")

    return FittedProgress(console=console, disable=disable, transient=False)
