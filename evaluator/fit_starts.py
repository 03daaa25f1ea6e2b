"""A program's held-out figures fitted from several start points: how far they move.

The fits are local (SciPy's trust region from the program's declared constants), and a
program can have several optima of nearly equal training loss that extrapolate apart. The
trace run of 2026-11-27 handed over #476, whose codellama constants fitted on the short
workloads land in one basin or the other with the step rows they read: 0.3% or 16.9% E2E
error on the reasoning workload nobody fitted. A figure that a start point flips says where
the program is not pinned down, whatever its best run showed.

Start 0 is the declared constants (what every evaluation uses); start i > 0 multiplies each
declared constant by a log-normal factor (sigma START_SIGMA, seeded: the same starts in any
process). Each start is a whole evaluation (`Evaluator.evaluate`), held-out splits included.
"""
from __future__ import annotations

import math

import numpy as np

from evaluator.objectives import INVALID, regime_errors
from evaluator.program import parse_program

START_SIGMA = 1.0  # a factor of e (~2.7) either way is one sigma


def start_points(program, n: int, seed: int = 0) -> list[np.ndarray]:
    """`n` constant vectors to fit from: the declared ones, then seeded log-normal multiples of
    them (a program without constants has one start)."""
    x0 = np.asarray(program.initial_constants, np.float64)
    if x0.size == 0:
        return [x0]
    rng = np.random.default_rng(seed)
    return [x0] + [x0 * np.exp(rng.normal(0.0, START_SIGMA, x0.size)) for _ in range(max(0, n - 1))]


def evaluate_starts(evaluator, program, n: int, heldout=True, seed: int = 0, first=None) -> list[dict]:
    """One record per start (`start_record`). `first`: the program's evaluation from its
    declared constants, if made already (start 0)."""
    out = []
    for i, x in enumerate(start_points(program, n, seed)):
        if i == 0 and first is not None:
            res = first
        else:
            p = program if i == 0 else parse_program(program.with_constants(x))
            res = evaluator.evaluate(p, heldout=heldout)
        out.append(start_record(program.const_names, i, x, res.valid, res.error, res.objectives))
    return out


def start_record(names, i: int, x, valid: bool, error: str | None, objectives) -> dict:
    """What one start gave: its constants (`names` = the program's `const_names`), validity
    (why not), the in-sample mean E2E error and each held-out regime's error
    (`evaluator.objectives.regime_errors`)."""
    return {"start": i, "start_constants": dict(zip(names, map(float, x))),
            "valid": bool(valid), "error": error,
            "e2e_mean": objectives.get("e2e_mean") if valid else None,
            "regimes": regime_errors(objectives) if valid else {}}


def worst_objectives(objectives, records: list[dict]) -> dict:
    """`objectives` with each held-out regime's error replaced by its highest over the valid,
    scored starts (the declared one included): what the program can be relied on for, whichever
    basin a fit lands in. A regime no start scored keeps its declared value."""
    out = dict(objectives)
    if not records:
        return out
    for key, row in spread(records).items():
        if key != "e2e_mean" and key in out and row["high"] is not None:
            out[key] = max(row["high"], out[key]) if _scored(out[key]) else out[key]
    return out


def spread(records: list[dict]) -> dict[str, dict]:
    """Per regime (and the in-sample mean E2E), over the valid starts: the declared start's
    figure, the lowest and the highest; None where no start could be scored."""
    valid = [r for r in records if r["valid"]]
    keys = ["e2e_mean"] + sorted({k for r in valid for k in r["regimes"]})
    out = {}
    for k in keys:
        vals = [v for v in (_figure(r, k) for r in valid) if _scored(v)]
        first = _figure(records[0], k)
        out[k] = {"declared": first if _scored(first) else None,
                  "low": min(vals) if vals else None, "high": max(vals) if vals else None,
                  "n_valid": len(vals)}
    return out


def _figure(record: dict, key: str):
    """A start's in-sample mean E2E (key "e2e_mean") or one regime's error."""
    return record["e2e_mean"] if key == "e2e_mean" else record["regimes"].get(key)


def _scored(v) -> bool:
    """A figure, not a missing or unscorable one (regime_errors ranks those as INVALID)."""
    return v is not None and math.isfinite(v) and v < INVALID
