"""Pareto fronts, NSGA-II selection, hypervolume and MAP-Elites cells.

Every objective is minimised; names, vector order and the invalid value are those of
`evaluator.objectives` (`ORDER`, `INVALID`): NaN, +/-inf and missing objectives map to
INVALID because DEAP sorts a NaN fitness into the first front.

Items handed to `pareto_front` / `select_nsga2` can be: a dict with an "objectives" dict
(archive records), an object with an `.objectives` dict (evaluator.records.Evaluation), a plain
objectives dict, or a sequence of numbers (already a vector). Pass `key=` to override.
Objective dicts ranked together share one vector order (`evaluator.objectives.vector_order`):
the held-out errors and complexity when all carry held-out errors, else the in-sample ones.
The functions return the items themselves, in input order for `pareto_front`.

DEAP is used without `deap.creator`: the fitness classes are plain subclasses of
`deap.base.Fitness` built once per dimension, so nothing is registered globally.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
from deap import base, tools

from evaluator.objectives import INVALID, ORDER, objective_vector, ranked, vector_order

# Older names, kept while the views move to evaluator.objectives (the same objects).
VECTOR_ORDER = ORDER
BAD = INVALID

# MAP-Elites descriptor bins
COMPLEXITY_BINS = ((0, 9, "c0-9"), (10, 14, "c10-14"), (15, 19, "c15-19"), (20, 29, "c20-29"),
                   (30, math.inf, "c30+"))
COMPONENT_BINS = ("k1", "k2", "k3", "k4", "k5+")


def _objectives_of(item: Any) -> Mapping | Sequence:
    """The objectives dict of a record / Evaluation / plain dict, or a ready vector."""
    if isinstance(item, Mapping):
        obj = item.get("objectives") if "objectives" in item else item
        if isinstance(obj, Mapping):
            return obj
    obj = getattr(item, "objectives", None)
    if isinstance(obj, Mapping):
        return obj
    if isinstance(item, Sequence) and not isinstance(item, (str, bytes)):
        return item
    raise TypeError(f"cannot derive an objective vector from {type(item).__name__}")


def _vectors(items: Sequence, key: Callable | None) -> list[tuple[float, ...]]:
    """One vector per item; objective dicts ranked together share one order (held-out errors
    only when every one of them has them: `vector_order`)."""
    objs = [_objectives_of(it) if key is None else key(it) for it in items]
    order = vector_order([o for o in objs if isinstance(o, Mapping)])
    return [objective_vector(o, order) if isinstance(o, Mapping) else tuple(ranked(x) for x in o) for o in objs]


_FITNESS: dict[int, type] = {}


def _fitness_class(dim: int) -> type:
    """A minimising base.Fitness subclass with `dim` objectives (cached, creator-free)."""
    cls = _FITNESS.get(dim)
    if cls is None:
        cls = type(f"MinFitness{dim}", (base.Fitness,), {"weights": (-1.0,) * dim})
        _FITNESS[dim] = cls
    return cls


class _Ind:
    """Minimal DEAP individual: a fitness plus the item it stands for."""
    __slots__ = ("fitness", "item", "index")

    def __init__(self, fitness, item, index):
        self.fitness = fitness
        self.item = item
        self.index = index


def _individuals(items: Sequence, key: Callable | None) -> list[_Ind]:
    vecs = _vectors(items, key)
    if not vecs:
        return []
    dim = len(vecs[0])
    if any(len(v) != dim for v in vecs):
        raise ValueError("objective vectors of different lengths")
    cls = _fitness_class(dim)
    return [_Ind(cls(v), it, i) for i, (it, v) in enumerate(zip(items, vecs))]


def pareto_front(items: Iterable, key: Callable | None = None) -> list:
    """The non-dominated items (first front), in input order. Equal vectors all stay."""
    items = list(items)
    inds = _individuals(items, key)
    if not inds:
        return []
    front = tools.sortLogNondominated(inds, len(inds), first_front_only=True)
    return [ind.item for ind in sorted(front, key=lambda i: i.index)]


def pareto_ranks(items: Iterable, key: Callable | None = None) -> list[int]:
    """Front index (0 = non-dominated) of every item, in input order."""
    items = list(items)
    inds = _individuals(items, key)
    if not inds:
        return []
    ranks = [0] * len(inds)
    for r, front in enumerate(tools.sortLogNondominated(inds, len(inds))):
        for ind in front:
            ranks[ind.index] = r
    return ranks


def select_nsga2(items: Iterable, k: int, key: Callable | None = None) -> list:
    """NSGA-II survivor selection of k items (non-dominated rank, then crowding distance)."""
    items = list(items)
    if k <= 0 or not items:
        return []
    if k >= len(items):
        return items
    inds = _individuals(items, key)
    chosen = tools.selNSGA2(inds, k, nd="log")
    return [ind.item for ind in chosen]


# ---------------------------------------------------------------- hypervolume

def _hv2d(points: list[tuple[float, float]], ref: tuple[float, float]) -> float:
    """Exact 2-D hypervolume (minimisation) by a sweep over the first coordinate."""
    pts = sorted((x, y) for x, y in points if x < ref[0] and y < ref[1])
    vol, best_y = 0.0, ref[1]
    for x, y in pts:
        if y < best_y:
            vol += (ref[0] - x) * (best_y - y)
            best_y = y
    return vol


def _hv_slices(points: list[tuple[float, ...]], ref: tuple[float, ...]) -> float:
    """Exact hypervolume for any dimension by slicing along the last axis (small fronts)."""
    d = len(ref)
    if d == 2:
        return _hv2d([(p[0], p[1]) for p in points], (ref[0], ref[1]))
    if d == 1:
        return max(0.0, ref[0] - min(p[0] for p in points)) if points else 0.0
    pts = sorted(points, key=lambda p: p[-1])
    vol = 0.0
    for i, p in enumerate(pts):
        upper = pts[i + 1][-1] if i + 1 < len(pts) else ref[-1]
        depth = upper - p[-1]
        if depth <= 0:
            continue
        vol += depth * _hv_slices([q[:-1] for q in pts[:i + 1]], ref[:-1])
    return vol


def hypervolume(points: Iterable[Sequence[float]], ref: Sequence[float]) -> float:
    """Hypervolume dominated by `points` and bounded by `ref` (all objectives minimised).

    Points not strictly better than ref in every coordinate contribute nothing; NaN/inf
    coordinates are mapped to INVALID first. 2-D uses an exact sweep; more dimensions use
    moocore if it is installed, else exact slicing (fine for fronts of a few hundred).
    """
    ref = tuple(float(r) for r in ref)
    pts = [tuple(ranked(x) for x in p) for p in points]
    pts = [p for p in pts if len(p) == len(ref) and all(a < r for a, r in zip(p, ref))]
    if not pts:
        return 0.0
    if len(ref) == 2:
        return _hv2d(pts, ref)  # type: ignore[arg-type]
    try:  # optional fast path
        import moocore  # type: ignore
        return float(moocore.hypervolume(np.asarray(pts, float), ref=np.asarray(ref, float)))
    except ImportError:
        pass
    front = pareto_front(pts)
    return _hv_slices(front, ref)


# ---------------------------------------------------------------- MAP-Elites

def complexity_bin(c: float) -> str:
    """Bins of the (integer) complexity: 0-9, 10-14, 15-19, 20-29, 30+."""
    c = float(c)
    for _lo, hi, name in COMPLEXITY_BINS:
        if c < hi + 1:
            return name
    return COMPLEXITY_BINS[-1][2]


def components_bin(n: int) -> str:
    n = max(1, int(n))
    return COMPONENT_BINS[min(n, 5) - 1]


def _program_descriptors(program: Any) -> tuple[float, int]:
    """(complexity total, number of components used) from a Program or an archive record."""
    if isinstance(program, Mapping):
        comps = program.get("components") or []
        c = program.get("complexity")
        if isinstance(c, Mapping):
            c = sum(c.values())
        return float(c or 0), len(comps)
    cx = program.complexity
    total = cx.total if hasattr(cx, "total") else cx
    comps = program.params if hasattr(program, "params") else program.components
    return float(total), len(comps)


def cell_key(program: Any) -> str:
    """MAP-Elites cell "<complexity bin>|<component bin>", e.g. "c10-14|k3".

    Complexity bins 0-9, 10-14, 15-19, 20-29, 30+; components used 1, 2, 3, 4, 5+.
    Accepts an evaluator.program.Program or an archive record dict (complexity, components).
    """
    c, n = _program_descriptors(program)
    return f"{complexity_bin(c)}|{components_bin(n)}"


def all_cell_keys() -> list[str]:
    return [f"{c[2]}|{k}" for c in COMPLEXITY_BINS for k in COMPONENT_BINS]
