"""Registry of planners (solvers that return a full plan).

A planner is a function ``(instance, *, objective, time_limit, seed, warm_start, **options)
-> Result``. Register it with :func:`register_solver`; ``rp-opt plan --solver NAME`` and
:class:`rp_opt.Planner` find it by name. Modules that define planners are imported lazily
by :func:`get_solver`, so importing rp_opt stays cheap.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Callable

from .errors import InputError, require
from .window import Instance

_SOLVERS: dict[str, Callable] = {}
_DESCRIPTIONS: dict[str, str] = {}

# modules that register planners when imported (name -> module)
_PROVIDERS = {
    "baseline": "rp_opt.packing.baseline",
    "kk": "rp_opt.packing.baseline",
    "lpt-ffd": "rp_opt.packing.baseline",
    "exact": "rp_opt.packing.exact",
    "joint": "rp_opt.packing.exact",
    "heuristic": "rp_opt.packing.heuristic",
    "auto": "rp_opt.plan",
}


def register_solver(name: str, description: str = ""):
    """Decorator: make the planner available under ``name``.

    The registered planner checks that its first argument is an :class:`Instance` (one
    line naming ``instance`` otherwise) before it runs.
    """

    def wrap(func: Callable) -> Callable:
        @functools.wraps(func)
        def checked(instance, *args, **kwargs):
            require(isinstance(instance, Instance), "instance",
                    f"must be an Instance (window, cluster, cost model), got {type(instance).__name__}")
            return func(instance, *args, **kwargs)

        _SOLVERS[name] = checked
        _DESCRIPTIONS[name] = description or (func.__doc__ or "").strip().split("\n")[0]
        return checked

    return wrap


def get_solver(name: str) -> Callable:
    """The planner registered as ``name`` (importing its module on first use)."""
    if name not in _SOLVERS and name in _PROVIDERS:
        try:
            importlib.import_module(_PROVIDERS[name])
        except ModuleNotFoundError as exc:
            if not exc.name or not exc.name.startswith("rp_opt"):
                raise
    if name not in _SOLVERS:
        raise InputError("solver", f"unknown solver {name!r}; known: {', '.join(solver_names())}")
    return _SOLVERS[name]


def takes_placement(name: str) -> bool:
    """Whether the planner ``name`` packs for a placement it is given (a ``placement``
    argument), rather than choosing its own (the baselines' fixed rules, ``joint``)."""
    return "placement" in inspect.signature(get_solver(name)).parameters


def solver_names() -> list[str]:
    for module in set(_PROVIDERS.values()):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if not exc.name or not exc.name.startswith("rp_opt"):
                raise
    return sorted(_SOLVERS)


def plan_result(instance, placement, layout, objective, *, solver: str, seconds: float,
                status: str | None = None, bound: float | None = None, stats: dict | None = None,
                demand_by_rank=None):
    """Score a plan and wrap it in the common :class:`~rp_opt.result.Result`.

    ``bound`` defaults to the analytic bound of MODEL.md that holds for every placement
    and every layout of the same row count (so the gap is honest for any solver).
    """
    from .bounds import cost_bounds
    from .cost import layout_costs
    from .objectives import get_objective
    from .result import EVERY_PLACEMENT, FEASIBLE, Plan, Result

    objective = get_objective(objective)
    costs = layout_costs(instance, placement, layout, demand_by_rank)
    value = objective.evaluate(costs)
    analytic = cost_bounds(instance, layout.num_rows).objective(objective)[0]
    stats = dict(stats or {})
    if bound is None:
        stats.setdefault("bound_scope", EVERY_PLACEMENT)  # the analytic bound's (a caller's: its own)
    bound = analytic if bound is None else max(bound, analytic)
    stats.setdefault("analytic_bound", analytic)
    plan = Plan(placement, layout, objective.name, value, stats)
    # a bound meeting the primary proves only the primary level; later levels stay open,
    # so a solver that has not proven them reports `feasible`
    stats.setdefault("primary_proven", bool(bound >= value[0] * (1 - 1e-9)))
    status = FEASIBLE if status is None else status
    return Result(status, plan, value, bound, seconds, solver, stats)
