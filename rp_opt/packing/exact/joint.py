"""The joint exact model for tiny windows: placement and packing chosen together.

Placement binaries xp[l,e,p] (every expert on one rank, E/P experts per rank). The rank
load W[r,g,l,p] = sum_e v[r,g,l,e] xp[l,e,p], with v[r,g,l,e] = sum_i a[i,l,e] z[i,r,g]
the tokens block (r,g) sends to expert e, is linearised with w[r,g,l,e,p] >= 0 and
w >= v when xp[l,e,p] = 1 (an enforced constraint: the big-M form without the M); a
minimisation keeps w on its lower bound, so sum_e w[.,p] = W[.,p] at an optimum.
It measures what the hierarchical decomposition (placement first, then packing) loses.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
from ortools.sat.python import cp_model

from ...bounds import placement_bound
from ...cost import score
from ...errors import number, require
from ...objectives import get_objective
from ...result import EVERY_PLACEMENT, INFEASIBLE, Plan, Result
from ...rows import certify_seconds, row_count_reason
from ...solution import Placement
from ...solvers import register_solver
from ...window import Instance
from .common import (Budget, build_seconds, canonical_layout, greedy_layout, heaviest_first, layout_valid,
                     packing_data, renumbered, symmetry_mode, too_big)


def canonical_placement(placement: Placement) -> Placement:
    """Relabel the ranks of every layer in the order of their lowest expert (rank labels
    inside a shard are symmetric: W is permuted over p, max_p W unchanged)."""
    ranks = placement.ranks
    L, E = ranks.shape
    P = placement.num_ranks
    first = np.full((L, P), E)
    np.minimum.at(first, (np.repeat(np.arange(L), E), ranks.ravel()), np.tile(np.arange(E), L))
    order = np.argsort(first, axis=1)            # new label q holds old rank order[l, q]
    new = np.empty_like(order)
    np.put_along_axis(new, order, np.arange(P)[None, :].repeat(L, 0), axis=1)
    return Placement(np.take_along_axis(new, ranks, axis=1), P)


def solve_joint(instance: Instance, *, objective="sync", time_limit: float = 60.0, seed: int = 0,
                warm_start: Plan | None = None, num_rows: int | None = None, symmetry: bool = True,
                workers: int | None = None, **options) -> Result:
    """Placement and layout together, exactly (CP-SAT). Tiny windows only.

    Parameters are those of :func:`rp_opt.packing.exact.solve_exact`; ``warm_start`` gives
    both the start placement and layout (default: LPT placement and the greedy layout).
    """
    from . import (check_args, check_warm_start, in_callers_numbering, in_model_numbering, num_rows_or_status,
                   warm_layout)

    t0 = time.perf_counter()
    num_rows, symmetry, workers = check_joint_options(dict(options, num_rows=num_rows, symmetry=symmetry,
                                                           workers=workers)).values()
    seed = check_args(seed=seed)["seed"]
    time_limit = number("time_limit", time_limit, above=0, hint="seconds")
    obj = get_objective(objective)
    if warm_start is not None:
        warm_start = replace(warm_start, placement=check_warm_start(instance, warm_start))
    if num_rows is None:
        num_rows, status, reason = num_rows_or_status(instance, time_limit=certify_seconds(time_limit, 1.0))
        if num_rows is None:
            return Result(status, None, (), None, time.perf_counter() - t0, "joint", {"reason": reason})
    warm_layout(instance, warm_start, int(num_rows))
    if not symmetry or _too_big(instance, int(num_rows), float(time_limit) - (time.perf_counter() - t0)):
        return _solve_joint(instance, obj, time_limit, seed, warm_start, int(num_rows), symmetry, workers, t0)
    # samples numbered heaviest first in the model, as for the packing model (solve_packing)
    order = heaviest_first(instance)
    if warm_start is not None:
        warm_start = replace(warm_start, layout=in_model_numbering(warm_start.layout, order))
    res = _solve_joint(renumbered(instance, order), obj, time_limit, seed, warm_start, int(num_rows), symmetry,
                       workers, t0)
    return in_callers_numbering(res, order)


JOINT_OPTIONS = ("num_rows", "symmetry", "workers")


def check_joint_options(options: dict) -> dict:
    """``options`` of the ``joint`` solver (:data:`JOINT_OPTIONS`), checked and converted by
    :func:`.check_args`, in that order; an unknown name is a one-line InputError on
    ``options``. Also what ``rp-opt plan`` and the Planner check before a window is read."""
    from . import check_args

    unknown = sorted(set(options) - set(JOINT_OPTIONS))
    require(not unknown, "options",
            f"unknown option(s) {unknown} for solver joint; known: {', '.join(JOINT_OPTIONS)}")
    return check_args(**{name: options.get(name, default)
                         for name, default in zip(JOINT_OPTIONS, (None, True, None))})


def _too_big(instance: Instance, num_rows: int, left: float) -> str | None:
    """Why the joint model of ``instance`` would not be built with ``left`` seconds to go
    (:func:`.common.too_big`), or None."""
    data = packing_data(instance, None, num_rows)
    coefficients = np.count_nonzero(instance.window.demand) * instance.cluster.ep
    return too_big(build_seconds(data, coefficients, "cpsat"), left)


def _solve_joint(instance: Instance, obj, time_limit, seed, warm_start, num_rows, symmetry, workers, t0) -> Result:
    """:func:`solve_joint` on checked arguments, in the numbering of ``instance``."""
    from . import _result, default_placement
    from .cpsat_model import CpsatPacking, SolveOutcome

    window, cluster = instance.window, instance.cluster
    data = packing_data(instance, None, int(num_rows))
    empty = row_count_reason(data.lengths, data.num_rows, data.num_slots, data.capacity, data.max_per_cell)
    if empty:
        return Result(INFEASIBLE, None, (), None, time.perf_counter() - t0, "joint", {"reason": empty})
    mode = symmetry_mode(obj) if symmetry else None
    start_place = warm_start.placement if warm_start is not None else default_placement(instance)
    start = warm_start.layout if warm_start is not None else None
    if start is None or not layout_valid(data, start):
        start = greedy_layout(data)
    if start is not None and mode:
        start = canonical_layout(start, data.num_shards, mode)
    if symmetry:
        start_place = canonical_placement(start_place)
    start_score = score(instance, start_place, start, obj) if start is not None else None

    a = window.demand.astype(np.int64)  # [N, L, E]
    N, L, E = a.shape
    P = cluster.ep
    stats = {"backend": "cpsat", "num_rows": int(num_rows), "symmetry": mode, "joint": True,
             "bound_scope": EVERY_PLACEMENT}
    why = _too_big(instance, int(num_rows), float(time_limit) - (time.perf_counter() - t0))
    if why:
        # the model of a window this size would not even be built within the time limit
        stats["model"] = why
        return _result(instance, start_place, obj, SolveOutcome(None, [], [], {}), start, start_score, stats, t0,
                       "joint", int(num_rows))
    per_rank = E // P
    state = {}

    def hook(b: CpsatPacking):
        m = b.model
        xp = {(l, e, p): m.new_bool_var(f"xp[{l},{e},{p}]") for l in range(L) for e in range(E) for p in range(P)}
        state["xp"] = xp
        for l in range(L):
            for e in range(E):
                m.add_exactly_one([xp[l, e, p] for p in range(P)])           # every expert on one rank
            for p in range(P):
                m.add(sum(xp[l, e, p] for e in range(E)) == per_rank)     # E/P experts per rank
                if symmetry:
                    # ranks by their lowest expert: xp[l,e,p] <= sum_{e'<e} xp[l,e',p-1]
                    # (rank labels are symmetric per layer; relabelling keeps any optimum)
                    for e in range(E):
                        if e < p:
                            m.add(xp[l, e, p] == 0)
                        elif p:
                            m.add(xp[l, e, p] <= sum(xp[l, f, p - 1] for f in range(e)))
        loads = {}
        total = a.sum(axis=0)  # [L, E]
        for r in range(data.num_rows):
            for g in range(data.num_shards):
                idx, vs = b.block(r, g)  # samples of block (r, g) and their z[i,(r,g)]
                for l in range(L):
                    terms = [[] for _ in range(P)]
                    for e in range(E):
                        coef = a[idx, l, e]
                        nz = np.flatnonzero(coef)
                        v = cp_model.LinearExpr.weighted_sum([vs[q] for q in nz], [int(coef[q]) for q in nz])
                        ub = int(total[l, e])
                        ws = []
                        for p in range(P):
                            w = m.new_int_var(0, ub, f"w[{r},{g},{l},{e},{p}]")
                            m.add(w >= v).only_enforce_if(xp[l, e, p])       # w >= v when e is on p
                            terms[p].append(w)
                            ws.append(w)
                        m.add(sum(ws) >= v)                                  # exactly one p holds e
                    loads[r, g, l] = [sum(t) for t in terms]
                    state.setdefault("W", {})[r, g, l] = loads[r, g, l]
        # sum_{r,g} W[r,g,l,p] >= sum_e load[l,e] xp[l,e,p]   (aggregate load, for the LP)
        for l in range(L):
            for p in range(P):
                m.add(sum(state["W"][r, g, l][p] for r in range(data.num_rows) for g in range(data.num_shards))
                      >= sum(int(total[l, e]) * xp[l, e, p] for e in range(E)))
        return loads

    demand_cap = float(a.sum(axis=(0, 2)).sum())
    builder = CpsatPacking(data, obj, mode, expert_hook=hook, demand_cap=demand_cap,
                           eq4=placement_bound(window, P))
    xp = state["xp"]

    def extra_hint(solver):
        if solver is None:
            return {xp[l, e, p]: int(start_place.ranks[l, e] == p) for (l, e, p) in xp}
        return {v: solver.value(v) for v in xp.values()}

    def on_solution(solver):
        ranks = np.zeros((L, E), dtype=np.int64)
        for (l, e, p), v in xp.items():
            if solver.boolean_value(v):
                ranks[l, e] = p
        return {"placement": Placement(ranks, P)}

    budget = Budget(float(time_limit) - (time.perf_counter() - t0))
    out = builder.solve(budget, seed=seed, workers=workers, start=start, extra_hint=extra_hint,
                        on_solution=on_solution)
    return _result(instance, start_place, obj, out, start, start_score, stats, t0, "joint", int(num_rows))


register_solver("joint", "placement and packing together, exactly (CP-SAT; tiny windows)")(solve_joint)
