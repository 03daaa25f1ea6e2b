"""Hostile inputs and how the project answered them: shared by the Hypothesis suite
(tests/test_hostile.py) and the before/after table (benchmarks/hardening_table.py).

Each `*_case(pick)` builds one hostile input from a `pick` function (pick(list) -> element;
Hypothesis' data.draw or random.choice), each `run_*` applies it and returns an outcome:
  "clean"      refused with one clear error (ProgramError, DataError, ArchiveError, exit != 0)
  "ok"         accepted, and acceptable (a damaged archive whose rows all still read back)
  "traceback"  any other exception escaped
  "wrong"      an invalid input was accepted (scored, loaded or parsed as valid)
  "lost"       archive rows that were there before are gone
Every case is invalid by construction, so "ok" is possible only for archives.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import sqlite3
from pathlib import Path

import yaml

OUTCOMES = ("clean", "ok", "traceback", "wrong", "lost")

# ---------------------------------------------------------------- programs

_EXPR = ["P", "D", "B", "t_weights", "1.0", "(P)", "-D"]


def program_case(pick) -> str:
    kind = pick(["deep_sum", "deep_parens", "annotated", "defaults", "lambda", "attr", "import", "bytes",
                 "huge_literal", "call", "walrus", "star", "unicode", "nested_def", "string_const"])
    n = pick([200, 1000, 1500, 3000, 6000])
    e = pick(_EXPR)
    body = {
        "deep_sum": "    return " + " + ".join([e] * n),
        "deep_parens": "    return " + "(" * n + e + " + D)" * n,
        "annotated": f"    return P + D",
        "defaults": "    return P",
        "lambda": "    return (lambda x: x)(P)",
        "attr": "    return P.__class__.__mro__[1]",
        "import": "    return __import__('os').getpid()",
        "bytes": "    return P" + "\x00\x01\xff",
        "huge_literal": "    return P * 1" + "0" * max(n, 400),  # beyond the largest float
        "call": f"    return open('/etc/passwd') or {e}",
        "walrus": "    return (x := P) + x",
        "star": "    return max(*[P, D])",
        "unicode": "    return P + Δ",  # (fullwidth Ｐ is NFKC-folded to P: a valid program)
        "nested_def": "    def f():\n        return P\n    return f()",
        "string_const": "    return 'P' * 3",
    }[kind]
    sig = {"annotated": f"P: {pick(['float(1)', 'int', '[].append(1)', 'P'])}, D",
           "defaults": "P=1.0, D=2.0"}.get(kind, "P, D, B, t_weights")
    return f"def predict_step_time({sig}):\n{body}\n"


def run_program(source: str) -> str:
    """parse_program, then the LLM operator's extraction (validation + Go cap) of the same
    source in a reply: neither may raise, and the operator must refuse it."""
    from evaluator.objectives import Caps
    from evaluator.program import ProgramError, parse_program
    from evolve.llm import LLMMutator, LLMResult, ParentInfo
    try:
        parse_program(source)  # may pass (a long sum is a program); the operator's Go cap refuses it
    except ProgramError:
        pass
    except Exception:  # noqa: BLE001 - what the suite counts
        return "traceback"
    m = LLMMutator("openai/none")
    res = LLMResult(source=None, error=None, prompt=[], reply_text=f"```python\n{source}\n```", model="x")
    try:
        m._extract(res, [ParentInfo("def predict_step_time(P):\n    return P\n")], Caps())
    except Exception:  # noqa: BLE001
        return "traceback"
    return "wrong" if res.program is not None else "clean"


# ---------------------------------------------------------------- ground truth

EXP = "20260217-203421-llama-2-70b-hf-tp4-codegen"  # two load stages, requests and steps


def make_tiny_data(shared: Path, out: Path, trace: bool) -> Path:
    """One experiment of the shared data (plus its model config and hardware); with `trace`
    its request and step rows too."""
    import pandas as pd
    if out.exists():
        shutil.rmtree(out)
    (out / "experiments").mkdir(parents=True)
    shutil.copytree(shared / "experiments" / EXP, out / "experiments" / EXP)
    shutil.copytree(shared / "model_configs" / "Llama-2-70b-hf", out / "model_configs" / "Llama-2-70b-hf")
    shutil.copytree(shared / "hardware", out / "hardware")
    if trace:
        (out / "requests").mkdir()
        (out / "steps").mkdir()
        r = pd.read_parquet(shared / "requests" / "requests.parquet")
        r[r["experiment_id"] == EXP].to_parquet(out / "requests" / "requests.parquet")
        m = pd.read_csv(shared / "requests" / "replay_experiment_meta.csv")
        m[m["experiment_id"] == EXP].to_csv(out / "requests" / "replay_experiment_meta.csv", index=False)
        s = pd.read_parquet(shared / "steps" / "steps.parquet")
        s[s["experiment_id"] == EXP].to_parquet(out / "steps" / "steps.parquet")
    return out


BAD_NUMBERS = [-0.468, -1.0, 0.0, float("nan"), float("inf"), -float("inf")]
BAD_COUNTS = [0, -1, -128]


def gt_case(pick) -> dict:
    target = pick(["stage_e2e", "stage_ttft", "stage_itl", "tp", "max_num_seqs", "kv_blocks", "rate", "rate_huge",
                   "duration", "requests_empty", "requests_all_failed", "requests_negative_e2e", "steps_empty",
                   "steps_no_cycles", "steps_negative_cycle", "block_size", "max_batched"])
    return {"target": target, "number": pick(BAD_NUMBERS), "count": pick(BAD_COUNTS), "stage": pick([0, 1]),
            "rate": pick([1e6, 5e5, 1e9])}


def damage_gt(case: dict, root: Path) -> None:
    """Write the case's impossible value into a tiny data dir (spec or trace, as fits)."""
    import pandas as pd
    d = root / "experiments" / EXP
    t = case["target"]
    if t.startswith("stage_"):
        p = d / f"stage_{case['stage']}_lifecycle_metrics.json"
        j = json.loads(p.read_text())
        key = {"stage_e2e": "request_latency", "stage_ttft": "time_to_first_token",
               "stage_itl": "inter_token_latency"}[t]
        j["successes"]["latency"][key]["mean"] = case["number"] if math.isfinite(case["number"]) else 0.0
        p.write_text(json.dumps(j))
    elif t in ("tp", "max_num_seqs", "block_size", "max_batched"):
        p = d / "exp-config.yaml"
        c = yaml.safe_load(p.read_text())
        c[{"tp": "tensor_parallelism", "max_batched": "max_num_batched_tokens"}.get(t, t)] = case["count"]
        p.write_text(yaml.safe_dump(c))
    elif t == "kv_blocks":
        p = d / "exp-config.yaml"
        c = yaml.safe_load(p.read_text())
        c["kv_blocks_total_gpu"] = case["count"]
        p.write_text(yaml.safe_dump(c))
    elif t in ("rate", "rate_huge", "duration"):
        p = d / "profile.yaml"
        c = yaml.safe_load(p.read_text())
        st = c["load"]["stages"][case["stage"]]
        if t == "rate_huge":
            st["rate"] = case["rate"]
        else:
            st[t] = case["count"] if case["count"] else -1
        p.write_text(yaml.safe_dump(c))
    elif t.startswith("requests_"):
        p = root / "requests" / "requests.parquet"
        r = pd.read_parquet(p)
        if t == "requests_empty":
            r = r.iloc[:0]
        elif t == "requests_all_failed":
            r = r.assign(has_error=True)
        else:
            r.loc[r.index[len(r) // 2], "e2e_s"] = -abs(case["number"]) if math.isfinite(case["number"]) else -1.0
            r.loc[r.index[len(r) // 2], "ttft_s"] = -2.0
        r.to_parquet(p)
    elif t.startswith("steps_"):
        p = root / "steps" / "steps.parquet"
        s = pd.read_parquet(p)
        if t == "steps_empty":
            s = s.iloc[:0]
        elif t == "steps_no_cycles":
            s["next_step_start_delta_us"] = float("nan")
        else:
            i = s["next_step_start_delta_us"].first_valid_index()
            s.loc[i, "next_step_start_delta_us"] = -5.0
        s.to_parquet(p)


def gt_needs_trace(case: dict) -> bool:
    return case["target"].startswith(("requests_", "steps_"))


def run_gt(root: Path) -> str:
    """evaluator.data.load on the damaged directory: it must refuse it."""
    from evaluator.data import DataError, load
    try:
        load(str(root))
    except DataError:
        return "clean"
    except Exception:  # noqa: BLE001
        return "traceback"
    return "wrong"


# ---------------------------------------------------------------- archives

def make_archive(path: Path, n: int = 30) -> dict:
    """A small real archive: one run, n evaluated programs, a stored frontier. Returns
    {program id: e2e_mean} to compare with what reads back."""
    from evaluator.records import Evaluation
    from evolve.archive import Archive
    a = Archive(path)
    run = a.start_run({"budget": n}, seed=0, budget=n)
    want = {}
    for i in range(n):
        src = f"A = {i + 1}.0\n\ndef predict_step_time(P, D):\n    return A * P + D + {i}.5\n"
        obj = {"e2e_mean": 0.01 * (i % 7 + 1), "e2e_worst": 0.2, "ttft_mean": 0.1, "itl_mean": 0.1,
               "step_mape": 0.3, "complexity": float(3 + i % 5)}
        ev = Evaluation(valid=True, objectives=obj, rows=[{"experiment": "x" * 200, "stage": i}])
        pid = a.add_candidate(run, src, operator="seed", evaluation=ev)
        want[pid] = obj["e2e_mean"]
    a.set_frontier(run, list(want)[:5])
    a.close()
    con = sqlite3.connect(path)  # one file, no WAL beside it: what a user copies or damages
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.execute("PRAGMA journal_mode=DELETE")
    con.close()
    return want


def archive_case(pick) -> dict:
    return {"damage": pick(["truncate", "random", "zero", "text", "foreign", "directory", "overwrite4k", "empty"]),
            "frac": pick([0.1, 0.3, 0.5, 0.7, 0.9]), "byte": pick([0, 0x41, 0xFF]),
            "command": pick(["frontier", "frontier", "show", "run_resume"])}


def damage_archive(case: dict, path: Path) -> None:
    data = path.read_bytes()
    d = case["damage"]
    at = int(len(data) * case["frac"]) & ~0xFFF
    if d == "truncate":
        path.write_bytes(data[: max(at, 100)])
    elif d == "random":
        path.write_bytes(bytes((i * 7919 + case["byte"]) % 256 for i in range(len(data))))
    elif d == "zero":
        path.write_bytes(b"\x00" * len(data))
    elif d == "empty":
        path.write_bytes(b"")
    elif d == "text":
        path.write_text("run,program\n1,2\n" * 100)
    elif d == "foreign":
        path.unlink()
        con = sqlite3.connect(path)
        con.execute("create table customers (id integer primary key, name text)")
        con.execute("insert into customers (name) values ('x')")
        con.commit()
        con.close()
    elif d == "directory":
        path.unlink()
        path.mkdir()
    elif d == "overwrite4k":
        at = max(at, 4096)
        path.write_bytes(data[:at] + bytes([case["byte"]]) * 4096 + data[at + 4096:])


def cli(argv: list[str]) -> tuple[int, str]:
    """evolve.cli.main in this process: (exit code, stdout); an escaping exception propagates."""
    from evolve.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code or 0, out.getvalue()


def run_archive(case: dict, path: Path, want: dict, tmp: Path) -> str:
    """One viewer or writer command on the damaged archive: a clear refusal, or every row
    that reads back is the one written (and a viewer leaves the file as it found it)."""
    before = path.read_bytes() if path.is_file() else None
    cmd = case["command"]
    argv = {"frontier": ["frontier", "--archive", str(path), "--json"],
            # an id and a run that are not there: the archive is opened and read, nothing is fitted
            "show": ["show", "999999", "--archive", str(path)],
            "run_resume": ["run", "--resume", "run-0-x", "--budget", "1", "--archive", str(path)]}[cmd]
    try:
        code, out = cli(argv)
    except Exception:  # noqa: BLE001
        return "traceback"
    if cmd != "run_resume" and before is not None and path.is_file() and path.read_bytes() != before:
        return "lost"  # a viewer changed the file
    if code != 0:
        return "clean"
    if cmd == "frontier":
        try:
            rows = json.loads(out)
            got = {r["id"]: r.get("e2e_mean", (r.get("objectives") or {}).get("e2e_mean")) for r in rows}
        except (ValueError, KeyError, TypeError):
            return "wrong"
        return "ok" if got and all(want.get(k) == v for k, v in got.items()) else "wrong"
    return "wrong"  # show of a missing id or resume of a missing run cannot succeed


# ---------------------------------------------------------------- CLI arguments

FLAG_VALUES = ["nan", "inf", "-inf", "-5", "0", "2", "1e309", "", "abc", "99999999999999999999999", "0.5", "-0.0"]
RUN_FLAGS = ["--budget", "--workers", "--generation-size", "--timeout", "--train-fraction", "--seed", "--max-ops",
             "--max-llm-cost", "--max-llm-tokens"]


def cli_case(pick) -> list[str]:
    cmd = pick(["run", "run", "pilot", "baselines", "evaluate", "show", "emit-go", "ui", "replay"])
    v = pick(FLAG_VALUES)
    if cmd == "replay":
        return ["run", "--replay", "run-0-x", "--budget", "5"]
    if cmd in ("run", "pilot"):
        flag = pick(RUN_FLAGS if cmd == "run" else RUN_FLAGS[:7] + ["--runs"])
        extra = ["--llm", "openai/x"] if flag.startswith("--max-llm") else []
        return [cmd, flag, v, *extra]
    if cmd in ("baselines", "evaluate"):
        return [cmd, "--train-fraction", v] + (["prog.py"] if cmd == "evaluate" else [])
    if cmd in ("show", "emit-go"):
        return [cmd, v] + (["-o", "x.go"] if cmd == "emit-go" else [])
    return ["ui", "--port", v]


def _in_range(args) -> bool:
    """Whether every numeric flag the parser let through is one the program can use."""
    def ok(name, test):
        v = getattr(args, name, None)
        return v is None or test(v)
    fin = lambda v: isinstance(v, (int, float)) and math.isfinite(v)  # noqa: E731
    return all([
        ok("budget", lambda v: v >= 1), ok("workers", lambda v: v >= 1), ok("generation_size", lambda v: v >= 1),
        ok("timeout", lambda v: fin(v) and v > 0), ok("train_fraction", lambda v: fin(v) and 0 < v < 1),
        ok("seed", lambda v: v >= 0), ok("max_ops", lambda v: v >= 0), ok("runs", lambda v: v >= 1),
        ok("max_llm_cost", lambda v: fin(v) and v > 0), ok("max_llm_tokens", lambda v: v >= 1),
        ok("port", lambda v: 0 <= v <= 65535), ok("program_id", lambda v: 0 <= v < 2**63),
        not (getattr(args, "replay", None) and not getattr(args, "llm", None)),
    ])


def run_cli_args(argv: list[str]) -> str:
    """Parse only (running the command is not what is tested): refused, or in range."""
    from evolve import cli as c
    p = c.build_parser()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = p.parse_args(argv)
            if hasattr(c, "_check_combinations"):
                c._check_combinations(p, args)
    except SystemExit as e:
        return "clean" if e.code else "wrong"
    except Exception:  # noqa: BLE001
        return "traceback"
    return "ok" if _in_range(args) else "wrong"
