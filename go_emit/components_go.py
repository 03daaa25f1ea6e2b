"""The Go fillComponents, generated from evaluator.component_table at emission time.

The numba fill_components (evaluator/components_kernel.py) is generated from the same rows,
with the same operation order, so the Go values are bit-for-bit the Python ones (the parity
tests run both). Expressions are printed with transpile's gofmt spacing, so no gofmt run.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from evaluator.component_table import (BLOCK_INPUTS, HELPERS, MODEL_INPUTS, STEP_INPUTS, block_slots, checked_rows,
                                       split_conditional)

from .measured_go import measured_go

from .transpile import (GAtom, GCall, fold_literals, format_expr, go_binary, go_float, go_identifier, go_unary,
                        vet_safe_condition)

__all__ = ["GoComponents", "go_components", "go_name"]

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


def go_name(name: str) -> str:
    """snake_case table name -> the camelCase Go local (n_prefill -> nPrefill)."""
    head, *rest = name.split("_")
    return go_identifier(head + "".join(p[:1].upper() + p[1:] for p in rest), set())


@dataclass(frozen=True)
class GoComponents:
    params: str  # the step-input parameter list, e.g. "P, D, nPrefill, nDecode, B, K float64"
    args: str  # the same names as call arguments
    body: list[str]  # statements of fillComponents, one tab indented
    helpers: list[str]  # Go source of the helper methods the formulas call ({recv} filled)


class _Go:
    def __init__(self, recv: str):
        self.recv = recv
        self.used_helpers: list[str] = []

    def expr(self, node: ast.AST) -> object:
        folded = fold_literals(node)  # literal-only subtrees: float64 like numba, not Go's exact constants
        if folded is not None:
            return go_float(folded)
        if isinstance(node, ast.Name):
            return GAtom(go_name(node.id))
        if isinstance(node, ast.BinOp):
            left, right = self.expr(node.left), self.expr(node.right)
            if isinstance(node.op, ast.Pow):
                return GCall("math.Pow", (left, right))
            return go_binary(_BINOPS[type(node.op)], left, right)
        if isinstance(node, ast.UnaryOp):
            return go_unary("-", self.expr(node.operand))
        if isinstance(node, ast.Call):
            name = node.func.id
            if name not in self.used_helpers:
                self.used_helpers.append(name)
            return GCall(f"{self.recv}.{go_name(name)}", tuple(self.expr(a) for a in node.args))
        if isinstance(node, ast.Compare):
            operands = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
            acc = None
            for i, op in enumerate(node.ops):
                part = go_binary(_CMPOPS[type(op)], operands[i], operands[i + 1])
                acc = part if acc is None else go_binary("&&", acc, part)
            return vet_safe_condition(acc)
        raise ValueError(f"component formula: {type(node).__name__} has no Go translation")


def go_components(recv: str = "m", type_name: str = "T", measured: bool = False) -> GoComponents:
    """fillComponents' parameters and body for a method on receiver `recv` of `type_name`.
    measured: also compute the table-driven blocks (the type then has a `tables []float64`
    field); otherwise their components are left at 0, which the program never reads."""
    g = _Go(recv)
    rows = checked_rows()
    read = {n.id for _, expr, _ in rows for n in ast.walk(expr) if isinstance(n, ast.Name)}
    body = [f"\tmodel := &{recv}.arch"]
    body += [f"\t{go_name(local)} := model[{i}]" for i, (local, _) in enumerate(MODEL_INPUTS) if local in read]
    for row, expr, slot in rows:
        cond, yes, no = split_conditional(expr)
        is_comp = slot is not None
        if is_comp:
            target = f"out[{slot}]"
        else:
            target = go_name(row.name)
        if cond is None:
            op = "=" if is_comp else ":="
            body.append(f"\t{target} {op} {format_expr(g.expr(yes))}")
        else:
            if not is_comp:
                body.append(f"\tvar {target} float64")
            body += [f"\tif {format_expr(g.expr(cond))} {{", f"\t\t{target} = {format_expr(g.expr(yes))}",
                     "\t} else {", f"\t\t{target} = {format_expr(g.expr(no))}", "\t}"]
        if not is_comp and row.name not in read:
            body.append(f"\t_ = {target}")
    params = ", ".join(go_name(n) for n in STEP_INPUTS)
    block_params = ", ".join(go_name(n) for n in BLOCK_INPUTS)
    helpers = [HELPERS[h].go.replace("{recv}", type_name) for h in g.used_helpers]
    if measured:
        for b, at in block_slots():
            end = at + len(b.rows)
            body += [f"\tif len({recv}.tables) > 0 {{",
                     f"\t\t{recv}.{b.go}({recv}.tables, {block_params}, out[{at}:{end}])",
                     "\t} else {", f"\t\tfor i := {at}; i < {end}; i++ {{", "\t\t\tout[i] = math.NaN()", "\t\t}",
                     "\t}"]
        helpers.append(measured_go(type_name))
    return GoComponents(params=params + " float64", args=params, body=body, helpers=helpers)
