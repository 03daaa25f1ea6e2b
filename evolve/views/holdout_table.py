"""Held-out errors beside the in-sample ones, as rich tables and plain rows.

Read from `Evaluation.holdout` / an archive record's "holdout" (evaluator.holdout): per kind,
mean and worst E2E, mean TTFT and per-token error over its held-out stages, and per split the
mean E2E error, so a reader sees which workload, model or load the program fails to reach.
Records written before the held-out splits existed have none: every cell is then "-".
"""
from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from evaluator.holdout import KIND_LABEL, KINDS, PREFIX, TITLE
from evaluator.objectives import BY_NAME, REGIMES
from evolve.views.format import fmt_err, fmt_objective

OVERLOAD_LABEL = KIND_LABEL["overload"]  # the failed-fraction error of the held-out overloaded stages


def _get(rec, key: str):
    return rec.get(key) if isinstance(rec, Mapping) else getattr(rec, key, None)


def holdout_summary(rec) -> list[dict]:
    """One row per split kind: kind, title, e2e, e2e_worst, ttft, itl (None where missing),
    and the splits that could not be scored ({split: why})."""
    blocks = _get(rec, "holdout") or {}
    objectives = _get(rec, "objectives") or {}
    out = [{"kind": "in-sample", "title": "time split (last 30% of each stage)",
            "e2e": objectives.get("e2e_mean"), "e2e_worst": objectives.get("e2e_worst"),
            "ttft": objectives.get("ttft_mean"), "itl": objectives.get("itl_mean"), "errors": {}}]
    for kind in KINDS:
        b = blocks.get(kind) or {}
        o, p = b.get("objectives") or {}, PREFIX[kind]
        out.append({"kind": KIND_LABEL[kind], "title": TITLE[kind], "e2e": o.get(f"{p}_e2e"),
                    "e2e_worst": o.get(f"{p}_e2e_worst"), "ttft": o.get(f"{p}_ttft"), "itl": o.get(f"{p}_itl"),
                    "errors": dict(b.get("errors") or {})})
    if "overload_fail" in objectives:  # failed fraction, not latency: its error sits in the E2E column
        out.append({"kind": OVERLOAD_LABEL, "title": "failed fraction of the held-out overloaded stages (points/100)",
                    "e2e": objectives.get("overload_fail"), "e2e_worst": None, "ttft": None, "itl": None,
                    "errors": {}})
    return out


def split_errors(rec) -> dict[str, float]:
    """Mean E2E error per split label ("model:llama-2-7b", "load", ...), in kind order."""
    blocks = _get(rec, "holdout") or {}
    out: dict[str, float] = {}
    for kind in KINDS:
        rows = (blocks.get(kind) or {}).get("rows") or []
        by: dict[str, list[float]] = {}
        for r in rows:
            if r.get("e2e_err") is not None:  # a stage that mostly failed has no latency error
                by.setdefault(r["split"], []).append(r["e2e_err"])
        out.update({k: sum(v) / len(v) for k, v in by.items()})
        for label in (blocks.get(kind) or {}).get("errors") or {}:
            out[label] = float("inf")
    return out


def holdout_table(named: Mapping[str, object], title: str = "Held-out errors (mean E2E / worst E2E / TTFT / ITL)") -> Table:
    """Programs (name -> Evaluation or archive record) side by side, one row per split kind."""
    t = Table(title=title)
    t.add_column("split")
    for name in named:
        t.add_column(str(name), justify="right")
    summaries = {n: {row["kind"]: row for row in holdout_summary(r)} for n, r in named.items()}
    kinds = ["in-sample", *(KIND_LABEL[k] for k in KINDS)]
    if any(OVERLOAD_LABEL in v for v in summaries.values()):
        kinds.append(OVERLOAD_LABEL)
    empty = {"e2e": None, "e2e_worst": None, "ttft": None, "itl": None, "errors": {}}
    for kind in kinds:
        cells = []
        for n in named:
            row = summaries[n].get(kind, empty)
            cell = " / ".join(fmt_err(row[k]) for k in ("e2e", "e2e_worst", "ttft", "itl"))
            if row["errors"]:
                cell += f"\n(invalid on {', '.join(sorted(row['errors']))})"
            cells.append(cell)
        t.add_row(kind, *cells)
    return t


def split_table(named: Mapping[str, object]) -> Table:
    """Mean E2E error per held-out split, programs side by side."""
    per = {n: split_errors(r) for n, r in named.items()}
    labels = list(dict.fromkeys(k for v in per.values() for k in v))
    t = Table(title="Mean E2E error per held-out split")
    t.add_column("held out")
    for n in named:
        t.add_column(str(n), justify="right")
    for label in labels:
        t.add_row(label, *(fmt_err(per[n].get(label)) for n in named))
    return t


STARTS_LABEL = {"e2e_mean": "in-sample E2E", **{f"{PREFIX[k]}_e2e": KIND_LABEL[k] for k in KINDS},
                "overload_fail": f"{OVERLOAD_LABEL} (failed fraction)"}


def starts_table(spread: Mapping[str, Mapping], n_starts: int) -> Table:
    """Each regime's error from the declared constants and its range over the fit starts
    (`evaluator.fit_starts.spread`): a wide range says the data does not pin the figure down."""
    t = Table(title=f"Fitted from {n_starts} starts (declared constants, then seeded log-normal multiples)")
    for col in ("regime", "declared", "lowest", "highest", "starts scored"):
        t.add_column(col, justify="left" if col == "regime" else "right")
    for key, row in spread.items():
        t.add_row(STARTS_LABEL.get(key, key), *(fmt_objective(key, row[c]) for c in ("declared", "low", "high")),
                  f"{row['n_valid']}/{n_starts}")
    return t


def starts_text(fit_starts: Mapping) -> str:
    """One line: the held-out regimes of a program the run's hand-over weighed
    (`evolve.handover`), each as its range over the fit starts (one figure where every start
    agreed within 0.05 points)."""
    sp = fit_starts.get("spread") or {}
    parts = []
    for k in REGIMES:
        row = sp.get(k) or {}
        lo, hi = row.get("low"), row.get("high")
        if lo is None or hi is None:
            continue
        parts.append(f"{BY_NAME[k].label} {fmt_objective(k, lo)}"
                     + ("" if abs(hi - lo) < 5e-4 else f" to {fmt_objective(k, hi)}"))
    n_valid = max((r.get("n_valid", 0) for r in sp.values()), default=0)
    return (f"fitted from {fit_starts.get('starts')} start points ({n_valid} scored), lowest to highest: "
            + ", ".join(parts))
