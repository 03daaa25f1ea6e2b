"""Property-based hardening suite (issue 15): hostile programs, damaged ground truth, damaged
archives and CLI argument lists. No traceback escapes, no invalid input is accepted as valid,
no archive row is lost or changed by a viewer.

Profiles: "ci" (default: derandomized, 25 examples per property, well under a minute) and
"long" (500 examples, random): `HYPOTHESIS_PROFILE=long bash scripts/test.sh tests/test_hostile.py`.
The cases and their classification live in tests/hostile.py, shared with
benchmarks/hardening_table.py (the before/after table).
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import hostile

settings.register_profile("ci", max_examples=25, derandomize=True, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("long", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _pick(data):
    return lambda seq: data.draw(st.sampled_from(list(seq)))


@given(data=st.data())
def test_hostile_programs_are_rejected_with_a_reason(data):
    src = hostile.program_case(_pick(data))
    assert hostile.run_program(src) == "clean", src[:200]


@pytest.fixture(scope="module")
def tiny(data_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("gt")
    return {False: hostile.make_tiny_data(data_dir, base / "spec", trace=False),
            True: hostile.make_tiny_data(data_dir, base / "trace", trace=True)}


def test_tiny_ground_truth_is_accepted(tiny):
    """The undamaged copies load: the contract refuses what is impossible, not what is real."""
    from evaluator.data import load
    for root in tiny.values():
        assert load(str(root)).experiments


@given(data=st.data())
def test_impossible_ground_truth_is_refused(data, tiny, tmp_path):
    case = hostile.gt_case(_pick(data))
    root = tmp_path / "d"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(tiny[hostile.gt_needs_trace(case)], root)
    hostile.damage_gt(case, root)
    assert hostile.run_gt(root) == "clean", case


def test_ground_truth_error_names_file_and_field(tiny, tmp_path):
    from evaluator.data import DataError, load
    root = shutil.copytree(tiny[False], tmp_path / "d")
    hostile.damage_gt({"target": "stage_e2e", "number": -0.468, "count": 0, "stage": 1, "rate": 0}, root)
    with pytest.raises(DataError, match=r"stage_1_lifecycle_metrics\.json: field 'successes\.latency\."
                                        r"request_latency\.mean' must be a positive number, got -0\.468"):
        load(str(root))


def test_failed_requests_stay_valid_input(tiny, tmp_path):
    """DESIGN section 1: a failed request is valid input. Some failed rows still load."""
    import pandas as pd
    from evaluator.data import load
    root = shutil.copytree(tiny[True], tmp_path / "d")
    p = root / "requests" / "requests.parquet"
    r = pd.read_parquet(p)
    r.loc[r.index[:5], "has_error"] = True
    r.to_parquet(p)
    assert load(str(root)).requests["has_error"].sum() == 5


@pytest.fixture(scope="module")
def archive_src(tmp_path_factory):
    path = tmp_path_factory.mktemp("arch") / "a.db"
    return path, hostile.make_archive(path)


@given(data=st.data())
def test_damaged_archive_is_reported_and_never_changed(data, archive_src, tmp_path):
    src, want = archive_src
    case = hostile.archive_case(_pick(data))
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "a.db"  # no WAL file of an earlier example beside it
    shutil.copyfile(src, path)
    hostile.damage_archive(case, path)
    assert hostile.run_archive(case, path, want, tmp_path) in ("clean", "ok"), case


def test_intact_archive_lists_its_frontier(archive_src, tmp_path):
    src, want = archive_src
    path = shutil.copyfile(src, tmp_path / "a.db")
    assert hostile.run_archive({"command": "frontier", "damage": "none"}, path, want, tmp_path) == "ok"


def test_viewer_reads_while_a_writer_holds_the_lock(archive_src, tmp_path):
    """`frontier` and `show` while another process holds BEGIN IMMEDIATE: they read, never wait."""
    src, want = archive_src
    path = shutil.copyfile(src, tmp_path / "a.db")
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("BEGIN IMMEDIATE")
    try:
        code, out = hostile.cli(["frontier", "--archive", str(path), "--json"])
        assert code == 0 and out.strip().startswith("[")
        code, _ = hostile.cli(["show", "999999", "--archive", str(path)])
        assert code == 1
    finally:
        con.execute("ROLLBACK")
        con.close()


def test_missing_archive_is_not_created_by_a_viewer(tmp_path):
    for argv in (["frontier"], ["show", "1"], ["report", "-o", str(tmp_path / "r.html")]):
        code, _ = hostile.cli([*argv, "--archive", str(tmp_path / "none.db")])
        assert code != 0
    assert not (tmp_path / "none.db").exists()


@given(data=st.data())
def test_cli_arguments_are_range_checked(data):
    argv = hostile.cli_case(_pick(data))
    assert hostile.run_cli_args(argv) in ("clean", "ok"), argv


def test_bad_flag_is_one_line_and_exit_2():
    r = subprocess.run([sys.executable, "-m", "evolve.cli", "run", "--train-fraction", "nan"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--train-fraction: must be a finite number in (0, 1)" in r.stderr


# ---------------------------------------------------------------- issue 33: the second pass's categories

@pytest.mark.parametrize("case", hostile.GT33_VALUES, ids=[f"{w}:{f}={v!r}" for w, f, v in hostile.GT33_VALUES])
def test_ground_truth_values_the_issue_names_are_refused(case, tiny, tmp_path):
    """tensor_parallelism 2.7, max_num_seqs 1.5, a negative failure count, "false", an E2E of
    1e12 s, zero FLOP/s, TP 0, infinities, huge declared sizes: one line naming the file."""
    root = shutil.copytree(tiny[False], tmp_path / "d")
    damaged = hostile.damage_gt33(case, root)
    assert hostile.run_gt33(root, damaged) == "clean", case


@given(data=st.data())
def test_malformed_ground_truth_files_are_refused(data, tiny, tmp_path):
    case = hostile.json_case(_pick(data))
    root = Path(tempfile.mkdtemp(dir=tmp_path)) / "d"
    shutil.copytree(tiny[False], root)
    assert hostile.run_json(case, root) in ("clean", "ok"), case


@given(data=st.data())
def test_malformed_ingest_files_are_one_line(data, tmp_path):
    case = hostile.ingest_case(_pick(data))
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    assert hostile.run_ingest(case, Path(__file__).parent / "fixtures", work) in ("clean", "ok"), case


@given(data=st.data())
def test_malformed_blis_results_are_never_scored(data, tiny, tmp_path):
    case = hostile.blis_case(_pick(data))
    out = Path(tempfile.mkdtemp(dir=tmp_path))
    hostile.damage_blis(case, hostile.make_blis_results(tiny[True], out))
    assert hostile.run_blis(out, tiny[True]) == "clean", case


def _every(case_fn) -> list:
    got = []
    case_fn(lambda seq: got.extend(seq) or seq[0])
    return got


@pytest.fixture(scope="module")
def ids_archive(tmp_path_factory):
    from evolve.archive import Archive
    from evolve.config import RunConfig
    path = tmp_path_factory.mktemp("ids") / "a.db"
    pid = next(iter(hostile.make_archive(path, config=RunConfig(budget=30).to_json())))
    a = Archive(path, readonly=True)
    run_id = a.runs()[0]["id"]
    a.close()
    return path, run_id, pid


@pytest.mark.parametrize("argv", _every(hostile.unknown_id_case), ids=" ".join)
def test_unknown_ids_are_one_line(argv, ids_archive, tmp_path):
    assert hostile.run_unknown_id(argv, ids_archive[0], tmp_path) == "clean", argv


@pytest.mark.parametrize("argv", _every(hostile.flags_case), ids=" ".join)
def test_bad_flag_combinations_are_refused(argv, ids_archive, tmp_path):
    """The whole command runs (not only the parser): refused in one line before any work; a
    --resume that would change a stored setting included."""
    path, run_id, pid = ids_archive
    assert hostile.run_flags(argv, path, run_id, pid, tmp_path) == "clean", argv
