"""Identifiable constants: fold constants the data cannot tell apart, and say which ones it does not pin.

Two constants that only ever appear as a product (`EFFICIENCY * SCALE * x`) or a sum
(`A + B + x`) are one number written twice: the fit wanders along a valley, the archive stores
arbitrary splits, and the complexity count rewards nothing. `fold_constants` merges them
syntactically before fitting. What syntax cannot see (a constant multiplying a component that is
constant on the data, e.g. `t_weights` of a dense model next to an OVERHEAD; a branch the data
never takes) `identifiability` finds numerically from the Jacobian of the predictions.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field

import numpy as np

from evaluator.program import FUNC_NAME, Program, parse_program, parse_source
from evaluator.step_scoring import predict_rows

# ---------------------------------------------------------------- syntactic folding


@dataclass
class Folding:
    """The folded program and how its constants relate to the original ones."""
    program: Program
    removed: list[str] = field(default_factory=list)  # constants merged into another
    merged: dict[str, str] = field(default_factory=dict)  # kept constant -> expression of old ones

    @property
    def changed(self) -> bool:
        return bool(self.removed)


def _flatten(node: ast.AST, kind: str) -> list[tuple[ast.AST, int]]:
    """Operands of an n-ary product (kind 'mul': exponent +-1) or sum (kind 'add': sign +-1)."""
    ops = (ast.Mult, ast.Div) if kind == "mul" else (ast.Add, ast.Sub)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ops):
        right_sign = 1 if isinstance(node.op, (ast.Mult, ast.Add)) else -1
        return _flatten(node.left, kind) + [(n, s * right_sign) for n, s in _flatten(node.right, kind)]
    if kind == "add" and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return [(n, -s) for n, s in _flatten(node.operand, kind)]
    return [(node, 1)]


def _rebuild(parts: list[tuple[ast.AST, int]], kind: str) -> ast.AST:
    """Left-assoc chain from (operand, sign/exponent); a leading negative gets a 0 or 1 in front."""
    pos, neg = (ast.Mult(), ast.Div()) if kind == "mul" else (ast.Add(), ast.Sub())
    node, s0 = parts[0]
    if s0 < 0:
        node = ast.BinOp(ast.Constant(1.0 if kind == "mul" else 0.0), neg, node)
    for n, s in parts[1:]:
        node = ast.BinOp(node, pos if s > 0 else neg, n)
    return node


def _literal(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    return None


class _Folder:
    """One folding pass over the function; `apply` returns True if it changed something."""

    def __init__(self, values: dict[str, float], uses: dict[str, int], exprs: dict[str, str],
                 local_defs: dict[str, ast.AST] | None = None):
        self.values = values
        self.uses = uses
        self.local_defs = local_defs or {}  # locals assigned once and read once: see through them
        self.exprs = exprs  # constant -> what it stands for, in the original constants
        self.removed: list[str] = []
        self.merged: dict[str, str] = {}

    def exclusive(self, node: ast.AST) -> str | None:
        """Name of a constant used exactly once in the whole function (here), else None."""
        if isinstance(node, ast.Name) and node.id in self.values and self.uses.get(node.id) == 1 \
                and node.id not in self.removed:
            return node.id
        return None

    def record(self, kept: str, expr: str, value: float, drop: list[str]) -> None:
        self.exprs[kept] = expr
        self.merged[kept] = expr
        self.values[kept] = value
        self.removed.extend(drop)

    def term(self, c: str) -> str:
        e = self.exprs.get(c, c)
        return e if e == c else f"({e})"

    def chain(self, node: ast.AST, kind: str) -> ast.AST | None:
        """Merge the exclusive constants and literals of one product or sum chain."""
        parts = _flatten(node, kind)
        if len(parts) < 2:
            return None
        names = [(i, self.exclusive(n), s) for i, (n, s) in enumerate(parts) if self.exclusive(n)]
        lits = [(i, _literal(n), s) for i, (n, s) in enumerate(parts) if _literal(n) is not None]
        if not names or len(names) + len(lits) < 2:
            return None
        k_i, kept, k_s = names[0]
        if kind == "mul":
            vals = [(self.values[c], s) for _, c, s in names] + [(v, s) for _, v, s in lits]
            if any(v == 0.0 and s < 0 for v, s in vals):
                return None
            total = math.prod(v ** s for v, s in vals)
            if total == 0.0 and k_s < 0:
                return None
            new = total ** k_s
            # the kept constant's new value, as a product over the old ones (exponents times k_s)
            items = [(self.term(c), s * k_s) for _, c, s in names] + [(repr(v), s * k_s) for _, v, s in lits]
            expr = items[0][0] if items[0][1] > 0 else f"1 / {items[0][0]}"
            expr += "".join(f" * {t}" if e > 0 else f" / {t}" for t, e in items[1:])
        else:
            total = sum(s * self.values[c] for _, c, s in names) + sum(s * v for _, v, s in lits)
            new = k_s * total
            items = [(self.term(c), s * k_s) for _, c, s in names] + [(repr(v), s * k_s) for _, v, s in lits]
            expr = items[0][0] if items[0][1] > 0 else f"-{items[0][0]}"
            expr += "".join(f" + {t}" if e > 0 else f" - {t}" for t, e in items[1:])
        if not math.isfinite(new):
            return None
        drop_idx = {i for i, _, _ in names[1:]} | {i for i, _, _ in lits}
        self.record(kept, expr, new, [c for _, c, _ in names[1:]])
        rest = [p for i, p in enumerate(parts) if i not in drop_idx]
        return _rebuild(rest, kind)

    def distribute(self, node: ast.AST, kind: str) -> ast.AST | None:
        """`E * (S*x + C if c else F*y)` -> `(S'*x + C' if c else F'*y)`: E is redundant when every
        additive term it scales carries its own exclusive constant (for sums: `A + (B + x if c else
        C + y)`, and `A + max(B + x, C + y)`)."""
        parts = _flatten(node, kind)
        if len(parts) != 2:
            return None
        for (a, sa), (b, sb) in ((parts[0], parts[1]), (parts[1], parts[0])):
            e = self.exclusive(a)
            if e is None or sb < 0:
                continue
            slots = self._slots(b, kind)
            if slots is None:
                continue
            ve = self.values[e]
            if kind == "mul" and ve == 0.0:
                continue
            for c, s in slots:
                if kind == "mul":
                    self.values[c] = self.values[c] * ve ** (sa * s)
                    expr = f"{self.term(c)} * {self.term(e)}" if sa * s > 0 else f"{self.term(c)} / {self.term(e)}"
                else:
                    self.values[c] = self.values[c] + s * sa * ve
                    expr = f"{self.term(c)} + {self.term(e)}" if s * sa > 0 else f"{self.term(c)} - {self.term(e)}"
                self.exprs[c] = self.merged[c] = expr
            self.removed.append(e)
            return b
        return None

    def _slots(self, node: ast.AST, kind: str) -> list[tuple[str, int]] | None:
        """One exclusive constant per additive term that absorbs the scale (sign/exponent), or None."""
        if isinstance(node, ast.Name) and node.id in self.local_defs:
            return self._slots(self.local_defs[node.id], kind)
        if isinstance(node, ast.IfExp):
            a, b = self._slots(node.body, kind), self._slots(node.orelse, kind)
            return None if a is None or b is None else a + b
        if kind == "add" and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("max", "min"):
            out = []
            for arg in node.args:
                s = self._slots(arg, kind)
                if s is None:
                    return None
                out += s
            return out
        terms = _flatten(node, "add") if kind == "mul" else [(node, 1)]
        out = []
        for term, _ in terms:
            if kind == "mul":
                found = [(self.exclusive(n), s) for n, s in _flatten(term, "mul") if self.exclusive(n)]
            else:
                found = [(self.exclusive(n), s) for n, s in _flatten(term, "add") if self.exclusive(n)]
            if not found:
                return None
            out.append(found[0])
        names = [c for c, _ in out]
        return out if len(set(names)) == len(names) else None

    def visit(self, node: ast.AST) -> ast.AST:
        """Post-order: fold children first, then this node; stop after the first change."""
        for fname, value in ast.iter_fields(node):
            if isinstance(value, list):
                for i, v in enumerate(value):
                    if isinstance(v, ast.AST):
                        value[i] = self.visit(v)
                        if self.removed:
                            return node
            elif isinstance(value, ast.AST):
                setattr(node, fname, self.visit(value))
                if self.removed:
                    return node
        if isinstance(node, ast.BinOp):
            kind = "mul" if isinstance(node.op, (ast.Mult, ast.Div)) else "add" \
                if isinstance(node.op, (ast.Add, ast.Sub)) else None
            if kind:
                new = self.chain(node, kind) or self.distribute(node, kind)
                if new is not None:
                    return ast.copy_location(new, node)
        return node


def _uses(func: ast.FunctionDef, names) -> dict[str, int]:
    out = dict.fromkeys(names, 0)
    for n in ast.walk(func):
        if isinstance(n, ast.Name) and n.id in out:
            out[n.id] += 1
    return out


def _single_use_locals(func: ast.FunctionDef) -> dict[str, ast.AST]:
    """Locals assigned exactly once and read exactly once: scaling the one read scales the value."""
    assigned: dict[str, list[ast.AST]] = {}
    for n in ast.walk(func):
        if isinstance(n, ast.Assign):
            assigned.setdefault(n.targets[0].id, []).append(n.value)
    reads = _uses(func, assigned)
    for n in ast.walk(func):  # _uses counts the assignment targets too
        if isinstance(n, ast.Assign) and n.targets[0].id in reads:
            reads[n.targets[0].id] -= 1
    return {k: v[0] for k, v in assigned.items() if len(v) == 1 and reads[k] == 1}


def fold_constants(program: Program) -> Folding:
    """Merge constants that appear only as a product or sum of each other (repeated to a fixpoint).

    Returns the folded program (valid per `parse_program`, constant values combined so that it
    predicts the same) and, per kept constant, the expression of the old constants it stands for.
    """
    tree = parse_source(program.source)
    values = dict(program.constants)
    exprs = {c: c for c in values}
    removed: list[str] = []
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == FUNC_NAME)
    while True:
        folder = _Folder(values, _uses(func, [c for c in values if c not in removed]), exprs,
                         _single_use_locals(func))
        try:
            func.body = [folder.visit(st) for st in func.body]
        except RecursionError:  # absurdly deep expression: leave the program as it is
            return Folding(program)
        if not folder.removed:
            break
        removed += folder.removed
    merged = {c: e for c, e in exprs.items() if e != c and c not in removed}
    if not removed:
        return Folding(program)
    body = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id in values:
            name = node.targets[0].id
            if name in removed:
                continue
            node.value = ast.Constant(float(values[name]))
        body.append(node)
    tree.body = body
    return Folding(parse_program(ast.unparse(ast.fix_missing_locations(tree)) + "\n"), removed, merged)


# ---------------------------------------------------------------- numerical identifiability

SV_TOL = 1e-6  # singular value / largest below this: a direction the predictions do not feel
NOISE = 0.01  # relative noise per row assumed for the standard errors (1%)


@dataclass
class ConstantReport:
    name: str
    value: float
    pinned: bool
    threshold: bool  # used only in conditions: pinned = some row switches branch within x0.5..x2
    independence: float  # distance of its (normalised) Jacobian column from the others' span; 0 = redundant
    rel_se: float  # relative standard error at 1% row noise (inf when not pinned)
    partners: list[str]  # constants it trades off against in the unfelt directions


@dataclass
class Identifiability:
    rank: int
    n_constants: int
    singular_values: list[float]  # of the relative Jacobian, largest first
    constants: list[ConstantReport]

    def unpinned(self) -> list[str]:
        return [c.name for c in self.constants if not c.pinned]

    def summary(self) -> str:
        """One line for `show`."""
        if not self.unpinned():
            return f"all {self.n_constants} constants pinned by the data (rank {self.rank})"
        groups = []
        for c in self.constants:
            if c.pinned:
                continue
            if c.threshold:
                groups.append(f"{c.name} (a split no row comes near)")
            else:
                groups.append(f"{c.name} (trades off with {', '.join(c.partners) or 'nothing: no row responds'})")
        return (f"rank {self.rank} of {self.n_constants}: not pinned by the data: " + "; ".join(groups))


def jacobian(f, consts: np.ndarray, X: np.ndarray, rel_step: float = 1e-5) -> np.ndarray:
    """d prediction / d constant per row, divided by the prediction (central differences)."""
    c0 = np.ascontiguousarray(consts, dtype=np.float64)
    X = np.ascontiguousarray(X, dtype=np.float64)
    scale = np.maximum(np.abs(predict_rows(f, X, c0)), 1e-12)
    J = np.empty((len(X), len(c0)))
    for j in range(len(c0)):
        h = rel_step * max(abs(c0[j]), 1.0)
        up, dn = c0.copy(), c0.copy()
        up[j] += h
        dn[j] -= h
        J[:, j] = (predict_rows(f, X, up) - predict_rows(f, X, dn)) / (2 * h) / scale
    return np.where(np.isfinite(J), J, 0.0)


def identifiability(f, consts, X: np.ndarray, names: list[str] | None = None, thresholds=(),
                    sv_tol: float = SV_TOL) -> Identifiability:
    """Which constants the rows X pin down, from the singular values of the Jacobian.

    The Jacobian of the relative predictions is column-normalised first, so the test is about
    collinearity, not about units (OVERHEAD in us next to a dimensionless EFFICIENCY). A constant
    is pinned when its column stands more than `sv_tol` (1e-6) away from the span of the other
    columns: exact redundancies sit at float precision (~1e-10), finite-difference noise well
    below 1e-6, real but weak sensitivities far above (their weakness shows in `rel_se`). An
    unpinned constant can be traded for its `partners` without changing any prediction; one no
    row responds to (unused, or in a branch the rows never take) has no partners. `rank` counts
    singular values above `sv_tol` x the largest.
    `rel_se`: relative standard error of each pinned constant if every row carried 1% noise.
    `thresholds`: names of constants used only in conditions. A derivative means nothing for
    them (a step): they are held out of the Jacobian, and pinned if halving or doubling them
    changes some prediction on the rows (a split no row comes near is not).
    """
    c = np.ascontiguousarray(consts, dtype=np.float64)
    X = np.ascontiguousarray(X, dtype=np.float64)
    names = list(names) if names is not None else [f"c{i}" for i in range(len(c))]
    is_thr = np.array([n in set(thresholds) for n in names], bool)
    J = jacobian(f, c, X)
    J[:, is_thr] = 0.0
    norms = np.sqrt((J ** 2).sum(axis=0))
    Jn = J / np.where(norms > 0, norms, 1.0)
    if len(Jn) < len(c):  # fewer rows than constants: pad so the SVD yields every direction
        Jn = np.vstack([Jn, np.zeros((len(c) - len(Jn), len(c)))])
    if len(c):
        _, s_full, vt = np.linalg.svd(Jn, full_matrices=False)  # thin: never an n_rows^2 matrix
    else:
        s_full, vt = np.zeros(0), np.zeros((0, 0))
    smax = float(s_full.max()) if len(c) else 0.0
    strong = s_full > sv_tol * smax if smax > 0 else np.zeros(len(c), bool)
    cov_n = (vt[strong].T / s_full[strong] ** 2) @ vt[strong] if strong.any() else np.zeros((len(c), len(c)))
    base = predict_rows(f, X, c)
    reports = []
    for j, name in enumerate(names):
        if is_thr[j]:
            moved = []
            for factor in (0.5, 2.0):
                cc = c.copy()
                cc[j] = c[j] * factor if c[j] != 0 else (factor - 1.0)
                moved.append(not np.array_equal(predict_rows(f, X, cc), base))
            reports.append(ConstantReport(name, float(c[j]), any(moved), True, 0.0, math.inf, []))
            continue
        others = [k for k in range(len(c)) if k != j and norms[k] > 0]
        if norms[j] == 0:
            indep, beta = 0.0, np.zeros(len(others))
        elif others:
            beta, *_ = np.linalg.lstsq(Jn[:, others], Jn[:, j], rcond=None)
            indep = float(np.linalg.norm(Jn[:, j] - Jn[:, others] @ beta))
        else:
            indep, beta = 1.0, np.zeros(0)
        pinned = indep > sv_tol
        if pinned:
            se = NOISE * math.sqrt(max(cov_n[j, j], 0.0)) / norms[j]
            rel_se = se / abs(c[j]) if c[j] != 0 else math.inf
        else:
            rel_se = math.inf
        partners = [] if pinned else [names[k] for k, bk in zip(others, beta) if abs(bk) > 1e-3]
        reports.append(ConstantReport(name, float(c[j]), pinned, False, indep, float(rel_se), partners))
    rank = int(strong.sum())  # threshold columns are zero: never counted
    return Identifiability(rank, len(c) - int(is_thr.sum()), [float(x) for x in s_full], reports)


def program_identifiability(program: Program, consts, X: np.ndarray, **kw) -> Identifiability:
    """`identifiability` with the program's constant names and its threshold constants."""
    return identifiability(program.compiled(), consts, X, program.const_names,
                           thresholds=threshold_constants(program), **kw)


def threshold_constants(program: Program) -> list[str]:
    """Constants that appear in conditions (if / conditional expressions) and nowhere else."""
    in_test, elsewhere = set(), set()
    tests = [n.test for n in ast.walk(program.func) if isinstance(n, (ast.If, ast.IfExp))]
    test_ids = {id(x) for t in tests for x in ast.walk(t)}
    for n in ast.walk(program.func):
        if isinstance(n, ast.Name) and n.id in program.constants:
            (in_test if id(n) in test_ids else elsewhere).add(n.id)
    return sorted(in_test - elsewhere)
