"""The evolution loop: MAP-Elites cells + NSGA-II parent selection + a Pareto frontier.

Generations make runs reproducible whatever the number of workers: each generation's
candidates are proposed from a seeded random generator and the archive state before it,
evaluated in parallel, and integrated in proposal order. Parents come half from the
MAP-Elites cell elites (uniformly: diversity), half from an NSGA-II pool (pressure). Offline
proposals that repeat a known program are drawn again, so generations stay full and no
worker idles at the generation barrier. Cascade: every candidate is screened with the cheap
fit (one simulation); only those that would enter the frontier or improve their MAP-Elites
cell get the full fit (refinement on their own simulation, from the screen's constants). Under
`RunConfig.pinned_only` a screen with a constant the data cannot pin is refused right after its
fit (`Job.pinned`): a constant held by the fit's prior is a defect the hand-over never takes; in
two recorded 2,000-proposal runs such programs took 78% and 71% of the full evaluations. Each
screen carries the gate as it stands when it is asked for (`Job.gate`) and stops replaying once
the errors it has make clearing it impossible (`evaluator.screen_race`); at the candidate's turn
the gate of that moment decides on its bounds, and screens it again where it fell meanwhile, so
the same candidates are promoted as with whole screens (`--whole-screens`).
Every candidate is written to the archive in one transaction with its evaluation as soon as
it and every earlier candidate of its generation are settled, so a killed run loses only the
candidates in flight (and any finished one waiting on them); `--resume` continues the run.

Resuming is exact for the offline operator: the random generator is reseeded from (seed,
generation) at the start of every generation, so `resume` rebuilds the state every earlier
generation left (members with a full evaluation only: a screened candidate is not ranked), and
the last generation that stored anything is proposed again; its candidates already in the
archive are taken as they are (not evaluated again), the others are evaluated, and the run ends
as an uninterrupted one would have.
"""
from __future__ import annotations

import functools
import math
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from evaluator.data import load
from evaluator.holdout import split_labels
from evaluator.objectives import (IN_SAMPLE_ORDER, INVALID, finite_or_none, has_heldout, in_sample_loss,
                                  invalid_objectives, objective_vector, ranked, selection_loss)
from evaluator import physics
from evaluator.fingerprint import twin_rows
from evaluator.identify import fold_constants
from evaluator.program import Program, ProgramError, parse_program
from evaluator.records import Evaluation
from evaluator.screen_gate import Gate
from evolve.archive import Archive
from evolve.config import RunConfig
from evolve.judge_memo import memo_for
from evolve.llm import ParentInfo, ProposalRequest, mutator_for
from evolve.lookahead import AHEAD_BATCH, FLYING, Lookahead
from evolve.mutate import OPERATOR_WEIGHTS, OfflineMutator
from evolve.views.holdout_table import split_errors
from evolve.views.history import front_hypervolume
from evolve.pareto import cell_key, pareto_front, select_nsga2
from evolve.ray_pool import RayPool
from evolve.spend import Spend
from evolve.workers import Executor, Job, WorkerPool
from seeds import seed_sources

__all__ = ["Candidate", "Member", "RunConfig", "Search", "SearchState"]

KINDS = ("improve", "simplify", "crossover")
PARENT_POOL = 24  # NSGA-II parent pool size per generation
ELITE_SHARE = 0.5  # share of parents drawn uniformly from the MAP-Elites cells
MAX_EMPTY_GENERATIONS = 20
PROPOSAL_TRIES = 25  # offline draws per candidate slot before a generation is left short
ACCURACY = ("e2e_mean", "e2e_worst", "ttft_mean", "itl_mean")  # must be finite to enter the frontier
GATE_ORDER = ("e2e_mean", "complexity")  # what a screen is compared on with a held-out frontier


def _folded(program: Program) -> Program:
    """The candidate with constants that only appear as a product or sum of each other merged
    (EFFICIENCY * SCALE is one number): the fit then has no direction the data cannot feel."""
    try:
        return fold_constants(program).program
    except Exception:  # noqa: BLE001 - folding is an optimisation; a hostile program keeps its form
        return program


@dataclass(frozen=True)
class Candidate:
    """A proposed program and where it came from, until it is written to the archive."""
    program: Program
    parents: tuple[int, ...]
    operator: str
    llm_cache_key: str | None = None


@dataclass
class Member:
    id: int
    program: Program
    objectives: dict
    generation: int
    fingerprint: tuple = ()  # evaluator.fingerprint of its screen: what its twins are found by

    @property
    def vector(self):
        return objective_vector(self.objectives)


@dataclass
class SearchState:
    members: list[Member] = field(default_factory=list)
    cells: dict[str, Member] = field(default_factory=dict)
    frontier: list[Member] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)
    # twin_of's view of the members' fingerprints: (id, complexity, print) per member in order,
    # and per print length the ids, complexities and prints stacked (rebuilt when members grow)
    _prints: list = field(default_factory=list, repr=False, compare=False)
    _stacked: dict = field(default_factory=dict, repr=False, compare=False)

    def add(self, m: Member) -> tuple[bool, bool]:
        """Integrate an evaluated member; returns (entered frontier, improved its cell)."""
        if not self._valid(m):
            return False, False
        self.members.append(m)
        key = cell_key(m.program)
        cur = self.cells.get(key)
        improved = cur is None or _scalar(m) < _scalar(cur)
        if improved:
            self.cells[key] = m
        # ranked as objective dicts: members share one vector order (`vector_order`) whatever
        # objectives each carries
        self.frontier = pareto_front(self.frontier + [m], key=lambda x: x.objectives)
        return any(x is m for x in self.frontier), improved

    def would_enter(self, objectives: dict, program: Program) -> bool:
        """Whether a screened candidate earns the full evaluation: judged on the in-sample
        errors the screen has (the held-out ones come with the full evaluation)."""
        if any(ranked(objectives.get(k)) >= INVALID for k in ACCURACY):
            return False
        return self.gate(cell_key(program)).admits(objectives)

    def gate(self, cell: str) -> Gate:
        """The bar a screened candidate of MAP-Elites cell `cell` must clear now: an in-sample
        loss below its cell elite's, or no frontier member dominating it."""
        cur = self.cells.get(cell)
        # Where the frontier is built on held-out errors, a screen can only be compared with it
        # on mean E2E and complexity (the in-sample twins of what it ranks): comparing on every
        # in-sample objective let ~70% of screened candidates through to a 4x dearer evaluation.
        order = GATE_ORDER if any(has_heldout(f.objectives) for f in self.frontier) else IN_SAMPLE_ORDER
        return Gate(None if cur is None else in_sample_loss(cur.objectives), order,
                    tuple(objective_vector(f.objectives, order) for f in self.frontier))

    def twin_of(self, fp, complexity: float) -> int | None:
        """Id of the earliest member that behaves like a candidate with fingerprint `fp`
        (`evaluator.fingerprint.twins`) and is no more complex than it (`complexity`), or None:
        its full evaluation would buy nothing new. A simpler twin is no twin: it would dominate
        the member on complexity at the same errors, so it keeps its way to the frontier (a
        2,000-proposal run had 18 such among its 118 twins)."""
        if not fp or any(x is None for x in fp):
            return None
        n = len(self._prints)  # members' prints, kept in member order as members only grow
        for m in self.members[n:]:
            ok = bool(m.fingerprint) and not any(y is None for y in m.fingerprint)
            self._prints.append((m.id, ranked(m.objectives.get("complexity")),
                                 np.asarray(m.fingerprint, np.float64) if ok else None))
        if len(self.members) != n:
            self._stacked.clear()
        if len(fp) not in self._stacked:  # the members' prints of that length, one matrix
            rows = [(i, c, v) for i, c, v in self._prints if v is not None and len(v) == len(fp)]
            self._stacked[len(fp)] = (np.array([i for i, _, _ in rows], np.int64),
                                      np.array([c for _, c, _ in rows], np.float64),
                                      np.vstack([v for _, _, v in rows]) if rows else np.empty((0, len(fp))))
        ids, cx, M = self._stacked[len(fp)]
        hit = np.flatnonzero((cx <= complexity) & twin_rows(np.asarray(fp, np.float64), M))  # `twins`, all at once
        return int(ids[hit[0]]) if len(hit) else None

    @staticmethod
    def _valid(m: Member) -> bool:
        return bool(m.objectives) and finite_or_none(m.objectives.get("e2e_mean")) is not None

    def hv(self) -> float:
        """The run summary's hypervolume: `evolve.views.history.front_hypervolume` (complexity and
        the error the run ranks on), the figure the report and the UI plot."""
        return front_hypervolume(self.frontier)


def _scalar(m: Member) -> float:
    return selection_loss(m.objectives)


class Search:
    def __init__(self, cfg: RunConfig, archive: Archive, progress=None):
        self.cfg = cfg
        self.archive = archive
        self.progress = progress
        self.state = SearchState()
        self.llm = None
        self.spend = Spend(cfg.max_llm_cost, cfg.max_llm_tokens)
        self._cap_noted = False
        if cfg.llm:
            self.llm = mutator_for(cfg, cache=archive)  # model, server, prices, deadline
            self.llm.spend = self.spend
        self.rng = random.Random(cfg.seed)
        # `constant` is left out: constants are fitted, so it cannot yield a new candidate
        self.offline = OfflineMutator(caps=cfg.caps, rng=self.rng,
                                      weights={k: v for k, v in OPERATOR_WEIGHTS.items() if k != "constant"})
        self.seen: set[str] = set()  # canonical hashes of this run's accepted programs
        self.skipped = 0  # offline draws discarded as already seen
        self.rescreened = 0  # stopped screens screened again at their turn: the gate fell meanwhile
        self._pool_key = None  # (generation, members) the cached parent pool was built for
        self._pool_cache: tuple[list[Member], list[Member]] = ([], [])
        self._grids: dict | None = None  # extrapolation grids per model, for the LLM's floor text
        self._batches = 0  # batches evaluated by this process (tags their jobs)
        # resume: the generation proposed again and its candidates already stored, by hash
        self._redo_gen: int | None = None
        self._redo: dict[str, dict] = {}
        self._redo_count = 0  # of them, evaluations counted in runs.n_evaluated
        # results a killed run had received for candidates it had not written yet, by (hash, kind)
        self._pending: dict[tuple[str, str], Evaluation] = {}
        self._phase_file = os.environ.get("STEPEVOLVE_PHASE_FILE")  # tests: where the driver is
        self._ahead = Lookahead(pinned=cfg.pinned_only, gate=self._gate)  # the next generation's screens on idle workers

    @functools.cached_property
    def planned(self) -> int:
        """Evaluations this run makes at most: its budget, or its seed programs where they are
        more (every run starts by evaluating them all; `evolve run` says so). Read once: the
        progress line asks every 30 s, and the seeds are files."""
        return max(self.cfg.budget, len(seed_sources()))

    # -------------------------------------------------------------- entry points
    @functools.cached_property
    def _gt(self):
        """The run's ground truth, read once (fingerprint, held-out split labels, the LLM's floor grids)."""
        return load(self.cfg.data)

    def start(self) -> str:
        gt = self._gt
        self.run_id = self.archive.start_run(self.cfg.to_json(), self.cfg.seed, gt.fingerprint(), self.cfg.budget)
        self._bind_spend()
        self.generation = 0
        seeds = [parse_program(s) for _, s in sorted(seed_sources().items())]
        self._evaluate_batch([Candidate(p, (), "seed") for p in seeds], screen=False)
        return self.run_id

    def resume(self, run_id: str) -> str:
        run = self.archive.get_run(run_id)
        if run is None:
            raise ValueError(f"no run {run_id!r} in the archive")
        self.run_id = run_id
        self._bind_spend()
        rows = self.archive.resume_rows(run_id)
        last = max((r["generation"] for r in rows), default=0)
        # every generation before the last is rebuilt as it was; a screened candidate is no
        # member (it has no held-out errors to rank with), as in the run that stored it
        for r in rows:
            if r["generation"] < last:
                if r["canonical_hash"]:
                    self.seen.add(r["canonical_hash"])
                if r["stage"] == "full" and r["objectives"]:
                    try:
                        prog = parse_program(r["source"])
                    except ProgramError:
                        continue
                    self.state.add(Member(r["id"], prog, r["objectives"], r["generation"], r["fingerprint"]))
            elif r["canonical_hash"]:
                self._redo[r["canonical_hash"]] = r
        self._pending = self.archive.pending(run_id)
        self._redo_gen = last
        self._redo_count = sum(1 for r in self._redo.values() if r["evaluated"])
        self.archive.set_run_status(run_id, "running")
        if last == 0:  # killed while the seeds were evaluated (or right after): evaluate the others
            self.generation = 0
            seeds = [parse_program(s) for _, s in sorted(seed_sources().items())]
            self._evaluate_batch([Candidate(p, (), "seed") for p in seeds], screen=False)
            self._redo_gen = None
        else:
            self.generation = last - 1  # the loop proposes generation `last` again
        return run_id

    def _reseed(self) -> None:
        """The generator of a generation depends on (seed, generation) only: a resumed run
        proposes what the uninterrupted one did."""
        self.rng.seed(self.cfg.seed * 1_000_003 + self.generation)

    def _phase(self, what: str, index: int = -1) -> None:
        """'EVENT GENERATION CANDIDATE' lines in STEPEVOLVE_PHASE_FILE, for tests and
        benchmarks/kill_resume.py to kill a run at a chosen phase and count the work it lost:
        screen/full (jobs handed to the workers), result-screen/result-full (received),
        kept-screen/kept-full (stored in the pending table), write (the candidate stored)."""
        if self._phase_file:
            with open(self._phase_file, "a") as f:
                f.write(f"{what} {self.generation} {index}\n")

    def _bind_spend(self) -> None:
        """Calls are stored under this run and the spend starts from what it already holds."""
        if self.llm is not None:
            self.llm.cache = self.archive.llm_cache(self.run_id)
            self.spend = self.llm.spend = Spend.of_run(self.archive, self.run_id, self.cfg.max_llm_cost,
                                                       self.cfg.max_llm_tokens)

    def _llm_capped(self) -> bool:
        """At the spend cap the run goes on with the offline operator (said once on stderr)."""
        why = self.spend.exhausted()
        if why and not self._cap_noted:
            self._cap_noted = True
            print(f"note: LLM spend cap reached ({why}); continuing with the offline operator", file=sys.stderr)
        return why is not None

    def _pool(self) -> Executor:
        """The executor of this run's evaluations (`RunConfig.executor`), started once."""
        if getattr(self, "pool", None) is None:
            args = (self.cfg.data, self.cfg.train_fraction, self.cfg.workers, self.cfg.timeout_s)
            # with held-out objectives a full job is cut into its splits, spread over the workers
            splits = split_labels(self._gt.experiments) if self.cfg.holdout else ()
            if self.cfg.executor == "ray":
                self.pool = RayPool(*args, heldout=self.cfg.holdout, address=self.cfg.ray_address, splits=splits)
            else:
                self.pool = WorkerPool(*args, heldout=self.cfg.holdout, splits=splits)
            if self.cfg.reuse:  # jobs this archive has answered under the same judge: not judged again
                self.pool.memo = memo_for(self.archive, self._gt, self.cfg.train_fraction)
        return self.pool

    def close(self, keep_pool: bool = False) -> None:
        """Stop the LLM calls and, unless `keep_pool`, the executor."""
        if hasattr(self, "_llm_exec"):
            self._llm_exec.shutdown(wait=True, cancel_futures=True)
            del self._llm_exec
        if getattr(self, "pool", None) is not None and not keep_pool:
            self.pool.close()
            self.pool = None

    def loop(self, keep_pool: bool = False) -> dict:
        """Propose and evaluate generations until the budget is spent. `keep_pool`: a run that
        finishes leaves its executor running for the caller (the hand-over's start fits: a new
        pool would make the shared states again, ~15-20 s of both cores idle), who closes it."""
        t0 = time.perf_counter()
        pool = self._pool()
        try:
            empty = 0
            pending = None  # LLM calls of the next generation, running while this one evaluates
            while self._redo_gen is not None or self.archive.get_run(self.run_id)["n_evaluated"] < self.cfg.budget:
                done = self.archive.get_run(self.run_id)["n_evaluated"]
                self.generation += 1
                self._reseed()
                redo = self.generation == self._redo_gen
                if redo:  # what the run had evaluated when it proposed this generation
                    done -= self._redo_count
                n = min(self.cfg.generation_size, self.cfg.budget - done)
                if redo:  # its stored candidates are proposed again, whatever the budget now
                    n = max(n, len(self._redo))
                batch = []
                if self.llm is not None and (pending is not None or not self._llm_capped()):
                    if pending is None:
                        pending = self._llm_submit(n, self.generation)
                    batch = self._llm_collect(pending)
                    # parents for the next generation come from the state *before* this one is
                    # integrated: deterministic, and the LLM works while the workers evaluate
                    pending = None if self._llm_capped() else self._llm_submit(self.cfg.generation_size,
                                                                                self.generation + 1)
                batch = batch[:n] + self._propose_offline(n - min(n, len(batch)))
                empty = 0 if batch else empty + 1
                if empty >= MAX_EMPTY_GENERATIONS and not redo:
                    break  # the operators find nothing new any more: stop rather than spin
                if batch or redo:
                    # the next generation's size if this one is written whole (offline proposals only:
                    # an LLM generation is proposed ahead already, and a resumed one is settled first)
                    ahead = 0 if redo or self.llm is not None or not self.cfg.cascade else \
                        min(self.cfg.generation_size, self.cfg.budget - done - len(batch))
                    self._evaluate_batch(batch, screen=self.cfg.cascade, ahead=ahead)
                self._redo_gen = None
            # a run that evaluated nothing is not claimed as finished
            status = "finished" if self.archive.get_run(self.run_id)["n_evaluated"] else "failed"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            if getattr(self, "pool", None) is not None:
                self.pool.discard(AHEAD_BATCH)  # look-ahead screens no worker has started
            if locals().get("status") == "finished":
                self.archive.clear_pending(self.run_id)  # nothing a later generation could take
            self.archive.finish_run(self.run_id, status if "status" in locals() else "interrupted")
            self.close(keep_pool=keep_pool and locals().get("status") == "finished")
        return {"run_id": self.run_id, "seconds": time.perf_counter() - t0,
                "frontier": [m.id for m in self.state.frontier], "killed": pool.killed,
                "skipped_duplicates": self.skipped, "llm_spend": self.spend.summary() if self.llm else None,
                "ahead": {"submitted": self._ahead.submitted, "used": self._ahead.used},
                "recalled": pool.memo.hits if pool.memo is not None else 0,
                "repeated": pool.memo.repeats if pool.memo is not None else 0,
                "rescreened": self.rescreened}

    # -------------------------------------------------------------- proposal
    def _parent_pool(self) -> tuple[list[Member], list[Member]]:
        """(NSGA-II pool, MAP-Elites elites) for this generation, computed once per generation.

        The pool is DEAP's selNSGA2 survivor selection of PARENT_POOL members (rank, then
        crowding distance) over cell elites and frontier; elites are the cells' best members.
        """
        key = (self.generation, len(self.state.members))
        if self._pool_key != key:
            elites = sorted(self.state.cells.values(), key=lambda m: m.id)
            pop = {m.id: m for m in elites + self.state.frontier}
            pop = sorted(pop.values(), key=lambda m: m.id) or sorted(self.state.members, key=lambda m: m.id)
            pool = select_nsga2(pop, min(len(pop), PARENT_POOL), key=lambda m: m.objectives)
            self._pool_cache = (sorted(pool, key=lambda m: m.id), elites or pool)
            self._pool_key = key
        return self._pool_cache

    def _parents(self, k: int) -> list[Member]:
        """k parents: each a uniformly drawn cell elite (MAP-Elites: diversity) or, as often,
        a member of the NSGA-II pool (pressure towards the accuracy/complexity frontier)."""
        pool, elites = self._parent_pool()
        if not pool:
            return []
        return [self.rng.choice(elites if self.rng.random() < ELITE_SHARE else pool) for _ in range(k)]

    def _propose_offline(self, n: int) -> list[Candidate]:
        """n structurally new programs (canonical hash never seen in this run).

        Constants are fitted, so a proposal that only changes constant values, or one equal
        to a known program, could not score differently: it is drawn again (up to
        PROPOSAL_TRIES per slot) instead of filling the generation with duplicates that would
        leave workers idle. Skipped draws are counted in `self.skipped`.
        """
        out = []
        tries = 0
        while len(out) < n and tries < PROPOSAL_TRIES * n:
            tries += 1
            kind = "crossover" if self.rng.random() < 0.2 else None
            parents = self._parents(2 if kind else 1)
            if not parents:
                break
            if kind and parents[0].id == parents[1].id:
                kind, parents = None, parents[:1]
            prog, op = self.offline.propose_program([m.program for m in parents], kind=kind)
            prog = _folded(prog)
            if prog.hash in self.seen:
                self.skipped += 1
                continue
            self.seen.add(prog.hash)
            out.append(Candidate(prog, tuple(m.id for m in parents), op))
        return out

    def _propose_ahead(self, n: int) -> list[tuple[str, str, str]]:
        """What `_propose_offline` would propose for the next generation if it were proposed now,
        as (hash, source, cell) (`evolve.lookahead`): the search's random stream, seen programs, skip
        count and parent pool are left as they were, so the next generation's own proposal is
        unchanged by it."""
        kept = (self.generation, self.rng.getstate(), set(self.seen), self.skipped, self._pool_key, self._pool_cache)
        try:
            self.generation += 1
            self._reseed()
            return [(c.program.hash, c.program.source, cell_key(c.program)) for c in self._propose_offline(n)]
        finally:
            gen, rng, self.seen, self.skipped, self._pool_key, self._pool_cache = kept
            self.generation = gen
            self.rng.setstate(rng)

    def _llm_submit(self, n: int, generation: int):
        """Build this generation's prompts now (parents from the current state) and start the
        calls in a background thread; returns (generation, future, parent ids)."""
        reqs, parent_ids = [], []
        for i in range(n):
            kind = self.rng.choice(KINDS)
            ps = self._parents(2 if kind == "crossover" else 1)
            if not ps:
                continue
            infos = [self._parent_info(m) for m in ps]
            reqs.append(ProposalRequest(kind, infos, self.cfg.caps, self.cfg.seed * 100_003 + generation * 101 + i))
            parent_ids.append([m.id for m in ps])
        if not hasattr(self, "_llm_exec"):
            self._llm_exec = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm")
        return generation, self._llm_exec.submit(self.llm.propose_many, reqs), parent_ids

    def _parent_info(self, m: Member) -> ParentInfo:
        """What the LLM is told of a parent: its worst stages, how it transfers to the held-out
        splits (worst first), and its prediction against the hardware floor per model."""
        ev = (self.archive.program(m.id) or {}).get("evaluation") or {}
        return ParentInfo(m.program.source, _errors_table(ev), "", m.objectives,
                          transfer=_transfer_text(ev), floor=self._floor_text(m.program, ev))

    def _floor_text(self, program: Program, ev: dict) -> str:
        if self._grids is None:
            self._grids = physics.model_grids(self._gt)
        consts = ev.get("constants") or {}
        lines = []
        try:
            f = program.compiled()
            for model, grid in sorted(self._grids.items()):
                c = consts.get(model, consts.get("*"))
                if c is not None:
                    lines.append(f"{model}: {physics.floor_report(f, c, grid, program.params)}")
        except (ProgramError, ValueError) as e:
            return f"(not computed: {e})"
        return "\n".join(lines)

    def _llm_collect(self, pending) -> list[Candidate]:
        generation, fut, parent_ids = pending
        out = []
        for res, pids in zip(fut.result(), parent_ids):
            if res.ok:
                out.append(Candidate(_folded(res.program), tuple(pids), f"llm:{res.kind}", res.cache_key))
            else:
                self.archive.add_candidate(self.run_id, res.source or "", parents=pids, operator=f"llm:{res.kind}",
                                           generation=generation, llm_model=self.cfg.llm, valid=False,
                                           reject_reason=res.error or "unusable reply", count=False,
                                           llm_cache_key=res.cache_key)
        return out

    # -------------------------------------------------------------- evaluation
    def _write(self, c: Candidate, ev: Evaluation, stage: str, twin_of: int | None = None) -> None:
        """One candidate and its evaluation, in one archive transaction (`twin_of`: the member
        it behaves like, whose full evaluation stands for its own)."""
        if not ev.valid:  # whatever the failure, ranked as invalid at the program's complexity
            ev = replace(ev, objectives=invalid_objectives(c.program.complexity.total))
        pid = self.archive.add_candidate(
            self.run_id, c.program, parents=list(c.parents), operator=c.operator, generation=self.generation,
            evaluation=ev, stage=stage, llm_model=self.cfg.llm if c.operator.startswith("llm") else None,
            llm_cache_key=c.llm_cache_key, twin_of=twin_of)
        if stage == "full":
            self.state.add(Member(pid, c.program, ev.objectives, self.generation, ev.fingerprint))

    def _gate(self, cell: str) -> dict | None:
        """The cascade's gate for a screen of MAP-Elites cell `cell` as it stands now (JSON, for
        `Job.gate`), or None where screens replay every experiment (`RunConfig.screen_race`)."""
        return self.state.gate(cell).to_json() if self.cfg.screen_race else None

    def _first_job(self, i: int, c: Candidate, kind: str, batch: int, gated: bool = True) -> Job:
        """Candidate `i`'s first evaluation: a screen (with the gate of now) or, without the
        cascade, the full one."""
        if kind != "screen":
            return Job(i, c.program.source, kind, batch=batch)
        return Job(i, c.program.source, "screen", batch=batch, pinned=self.cfg.pinned_only,
                   gate=self._gate(cell_key(c.program)) if gated else None)

    @staticmethod
    def _full_job(i: int, c: Candidate, screen_ev: Evaluation, batch: int) -> Job:
        """The full evaluation of screened candidate `i`, starting from its screen's constants."""
        return Job(i, c.program.source, "full", screen_ev.constants, screen=screen_ev, batch=batch)

    def _evaluate_batch(self, batch: list[Candidate], screen: bool, ahead: int = 0) -> None:
        todo: list[tuple[int, Candidate]] = []
        seen: dict[str, int] = {}
        # a generation proposed again on resume: its candidates already stored are settled as
        # they were (never evaluated twice); they are the first ones proposed, in their order
        redo = self._redo if self.generation == self._redo_gen else {}
        stored: dict[int, dict] = {}
        for i, c in enumerate(batch):
            prog = c.program
            if prog.hash in redo and prog.hash not in seen:
                stored[i] = redo.pop(prog.hash)
                seen[prog.hash] = i
                todo.append((i, c))
                self.seen.add(prog.hash)
                continue
            dup = self.archive.find_by_hash(self.run_id, prog.hash)
            if dup is None and prog.hash in seen:
                dup = f"candidate {seen[prog.hash]} of this generation"
            seen.setdefault(prog.hash, i)
            if dup is not None:
                self.archive.add_candidate(self.run_id, prog, parents=list(c.parents), operator=c.operator,
                                           generation=self.generation, valid=False,
                                           reject_reason=f"duplicate of {dup}", count=False)
                continue
            todo.append((i, c))
            self.seen.add(prog.hash)
        # stored candidates of the generation no proposal matched (an LLM reply that differs):
        # members all the same, after the others
        leftovers = sorted(redo.values(), key=lambda r: r["id"])
        redo.clear()
        if not todo and not leftovers:
            return
        # Stream: candidates are written in proposal order as soon as they and every earlier
        # one are settled, so a killed run loses only those in flight (or waiting on one).
        # Whether a screened candidate earns its full evaluation is decided in that order too,
        # on the state every earlier candidate left. Workers with nothing to do meanwhile run
        # the full evaluation of later candidates that would earn it on the current state
        # (speculation): an evaluation does not depend on when or where it runs, so only what
        # the in-order decision asks for is written, and the archive stays the same.
        fresh = [(i, c) for i, c in todo if i not in stored]
        pool = self._pool() if fresh else None
        self._batches += 1
        b = self._batches
        self._phase("batch", b)  # "batch GENERATION B": the executor's start lines name B
        first_kind = "screen" if screen else "full"
        first: dict[int, Evaluation] = {}
        full: dict[int, Evaluation] = {}
        consumed = False
        for i, c in fresh:  # a result the killed run had received is not asked for again
            if (c.program.hash, first_kind) in self._pending:
                first[i] = self._pending.pop((c.program.hash, first_kind))
                consumed = True
            if screen and (c.program.hash, "full") in self._pending:
                full[i] = self._pending.pop((c.program.hash, "full"))
                consumed = True
        waiting: dict[str, int] = {}  # a look-ahead screen still on a worker -> its candidate
        early: list[tuple[Job, Evaluation]] = []  # look-ahead results taken: kept as received ones
        for i, c in fresh:
            if screen and i not in first:
                got_ev = self._ahead.claim(c.program.hash, self.generation)
                if got_ev is FLYING:
                    waiting[c.program.hash] = i
                elif got_ev is not None:
                    first[i] = got_ev
                    early.append((Job(i, c.program.source, "screen", batch=b), got_ev))
                    self._phase("result-screen", i)
        self._ahead.begin(self.generation)
        for i, c in fresh:
            if i not in first and c.program.hash not in waiting:
                self._phase(first_kind, i)  # before: a free worker takes the job in `submit` ("start-...")
                pool.submit(self._first_job(i, c, first_kind, b))
        kept = False  # whether results were kept in the archive's pending table
        hashes = dict(todo)
        gate: dict[int, bool] = {}  # the in-order decision per candidate
        twin: dict[int, int] = {}  # a candidate that would earn its full evaluation but behaves like a member
        asked: set[int] = set()  # full evaluations submitted (needed or speculative)
        again: set[int] = set()  # stopped screens screened again at their turn (see below)
        looked: dict[int, int] = {}  # state size when a speculation was last declined
        guessed = None  # members when the next generation's screens were guessed (`evolve.lookahead`)
        k = 0
        while k < len(todo):
            got, early = early, []
            for job, ev in (pool.poll() if pool is not None else ()):
                if job.batch == AHEAD_BATCH:  # a look-ahead screen (`evolve.lookahead`)
                    target, h = self._ahead.arrived(job)
                    i = waiting.pop(h, None) if target == self.generation else None
                    if i is None:
                        self._ahead.keep(target, h, ev)
                        continue
                    self._ahead.used += 1
                    job = Job(i, job.source, "screen", batch=b)
                if job.batch != b:  # a speculative full job of an earlier batch nobody needed
                    continue
                (full if screen and job.kind == "full" else first)[job.index] = ev
                got.append((job, ev))
                self._phase(f"result-{job.kind}", job.index)
            while k < len(todo):
                i, c = todo[k]
                if i in stored:
                    r = stored[i]
                    if r["stage"] == "full" and r["objectives"]:
                        self.state.add(Member(r["id"], c.program, r["objectives"], self.generation, r["fingerprint"]))
                    k += 1
                    continue
                if i not in first:
                    break
                if i not in gate and first[i].race and self.state.would_enter(first[i].race["bounds"], c.program):
                    # a screen stopped against the gate of its submission, which has fallen since
                    # (a new cell elite, chosen on held-out errors, may be worse in-sample): its
                    # bounds decide nothing now, so it is screened again against the gate of now
                    del first[i]
                    self.rescreened += 1
                    pool.submit(self._first_job(i, c, "screen", b, gated=i not in again), first=True)
                    again.add(i)
                    break
                if i not in gate:
                    gate[i] = screen and first[i].valid and self.state.would_enter(first[i].objectives, c.program)
                    t = self.state.twin_of(first[i].fingerprint, c.program.complexity.total) if gate[i] else None
                    if t is not None:  # its full evaluation would repeat member t's
                        gate[i], twin[i] = False, t
                if gate[i]:
                    if i not in full:
                        if i not in asked:
                            self._phase("full", i)
                            pool.submit(self._full_job(i, c, first[i], b), first=True)
                            asked.add(i)
                        break
                    self._write(c, full[i], "full")
                else:
                    self._write(c, first[i], first_kind, twin_of=twin.get(i))
                self._phase("write", i)
                k += 1
            # a result whose candidate waits (on an earlier one, or on its full evaluation) is
            # kept, so that a kill loses only the jobs in flight
            written = {i for i, _ in todo[:k]}
            for job, ev in got:
                if job.index not in written:
                    self.archive.put_pending(self.run_id, hashes[job.index].program.hash, job.kind, ev)
                    kept = True
                    self._phase(f"kept-{job.kind}", job.index)
            if screen:
                for i, c in todo[k + 1:]:
                    if pool.spare() <= 0:
                        break
                    if i in asked or i in full or i not in first or not first[i].valid or \
                            looked.get(i) == len(self.state.members):
                        continue
                    looked[i] = len(self.state.members)
                    if self.state.would_enter(first[i].objectives, c.program) and \
                            self.state.twin_of(first[i].fingerprint, c.program.complexity.total) is None:
                        pool.submit(self._full_job(i, c, first[i], b))
                        asked.add(i)
                if ahead > 0 and k < len(todo) and pool is not None and pool.spare() > 0:  # idle: the next screens
                    if guessed is None:
                        guessed = len(self.state.members)
                        self._ahead.start(self.generation + 1, self._propose_ahead(ahead))
                    self._ahead.feed(pool)
            if k < len(todo):  # nothing more to write until a worker answers
                pool.wait() if pool is not None else time.sleep(0.002)
        if pool is not None:
            pool.discard(b)  # speculative jobs of this batch not started yet
        self._ahead.end(self.generation)
        if ahead > 0 and pool is not None:  # the state is final: the guess is the next generation itself
            if guessed != len(self.state.members):
                self._ahead.start(self.generation + 1, self._propose_ahead(ahead))
            self._ahead.feed(pool)  # the workers screen it while this generation is written up
        # this batch is written: its kept results are done with (those a killed run kept for a
        # later generation stay until it is proposed again)
        mine = {c.program.hash for _, c in todo}
        if kept or consumed or any(h in mine for h, _ in self._pending):
            self.archive.clear_pending(self.run_id, sorted(mine))
            self._pending = {k: v for k, v in self._pending.items() if k[0] not in mine}
        for r in leftovers:
            if r["canonical_hash"]:
                self.seen.add(r["canonical_hash"])
            if r["stage"] == "full" and r["objectives"]:
                try:
                    self.state.add(Member(r["id"], parse_program(r["source"]), r["objectives"], self.generation,
                                          r["fingerprint"]))
                except ProgramError:
                    pass
        self.archive.set_frontier(self.run_id, [m.id for m in self.state.frontier])
        self.archive.set_cells(self.run_id, {k: m.id for k, m in sorted(self.state.cells.items())})
        best = min((m for m in self.state.frontier), key=lambda m: m.objectives["e2e_mean"], default=None)
        self.state.history.append({"generation": self.generation, "hv": self.state.hv(),
                                   "best_e2e": best.objectives["e2e_mean"] if best else math.nan})
        if self.progress:
            self.progress(self)


def _errors_table(ev: dict) -> str:
    lines = ["experiment | stage | E2E err | TTFT err | ITL err"]
    rows = sorted(ev.get("rows", []), key=lambda r: -(r.get("e2e_err") or 0))
    p = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731  (None: the stage mostly failed)
    for r in rows[:12]:
        lines.append(f"{r['model']}/{r['workload']} | {r['stage']} | {p(r.get('e2e_err'))} | "
                     f"{p(r.get('ttft_err'))} | {p(r.get('itl_err'))}")
    return "\n".join(lines)


def _transfer_text(ev: dict) -> str:
    """Held-out splits' mean E2E error (fitted without them), worst first: 'model:llama-2-7b: 52.4%'."""
    errs = split_errors(ev)
    if not errs:
        return ""
    return "\n".join(f"{label}: " + ("could not be scored" if not math.isfinite(v) else f"{100 * v:.1f}%")
                     for label, v in sorted(errs.items(), key=lambda kv: -kv[1]))
