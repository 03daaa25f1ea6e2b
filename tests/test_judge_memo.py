"""The judge's answers kept in the archive (`evolve.judge_memo`): a job judged once under the
same judge is answered from the archive, by no worker, and exactly as the worker answered it."""
import json
import math
from dataclasses import replace

from evaluator.records import Evaluation
from evaluator.screen_gate import Gate
from evolve.archive import Archive
from evolve.judge_memo import JudgeMemo, judge_key, ungated
from evolve.workers import Job, WorkerPool, job_message
from seeds import seed_sources

KEY = judge_key("data-fp", 0.7)


def _screen(gate=None, source="def predict_step_time(t_weights):\n    return t_weights\n"):
    return (source, False, None, False, None, None, True, gate)


def _valid(e2e=0.05, **extra):
    return Evaluation(valid=True, constants={"m": [1.0, 2.5e-7]}, rows=({"experiment": "x", "e2e_err": e2e},),
                      objectives={"e2e_mean": e2e, "e2e_worst": 2 * e2e, "ttft_mean": 0.1, "itl_mean": 0.02,
                                  "step_mape": math.nan, "complexity": 3.0}, sim_steps=1234, seconds=0.7, **extra)


def _same(a: Evaluation, b: Evaluation) -> bool:
    return json.dumps(a.to_json(), sort_keys=True) == json.dumps(b.to_json(), sort_keys=True)


def test_the_judge_key_changes_with_the_data_and_the_train_fraction():
    assert judge_key("data-fp", 0.7) == KEY
    assert len({KEY, judge_key("other-fp", 0.7), judge_key("data-fp", 0.6)}) == 3


def test_an_answer_comes_back_as_the_worker_sent_it_nan_included(tmp_path):
    memo = JudgeMemo(Archive(tmp_path / "a.db"), KEY)
    ev = _valid()
    memo.put(_screen(), ev)
    assert memo.get(_screen()) is None  # buffered until the executor's poll flushes it
    memo.flush()
    got = memo.get(_screen())
    assert got is not None and _same(got, ev) and math.isnan(got.objectives["step_mape"])
    assert memo.repeats == 1 and memo.hits == 0 and memo.kept == 1  # its own answer: a job asked again
    later = JudgeMemo(memo.archive, KEY)  # the next run's memo: an earlier run's answer
    assert later.get(_screen()) is not None and later.hits == 1 and later.repeats == 0
    # another judge, another job: nothing
    assert JudgeMemo(memo.archive, judge_key("other-fp", 0.7)).get(_screen()) is None
    assert memo.get(_screen(source="def predict_step_time(t_weights):\n    return 2 * t_weights\n")) is None


def test_what_a_worker_did_not_finish_is_never_kept(tmp_path):
    memo = JudgeMemo(Archive(tmp_path / "a.db"), KEY)
    for i, why in enumerate(("killed: over the wall-clock limit (60 s)", "worker died (60 s)",
                             "evaluation crashed: MemoryError: ")):
        memo.put(_screen(source=f"# {i}"), Evaluation(valid=False, error=why))
    memo.put(_screen(source="# program"), Evaluation(valid=False, error="unphysical: below the floor"))
    memo.flush()
    assert memo.kept == 1 and memo.get(_screen(source="# program")).error == "unphysical: below the floor"
    assert all(memo.get(_screen(source=f"# {i}")) is None for i in range(3))


def test_a_screen_that_ran_to_the_end_answers_any_gate_that_admits_it(tmp_path):
    """A look-ahead screen ran under the gate of its moment; the same seed asks it under another."""
    memo = JudgeMemo(Archive(tmp_path / "a.db"), KEY)
    ran = Gate(cell_loss=0.5, order=("e2e_mean", "complexity"), front=()).to_json()
    memo.put(_screen(ran), _valid(0.05))
    stopped = Evaluation(valid=True, constants={"m": [1.0]}, race={"models": ["a"], "of": 2, "bounds": {}, "why": ""})
    memo.put(_screen(ran, source="# stopped"), stopped)
    memo.flush()
    admits = Gate(cell_loss=0.2, order=("e2e_mean", "complexity"), front=()).to_json()
    refuses = Gate(cell_loss=0.01, order=("e2e_mean", "complexity"), front=((0.01, 1.0),)).to_json()
    assert Gate.from_json(admits).admits(_valid(0.05).objectives)
    assert not Gate.from_json(refuses).admits(_valid(0.05).objectives)
    assert _same(memo.get(_screen(admits)), _valid(0.05)) and _same(memo.get(ungated(_screen(admits))), _valid(0.05))
    assert memo.get(_screen(refuses)) is None  # it might have stopped: judged again
    assert memo.get(_screen(ran, source="# stopped")) is not None  # its own gate: as it was
    assert memo.get(_screen(admits, source="# stopped")) is None and memo.get(_screen(source="# stopped")) is None


def test_a_damaged_answer_is_judged_again(tmp_path):
    arch = Archive(tmp_path / "a.db")
    assert not JudgeMemo(arch, KEY)._any  # a new archive is not asked job by job
    arch.keep_judged([(JudgeMemo(arch, KEY)._id(_screen()), b"not zlib")])
    memo = JudgeMemo(arch, KEY)
    assert memo._any and not JudgeMemo(arch, judge_key("other-fp", 0.7))._any
    assert memo.get(_screen()) is None and memo.hits == 0


def test_a_pool_answers_a_judged_job_without_starting_a_worker(small_data, tmp_path):
    """The answers a pool's workers gave, kept in the archive, answer the same jobs (a screen,
    then its held-out full job cut into split jobs) for a later pool of the same judge, which
    then never starts its workers."""
    from evaluator.data import load
    from evaluator.holdout import split_labels
    labels = split_labels(load(str(small_data)).experiments)
    arch = Archive(tmp_path / "a.db")
    src = seed_sources()["linear_physics"]

    def screen_then_full():
        pool = WorkerPool(str(small_data), workers=1, timeout_s=120, heldout=True, splits=labels)
        pool.memo = JudgeMemo(arch, KEY)
        try:
            screen, = pool.run([Job(0, src, "screen")])
            full, = pool.run([Job(0, src, "full", screen.constants, screen=screen)])
        finally:
            pool.close()
        return pool, screen, full

    first, screen, full = screen_then_full()
    assert screen.valid and full.valid and full.holdout and first.workers
    assert first.memo.kept == 1 + len(labels) and first.memo.hits == 0
    again, screen2, full2 = screen_then_full()
    assert again.workers == [] and again.memo.hits == 1 + len(labels) and again.memo.kept == 0
    assert _same(screen2, screen) and _same(full2, full)
    assert again.memo.get(job_message(Job(0, src, "screen", pinned=True), True)) is None  # another job


def test_a_screen_refused_after_its_fit_answers_any_gate(small_data, tmp_path):
    """Refused by the physical rules or for a constant the data cannot pin, a screen never
    replayed anything, so no gate had a say: the judge gives the same answer under any gate,
    and the memo answers any gate with it."""
    from evaluator.data import load
    from evaluator.evaluate import Evaluator
    from evaluator.program import parse_program
    from evaluator.records import REFUSED_BEFORE_REPLAY
    ev = Evaluator(load(str(small_data)))
    strict = Gate(cell_loss=1e-9, order=("e2e_mean", "complexity"), front=((0.0, 0.0),))
    memo = JudgeMemo(Archive(tmp_path / "a.db"), KEY)
    sources = ("def predict_step_time(t_weights):\n    return 0.5 * t_weights\n",  # below the floor
               "C_A = 1.0\nC_B = 1.0\n\ndef predict_step_time(t_weights):\n    return C_A * t_weights + C_B * t_weights\n")
    for src, why in zip(sources, REFUSED_BEFORE_REPLAY, strict=True):
        p = parse_program(src)
        gated, free = ev.evaluate(p, refine=False, pinned=True, gate=strict), ev.evaluate(p, refine=False, pinned=True)
        assert not gated.valid and gated.error.startswith(why)
        assert _same(replace(gated, seconds=0.0), replace(free, seconds=0.0))
        memo.put(_screen(strict.to_json(), source=src), gated)
    memo.flush()
    other = Gate(cell_loss=None, order=("e2e_mean", "complexity"), front=()).to_json()
    for src in sources:
        assert memo.get(_screen(other, source=src)).error.startswith(REFUSED_BEFORE_REPLAY)
    # a replay that failed may have met its gate first: under another gate it is judged again
    memo.put(_screen(strict.to_json(), source="# failed"), Evaluation(valid=False, error="x: runaway simulation"))
    memo.flush()
    assert memo.get(_screen(other, source="# failed")) is None


def test_no_reuse_is_a_flag_a_resume_may_change():
    from evolve.cli import _resume_changes, build_parser
    from evolve.config import RunConfig, config_from_args
    args = build_parser().parse_args(["run", "--no-reuse"])
    assert config_from_args(args).reuse is False and RunConfig().reuse is True
    resumed = build_parser().parse_args(["run", "--resume", "run-0-x", "--no-reuse"])
    assert config_from_args(resumed, RunConfig().to_json()).reuse is False
    assert _resume_changes(resumed, RunConfig().to_json()) == []
