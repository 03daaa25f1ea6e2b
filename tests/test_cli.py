"""The command line as users call it (real subprocesses, real files)."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

FIX = Path(__file__).parent / "fixtures" / "ingest"


def evolve(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "evolve.cli", *args], capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(p.stderr[-2000:])
    return p


def test_baselines_json_on_embedded_default():
    out = json.loads(evolve("baselines", "--json").stdout)
    assert out["mode"] == "spec" and out["source"] == "embedded"
    recs = out["records"]
    assert {r["baseline"] for r in recs} == {"blackbox", "roofline", "linear_physics"}
    e2e = [r for r in recs if r["metric"] == "e2e_err" and r["baseline"] == "linear_physics"]
    # 16 experiments, 24 stages; the two reasoning runs that mostly failed (7b, mixtral) have no latency error
    assert len(e2e) == 24 and all(set(r) == {"experiment", "stage", "baseline", "metric", "value"} for r in e2e)
    e2e = [r for r in e2e if r["value"] is not None]
    assert len(e2e) == 22
    mean = next(r["value"] for r in recs if r["experiment"] == "mean" and r["baseline"] == "linear_physics"
                and r["metric"] == "e2e_mean")
    # BLIS's blackbox reads only P and D: the physical rules either refuse it (with the reason) or
    # force its intercept up to the floor of a full KV cache, which ruins its fit everywhere else
    why = [r["value"] for r in recs if r["baseline"] == "blackbox" and r["metric"] == "invalid"]
    bb = [r["value"] for r in recs if r["baseline"] == "blackbox" and r["metric"] == "e2e_mean"]
    assert (why and why[0].startswith("unphysical: ")) or bb[0] > 5 * mean
    assert mean == pytest.approx(sum(r["value"] for r in e2e) / 22)


def test_baselines_table_names_every_experiment(data_dir):
    out = evolve("baselines", "--data", str(data_dir)).stdout
    for m in ("llama-2-7b/general", "llama-2-70b/codegen", "mixtral-8x7b/roleplay", "codellama-34b/general",
              "llama-2-70b/reasoning"):
        assert m in out
    assert "mean" in out


def test_bad_data_dir_is_a_clear_error(tmp_path):
    p = evolve("baselines", "--data", str(tmp_path), check=False)
    assert p.returncode != 0 and "experiments" in p.stderr and "Traceback" not in p.stderr


def test_ingest_cli_writes_the_ground_truth_layout(tmp_path):
    evolve("ingest", "--traces", str(FIX / "traces_valid.json"), "--lifecycle", str(FIX / "lifecycle_valid.json"),
           "--experiment", "my-exp", "--model", "llama-2-7b", "--workload", "chat", "--tp", "1",
           "--out", str(tmp_path))
    steps = pd.read_parquet(tmp_path / "steps" / "steps.parquet")
    reqs = pd.read_parquet(tmp_path / "requests" / "requests.parquet")
    assert set(steps.experiment_id) == {"my-exp"} and len(steps) > 0
    assert set(reqs.experiment_id) == {"my-exp"} and len(reqs) > 0
    bad = evolve("ingest", "--traces", str(FIX / "traces_truncated.json"), "--experiment", "x",
                 "--out", str(tmp_path), check=False)
    assert bad.returncode != 0 and "traces_truncated.json" in bad.stderr and "Traceback" not in bad.stderr


def test_evaluate_rejects_untrusted_program_before_running(tmp_path):
    f = tmp_path / "evil.py"
    f.write_text("import os\nos.system('touch /tmp/pwned')\ndef predict_step_time(P):\n    return P\n")
    p = evolve("evaluate", str(f), check=False)
    assert p.returncode != 0 and "imports are not allowed" in p.stderr


DEAD_BRANCH = """
BASE = 1000.0
PER_WEIGHT = 2.0
HUGE_K = 1000000000000.0
SLOPE = 5.0


def predict_step_time(P, K, t_weights, t_decode_kv, t_prefill_gemm, t_decode_gemm):
    if K > HUGE_K:
        return SLOPE * K
    return BASE + PER_WEIGHT * max(t_weights + t_decode_kv, t_prefill_gemm + t_decode_gemm) + 0.5 * P
"""


def test_emit_go_drops_dead_conditionals_and_compiles(tmp_path, data_dir, evaluator):
    from evolve.archive import Archive
    from evaluator.program import parse_program
    from gotool import check_go_files, get_toolchain
    prog = parse_program(DEAD_BRANCH)
    ev = evaluator.evaluate(prog, fit=False)  # the hand-set constants: the threshold stays out of reach
    assert ev.valid, ev.error
    arch = Archive(tmp_path / "a.db")
    run = arch.start_run({"data": str(data_dir)}, seed=0)
    pid = arch.add_candidate(run, prog, operator="seed", generation=0, evaluation=ev, stage="screen")
    arch.close()
    out = evolve("emit-go", str(pid), "--archive", str(tmp_path / "a.db"), "-o", str(tmp_path / "s.go")).stdout
    assert "simplified: 1 conditional(s)" in out
    raw = evolve("emit-go", str(pid), "--archive", str(tmp_path / "a.db"), "-o", str(tmp_path / "r.go"),
                 "--no-simplify").stdout
    assert "simplified" not in raw
    simplified, original = (tmp_path / "s.go").read_text(), (tmp_path / "r.go").read_text()
    assert "HUGE_K" in original and "HUGE_K" not in simplified and "SLOPE" not in simplified
    if get_toolchain() is not None:
        res = check_go_files({"evolved.go": simplified})
        assert res.ok, res.summary()


def test_run_config_is_built_one_way_for_new_and_resumed_runs():
    """The flags build the RunConfig of a new run; --resume rebuilds the stored one whole and
    takes only budget and workers from the flags (a resumed run keeps its seed and Go cap)."""
    from evaluator.objectives import Caps
    from evolve.cli import build_parser
    from evolve.config import RunConfig, config_from_args
    new = config_from_args(build_parser().parse_args(["run", "--seed", "4", "--max-cond", "2", "--budget", "5"]))
    assert new.seed == 4 and new.budget == 5 and new.caps == Caps(30, 2, 10)
    stored = json.loads(json.dumps(new.to_json()))  # what runs.config holds
    assert stored["caps"] == {"ops": 30, "conditionals": 2, "constants": 10}
    resumed = config_from_args(build_parser().parse_args(["run", "--resume", "r", "--budget", "9", "--workers", "1",
                                                          "--seed", "99", "--max-cond", "3"]), stored)
    assert resumed == RunConfig(**{**new.__dict__, "budget": 9, "workers": 1})
    assert RunConfig.from_json({**stored, "caps": [30, 3, 10]}).caps == Caps()  # archives written before


def test_components_json_and_table(data_dir):
    from evaluator.data import load_ground_truth
    from evaluator.measured import component_grid
    out = json.loads(evolve("components", "--data", str(data_dir), "--model", "llama-2-70b", "--json").stdout)
    m = out["models"]["llama-2-70b"]
    assert out["mode"] == "trace" and m["error"] is None and m["notes"]
    assert m["grid"] == component_grid(load_ground_truth(data_dir), "llama-2-70b")
    assert any(r["measured_cycle_median_us"] for r in m["grid"]) and any(r["measured_cycle_median_us"] is None
                                                                         for r in m["grid"])
    text = evolve("components", "--model", "llama-2-7b").stdout  # spec mode: the embedded tables
    assert "meas" in text and "STEP" in text and "scaled x4" in text
    bad = evolve("components", "--model", "gpt-5", check=False)
    assert bad.returncode != 0 and "not in the ground truth" in bad.stderr and "Traceback" not in bad.stderr


def test_show_says_where_measured_components_came_from(tmp_path):
    from evolve.archive import Archive
    from seeds import seed_sources
    a = Archive(tmp_path / "a.db")
    run = a.start_run({"data": None}, seed=0, budget=1)  # the embedded default
    pid = a.add_candidate(run, seed_sources()["measured"], operator="seed")
    plain = a.add_candidate(run, seed_sources()["roofline"], operator="seed")
    a.close()
    out = evolve("show", str(pid), "--archive", str(tmp_path / "a.db")).stdout
    assert "measured components (t_step_measured)" in out
    assert "llama-2-7b: decode attention: layout 32 query / 32 KV heads" in out and "scaled x4" in out
    assert "llama-2-70b: all kernel layouts measured" in out
    assert "measured components" not in evolve("show", str(plain), "--archive", str(tmp_path / "a.db")).stdout


@pytest.fixture(scope="module")
def small_archive(tmp_path_factory):
    """One run of two programs with their (hand-made) evaluations."""
    from evolve.archive import Archive
    from tests.test_views import BASE, ROOF, make_eval
    db = tmp_path_factory.mktemp("cli") / "a.db"
    a = Archive(db)
    run = a.start_run({"data": None}, seed=0, budget=2)
    pids = [a.add_candidate(run, BASE.format(k=0), operator="seed", evaluation=make_eval(0.4)),
            a.add_candidate(run, ROOF, operator="seed", evaluation=make_eval(0.3))]
    a.close()
    return db, run, pids


def _one_line_error(p, *needles):
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("args,needle", [
    (["show", "999999"], "999999"),
    (["emit-go", "999999", "-o", "{tmp}/x.go"], "999999"),
    (["run", "--resume", "no-such-run"], "no-such-run"),
    (["run", "--resume", "baselines-0123456789abcdef"], "stored baselines"),
    (["frontier", "--run", "no-such-run"], "no-such-run"),
    (["frontier", "--run", "no-such-run", "--json"], "no-such-run"),
    (["report", "--program", "999999", "-o", "{tmp}/r.html"], "999999"),
    (["report", "--run", "no-such-run", "-o", "{tmp}/r.html"], "no-such-run"),
    (["report", "-o", "{tmp}"], "is a directory"),
])
def test_unknown_ids_and_bad_outputs_are_one_line_errors(small_archive, tmp_path, args, needle):
    db, _, _ = small_archive
    p = evolve(*[a.format(tmp=tmp_path) for a in args], "--archive", str(db), check=False)
    _one_line_error(p, needle)
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "x.go").exists()


def test_resume_of_an_unknown_run_creates_no_archive(tmp_path):
    p = evolve("run", "--resume", "no-such-run", "--archive", str(tmp_path / "none.db"), check=False)
    _one_line_error(p, "no-such-run")
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("args", [
    ["run", "--replay", "r1"], ["run", "--llm-base", "http://x"], ["run", "--max-llm-cost", "1"],
    ["run", "--budget", "0"], ["run", "--ray-address", "127.0.0.1:1"], ["pilot", "--runs", "0"],
    ["pilot", "--archive", "{tmp}"], ["run", "--archive", "{tmp}", "--budget", "1"],
    ["emit-go", "1"], ["emit-go", "1", "--blis-patch", "{tmp}/p.patch", "--package", "other"],
    ["report", "--program", "-1"], ["show", "abc"],
    ["pilot", "--ray-address", "127.0.0.1:1"], ["pilot", "--executor", "ray", "--ray-address", "127.0.0.1:1"],
])
def test_bad_flag_combinations_are_one_line_errors(small_archive, tmp_path, args):
    db, _, _ = small_archive
    args = [a.format(tmp=tmp_path) for a in args]
    if "--archive" not in args:
        args += ["--archive", str(db)]
    p = evolve(*args, check=False)
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.startswith("error") or "error:" in ln]
    assert p.returncode != 0 and "Traceback" not in p.stderr and lines, p.stderr[-2000:]
