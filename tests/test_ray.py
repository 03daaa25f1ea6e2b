"""The Ray executor on real Ray clusters on 127.0.0.1: a local `ray.init`, and two nodes started
with `ray start --head` plus `ray start --address` on this machine.

What is checked: the same Evaluation as the local evaluator, a runaway candidate's actor process
killed, both nodes used, actors ending with
a killed driver, and `evolve run --executor ray --ray-address` end to end, killed and resumed.
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from evaluator.data import load  # noqa: E402
from evaluator.evaluate import Evaluator  # noqa: E402
from evaluator.program import parse_program  # noqa: E402
from evolve.cli import main  # noqa: E402
from evolve.ray_pool import RayExecutorError, RayPool  # noqa: E402
from evolve.workers import Job  # noqa: E402
from ray_nodes import CLUSTER_ENV, RAY_CLI, free_port, start_head  # noqa: E402
from run_counts import run_counts  # noqa: E402
from seeds import seed_sources  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_ready(pool: RayPool, timeout: float = 300.0) -> None:
    t0 = time.monotonic()
    while not all(s.ready for s in pool.slots):
        assert time.monotonic() - t0 < timeout, "Ray actors never became ready"
        pool.poll()
        time.sleep(0.05)


def test_an_actor_that_cannot_start_is_one_error_not_a_hang():
    """An actor whose constructor raises (here: the judge refuses the train fraction) is one
    RayExecutorError naming the cause. Ray reports it as ActorDiedError, not RayTaskError, and
    the pool used to start one actor after another for ever, the run waiting on it. First in
    the module: its pool starts (and ends) its own local instance, with one CPU for the states
    task and then the actor (local_pool's actor would hold that CPU)."""
    assert not ray.is_initialized()
    pool = RayPool(None, train_fraction=5.0, workers=1, timeout_s=60.0)
    try:
        t0 = time.monotonic()
        with pytest.raises(RayExecutorError) as got:
            while time.monotonic() - t0 < 120:
                pool.poll()
                time.sleep(0.05)
        msg = str(got.value)
        assert msg.startswith("a Ray worker could not start") and "train_fraction" in msg, msg
        assert "\n" not in msg
    finally:
        pool.close()
    assert not ray.is_initialized()


# ------------------------------------------------------------------ a local ray.init

@pytest.fixture(scope="module")
def local_pool():
    pool = RayPool(None, workers=1, timeout_s=600.0, heldout=False)
    assert pool.owns  # a private instance, even with another Ray cluster on this machine
    yield pool
    pool.close()
    assert not ray.is_initialized()  # the pool started this instance, so it ends it
    # (one seed gives the same archive with the Ray executor as with local processes:
    # tests/test_search.py, next to the same check across worker counts)


def test_ray_evaluation_equals_the_local_evaluator(local_pool):
    names = ("roofline", "linear_physics")
    jobs = [Job(i, seed_sources()[n], "screen") for i, n in enumerate(names)]
    got = local_pool.run(jobs)
    ev = Evaluator(load(None))
    for n, res in zip(names, got):
        want = ev.evaluate(parse_program(seed_sources()[n]), refine=False)
        assert res.valid and want.valid
        same = lambda a, b: json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # noqa: E731 (NaN too)
        assert same(res.objectives, want.objectives)
        assert same(res.constants, want.constants)
    # what crossed the wire: a job message out and the Evaluation back, a few kB per candidate
    assert 0 < local_pool.bytes_sent / local_pool.jobs_done < 10_000
    assert 0 < local_pool.bytes_received / local_pool.jobs_done < 100_000


def test_runaway_candidate_is_force_killed(local_pool):
    _wait_ready(local_pool)
    old_pid = local_pool.slots[0].pid
    killed = local_pool.killed
    local_pool.timeout_s = 0.05
    try:
        res = local_pool.run([Job(0, seed_sources()["linear_physics"], "full")])
    finally:
        local_pool.timeout_s = 600.0
    assert res[0].valid is False and "wall-clock limit" in res[0].error
    assert local_pool.killed == killed + 1
    t0 = time.monotonic()
    while _alive(old_pid) and time.monotonic() - t0 < 30:
        time.sleep(0.1)
    assert not _alive(old_pid), "the runaway candidate's process survived"
    # a fresh actor took its place and evaluates the next candidate
    res = local_pool.run([Job(1, seed_sources()["roofline"], "screen")])
    assert res[0].valid
    assert local_pool.slots[0].pid != old_pid


def test_actors_the_cluster_cannot_place_are_said_once(local_pool, capsys):
    """On a cluster whose CPUs are held (here: local_pool's actor holds its instance's one CPU),
    Ray keeps a new pool's states task and actor pending without a word; the pool says so once
    on stderr instead of leaving the run silent at 0 evaluations."""
    _wait_ready(local_pool)
    pool = RayPool(None, workers=1, timeout_s=60.0)  # on local_pool's instance
    pool.place_warn_s = 1.0
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            pool.poll()
            time.sleep(0.05)
        assert not any(s.ready for s in pool.slots)
    finally:
        pool.close()
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("waiting for Ray")]
    assert len(lines) == 1, err
    assert "none of the 1 evaluation actors is ready" in lines[0] and "0 of its 1 CPUs free" in lines[0], lines[0]
    assert ray.is_initialized()  # local_pool's instance is not this pool's to end


# ------------------------------------------------------------------ two nodes with `ray start`

def _active_nodes(address: str, env: dict) -> int:
    r = subprocess.run([RAY_CLI, "status", f"--address={address}"], env=env, capture_output=True, text=True,
                       timeout=120)
    active = r.stdout.split("Active:")[-1].split("Pending:")[0] if "Active:" in r.stdout else ""
    return active.count("node_")


@pytest.fixture(scope="module")
def two_nodes():
    """A head node and a second node on 127.0.0.1, each `ray start --block` in its own session:
    ending those two processes stops each node's Ray processes (`ray stop` would also end any
    other Ray instance of this machine, a test worker's included)."""
    env = {**os.environ, **CLUSTER_ENV}
    port = free_port()
    address = f"127.0.0.1:{port}"
    common = ["--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    t0 = time.monotonic()
    procs = [start_head(port, env, num_cpus=1)]
    try:
        procs.append(subprocess.Popen([RAY_CLI, "start", f"--address={address}", *common], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        while _active_nodes(address, env) < 2:
            assert time.monotonic() - t0 < 300 and procs[1].poll() is None, "the second node did not join"
            time.sleep(1)
        yield address, env
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def test_two_nodes_share_the_candidates(two_nodes, tmp_path, small_data):
    address, env = two_nodes
    script = tmp_path / "driver.py"
    # a driver process of its own: Ray reads the authentication mode once per process
    script.write_text(
        "import json\nfrom evolve.ray_pool import RayPool\nfrom evolve.workers import Job\n"
        "from seeds import seed_sources\n"
        f"pool = RayPool({str(small_data)!r}, workers=2, timeout_s=600.0, address={address!r})\n"
        "got = pool.run([Job(i, s, 'screen') for i, s in enumerate(sorted(seed_sources().values()))])\n"
        "print(json.dumps({'valid': [r.valid for r in got], 'nodes': len(pool.nodes)}))\npool.close()\n")
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["valid"] and all(out["valid"])
    assert out["nodes"] == 2  # one CPU per node: one actor on each


def test_actors_end_with_a_killed_driver(two_nodes, tmp_path):
    address, env = two_nodes
    script = tmp_path / "driver.py"
    script.write_text(
        "import time\nfrom evolve.ray_pool import RayPool\n"
        f"pool = RayPool(None, workers=2, timeout_s=600.0, address={address!r})\n"
        "while not all(s.ready for s in pool.slots):\n    pool.poll(); time.sleep(0.05)\n"
        "print(' '.join(str(s.pid) for s in pool.slots), flush=True)\ntime.sleep(600)\n")
    p = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        pids = [int(x) for x in p.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(x) for x in pids)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    t0 = time.monotonic()
    while any(_alive(x) for x in pids) and time.monotonic() - t0 < 60:
        time.sleep(0.2)
    assert not any(_alive(x) for x in pids), "actors outlived their driver"


def test_evolve_run_on_the_cluster_killed_and_resumed(two_nodes, tmp_path, small_data):
    """`evolve run --executor ray --ray-address` end to end: the driver is SIGKILLed mid-run,
    and `--resume` on the same cluster finishes it with every stored candidate kept."""
    address, env = two_nodes
    db = tmp_path / "cluster.db"
    cmd = [sys.executable, "-m", "evolve.cli", "run", "--no-holdout", "--workers", "2", "--executor", "ray",
           "--ray-address", address, "--archive", str(db), "--generation-size", "2", "--seed", "3",
           "--data", str(small_data)]  # the small ground truth (tests/conftest.py)
    p = subprocess.Popen([*cmd, "--budget", "10"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         cwd=ROOT, start_new_session=True)
    deadline = time.monotonic() + 600
    run = None
    while time.monotonic() < deadline and p.poll() is None:
        time.sleep(1)
        try:
            run, _ = run_counts(db) if db.exists() else (None, 0)
        except sqlite3.OperationalError:
            continue
        if run and run[1] >= 4:
            break
    assert p.poll() is None, "the run ended before it could be killed"
    os.killpg(p.pid, signal.SIGKILL)  # the driver, mid-generation
    p.wait(30)
    run, n = run_counts(db)
    assert run[2] == "running" and run[1] == n >= 4  # nothing half-written
    assert json.loads(run[3])["executor"] == "ray"
    r = subprocess.run([*cmd, "--resume", run[0], "--budget", "10"], env=env, capture_output=True, text=True,
                       timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    run2, n2 = run_counts(db)
    assert run2[0] == run[0] and run2[2] == "finished" and run2[1] == n2 >= 10
    con = sqlite3.connect(db)
    hashes = [h for (h,) in con.execute("select canonical_hash from programs where valid")]
    con.close()
    assert len(hashes) == len(set(hashes))  # the resumed run did not evaluate a stored candidate again


def test_unreachable_cluster_is_one_clear_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "evolve.cli", "run", "--budget", "8", "--executor", "ray",
                        "--ray-address", f"127.0.0.1:{free_port()}", "--archive", str(tmp_path / "x.db")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, **CLUSTER_ENV})
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().startswith("error: cannot reach the Ray cluster at 127.0.0.1:")
    assert len(r.stderr.strip().splitlines()) == 1


def test_ray_address_without_the_ray_executor_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="needs --executor ray"):
        main(["run", "--ray-address", "127.0.0.1:1", "--archive", str(tmp_path / "y.db")])
    assert RayExecutorError  # the error type the CLI turns into one line
