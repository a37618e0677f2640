"""The result shape every solver returns: status, plan, score, bound, gap, seconds, stats."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .solution import Layout, Placement

OPTIMAL = "optimal"          # proven: bound equals score (within the solver's tolerance)
FEASIBLE = "feasible"        # a valid plan, not proven optimal (time limit or heuristic)
INFEASIBLE = "infeasible"    # proven: no plan exists
NO_SOLUTION = "no_solution"  # stopped before any plan was found, nothing proven
STATUSES = (OPTIMAL, FEASIBLE, INFEASIBLE, NO_SOLUTION)
# what a Result's bound ranges over (stats["bound_scope"])
EVERY_PLACEMENT = "every placement"        # any placement and layout of the rows
GIVEN_PLACEMENT = "the given placement"    # layouts for the plan's own placement only


@dataclass(frozen=True)
class Plan:
    """Placement + layout, with the objective it was scored under and its score.

    Attributes
    ----------
    placement
        Rank of every expert of every layer (:class:`~rp_opt.solution.Placement`).
    layout
        Row and DP slot of every sample (:class:`~rp_opt.solution.Layout`); R is
        :attr:`num_rows`.
    objective
        Name of the objective ``score`` is under.
    score
        Lexicographic score under ``objective``, primary level first.
    stats
        Figures of the solver that made the plan (e.g. ``solver``); not compared by ``==``.
    """

    placement: Placement
    layout: Layout
    objective: str
    score: tuple[float, ...]
    stats: dict = field(default_factory=dict, compare=False)

    # == compares placement, layout, objective and score (by content); like them, unhashable
    __hash__ = None

    @property
    def num_rows(self) -> int:
        """Rows R of the layout."""
        return self.layout.num_rows

    def to_dict(self) -> dict:
        """The plan-file form (README, "Plan files")."""
        return {
            "placement": self.placement.to_list(),
            "rows": self.layout.to_rows(),
            "objective": self.objective,
            "score": [float(x) for x in self.score],
            "stats": _jsonable(self.stats),
        }


def lex_better(a: tuple, b: tuple, rel: float = 1e-9) -> bool:
    """Lexicographic a < b of two scores with a relative tolerance per level (two sums of
    the same costs may differ in their last bits)."""
    for x, y in zip(a, b):
        tol = rel * max(1.0, abs(x), abs(y))
        if x < y - tol:
            return True
        if x > y + tol:
            return False
    return False


def relative_gap(score: float | None, bound: float | None) -> float | None:
    """(score - bound) / |score|, the MIP convention; 0 when both are 0; None when either is
    missing or not finite (an infinite score gave nan, which read as a gap of 0)."""
    if score is None or bound is None or not (math.isfinite(score) and math.isfinite(bound)):
        return None
    if score == 0:
        return 0.0 if bound >= 0 else None
    return max(0.0, (score - bound) / abs(score))


@dataclass(frozen=True)
class Result:
    """Outcome of any solver.

    Attributes
    ----------
    status
        One of ``optimal``, ``feasible``, ``infeasible``, ``no_solution``.
    plan
        Best plan found (None when none was).
    score
        Lexicographic score of ``plan`` (empty when no plan).
    bound
        Proven lower bound on the primary level, or None, over the plans the solver
        chooses among: ``stats["bound_scope"]`` says which, :data:`EVERY_PLACEMENT`
        (``heuristic``, ``joint``: any placement and layout) or :data:`GIVEN_PLACEMENT`
        (``exact``, and ``auto`` when it ran the exact model: layouts for the plan's own
        placement, so a plan with another placement may score below it). ``summary()``
        says so.
    gap
        Relative gap of the primary level to ``bound``.
    seconds
        Wall time of the solve.
    solver
        Name of the solver that produced the result.
    stats
        Solver-specific figures (nodes, sweeps, per-level bounds, ...).
    """

    status: str
    plan: Plan | None
    score: tuple[float, ...]
    bound: float | None
    seconds: float
    solver: str
    stats: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def gap(self) -> float | None:
        """(score - bound) / |score| of the primary level (:func:`relative_gap`): at least
        0, 0 when both are 0, None without a plan or a bound or when either is not finite."""
        return relative_gap(self.score[0] if self.score else None, self.bound)

    def status_text(self) -> str:
        """``status``, or ``status: reason`` when the stats give one (``stats["reason"]``:
        why there is no plan). One line for errors about a result without a plan."""
        why = self.stats.get("reason")
        return f"{self.status}: {why}" if why else self.status

    def summary(self) -> str:
        """A few human lines."""
        lines = [f"solver {self.solver}: {self.status} in {self.seconds:.3f} s"]
        if self.plan is None and isinstance(self.stats, dict) and self.stats.get("reason"):
            lines.append(f"  reason    {self.stats['reason']}")         # why there is no plan
        if self.plan is not None:
            lines.append(f"  rows      {self.plan.num_rows}")
            lines.append(f"  objective {self.plan.objective}")
            lines.append("  score     (" + ", ".join(f"{x:.6g}" for x in self.score) + ")")
        if self.bound is not None:
            stats = self.stats if isinstance(self.stats, dict) else {}
            notes = [f"from: {stats['bound_from']}"] if stats.get("bound_from") else []
            if stats.get("bound_scope") == GIVEN_PLACEMENT:
                notes.append("for this placement only")
            lines.append(f"  bound     {self.bound:.6g}" + (f" ({'; '.join(notes)})" if notes else ""))
        if self.gap is not None:
            lines.append(f"  gap       {100 * self.gap:.4f} %")
        if isinstance(self.stats, dict) and self.stats.get("interrupted"):
            lines.append("  interrupted (Ctrl-C): the best plan found until then")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "status": self.status,
            "solver": self.solver,
            "objective": self.plan.objective if self.plan else None,
            "score": [float(x) for x in self.score],
            "bound": self.bound,
            "bound_scope": self.stats.get("bound_scope") if isinstance(self.stats, dict) else None,
            "gap": self.gap,
            "num_rows": self.plan.num_rows if self.plan else None,
            "seconds": self.seconds,
            "stats": _jsonable(self.stats),
        }


def _jsonable(value):
    """Convert numpy scalars/arrays inside dicts and lists to plain Python (also what an
    object array's ``tolist()`` leaves as numpy values)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist()) if value.dtype == object else value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def strict_json(value):
    """``value`` ready for strict JSON: numpy values as Python ones, tuples as lists, keys
    as strings, and every NaN or infinity as None.

    ``json.dump`` writes a non-finite float as a bare ``NaN`` or ``Infinity``, which is not
    JSON: strict readers (``jq``, JavaScript's ``JSON.parse``, most languages' parsers)
    reject the whole document. Every ``--json`` output and benchmark JSON file goes
    through here.

    Parameters
    ----------
    value
        Dicts, lists, tuples, numpy arrays and scalars, and plain values, nested.

    Returns
    -------
    object
        The same structure with only JSON's own types where it had numbers and containers
        (other objects are left as they are).
    """
    def finite(item):
        if isinstance(item, dict):
            return {key: finite(v) for key, v in item.items()}
        if isinstance(item, list):
            return [finite(v) for v in item]
        if isinstance(item, float) and not math.isfinite(item):
            return None
        return item

    return finite(_jsonable(value))
