"""The issue-15 table: hostile inputs per category and how the code answered them.

    .venv/bin/python benchmarks/hardening_table.py --n 40                        # this checkout
    git archive 27747e0 | tar -x -C /tmp/base15
    PYTHONPATH=/tmp/base15 .venv/bin/python benchmarks/hardening_table.py --n 40  # before

Cases and classification are those of the Hypothesis suite (tests/hostile.py), drawn here
with random.Random(seed) so both checkouts see the same inputs. Each case runs in this
process under a 60 s alarm ("hang" past it). Columns: tried, clean error, traceback, hang,
silently wrong, lost, ok (accepted and correct: only possible for archives and flags).
"""
from __future__ import annotations

import argparse
import importlib.util
import random
import shutil
import signal
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SHARED = HERE.parent / "shared" / "data"


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40, help="cases per category")
    ap.add_argument("--seed", type=int, default=15)
    args = ap.parse_args()
    h = _hostile()
    rng = random.Random(args.seed)
    pick = rng.choice
    tmp = Path(tempfile.mkdtemp(prefix="hardening-"))
    tiny = {t: h.make_tiny_data(SHARED, tmp / ("trace" if t else "spec"), trace=t) for t in (False, True)}
    src = tmp / "src.db"
    want = h.make_archive(src)
    counts: dict[str, dict[str, int]] = {}

    def tally(cat, outcome):
        counts.setdefault(cat, {o: 0 for o in (*h.OUTCOMES, "hang")})[outcome] += 1

    for _ in range(args.n):
        tally("untrusted programs", _timed(h.run_program, h.program_case(pick)))
    for _ in range(args.n):
        case = h.gt_case(pick)
        root = tmp / "gt"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(tiny[h.gt_needs_trace(case)], root)
        h.damage_gt(case, root)
        tally("impossible ground truth", _timed(h.run_gt, root))
    for i in range(args.n):
        case = h.archive_case(pick)
        (tmp / f"a{i}").mkdir()  # a fresh directory: no WAL file of an earlier case beside it
        path = tmp / f"a{i}" / "a.db"
        shutil.copyfile(src, path)
        h.damage_archive(case, path)
        tally("damaged archive", _timed(h.run_archive, case, path, want, tmp))
    for _ in range(args.n):
        tally("CLI arguments", _timed(h.run_cli_args, h.cli_case(pick)))
    cols = ("clean", "traceback", "hang", "wrong", "lost", "ok")
    print("| category | tried | clean error | traceback | hang | silently wrong | lost | ok |")
    print("|---|---|---|---|---|---|---|---|")
    for cat, c in counts.items():
        print(f"| {cat} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in cols) + " |")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
