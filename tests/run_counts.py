"""Test helper: what a (possibly killed) run left in its archive, read with plain sqlite3."""
from __future__ import annotations

import sqlite3


def run_counts(db) -> tuple[tuple | None, int]:
    """((run id, n_evaluated, status, config JSON) of the archive's run, stored valid evaluations)."""
    con = sqlite3.connect(db, timeout=30)
    try:
        run = con.execute("select id, n_evaluated, status, config from runs").fetchone()
        n = con.execute("select count(*) from evaluations e join programs p on p.id = e.program_id "
                        "where p.valid").fetchone()[0]
        return run, n
    finally:
        con.close()
