"""Placement objectives for one layer, registered by name.

A :class:`PlacementObjective` knows how to score a layer's assignment, a valid lower bound
on that score, whether it is invariant under relabelling the ranks (then the exact model
may break rank-label symmetry), and how to state itself in the exact models (Pyomo for
HiGHS, and CP-SAT). ``aggregate``, ``migration`` and ``rows`` are registered here; a new
objective needs :func:`register_placement_objective` and no change to the solvers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..errors import InputError, integer, require
from ..solution import checked_ranks
from .bounds import placement_lower_bound


@dataclass(frozen=True)
class LayerProblem:
    """Data of one layer's placement problem.

    Attributes
    ----------
    load
        [E] aggregate expert loads, load_e = sum_i a[i,l,e].
    num_ranks
        P.
    current
        [E] integer ranks in [0, P) of the current placement (``migration``), E/P experts
        on every rank (a placement).
    cell_load
        [C, E] tokens each (row, shard) group sends to each expert, C = R*G >= 1
        (``rows``); W[r,g,l,p] = sum_{e: pi(e)=p} cell_load[(r,g), e]. Finite and >= 0.
    load_cap
        ``migration``: the largest max rank load allowed, (1 + tolerance) x best aggregate.

    Raises
    ------
    InputError
        One line naming the field: P not an integer >= 1 or not dividing E, ``current`` or
        ``cell_load`` of another shape, a rank out of range or a ``current`` without E/P
        experts on a rank (``solve_layer`` named ``placement`` for it), a negative or non-finite
        ``cell_load`` (a negative or non-finite ``load`` is refused by ``solve_layer``).
    """

    load: np.ndarray
    num_ranks: int
    current: np.ndarray | None = None
    cell_load: np.ndarray | None = None
    load_cap: float | None = None

    def __post_init__(self):
        num_ranks = integer("num_ranks", self.num_ranks, low=1)  # 0 divided E by zero
        load = np.asarray(self.load)
        require(load.ndim == 1 and load.size % num_ranks == 0, "load",
                f"must be [E] with P={num_ranks} dividing E, got shape {load.shape}")
        object.__setattr__(self, "num_ranks", num_ranks)
        object.__setattr__(self, "load", load)
        if self.current is not None:
            # the migration model indexes x[e, current[e]]
            current = checked_ranks(self.current, num_ranks, "current", load.shape)
            object.__setattr__(self, "current", current)
        if self.cell_load is not None:
            # the rows objective multiplies it by the [E, P] assignment: a numpy error otherwise
            cell = np.asarray(self.cell_load)
            require(cell.ndim == 2 and cell.shape[0] >= 1 and cell.shape[1] == load.size, "cell_load",
                    f"must be [C, E] with C >= 1 and E={load.size}, got shape {cell.shape}")
            require(cell.dtype.kind in "biuf", "cell_load", f"must be numbers, got dtype {cell.dtype}")
            require(bool(np.all(np.isfinite(cell))) and bool(np.all(cell >= 0)), "cell_load", "must be finite and >= 0")
            object.__setattr__(self, "cell_load", cell)

    @property
    def num_experts(self) -> int:
        return int(self.load.size)

    @property
    def per_rank(self) -> int:
        """E/P."""
        return self.num_experts // self.num_ranks

    @property
    def integral(self) -> bool:
        data = [self.load] + ([self.cell_load] if self.cell_load is not None else [])
        return all(np.asarray(x).dtype.kind in "iu" for x in data)

    def with_cap(self, cap: float) -> "LayerProblem":
        return replace(self, load_cap=cap)

    def scaled(self, factor: float) -> "LayerProblem":
        """The same problem with every load (``load``, ``cell_load``, ``load_cap``) times
        ``factor`` > 0, in floats: the same optimal placements; a value that scales with
        the loads (every objective but one that :attr:`PlacementObjective.counts`) times
        ``factor``."""
        times = (lambda x: None if x is None else np.asarray(x, dtype=np.float64) * factor)
        return replace(self, load=times(self.load), cell_load=times(self.cell_load),
                       load_cap=None if self.load_cap is None else float(self.load_cap) * factor)


def rank_totals(values: np.ndarray, ranks: np.ndarray, num_ranks: int) -> np.ndarray:
    """[..., P]: sum over experts of ``values[..., e]`` grouped by ``ranks[e]``."""
    onehot = np.zeros((ranks.size, num_ranks))
    onehot[np.arange(ranks.size), ranks] = 1.0
    return np.asarray(values, dtype=np.float64) @ onehot


@dataclass(frozen=True)
class PlacementObjective:
    """One swappable placement objective.

    Attributes
    ----------
    name
        Registry key.
    symmetric
        True when relabelling ranks never changes the value (symmetry breaking is valid).
    needs
        Fields of :class:`LayerProblem` that must be set (``"current"``, ``"cell_load"``).
    evaluate
        ``(problem, ranks[E]) -> float``; ``inf`` when the assignment breaks a side
        constraint of the objective.
    lower_bound
        ``problem -> float``, valid for every balanced assignment.
    build_pyomo
        ``(model, problem) -> expression``: adds variables/constraints on ``model.x[e,p]``
        and returns the expression to minimise.
    build_cpsat
        ``(model, x, problem) -> linear expression`` for CP-SAT (integer data only), or None.
    counts
        True when the value counts something (``migration``'s moves): a whole number, so
        its bounds round up, and not changed by scaling the loads. False (the default) for
        a load objective (``aggregate``, ``rows``), whose value is proportional to the loads.
    """

    name: str
    symmetric: bool
    needs: tuple[str, ...]
    evaluate: Callable
    lower_bound: Callable
    build_pyomo: Callable
    build_cpsat: Callable | None = None
    description: str = ""
    counts: bool = False


_OBJECTIVES: dict[str, PlacementObjective] = {}


def register_placement_objective(objective: PlacementObjective) -> PlacementObjective:
    """Make ``objective`` available by name to :mod:`rp_opt.placement.milp` and the CLI."""
    _OBJECTIVES[objective.name] = objective
    return objective


def get_placement_objective(name) -> PlacementObjective:
    """The registered objective ``name``; :class:`InputError` naming the known ones otherwise."""
    if isinstance(name, PlacementObjective):
        return name
    try:
        return _OBJECTIVES[name]
    except KeyError:
        raise InputError("objective", f"unknown placement objective {name!r}; "
                                      f"known: {', '.join(placement_objective_names())}") from None


def placement_objective_names() -> list[str]:
    return sorted(_OBJECTIVES)


# ---------------------------------------------------------------------------------------
# aggregate: min max_p L[l,p]
# ---------------------------------------------------------------------------------------

def _aggregate_value(problem: LayerProblem, ranks: np.ndarray) -> float:
    return float(rank_totals(problem.load, ranks, problem.num_ranks).max())


def _aggregate_bound(problem: LayerProblem) -> float:
    return float(placement_lower_bound(problem.load[None, :], problem.num_ranks)[0])


def _aggregate_pyomo(m, problem: LayerProblem):
    import pyomo.environ as pyo

    w = problem.load.astype(float).tolist()  # Python floats: see _rows_pyomo
    m.z = pyo.Var(within=pyo.NonNegativeReals, bounds=(_aggregate_bound(problem), float(sum(w))))
    # L[p] = sum_e load_e x[e,p] <= z  for every rank p
    m.rank_load = pyo.Constraint(m.P, rule=lambda m, p: pyo.quicksum(w[e] * m.x[e, p] for e in m.E if w[e]) <= m.z)
    return m.z


def _aggregate_cpsat(model, x, problem: LayerProblem):
    w = [int(v) for v in problem.load]
    z = model.NewIntVar(int(np.ceil(_aggregate_bound(problem))), int(sum(w)), "z")
    for p in range(problem.num_ranks):
        # L[p] = sum_e load_e x[e,p] <= z
        model.Add(sum(w[e] * x[e][p] for e in range(problem.num_experts) if w[e]) <= z)
    return z


register_placement_objective(PlacementObjective(
    "aggregate", True, (), _aggregate_value, _aggregate_bound, _aggregate_pyomo, _aggregate_cpsat,
    "min max_p L[l,p], the aggregate rank load (the paper's placement objective)",
))


# ---------------------------------------------------------------------------------------
# migration: fewest experts leaving their current rank, aggregate within a tolerance
# ---------------------------------------------------------------------------------------

def _moves(problem: LayerProblem, ranks: np.ndarray) -> int:
    return int(np.count_nonzero(np.asarray(ranks) != problem.current))


def _migration_value(problem: LayerProblem, ranks: np.ndarray) -> float:
    if _aggregate_value(problem, ranks) > problem.load_cap + 1e-9:
        return float("inf")
    return float(_moves(problem, ranks))


def _migration_bound(problem: LayerProblem) -> float:
    # experts that must leave: a rank whose current load is above the cap must shed at
    # least one expert; cheap and valid
    totals = rank_totals(problem.load, problem.current, problem.num_ranks)
    return float(np.count_nonzero(totals > problem.load_cap + 1e-9))


def _migration_pyomo(m, problem: LayerProblem):
    import pyomo.environ as pyo

    w = problem.load.astype(float).tolist()  # Python floats: see _rows_pyomo
    cap = float(problem.load_cap)
    cur = problem.current
    # L[p] = sum_e load_e x[e,p] <= cap = (1 + tol) * best aggregate (a layer without load
    # has no terms: 0 <= cap holds, and Pyomo refuses a constraint that is a plain True)
    if np.any(w):
        m.rank_load = pyo.Constraint(m.P, rule=lambda m, p: pyo.quicksum(w[e] * m.x[e, p] for e in m.E if w[e]) <= cap)
    # moves = sum_e (1 - x[e, current_e])
    return pyo.quicksum(1 - m.x[e, int(cur[e])] for e in m.E)


def _migration_cpsat(model, x, problem: LayerProblem):
    w = [int(v) for v in problem.load]
    cap = int(np.floor(problem.load_cap + 1e-9))
    for p in range(problem.num_ranks):
        # L[p] <= cap
        model.Add(sum(w[e] * x[e][p] for e in range(problem.num_experts) if w[e]) <= cap)
    # moves = sum_e (1 - x[e, current_e])
    return sum(1 - x[e][int(problem.current[e])] for e in range(problem.num_experts))


register_placement_objective(PlacementObjective(
    "migration", False, ("current",), _migration_value, _migration_bound, _migration_pyomo, _migration_cpsat,
    "fewest experts leaving their current rank among placements within a tolerance of the best aggregate load",
    counts=True,
))


# ---------------------------------------------------------------------------------------
# rows: min sum_{r,g} max_p W[r,g,l,p] for a fixed layout
# ---------------------------------------------------------------------------------------

def _rows_value(problem: LayerProblem, ranks: np.ndarray) -> float:
    return float(rank_totals(problem.cell_load, ranks, problem.num_ranks).max(axis=1).sum())


def _rows_bound(problem: LayerProblem) -> float:
    # per (row, shard) group the balanced-placement bound; and Eq. 4 (>= aggregate bound)
    per_cell = float(placement_lower_bound(problem.cell_load, problem.num_ranks).sum())
    return max(per_cell, _aggregate_bound(LayerProblem(np.asarray(problem.cell_load).sum(axis=0), problem.num_ranks)))


def _rows_pyomo(m, problem: LayerProblem):
    import pyomo.environ as pyo

    # Python floats: a numpy scalar times a Pyomo variable goes through numpy's ufunc
    # dispatch: 0.85 s per layer of a 1000-sample window's rows model before, 0.38 s after
    cell = np.asarray(problem.cell_load, dtype=float).tolist()
    m.C = pyo.RangeSet(0, len(cell) - 1)
    m.y = pyo.Var(m.C, within=pyo.NonNegativeReals)
    # y[c] >= W[c,p] = sum_e cell_load[c,e] x[e,p]  for every group c = (r,g) and rank p
    m.cell_max = pyo.Constraint(m.C, m.P, rule=lambda m, c, p: (
        pyo.quicksum(cell[c][e] * m.x[e, p] for e in m.E if cell[c][e]) <= m.y[c]))
    # Eq. 4 and the per-group bounds: sum_c y[c] >= valid lower bound
    m.rows_bound = pyo.Constraint(expr=pyo.quicksum(m.y[c] for c in m.C) >= _rows_bound(problem))
    return pyo.quicksum(m.y[c] for c in m.C)


def _rows_cpsat(model, x, problem: LayerProblem):
    cell = np.asarray(problem.cell_load, dtype=np.int64)
    total = [int(t) for t in cell.sum(axis=1)]
    y = [model.NewIntVar(0, total[c], f"y{c}") for c in range(cell.shape[0])]
    for c in range(cell.shape[0]):
        for p in range(problem.num_ranks):
            # y[c] >= W[c,p]
            model.Add(sum(int(cell[c, e]) * x[e][p] for e in range(problem.num_experts) if cell[c, e]) <= y[c])
    # sum_c y[c] >= valid lower bound
    model.Add(sum(y) >= int(np.ceil(_rows_bound(problem) - 1e-9)))
    return sum(y)


register_placement_objective(PlacementObjective(
    "rows", True, ("cell_load",), _rows_value, _rows_bound, _rows_pyomo, _rows_cpsat,
    "min sum_{r,g} max_p W[r,g,l,p] for a given layout (sees row-local tails)",
))
