"""The physical rules on the shapes of the models people serve (issue 30, item 2).

The judge checks the hardware floor and "no faster with more work" only on the data's models
(`fit_program.unphysical`), so a program could be handed over that falls below the floor at an
80-layer model's or a wider GQA model's shapes. Here each shipped config (evaluator/model_configs)
is deployed as `evolve predict` would deploy it: the smallest TP in (1, 2, 4, 8) at which its
weights fit an 80 GB H100 with room for one max_model_len request of KV (`make_deployment`), the
data's server limits, the constants `constants_for` picks for an unseen model; then
`physics.check_by_model` on that deployment's `extrapolation_grid`. Grid predictions only, no
simulation: a few milliseconds a config, so `Archive.best_transfer` can ask it lazily.

Per config: "holds", "violated" with the one-line reason, or "not checkable" with the component
that cannot be computed there and why (`check_components`), or why there are no constants.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from evaluator.components import MEASURED_NAMES
from evaluator.data import build_default_table
from evaluator.model_configs import shipped_models
from evaluator.physics import DEFAULT_MAX_MODEL_LEN, check_by_model, extrapolation_grid, measured_read
from evaluator.predict import (Deployment, PredictError, StoredProgram, check_components, constants_for,
                               make_deployment, stored_from_record)

TPS = (1, 2, 4, 8)
HOLDS, VIOLATED, NOT_CHECKABLE = "holds", "violated", "not checkable"


@dataclass(frozen=True)
class ServedShape:
    """One shipped config's verdict (model: the config's folder name; tp None when it fits nowhere)."""
    model: str
    tp: int | None
    status: str
    why: str | None = None

    @property
    def name(self) -> str:
        return f"{self.model} TP{self.tp}" if self.tp else self.model

    def to_json(self) -> dict:
        return {"model": self.model, "tp": self.tp, "status": self.status, "why": self.why}


def deployment_at(gt, model: str, tp: int) -> Deployment:
    """`model` on `tp` GPUs under the data's server limits (its first experiment's, as
    `physics.model_grids`); PredictError where it does not fit or its heads do not divide."""
    e = gt.experiments[0]
    return make_deployment(gt, model, tp=tp, max_num_seqs=e.max_num_seqs, max_batched_tokens=e.max_batched_tokens,
                           block_size=e.block_size, max_model_len=int(getattr(e, "max_model_len", DEFAULT_MAX_MODEL_LEN)))


def served_deployment(gt, model: str) -> Deployment:
    """The deployment of a shipped config at the smallest TP that fits an 80 GB GPU with room for
    KV, under the data's server limits."""
    why = ""
    for tp in TPS:
        try:
            return deployment_at(gt, model, tp)
        except PredictError as err:
            why = str(err)
    raise PredictError(f"fits at no TP in {'/'.join(map(str, TPS))} ({why})")


_DEPLOYMENTS: dict[int, tuple] = {}  # id(gt) -> (gt, {config: Deployment or the reason it has none})


def served_deployments(gt) -> dict[str, Deployment | str]:
    """Each shipped config's deployment (or why it has none), built once per ground truth."""
    hit = _DEPLOYMENTS.get(id(gt))
    if hit is not None and hit[0] is gt:
        return hit[1]
    out: dict[str, Deployment | str] = {}
    for m in shipped_models():
        try:
            out[m] = served_deployment(gt, m)
        except PredictError as err:
            out[m] = str(err)
    if len(_DEPLOYMENTS) > 8:
        _DEPLOYMENTS.clear()
    _DEPLOYMENTS[id(gt)] = (gt, out)
    return out


def embedded_kernel_tables(gt) -> dict[str, dict]:
    """Kernel reductions, keyed as the embedded table keys a deployment's ('model@tpN'), of each
    shipped config and each model of the data at every TP in `TPS` where it fits and its heads
    divide: without them the embedded default could not check the served shapes of a program on
    measured kernels (the hand-over counted "not checkable" as usable), nor `evolve predict` such
    a program on another deployment."""
    out = {}
    for m in [*shipped_models(), *sorted({e.model for e in gt.experiments})]:
        for tp in TPS:
            try:
                d = deployment_at(gt, m, tp)
            except PredictError:
                continue  # does not fit there, or its heads do not divide
            if d.kernels is not None:
                out[f"{d.model}@tp{d.tp}"] = {"flat": [float(v) for v in d.kernels], "notes": list(d.kernel_notes)}
    return out


def default_table(gt) -> dict:
    """The table `evolve make-default` embeds: the data's experiments and kernel tables
    (`data.build_default_table`) and `embedded_kernel_tables`."""
    t = build_default_table(gt)
    t["kernels"] = {**embedded_kernel_tables(gt), **t["kernels"]}
    return t


def check_served_shapes(stored: StoredProgram, gt) -> list[ServedShape]:
    """The physical rules on every shipped config's shapes, with the stored constants (never refitted)."""
    params = set(stored.program.params)
    measured = not MEASURED_NAMES.isdisjoint(params)
    f = stored.program.compiled()
    out = []
    for model, dep in served_deployments(gt).items():
        if isinstance(dep, str):
            out.append(ServedShape(model, None, NOT_CHECKABLE, dep))
            continue
        try:
            consts, _ = constants_for(stored, dep, gt)
            check_components(stored, dep, consts)  # raises for a component it cannot compute
        except PredictError as err:
            msg = str(err)
            status = NOT_CHECKABLE if "cannot be computed" in msg or "no shared vector" in msg else VIOLATED
            out.append(ServedShape(model, dep.tp, status, msg))
            continue
        grid = extrapolation_grid(dep, dep.model_vec(measured=measured))
        why = check_by_model(f, {dep.model: consts}, None, {dep.model: grid}, measured_read(params))
        out.append(ServedShape(model, dep.tp, VIOLATED if why else HOLDS, why))
    return out


def check_record(record: Mapping, gt, data: str | None = None) -> list[ServedShape] | None:
    """`check_served_shapes` of an archive record; None when it has no valid evaluation."""
    try:
        stored = stored_from_record({"id": None, **record}, data)
    except PredictError:
        return None
    return check_served_shapes(stored, gt)


def usable_check(gt) -> Callable[[Mapping], bool]:
    """For `Archive.best_transfer(usable=...)`: True when no shipped config's shapes break the
    rules (holds, or not checkable there); verdicts cached per program id."""
    cache: dict[int, bool] = {}

    def usable(record: Mapping) -> bool:
        pid = int(record["id"])
        if pid not in cache:
            res = check_record(record, gt)
            cache[pid] = res is not None and not any(r.status == VIOLATED for r in res)
        return cache[pid]
    return usable


def served_line(results) -> str:
    """'Physical on served shapes: A TP1 ✓, B TP2 ✓; violated: C TP4 (why); not checkable: D TP1 (why)'
    from `ServedShape`s or their JSON dicts."""
    rs = [r if isinstance(r, ServedShape) else ServedShape(r["model"], r.get("tp"), r["status"], r.get("why"))
          for r in results]
    held = ", ".join(f"{r.name} ✓" for r in rs if r.status == HOLDS)
    unchecked = rs and all(r.status == NOT_CHECKABLE for r in rs)  # then "none" would read as a verdict
    parts = [f"Physical on served shapes: {held or ('not checked here' if unchecked else 'none')}"]
    for status in (VIOLATED, NOT_CHECKABLE):
        bad = [r for r in rs if r.status == status]
        if bad:
            parts.append(f"{status}: " + ", ".join(f"{r.name} ({r.why})" for r in bad))
    return "; ".join(parts)
