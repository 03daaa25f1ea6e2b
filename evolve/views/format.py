"""Number formats and record accessors shared by the terminal tables, the report and the UI.

One convention for a value that is missing or undefined (None, NaN, an infinite error): MISSING,
"—", in every table (terminal, report, UI: app.js writes the same), null in JSON (clean_json).

Baselines reach the views in three shapes (an Evaluation, an archive record, a bare list of
experiment-stage rows); the accessors here accept all three so no caller converts.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evaluator.objectives import BY_NAME, Caps, finite_or_none
from evaluator.records import strict_json

# evaluator.program (numba) is imported where a program is parsed, not here: `evolve frontier`
# and `evolve --help` import this module and never parse one (tests/test_startup.py)

BASELINE_PREFIX = "baselines-"  # run ids under which the archive stores the baseline evaluations
MISSING = "—"  # a missing or undefined value in a table (JSON: null)


def fmt_missing(v, fmt) -> str:
    """fmt(v) for a finite number, MISSING for None, NaN, infinity or anything not a number."""
    x = finite_or_none(v)
    return MISSING if x is None else fmt(x)


def fmt_err(v) -> str:
    """A relative error as a percentage (x10 and beyond as a factor); a dash when missing or
    undefined (NaN, infinite: an invalid evaluation's objectives)."""
    x = finite_or_none(v)
    if x is None:
        return MISSING
    return f"{100 * x:.1f}%" if x < 10 else f"{x:.3g}x"


def fmt_num(v, digits: int = 3) -> str:
    """Integers as integers, anything else with `digits` significant digits; a dash when
    missing or not finite."""
    x = finite_or_none(v)
    if x is None:
        return MISSING
    if x == int(x) and abs(x) < 1e6:
        return str(int(x))
    return f"{x:.{digits}g}"


def fmt_rate(v) -> str:
    """A fraction in [0, 1] (a cache hit rate) as a percentage; a dash when missing."""
    x = finite_or_none(v)
    return MISSING if x is None else f"{100 * x:.1f}%"


def fmt_ms(v) -> str:
    """Seconds as milliseconds with 3 significant digits (rounding noise below a picosecond
    as 0); a dash when missing."""
    x = finite_or_none(v)
    if x is None:
        return MISSING
    return "0" if abs(x) < 1e-12 else f"{1e3 * x:.3g}"


def fmt_us(v) -> str:
    """Microseconds: whole ones from 100 up, else 3 significant digits; a dash when missing."""
    x = finite_or_none(v)
    if x is None:
        return MISSING
    return f"{x:.0f}" if abs(x) >= 100 else ("0" if x == 0 else f"{x:.3g}")


CACHE_KEYS = ("hit_rate", "always_hit_rate", "evictions", "preemptions")  # per-stage prefix-cache columns


def cache_cells(r: Mapping) -> list[str]:
    """Hit rate, always-hit rate, evictions and preemptions of one experiment-stage row, as
    text ("—" for rows stored before the judge recorded them)."""
    return [fmt_rate(r.get("hit_rate")), fmt_rate(r.get("always_hit_rate")),
            fmt_num(r.get("evictions")), fmt_num(r.get("preemptions"))]


FAILURE_COLUMNS = ("failed", "failed sim", "fail err")  # headers of failure_cells


def fmt_pts(v) -> str:
    """Percentage points (an error between two fractions); a dash when missing."""
    x = finite_or_none(v)
    return MISSING if x is None else f"{x:.1f} pts"


def fmt_objective(key: str, v) -> str:
    """An error objective (a fraction) as every view prints it: in points where it is a difference
    of two fractions (the overload failures: `Objective.points`), else as `fmt_err`."""
    o = BY_NAME.get(key)
    if o is None or not o.points:
        return fmt_err(v)
    x = finite_or_none(v)
    return fmt_pts(None if x is None else 100.0 * x)


def failure_cells(r: Mapping) -> list[str]:
    """Measured and simulated failed fraction of one experiment-stage row and the error in
    points ("—" for rows stored before the judge recorded them)."""
    return [fmt_rate(r.get("meas_fail")), fmt_rate(r.get("pred_fail")), fmt_pts(r.get("fail_err_pts"))]


def pct(v: float) -> str:
    """Short percentage for plot labels and tooltips."""
    return f"{100 * v:.3g}%" if v < 10 else f"{v:.3g}x"


def rows_of(baseline) -> list[dict]:
    """Experiment-stage rows of an Evaluation, an archive record, or a list of rows."""
    if baseline is None:
        return []
    if isinstance(baseline, Mapping):
        if "evaluation" in baseline and isinstance(baseline["evaluation"], Mapping):
            return list(baseline["evaluation"].get("rows") or [])
        return list(baseline.get("rows") or [])
    if hasattr(baseline, "rows"):
        return list(baseline.rows or [])
    return list(baseline)


def objectives_of(baseline) -> dict:
    """Objectives of an Evaluation or an archive record ({} for a bare list of rows)."""
    if isinstance(baseline, Mapping):
        ev = baseline.get("evaluation") if isinstance(baseline.get("evaluation"), Mapping) else baseline
        return dict(ev.get("objectives") or {})
    return dict(getattr(baseline, "objectives", None) or {})


def row_key(r: Mapping) -> tuple[str, int]:
    """(experiment, stage): how a program's rows are matched with a baseline's."""
    return (str(r.get("experiment")), int(r.get("stage") or 0))


def mean(xs) -> float | None:
    """Mean of the finite values, None if there are none."""
    vals = [x for x in (finite_or_none(v) for v in xs) if x is not None]
    return sum(vals) / len(vals) if vals else None


def baselines_map(baselines) -> dict[str, Any]:
    """name -> baseline, from a mapping, a single baseline or None."""
    if baselines is None:
        return {}
    if isinstance(baselines, Mapping):
        return dict(baselines)
    return {"baseline": baselines}


def const_names(source: str) -> list[str]:
    """Names of the program's fitted constants in vector order (a regex when it does not parse)."""
    from evaluator.program import ProgramError, parse_program
    try:
        return parse_program(source).const_names
    except (ProgramError, SyntaxError, ValueError):  # display only: the archive keeps rejected programs
        return re.findall(r"^([A-Za-z][A-Za-z0-9_]*)\s*=", source, flags=re.M)


def go_cap_status(rec: Mapping, caps: Caps = Caps()) -> str | None:
    """None if the program fits the Go emitter's cap, else the reason."""
    if rec.get("n_ops") is None:
        return "unknown (program did not parse)"
    from evaluator.program import Complexity
    return Complexity(rec["n_ops"], rec["n_cond"], rec["n_consts"]).within(*caps.as_tuple())


def complexity_of(rec: Mapping) -> float | None:
    """The complexity objective of a record, else the program's own complexity column."""
    c = finite_or_none((rec.get("objectives") or {}).get("complexity"))
    return c if c is not None else finite_or_none(rec.get("complexity"))


def clean_json(o):
    """Strict-JSON-safe copy for the views: `evaluator.records.strict_json`, loose (keys and
    unknown objects as strings)."""
    return strict_json(o, loose=True)
