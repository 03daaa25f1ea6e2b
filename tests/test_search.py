"""The evolution loop: reproducible, resumable, survives runaway candidates. Its runs use the
small ground truth (`small_data`, tests/conftest.py: 6 of the 16 experiments, every held-out
regime kept): what they check does not depend on the data's size, and a run costs half."""
import json
import sqlite3
import time

import pytest

from evolve.archive import Archive
from evolve.config import RunConfig
from evolve.search import Search
from evolve.workers import WAIT_CAP_S, Job, WorkerPool
from seeds import seed_sources


DATA: list[str] = []  # the runs' ground truth (`use_small_data`)


@pytest.fixture(scope="module", autouse=True)
def use_small_data(small_data):
    DATA[:] = [str(small_data)]


def _run(tmp_path, name, workers, budget=9, seed=3, holdout=False, executor="local", **cfg):
    """A short offline run; in-sample ranking unless `holdout` (the held-out splits cost ~4x)."""
    arch = Archive(tmp_path / name)
    s = Search(RunConfig(budget=budget, seed=seed, workers=workers, generation_size=4, holdout=holdout,
                         executor=executor, data=DATA[0], **cfg), arch)
    try:
        s.start()
        out = s.loop()
    finally:
        s.close()
    return arch, out


def _content(db, columns="p.canonical_hash, p.operator, p.valid, e.objectives"):
    con = sqlite3.connect(db)
    rows = con.execute(f"select {columns} from programs p "
                       "left join evaluations e on e.program_id = p.id order by p.id").fetchall()
    con.close()
    return rows


def test_same_seed_same_archive_whatever_the_workers_and_executor(tmp_path):
    """Two generations after the seeds: the first one's idle workers screen the second ahead
    (`evolve.lookahead`), on whichever executor."""
    a1, o1 = _run(tmp_path, "a.db", workers=1, budget=16)
    a2, o2 = _run(tmp_path, "b.db", workers=2, budget=16)
    _, o3 = _run(tmp_path, "c.db", workers=2, budget=16, executor="ray")  # a local Ray instance, two actors
    c1, c2, c3 = (_content(tmp_path / f"{x}.db") for x in "abc")
    assert c1 == c2 == c3
    assert o3["ahead"]["used"] > 0  # Ray hands back the look-ahead's jobs as the local pool does
    assert len(c1) >= 16  # seeds + proposals (+ rejected duplicates)
    assert a1.get_run(o1["run_id"])["n_evaluated"] == 16  # the budget counts the seeds too
    assert a1.get_run(o1["run_id"])["status"] == "finished"
    # the frontier is non-empty and every member has a full evaluation
    assert o1["frontier"]
    for pid in o1["frontier"]:
        assert a1.program(pid)["evaluation"]["stage"] == "full"
    # evolution found something at least as good as the best seed on mean E2E error
    seeds_best = min(r["objectives"]["e2e_mean"] for r in a1.evaluations(o1["run_id"])
                     if r["operator"] == "seed")
    assert min(a1.program(p)["objectives"]["e2e_mean"] for p in o1["frontier"]) <= seeds_best


def test_resume_continues_to_the_new_budget(tmp_path):
    """Also: a stopped screen's bounds decide at the candidate's turn, and where the gate of that
    moment admits them (it fell since the screen was asked for: a new cell elite is chosen on
    held-out errors) the candidate is screened again against it. The killed run kept such a
    result here (bounds of 0: any gate admits them) for the first candidate the resumed run
    proposes."""
    from evaluator.records import Evaluation
    arch, out = _run(tmp_path, "r.db", workers=1, budget=7)
    run_id = out["run_id"]
    cfg = RunConfig(budget=11, seed=3, workers=1, generation_size=4, holdout=False, data=DATA[0])
    s = Search(cfg, arch)
    s.resume(run_id)
    h, _, _ = s._propose_ahead(4)[0]  # what it proposes first (test_a_guess_proposes_...)
    s.close()
    bounds = {k: 0.0 for k in ("e2e_mean", "e2e_worst", "ttft_mean", "itl_mean", "step_mape", "fail_mean")}
    arch.put_pending(run_id, h, "screen", Evaluation(
        valid=True, objectives={"complexity": 1.0},
        race={"models": ["m"], "of": 2, "bounds": {**bounds, "complexity": 1.0}, "why": "kept"}))
    s = Search(cfg, arch)
    s.resume(run_id)
    assert len(s.state.members) >= 5
    try:
        got = s.loop()
    finally:
        s.close()
    run = arch.get_run(run_id)
    assert run["n_evaluated"] >= 11 and run["status"] == "finished"
    hashes = [h for h, op, valid, _ in _content(tmp_path / "r.db") if valid]
    assert len(hashes) == len(set(hashes))  # no program evaluated twice
    assert got["rescreened"] == 1
    con = sqlite3.connect(tmp_path / "r.db")
    race = con.execute("select e.race from programs p join evaluations e on e.program_id = p.id "
                       "where p.canonical_hash = ?", (h,)).fetchone()[0]
    con.close()
    assert race is None or json.loads(race)["why"] != "kept"  # its own screen, not the kept one


def test_runaway_candidate_is_killed_and_recorded():
    pool = WorkerPool(None, workers=1, timeout_s=0.05)
    try:
        res = pool.run([Job(0, seed_sources()["linear_physics"], "full")])
    finally:
        pool.close()
    assert res[0].valid is False and "wall-clock limit" in res[0].error
    assert pool.killed == 1


def test_the_driver_waits_on_its_workers_instead_of_polling():
    """While a worker starts and evaluates, the driver blocks in `wait` until the worker
    answers (or a job's limit or the cap comes): its polls are counted in events, not in
    2 ms ticks (the old loop polled ~500 times a second beside the workers it shares cores with)."""
    pool = WorkerPool(None, workers=1, timeout_s=120)
    polls = []
    inner = pool._poll
    pool._poll = lambda: (polls.append(time.monotonic()), inner())[1]
    try:
        t0 = time.monotonic()
        res = pool.run([Job(0, seed_sources()["roofline"], "screen"), Job(1, seed_sources()["linear_physics"], "screen")])
        wall = time.monotonic() - t0
    finally:
        pool.close()
    assert all(r.valid for r in res)
    assert wall > 1.0  # a worker's start alone takes longer: there was time to poll in ticks
    assert len(polls) <= 8 + 2 * wall / WAIT_CAP_S  # start, two jobs, their answers, and a cap's wake-up now and then


def test_a_worker_that_answers_gets_the_next_job_in_the_same_poll():
    """A worker is not left idle while the caller settles the result it just sent (gate
    decisions, archive writes): the poll that collects its answer hands it the next pending
    job (before, it waited for the next poll)."""
    pool = WorkerPool(DATA[0], workers=1, timeout_s=120)
    jobs = [Job(i, seed_sources()["roofline"], "screen") for i in range(3)]
    try:
        for j in jobs:
            pool.submit(j)
        got = []
        while len(got) < 2:
            res = pool.poll()
            if res:
                got += res
                assert pool.workers[0].job is jobs[len(got)]  # the answer and the next job in one call
            else:
                pool.wait()
        rest = pool.run([])  # the third is already running: nothing else to submit
    finally:
        pool.close()
    assert [j for j, _ in got] == jobs[:2] and rest == [] and all(r.valid for _, r in got)


def test_a_job_submitted_while_a_worker_is_free_starts_at_once():
    """`Executor.submit` hands the job to a ready, free worker itself: it does not wait in the
    queue for the next `poll`, which the search makes only after writing the results it holds."""
    pool = WorkerPool(DATA[0], workers=1, timeout_s=120)
    first, second = (Job(i, seed_sources()["roofline"], "screen") for i in range(2))
    try:
        pool.submit(first)  # the worker is starting: the job waits for a poll to hand it out
        got = []
        while not got:
            pool.wait()
            got = pool.poll()
        assert [j for j, _ in got] == [first] and pool.workers[0].ready and pool.workers[0].job is None
        pool.submit(second)
        assert pool.workers[0].job is second and pool.pending == []  # out at once, no poll in between
        rest = []
        while not rest:
            pool.wait()
            rest = pool.poll()
    finally:
        pool.close()
    assert [j for j, _ in rest] == [second] and rest[0][1].valid


def test_run_hands_back_only_its_own_jobs_and_runs_their_follow_ups_first():
    """`Executor.run`: a job submitted before it (a search job still in flight when the hand-over
    starts) is waited for but neither returned nor passed to `each`; the jobs `each` returns run
    next, ahead of the batch's jobs still waiting (the worker that answered took the next one in
    the same poll), and come back through `each` too."""
    pool = WorkerPool(DATA[0], workers=1, timeout_s=120)
    src = seed_sources()["roofline"]
    foreign, a, b, c = (Job(i, src, "screen", batch=7) for i in range(4))
    follow = Job(4, src, "screen", batch=-1)
    seen = []

    def each(job, res):
        seen.append(job)
        return [follow] if job is a else []
    try:
        pool.submit(foreign)
        res = pool.run([a, b, c], each)
    finally:
        pool.close()
    assert seen == [a, b, follow, c] and len(res) == 3 and all(r.valid for r in res)


def test_a_finished_loop_can_leave_its_workers_to_the_hand_over(tmp_path):
    """`loop(keep_pool=True)` (what `evolve run` asks): the run's workers stay up for the hand-
    over's start fits instead of a new pool making the shared states again; the default closes
    them as before (here on the same search, whose budget is spent: the loop only ends)."""
    s = Search(RunConfig(budget=5, seed=3, workers=1, generation_size=4, holdout=False, data=DATA[0]),
               Archive(tmp_path / "k.db"))
    try:
        s.start()
        s.loop(keep_pool=True)
        pool = s.pool
        assert pool is not None and pool is s._pool() and all(w.proc.is_alive() for w in pool.workers)
        s.loop()
        assert s.pool is None and not any(w.proc.is_alive() for w in pool.workers)
    finally:
        s.close()


def test_idle_workers_screen_the_next_generation_and_the_archive_is_the_same(tmp_path, monkeypatch):
    """`evolve.lookahead`: a worker the generation leaves idle screens what the next generation
    will propose; the next generation takes those results (here some are taken) and the run
    stores exactly what it stores without the look-ahead."""
    _, on = _run(tmp_path, "on.db", workers=2, budget=24)
    assert on["ahead"]["used"] > 0 and on["ahead"]["submitted"] >= on["ahead"]["used"]
    monkeypatch.setattr(Search, "_propose_ahead", lambda self, n: [])  # never guesses
    _, off = _run(tmp_path, "off.db", workers=2, budget=24)
    assert off["ahead"] == {"submitted": 0, "used": 0}
    assert _content(tmp_path / "on.db") == _content(tmp_path / "off.db")


def test_a_guess_proposes_the_next_generation_without_moving_the_search(tmp_path):
    """`Search._propose_ahead` draws the next generation from the state as it is and leaves the
    search's random stream, seen programs, skip count and parent pool as they were: the next
    generation proposed afterwards is the guess itself."""
    arch = Archive(tmp_path / "g.db")
    s = Search(RunConfig(budget=8, seed=5, workers=1, generation_size=4, holdout=False, data=DATA[0]), arch)
    try:
        s.start()
        before = (s.rng.getstate(), set(s.seen), s.skipped, s.generation)
        guess = s._propose_ahead(4)
        assert (s.rng.getstate(), set(s.seen), s.skipped, s.generation) == before
        s.generation += 1
        s._reseed()
        from evolve.pareto import cell_key
        assert [(c.program.hash, c.program.source, cell_key(c.program)) for c in s._propose_offline(4)] == guess
        assert len(guess) == 4
    finally:
        s.close()


def test_lookahead_hands_each_result_to_the_generation_it_was_guessed_for():
    """Results come back by program, for the generation they were guessed for only; a screen on
    a worker is claimed as FLYING (its generation waits for it); a guess made again keeps what
    is back or running and drops the programs no longer proposed."""
    from evaluator.records import Evaluation
    from evolve.lookahead import AHEAD_BATCH, FLYING, Lookahead

    class Pool:
        def __init__(self, free):
            self.free, self.jobs = free, []

        def spare(self):
            return self.free - len(self.jobs)

        def submit(self, job, first=False):
            self.jobs.append(job)

    look, pool = Lookahead(pinned=True, gate=lambda cell: {"cell": cell}), Pool(free=2)
    look.start(5, [("a", "A", "c0"), ("b", "B", "c0"), ("c", "C", "c0")])
    look.feed(pool)  # two idle workers: two screens, the third waits
    assert [(j.source, j.kind, j.batch, j.pinned) for j in pool.jobs] == [("A", "screen", AHEAD_BATCH, True),
                                                                           ("B", "screen", AHEAD_BATCH, True)]
    assert [j.gate for j in pool.jobs] == [{"cell": "c0"}] * 2  # the cascade's gate as it stands when handed out
    ja, jb = pool.jobs
    ev = Evaluation(valid=True, objectives={"e2e_mean": 0.1})
    look.keep(*look.arrived(ja), ev)
    assert look.claim("a", 4) is None  # another generation's
    assert look.claim("b", 5) is FLYING
    look.start(5, [("b", "B", "c0"), ("a", "A", "c0"), ("d", "D", "c0")])  # again: c dropped, a kept, b running
    assert look.todo == [("d", "D", "c0")]
    assert look.claim("a", 5) is ev and look.claim("a", 5) is None  # taken once
    look.begin(5)
    assert look.todo == []  # not handed to a worker: dropped once the generation has claimed
    assert look.arrived(jb) == (5, "b")
    look.end(5)
    look.keep(5, "b", ev)  # back after its generation was written: dropped
    assert look.claim("b", 5) is None
    assert (look.submitted, look.used) == (2, 1)


def test_a_candidate_killed_in_several_split_jobs_counts_once():
    """`killed` counts candidates: a cut full job whose split jobs all run over the limit is
    one runaway candidate, not one per split."""
    src = seed_sources()["linear_physics"]
    pool = WorkerPool(None, workers=1, timeout_s=120, heldout=True, splits=("model:llama-2-7b", "load"))
    try:
        screen = pool.run([Job(0, src, "screen")])[0]
        assert screen.valid
        pool.timeout_s = 0.02  # every split job is now over its limit
        res = pool.run([Job(0, src, "full", start=screen.constants, screen=screen)])
    finally:
        pool.close()
    assert str(res[0].holdout).count("wall-clock limit") == 2  # both splits were killed
    assert pool.killed == 1


def test_garbage_program_never_crashes_the_worker():
    pool = WorkerPool(None, workers=1, timeout_s=120)
    try:
        res = pool.run([Job(0, "import os\nos.system('true')", "screen"),
                        Job(1, seed_sources()["roofline"], "screen")])
    finally:
        pool.close()
    assert "invalid program" in res[0].error
    assert res[1].valid is True and res[1].objectives["e2e_mean"] < 1  # a typed Evaluation over the pipe


def test_a_worker_is_recycled_by_the_programs_it_compiled_not_its_jobs():
    """The split jobs of one candidate reuse its compiled program; recycling (each compiled
    program keeps ~1 MiB in the process) counts programs, so they do not restart workers."""
    src = seed_sources()
    pool = WorkerPool(None, workers=1, timeout_s=120, recycle=2)
    try:
        res = pool.run([Job(0, src["roofline"], "screen"), Job(1, src["roofline"], "screen"),
                        Job(2, src["roofline"], "screen")])
        first = pool.workers[0].proc.pid
        assert [json.dumps(r.objectives) for r in res[1:]] == [json.dumps(res[0].objectives)] * 2
        pool.run([Job(3, src["linear_physics"], "screen")])
        assert pool.workers[0].proc.pid != first  # the second program: recycled
    finally:
        pool.close()


def test_discard_forgets_a_batchs_unstarted_jobs_and_its_cut_full_jobs():
    """What the search drops at the end of a batch (speculative full jobs nobody needed): the
    batch's jobs no worker started, every split of its cut full jobs included."""
    from evaluator.records import Evaluation
    from evolve.workers import Executor

    class Idle(Executor):
        def _free(self):
            return 2

    ex = Idle(60.0, True, ("workload:a", "load"))
    ex.submit(Job(0, "src", "screen", batch=1))
    ex.submit(Job(1, "src", "full", screen=Evaluation(valid=True, overheads={"m": {}}), batch=1))
    ex.submit(Job(2, "src", "screen", batch=2))
    assert [j.kind for j in ex.pending] == ["screen", "split", "split", "screen"]
    assert ex.spare() == -2
    ex.discard(1)
    assert [(j.index, j.batch) for j in ex.pending] == [(2, 2)] and not ex._gather and ex.spare() == 1


def test_offline_generations_are_full_of_new_programs(tmp_path):
    """Duplicates are drawn again at proposal time: every generation after the seeds holds
    generation_size structurally new programs, none of them a duplicate or a constant-only
    change (constants are fitted, so those could not score differently)."""
    n_seeds = len(seed_sources())
    arch, out = _run(tmp_path, "g.db", workers=1, budget=n_seeds + 8, seed=5)
    con = sqlite3.connect(tmp_path / "g.db")
    rows = con.execute("select generation, operator, valid, reject_reason, canonical_hash from programs "
                       "where run_id = ?", (out["run_id"],)).fetchall()
    con.close()
    assert not [r for r in rows if r[3]]  # nothing rejected
    hashes = [r[4] for r in rows]
    assert len(hashes) == len(set(hashes)) == n_seeds + 8
    assert "constant" not in {r[1] for r in rows}
    per_gen = {}
    for g, *_ in rows:
        per_gen[g] = per_gen.get(g, 0) + 1
    assert per_gen == {0: n_seeds, 1: 4, 2: 4}  # generation_size 4, budget = the seeds + 8


def test_full_evaluation_starts_from_the_screen_fit(evaluator):
    """The cascade hands the screen's constants to the full job; the result is the same as a
    full evaluation that redoes the surrogate fit itself."""
    from evaluator.program import parse_program
    p = parse_program(seed_sources()["phase_split"])
    screen = evaluator.evaluate(p, refine=False)
    full = evaluator.evaluate(p, refine=True)
    resumed = evaluator.evaluate(p, refine=True, start=screen.constants)
    assert resumed.constants == full.constants and resumed.objectives == full.objectives


@pytest.fixture(scope="module")
def heldout_run(use_small_data, tmp_path_factory):
    """A short run ranked on held-out errors (its screens stop early where they can)."""
    path = tmp_path_factory.mktemp("heldout")
    arch, out = _run(path, "h.db", workers=2, budget=13, holdout=True)
    return path / "h.db", arch, out


def test_heldout_run_ranks_on_heldout_errors(heldout_run):
    """By default full evaluations carry the held-out splits, stored in the archive, and the
    frontier is the Pareto front of held-out E2E errors and complexity."""
    from evaluator.objectives import HELDOUT, objective_vector, vector_order
    from evolve.pareto import pareto_front
    from evaluator.data import load
    from evaluator.evaluate import Evaluator
    from evaluator.program import parse_program
    _, arch, out = heldout_run
    run = out["run_id"]
    assert arch.get_run(run)["config"]["holdout"] is True
    full = arch.evaluations(run)
    assert full and all(r["stage"] == "full" for r in full)
    for r in full:
        rec = arch.program(r["id"])
        assert set(HELDOUT) <= set(rec["objectives"]), rec["objectives"]
        assert set(rec["evaluation"]["holdout"]) == {"workload", "model", "load", "long"}
    # past the seeds a full job was cut into its held-out splits on the two workers: joined, it
    # is what one process makes from the screen's constants
    cut = [arch.program(r["id"]) for r in full if r["generation"] > 0]
    assert cut, "no screened candidate earned a full evaluation"
    ev = Evaluator(load(DATA[0]))
    for rec in cut:
        whole = ev.evaluate(parse_program(rec["source"]), start=rec["evaluation"]["constants"], heldout=True)
        assert json.dumps(whole.objectives, sort_keys=True) == json.dumps(rec["objectives"], sort_keys=True)
        assert whole.to_json()["holdout"] == rec["evaluation"]["holdout"]
    order = vector_order([r["objectives"] for r in full])  # held-out errors, complexity (+ failures)
    vecs = {r["id"]: objective_vector(r["objectives"], order) for r in full}
    want = {pid for pid, _ in pareto_front(list(vecs.items()), key=lambda it: it[1])}
    assert set(out["frontier"]) == want
    assert set(arch.frontier_ids(run)) == want


def test_screen_gate_against_a_heldout_frontier():
    """With a frontier ranked on held-out errors, a screened candidate earns the full evaluation
    by its cell or by mean E2E and complexity, not by being better on some other in-sample error."""
    from evaluator.program import parse_program
    from evolve.search import Member, SearchState

    elite = parse_program(seed_sources()["roofline"])
    obj = {"e2e_mean": 0.02, "e2e_worst": 0.1, "ttft_mean": 0.1, "itl_mean": 0.02, "step_mape": 0.05,
           "complexity": float(elite.complexity.total), "lowo_e2e": 0.03, "lomo_e2e": 0.05, "load_e2e": 0.04}
    state = SearchState()
    state.add(Member(1, elite, obj, 0))
    same_cell_worse = {**obj, "e2e_mean": 0.03, "ttft_mean": 0.01}  # better TTFT only
    assert not state.would_enter(same_cell_worse, elite)
    assert state.would_enter({**obj, "e2e_mean": 0.01}, elite)  # better mean E2E
    in_sample_frontier = SearchState()
    in_sample_frontier.add(Member(1, elite, {k: v for k, v in obj.items() if not k.endswith("o_e2e")
                                             and k != "load_e2e"}, 0))
    assert in_sample_frontier.would_enter({k: v for k, v in same_cell_worse.items()
                                           if k not in ("lowo_e2e", "lomo_e2e", "load_e2e")}, elite)


# C_A and C_B trade off exactly (A + B is all the data can see); the second writes it another way
UNPINNED = ("C_A = 1.0\nC_B = 1.0\n\n\ndef predict_step_time(t_step_measured):\n"
            "    return C_A * t_step_measured + C_B * t_step_measured\n")
UNPINNED_TOO = ("C_A = 1.0\nC_B = 1.0\n\n\ndef predict_step_time(t_step_measured):\n"
                "    return C_A * t_step_measured + C_B * (t_step_measured + t_step_measured)\n")


def test_a_screen_whose_constants_the_data_cannot_pin_is_refused_after_its_fit(tmp_path):
    """Under `pinned_only` (the default) a screened program with a constant the data cannot pin
    (the hand-over never takes one) is refused right after its fit: not simulated, never given
    the full evaluation, its reason and identifiability kept; the summary's work counts say so.
    `--promote-unpinned` (pinned_only=False) scores and promotes the same kind of program."""
    from dataclasses import replace

    from evaluator.program import parse_program
    from evaluator.records import unpinned
    from evolve.search import Candidate
    arch = Archive(tmp_path / "p.db")
    s = Search(RunConfig(budget=20, seed=1, workers=1, generation_size=4, holdout=False, data=DATA[0]), arch)
    try:
        run_id = s.start()
        s.generation = 1
        s._evaluate_batch([Candidate(parse_program(UNPINNED), (), "test")], screen=True)
        got = {r["source"].strip(): r for r in arch.programs(run_id)}[UNPINNED.strip()]
        rec = arch.program(got["id"])["evaluation"]
        assert rec["stage"] == "screen" and not rec["valid"] and rec["sim_steps"] == 0
        assert rec["error"].startswith("constants the data cannot pin") and "C_A (codellama-34b" in rec["error"]
        assert unpinned(rec["identifiability"]) == {m: ["C_A", "C_B"] for m in rec["identifiability"]}
        assert set(rec["constants"]) == set(rec["identifiability"])  # its fit is kept
        assert arch.work_counts(run_id)["unpinned"] == 1
        s.cfg = replace(s.cfg, pinned_only=False)
        s.generation = 2
        s._evaluate_batch([Candidate(parse_program(UNPINNED_TOO), (), "test")], screen=True)
        too = {r["source"].strip(): r for r in arch.programs(run_id)}[UNPINNED_TOO.strip()]
        rec = arch.program(too["id"])["evaluation"]
        assert rec["stage"] == "full" and rec["valid"] and unpinned(rec["identifiability"])
    finally:
        s.close()
    assert RunConfig.from_json({"budget": 5}).pinned_only is False  # runs stored before the rule
    assert RunConfig().pinned_only is True


def test_screens_that_stop_early_promote_the_same_candidates(heldout_run, tmp_path):
    """`evaluator.screen_race`: screens that stop replaying once they cannot clear the cascade's
    gate leave every full evaluation, the frontier and every other screen as they are; a stopped
    screen keeps the rows of the models it replayed, and bounds the objectives it would have had."""
    on_db, a_on, on = heldout_run
    a_off, off = _run(tmp_path, "off.db", workers=2, budget=13, holdout=True, screen_race=False)
    assert on["frontier"] == off["frontier"]
    cols = "p.canonical_hash, p.valid, e.stage, e.valid, e.constants, e.objectives, e.rows, e.race"
    stopped = 0
    for x, y in zip(_content(on_db, cols), _content(tmp_path / "off.db", cols), strict=True):
        assert x[:5] == y[:5]
        if x[7] is None:
            assert x[5:7] == y[5:7] and y[7] is None
            continue
        stopped += 1
        race, whole = json.loads(x[7]), json.loads(y[5])
        assert x[2] == "screen" and set(json.loads(x[5])) == {"complexity"}
        assert json.loads(x[6]) == [r for r in json.loads(y[6]) if r["model"] in race["models"]]
        assert all(v <= whole[k] for k, v in race["bounds"].items() if k != "complexity" and whole.get(k) is not None)
    assert stopped > 0
    assert a_on.work_counts(on["run_id"])["stopped"] == stopped and a_off.work_counts(off["run_id"])["stopped"] == 0



def test_the_same_seed_again_in_the_same_archive_is_answered_by_it(heldout_run, tmp_path):
    """`evolve.judge_memo`: the run's jobs were kept with its answers; the same run again in a
    copy of its archive takes them from there and writes every record as the first run did,
    seconds included (what the judging cost once). `--no-reuse` gives the pool no memo."""
    db, arch, first = heldout_run
    copy = tmp_path / "again.db"
    src, dst = sqlite3.connect(db), sqlite3.connect(copy)
    src.backup(dst)
    src.close(), dst.close()
    a2, again = _run(tmp_path, "again.db", workers=2, budget=13, holdout=True)
    assert again["run_id"] != first["run_id"] and again["recalled"] > 0
    cols = ("p.canonical_hash, p.operator, p.valid, p.generation, p.reject_reason, e.stage, e.valid, e.error, "
            "e.objectives, e.rows, e.constants, e.race, e.holdout, e.fingerprint, e.seconds")

    def records(path, run):
        con = sqlite3.connect(path)
        rows = con.execute(f"select {cols} from programs p left join evaluations e on e.program_id = p.id "
                           "where p.run_id = ? order by p.id", (run,)).fetchall()
        con.close()
        return rows
    before = records(copy, first["run_id"])
    assert before and records(copy, again["run_id"]) == before
    hashes = lambda a, out: sorted(a.program(i)["canonical_hash"] for i in out["frontier"])  # noqa: E731
    assert hashes(a2, again) == hashes(arch, first)
    assert first["recalled"] == 0  # a new archive answers nothing
    off, on = (Search(RunConfig(data=DATA[0], reuse=reuse), a2) for reuse in (False, True))
    try:  # a local pool starts its processes with its first job: none here
        assert off._pool().memo is None and on._pool().memo is not None and on.pool.workers == []
    finally:
        off.close(), on.close()
