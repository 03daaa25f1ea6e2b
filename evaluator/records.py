"""The judge's verdict on one candidate, as one frozen record with one converter each way.

`Evaluation` is what `Evaluator.evaluate` returns, what a worker process sends back over its
pipe (as `to_json()`), what the archive stores column by column and what `Archive.evaluation`
hands back (through `from_json`). Nothing else builds one from a dict, so a field added here
reaches every stage or fails loudly in `from_json`.

The per-stage rows and per-experiment step metrics stay plain dicts typed as `StageScore` /
`StepScore`: they are stored as JSON in the archive and read by the views as mappings.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import PurePath
from typing import TypedDict

from evaluator.objectives import ORDER, invalid_objectives


class StageScore(TypedDict):
    """Errors of one experiment x load stage on the reported (held-out) part. Latency figures
    are over the requests that succeeded in the measurement, None for a stage that mostly
    failed (docs/failed_requests.md); rows stored before a column existed lack its key."""
    experiment: str
    model: str
    workload: str
    stage: int
    rate: float
    n_requests: int  # every request sent, failed ones included
    pred_e2e_s: float | None
    meas_e2e_s: float | None
    e2e_err: float | None
    pred_ttft_s: float | None
    meas_ttft_s: float | None
    ttft_err: float | None
    pred_itl_s: float | None
    meas_itl_s: float | None
    itl_err: float | None
    sim_steps: int
    preempted: int
    n_failed_meas: int  # failed in the measurement
    finished: int  # simulated: finished within the client timeout
    timed_out: int  # simulated: aborted by the client timeout
    meas_fail: float | None  # measured failed fraction
    pred_fail: float  # simulated failed fraction
    fail_err_pts: float | None  # abs(pred_fail - meas_fail) in percentage points


StepScore = dict  # per experiment: step_mape, spearman, n_rows (see evaluator.step_scoring.step_metrics)


def strict_json(o, loose: bool = False):
    """`o` as plain values strict JSON holds: NaN and infinities as None (the null
    `nan_for_null` reads back), numpy values as plain numbers, tuples and sets as lists, paths
    as strings. Anything else is left for `json.dumps` to refuse (the archive: what it cannot
    read back must not be stored), or with `loose` turned into its string, keys included
    (the views: they print whatever they are handed)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if o is None or isinstance(o, (str, bool, int)):
        return o
    if isinstance(o, Mapping):
        return {(str(k) if loose else k): strict_json(v, loose) for k, v in o.items()}
    if isinstance(o, (list, tuple, set, frozenset)):
        return [strict_json(v, loose) for v in o]
    if hasattr(o, "tolist"):  # numpy arrays and scalars
        return strict_json(o.tolist(), loose)
    return str(o) if loose or isinstance(o, PurePath) else o


def nan_for_null(objectives: Mapping) -> dict:
    """Objectives as read from strict JSON (an archive, a kept result): a null is the NaN or
    infinity that was written, so it becomes NaN again."""
    return {k: math.nan if v is None else v for k, v in objectives.items()}


def unpinned(identifiability: Mapping | None) -> dict[str, list[str]]:
    """Per fitting group, the constants the data cannot pin down (`evaluator.identify`, as the
    judge stores it in `Evaluation.identifiability`); empty when every one is pinned or nothing
    was checked. Such a constant is held by the fit's faint prior, not by data: a defect."""
    out = {}
    for group, g in (identifiability or {}).items():
        names = g.get("unpinned") if isinstance(g, Mapping) else None
        if names:
            out[str(group)] = [str(n) for n in names]
    return out


UNPHYSICAL = "unphysical: "  # how the error of a program the physical rules refuse begins
UNPINNED = "constants the data cannot pin"  # and of one with a constant the data cannot pin
# A screen is refused for either right after its fit, before it replays anything: its cascade
# gate (`evaluator.screen_race`) had no say in it (`evolve.judge_memo` relies on this).
REFUSED_BEFORE_REPLAY = (UNPHYSICAL, UNPINNED)


def unpinned_reason(identifiability: Mapping | None) -> str:
    """One line naming the unpinned constants, each with the fitting groups it is unpinned on."""
    groups: dict[str, list[str]] = {}
    for group, names in unpinned(identifiability).items():
        for n in names:
            groups.setdefault(n, []).append(group)
    return (f"{UNPINNED} (held by the fit's prior, not by data): "
            + "; ".join(f"{n} ({', '.join(g)})" for n, g in groups.items()))


@dataclass(frozen=True)
class Evaluation:
    """One candidate scored: objectives (keys of `evaluator.objectives.ORDER`), the rows they
    summarise, and the fitted constants and request overheads per model (or "*")."""
    valid: bool
    error: str | None = None
    constants: dict[str, list[float]] = field(default_factory=dict)
    overheads: dict[str, dict] = field(default_factory=dict)
    rows: tuple[StageScore, ...] = ()
    steps: dict[str, StepScore] = field(default_factory=dict)
    objectives: dict[str, float] = field(default_factory=dict)
    sim_steps: int = 0
    seconds: float = 0.0
    # held-out kind ("workload" | "model" | "load") -> {"title", "objectives", "rows" (each with
    # its "split"), "errors" (split -> why invalid), "constants" (split -> fitted constants)};
    # empty when the held-out splits were not scored (see evaluator.holdout)
    holdout: dict[str, dict] = field(default_factory=dict)
    # per fitting group (model, or "*"): which constants the fitting states pin down
    # (evaluator.identify): rank, n_constants, unpinned names, a one-line summary
    identifiability: dict[str, dict] = field(default_factory=dict)
    # predicted step times on a fixed probe set with the fitted constants (evaluator.fingerprint):
    # the search's test for "behaves like a program already evaluated"; () when not computed
    fingerprint: tuple = ()
    # a screen that stopped replaying once it could not clear the cascade's gate
    # (evaluator.screen_race): {"models" scored, "of" how many, "bounds": lower bounds of its
    # in-sample objectives, "why"}; its rows are those models' only and it has no in-sample
    # objectives. Empty for every other evaluation.
    race: dict = field(default_factory=dict)

    @classmethod
    def invalid(cls, error: str, complexity: float | None = None, seconds: float = 0.0,
                constants: dict[str, list[float]] | None = None) -> "Evaluation":
        """A candidate that could not be scored: every error objective infinite."""
        return cls(valid=False, error=error, constants=dict(constants or {}),
                   objectives=invalid_objectives(complexity), seconds=seconds)

    def objective(self, name: str) -> float:
        """One objective by name (NaN when missing)."""
        if name not in ORDER:
            raise KeyError(f"unknown objective {name!r}")
        return float(self.objectives.get(name, math.nan))

    # ------------------------------------------------------------ the one converter pair
    def to_json(self) -> dict:
        """Plain JSON-able dict (lists, dicts, floats): for the worker pipe and the archive."""
        return {"valid": bool(self.valid), "error": self.error,
                "constants": {k: [float(x) for x in v] for k, v in self.constants.items()},
                "overheads": {k: dict(v) for k, v in self.overheads.items()},
                "rows": [dict(r) for r in self.rows],
                "steps": {k: dict(v) for k, v in self.steps.items()},
                "objectives": dict(self.objectives), "sim_steps": int(self.sim_steps),
                "seconds": float(self.seconds), "holdout": {k: dict(v) for k, v in self.holdout.items()},
                "identifiability": {k: dict(v) for k, v in self.identifiability.items()},
                "fingerprint": list(self.fingerprint), "race": strict_json(self.race)}

    @classmethod
    def from_json(cls, d: Mapping) -> "Evaluation":
        """Inverse of `to_json`; also reads an archive evaluation record (extra keys such as
        id, stage or created_at are ignored, missing optional keys take their defaults)."""
        if "valid" not in d:
            raise ValueError("not an evaluation record: no 'valid' key")
        names = {f.name for f in fields(cls)}
        kw = {k: d[k] for k in names if k in d and d[k] is not None}
        kw["valid"] = bool(d["valid"])
        kw["error"] = d.get("error")
        kw["rows"] = tuple(dict(r) for r in kw.get("rows", ()))
        for k in ("constants", "overheads", "steps", "objectives", "holdout", "identifiability", "race"):
            kw[k] = dict(kw.get(k, {}))
        kw["objectives"] = nan_for_null(kw["objectives"])
        kw["sim_steps"] = int(kw.get("sim_steps", 0))
        kw["seconds"] = float(kw.get("seconds", 0.0))
        kw["fingerprint"] = tuple(kw.get("fingerprint", ()))
        return cls(**kw)
