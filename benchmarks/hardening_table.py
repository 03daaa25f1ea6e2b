"""The hardening table (issues 15 and 33): hostile inputs per category and how the code answered them.

    .venv/bin/python benchmarks/hardening_table.py --n 40                        # this checkout
    git archive 27747e0 | tar -x -C /tmp/base15
    PYTHONPATH=/tmp/base15 .venv/bin/python benchmarks/hardening_table.py --n 40  # before
    .venv/bin/python benchmarks/hardening_table.py --only issue33 --n 40          # the second pass's categories

Cases and classification are those of the Hypothesis suite (tests/hostile.py), drawn here
with random.Random(seed) so both checkouts see the same inputs. Each case runs in this
process under a 60 s alarm ("hang" past it). Columns: tried, clean error, traceback, hang,
silently wrong, lost, ok (accepted and correct: only possible where a case may be valid).

Issue 33's categories: the ground-truth values it names (every one of GT33_VALUES:
tensor_parallelism 2.7, max_num_seqs 1.5, negative failure counts, "false" strings, an E2E of
1e12 s, zero FLOP/s, TP 0, infinities, huge declared sizes), malformed JSON files of the ground
truth, malformed ingest files (`evolve ingest`), malformed BLIS result files (`blis-compare`),
unknown ids (every command that takes one), bad flag combinations (the whole command, not only
the parser), hostile requests to the UI server (its log must hold no traceback) and the
inputs that used to hang (FIFOs, a 300-constant program, `--ray-address auto` with no cluster,
an LLM server that trickles its reply).
"""
from __future__ import annotations

import argparse
import http.client
import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("STEPEVOLVE_DATA") or HERE.parent / "shared" / "data")


def _hostile():
    spec = importlib.util.spec_from_file_location("hostile", HERE / "tests" / "hostile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Hang(Exception):
    pass


def _timed(fn, *a, limit=60):
    def alarm(*_):
        raise _Hang()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(limit)
    try:
        return fn(*a)
    except _Hang:
        return "hang"
    except BaseException as e:  # noqa: BLE001 - anything the classifier did not catch
        return "traceback" if not isinstance(e, KeyboardInterrupt) else (_ for _ in ()).throw(e)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------- the UI server

UI_REQUESTS = [
    ("GET", "/api/program/abc"), ("GET", "/api/program/-1"), ("GET", "/api/program/99999999999999999999999"),
    ("GET", "/api/program/999999"), ("GET", "/api/program/999999/go"), ("GET", "/api/program/1/go/../../x"),
    ("GET", "/api/points?run=run-9-nope"), ("GET", "/api/points?max_complexity=abc"),
    ("GET", "/api/points?max_complexity=nan"), ("GET", "/api/points?max_complexity=1e999"),
    ("GET", "/api/points?max_complexity=-1"), ("GET", "/api/baselines?run=%00"), ("GET", "/api/runs?x=%ZZ"),
    ("GET", "/../../etc/passwd"), ("GET", "/%ZZ"), ("GET", "/" + "a" * 60_000), ("GET", "/api/" + "/" * 5000),
    ("POST", "/api/runs"), ("PUT", "/"), ("DELETE", "/api/program/1"), ("HEAD", "/api/program/abc"),
    ("GET", "/api/program/1%00"), ("GET", "/api/points?run=" + "x" * 10_000), ("RAW", b"GARBAGE\r\n\r\n"),
    ("RAW", b"GET / HTTP/1.1\r\nContent-Length: -5\r\n\r\n"), ("RAW", b"\x16\x03\x01\x02\x00\x01\x00"),
    ("RAW", b"GET /api/runs HTTP/1.1\r\nHost: x\r\n" + b"X-A: " + b"b" * 100_000 + b"\r\n\r\n"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ui_cases(archive: Path, tmp: Path, tally) -> None:
    """`evolve ui` in a subprocess; each hostile request must be answered (4xx/2xx), never a
    500, never a hang, and the server's log must gain no traceback."""
    port = _free_port()
    log = tmp / "ui.log"
    with open(log, "w") as f:
        p = subprocess.Popen([sys.executable, "-m", "evolve.cli", "ui", "--archive", str(archive), "--port", str(port)],
                             stdout=f, stderr=subprocess.STDOUT, cwd=HERE)
    try:
        t0 = time.time()
        while time.time() - t0 < 120:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.3)
        for method, path in UI_REQUESTS:
            before = log.read_text().count("Traceback")
            status = None
            try:
                if method == "RAW":
                    # an unfinished request line may wait for the rest: answered or closed within
                    # the server's 30 s idle timeout, else a hang
                    with socket.create_connection(("127.0.0.1", port), timeout=45) as sock:
                        sock.sendall(path)
                        head = sock.recv(64)
                    status = int(head.split()[1]) if head.startswith(b"HTTP/") else 0
                else:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                    c.request(method, path)
                    status = c.getresponse().status
                    c.close()
            except (TimeoutError, socket.timeout):
                tally("UI server requests", "hang", (method, path[:80]))
                continue
            except (ConnectionError, OSError, http.client.HTTPException):
                status = 0  # the server closed the connection on garbage: an answer too
            time.sleep(0.2)
            tb = log.read_text().count("Traceback") > before or p.poll() is not None
            tally("UI server requests", "traceback" if tb or status and status >= 500 else "clean",
                  (method, path[:80], status))
    finally:
        p.terminate()
        p.wait(30)


# ---------------------------------------------------------------- inputs that used to hang

def _sub(argv: list[str], limit: float, env=None) -> tuple[str, str]:
    """(outcome, output) of `python -m evolve.cli ARGV`: clean = exit != 0 in one line."""
    try:
        r = subprocess.run([sys.executable, "-m", "evolve.cli", *argv], capture_output=True, text=True,
                           timeout=limit, cwd=HERE, env=env)
    except subprocess.TimeoutExpired:
        return "hang", ""
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    if "Traceback" in r.stderr:
        return "traceback", r.stderr[-300:]
    return ("clean" if r.returncode and len(err) == 1 else "wrong"), r.stderr[-300:]


def hang_cases(h, tiny_spec: Path, tmp: Path, tally) -> None:
    cat = "inputs that used to hang"
    fifo = tmp / "prog.py"
    os.mkfifo(fifo)
    tally(cat, *_sub(["evaluate", str(fifo)], 60))
    data = tmp / "fifo-data"
    shutil.copytree(tiny_spec, data)
    cfg = data / "experiments" / h.EXP / "exp-config.yaml"
    cfg.unlink()
    os.mkfifo(cfg)
    prog = tmp / "seed.py"
    prog.write_text("def predict_step_time(P, D):\n    return 0.001 + 1e-6 * P\n")
    tally(cat, *_sub(["evaluate", str(prog), "--data", str(data)], 60))
    big = tmp / "big.py"
    consts = [f"C{i} = {i + 1}.0" for i in range(300)]
    big.write_text("\n".join(consts) + "\n\ndef predict_step_time(P, D):\n    return "
                   + " + ".join(f"C{i} * P" for i in range(300)) + "\n")
    tally(cat, *_sub(["evaluate", str(big), "--time-limit", "5"], 90))
    # --ray-address auto where no cluster runs (other Ray clusters of this machine hidden, as tests/test_hangs.py)
    code = ("import functools, ray._private.services as s\n"
            "s.find_gcs_addresses = functools.lru_cache()(lambda: frozenset())  # Ray clears its cache at exit\n"
            "from evolve.ray_pool import RayExecutorError, check_address\n"
            "try:\n    check_address('auto')\nexcept RayExecutorError as e:\n    raise SystemExit(f'error: {e}')\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(tmp), TMPDIR=str(tmp))
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=HERE, env=env)
        ok = r.returncode and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
        tally(cat, "clean" if ok else ("traceback" if "Traceback" in r.stderr else "wrong"), r.stderr[-300:])
    except subprocess.TimeoutExpired:
        tally(cat, "hang")
    # an OpenAI-compatible server that trickles its reply one byte at a time
    sys.path.insert(0, str(HERE / "tests"))
    from openai_stub_server import StubServer

    import litellm  # noqa: F401 - its import (seconds on a busy machine) is not the call's deadline

    from evolve.llm import LLMMutator, ParentInfo
    for mode in ("trickle", "stall"):
        with StubServer() as stub:
            stub.push_hostile(mode, interval_s=0.2)
            m = LLMMutator("openai/stub-model", api_base=stub.api_base, api_key="t", max_retries=0, timeout_s=3.0)
            t0 = time.time()
            r = _timed(m.propose, "improve", [ParentInfo("def predict_step_time(P):\n    return P\n")])
            if r in ("hang", "traceback"):
                tally(cat, r, mode)
            else:
                tally(cat, "clean" if r.source is None and "deadline" in (r.error or "") and time.time() - t0 < 10
                      else "wrong", (mode, r.error))


def issue33(h, args, tmp: Path, tiny: dict, pick, tally) -> None:
    from evolve.archive import Archive
    for case in h.GT33_VALUES:  # every one of them
        root = tmp / "gt33"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(tiny[False], root)
        damaged = h.damage_gt33(case, root)
        tally("GT values the issue names", _timed(h.run_gt33, root, damaged), case)
    for _ in range(args.n):
        case = h.json_case(pick)
        root = tmp / "json"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(tiny[False], root)
        tally("malformed ground-truth JSON/YAML", _timed(h.run_json, case, root), case)
    ing = tmp / "ingest"
    for _ in range(args.n):
        shutil.rmtree(ing, ignore_errors=True)
        ing.mkdir()
        case = h.ingest_case(pick)
        tally("malformed ingest files", _timed(h.run_ingest, case, HERE / "tests" / "fixtures", ing), case)
    for _ in range(args.n):
        out = tmp / "blis"
        shutil.rmtree(out, ignore_errors=True)
        path = h.make_blis_results(tiny[True], out)
        case = h.blis_case(pick)
        h.damage_blis(case, path)
        tally("malformed BLIS result files", _timed(h.run_blis, out, tiny[True]), case)
    from evolve.config import RunConfig
    db = tmp / "ids.db"
    pid = next(iter(h.make_archive(db, config=RunConfig(budget=30).to_json())))  # a whole stored config
    a = Archive(db, readonly=True)
    run_id = a.runs()[0]["id"]
    a.close()
    for argv in _all(h.unknown_id_case):
        tally("unknown ids", _timed(h.run_unknown_id, argv, db, tmp), argv)
    for argv in _all(h.flags_case):
        tally("bad flag combinations", _timed(h.run_flags, argv, db, run_id, pid, tmp), argv)
    ui_cases(db, tmp, tally)
    hang_cases(h, tiny[False], tmp, tally)


def _all(case_fn) -> list:
    """Every choice of a one-pick case builder."""
    got = []
    case_fn(lambda seq: got.extend(seq) or seq[0])
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40, help="cases per category")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--only", choices=("issue15", "issue33"), default=None)
    args = ap.parse_args()
    h = _hostile()
    rng = random.Random(args.seed)
    pick = rng.choice
    tmp = Path(tempfile.mkdtemp(prefix="hardening-"))
    tiny = {t: h.make_tiny_data(SHARED, tmp / ("trace" if t else "spec"), trace=t) for t in (False, True)}
    src = tmp / "src.db"
    want = h.make_archive(src)
    counts: dict[str, dict[str, int]] = {}

    failures: list[str] = []

    def tally(cat, outcome, what=None):
        counts.setdefault(cat, {o: 0 for o in (*h.OUTCOMES, "hang")})[outcome] += 1
        if outcome in ("traceback", "hang", "wrong", "lost"):
            failures.append(f"{cat}: {outcome}: {str(what)[:160]}")

    if args.only != "issue15":
        issue33(h, args, tmp, tiny, pick, tally)
    for _ in range(args.n if args.only != "issue33" else 0):
        tally("untrusted programs", _timed(h.run_program, h.program_case(pick)))
    for _ in range(args.n if args.only != "issue33" else 0):
        case = h.gt_case(pick)
        root = tmp / "gt"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(tiny[h.gt_needs_trace(case)], root)
        h.damage_gt(case, root)
        tally("impossible ground truth", _timed(h.run_gt, root))
    for i in range(args.n if args.only != "issue33" else 0):
        case = h.archive_case(pick)
        (tmp / f"a{i}").mkdir()  # a fresh directory: no WAL file of an earlier case beside it
        path = tmp / f"a{i}" / "a.db"
        shutil.copyfile(src, path)
        h.damage_archive(case, path)
        tally("damaged archive", _timed(h.run_archive, case, path, want, tmp))
    for _ in range(args.n if args.only != "issue33" else 0):
        tally("CLI arguments", _timed(h.run_cli_args, h.cli_case(pick)))
    cols = ("clean", "traceback", "hang", "wrong", "lost", "ok")
    print("| category | tried | clean error | traceback | hang | silently wrong | lost | ok |")
    print("|---|---|---|---|---|---|---|---|")
    for cat, c in counts.items():
        print(f"| {cat} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in cols) + " |")
    tot = {k: sum(c[k] for c in counts.values()) for k in cols}
    print(f"| **all** | {sum(tot.values())} | " + " | ".join(str(tot[k]) for k in cols) + " |")
    for f in failures:
        print(f"  {f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
