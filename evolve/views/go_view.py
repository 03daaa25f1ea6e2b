"""The UI's Go view: `go_emit.emit_record` with the defaults of `evolve emit-go`.

The UI and the CLI call the same function with the same defaults (package "latency",
interface "blis", `Caps()`, dead-branch simplification on), so the page shows the file the
CLI would write. What the UI adds is a cache: the ground truth and the simplification's probe
states (about 15 s to build on the embedded data) are built once per data source.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping

from evaluator.evaluate import Evaluator
from go_emit import GoEmitError, emit_record
from go_emit.simplify import probes_by_model


class GoView:
    """emit(record, data) -> {"program_id", "ok", "models", "code" | "error", "note"}."""

    def __init__(self, load_data: Callable):
        self._load = load_data
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._cache: dict[str, tuple] = {}

    def _data(self, data) -> tuple:
        """(GroundTruth, probes by model) of a run's data source, built once."""
        key = json.dumps(data)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._cache:
                gt = self._load(data)
                self._cache[key] = (gt, probes_by_model(Evaluator(gt)))
            return self._cache[key]

    def emit(self, record: Mapping, data) -> dict:
        out = {"program_id": record["id"], "ok": False, "models": [], "note": ""}
        ev = record.get("evaluation") or {}
        if not ev.get("valid") or not ev.get("constants"):  # refused before any data is loaded
            out["error"] = f"program {record['id']} has no valid evaluation with fitted constants"
            return out
        try:
            gt, probes = self._data(data)
        except Exception as e:  # noqa: BLE001 - the data of the run may be gone or malformed
            out["error"] = f"cannot load the data of run {record.get('run_id')}: {e}"
            return out
        try:
            res = emit_record(record, gt, probes=probes)
        except GoEmitError as e:
            out["error"] = str(e)
            return out
        out.update(ok=True, code=res.code, models=list(res.models), note=res.note)
        return out
