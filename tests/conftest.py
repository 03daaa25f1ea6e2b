"""Shared fixtures: the real ground truth in ../shared/data (CI has it beside the checkout)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(os.environ.get("STEPEVOLVE_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


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
