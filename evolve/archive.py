"""The archive: every run, program, evaluation and LLM call, in one SQLite file.

    arch = Archive("archive.db")                 # engine created in *this* process
    run = arch.start_run(config, seed=7, data_fingerprint=fp, budget=500)
    pid = arch.add_candidate(run, program, parents=[3], operator="llm:improve",
                             generation=4, evaluation=ev, llm_model="openai/qwen")
    arch.frontier(run)                           # list of records (program + evaluation)

SQLite facts this module relies on (docs/architecture.md, fact 8):
  * WAL journal, synchronous=NORMAL, busy_timeout=30 s, foreign keys on, set on connect.
  * pysqlite's own transaction handling is disabled (isolation_level=None) and the
    SQLAlchemy `begin` event emits `BEGIN IMMEDIATE`, so a write transaction takes the
    write lock up front and read-modify-write updates from several processes are never
    lost. Pure reads use `BEGIN DEFERRED` (an engine option), so readers never wait for
    a writer under WAL.
  * The engine is created lazily in the process that uses it; an Archive object that
    crosses a fork re-creates its engine in the child (never shares pooled connections).
  * Every write is one short transaction; `add_candidate` stores program + evaluation
    (+ the run's n_evaluated counter) atomically, so a killed run loses at most the
    candidate in flight. Seeds go in with `add_programs_bulk` (one transaction).

Schema decisions:
  * programs.valid means "accepted into the population": it parsed, passed the caps the
    caller checked, and is not a duplicate. Rejected proposals are kept (valid=0 with a
    reject_reason) for accounting: unparseable source has canonical_hash NULL.
  * Duplicates are STORED, not skipped: a structurally identical program (same
    canonical_hash in the same run) becomes a rejected row with reject_reason
    "duplicate of <id>" and gets no evaluation. At most one accepted program per
    (run_id, canonical_hash) is enforced by a partial unique index (WHERE valid = 1);
    the check-then-insert runs under BEGIN IMMEDIATE so concurrent workers cannot race.
    `find_by_hash` returns the accepted program only.
  * evaluations: one row per program (program_id unique). `add_evaluation` upserts, so
    a 'screen' evaluation is replaced by the later 'full' one. Objectives are kept as
    JSON and as float columns for SQL sorting (NaN stored as NULL, inf as inf).
  * frontier / cells: membership tables replaced wholesale by set_frontier / set_cells.
    `frontier(run)` returns the stored membership if any was set, else computes the
    Pareto front of the run's valid 'full' evaluations; `frontier(None)` is always
    computed on the fly over all runs.
  * llm_calls doubles as the LLM reply cache (get/put, keyed by cache_key); the record
    handed to `put` is stored verbatim and returned by `get`.
  * Timestamps are Unix seconds (float).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import (JSON, Boolean, Float, ForeignKey, Index, Integer, LargeBinary, String, Text, create_engine,
                        delete, event, func, select, text, update)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.types import TypeDecorator

from evaluator.objectives import (ORDER, REGIMES_OPTIONAL, finite_or_none, handover_regrets, ideal_point, selection_loss,
                                  sortable_or_none)
from typing import TYPE_CHECKING
if TYPE_CHECKING:  # evaluator.program (numba) is imported where a program is parsed (`evolve frontier` never does)
    from evaluator.program import Program
from evaluator.records import Evaluation, nan_for_null, strict_json
from evaluator.records import unpinned as unpinned_constants  # the hand-over's and the cascade's rule
from evolve.archive_check import ArchiveError, check_archive_file, describe_db_error, readonly_connect
from evolve.pareto import pareto_front

# one float column per objective, for SQL sorting; the optional held-out regimes (long decode,
# overload) live in the objectives JSON only, like the failure error: data without them has none
OBJECTIVE_COLUMNS = tuple(k for k in ORDER if k not in REGIMES_OPTIONAL)
USABLE_CHECKS = 50  # best_transfer: candidates asked `usable` at most (grid predictions, ~0.1 s each)
RUN_STATUSES = ("running", "finished", "failed", "interrupted")
STAGES = ("screen", "full")
SCHEMA_VERSION = 8  # 4: pending_results (kept results of a killed run); 5: fingerprint, twin_of, recommended;
# 6: fit_starts; 7: race (a screen stopped early); 8: judged (the judge's answers, evolve.judge_memo)
# columns added after version 1: (table, column, SQL type), added in place to an older archive
ADDED_COLUMNS = (("evaluations", "lowo_e2e", "FLOAT"), ("evaluations", "lomo_e2e", "FLOAT"),
                 ("evaluations", "load_e2e", "FLOAT"), ("evaluations", "holdout", "JSON"),
                 ("evaluations", "identifiability", "JSON"), ("evaluations", "fingerprint", "JSON"),
                 ("evaluations", "twin_of", "INTEGER"), ("runs", "recommended", "INTEGER"),
                 ("evaluations", "fit_starts", "JSON"), ("evaluations", "race", "JSON"))



# ---------------------------------------------------------------- schema

class Base(DeclarativeBase):
    pass


class ObjectivesJSON(TypeDecorator):
    """An objectives dict in strict JSON: every value is a number, so a null read back is the
    NaN or infinity the judge wrote, and comes back as NaN (every ranking counts both as
    INVALID, every view as missing)."""
    impl = JSON
    cache_ok = True

    def process_result_value(self, value, dialect):
        return nan_for_null(value) if isinstance(value, dict) else value


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String, primary_key=True)
    created_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    config: Mapped[Any] = mapped_column(JSON)
    seed: Mapped[int] = mapped_column(Integer)
    data_fingerprint: Mapped[str | None] = mapped_column(String, nullable=True)
    status: Mapped[str] = mapped_column(String, default="running")
    budget: Mapped[int | None] = mapped_column(Integer, nullable=True)
    n_evaluated: Mapped[int] = mapped_column(Integer, default=0)
    # the program the run hands over, fixed when it finishes (`best_transfer(..., fresh=True)`
    # with the served-shapes check), so that every view, `evolve frontier` included, names it
    recommended: Mapped[int | None] = mapped_column(Integer, nullable=True)


class ProgramRow(Base):
    __tablename__ = "programs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    source: Mapped[str] = mapped_column(Text)
    canonical_hash: Mapped[str | None] = mapped_column(String, nullable=True, index=True)
    parent_ids: Mapped[Any] = mapped_column(JSON, default=list)
    operator: Mapped[str] = mapped_column(String)
    llm_model: Mapped[str | None] = mapped_column(String, nullable=True)
    generation: Mapped[int] = mapped_column(Integer, default=0)
    complexity: Mapped[int | None] = mapped_column(Integer, nullable=True)
    n_ops: Mapped[int | None] = mapped_column(Integer, nullable=True)
    n_cond: Mapped[int | None] = mapped_column(Integer, nullable=True)
    n_consts: Mapped[int | None] = mapped_column(Integer, nullable=True)
    components: Mapped[Any] = mapped_column(JSON, default=list)
    valid: Mapped[bool] = mapped_column(Boolean, default=True)
    reject_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        Index("ix_programs_run_hash", "run_id", "canonical_hash"),
        Index("ux_programs_run_hash_accepted", "run_id", "canonical_hash", unique=True,
              sqlite_where=text("valid = 1 AND canonical_hash IS NOT NULL")),
    )


class EvaluationRow(Base):
    __tablename__ = "evaluations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    program_id: Mapped[int] = mapped_column(ForeignKey("programs.id"), unique=True)
    valid: Mapped[bool] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    objectives: Mapped[Any] = mapped_column(ObjectivesJSON, default=dict)
    step_mape: Mapped[float | None] = mapped_column(Float, nullable=True)
    e2e_mean: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    e2e_worst: Mapped[float | None] = mapped_column(Float, nullable=True)
    ttft_mean: Mapped[float | None] = mapped_column(Float, nullable=True)
    itl_mean: Mapped[float | None] = mapped_column(Float, nullable=True)
    complexity: Mapped[float | None] = mapped_column(Float, nullable=True)
    lowo_e2e: Mapped[float | None] = mapped_column(Float, nullable=True)
    lomo_e2e: Mapped[float | None] = mapped_column(Float, nullable=True)
    load_e2e: Mapped[float | None] = mapped_column(Float, nullable=True)
    holdout: Mapped[Any] = mapped_column(JSON, nullable=True)  # evaluator.holdout detail per kind
    identifiability: Mapped[Any] = mapped_column(JSON, nullable=True)  # evaluator.identify per group
    # evaluator.fingerprint of the screen's constants: how the search finds behavioural twins
    fingerprint: Mapped[Any] = mapped_column(JSON, nullable=True)
    # a screened candidate that behaves like this earlier program of its run: its full
    # evaluation was skipped (evolve.search)
    twin_of: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # the held-out regimes fitted from several start points, for the programs a run's hand-over
    # weighed (evolve.handover): {"starts", "seed", "records", "spread"}
    fit_starts: Mapped[Any] = mapped_column(JSON, nullable=True)
    # a screen that stopped replaying once it could not clear the cascade's gate
    # (evaluator.screen_race): the models it scored, its lower bounds, why; null otherwise
    race: Mapped[Any] = mapped_column(JSON(none_as_null=True), nullable=True)
    rows: Mapped[Any] = mapped_column(JSON, default=list)
    steps: Mapped[Any] = mapped_column(JSON, default=dict)
    constants: Mapped[Any] = mapped_column(JSON, default=dict)
    overheads: Mapped[Any] = mapped_column(JSON, default=dict)
    sim_steps: Mapped[int] = mapped_column(Integer, default=0)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    stage: Mapped[str] = mapped_column(String, default="full")
    created_at: Mapped[float] = mapped_column(Float)


class LLMCall(Base):
    __tablename__ = "llm_calls"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cache_key: Mapped[str] = mapped_column(String, unique=True)
    model: Mapped[str | None] = mapped_column(String, nullable=True)
    prompt: Mapped[Any] = mapped_column(JSON, nullable=True)
    reply: Mapped[str | None] = mapped_column(Text, nullable=True)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    completion_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cost_usd: Mapped[float | None] = mapped_column(Float, nullable=True)
    latency_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    record: Mapped[Any] = mapped_column(JSON)  # what put() received, returned by get()
    created_at: Mapped[float] = mapped_column(Float)
    run_id: Mapped[str | None] = mapped_column(String, nullable=True, index=True)  # no FK: cache outlives runs
    program_id: Mapped[int | None] = mapped_column(Integer, nullable=True)


class PendingResult(Base):
    """A worker's result for a candidate not written yet (it waits on an earlier one, or on its
    full evaluation): kept so that a killed run's `--resume` loses only the jobs in flight.
    Deleted when the candidate is written; never shown (not part of what a run produced)."""
    __tablename__ = "pending_results"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String, index=True)
    canonical_hash: Mapped[str] = mapped_column(String)
    kind: Mapped[str] = mapped_column(String)  # "screen" or "full"
    evaluation: Mapped[Any] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)


class JudgedAnswer(Base):
    """A worker's finished answer to one job under one judge (`evolve.judge_memo`): the key
    hashes both, the answer is its Evaluation's JSON, zlib-compressed. Outlives runs: a later
    run of the same judge that asks the same job takes it instead of judging it again."""
    __tablename__ = "judged"
    key: Mapped[str] = mapped_column(String, primary_key=True)
    evaluation: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[float] = mapped_column(Float)


class FrontierMember(Base):
    __tablename__ = "frontier"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    program_id: Mapped[int] = mapped_column(ForeignKey("programs.id"), primary_key=True)


class Cell(Base):
    __tablename__ = "cells"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    cell_key: Mapped[str] = mapped_column(String, primary_key=True)
    program_id: Mapped[int] = mapped_column(ForeignKey("programs.id"))


# ---------------------------------------------------------------- engine

def _json_dumps(o) -> str:
    """Strict JSON: NaN and infinities are stored as null (SQLite's json_extract, like any
    strict parser, rejects the whole document otherwise)."""
    return json.dumps(strict_json(o), allow_nan=False)


def make_engine(path: str | os.PathLike, echo: bool = False, readonly: bool = False):
    """Engine with the WAL + BEGIN IMMEDIATE recipe. Call it in the process that uses it."""
    p = Path(path).expanduser().resolve()
    if readonly:  # SQLite's mode=ro: no write of any kind, no checkpoint when it closes
        engine = create_engine("sqlite+pysqlite://", echo=echo, json_serializer=_json_dumps,
                               creator=lambda: readonly_connect(p))
    else:
        engine = create_engine(f"sqlite+pysqlite:///{p}", echo=echo, json_serializer=_json_dumps,
                               connect_args={"timeout": 30.0, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # pysqlite must not emit its own BEGIN
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=30000")
        if not readonly:  # a viewer never changes the file, its journal mode included
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        mode = conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


# ---------------------------------------------------------------- helpers

def _absent_columns(conn) -> list[tuple[str, str, str]]:
    """ADDED_COLUMNS an existing archive lacks (none when its tables do not exist yet)."""
    have = {(t, r[1]) for t in {t for t, _, _ in ADDED_COLUMNS}
            for r in conn.exec_driver_sql(f"PRAGMA table_info({t})")}
    return [a for a in ADDED_COLUMNS if have and (a[0], a[1]) not in have]


def schema_state(path: Path) -> tuple[int, list[str], set[str]]:
    """(PRAGMA user_version, what the writer's schema upgrade would add: tables and
    table.column, the tables there are), read through a read-only connection."""
    con = readonly_connect(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        version = int(con.execute("PRAGMA user_version").fetchone()[0] or 0)
        have = {(t, r[1]) for t in {t for t, _, _ in ADDED_COLUMNS} if t in tables
                for r in con.execute(f"PRAGMA table_info({t})")}
    finally:
        con.close()
    missing = [f"{t}.{c}" for t, c, _ in ADDED_COLUMNS if t in tables and (t, c) not in have]
    return version, sorted(set(Base.metadata.tables) - tables) + missing, tables


def _hold_write(generation: int, program_id: int, s: Session) -> None:
    """Tests of a kill while the run holds the write lock (tests/test_kill_resume.py): with
    STEPEVOLVE_HOLD_WRITE_S set, a candidate of a generation >= 1 is flushed to SQLite, then
    its transaction stays open that many seconds, after 'in-write GENERATION ID' in
    STEPEVOLVE_PHASE_FILE. Unset (always, outside tests) it does nothing."""
    hold = os.environ.get("STEPEVOLVE_HOLD_WRITE_S")
    if not hold or generation < 1:
        return
    s.flush()
    if os.environ.get("STEPEVOLVE_PHASE_FILE"):
        with open(os.environ["STEPEVOLVE_PHASE_FILE"], "a") as f:
            f.write(f"in-write {generation} {program_id}\n")
    time.sleep(float(hold))


def _as_evaluation(evaluation) -> Evaluation:
    """The typed record; a JSON dict (a worker's reply, an archive record) goes through the
    one converter, `Evaluation.from_json`."""
    if evaluation is None:
        raise ArchiveError("evaluation is None")
    if isinstance(evaluation, Evaluation):
        return evaluation
    if isinstance(evaluation, Mapping):
        return Evaluation.from_json(evaluation)
    raise ArchiveError(f"not an Evaluation: {type(evaluation).__name__}")


def _program_fields(program: Program | str) -> dict:
    """Columns describing a program: from an evaluator.program.Program or raw source."""
    if isinstance(program, str):
        from evaluator.program import ProgramError, parse_program
        try:
            program = parse_program(program)
        except ProgramError as e:
            return {"source": program, "canonical_hash": None, "complexity": None, "n_ops": None,
                    "n_cond": None, "n_consts": None, "components": [], "_parse_error": str(e)}
    cx = program.complexity
    comps = program.components_used() if hasattr(program, "components_used") else list(program.params)
    return {"source": program.source, "canonical_hash": program.hash or None, "complexity": int(cx.total),
            "n_ops": int(cx.operations), "n_cond": int(cx.conditionals), "n_consts": int(cx.constants),
            "components": list(comps)}


def _program_record(p: ProgramRow) -> dict:
    return {"id": p.id, "run_id": p.run_id, "source": p.source, "canonical_hash": p.canonical_hash,
            "parent_ids": list(p.parent_ids or []), "operator": p.operator, "llm_model": p.llm_model,
            "generation": p.generation, "complexity": p.complexity, "n_ops": p.n_ops, "n_cond": p.n_cond,
            "n_consts": p.n_consts, "components": list(p.components or []), "valid": bool(p.valid),
            "reject_reason": p.reject_reason, "created_at": p.created_at}


def _evaluation_record(e: EvaluationRow, full: bool = True) -> dict:
    d = {"id": e.id, "program_id": e.program_id, "valid": bool(e.valid), "error": e.error,
         "objectives": dict(e.objectives or {}), "stage": e.stage, "seconds": e.seconds,
         "sim_steps": e.sim_steps, "created_at": e.created_at}
    if full:
        d.update(rows=list(e.rows or []), steps=dict(e.steps or {}), constants=dict(e.constants or {}),
                 overheads=dict(e.overheads or {}), holdout=dict(e.holdout or {}),
                 identifiability=dict(e.identifiability or {}), fit_starts=e.fit_starts,
                 race=dict(e.race or {}))
    return d


def _run_record(r: Run) -> dict:
    return {"id": r.id, "created_at": r.created_at, "finished_at": r.finished_at, "config": r.config,
            "seed": r.seed, "data_fingerprint": r.data_fingerprint, "status": r.status, "budget": r.budget,
            "n_evaluated": r.n_evaluated, "recommended": r.recommended}


def _full_record(p: ProgramRow, e: EvaluationRow | None, full: bool = True) -> dict:
    d = _program_record(p)
    d["evaluation"] = _evaluation_record(e, full) if e is not None else None
    d["objectives"] = dict(e.objectives or {}) if e is not None else {}
    return d


def to_evaluation(record: Mapping) -> Evaluation:
    """The Evaluation of an archive record (`program(id)`, or its "evaluation" dict)."""
    ev = record["evaluation"] if "evaluation" in record else record
    if ev is None:
        raise ArchiveError(f"program {record.get('id')} has no evaluation")
    return Evaluation.from_json(ev)


# ---------------------------------------------------------------- the archive

class Archive:
    """All persistent state of StepEvolve. Safe to use from several processes at once."""

    def __init__(self, path: str | os.PathLike = "archive.db", echo: bool = False, readonly: bool = False):
        """readonly: for viewers; takes no lock on opening (a running search never waits for
        it) and refuses a missing file instead of creating one."""
        self.path = Path(path).expanduser().resolve()
        self.echo = echo
        self.readonly = readonly
        self._engine = None
        self._reader = None
        self._pid = None
        check_archive_file(self.path, must_exist=readonly)  # damaged, foreign or missing: say so
        try:
            if readonly:  # a viewer reads the schema as it is, never upgrades it
                why = self._unreadable()
                if why:
                    self.close()
                    raise ArchiveError(why)
            else:
                self._ensure_schema()
        except (SQLAlchemyError, sqlite3.Error, OSError) as e:
            self.close()
            raise ArchiveError(describe_db_error(self.path, e)) from None

    # ------------------------------------------------------------ engine / sessions
    @property
    def engine(self):
        if self._engine is None or self._pid != os.getpid():
            if self._engine is not None:
                self._engine.dispose(close=False)  # inherited across fork: drop, never close parent's
            if not self.readonly:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._engine = make_engine(self.path, self.echo, readonly=self.readonly)
            self._reader = self._engine.execution_options(sqlite_begin="DEFERRED")
            self._pid = os.getpid()
        return self._engine

    def _write(self) -> Session:
        """Session for a write transaction: BEGIN IMMEDIATE. Use as `with self._write() as s, s.begin():`."""
        return Session(self.engine, expire_on_commit=False)

    def _read(self) -> Session:
        self.engine  # noqa: B018 - ensures the reader exists in this process
        return Session(self._reader, expire_on_commit=False)

    def _missing_columns(self) -> list[tuple[str, str, str]]:
        self.engine  # noqa: B018 - builds the reader: a deferred transaction, never waiting on a writer
        with self._reader.connect() as conn:
            return _absent_columns(conn)

    def _unreadable(self) -> str | None:
        """Why a viewer cannot read this archive as it is (None: it can)."""
        self.engine  # noqa: B018
        with self._reader.connect() as conn:
            tables = {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:
                return f"{self.path}: empty database, not an archive yet (nothing to show)"
            missing = _absent_columns(conn)
            version = conn.exec_driver_sql("PRAGMA user_version").scalar()
        if missing:
            cols = ", ".join(f"{t}.{c}" for t, c, _ in missing)
            return (f"{self.path}: archive written by an older version (schema {version}, lacks {cols}); "
                    f"run `evolve migrate --archive {self.path}` to upgrade it (a backup is kept)")
        return None

    def _ensure_schema(self) -> None:
        with self.engine.begin() as conn:  # BEGIN IMMEDIATE: concurrent creators serialise
            Base.metadata.create_all(conn)
            for table, column, sql_type in _absent_columns(conn):
                conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}")
            conn.exec_driver_sql(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close(self) -> None:
        if self._engine is not None and self._pid == os.getpid():
            self._engine.dispose()
        self._engine = self._reader = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getstate__(self):  # picklable: the child process builds its own engine
        return {"path": self.path, "echo": self.echo, "readonly": self.readonly}

    def __setstate__(self, state):
        self.path, self.echo = state["path"], state["echo"]
        self.readonly = state.get("readonly", False)
        self._engine = self._reader = self._pid = None

    @staticmethod
    def migrate(path: str | os.PathLike) -> dict:
        """Upgrade an archive written by an older version, after a backup made with SQLite's
        backup API (a consistent copy even while a run writes) to PATH.bak-<UTC timestamp>.
        Returns {"path", "from", "to", "added", "backup"}; nothing is written (and no backup
        made) when the archive is current."""
        p = Path(path).expanduser().resolve()
        check_archive_file(p, must_exist=True)
        try:
            version, added, names = schema_state(p)
        except sqlite3.Error as e:
            raise ArchiveError(describe_db_error(p, e)) from None
        if not names:
            raise ArchiveError(f"{p}: empty database, not an archive (nothing to migrate)")
        out = {"path": str(p), "from": version, "to": SCHEMA_VERSION, "added": added, "backup": None}
        if not added and version >= SCHEMA_VERSION:
            return out
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        bak = p.with_name(f"{p.name}.bak-{stamp}")
        n = 1
        while bak.exists():
            n += 1
            bak = p.with_name(f"{p.name}.bak-{stamp}-{n}")
        try:
            src = sqlite3.connect(p, timeout=30.0)
            try:
                dst = sqlite3.connect(bak)
                try:
                    src.backup(dst)
                finally:
                    dst.close()
            finally:
                src.close()
        except (sqlite3.Error, OSError) as e:
            bak.unlink(missing_ok=True)
            raise ArchiveError(f"{p}: backup to {bak} failed, nothing changed ({describe_db_error(p, e)})") from None
        out["backup"] = str(bak)
        Archive(p).close()  # the writer's schema upgrade
        return out

    def journal_mode(self) -> str:
        with self.engine.connect() as c:
            return c.exec_driver_sql("PRAGMA journal_mode").scalar()

    # ------------------------------------------------------------ runs
    def start_run(self, config: Mapping | None, seed: int, data_fingerprint: str | None = None,
                  budget: int | None = None, run_id: str | None = None) -> str:
        config = dict(config or {})
        if run_id is None:
            h = hashlib.sha256((_json_dumps(config) + str(data_fingerprint) + str(time.time_ns())
                                + os.urandom(8).hex()).encode()).hexdigest()[:8]
            run_id = f"run-{seed}-{h}"
        with self._write() as s, s.begin():
            s.add(Run(id=run_id, created_at=time.time(), config=config, seed=int(seed),
                      data_fingerprint=data_fingerprint, status="running", budget=budget, n_evaluated=0))
        return run_id

    def get_run(self, run_id: str) -> dict | None:
        with self._read() as s, s.begin():
            r = s.get(Run, run_id)
            return _run_record(r) if r is not None else None

    def set_recommended(self, run_id: str, program_id: int | None) -> None:
        """Fix the program the run hands over (see `best_transfer`)."""
        with self._write() as s, s.begin():
            s.execute(update(Run).where(Run.id == run_id).values(recommended=program_id))

    def set_fit_starts(self, program_id: int, fit_starts: dict) -> None:
        """Keep a program's held-out figures from several fit starts (`evolve.handover`), in strict JSON."""
        with self._write() as s, s.begin():
            s.execute(update(EvaluationRow).where(EvaluationRow.program_id == int(program_id))
                      .values(fit_starts=strict_json(fit_starts)))

    def work_counts(self, run_id: str) -> dict[str, int]:
        """How the run's counted proposals were spent: `full` evaluations, `screen`s that did
        not earn one, and `twins` (screens that earned one but behave like an earlier member,
        so its full evaluation stands for theirs); `unpinned`: of the screens, those with a
        constant the data cannot pin (under `RunConfig.pinned_only` refused after their fit);
        `stopped`: of the screens, those that stopped replaying once they could not clear the
        cascade's gate (`evaluator.screen_race`)."""
        q = (select(EvaluationRow.stage, EvaluationRow.twin_of.is_not(None), func.count())
             .join(ProgramRow, ProgramRow.id == EvaluationRow.program_id)
             .where(ProgramRow.run_id == run_id, ProgramRow.valid.is_(True))
             .group_by(EvaluationRow.stage, EvaluationRow.twin_of.is_not(None)))
        u = (select(EvaluationRow.identifiability)
             .join(ProgramRow, ProgramRow.id == EvaluationRow.program_id)
             .where(ProgramRow.run_id == run_id, ProgramRow.valid.is_(True),
                    EvaluationRow.stage == "screen", EvaluationRow.twin_of.is_(None)))
        r = (select(func.count()).select_from(EvaluationRow)
             .join(ProgramRow, ProgramRow.id == EvaluationRow.program_id)
             .where(ProgramRow.run_id == run_id, ProgramRow.valid.is_(True),
                    EvaluationRow.stage == "screen", EvaluationRow.race.is_not(None)))
        out = {"full": 0, "screen": 0, "twins": 0, "unpinned": 0, "stopped": 0}
        with self._read() as s, s.begin():
            for stage, is_twin, n in s.execute(q):
                out["twins" if is_twin else stage] = out.get("twins" if is_twin else stage, 0) + int(n)
            out["unpinned"] = sum(bool(unpinned_constants(ident)) for ident in s.scalars(u))
            out["stopped"] = int(s.scalar(r) or 0)
        return out

    def runs(self) -> list[dict]:
        with self._read() as s, s.begin():
            return [_run_record(r) for r in s.scalars(select(Run).order_by(Run.created_at))]

    def set_run_status(self, run_id: str, status: str) -> None:
        if status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {RUN_STATUSES}")
        with self._write() as s, s.begin():
            n = s.execute(update(Run).where(Run.id == run_id).values(
                status=status, finished_at=None if status == "running" else time.time())).rowcount
            if n != 1:
                raise ArchiveError(f"no run {run_id!r}")

    def finish_run(self, run_id: str, status: str = "finished") -> None:
        self.set_run_status(run_id, status)

    def bump_evaluated(self, run_id: str, n: int = 1) -> int:
        """Read-modify-write of runs.n_evaluated in one BEGIN IMMEDIATE transaction; the new value."""
        with self._write() as s, s.begin():
            return self._bump(s, run_id, n)

    @staticmethod
    def _bump(s: Session, run_id: str, n: int) -> int:
        cur = s.scalar(select(Run.n_evaluated).where(Run.id == run_id))
        if cur is None:
            raise ArchiveError(f"no run {run_id!r}")
        s.execute(update(Run).where(Run.id == run_id).values(n_evaluated=cur + n))
        return cur + n

    # ------------------------------------------------------------ programs
    def _new_program(self, s: Session, run_id: str, program, parents, operator: str, generation: int,
                     llm_model: str | None, valid: bool, reject_reason: str | None,
                     pending: dict[str, int] | None = None) -> ProgramRow:
        f = _program_fields(program)
        parse_error = f.pop("_parse_error", None)
        if parse_error is not None:
            valid, reject_reason = False, reject_reason or parse_error
        if valid and f["canonical_hash"] is not None:
            dup = (pending or {}).get(f["canonical_hash"]) or self._find(s, run_id, f["canonical_hash"])
            if dup is not None:
                valid, reject_reason = False, f"duplicate of {dup}"
        if not valid and reject_reason is None:
            reject_reason = "rejected"
        row = ProgramRow(run_id=run_id, parent_ids=[int(p) for p in (parents or [])], operator=str(operator),
                         llm_model=llm_model, generation=int(generation), valid=bool(valid),
                         reject_reason=None if valid else reject_reason, created_at=time.time(), **f)
        s.add(row)
        s.flush()
        if pending is not None and row.valid and row.canonical_hash:
            pending[row.canonical_hash] = row.id
        return row

    @staticmethod
    def _find(s: Session, run_id: str, h: str) -> int | None:
        return s.scalar(select(ProgramRow.id).where(ProgramRow.run_id == run_id, ProgramRow.canonical_hash == h,
                                                    ProgramRow.valid.is_(True)).order_by(ProgramRow.id).limit(1))

    def add_program(self, run_id: str, program, parents: Sequence[int] = (), operator: str = "seed",
                    generation: int = 0, llm_model: str | None = None, valid: bool = True,
                    reject_reason: str | None = None) -> int:
        """Store a program (Program or source). Unparseable source and duplicates become
        rejected rows (see module doc). Returns the new row id."""
        with self._write() as s, s.begin():
            return self._new_program(s, run_id, program, parents, operator, generation, llm_model, valid,
                                     reject_reason).id

    def add_candidate(self, run_id: str, program, parents: Sequence[int] = (), operator: str = "llm",
                      generation: int = 0, evaluation=None, stage: str = "full", llm_model: str | None = None,
                      valid: bool = True, reject_reason: str | None = None, count: bool = True,
                      llm_cache_key: str | None = None, twin_of: int | None = None) -> int:
        """Program + its evaluation (+ n_evaluated += 1 if count, + link of the LLM call) in ONE
        transaction: either all of it is stored or none. A duplicate or rejected program is
        stored without its evaluation and is not counted. Returns the program id."""
        with self._write() as s, s.begin():
            row = self._new_program(s, run_id, program, parents, operator, generation, llm_model, valid,
                                    reject_reason)
            if evaluation is not None and row.valid:
                self._put_evaluation(s, row.id, evaluation, stage, twin_of=twin_of)
                if count:
                    self._bump(s, run_id, 1)
            if llm_cache_key:
                s.execute(update(LLMCall).where(LLMCall.cache_key == llm_cache_key)
                          .values(program_id=row.id, run_id=run_id))
            _hold_write(generation, row.id, s)
            return row.id

    def add_programs_bulk(self, run_id: str, items: Iterable, count: bool = False) -> list[int]:
        """Many programs (e.g. the seeds) in one transaction. An item is a Program, a source
        string, or a dict with key `program` (or `source`) and optional parents, operator
        (default "seed"), generation, llm_model, valid, reject_reason, evaluation, stage."""
        ids: list[int] = []
        pending: dict[str, int] = {}
        with self._write() as s, s.begin():
            n_eval = 0
            for it in items:
                d = dict(it) if isinstance(it, Mapping) else {"program": it}
                prog = d.get("program", d.get("source"))
                row = self._new_program(s, run_id, prog, d.get("parents", ()), d.get("operator", "seed"),
                                        d.get("generation", 0), d.get("llm_model"), d.get("valid", True),
                                        d.get("reject_reason"), pending)
                if d.get("evaluation") is not None and row.valid:
                    self._put_evaluation(s, row.id, d["evaluation"], d.get("stage", "full"), flush=False)
                    n_eval += 1
                ids.append(row.id)
            s.flush()
            if count and n_eval:
                self._bump(s, run_id, n_eval)
        return ids

    def find_by_hash(self, run_id: str, canonical_hash: str) -> int | None:
        """Id of the accepted program with this canonical hash in the run, or None."""
        with self._read() as s, s.begin():
            return self._find(s, run_id, canonical_hash)

    # ------------------------------------------------------------ evaluations
    def _put_evaluation(self, s: Session, program_id: int, evaluation, stage: str, flush: bool = True,
                        twin_of: int | None = None) -> None:
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}")
        d = _as_evaluation(evaluation).to_json()
        obj = dict(d["objectives"])
        if "complexity" not in obj:
            c = s.scalar(select(ProgramRow.complexity).where(ProgramRow.id == program_id))
            if c is not None:
                obj["complexity"] = float(c)
        vals = dict(valid=d["valid"], error=d["error"], objectives=obj, rows=d["rows"], steps=d["steps"],
                    constants=d["constants"], overheads=d["overheads"], holdout=d["holdout"] or None,
                    identifiability=d["identifiability"] or None,
                    fingerprint=d["fingerprint"] or None, twin_of=twin_of, race=d["race"] or None,
                    sim_steps=d["sim_steps"],
                    seconds=d["seconds"], stage=stage, created_at=time.time(),
                    **{k: sortable_or_none(obj.get(k)) for k in OBJECTIVE_COLUMNS})
        existing = s.scalar(select(EvaluationRow).where(EvaluationRow.program_id == program_id))
        if existing is None:
            s.add(EvaluationRow(program_id=program_id, **vals))
        else:
            for k, v in vals.items():
                setattr(existing, k, v)
        if flush:
            s.flush()

    def add_evaluation(self, program_id: int, evaluation, stage: str = "full") -> None:
        """Store (or replace: one evaluation per program) the evaluation of a program."""
        with self._write() as s, s.begin():
            if s.get(ProgramRow, program_id) is None:
                raise ArchiveError(f"no program {program_id}")
            self._put_evaluation(s, program_id, evaluation, stage)

    def evaluated(self, run_id: str, stage: str | None = None) -> list[tuple[int, dict]]:
        """(program id, objectives) of every accepted, evaluated program of the run, in
        evaluation order (valid and invalid evaluations both) — for resuming a run."""
        q = (select(ProgramRow.id, EvaluationRow.objectives).join(EvaluationRow, EvaluationRow.program_id == ProgramRow.id)
             .where(ProgramRow.run_id == run_id, ProgramRow.valid.is_(True)).order_by(EvaluationRow.id))
        if stage is not None:
            q = q.where(EvaluationRow.stage == stage)
        with self._read() as s, s.begin():
            return [(pid, dict(obj or {})) for pid, obj in s.execute(q)]

    def resume_rows(self, run_id: str) -> list[dict]:
        """Every accepted program of the run, in evaluation order (those without an evaluation
        last): id, generation, canonical_hash, source, stage, objectives ({} without an
        evaluation) and evaluated (whether it counts in n_evaluated) — what `--resume` rebuilds
        the search from, with each one's behavioural fingerprint."""
        q = (select(ProgramRow.id, ProgramRow.generation, ProgramRow.canonical_hash, ProgramRow.source,
                    EvaluationRow.id, EvaluationRow.stage, EvaluationRow.objectives, EvaluationRow.fingerprint)
             .outerjoin(EvaluationRow, EvaluationRow.program_id == ProgramRow.id)
             .where(ProgramRow.run_id == run_id, ProgramRow.valid.is_(True)))
        with self._read() as s, s.begin():
            rows = s.execute(q).all()
        rows.sort(key=lambda r: (r[4] is None, r[4] or 0, r[0]))
        return [{"id": pid, "generation": int(gen or 0), "canonical_hash": h, "source": src, "stage": stage,
                 "objectives": dict(obj or {}), "evaluated": eid is not None, "fingerprint": tuple(fp or ())}
                for pid, gen, h, src, eid, stage, obj, fp in rows]

    # ------------------------------------------------------------ pending results (resume)
    def put_pending(self, run_id: str, canonical_hash: str, kind: str, evaluation) -> None:
        """Keep a finished job's evaluation of a candidate not written yet."""
        d = _as_evaluation(evaluation).to_json()
        with self._write() as s, s.begin():
            s.add(PendingResult(run_id=run_id, canonical_hash=canonical_hash, kind=kind, evaluation=d,
                                created_at=time.time()))

    def pending(self, run_id: str) -> dict[tuple[str, str], Evaluation]:
        """{(canonical_hash, kind): Evaluation} kept for the run (the latest of each)."""
        q = (select(PendingResult.canonical_hash, PendingResult.kind, PendingResult.evaluation)
             .where(PendingResult.run_id == run_id).order_by(PendingResult.id))
        with self._read() as s, s.begin():
            return {(h, k): Evaluation.from_json(ev) for h, k, ev in s.execute(q)}

    def clear_pending(self, run_id: str, hashes: Iterable[str] | None = None) -> None:
        """Forget the kept results of the run (of these candidates only, if given)."""
        q = delete(PendingResult).where(PendingResult.run_id == run_id)
        if hashes is not None:
            q = q.where(PendingResult.canonical_hash.in_(list(hashes)))
        with self._write() as s, s.begin():
            s.execute(q)

    # ------------------------------------------------------------ the judge's answers (evolve.judge_memo)
    def judged(self, key: str) -> bytes | None:
        """The answer kept under `key`, as stored (compressed JSON), or None."""
        with self._read() as s, s.begin():
            return s.execute(select(JudgedAnswer.evaluation).where(JudgedAnswer.key == key)).scalar()

    def judged_any(self, prefix: str) -> bool:
        """Whether some answer's key begins with `prefix` and a dash (one judge's answers)."""
        q = select(JudgedAnswer.key).where(JudgedAnswer.key > f"{prefix}-", JudgedAnswer.key < f"{prefix}.").limit(1)
        with self._read() as s, s.begin():
            return s.execute(q).first() is not None

    def keep_judged(self, items: Sequence[tuple[str, bytes]]) -> int:
        """Keep answers (key, compressed JSON) in one transaction; a key kept already stays as
        it is (the same judge gave the same answer). Returns how many were new."""
        if not items:
            return 0
        now = time.time()
        q = sqlite_insert(JudgedAnswer).values([{"key": k, "evaluation": b, "created_at": now} for k, b in items])
        with self._write() as s, s.begin():
            return s.execute(q.on_conflict_do_nothing(index_elements=["key"])).rowcount

    def evaluations(self, run_id: str | None = None, stage: str | None = "full",
                    valid_only: bool = False) -> list[dict]:
        """Light records (program columns + objectives, no rows/source) in evaluation order."""
        q = (select(ProgramRow, EvaluationRow).join(EvaluationRow, EvaluationRow.program_id == ProgramRow.id)
             .where(ProgramRow.valid.is_(True)).order_by(EvaluationRow.id))
        if run_id is not None:
            q = q.where(ProgramRow.run_id == run_id)
        if stage is not None:
            q = q.where(EvaluationRow.stage == stage)
        if valid_only:
            q = q.where(EvaluationRow.valid.is_(True))
        out = []
        with self._read() as s, s.begin():
            for p, e in s.execute(q):
                d = _program_record(p)
                d.pop("source")
                d["objectives"] = dict(e.objectives or {})
                d["eval_valid"] = bool(e.valid)
                d["eval_error"] = e.error
                d["stage"] = e.stage
                d["evaluation_id"] = e.id
                d["eval_created_at"] = e.created_at
                out.append(d)
        return out

    def best(self, run_id: str | None = None, objective: str = "e2e_mean", stage: str = "full") -> dict | None:
        """The accepted program with the lowest finite `objective` (full record) or None."""
        if objective not in OBJECTIVE_COLUMNS:
            raise ValueError(f"unknown objective {objective!r}")
        col = getattr(EvaluationRow, objective)
        q = (select(ProgramRow.id).join(EvaluationRow, EvaluationRow.program_id == ProgramRow.id)
             .where(ProgramRow.valid.is_(True), EvaluationRow.valid.is_(True), EvaluationRow.stage == stage,
                    col.is_not(None), col < float("inf")).order_by(col, ProgramRow.complexity, ProgramRow.id).limit(1))
        if run_id is not None:
            q = q.where(ProgramRow.run_id == run_id)
        with self._read() as s, s.begin():
            pid = s.scalar(q)
        return self.program(pid) if pid is not None else None

    def best_transfer(self, run_id: str | None = None, skip_prefix: str | None = None,
                      usable: Callable[[dict], bool] | None = None, fresh: bool = False) -> dict | None:
        """The program a user should take from a run: the lowest `handover_regrets` (the largest
        distance, over the held-out regimes, from the best error any of these programs reached
        in that regime; ties: `selection_loss`) among full evaluations whose every constant the
        data pins down (`evaluator.identify`), else among all of them. A constant
        the data cannot pin is a defect: it is held by the fit's faint prior, not by data.
        skip_prefix: leave out runs whose id starts with it (the stored baselines).
        usable(record): with it, the first candidate in that order it accepts is taken (the
        physical rules hold on the shipped configs' shapes: `evaluator.served_shapes.usable_check`,
        which the callers holding the data pass; importing it here would load numba for `evolve
        frontier`); asked lazily, best first, at most USABLE_CHECKS times; none accepted: the first.
        A run that finished names its program (`set_recommended`): that one is returned, whoever
        asks and with whatever check, unless `fresh` (the run itself, choosing it). Asked for no
        run: an archive of one run answers for that run (the viewers showed a fresh choice over
        its programs, not the one the run handed over), one whose runs all finished chooses
        among their hand-overs, any other chooses afresh over every program."""
        stored = None
        if run_id is None and not fresh:
            runs = self._runs_recommended(skip_prefix)
            if len(runs) == 1:
                run_id, stored = next(iter(runs.items()))
            elif runs and None not in runs.values():
                shortlist, _ = self.transfer_shortlist(None, skip_prefix, usable, 1, among=set(runs.values()))
                if shortlist:
                    return shortlist[0]
        elif run_id is not None and not fresh:
            with self._read() as s, s.begin():
                stored = s.scalar(select(Run.recommended).where(Run.id == run_id))
        if stored is not None and (rec := self.program(stored)) is not None:
            return rec
        shortlist, _ = self.transfer_shortlist(run_id, skip_prefix, usable, 1)
        return shortlist[0] if shortlist else None

    def _runs_recommended(self, skip_prefix: str | None = None) -> dict[str, int | None]:
        """Each run's fixed hand-over (None: not fixed yet), runs under `skip_prefix` left out."""
        q = select(Run.id, Run.recommended)
        if skip_prefix:
            q = q.where(~Run.id.startswith(skip_prefix, autoescape=True))
        with self._read() as s, s.begin():
            return dict(s.execute(q).all())

    def transfer_shortlist(self, run_id: str | None = None, skip_prefix: str | None = None,
                           usable: Callable[[dict], bool] | None = None, n: int = 1,
                           among: set[int] | None = None) -> tuple[list[dict], dict[str, float]]:
        """The first `n` programs in `best_transfer`'s order (fresh: whatever the run fixed) that
        `usable` accepts (asked at most USABLE_CHECKS times; none accepted: the first), and the
        ideal point their regrets are measured from (`evaluator.objectives.ideal_point` of the
        programs it chooses among). `evolve.handover` refits this shortlist from several starts."""
        q = (select(ProgramRow.id, ProgramRow.complexity, EvaluationRow.objectives, EvaluationRow.identifiability)
             .join(EvaluationRow, EvaluationRow.program_id == ProgramRow.id)
             .where(ProgramRow.valid.is_(True), EvaluationRow.valid.is_(True), EvaluationRow.stage == "full"))
        if run_id is not None:
            q = q.where(ProgramRow.run_id == run_id)
        if skip_prefix:
            q = q.where(~ProgramRow.run_id.startswith(skip_prefix, autoescape=True))
        if among is not None:
            q = q.where(ProgramRow.id.in_(sorted(among)))
        with self._read() as s, s.begin():
            rows = s.execute(q).all()
        unpinned = [bool(unpinned_constants(ident)) for _, _, _, ident in rows]
        losses = [selection_loss(obj or {}) for _, _, obj, _ in rows]
        ok = [i for i, loss in enumerate(losses) if math.isfinite(loss)]
        pool = [i for i in ok if not unpinned[i]] or ok  # the ideal point of the programs it chooses from
        ideal = ideal_point([rows[i][2] for i in pool])
        regret = dict(zip(pool, handover_regrets([rows[i][2] for i in pool], ideal)))
        ranked_rows = sorted((unpinned[i], regret.get(i, math.inf), losses[i], rows[i][1], rows[i][0]) for i in ok)
        if not ranked_rows:
            return [], ideal
        if usable is None:
            return [self.program(r[4]) for r in ranked_rows[:n]], ideal
        out = []
        for r in ranked_rows[:USABLE_CHECKS]:
            rec = self.program(r[4])
            if usable(rec):
                out.append(rec)
                if len(out) == n:
                    break
        return (out or [self.program(ranked_rows[0][4])]), ideal

    # ------------------------------------------------------------ records
    def program(self, program_id: int) -> dict | None:
        """Program columns + "evaluation" (full dict or None) + "objectives"."""
        with self._read() as s, s.begin():
            p = s.get(ProgramRow, int(program_id))
            if p is None:
                return None
            e = s.scalar(select(EvaluationRow).where(EvaluationRow.program_id == p.id))
            return _full_record(p, e)

    def evaluation(self, program_id: int) -> Evaluation | None:
        """The typed Evaluation of a program (None if it has none)."""
        with self._read() as s, s.begin():
            e = s.scalar(select(EvaluationRow).where(EvaluationRow.program_id == int(program_id)))
            return Evaluation.from_json(_evaluation_record(e)) if e is not None else None

    def programs(self, run_id: str, include_rejected: bool = False) -> list[dict]:
        q = select(ProgramRow).where(ProgramRow.run_id == run_id).order_by(ProgramRow.id)
        if not include_rejected:
            q = q.where(ProgramRow.valid.is_(True))
        with self._read() as s, s.begin():
            return [_program_record(p) for p in s.scalars(q)]

    def hashes(self, run_id: str) -> set[str]:
        """Canonical hashes of the run's accepted programs (duplicate checks on resume)."""
        q = select(ProgramRow.canonical_hash).where(ProgramRow.run_id == run_id, ProgramRow.valid.is_(True))
        with self._read() as s, s.begin():
            return {h for h in s.scalars(q) if h}

    def _records(self, s: Session, ids: Iterable[int], full: bool = True) -> list[dict]:
        ids = list(dict.fromkeys(int(i) for i in ids))
        if not ids:
            return []
        q = (select(ProgramRow, EvaluationRow).outerjoin(EvaluationRow, EvaluationRow.program_id == ProgramRow.id)
             .where(ProgramRow.id.in_(ids)))
        return [_full_record(p, e, full) for p, e in s.execute(q)]

    def lineage(self, program_id: int, max_depth: int = 100) -> list[dict]:
        """The program and its ancestors (breadth first over parent_ids), each with "depth"
        (0 = the program itself); evaluation rows are left out."""
        out: list[dict] = []
        seen: set[int] = set()
        frontier_ids = [int(program_id)]
        with self._read() as s, s.begin():
            for depth in range(max_depth + 1):
                frontier_ids = [i for i in frontier_ids if i not in seen]
                if not frontier_ids:
                    break
                seen.update(frontier_ids)
                recs = {r["id"]: r for r in self._records(s, frontier_ids, full=False)}
                nxt = []
                for i in frontier_ids:
                    if i in recs:
                        r = recs[i]
                        r["depth"] = depth
                        out.append(r)
                        nxt.extend(r["parent_ids"])
                frontier_ids = nxt
        return out

    # ------------------------------------------------------------ frontier / cells
    def set_frontier(self, run_id: str, ids: Iterable[int]) -> None:
        ids = list(dict.fromkeys(int(i) for i in ids))
        with self._write() as s, s.begin():
            s.execute(delete(FrontierMember).where(FrontierMember.run_id == run_id))
            if ids:
                s.execute(sqlite_insert(FrontierMember), [{"run_id": run_id, "program_id": i} for i in ids])

    def frontier_ids(self, run_id: str) -> list[int]:
        with self._read() as s, s.begin():
            return list(s.scalars(select(FrontierMember.program_id).where(FrontierMember.run_id == run_id)
                                  .order_by(FrontierMember.program_id)))

    def frontier(self, run_id: str | None = None, stage: str = "full", computed: bool = False) -> list[dict]:
        """Frontier records (program + evaluation), sorted by complexity then e2e_mean.

        run given: the stored membership (set_frontier) unless computed=True or none is
        stored; otherwise the Pareto front of valid `stage` evaluations of accepted programs
        (of the run, or of all runs when run_id is None), computed on the fly."""
        with self._read() as s, s.begin():
            ids: list[int] = []
            if run_id is not None and not computed:
                ids = list(s.scalars(select(FrontierMember.program_id).where(FrontierMember.run_id == run_id)))
            if not ids:
                ids = self._computed_front(s, run_id, stage)
            recs = self._records(s, ids)
        return sorted(recs, key=_sort_key)

    def _computed_front(self, s: Session, run_id: str | None, stage: str) -> list[int]:
        q = (select(ProgramRow.id, EvaluationRow.objectives).join(EvaluationRow, EvaluationRow.program_id == ProgramRow.id)
             .where(ProgramRow.valid.is_(True), EvaluationRow.valid.is_(True)))
        if stage is not None:
            q = q.where(EvaluationRow.stage == stage)
        if run_id is not None:
            q = q.where(ProgramRow.run_id == run_id)
        items = [(pid, obj or {}) for pid, obj in s.execute(q)]  # ranked in one vector order
        return [pid for pid, _ in pareto_front(items, key=lambda it: it[1])]

    def set_cells(self, run_id: str, cells: Mapping[str, int]) -> None:
        with self._write() as s, s.begin():
            s.execute(delete(Cell).where(Cell.run_id == run_id))
            if cells:
                s.execute(sqlite_insert(Cell), [{"run_id": run_id, "cell_key": k, "program_id": int(v)}
                                                for k, v in cells.items()])

    def cells(self, run_id: str, records: bool = False) -> dict[str, Any]:
        """{cell_key: program id} (or full records when records=True)."""
        with self._read() as s, s.begin():
            m = {k: pid for k, pid in s.execute(select(Cell.cell_key, Cell.program_id).where(Cell.run_id == run_id))}
            if not records:
                return m
            recs = {r["id"]: r for r in self._records(s, m.values())}
            return {k: recs[pid] for k, pid in m.items() if pid in recs}

    # ------------------------------------------------------------ LLM call cache
    def get(self, key: str) -> dict | None:
        """Cache lookup: the record given to put(key, ...) or None."""
        with self._read() as s, s.begin():
            rec = s.scalar(select(LLMCall.record).where(LLMCall.cache_key == key))
            return dict(rec) if rec is not None else None

    def put(self, key: str, record: Mapping, run_id: str | None = None, program_id: int | None = None) -> None:
        """Store (or replace) an LLM call under its cache key."""
        record = dict(record)
        prompt = record.get("prompt", record.get("messages"))
        vals = {"model": record.get("model"), "prompt": prompt,
                "reply": record.get("reply_text", record.get("reply")),
                "prompt_tokens": record.get("prompt_tokens"), "completion_tokens": record.get("completion_tokens"),
                "cost_usd": sortable_or_none(record.get("cost_usd")),
                "latency_s": sortable_or_none(record.get("latency_s")),
                "record": record}
        ins = sqlite_insert(LLMCall).values(cache_key=key, created_at=time.time(), run_id=run_id,
                                            program_id=program_id, **vals)
        upd = dict(vals)
        if run_id is not None:
            upd["run_id"] = run_id
        if program_id is not None:
            upd["program_id"] = program_id
        with self._write() as s, s.begin():
            s.execute(ins.on_conflict_do_update(index_elements=["cache_key"], set_=upd))

    def llm_cache(self, run_id: str | None = None) -> "LLMCache":
        """A get/put cache object whose puts are attributed to run_id."""
        return LLMCache(self, run_id)

    def link_llm_call(self, key: str, program_id: int) -> None:
        with self._write() as s, s.begin():
            s.execute(update(LLMCall).where(LLMCall.cache_key == key).values(program_id=int(program_id)))

    def llm_stats(self, run_id: str | None = None) -> dict:
        q = select(func.count(LLMCall.id), func.sum(LLMCall.prompt_tokens), func.sum(LLMCall.completion_tokens),
                   func.sum(LLMCall.cost_usd), func.sum(LLMCall.latency_s))
        if run_id is not None:
            q = q.where(LLMCall.run_id == run_id)
        with self._read() as s, s.begin():
            n, pt, ct, cost, lat = s.execute(q).one()
        return {"calls": n or 0, "prompt_tokens": pt or 0, "completion_tokens": ct or 0,
                "cost_usd": cost or 0.0, "latency_s": lat or 0.0}


class LLMCache:
    """Cache view of an Archive bound to a run (interface of evolve.llm.DictCache)."""

    def __init__(self, archive: Archive, run_id: str | None = None):
        self.archive = archive
        self.run_id = run_id

    def get(self, key: str) -> dict | None:
        return self.archive.get(key)

    def put(self, key: str, record: Mapping) -> None:
        self.archive.put(key, record, run_id=self.run_id)


def _sort_key(r: dict):
    """Complexity (the objective the front was computed with, else the program's), then e2e_mean."""
    obj = r.get("objectives") or {}

    def fin(v):
        x = finite_or_none(v)
        return math.inf if x is None else x
    c = fin(obj.get("complexity")) if obj.get("complexity") is not None else fin(r.get("complexity"))
    return (c, fin(obj.get("e2e_mean")), r["id"])
