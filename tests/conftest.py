"""Shared fixtures: the real ground truth in ../shared/data (CI has it beside the checkout)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(os.environ.get("STEPEVOLVE_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))

# The files that take longest, slowest first (seconds of their slowest tests on the 2-core CI
# machine, `pytest --durations` of 2026-11-27: 277, 277, 112, 110, 107, 100, 97, 72, 62).
# scripts/test.sh runs one file per worker at a time (`--dist loadfile`) in collection order
# (`--no-loadscope-reorder`; xdist's own order, most tests first, left the fewest-test, slowest
# files for the end, one worker running them while the other sat idle): longest first keeps both
# workers busy to the end. Files not named keep their order after these.
SLOWEST_FILES = ("test_kill_resume.py", "test_search.py", "test_holdout.py", "test_ray.py", "test_run_hardening.py",
                 "test_cli.py", "test_ui.py", "test_search_llm.py", "test_startup.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order within a file kept


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA / "experiments").is_dir():
        pytest.fail(f"ground truth not found at {DATA} (set STEPEVOLVE_DATA)")
    return DATA


@pytest.fixture(scope="session")
def gt(data_dir):
    from evaluator.data import load_ground_truth
    return load_ground_truth(data_dir)


@pytest.fixture(scope="session")
def evaluator(gt):
    from evaluator.evaluate import Evaluator
    ev = Evaluator(gt)
    ev.reference_states()
    return ev
