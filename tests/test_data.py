"""Ground-truth reader: real data, embedded default, validation errors naming file and field."""
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from evaluator.data import DataError, build_default_table, load_default, load_default_table, load_ground_truth


def test_reads_all_sixteen_experiments(gt):
    assert len(gt.experiments) == 16
    assert gt.models == ["codellama-34b", "llama-2-70b", "llama-2-7b", "mixtral-8x7b"]
    assert sorted({e.workload for e in gt.experiments}) == ["codegen", "general", "reasoning", "roleplay"]
    assert len(gt.requests) == 151_200
    assert int(gt.requests["has_error"].sum()) == 4_068 + 1_600 + 3_294 + 4
    assert len(gt.steps) == 20_112
    e = gt.experiment("20260217-202857-llama-2-70b-tp4-general")
    assert (e.tp, e.kv_blocks, e.num_groups, e.prompt_pool) == (4, 31356, 10, 100)
    assert [s.rate for s in e.stages] == [8.0, 20.0]
    assert e.stages[1].start_s == 600.0


def test_measured_means_match_summaries(gt):
    # requests.parquet means equal the stage summaries (PROVENANCE); E2E to 1e-6 s
    e = gt.experiment("20260218-150304-codellama-34b-tp2-general")
    assert e.stages[0].e2e_s == pytest.approx(3.694, abs=5e-4)
    assert e.stages[1].ttft_s == pytest.approx(0.0538, abs=5e-4)


def test_per_token_time_relation_reproduces_reported_itl(gt):
    """True per-token time from requests vs inference-perf's reported ITL: (2N+1)/(N-1)."""
    from evaluator.data import per_token_from_reported
    for e in gt.experiments:
        for s in e.stages:
            assert per_token_from_reported(s.reported_itl_s, e.generated_len) == pytest.approx(s.itl_s, rel=2e-3)


def test_embedded_default_regenerates_from_shared_data(gt):
    from evaluator.served_shapes import default_table
    table = default_table(gt)
    assert table == json.loads(json.dumps(load_default_table()))
    # the measured deployments' kernel tables, and each shipped config's and data model's at every
    # TP where it fits (70B from TP 2, 8x22B from TP 4) and its heads divide (Qwen2.5-7B's 28
    # query heads: not TP 8)
    measured = build_default_table(gt)["kernels"]
    assert set(measured) == {f"{e.model}@tp{e.tp}" for e in gt.experiments}
    fits = (("llama-3.1-70b", (2, 4, 8)), ("llama-3.1-8b", (1, 2, 4, 8)), ("mistral-nemo-instruct-2407", (1, 2, 4, 8)),
            ("mixtral-8x22b", (4, 8)), ("qwen2.5-7b", (1, 2, 4)), ("codellama-34b", (1, 2, 4, 8)),
            ("llama-2-70b", (2, 4, 8)), ("llama-2-7b", (1, 2, 4, 8)), ("mixtral-8x7b", (2, 4, 8)))
    assert set(table["kernels"]) == {f"{m}@tp{tp}" for m, tps in fits for tp in tps}
    d = load_default()
    assert d.mode == "spec" and len(d.experiments) == 16


def _copy(data_dir, tmp_path):
    dst = tmp_path / "data"
    shutil.copytree(data_dir, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def test_missing_experiments_dir(tmp_path):
    with pytest.raises(DataError, match="experiments"):
        load_ground_truth(tmp_path)


def test_malformed_stage_file_names_file_and_field(data_dir, tmp_path):
    dst = _copy(data_dir, tmp_path)
    f = dst / "experiments/20260217-202857-llama-2-70b-tp4-general/stage_1_lifecycle_metrics.json"
    d = json.loads(f.read_text())
    del d["successes"]["latency"]["time_to_first_token"]
    f.write_text(json.dumps(d))
    with pytest.raises(DataError) as e:
        load_ground_truth(dst)
    assert "stage_1_lifecycle_metrics.json" in str(e.value)
    assert "successes.latency.time_to_first_token.mean" in str(e.value)


def test_malformed_requests_row(data_dir, tmp_path):
    dst = _copy(data_dir, tmp_path)
    p = dst / "requests/requests.parquet"
    df = pd.read_parquet(p)
    df.loc[5, "e2e_s"] = df.loc[5, "ttft_s"] - 1.0
    df.to_parquet(p)
    with pytest.raises(DataError, match="e2e < ttft"):
        load_ground_truth(dst)


def test_garbage_yaml(data_dir, tmp_path):
    dst = _copy(data_dir, tmp_path)
    (dst / "experiments/20260217-202857-llama-2-70b-tp4-general/profile.yaml").write_text("{{{ not yaml")
    with pytest.raises(DataError, match="profile.yaml"):
        load_ground_truth(dst)


def test_spec_mode_without_requests_or_steps(data_dir, tmp_path):
    dst = _copy(data_dir, tmp_path)
    shutil.rmtree(dst / "requests")
    shutil.rmtree(dst / "steps")
    g = load_ground_truth(dst)
    assert g.mode == "spec" and g.steps is None
    e = g.experiment("20260217-231439-llama-2-7b-tp1-general")
    assert 5000 < e.kv_blocks < 10000  # estimated from memory when the meta file is absent
    assert np.isfinite(e.stages[1].itl_s)
