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

import importlib
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .._cpsat import solve
from .._highs import import_pyomo, silence_banner, solve_pyomo
from ..errors import MAX_WORKERS, InputError, integer, number, require, shown
from ..result import FEASIBLE, NO_SOLUTION, OPTIMAL, relative_gap
from ..solution import Layout, Placement, checked_ranks
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
# seconds per variable x[e,p] (its constraints, the warm start, reading the answer back) and
# per model (Pyomo's model and appsi's copy to HiGHS; CP-SAT's model and solver), measured
# with the aggregate objective and a 1 ms solver limit on the 2-core machine, E x P from
# 8 x 2 to 256 x 32: HiGHS 13-15 ms + 47 us per variable, CP-SAT 3 ms + 19 us. Without them a
# spent budget still built a model per layer (15 ms each for 16 x 8), 6.5 us per term guessed 0.8 ms
BUILD_SECONDS_PER_VARIABLE = {"highs": 4.7e-5, "cpsat": 1.9e-5}
BUILD_SECONDS_PER_MODEL = {"highs": 0.015, "cpsat": 0.004}
# seconds of a process's first import of a backend's modules, measured in rp-opt place on the
# 2-core machine: Pyomo 0.8-1.4 s (it loads scipy.stats when scipy is loaded), CP-SAT 0.2-0.5 s
IMPORT_SECONDS = {"highs": 1.0, "cpsat": 0.3}
_BACKEND_MODULE = {"highs": "pyomo.contrib.appsi.solvers", "cpsat": "ortools.sat.python.cp_model"}


def build_seconds(problem: LayerProblem, backend: str) -> float:
    """About how long the model of ``problem`` takes to build with ``backend``: a fixed cost
    per model, one per variable x[e,p] and one per term, a non-zero load (of every row group
    for ``rows``) times a rank (:data:`BUILD_SECONDS_PER_TERM` and the constants beside it).
    The backend's first import in the process is not included (:func:`import_seconds`)."""
    loads = problem.cell_load if problem.cell_load is not None else problem.load
    return (BUILD_SECONDS_PER_MODEL[backend]
            + problem.num_experts * problem.num_ranks * BUILD_SECONDS_PER_VARIABLE[backend]
            + float(np.count_nonzero(loads)) * problem.num_ranks * BUILD_SECONDS_PER_TERM[backend])


def import_seconds(backend: str) -> float:
    """About how long the first model of ``backend`` waits for its modules to be imported:
    :data:`IMPORT_SECONDS` until the process has imported them, then 0."""
    return 0.0 if _BACKEND_MODULE[backend] in sys.modules else IMPORT_SECONDS[backend]


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
        Wall time, model building (and a first import of the backend) included.
    stats
        ``backend``, ``solved_by`` (``bound`` when the warm start was proven by the
        analytic bound, ``start`` when the model was not built, else the backend),
        ``warm_value``, ``termination``; ``import_seconds`` when this call imported the
        backend's modules, ``highs_restart`` when HiGHS handed back a solution worse than
        the objective it reported and was run again without the warm start.
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


HIGHS_LARGEST_LOAD = 1e6
"""The largest load the HiGHS layer model sees: larger loads are scaled down (a model
with coefficients of 1e12 got a wrong proof; real token loads are up to about 1e6)."""
HIGHS_BOUND_TOLERANCE = 1e-6
"""HiGHS's bound is lowered by this fraction of it before use: its MIP tolerances leave it
up to a few 1e-9 of itself above the true optimum (2190167361 against 2190167354). A
HiGHS proof is "optimal" within ``mip_gap`` plus this fraction."""


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
        Relative gap at which the solve stops and reports ``optimal``, in [0, 1) (a gap of
        1 or more holds for every placement and would prove nothing). HiGHS's bound is
        lowered by :data:`HIGHS_BOUND_TOLERANCE` of itself (its own tolerances), so its
        ``optimal`` means within ``mip_gap`` + 1e-6.
    warm_start
        [E] assignment to start from (E/P experts on every rank); default LPT + local
        search on the aggregate loads.
    backend
        ``"highs"`` (Pyomo + appsi HiGHS) or ``"cpsat"`` (OR-Tools CP-SAT, integer data).
    tolerance
        ``migration``: allowed relative excess of the max rank load over the best found
        (finite, >= 0).
    threads
        Solver threads (CP-SAT workers), an integer in [1, MAX_WORKERS] or None: the
        machine's cores (at most 8). HiGHS runs on one thread.
    prove_with_bound
        Return the warm start without building a model when the analytic bound already
        proves it (default). False always runs the solver (tests of the model itself).
    polish
        Improve the warm start by swap local search on the aggregate load (default: for
        ``aggregate`` only, and not for a given ``warm_start`` when ``prove_with_bound`` is
        False, so tests can start the solver from plain LPT).
    build_limit
        Seconds the model's build may take (None: any): a model that would take longer
        (:func:`build_seconds`, plus :func:`import_seconds` while the backend's modules are
        not imported; the build does not stop at the time limit) is not built, and the warm
        start comes back with the analytic bound (``stats["solved_by"] = "start"``).
        ``stats["import_seconds"]``: the time this call spent importing the backend, which
        ``time_limit`` does not cover.

    Returns
    -------
    LayerResult
    """
    start = time.perf_counter()
    obj = get_placement_objective(objective)
    time_limit = number("time_limit", time_limit, above=0, none=True, hint="seconds; None: no limit")
    mip_gap, tolerance, threads = _solver_args(backend, mip_gap, tolerance, threads)
    for need in obj.needs:
        require(getattr(problem, need) is not None, need, f"the {obj.name!r} objective needs it")
    stats: dict = {"backend": backend}

    if obj.name == "migration" and problem.load_cap is None:
        # stage 1: the best aggregate load; stage 2: fewest moves within (1 + tol) of it
        agg = solve_layer(problem, "aggregate", time_limit=time_limit, mip_gap=mip_gap,
                          warm_start=warm_start, backend=backend, threads=threads,
                          prove_with_bound=prove_with_bound, build_limit=build_limit)
        cap = agg.value * (1.0 + tolerance)
        if problem.integral:
            cap = math.floor(cap + 1e-9)
        problem = problem.with_cap(cap)
        stats["aggregate"] = {"value": agg.value, "bound": agg.bound, "status": agg.status}
        if "import_seconds" in agg.stats:
            stats["import_seconds"] = agg.stats["import_seconds"]
            if build_limit is not None:  # the import's allowance is spent
                build_limit = max(build_limit - agg.stats["import_seconds"], 0.0)
        if warm_start is None:
            warm_start = _relabel_towards(problem.current, agg.ranks, problem.num_ranks)

    load = problem.load
    if polish is None:
        polish = obj.name == "aggregate" and (prove_with_bound or warm_start is None)
    if warm_start is None:
        warm_start = lpt_ranks(load[None, :], problem.num_ranks)[0]
    else:  # before the polish, which would name its own argument
        _check_warm(warm_start, problem)
    if polish:
        # the cheap "max" search, then the all-pairs search: one layer, O(E^2) per sweep
        warm_start = local_search_ranks(load[None, :], np.asarray(warm_start)[None, :], problem.num_ranks)[0]
        warm_start = local_search_ranks(load[None, :], warm_start[None, :], problem.num_ranks, moves="all")[0]
    warm = np.asarray(warm_start, dtype=np.int64)
    order = np.argsort(-load, kind="stable")  # the fixed expert order of the symmetry cut
    if obj.symmetric:
        warm = canonical_ranks(warm, order)
    warm_value = obj.evaluate(problem, warm)
    # a value that is a whole number (integer loads, or an objective that counts): its
    # bounds round up
    integral = problem.integral or obj.counts
    bound = _round_bound(obj.lower_bound(problem), integral)
    stats["warm_value"] = warm_value
    stats["analytic_bound"] = bound

    best, value = warm, warm_value
    if prove_with_bound and _status(value, bound, mip_gap) == OPTIMAL:
        stats["solved_by"] = "bound"
        return LayerResult(best, value, bound, OPTIMAL, time.perf_counter() - start, stats)

    need, first_import = build_seconds(problem, backend), import_seconds(backend)
    if build_limit is not None and need + first_import > build_limit:
        stats["solved_by"] = "start"
        stats["model"] = (f"not built: about {need + first_import:.2g} s to build"
                          + (f" ({first_import:.2g} s of it the first import of {backend}'s modules)"
                             if first_import else "") + f", {build_limit:.2g} s for it")
        return LayerResult(best, value, min(bound, value), _status(value, bound, mip_gap),
                           time.perf_counter() - start, stats)
    if first_import:
        # the import is the process's, once; time_limit covers the build and the solver
        # (exact_placement charges it to the run)
        began = time.perf_counter()
        _import_backend(backend)
        stats["import_seconds"] = stats.get("import_seconds", 0.0) + time.perf_counter() - began
    if backend == "highs":
        ranks, val, solver_bound, termination = _solve_highs(problem, obj, order, warm, warm_value, time_limit,
                                                             mip_gap, stats)
    else:
        ranks, val, solver_bound, termination = _solve_cpsat(problem, obj, order, warm, time_limit, mip_gap, threads)
    stats["solved_by"] = backend
    stats["termination"] = termination
    if ranks is not None:
        val = obj.evaluate(problem, ranks)  # rescore from the definition, not the solver
        if val < value:
            best, value = ranks, val
    if solver_bound is not None and np.isfinite(solver_bound):
        bound = max(bound, _round_bound(solver_bound, integral))
    bound = min(bound, value)  # a bound above the incumbent is rounding noise
    # HiGHS's proof holds to its tolerances: its bound was lowered by HIGHS_BOUND_TOLERANCE
    # (relative), so "optimal" allows that much beyond mip_gap
    slack = HIGHS_BOUND_TOLERANCE if backend == "highs" else 0.0
    status = _status(value, bound, mip_gap + slack) if np.isfinite(value) else NO_SOLUTION
    return LayerResult(best, value, bound, status, time.perf_counter() - start, stats)


def check_mip_gap(value, field: str = "mip_gap", *, text: bool = False) -> float:
    """``value`` as a relative MIP gap in [0, 1), else a one-line :class:`InputError` on
    ``field`` (with ``text``, a string from the command line is read too). Every value of
    the relative gap (value - bound) / value of a placement is below 1 (its bound >= 0), so a
    limit of 1 or more would stop at the first placement and call it optimal."""
    try:
        out = number(field, value, low=0, text=text)
    except InputError:
        out = None
    if out is None or out >= 1:
        raise InputError(field, f"must be a number in [0, 1) (a relative gap), got {shown(value)}")
    return out


def _solver_args(backend: str, mip_gap, tolerance, threads) -> tuple:
    """The layer model's solver arguments, checked (one line naming the first bad one):
    ``mip_gap`` (:func:`check_mip_gap`), ``tolerance`` and ``threads`` as numbers."""
    require(backend in BACKENDS, "backend", f"must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return (check_mip_gap(mip_gap), number("tolerance", tolerance, low=0),
            integer("threads", threads, low=1, high=MAX_WORKERS, none=True,
                    hint="solver threads; None: the machine's cores"))


def _check_warm(warm_start, problem: LayerProblem) -> None:
    """:class:`InputError` on ``warm_start`` unless it is an [E] integer assignment with
    E/P experts on every rank."""
    checked_ranks(warm_start, problem.num_ranks, "warm_start", problem.load.shape)


def _import_backend(backend: str) -> None:
    if backend == "highs":
        import_pyomo()  # a Ctrl-C during the first import leaves no half-made Pyomo behind
    else:
        importlib.import_module(_BACKEND_MODULE["cpsat"])


def _relabel_towards(current: np.ndarray, ranks: np.ndarray, num_ranks: int) -> np.ndarray:
    from ..materialise import relabel

    cur = Placement(np.asarray(current)[None, :], num_ranks)
    return relabel(cur, Placement(np.asarray(ranks)[None, :], num_ranks)).ranks[0]


def _left(time_limit: float | None, started: float) -> float | None:
    """What is left of ``time_limit`` after the model's build (which began at ``started``):
    the solver's own limit, above 0 (a spent limit gives it a millisecond)."""
    return None if time_limit is None else max(float(time_limit) - (time.perf_counter() - started), 1e-3)


def _highs_scale(problem) -> float:
    """The factor that brings the layer's largest load down to :data:`HIGHS_LARGEST_LOAD`
    for the HiGHS model (1 when it is there already)."""
    largest = max(float(np.max(problem.load, initial=0.0)),
                  0.0 if problem.cell_load is None else float(np.max(problem.cell_load, initial=0.0)))
    return HIGHS_LARGEST_LOAD / largest if largest > HIGHS_LARGEST_LOAD else 1.0


def _solve_highs(problem, obj, order, warm, warm_value, time_limit, mip_gap, stats):
    """HiGHS on the layer's model: (ranks or None, None, a bound in the caller's units, the
    termination). The model gets the loads scaled down to :data:`HIGHS_LARGEST_LOAD` at
    most, and its bound is lowered by :data:`HIGHS_BOUND_TOLERANCE` (relative): HiGHS
    1.16 proved a wrong optimum at loads of 1e12 (20 % above the true one) and bounds a
    few units above it at loads of 1e9, within its own tolerances."""
    import_pyomo()  # imported already (solve_layer): a no-op
    import pyomo.environ as pyo

    started = time.perf_counter()  # the build
    scale = _highs_scale(problem)
    if scale != 1.0:
        stats["highs_scale"] = scale
        problem = problem.scaled(scale)
        if not obj.counts:
            warm_value = warm_value * scale
    # the model's values back in the caller's units
    unscale = 1.0 if obj.counts else 1.0 / scale

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

    res, ranks = _run_highs(m, problem, time_limit, started, mip_gap, warm_start=True)
    reported = res.best_feasible_objective
    if ranks is not None and reported is not None and \
            obj.evaluate(problem, ranks) > reported + 1e-6 * max(1.0, abs(reported)):
        # HiGHS (1.16) can prove an optimum in presolve (0 nodes) and still hand back the MIP
        # start as its solution: the migration repro of tests/test_place_audit2.py reported
        # 2 moves and loaded the start's 4. Solved again from scratch in the time left (a
        # HiGHS object of its own, so that no start of the first solve is kept)
        log.debug("HiGHS returned a solution worth %g for its objective %g: solving again without the start",
                  obj.evaluate(problem, ranks), reported)
        if time_limit is None or time.perf_counter() - started < time_limit:
            stats["highs_restart"] = True
            again, fresh = _run_highs(m, problem, time_limit, started, mip_gap, warm_start=False)
            if fresh is not None and obj.evaluate(problem, fresh) < obj.evaluate(problem, ranks):
                ranks = fresh
            if again.best_objective_bound is not None and (res.best_objective_bound is None or
                                                           again.best_objective_bound > res.best_objective_bound):
                res = again
    term = str(res.termination_condition).split(".")[-1]
    bound = res.best_objective_bound
    if bound is not None and np.isfinite(bound):
        bound = (bound - HIGHS_BOUND_TOLERANCE * abs(bound)) * unscale
    return ranks, None, bound, term


def _run_highs(m, problem, time_limit, started, mip_gap, warm_start: bool):
    """One HiGHS solve of the Pyomo model ``m`` (a new solver object), from the values of
    its variables when ``warm_start``: (Pyomo's results, the solution's [E] ranks or None)."""
    import pyomo.environ as pyo
    from pyomo.contrib.appsi.base import TerminationCondition
    from pyomo.contrib.appsi.solvers import Highs

    num_experts, num_ranks = problem.num_experts, problem.num_ranks
    opt = Highs()
    # HiGHS's own log goes to a pyomo logger; at DEBUG it shows only with -vv
    opt.config.log_level = logging.DEBUG
    opt.config.load_solution = False
    opt.config.warmstart = warm_start
    if time_limit is not None:
        # appsi hands the model to HiGHS inside solve: that, too, counts against the limit,
        # which is taken as it stands here
        opt.config.time_limit = _left(time_limit, started)
    opt.config.mip_gap = float(mip_gap)
    opt.highs_options = {"threads": 1, "output_flag": False}
    res = solve_pyomo(opt, m)
    if res.termination_condition == TerminationCondition.infeasible:  # pragma: no cover - warm start is feasible
        raise InputError("placement", "the exact model is infeasible")
    ranks = None
    if res.best_feasible_objective is not None:
        res.solution_loader.load_vars()
        x = np.array([[pyo.value(m.x[e, p]) for p in range(num_ranks)] for e in range(num_experts)])
        ranks = np.argmax(x, axis=1)
        if not np.all(np.bincount(ranks, minlength=num_ranks) == problem.per_rank):  # pragma: no cover
            ranks = None
    return res, ranks


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
    require(layout.cell_of.size == window.num_samples, "layout",
            f"places {layout.cell_of.size} samples, the window has N={window.num_samples}")
    require(layout.num_slots % num_shards == 0, "layout",
            f"G={num_shards} does not divide its D={layout.num_slots} slots")
    group = layout.row_of * num_shards + layout.slot_of // (layout.num_slots // num_shards)
    out = np.zeros((layout.num_rows * num_shards, window.num_experts), dtype=np.int64)
    # samples sorted by group, each group's rows summed at once (np.add.at took 1.2 s for
    # the 48 layers of a 16384-sample window, outside place's time limit)
    order = np.argsort(group, kind="stable")
    present, starts = np.unique(group[order], return_index=True)
    if present.size:
        out[present] = np.add.reduceat(window.demand[order, layer, :].astype(np.int64), starts, axis=0)
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
        P, an integer >= 1 (None: the instance's).
    objective
        ``aggregate``, ``migration``, ``rows`` or another registered name.
    current
        The current placement (``migration``).
    layout
        The layout (``rows``).
    num_shards
        G for ``rows``, an integer >= 1 (None: the instance's, else 1).
    time_limit
        Seconds per layer at most.
    total_time_limit
        Seconds for all layers (None: no limit beyond ``time_limit`` per layer): each layer
        gets at most an equal share of the time left, so a layer that ends early leaves
        its time to the next ones. A layer whose share runs out returns its best
        placement (the warm start at least) with its bound. The warm starts and the builds
        count, and so does the backend's first import in the process (about a second for
        Pyomo), which is made only while it and the layer's share fit in the time left
        (else no model is built).
    mip_gap, tolerance, backend, threads
        As in :func:`solve_layer`.
    warm_start
        Placement to start from (default: LPT + local search).
    callback
        Called as ``callback(layer, LayerResult)`` after every layer (progress).
    """
    if isinstance(data, Instance):
        window = data.window
        # None, not 0, means the instance's (0 ranks is an error, as for lpt_ranks)
        num_ranks = data.cluster.ep if num_ranks is None else num_ranks
        num_shards = data.cluster.edp if num_shards is None else num_shards
    else:
        window = data
    require(num_ranks is not None, "num_ranks", "is needed with a bare window")
    num_ranks = integer("num_ranks", num_ranks, low=1)
    num_shards = integer("num_shards", 1 if num_shards is None else num_shards, low=1)
    obj = get_placement_objective(objective)
    # the scalars before any work (solve_layer reads them again for every layer)
    mip_gap = _solver_args(backend, mip_gap, tolerance, threads)[0]
    load = window.expert_load()
    if "current" in obj.needs:
        require(current is not None, "current", f"the {obj.name!r} objective needs the current placement")
    if "cell_load" in obj.needs:
        require(layout is not None, "layout", f"the {obj.name!r} objective needs a layout")
    if current is not None:
        require(current.ranks.shape == load.shape and current.num_ranks == num_ranks, "current",
                f"placement {current.ranks.shape} on P={current.num_ranks} does not match "
                f"(L, E) = {load.shape}, P={num_ranks}")
    time_limit = number("time_limit", time_limit, above=0, none=True, hint="seconds; None: no limit")
    total_time_limit = number("total_time_limit", total_time_limit, above=0, none=True,
                              hint="seconds; None: time_limit per layer only")
    start = time.perf_counter()  # the warm starts count against total_time_limit too
    if warm_start is not None:
        require(warm_start.ranks.shape == load.shape, "warm_start",
                f"shape {warm_start.ranks.shape} does not match {load.shape}")
        warm = warm_start.ranks
    else:
        warm = local_search_ranks(load, lpt_ranks(load, num_ranks), num_ranks)
    results = []
    overrun = []  # per layer: seconds past its limit (the model's build, the solver's overshoot)
    stages = 2 if obj.name == "migration" else 1  # solve_layer's two stages (no load cap here)
    for l in range(window.num_layers):
        limit, build_limit = time_limit, None
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
            # with a budget for all layers, a model whose build would take more than half
            # the layer's share is not built (a 1000-sample window's rows models took 19 s
            # for 2 s). The backend's first import (Pyomo: about 1 s, more than most
            # shares) is the run's, once: it is allowed on top while it and this layer's
            # share fit in what is left, and then shrinks the later shares (it is in the
            # time spent, not in `overrun`), so the run keeps its limit; otherwise no model
            # is built (--time-limit 0.1 took 1.8 s, 1 s of it Pyomo's)
            build_limit = 0.5 * limit
            first_import = import_seconds(backend)
            if first_import and first_import + stages * limit <= left:
                build_limit += first_import
        problem = LayerProblem(
            load[l], num_ranks,
            current=None if current is None else current.ranks[l],
            cell_load=cell_loads(window, layout, num_shards, l) if "cell_load" in obj.needs else None,
        )
        # migration derives its own warm start from the aggregate solve
        res = solve_layer(problem, obj, time_limit=limit, mip_gap=mip_gap,
                          warm_start=None if obj.name == "migration" and warm_start is None else warm[l],
                          backend=backend, tolerance=tolerance, threads=threads, build_limit=build_limit)
        res.stats["time_limit"] = limit  # this layer's share per stage (None: no limit)
        if limit is not None:
            overrun.append(max(res.seconds - res.stats.get("import_seconds", 0.0) - stages * limit, 0.0))
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
