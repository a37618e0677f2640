"""Objectives (MODEL.md "Objectives"): lexicographic tuples of aggregates of the cost
matrices A and X (:mod:`rp_opt.cost`), by registration. A new objective is a new
:class:`Objective` passed to :func:`register_objective`; no solver or model builder
changes (the exact models linearise every :class:`Aggregate` generically).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from .errors import InputError, number, require

if TYPE_CHECKING:
    from .cost import Costs

_REDUCE: dict[str, Callable] = {"sum": np.sum, "max": np.max}
_AXIS = {"rows": 0, "shards": 1}


@dataclass(frozen=True)
class Aggregate:
    """One scalar of a plan: ``outer`` over one axis of ``inner`` over the axis ``over``,
    applied to the matrix ``attention * A + expert * X``.

    ``Aggregate("sum", "rows", "max")`` is max_g sum_r J[r,g]; ``Aggregate("max", "shards",
    "sum")`` is sum_r max_g J[r,g]. Exact models linearise an aggregate generically (a max
    becomes an epigraph variable), so a new objective needs no change to any model builder.

    The weights ``attention`` and ``expert`` must be finite numbers >= 0 (stored as
    floats); NaN, inf, a negative weight, a bool or a string raises
    :class:`~rp_opt.errors.InputError` naming the weight.
    """

    inner: str
    over: str
    outer: str
    attention: float = 1.0
    expert: float = 1.0

    def __post_init__(self):
        if self.inner not in _REDUCE or self.outer not in _REDUCE:
            raise InputError("objective", f"reductions must be 'sum' or 'max', got {self.inner!r}, {self.outer!r}")
        if self.over not in _AXIS:
            raise InputError("objective", f"axis must be 'rows' or 'shards', got {self.over!r}")
        for name in ("attention", "expert"):
            object.__setattr__(self, name, number(f"objective.{name}", getattr(self, name), low=0,
                                                  hint=f"weight of {'A' if name == 'attention' else 'X'}"))

    def matrix(self, costs: Costs) -> np.ndarray:
        return self.attention * costs.attention + self.expert * costs.expert

    def evaluate(self, costs: Costs) -> float:
        inner = _REDUCE[self.inner](self.matrix(costs), axis=_AXIS[self.over])
        return float(_REDUCE[self.outer](inner))


SHARD_TOTAL_MAX = Aggregate("sum", "rows", "max")   # max_g sum_r J[r,g]   (paper Eq. 15)
ROW_MAX_SUM = Aggregate("max", "shards", "sum")     # sum_r max_g J[r,g]   (review)
TOTAL = Aggregate("sum", "rows", "sum")             # sum_{r,g} J[r,g]
PEAK = Aggregate("max", "rows", "max")              # max_{r,g} J[r,g]

Level = tuple[tuple[float, Aggregate], ...]
"""A level of an objective: a non-negative combination sum_k coef_k * aggregate_k."""


@dataclass(frozen=True)
class Objective:
    """A lexicographic objective: levels compared left to right, each a weighted sum of
    aggregates.

    Parameters
    ----------
    name
        Registry key.
    levels
        Tuple of levels, each a tuple of ``(coefficient, Aggregate)`` pairs; every
        coefficient a finite number >= 0 (NaN, inf, a negative value or a bool raises
        :class:`~rp_opt.errors.InputError` naming ``objective.levels[i][j]``).
    description
        One line for listings.
    """

    name: str
    levels: tuple[Level, ...]
    description: str = ""

    def __post_init__(self):
        # at least one level, each at least one (coefficient, Aggregate) pair: an empty one
        # has no value to minimise (solvers raised IndexError or Pyomo's error on it)
        require(isinstance(self.levels, (tuple, list)) and len(self.levels) > 0, "objective.levels",
                f"objective {self.name!r} needs at least one level, got {self.levels!r}")
        for i, level in enumerate(self.levels):
            require(isinstance(level, (tuple, list)) and len(level) > 0, f"objective.levels[{i}]",
                    f"must be a non-empty tuple of (coefficient, Aggregate) pairs, got {level!r}")
            for j, pair in enumerate(level):
                require(isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[1], Aggregate),
                        f"objective.levels[{i}][{j}]", f"must be a (coefficient, Aggregate) pair, got {pair!r}")
                number(f"objective.levels[{i}][{j}]", pair[0], low=0, hint=f"coefficient in objective {self.name!r}")

    def evaluate(self, costs: Costs) -> tuple[float, ...]:
        return tuple(sum(coef * agg.evaluate(costs) for coef, agg in level) for level in self.levels)

    @property
    def aggregates(self) -> list[Aggregate]:
        """Every aggregate of every level, in order."""
        return [agg for level in self.levels for _, agg in level]

    @property
    def weighs(self) -> tuple[bool, bool]:
        """(attention, expert): whether some aggregate weighs A, and whether some weighs X
        (a part no aggregate weighs must not set a solver's scale)."""
        return (any(agg.attention > 0 for agg in self.aggregates), any(agg.expert > 0 for agg in self.aggregates))


_OBJECTIVES: dict[str, Objective] = {}


def register_objective(objective: Objective) -> Objective:
    """Make ``objective`` available by name to every solver and to the CLI.

    Its coefficients and weights were checked when it was built (finite numbers >= 0:
    :class:`Objective`, :class:`Aggregate`).

    Parameters
    ----------
    objective
        The objective to register (replaces one of the same name).

    Returns
    -------
    Objective
        ``objective`` itself.
    """
    require(isinstance(objective, Objective), "objective",
            f"must be an Objective, got {type(objective).__name__}")
    _OBJECTIVES[objective.name] = objective
    return objective


def get_objective(name: str | Objective) -> Objective:
    """The registered objective ``name``; :class:`InputError` naming the known ones otherwise."""
    if isinstance(name, Objective):
        return name
    try:
        return _OBJECTIVES[name]
    except KeyError:
        raise InputError("objective", f"unknown objective {name!r}; known: {', '.join(sorted(_OBJECTIVES))}") from None


def objective_names() -> list[str]:
    return sorted(_OBJECTIVES)


def _single(agg: Aggregate) -> Level:
    return ((1.0, agg),)


register_objective(Objective(
    "shard", (_single(SHARD_TOTAL_MAX), _single(TOTAL), _single(PEAK)),
    "paper Eq. 15: (max_g sum_r J, sum J, max J); shards do not wait for each other between rows",
))
register_objective(Objective(
    "sync", (_single(ROW_MAX_SUM), _single(TOTAL), _single(PEAK)),
    "review: (sum_r max_g J, sum J, max J); every row ends with a barrier across shards",
))
register_objective(Objective(
    "attention",
    tuple(_single(Aggregate(a.inner, a.over, a.outer, 1.0, 0.0)) for a in (ROW_MAX_SUM, TOTAL, PEAK)),
    "sync on attention cost A only",
))
register_objective(Objective(
    "expert",
    tuple(_single(Aggregate(a.inner, a.over, a.outer, 0.0, 1.0)) for a in (ROW_MAX_SUM, TOTAL, PEAK)),
    "sync on expert cost X only",
))
register_objective(Objective(
    "weighted", (((1.0, ROW_MAX_SUM), (1.0, SHARD_TOTAL_MAX), (0.1, TOTAL)),),
    "one scalar: sum_r max_g J + max_g sum_r J + 0.1 sum J",
))
