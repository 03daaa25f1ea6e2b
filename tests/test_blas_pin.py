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


def _child(script: str, unset: str, first: str = "", **env) -> str:
    """What `first + script` prints in a fresh interpreter, `unset` left out of its environment
    (so only `first` or `env` can set it)."""
    clean = {k: v for k, v in os.environ.items() if k != unset}
    r = subprocess.run([sys.executable, "-c", first + script], capture_output=True, text=True, timeout=120,
                       env={**clean, **env}, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


def _svd(first: str = "", **env) -> str:
    return _child(SVD, "OPENBLAS_CORETYPE", first, **env)


@x86
def test_importing_the_judge_pins_the_kernels_before_numpy_loads():
    pinned = _svd("import evaluator\n")
    assert pinned == _svd(OPENBLAS_CORETYPE=PINNED_ENV["OPENBLAS_CORETYPE"])
    assert pinned == _svd("import evolve.cli\n")  # the CLI, whose workers inherit it
    # a user's own setting wins
    assert _svd("import evaluator\n", OPENBLAS_CORETYPE="Prescott") == _svd(OPENBLAS_CORETYPE="Prescott")


# numpy's loops whose bits depend on the loop set it picks by CPU at import (measured on an
# AVX-512 Xeon: exp, log, a power and the order argsort gives ties all differ with its AVX-512
# loops), hashed, and which of the pinned-off loop sets this process has
NUMPY = ("import hashlib, os, numpy as np\nfrom numpy._core._multiarray_umath import __cpu_features__ as f\n"
         "x = np.random.default_rng(3).standard_normal(100000) * 30\n"
         "out = [np.exp(x / 10), np.log(np.abs(x) + 1e-3), np.abs(x) ** 1.37, np.argsort(np.round(x)).astype(float)]\n"
         "print(hashlib.sha256(b''.join(a.tobytes() for a in out)).hexdigest(), os.environ.get('NPY_DISABLE_CPU_FEATURES'),\n"
         "      [k for k in ('X86_V4', 'AVX512_ICL', 'AVX512_SPR') if f.get(k)], sep='|')\n")


def _numpy(first: str = "", **env) -> tuple[str, str, str]:
    digest, setting, on = _child(NUMPY, "NPY_DISABLE_CPU_FEATURES", first, **env).split("|")
    return digest, setting, on


@pytest.mark.skipif("NPY_DISABLE_CPU_FEATURES" not in PINNED_ENV, reason="numpy's loops are pinned on x86-64 only")
def test_importing_the_judge_turns_numpys_avx512_loops_off_before_numpy_loads():
    pinned = PINNED_ENV["NPY_DISABLE_CPU_FEATURES"]
    for first in ("import evaluator\n", "import evolve.cli\n"):
        digest, setting, on = _numpy(first)
        assert setting == pinned and on == "[]"  # off in this process, whatever the CPU has
        assert digest == _numpy(NPY_DISABLE_CPU_FEATURES=pinned)[0]
    # a user's own setting wins (here: every loop the CPU has)
    mine = _numpy("import evaluator\n", NPY_DISABLE_CPU_FEATURES="NONE")
    assert mine[1] == "NONE" and mine[:2] == _numpy(NPY_DISABLE_CPU_FEATURES="NONE")[:2]
