"""Speed of the BLIS tools on the full ground truth (132,000 requests, 12 experiments): the
TraceV2 export, the patch for an emitted model, and (when RESULTS_DIR holds BLIS results)
blis-compare. Targets: export < 10 s, patch < 0.5 s, compare < 15 s on this 2-core machine.

Run: .venv/bin/python benchmarks/blis_tools.py --data ../shared/data [--results RESULTS_DIR]
Measured 2026-11-23 (2 shared cores, load 6-8): export 1.9-5.5 s, patch 0.02 s, compare 5.9 s.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time

from evaluator.data import load
from evaluator.program import parse_program
from evolve.blis_compare import compare_rows, read_results
from evolve.blis_traces import export_blis_traces
from go_emit.blis_patch import blis_patch
from go_emit.emit import emit_go
from go_emit.names import model_aliases
from seeds import seed_sources

TARGETS_S = {"export": 10.0, "patch": 0.5, "compare": 15.0}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--results", default=None, help="an export-blis-traces directory after replay.sh")
    a = ap.parse_args()
    gt = load(a.data)
    took = {}
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        export_blis_traces(gt, tmp, a.data)
        took["export"] = time.perf_counter() - t
    prog = parse_program(seed_sources()["measured_per_layer"])
    vectors = {e.model: e.model_vec(gt.hardware) for e in gt.experiments}
    oh = {"queueing_us": 0.0, "queueing_per_input_token_us": 0.0, "output_token_us": 0.0, "post_decode_us": 0.0}
    code = emit_go(prog, {m: prog.initial_constants for m in vectors}, vectors, {m: oh for m in vectors},
                   aliases=model_aliases(gt))
    t = time.perf_counter()
    blis_patch(code)
    took["patch"] = time.perf_counter() - t
    if a.results:
        t = time.perf_counter()
        compare_rows(gt, read_results(a.results))
        took["compare"] = time.perf_counter() - t
    slow = []
    for k, v in took.items():
        print(f"{k:8s} {v:7.2f} s   (target < {TARGETS_S[k]:g} s)")
        if v > TARGETS_S[k]:
            slow.append(k)
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
