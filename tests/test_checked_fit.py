"""The screen's fit stops at the first fitting group that refuses the program
(`fit_program.checked_fit`, issue 31): the same verdict as a whole fit, for less work."""
from __future__ import annotations

import numpy as np

from evaluator import fit_program
from evaluator.program import parse_program
from seeds import seed_sources

# below the hardware floor on llama-2-7b only, the third fitting group in sorted order
UNPHYSICAL = '''PER_LAYER = 30.0
C_P = 1.0


def predict_step_time(t_step_measured, t_decode_spread, P, layers):
    return t_step_measured + (PER_LAYER + C_P * abs(P)) * layers + t_decode_spread + t_decode_spread
'''
# OVERHEAD and EFFICIENCY trade off in every group (one model has one layer count)
UNPINNED = '''OVERHEAD = 15000.0
EFFICIENCY = 45.0

def predict_step_time(layers):
    return OVERHEAD + EFFICIENCY * layers
'''


def test_unphysical_program_gets_the_whole_fits_reason_from_fewer_groups(evaluator):
    p = parse_program(UNPHYSICAL)
    f = p.compiled()
    whole = fit_program.surrogate_fit(evaluator, p, f)
    expected = fit_program.unphysical(evaluator, f, whole, p.params)
    assert expected is not None
    ev = evaluator.evaluate(p, refine=False, heldout=False, pinned=True)
    assert not ev.valid and ev.error == expected
    groups = sorted(evaluator.groups())
    fitted = sorted(ev.constants)
    assert fitted == groups[:len(fitted)] and len(fitted) < len(groups)  # it stopped early
    for key in fitted:  # each group's fit is the whole fit's, bit for bit
        assert np.array_equal(ev.constants[key], whole[key])


def test_unpinned_program_is_refused_on_its_first_group(evaluator):
    p = parse_program(UNPINNED)
    f = p.compiled()
    first = sorted(evaluator.groups())[0]
    ev = evaluator.evaluate(p, refine=False, heldout=False, pinned=True)
    assert not ev.valid and ev.error.startswith("constants the data cannot pin")
    assert list(ev.identifiability) == [first] and list(ev.constants) == [first]
    whole = fit_program.identifiability(evaluator, p, fit_program.surrogate_fit(evaluator, p, f), None)
    assert len(whole) == len(evaluator.groups())  # a whole fit would have checked every group
    assert ev.identifiability[first] == whole[first]
    # without `pinned` nothing is refused for it: every group is fitted
    loose = evaluator.evaluate(p, refine=False, heldout=False, pinned=False)
    assert sorted(loose.constants) == sorted(evaluator.groups())


def test_a_program_that_passes_gets_the_surrogate_fit_bit_for_bit(evaluator):
    p = parse_program(seed_sources()["phase_split"])  # pinned in every group (4 constants)
    f = p.compiled()
    consts, why, ident = fit_program.checked_fit(evaluator, p, f, pinned=True)
    whole = fit_program.surrogate_fit(evaluator, p, f)
    assert why is None
    assert list(consts) == list(whole)  # the groups' order too
    assert all(np.array_equal(consts[k], whole[k]) for k in whole)
    assert ident == fit_program.identifiability(evaluator, p, whole, None)
