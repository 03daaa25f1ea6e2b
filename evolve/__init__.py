"""StepEvolve: evolution loop, candidate programs, archive and CLI."""
import evaluator as _evaluator  # noqa: F401  (one BLAS thread per process, before numpy loads)
