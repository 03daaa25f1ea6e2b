"""The 16 shared experiments replayed under server limits nobody measured (issue 30, item 1).

A seed program's constants are fitted on the data as it is (the experiments' own limits:
128 sequences, 2,048-token budget, their TP); then every experiment's measured request trace
is replayed with those constants under other vLLM settings, one change at a time:

  seqs32     max_num_seqs 32
  seqs256    max_num_seqs 256
  budget64   max_num_batched_tokens 64 (vLLM refuses a budget below max_num_seqs, so
             max_num_seqs is lowered to 64 with it: vllm/config/scheduler.py)
  budget8192 max_num_batched_tokens 8,192
  tp1        tensor parallelism 1 where the bf16 weights fit one 80 GB GPU with room for one
             max_model_len sequence of KV (KV blocks estimated as vLLM's 0.9 memory budget
             minus the weights); other models are left out of this row ("—")

Per experiment and setting: the predicted time per output token (ms, sum(e2e - ttft) /
sum(N - 1) over the requests that finished) and mean E2E (s, the fitted request overheads
added as the judge does), the simulated failed fraction (client timeout, 300 s), the mean
running batch and the preemptions, and a check of every recorded step: no negative count,
no more tokens than the budget, no more running requests than max_num_seqs ("bad states").

Run: .venv/bin/python benchmarks/limits_replay.py [--data DIR] [--seed roofline|measured] [--json]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time

import numpy as np

SCENARIOS = ("data", "seqs32", "seqs256", "budget64", "budget8192", "tp1")


def _change(e, name, gt, tables):
    """(experiment with the setting changed, None) or (None, why it is left out)."""
    from evaluator import kernels as kt
    from evaluator.data import estimate_kv_blocks
    from evaluator.model_configs import weight_bytes
    if name == "data":
        return e, None
    if name == "seqs32":
        return dataclasses.replace(e, max_num_seqs=32), None
    if name == "seqs256":
        return dataclasses.replace(e, max_num_seqs=256), None
    if name == "budget64":
        return dataclasses.replace(e, max_batched_tokens=64, max_num_seqs=min(e.max_num_seqs, 64)), None
    if name == "budget8192":
        return dataclasses.replace(e, max_batched_tokens=8192), None
    if name == "tp1":
        if e.tp == 1:
            return None, "already TP1"
        w = weight_bytes(e.arch) / 1e9
        kv = estimate_kv_blocks(e.arch, 1, e.block_size)
        if w >= 80.0 or kv * e.block_size < e.max_model_len:
            return None, f"weights {w:.0f} GB do not fit one 80 GB GPU with KV for one sequence"
        e1 = dataclasses.replace(e, tp=1, kv_blocks=kv)
        if e.kernels is not None and tables is not None:
            red = kt.reduce_model(tables, e.arch, 1, gt.hardware)
            e1.kernels, e1.kernel_notes = red.flat, list(red.notes)
        return e1, None
    raise ValueError(name)


def replay(e, ev, f, consts, overheads, wl):
    from evaluator.server_config import limit_error, sim_limits
    from evaluator.simulator import simulate
    bad = limit_error(e.max_num_seqs, e.max_batched_tokens, e.max_model_len, e.chunked_prefill, e.kv_blocks,
                      e.block_size)
    if bad is not None:
        return {"refused": f"{bad[0]} {bad[1]}"}
    r = simulate(f, consts, e.model_vec(ev.hw), wl, e.kv_blocks, e.max_num_seqs, e.max_batched_tokens,
                 e.block_size, record=True, **sim_limits(e))
    s = r.states
    P, D, B = s[:, 0], s[:, 1], s[:, 4]
    n_bad = int(((s[:, :6] < 0).any(axis=1) | (P + D > e.max_batched_tokens) | (B > e.max_num_seqs)).sum())
    o = overheads
    e2e = r.e2e_us + o.queueing_us + o.queueing_per_input_token_us * wl.prompt_len + o.output_token_us * wl.gen_len \
        + o.post_decode_us
    ttft = r.ttft_us + o.queueing_us + o.queueing_per_input_token_us * wl.prompt_len
    ok = ~r.aborted & (wl.gen_len >= 2)
    tok = float((e2e[ok] - ttft[ok]).sum() / (wl.gen_len[ok] - 1).sum()) / 1e3 if ok.any() else None
    return {"status": int(r.status), "steps": int(r.n_steps), "bad_states": n_bad,
            "per_token_ms": tok, "e2e_s": float(e2e[~r.aborted].mean()) / 1e6 if (~r.aborted).any() else None,
            "failed": float(r.aborted.mean()), "mean_batch": float(B.mean()) if len(B) else None,
            "mean_prefill": float(P[P > 0].mean()) if (P > 0).any() else None, "preemptions": int(r.n_preempted),
            "max_num_seqs": e.max_num_seqs, "budget": e.max_batched_tokens, "tp": e.tp, "kv_blocks": e.kv_blocks}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--seed", default="roofline", choices=("roofline", "measured"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from evaluator import kernels as kt
    from evaluator.data import load
    from evaluator.evaluate import Evaluator
    from evaluator.fitting import Overheads
    from evaluator.program import parse_program
    from seeds import seed_sources
    t0 = time.perf_counter()
    gt = load(a.data)
    ev = Evaluator(gt)
    prog = parse_program(seed_sources()[a.seed])
    res = ev.evaluate(prog)
    if not res.valid:
        print(f"error: the {a.seed} seed did not fit: {res.error}", file=sys.stderr)
        return 1
    f = prog.compiled()
    tables = kt.read_kernel_tables(gt.source) if a.seed == "measured" else None
    out = []
    for e in gt.experiments:
        consts = np.asarray(res.constants[e.model], np.float64)
        ovh = Overheads(**res.overheads[e.model])
        row = {"experiment": e.id, "model": e.model, "workload": e.workload}
        for name in SCENARIOS:
            e2, why = _change(e, name, gt, tables)
            row[name] = {"left_out": why} if e2 is None else replay(e2, ev, f, consts, ovh, ev.wl[e.id])
        out.append(row)
    secs = time.perf_counter() - t0
    if a.json:
        print(json.dumps({"seed": a.seed, "seconds": secs, "rows": out}, indent=1, allow_nan=False))
        return 0
    _print(out, a.seed, secs)
    return 0


def _fmt(v, spec):
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def _print(out, seed, secs):
    print(f"{seed} seed, constants fitted on the data's own limits; replayed on every request of each trace "
          f"({secs:.0f} s)")
    for name in SCENARIOS:
        print(f"\n== {name}: per-token ms / E2E s / failed % / mean batch / preemptions / bad states "
              f"(data -> {name})")
        bad_total = 0
        for row in out:
            base, x = row["data"], row[name]
            label = f"{row['model']}/{row['workload']}"
            if "left_out" in x or "refused" in x:
                print(f"  {label:26s} {x.get('left_out') or 'refused: ' + x['refused']}")
                continue
            bad_total += x["bad_states"]
            print(f"  {label:26s} tok {_fmt(base['per_token_ms'], '6.2f')} -> {_fmt(x['per_token_ms'], '6.2f')}  "
                  f"E2E {_fmt(base['e2e_s'], '7.2f')} -> {_fmt(x['e2e_s'], '7.2f')}  "
                  f"fail {100 * base['failed']:4.1f} -> {100 * x['failed']:4.1f}  "
                  f"B {_fmt(base['mean_batch'], '5.1f')} -> {_fmt(x['mean_batch'], '5.1f')}  "
                  f"pre {base['preemptions']} -> {x['preemptions']}  bad {x['bad_states']}"
                  + ("" if x["status"] == 0 else f"  status {x['status']}"))
        print(f"  bad states in {name}: {bad_total}")


if __name__ == "__main__":
    sys.exit(main())
