"""`evolve predict` (evaluator/predict.py, evolve/predict_cmd.py): hand-checkable predictions on
the embedded table, no refit, monotone load, the knee, strict JSON and one-line errors."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from evaluator.data import load
from evaluator.fitting import fit_overhead_law
from evaluator.predict import (PredictError, Spec, knee, load_program_file, make_deployment, parse_rates,
                               parse_slo, predict)
from evolve.cli import main
from seeds import seed_sources

CONST = "C = 20000.0\n\n\ndef predict_step_time(P, D):\n    return C\n"
OVH = {"queueing_us": 5000.0, "queueing_per_input_token_us": 0.0, "output_token_us": 0.0, "post_decode_us": 1000.0}


@pytest.fixture(scope="module")
def gt():
    return load(None)  # the embedded table: spec mode, kernel tables of the measured deployments


@pytest.fixture()
def const_files(tmp_path):
    prog, consts = tmp_path / "const.py", tmp_path / "const.json"
    prog.write_text(CONST)
    consts.write_text(json.dumps({"constants": {"codellama-34b": [20000.0]}, "overheads": {"codellama-34b": OVH}}))
    return str(prog), str(consts)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    try:
        rc = main(["predict", *argv])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
        if isinstance(e.code, str):
            out = capsys.readouterr()
            return 1, out.out, e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_constant_step_program_gives_the_hand_computed_latencies(gt, const_files):
    """One request at a time, 20 ms steps: TTFT = one prefill step + 5 ms queueing overhead;
    E2E = 5 ms + 100 steps + 1 ms post-decode; time per output token (E2E - TTFT) / 99."""
    stored = load_program_file(*const_files)
    dep = make_deployment(gt, "codellama-34b", needs_kernels=False)
    res = predict(stored, gt, dep, rates=[0.01], spec=Spec(prompt=(500, 0), output=(100, 0), num_requests=20))
    p = res["points"][0]
    assert p["ttft"]["p50"] == pytest.approx(0.025, abs=1e-9)
    assert p["e2e"]["p50"] == pytest.approx(0.005 + 100 * 0.020 + 0.001, abs=1e-9)
    assert p["itl"]["p50"] == pytest.approx((2.006 - 0.025) / 99, abs=1e-9)
    assert p["fail"] == 0.0 and p["n_requests"] == 20
    assert res["overheads"]["source"] == "fitted for codellama-34b"
    assert any("below the hardware floor" in w for w in res["warnings"])  # 20 ms for a 2,048-token prefill


def test_no_refit_and_rate_never_lowers_ttft_p90(gt, tmp_path):
    """The roofline with its stored constants on another TP: the vector is used as stored (the
    file is untouched), and each higher rate has a TTFT p90 at least as high."""
    src = seed_sources()["roofline"]
    (tmp_path / "r.py").write_text(src)
    stored_json = {"constants": {"codellama-34b": [14000.0, 1.4]},
                   "overheads": {"codellama-34b": OVH}}
    (tmp_path / "r.json").write_text(json.dumps(stored_json))
    before = (tmp_path / "r.json").read_text()
    stored = load_program_file(str(tmp_path / "r.py"), str(tmp_path / "r.json"))
    dep = make_deployment(gt, "codellama-34b", tp=4, needs_kernels=False)
    res = predict(stored, gt, dep, rates=parse_rates("2:40:5"), spec=Spec(num_requests=600),
                  slo=parse_slo(["ttft_p90=0.5"]), refine=2)
    assert res["constants"]["values"] == [14000.0, 1.4]
    assert stored.constants == stored_json["constants"] and (tmp_path / "r.json").read_text() == before
    swept = [p for p in res["points"] if not p.get("refined")]
    p90 = [p["ttft"]["p90"] for p in swept]
    assert all(b >= a - 1e-12 for a, b in zip(p90, p90[1:])), p90
    assert p90[-1] > p90[0]
    assert "model" in swept[0]["regimes"]  # TP 4 was never fitted: leave-one-model-out regime
    assert res["overheads"]["law"] is not None  # another TP: the cross-model law, not the fitted overheads
    k = res["knee"]["rate"]
    assert k is None or all(p["ttft"]["p90"] <= 0.5 for p in res["points"] if p["rate"] <= k)


def test_knee_is_the_last_rate_before_the_first_miss():
    pts = [{"rate": r, "ttft": {"p90": v}, "band": {"ttft": 0.5}} for r, v in ((1, 0.1), (2, 1.0), (3, 3.0), (4, 1.0))]
    assert knee(pts, {"ttft_p90": 2.0}, key=lambda p: None) == 2
    assert knee(pts, {"ttft_p90": 2.0}) == 2  # 1.0 x 1.5 still meets it
    assert knee(pts, {"ttft_p90": 1.2}) == 1
    assert knee(pts, {"ttft_p90": 0.05}, key=lambda p: None) is None


def test_overhead_law_keeps_only_what_the_data_pins_down():
    rng = np.random.default_rng(0)
    tau = rng.uniform(7000, 22000, 20)
    prompt = rng.uniform(570, 790, 20)
    pts = [(p, t, 2000 + 1.7 * t + rng.normal(0, 300), 2000 + 1.7 * t + 800) for p, t in zip(prompt, tau)]
    law = fit_overhead_law(pts)
    assert law.terms == ("api_us", "cycles") and law.per_input_token_us == 0.0
    assert law.cycles == pytest.approx(1.7, abs=0.1) and law.post_decode_us == pytest.approx(800, abs=300)
    assert law.overheads(10000).queueing_us == pytest.approx(law.api_us + law.cycles * 1e4)
    wide = rng.uniform(100, 4000, 20)  # prompts that vary: the tokenization term is pinned
    law2 = fit_overhead_law([(p, t, 1000 + 4.0 * p + 1.5 * t + rng.normal(0, 50), 0.0) for p, t in zip(wide, tau)])
    assert "per_input_token_us" in law2.terms and law2.per_input_token_us == pytest.approx(4.0, rel=0.1)


def test_cli_json_is_strict_and_html_is_offline(capsys, const_files, tmp_path):
    html = tmp_path / "p.html"
    rc, out, err = run_cli(capsys, const_files[0], "--constants", const_files[1], "--model", "codellama-34b",
                           "--rates", "1,60", "--num-requests", "200", "--slo", "ttft_p90=2", "--json",
                           "--html", str(html))
    assert rc == 0, err

    def no_nan(x):
        raise AssertionError(f"non-strict JSON constant {x}")
    d = json.loads(out, parse_constant=no_nan)
    assert [p["rate"] for p in d["points"] if not p.get("refined")] == [1.0, 60.0]
    assert set(d["points"][0]["e2e"]) == {"mean", "p50", "p90", "p99"}
    assert d["knee"]["slo"] == {"ttft_p90": 2.0}
    page = html.read_text()
    assert "Plotly.newPlot" in page and not re.search(r"<script[^>]*src=", page)  # plotly.js inline: offline


@pytest.mark.parametrize("extra, needle", [
    (["--model", "no-such-model", "--rate", "1"], "--model 'no-such-model'"),
    (["--model", "codellama-34b", "--rates", "20:1:5"], "--rates '20:1:5'"),
    (["--model", "codellama-34b", "--rates", "fast"], "--rates 'fast'"),
    (["--model", "codellama-34b", "--rate", "0"], "positive"),
    (["--model", "llama-2-70b", "--tp", "1", "--rate", "1"], "does not fit at TP 1"),
    (["--model", "codellama-34b", "--rate", "1", "--slo", "ttft=2"], "--slo 'ttft=2'"),
])
def test_one_line_errors(capsys, const_files, extra, needle):
    rc, out, err = run_cli(capsys, const_files[0], "--constants", const_files[1], *extra)
    assert rc == 1 and needle in err and "\n" not in err.strip() and "Traceback" not in err


def test_component_not_computable_names_it(capsys, tmp_path, monkeypatch):
    """The measured-kernel seed on a deployment the embedded table has no kernel tables for."""
    from evaluator import predict as predict_mod
    from evaluator.data import load_default_table
    table = load_default_table()
    del table["kernels"]["codellama-34b@tp4"]
    monkeypatch.setattr(predict_mod, "load_default_table", lambda: table)
    (tmp_path / "m.py").write_text(seed_sources()["measured"])
    (tmp_path / "m.json").write_text(json.dumps({"constants": {"codellama-34b": [1500.0]},
                                                  "overheads": {"codellama-34b": OVH}}))
    rc, out, err = run_cli(capsys, str(tmp_path / "m.py"), "--constants", str(tmp_path / "m.json"),
                           "--model", "codellama-34b", "--tp", "4", "--rate", "1")
    assert rc == 1 and "component t_step_measured cannot be computed for codellama-34b at TP 4" in err
    assert "\n" not in err.strip()


def test_measured_kernel_program_predicts_a_shipped_config_from_the_embedded_table(capsys, tmp_path):
    """The embedded table holds each shipped config's and data model's kernel tables at every TP
    where it fits, so a program on measured kernels predicts an 8B model on 1 or 4 GPUs (faster on
    four: each reads a quarter of the weights) and llama-2-70b on 8 without --data."""
    (tmp_path / "m.py").write_text(seed_sources()["measured"])
    (tmp_path / "m.json").write_text(json.dumps({"constants": {"*": [0.0], "llama-2-7b": [0.0]},
                                                  "overheads": {"llama-2-7b": OVH}}))
    itl = {}
    for tp in (1, 4):
        rc, out, err = run_cli(capsys, str(tmp_path / "m.py"), "--constants", str(tmp_path / "m.json"),
                               "--model", "Llama-3.1-8B-Instruct", "--tp", str(tp), "--rate", "0.05", "--json")
        assert rc == 0, err
        res = json.loads(out)
        assert res["deployment"]["tp"] == tp and res["points"][0]["fail"] == 0.0
        itl[tp] = res["points"][0]["itl"]["p50"]
    assert 0.004 < itl[1] < 0.012  # 16 GB of weights a step at ~3.35 TB/s: ~5 ms and more
    assert itl[4] < 0.7 * itl[1]
    # a model of the data on a deployment nobody measured (llama-2-70b ran at TP 4)
    rc, out, err = run_cli(capsys, str(tmp_path / "m.py"), "--constants", str(tmp_path / "m.json"),
                           "--model", "llama-2-70b", "--tp", "8", "--rate", "0.05", "--json")
    assert rc == 0, err
    assert 0.004 < json.loads(out)["points"][0]["itl"]["p50"] < 0.02  # 138 GB over 8 GPUs: ~5 ms a step and more


def test_program_file_needs_constants(capsys, const_files):
    rc, out, err = run_cli(capsys, const_files[0], "--model", "codellama-34b", "--rate", "1")
    assert rc == 1 and "needs --constants" in err


def test_parsers():
    assert parse_rates("1:20:10")[0] == 1.0 and parse_rates("1:20:10")[-1] == 20.0 and len(parse_rates("1:20:10")) == 10
    assert parse_rates("5,2") == [2.0, 5.0]
    for bad in ("1:2", "0,1", "nan", "-1", "3:1:4"):
        with pytest.raises(PredictError):
            parse_rates(bad)
    assert parse_slo(["ttft_p90=2,fail=0.01"]) == {"ttft_p90": 2.0, "fail": 0.01}
    assert math.isclose(parse_rates("4")[0], 4.0)


def test_archive_program_predicts_with_its_stored_constants(capsys, tmp_path, gt):
    from evaluator.program import parse_program
    from evaluator.records import Evaluation
    from evolve.archive import Archive
    path = tmp_path / "a.db"
    with Archive(path) as a:
        run = a.start_run({"data": None}, 0)
        pid = a.add_program(run, parse_program(CONST))
        a.add_evaluation(pid, Evaluation(valid=True, constants={"codellama-34b": [20000.0]},
                                         overheads={"codellama-34b": OVH}, objectives={"e2e_mean": 0.05}))
    rc, out, err = run_cli(capsys, str(pid), "--archive", str(path), "--model", "codellama-34b", "--rate", "0.01",
                           "--num-requests", "10", "--prompt-tokens", "500", "--output-tokens", "100", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["constants"]["values"] == [20000.0] and d["program"] == f"#{pid}"
    assert "codellama-34b" in d["coverage"]["fitted_on"]["models"]
    assert "not_validated_for" in d["coverage"]  # where it holds, as show and the Go header say
    assert "misses" not in d["coverage"]  # no held-out blocks stored: nothing to say of them
    assert d["points"][0]["e2e"]["p50"] == pytest.approx(2.006, abs=1e-9)
    assert d["points"][0]["band"]["e2e"] == pytest.approx(0.05)  # in-sample error: the only one stored
    # with held-out blocks stored, the misses they hold are said beside the coverage
    row = {"model": "codellama-34b", "workload": "reasoning", "stage": 0, "e2e_err": 0.2, "itl_err": 0.02}
    with Archive(path) as a:
        held = a.add_program(run, parse_program(CONST.replace("20000.0", "20001.0")))
        a.add_evaluation(held, Evaluation(valid=True, constants={"codellama-34b": [20000.0]},
                                          overheads={"codellama-34b": OVH}, objectives={"e2e_mean": 0.05},
                                          holdout={"model": {"rows": [row], "errors": {}}}))
    rc, out, err = run_cli(capsys, str(held), "--archive", str(path), "--model", "codellama-34b", "--rate", "0.01",
                           "--num-requests", "10", "--prompt-tokens", "500", "--output-tokens", "100", "--json")
    assert rc == 0, err
    assert json.loads(out)["coverage"]["misses"] == [{"kind": "model", "model": "codellama-34b",
                                                      "workload": "reasoning", "measure": "E2E", "error": 0.2}]
    # an unknown id is named first, before any complaint about the missing workload
    rc, out, err = run_cli(capsys, str(pid + 1000), "--archive", str(path))
    assert rc == 1 and f"no program {pid + 1000}" in err and len(err.strip().splitlines()) == 1


def test_trace_of_a_measured_experiment_carries_its_measurements(gt, const_files):
    """A measured experiment replayed on its own deployment: one row per stage, the measured
    means beside, in-sample regime only (the model, TP, lengths and load were fitted)."""
    stored = load_program_file(*const_files)
    e = next(x for x in gt.experiments if x.model == "codellama-34b" and x.workload == "general")
    from evaluator.predict import deployment_of
    res = predict(stored, gt, deployment_of(e, gt), trace=e)
    assert [p["label"] for p in res["points"]] == [f"stage {s.index}" for s in e.stages]
    for p, s in zip(res["points"], e.stages):
        assert p["measured"]["e2e_mean"] == s.e2e_s and p["rate"] == s.rate
        assert p["regimes"] == [] and p["e2e"]["mean"] > 0


def test_requests_file_is_replayed_and_a_missing_column_is_named(capsys, const_files, tmp_path):
    f = tmp_path / "trace.csv"
    f.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{i * 100.0},500,100\n" for i in range(10)))
    rc, out, err = run_cli(capsys, *const_files[:1], "--constants", const_files[1], "--model", "codellama-34b",
                           "--requests", str(f), "--json")
    assert rc == 0, err
    p = json.loads(out)["points"][0]
    assert p["label"] == "trace" and p["n_requests"] == 10 and p["e2e"]["p50"] == pytest.approx(2.006, abs=1e-9)
    f.write_text("arrival_s,input_tokens\n0,500\n")
    rc, out, err = run_cli(capsys, *const_files[:1], "--constants", const_files[1], "--model", "codellama-34b",
                           "--requests", str(f))
    assert rc == 1 and "missing column 'output_tokens'" in err
