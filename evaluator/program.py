"""Candidate programs: parse, validate (AST whitelist), measure, canonicalize, compile.

A program is untrusted Python source of this shape:

    OVERHEAD = 15000.0          # named constants, fitted per model by the framework
    SCALE = 1.0

    def predict_step_time(t_weights, t_decode_gemm, B):
        return OVERHEAD + SCALE * max(t_weights, t_decode_gemm)

Nothing in it runs before `parse_program` has checked every AST node against the
whitelist below. Only then is it turned into a function of (x, c): the component
vector and the constant vector, so refitting constants never recompiles anything.

Complexity rule (documented contract, also used by the Go emitter's cap):
  operations   = binary ops + unary ops + comparison operators + (boolean operands - 1)
                 + calls
  conditionals = `if` statements + conditional expressions
  constants    = named constants declared at module level
  complexity   = operations + conditionals + constants
"""
from __future__ import annotations

import ast
import hashlib
import math
import threading
from dataclasses import dataclass, field

import numba
import numpy as np

from evaluator.components import COMPONENT_INDEX, COMPONENTS, PREDICTOR_SIGNATURE, PREDICTOR_TYPE
from evaluator.llvm_program import FALLBACKS, LLVMFunction, Unsupported
from evaluator.llvm_program import compiler as selected_compiler
from evaluator.native import NativeFunction
from evaluator.units import units_violation

FUNC_NAME = "predict_step_time"
ALLOWED_CALLS = {"max", "min", "abs", "sqrt", "log", "exp", "pow"}
MATH_CALLS = {"sqrt", "log", "exp", "pow"}
BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)
UNARYOPS = (ast.USub, ast.UAdd, ast.Not)
CMPOPS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
MAX_SOURCE_CHARS = 20_000
MAX_NODES = 2_000

SIGNATURE = PREDICTOR_SIGNATURE
__all__ = ["PREDICTOR_TYPE", "SIGNATURE", "Program", "ProgramError", "parse_program"]


_AST_LOCK = threading.RLock()


def parse_source(source: str, mode: str = "exec") -> ast.AST:
    """ast.parse under a process-wide lock. CPython 3.11 keeps the AST validator's recursion
    depth in shared state, so parses racing in threads (the LLM operator builds prompts in a
    thread while the loop parses candidates) fail with "AST constructor recursion depth
    mismatch"."""
    with _AST_LOCK:
        return ast.parse(source, mode=mode)


class ProgramError(ValueError):
    """A program was rejected; the message says which rule and where."""


@dataclass(frozen=True)
class Complexity:
    operations: int
    conditionals: int
    constants: int

    @property
    def total(self) -> int:
        return self.operations + self.conditionals + self.constants

    def within(self, max_ops: int = 30, max_cond: int = 3, max_consts: int = 10) -> str | None:
        """None if within the cap, else the reason."""
        if self.operations > max_ops:
            return f"{self.operations} operations > cap {max_ops}"
        if self.conditionals > max_cond:
            return f"{self.conditionals} conditionals > cap {max_cond}"
        if self.constants > max_consts:
            return f"{self.constants} constants > cap {max_consts}"
        return None


@dataclass
class Program:
    source: str
    constants: dict[str, float]  # declaration order = order of the constant vector
    params: list[str]  # components the function reads
    func: ast.FunctionDef
    complexity: Complexity
    hash: str = ""
    _py: object = field(default=None, repr=False)
    _jit: object = field(default=None, repr=False)
    _grad: object = field(default=None, repr=False)  # evaluator.program_grad.compiled_gradient
    _units: tuple | None = field(default=None, repr=False)  # (units_violation(),) once asked

    @property
    def const_names(self) -> list[str]:
        return list(self.constants)

    @property
    def initial_constants(self) -> np.ndarray:
        return np.array(list(self.constants.values()), dtype=np.float64)

    def components_used(self) -> list[str]:
        return sorted(self.params, key=COMPONENT_INDEX.__getitem__)

    def python_function(self):
        """Plain-Python f(x, c) (for parity checks and tiny inputs)."""
        if self._py is None:
            self._py = _exec_kernel(self, use_math_module=True)
        return self._py

    def compiled(self) -> NativeFunction | LLVMFunction:
        """Compiled f(x, c) with the fixed signature the evaluator expects, as compiled callers
        take it (`evaluator.native`); callable from Python too (`call_predictor`). Compiled by
        `evaluator.llvm_program` (numba with STEPEVOLVE_COMPILER=numba: `compile_generated`)."""
        if self._jit is None:
            self._jit = compile_generated(kernel_source(self), "_kernel", PREDICTOR_TYPE, call_predictor,
                                          label=f"<program {self.hash}>")
        return self._jit

    def units_violation(self) -> str | None:
        """`evaluator.units.units_violation`, worked out once: a screen and each of its split
        jobs ask again (~1% of a full job's CPU before, issue 31)."""
        if self._units is None:
            self._units = (units_violation(self),)
        return self._units[0]

    def with_constants(self, values) -> str:
        """The source with constant values replaced (e.g. fitted ones), same structure."""
        tree = parse_source(self.source)
        vals = dict(zip(self.const_names, [float(v) for v in values]))
        for node in tree.body:
            if isinstance(node, ast.Assign) and node.targets[0].id in vals:
                node.value = ast.Constant(vals[node.targets[0].id])
        return ast.unparse(tree) + "\n"


@numba.njit((PREDICTOR_TYPE, numba.float64[::1], numba.float64[::1]), cache=True, error_model="numpy")
def _call_compiled(f, x, c):
    return f(x, c)


def compile_generated(source: str, name: str, ftype, python_call=None, compiler: str | None = None,
                      label: str = "<generated>") -> NativeFunction | LLVMFunction:
    """The function `name` of generated source (`kernel_source`, `gradient_source`) compiled
    for compiled callers with first-class type `ftype`: by `evaluator.llvm_program` (~7-10 ms
    CPU), or by numba (~0.06-0.3 s; the reference) when `compiler` or STEPEVOLVE_COMPILER says
    'numba' or the source has a construct llvm_program does not lower (counted in
    `llvm_program.FALLBACKS`). Both give the same values (bit for bit; a NaN's payload aside)."""
    if (compiler or selected_compiler()) == "llvm":
        try:
            return LLVMFunction(source, name, ftype, python_call, reference=numba_dispatcher, parse=parse_source)
        except Unsupported:
            FALLBACKS[name] += 1
    return NativeFunction(numba_dispatcher(source, name, ftype, label), ftype, python_call)


def numba_dispatcher(source: str, name: str, ftype, label: str = "<generated>"):
    """numba's compilation of `name` in generated source, without a CPython wrapper (~35 ms
    less per compilation; a call from Python goes through `python_call`)."""
    fn = define_function(source, label, name)
    return numba.njit(ftype.signature, error_model="numpy", fastmath=False, no_cpython_wrapper=True)(fn)


def call_predictor(f, x, c) -> float:
    """f(x, c) from Python for a compiled program (`Program.compiled()`, which has no CPython
    wrapper of its own): one call of the same compiled code, through a compiled caller."""
    return _call_compiled(f, np.ascontiguousarray(x, dtype=np.float64), np.ascontiguousarray(c, dtype=np.float64))


# ---------------------------------------------------------------- validation

def _numeric_literal(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        try:
            return float(node.value)
        except OverflowError:
            return None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _numeric_literal(node.operand)
        if v is not None:
            return -v if isinstance(node.op, ast.USub) else v
    return None


def _check_name(name: str, where: ast.AST) -> None:
    if name.startswith("_"):
        raise ProgramError(f"line {getattr(where, 'lineno', '?')}: names may not start with '_' ({name!r})")


class _Validator:
    """Walks the function body; rejects anything outside the whitelist; counts complexity."""

    def __init__(self, params: set[str], constants: set[str]):
        self.params = params
        self.constants = constants
        self.locals: set[str] = set()
        self.ops = 0
        self.conds = 0
        self.nodes = 0

    def fail(self, node: ast.AST, msg: str) -> None:
        raise ProgramError(f"line {getattr(node, 'lineno', '?')}: {msg}")

    def block(self, stmts: list[ast.stmt], must_return: bool) -> None:
        if not stmts:
            self.fail(ast.Pass(), "empty block")
        for i, st in enumerate(stmts):
            self.stmt(st)
            if self._returns(st) and i != len(stmts) - 1:
                self.fail(stmts[i + 1], "unreachable code after return")
        if must_return and not self._returns(stmts[-1]):
            self.fail(stmts[-1], "every path must end in a return")

    def _returns(self, st: ast.stmt) -> bool:
        if isinstance(st, ast.Return):
            return True
        if isinstance(st, ast.If):
            return bool(st.orelse) and self._returns(st.body[-1]) and self._returns(st.orelse[-1])
        return False

    def stmt(self, st: ast.stmt) -> None:
        self.nodes += 1
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
            return  # docstring
        if isinstance(st, ast.Assign):
            if len(st.targets) != 1 or not isinstance(st.targets[0], ast.Name):
                self.fail(st, "only simple assignments to one local name are allowed")
            name = st.targets[0].id
            _check_name(name, st)
            if name in self.params or name in self.constants or name in ALLOWED_CALLS or name == "math":
                self.fail(st, f"cannot assign to {name!r} (component, constant or builtin)")
            self.expr(st.value)
            self.locals.add(name)
            return
        if isinstance(st, ast.Return):
            if st.value is None:
                self.fail(st, "return needs a value")
            self.expr(st.value)
            return
        if isinstance(st, ast.If):
            self.conds += 1
            self.test(st.test)
            self.block(st.body, must_return=False)
            if st.orelse:
                self.block(st.orelse, must_return=False)
            return
        self.fail(st, f"statement {type(st).__name__} is not allowed")

    def test(self, node: ast.AST) -> None:
        """Boolean context: comparisons, and/or/not over comparisons."""
        self.nodes += 1
        if isinstance(node, ast.Compare):
            for op in node.ops:
                if not isinstance(op, CMPOPS):
                    self.fail(node, f"comparison {type(op).__name__} is not allowed")
            self.ops += len(node.ops)
            self.expr(node.left)
            for c in node.comparators:
                self.expr(c)
            return
        if isinstance(node, ast.BoolOp):
            self.ops += len(node.values) - 1
            for v in node.values:
                self.test(v)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self.ops += 1
            self.test(node.operand)
            return
        self.fail(node, "a condition must be a comparison (optionally combined with and/or/not)")

    def expr(self, node: ast.AST) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.fail(node, f"program too large (> {MAX_NODES} nodes)")
        if isinstance(node, ast.Constant):
            if type(node.value) not in (int, float):
                self.fail(node, f"literal {node.value!r} is not a number")
            try:
                finite = math.isfinite(float(node.value))
            except OverflowError:
                finite = False
            if not finite:
                self.fail(node, "non-finite literal")
            return
        if isinstance(node, ast.Name):
            if node.id not in self.params and node.id not in self.constants and node.id not in self.locals:
                if node.id in COMPONENT_INDEX:
                    self.fail(node, f"component {node.id!r} is used but not a parameter of {FUNC_NAME}")
                self.fail(node, f"unknown name {node.id!r}")
            return
        if isinstance(node, ast.BinOp):
            if not isinstance(node.op, BINOPS):
                self.fail(node, f"operator {type(node.op).__name__} is not allowed")
            self.ops += 1
            self.expr(node.left)
            self.expr(node.right)
            return
        if isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.USub, ast.UAdd)):
                self.fail(node, f"unary {type(node.op).__name__} is not allowed in arithmetic")
            self.ops += 1
            self.expr(node.operand)
            return
        if isinstance(node, ast.IfExp):
            self.conds += 1
            self.test(node.test)
            self.expr(node.body)
            self.expr(node.orelse)
            return
        if isinstance(node, ast.Call):
            fname = call_name(node)
            if fname is None:
                self.fail(node, "only max, min, abs, sqrt, log, exp, pow (or math.X of those) may be called")
            if node.keywords:
                self.fail(node, "keyword arguments are not allowed")
            n = len(node.args)
            if fname in ("max", "min") and n < 2:
                self.fail(node, f"{fname} needs at least 2 arguments")
            if fname in ("abs", "sqrt", "log", "exp") and n != 1:
                self.fail(node, f"{fname} takes exactly 1 argument")
            if fname == "pow" and n != 2:
                self.fail(node, "pow takes exactly 2 arguments")
            self.ops += 1
            for a in node.args:
                if isinstance(a, ast.Starred):
                    self.fail(node, "starred arguments are not allowed")
                self.expr(a)
            return
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            self.fail(node, "comparisons are only allowed as conditions of if / conditional expressions")
        self.fail(node, f"expression {type(node).__name__} is not allowed")


def call_name(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Name) and f.id in ALLOWED_CALLS:
        return f.id
    if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "math"
            and f.attr in MATH_CALLS | {"fabs"}):
        return "abs" if f.attr == "fabs" else f.attr
    return None


def parse_program(source: str) -> Program:
    """Validate untrusted source and return a Program; raises ProgramError with the reason.

    Any other exception on hostile input (RecursionError on deep expressions, TypeError or
    MemoryError from odd nodes) becomes a ProgramError too: one reply must never end a run."""
    try:
        return _parse_program(source)
    except ProgramError:
        raise
    except RecursionError:
        raise ProgramError("program nested too deeply to validate") from None
    except Exception as e:  # noqa: BLE001 - untrusted input: every failure is a rejection
        raise ProgramError(f"program cannot be validated ({type(e).__name__}: {e})"[:300]) from None


def _parse_program(source: str) -> Program:
    if not isinstance(source, str) or not source.strip():
        raise ProgramError("empty program")
    if len(source) > MAX_SOURCE_CHARS:
        raise ProgramError(f"program longer than {MAX_SOURCE_CHARS} characters")
    try:
        tree = parse_source(source)
    except SyntaxError as e:
        raise ProgramError(f"syntax error: {e.msg} (line {e.lineno})") from None
    constants: dict[str, float] = {}
    func: ast.FunctionDef | None = None
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, ast.Assign):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                raise ProgramError(f"line {node.lineno}: module level allows only `NAME = number` constants")
            name = node.targets[0].id
            _check_name(name, node)
            val = _numeric_literal(node.value)
            if val is None or not math.isfinite(val):
                raise ProgramError(f"line {node.lineno}: constant {name!r} must be a finite number literal")
            if name in COMPONENT_INDEX or name in ALLOWED_CALLS or name in ("math", FUNC_NAME):
                raise ProgramError(f"line {node.lineno}: constant name {name!r} is reserved")
            if name in constants:
                raise ProgramError(f"line {node.lineno}: constant {name!r} declared twice")
            constants[name] = val
            continue
        if isinstance(node, ast.FunctionDef):
            if node.name != FUNC_NAME:
                raise ProgramError(f"line {node.lineno}: only `def {FUNC_NAME}(...)` may be defined")
            if func is not None:
                raise ProgramError(f"line {node.lineno}: {FUNC_NAME} defined twice")
            func = node
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names]
            if isinstance(node, ast.Import) and names == ["math"]:
                continue  # harmless; math.X calls are whitelisted
            raise ProgramError(f"line {node.lineno}: imports are not allowed")
        raise ProgramError(f"line {node.lineno}: {type(node).__name__} is not allowed at module level")
    if func is None:
        raise ProgramError(f"no `def {FUNC_NAME}(...)` found")
    a = func.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults or a.kw_defaults:
        raise ProgramError(f"{FUNC_NAME} takes plain positional component names only")
    if func.decorator_list or func.returns is not None or any(p.annotation is not None for p in a.args):
        raise ProgramError(f"{FUNC_NAME} may not have decorators or annotations")
    params = [p.arg for p in a.args]
    for p in params:
        if p not in COMPONENT_INDEX:
            raise ProgramError(f"parameter {p!r} is not a component (allowed: {', '.join(COMPONENTS)})")
        if p.startswith("_"):
            raise ProgramError(f"parameter {p!r} not allowed")
    if len(set(params)) != len(params):
        raise ProgramError("duplicate parameter")
    if not params:
        raise ProgramError(f"{FUNC_NAME} must read at least one component")
    v = _Validator(set(params), set(constants))
    v.block(func.body, must_return=True)
    # every local must be assigned before use on all paths: enforce simple rule — a local
    # may be read only after an assignment that appears earlier in source order.
    _check_definite_assignment(func)
    prog = Program(
        source=source,
        constants=constants,
        params=params,
        func=func,
        complexity=Complexity(v.ops, v.conds, len(constants)),
    )
    prog.hash = canonical_hash(prog)
    return prog


def _always_returns(stmts: list[ast.stmt]) -> bool:
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    return isinstance(last, ast.If) and bool(last.orelse) and _always_returns(last.body) \
        and _always_returns(last.orelse)


def _check_definite_assignment(func: ast.FunctionDef) -> None:
    params = {p.arg for p in func.args.args}

    def walk(stmts, defined: set[str]) -> set[str]:
        for st in stmts:
            if isinstance(st, (ast.Assign, ast.Return)):
                for n in ast.walk(st.value):
                    if isinstance(n, ast.Name) and n.id in LOCAL_CANDIDATES and n.id not in defined:
                        raise ProgramError(f"line {st.lineno}: {n.id!r} may be used before assignment")
                if isinstance(st, ast.Assign):
                    defined = defined | {st.targets[0].id}
            elif isinstance(st, ast.If):
                for n in ast.walk(st.test):
                    if isinstance(n, ast.Name) and n.id in LOCAL_CANDIDATES and n.id not in defined:
                        raise ProgramError(f"line {st.lineno}: {n.id!r} may be used before assignment")
                a = walk(st.body, defined)
                b = walk(st.orelse, defined) if st.orelse else defined
                # a branch that always returns does not reach the code after the if
                if _always_returns(st.body):
                    defined = b
                elif st.orelse and _always_returns(st.orelse):
                    defined = a
                else:
                    defined = a & b
        return defined

    LOCAL_CANDIDATES = {t.id for st in ast.walk(func) if isinstance(st, ast.Assign) for t in st.targets
                        if isinstance(t, ast.Name)} - params
    walk(func.body, set())


# ---------------------------------------------------------------- canonical form

def function_body(func: ast.FunctionDef) -> list[ast.stmt]:
    """The statements of `func` without docstrings (bare string expressions)."""
    return [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]


class _Canon(ast.NodeTransformer):
    def __init__(self, consts: list[str]):
        self.consts = set(consts)
        self.cmap: dict[str, str] = {}
        self.lmap: dict[str, str] = {}

    def visit_Name(self, node: ast.Name):
        if node.id in self.consts:
            self.cmap.setdefault(node.id, f"C{len(self.cmap)}")
            return ast.copy_location(ast.Name(self.cmap[node.id], node.ctx), node)
        if node.id in COMPONENT_INDEX:
            return node
        self.lmap.setdefault(node.id, f"v{len(self.lmap)}")
        return ast.copy_location(ast.Name(self.lmap[node.id], node.ctx), node)

    def visit_Constant(self, node: ast.Constant):
        if type(node.value) in (int, float):
            return ast.copy_location(ast.Constant(float(node.value)), node)
        return node

    def visit_Call(self, node: ast.Call):
        name = call_name(node)
        node.args = [self.visit(a) for a in node.args]
        node.func = ast.Name(name, ast.Load())
        return node


def canonical_source(prog: Program) -> str:
    """Structure only: constant values dropped, locals and constants renamed, math.X -> X."""
    func = parse_source(ast.unparse(prog.func)).body[0]
    func.body = function_body(func)
    canon = _Canon(prog.const_names)
    func = canon.visit(func)
    func.args.args = sorted(func.args.args, key=lambda a: COMPONENT_INDEX[a.arg])
    unused = [c for c in prog.const_names if c not in canon.cmap]
    return ast.unparse(func) + f"\n# unused constants: {len(unused)}"


def canonical_hash(prog: Program) -> str:
    return hashlib.sha256(canonical_source(prog).encode()).hexdigest()[:16]


# ---------------------------------------------------------------- compilation

def kernel_source(prog: Program, use_math_module: bool = True) -> str:
    """Python source of f(x, c) equivalent to the program (already validated)."""
    func = parse_source(ast.unparse(prog.func)).body[0]

    class Floatify(ast.NodeTransformer):
        def visit_Constant(self, node):
            if type(node.value) is int:
                return ast.copy_location(ast.Constant(float(node.value)), node)
            return node

        def visit_Call(self, node):
            self.generic_visit(node)
            name = call_name(node)
            if name in MATH_CALLS and use_math_module:
                node.func = ast.Attribute(ast.Name("math", ast.Load()), name, ast.Load())
            elif name == "abs":
                node.func = ast.Name("abs", ast.Load())
            return node

    func = Floatify().visit(func)
    lines = ["def _kernel(_x, _c):"]
    for p in prog.params:
        lines.append(f"    {p} = _x[{COMPONENT_INDEX[p]}]")
    for j, name in enumerate(prog.const_names):
        lines.append(f"    {name} = _c[{j}]")
    body = "\n".join(ast.unparse(s) for s in function_body(func))
    lines += ["    " + ln for ln in body.splitlines()]
    return "\n".join(lines) + "\n"


def _exec_kernel(prog: Program, use_math_module: bool):
    return define_function(kernel_source(prog, use_math_module), f"<program {prog.hash}>", "_kernel")


def define_function(src: str, filename: str, name: str):
    """The function `name` defined by generated source (from a validated program only), with
    nothing but math, max, min and abs in scope."""
    ns: dict = {"math": math, "__builtins__": {"max": max, "min": min, "abs": abs}}
    with _AST_LOCK:
        code = compile(src, filename, "exec")
    exec(code, ns)  # noqa: S102 - generated from a validated AST
    return ns[name]


def load_program(source: str) -> Program:
    """Alias kept for readability at call sites that load stored programs."""
    return parse_program(source)


# ---------------------------------------------------------------- branch collapse

def collapse_conditional(program: Program, index: int, keep_body: bool) -> Program | None:
    """The program with its `index`-th conditional (an `if` statement or an `a if c else b`,
    counted in ast.walk order) replaced by one branch; None if that leaves nothing valid.
    Unused constants and parameters disappear with the dropped branch.

    Lives here, next to the contract, because both the offline mutator (evolve) and the
    dead-branch simplification before Go emission (go_emit) need it."""
    tree = parse_source(program.source)
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    normalize_calls(func)
    conds = [n for n in ast.walk(func) if isinstance(n, (ast.If, ast.IfExp))]
    if not 0 <= index < len(conds):
        raise IndexError(f"program has {len(conds)} conditionals, no #{index}")
    target = conds[index]

    class _Collapse(ast.NodeTransformer):
        def visit_IfExp(self, node):
            if node is target:
                return self.visit(node.body if keep_body else node.orelse)
            return self.generic_visit(node)

        def visit_If(self, node):
            if node is target:
                return [self.visit(st) for st in (node.body if keep_body else node.orelse)]
            return self.generic_visit(node)

    _Collapse().visit(func)
    if not func.body:
        return None
    source = render_function(func, program.params, program.constants)
    if source is None:
        return None
    try:
        return parse_program(source)
    except ProgramError:
        return None


def render_function(func: ast.FunctionDef, params: list[str], constants: dict[str, float]) -> str | None:
    """Program source for an edited function AST: unreachable statements and dead locals
    dropped, parameters = the components read (earlier order kept, new ones in COMPONENTS
    order), only the constants still read. None if no component is read any more."""
    truncate_unreachable(func.body)
    drop_dead_code(func)
    used = loaded_names(func)
    comps = [n for n in used if n in COMPONENT_INDEX]
    if not comps:
        return None
    kept = [p for p in params if p in comps]
    kept += sorted((c for c in comps if c not in kept), key=COMPONENT_INDEX.__getitem__)
    func.args = ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in kept], vararg=None,
                              kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    func.decorator_list = []
    used_set = set(used)
    lines = [f"{n} = {float(v)!r}" for n, v in constants.items() if n in used_set]
    ast.fix_missing_locations(func)
    head = "\n".join(lines) + "\n\n\n" if lines else ""
    return head + ast.unparse(func) + "\n"


def loaded_names(node: ast.AST) -> list[str]:
    """Names read, without duplicates, in depth-first field order (deterministic)."""
    seen: dict[str, None] = {}
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            seen.setdefault(n.id, None)
        stack.extend(reversed(list(ast.iter_child_nodes(n))))
    return list(seen)


def normalize_calls(func: ast.FunctionDef) -> None:
    """math.sqrt(x) -> sqrt(x), math.fabs(x) -> abs(x)."""
    for n in ast.walk(func):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            name = call_name(n)
            if name is not None:
                n.func = ast.Name(name, ast.Load())


def _statement_returns(st: ast.stmt) -> bool:
    if isinstance(st, ast.Return):
        return True
    if isinstance(st, ast.If):
        return bool(st.body) and bool(st.orelse) and _statement_returns(st.body[-1]) \
            and _statement_returns(st.orelse[-1])
    return False


def truncate_unreachable(block: list[ast.stmt]) -> None:
    for i, st in enumerate(block):
        if isinstance(st, ast.If):
            truncate_unreachable(st.body)
            truncate_unreachable(st.orelse)
        if _statement_returns(st):
            del block[i + 1:]
            return


def drop_dead_code(func: ast.FunctionDef) -> None:
    """Remove assignments to locals nobody reads and `if`s containing only such assignments."""
    while True:
        loaded = set(loaded_names(func))
        changed = False

        def dead(st) -> bool:
            if isinstance(st, ast.Assign):
                return st.targets[0].id not in loaded
            if isinstance(st, ast.If):
                return all(dead(s) for s in st.body) and all(dead(s) for s in st.orelse)
            return False

        def prune(block: list[ast.stmt]) -> list[ast.stmt]:
            nonlocal changed
            kept = []
            for st in block:
                if dead(st):
                    continue
                if isinstance(st, ast.If):
                    st.body = prune(st.body)
                    if st.orelse:
                        st.orelse = prune(st.orelse)
                kept.append(st)
            if not kept and block:
                return block[:1]  # keep the block non-empty; still valid as before
            if len(kept) != len(block):
                changed = True
            return kept

        func.body = prune(func.body)
        if not changed:
            return
