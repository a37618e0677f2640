"""Exact placement of one layer (MILP, HiGHS through Pyomo; CP-SAT as a second backend),
and a driver that solves every layer of a window.

Model of one layer (symbols of MODEL.md, k = E/P)::

    x[e,p] in {0,1}            expert e on rank p
    sum_p x[e,p] = 1           every expert on one rank
    sum_e x[e,p] = k           E/P experts per rank
    + the objective's variables and constraints (rp_opt.placement.objectives)

Symmetry: for an objective invariant under relabelling ranks (``aggregate``, ``rows``),
with experts in a fixed order e_0, e_1, ... (decreasing load), x[e_j, p] = 0 for p > j.
It keeps an optimum: relabel any solution's ranks in the order in which e_0, e_1, ... first
meet them; then e_j sits on one of the first j+1 labels. ``migration`` counts experts
leaving their *current* labelled rank, so it is not symmetric and gets no such cut (its
feasible set is closed under relabelling, so its optimum already is the best over all
relabellings).

The warm start (LPT + local search, relabelled canonically when symmetry is broken) is
scored against the objective's analytic bound first; when it already closes the gap the
MILP is not built at all.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

from .._cpsat import solve
from .._highs import import_pyomo, silence_banner, solve_pyomo
from ..errors import InputError, number, require
from ..result import FEASIBLE, NO_SOLUTION, OPTIMAL, relative_gap
from ..solution import Layout, Placement
from ..window import Instance, Window
from .local_search import local_search_ranks
from .lpt import lpt_ranks
from .objectives import LayerProblem, get_placement_objective

silence_banner()  # the banner would go to stdout (see rp_opt._highs)

log = logging.getLogger("rp_opt")

BACKENDS = ("highs", "cpsat")
# seconds to build one term (a load coefficient times x[e,p]) of a layer's model, measured
# on the 2-core machine with the rows objective of a 1000-sample window (59k terms): 6.4 us
# with Pyomo (HiGHS), 2.0-2.7 us with CP-SAT's model API
BUILD_SECONDS_PER_TERM = {"highs": 6.5e-6, "cpsat": 2.7e-6}


def build_seconds(problem: LayerProblem, backend: str) -> float:
    """About how long the model of ``problem`` takes to build with ``backend``: one term per
    non-zero load (of every row group for ``rows``) and rank (:data:`BUILD_SECONDS_PER_TERM`)."""
    loads = problem.cell_load if problem.cell_load is not None else problem.load
    return float(np.count_nonzero(loads)) * problem.num_ranks * BUILD_SECONDS_PER_TERM[backend]


@dataclass(frozen=True)
class LayerResult:
    """Outcome of one layer's exact solve.

    Attributes
    ----------
    ranks
        [E] best assignment found (the warm start when nothing better was found).
    value
        Its objective value.
    bound
        Proven lower bound (max of the analytic bound and the solver's).
    status
        ``optimal`` (gap within ``mip_gap``) or ``feasible``.
    seconds
        Wall time, model building included.
    stats
        ``backend``, ``solved_by`` (``bound`` when the warm start was proven by the
        analytic bound, else the backend), ``warm_value``, ``termination``.
    """

    ranks: np.ndarray
    value: float
    bound: float
    status: str
    seconds: float
    stats: dict = field(default_factory=dict)

    @property
    def gap(self) -> float | None:
        return relative_gap(self.value, self.bound)


def canonical_ranks(ranks: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Relabel ranks in the order in which the experts ``order[0], order[1], ...`` meet
    them (the symmetry-broken form: ``order[j]`` ends up on a rank <= j)."""
    ranks = np.asarray(ranks, dtype=np.int64)
    seq = ranks[order]
    first = np.full(int(ranks.max()) + 1, seq.size, dtype=np.int64)
    np.minimum.at(first, seq, np.arange(seq.size))
    new_label = np.empty_like(first)
    new_label[np.argsort(first, kind="stable")] = np.arange(first.size)
    return new_label[ranks]


def _round_bound(bound: float, integral: bool) -> float:
    return float(math.ceil(bound - 1e-6)) if integral else float(bound)


def _status(value: float, bound: float, mip_gap: float) -> str:
    # an infinite value (a start that breaks the objective's side constraint) proves nothing;
    gap = relative_gap(value, bound)          # None when the value is infinite
    return OPTIMAL if gap is not None and gap <= mip_gap + 1e-12 else FEASIBLE


def solve_layer(problem: LayerProblem, objective="aggregate", *, time_limit: float = 10.0,
                mip_gap: float = 1e-3, warm_start: np.ndarray | None = None,
                backend: str = "highs", tolerance: float = 0.0, threads: int | None = None,
                prove_with_bound: bool = True, polish: bool | None = None,
                build_limit: float | None = None) -> LayerResult:
    """Solve one layer's placement exactly (or to ``mip_gap`` within ``time_limit``).

    Parameters
    ----------
    problem
        The layer's data; ``migration`` needs ``current``, ``rows`` needs ``cell_load``.
    objective
        Name of a registered placement objective (or the object).
    time_limit
        Seconds for the model's build and the solver, a finite number > 0 or None (no
        limit); per stage for ``migration``, which first solves ``aggregate`` to find the
        best max load. The build itself does not stop at the limit (see ``build_limit``).
    mip_gap
        Relative gap at which the solve stops and reports ``optimal`` (finite, >= 0).
    warm_start
        [E] assignment to start from; default LPT + local search on the aggregate loads.
    backend
        ``"highs"`` (Pyomo + appsi HiGHS) or ``"cpsat"`` (OR-Tools CP-SAT, integer data).
    tolerance
        ``migration``: allowed relative excess of the max rank load over the best found
        (finite, >= 0).
    threads
        Solver threads (CP-SAT workers); default: the machine's cores (at most 8).
    prove_with_bound
        Return the warm start without building a model when the analytic bound already
        proves it (default). False always runs the solver (tests of the model itself).
    polish
        Improve the warm start by swap local search on the aggregate load (default: for
        ``aggregate`` only, and not for a given ``warm_start`` when ``prove_with_bound`` is
        False, so tests can start the solver from plain LPT).
    build_limit
        Seconds the model's build may take (None: any): a model that would take longer
        (:func:`build_seconds`; the build does not stop at the time limit) is not built, and
        the warm start comes back with the analytic bound (``stats["solved_by"] = "start"``).

    Returns
    -------
    LayerResult
    """
    start = time.perf_counter()
    obj = get_placement_objective(objective)
    require(backend in BACKENDS, "backend", f"must be one of {', '.join(BACKENDS)}, got {backend!r}")
    time_limit = number("time_limit", time_limit, above=0, none=True, hint="seconds; None: no limit")
    mip_gap = number("mip_gap", mip_gap, low=0)
    tolerance = number("tolerance", tolerance, low=0)
    for need in obj.needs:
        require(getattr(problem, need) is not None, need, f"the {obj.name!r} objective needs it")
    stats: dict = {"backend": backend}

    if obj.name == "migration" and problem.load_cap is None:
        # stage 1: the best aggregate load; stage 2: fewest moves within (1 + tol) of it
        agg = solve_layer(problem, "aggregate", time_limit=time_limit, mip_gap=mip_gap,
                          warm_start=warm_start, backend=backend, threads=threads,
                          prove_with_bound=prove_with_bound)
        cap = agg.value * (1.0 + tolerance)
        if problem.integral:
            cap = math.floor(cap + 1e-9)
        problem = problem.with_cap(cap)
        stats["aggregate"] = {"value": agg.value, "bound": agg.bound, "status": agg.status}
        if warm_start is None:
            warm_start = _relabel_towards(problem.current, agg.ranks, problem.num_ranks)

    load = problem.load
    if polish is None:
        polish = obj.name == "aggregate" and (prove_with_bound or warm_start is None)
    if warm_start is None:
        warm_start = lpt_ranks(load[None, :], problem.num_ranks)[0]
    if polish:
        # the cheap "max" search, then the all-pairs search: one layer, O(E^2) per sweep
        warm_start = local_search_ranks(load[None, :], np.asarray(warm_start)[None, :], problem.num_ranks)[0]
        warm_start = local_search_ranks(load[None, :], warm_start[None, :], problem.num_ranks, moves="all")[0]
    warm = np.asarray(warm_start, dtype=np.int64)
    require(warm.shape == load.shape, "warm_start", f"must have shape {load.shape}, got {warm.shape}")
    require(bool(np.all(np.bincount(warm, minlength=problem.num_ranks) == problem.per_rank)), "warm_start",
            "must hold E/P experts on every rank")
    order = np.argsort(-load, kind="stable")  # the fixed expert order of the symmetry cut
    if obj.symmetric:
        warm = canonical_ranks(warm, order)
    warm_value = obj.evaluate(problem, warm)
    bound = _round_bound(obj.lower_bound(problem), problem.integral)
    stats["warm_value"] = warm_value
    stats["analytic_bound"] = bound

    best, value = warm, warm_value
    if prove_with_bound and _status(value, bound, mip_gap) == OPTIMAL:
        stats["solved_by"] = "bound"
        return LayerResult(best, value, bound, OPTIMAL, time.perf_counter() - start, stats)

    if build_limit is not None and build_seconds(problem, backend) > build_limit:
        stats["solved_by"] = "start"
        stats["model"] = (f"not built: about {build_seconds(problem, backend):.2g} s to build, "
                          f"{build_limit:.2g} s for it")
        return LayerResult(best, value, min(bound, value), _status(value, bound, mip_gap),
                           time.perf_counter() - start, stats)
    if backend == "highs":
        ranks, val, solver_bound, termination = _solve_highs(problem, obj, order, warm, warm_value, time_limit, mip_gap)
    else:
        ranks, val, solver_bound, termination = _solve_cpsat(problem, obj, order, warm, time_limit, mip_gap, threads)
    stats["solved_by"] = backend
    stats["termination"] = termination
    if ranks is not None:
        val = obj.evaluate(problem, ranks)  # rescore from the definition, not the solver
        if val < value:
            best, value = ranks, val
    if solver_bound is not None and np.isfinite(solver_bound):
        bound = max(bound, _round_bound(solver_bound, problem.integral))
    bound = min(bound, value)  # a bound above the incumbent is rounding noise
    status = _status(value, bound, mip_gap) if np.isfinite(value) else NO_SOLUTION
    return LayerResult(best, value, bound, status, time.perf_counter() - start, stats)


def _relabel_towards(current: np.ndarray, ranks: np.ndarray, num_ranks: int) -> np.ndarray:
    from ..materialise import relabel

    cur = Placement(np.asarray(current)[None, :], num_ranks)
    return relabel(cur, Placement(np.asarray(ranks)[None, :], num_ranks)).ranks[0]


def _left(time_limit: float | None, started: float) -> float | None:
    """What is left of ``time_limit`` after the model's build (which began at ``started``):
    the solver's own limit, above 0 (a spent limit gives it a millisecond)."""
    return None if time_limit is None else max(float(time_limit) - (time.perf_counter() - started), 1e-3)


def _solve_highs(problem, obj, order, warm, warm_value, time_limit, mip_gap):
    import_pyomo()  # a Ctrl-C during the first import leaves no half-made Pyomo behind
    import pyomo.environ as pyo
    from pyomo.contrib.appsi.solvers import Highs
    from pyomo.contrib.appsi.base import TerminationCondition

    started = time.perf_counter()  # the build (Pyomo's first import, 0.9 s, is the process's)

    num_experts, num_ranks, per_rank = problem.num_experts, problem.num_ranks, problem.per_rank
    m = pyo.ConcreteModel()
    m.E = pyo.RangeSet(0, num_experts - 1)
    m.P = pyo.RangeSet(0, num_ranks - 1)
    m.x = pyo.Var(m.E, m.P, within=pyo.Binary)
    # sum_p x[e,p] = 1: every expert on one rank
    m.one_rank = pyo.Constraint(m.E, rule=lambda m, e: pyo.quicksum(m.x[e, p] for p in m.P) == 1)
    # sum_e x[e,p] = E/P: every rank holds E/P experts
    m.per_rank = pyo.Constraint(m.P, rule=lambda m, p: pyo.quicksum(m.x[e, p] for e in m.E) == per_rank)
    if obj.symmetric:
        # symmetry: x[order_j, p] = 0 for p > j
        for j, e in enumerate(order[:num_ranks - 1]):
            for p in range(j + 1, num_ranks):
                m.x[int(e), p].fix(0)
    m.obj = pyo.Objective(expr=obj.build_pyomo(m, problem), sense=pyo.minimize)
    for e in range(num_experts):
        for p in range(num_ranks):
            m.x[e, p].set_value(1 if warm[e] == p else 0, skip_validation=True)
    _warm_aux(m, problem, obj, warm, warm_value)

    opt = Highs()
    # HiGHS's own log goes to a pyomo logger; at DEBUG it shows only with -vv
    opt.config.log_level = logging.DEBUG
    opt.config.load_solution = False
    opt.config.warmstart = True
    if time_limit is not None:
        # appsi hands the model to HiGHS inside solve: that, too, counts against the limit,
        # which is taken as it stands here
        opt.config.time_limit = _left(time_limit, started)
    opt.config.mip_gap = float(mip_gap)
    opt.highs_options = {"threads": 1, "output_flag": False}
    res = solve_pyomo(opt, m)
    term = str(res.termination_condition).split(".")[-1]
    ranks = None
    if res.best_feasible_objective is not None:
        res.solution_loader.load_vars()
        x = np.array([[pyo.value(m.x[e, p]) for p in range(num_ranks)] for e in range(num_experts)])
        ranks = np.argmax(x, axis=1)
        if not np.all(np.bincount(ranks, minlength=num_ranks) == per_rank):  # pragma: no cover
            ranks = None
    bound = res.best_objective_bound
    if res.termination_condition == TerminationCondition.infeasible:  # pragma: no cover - warm start is feasible
        raise InputError("placement", "the exact model is infeasible")
    return ranks, None, bound, term


def _warm_aux(m, problem, obj, warm, warm_value):
    """Values of the objective's own variables for the warm start (a complete MIP start)."""
    from .objectives import rank_totals

    if hasattr(m, "z"):
        m.z.set_value(float(warm_value), skip_validation=True)
    if hasattr(m, "y"):
        per_cell = rank_totals(problem.cell_load, warm, problem.num_ranks).max(axis=1)
        for c, v in enumerate(per_cell):
            m.y[c].set_value(float(v), skip_validation=True)


def _solve_cpsat(problem, obj, order, warm, time_limit, mip_gap, threads):
    from ortools.sat.python import cp_model

    started = time.perf_counter()
    require(problem.integral, "backend", "cpsat needs integer loads")
    num_experts, num_ranks, per_rank = problem.num_experts, problem.num_ranks, problem.per_rank
    model = cp_model.CpModel()
    x = [[model.NewBoolVar(f"x{e}_{p}") for p in range(num_ranks)] for e in range(num_experts)]
    for e in range(num_experts):
        # sum_p x[e,p] = 1
        model.AddExactlyOne(x[e])
    for p in range(num_ranks):
        # sum_e x[e,p] = E/P
        model.Add(sum(x[e][p] for e in range(num_experts)) == per_rank)
    if obj.symmetric:
        # symmetry: x[order_j, p] = 0 for p > j
        for j, e in enumerate(order[:num_ranks - 1]):
            for p in range(j + 1, num_ranks):
                model.Add(x[int(e)][p] == 0)
    model.Minimize(obj.build_cpsat(model, x, problem))
    for e in range(num_experts):
        for p in range(num_ranks):
            model.AddHint(x[e][p], int(warm[e] == p))
    solver = cp_model.CpSolver()
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = _left(time_limit, started)
    solver.parameters.relative_gap_limit = float(mip_gap)
    solver.parameters.num_workers = int(threads or min(8, os.cpu_count() or 1))
    status = solve(solver, model)
    term = solver.StatusName(status)
    ranks = None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        ranks = np.array([[solver.Value(x[e][p]) for p in range(num_ranks)] for e in range(num_experts)]).argmax(axis=1)
    bound = solver.BestObjectiveBound() if status != cp_model.UNKNOWN or ranks is not None else None
    return ranks, None, bound, term


# ---------------------------------------------------------------------------------------
# All layers
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PlacementResult:
    """Exact placement of every layer.

    Attributes
    ----------
    placement
        The best placement found.
    value, bound, gap
        [L] objective value, proven lower bound and relative gap of every layer.
    statuses
        [L] ``rp_opt.result`` status of every layer.
    seconds
        [L] wall time of every layer.
    objective
        The placement objective's name.
    stats
        Per-layer solver stats (list).
    """

    placement: Placement
    value: np.ndarray
    bound: np.ndarray
    gap: np.ndarray
    statuses: tuple[str, ...]
    seconds: np.ndarray
    objective: str
    stats: list = field(default_factory=list)

    @property
    def status(self) -> str:
        """``optimal`` when every layer is, ``no_solution`` when one has none, else ``feasible``."""
        if any(s == NO_SOLUTION for s in self.statuses):
            return NO_SOLUTION
        return OPTIMAL if all(s == OPTIMAL for s in self.statuses) else FEASIBLE

    def to_dict(self) -> dict:
        return {"objective": self.objective, "status": self.status, "placement": self.placement.to_list(),
                "value": self.value.tolist(), "bound": self.bound.tolist(), "gap": self.gap.tolist(),
                "statuses": list(self.statuses), "seconds": self.seconds.tolist()}


def cell_loads(window: Window, layout: Layout, num_shards: int, layer: int) -> np.ndarray:
    """[R*G, E]: tokens each (row, shard) group sends to each expert at ``layer``."""
    require(layout.cell_of.size == window.num_samples, "layout", f"places {layout.cell_of.size} samples, the window has N={window.num_samples}")
    require(layout.num_slots % num_shards == 0, "layout", f"G={num_shards} does not divide its D={layout.num_slots} slots")
    group = layout.row_of * num_shards + layout.slot_of // (layout.num_slots // num_shards)
    out = np.zeros((layout.num_rows * num_shards, window.num_experts), dtype=np.int64)
    np.add.at(out, group, window.demand[:, layer, :].astype(np.int64))
    return out


def exact_placement(data, num_ranks: int | None = None, objective="aggregate", *,
                    current: Placement | None = None, layout: Layout | None = None,
                    num_shards: int | None = None, time_limit: float = 10.0, mip_gap: float = 1e-3,
                    tolerance: float = 0.0, backend: str = "highs", warm_start: Placement | None = None,
                    threads: int | None = None, callback=None,
                    total_time_limit: float | None = None) -> PlacementResult:
    """Solve every layer's placement with :func:`solve_layer`.

    Parameters
    ----------
    data
        An :class:`Instance` (P and G from its cluster) or a :class:`Window`.
    num_ranks
        P (default: the instance's).
    objective
        ``aggregate``, ``migration``, ``rows`` or another registered name.
    current
        The current placement (``migration``).
    layout
        The layout (``rows``).
    num_shards
        G for ``rows`` (default: the instance's, else 1).
    time_limit
        Seconds per layer at most.
    total_time_limit
        Seconds for all layers (None: no limit beyond ``time_limit`` per layer): each layer
        gets at most an equal share of the time left, so a layer that ends early leaves
        its time to the next ones. A layer whose share runs out returns its best
        placement (the warm start at least) with its bound.
    mip_gap, tolerance, backend, threads
        As in :func:`solve_layer`.
    warm_start
        Placement to start from (default: LPT + local search).
    callback
        Called as ``callback(layer, LayerResult)`` after every layer (progress).
    """
    if isinstance(data, Instance):
        window = data.window
        num_ranks = num_ranks or data.cluster.ep
        num_shards = num_shards or data.cluster.edp
    else:
        window = data
    require(num_ranks is not None, "num_ranks", "is needed with a bare window")
    num_shards = num_shards or 1
    obj = get_placement_objective(objective)
    load = window.expert_load()
    if "current" in obj.needs:
        require(current is not None, "current", f"the {obj.name!r} objective needs the current placement")
    if "cell_load" in obj.needs:
        require(layout is not None, "layout", f"the {obj.name!r} objective needs a layout")
    if current is not None:
        require(current.ranks.shape == load.shape and current.num_ranks == num_ranks, "current",
                f"placement {current.ranks.shape} on P={current.num_ranks} does not match (L, E) = {load.shape}, P={num_ranks}")
    if warm_start is not None:
        require(warm_start.ranks.shape == load.shape, "warm_start", f"shape {warm_start.ranks.shape} does not match {load.shape}")
        warm = warm_start.ranks
    else:
        warm = local_search_ranks(load, lpt_ranks(load, num_ranks), num_ranks)
    results = []
    time_limit = number("time_limit", time_limit, above=0, none=True, hint="seconds; None: no limit")
    total_time_limit = number("total_time_limit", total_time_limit, above=0, none=True,
                              hint="seconds; None: time_limit per layer only")
    start = time.perf_counter()
    overrun = []  # per layer: seconds past its limit (the model's build, the solver's overshoot)
    stages = 2 if obj.name == "migration" else 1  # solve_layer's two stages (no load cap here)
    for l in range(window.num_layers):
        limit = time_limit
        if total_time_limit is not None:
            # an equal share of what is left, less what each layer took beyond its limit so
            # far (a Pyomo build is about 0.1 s: 48 layers ran 15.4 s for 10 s without it).
            # A solver needs a limit above 0: the last layers of a spent budget get a
            # millisecond, and keep their warm start
            left = total_time_limit - (time.perf_counter() - start)
            layers_left = window.num_layers - l
            beyond = float(np.mean(overrun)) if overrun else 0.0
            share = max(left / layers_left - beyond, 1e-3)
            # solve_layer's limit holds per stage: migration solves aggregate first, and
            # would otherwise take twice its share and starve the next layer
            share /= stages
            limit = share if limit is None else min(limit, share)
        problem = LayerProblem(
            load[l], num_ranks,
            current=None if current is None else current.ranks[l],
            cell_load=cell_loads(window, layout, num_shards, l) if "cell_load" in obj.needs else None,
        )
        # migration derives its own warm start from the aggregate solve
        # with a budget for all layers, a model whose build would take more than half the
        # layer's share is not built (a 1000-sample window's rows models took 19 s for 2 s)
        res = solve_layer(problem, obj, time_limit=limit, mip_gap=mip_gap,
                          warm_start=None if obj.name == "migration" and warm_start is None else warm[l],
                          backend=backend, tolerance=tolerance, threads=threads,
                          build_limit=None if total_time_limit is None else 0.5 * limit)
        res.stats["time_limit"] = limit  # this layer's share per stage (None: no limit)
        if limit is not None:
            overrun.append(max(res.seconds - stages * limit, 0.0))
        log.debug("placement layer %d: %s value %g bound %g (%.3f s)", l, res.status, res.value, res.bound, res.seconds)
        if callback is not None:
            callback(l, res)
        results.append(res)
    ranks = np.stack([r.ranks for r in results])
    value = np.array([r.value for r in results])
    bound = np.array([r.bound for r in results])
    gap = np.array([r.gap if r.gap is not None else np.nan for r in results])
    return PlacementResult(Placement(ranks, num_ranks), value, bound, gap, tuple(r.status for r in results),
                           np.array([r.seconds for r in results]), obj.name, [r.stats for r in results])
