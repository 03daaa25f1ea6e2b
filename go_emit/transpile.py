"""Transpile a validated candidate program (evaluator.program.Program) into Go statements.

The input is the AST that `parse_program` has already checked against the whitelist, so
every node kind handled here is exactly the whitelist: numbers, names, + - * / **, unary
- and +, calls of max/min/abs/sqrt/log/exp/pow (or math.X), conditional expressions,
comparisons combined with and/or/not (conditions only), local assignments, if/elif/else
and return.

Semantics follow the evaluator's numba kernel (IEEE float64, `error_model="numpy"`), not
plain Python's exceptions: x/0 is +-Inf or NaN, sqrt/log of a negative number is NaN, exp
overflows to +Inf. Points that need care to stay bit-identical:

* Go evaluates operator expressions over untyped constants exactly (arbitrary precision)
  and refuses constant division by zero, while Python/numba round every operation to
  float64. Every literal-only subexpression of + - * / and unary -/+ is therefore folded
  here with float64 semantics and emitted as one literal (math.Inf/math.NaN/
  math.Copysign(0, -1) where a literal cannot express the value).
* Python's max(a, b) returns a unless b > a (so a NaN argument wins only in first place);
  numba does the same. Go's math.Max propagates any NaN, so max/min become the emitted
  helpers pyMax/pyMin with Python's rule; 3+ arguments nest left to right like Python.
* `a if c else b` becomes the helper choose(c, a, b). Both sides are evaluated, which is
  harmless: float arithmetic and the math functions have no side effects and never panic.
* Python's chained comparison a < b < c becomes a < b && b < c; `not` becomes `!` without
  rewriting the comparison (NaN makes `not a < b` differ from `a >= b`).
* ** and pow() become math.Pow; abs becomes math.Abs.

Expressions are built as a small Go expression tree and printed with gofmt's own
spacing algorithm (go/printer binaryExpr/cutoff/walkBinary), so the output is
gofmt-clean without running gofmt.
"""
from __future__ import annotations

import ast
import unicodedata
from dataclasses import dataclass, field

import numpy as np

from evaluator.components import COMPONENT_INDEX
from evaluator.program import Program, call_name

__all__ = [
    "TranspileError",
    "TranspiledProgram",
    "transpile",
    "go_identifier",
    "go_float",
    "format_expr",
    "vet_safe_condition",
    "go_binary",
    "go_unary",
    "fold_literals",
]


class TranspileError(ValueError):
    """The program cannot be expressed in Go (should not happen for validated programs)."""


# ----------------------------------------------------------------- Go expression tree

@dataclass(frozen=True)
class GAtom:
    """An identifier, a non-negative number literal, or an index expression like x[4]."""
    text: str


@dataclass(frozen=True)
class GUnary:
    op: str  # "-", "+", "!"
    x: object


@dataclass(frozen=True)
class GBinary:
    op: str
    x: object
    y: object


@dataclass(frozen=True)
class GParen:
    x: object


@dataclass(frozen=True)
class GCall:
    fun: str
    args: tuple


_PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
         "+": 4, "-": 4, "*": 5, "/": 5}
_UNARY_PREC = 6
_LOWEST_PREC = 0


def _walk_binary(e: GBinary) -> tuple[bool, bool, int]:
    """go/printer walkBinary."""
    prec = _PREC[e.op]
    has4, has5, max_problem = prec == 4, prec == 5, 0
    left = e.x
    if isinstance(left, GBinary) and not _PREC[left.op] < prec:
        h4, h5, mp = _walk_binary(left)
        has4, has5, max_problem = has4 or h4, has5 or h5, max(max_problem, mp)
    right = e.y
    if isinstance(right, GBinary):
        if not _PREC[right.op] <= prec:
            h4, h5, mp = _walk_binary(right)
            has4, has5, max_problem = has4 or h4, has5 or h5, max(max_problem, mp)
    elif isinstance(right, GUnary):
        pair = e.op + right.op
        if pair in ("/*", "&&", "&^"):
            max_problem = 5
        elif pair in ("++", "--"):
            max_problem = max(max_problem, 4)
    return has4, has5, max_problem


def _cutoff(e: GBinary, depth: int) -> int:
    has4, has5, max_problem = _walk_binary(e)
    if max_problem > 0:
        return max_problem + 1
    if has4 and has5:
        return 5 if depth == 1 else 4
    return 6 if depth == 1 else 4


def _diff_prec(e: object, prec: int) -> int:
    return 0 if isinstance(e, GBinary) and _PREC[e.op] == prec else 1


def _reduce_depth(depth: int) -> int:
    return max(depth - 1, 1)


def _expr1(e: object, prec1: int, depth: int) -> str:
    if isinstance(e, GAtom):
        return e.text
    if isinstance(e, GBinary):
        return _binary(e, prec1, _cutoff(e, depth), depth)
    if isinstance(e, GUnary):
        if _UNARY_PREC < prec1:
            return "(" + _expr1(e, _LOWEST_PREC, 1) + ")"
        return e.op + _expr1(e.x, _UNARY_PREC, depth)
    if isinstance(e, GParen):
        if isinstance(e.x, GParen):
            return _expr1(e.x, _LOWEST_PREC, depth)
        return "(" + _expr1(e.x, _LOWEST_PREC, _reduce_depth(depth)) + ")"
    if isinstance(e, GCall):
        d = depth + 1 if len(e.args) > 1 else depth
        return e.fun + "(" + ", ".join(_expr1(a, _LOWEST_PREC, d) for a in e.args) + ")"
    raise TranspileError(f"internal: unknown Go node {e!r}")


def _binary(e: GBinary, prec1: int, cutoff: int, depth: int) -> str:
    prec = _PREC[e.op]
    if prec < prec1:  # not reached: operands are parenthesized explicitly
        return "(" + _expr1(e, _LOWEST_PREC, _reduce_depth(depth)) + ")"
    blank = " " if prec < cutoff else ""
    left = _expr1(e.x, prec, depth + _diff_prec(e.x, prec))
    right = _expr1(e.y, prec + 1, depth + 1)
    return f"{left}{blank}{e.op}{blank}{right}"


def format_expr(e: object) -> str:
    """Print a Go expression as gofmt does at statement level (depth 1)."""
    return _expr1(e, _LOWEST_PREC, 1)


def _unparen(e: object) -> object:
    while isinstance(e, GParen):
        e = e.x
    return e


def _is_constant(e: object) -> bool:
    """A Go constant as emitted here: a number literal, possibly negated."""
    e = _unparen(e)
    if isinstance(e, GUnary) and e.op in ("-", "+"):
        e = _unparen(e.x)
    return isinstance(e, GAtom) and e.text[:1].isdigit()


def _has_call(e: object) -> bool:
    if isinstance(e, GCall):
        return True
    if isinstance(e, (GParen, GUnary)):
        return _has_call(e.x)
    if isinstance(e, GBinary):
        return _has_call(e.x) or _has_call(e.y)
    return False


def _chain(e: object, op: str) -> list:
    inner = _unparen(e)
    if isinstance(inner, GBinary) and inner.op == op:
        return _chain(inner.x, op) + _chain(inner.y, op)
    return [e]


def vet_safe_condition(e: object) -> object:
    """Rewrite a condition so `go vet` (bools analyzer) has nothing to report, same value.

    In each &&/|| chain, between calls (vet treats calls as side effects): a repeated
    operand is dropped (a || a == a), and a second `x != c` in an || chain (`x == c` in an
    && chain) with a constant c becomes !(x == c) (resp. !(x != c)), identical in IEEE.
    """
    if isinstance(e, GParen):
        return GParen(vet_safe_condition(e.x))
    if isinstance(e, GUnary):
        return GUnary(e.op, vet_safe_condition(e.x))
    if isinstance(e, GCall):
        return GCall(e.fun, tuple(vet_safe_condition(a) for a in e.args))
    if not isinstance(e, GBinary):
        return e
    if e.op not in ("||", "&&"):
        return GBinary(e.op, vet_safe_condition(e.x), vet_safe_condition(e.y))
    bad, good = ("!=", "==") if e.op == "||" else ("==", "!=")
    out: list = []
    seen_text: set[str] = set()
    seen_eq: dict[str, str] = {}
    for leaf in (vet_safe_condition(x) for x in _chain(e, e.op)):
        if _has_call(leaf):
            out.append(leaf)
            seen_text.clear()
            seen_eq.clear()
            continue
        text = format_expr(leaf)
        if text in seen_text:
            continue
        seen_text.add(text)
        b = _unparen(leaf)
        if isinstance(b, GBinary) and b.op == bad:
            x = b.x if _is_constant(b.y) else b.y if _is_constant(b.x) else None
            if x is not None:
                xt = format_expr(x)
                if xt in seen_eq and seen_eq[xt] != text:
                    leaf = GUnary("!", GParen(GBinary(good, b.x, b.y)))
                else:
                    seen_eq.setdefault(xt, text)
        out.append(leaf)
    acc = out[0]
    for leaf in out[1:]:
        acc = go_binary(e.op, acc, leaf)
    return acc


def go_binary(op: str, x: object, y: object) -> GBinary:
    """Binary node with the parentheses the Python tree implies (no reassociation)."""
    prec = _PREC[op]
    if isinstance(x, GBinary) and _PREC[x.op] < prec:
        x = GParen(x)
    if isinstance(y, GBinary) and _PREC[y.op] <= prec:
        y = GParen(y)
    return GBinary(op, x, y)


def go_unary(op: str, x: object) -> GUnary:
    if isinstance(x, (GBinary, GUnary)):
        x = GParen(x)
    return GUnary(op, x)


# ----------------------------------------------------------------- literals and names

def go_float(v: float) -> object:
    """A Go expression of float64 value exactly v (all values, including -0, Inf, NaN)."""
    v = float(v)
    if v != v:
        return GCall("math.NaN", ())
    if v in (float("inf"), float("-inf")):
        return GCall("math.Inf", (GAtom("1") if v > 0 else GUnary("-", GAtom("1")),))
    if v == 0.0 and np.signbit(v):
        return GCall("math.Copysign", (GAtom("0"), GUnary("-", GAtom("1"))))
    if v < 0:
        return GUnary("-", GAtom(_number(-v)))
    return GAtom(_number(v))


def _number(v: float) -> str:
    """Shortest exact decimal text of a positive finite float that Go reads as a float constant."""
    plain = repr(v)
    sci = np.format_float_scientific(v, unique=True, trim="-")
    if (v >= 1e7 or v < 1e-4) and "e" in sci and float(sci) == v and len(sci) < len(plain):
        return sci
    return plain


GO_KEYWORDS = frozenset("""
break case chan const continue default defer else fallthrough for func go goto if import
interface map package range return select struct switch type var""".split())
GO_PREDECLARED = frozenset("""
any append bool byte cap clear close comparable complex complex128 complex64 copy delete
error false float32 float64 imag int int16 int32 int64 int8 iota len make max min new nil
panic print println real recover rune string true uint uint16 uint32 uint64 uint8 uintptr""".split())
# names the generated predict method itself uses
RESERVED_IN_PREDICT = frozenset({"m", "x", "math", "sim", "fmt"})


def _is_go_identifier(name: str) -> bool:
    if not name:
        return False
    for i, ch in enumerate(name):
        cat = unicodedata.category(ch)
        ok = ch == "_" or cat.startswith("L") or (i > 0 and cat == "Nd")
        if not ok:
            return False
    return True


def go_identifier(name: str, taken: set[str]) -> str:
    """A valid, unreserved Go identifier for a Python name, unique within `taken`."""
    base = name
    if not _is_go_identifier(base):
        base = "v_" + "".join(ch if ch.isascii() and (ch.isalnum() or ch == "_") else "_" for ch in name)
    out = base
    while out in GO_KEYWORDS or out in GO_PREDECLARED or out in RESERVED_IN_PREDICT or out in taken:
        out += "_"
    return out


# ----------------------------------------------------------------- transpiler

@dataclass
class TranspiledProgram:
    """The program as Go pieces; `emit` wraps them into the predict method.

    params/consts map each Python name the body reads to its Go identifier; body holds
    the statements as lines indented relative to the function body (one tab = one level).
    const_fields maps every declared constant (read or not) to its Go struct field name.
    """
    params: dict[str, str]
    consts: dict[str, str]
    const_fields: dict[str, str]
    body: list[str]
    helpers: set[str] = field(default_factory=set)
    local_names: dict[str, str] = field(default_factory=dict)


_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_MATH = {"abs": "math.Abs", "sqrt": "math.Sqrt", "log": "math.Log", "exp": "math.Exp", "pow": "math.Pow"}


def fold_literals(node: ast.AST) -> float | None:
    """float64 value of a literal-only + - * / / unary subtree, else None (numba semantics)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = fold_literals(node.operand)
        if v is None:
            return None
        return float(-np.float64(v)) if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = fold_literals(node.left), fold_literals(node.right)
        if a is None or b is None:
            return None
        x, y = np.float64(a), np.float64(b)
        with np.errstate(all="ignore"):
            op = type(node.op)
            r = x + y if op is ast.Add else x - y if op is ast.Sub else x * y if op is ast.Mult else x / y
        return float(r)
    return None


class _Transpiler:
    def __init__(self, prog: Program, receiver: str):
        self.prog = prog
        self.recv = receiver
        func = prog.func
        self.read: set[str] = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)
                               and isinstance(n.ctx, ast.Load)}
        assigned: list[str] = []
        for n in ast.walk(func):
            if isinstance(n, ast.Assign):
                name = n.targets[0].id
                if name not in assigned:
                    assigned.append(name)
        taken: set[str] = set()
        self.names: dict[str, str] = {}
        # components keep their names where possible, then constants, then locals
        for p in sorted(prog.params, key=COMPONENT_INDEX.__getitem__):
            self.names[p] = go_identifier(p, taken)
            taken.add(self.names[p])
        self.const_fields: dict[str, str] = {}
        for c in prog.const_names:
            self.names[c] = go_identifier(c, taken)
            taken.add(self.names[c])
            self.const_fields[c] = self.names[c]
        self.locals: dict[str, str] = {}
        for name in assigned:
            self.locals[name] = go_identifier(name, taken)
            taken.add(self.locals[name])
            self.names[name] = self.locals[name]
        self.helpers: set[str] = set()

    # ---- expressions
    def expr(self, node: ast.AST) -> object:
        folded = fold_literals(node)
        if folded is not None:
            return go_float(folded)
        if isinstance(node, ast.Name):
            return GAtom(self.names[node.id])
        if isinstance(node, ast.BinOp):
            left, right = self.expr(node.left), self.expr(node.right)
            if isinstance(node.op, ast.Pow):
                return GCall("math.Pow", (left, right))
            return go_binary(_BINOPS[type(node.op)], left, right)
        if isinstance(node, ast.UnaryOp):
            operand = self.expr(node.operand)
            if isinstance(node.op, ast.UAdd):
                return operand  # identity on float64, also for -0 and NaN
            return go_unary("-", operand)
        if isinstance(node, ast.Call):
            name = call_name(node)
            args = [self.expr(a) for a in node.args]
            if name in ("max", "min"):
                helper = "pyMax" if name == "max" else "pyMin"
                self.helpers.add(helper)
                acc = args[0]
                for a in args[1:]:
                    acc = GCall(f"{self.recv}.{helper}", (acc, a))
                return acc
            if name in _MATH:
                return GCall(_MATH[name], tuple(args))
            raise TranspileError(f"line {node.lineno}: call {name!r} not supported")
        if isinstance(node, ast.IfExp):
            self.helpers.add("choose")
            return GCall(f"{self.recv}.choose", (self.cond(node.test), self.expr(node.body), self.expr(node.orelse)))
        raise TranspileError(f"line {getattr(node, 'lineno', '?')}: expression {type(node).__name__} not supported")

    def cond(self, node: ast.AST) -> object:
        return vet_safe_condition(self.test(node))

    def test(self, node: ast.AST) -> object:
        if isinstance(node, ast.Compare):
            operands = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
            parts = [go_binary(_CMPOPS[type(op)], operands[i], operands[i + 1])
                     for i, op in enumerate(node.ops)]
            acc = parts[0]
            for p in parts[1:]:
                acc = go_binary("&&", acc, p)
            return acc
        if isinstance(node, ast.BoolOp):
            op = "&&" if isinstance(node.op, ast.And) else "||"
            acc = self.test(node.values[0])
            for v in node.values[1:]:
                acc = go_binary(op, acc, self.test(v))
            return acc
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return go_unary("!", self.test(node.operand))
        raise TranspileError(f"line {getattr(node, 'lineno', '?')}: condition {type(node).__name__} not supported")

    # ---- statements
    @staticmethod
    def _is_doc(st: ast.stmt) -> bool:
        return isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str)

    def _assigned_in(self, stmts: list[ast.stmt]) -> list[str]:
        out: list[str] = []
        for st in stmts:
            for n in ast.walk(st):
                if isinstance(n, ast.Assign) and n.targets[0].id not in out:
                    out.append(n.targets[0].id)
        return out

    def block(self, stmts: list[ast.stmt], level: int, declared: set[str], top: bool) -> list[str]:
        ind = "\t" * level
        lines: list[str] = []
        for st in stmts:
            if self._is_doc(st):
                continue
            if isinstance(st, ast.Assign):
                name = st.targets[0].id
                go = self.locals[name]
                if isinstance(st.value, ast.Name) and st.value.id == name:
                    lines.append(f"{ind}// {go} = {go} (no-op)")
                    continue
                value = format_expr(self.expr(st.value))
                if name in declared:
                    lines.append(f"{ind}{go} = {value}")
                else:
                    if not top:  # cannot happen: nested assignments are pre-declared
                        raise TranspileError(f"internal: {name!r} not declared before nested assignment")
                    lines.append(f"{ind}{go} := {value}")
                    declared.add(name)
                    if name not in self.read:
                        lines.append(f"{ind}_ = {go}")
                continue
            if isinstance(st, ast.Return):
                lines.append(f"{ind}return {format_expr(self.expr(st.value))}")
                continue
            if isinstance(st, ast.If):
                if top:
                    new = [n for n in self._assigned_in([st]) if n not in declared]
                    if new:
                        lines.append(f"{ind}var {', '.join(self.locals[n] for n in new)} float64")
                        declared.update(new)
                        lines += [f"{ind}_ = {self.locals[n]}" for n in new if n not in self.read]
                lines += self._if(st, level, declared)
                continue
            raise TranspileError(f"line {getattr(st, 'lineno', '?')}: statement {type(st).__name__} not supported")
        return lines

    def _if(self, st: ast.If, level: int, declared: set[str]) -> list[str]:
        ind = "\t" * level
        lines = [f"{ind}if {format_expr(self.cond(st.test))} {{"]
        while True:
            lines += self.block(st.body, level + 1, declared, top=False)
            orelse = [s for s in st.orelse if not self._is_doc(s)]
            if len(orelse) == 1 and isinstance(orelse[0], ast.If) and len(st.orelse) == 1:
                st = orelse[0]
                lines.append(f"{ind}}} else if {format_expr(self.cond(st.test))} {{")
                continue
            if st.orelse:
                lines.append(f"{ind}}} else {{")
                lines += self.block(st.orelse, level + 1, declared, top=False)
            lines.append(f"{ind}}}")
            return lines


def transpile(prog: Program, receiver: str = "m") -> TranspiledProgram:
    """Go statements for the body of predict_step_time (see module docstring)."""
    t = _Transpiler(prog, receiver)
    body = t.block(prog.func.body, 1, set(), top=True)
    params = {p: t.names[p] for p in sorted(prog.params, key=COMPONENT_INDEX.__getitem__) if p in t.read}
    consts = {c: t.names[c] for c in prog.const_names if c in t.read}
    return TranspiledProgram(params=params, consts=consts, const_fields=dict(t.const_fields), body=body,
                             helpers=set(t.helpers), local_names=dict(t.locals))
