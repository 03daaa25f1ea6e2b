"""Exact derivatives of a program with respect to its constants, generated from its AST.

Why: fitting a program's constants needs d prediction / d constant on every fitted state.
Forward differences cost one call of the compiled program per constant and row (~12 ns each,
most of it the call itself), and they are approximate. A validated program is a small
straight-line function with branches and a whitelist of calls, so its forward-mode derivative
can be written out as source once: `_grad(_x, _c, _g)` returns the program's value (the same
floating-point operations in the same order as `Program.compiled()`, so bit-identical) and
writes d value / d _c[j] into _g[j]. One call per row then gives the whole Jacobian row.

Rules at kinks follow the value: max/min take the derivative of the argument they return
(the first of equal ones), abs the sign of its argument (+ at 0), a conditional the branch
taken. Derivative code is emitted only for the constants an expression depends on.
"""
from __future__ import annotations

import ast

from evaluator.components import COMPONENT_INDEX, GRAD_TYPE
from evaluator.program import Program, call_name, compile_generated, function_body, parse_source

__all__ = ["gradient_source", "compiled_gradient"]


def _local_deps(stmts: list[ast.stmt], consts: dict[str, int]) -> dict[str, frozenset[int]]:
    """Constants each local may depend on, over every assignment (flow-insensitive fixed point)."""
    assigns = [n for n in ast.walk(ast.Module(body=stmts, type_ignores=[])) if isinstance(n, ast.Assign)]
    deps: dict[str, frozenset[int]] = {a.targets[0].id: frozenset() for a in assigns}
    changed = True
    while changed:
        changed = False
        for a in assigns:
            d = deps[a.targets[0].id]
            for n in ast.walk(a.value):
                if isinstance(n, ast.Name):
                    d = d | (frozenset((consts[n.id],)) if n.id in consts else deps.get(n.id, frozenset()))
            if d != deps[a.targets[0].id]:
                deps[a.targets[0].id] = d
                changed = True
    return deps


class _Emitter:
    """Writes the derivative kernel: every expression node becomes a temporary `_tK` with
    derivative temporaries `_tK_j` for the constants it depends on."""

    def __init__(self, prog: Program, func: ast.FunctionDef):
        self.consts = {name: j for j, name in enumerate(prog.const_names)}
        self.n = len(self.consts)
        self.params = set(prog.params)
        self.deps = _local_deps(function_body(func), self.consts)
        self.lines: list[str] = []
        self.indent = 1
        self.k = 0

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def temp(self, value: str) -> str:
        if value.isidentifier() or value.replace(".", "", 1).isdigit():
            return value  # a name or a plain literal needs no temporary
        name = f"_t{self.k}"
        self.k += 1
        self.emit(f"{name} = {value}")
        return name

    # -- expressions: (value, {constant index: derivative expression}) ------------------
    def expr(self, node: ast.AST, grad: bool = True) -> tuple[str, dict[int, str]]:
        if isinstance(node, ast.Constant):
            return repr(float(node.value)), {}
        if isinstance(node, ast.Name):
            if node.id in self.consts:
                j = self.consts[node.id]
                return f"_c[{j}]", ({j: "1.0"} if grad else {})
            if node.id in self.params:
                return node.id, {}
            return node.id, ({j: f"_d_{node.id}_{j}" for j in sorted(self.deps[node.id])} if grad else {})
        if isinstance(node, ast.UnaryOp):
            a, da = self.expr(node.operand, grad)
            if isinstance(node.op, ast.UAdd):
                return self.temp(f"+{a}"), da
            t = self.temp(f"-{a}")
            return t, {j: self.temp(f"-{d}") for j, d in da.items()}
        if isinstance(node, ast.BinOp):
            return self.binop(node, grad)
        if isinstance(node, ast.IfExp):
            return self.ifexp(node, grad)
        if isinstance(node, ast.Call):
            return self.call(node, grad)
        raise ValueError(f"cannot differentiate {type(node).__name__}")  # the validator admits none

    def binop(self, node: ast.BinOp, grad: bool):
        a, da = self.expr(node.left, grad)
        b, db = self.expr(node.right, grad)
        op = node.op
        sym = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}[type(op)]
        t = self.temp(f"{a} {sym} {b}")
        out: dict[int, str] = {}
        for j in sorted(set(da) | set(db)):
            x, y = da.get(j), db.get(j)
            if isinstance(op, ast.Add):
                d = f"{x} + {y}" if x and y else (x or y)
            elif isinstance(op, ast.Sub):
                d = f"{x} - {y}" if x and y else (x or f"-{y}")
            elif isinstance(op, ast.Mult):
                d = " + ".join(s for s in (self._times(b, x), self._times(a, y)) if s)
            elif isinstance(op, ast.Div):
                d = f"({x or '0.0'} - {t} * {y}) / {b}" if y else f"{x} / {b}"
            else:
                d = self._pow_d(a, b, t, x, y)
            out[j] = self.temp(d)
        return t, out

    @staticmethod
    def _times(v: str, d: str | None) -> str:
        """v * d, or nothing when d is absent; d = 1 (a bare constant) gives v itself."""
        return "" if not d else (v if d == "1.0" else f"{v} * {d}")

    def _pow_d(self, a: str, b: str, t: str, da: str | None, db: str | None) -> str:
        parts = []
        if da:
            parts.append(f"{b} * {a} ** ({b} - 1.0) * {da}")
        if db:  # a ** b = exp(b log a): defined for a > 0 (elsewhere the value is not smooth in b)
            parts.append(f"({t} * math.log({a}) * {db} if {a} > 0.0 else 0.0)")
        return " + ".join(parts)

    def ifexp(self, node: ast.IfExp, grad: bool):
        test = self.test(node.test)
        t = f"_t{self.k}"
        self.k += 1
        deps = self._expr_deps(node) if grad else frozenset()
        out = {j: f"{t}_{j}" for j in sorted(deps)}
        self.emit(f"if {test}:")
        for branch in (node.body, node.orelse):
            self.indent += 1
            v, dv = self.expr(branch, grad)
            self.emit(f"{t} = {v}")
            for j in out:
                self.emit(f"{t}_{j} = {dv.get(j, '0.0')}")
            self.indent -= 1
            if branch is node.body:
                self.emit("else:")
        return t, out

    def _expr_deps(self, node: ast.AST) -> frozenset[int]:
        d: frozenset[int] = frozenset()
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                if n.id in self.consts:
                    d |= {self.consts[n.id]}
                elif n.id in self.deps:
                    d |= self.deps[n.id]
        return d

    def call(self, node: ast.Call, grad: bool):
        name = call_name(node)
        args = [self.expr(a, grad) for a in node.args]
        vals = [v for v, _ in args]
        if name in ("max", "min"):
            t = self.temp(f"{name}({', '.join(vals)})")
            js = sorted({j for _, d in args for j in d})
            if not js:
                return t, {}
            out = {j: f"{t}_{j}" for j in js}
            for i, (v, d) in enumerate(args):
                if i == len(args) - 1:
                    self.emit("else:")
                else:
                    self.emit(f"{'if' if i == 0 else 'elif'} {t} == {v}:")
                self.indent += 1
                for j in js:
                    self.emit(f"{t}_{j} = {d.get(j, '0.0')}")
                self.indent -= 1
            return t, out
        if name == "pow":  # math.pow, as in Program.compiled()
            (a, da), (b, db) = args
            t = self.temp(f"math.pow({a}, {b})")
            return t, {j: self.temp(self._pow_d(a, b, t, da.get(j), db.get(j))) for j in sorted(set(da) | set(db))}
        (a, da), = args
        fn = "abs" if name == "abs" else f"math.{name}"
        t = self.temp(f"{fn}({a})")
        rule = {"abs": lambda d: f"{d} if {a} >= 0.0 else -{d}",
                "sqrt": lambda d: f"0.5 * {d} / {t}",
                "log": lambda d: f"{d} / {a}",
                "exp": lambda d: f"{t} * {d}"}[name]
        return t, {j: self.temp(rule(d)) for j, d in da.items()}

    def test(self, node: ast.AST) -> str:
        """A condition's source (values only; a condition has no derivative)."""
        if isinstance(node, ast.Compare):
            sides = [self.expr(node.left, False)[0]] + [self.expr(c, False)[0] for c in node.comparators]
            sym = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
            out = sides[0]
            for op, s in zip(node.ops, sides[1:]):
                out += f" {sym[type(op)]} {s}"
            return f"({out})"
        if isinstance(node, ast.BoolOp):
            # operands are evaluated up front: they are pure, so only the result matters
            parts = [self.test(v) for v in node.values]
            return "(" + (" and " if isinstance(node.op, ast.And) else " or ").join(parts) + ")"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return f"(not {self.test(node.operand)})"
        raise ValueError(f"cannot use {type(node).__name__} as a condition")

    # -- statements -----------------------------------------------------------------------
    def block(self, stmts: list[ast.stmt]) -> None:
        for st in stmts:
            if isinstance(st, ast.Assign):
                name = st.targets[0].id
                v, dv = self.expr(st.value)
                self.emit(f"{name} = {v}")
                for j in sorted(self.deps[name]):
                    self.emit(f"_d_{name}_{j} = {dv.get(j, '0.0')}")
            elif isinstance(st, ast.Return):
                v, dv = self.expr(st.value)
                for j in range(self.n):
                    self.emit(f"_g[{j}] = {dv.get(j, '0.0')}")
                self.emit(f"return {v}")
            elif isinstance(st, ast.If):
                self.emit(f"if {self.test(st.test)}:")
                self.indent += 1
                self.block(st.body)
                self.indent -= 1
                if st.orelse:
                    self.emit("else:")
                    self.indent += 1
                    self.block(st.orelse)
                    self.indent -= 1
            else:
                raise ValueError(f"cannot differentiate statement {type(st).__name__}")


def gradient_source(prog: Program) -> str:
    """Python source of `_grad(_x, _c, _g)` for a validated program (see the module docstring)."""
    func = parse_source(ast.unparse(prog.func)).body[0]
    em = _Emitter(prog, func)
    em.lines.append("def _grad(_x, _c, _g):")
    for p in prog.params:
        em.emit(f"{p} = _x[{COMPONENT_INDEX[p]}]")
    em.block(function_body(func))
    return "\n".join(em.lines) + "\n"


def compiled_gradient(prog: Program):
    """`_grad` compiled with `GRAD_SIGNATURE` once per Program (`evaluator.program
    .compile_generated`: by `evaluator.llvm_program`, or numba with STEPEVOLVE_COMPILER=numba);
    a first-class function for compiled callers only (`predict_rows_grad`), not callable from
    Python."""
    if prog._grad is None:
        prog._grad = compile_generated(gradient_source(prog), "_grad", GRAD_TYPE, label=f"<gradient {prog.hash}>")
    return prog._grad
