"""Branches the fitted data never crossed: a threshold that decides nothing the data supports.

An evolved program may switch on a threshold that only the held-out data crosses, e.g.
`... if K > 100000 else ...` when only the long workload holds that much KV: the fit never
saw the other branch, so whatever that branch says is a guess with fitted-looking constants.
`unsupported_branches` traces which way every conditional goes on the states the constants
were fitted on and on the held-out states: a conditional that never switched on the fitted
states but takes its other way on at least `MIN_SHARE` of the held-out states it reaches is
reported, and the held-out split that relies on it is not scored (evaluator.holdout). Both
sides are traced on every reference state of their stages (`judge_states.branch_states`),
so a test the fitted workloads cross as often as the held-out ones (a prefill-only step,
D = 0) is not taken for one only the held-out data crosses.

The trace runs the program as plain Python (no compilation) on a few hundred states per
experiment: a few milliseconds, only for programs with conditionals.
"""
from __future__ import annotations

import ast

import numpy as np

from evaluator.components import COMPONENT_INDEX
from evaluator.program import define_function, function_body, normalize_calls, parse_source

MIN_SHARE = 0.01  # of the held-out states reaching a conditional that take the unfitted way
MAX_ROWS = 400  # states per experiment traced


def conditionals(program) -> list[ast.AST]:
    """The program's `if` statements and conditional expressions, in `ast.walk` order (the
    numbering of `evaluator.program.collapse_conditional`)."""
    func = next(n for n in parse_source(program.source).body if isinstance(n, ast.FunctionDef))
    normalize_calls(func)
    return [n for n in ast.walk(func) if isinstance(n, (ast.If, ast.IfExp))]


def _tracer(program):
    """f(x, c, counts): the program's value, adding 1 to counts[i, 1] (test true) or
    counts[i, 0] (false) for every conditional i the evaluation passes through."""
    func = next(n for n in parse_source(program.source).body if isinstance(n, ast.FunctionDef))
    normalize_calls(func)
    conds = [n for n in ast.walk(func) if isinstance(n, (ast.If, ast.IfExp))]
    for i, node in enumerate(conds):
        node.test = ast.Call(ast.Name("_t", ast.Load()), [ast.Constant(i), node.test], [])
    ast.fix_missing_locations(func)

    class _Math(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if isinstance(node.func, ast.Name) and node.func.id in ("sqrt", "log", "exp", "pow"):
                node.func = ast.Attribute(ast.Name("math", ast.Load()), node.func.id, ast.Load())
            return node

    func = _Math().visit(func)
    lines = ["def _trace(_x, _c, _t):"]
    lines += [f"    {p} = _x[{COMPONENT_INDEX[p]}]" for p in program.params]
    lines += [f"    {name} = _c[{j}]" for j, name in enumerate(program.const_names)]
    body = "\n".join(ast.unparse(s) for s in function_body(func))
    lines += ["    " + ln for ln in body.splitlines()]
    return define_function("\n".join(lines) + "\n", f"<trace {program.hash}>", "_trace"), len(conds)


def branch_counts(program, sets) -> np.ndarray:
    """(n_conditionals, 2) counts of (false, true) outcomes over `sets`: (component rows,
    constant vector) pairs, each subsampled to MAX_ROWS evenly spaced rows."""
    f, n = _tracer(program)
    counts = np.zeros((n, 2), np.int64)

    def record(i, value):
        counts[i, 1 if value else 0] += 1
        return value

    for X, c in sets:
        X = np.asarray(X, np.float64)
        if len(X) > MAX_ROWS:
            X = X[np.linspace(0, len(X) - 1, MAX_ROWS).astype(np.int64)]
        c = [float(v) for v in c]
        for x in X:
            try:
                f(x, c, record)
            except (ArithmeticError, ValueError):  # a math domain error on one row: the judge sees it
                continue
    return counts


def unsupported_branches(program, fitted, held_out) -> list[str]:
    """The conditionals that never switched on the `fitted` states but take their other way on
    the `held_out` ones (both as `branch_counts` sets), described for a reader."""
    conds = conditionals(program)
    if not conds:
        return []
    fit, held = branch_counts(program, fitted), branch_counts(program, held_out)
    out = []
    for i, node in enumerate(conds):
        reached = held[i].sum()
        for way in (0, 1):
            if fit[i, way] == 0 and reached and held[i, way] >= MIN_SHARE * reached:
                seen = "never reached" if fit[i].sum() == 0 else \
                    f"always {'true' if way == 0 else 'false'} on the {fit[i].sum()} fitted states traced"
                out.append(f"`{ast.unparse(node.test)}` is {seen} but {'true' if way else 'false'} on "
                           f"{held[i, way]} of {reached} held-out states")
    return out
