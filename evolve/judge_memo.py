"""The judge's answers an archive keeps: a job judged once is not judged again (issue 31).

What a worker answers is a function of its job message (`evolve.workers.job_message`: the
program's source, its start constants, the split, the overheads, the gate) and of the judge:
the ground truth (`GroundTruth.fingerprint`), the train fraction, the code that judges (the
`evaluator` package and the worker's `run_job`) and the numeric stack it runs on (Python,
NumPy, SciPy, numba, llvmlite and the CPU numba compiles for). `judge_key` hashes the judge;
an answer is kept in the archive (`Archive.keep_judged`) under the hash of that key and the
message. An executor with a memo (`Executor.memo`) answers a job it finds there at once, and
a local pool starts its workers only for a job it does not find: the README's command run
again (same seed, same archive) replays its 2,000 candidates from the archive, and a run
with a larger --budget replays the first ones and judges only the rest. An answered record is
the one the first run wrote, its seconds included (what the judging cost once); the search's
decisions, frontier and hand-over are the same (a screen the archive lacks is judged again: one
that stops early records the models it replayed under the gate of the moment it ran).

A screen carries its cascade gate (`evaluator.screen_gate`), which decides only where it stops
replaying; a look-ahead screen (`evolve.lookahead`) got the gate of the moment it ran, which a
run of the same seed asks at another moment. So a screen that ran to the end valid is also kept
without its gate, and answers a screen under any gate that admits its objectives: a monotone
gate that admits them admits every lower bound the race would have checked on the way
(`evaluator.screen_gate`), so that screen would not have stopped either, and its record is the
ungated one (`evaluator.screen_race`). A screen refused right after its fit (physical rules,
a constant the data cannot pin: `evaluator.records.REFUSED_BEFORE_REPLAY`) never met its gate
and answers any. Other screens are answered under their own gate only.

Never kept: an answer the worker did not finish (killed over the time limit, a dead worker,
an evaluation that crashed): it says something about that moment, not about the program.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import sys
import zlib
from importlib import metadata
from pathlib import Path

import llvmlite.binding as llvm  # numba's: loaded with the judge anyway

from evaluator import PINNED_ENV
from evaluator.records import REFUSED_BEFORE_REPLAY, Evaluation
from evaluator.screen_gate import Gate

UNFINISHED = ("killed:", "worker died", "evaluation crashed")  # errors of the moment, not of the program
FLUSH_EVERY = 64  # answers buffered before they are written in one transaction
JUDGE_PREFIX = 16  # hex digits of the judge key that begin each row's key
_STACK = ("numpy", "scipy", "numba", "llvmlite", "pandas")


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """Hash of the code a worker's answer depends on: every file of the `evaluator` package
    (sources, the generated kernels, the embedded default data, the model configs) and
    `evolve/workers.py` (`run_job`); caches and bytecode left out."""
    root = Path(__file__).resolve().parent.parent
    files = [p for p in (root / "evaluator").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".nbi", ".nbc")]
    files.append(root / "evolve" / "workers.py")
    h = hashlib.sha256()
    for p in sorted(files):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def numeric_stack() -> str:
    """The Python, library versions, CPU and numeric settings a result was computed with (numba
    compiles for the host CPU, NumPy and OpenBLAS dispatch on its features unless pinned:
    `evaluator.PINNED_ENV`, which a user's own setting overrides)."""
    parts = [sys.version, platform.machine()]
    parts += [f"{k}={os.environ.get(k)}" for k in sorted(PINNED_ENV)]
    for name in _STACK:
        try:
            parts.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{name}=absent")
    try:
        parts += [llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()]
    except Exception:  # no host query on this platform: the machine name stands for it
        parts.append(platform.processor())
    return "\n".join(parts)


def judge_key(data_fingerprint: str, train_fraction: float) -> str:
    """The judge a result was made by: ground truth, train fraction, code and numeric stack."""
    h = hashlib.sha256()
    for part in (data_fingerprint, repr(float(train_fraction)), code_digest(), numeric_stack()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


GATE = 7  # a job message's gate (`evolve.workers.job_message`)


def ungated(message: tuple) -> tuple:
    """The job message without its gate."""
    return message[:GATE] + (None,) + message[GATE + 1:]


def refused_before_replay(ev: Evaluation) -> bool:
    """Whether a screen was refused before it replayed anything (so no gate decided it)."""
    return not ev.valid and (ev.error or "").startswith(REFUSED_BEFORE_REPLAY)


def finished(ev: Evaluation) -> bool:
    """Whether an answer is the program's (kept) rather than the moment's (killed, crashed)."""
    return not (ev.error or "").startswith(UNFINISHED)


class JudgeMemo:
    """Answers kept in an archive under one judge key; `get` and `put` take a job message."""

    def __init__(self, archive, key: str):
        self.archive = archive
        self.key = key
        self.hits = 0  # jobs answered with the answers of earlier runs
        self.repeats = 0  # jobs answered with this memo's own answers (the same job asked again)
        self.kept = 0  # answers written to it
        self._buffer: list[tuple[str, bytes]] = []
        self._prefix = key[:JUDGE_PREFIX]
        # an archive with no answer of this judge (a new one: the README's first run) is not
        # asked for each job; only what this memo itself keeps can be found then
        self._any = archive.judged_any(self._prefix)
        self._mine: set[str] = set()

    def _id(self, message: tuple) -> str:
        """The row key: the judge's first hex digits (so `judged_any` finds them by range),
        then the hash of the whole judge key and the message (floats as repr: exact)."""
        text = json.dumps(message, sort_keys=True, default=repr)
        return f"{self._prefix}-" + hashlib.sha256(self.key.encode() + b"\0" + text.encode()).hexdigest()

    def _read(self, key: str) -> Evaluation | None:
        if not self._any and key not in self._mine:
            return None
        blob = self.archive.judged(key)
        if blob is None:
            return None
        try:
            return Evaluation.from_json(json.loads(zlib.decompress(blob)))
        except (zlib.error, ValueError, TypeError, KeyError):  # damaged: judged again, never trusted
            return None

    def get(self, message: tuple) -> Evaluation | None:
        """The answer to this job message, or None: its own, or for a gated screen the ungated
        one where the gate admits it (see the module's docstring)."""
        key = self._id(message)
        ev = self._read(key)
        gate = message[GATE]
        if ev is None and gate is not None:
            key = self._id(ungated(message))
            whole = self._read(key)
            if whole is not None and (refused_before_replay(whole) or (
                    whole.valid and not whole.race and Gate.from_json(gate).admits(whole.objectives))):
                ev = whole
        if ev is not None:
            if key in self._mine:
                self.repeats += 1
            else:
                self.hits += 1
        return ev

    def put(self, message: tuple, ev: Evaluation) -> None:
        """Keep a finished answer (buffered; `flush` writes); a gated screen that ran to the end
        valid, or was refused before it replayed anything, also without its gate."""
        if not finished(ev):
            return
        text = json.dumps(ev.to_json(), default=repr)  # NaN stays NaN: read back as it was sent
        blob = zlib.compress(text.encode(), 1)
        self._buffer.append((self._id(message), blob))
        if message[GATE] is not None and ((ev.valid and not ev.race) or refused_before_replay(ev)):
            self._buffer.append((self._id(ungated(message)), blob))
        if len(self._buffer) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write the buffered answers (one transaction). The executor flushes when it runs
        idle and when it closes: a killed run loses at most FLUSH_EVERY of them, which a later
        run judges again."""
        if self._buffer:
            items, self._buffer = self._buffer, []
            self.kept += self.archive.keep_judged(items)
            self._mine.update(k for k, _ in items)


def memo_for(archive, gt, train_fraction: float) -> JudgeMemo:
    """The memo of `archive` for the judge of ground truth `gt` at this train fraction."""
    return JudgeMemo(archive, judge_key(gt.fingerprint(), train_fraction))
