"""Issue 33: nothing blocks. A FIFO, device or directory given as a program or as a data file is
refused before it is opened; `evolve evaluate` runs under a time limit in a killable worker;
`--ray-address auto` with no cluster fails within a bounded time. One line, non-zero exit."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaluator.errors import DataError
from tests import hostile
from bounded import bounded

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "seeds" / "roofline.py"


def evolve(*args, timeout=300):
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "evolve.cli", *args], capture_output=True, text=True, timeout=timeout,
                       cwd=ROOT)
    return p, time.perf_counter() - t0


def one_line(p) -> str:
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.mark.parametrize("kind", ["fifo", "dir", "device"])
def test_evaluate_refuses_non_regular_program(tmp_path, kind):
    path = {"dir": str(tmp_path), "device": "/dev/zero"}.get(kind)
    if kind == "fifo":
        path = str(tmp_path / "p.py")
        os.mkfifo(path)
    p, wall = evolve("evaluate", path, timeout=120)
    line = one_line(p)
    assert line.startswith(f"error: {path}: is a") and "not a program file" in line


def test_evaluate_time_limit_kills_the_worker():
    p, wall = evolve("evaluate", str(SEED), "--time-limit", "0.5", timeout=300)
    line = one_line(p)
    assert "took longer than the time limit of 0.5 s" in line and "killed" in line


def test_evaluate_within_the_limit_still_scores():
    p, _ = evolve("evaluate", str(SEED), "--json", "--time-limit", "600", timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert '"valid": true' in p.stdout


@pytest.fixture
def tiny(data_dir, tmp_path):
    return hostile.make_tiny_data(data_dir, tmp_path / "d", trace=True)


@pytest.mark.parametrize("name", ["profile.yaml", "exp-config.yaml", "stage_0_lifecycle_metrics.json"])
def test_fifo_in_the_data_is_refused(tiny, name):
    from evaluator.data import load
    target = tiny / "experiments" / hostile.EXP / name
    target.unlink()
    os.mkfifo(target)
    with pytest.raises(DataError, match="is a FIFO, not a data file"):
        bounded(lambda: load(str(tiny)), 60)


def test_fifo_table_is_refused(tiny):
    from evaluator.data import load
    target = tiny / "requests" / "requests.parquet"
    target.unlink()
    os.mkfifo(target)
    with pytest.raises(DataError, match="requests.parquet: is a FIFO"):
        bounded(lambda: load(str(tiny)), 60)


def test_data_that_is_a_fifo_itself(tmp_path):
    from evaluator.data import load
    os.mkfifo(tmp_path / "d")
    with pytest.raises(DataError, match="not a directory"):
        bounded(lambda: load(str(tmp_path / "d")), 60)


def test_cli_data_fifo_is_one_line(tiny):
    target = tiny / "experiments" / hostile.EXP / "profile.yaml"
    target.unlink()
    os.mkfifo(target)
    p, _ = evolve("baselines", "--data", str(tiny), timeout=120)
    assert "is a FIFO, not a data file" in one_line(p)


# ---------------------------------------------------------------- Ray

@pytest.fixture
def no_local_ray(tmp_path, monkeypatch):
    """No RAY_ADDRESS, an empty Ray temp dir, no local GCS process (whatever runs beside us)."""
    import ray._private.services as services
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: frozenset())
    return tmp_path


def test_ray_auto_without_a_cluster_fails_fast(no_local_ray):
    from evolve.ray_pool import RayExecutorError, check_address
    t0 = time.perf_counter()
    with pytest.raises(RayExecutorError, match="--ray-address auto: no running Ray cluster") as ei:
        bounded(lambda: check_address("auto"), 30)
    assert time.perf_counter() - t0 < 20 and "\n" not in str(ei.value)


def test_ray_auto_with_a_stale_cluster_file_fails_fast(no_local_ray, monkeypatch):
    import socket

    from evolve.ray_pool import RayExecutorError, check_address
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")  # what a dead `ray start` leaves
    t0 = time.perf_counter()
    with pytest.raises(RayExecutorError, match=f"cannot reach the Ray cluster at auto \\(127.0.0.1:{port}\\)"):
        bounded(lambda: check_address("auto"), 30)
    assert time.perf_counter() - t0 < 20


def test_ray_unroutable_address_is_bounded():
    from evolve.ray_pool import RayExecutorError, check_address
    t0 = time.perf_counter()
    with pytest.raises(RayExecutorError):
        bounded(lambda: check_address("192.0.2.1:6379", timeout_s=2.0), 30)  # TEST-NET-1: no answer
    assert time.perf_counter() - t0 < 10
    with pytest.raises(RayExecutorError, match="must be host:port"):
        check_address("http://x:1")
