"""The component formulas as data: the one source of the numba `fill_components` and the Go
`fillComponents`, so the simulator, the step scoring and the emitted Go cannot drift apart.

Each row is (name, formula[, doc]). A formula is a Python expression over
  - the model inputs (local names bound to MODEL_FIELDS entries, see MODEL_INPUTS),
  - the step aggregates STEP_INPUTS (P, D, n_prefill, n_decode, B, K),
  - earlier rows (intermediates, then components),
  - calls of a registered HELPERS entry (a function that exists in both languages),
with numbers, + - * / **, and at the top level only `a if cond else b` (cond a comparison),
which both generators turn into an if/else statement. Everything is float64 and keeps the
written operation order, so values are bit-for-bit the same in both languages.

After the formula rows come BLOCKS: components written by ONE call per step of a function that
reads the per-model kernel tables (the model vector's tail after MODEL_FIELDS). The numba
function is named by `Block.python`; its Go port is go_emit.measured_go (parity-tested). A model
vector without a tail gives NaN for the block's components, and the evaluator says why.

    python -m evaluator.component_table            # rewrite evaluator/components_kernel.py
    python -m evaluator.component_table --check    # exit 1 if it is stale

The Go side is generated at emission time by go_emit.components_go from the same rows.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Row", "Helper", "Block", "BLOCKS", "MEASURED_BLOCK", "block_slots", "MODEL_FIELDS", "MODEL_INPUTS",
           "STEP_INPUTS", "BLOCK_INPUTS", "INTERMEDIATES", "COMPONENT_ROWS", "LATE_ROWS", "HELPERS", "KERNEL_PATH", "parse_formula",
           "split_conditional", "kernel_source"]


@dataclass(frozen=True)
class Row:
    name: str
    formula: str
    doc: str = ""


@dataclass(frozen=True)
class Helper:
    """A function a formula may call. `python` is "module:function" of a numba.njit function
    (imported by the generated kernel); `go` is the Go source of a method with the same
    arguments and result, with `{recv}` where the receiver type goes (the emitted type)."""
    name: str
    python: str
    go: str


@dataclass(frozen=True)
class Block:
    """Components computed together by one call per step: `python` is "module:function" of a
    numba function f(tables, P, D, n_prefill, n_decode, B, K, out) writing len(rows) values, with
    `tables` the model vector from len(MODEL_FIELDS) on; `go` the name of its Go method."""
    name: str
    python: str
    go: str
    rows: tuple[Row, ...]


# Per-model hardware + architecture vector, and the local name each entry is read into.
MODEL_INPUTS: tuple[tuple[str, str], ...] = (
    ("L", "layers"),
    ("h", "hidden"),
    ("nq", "n_heads"),
    ("nkv", "n_kv_heads"),
    ("hd", "head_dim"),
    ("ffn", "ffn"),
    ("n_exp", "n_experts"),
    ("top_k", "top_k"),
    ("vocab", "vocab"),
    ("tp", "tp"),
    ("flops", "peak_flops"),
    ("bw", "hbm_bw"),
    ("nvlink", "nvlink_bw"),
)
MODEL_FIELDS: tuple[str, ...] = tuple(field for _, field in MODEL_INPUTS)
# ctx_max: tokens of context the longest decoding request holds after this step (the
# simulator and BLIS know every request; a real step row or a grid state does not, and passes
# the running requests' mean K / B: no spread). The kernel-table blocks read the first six.
STEP_INPUTS: tuple[str, ...] = ("P", "D", "n_prefill", "n_decode", "B", "K", "ctx_max")
BLOCK_INPUTS: tuple[str, ...] = STEP_INPUTS[:6]

INTERMEDIATES: tuple[Row, ...] = (
    Row("attn_params", "h * (nq * hd) + 2.0 * h * (nkv * hd) + (nq * hd) * h"),
    Row("mlp_params", "3.0 * h * ffn"),
    Row("tokens", "P + D"),
    Row("k_flop", "top_k if n_exp > 1.0 else 1.0"),
    Row("active", "n_exp * (1.0 - (1.0 - top_k / n_exp) ** tokens) if n_exp > 1.0 else 1.0"),
    Row("flop_params", "L * (attn_params + k_flop * mlp_params)"),
    Row("us", "1e6"),
)

COMPONENT_ROWS: tuple[Row, ...] = (
    Row("t_prefill_gemm", "2.0 * P * flop_params / tp / flops * us",
        "prefill GEMM time (us): dense matmul FLOPs of the prefill tokens at peak bf16"),
    Row("t_prefill_attn", "4.0 * L * nq * hd * P * (P / n_prefill) / 2.0 / tp / flops * us if n_prefill > 0.0 else 0.0",
        "prefill attention time (us): causal attention FLOPs of the prefill chunks at peak"),
    Row("t_decode_gemm", "2.0 * D * flop_params / tp / flops * us",
        "decode GEMM time (us): matmul FLOPs of the decode tokens at peak"),
    Row("t_decode_kv", "K * 2.0 * L * nkv * hd * 2.0 / tp / bw * us",
        "decode KV-read time (us): bytes of all held KV cache at HBM bandwidth"),
    Row("t_weights",
        "2.0 * (L * (attn_params + active * mlp_params) + 2.0 * vocab * h) / tp / bw * us if tokens > 0.0 else 0.0",
        "weight-load time (us): bytes of the weights read this step at HBM bandwidth (MoE: experts hit)"),
    Row("t_allreduce", "2.0 * L * tokens * h * 2.0 * 2.0 * (tp - 1.0) / tp / nvlink * us if tp > 1.0 else 0.0",
        "TP all-reduce time (us): activation bytes over NVLink, 0 at TP=1"),
    Row("t_lm_head", "2.0 * (n_prefill + D) * vocab * h / tp / flops * us",
        "LM-head time (us): logits FLOPs for the sampled tokens at peak"),
    Row("P", "P", "prefill tokens scheduled this step"),
    Row("D", "D", "decode tokens scheduled this step (one per decoding request)"),
    Row("B", "B", "running batch size (requests in the running queue)"),
    Row("K", "K", "KV tokens held in GPU cache"),
    Row("n_prefill", "n_prefill", "requests with a prefill chunk this step"),
    Row("n_decode", "n_decode", "requests decoding this step"),
    Row("layers", "L", "transformer layers of the model"),
    Row("tp", "tp", "tensor-parallel degree"),
)

HELPERS: dict[str, Helper] = {}

# Appended after COMPONENT_ROWS, so earlier indices (and archived programs) keep their meaning.
MEASURED_BLOCK = Block("fill_measured", "evaluator.measured_kernel:fill_measured", "fillMeasured", (
    Row("t_gemm_measured", "", "GEMM time (us) from vLLM's measured bf16 GEMMs: QKV, O, MLP (router for MoE) "
                               "of every layer at T = P + D tokens, plus the LM head for the sampled rows"),
    Row("t_decode_attn_measured", "", "decode attention time (us) from vLLM's measured paged FlashAttention: "
                                      "batch D at mean context K / D, every layer"),
    Row("t_prefill_attn_measured", "", "prefill attention time (us) from measured FlashAttention: n_prefill "
                                       "chunks of P / n_prefill tokens attending to themselves, every layer"),
    Row("t_allreduce_measured", "", "TP all-reduce time (us) from vLLM's measured custom all-reduce: 2 per "
                                    "layer of T tokens; 0 at TP 1"),
    Row("t_moe_measured", "", "MoE expert time (us) from vLLM's measured fused MoE at T tokens; 0 for dense models"),
    Row("t_step_measured", "", "sum of the measured components: GPU time of the step's kernels, no fitted "
                               "constant (the real cycle adds ~30 us per layer plus CPU time)"),
))
BLOCKS: tuple[Block, ...] = (MEASURED_BLOCK,)

# Formula components appended after the blocks (indices of earlier components unchanged).
LATE_ROWS: tuple[Row, ...] = (
    Row("t_decode_kv_max", "n_decode * ctx_max * 2.0 * L * nkv * hd * 2.0 / tp / bw * us",
        "decode KV-read time (us) if every decoding request held the longest decoding context: what "
        "decode attention costs when the slowest request sets the step (one unit of work per request)"),
    Row("ctx_max", "ctx_max", "tokens of context held by the longest decoding request after this step "
                              "(K / n_decode where the batch's spread is unknown: real step rows)"),
    Row("t_decode_spread",
        "(n_decode * ctx_max - K) * 2.0 * L * nkv * hd * 2.0 / tp / bw * us if n_decode * ctx_max > K else 0.0",
        "decode attention's wait on the longest context (us): the KV read of every decoding request "
        "at the longest one's context beyond the KV actually held, at HBM bandwidth; 0 without spread "
        "(real step rows). Added to a step built on the mean context (t_decode_kv, t_step_measured)"),
)


def block_slots() -> list[tuple[Block, int]]:
    """(block, index of its first component) in component order."""
    out, at = [], len(COMPONENT_ROWS)
    for b in BLOCKS:
        out.append((b, at))
        at += len(b.rows)
    return out

KERNEL_PATH = Path(__file__).with_name("components_kernel.py")
_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.Constant, ast.Call, ast.IfExp,
            ast.Compare, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.Lt, ast.LtE, ast.Gt,
            ast.GtE, ast.Eq, ast.NotEq)


class TableError(ValueError):
    """A formula uses something the generators cannot translate identically."""


def parse_formula(row: Row, known: set[str]) -> ast.expr:
    """The formula's expression AST, checked against the table's small language."""
    try:
        tree = ast.parse(row.formula, mode="eval")
    except SyntaxError as e:
        raise TableError(f"{row.name}: {e.msg}") from e
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise TableError(f"{row.name}: {type(node).__name__} is not allowed in a formula")
        if isinstance(node, ast.Name) and node.id not in known and node.id not in HELPERS:
            raise TableError(f"{row.name}: {node.id!r} is neither an input, an earlier row nor a helper")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in HELPERS):
            raise TableError(f"{row.name}: only HELPERS may be called")
        if isinstance(node, ast.Constant) and type(node.value) not in (int, float):
            raise TableError(f"{row.name}: constant {node.value!r} is not a number")
        if isinstance(node, ast.IfExp) and node is not tree.body:
            raise TableError(f"{row.name}: a conditional is only allowed as the whole formula")
    return tree.body


def split_conditional(expr: ast.expr) -> tuple[ast.expr | None, ast.expr, ast.expr | None]:
    """(condition, value if true, value if false); condition None for a plain formula."""
    if isinstance(expr, ast.IfExp):
        return expr.test, expr.body, expr.orelse
    return None, expr, None


def checked_rows() -> list[tuple[Row, ast.expr, int | None]]:
    """(row, expression, component slot or None for an intermediate) in evaluation order,
    every formula validated; LATE_ROWS take the slots after the blocks'."""
    known = {local for local, _ in MODEL_INPUTS} | set(STEP_INPUTS)
    out = []
    late = len(COMPONENT_ROWS) + sum(len(b.rows) for b in BLOCKS)
    for rows, first in ((INTERMEDIATES, None), (COMPONENT_ROWS, 0), (LATE_ROWS, late)):
        for k, row in enumerate(rows):
            expr = parse_formula(row, known)
            out.append((row, expr, None if first is None else first + k))
            if first is None:
                known.add(row.name)
    return out


# ----------------------------------------------------------------- the Python kernel

_KERNEL_HEAD = '''\
"""fill_components, generated by `python -m evaluator.component_table` from its table; do not edit.

numba caches (cache=True) only functions defined in a real module, which is why this is a file.
"""
import math

import numba
'''


def _assignment(row: Row, expr: ast.expr, slot: int | None) -> list[str]:
    """The kernel lines that compute one row: into its component slot, or a local."""
    target = f"out[{slot}]" if slot is not None else row.name
    cond, yes, no = split_conditional(expr)
    if cond is None:
        return [f"    {target} = {ast.unparse(yes)}"]
    return [f"    if {ast.unparse(cond)}:", f"        {target} = {ast.unparse(yes)}",
            "    else:", f"        {target} = {ast.unparse(no)}"]


def kernel_source() -> str:
    """The text of evaluator/components_kernel.py."""
    lines = [_KERNEL_HEAD.rstrip("\n")]
    for h in HELPERS.values():
        module, func = h.python.split(":")
        lines.append(f"from {module} import {func} as {h.name}" if func != h.name else f"from {module} import {func}")
    for b in BLOCKS:
        module, func = b.python.split(":")
        lines.append(f"from {module} import {func}" + (f" as {b.name}" if func != b.name else ""))
    lines += ["", "", "@numba.njit(cache=True, fastmath=False, error_model=\"numpy\")",
              "def fill_components(model, " + ", ".join(STEP_INPUTS) + ", out):",
              '    """Write the components of one step into `out` (length N_COMPONENTS)."""']
    for i, (local, _) in enumerate(MODEL_INPUTS):
        lines.append(f"    {local} = model[{i}]")
    for row, expr, slot in checked_rows():
        lines += _assignment(row, expr, slot)
    n_model = len(MODEL_INPUTS)
    for b, at in block_slots():
        end = at + len(b.rows)
        lines += [f"    if model.shape[0] > {n_model}:",
                  f"        {b.name}(model[{n_model}:], " + ", ".join(BLOCK_INPUTS) + f", out[{at}:{end}])",
                  "    else:",
                  f"        for i in range({at}, {end}):",
                  "            out[i] = math.nan"]
    return "\n".join(lines + context_source()) + "\n"


CONTEXT_INPUTS: tuple[str, ...] = ("n_decode", "K", "ctx_max")


def context_source() -> list[str]:
    """Lines of `fill_context`: the LATE_ROWS alone (what reads ctx_max), for a step whose
    other components are known (the simulator's steady steps look those up by batch and KV).
    The same formulas as in fill_components, so the same values, bit for bit."""
    rows = checked_rows()
    late = [(row, expr, slot) for row, expr, slot in rows if row in LATE_ROWS]
    need = {n.id for _, expr, _ in late for n in ast.walk(expr) if isinstance(n, ast.Name)}
    inter = []
    for row, expr, slot in reversed(rows):
        if slot is None and row.name in need:
            inter.insert(0, (row, expr))
            need |= {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    other = need & (set(STEP_INPUTS) - set(CONTEXT_INPUTS))
    if other:
        raise TableError(f"LATE_ROWS read {sorted(other)}: fill_context has only {', '.join(CONTEXT_INPUTS)}")
    lines = ["", "", "@numba.njit(cache=True, fastmath=False, error_model=\"numpy\")",
             "def fill_context(model, " + ", ".join(CONTEXT_INPUTS) + ", out):",
             '    """Write the components that read ctx_max into `out`, as fill_components does."""']
    lines += [f"    {local} = model[{i}]" for i, (local, _) in enumerate(MODEL_INPUTS) if local in need]
    for row, expr, slot in [(r, e, None) for r, e in inter] + [(r, e, s) for r, e, s in late]:
        lines += _assignment(row, expr, slot)
    return lines


def main(argv: list[str]) -> int:
    src = kernel_source()
    if "--check" in argv:
        if KERNEL_PATH.read_text() != src:
            print(f"{KERNEL_PATH} is stale: run python -m evaluator.component_table", file=sys.stderr)
            return 1
        return 0
    KERNEL_PATH.write_text(src)
    print(f"wrote {KERNEL_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
