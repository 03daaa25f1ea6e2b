"""The three baselines on a run's data, fitted once and kept in the archive as a run of their own.

`evolve show`, `evolve report` and the web UI compare a program with the baselines on the same
data; refitting them (tens of seconds) on every view would be slow, so a writer that asks
stores them under the run id "baselines-<data fingerprint>" and later calls read them back. A
viewer (read-only Archive: show, report, ui) never writes: it reads them if stored, else
computes them.
"""
from __future__ import annotations

from evaluator.baselines import BASELINES, baseline_program, evaluate_baseline
from evaluator.data import load
from evaluator.evaluate import Evaluator
from evaluator.records import Evaluation
from evolve.archive import Archive

RUN_PREFIX = "baselines-"


def stored_baselines(archive: Archive, run_id: str | None) -> dict[str, Evaluation]:
    """{baseline name: Evaluation} on the data of `run_id` (default: the latest search run),
    evaluated and stored on first use."""
    run = archive.get_run(run_id) if run_id else None
    if run is None:
        runs = [r for r in archive.runs() if not r["id"].startswith(RUN_PREFIX)]
        run = runs[-1] if runs else None
    data = ((run or {}).get("config") or {}).get("data")
    gt = load(data)
    bid = f"{RUN_PREFIX}{gt.fingerprint()}"
    if archive.get_run(bid) is None and getattr(archive, "readonly", False):
        ev = Evaluator(gt)  # a viewer's archive: computed, never stored
        return {name: evaluate_baseline(ev, name) for name in BASELINES}
    if archive.get_run(bid) is None:
        ev = Evaluator(gt)
        archive.start_run({"data": data, "kind": "baselines"}, 0, gt.fingerprint(), len(BASELINES), run_id=bid)
        for name in BASELINES:
            archive.add_candidate(bid, baseline_program(name), operator=f"baseline:{name}",
                                  evaluation=evaluate_baseline(ev, name))
        archive.finish_run(bid)
    out = {}
    for rec in archive.programs(bid):
        ev = archive.evaluation(rec["id"])
        if ev is not None:
            out[rec["operator"].split(":", 1)[1]] = ev
    return out
