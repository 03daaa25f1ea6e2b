"""benchmarks/drop_workload.py: a ground-truth directory without one workload (a blind search).

The blind check of issue 29 (a run that never sees the long workload) is only as honest as this
directory: every other experiment's requests and steps as they were, none of the dropped one's.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from evaluator.data import load_ground_truth

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("drop_workload", ROOT / "benchmarks" / "drop_workload.py")
dw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dw)


def test_the_directory_holds_everything_but_the_workload(data_dir, tmp_path):
    out = tmp_path / "blind"
    assert dw.main(["--data", str(data_dir), "--drop", "reasoning", "--out", str(out)]) == 0
    full, blind = load_ground_truth(data_dir), load_ground_truth(out)
    kept = sorted(e.id for e in full.experiments if e.workload != "reasoning")
    assert sorted(e.id for e in blind.experiments) == kept and len(kept) < len(full.experiments)
    want = full.requests[full.requests.experiment_id.isin(kept)].reset_index(drop=True)
    pd.testing.assert_frame_equal(blind.requests.reset_index(drop=True), want)
    assert set(blind.steps.experiment_id) <= set(kept)
    assert len(blind.steps) == full.steps.experiment_id.isin(kept).sum()
    # the same experiments read the same way (kernels, configs, stages)
    by_id = {e.id: e for e in full.experiments}
    for e in blind.experiments:
        assert e.stages == by_id[e.id].stages and e.kv_blocks == by_id[e.id].kv_blocks


def test_a_workload_that_is_not_there_is_one_line(data_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        dw.main(["--data", str(data_dir), "--drop", "poetry", "--out", str(tmp_path / "x")])
    assert str(err.value).startswith("error: ") and "poetry" in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("")
    assert dw.main(["--data", str(data_dir), "--drop", "reasoning", "--out", str(tmp_path / "full")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
