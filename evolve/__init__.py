"""StepEvolve: evolution loop, candidate programs, archive and CLI."""
from evolve.lifeline import guard_spawned_child as _guard

_guard()  # a spawned worker dies with its driver: armed before the seconds of imports below
import evaluator as _evaluator  # noqa: E402,F401  (one BLAS thread per process, before numpy loads)
