"""The cascade's gate, as the judge sees it: what a screen must clear to earn a full evaluation.

The search promotes a screened candidate when its in-sample loss beats its MAP-Elites cell's
elite, or when no frontier member dominates it on the in-sample objectives it has
(`evolve.search.SearchState.would_enter`, which is `Gate.admits` on the state at its turn).
The search hands its screens the gate as it stands when it asks for them, so a screen can stop
replaying once the errors it already has make passing impossible (`evaluator.screen_race`).

Why a stop is exact: every in-sample objective is a mean (or a maximum) of non-negative errors
over the stages, and the gate is monotone (a worse objective never makes it admit). The errors
of the models already replayed, over the number of stages every model's would add, bound each
objective from below (`lower_bounds`); a gate that refuses the bounds refuses the true values.
The gate can still move before the candidate's turn (a new cell elite is chosen on held-out
errors and may have a worse in-sample loss), so the search decides on the bounds again at the
candidate's turn and screens it again, gated by the state of that moment, where they pass.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from evaluator.objectives import FAILURE, IN_SAMPLE_ORDER, in_sample_loss, objective_vector


def dominates(a, b) -> bool:
    """Pareto dominance of minimisation vectors: no worse anywhere, better somewhere."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


@dataclass(frozen=True)
class Gate:
    """The bar one screened candidate must clear (its cell's and the frontier's)."""
    cell_loss: float | None  # `in_sample_loss` of its cell's elite; None: an empty cell admits anything
    order: tuple[str, ...]  # objectives the frontier is compared on, complexity last
    front: tuple[tuple[float, ...], ...]  # the frontier members' vectors in that order

    def admits(self, objectives: Mapping) -> bool:
        """Whether in-sample `objectives` (finite ones: invalid screens never get here) pass."""
        if self.cell_loss is None or in_sample_loss(objectives) < self.cell_loss:
            return True
        v = objective_vector(objectives, self.order)
        return not any(dominates(p, v) for p in self.front)

    def to_json(self) -> dict:
        return {"cell_loss": self.cell_loss, "order": list(self.order), "front": [list(p) for p in self.front]}

    @classmethod
    def from_json(cls, d: Mapping | None) -> "Gate | None":
        if not d:
            return None
        return cls(None if d["cell_loss"] is None else float(d["cell_loss"]), tuple(d["order"]),
                   tuple(tuple(float(x) for x in p) for p in d["front"]))


def lower_bounds(rows, n_latency: int, n_failure: int, has_failures: bool, complexity: float) -> dict | None:
    """Lower bounds of a screen's in-sample objectives from the stage rows of the models it has
    scored so far: sums over the stages every model will have scored (`n_latency` stages
    scored on latency, `n_failure` on their failed fraction; the others add errors >= 0); a
    per-step error not known yet counts as 0. None where no stage is scored on latency (the
    objectives would be NaN: an invalid screen, never stopped early)."""
    if n_latency <= 0:
        return None
    timed = [r for r in rows if r.get("e2e_err") is not None]
    out = {"e2e_mean": sum(r["e2e_err"] for r in timed) / n_latency,
           "e2e_worst": max((r["e2e_err"] for r in timed), default=0.0),
           "ttft_mean": sum(r["ttft_err"] for r in timed) / n_latency,
           "itl_mean": sum(r["itl_err"] for r in timed) / n_latency,
           "step_mape": 0.0, "complexity": float(complexity)}
    if has_failures:
        if n_failure <= 0:
            return None
        out[FAILURE] = sum(r["fail_err_pts"] / 100.0 for r in rows if r.get("fail_err_pts") is not None) / n_failure
    assert set(IN_SAMPLE_ORDER) <= set(out)
    return out
