"""The viewers (`show`, `frontier`, `report`, `ui`) open the archive read-only (SQLite `mode=ro`)
and never change it: not a read-only file, not one in a read-only directory, not one a writer
holds a write transaction on; an archive of an older schema is refused with one line naming
`evolve migrate`, which backs it up and upgrades it."""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
import urllib.request

import pytest

from evolve.archive import SCHEMA_VERSION, Archive
from tests.test_views import BASE, ROOF, make_eval


def evolve(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "evolve.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def source_db(tmp_path_factory):
    """A small hand-filled archive with its baselines stored (the viewers compute none)."""
    from evaluator.baselines import BASELINES
    from evaluator.data import load
    db = tmp_path_factory.mktemp("src") / "v.db"
    a = Archive(db)
    run = a.start_run({"population": 4}, seed=3, data_fingerprint="abcdef0123456789", budget=50)
    ids = [a.add_candidate(run, BASE.format(k=0), operator="seed", evaluation=make_eval(0.4)),
           a.add_candidate(run, ROOF, operator="seed", evaluation=make_eval(0.3))]
    for g in range(1, 4):
        ids.append(a.add_candidate(run, BASE.format(k=g), parents=[ids[-1]], operator="mutate:insert",
                                   generation=g, evaluation=make_eval(0.4 * 0.8 ** g)))
    a.set_frontier(run, ids[-2:])
    bid = f"baselines-{load(None).fingerprint()}"
    a.start_run({"data": None, "kind": "baselines"}, 0, None, len(BASELINES), run_id=bid)
    for i, name in enumerate(BASELINES):
        a.add_candidate(bid, BASE.format(k=100 + i), operator=f"baseline:{name}", evaluation=make_eval(0.5 + i))
    a.finish_run(bid)
    a.close()
    return db, run, ids[-1]


def _copy(src, dst):
    """A consistent copy through SQLite's backup API (no -wal/-shm beside it)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    s, d = sqlite3.connect(src), sqlite3.connect(dst)
    s.backup(d)
    d.close()
    s.close()


def _state(db):
    """What must not change: the file's bytes and mtime, and the directory's entries."""
    st = os.stat(db)
    return hashlib.sha256(db.read_bytes()).hexdigest(), st.st_mtime_ns, sorted(os.listdir(db.parent))


def _ui(db, run, pid) -> None:
    from evolve.views import make_server
    srv, _ = make_server(db)
    try:
        host, port = srv.server_address[:2]
        for path in ("/api/runs", f"/api/points?run={run}", f"/api/program/{pid}"):
            with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=120) as r:
                assert r.status == 200
                json.loads(r.read())
    finally:
        srv.shutdown()
        srv.server_close()


def _viewers(db, run, pid, out_dir):
    """Each viewer once: (name, CompletedProcess or None for the in-process UI)."""
    yield "frontier", evolve("frontier", "--archive", str(db), "--run", run, "--json")
    yield "show", evolve("show", str(pid), "--archive", str(db))
    yield "report", evolve("report", "--archive", str(db), "--run", run, "-o", str(out_dir / "r.html"))
    _ui(db, run, pid)
    yield "ui", None


@pytest.mark.parametrize("where", ["file", "dir"])
def test_viewers_never_change_a_readonly_archive(source_db, tmp_path, where):
    src, run, pid = source_db
    db = tmp_path / "ro" / "v.db"
    _copy(src, db)
    db.chmod(0o444)
    if where == "dir":
        db.parent.chmod(0o555)
    try:
        before = _state(db)
        for name, p in _viewers(db, run, pid, tmp_path):
            if p is not None:
                assert p.returncode == 0, f"{name}: {p.stderr[-1500:]}"
                assert "Traceback" not in p.stderr
            after = _state(db)
            assert after[:2] == before[:2], f"{name} changed the archive"
            if where == "dir":  # nothing new beside it, or only SQLite's empty WAL index (as root)
                extra = set(after[2]) - set(before[2])
                assert extra <= ({"v.db-wal", "v.db-shm"} if os.geteuid() == 0 else set()), extra
                assert not extra or (db.parent / "v.db-wal").stat().st_size == 0
    finally:
        db.parent.chmod(0o755)
        db.chmod(0o644)


def test_a_writer_holding_the_lock_does_not_stop_a_viewer(source_db, tmp_path):
    src, run, pid = source_db
    db = tmp_path / "v.db"
    _copy(src, db)
    Archive(db).close()  # WAL, as a run leaves it
    w = sqlite3.connect(db, isolation_level=None)
    try:
        w.execute("BEGIN IMMEDIATE")
        w.execute("INSERT INTO runs (id, created_at, config, seed, status, n_evaluated) "
                  "VALUES ('in-flight', 0, '{}', 0, 'running', 0)")
        for name, p in _viewers(db, run, pid, tmp_path):
            if p is not None:
                assert p.returncode == 0, f"{name}: {p.stderr[-1500:]}"
        p = evolve("frontier", "--archive", str(db), "--run", "in-flight")
        assert p.returncode == 1 and "no run 'in-flight'" in p.stderr  # the uncommitted run is not seen
    finally:
        w.execute("ROLLBACK")
        w.close()


def _old(src, db):
    """The archive as an older version wrote it: no held-out detail columns, no pending table."""
    _copy(src, db)
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("DROP TABLE pending_results")
    con.execute("ALTER TABLE evaluations DROP COLUMN holdout")
    con.execute("ALTER TABLE evaluations DROP COLUMN identifiability")
    con.execute("PRAGMA user_version=2")
    con.close()


def test_old_schema_is_refused_by_viewers_and_upgraded_by_migrate(source_db, tmp_path):
    src, run, pid = source_db
    db = tmp_path / "old.db"
    _old(src, db)
    before = _state(db)
    for p in (evolve("frontier", "--archive", str(db)), evolve("show", str(pid), "--archive", str(db)),
              evolve("report", "--archive", str(db), "-o", str(tmp_path / "r.html")),
              evolve("ui", "--archive", str(db), "--port", "0", timeout=120)):
        lines = p.stderr.strip().splitlines()
        assert p.returncode != 0 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-1500:]
        assert "evolve migrate" in lines[0] and "older version" in lines[0]
    assert _state(db)[:2] == before[:2]  # refused, and untouched
    p = evolve("migrate", "--archive", str(db))
    assert p.returncode == 0, p.stderr
    backups = sorted(tmp_path.glob("old.db.bak-*"))
    assert len(backups) == 1 and str(backups[0]) in p.stdout
    con = sqlite3.connect(backups[0])
    assert con.execute("PRAGMA user_version").fetchone()[0] == 2  # the backup is the old archive
    con.close()
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    con.close()
    p = evolve("frontier", "--archive", str(db), "--json")
    assert p.returncode == 0 and json.loads(p.stdout)
    p = evolve("migrate", "--archive", str(db))  # current: nothing to do, no second backup
    assert p.returncode == 0 and "nothing to do" in p.stdout and len(list(tmp_path.glob("old.db.bak-*"))) == 1
    for bad in (tmp_path / "none.db", tmp_path):
        p = evolve("migrate", "--archive", str(bad))
        assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert not (tmp_path / "none.db").exists()


def test_readonly_archive_has_no_write_path(source_db, tmp_path):
    """The read-only Archive's connections are mode=ro: a write through one fails in SQLite."""
    src, _, _ = source_db
    db = tmp_path / "v.db"
    _copy(src, db)
    a = Archive(db, readonly=True)
    try:
        with pytest.raises(Exception, match="readonly|read-only"):
            a.set_run_status(a.runs()[0]["id"], "failed")
    finally:
        a.close()
    assert stat.S_IMODE(os.stat(db).st_mode) & 0o200  # writable file: only the connection refused
