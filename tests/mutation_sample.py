"""A sample of programs carrying several offline mutations each (conditionals, pow, ...), for
parity tests of the compiled forms of a program (tests/test_mutate.py, tests/test_program_grad.py)."""
from __future__ import annotations

import random

from evaluator.program import parse_program
from evolve.mutate import OfflineMutator


def chained_sample(seeds, steps, choice_seed, mutator_seed, caps):
    """From each seed program, `steps` mutations in a chain (each with a random seed as the
    second parent); every third program of a chain is kept."""
    rng = random.Random(choice_seed)
    m = OfflineMutator(caps=caps, rng=random.Random(mutator_seed))
    sample = []
    for start in seeds:
        cur = start
        for i in range(steps):
            src, _ = m.propose([cur, rng.choice(seeds)])
            cur = parse_program(src)
            if i % 3 == 2:
                sample.append(cur)
    return sample
