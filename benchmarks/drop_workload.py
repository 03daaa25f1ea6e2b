"""A ground-truth directory without one workload, for a search that never sees it (issue 29).

Run: .venv/bin/python benchmarks/drop_workload.py --data ../shared/data --drop reasoning --out DIR
then: evolve run --budget 2000 --data DIR ... and score the hand-over on the whole data:
      benchmarks/regime_figures.py --data ../shared/data PROGRAM.py

The held-out regimes fit a program's constants without the long workload, but a run chooses
the program's *structure* on all of them, the long-decode regime included: its long-decode
figures are held out for the constants, not for the choice. A run on a directory without the
workload chooses blind; its hand-over's long-decode figures are then held out for both. The
directory links the experiments kept, the kernels, model configs and hardware, and writes the
request and step tables filtered to them (derived data: keep it out of the repository).

Measured 2026-11-28 (5b16c70, `--drop reasoning`, 2,000 proposals, 2 workers, seed 0; load 0.59
-> 1.82; 1101 s): the run on the 12 short experiments hands over #1468 (`t_step_measured +
max(t_decode_spread, C_T_LM_HEAD * (t_decode_spread + PER_LAYER * layers + C_B * sqrt(B))) + C_P *
P`; on the 12: LOWO 1.5%, LOMO worst model 2.7%, high load 1.7%, no held-out miss). On the 16
(regime_figures): codellama reasoning 46.8% E2E / 10.9% per token, 70b 22.8% / 6.8% with 48.7%
failed against 33.3%, 7b 87.6% against 84.8%, mixtral 0% against 68.6%; LOMO 8.4 / 8.9 / 9.4 /
1.7%, LOWO 1.0 / 2.0 / 1.5%. With --seed 1 (1293.8 s, load 0.76 -> 1.99) it hands over the seed
measured_per_layer (#3): codellama reasoning 67.9% / 15.9%, 70b 39.4% / 12.9% with 0% failed.
The runs that saw the reasoning workload hand over programs
7.2-14.9% off on codellama reasoning (docs/failed_requests.md): most of that is the choice.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.data import load_ground_truth  # noqa: E402

TABLES = {  # path -> reader/writer of a table keyed by experiment_id
    "requests/requests.parquet": (pd.read_parquet, lambda df, p: df.to_parquet(p, index=False)),
    "requests/replay_experiment_meta.csv": (pd.read_csv, lambda df, p: df.to_csv(p, index=False)),
    "steps/steps.parquet": (pd.read_parquet, lambda df, p: df.to_parquet(p, index=False)),
    "steps/step_durations_test.csv": (pd.read_csv, lambda df, p: df.to_csv(p, index=False)),
}
LINKED = ("hardware", "kernels", "model_configs", "PROVENANCE.md")


def drop_workload(data: Path, drop: str, out: Path) -> list[str]:
    """Write `out`: `data` without the experiments of workload `drop`; the kept experiment ids."""
    gt = load_ground_truth(data)
    kept = [e.id for e in gt.experiments if e.workload != drop]
    if len(kept) == len(gt.experiments):
        raise SystemExit(f"error: {data}: no experiment of workload {drop!r} "
                         f"(workloads: {', '.join(sorted({e.workload for e in gt.experiments}))})")
    if not kept:
        raise SystemExit(f"error: {data}: every experiment is of workload {drop!r}: nothing would be left")
    (out / "experiments").mkdir(parents=True, exist_ok=True)
    for exp in kept:
        link = out / "experiments" / exp
        if not link.exists():
            os.symlink((data / "experiments" / exp).resolve(), link)
    for name in LINKED:
        src, link = data / name, out / name
        if src.exists() and not link.exists():
            os.symlink(src.resolve(), link)
    for rel, (read, write) in TABLES.items():
        src = data / rel
        if not src.exists():
            continue
        df = read(src)
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        write(df[df["experiment_id"].isin(kept)], out / rel)
    return kept


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--drop", required=True, help="the workload to leave out, e.g. reasoning")
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    if a.out.exists() and any(a.out.iterdir()):
        print(f"error: {a.out}: not empty (write a new directory)", file=sys.stderr)
        return 2
    kept = drop_workload(a.data, a.drop, a.out)
    print(f"{a.out}: {len(kept)} experiments without workload {a.drop!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
