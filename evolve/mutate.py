"""Offline mutation operator: structural edits of candidate programs on Python's `ast`.

The default proposal operator when no LLM is configured; it needs no network.

    m = OfflineMutator(caps=Caps(30, 3, 10), rng=random.Random(7))
    source, op = m.propose([parent_a, parent_b])         # operator drawn by OPERATOR_WEIGHTS
    source, op = m.propose([parent_a], kind="delete")     # or a fixed operator

Operators (parents are `Program`s or sources; parents[0] is the one mutated):
  point      swap an operator (+ <-> -, * <-> /), a function (max <-> min, sqrt/log/abs),
             a comparison (> <-> <), or a component leaf for another component
  insert     wrap a subexpression: e + C*x, C*e, max(e, C*x), min(e, C*x), e*(1 + C*x),
             e + C*pow(x, E), e + C*sqrt(x)   (x a component, C/E new named constants)
  delete     replace a subexpression by one of its children or by a constant, or remove
             an `if` keeping one branch
  regime     split on a threshold: `a if X > SPLIT_X else b` around a subexpression, or
             `if X > SPLIT_X:` before a tail of the body; the copied branch gets its
             own (renamed) constants as far as the constants cap allows
  constant   multiply some constant values by log-normal noise (structure unchanged)
  crossover  replace a subexpression of parents[0] by one of another parent (its locals
             inlined, its constants brought along under fresh names if they clash)

Every result passes `parse_program`, is within the caps, and (except `constant`) differs
structurally (canonical hash) from every parent. A failed attempt is retried with new
random choices (re-drawing the operator too when `kind` is None) up to `max_tries` times,
then the result falls back to a `constant` perturbation of parents[0]. Unused constants,
parameters and local assignments are dropped; parameters are the components read.
Deterministic for a given `random.Random` state: only that generator is used and nothing
iterates over sets.
"""
from __future__ import annotations

import ast
import copy
import math
import random
import re
from collections.abc import Sequence

from evaluator.components import COMPONENT_INDEX, COMPONENTS
from evaluator.objectives import Caps
from evaluator.units import units_violation
from evaluator.program import (ALLOWED_CALLS, FUNC_NAME, Program, ProgramError, call_name, collapse_conditional,
                               drop_dead_code, loaded_names, normalize_calls, parse_program, parse_source,
                               truncate_unreachable)

__all__ = ["OPERATORS", "OPERATOR_WEIGHTS", "MutationError", "OfflineMutator", "collapse_conditional"]

OPERATORS = ("point", "insert", "delete", "regime", "constant", "crossover")
OPERATOR_WEIGHTS = {
    "point": 0.24,
    "insert": 0.22,
    "delete": 0.16,
    "regime": 0.08,
    "constant": 0.07,
    "crossover": 0.23,
}

TIME_COMPONENTS = tuple(c for c in COMPONENTS if c.startswith("t_"))
COUNT_COMPONENTS = tuple(c for c in COMPONENTS if not c.startswith("t_"))
# Components a regime split tests, with plausible initial thresholds (fitted later).
SPLIT_THRESHOLDS: dict[str, tuple[float, ...]] = {
    "P": (0.0, 128.0, 512.0, 2048.0),
    "D": (0.0, 16.0, 64.0, 256.0),
    "B": (16.0, 64.0, 256.0),
    "K": (1e4, 1e5, 1e6),
    "n_prefill": (0.0, 1.0, 4.0),
    "n_decode": (0.0, 16.0, 64.0, 256.0),
    "t_prefill_gemm": (100.0, 1000.0, 10000.0),
    "t_decode_kv": (100.0, 1000.0, 10000.0),
    "t_weights": (1000.0, 10000.0),
}
SPLIT_WEIGHTS = {"P": 3, "D": 3, "B": 2, "K": 1, "n_prefill": 2, "n_decode": 1,
                 "t_prefill_gemm": 1, "t_decode_kv": 1, "t_weights": 1}
UNARY_FUNCS = ("sqrt", "log", "abs")  # exp only if already present: exp of microseconds overflows
BINOP_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
CMP_SWAP = {ast.Gt: ast.Lt, ast.Lt: ast.Gt, ast.GtE: ast.LtE, ast.LtE: ast.GtE}
HOLE = "__E__"
# name, template, [(constant placeholder, name prefix, initial value)], weight
INSERT_TEMPLATES = (
    ("add", "__E__ + {C} * {X}", (("C", "C_", 1.0),), 3),
    ("scale", "{C} * __E__", (("C", "SCALE", 1.0),), 2),
    ("max", "max(__E__, {C} * {X})", (("C", "C_", 1.0),), 2),
    ("min", "min(__E__, {C} * {X})", (("C", "C_", 1.0),), 1),
    ("factor", "__E__ * (1 + {C} * {X})", (("C", "S_", 0.001),), 2),
    ("pow", "__E__ + {C} * pow({X}, {E})", (("C", "C_", 1.0), ("E", "EXP_", 1.0)), 1),
    ("sqrt", "__E__ + {C} * sqrt({X})", (("C", "C_", 1.0),), 1),
)
RESERVED = frozenset(COMPONENTS) | frozenset(ALLOWED_CALLS) | {"math", FUNC_NAME, HOLE}


class MutationError(RuntimeError):
    """No valid offspring could be produced (only if a parent itself is over the caps)."""


class _Fail(Exception):
    """This attempt cannot be carried out; try another random choice."""


# ---------------------------------------------------------------- AST helpers

class _Slot:
    """A place holding an arithmetic expression: parent node, field, optional list index."""

    __slots__ = ("parent", "field", "index", "depth")

    def __init__(self, parent, field, index, depth):
        self.parent, self.field, self.index, self.depth = parent, field, index, depth

    def get(self) -> ast.expr:
        v = getattr(self.parent, self.field)
        return v if self.index is None else v[self.index]

    def set(self, node: ast.expr) -> None:
        if self.index is None:
            setattr(self.parent, self.field, node)
        else:
            getattr(self.parent, self.field)[self.index] = node


def _slots(func: ast.FunctionDef) -> list[_Slot]:
    """Every arithmetic-expression position in the body, depth-first in source order."""
    out: list[_Slot] = []

    def add(parent, field, index, depth):
        s = _Slot(parent, field, index, depth)
        out.append(s)
        expr(s.get(), depth)

    def stmts(block, depth):
        for st in block:
            if isinstance(st, (ast.Assign, ast.Return)) and st.value is not None:
                add(st, "value", None, depth)
            elif isinstance(st, ast.If):
                test(st.test, depth + 1)
                stmts(st.body, depth + 1)
                stmts(st.orelse, depth + 1)

    def test(node, depth):
        if isinstance(node, ast.Compare):
            add(node, "left", None, depth + 1)
            for i in range(len(node.comparators)):
                add(node, "comparators", i, depth + 1)
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                test(v, depth)
        elif isinstance(node, ast.UnaryOp):
            test(node.operand, depth)

    def expr(node, depth):
        if isinstance(node, ast.BinOp):
            add(node, "left", None, depth + 1)
            add(node, "right", None, depth + 1)
        elif isinstance(node, ast.UnaryOp):
            add(node, "operand", None, depth + 1)
        elif isinstance(node, ast.Call):
            for i in range(len(node.args)):
                add(node, "args", i, depth + 1)
        elif isinstance(node, ast.IfExp):
            test(node.test, depth + 1)
            add(node, "body", None, depth + 1)
            add(node, "orelse", None, depth + 1)

    stmts(func.body, 0)
    return out


def _children(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.Call):
        return list(node.args)
    if isinstance(node, ast.IfExp):
        return [node.body, node.orelse]
    return []


def _blocks(func: ast.FunctionDef) -> list[list[ast.stmt]]:
    """All statement lists of the function (body first, then nested, in source order)."""
    out = []

    def walk(block):
        out.append(block)
        for st in block:
            if isinstance(st, ast.If):
                walk(st.body)
                if st.orelse:
                    walk(st.orelse)

    walk(func.body)
    return out



def _rename(node: ast.AST, mapping: dict[str, str]) -> None:
    """Rename loaded names simultaneously (in place)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in mapping:
            n.id = mapping[n.id]


def _is_docstring(st: ast.stmt) -> bool:
    return isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str)


def _template(src: str, hole: ast.expr | None = None) -> ast.expr:
    node = parse_source(src, mode="eval").body
    if hole is None:
        return node
    if isinstance(node, ast.Name) and node.id == HOLE:
        return hole
    for parent in ast.walk(node):
        for field, value in ast.iter_fields(parent):
            if isinstance(value, ast.Name) and value.id == HOLE:
                setattr(parent, field, hole)
            elif isinstance(value, list):
                for i, v in enumerate(value):
                    if isinstance(v, ast.Name) and v.id == HOLE:
                        value[i] = hole
    return node


def _round(v: float) -> float:
    r = float(f"{v:.6g}")
    return r if math.isfinite(r) else v


# ---------------------------------------------------------------- working copy

class _Work:
    """A mutable copy of one program: ordered constants and the function AST."""

    def __init__(self, prog: Program):
        tree = parse_source(prog.source)
        self.consts: dict[str, float] = dict(prog.constants)
        self.func: ast.FunctionDef = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
        self.params = list(prog.params)
        normalize_calls(self.func)

    def taken(self) -> set[str]:
        names = set(self.consts) | RESERVED
        for n in ast.walk(self.func):
            if isinstance(n, ast.Name):
                names.add(n.id)
        return names

    def fresh(self, base: str) -> str:
        base = re.sub(r"[^A-Z0-9_]", "_", base.upper()).strip("_") or "C"
        if base[0].isdigit():
            base = "C_" + base
        taken = self.taken()
        if base not in taken:
            return base
        stem = re.sub(r"_\d+$", "", base) or "C"
        i = 2
        while f"{stem}_{i}" in taken:
            i += 1
        return f"{stem}_{i}"

    def new_const(self, base: str, value: float) -> str:
        name = self.fresh(base)
        self.consts[name] = float(value)
        return name

    def used_consts(self) -> list[str]:
        used = set(loaded_names(self.func))
        return [c for c in self.consts if c in used]

    def conditionals(self) -> int:
        return sum(isinstance(n, (ast.If, ast.IfExp)) for n in ast.walk(self.func))

    def render(self) -> str:
        truncate_unreachable(self.func.body)
        drop_dead_code(self.func)
        used = loaded_names(self.func)
        comps = [n for n in used if n in COMPONENT_INDEX]
        if not comps:
            raise _Fail("no component left")
        params = [p for p in self.params if p in comps]
        params += sorted((c for c in comps if c not in params), key=COMPONENT_INDEX.__getitem__)
        self.func.args = ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], vararg=None,
                                       kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
        self.func.decorator_list = []
        used_set = set(used)
        lines = [f"{n} = {float(v)!r}" for n, v in self.consts.items() if n in used_set]
        ast.fix_missing_locations(self.func)
        head = "\n".join(lines) + "\n\n\n" if lines else ""
        return head + ast.unparse(self.func) + "\n"


# ---------------------------------------------------------------- the operator

class OfflineMutator:
    """Random AST mutations of candidate programs; see the module docstring."""

    def __init__(self, caps: Caps = Caps(), rng: random.Random | None = None, max_tries: int = 20,
                 weights: dict[str, float] | None = None, sigma: float = 0.5):
        if not isinstance(caps, Caps):
            raise TypeError(f"caps must be an evaluator.objectives.Caps, not {type(caps).__name__}")
        self.caps = caps
        self.rng = rng if rng is not None else random.Random(0)
        self.max_tries = max_tries
        self.weights = dict(OPERATOR_WEIGHTS if weights is None else weights)
        self.sigma = sigma

    # ------------------------------------------------------------ public

    def propose(self, parents: Sequence[Program | str], kind: str | None = None) -> tuple[str, str]:
        """(new_source, operator_name); the source is valid and within the caps."""
        prog, op = self.propose_program(parents, kind)
        return prog.source, op

    def propose_program(self, parents: Sequence[Program | str], kind: str | None = None) -> tuple[Program, str]:
        """Like `propose` but returns the parsed Program."""
        progs = [p if isinstance(p, Program) else parse_program(p) for p in parents]
        if not progs:
            raise ValueError("propose needs at least one parent")
        if kind is not None and kind not in OPERATORS:
            raise ValueError(f"unknown operator {kind!r} (one of {', '.join(OPERATORS)})")
        parent_hashes = {p.hash for p in progs}
        for _ in range(self.max_tries):
            op = kind if kind is not None else self._pick_operator(progs)
            got = self._attempt(op, progs)
            if got is None:
                continue
            if op != "constant" and got.hash in parent_hashes:
                continue
            if units_violation(got) is not None:  # the judge would refuse it unfitted: draw again
                continue
            return got, op
        got = self._attempt("constant", progs)
        if got is not None:
            return got, "constant"
        # parents[0] itself is over the caps: delete until it fits
        cur = progs[0]
        for _ in range(10 * self.max_tries):
            nxt = self._attempt("delete", [cur], check_caps=False)
            if nxt is None:
                continue
            cur = nxt
            if cur.complexity.within(*self.caps.as_tuple()) is None:
                return cur, "delete"
        raise MutationError(f"no offspring within caps {self.caps} from a parent with {progs[0].complexity}")

    # ------------------------------------------------------------ internals

    def _pick_operator(self, progs: list[Program]) -> str:
        names, weights = [], []
        for op in OPERATORS:
            w = self.weights.get(op, 0.0)
            if op == "crossover" and len(progs) < 2:
                continue
            if op == "regime" and progs[0].complexity.conditionals >= self.caps.conditionals:
                continue
            if w > 0:
                names.append(op)
                weights.append(w)
        return self.rng.choices(names, weights)[0]

    def _attempt(self, op: str, progs: list[Program], check_caps: bool = True) -> Program | None:
        work = _Work(progs[0])
        try:
            getattr(self, "_op_" + op)(work, progs)
            src = work.render()
            prog = parse_program(src)
        except (_Fail, ProgramError):
            return None
        if check_caps and prog.complexity.within(*self.caps.as_tuple()) is not None:
            return None
        return prog

    def _component(self, like: str | None = None, exclude: str | None = None) -> str:
        rng = self.rng
        if like is not None and rng.random() < 0.7:
            pool = TIME_COMPONENTS if like in TIME_COMPONENTS else COUNT_COMPONENTS
        else:
            pool = COMPONENTS
        pool = [c for c in pool if c != exclude] or [c for c in COMPONENTS if c != exclude]
        return rng.choice(pool)

    def _split_test(self, work: _Work) -> ast.expr:
        names = list(SPLIT_WEIGHTS)
        comp = self.rng.choices(names, [SPLIT_WEIGHTS[n] for n in names])[0]
        thr = self.rng.choice(SPLIT_THRESHOLDS[comp])
        t = work.new_const("SPLIT_" + comp, thr)
        return ast.Compare(ast.Name(comp, ast.Load()), [ast.Gt()], [ast.Name(t, ast.Load())])

    # point ---------------------------------------------------------

    def _op_point(self, work: _Work, progs) -> None:
        rng = self.rng
        cats: dict[str, list[ast.AST]] = {"binop": [], "call": [], "leaf": [], "cmp": []}
        for n in ast.walk(work.func):
            if isinstance(n, ast.BinOp) and type(n.op) in BINOP_SWAP:
                cats["binop"].append(n)
            elif isinstance(n, ast.Call) and call_name(n) in ("max", "min", *UNARY_FUNCS, "exp"):
                cats["call"].append(n)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in COMPONENT_INDEX:
                cats["leaf"].append(n)
            elif isinstance(n, ast.Compare) and all(type(o) in CMP_SWAP for o in n.ops):
                cats["cmp"].append(n)
        avail = [c for c in ("binop", "call", "leaf", "cmp") if cats[c]]
        if not avail:
            raise _Fail("nothing to point-mutate")
        cat = rng.choice(avail)
        node = rng.choice(cats[cat])
        if cat == "binop":
            node.op = BINOP_SWAP[type(node.op)]()
        elif cat == "call":
            name = call_name(node)
            new = {"max": "min", "min": "max"}.get(name) or rng.choice([f for f in UNARY_FUNCS if f != name])
            node.func = ast.Name(new, ast.Load())
        elif cat == "leaf":
            node.id = self._component(like=node.id, exclude=node.id)
        else:
            node.ops = [CMP_SWAP[type(o)]() for o in node.ops]

    # insert --------------------------------------------------------

    def _op_insert(self, work: _Work, progs) -> None:
        rng = self.rng
        slots = _slots(work.func)
        if not slots:
            raise _Fail("no expression")
        slot = rng.choice(slots)
        _name, tmpl, consts, _w = rng.choices(INSERT_TEMPLATES, [t[3] for t in INSERT_TEMPLATES])[0]
        x = self._component()
        fill = {"X": x}
        for key, prefix, value in consts:
            base = prefix if prefix == "SCALE" else prefix + x
            fill[key] = work.new_const(base, value)
        slot.set(_template(tmpl.format(**fill), hole=slot.get()))

    # delete --------------------------------------------------------

    def _op_delete(self, work: _Work, progs) -> None:
        rng = self.rng
        compound = [s for s in _slots(work.func) if _children(s.get())]
        ifs = [(b, i) for b in _blocks(work.func) for i, st in enumerate(b) if isinstance(st, ast.If)]
        if not compound and not ifs:
            raise _Fail("nothing to delete")
        if ifs and (not compound or rng.random() < 0.25):
            block, i = rng.choice(ifs)
            st = block[i]
            keep = st.body if rng.random() < 0.5 else st.orelse
            block[i:i + 1] = keep
            return
        slot = rng.choice(compound)
        node = slot.get()
        if rng.random() < 0.15:
            inner = [c for c in loaded_names(node) if c in work.consts]
            name = rng.choice(inner) if inner else work.new_const("C", 1.0)
            slot.set(ast.Name(name, ast.Load()))
        else:
            slot.set(rng.choice(_children(node)))

    # regime --------------------------------------------------------

    def _rename_copy(self, work: _Work, node_or_stmts, budget: int) -> bool:
        """Give constants in the copy their own names, as many as `budget` allows."""
        holder = node_or_stmts if isinstance(node_or_stmts, ast.AST) else ast.Module(node_or_stmts, [])
        names = [n for n in loaded_names(holder) if n in work.consts]
        if not names or budget <= 0:
            return False
        if len(names) > budget:
            names = sorted(self.rng.sample(names, budget), key=names.index)
        mapping = {}
        for n in names:
            mapping[n] = work.new_const(n, work.consts[n])
        _rename(holder, mapping)
        return True

    def _op_regime(self, work: _Work, progs) -> None:
        rng = self.rng
        max_cond, max_consts = self.caps.conditionals, self.caps.constants
        if work.conditionals() >= max_cond:
            raise _Fail("conditionals at the cap")
        budget = max_consts - len(work.used_consts()) - 1  # one for the threshold
        if budget < 1:
            raise _Fail("no room for constants")
        body = work.func.body
        start = 1 if body and _is_docstring(body[0]) else 0
        if rng.random() < 0.4:
            n = len(body)
            k = n - 1 if rng.random() < 0.6 else rng.randrange(start, n)
            tail = copy.deepcopy(body[k:])
            test = self._split_test(work)
            if not self._rename_copy(work, tail, budget):
                raise _Fail("branch copy would be identical")
            body.insert(k, ast.If(test=test, body=tail, orelse=[]))
            return
        slots = [s for s in _slots(work.func) if not isinstance(s.get(), ast.Constant)]
        if not slots:
            raise _Fail("no expression")
        top = [s for s in slots if s.depth == 0]
        slot = rng.choice(top) if top and rng.random() < 0.5 else rng.choice(slots)
        orig = slot.get()
        dup = copy.deepcopy(orig)
        test = self._split_test(work)
        if not self._rename_copy(work, dup, budget):
            scale = work.new_const("SCALE", 1.0)
            dup = ast.BinOp(ast.Name(scale, ast.Load()), ast.Mult(), dup)
        slot.set(ast.IfExp(test=test, body=dup, orelse=orig))

    # constant ------------------------------------------------------

    def _op_constant(self, work: _Work, progs) -> None:
        rng = self.rng
        names = work.used_consts()
        if not names:
            return
        chosen = [n for n in names if rng.random() < 0.5] or [rng.choice(names)]
        for n in chosen:
            v = work.consts[n] * math.exp(rng.gauss(0.0, self.sigma))
            if math.isfinite(v):
                work.consts[n] = _round(v)

    # crossover -----------------------------------------------------

    def _op_crossover(self, work: _Work, progs) -> None:
        rng = self.rng
        donor_prog = rng.choice(progs[1:]) if len(progs) > 1 else progs[0]
        other = _Work(donor_prog)
        inline = _inlinable_locals(other.func)
        local_names = {t.id for n in ast.walk(other.func) if isinstance(n, ast.Assign)
                       for t in n.targets if isinstance(t, ast.Name)}
        donors = []
        for s in _slots(other.func):
            node = s.get()
            if isinstance(node, ast.Constant):
                continue
            names = loaded_names(node)
            if any(n in local_names and n not in inline for n in names):
                continue
            donors.append(node)
        if not donors:
            raise _Fail("no donor subtree")
        with_comp = [d for d in donors if any(n in COMPONENT_INDEX or n in inline for n in loaded_names(d))]
        pool = with_comp if with_comp and rng.random() < 0.85 else donors
        donor = _substitute(copy.deepcopy(rng.choice(pool)), inline)
        mapping = {}
        for n in loaded_names(donor):
            if n in other.consts:
                mapping[n] = work.new_const(n, other.consts[n])
        _rename(donor, mapping)
        slots = _slots(work.func)
        if not slots:
            raise _Fail("no target")
        rng.choice(slots).set(donor)


def _inlinable_locals(func: ast.FunctionDef) -> dict[str, ast.expr]:
    """Locals assigned exactly once at the top level: name -> expression with earlier ones inlined."""
    counts: dict[str, int] = {}
    for n in ast.walk(func):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    counts[t.id] = counts.get(t.id, 0) + 1
    out: dict[str, ast.expr] = {}
    for st in func.body:
        if isinstance(st, ast.Assign) and counts.get(st.targets[0].id) == 1:
            names = loaded_names(st.value)
            if all(n not in counts or n in out for n in names):
                out[st.targets[0].id] = _substitute(copy.deepcopy(st.value), out)
    return out


def _substitute(node: ast.expr, defs: dict[str, ast.expr]) -> ast.expr:
    """Replace loaded local names by (copies of) their defining expressions."""
    class Sub(ast.NodeTransformer):
        def visit_Name(self, n):
            if isinstance(n.ctx, ast.Load) and n.id in defs:
                return copy.deepcopy(defs[n.id])
            return n

    return Sub().visit(node)
