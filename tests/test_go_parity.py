"""Parity of the emitted Go StepTime with the Python prediction (tests/gotool.py, parity_check_many).

Batches: real step rows of data/steps/steps.parquet (per-request lists synthesised to match each
row's prefill/decode tokens, request counts, running depth and KV usage) for the models in that
file, plus simulator-like states for every model and edge cases (empty batch, idle requests,
prefill boundaries). Every value must agree within 1 us (values above 1e12 us: within 1e-12 of
their size, for random programs whose transcendental functions Go and libm round differently
in the last place).

Needs a Go toolchain (scripts/install_go.sh); skipped with the reason otherwise.
"""
from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from evaluator import kernels as kt
from evaluator.components import COMPONENTS, MEASURED_NAMES, model_vector
from evaluator.data import load_default
from evaluator.program import ProgramError, parse_program
from gotool import Batch, ParityCase, get_toolchain, parity_check, parity_check_many
from seeds import seed_sources

TOOLCHAIN = get_toolchain()
pytestmark = pytest.mark.skipif(TOOLCHAIN is None, reason="no Go toolchain found (run scripts/install_go.sh)")

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("STEPEVOLVE_DATA", REPO.parent / "shared" / "data"))


# ----------------------------------------------------------------- local data helpers
# (temporary: the data layer will provide model vectors; these read the same files)

H100 = {"peak_flops": 989.5e12, "hbm_bw": 3.35e12, "nvlink_bw": 450e9}
LOCAL_MODELS = {  # model name -> (model_configs folder, TP of the experiments)
    "llama-2-7b": ("Llama-2-7b-hf", 1),
    "llama-2-70b": ("Llama-2-70b-hf", 4),
    "codellama-34b": ("CodeLlama-34b-Instruct-hf", 2),
    "mixtral-8x7b": ("Mixtral-8x7B-v0.1", 2),
}
# the same figures as the config.json files (replay_experiment_meta.csv), used if they are absent
_FALLBACK_ARCH = {
    "llama-2-7b": dict(layers=32, hidden=4096, n_heads=32, n_kv_heads=32, ffn=11008, n_experts=0, top_k=0, vocab=32000),
    "llama-2-70b": dict(layers=80, hidden=8192, n_heads=64, n_kv_heads=8, ffn=28672, n_experts=0, top_k=0, vocab=32000),
    "codellama-34b": dict(layers=48, hidden=8192, n_heads=64, n_kv_heads=8, ffn=22016, n_experts=0, top_k=0,
                          vocab=32000),
    "mixtral-8x7b": dict(layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn=14336, n_experts=8, top_k=2,
                         vocab=32000),
}
STEP_MODEL_NAMES = {"llama-2-70b-hf": "llama-2-70b"}  # model labels in steps.parquet -> model


def local_arch_from_config(folder: str, name: str) -> dict:
    path = DATA_DIR / "model_configs" / folder / "config.json"
    if not path.exists():
        return dict(_FALLBACK_ARCH[name])
    cfg = json.loads(path.read_text())
    return {
        "layers": cfg["num_hidden_layers"],
        "hidden": cfg["hidden_size"],
        "n_heads": cfg["num_attention_heads"],
        "n_kv_heads": cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
        "ffn": cfg["intermediate_size"],
        "n_experts": cfg.get("num_local_experts") or 0,
        "top_k": cfg.get("num_experts_per_tok") or 0,
        "vocab": cfg["vocab_size"],
    }


def local_kernel_tables() -> dict[str, np.ndarray]:
    """model -> kernel tables: reduced from DATA_DIR/kernels if present, else the embedded ones."""
    if (DATA_DIR / kt.AIC_DIR).is_dir():
        tables = kt.read_kernel_tables(DATA_DIR)
        return {name: kt.reduce_for_model(tables, local_arch_from_config(folder, name), tp, H100)
                for name, (folder, tp) in LOCAL_MODELS.items()}
    return {e.model: e.kernels for e in load_default().experiments}


def local_model_vectors() -> dict[str, np.ndarray]:
    """MODEL_FIELDS followed by the kernel tables (what Experiment.model_vec gives)."""
    tables = local_kernel_tables()
    return {name: model_vector(local_arch_from_config(folder, name), tp, H100, tables[name])
            for name, (folder, tp) in LOCAL_MODELS.items()}


def _split(total: int, parts: int, rng: np.random.Generator) -> list[int]:
    """total split into `parts` positive integers (total >= parts)."""
    if parts <= 0:
        return []
    cuts = np.sort(rng.choice(np.arange(1, total), size=parts - 1, replace=False)) if parts > 1 else np.array([], int)
    edges = np.concatenate([[0], cuts, [total]])
    return [int(v) for v in np.diff(edges)]


def _decode_request(rng, mean_len: float) -> tuple[int, int, int, int]:
    total = int(np.clip(mean_len * rng.lognormal(0.0, 0.35), 24, 4095))
    inp = int(np.clip(total * rng.uniform(0.4, 0.97), 8, total - 1))
    out_len = total - inp + int(rng.integers(0, 400))
    return (total, 1, inp, out_len)  # ProgressIndex = input + generated so far >= input


def _prefill_request(rng, chunk: int) -> tuple[int, int, int, int]:
    if rng.random() < 0.5:  # first chunk
        progress = 0
    else:  # a later chunk of a long prompt
        progress = int(rng.integers(1, 2048))
    rest = 0 if rng.random() < 0.6 else int(rng.integers(1, 1500))
    inp = progress + chunk + rest
    return (progress, chunk, inp, int(rng.integers(1, 1500)))


def batch_from_counts(model: str, P: int, D: int, n_p: int, n_d: int, B: int, mean_len: float,
                      rng: np.random.Generator) -> Batch:
    reqs = [_prefill_request(rng, c) for c in _split(P, n_p, rng)]
    reqs += [_decode_request(rng, mean_len) for _ in range(n_d)]
    for _ in range(max(B - n_p - n_d, 0)):  # running but not scheduled this step
        p, _, inp, out_len = _decode_request(rng, mean_len)
        reqs.append((p, 0, inp, out_len))
    order = rng.permutation(len(reqs))
    return Batch(model, [reqs[i] for i in order])


def batches_from_step_rows(n_per_model: int, rng: np.random.Generator) -> list[Batch]:
    """Per-request lists consistent with real BATCH_SUMMARY rows (half with a prefill chunk)."""
    path = DATA_DIR / "steps" / "steps.parquet"
    if not path.exists():
        return []
    import pandas as pd

    df = pd.read_parquet(path)
    df["model_name"] = df["model"].map(lambda m: STEP_MODEL_NAMES.get(m, m))
    out = []
    for model, g in df.groupby("model_name"):
        if model not in LOCAL_MODELS:
            continue
        pre, dec = g[g.prefill_tokens > 0], g[g.prefill_tokens == 0]
        rows = pd.concat([pre.sample(min(len(pre), n_per_model // 2), random_state=int(rng.integers(1 << 30))),
                          dec.sample(min(len(dec), n_per_model - min(len(pre), n_per_model // 2)),
                                     random_state=int(rng.integers(1 << 30)))])
        for r in rows.itertuples():
            B = int(r.running_depth)
            kv_tokens = (int(r.kv_blocks_total_gpu) - int(r.kv_blocks_free_gpu)) * 16
            mean_len = max(kv_tokens / max(B, 1), 32.0)
            out.append(batch_from_counts(model, int(r.prefill_tokens), int(r.decode_tokens), int(r.num_prefill_reqs),
                                         int(r.num_decode_reqs), B, mean_len, rng))
    return out


def simulator_like_batches(model: str, n: int, rng: np.random.Generator) -> list[Batch]:
    """States a vLLM-like scheduler produces: decodes first, prefill chunks fill the 2048 budget."""
    out = []
    for _ in range(n):
        B = int(rng.integers(1, 129))
        n_d = int(rng.integers(0, B + 1))
        budget = 2048 - n_d
        n_p = int(min(rng.integers(0, 9), B - n_d, budget))
        P = int(rng.integers(n_p, budget + 1)) if n_p else 0
        out.append(batch_from_counts(model, P, n_d, n_p, n_d, B, float(rng.uniform(100, 2500)), rng))
    return out


def edge_batches(model: str) -> list[Batch]:
    return [
        Batch(model, []),                                   # empty batch
        Batch(model, [(500, 0, 400, 50)] * 3),              # only idle requests
        Batch(model, [(0, 1, 1, 1)]),                       # one-token prompt
        Batch(model, [(0, 2048, 2048, 1)]),                 # one full prefill chunk
        Batch(model, [(399, 1, 400, 10)]),                  # last prompt token
        Batch(model, [(400, 1, 400, 10)]),                  # first decode step
        Batch(model, [(15, 1, 10, 10), (16, 0, 10, 10)]),   # exact block boundaries
        Batch(model, [(4095, 1, 100, 4000)] * 128),         # full batch at max_model_len
        Batch(model, [(0, 16, 4096, 1)] * 128),             # 128 prefill chunks
        Batch(model, [(i * 7, 1 + i % 5, 3000, 500) for i in range(100)]),  # mixed
    ]


def extrapolation_batches(model: str) -> list[Batch]:
    """Beyond the measured kernel tables: long contexts, wide decode batches, long prefill chunks."""
    out = []
    for n_dec in (1, 3, 64, 200, 1000):
        for ctx in (1, 4095, 20000, 150000):
            out.append(Batch(model, [(ctx, 1, 10, ctx + 5)] * n_dec))
    for chunk, n_chunks in ((1, 1), (9000, 1), (70000, 1), (2048, 40), (300, 600)):
        out.append(Batch(model, [(0, chunk, chunk + 10, 5)] * n_chunks + [(5000, 1, 100, 9000)] * 3))
    return out


def all_batches(seed: int = 20260218) -> list[Batch]:
    rng = np.random.default_rng(seed)
    batches = batches_from_step_rows(400, rng)
    for model in LOCAL_MODELS:
        n = 250 if not any(b.model == model for b in batches) else 60
        batches += simulator_like_batches(model, n, rng)
        batches += edge_batches(model)
    return batches


def per_model_constants(program, models, spread: float = 0.03) -> dict[str, np.ndarray]:
    """The program's initial constants, varied per model so per-model selection is exercised."""
    base = program.initial_constants
    return {m: base * (1.0 + spread * (k + 1)) + 0.25 * k for k, m in enumerate(sorted(models))}


def per_model_overheads(models) -> dict[str, dict[str, float]]:
    return {m: {"queueing_us": 1500.5 + 100 * k, "queueing_per_input_token_us": 0.25 + 0.125 * k,
                "output_token_us": 10.49 + k, "post_decode_us": 3.5 + 2 * k}
            for k, m in enumerate(sorted(models))}


# ----------------------------------------------------------------- programs exercising every construct

CONSTRUCT_PROGRAMS = {
    "branches": '''
BASE = 15000.0
A = 2.0
C = 1.5
def predict_step_time(P, D, B, t_weights, t_decode_kv):
    if P > 0 and not D > 100:
        w = A * P
        extra = t_weights
    elif D > 64 or B >= 120:
        w = C * D
        extra = t_decode_kv
    else:
        w = 0
        extra = max(t_weights, t_decode_kv, 1.0)
    return BASE + w + extra
''',
    "math_calls": '''
K0 = 12000.0
S = 0.5
E = 1.2
def predict_step_time(P, D, K, t_prefill_gemm, t_decode_gemm, t_weights):
    g = t_prefill_gemm ** E + pow(t_decode_gemm, 1.1)
    r = sqrt(K + 1) * S + log(P + D + 1) - exp(-t_weights / 10000)
    q = abs(-r) if K > 1000 else -(-r)
    return K0 + min(g, 50000.0, t_weights * 10) + q
''',
    "math_module": '''
import math
BASE = 14000.0
def predict_step_time(P, D, B, n_prefill, t_lm_head, t_allreduce):
    """docstring"""
    y = 2 * 3 * t_lm_head + t_allreduce * (1 / 3)
    unused = y * 2
    if 0 < n_prefill <= 4:
        y = y + math.sqrt(P) * 2
    else:
        if B == 0:
            return BASE
        elif B != 1:
            y = y - -1.5
        y = y + math.log(B + 1) + math.fabs(D - 64) / 10
    return BASE + y + math.exp(-0.0) + math.pow(2, 3)
''',
    "clamping": '''
C = 100.0
def predict_step_time(P, D, t_prefill_attn):
    return C * log(P) - D * 1000.0 + 1 / P + t_prefill_attn if D < 100 else exp(D / 2) + C
''',
    "nan_order": '''
W = 1.0
def predict_step_time(D, t_weights, n_decode):
    a = max(t_weights, sqrt(D - 60)) * W
    b = min(t_weights, sqrt(D - 60)) * W
    return a + b if n_decode < 90 else max(sqrt(D - 100), t_weights)
''',
    "plain_return_literal": '''
def predict_step_time(B):
    return 12345.5
''',
    "blackbox_negative": '''
B0 = -500.0
B1 = 0.5
def predict_step_time(P, D):
    return B0 + B1 * P + -D
''',
}


def construct_programs():
    return {name: parse_program(src.strip() + "\n") for name, src in CONSTRUCT_PROGRAMS.items()}


def _cases(programs: dict, vectors: dict) -> list[ParityCase]:
    cases = []
    for i, (name, prog) in enumerate(programs.items()):
        type_name = "P" + "".join(w.capitalize() for w in name.split("_")) + f"{i}Model"
        cases.append(ParityCase(prog, per_model_constants(prog, vectors), vectors, per_model_overheads(vectors),
                                type_name=type_name, label=name))
    return cases


@pytest.fixture(scope="module")
def vectors():
    return local_model_vectors()


@pytest.fixture(scope="module")
def batches():
    return all_batches()


def test_batches_cover_all_models(batches):
    assert len(batches) >= 1000
    models = {b.model for b in batches}
    assert models == set(LOCAL_MODELS)
    prefill = sum(1 for b in batches if any(r[0] < r[2] and r[1] > 0 for r in b.requests))
    assert prefill >= 200


def test_seeds_and_constructs_parity(vectors, batches):
    programs = {f"seed_{k}": parse_program(v) for k, v in seed_sources().items()}
    programs.update(construct_programs())
    for name, p in programs.items():
        assert p.complexity.within() is None, (name, p.complexity)
    report = parity_check_many(_cases(programs, vectors), batches)
    assert report.ok, report.summary()
    assert report.n_compared == len(programs) * len(batches)
    assert report.max_abs_diff_us <= 1
    # the clamping/NaN programs really reach the clamps
    clamp = report.go_values[[c for c in report.go_values if "Clamping" in c][0]]
    assert 1 in clamp and (1 << 53) in clamp


def test_measured_components_parity(vectors, batches):
    """Go fillMeasured (and its interpolation) gives numba's measured components, to the last
    digits: each component is scaled by 1e6 before the step time is rounded to whole us."""
    programs = {f"measured_{name}": parse_program(f"S = 1000000.0\ndef predict_step_time({name}):\n"
                                                  f"    return S * {name} + 1.0\n")
                for name in sorted(MEASURED_NAMES)}
    grid = [b for m in LOCAL_MODELS for b in extrapolation_batches(m)]
    report = parity_check_many(_cases(programs, vectors), batches + grid)
    assert report.ok, report.summary()
    assert report.n_compared == len(programs) * len(batches + grid)
    step = report.go_values[[c for c in report.go_values if "TStepMeasured" in c][0]]
    # every batch with work has a measured time; batches without new tokens give S * 0 + 1
    idle = [not any(r[1] > 0 for r in b.requests) for b in batches + grid]
    assert [v <= 1 for v in step] == idle and min(v for v in step if v > 1) > 1e6
    assert max(step) > 1e12  # the extrapolation grid was reached (seconds-long steps)


def test_single_program_parity_legacy5(vectors, batches):
    prog = parse_program(seed_sources()["phase_split"])
    report = parity_check(prog, per_model_constants(prog, vectors), vectors, batches[::4],
                          per_model_overheads(vectors), interface="legacy5")
    assert report.ok, report.summary()


# ----------------------------------------------------------------- property test: random programs

LEAVES = ("t_prefill_gemm", "t_prefill_attn", "t_decode_gemm", "t_decode_kv", "t_weights", "t_allreduce",
          "t_lm_head", "P", "D", "B", "K", "n_prefill", "n_decode", "layers", "tp", "t_gemm_measured",
          "t_decode_attn_measured", "t_prefill_attn_measured", "t_allreduce_measured", "t_moe_measured",
          "t_step_measured", "t_decode_kv_max", "ctx_max", "t_decode_spread")
assert set(LEAVES) == set(COMPONENTS)

_LITERALS = [0, 1, 2, 0.5, 1.5, 10.0, 100.0, 1e-3, 16, 4096.0, 0.0]


@st.composite
def random_expr(draw, names: list[str], depth: int) -> str:
    """An arithmetic expression over names; every whitelisted expression form can appear."""
    kind = draw(st.integers(0, 9)) if depth > 0 else 0
    if kind <= 1:
        if draw(st.integers(0, 3)) == 0:
            return repr(draw(st.sampled_from(_LITERALS)))
        return draw(st.sampled_from(names))
    sub = random_expr(names, depth - 1)
    if kind <= 4:
        op = draw(st.sampled_from(["+", "-", "*", "/", "**", "+", "*"]))
        return f"({draw(sub)} {op} {draw(sub)})"
    if kind == 5:
        return f"{draw(st.sampled_from(['-', '+']))}{draw(sub)}"
    if kind == 6:
        fn = draw(st.sampled_from(["abs", "sqrt", "log", "exp", "math.sqrt", "math.log", "math.fabs", "math.exp"]))
        return f"{fn}({draw(sub)})"
    if kind == 7:
        fn = draw(st.sampled_from(["max", "min"]))
        args = [draw(sub) for _ in range(draw(st.integers(2, 3)))]
        return f"{fn}({', '.join(args)})"
    if kind == 8:
        fn = draw(st.sampled_from(["pow", "math.pow"]))
        return f"{fn}({draw(sub)}, {draw(sub)})"
    return f"({draw(sub)} if {draw(random_test(names, depth - 1))} else {draw(sub)})"


@st.composite
def random_test(draw, names: list[str], depth: int) -> str:
    """A condition: comparisons (also chained) combined with and/or/not."""
    def cmp():
        e = random_expr(names, max(depth, 1))
        ops = draw(st.lists(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), min_size=1, max_size=2))
        return draw(e) + "".join(f" {op} {draw(e)}" for op in ops)

    kind = draw(st.integers(0, 3))
    if kind <= 1:
        return cmp()
    if kind == 2:
        return f"{cmp()} {draw(st.sampled_from(['and', 'or']))} {cmp()}"
    return f"not ({cmp()})"


@st.composite
def random_program(draw) -> str:
    params = draw(st.lists(st.sampled_from(LEAVES), min_size=1, max_size=4, unique=True))
    n_consts = draw(st.integers(0, 3))
    consts = [f"C{i}" for i in range(n_consts)]
    values = [draw(st.sampled_from([0.5, 1.0, 2.0, 1000.0, 15000.0, -3.0])) for _ in consts]
    names = params + consts
    lines = ["import math"] + [f"{c} = {v!r}" for c, v in zip(consts, values)]
    lines.append(f"def predict_step_time({', '.join(params)}):")
    if draw(st.booleans()):
        lines.append(f"    a = {draw(random_expr(names, 2))}")
        names = names + ["a"]
    if draw(st.booleans()):  # a local assigned in every branch of an if/elif/else
        lines.append(f"    if {draw(random_test(names, 1))}:")
        lines.append(f"        b = {draw(random_expr(names, 1))}")
        if draw(st.booleans()):
            lines.append(f"    elif {draw(random_test(names, 1))}:")
            lines.append(f"        b = {draw(random_expr(names, 1))}")
        lines.append("    else:")
        lines.append(f"        b = {draw(random_expr(names, 1))}")
        names = names + ["b"]
    if draw(st.booleans()):
        lines.append(f"    if {draw(random_test(names, 1))}:")
        lines.append(f"        return {draw(random_expr(names, 2))}")
    lines.append(f"    return {draw(random_expr(names, 3))}")
    return "\n".join(lines) + "\n"


def _valid_within_cap(src: str):
    try:
        prog = parse_program(src)
    except ProgramError:
        return None
    return prog if prog.complexity.within() is None else None


def collect_random_programs(n: int = 30) -> list:
    """n distinct random programs within the cap, drawn by hypothesis (deterministic)."""
    collected: dict[str, object] = {}

    @settings(max_examples=n, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(random_program().map(_valid_within_cap).filter(lambda p: p is not None))
    def collect(prog):
        ast.parse(prog.source)  # valid Python that the AST whitelist accepted
        collected.setdefault(prog.source, prog)

    collect()
    return list(collected.values())


def test_random_programs_parity():
    """Random valid programs through transpiler + parity, all compiled into one Go test binary."""
    programs = collect_random_programs(30)
    assert len(programs) >= 20
    vectors = local_model_vectors()
    rng = np.random.default_rng(7)
    batches = []
    for model in LOCAL_MODELS:
        batches += simulator_like_batches(model, 40, rng) + edge_batches(model)
    cases = [ParityCase(p, per_model_constants(p, vectors), vectors, per_model_overheads(vectors),
                        type_name=f"Random{i}Model", label=p.source) for i, p in enumerate(programs)]
    report = parity_check_many(cases, batches)
    assert report.ok, report.summary() + "\n" + "\n".join(
        f"--- {c.type_name}\n{c.label}" for c in cases if any(m["type"] == c.type_name for m in report.mismatches))


# ----------------------------------------------------------------- evolved programs

def test_evolved_programs_parity(vectors, batches):
    """Programs the search actually produces (offline operator chains from every seed)."""
    import random

    from evolve.mutate import OfflineMutator
    mut = OfflineMutator(rng=random.Random(11))
    programs = {}
    for name, src in sorted(seed_sources().items()):
        cur = parse_program(src)
        for depth in range(1, 13):
            other = parse_program(seed_sources()[sorted(seed_sources())[depth % len(seed_sources())]])
            cur, _ = mut.propose_program([cur, other])
            if depth % 4 == 0:
                programs[f"evolved_{name}_{depth}"] = cur
    assert len(programs) == 3 * len(seed_sources())
    report = parity_check_many(_cases(programs, vectors), batches[::2])
    assert report.ok, report.summary()
    assert report.max_abs_diff_us <= 1
