"""Compile a program's generated kernel source straight to LLVM IR: no numba typing or lowering.

Why: numba spent ~0.06-0.3 s of CPU per program and worker typing and lowering the tiny
`_kernel` (`evaluator.program.kernel_source`) and `_grad` (`evaluator.program_grad
.gradient_source`) functions, ~30% of a screen's CPU; this takes ~7-10 ms each. Those sources
use a closed subset of Python (float arithmetic, the whitelisted calls, comparisons,
and/or/not, if/else, conditional expressions, locals, `_x[k]`/`_c[k]` reads, `_g[k]` writes),
so this module writes the IR numba writes for them and hands it to numba's own code generator:
the same optimisation pipeline, target machine and JIT engine, so LLVM's rewrites (`x ** 0.5`
to a square root, `x ** 2.0` to x * x, literals folded) happen identically. The address handed
back has the C ABI compiled callers use for a first-class function (numba's wrapper-address
protocol, as `evaluator.native`).

Same values as numba: each operation is lowered as numba lowers it (numba/cpython/numbers.py,
builtins.py, mathimpl.py): + - * / are plain fadd/fsub/fmul/fdiv (numpy error model: no
division check), `-x` is `fsub -0.0, x`, `**` and `math.pow` are `llvm.pow`, `abs` is
`llvm.fabs`, `exp`/`log` are `llvm.exp`/`llvm.log`, `sqrt` is the C library's `sqrt`,
`max`/`min` fold left to right with `select(v > acc, v, acc)` (`<` for min) on ordered
comparisons, `!=` is unordered, the others ordered; `and`/`or`/chained comparisons
short-circuit; operators on literals are first folded as CPython folds them in the code object
numba reads. Every result that is a number is bit-identical (tests/test_llvm_program.py; once,
all 3,152 distinct programs of two recorded runs); a NaN is NaN under both, but its sign and
payload are the machine code's: an operation meeting two NaNs returns its first operand's, and
the register allocator commutes operands as the surrounding code suits, which no program can
observe. Anything else (an integer in arithmetic, an unknown call, a literal folding to a
complex number) raises `Unsupported` and `evaluator.program.compile_generated` compiles that
source with numba instead (counted in `FALLBACKS`; none among those 3,152 programs).

The ABI at the address: numba calls a first-class function pointer of LLVM type
`double (A, A[, A])`, A = the value type of `float64[::1]` in numba's data model (the struct
{meminfo, parent, nitems, itemsize, data, shape[1], strides[1]} passed by value, which the
backend splits into its seven scalars, in registers, then on the stack), exactly numba's cfunc
wrapper signature. Only `data` is read (contiguous arrays, constant indices, no bounds check:
as numba compiles them).

Selection: STEPEVOLVE_COMPILER=numba makes `Program.compiled()` and `compiled_gradient()` use
numba (the reference); the default, `llvm`, uses this module. Memory: ~275 kB per program
(numba ~940 kB), nearly all of it llvmlite's pass pipelines (three runs per function), never
returned; the engine keeps the code.
"""
from __future__ import annotations

import ast
import itertools
import operator
import os
from collections import Counter

import llvmlite.ir as ir
import numba
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target
from evaluator.native import AddressedFunction

__all__ = ["FALLBACKS", "LLVMFunction", "Unsupported", "compiler", "compile_source"]

_SERIAL = itertools.count()
FALLBACKS: Counter = Counter()  # programs compiled with numba because of an unsupported construct
DOUBLE = ir.DoubleType()
_ARRAYS = ("_x", "_c", "_g")
_BINOPS = {ast.Add: "fadd", ast.Sub: "fsub", ast.Mult: "fmul", ast.Div: "fdiv"}
_CMPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_INTRINSICS = {"exp": "llvm.exp", "log": "llvm.log", "abs": "llvm.fabs"}


class Unsupported(ValueError):
    """The source uses something this compiler does not lower exactly as numba does."""


def compiler() -> str:
    """'llvm' (default) or 'numba', from STEPEVOLVE_COMPILER."""
    name = os.environ.get("STEPEVOLVE_COMPILER", "llvm").strip().lower() or "llvm"
    if name not in ("llvm", "numba"):
        raise ValueError(f"STEPEVOLVE_COMPILER={name!r}: expected 'llvm' or 'numba'")
    return name


def _numba_parts():
    """numba's CPU target context and code generator (shared, created once by numba)."""
    ctx = cpu_target.target_context
    return ctx, ctx.codegen()


class _Lowerer:
    """One function: Python statements and expressions of the kernel subset -> IR."""

    def __init__(self, module: ir.Module, fn: ir.Function, arrays: dict[str, ir.Value]):
        self.module, self.fn, self.arrays = module, fn, arrays
        entry = fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(entry)
        self.b = ir.IRBuilder(fn.append_basic_block("body"))
        self.vars: dict[str, ir.AllocaInstr] = {}

    def finish(self) -> None:
        self.alloca_builder.branch(self.fn.basic_blocks[1])

    def _decl(self, name: str) -> ir.Function:
        if name.startswith("llvm."):
            return self.module.declare_intrinsic(name, [DOUBLE])  # overloaded on one type
        try:
            return self.module.get_global(name)
        except KeyError:  # the C library's sqrt, declared as numba's insert_pure_function does
            f = ir.Function(self.module, ir.FunctionType(DOUBLE, [DOUBLE]), name)
            f.attributes.add("readonly")
            f.attributes.add("nounwind")
            return f

    # -- statements -------------------------------------------------------------------------
    def block(self, stmts: list[ast.stmt]) -> None:
        for st in stmts:
            if self.b.block.is_terminated:
                raise Unsupported("unreachable statement")
            if isinstance(st, ast.Assign) and len(st.targets) == 1:
                value = self.expr(st.value)
                target = st.targets[0]
                if isinstance(target, ast.Name) and target.id not in _ARRAYS:
                    if target.id not in self.vars:
                        self.vars[target.id] = self.alloca_builder.alloca(DOUBLE, name=target.id)
                    self.b.store(value, self.vars[target.id])
                elif isinstance(target, ast.Subscript) and self._array(target) == "_g":
                    self.b.store(value, self._element(target))
                else:
                    raise Unsupported(f"assignment to {ast.unparse(target)}")
            elif isinstance(st, ast.Return) and st.value is not None:
                self.b.ret(self.expr(st.value))
            elif isinstance(st, ast.If):
                cond = self.test(st.test)
                then = self.fn.append_basic_block("then")
                other = self.fn.append_basic_block("else")
                after = None
                self.b.cbranch(cond, then, other)
                for blk, body in ((then, st.body), (other, st.orelse)):
                    self.b.position_at_end(blk)
                    self.block(body)
                    if not self.b.block.is_terminated:
                        after = after or self.fn.append_basic_block("endif")
                        self.b.branch(after)
                if after is not None:  # else both branches returned: nothing may follow
                    self.b.position_at_end(after)
            elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
                continue  # a docstring
            else:
                raise Unsupported(f"statement {type(st).__name__}")

    # -- values -----------------------------------------------------------------------------
    def _array(self, node: ast.Subscript) -> str:
        if (isinstance(node.value, ast.Name) and node.value.id in self.arrays
                and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int
                and node.slice.value >= 0):
            return node.value.id
        raise Unsupported(f"subscript {ast.unparse(node)}")

    def _element(self, node: ast.Subscript) -> ir.Value:
        data = self.arrays[self._array(node)]
        return self.b.gep(data, [ir.Constant(ir.IntType(64), node.slice.value)])

    def expr(self, node: ast.AST) -> ir.Value:
        b = self.b
        if isinstance(node, ast.Constant) and type(node.value) is float:
            return ir.Constant(DOUBLE, node.value)
        if isinstance(node, ast.Name) and node.id in self.vars:
            return b.load(self.vars[node.id])
        if isinstance(node, ast.Subscript):
            return b.load(self._element(node))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return getattr(b, _BINOPS[type(node.op)])(self.expr(node.left), self.expr(node.right))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            return b.call(self._decl("llvm.pow"), [self.expr(node.left), self.expr(node.right)])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return b.fsub(ir.Constant(DOUBLE, -0.0), self.expr(node.operand))  # numba's negate_real
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            return self.expr(node.operand)
        if isinstance(node, ast.IfExp):
            return self._branches(node.test, lambda: self.expr(node.body), lambda: self.expr(node.orelse))
        if isinstance(node, ast.Call) and not node.keywords:
            return self.call(node)
        raise Unsupported(f"expression {ast.unparse(node)}")

    def call(self, node: ast.Call) -> ir.Value:
        f = node.func
        if isinstance(f, ast.Name) and f.id in ("max", "min") and len(node.args) >= 2:
            acc = self.expr(node.args[0])
            for a in node.args[1:]:  # numba's do_minmax: Python's left-to-right algorithm
                v = self.expr(a)
                acc = self.b.select(self.b.fcmp_ordered(">" if f.id == "max" else "<", v, acc), v, acc)
            return acc
        if isinstance(f, ast.Name) and f.id == "abs":
            name = "abs"
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "math":
            name = f.attr
        else:
            raise Unsupported(f"call {ast.unparse(node)}")
        args = [self.expr(a) for a in node.args]
        if name == "pow" and len(args) == 2:
            return self.b.call(self._decl("llvm.pow"), args)
        if name == "sqrt" and len(args) == 1:
            return self.b.call(self._decl("sqrt"), args)
        if name in _INTRINSICS and len(args) == 1:
            return self.b.call(self._decl(_INTRINSICS[name]), args)
        raise Unsupported(f"call {ast.unparse(node)}")

    # -- conditions (i1) --------------------------------------------------------------------
    def test(self, node: ast.AST) -> ir.Value:
        if isinstance(node, ast.Compare):
            left = self.expr(node.left)
            return self._chain(left, list(zip(node.ops, node.comparators)))
        if isinstance(node, ast.BoolOp):
            is_and = isinstance(node.op, ast.And)

            def rest(values):
                first = self.test(values[0])
                if len(values) == 1:
                    return first
                # a and b: b only when a holds; a or b: b only when a fails
                more = lambda: rest(values[1:])  # noqa: E731
                stop = lambda: first  # noqa: E731
                return self._select_branch(first, more, stop) if is_and else self._select_branch(first, stop, more)

            return rest(node.values)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self.b.not_(self.test(node.operand))
        raise Unsupported(f"condition {ast.unparse(node)}")

    def _compare(self, op: ast.cmpop, a: ir.Value, c: ir.Value) -> ir.Value:
        if type(op) not in _CMPS:
            raise Unsupported(f"comparison {type(op).__name__}")
        sym = _CMPS[type(op)]
        return self.b.fcmp_unordered(sym, a, c) if sym == "!=" else self.b.fcmp_ordered(sym, a, c)

    def _chain(self, left: ir.Value, pairs: list) -> ir.Value:
        op, comp = pairs[0]
        right = self.expr(comp)
        res = self._compare(op, left, right)
        if len(pairs) == 1:
            return res
        return self._select_branch(res, lambda: self._chain(right, pairs[1:]), lambda: res)

    def _select_branch(self, cond: ir.Value, when_true, when_false) -> ir.Value:
        """The value of when_true() if cond else when_false(), each computed in its own block."""
        return self._branches(None, when_true, when_false, cond=cond)

    def _branches(self, test, body, orelse, cond=None) -> ir.Value:
        cond = self.test(test) if cond is None else cond
        then = self.fn.append_basic_block("ifexp.then")
        other = self.fn.append_basic_block("ifexp.else")
        after = self.fn.append_basic_block("ifexp.end")
        self.b.cbranch(cond, then, other)
        incoming = []
        for blk, make in ((then, body), (other, orelse)):
            self.b.position_at_end(blk)
            v = make()
            incoming.append((v, self.b.block))
            self.b.branch(after)
        self.b.position_at_end(after)
        phi = self.b.phi(incoming[0][0].type)
        for v, blk in incoming:
            phi.add_incoming(v, blk)
        return phi


class _FoldConstants(ast.NodeTransformer):
    """CPython's own folding of operators on literals (Python/ast_opt.c: fold_binop, fold_unaryop,
    children first), which numba sees in the code object it compiles: folded with Python's
    operators, left alone where they raise (1.0 / 0.0, 0.0 ** -1.0, 10.0 ** 400.0)."""

    _OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
            ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}

    def _fold(self, node, op, *values):
        if type(op) not in self._OPS or not all(isinstance(v, ast.Constant) for v in values):
            return node
        try:
            result = self._OPS[type(op)](*(v.value for v in values))
        except Exception:  # noqa: BLE001 - CPython keeps the expression on any error
            return node
        if type(result) is not float:  # (-8.0) ** (1 / 3) is complex: numba cannot type it
            raise Unsupported(f"{ast.unparse(node)} folds to {result!r}")
        return ast.copy_location(ast.Constant(result), node)

    def visit_BinOp(self, node):
        self.generic_visit(node)
        return self._fold(node, node.op, node.left, node.right)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        return self._fold(node, node.op, node.operand)


def emit_module(source: str, name: str, parse=ast.parse) -> tuple[ir.Module, str]:
    """IR module for the function `name` (args `_x`, `_c`[, `_g`]) in generated source, and the
    symbol to look up. `parse`: ast.parse or a caller's locked variant."""
    try:
        return _emit(_FoldConstants().visit(parse(source)), name)
    except RecursionError:  # nested deeper than the lowering's recursion allows (numba has no limit)
        raise Unsupported("nested too deeply") from None


def _emit(tree: ast.Module, name: str) -> tuple[ir.Module, str]:
    ctx, codegen = _numba_parts()
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if len(tree.body) != 1 or len(funcs) != 1 or funcs[0].name != name:
        raise Unsupported(f"expected exactly `def {name}(...)`")
    func = funcs[0]
    params = [a.arg for a in func.args.args]
    if params != list(_ARRAYS[:len(params)]) or len(params) < 2:
        raise Unsupported(f"parameters {params}")
    array_type = ctx.get_value_type(numba.float64[::1])
    module = codegen._create_empty_module(f"stepevolve_{name}")
    symbol = f"stepevolve.{name}.{next(_SERIAL)}"  # unique in the process: the engine keeps every module
    fn = ir.Function(module, ir.FunctionType(DOUBLE, [array_type] * len(params)), symbol)
    low = _Lowerer(module, fn, {})
    for p, arg in zip(params, fn.args):
        arg.name = p
        low.arrays[p] = low.alloca_builder.extract_value(arg, 4, name=f"{p}.data")
    low.block(func.body)
    if not low.b.block.is_terminated:
        raise Unsupported("a path does not return")
    low.finish()
    return module, symbol


def compile_source(source: str, name: str, parse=ast.parse):
    """(address, keep-alive object) of the compiled function `name` in generated source."""
    module, symbol = emit_module(source, name, parse)
    _, codegen = _numba_parts()
    with global_compiler_lock:
        library = codegen.create_library(symbol)
        library.add_ir_module(module)
        library.finalize()
        address = library.get_pointer_to_function(symbol)
    if not address:
        raise RuntimeError(f"no code for {symbol}")
    return address, library


class LLVMFunction(AddressedFunction):
    """A kernel compiled here, as compiled callers take it (numba's wrapper-address protocol, as
    `evaluator.native.NativeFunction`); pickled as its source, compiled again where unpickled.
    `reference(source, name, ftype)`: numba's compilation of the same source (`dispatcher`);
    `parse`: how to parse the source (ast.parse, or the caller's thread-safe variant)."""

    __slots__ = ("source", "name", "ftype", "python_call", "reference", "parse", "_address", "_library",
                 "_dispatcher")

    def __init__(self, source: str, name: str, ftype, python_call=None, reference=None, parse=ast.parse):
        self.source, self.name, self.ftype = source, name, ftype
        self.python_call, self.reference, self.parse = python_call, reference, parse
        self._address, self._library = compile_source(source, name, parse)
        self._dispatcher = None

    @property
    def dispatcher(self):
        """numba's compilation of the same source (the reference), made on first use."""
        if self._dispatcher is None:
            if self.reference is None:
                raise TypeError("no reference compiler given")
            self._dispatcher = self.reference(self.source, self.name, self.ftype)
        return self._dispatcher

    def __reduce__(self):
        return LLVMFunction, (self.source, self.name, self.ftype, self.python_call, self.reference, self.parse)
