"""Is this file an archive we may open? Checked before SQLAlchemy touches it.

A truncated, zeroed, overwritten or foreign file, a directory or a read-only file used to
surface as a raw SQLAlchemy traceback (or, for a page overwritten in the middle, as a frontier
listed with exit 0). Here each is one `ArchiveError` naming the file and what is wrong with it,
checked with Python's sqlite3 in read-only mode so the check itself never changes the file.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

SQLITE_MAGIC = b"SQLite format 3\x00"
OUR_TABLES = {"runs", "programs", "evaluations"}


class ArchiveError(RuntimeError):
    pass


def readonly_connect(path: Path, timeout: float = 30.0) -> sqlite3.Connection:
    """A connection that cannot change the file: SQLite's `mode=ro` URI (no checkpoint on close,
    no journal mode change, no schema change). In a directory this process cannot write, a
    WAL archive whose -shm file is absent cannot be opened that way, and nobody can change it
    there either: it is then opened `immutable=1`."""
    uri = f"{path.as_uri()}?mode=ro"
    con = sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False)
    try:
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return con
    except sqlite3.OperationalError as e:
        con.close()
        if os.access(path.parent, os.W_OK) or "unable to open" not in str(e).lower():
            raise
    return sqlite3.connect(uri + "&immutable=1", uri=True, timeout=timeout, check_same_thread=False)


def check_archive_file(path: Path, must_exist: bool) -> None:
    """Raise ArchiveError unless `path` is absent (and may be created) or a sound StepEvolve
    archive: an SQLite file whose pages pass `PRAGMA quick_check` and that holds our tables
    (or no tables at all: an empty database becomes an archive)."""
    if path.is_dir():
        raise ArchiveError(f"{path}: is a directory, not an archive file")
    if not path.exists():
        if must_exist:
            raise ArchiveError(f"no archive at {path}")
        return
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError as e:
        raise ArchiveError(f"{path}: cannot read the archive ({e.strerror})") from None
    if not head:
        if must_exist:
            raise ArchiveError(f"{path}: empty file (0 bytes), not an archive")
        return  # SQLite treats an empty file as an empty database
    if not head.startswith(SQLITE_MAGIC):
        raise ArchiveError(f"{path}: not an archive (not an SQLite database file)")
    try:
        con = readonly_connect(path)
        try:
            ok = [r[0] for r in con.execute("PRAGMA quick_check(5)")]
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.Error as e:
        raise ArchiveError(describe_db_error(path, e)) from None
    if ok != ["ok"]:
        raise ArchiveError(f"{path}: damaged archive (SQLite integrity check: {'; '.join(map(str, ok))[:300]})")
    if names and not OUR_TABLES <= names:
        raise ArchiveError(f"{path}: not a StepEvolve archive (its tables: {', '.join(sorted(names))[:200]})")


def describe_db_error(path: Path, e: BaseException) -> str:
    """One line for an SQLite failure on the archive, with the usual cause spelled out."""
    text = str(getattr(e, "orig", None) or e).split("\n")[0]
    low = text.lower()
    if "readonly" in low or "read-only" in low:
        why = "the archive (or its directory) is read-only"
    elif "locked" in low or "busy" in low:
        why = "the archive is locked by another process; try again when it is done"
    elif "malformed" in low or "not a database" in low or "corrupt" in low:
        why = "damaged archive"
    elif "disk is full" in low or "disk i/o" in low:
        why = "cannot write the archive: the disk is full, a file size limit was reached or the disk failed"
    elif "unable to open" in low:
        why = "cannot open the archive (missing directory or no permission)"
    else:
        why = "archive error"
    return f"{path}: {why} ({text[:200]})"
