"""Every machine-readable answer is strict JSON: null for a missing or non-finite figure.

One parser that refuses NaN and Infinity reads every `--json` output (baselines on the
embedded default, evaluate on a program whose errors are infinite, frontier over an archive
with infinite objectives, components) and every HTTP answer of the UI (runs, points,
program, go, baselines and the error answers)."""
import json
import urllib.error
import urllib.request

import pytest

from evaluator.records import Evaluation, strict_json
from evolve.archive import Archive
from evolve.views.server import make_server
from tests import hostile


def _refuse(name):
    raise ValueError(f"not strict JSON: {name}")


def strict(text: str):
    return json.loads(text, parse_constant=_refuse)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    path = tmp_path_factory.mktemp("sj") / "a.db"
    hostile.make_archive(path, n=4)
    a = Archive(path)
    run = a.runs()[0]["id"]
    inf = {"e2e_mean": float("inf"), "e2e_worst": float("nan"), "ttft_mean": 0.1, "itl_mean": 0.1,
           "step_mape": float("nan"), "complexity": 2.0}
    pid = a.add_candidate(run, "def predict_step_time(B):\n    return 2.0 * B\n", operator="seed",
                          evaluation=Evaluation(valid=True, objectives=inf))
    a.close()
    return path, pid


def test_every_json_output_is_strict(archive, tmp_path):
    path, pid = archive
    prog = tmp_path / "zero.py"
    prog.write_text("def predict_step_time(B):\n    return B * 0.0\n")  # no finite error anywhere
    outputs = {
        "baselines": hostile.cli(["baselines", "--json"]),
        "evaluate": hostile.cli(["evaluate", str(prog), "--json"]),
        "frontier": hostile.cli(["frontier", "--archive", str(path), "--json"]),
        "components": hostile.cli(["components", "--json", "--model", "llama-2-7b"]),
    }
    for name, (code, out) in outputs.items():
        assert out.strip(), name
        strict(out)  # raises on NaN / Infinity
    assert outputs["evaluate"][0] == 1  # invalid program: non-zero exit, still strict JSON
    ev = strict(outputs["evaluate"][1])
    assert ev["valid"] is False
    fr = strict(outputs["frontier"][1])
    assert any(r["id"] == pid and r["e2e_mean"] is None for r in fr) or all(r["id"] != pid for r in fr)


def test_every_http_answer_is_strict(archive):
    path, pid = archive
    server, _ = make_server(path)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for route in ("/api/runs", "/api/points", f"/api/program/{pid}", f"/api/program/{pid}/go",
                      "/api/baselines", "/api/program/abc", "/api/points?max_complexity=nan", "/api/nothing"):
            try:
                with urllib.request.urlopen(base + route, timeout=300) as r:
                    body = r.read().decode()
            except urllib.error.HTTPError as e:
                body = e.read().decode()
            strict(body)
    finally:
        server.shutdown()
        server.server_close()


def test_the_archive_itself_is_strict_json(archive):
    """The archive is for users too: SQLite's JSON functions (which reject NaN and Infinity in
    a document) read every JSON column of every row, and the non-finite objectives a program
    was written with come back to the search as NaN (both rank as INVALID)."""
    import math
    import sqlite3
    path, pid = archive
    con = sqlite3.connect(path)
    for table, cols in (("evaluations", ("objectives", "rows", "steps", "constants", "overheads", "holdout",
                                         "identifiability", "fingerprint")),
                        ("runs", ("config",)), ("programs", ("parent_ids", "components"))):
        for col in cols:
            bad = con.execute(f"select count(*) from {table} where {col} is not null and not json_valid({col})"
                              ).fetchone()[0]
            assert bad == 0, (table, col)
            for (text,) in con.execute(f"select {col} from {table} where {col} is not null"):
                strict(text)
    e2e = con.execute("select json_extract(e.objectives, '$.ttft_mean'), json_type(e.objectives, '$.e2e_mean') "
                      "from evaluations e where program_id = ?", (pid,)).fetchone()
    assert e2e == (0.1, "null")
    con.close()
    a = Archive(path)
    obj = a.program(pid)["evaluation"]["objectives"]
    a.close()
    assert math.isnan(obj["e2e_mean"]) and math.isnan(obj["step_mape"]) and obj["ttft_mean"] == 0.1


def test_one_walker_two_policies():
    """The archive and the views share `strict_json`: both store non-finite numbers as null and
    numpy values as numbers; only the views' loose policy turns what JSON cannot hold into a
    string, so the archive still refuses it (the write fails whole: test_add_candidate_is_atomic)."""
    import math
    from pathlib import Path

    import numpy as np
    value = {"a": [np.float64("nan"), np.int64(3), (math.inf, 1.5)], "p": Path("/x"), 7: {np.float32(2.5)}}
    assert strict_json(value) == {"a": [None, 3, [None, 1.5]], "p": "/x", 7: [2.5]}
    assert json.loads(json.dumps(strict_json(value), allow_nan=False)) == {"a": [None, 3, [None, 1.5]], "p": "/x",
                                                                         "7": [2.5]}
    with pytest.raises(TypeError):
        json.dumps(strict_json({"x": object()}), allow_nan=False)
    loose = strict_json({"x": object, 7: np.array([np.nan, 1.0])}, loose=True)
    assert loose == {"x": str(object), "7": [None, 1.0]}
