"""Run a call that might block in a daemon thread, and fail the test instead of hanging it."""
from __future__ import annotations

import threading


def bounded(fn, limit_s: float):
    """fn() in a daemon thread; fails the test (instead of hanging it) past limit_s."""
    box = {}

    def run():
        try:
            box["val"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["exc"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"still blocked after {limit_s} s"
    if "exc" in box:
        raise box["exc"]
    return box["val"]
