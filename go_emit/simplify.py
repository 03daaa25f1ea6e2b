"""Drop branches that never switch on the states a simulation visits, before emission.

Evolved programs carry dead conditionals (a threshold no batch ever crosses, e.g.
`K > 1e6` when no experiment holds a million KV tokens): they cost readability in the Go
code and nothing in accuracy. A conditional is collapsed to one branch only when the
predictions with every model's fitted constants stay identical on every probe state: a
subsample of the batch states a calibrated simulation visits, the edge grid of states it
can reach, and every real step row.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

from evaluator import judge_states
from evaluator.program import Program, collapse_conditional
from evaluator.step_scoring import predict_rows


@dataclass
class Simplified:
    program: Program
    constants: dict[str, list[float]]  # per model, in the simplified program's order
    removed: int  # conditionals collapsed
    n_probes: int


def _n_conditionals(program: Program) -> int:
    return sum(isinstance(n, (ast.If, ast.IfExp)) for n in ast.walk(program.func))


def _remap(old: Program, new: Program, constants: dict[str, list[float]]) -> dict[str, list[float]]:
    out = {}
    for model, vals in constants.items():
        named = dict(zip(old.const_names, vals))
        out[model] = [float(named[n]) for n in new.const_names]
    return out


def _predictions(program: Program, constants: dict[str, list[float]], probes: dict[str, np.ndarray]):
    f = program.compiled()
    return {m: predict_rows(f, probes[m], np.ascontiguousarray(constants[m], dtype=np.float64))
            for m in probes if m in constants}


def _same(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[m], b[m], equal_nan=True) for m in a)


def simplify(program: Program, constants: dict[str, list[float]], probes: dict[str, np.ndarray]) -> Simplified:
    """Collapse every conditional whose dropped branch is never taken on the probes.

    constants: fitted vector per model (program order); probes: component rows per model.
    """
    cur, consts, removed = program, {m: list(v) for m, v in constants.items()}, 0
    ref = _predictions(cur, consts, probes)
    changed = True
    while changed:
        changed = False
        for i in range(_n_conditionals(cur)):
            for keep_body in (True, False):
                cand = collapse_conditional(cur, i, keep_body)
                if cand is None:
                    continue
                cand_consts = _remap(cur, cand, consts)
                if _same(ref, _predictions(cand, cand_consts, probes)):
                    cur, consts, removed, changed = cand, cand_consts, removed + 1, True
                    break
            if changed:
                break
    return Simplified(cur, consts, removed, int(sum(len(p) for p in probes.values())))


def probes_by_model(evaluator) -> dict[str, np.ndarray]:
    """The evaluator's fitting probes, one matrix per model."""
    out = {}
    for model in sorted({e.model for e in evaluator.exps}):
        exps = [e for e in evaluator.exps if e.model == model]
        out[model] = judge_states.probes(evaluator, exps)
    return out
