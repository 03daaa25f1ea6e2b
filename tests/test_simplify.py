"""Dead-conditional removal before emission, on the real probe states, and `emit_record`,
the one function the CLI, the UI and the report emit an archived program's Go with."""
import numpy as np
import pytest

from evaluator.coverage import coverage, coverage_lines
from evaluator.objectives import Caps
from evaluator.program import collapse_conditional, parse_program
from evaluator.step_scoring import predict_rows
from go_emit import GoEmitError, emit_go, emit_record
from go_emit.emit import OVERHEAD_KEYS
from go_emit.names import merge_aliases
from go_emit.simplify import probes_by_model, simplify

DEAD = """
BASE = 1000.0
PER_WEIGHT = 2.0
HUGE_K = 1000000000000.0
SLOPE = 5.0
PER_SEQ = 30.0


def predict_step_time(P, B, K, t_weights, t_decode_kv, t_prefill_gemm, t_decode_gemm):
    if K > HUGE_K:
        return SLOPE * K
    extra = PER_SEQ * B if B < 1000000.0 else SLOPE * P
    if P > 0:
        return BASE + PER_WEIGHT * max(t_weights + t_decode_kv, t_prefill_gemm + t_decode_gemm) + extra + P
    return BASE + PER_WEIGHT * max(t_weights + t_decode_kv, t_decode_gemm)
"""


@pytest.fixture(scope="module")
def probes(evaluator):
    return probes_by_model(evaluator)


def _consts(prog, scale):
    return {m: list(prog.initial_constants * s) for m, s in scale.items()}


def test_dead_conditionals_are_collapsed_and_live_ones_kept(probes):
    prog = parse_program(DEAD)
    consts = _consts(prog, {"llama-2-7b": 1.0, "llama-2-70b": 2.0, "mixtral-8x7b": 0.5, "codellama-34b": 1.5})
    out = simplify(prog, consts, probes)
    assert out.removed == 2  # the K and B thresholds; `P > 0` switches on real states
    src = out.program.source
    assert "HUGE_K" not in src and "1000000.0" not in src and "K" not in out.program.params
    assert "if P > 0" in src
    assert out.program.complexity.total < prog.complexity.total
    # constants follow their names, per model
    for m, vals in out.constants.items():
        named = dict(zip(prog.const_names, consts[m]))
        assert vals == [named[n] for n in out.program.const_names]
    # identical predictions on every probe state
    f0, f1 = prog.compiled(), out.program.compiled()
    for m, X in probes.items():
        a = predict_rows(f0, X, np.array(consts[m]))
        b = predict_rows(f1, X, np.array(out.constants[m]))
        assert np.array_equal(a, b)
    assert out.n_probes == sum(len(X) for X in probes.values()) > 10_000


def test_a_branch_that_switches_for_one_model_only_is_kept(probes):
    # the threshold is crossed on 70b's states only (its constant is scaled down)
    src = """
BASE = 1000.0
LIMIT = 100000000.0


def predict_step_time(K, t_weights):
    if K > LIMIT:
        return BASE
    return BASE + t_weights
"""
    prog = parse_program(src)
    consts = {"llama-2-7b": [1000.0, 1e8], "llama-2-70b": [1000.0, 1e3],
              "mixtral-8x7b": [1000.0, 1e8], "codellama-34b": [1000.0, 1e8]}
    assert simplify(prog, consts, probes).removed == 0
    consts["llama-2-70b"] = [1000.0, 1e8]
    assert simplify(prog, consts, probes).removed == 1


def test_collapse_conditional_picks_the_branch():
    prog = parse_program(DEAD)
    body = collapse_conditional(prog, 0, keep_body=True)
    assert body.source.strip().endswith("return SLOPE * K")
    with pytest.raises(IndexError):
        collapse_conditional(prog, 9, keep_body=True)


def test_a_redundant_conditional_goes_too(probes):
    # `P > 0` switches on real states, but both branches agree when P == 0
    src = """
BASE = 1000.0


def predict_step_time(P, t_weights):
    if P > 0:
        return BASE + t_weights + P
    return BASE + t_weights
"""
    prog = parse_program(src)
    out = simplify(prog, {m: [1000.0] for m in probes}, probes)
    assert out.removed == 1 and "if" not in out.program.source


def _record(source: str, models, constants) -> dict:
    overheads = {m: {k: 10.0 + i for i, k in enumerate(OVERHEAD_KEYS)} for m in models}
    return {"id": 7, "run_id": "r", "source": source,
            "evaluation": {"valid": True, "constants": constants, "overheads": overheads,
                           "objectives": {"e2e_mean": 0.125, "complexity": 99.0}}}


def test_emit_record_simplifies_with_the_global_constants(gt, probes):
    prog = parse_program(DEAD)
    rec = _record(DEAD, gt.models, {"*": list(prog.initial_constants)})
    out = emit_record(rec, gt, probes=probes)
    raw = emit_record(rec, gt, simplify=False)
    assert out.models == raw.models == tuple(gt.models)  # "*" applies to every model of the data
    assert (out.removed, raw.removed, raw.note) == (2, 0, "")
    assert out.note.startswith("simplified: 2 conditional(s) never switch on")
    assert "HUGE_K" in raw.code and "HUGE_K" not in out.code and "SLOPE" not in out.code
    assert f"//   complexity: {out.program.complexity.total}\n" in out.code  # the emitted program's
    assert "//   complexity: 99\n" in raw.code and "// Program:    7\n" in raw.code
    vectors = {e.model: e.model_vec(gt.hardware) for e in gt.experiments}
    consts = {m: list(prog.initial_constants) for m in gt.models}
    cov = coverage_lines(coverage(gt, rec["evaluation"]["objectives"], rec))  # where it holds, in the header
    same = emit_go(prog, consts, vectors, rec["evaluation"]["overheads"], program_id="7",
                   scores=rec["evaluation"]["objectives"], aliases=merge_aliases(gt, consts, None), coverage=cov)
    assert raw.code == same  # nothing but emit_go around the record's values
    assert "//   Not validated for: " in raw.code and "//   Physical on served shapes: " in raw.code


def test_emit_record_refusals(gt):
    prog = parse_program(DEAD)
    rec = _record(DEAD, gt.models, {gt.models[0]: list(prog.initial_constants)})
    assert emit_record(rec, gt, simplify=False).models == (gt.models[0],)
    with pytest.raises(GoEmitError, match="no valid evaluation"):
        emit_record({**rec, "evaluation": {"valid": False}}, gt)
    with pytest.raises(GoEmitError, match="does not parse"):
        emit_record({**rec, "source": "import os"}, gt)
    with pytest.raises(GoEmitError, match="none of the models"):
        emit_record(_record(DEAD, gt.models, {"no-such-model": [1.0]}), gt)
    with pytest.raises(GoEmitError, match="cap 2"):
        emit_record(rec, gt, simplify=False, caps=Caps(ops=2))
    with pytest.raises(GoEmitError, match="Caps"):
        emit_record(rec, gt, simplify=False, caps=(30, 3, 10))


def test_emit_record_refuses_an_unphysical_program(gt, probes):
    """The judge's physical rules hold for emission too: a program fitted elsewhere (or edited)
    that falls below the hardware floor is never written as Go, and the reason says where."""
    src = ("OVERHEAD = 0.0\nEFFICIENCY = 0.5\n\n"
           "def predict_step_time(t_prefill_gemm, t_decode_gemm, t_decode_kv, t_weights):\n"
           "    return OVERHEAD + EFFICIENCY * max(t_prefill_gemm + t_decode_gemm, t_weights + t_decode_kv)\n")
    rec = _record(src, gt.models, {"*": [0.0, 0.5]})
    with pytest.raises(GoEmitError, match=r"not emitted, it is unphysical: .*below the hardware floor"):
        emit_record(rec, gt, probes=probes)
    ok = _record(src, gt.models, {"*": [2000.0, 1.2]})
    assert "func " in emit_record(ok, gt, probes=probes).code
