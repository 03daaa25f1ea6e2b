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

def make_archive(path: Path, n: int = 30, config: dict | None = None) -> dict:
    """A small real archive: one run (its stored `config`), n evaluated programs, a stored
    frontier. Returns {program id: e2e_mean} to compare with what reads back."""
    from evaluator.records import Evaluation
    from evolve.archive import Archive
    a = Archive(path)
    run = a.start_run(config or {"budget": n}, seed=0, budget=n)
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


# ================================================================ issue 33: the second pass's categories
# Each case is invalid by construction unless said otherwise; the runners classify as above
# ("clean" / "ok" / "traceback" / "wrong"); benchmarks/hardening_table.py adds "hang".

def _one_line_exit(code, msg) -> bool:
    return code not in (0, None) and "\n" not in str(msg).strip() and "Traceback" not in str(msg)


def cli_msg(argv: list[str]) -> tuple[int, str, str]:
    """evolve.cli.main in this process: (exit code, stdout, the error line or stderr); an
    escaping exception propagates."""
    from evolve.cli import main
    out, err = io.StringIO(), io.StringIO()
    msg = ""
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code, msg = (e.code, "") if isinstance(e.code, int) or e.code is None else (1, str(e.code))
    text = msg or err.getvalue().strip()
    return code or 0, out.getvalue(), text


# ---------------------------------------------------------------- ground-truth values the issue names

# (file under the tiny data dir, field path, value): every one outside its field's domain
GT33_VALUES = [
    ("exp", "tensor_parallelism", 2.7), ("exp", "tensor_parallelism", 0), ("exp", "tensor_parallelism", -4),
    ("exp", "tensor_parallelism", float("inf")), ("exp", "tensor_parallelism", "2"),
    ("exp", "tensor_parallelism", 10**15), ("exp", "max_num_seqs", 1.5), ("exp", "max_num_seqs", 0),
    ("exp", "max_num_seqs", "false"), ("exp", "max_num_seqs", 10**15), ("exp", "kv_blocks_total_gpu", 10**15),
    ("exp", "kv_blocks_total_gpu", 1e300), ("exp", "block_size", 2.5), ("exp", "max_model_len", 10**15),
    ("exp", "max_num_batched_tokens", float("nan")),
    ("stage", "failures.count", -3), ("stage", "failures.count", 2.5), ("stage", "failures.count", "false"),
    ("stage", "successes.count", -1), ("stage", "successes.latency.request_latency.mean", 1e12),
    ("stage", "successes.latency.request_latency.mean", float("inf")),
    ("stage", "successes.latency.time_to_first_token.mean", -float("inf")),
    ("stage", "successes.latency.request_latency.mean", "false"),
    ("profile", "server.ignore_eos", "false"), ("profile", "server.ignore_eos", "true"),
    ("profile", "server.ignore_eos", 0), ("profile", "load.stages.0.rate", float("inf")),
    ("profile", "load.stages.0.rate", 1e300), ("profile", "load.stages.1.duration", 1e12),
    ("profile", "data.shared_prefix.output_len", 10**12), ("profile", "data.shared_prefix.question_len", 2.5),
    ("hardware", "compute.bf16_tensor_core", 0), ("hardware", "compute.bf16_tensor_core", 0.0),
    ("hardware", "compute.bf16_tensor_core", -1.0), ("hardware", "memory.bandwidth_tb_s", 0),
    ("hardware", "memory.bandwidth_tb_s", float("inf")), ("hardware", "compute.with_sparsity", "false"),
    ("model", "num_hidden_layers", 10**12), ("model", "hidden_size", 10**15), ("model", "vocab_size", 10**18),
    ("model", "num_hidden_layers", 2.5), ("model", "num_attention_heads", 0), ("model", "intermediate_size", -1),
]
_GT33_FILES = {"exp": f"experiments/{EXP}/exp-config.yaml", "profile": f"experiments/{EXP}/profile.yaml",
               "stage": f"experiments/{EXP}/stage_0_lifecycle_metrics.json", "hardware": "hardware/h100-sxm.json",
               "model": "model_configs/Llama-2-70b-hf/config.json"}


def gt33_case(pick) -> tuple:
    return pick(GT33_VALUES)


def damage_gt33(case: tuple, root: Path) -> Path:
    which, field, value = case
    path = root / _GT33_FILES[which]
    doc = yaml.safe_load(path.read_text())  # JSON is YAML
    cur = doc
    keys = [int(k) if k.isdigit() else k for k in field.split(".")]
    for k in keys[:-1]:
        cur = cur[k]
    cur[keys[-1]] = value
    path.write_text(json.dumps(doc, allow_nan=True) if path.suffix == ".json" else yaml.safe_dump(doc))
    return path


def run_gt33(root: Path, damaged: Path) -> str:
    """Load the directory, then screen a seed on it: a DataError naming the file in one line is
    clean; a load that passes is wrong (so is an evaluation that blames the program)."""
    from evaluator.data import DataError, load
    try:
        load(str(root))
    except DataError as e:
        return "clean" if damaged.name in str(e) and "\n" not in str(e) else "wrong"
    except Exception:  # noqa: BLE001
        return "traceback"
    return "wrong"


# ---------------------------------------------------------------- malformed files (generic damage)

SYNTAX_DAMAGE = ["truncate", "empty", "binary", "nested", "wrong_top", "null", "text"]
VALUE_DAMAGE = ["nan", "inf", "string", "huge"]
_NUM = __import__("re").compile(r'(?<=": )-?\d+(\.\d+)?([eE][-+]?\d+)?')


def damage_file(path: Path, how: str, which: int = 0) -> None:
    """Break a JSON (or JSON lines) file: its syntax (must be refused) or one number's value."""
    text = path.read_text()
    if how == "truncate":
        path.write_text(text[: max(1, len(text) // 2)])
    elif how == "empty":
        path.write_text("")
    elif how == "binary":
        path.write_bytes(bytes(range(256)) * 8)
    elif how == "nested":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif how == "wrong_top":
        path.write_text("[]" if text.lstrip().startswith("{") else '{"a": 1}')
    elif how == "null":
        path.write_text("null")
    elif how == "text":
        path.write_text("request_id,ttft_us\n1,2\n")
    else:
        nums = list(_NUM.finditer(text))
        if not nums:
            path.write_text("")
            return
        m = nums[which % len(nums)]
        new = {"nan": "NaN", "inf": "1e999", "string": '"false"', "huge": "1" + "0" * 400}[how]
        path.write_text(text[: m.start()] + new + text[m.end():])


def json_case(pick) -> dict:
    return {"file": pick(["stage", "hardware", "model", "resolved"]), "how": pick(SYNTAX_DAMAGE),
            "which": pick(range(40))}


def run_json(case: dict, root: Path) -> str:
    from evaluator.data import DataError, load
    rel = {"stage": f"experiments/{EXP}/stage_1_lifecycle_metrics.json", "hardware": "hardware/h100-sxm.json",
           "model": "model_configs/Llama-2-70b-hf/config.json",
           "resolved": f"experiments/{EXP}/inference_perf_resolved_config.yaml"}[case["file"]]
    damage_file(root / rel, case["how"], case["which"])
    try:
        load(str(root))
    except DataError as e:
        return "clean" if "\n" not in str(e) else "wrong"
    except Exception:  # noqa: BLE001
        return "traceback"
    if case["file"] == "resolved" and case["how"] in ("truncate", "empty", "null", "wrong_top"):
        return "ok"  # YAML cut short (or emptied) still parses, and every field of that file is optional
    return "wrong"  # a file whose syntax is broken was read as valid


# ---------------------------------------------------------------- ingest files

INGEST_FILES = {  # fixture -> extra ingest arguments
    "ingest_formats/guidellm_v05.json": [], "ingest_formats/guidellm_v03.json": [],
    "ingest_formats/vllm_bench.json": [], "ingest_formats/otel_requests.json": [],
    "ingest/lifecycle_valid.json": ["--lifecycle"], "ingest/traces_valid.json": ["--traces"],
}


def ingest_case(pick) -> dict:
    return {"file": pick(sorted(INGEST_FILES)), "how": pick(SYNTAX_DAMAGE + VALUE_DAMAGE), "which": pick(range(60))}


def run_ingest(case: dict, fixtures: Path, tmp: Path) -> str:
    """`evolve ingest` of a damaged file: one line and exit 1, or a ground truth that loads
    (a broken syntax must be refused; a changed value may be valid)."""
    from evaluator.data import DataError, load
    src = fixtures / case["file"]
    f = tmp / src.name
    shutil.copyfile(src, f)
    damage_file(f, case["how"], case["which"])
    out = tmp / "gt-out"
    shutil.rmtree(out, ignore_errors=True)
    flag = INGEST_FILES[case["file"]]
    argv = ["ingest", *(flag + [str(f)] if flag else [str(f)]), "--experiment", "x", "--out", str(out)]
    if flag:
        argv += ["--model", "meta-llama/Llama-2-7b-hf"]
    try:
        code, _, msg = cli_msg(argv)
    except Exception:  # noqa: BLE001
        return "traceback"
    if code:
        return "clean" if _one_line_exit(code, msg) else "traceback"
    if case["how"] in SYNTAX_DAMAGE:
        return "wrong"
    if flag:  # --traces / --lifecycle write only steps/ or requests/: nothing more to load
        return "ok"
    try:
        load(str(out))
    except DataError:
        return "wrong"  # ingest wrote what the loader refuses
    except Exception:  # noqa: BLE001
        return "traceback"
    return "ok"


# ---------------------------------------------------------------- BLIS result files

BLIS_DAMAGE = SYNTAX_DAMAGE + ["negative", "nan_value", "string_value", "bool_value", "fractional_id",
                               "missing_key", "e2e_before_ttft", "not_a_record", "inf_value"]


def make_blis_results(trace_root: Path, out: Path) -> Path:
    """BLIS-shaped results for the tiny trace data: every successful request as measured."""
    import pandas as pd
    r = pd.read_parquet(trace_root / "requests" / "requests.parquet")
    r = r[~r["has_error"].astype(bool)]
    rows = [{"request_id": int(i), "ttft_us": float(t) * 1e6, "e2e_us": float(x) * 1e6, "input_tokens": 1,
             "output_tokens": 1} for i, t, x in zip(r["request_index"], r["ttft_s"], r["e2e_s"])]
    (out / EXP).mkdir(parents=True, exist_ok=True)
    path = out / EXP / "results-evolved.json"
    path.write_text(json.dumps(rows))
    return path


def blis_case(pick) -> dict:
    return {"how": pick(BLIS_DAMAGE), "row": pick([0, 1, 5, -1])}


def damage_blis(case: dict, path: Path) -> None:
    how = case["how"]
    if how in SYNTAX_DAMAGE:
        damage_file(path, how)
        return
    rows = json.loads(path.read_text())
    r = rows[case["row"]]
    if how == "negative":
        r["e2e_us"] = -abs(r["e2e_us"])
    elif how == "nan_value":
        r["ttft_us"] = float("nan")
    elif how == "inf_value":
        r["e2e_us"] = float("inf")
    elif how == "string_value":
        r["e2e_us"] = "fast"
    elif how == "bool_value":
        r["ttft_us"] = True
    elif how == "fractional_id":
        r["request_id"] = r["request_id"] + 0.5
    elif how == "missing_key":
        del r["e2e_us"]
    elif how == "e2e_before_ttft":
        r["ttft_us"], r["e2e_us"] = r["e2e_us"] * 2, r["e2e_us"]
    elif how == "not_a_record":
        rows[case["row"]] = [1, 2, 3]
    path.write_text(json.dumps(rows, allow_nan=True))


def run_blis(results_dir: Path, data: Path) -> str:
    """`blis-compare DIR --data D --json` on a damaged results file: one line and exit 1, or the
    file listed as not compared with its reason; compared as valid is wrong."""
    try:
        code, out, msg = cli_msg(["blis-compare", str(results_dir), "--data", str(data), "--json"])
    except Exception:  # noqa: BLE001
        return "traceback"
    if code:
        return "clean" if _one_line_exit(code, msg) else "traceback"
    try:
        doc = json.loads(out)
    except ValueError:
        return "wrong"
    skipped = [x for x in doc.get("not_compared", []) if x.get("source") in ("evolved", "blis:evolved")]
    return "clean" if skipped and all("results-evolved.json" in x.get("reason", "") for x in skipped) else "wrong"


# ---------------------------------------------------------------- unknown ids

def unknown_id_case(pick) -> list[str]:
    return pick([["show", "999999"], ["frontier", "--run", "run-9-nope"], ["frontier", "--run", ""],
                 ["report", "--run", "run-9-nope", "-o", "{tmp}/r.html"],
                 ["report", "--program", "999999", "-o", "{tmp}/r.html"],
                 ["run", "--resume", "run-9-nope", "--budget", "1"], ["emit-go", "999999"],
                 ["emit-go", "999999", "-o", "{tmp}/x.go"], ["emit-go", "999999", "--blis-dir", "{tmp}"],
                 ["show", "9223372036854775806"], ["report", "--program", "2", "--run", "run-9-nope", "-o",
                                                    "{tmp}/r.html"],
                 ["predict", "999999", "--model", "meta-llama/Llama-2-7b-hf", "--tp", "1", "--rate", "1"]])


def run_unknown_id(argv: list[str], archive: Path, tmp: Path) -> str:
    argv = [a.replace("{tmp}", str(tmp)) for a in argv] + ["--archive", str(archive)]
    try:
        code, _, msg = cli_msg(argv)
    except Exception:  # noqa: BLE001
        return "traceback"
    if code == 2:  # argparse refused the arguments themselves: clean, not what is tested
        return "clean"
    if not code:
        return "wrong"
    return "clean" if _one_line_exit(code, msg) and ("no " in msg or "unknown" in msg) else "wrong"


# ---------------------------------------------------------------- bad flag combinations

def flags_case(pick) -> list[str]:
    return pick([
        ["run", "--replay", "run-0-x", "--budget", "5"], ["run", "--max-llm-cost", "1", "--budget", "5"],
        ["run", "--llm-base", "http://127.0.0.1:9", "--budget", "5"],
        ["run", "--ray-address", "127.0.0.1:1", "--budget", "5"],
        ["run", "--executor", "local", "--ray-address", "127.0.0.1:1", "--budget", "5"],
        ["pilot", "--ray-address", "127.0.0.1:1", "--runs", "1", "--budget", "1"],
        ["run", "--max-llm-tokens", "10", "--budget", "5"], ["run", "--llm-timeout", "5", "--budget", "5"],
        ["run", "--resume", "{run}", "--seed", "5", "--budget", "1"],
        ["run", "--resume", "{run}", "--no-holdout", "--budget", "1"],
        ["run", "--resume", "{run}", "--generation-size", "3", "--budget", "1"],
        ["run", "--resume", "{run}", "--data", "{tmp}", "--budget", "1"],
        ["ingest", "{tmp}/a.json", "--traces", "{tmp}/b.json", "--experiment", "x", "--out", "{tmp}/o"],
        ["ingest", "--experiment", "x", "--out", "{tmp}/o"],
        ["emit-go", "{pid}", "--blis-dir", "{tmp}", "--interface", "legacy5"],
        ["emit-go", "{pid}", "--blis-patch", "{tmp}/p.patch", "--package", "other"],
        ["evaluate", "{tmp}/p.py", "--time-limit", "0"], ["evaluate", "{tmp}/p.py", "--time-limit", "nan"],
        ["run", "--budget", "0"], ["run", "--workers", "0"], ["ui", "--port", "70000"],
        ["run", "--llm", "openai/x", "--max-llm-cost", "-1"], ["run", "--train-fraction", "1.5"],
    ])


def run_flags(argv: list[str], archive: Path, run_id: str, pid: int, tmp: Path) -> str:
    """The whole command in this process (not only the parser): refused in one line."""
    argv = [a.replace("{tmp}", str(tmp)).replace("{run}", run_id).replace("{pid}", str(pid)) for a in argv]
    if argv[0] in ("run", "pilot", "emit-go", "ui"):
        argv += ["--archive", str(archive)]
    try:
        code, _, msg = cli_msg(argv)
    except Exception:  # noqa: BLE001
        return "traceback"
    if code == 2:
        return "clean"  # argparse's usage line and its one error line
    return "clean" if _one_line_exit(code, msg) else ("wrong" if not code else "traceback")
