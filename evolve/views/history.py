"""What a run's progress is measured on, in one place for the run summary, the report and the UI.

The search ranks on the held-out errors (`evaluator.objectives.selection_loss`: the worst
regime), so "best so far" is that worst held-out regime error, not the in-sample fit a run
does not rank on; runs without held-out splits (`--no-holdout`) fall back to the in-sample
mean E2E error. The hypervolume is of (complexity, that error clipped at 100%) w.r.t. the fixed
reference HV_REF, so one number means the same in the summary (`Search.hv`), the report's
progress plot and the UI's, and runs stay comparable (a reference taken from the data moves).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from evaluator.objectives import BY_NAME, REGIMES, finite_or_none, has_heldout, regime_errors
from evolve.pareto import hypervolume
from evolve.views.format import complexity_of

HV_REF = (60.0, 1.0)  # (complexity, error): the Go cap's 30 operations + 3 conditionals + 10 constants, x1.4


def ranked_error(objectives: Mapping | None) -> float | None:
    """The error a run ranks programs on: the worst held-out regime where the held-out splits
    were scored, else the in-sample mean E2E error; None when it is not finite (a regime that
    could not be scored makes the program's worst regime unbounded)."""
    obj = objectives or {}
    if has_heldout(obj):
        errs = [finite_or_none(obj.get(k)) for k in REGIMES if k in obj]
        return None if any(e is None for e in errs) else max(errs)
    return finite_or_none(obj.get("e2e_mean"))


def ranked_error_label(objectives_list: Iterable[Mapping | None]) -> str:
    """Axis and column label of `ranked_error` for these programs."""
    return ("worst held-out regime error" if any(has_heldout(o) for o in objectives_list)
            else "mean E2E error (in-sample)")


def worst_regime_key(objectives: Mapping | None) -> str | None:
    """The objective name of the regime a program does worst on (None without held-out errors)."""
    obj = objectives or {}
    if not has_heldout(obj):
        return None
    errs = regime_errors(obj)
    return max(errs, key=errs.get) if errs else None


def worst_regime(objectives: Mapping | None) -> str | None:
    """The label of the regime a program does worst on (None without held-out errors)."""
    key = worst_regime_key(objectives)
    return None if key is None else BY_NAME[key].label


def _point(objectives: Mapping | None, complexity: float | None) -> tuple[float, float] | None:
    e = ranked_error(objectives)
    if e is None or complexity is None:
        return None
    return (float(complexity), min(e, HV_REF[1]))


def front_hypervolume(records: Iterable) -> float:
    """Hypervolume of (complexity, ranked error clipped at 100%) w.r.t. HV_REF over records
    (archive records, or objects or dicts with "objectives"): the one figure the summary, the
    report and the UI print."""
    pts = []
    for r in records:
        obj = r.get("objectives") if isinstance(r, Mapping) else getattr(r, "objectives", None)
        cx = complexity_of(r) if isinstance(r, Mapping) else finite_or_none((obj or {}).get("complexity"))
        p = _point(obj, cx)
        if p is not None:
            pts.append(p)
    return hypervolume(pts, HV_REF) if pts else 0.0


def progress_series(evals: Sequence[Mapping], ref: tuple[float, float] = HV_REF) -> dict[str, list]:
    """Per run: [(evaluation index, best ranked error so far or None, hypervolume so far)] over
    the run's full evaluations in archive order (`front_hypervolume` of the valid ones so far)."""
    by_run: dict[str, list] = {}
    for r in evals:
        by_run.setdefault(r["run_id"], []).append(r)
    out = {}
    for run, items in by_run.items():
        best, front, hv, series = math.inf, [], 0.0, []
        for k, r in enumerate(items, start=1):
            if r.get("eval_valid", True):
                e = ranked_error(r.get("objectives"))
                if e is not None:
                    best = min(best, e)
                p = _point(r.get("objectives"), complexity_of(r))
                if p is not None and p[0] < ref[0] and p[1] < ref[1]:
                    c, e2 = p
                    if not any(fc <= c and fe <= e2 for fc, fe in front):
                        front = [(fc, fe) for fc, fe in front if not (c <= fc and e2 <= fe)] + [(c, e2)]
                        hv = hypervolume(front, ref)
            series.append((k, best if math.isfinite(best) else None, hv))
        out[run] = series
    return out
