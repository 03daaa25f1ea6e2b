"""Worker processes die with their driver, whatever killed it (kill -9 included).

`daemon=True` only helps when the driver exits through Python; after a kill -9 its workers
lived on, evaluating for nobody. A worker killed mid-import is caught when it gets here: the
driver's pid comes from multiprocessing, not from getppid. Call `die_with_parent()` first thing in any worker process
(the local WorkerPool's, a Ray actor's): on Linux the kernel sends SIGKILL when the parent
thread dies (prctl PR_SET_PDEATHSIG); everywhere a daemon thread also polls the parent pid
and exits the process once the worker has been re-parented.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
POLL_S = 0.5


def _prctl_deathsig() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while True:
        time.sleep(POLL_S)
        if os.getppid() != parent:
            os._exit(1)


def _spawning_parent() -> int:
    """The pid of the process that started this one: multiprocessing knows it even when the
    driver died while this worker was still importing (its ppid is then already 1)."""
    p = multiprocessing.parent_process()
    return p.pid if p is not None and p.pid else os.getppid()


_ARMED: set[int] = set()


def guard_spawned_child() -> None:
    """`die_with_parent()` in a multiprocessing child, a no-op in the driver. Called when the
    `evolve` package is imported, i.e. within a fraction of a second of a spawned worker's
    start instead of after its seconds of imports (a driver killed in between left orphans)."""
    if multiprocessing.parent_process() is not None:
        die_with_parent()
    elif getattr(multiprocessing.current_process(), "_inheriting", False):  # spawn is still preparing
        if os.getppid() == 1:  # the driver died before we got here
            os._exit(1)
        die_with_parent(os.getppid())


def die_with_parent(parent: int | None = None) -> None:
    """Make this process exit when `parent` (default: the process that started it) goes away.
    Linux ties PR_SET_PDEATHSIG to the parent *thread*: start workers from a long-lived thread."""
    parent = _spawning_parent() if parent is None else parent
    if parent in _ARMED:
        return
    _ARMED.add(parent)
    _prctl_deathsig()
    if os.getppid() != parent:  # the parent died before we got here
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="lifeline").start()
