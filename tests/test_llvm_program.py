"""evaluator.llvm_program against numba, bit for bit: every construct of the program language on
inputs that reach every edge (0, -0, tiny, huge, inf, NaN of both signs, ties), the value and
every derivative of the generated gradient, through compiled callers, a replay, pickling and a
second process."""
from __future__ import annotations

import ast
import dataclasses
import json
import pickle
import subprocess
import sys

import numpy as np
import pytest

from evaluator import llvm_program
from evaluator.components import GRAD_TYPE, N_COMPONENTS, PREDICTOR_TYPE
from evaluator.llvm_program import LLVMFunction, Unsupported
from evaluator.native import NativeFunction
from evaluator.program import call_predictor, compile_generated, kernel_source, parse_program
from evaluator.program_grad import gradient_source
from evaluator.step_scoring import predict_rows, predict_rows_grad
from seeds import seed_sources

SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 3.0, 1e-300, -1e-300, 5e-324, 2.2250738585072014e-308,
                     1e300, -1e300, 1.7976931348623157e308, np.inf, -np.inf, np.nan, -np.nan, 1e-5, 16.0, 4096.0,
                     15000.0, 1e6, 709.8, -745.2])


def input_rows(rng: np.random.Generator, n: int = 64) -> np.ndarray:
    """Rows of components: special values, realistic magnitudes, small integers (ties), mixtures."""
    special = rng.choice(SPECIALS, (n, N_COMPONENTS))
    realistic = np.exp(rng.normal(2.0, 5.0, (n, N_COMPONENTS)))
    ties = rng.choice(np.array([0.0, 1.0, 2.0, -1.0, 0.5]), (n, N_COMPONENTS))
    mixed = np.where(rng.random((n, N_COMPONENTS)) < 0.15, special, realistic)
    mixed = np.where(rng.random((n, N_COMPONENTS)) < 0.1, -mixed, mixed)
    return np.ascontiguousarray(np.vstack([special, realistic, ties, mixed]))


def constant_vectors(initial: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    k = initial.size
    vs = [initial, initial * (1 + 0.1 * rng.normal(size=k)), -initial, rng.choice(SPECIALS, k),
          rng.choice(SPECIALS, k), rng.choice(np.array([0.0, 1.0, 2.0, -1.0, 0.5]), k),
          np.exp(rng.normal(0.0, 8.0, k))]
    return [np.ascontiguousarray(v, dtype=np.float64) for v in vs]


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


def compare(prog, rng: np.random.Generator, n_rows: int = 64) -> tuple[list[str], int]:
    """Where the llvm and numba compilations of the program (its value, and its gradient's value
    and derivatives) differ: ([descriptions], number of results that are NaN in both with other
    payload bits). Bit for bit wherever numba's result is a number; NaN wherever it is NaN. A
    NaN's sign and payload are the machine code's: an operation meeting two NaNs returns its
    first operand's, and LLVM's register allocator commutes operands as the code around them
    suits (numba's own compilations of one expression differ so); no program reads them."""
    ks, gs = kernel_source(prog), gradient_source(prog)
    new_f, new_g = LLVMFunction(ks, "_kernel", PREDICTOR_TYPE, call_predictor), LLVMFunction(gs, "_grad", GRAD_TYPE)
    ref_f = compile_generated(ks, "_kernel", PREDICTOR_TYPE, call_predictor, compiler="numba")
    ref_g = compile_generated(gs, "_grad", GRAD_TYPE, compiler="numba")
    assert isinstance(ref_f, NativeFunction) and isinstance(ref_g, NativeFunction)
    X = input_rows(rng, n_rows)
    out, nan_payloads = [], 0
    for c in constant_vectors(prog.initial_constants, rng):
        pairs = [("value", predict_rows(ref_f, X, c), predict_rows(new_f, X, c))]
        (p0, J0), (p1, J1) = predict_rows_grad(ref_g, X, c), predict_rows_grad(new_g, X, c)
        pairs += [("grad value", p0, p1), ("derivatives", J0, J1)]
        for what, a, b in pairs:
            a, b = a.ravel(), b.ravel()
            differ = _bits(a) != _bits(b)
            both_nan = np.isnan(a) & np.isnan(b)
            nan_payloads += int((differ & both_nan).sum())
            bad = np.flatnonzero(differ & ~both_nan)
            if bad.size:
                i = bad[0]
                out.append(f"{what}: {bad.size} differ, e.g. numba {a[i]!r} llvm {b[i]!r} "
                           f"(row {X[i // max(1, a.size // X.shape[0])].tolist()}, c {c.tolist()})")
    return out, nan_payloads


def mismatches(prog, rng: np.random.Generator, n_rows: int = 64) -> list[str]:
    return compare(prog, rng, n_rows)[0]


EDGE_PROGRAMS = [
    # max/min: 2 and 3 arguments, NaN in any position, ties of 0.0 and -0.0
    """\
def predict_step_time(P, D, B):
    return max(P, D) + min(P, D) * 3.0 + max(P, D, B) - min(B, P, D)
""",
    """\
C = 1.0
def predict_step_time(P, D):
    return max(C, P) * min(D, C, P) + max(min(P, D), -P)
""",
    # abs, math.fabs, unary minus (of zeros and NaNs), unary plus
    """\
import math
def predict_step_time(P, D):
    return abs(P) - math.fabs(-D) + -P * +D - (-P)
""",
    """\
def predict_step_time(P):
    return -P
""",
    """\
def predict_step_time(P):
    return +(-(-P))
""",
    # ** and math.pow / pow: every exponent LLVM rewrites (0.5, -0.5, 1, -1, 2, 0, 3), bases 2 and 10,
    # integer-valued and negative exponents of negative bases, variable exponents
    """\
def predict_step_time(P, D):
    return P ** 0.5 + D ** 2 + P ** 1 + D ** -1 + P ** 0 + D ** 3 + P ** -0.5
""",
    """\
import math
def predict_step_time(P, D):
    return math.pow(P, 0.5) + pow(D, 2) + math.pow(P, -1.0) + pow(P, 3.0) + math.pow(D, 1.5) + pow(D, -2)
""",
    """\
def predict_step_time(P, D):
    return 2.0 ** P + 10.0 ** D + 2 ** -P + 0.5 ** D + (-8.0) ** P
""",
    """\
E = 2.5
F = -3.0
def predict_step_time(P, D):
    return P ** D + D ** P + P ** E + D ** F + pow(P, E) + math.pow(F, D)
""",
    """\
def predict_step_time(P, D):
    return (-P) ** 3.0 + (-D) ** 2.5 + P ** 0.25 + D ** 4 + P ** -2 + (P - D) ** 0.5
""",
    # sqrt/log/exp of everything, math. and bare names
    """\
import math
def predict_step_time(P, D, B):
    return math.sqrt(P) + sqrt(D) + math.log(B) + log(P) + math.exp(D) + exp(-B)
""",
    """\
def predict_step_time(P):
    return exp(log(P)) + log(exp(P)) + sqrt(P * P) + sqrt(P) * sqrt(P)
""",
    # literal-only subexpressions (folded at compile time by both compilers)
    """\
def predict_step_time(P):
    a = P + sqrt(-4.0) + log(-1.0) + log(0.0) + exp(710.0) + exp(-746.0) + 2.0 ** 0.5 + (-8.0) ** 3.0
    return a + 10.0 ** 400.0 + 0.0 ** -1.0 + 1.0 / 0.0 * 0.0 + 1e308 * 10.0 + sqrt(2.0) + exp(1.0) + log(10.0)
""",
    """\
def predict_step_time(P):
    return P * (0.0 / 0.0) + (-0.0) ** 0.5 + max(1.0, 2.0) + min(-0.0, 0.0) + abs(-0.0)
""",
    # NaN made by folding (CPython computes inf - inf on the machine: the x86 default NaN, sign set)
    """\
def predict_step_time(P):
    return P + (1e308 * 10.0 - 1e308 * 10.0)
""",
    """\
def predict_step_time(P):
    return (0.0 * (1e308 * 10.0)) * P
""",
    # division: by zero, zero by zero, of infinities
    """\
def predict_step_time(P, D):
    return P / D + 1.0 / P + D / (P - P) + (P - P) / (D - D)
""",
    # comparisons with NaN: every operator, chained, and/or/not, in conditions and conditional expressions
    """\
def predict_step_time(P, D, B):
    if P < D:
        return 1.0
    elif P <= D:
        return 2.0
    elif P > D:
        return 3.0
    elif P >= D:
        return 4.0
    elif P == D:
        return 5.0
    elif P != D:
        return 6.0
    return 7.0
""",
    """\
def predict_step_time(P, D, B):
    a = 1.0 if P < D < B else 2.0
    b = 3.0 if P == D != B else 4.0
    c = 5.0 if not P >= D else 6.0
    d = 7.0 if P < D and D < B or B != B else 8.0
    e = 9.0 if (P > 0 or D > 0) and not (B <= 0 and P != D) else 10.0
    return a + 10 * b + 100 * c + 1000 * d + 10000 * e
""",
    """\
def predict_step_time(P, D, B):
    if P > 0 and D > 0 and B > 0:
        return P
    if P < 0 or D < 0 or B < 0:
        return D
    if not P == P:
        return B
    return P + D + B
""",
    # locals reassigned across branches, nested conditionals, returns inside branches
    """\
C0 = 2.0
C1 = -1.5
def predict_step_time(P, D, B):
    a = P * C0
    if a > D:
        a = a - D
        if a > B:
            b = a ** C1
        else:
            b = a ** 2
    else:
        b = (D if D > B else B) + C1
    c = b if b > a else a
    return c * C0 + (a if c != a else -a)
""",
    """\
C = 3.0
def predict_step_time(P, D):
    if P > D:
        if P > C:
            return P * C
        else:
            return P
    else:
        x = D - P
    return x * C
""",
    # integer literals everywhere (floatified), a docstring, all operators of a step-time program
    """\
A = 15000
B0 = 2
def predict_step_time(P, D, t_weights, t_decode_kv):
    '''doc'''
    x = A + B0 * P - 3 * D / 4
    return max(x, t_weights + t_decode_kv) + 1 ** P + (P + 1) ** 2
""",
    # constants in every position of the gradient rules (kinks: max/min ties, abs at 0, pow, sqrt, log, exp)
    """\
C0 = 1.0
C1 = 0.5
C2 = 2.0
def predict_step_time(P, D):
    return max(C0 * P, C1 * D, C2) + min(C0, C1 * P) + abs(C0 - P) + sqrt(C1 * D) + log(C2 * P) + exp(C1 - D)
""",
    """\
C0 = 1.0
C1 = 0.5
C2 = 2.0
def predict_step_time(P, D):
    a = (C0 * P) ** C1 + pow(D, C2) + math.pow(C1, P) + C2 ** C0
    return a + (P / C0) ** 2 + (C1 - C2) ** 3.0 + D / C1 - C0 / (C2 - D)
""",
    """\
C0 = 1.0
C1 = -2.0
def predict_step_time(P, D):
    a = C0 * P if P > C1 else -C1 * D
    if a > D:
        b = a * C1
    else:
        b = a / C0
    return (b if b < a else a) + (C1 if a > 0 else C0) - -C0
""",
]


@pytest.fixture(scope="module")
def random_programs():
    from test_go_parity import collect_random_programs
    return collect_random_programs(120)


@pytest.mark.parametrize("i", range(len(EDGE_PROGRAMS)))
def test_edge_programs_bit_identical(i):
    prog = parse_program("import math\n" + EDGE_PROGRAMS[i])
    assert mismatches(prog, np.random.default_rng(i)) == []


@pytest.mark.parametrize("name", sorted(seed_sources()))
def test_seeds_bit_identical(name):
    assert mismatches(parse_program(seed_sources()[name]), np.random.default_rng(1)) == []


def test_random_programs_bit_identical(random_programs):
    assert len(random_programs) >= 80
    bad = {p.source: m for i, p in enumerate(random_programs) if (m := mismatches(p, np.random.default_rng(i), 32))}
    assert not bad, "\n\n".join(f"{s}{m}" for s, m in list(bad.items())[:5])


def test_default_compiler_and_switch(monkeypatch):
    src = seed_sources()["roofline"]
    monkeypatch.delenv("STEPEVOLVE_COMPILER", raising=False)
    assert isinstance(parse_program(src).compiled(), LLVMFunction)
    monkeypatch.setenv("STEPEVOLVE_COMPILER", "numba")
    p = parse_program(src)
    from evaluator.program_grad import compiled_gradient
    assert isinstance(p.compiled(), NativeFunction) and isinstance(compiled_gradient(p), NativeFunction)
    monkeypatch.setenv("STEPEVOLVE_COMPILER", "gcc")
    with pytest.raises(ValueError):
        parse_program(src).compiled()


def test_unlowered_source_falls_back_to_numba():
    """An integer in arithmetic (never in generated sources: they are floatified) is typed as an
    integer by numba (`x ** 2` is a multiplication chain there): not lowered, numba compiles it."""
    src = "def _kernel(_x, _c):\n    return _x[0] ** 2 + _c[0]\n"
    with pytest.raises(Unsupported):
        llvm_program.emit_module(src, "_kernel")
    before = llvm_program.FALLBACKS["_kernel"]
    f = compile_generated(src, "_kernel", PREDICTOR_TYPE, call_predictor)
    assert isinstance(f, NativeFunction) and llvm_program.FALLBACKS["_kernel"] == before + 1
    assert f(np.full(N_COMPONENTS, 3.0), np.array([1.0])) == 10.0


def test_deep_nesting_is_unsupported():
    """Source nested deeper than the lowering's recursion allows is left to numba (here the
    recursion limit is lowered; CPython's parser allows 200 nested parentheses)."""
    import inspect
    src = "def _kernel(_x, _c):\n    return " + "abs(" * 150 + "_x[0]" + ")" * 150 + " + 1.0\n"
    parsed = ast.parse(src)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 150)
    try:
        with pytest.raises(Unsupported):
            llvm_program.emit_module(src, "_kernel", parse=lambda _: parsed)
    finally:
        sys.setrecursionlimit(limit)


def test_literal_folding_to_complex_fails_as_with_numba():
    """CPython folds `(-8.0) ** (1.0 / 3.0)` into a complex constant, which numba cannot type:
    the program fails to compile under either compiler, the same way."""
    import numba
    src = "def predict_step_time(P):\n    return P + (-8.0) ** (1.0 / 3.0)\n"
    with pytest.raises(Unsupported):
        llvm_program.emit_module(kernel_source(parse_program(src)), "_kernel")
    for name in ("numba", None):
        with pytest.raises(numba.core.errors.TypingError):
            compile_generated(kernel_source(parse_program(src)), "_kernel", PREDICTOR_TYPE, call_predictor,
                              compiler=name)


def test_python_call_and_dispatcher():
    p = parse_program(seed_sources()["linear_physics"])
    f = p.compiled()
    X = input_rows(np.random.default_rng(3), 16)
    c = p.initial_constants
    via_callers = predict_rows(f, X, c)
    assert np.array_equal(_bits(via_callers), _bits(predict_rows(f.dispatcher, X, c)))
    assert all(_bits(f(x, c)) == _bits(v) for x, v in zip(X, via_callers))


_SECOND_PROCESS = """
import pickle, sys
import numpy as np
from evaluator.step_scoring import predict_rows, predict_rows_grad
f, g, X, c = pickle.load(sys.stdin.buffer)
assert type(f).__name__ == "LLVMFunction"
p, J = predict_rows_grad(g, X, c)
pickle.dump((predict_rows(f, X, c), f(X[0], c), p, J), sys.stdout.buffer)
"""


def test_pickle_round_trip_and_second_process():
    from evaluator.program_grad import compiled_gradient
    p = parse_program(seed_sources()["regime_switch"])
    f, g = p.compiled(), compiled_gradient(p)
    assert isinstance(f, LLVMFunction) and isinstance(g, LLVMFunction)
    X, c = input_rows(np.random.default_rng(5), 16), p.initial_constants
    want = predict_rows(f, X, c), f(X[0], c), *predict_rows_grad(g, X, c)
    f2, g2 = pickle.loads(pickle.dumps(f)), pickle.loads(pickle.dumps(g))
    assert f2.__wrapper_address__() != f.__wrapper_address__()  # compiled again
    got = predict_rows(f2, X, c), f2(X[0], c), *predict_rows_grad(g2, X, c)
    assert all(np.array_equal(_bits(a), _bits(b)) for a, b in zip(want, got))
    out = subprocess.run([sys.executable, "-c", _SECOND_PROCESS], input=pickle.dumps((f, g, X, c)),
                         capture_output=True, check=True, cwd=str(__import__("pathlib").Path(__file__).parents[1]))
    got = pickle.loads(out.stdout)
    assert all(np.array_equal(_bits(a), _bits(b)) for a, b in zip(want, got))


def test_replay_identical_under_both_compilers(monkeypatch):
    """One evaluation of a seed (fit, replay of every experiment, scores) on the embedded
    default: the same Evaluation from either compiler."""
    from evaluator.data import load
    from evaluator.evaluate import Evaluator
    gt = load(None)
    out = {}
    for name in ("numba", "llvm"):
        monkeypatch.setenv("STEPEVOLVE_COMPILER", name)
        ev = Evaluator(gt)
        out[name] = ev.evaluate(parse_program(seed_sources()["linear_physics"]), refine=False)
    a, b = out["numba"], out["llvm"]
    assert a.valid and b.valid
    a, b = dataclasses.replace(a, seconds=0.0), dataclasses.replace(b, seconds=0.0)
    assert json.dumps(a.to_json(), sort_keys=True) == json.dumps(b.to_json(), sort_keys=True)
