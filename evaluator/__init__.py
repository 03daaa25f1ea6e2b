"""The judge: ground-truth data, analytical components, per-step scoring and the vLLM-like simulator."""
import hashlib as _hashlib
import os as _os
import platform as _platform
from pathlib import Path as _Path

# One BLAS thread per process: evaluations run in parallel processes already, and a
# multithreaded SVD inside least_squares on a loaded 2-core machine ran 13x slower (0.175 s vs
# 0.013 s for a 13,000 x 9 Jacobian).
# One BLAS kernel set on every x86-64 machine: OpenBLAS picks its kernels by CPU, and an SVD in
# the fit then differs in the last bits (measured 2026-11-28: the native, Sandybridge and Prescott
# kernels gave three different fitted constants of the same seed, 1e-11 to 1e-7 relative), which
# a search amplifies: the README job with seed 0 handed over #677, and two days later on another
# machine (AMD EPYC, AVX2), the search's code unchanged, #766. Sandybridge's kernels (AVX: every
# x86-64 server CPU since 2011) ran no slower than the native ones here. Set before numpy loads
# (worker processes inherit them, Ray actors get them through their runtime environment); a
# user's own setting wins.
# numpy's AVX-512 loops too (NPY_DISABLE_CPU_FEATURES, numpy 2.4's names; AVX2 and below stay):
# measured 2026-11-29 on an AVX-512 Xeon, 4 of the README job's first 40 programs screened to
# other bits with them than without (none between AVX2 and numpy's baseline), and the README
# job's archive differed from the AMD EPYC (AVX2) run's of the day before; no slower without them.
_X86 = _platform.machine().lower() in ("x86_64", "amd64")
PINNED_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              **({"OPENBLAS_CORETYPE": "Sandybridge",
                  "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"} if _X86 else {})}
for _var, _value in PINNED_ENV.items():
    _os.environ.setdefault(_var, _value)


def _drop_stale_numba_caches() -> None:
    """numba's on-disk cache (cache=True) checks only the stamp of the file a function lives in,
    not the files of the functions it calls: after `fill_components` or the KV pool changed, a
    cached simulator would go on calling the old ones (seen: every measured component read 0).
    So: when any kernel file that others call has changed, drop this package's numba caches."""
    here = _Path(__file__).resolve().parent
    called = ("components_kernel.py", "measured_kernel.py", "kv_cache.py", "kernels.py", "components.py")
    digest = _hashlib.sha256(b"".join((here / n).read_bytes() for n in called if (here / n).exists())).hexdigest()
    cache = here / "__pycache__"
    stamp = cache / "numba_callees.sha256"
    try:
        if stamp.exists() and stamp.read_text() == digest:
            return
        for f in list(cache.glob("*.nbi")) + list(cache.glob("*.nbc")):
            f.unlink(missing_ok=True)
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest)
    except OSError:  # a read-only install: numba then cannot cache here either
        pass


_drop_stale_numba_caches()
