"""The one way to turn an archived program into Go: the CLI, the UI and the report all call it.

    from go_emit import emit_record, EmittedGo, GoEmitError
    out = emit_record(record, gt, package="latency", interface="blis", caps=Caps(),
                      simplify=True, probes=None, aliases=None)   # -> EmittedGo
    out.code      # the Go file
    out.models    # models it has constants for, sorted
    out.removed   # dead conditionals collapsed before emission (0 with simplify=False)
    out.note      # one human line about the simplification ("" if nothing was removed)
    out.program   # the Program actually emitted (simplified or not)

`record` is an archive record (`Archive.get_program`): id, source, evaluation{valid,
constants, overheads, objectives}. `gt` is the run's loaded `evaluator.data.GroundTruth`.
Constants are per model, or one global vector under "*" that every model of `gt` uses.
The constructor accepts each model's short name and the Hugging Face id of its experiment
config (go_emit.names), plus `aliases` (name -> model).
With simplify=True the dead-branch simplification runs on the evaluator's probe states;
pass `probes` (see `go_emit.simplify.probes_by_model`) to reuse them across calls,
otherwise they are built from `gt`. Every refusal is a GoEmitError with a one-line reason; a
program that breaks a physical rule (`evaluator.physics`: below the hardware floor on a probe
state or the extrapolation grid, or faster with more work) is refused, as the judge refuses it.
Keeping this in one place is why the UI's Go view shows exactly what `evolve emit-go` writes.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from evaluator.coverage import coverage, coverage_lines
from evaluator import physics
from evaluator.data import GroundTruth
from evaluator.evaluate import Evaluator
from evaluator.objectives import Caps
from evaluator.program import Program, ProgramError, parse_program

from .emit import GoEmitError, emit_go
from .names import merge_aliases
from .simplify import probes_by_model, simplify as simplify_program

__all__ = ["EmittedGo", "emit_record"]


@dataclass(frozen=True)
class EmittedGo:
    code: str
    models: tuple[str, ...]
    removed: int
    note: str
    program: Program


def emit_record(record: Mapping, gt: GroundTruth, *, package: str = "latency", interface: str = "blis",
                caps: Caps = Caps(), simplify: bool = True,
                probes: Mapping[str, np.ndarray] | None = None,
                aliases: Mapping[str, str] | None = None) -> EmittedGo:
    """Go source of the archived program `record` fitted on `gt` (see the module docstring)."""
    pid = record.get("id")
    ev = record.get("evaluation") or {}
    if not ev.get("valid") or not ev.get("constants"):
        raise GoEmitError(f"program {pid} has no valid evaluation with fitted constants")
    try:
        program = parse_program(record.get("source") or "")
    except ProgramError as e:
        raise GoEmitError(f"program {pid} does not parse: {e}") from e
    vectors = {e.model: e.model_vec(gt.hardware) for e in gt.experiments}
    consts = ev["constants"]
    by_model = {m: consts.get(m, consts.get("*")) for m in vectors if m in consts or "*" in consts}
    if not by_model:
        raise GoEmitError(f"program {pid} has constants for none of the models in the data "
                          f"({', '.join(sorted(vectors))})")
    scores = dict(ev.get("objectives") or {})
    removed, note = 0, ""
    probes = probes if probes is not None else probes_by_model(Evaluator(gt))
    if simplify:
        simp = simplify_program(program, by_model, dict(probes))
        if simp.removed:
            note = (f"simplified: {simp.removed} conditional(s) never switch on {simp.n_probes} probe states; "
                    f"complexity {program.complexity.total} -> {simp.program.complexity.total}")
            program, by_model, removed = simp.program, simp.constants, simp.removed
            scores["complexity"] = float(program.complexity.total)
    overheads = ev.get("overheads") or {}
    code = emit_go(program, by_model, {m: vectors[m] for m in by_model},
                   {m: overheads.get(m, {}) for m in by_model}, package=package, interface=interface,
                   program_id=str(pid), scores=scores, caps=caps,  # the Go cap is refused first
                   aliases=merge_aliases(gt, by_model, aliases),
                   coverage=coverage_lines(coverage(gt, ev.get("objectives"), record)))
    why = physics.check_by_model(program.compiled(), {m: np.asarray(c, np.float64) for m, c in by_model.items()},
                                 dict(probes), {m: g for m, g in physics.model_grids(gt).items() if m in by_model},
                                 physics.measured_read(program.params))
    if why:
        raise GoEmitError(f"program {pid} is not emitted, it is unphysical: {why}")
    return EmittedGo(code, tuple(sorted(by_model)), removed, note, program)
