"""The plan pipeline and the ``auto`` planner.

``plan(instance, solver=...)`` runs any registered planner by name. ``auto`` picks: the
exact packing (:mod:`rp_opt.packing.exact`) when the window is small enough for the exact
model to finish within the time limit, warm-started by the heuristic's plan (a MIP start),
and the heuristic (:mod:`rp_opt.packing.heuristic`) otherwise. Its stats say which ran and
why (``auto_choice``, ``auto_reason``).
"""

from __future__ import annotations

import logging
import math
import time

from .objectives import get_objective
# the heuristic's module (with the row certifier: 0.6 s to import) loads with this one, in
# get_solver("auto"), not inside the first plan's time limit
from .packing.heuristic import _l1_rows
from .packing.heuristic_options import heuristic_inputs
from .packing.report import improvement
from .result import FEASIBLE, OPTIMAL, Result, lex_better
from .solvers import get_solver, register_solver
from .window import Instance

log = logging.getLogger("rp_opt")

# the exact model has N*R*D assignment booleans; measured (scripts/bench_heuristic.py) to
# prove small windows (N <= 24, R*D <= 8) within about a second
EXACT_MAX_BOOLEANS = 400


def exact_size(instance: Instance, num_rows: int) -> int:
    """N * R * D, the assignment booleans of the exact packing model."""
    return instance.window.num_samples * num_rows * instance.cluster.dp


def plan(instance: Instance, solver: str = "auto", *, objective="sync", time_limit: float = 5.0, seed: int = 0,
         warm_start=None, **options) -> Result:
    """Plan ``instance`` with the registered planner ``solver``.

    Parameters
    ----------
    instance
        Window, cluster, cost model.
    solver
        A registered planner name (``auto``, ``heuristic``, ``exact``, ``baseline``, ...).
    objective, time_limit, seed, warm_start, options
        Passed to the planner.
    """
    return get_solver(solver)(instance, objective=objective, time_limit=time_limit, seed=seed,
                              warm_start=warm_start, **options)


def _share_of(options: dict, limit: float, time_limit: float) -> dict:
    """The heuristic's ``options`` for a run of ``limit`` seconds out of auto's
    ``time_limit``: a caller's ``reserve`` (checked below ``time_limit``) shrinks in
    proportion, so that it stays below the run's limit, as the heuristic requires."""
    reserve = options.get("reserve")
    if reserve is None or limit >= time_limit:
        return options
    return {**options, "reserve": min(reserve * (limit / time_limit), math.nextafter(limit, 0.0))}


@register_solver("auto", "exact (heuristic MIP start) when the window is small enough, else the heuristic")
def auto(instance: Instance, *, objective="sync", time_limit: float = 5.0, seed: int = 0, warm_start=None,
         placement=None, workers=None, **options) -> Result:
    """Exact when the window is small enough to finish within ``time_limit`` (warm-started
    by the heuristic), the heuristic otherwise; the result's stats say which ran and why.

    The heuristic's options pass through and are checked first; a ``reserve`` shrinks with
    the share of ``time_limit`` each heuristic run gets. ``stats["deterministic"]``
    is True only when the heuristic ran alone with a fixed schedule (``temperatures=N``):
    the exact model, and a second heuristic run, depend on the wall clock.

    Like the heuristic's, ``seconds`` leaves out the identity + ffd report that the last
    heuristic run makes after its plan (``stats["report_seconds"]``)."""
    started = time.perf_counter()
    objective = get_objective(objective)
    # the options go to the heuristic: check them (and the limit, the seed) before anything runs
    time_limit, seed, workers, options = heuristic_inputs(time_limit, seed, workers, options, "auto")
    heuristic = get_solver("heuristic")
    # R* >= the L1 row bound: when even that makes the exact model too large, the heuristic
    # runs once with the whole budget (no second run recomputing placement, R*, rank demand)
    low_size = instance.window.num_samples * _l1_rows(instance) * instance.cluster.dp
    if low_size > EXACT_MAX_BOOLEANS:
        # what is left of the limit (kept above 0: a tiny limit must not turn into a bad one)
        left = max(time_limit - (time.perf_counter() - started), 1e-3)
        guess = heuristic(instance, objective=objective, time_limit=left, seed=seed, warm_start=warm_start,
                          placement=placement, workers=workers, **_share_of(options, left, time_limit))
        guess.stats.update(auto_choice="heuristic",
                           auto_reason=f"N*R*D >= {low_size} > {EXACT_MAX_BOOLEANS}: too large for the exact model")
        return Result(guess.status, guess.plan, guess.score, guess.bound,
                      time.perf_counter() - started - guess.stats.get("report_seconds", 0.0), "auto", guess.stats)
    small_budget = min(1.0, 0.25 * time_limit)
    # the heuristic runs first in both branches: in the exact branch its plan is the MIP start
    guess = heuristic(instance, objective=objective, time_limit=small_budget, seed=seed, warm_start=warm_start,
                      placement=placement, workers=workers, **_share_of(options, small_budget, time_limit))
    # no plan (infeasible window, R* not found) or Ctrl-C: return the heuristic's result as it is
    if guess.plan is None or guess.stats.get("interrupted"):
        return Result(guess.status, guess.plan, guess.score, guess.bound, time.perf_counter() - started, "auto",
                      guess.stats)
    num_rows = guess.plan.num_rows
    size = exact_size(instance, num_rows)
    if size > EXACT_MAX_BOOLEANS:
        choice, reason = "heuristic", f"N*R*D = {size} > {EXACT_MAX_BOOLEANS}: too large for the exact model"
    else:
        choice, reason = "exact", f"N*R*D = {size} <= {EXACT_MAX_BOOLEANS}: exact model, heuristic MIP start"
    if choice == "heuristic":
        # use the rest of the budget for the heuristic proper
        left = time_limit - (time.perf_counter() - started)
        report = 0.0  # the first run's report ran inside the limit
        if left > 0.5:
            run_options = _share_of(options, left, time_limit)
            if "r_star" in guess.stats or options.get("num_rows") is not None:
                # the rows are R* (proven) or the caller's: the second run keeps them, warm-started
                # from the first plan, without certifying R* again
                start, run_options = guess.plan, {**run_options, "trust_warm_rows": True}
            else:
                # unproven rows (a witness's): the longer run certifies again and may prove fewer,
                # which the first plan would not fit (an InputError on warm_start); the two plans
                # are compared by their scores instead
                start = None
            again = heuristic(instance, objective=objective, time_limit=left, seed=seed, warm_start=start,
                              placement=None if start is not None else placement, workers=workers, **run_options)
            report = again.stats.get("report_seconds", 0.0)
            if again.score <= guess.score:
                guess = again
        # whether the second run happens depends on the wall clock
        guess.stats.update(auto_choice=choice, auto_reason=reason, deterministic=False, report_seconds=report)
        return Result(guess.status, guess.plan, guess.score, guess.bound, time.perf_counter() - started - report,
                      "auto", guess.stats)
    exact = get_solver("exact")  # its module loads on first use (OR-Tools' model API): before `left`
    # what is left of the limit (kept above 0, as above: the exact solver then returns its start)
    left = max(time_limit - (time.perf_counter() - started), 1e-3)
    result = exact(instance, objective=objective, time_limit=left, seed=seed, warm_start=guess.plan,
                   placement=guess.plan.placement, num_rows=num_rows)
    stats = dict(result.stats)
    stats.update(auto_choice=choice, auto_reason=reason, heuristic_score=list(guess.score),
                 heuristic_seconds=guess.seconds, deterministic=False)  # the exact model runs to a time limit
    # what the heuristic found about the window (rows proven or only a witness's) holds
    # whichever plan is returned
    for key in ("baseline_score", "lower_bound", "placement_bound", "r_star", "rows_method", "rows_lower_bound"):
        if key in guess.stats:
            stats.setdefault(key, guess.stats[key])
    # the better of the two proven bounds (0 is a bound: a window whose plans cost nothing)
    bounds = [b for b in (result.bound, guess.bound) if b is not None]
    bound = max(bounds) if bounds else None
    # (by the scores' own floats within 1e-9: the two plans' sums of the same costs differ
    # in their last bits, and an exact proof was dropped for a one-ulp "better" heuristic)
    if result.plan is None or lex_better(guess.score, result.score):
        # the exact model ran out of time without matching the heuristic: keep the heuristic's
        # plan (:func:`kept_heuristic` says whether the exact proof carries over to it)
        stats["auto_kept"] = "heuristic"
        status, bound = kept_heuristic(guess, result, stats, bound)
        if status == OPTIMAL and "rows_lower_bound" in guess.stats:
            status = FEASIBLE
            stats["optimal_for_rows"] = num_rows
        return Result(status, guess.plan, guess.score, bound, time.perf_counter() - started, "auto", stats)
    status = result.status
    if status == OPTIMAL and "rows_lower_bound" in guess.stats:
        # the rows are a witness's, R* was not proven: optimal for R = num_rows only
        status = FEASIBLE
        stats["optimal_for_rows"] = num_rows
    if bound is not None and result.score:
        bound = min(bound, result.score[0]) if status == OPTIMAL else bound
    base = stats.get("baseline_score")
    if base:
        stats["improvement"] = improvement(base[0], result.score[0])
    return Result(status, result.plan, result.score, bound, time.perf_counter() - started, "auto", stats)


def kept_heuristic(guess: Result, result: Result, stats: dict, bound: float | None) -> tuple[str, float | None]:
    """Status and bound of the heuristic's plan ``guess`` when ``auto`` keeps it over the
    exact model's ``result`` (its score is lexicographically better).

    Where the exact model proved its plan optimal and the heuristic's plan scores below it
    by no more than the integer model's rounding (``2 * stats["rounding"][0]``, the margin
    of that proof) and above the exact bound, the proof carries over (same placement and
    rows): ``optimal``, the bound at most the score. A plan better than a proven optimum
    by more than that shows the proof wrong: the heuristic's own status and bound stand,
    ``stats["exact_proof_contradicted"]`` says by how much, and a warning is logged.
    Otherwise (no exact plan, or no proof) the heuristic's status with ``bound``."""
    if result.plan is None or result.status != OPTIMAL or not result.score:
        return guess.status, bound
    rounding = (stats.get("rounding") or [0.0])[0]
    below = result.score[0] - guess.score[0]
    margin = 2 * rounding + 1e-9 * max(1.0, abs(result.score[0]))
    if below <= margin and (result.bound is None or result.bound <= guess.score[0] + margin):
        return OPTIMAL, None if bound is None else min(bound, guess.score[0])
    log.warning("auto: the heuristic's plan (%.9g) is below the exact model's proven optimum (%.9g) by more "
                "than its rounding: the exact proof is not used", guess.score[0], result.score[0])
    stats["exact_proof_contradicted"] = {"exact_score": result.score[0], "heuristic_score": guess.score[0],
                                         "margin": margin}
    return guess.status, guess.bound
