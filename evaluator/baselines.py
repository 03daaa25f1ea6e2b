"""The three baselines of docs/architecture.md ("Baselines"), scored through the same evaluator.

- blackbox: BLIS's 3-coefficient model b0 + b1*P + b2*D, fitted per model.
- roofline: uncalibrated: BLIS's roofline constants (hardware_config.json: bandwidth
  efficiency 0.82, 100 us per layer), nothing fitted, no request overheads.
- linear_physics: a fitted linear combination of the components (BLIS trained-physics shape).
"""
from __future__ import annotations

from evaluator.blis_models import BLACKBOX_SOURCE, ROOFLINE_SOURCE
from evaluator.evaluate import Evaluator
from evaluator.program import Program, parse_program
from evaluator.records import Evaluation
from seeds import seed_sources


BASELINES = ("blackbox", "roofline", "linear_physics")


def baseline_program(name: str) -> Program:
    if name == "roofline":
        return parse_program(ROOFLINE_SOURCE)
    if name == "blackbox":
        return parse_program(BLACKBOX_SOURCE)
    return parse_program(seed_sources()[name])


def evaluate_baseline(ev: Evaluator, name: str) -> Evaluation:
    prog = baseline_program(name)
    if name == "roofline":
        zero = {"queueing_us": 0.0, "queueing_per_input_token_us": 0.0, "output_token_us": 0.0,
                "post_decode_us": 0.0}
        return ev.evaluate(prog, fit=False, overheads={m: dict(zero) for m in ev.gt.models})
    return ev.evaluate(prog)


def run_baselines(ev: Evaluator) -> dict[str, Evaluation]:
    return {name: evaluate_baseline(ev, name) for name in BASELINES}


def baseline_records(results: dict[str, Evaluation]) -> list[dict]:
    """Long format for --json: experiment, stage, baseline, metric, value."""
    out = []
    for name, ev in results.items():
        for r in ev.rows:
            for metric in ("e2e_err", "ttft_err", "itl_err", "meas_fail", "pred_fail", "fail_err_pts"):
                out.append({"experiment": r["experiment"], "stage": r["stage"], "baseline": name,
                            "metric": metric, "value": r.get(metric)})
        for exp, s in ev.steps.items():
            out.append({"experiment": exp, "stage": "all", "baseline": name, "metric": "step_mape",
                        "value": s["step_mape"]})
        for k, v in ev.objectives.items():
            out.append({"experiment": "mean", "stage": "all", "baseline": name, "metric": k, "value": v})
        if not ev.valid:
            out.append({"experiment": "all", "stage": "all", "baseline": name, "metric": "invalid",
                        "value": ev.error})
    return out
