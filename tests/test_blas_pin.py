"""Fits are the same bits on every x86-64 machine: `evaluator` pins OpenBLAS's kernel set
(`evaluator.PINNED_ENV`) before numpy loads, as OpenBLAS otherwise picks kernels by CPU and an
SVD differs in its last bits, which a search amplifies into another archive."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator import PINNED_ENV

ROOT = Path(__file__).resolve().parents[1]
# an SVD of the fit's shape (a 13,000 x 9 Jacobian over six decades), its bits hashed
SVD = ("import hashlib, numpy as np\nfrom scipy.linalg import svd\n"
       "J = np.random.default_rng(3).standard_normal((13000, 9)) * np.logspace(0, 6, 9)\n"
       "_, s, vt = svd(J, full_matrices=False)\nprint(hashlib.sha256(s.tobytes() + vt.tobytes()).hexdigest())\n")
x86 = pytest.mark.skipif("OPENBLAS_CORETYPE" not in PINNED_ENV, reason="the kernel set is pinned on x86-64 only")


def _svd(first: str = "", **env) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    r = subprocess.run([sys.executable, "-c", first + SVD], capture_output=True, text=True, timeout=120,
                       env={**clean, **env}, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


@x86
def test_importing_the_judge_pins_the_kernels_before_numpy_loads():
    pinned = _svd("import evaluator\n")
    assert pinned == _svd(OPENBLAS_CORETYPE=PINNED_ENV["OPENBLAS_CORETYPE"])
    assert pinned == _svd("import evolve.cli\n")  # the CLI, whose workers inherit it
    # a user's own setting wins
    assert _svd("import evaluator\n", OPENBLAS_CORETYPE="Prescott") == _svd(OPENBLAS_CORETYPE="Prescott")
