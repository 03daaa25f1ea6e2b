"""BLIS integration: the names the emitted constructor accepts, the patch against a stand-in
BLIS tree (git apply, go vet, go test), the TraceV2 export and the comparison of BLIS results.

The stand-in (tests/fixtures/blis_standin) has BLIS's lines where the patch edits and the sim
stub's real field shapes; docs/blis.md has the check against a real BLIS checkout.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evaluator.data import GroundTruth, load_default
from evaluator.program import parse_program
from go_emit.blis_patch import GO_FILE, BlisPatchError, apply_in_place, blis_patch
from go_emit.emit import GoEmitError, emit_go
from go_emit.names import merge_aliases, model_aliases, parse_alias
from gotool import get_toolchain, stub_sources
from seeds import seed_sources

FIX = Path(__file__).parent / "fixtures"
TOOLCHAIN = get_toolchain()
needs_go = pytest.mark.skipif(TOOLCHAIN is None, reason="no Go toolchain found (run scripts/install_go.sh)")
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not found")
DEFAULT = load_default()
OVERHEADS = {"queueing_us": 900.0, "queueing_per_input_token_us": 0.4, "output_token_us": 10.0, "post_decode_us": 2.0}


def _emitted(seed: str = "roofline", extra: dict | None = None) -> str:
    """The seed emitted for every model of the embedded table, with the data's HF ids as aliases."""
    prog = parse_program(seed_sources()[seed])
    vectors = {e.model: e.model_vec(DEFAULT.hardware) for e in DEFAULT.experiments}
    return emit_go(prog, {m: prog.initial_constants for m in vectors}, vectors, {m: OVERHEADS for m in vectors},
                   aliases=merge_aliases(DEFAULT, vectors, extra))


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)


def _standin(tmp: Path) -> Path:
    """The stand-in BLIS tree as a fresh git repository."""
    root = tmp / "blis"
    shutil.copytree(FIX / "blis_standin", root)
    (root / "go.mod").write_text(f"module github.com/inference-sim/inference-sim\n\ngo {TOOLCHAIN.go_directive}\n")
    for rel, src in stub_sources("blis").items():
        (root / rel).write_text(src)
    assert _git(root, "init", "-q").returncode == 0
    _git(root, "add", "-A")
    assert _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "stand-in").returncode == 0
    return root


def _go(root: Path, *args: str) -> subprocess.CompletedProcess:
    return TOOLCHAIN.run([TOOLCHAIN.go, *args], cwd=root)


# ----------------------------------------------------------------- names

def test_hf_ids_come_from_the_data():
    aliases = model_aliases(DEFAULT)
    assert aliases["meta-llama/Llama-2-7b-hf"] == "llama-2-7b"
    assert aliases["mistralai/Mixtral-8x7B-v0.1"] == "mixtral-8x7b"
    assert set(aliases.values()) == {e.model for e in DEFAULT.experiments}
    assert parse_alias(" my/model = llama-2-7b ") == ("my/model", "llama-2-7b")
    for bad in ("no-equals", "=llama-2-7b", "x="):
        with pytest.raises(GoEmitError, match="NAME=MODEL"):
            parse_alias(bad)
    with pytest.raises(GoEmitError, match="no fitted model 'nope'"):
        merge_aliases(DEFAULT, ["llama-2-7b"], {"x": "nope"})


# ----------------------------------------------------------------- the patch

def test_snapshot_patch_has_every_part():
    patch = blis_patch(_emitted())
    for path in (GO_FILE, "sim/bundle.go", "sim/bundle_test.go", "sim/latency/latency.go", "cmd/root.go"):
        assert f"diff --git a/{path} b/{path}" in patch
    assert '+\texpected := []string{"evolved", "roofline", "trained-physics"}' in patch
    assert '"trained-physics": true, "evolved": true}' in patch
    assert "+\t\tm, err := NewEvolvedLatencyModel(hw.Model)" in patch and "+\t\treturn m, nil" in patch
    assert "roofline, evolved (StepEvolve" in patch
    assert '+\t\tif !cmd.Flags().Changed("total-kv-blocks") || !cmd.Flags().Changed("max-model-len") {' in patch
    hunks, cur = [], None  # git apply wants context on both sides of every change to a file
    for ln in patch.splitlines():
        if ln.startswith("@@ "):
            cur = []
            hunks.append(cur)
        elif ln.startswith("diff --git"):
            cur = None
        elif cur is not None:
            cur.append(ln)
    assert len(hunks) == 6
    for body in hunks[1:]:  # the first adds the new file
        assert body[0].startswith(" ") and body[-1].startswith(" "), body


@needs_go
@needs_git
def test_patch_applies_builds_and_passes_blis_tests_on_the_standin(tmp_path):
    """git apply --check, then the stand-in's own backend-list test (which the patch updates) and
    the dispatch through NewLatencyModel under every name, with the measured program's kernel tables."""
    root = _standin(tmp_path)
    code = _emitted("measured_per_layer", {"team/llama-7b-finetune": "llama-2-7b"})
    assert "m.tables = []float64{" in code
    (tmp_path / "p.patch").write_text(blis_patch(code))
    check = _git(root, "apply", "--check", str(tmp_path / "p.patch"))
    assert check.returncode == 0, check.stderr
    assert _git(root, "apply", str(tmp_path / "p.patch")).returncode == 0
    shutil.copytree(FIX / "blis_standin_after", root, dirs_exist_ok=True)
    names = ["llama-2-7b", "LLAMA-2-70B", "meta-llama/Llama-2-7b-hf", "Mistralai/MIXTRAL-8x7B-v0.1",
             "codellama/CodeLlama-34b-Instruct-hf", "team/llama-7b-finetune"]
    (root / "sim/latency/names_test.go").write_text(
        f"package latency\n\nconst knownNames = {json.dumps(';'.join(names))}\n")
    vet = _go(root, "vet", "./...")
    assert vet.returncode == 0, vet.stdout + vet.stderr
    test = _go(root, "test", "./sim/...")
    assert test.returncode == 0, test.stdout + test.stderr
    # the unpatched test would now fail: BLIS's own list gained a backend
    assert "ok  \tgithub.com/inference-sim/inference-sim/sim\t" in test.stdout
    # a second patch against the patched tree is empty
    again = blis_patch(code, root)
    assert again == ""


@needs_go  # the stand-in's go.mod names the installed toolchain's version
@needs_git
def test_apply_in_place_is_idempotent_and_refuses_foreign_trees(tmp_path):
    root = _standin(tmp_path)
    code = _emitted()
    written = apply_in_place(code, root)
    assert written[0] == GO_FILE and set(written[1:]) == {"sim/bundle.go", "sim/bundle_test.go",
                                                           "sim/latency/latency.go", "cmd/root.go"}
    assert apply_in_place(code, root) == []
    diff = _git(root, "diff").stdout
    assert diff.count('"evolved": true') == 1
    # the checkout-based patch is what the in-place edit did
    _git(root, "stash", "-u")
    p = tmp_path / "d.patch"
    p.write_text(blis_patch(code, root))
    assert _git(root, "apply", "--check", str(p)).returncode == 0
    # a tree without the anchor line: one error naming file and line, nothing written
    (root / "sim/latency/latency.go").write_text("package latency\n")
    before = (root / "sim/bundle.go").read_text()
    with pytest.raises(BlisPatchError, match="sim/latency/latency.go: cannot find the line"):
        apply_in_place(code, root)
    assert (root / "sim/bundle.go").read_text() == before and not (root / GO_FILE).exists()
    with pytest.raises(BlisPatchError, match="not a BLIS checkout"):
        apply_in_place(code, tmp_path)


_GOCODE = Path("/usr/share/gocode/src")
_DEBIAN_DEPS = ("github.com/spf13/cobra", "github.com/sirupsen/logrus", "gopkg.in/yaml.v3", "github.com/google/uuid",
                "github.com/stretchr/testify", "github.com/spf13/pflag", "golang.org/x/sys",
                "github.com/davecgh/go-spew", "github.com/pmezard/go-difflib", "github.com/inconshreveable/mousetrap")


@needs_go
@pytest.mark.skipif(not all((_GOCODE / m).is_dir() for m in _DEBIAN_DEPS),
                    reason="Debian golang-*-dev packages for BLIS's dependencies not installed (docs/blis.md)")
def test_gowork_script_builds_a_blis_shaped_module_offline(tmp_path):
    """scripts/blis_gowork.sh (docs/blis.md section 2): BLIS's go.mod requirements from Debian's
    /usr/share/gocode (gonum, absent there, as a bare go.mod), go build + go test with GOPROXY=off."""
    if TOOLCHAIN.go_directive != "1.24":
        pytest.skip(f"needs Go >= 1.24 (scripts/install_go.sh), found {TOOLCHAIN.version}")
    blis = tmp_path / "blis"
    blis.mkdir()
    reqs = "\n".join(f"\t{m} {'v3.0.1' if m.endswith('.v3') else 'v1.0.0'}"
                     for m in (*_DEBIAN_DEPS, "gonum.org/v1/gonum"))
    (blis / "go.mod").write_text(f"module github.com/inference-sim/inference-sim\n\ngo 1.24.0\n\n"
                                 f"require (\n{reqs}\n)\n")
    (blis / "main.go").write_text(
        'package main\n\nimport (\n\t"fmt"\n\n\t"github.com/google/uuid"\n\t"github.com/sirupsen/logrus"\n'
        '\t"github.com/spf13/cobra"\n\t"gopkg.in/yaml.v3"\n)\n\n'
        'func main() {\n\tb, _ := yaml.Marshal(map[string]int{"a": 1})\n\t_ = uuid.NewString()\n'
        '\tlogrus.SetLevel(logrus.ErrorLevel)\n\tcmd := &cobra.Command{Use: "blis", Run: func(*cobra.Command, []string) '
        '{ fmt.Print(string(b)) }}\n\t_ = cmd.Execute()\n}\n')
    (blis / "main_test.go").write_text(
        'package main\n\nimport (\n\t"testing"\n\n\t"github.com/stretchr/testify/assert"\n)\n\n'
        'func TestX(t *testing.T) { assert.Equal(t, 1, 1) }\n')
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run(["bash", str(repo / "scripts" / "blis_gowork.sh"), str(blis)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "gonum.org/v1/gonum" in out.stderr  # named: no Debian copy
    env = dict(kv.split("=", 1) for kv in out.stdout.strip().removeprefix("export ").split())
    work = Path(env["GOWORK"])
    assert work.is_file() and work.parent == tmp_path / "blis-gowork" and not (blis / "go.work").exists()
    assert env["GOPROXY"] == "off" and env["GOFLAGS"] == "" and env["GOTOOLCHAIN"] == "local"
    for args in (("build", "-o", str(tmp_path / "blis-bin"), "."), ("test", "-count=1", "./...")):
        res = TOOLCHAIN.run([TOOLCHAIN.go, *args], cwd=blis, extra_env=env)
        assert res.returncode == 0, res.stdout + res.stderr
    run = subprocess.run([str(tmp_path / "blis-bin")], capture_output=True, text=True, timeout=60)
    assert run.stdout == "a: 1\n"


# ----------------------------------------------------------------- the real BLIS

BLIS_DIR = os.environ.get("STEPEVOLVE_BLIS_DIR")
REASONING_7B = "20260217-170634-llama-2-7b-tp1-reasoning"


@needs_go
@pytest.mark.skipif(not BLIS_DIR, reason="STEPEVOLVE_BLIS_DIR is not set: the test needs a checkout of "
                    "inference-sim/inference-sim (checked at f90a1e3a), which CI cannot fetch (docs/blis.md)")
@pytest.mark.skipif(not all((_GOCODE / m).is_dir() for m in _DEBIAN_DEPS),
                    reason="Debian golang-*-dev packages for BLIS's dependencies not installed (docs/blis.md)")
def test_real_blis_times_out_as_many_7b_reasoning_requests_as_the_client_did(gt, data_dir, tmp_path):
    """The whole llama-2-7b reasoning experiment (4,800 requests, 4,068 of them timed out at the
    client's 300 s) replayed through the real BLIS with the exported deadlines and the roofline
    seed fitted on the llama-2-7b experiments (the program `evolve run` recommends on this data),
    emitted into a copy of $STEPEVOLVE_BLIS_DIR and built offline (scripts/blis_gowork.sh): BLIS's
    failed count is within 5% of the measured one. The replay takes about 10 s, so the whole
    experiment is used, not a subset."""
    from evaluator.evaluate import Evaluator
    from evolve.blis_compare import compare_all
    from evolve.blis_traces import export_blis_traces
    from go_emit import emit_record
    if TOOLCHAIN.go_directive != "1.24":
        pytest.skip(f"BLIS needs Go >= 1.24 (scripts/install_go.sh), found {TOOLCHAIN.version}")
    src = Path(BLIS_DIR).expanduser().resolve()
    if not (src / "go.mod").is_file() or not (src / "sim" / "latency" / "latency.go").is_file():
        pytest.fail(f"STEPEVOLVE_BLIS_DIR={BLIS_DIR}: not a BLIS checkout (no go.mod or sim/latency/latency.go)")
    blis = tmp_path / "blis"  # a copy: the patch is applied there, never to the given checkout
    shutil.copytree(src, blis, ignore=lambda d, names: [n for n in names if Path(d) == src and n in (".git", "blis")])
    # the model: the roofline seed fitted on the llama-2-7b experiments
    exps = [e for e in gt.experiments if e.model == "llama-2-7b"]
    ids = {e.id for e in exps}
    assert REASONING_7B in ids
    sub = lambda df: None if df is None else df[df["experiment_id"].isin(ids)].reset_index(drop=True)  # noqa: E731
    g7 = GroundTruth(gt.source, exps, gt.hardware, sub(gt.requests), sub(gt.steps))
    prog = parse_program(seed_sources()["roofline"])
    ev = Evaluator(g7).evaluate(prog)
    assert ev.valid, ev.error
    code = emit_record({"id": "roofline", "source": prog.source, "evaluation": ev.to_json()}, g7).code
    apply_in_place(code, blis)
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run(["bash", str(repo / "scripts" / "blis_gowork.sh"), str(blis)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    env = dict(kv.split("=", 1) for kv in out.stdout.strip().removeprefix("export ").split())
    build = TOOLCHAIN.run([TOOLCHAIN.go, "build", "-o", str(tmp_path / "blis-bin"), "."], cwd=blis,
                          extra_env=env, timeout=1800)
    assert build.returncode == 0, build.stdout + build.stderr
    # the exported trace of the one experiment, replayed by replay.sh from the BLIS tree
    one = GroundTruth(gt.source, [g7.experiment(REASONING_7B)], gt.hardware,
                      g7.requests[g7.requests["experiment_id"] == REASONING_7B].reset_index(drop=True), None)
    traces = tmp_path / "traces"
    export_blis_traces(one, traces, data_dir)
    run = subprocess.run(["sh", str(traces / "replay.sh")], cwd=blis, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "BLIS": str(tmp_path / "blis-bin"), "LATENCY_MODEL": "evolved",
                              "EXPERIMENTS": REASONING_7B})
    assert run.returncode == 0, run.stdout + run.stderr
    _, _, failed = compare_all(one, {"blis:evolved": {REASONING_7B: traces / REASONING_7B / "results-evolved.json"}})
    whole = next(x for x in failed if x["experiment"] == REASONING_7B and x["stage"] is None)
    counts = whole["blis:evolved:blis_counts"]
    assert whole["requests"] == 4800 and whole["failed_meas"] == 4068
    # what BLIS did not finish it timed out at the deadline: nothing dropped, nothing cut by the horizon
    assert counts["timed_out_requests"] == whole["blis:evolved:failed"], counts
    assert counts["dropped_unservable"] == counts["still_queued"] == counts["still_running"] == 0, counts
    off = (whole["blis:evolved:failed"] - whole["failed_meas"]) / whole["failed_meas"]
    assert abs(off) <= 0.05, f"BLIS failed {whole['blis:evolved:failed']} of 4800, measured 4068 ({off:+.1%})"


# ----------------------------------------------------------------- traces

def _small_gt(gt: GroundTruth, n_exps: int = 2) -> GroundTruth:
    """The first experiments of the real data, with one request marked failed."""
    exps = gt.experiments[:n_exps]
    req = gt.requests[gt.requests["experiment_id"].isin([e.id for e in exps])].copy()
    req.loc[req.index[5], "has_error"] = True
    return GroundTruth(gt.source, exps, gt.hardware, req.reset_index(drop=True), None)


def test_export_writes_blis_trace_files_and_replay_flags(gt, data_dir, tmp_path):
    from evolve.blis_traces import TRACE_COLUMNS, export_blis_traces
    small = _small_gt(gt)
    export_blis_traces(small, tmp_path, data_dir)
    e = small.experiments[0]
    df = pd.read_csv(tmp_path / e.id / "trace.csv", keep_default_na=False)
    assert tuple(df.columns) == TRACE_COLUMNS and len(TRACE_COLUMNS) == 27
    req = small.requests[small.requests["experiment_id"] == e.id]
    assert len(df) == len(req)  # failed requests stay (status "error")
    assert (df["status"] == "error").sum() == 1 and df["status"].iat[5] == "error"
    assert (df["output_tokens"] == e.output_len).all()
    assert ((df["prefix_length"] + df["input_tokens"]).to_numpy() == req["input_tokens"].to_numpy()).all()
    assert (df["input_tokens"] >= 0).all()
    # one group per pool prompt, one prefix length per group (BLIS takes the group's first)
    assert df.groupby("prefix_group")["prefix_length"].nunique().max() == 1
    assert df["prefix_group"].nunique() == e.prompt_pool
    assert (df["arrival_time_us"].to_numpy() == req["arrival_time_us"].to_numpy()).all()
    head = (tmp_path / e.id / "trace.yaml").read_text()
    assert "trace_version: 2\n" in head and "time_unit: microseconds\n" in head and "mode: real\n" in head
    script = (tmp_path / "replay.sh").read_text()
    for flag in ("--model meta-llama/Llama-2-7b-hf", "--hardware H100", "--tp 1", "--total-kv-blocks 7462",
                 "--max-num-seqs 128", "--max-num-batched-tokens 2048", "--max-model-len 4096",
                 "--block-size-in-tokens 16", "--cache-signal-delay 0", '--latency-model "$LATENCY_MODEL"',
                 "--model-config-folder " + str((data_dir / "model_configs" / "Llama-2-7b-hf").resolve())):
        assert flag in script
    assert script.count('"$BLIS" replay') == 2
    assert subprocess.run(["sh", "-n", str(tmp_path / "replay.sh")]).returncode == 0
    # --horizon: the trace's latest deadline, so BLIS schedules every request's timeout
    manifest = {x["experiment"]: x for x in json.loads((tmp_path / "experiments.json").read_text())["experiments"]}
    for x in small.experiments:
        h = int(pd.read_csv(tmp_path / x.id / "trace.csv")["deadline_us"].max())
        assert manifest[x.id]["horizon_us"] == h and f" --horizon {h} " in script


def test_replay_script_runs_the_experiments_asked_for(gt, data_dir, tmp_path):
    """EXPERIMENTS="ID ..." replays only those (the script's selection, with `true` as the binary:
    nothing is simulated here); an id the export does not have stops it with one line."""
    from evolve.blis_traces import export_blis_traces
    small = _small_gt(gt)
    export_blis_traces(small, tmp_path, data_dir)
    e0, e1 = small.experiments

    def replay(experiments: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", str(tmp_path / "replay.sh")], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "BLIS": "true", "LATENCY_MODEL": "x", "EXPERIMENTS": experiments})
    assert replay(e1.id).returncode == 0
    wall = (tmp_path / "wall-x.tsv").read_text().splitlines()
    assert [w.split("\t")[0] for w in wall] == [e1.id]
    assert (tmp_path / e1.id / "stdout-x.txt").exists() and not (tmp_path / e0.id / "stdout-x.txt").exists()
    assert replay(e0.id).returncode == 0  # a selection adds to the wall-time file
    assert [w.split("\t")[0] for w in (tmp_path / "wall-x.tsv").read_text().splitlines()] == [e1.id, e0.id]
    assert replay("").returncode == 0  # all of them, the file started afresh
    assert [w.split("\t")[0] for w in (tmp_path / "wall-x.tsv").read_text().splitlines()] == [e0.id, e1.id]
    bad = replay(f"{e0.id} nope")
    assert bad.returncode == 2 and bad.stderr.strip() == "replay.sh: no experiment nope here (experiments.json lists them)"


def test_export_carries_the_client_deadline_on_7b_reasoning(gt, data_dir, tmp_path):
    """deadline_us = arrival + the experiment's client timeout (BLIS: absolute, arrival clock)."""
    import dataclasses
    from evolve.blis_traces import export_blis_traces
    e = next(x for x in gt.experiments if x.model == "llama-2-7b" and x.workload == "reasoning")
    req = gt.requests[gt.requests["experiment_id"] == e.id].reset_index(drop=True)
    one = GroundTruth(gt.source, [e], gt.hardware, req, None)
    export_blis_traces(one, tmp_path, data_dir)
    df = pd.read_csv(tmp_path / e.id / "trace.csv", keep_default_na=False)
    assert e.request_timeout_s == 300.0 and len(df) == len(req) > 0
    assert (df["deadline_us"] - df["arrival_time_us"] == 300_000_000).all()
    assert (df["deadline_us"] > 0).all()  # 0 would mean "no timeout" to BLIS
    # every request the server finished did so before its deadline
    ok = df["status"] == "ok"
    assert (df.loc[ok, "last_chunk_time_us"] <= df.loc[ok, "deadline_us"]).all()
    manifest = json.loads((tmp_path / "experiments.json").read_text())
    assert manifest["experiments"][0]["request_timeout_us"] == 300_000_000
    # a configured timeout (load.request_timeout) is what goes out
    short = GroundTruth(gt.source, [dataclasses.replace(e, request_timeout_s=120.5)], gt.hardware, req, None)
    export_blis_traces(short, tmp_path / "short", data_dir)
    df2 = pd.read_csv(tmp_path / "short" / e.id / "trace.csv", keep_default_na=False)
    assert (df2["deadline_us"] - df2["arrival_time_us"] == 120_500_000).all()


def _fake_results(small: GroundTruth, out: Path, name: str, scale: float, drop: int = 0) -> None:
    """BLIS-shaped results: every ok request's measured TTFT and E2E times `scale`."""
    for e in small.experiments:
        req = small.requests[(small.requests["experiment_id"] == e.id) & ~small.requests["has_error"]]
        rows = [{"request_id": int(i), "ttft_us": float(t) * 1e6 * scale, "e2e_us": float(x) * 1e6 * scale,
                 "input_tokens": 1, "output_tokens": 1}
                for i, t, x in zip(req["request_index"], req["ttft_s"], req["e2e_s"])][drop:]
        (out / e.id).mkdir(parents=True, exist_ok=True)
        (out / e.id / f"results-{name}.json").write_text(json.dumps(rows))


def test_compare_scores_blis_results_like_the_evaluator(gt, tmp_path):
    from evolve.blis_compare import compare_rows, read_results, summary
    small = _small_gt(gt)
    _fake_results(small, tmp_path, "exact", 1.0)
    _fake_results(small, tmp_path, "slow", 1.1, drop=3)
    rows = compare_rows(small, read_results(tmp_path))
    assert {(r["experiment"], r["stage"]) for r in rows} == {(e.id, s.index) for e in small.experiments
                                                            for s in e.stages}
    s = summary(rows, ["exact", "slow"])
    assert s["exact"]["e2e_mean"] < 1e-9 and s["exact"]["itl_worst"] < 1e-9 and s["exact"]["missing"] == 0
    assert s["slow"]["e2e_mean"] == pytest.approx(0.1, abs=1e-9)
    assert s["slow"]["ttft_mean"] == pytest.approx(0.1, abs=1e-9)
    assert s["slow"]["missing"] == 0  # the first requests are in the fitted part, not reported


BLIS_STDOUT = """=== Simulation Metrics ===
{
  "instance_id": "cluster",
  "completed_requests": %d,
  "still_queued": 0,
  "still_running": 0,
  "injected_requests": %d,
  "e2e_mean_ms": 146885.2975083207,
  "dropped_unservable": 0,
  "timed_out_requests": %d
}
=== Anomaly Counters ===
Timed Out Requests: %d
"""


def test_compare_counts_failed_requests_per_experiment_and_stage(gt, tmp_path):
    """Measured failures (has_error) against BLIS's (requests with no result), over every request
    sent, per experiment and per stage, with BLIS's own counters from its stdout."""
    from evolve.blis_compare import blis_counts, compare_all, read_results
    small = _small_gt(gt)  # request 5 of the first experiment failed
    _fake_results(small, tmp_path, "exact", 1.0)
    _fake_results(small, tmp_path, "slow", 1.1, drop=3)
    e0, e1 = small.experiments
    n0 = int((small.requests["experiment_id"] == e0.id).sum())
    (tmp_path / e0.id / "stdout-slow.txt").write_text(BLIS_STDOUT % (n0 - 4, n0, 4, 4))
    _, _, failed = compare_all(small, read_results(tmp_path))
    by = {(x["experiment"], x["stage"]): x for x in failed}
    assert set(by) == {(e.id, st) for e in (e0, e1) for st in (None, *(s.index for s in e.stages))}
    w0 = by[(e0.id, None)]
    assert w0["requests"] == n0 and w0["failed_meas"] == 1
    assert w0["exact:failed"] == 1 and w0["slow:failed"] == 4  # the failed one has no result, 3 more dropped
    assert w0["slow:blis_counts"] == {"completed_requests": n0 - 4, "timed_out_requests": 4,
                                      "dropped_unservable": 0, "still_queued": 0, "still_running": 0}
    assert w0["exact:blis_counts"] is None  # no stdout-exact.txt
    assert by[(e1.id, None)]["failed_meas"] == 0 and by[(e1.id, None)]["slow:failed"] == 3
    for e in (e0, e1):  # the stages add up to the experiment
        for k in ("requests", "failed_meas", "exact:failed", "slow:failed"):
            assert sum(by[(e.id, s.index)][k] for s in e.stages) == by[(e.id, None)][k]
    assert blis_counts(tmp_path / "none.txt") is None
    (tmp_path / "junk.txt").write_text("level=fatal msg=x {not json}\n")
    assert blis_counts(tmp_path / "junk.txt") is None


def test_compare_lists_every_stage_it_could_not_compare(gt, tmp_path):
    """No silent drops: a stage without reported successes, a source without a results file, a
    source that finished none of a stage's requests, a results file for an unknown experiment."""
    from evolve.blis_compare import compare, read_results, summary
    small = _small_gt(gt, 3)
    e0, e1, e2 = small.experiments
    req = small.requests.copy()
    # every request of e0's stage 1 failed in the measurement; e2 has no request rows at all
    s1 = req["experiment_id"].eq(e0.id) & (req["arrival_time_us"] >= e0.stages[1].start_s * 1e6)
    req.loc[s1, "has_error"] = True
    req = req[req["experiment_id"] != e2.id].reset_index(drop=True)
    small = GroundTruth(gt.source, [e0, e1, e2], gt.hardware, req, None)
    _fake_results(GroundTruth(gt.source, [e0, e1], gt.hardware, req, None), tmp_path, "exact", 1.0)
    _fake_results(GroundTruth(gt.source, [e0], gt.hardware, req, None), tmp_path, "partial", 1.0)
    (tmp_path / e0.id / "results-none.json").write_text("[]")
    (tmp_path / "bogus-experiment").mkdir()
    (tmp_path / "bogus-experiment" / "results-exact.json").write_text("[]")
    rows, skipped = compare(small, read_results(tmp_path))
    by = {(x["experiment"], x["stage"], x["source"]): x["reason"] for x in skipped}
    assert "failed in the measurement" in by[(e0.id, 1, None)]
    assert "no rows in the ground truth" in by[(e2.id, None, None)]
    assert "not in the ground truth" in by[("bogus-experiment", None, "exact")]
    assert by[(e1.id, 0, "partial")] == "no results-partial.json for this experiment"
    assert by[(e1.id, 0, "none")] == "no results-none.json for this experiment"
    assert "BLIS finished none" in by[(e0.id, 0, "none")]
    assert len(by) == len(skipped) == 6
    # what is in the rows plus what is listed covers every stage of the data
    listed = {(x["experiment"], x["stage"]) for x in skipped if x["source"] is None}
    assert {(r["experiment"], r["stage"]) for r in rows} | listed | {(e2.id, None)} >= {
        (e.id, s.index) for e in (e0, e1) for s in e.stages}
    s = summary(rows, ["exact", "partial", "none"])
    assert s["exact"]["stages"] == 2 and s["partial"]["stages"] == 1 and s["none"]["stages"] == 0
    assert s["none"]["e2e_mean"] is None


def test_compare_cli_lists_what_it_left_out(gt, data_dir, tmp_path, capsys):
    """Text and --json (strict JSON, null for missing) both list the stages not compared."""
    from evolve.cli import main
    small = _small_gt(gt)
    _fake_results(small, tmp_path, "exact", 1.0)
    (tmp_path / small.experiments[0].id / "results-exact.json").write_text("[]")
    n_exps = len(gt.experiments)
    assert main(["blis-compare", str(tmp_path), "--data", str(data_dir), "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    skipped = out["not_compared"]
    reasons = {(x["experiment"], x["stage"], x["source"]): x["reason"] for x in skipped}
    e0 = small.experiments[0]
    assert all("BLIS finished none" in reasons[(e0.id, s.index, "blis:exact")] for s in e0.stages)
    # every other experiment of the data: no results file, one entry per stage (or the stage has
    # nothing to compare at all: the real data has a stage whose reported requests all failed)
    others = [e for e in gt.experiments if e.id not in {x.id for x in small.experiments}]
    assert len(others) == n_exps - 2
    for e in others:
        for st in e.stages:
            assert (reasons.get((e.id, st.index, "blis:exact")) == "no results-exact.json for this experiment"
                    or "failed in the measurement" in reasons[(e.id, st.index, None)])
    assert all(set(x) == {"experiment", "stage", "source", "reason"} for x in skipped)
    row0 = next(r for r in out["rows"] if r["experiment"] == e0.id)
    assert row0["blis:exact:e2e_err"] is None and row0["blis:exact:pred_e2e_s"] is None
    assert main(["blis-compare", str(tmp_path), "--data", str(data_dir)]) in (0, None)
    text = capsys.readouterr().out
    assert f"not compared ({len(skipped)}; left out of the means):" in text
    assert f"  {e0.id} stage 0 (blis:exact): no result for any of its" in text
    assert "stage 0 (blis:exact): no results-exact.json for this experiment" in text
    assert " nan" not in text.lower()
    # failed requests over every request sent: none measured in e0 (the real data), BLIS finished none
    n0 = int((gt.requests["experiment_id"] == e0.id).sum())
    whole = next(x for x in out["failed"] if x["experiment"] == e0.id and x["stage"] is None)
    assert whole["failed_meas"] == 0 and whole["blis:exact:failed"] == n0 and whole["blis:exact:blis_counts"] is None
    assert all(x["blis:exact:failed"] is None for x in out["failed"]
               if x["experiment"] not in {e.id for e in small.experiments})
    assert "failed requests, every request sent" in text
    r7 = next(x for x in out["failed"] if "llama-2-7b-tp1-reasoning" in x["experiment"] and x["stage"] is None)
    assert r7["failed_meas"] == 4068 and r7["requests"] == 4800 and r7["blis:exact:failed"] is None
    assert re.search(rf"{e0.id}\W+all\W+{n0}\W+0\W+{n0}\W+—", text), text
    assert re.search(rf"{r7['experiment']}\W+all\W+4800\W+4068\W+—\W+—", text), text


def test_cli_errors_are_one_line(tmp_path):
    """Bad input ends in one "error: ..." line (sys.exit with the message), never a traceback."""
    from evolve.cli import main
    from tests.hostile import make_archive
    db = tmp_path / "one.db"
    pid = next(iter(make_archive(db, n=1)))
    for args, msg in [
        (("blis-compare", str(tmp_path / "none"), "--data", str(tmp_path)), "no such directory"),
        (("blis-compare", str(tmp_path)), "no <experiment>/results-"),
        (("export-blis-traces", "--data", str(tmp_path / "none"), "-o", str(tmp_path / "o")), "no such directory"),
        (("emit-go", "1", "--archive", str(tmp_path / "none.db"), "-o", "x.go"), "no such archive"),
        (("emit-go", "1", "--archive", str(tmp_path / "none.db")), "no such archive"),
        # an unknown id is named before the missing output (issue 33)
        (("emit-go", "999999", "--archive", str(db)), "no program 999999 in"),
        (("emit-go", str(pid), "--archive", str(db)), "give -o FILE.go, --blis-patch"),
        (("emit-go", str(pid), "--archive", str(db), "--blis-dir", str(tmp_path), "--interface",
          "legacy5"), "need --package latency --interface blis"),
    ]:
        with pytest.raises(SystemExit) as ex:
            main(list(args))
        text = str(ex.value.code)
        assert text.startswith("error: ") and "\n" not in text and msg in text, text
