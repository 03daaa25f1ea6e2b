"""StepEvolve: evolution loop, candidate programs, archive and CLI."""
