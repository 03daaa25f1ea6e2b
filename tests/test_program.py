"""Program validation (the AST whitelist), complexity rule, canonical hash, compilation."""
import math

import numpy as np
import pytest

from evaluator.blis_models import BLACKBOX_SOURCE
from evaluator.components import N_COMPONENTS
from evaluator.program import ProgramError, parse_program
from seeds import seed_sources

GOOD = '''
A = 2.0
BB = 10

def predict_step_time(P, D, t_weights):
    x = A * P
    if D > 3 and P < 100:
        y = x + BB
    else:
        y = max(x, t_weights, 5)
    return y + (1.0 if D > 0 else 2.0) + sqrt(abs(-t_weights)) + math.log(1 + D) + pow(D, 2) + D ** 0.5
'''


def test_good_program_parses_and_counts():
    p = parse_program(GOOD)
    assert p.const_names == ["A", "BB"]
    assert p.params == ["P", "D", "t_weights"]
    # ops: A*P, and(1), D>3, P<100, x+B, max, +,+,+,+,+ (5 adds in return), IfExp cmp D>0,
    # sqrt, abs, unary -, log, 1+D, pow, ** -> counted by the documented rule
    assert p.complexity.conditionals == 2
    assert p.complexity.constants == 2
    assert p.complexity.total == p.complexity.operations + 4


@pytest.mark.parametrize("src,msg", [
    ("import os\ndef predict_step_time(P):\n    return P", "imports"),
    ("def predict_step_time(P):\n    return os.getcwd()", "only max"),
    ("def predict_step_time(P):\n    for i in range(3):\n        P = P + 1\n    return P", "For"),
    ("def predict_step_time(P):\n    return [x for x in (1, 2)][0]", "not allowed"),
    ("def predict_step_time(P):\n    return P.__class__", "not allowed"),
    ("def predict_step_time(P):\n    return 'a'", "not a number"),
    ("def predict_step_time(P):\n    return (lambda: 1)()", "only max"),
    ("def predict_step_time(Q):\n    return Q", "not a component"),
    ("def predict_step_time(P):\n    return D", "not a parameter"),
    ("def predict_step_time(P):\n    if P > 1:\n        return 1", "every path"),
    ("def predict_step_time(P):\n    return P > 1", "comparisons are only allowed"),
    ("X = 1\nX = 2\ndef predict_step_time(P):\n    return X", "declared twice"),
    ("def predict_step_time(P):\n    if P > 1:\n        y = 1\n    return y", "before assignment"),
    ("def f(P):\n    return P", "only `def predict_step_time"),
    ("def predict_step_time(P):\n    return __import__('os')", "only max"),
    ("def predict_step_time(P):\n    return P +", "syntax error"),
    ("", "empty"),
])
def test_rejections_name_the_rule(src, msg):
    with pytest.raises(ProgramError) as e:
        parse_program(src)
    assert msg.lower() in str(e.value).lower()


def test_canonical_hash_ignores_values_names_and_whitespace():
    a = parse_program("KK = 1.0\ndef predict_step_time(P, D):\n    z = KK * P\n    return z + D\n")
    b = parse_program("OTHER = 7.5\n\ndef predict_step_time(D, P):\n    w   = OTHER*P\n    return w + D\n")
    c = parse_program("KK = 1.0\ndef predict_step_time(P, D):\n    z = KK * P\n    return z - D\n")
    assert a.hash == b.hash
    assert a.hash != c.hash


def test_compiled_matches_python_and_seeds_compile():
    rng = np.random.default_rng(0)
    for name, src in seed_sources().items():
        p = parse_program(src)
        f, g = p.compiled(), p.python_function()
        for _ in range(20):
            x = rng.uniform(0.5, 5000.0, size=N_COMPONENTS)
            assert f(x, p.initial_constants) == pytest.approx(g(x, p.initial_constants), rel=1e-12), name
    p = parse_program(GOOD)
    x = np.full(N_COMPONENTS, 4.0)
    assert p.compiled()(x, p.initial_constants) == pytest.approx(p.python_function()(x, p.initial_constants))


def test_numba_error_model_gives_nan_not_exception():
    p = parse_program("def predict_step_time(P):\n    return log(P - P) + sqrt(P - 2 * P)\n")
    assert math.isnan(p.compiled()(np.ones(N_COMPONENTS), np.zeros(0)))


def test_with_constants_rewrites_values():
    p = parse_program(BLACKBOX_SOURCE)
    q = parse_program(p.with_constants([1.0, 2.0, 3.0]))
    assert list(q.constants.values()) == [1.0, 2.0, 3.0]
    assert q.hash == p.hash


def test_definite_assignment_follows_returning_branches():
    src = "def predict_step_time(P):\n    if P > 1:\n        return 2.0\n    else:\n        y = 1\n    return y + P\n"
    assert parse_program(src).complexity.conditionals == 1


def test_huge_integer_literal_is_a_clear_rejection():
    with pytest.raises(ProgramError, match="finite"):
        parse_program("C = " + "9" * 400 + "\ndef predict_step_time(P):\n    return C * P\n")
    with pytest.raises(ProgramError, match="non-finite"):
        parse_program("def predict_step_time(P):\n    return P * " + "9" * 400 + "\n")


def test_parsing_from_threads_is_safe():
    """The LLM operator builds prompts in a thread while the loop parses candidates."""
    import threading
    srcs = list(seed_sources().values())
    errors = []

    def work():
        try:
            for _ in range(200):
                for s in srcs:
                    parse_program(s)
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
