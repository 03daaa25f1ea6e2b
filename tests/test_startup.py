"""Start-up: `import evolve.cli`, `evolve --help` and `evolve frontier` load none of the heavy
libraries (numba, SciPy, Plotly, Ray, pandas, litellm); each command imports what it runs.

A correctness property checked on sys.modules in a fresh interpreter, not a timing test (the
timing is benchmarks/bench_startup.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("numba", "scipy", "plotly", "ray", "pandas", "litellm")

PROBE = """
import contextlib, io, json, sys
{body}
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})))
"""


def _loaded(body: str, cwd: Path) -> list[str]:
    code = PROBE.format(body=body, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_cli_loads_no_heavy_library(tmp_path):
    assert _loaded("import evolve.cli", REPO) == []


def test_help_loads_no_heavy_library(tmp_path):
    body = """
import evolve.cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    for argv in (["--help"], ["evaluate", "--help"], ["blis-compare", "--help"], ["run", "--help"]):
        try:
            evolve.cli.main(argv)
        except SystemExit as e:
            assert e.code == 0, (argv, e.code)
assert "frontier" in out.getvalue() and "--holdout" in out.getvalue()
"""
    assert _loaded(body, REPO) == []


@pytest.fixture
def small_archive(tmp_path) -> Path:
    from evaluator.records import Evaluation
    from evolve.archive import Archive
    a = Archive(tmp_path / "s.db")
    run = a.start_run({"population": 2}, seed=0, data_fingerprint="startup", budget=4)
    parent: list[int] = []
    for k in range(4):
        e = 0.4 * 0.8 ** k
        rows = [{"experiment": "x", "model": "m", "workload": "w", "stage": 0, "rate": 2.0, "n_requests": 9,
                 "pred_e2e_s": 1 + e, "meas_e2e_s": 1.0, "e2e_err": e, "pred_ttft_s": 0.1, "meas_ttft_s": 0.1,
                 "ttft_err": e, "pred_itl_s": 0.01, "meas_itl_s": 0.01, "itl_err": e}]
        obj = {"step_mape": e, "e2e_mean": e, "e2e_worst": e, "ttft_mean": e, "itl_mean": e, "complexity": 3.0 + k}
        parent = [a.add_candidate(run, f"A = 1.0\n\ndef predict_step_time(P, D):\n    return A * P + D * {k + 2}.0\n",
                                  parents=parent, operator="seed" if k == 0 else "mutate", generation=k,
                                  evaluation=Evaluation(valid=True, rows=rows, objectives=obj,
                                                        constants={"m": [1.0]}))]
    a.close()
    return tmp_path / "s.db"


def test_frontier_loads_no_heavy_library(small_archive, tmp_path):
    body = f"""
import evolve.cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    evolve.cli.main(["frontier", "--json", "--archive", {str(small_archive)!r}])
    evolve.cli.main(["frontier", "--archive", {str(small_archive)!r}])
rows = json.loads(out.getvalue()[:out.getvalue().rindex("]") + 1])
assert rows and all("e2e_mean" in r for r in rows), rows
"""
    assert _loaded(body, tmp_path) == []


def test_a_command_still_imports_what_it_runs(tmp_path):
    """The lazy imports are where the commands run: `evaluate` on a bad file reaches the parser
    (numba) and ends in one error line."""
    bad = tmp_path / "bad.py"
    bad.write_text("def predict_step_time(P):\n    return import_this\n")
    out = subprocess.run([sys.executable, "-m", "evolve.cli", "evaluate", str(bad)], capture_output=True, text=True,
                         timeout=300, cwd=REPO)
    assert out.returncode != 0 and out.stderr.strip().startswith("error: ") and "Traceback" not in out.stderr


def test_the_search_driver_loads_no_solver(tmp_path, small_data):
    """The driver of `evolve run` schedules, archives and checks programs; its workers fit. SciPy's
    solvers and statistics cost each process that imports them ~60 MB (issue 31's 1 GB goal), so
    the driver must not load them, even after a run whose workers fitted programs."""
    body = f"""
import evolve.cli
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    evolve.cli.main(["run", "--budget", "4", "--workers", "1", "--seed", "0", "--handover-starts", "2",
                     "--archive", {str(tmp_path / "a.db")!r}, "--data", {str(small_data)!r}])
import json, re, sqlite3
from seeds import seed_sources
# a budget below the seed programs is said, and the progress counts against what the run makes
n = len(seed_sources())
assert f"every run starts by evaluating the {{n}} seed programs; --budget 4 is fewer" in err.getvalue(), err.getvalue()
assert re.search(rf"progress run-[0-9]+-[0-9a-f]+: [0-9]+/{{n}} evaluations", err.getvalue()), err.getvalue()
assert "/4 evaluations" not in err.getvalue()
# the summary's hand-over line gives the overload failures in points, as every other view does
use = " ".join(out.getvalue().split()).split("use #", 1)[1].split("in-sample", 1)[0]
assert re.search(r"overload failures [0-9]+[.][0-9] pts", use), use
# and then what those means hide: the held-out misses of the program handed over
assert "Held-out misses (beyond 10% or 5 points): " in out.getvalue(), out.getvalue()
con = sqlite3.connect({str(tmp_path / "a.db")!r})
assert con.execute("select count(*) from programs").fetchone()[0] >= 4
# the run ended by fitting its shortlist again from 2 starts (in the workers) and kept them
starts = con.execute("select e.fit_starts from evaluations e join runs r on r.recommended = e.program_id"
                     ).fetchone()[0]
assert json.loads(starts)["starts"] == 2, starts
"""
    loaded = _loaded(body, tmp_path)
    assert "numba" in loaded  # the probe sees what the driver did load
    assert not [m for m in loaded if m.startswith(("scipy.optimize", "scipy.stats"))], loaded
