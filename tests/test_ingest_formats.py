"""`evolve ingest` on the files people have: guidellm reports, `vllm bench serve` results, upstream
vLLM OTEL request spans, and today's inference-perf lifecycle + fork step traces, each converted
into the whole ground-truth layout and read back with load_ground_truth.

Fixtures: tests/fixtures/ingest_formats/ (make_formats.py there; every expected number below is
hand-computed from its REQUESTS table) and tests/fixtures/ingest/ (today's formats).
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evaluator.data import estimate_kv_blocks, load_ground_truth
from evaluator.ingest import IngestError, detect_format, ingest_run
from evaluator.model_configs import load_arch

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures" / "ingest_formats"
OLD = HERE / "fixtures" / "ingest"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ARRIVALS_US = [0, 400_000, 900_000, 1_300_000, 2_000_000, 2_250_000, 2_500_000, 2_750_000]

# hand-computed from make_formats.REQUESTS (request 3 failed)
E2E_01 = (1.33 + 0.67 + 2.07) / 3
TTFT_01 = (0.05 + 0.04 + 0.08) / 3
ITL_01 = (1.28 + 0.63 + 1.99) / (127 + 63 + 199)
E2E_ALL = (1.33 + 0.67 + 2.07 + 1.05 + 0.17 + 2.67 + 0.54) / 7
TTFT_ALL = (0.05 + 0.04 + 0.08 + 0.06 + 0.02 + 0.12 + 0.05) / 7
ITL_ALL = (1.28 + 0.63 + 1.99 + 0.99 + 0.15 + 2.55 + 0.49) / (127 + 63 + 199 + 99 + 15 + 255 + 49)


def run(tmp_path, *files, exp="exp-1", **kw):
    out = tmp_path / "gt"
    lines = ingest_run([str(f) for f in files], out, exp, **kw)
    return out, lines, load_ground_truth(out)


def test_detect_format():
    assert detect_format(FIX / "guidellm_v05.json") == "guidellm"
    assert detect_format(FIX / "guidellm_v03.json") == "guidellm"
    assert detect_format(FIX / "vllm_bench.json") == "vllm-bench"
    assert detect_format(FIX / "vllm_bench_old.json") == "vllm-bench"
    assert detect_format(FIX / "otel_requests.json") == "otel"
    assert detect_format(OLD / "traces_valid.json") == "otel"
    assert detect_format(OLD / "lifecycle_valid.json") == "inference-perf"


def test_guidellm_current_report(tmp_path):
    out, lines, gt = run(tmp_path, FIX / "guidellm_v05.json")
    (e,) = gt.experiments
    assert e.model_id == MODEL and e.tp == 1 and e.max_num_seqs == 1024 and e.max_batched_tokens == 8192
    assert e.arch == load_arch(MODEL)
    assert e.kv_blocks == estimate_kv_blocks(load_arch(MODEL), 1)
    assert (out / "model_configs" / "Llama-3.1-8B-Instruct" / "config.json").exists()
    # one stage per benchmark: poisson 2.5/s from 0 to the next benchmark's first arrival (2.0 s),
    # then 4/s over the 5 arrivals 2.0..2.9 s (0.9 s span * 5/4)
    assert [(s.rate, s.duration_s, s.start_s) for s in e.stages] == [(2.5, 2.0, 0.0),
                                                                      (4.0, pytest.approx(1.125), 2.0)]
    req = gt.requests
    assert list(req["arrival_time_us"]) == ARRIVALS_US + [2_900_000]
    assert list(req["has_error"]) == [False] * 3 + [True] + [False] * 4 + [True]  # errored, incomplete
    assert req.loc[3, "input_tokens"] == 256 and math.isnan(req.loc[3, "ttft_s"])
    s0, s1 = e.stages
    assert (s0.n_requests, s0.n_failed, s1.n_requests, s1.n_failed) == (3, 1, 4, 1)
    assert s0.e2e_s == pytest.approx(E2E_01) and s0.ttft_s == pytest.approx(TTFT_01)
    assert s0.itl_s == pytest.approx(ITL_01)
    assert s1.e2e_s == pytest.approx(1.1075) and s1.ttft_s == pytest.approx(0.0625)
    assert s1.itl_s == pytest.approx(4.18 / 418)
    text = "\n".join(lines)
    assert "max_num_seqs=1024" in text and "kv_blocks_total_gpu=" in text and "tensor_parallelism=1" in text
    assert "scores E2E, TTFT and ITL only" in text
    assert gt.steps is None


def test_stage_files_round_trip_in_spec_mode(tmp_path):
    """Without requests/ the evaluator reads the stage files: they give the same means back."""
    out, _, gt = run(tmp_path, FIX / "guidellm_v05.json")
    (out / "requests" / "requests.parquet").unlink()
    spec = load_ground_truth(out)
    for a, b in zip(gt.experiments[0].stages, spec.experiments[0].stages):
        assert (b.e2e_s, b.ttft_s, b.n_requests) == (pytest.approx(a.e2e_s), pytest.approx(a.ttft_s), a.n_requests)
        assert b.itl_s == pytest.approx(a.itl_s)


def test_guidellm_v03_report(tmp_path):
    _, _, gt = run(tmp_path, FIX / "guidellm_v03.json")
    (e,) = gt.experiments
    assert [(s.rate, s.duration_s) for s in e.stages] == [(3.0, pytest.approx(2.75 * 8 / 7))]
    assert list(gt.requests["arrival_time_us"]) == ARRIVALS_US
    s = e.stages[0]
    assert (s.n_requests, s.n_failed) == (7, 1)
    assert (s.e2e_s, s.ttft_s, s.itl_s) == (pytest.approx(E2E_ALL), pytest.approx(TTFT_ALL), pytest.approx(ITL_ALL))


def test_vllm_bench_detailed(tmp_path):
    out, lines, gt = run(tmp_path, FIX / "vllm_bench.json")
    (e,) = gt.experiments
    assert [(s.rate, s.duration_s) for s in e.stages] == [(4.0, 3.5)]
    req = gt.requests
    assert list(req["arrival_time_us"]) == ARRIVALS_US
    assert req.loc[3, "has_error"] and req.loc[3, "input_tokens"] == 256 and math.isnan(req.loc[3, "e2e_s"])
    s = e.stages[0]
    assert (s.e2e_s, s.ttft_s, s.itl_s) == (pytest.approx(E2E_ALL), pytest.approx(TTFT_ALL), pytest.approx(ITL_ALL))
    assert e.request_timeout_s == 6 * 3600  # vllm bench's aiohttp timeout
    assert "request_timeout" not in [x for x in lines if x.startswith("defaults")][0]


def test_vllm_bench_without_start_times(tmp_path):
    _, lines, gt = run(tmp_path, FIX / "vllm_bench_old.json")
    assert list(gt.requests["arrival_time_us"]) == [i * 250_000 for i in range(8)]  # 1 / 4 req/s
    assert any("arrivals synthesised every 1/request_rate = 0.25 s" in x for x in lines)
    s = gt.experiments[0].stages[0]
    assert s.e2e_s == pytest.approx(E2E_ALL)  # ttft + sum(itls) without latencies


def test_upstream_request_spans(tmp_path):
    _, lines, gt = run(tmp_path, FIX / "otel_requests.json")
    (e,) = gt.experiments
    assert gt.steps is None
    assert any("scores E2E, TTFT and ITL only" in x for x in lines)
    req = gt.requests
    assert list(req["arrival_time_us"]) == ARRIVALS_US
    assert req.loc[3, "has_error"] and req.loc[3, "input_tokens"] == 256  # finish reason abort
    s = e.stages[0]
    assert (s.e2e_s, s.ttft_s, s.itl_s) == (pytest.approx(E2E_ALL), pytest.approx(TTFT_ALL), pytest.approx(ITL_ALL))
    assert s.rate == pytest.approx(8 / (2.75 * 8 / 7))


def test_todays_formats_through_the_whole_layout(tmp_path):
    out, lines, gt = run(tmp_path, OLD / "lifecycle_valid.json", OLD / "traces_valid.json",
                         model="meta-llama/Llama-2-7b-hf", tp=1, max_num_seqs=128, max_num_batched_tokens=2048)
    (e,) = gt.experiments
    assert e.model == "llama-2-7b" and e.max_num_seqs == 128 and e.max_batched_tokens == 2048
    assert gt.steps is not None and len(gt.steps) > 0 and set(gt.steps["experiment_id"]) == {"exp-1"}
    assert len(gt.requests) > 0
    d = [x for x in lines if x.startswith("defaults")][0]
    assert "max_num_seqs" not in d and "tensor_parallelism" not in d and "block_size=16" in d
    assert not any("scores E2E, TTFT and ITL only" in x for x in lines)
    # the one-token request (sent at 1002.0 s, its only timestamp 1002.9 s): the TTFT the client saw
    assert gt.requests.loc[4, "ttft_s"] == pytest.approx(0.9)
    assert any("1 successful request(s) with fewer than two token timestamps" in x for x in lines)


def test_finish_reasons_as_one_json_string(tmp_path):
    def mutate(span, attrs):
        attrs["gen_ai.response.finish_reasons"]["value"] = {"stringValue": '["abort"]'}
    p = tmp_path / "traces.json"
    p.write_text(_span_lines(mutate))
    _, _, gt = run(tmp_path, p)
    assert list(gt.requests["has_error"]) == [False, True, False, True, False, False, False, False]


def test_given_settings_and_model_config(tmp_path):
    from evaluator.model_configs import shipped_config_path
    out, lines, gt = run(tmp_path, FIX / "vllm_bench.json", model="acme/my-nemo",
                         model_config=shipped_config_path("Mistral-Nemo-Instruct-2407"), tp=2, kv_blocks=5000,
                         block_size=32)
    (e,) = gt.experiments
    assert (e.model_id, e.tp, e.kv_blocks, e.block_size) == ("acme/my-nemo", 2, 5000, 32)
    assert e.arch["head_dim"] == 128
    assert (out / "model_configs" / "my-nemo" / "config.json").exists()
    cfg = yaml.safe_load((out / "experiments" / "exp-1" / "exp-config.yaml").read_text())
    assert cfg["kv_blocks_total_gpu"] == 5000 and cfg["tensor_parallelism"] == 2


def test_reingest_replaces_and_second_experiment_adds(tmp_path):
    out, _, _ = run(tmp_path, FIX / "vllm_bench.json", exp="a")
    run(tmp_path, FIX / "vllm_bench.json", exp="a")
    ingest_run([FIX / "otel_requests.json"], out, "b")
    gt = load_ground_truth(out)
    assert [e.id for e in gt.experiments] == ["a", "b"]
    assert gt.requests.groupby("experiment_id").size().to_dict() == {"a": 8, "b": 8}


def test_unknown_model_and_missing_model(tmp_path):
    with pytest.raises(IngestError) as ei:
        run(tmp_path, FIX / "vllm_bench.json", model="nobody/unknown-13b")
    assert ei.value.field == "model" and "--model-config" in str(ei.value) and "\n" not in str(ei.value)
    obj = json.loads((FIX / "vllm_bench.json").read_text())
    del obj["model_id"]
    p = tmp_path / "nomodel.json"
    p.write_text(json.dumps(obj))
    with pytest.raises(IngestError, match="field 'model'.*--model"):
        run(tmp_path, p)


def test_heads_that_do_not_split_are_one_line(tmp_path):
    with pytest.raises(IngestError) as ei:
        run(tmp_path, FIX / "vllm_bench.json", model="Qwen/Qwen2.5-7B-Instruct", tp=8)
    assert "TP 8 does not divide num_attention_heads 28" in str(ei.value) and "\n" not in str(ei.value)
    assert not (tmp_path / "gt").exists()


def test_bad_step_trace_beside_good_requests_writes_nothing(tmp_path):
    with pytest.raises(IngestError) as ei:
        run(tmp_path, FIX / "vllm_bench.json", OLD / "traces_truncated.json")
    assert ei.value.field == "<json>" and not (tmp_path / "gt").exists()


# ---------------------------------------------------------------- malformed input: one line naming the field

def _mutated(tmp_path, name, mutate, dump=lambda o: json.dumps(o, indent=2)):
    obj = json.loads((FIX / name).read_text())
    mutate(obj)
    p = tmp_path / name
    p.write_text(dump(obj))
    return p


def _expect(tmp_path, path, field, words):
    with pytest.raises(IngestError) as ei:
        ingest_run([path], tmp_path / "gt", "x")
    msg = str(ei.value)
    assert "\n" not in msg and str(path) in msg
    assert ei.value.field == field, msg
    assert words in msg, msg
    assert not (tmp_path / "gt").exists()  # nothing half-written


def _gl_req(o, status="successful", i=0, b=0):
    return o["benchmarks"][b]["requests"][status][i]


GUIDELLM_BAD = [
    ("no benchmarks", lambda o: o.update(benchmarks=[]), "benchmarks", "non-empty array"),
    ("requests not saved", lambda o: o["benchmarks"][0].pop("requests"), "benchmarks[0].requests", "missing"),
    ("no start", lambda o: [_gl_req(o)["info"]["timings"].pop("request_start"), _gl_req(o).pop("request_start_time"),
                            _gl_req(o)["info"]["timings"].pop("resolve_start")],
     "benchmarks[0].requests.successful[0].info.timings.request_start", "missing required field"),
    ("first token after end", lambda o: _gl_req(o)["info"]["timings"].update(first_token_iteration=1772000009.0),
     "benchmarks[0].requests.successful[0].first_token", "e2e < ttft"),
    ("prompt tokens a string", lambda o: _gl_req(o).update(prompt_tokens="512"),
     "benchmarks[0].requests.successful[0].prompt_tokens", "must be an integer"),
    ("end before start", lambda o: [_gl_req(o)["info"]["timings"].update(request_end=1771999999.0)],
     "benchmarks[0].requests.successful[0].end", "negative duration"),
    ("rate not a number", lambda o: o["benchmarks"][1]["config"]["strategy"].update(rate="fast"),
     "benchmarks[1].config.strategy.rate", "must be a number"),
]


@pytest.mark.parametrize("label, mutate, field, words", GUIDELLM_BAD, ids=[b[0] for b in GUIDELLM_BAD])
def test_malformed_guidellm(tmp_path, label, mutate, field, words):
    _expect(tmp_path, _mutated(tmp_path, "guidellm_v05.json", mutate), field, words)


def test_truncated_guidellm(tmp_path):
    p = tmp_path / "guidellm.json"
    p.write_text((FIX / "guidellm_v05.json").read_text()[:5000])
    _expect(tmp_path, p, "<json>", "truncated")


VLLM_BAD = [
    ("no ttfts", lambda o: o.pop("ttfts"), "ttfts", "--save-detailed"),
    ("length mismatch", lambda o: o["output_lens"].pop(), "output_lens", "7 entries, input_lens has 8"),
    ("error not a string", lambda o: o["errors"].__setitem__(2, 5), "errors[2]", "must be a string"),
    ("negative ttft", lambda o: o["ttfts"].__setitem__(1, -0.5), "ttfts[1]", ">= 0"),
    ("bad rate", lambda o: o.update(request_rate="fast"), "request_rate", "positive number"),
    ("latency below ttft", lambda o: o["latencies"].__setitem__(0, 0.01), "latencies[0]", "e2e < ttft"),
    ("no duration", lambda o: o.pop("duration"), "duration", "missing required field"),
    ("itl not numbers", lambda o: o["itls"].__setitem__(4, ["x"]), "itls[4]", "array of finite numbers"),
]


@pytest.mark.parametrize("label, mutate, field, words", VLLM_BAD, ids=[b[0] for b in VLLM_BAD])
def test_malformed_vllm_bench(tmp_path, label, mutate, field, words):
    _expect(tmp_path, _mutated(tmp_path, "vllm_bench.json", mutate, json.dumps), field, words)


def _span_lines(mutate):
    lines = [json.loads(x) for x in (FIX / "otel_requests.json").read_text().splitlines()]
    span = lines[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][1]
    attrs = {a["key"]: a for a in span["attributes"]}
    mutate(span, attrs)
    return "\n".join(json.dumps(x) for x in lines) + "\n"


OTEL_BAD = [
    ("no ttft", lambda s, a: s["attributes"].remove(a["gen_ai.latency.time_to_first_token"]),
     "gen_ai.latency.time_to_first_token", "missing required attribute"),
    ("e2e below ttft", lambda s, a: a["gen_ai.latency.e2e"]["value"].update(doubleValue=0.001),
     "gen_ai.latency.e2e", "e2e < ttft"),
    ("tokens as string value", lambda s, a: a["gen_ai.usage.prompt_tokens"].update(value={"stringValue": "300"}),
     "gen_ai.usage.prompt_tokens", "expected intValue"),
    ("no start time", lambda s, a: s.pop("startTimeUnixNano"),
     "resourceSpans[0].scopeSpans[0].spans[1].startTimeUnixNano", "arrival time"),
    ("start time not a number", lambda s, a: s.update(startTimeUnixNano="soon"),
     "resourceSpans[0].scopeSpans[0].spans[1].startTimeUnixNano", "intValue must be an integer"),
    ("negative latency", lambda s, a: a["gen_ai.latency.time_to_first_token"]["value"].update(doubleValue=-1),
     "gen_ai.latency.time_to_first_token", "must be >= 0"),
]


@pytest.mark.parametrize("label, mutate, field, words", OTEL_BAD, ids=[b[0] for b in OTEL_BAD])
def test_malformed_request_spans(tmp_path, label, mutate, field, words):
    p = tmp_path / "traces.json"
    p.write_text(_span_lines(mutate))
    _expect(tmp_path, p, field, words)
    with pytest.raises(IngestError) as ei:
        ingest_run([p], tmp_path / "gt", "x")
    assert ei.value.line == 1


def test_truncated_span_line_and_no_spans(tmp_path):
    p = tmp_path / "traces.json"
    text = (FIX / "otel_requests.json").read_text().splitlines()
    p.write_text(text[0] + "\n" + text[1][:300] + "\n")
    _expect(tmp_path, p, "<json>", "truncated")
    p.write_text(json.dumps({"resourceSpans": []}) + "\n")
    _expect(tmp_path, p, "step.BATCH_SUMMARY", "neither step.BATCH_SUMMARY events nor request spans")


def test_step_traces_alone_cannot_be_scored(tmp_path):
    _expect(tmp_path, OLD / "traces_valid.json", "requests", "step traces alone")


def test_unknown_file(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"hello": 1}))
    _expect(tmp_path, p, "<json>", "not a format ingest knows")


def test_cli_ingest_formats(tmp_path):
    def evolve(*args):
        return subprocess.run([sys.executable, "-m", "evolve.cli", "ingest", *args], capture_output=True, text=True,
                              timeout=300)
    p = evolve(str(FIX / "guidellm_v05.json"), "--experiment", "g1", "--out", str(tmp_path / "gt"))
    assert p.returncode == 0, p.stderr
    assert "defaults used" in p.stdout and "max_num_seqs=1024" in p.stdout
    assert load_ground_truth(tmp_path / "gt").experiments[0].id == "g1"
    bad = tmp_path / "bad.json"
    obj = json.loads((FIX / "vllm_bench.json").read_text())
    obj["ttfts"][1] = "slow"
    bad.write_text(json.dumps(obj))
    p = evolve(str(bad), "--experiment", "v", "--out", str(tmp_path / "gt2"))
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0 and "field 'ttfts[1]'" in p.stderr
