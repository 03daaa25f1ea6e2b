"""Shared fixtures: the real ground truth in ../shared/data (CI has it beside the checkout)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(os.environ.get("STEPEVOLVE_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))

# The files that take longest, slowest first (seconds of their tests on the 2-core machine,
# `pytest --durations=0` of 2026-11-28 with the small ground truth below: 191, 190, 112, 110, 96,
# 94, 78, 54, 53, 53, 52, 48, 44, 39). scripts/test.sh runs one file per worker at a time
# (`--dist loadfile`) in collection order (`--no-loadscope-reorder`; xdist's own order, most
# tests first, left the fewest-test, slowest files for the end, one worker running them while
# the other sat idle): longest first keeps both workers busy to the end. Files not named keep
# their order after these.
SLOWEST_FILES = ("test_kill_resume.py", "test_search.py", "test_ray.py", "test_cli.py", "test_run_hardening.py",
                 "test_holdout.py", "test_ui.py", "test_shared_states.py", "test_llvm_program.py", "test_handover.py",
                 "test_search_llm.py", "test_simulator.py", "test_readonly_views.py", "test_startup.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order within a file kept


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA / "experiments").is_dir():
        pytest.fail(f"ground truth not found at {DATA} (set STEPEVOLVE_DATA)")
    return DATA


# A smaller ground truth for the tests that run whole searches (kill and resume, hand-over,
# start-up, hardening): what they check does not depend on how many experiments there are, and
# a run on 6 experiments costs about half of one on the 16. Two models, two short workloads and
# the long one keep every held-out regime: LOMO, LOWO, high load, long decode and overload
# (70b's reasoning run failed a third of its requests). Workload-spec mode, as the embedded
# default: the experiments only, no request or step tables.
SMALL_MODELS = ("codellama-34b", "llama-2-70b")
SMALL_WORKLOADS = ("codegen", "general", "reasoning")
SMALL_LINKED = ("hardware", "kernels", "model_configs")


def make_small_data(data: Path, out: Path) -> Path:
    """Write `out`: links to the SMALL_MODELS x SMALL_WORKLOADS experiments of `data` and to its
    hardware, kernels and model configs; fails the test if `data` lacks one of the six."""
    exps = sorted(d for d in (data / "experiments").iterdir()
                  if any(m in d.name for m in SMALL_MODELS) and d.name.rsplit("-", 1)[-1] in SMALL_WORKLOADS)
    if len(exps) != len(SMALL_MODELS) * len(SMALL_WORKLOADS):
        pytest.fail(f"{data}: expected {len(SMALL_MODELS) * len(SMALL_WORKLOADS)} experiments of "
                    f"{SMALL_MODELS} x {SMALL_WORKLOADS}, found {[d.name for d in exps]}")
    (out / "experiments").mkdir(parents=True)
    for d in exps:
        os.symlink(d.resolve(), out / "experiments" / d.name)
    for name in SMALL_LINKED:
        os.symlink((data / name).resolve(), out / name)
    return out


@pytest.fixture(scope="session")
def small_data(data_dir, tmp_path_factory) -> Path:
    return make_small_data(data_dir, tmp_path_factory.mktemp("small") / "data")


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
