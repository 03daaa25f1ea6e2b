"""Dimensional analysis of a candidate program: can its terms add up to a time at all?

Every component carries a unit (`COMPONENT_UNITS`): the analytical and measured times are
microseconds, P, D and K count tokens, B, n_prefill and n_decode count requests, layers and tp
are plain numbers. A named constant is a unit to be found (like PySR's dimensional-analysis
wildcards): `C * P` added to a time makes C a time per token. A program is rejected before it
is fitted when no choice of its constants' units makes every sum, comparison, max/min and
branch agree and the result a time (`t_weights + P`; `exp(t_weights)`; one constant that would
have to be a time per token in one term and a time per request in another). A bare number is a
wildcard, as PySR has it: it takes the unit of whatever it is added to or compared with
(`+ 1000.0`, `K > 1e5`), and a product with it can be anything (`0 * P`, `2.0 * D`); as an
exponent it is a plain power (`pow(K, 2)`).

`constant_units` names the unit each constant takes (what `show` prints); "free" where nothing
in the program fixes it.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

import numpy as np

DIMS = ("us", "token", "request")
TIME = (1.0, 0.0, 0.0)
NONE = (0.0, 0.0, 0.0)
TOKEN = (0.0, 1.0, 0.0)
REQUEST = (0.0, 0.0, 1.0)

COUNT_TOKENS = {"P", "D", "K", "ctx_max"}
COUNT_REQUESTS = {"B", "n_prefill", "n_decode"}
PLAIN = {"layers", "tp"}


def component_unit(name: str) -> tuple[float, float, float]:
    """The unit of one component of the alphabet (every `t_*` is a time in us)."""
    if name in COUNT_TOKENS:
        return TOKEN
    if name in COUNT_REQUESTS:
        return REQUEST
    if name in PLAIN:
        return NONE
    if name.startswith("t_"):
        return TIME
    raise KeyError(f"no unit known for component {name!r}")


class UnitError(ValueError):
    """The program's terms cannot add up to a time, whatever its constants."""


@dataclass(frozen=True)
class Unit:
    """Known exponents times a product of unknown constant units (name -> exponent); `free`
    for a bare number standing alone (it matches whatever it meets)."""
    exps: tuple[float, float, float] = NONE
    unknown: tuple = ()  # sorted (name, exponent) pairs, exponents non-zero
    free: bool = False


def _unit(exps, unknown: dict | None = None) -> Unit:
    return Unit(tuple(float(x) for x in exps), tuple(sorted((k, v) for k, v in (unknown or {}).items() if v)))


def fmt(exps) -> str:
    """'us', 'us/token', '1/us', 'token^2', 'dimensionless'."""
    num, den = [], []
    for d, x in zip(DIMS, exps):
        if abs(x) < 1e-12:
            continue
        p = abs(x)
        s = d if abs(p - 1) < 1e-12 else f"{d}^{p:g}"
        (num if x > 0 else den).append(s)
    if not num and not den:
        return "dimensionless"
    top = "*".join(num) if num else "1"
    return top + ("/" + "/".join(den) if den else "")


@dataclass
class _Checker:
    constants: list
    rows: list = field(default_factory=list)  # equations: (coefficients per constant, known exponents)

    def __post_init__(self):
        self.index = {name: i for i, name in enumerate(self.constants)}

    # ------------------------------------------------------------ algebra
    def mul(self, a: Unit, b: Unit, sign: float = 1.0) -> Unit:
        if a.free or b.free:  # a bare number times anything can be anything (PySR's wildcard)
            return Unit(free=True)
        unknown = dict(a.unknown)
        for k, v in b.unknown:
            unknown[k] = unknown.get(k, 0.0) + sign * v
        return _unit([x + sign * y for x, y in zip(a.exps, b.exps)], unknown)

    def power(self, a: Unit, n: float) -> Unit:
        if a.free:
            return Unit(free=True)
        return _unit([x * n for x in a.exps], {k: v * n for k, v in a.unknown})

    def unify(self, a: Unit, b: Unit, what: str) -> Unit:
        """a and b must be the same unit (a sum, a comparison, max/min, both branches): one
        linear equation in the constants' unit exponents, kept only if the system stays
        solvable (else no choice of units makes the program a time)."""
        if a.free:
            return b
        if b.free:
            return a
        diff = self.mul(a, b, -1.0)
        coef = np.zeros(len(self.constants))
        for k, v in diff.unknown:
            coef[self.index[k]] = v
        rows = self.rows + [(coef, np.array(diff.exps))]
        if not _solvable(rows, len(self.constants)):
            raise UnitError(f"{what} mixes {self.describe(a)} with {self.describe(b)}")
        self.rows = rows
        return a if not a.unknown else b

    def solution(self) -> dict[str, str]:
        """Each constant's unit where the equations fix it, else "free"."""
        n = len(self.constants)
        out = {name: "free" for name in self.constants}
        if not self.rows or not n:
            return out
        A = np.array([r[0] for r in self.rows])
        E = np.array([r[1] for r in self.rows])
        x = np.linalg.lstsq(A, -E, rcond=None)[0]  # exact wherever a constant is pinned
        rank = np.linalg.matrix_rank(A)
        for name, i in self.index.items():
            e = np.zeros(n)
            e[i] = 1.0
            if np.linalg.matrix_rank(np.vstack([A, e])) == rank:
                out[name] = fmt(tuple(0.0 if abs(v) < 1e-9 else float(v) for v in x[i]))
        return out

    def describe(self, u: Unit) -> str:
        if u.free:
            return "a bare number"
        if u.unknown:
            known = fmt(u.exps)
            names = "*".join(k if v == 1 else f"{k}^{v:g}" for k, v in u.unknown)
            return names if known == "dimensionless" else f"{names}*{known}"
        return fmt(u.exps)

    # ------------------------------------------------------------ the AST
    def expr(self, node: ast.AST, env: dict) -> Unit:
        if isinstance(node, ast.Constant):
            return Unit(free=True)
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.constants:
                return _unit(NONE, {node.id: 1.0})
            return _unit(component_unit(node.id))
        if isinstance(node, ast.UnaryOp):
            return self.expr(node.operand, env)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Pow):
                return self._pow(node.left, node.right, env)
            a, b = self.expr(node.left, env), self.expr(node.right, env)
            if isinstance(node.op, (ast.Add, ast.Sub)):
                return self.unify(a, b, f"`{ast.unparse(node)}`")
            return self.mul(a, b, 1.0 if isinstance(node.op, ast.Mult) else -1.0)
        if isinstance(node, ast.IfExp):
            self.test(node.test, env)
            return self.unify(self.expr(node.body, env), self.expr(node.orelse, env), f"`{ast.unparse(node)}`")
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            args = node.args
            if name == "pow" and len(args) == 2:
                return self._pow(args[0], args[1], env)
            units = [self.expr(a, env) for a in args]
            if name in ("max", "min", "abs"):
                out = units[0]
                for u in units[1:]:
                    out = self.unify(out, u, f"`{ast.unparse(node)}`")
                return out
            if name == "sqrt":
                return self.power(units[0], 0.5)
            if name in ("exp", "log"):
                self.unify(units[0], Unit(), f"the argument of `{ast.unparse(node)}` (must be dimensionless)")
                return Unit()
            raise UnitError(f"no unit rule for `{ast.unparse(node)}`")
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            self.test(node, env)
            return Unit()
        raise UnitError(f"no unit rule for `{ast.unparse(node)}`")

    def _pow(self, base: ast.AST, exponent: ast.AST, env: dict) -> Unit:
        b = self.expr(base, env)
        n = _literal(exponent)
        if n is not None:
            return self.power(b, n)
        self.unify(self.expr(exponent, env), Unit(), f"the exponent of `{ast.unparse(base)}` (must be dimensionless)")
        return self.unify(b, Unit(), f"`{ast.unparse(base)}` raised to a fitted power (must be dimensionless)")

    def test(self, node: ast.AST, env: dict) -> None:
        if isinstance(node, ast.Compare):
            left = self.expr(node.left, env)
            for right in node.comparators:
                left = self.unify(left, self.expr(right, env), f"the comparison `{ast.unparse(node)}`")
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                self.test(v, env)
        elif isinstance(node, ast.UnaryOp):
            self.test(node.operand, env)
        else:
            self.expr(node, env)

    def block(self, stmts: list, env: dict) -> dict:
        for st in stmts:
            if isinstance(st, ast.Assign):
                env[st.targets[0].id] = self.expr(st.value, env)
            elif isinstance(st, ast.Return):
                self.unify(self.expr(st.value, env), _unit(TIME), f"the returned step time `{ast.unparse(st.value)}`")
            elif isinstance(st, ast.If):
                self.test(st.test, env)
                a = self.block(st.body, dict(env))
                b = self.block(st.orelse, dict(env))
                for name in set(a) | set(b):
                    if name in a and name in b:
                        env[name] = self.unify(a[name], b[name], f"`{name}` on the two branches of `if {ast.unparse(st.test)}`")
                    else:
                        env[name] = a.get(name, b.get(name))
        return env


def _solvable(rows: list, n: int) -> bool:
    """Whether A x + e = 0 has a solution, per dimension (rank of A equals that of [A | e])."""
    A = np.array([r[0] for r in rows]).reshape(len(rows), n)
    E = np.array([r[1] for r in rows])
    rank = np.linalg.matrix_rank(A) if n else 0
    return all(np.linalg.matrix_rank(np.column_stack([A, E[:, d]])) == rank for d in range(E.shape[1]))


def _literal(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        x = _literal(node.operand)
        return None if x is None else (-x if isinstance(node.op, ast.USub) else x)
    return None


def _body(func: ast.FunctionDef) -> list:
    body = list(func.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring
    return body


def check_units(program) -> dict[str, str]:
    """The unit of every constant of a validated `Program` ("free" where nothing fixes it);
    UnitError (one line) when its terms cannot add up to a time whatever its constants."""
    c = _Checker(list(program.constants))
    c.block(_body(program.func), {})
    return c.solution()


def constant_units(program) -> dict[str, str]:
    """`check_units`, or {} for a program whose units cannot add up (its rejection says why)."""
    try:
        return check_units(program)
    except UnitError:
        return {}


def units_violation(program) -> str | None:
    """Why the program is dimensionally impossible ("units: ..."), or None."""
    try:
        check_units(program)
    except UnitError as e:
        return f"units: {e}"
    return None
