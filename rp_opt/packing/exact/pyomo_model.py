"""The packing model in Pyomo, solved by HiGHS (``appsi_highs``: a persistent interface,
so the lexicographic re-solves reuse the loaded model and the previous solution).

Costs are divided by a normaliser so the coefficients are O(1)-O(1e3); levels are held at
their optimum within ``level_tol`` (relative) plus HiGHS's own feasibility tolerance.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pyomo.environ as pe
from pyomo.contrib.appsi.base import TerminationCondition
from pyomo.contrib.appsi.solvers import Highs

from ..._highs import silence_banner, solve_pyomo
from ...bounds import attention_waste
from ...objectives import Objective
from ...solution import Layout
from .common import Budget, PackingData, linearize_aggregate, symmetry_chains
from .cpsat_model import LevelOutcome, SolveOutcome

silence_banner()  # the banner would go to stdout (see rp_opt._highs)

log = logging.getLogger("rp_opt")


# HiGHS 1.16's MIP restart (presolve again after "x % inactive integer columns,
# restarting") reported "optimal" at 995.29 with a bound of 995.28 on an 8-sample window
# whose optimum is 990.11 (CP-SAT and brute force agree; an objective weighting the expert
# cost 1e-4); without the restart it finds 990.11. The same class of fault is HiGHS issue
# #2171 (a wrong optimum fixed by mip_allow_restart=false). A proof is worth more here
# than the restart's speed.
NO_RESTART = {"mip_allow_restart": False}


class PyomoPacking:
    """Same variables and constraints as :class:`~.cpsat_model.CpsatPacking`, in floats."""

    def __init__(self, data: PackingData, objective: Objective, mode: str | None, *, tighten: bool = True,
                 eq4: np.ndarray | None = None, level_tol: float = 1e-6,
                 mip_start: bool = False, relax: np.ndarray | None = None):
        self.data, self.objective, self.level_tol = data, objective, level_tol
        self.mip_start = mip_start
        N, R, G, k = data.num_samples, data.num_rows, data.num_shards, data.per_shard
        dem = data.demand
        num_layers, P = dem.shape[1], dem.shape[2]
        # normaliser: the largest cost of one sample alone becomes 100, counting only the
        # parts the objective weighs (X alone with gamma 1e-6 next to attention ~100 was
        # otherwise ~1e-6, below HiGHS's absolute tolerances: bounds above the optimum)
        weighs_attention, weighs_expert = objective.weighs
        attention_part, expert_part = data.att.sum(axis=0), data.gamma * dem.max(axis=2).sum(axis=1)
        largest = float((attention_part * weighs_attention + expert_part * weighs_expert).max(initial=0.0))
        if largest <= 0:
            # the weighed parts cost nothing (X alone with gamma = 0): scale by both parts, or
            # not at all (a unit of 1e302 put the other part's coefficients past HiGHS's
            # infinity, and its y came back as no layout)
            largest = float((attention_part + expert_part).max(initial=0.0))
        self.unit = 100.0 / largest if largest > 0 else 1.0
        att = data.att * self.unit
        gamma = data.gamma * self.unit
        S = att.shape[0]
        self.chains = symmetry_chains(data, mode) if mode else None
        low = self.chains.min_sample if self.chains else np.zeros(data.num_cells, dtype=np.int64)
        keys = [(i, c) for c in range(data.num_cells) for i in range(int(low[c]), N)]
        members = [[i for i in range(N) if i >= low[c]] for c in range(data.num_cells)]
        cells_of = [[c for c in range(data.num_cells) if i >= low[c]] for i in range(N)]
        self.cells_of = cells_of

        m = self.m = pe.ConcreteModel()
        m.y = pe.Var(keys, domain=pe.Binary)
        if relax is not None:
            # a partial LP relaxation: the y of these samples are continuous in [0, 1]
            for (i, c), v in m.y.items():
                if relax[i]:
                    v.domain = pe.UnitInterval
        y = m.y
        m.cons = pe.ConstraintList()
        add = m.cons.add
        T = data.lengths
        for i in range(N):
            add(sum(y[i, c] for c in cells_of[i]) == 1)                          # every sample once
        for c in range(data.num_cells):
            add(sum(int(T[i]) * y[i, c] for i in members[c]) <= data.capacity)  # capacity
            add(sum(y[i, c] for i in members[c]) >= 1)                          # non-empty
            if data.max_per_cell is not None:
                add(sum(y[i, c] for i in members[c]) <= data.max_per_cell)     # sample limit
        if self.chains:
            # yb[i,b_q] <= sum_{j<i} yb[j,b_{q-1}]    (symmetry chains, see common.py)
            for chain in self.chains.chains:
                for prev, cur in zip(chain, chain[1:]):
                    for i in range(N):
                        lhs = [y[i, c] for c in cur if i >= low[c]]
                        if lhs:
                            add(sum(lhs) <= sum(y[j, c] for c in prev for j in members[c] if j < i))
        blocks = [(r, g) for r in range(R) for g in range(G)]
        # a[r,g,s] >= sum_i att[s,i] y[i,(r,d)], d in g    (attention slot max)
        m.a = pe.Var([(r, g, s) for r, g in blocks for s in range(S)], domain=pe.NonNegativeReals)
        for r, g in blocks:
            for s in range(S):
                for c in data.block_cells(r, g):
                    add(m.a[r, g, s] >= sum(float(att[s, i]) * y[i, c] for i in members[c] if att[s, i] > 0))
        # x[r,g,l] >= W[r,g,l,p] for all p                 (expert rank max)
        m.x = pe.Var([(r, g, l) for r, g in blocks for l in range(num_layers)], domain=pe.NonNegativeReals)
        for r, g in blocks:
            pairs = [(i, c) for c in data.block_cells(r, g) for i in members[c]]
            for l in range(num_layers):
                for p in range(P):
                    add(m.x[r, g, l] >= sum(int(dem[i, l, p]) * y[i, c] for i, c in pairs if dem[i, l, p]))
        if tighten:
            waste = attention_waste(att, T, data.capacity, k, R * G) * (1 - 1e-9)
            for s in range(S):
                # sum_{r,g} a[r,g,s] >= (sum_i att[s,i] + waste_s) / k   (averages, big-sample waste)
                add(sum(m.a[r, g, s] for r, g in blocks) >= (float(att[s].sum()) + float(waste[s])) / k)
            if eq4 is not None:
                for l in range(num_layers):
                    add(sum(m.x[r, g, l] for r, g in blocks) >= float(eq4[l]))  # Eq. 4
        A = [[sum(m.a[r, g, s] for s in range(S)) for g in range(G)] for r in range(R)]
        X = [[gamma * sum(m.x[r, g, l] for l in range(num_layers)) for g in range(G)] for r in range(R)]
        m.epi = pe.VarList(domain=pe.NonNegativeReals)

        def new_max(terms, name):
            v = m.epi.add()
            for t in terms:
                add(v >= t)  # epigraph: v >= every term of the max
            return v

        self.levels = []
        for level in objective.levels:
            expr = 0
            for coef, agg in level:
                matrix = [[agg.attention * A[r][g] + agg.expert * X[r][g] for g in range(G)] for r in range(R)]
                expr = expr + coef * linearize_aggregate(agg, matrix, R, G, new_max)
            self.levels.append(expr)
        m.hold = pe.ConstraintList()

    def _start(self, layout: Layout, opt) -> bool:
        """Load a complete MIP start: fix y to ``layout``, solve the remaining LP for the
        epigraph variables, unfix."""
        for (i, c), v in self.m.y.items():
            v.fix(int(layout.cell_of[i] == c))
        self.m.obj = pe.Objective(expr=self.levels[0], sense=pe.minimize)
        res = solve_pyomo(opt, self.m)
        ok = res.termination_condition == TerminationCondition.optimal
        if ok:
            res.solution_loader.load_vars()
        self.m.y.unfix()
        return ok

    def layout_from(self) -> Layout:
        cell_of = np.empty(self.data.num_samples, dtype=np.int64)
        for i, cells in enumerate(self.cells_of):
            cell_of[i] = max(cells, key=lambda c: pe.value(self.m.y[i, c]))
        return Layout(cell_of, self.data.num_rows, self.data.num_slots)

    def solve(self, budget: Budget, *, seed: int = 0, start: Layout | None = None, threads: int = 1) -> SolveOutcome:
        m = self.m
        def make():
            opt = Highs()
            opt.config.load_solution = False
            opt.config.mip_gap = 1e-7
            # no "threads" option: HiGHS 1.16 keeps one global scheduler per process, and a
            # different thread count than the first solve's is refused (status unknown)
            opt.highs_options = {"random_seed": int(seed), "mip_abs_gap": 1e-9, **NO_RESTART}
            return opt

        # HiGHS 1.16 bug (reproduced with highspy alone, see scripts/bench_exact.py
        # --highs-start-repro): with presolve on, a feasible MIP start is re-evaluated "in the
        # reduced space" with a wrong objective (213.04 instead of its true 227.32 on the
        # 8-sample window), below the true optimum 216.87, so HiGHS stops at once and calls
        # the start "optimal". With presolve off the start is handled correctly; a MIP start
        # therefore runs HiGHS without presolve, and only when asked (mip_start=True).
        warm = False
        if start is not None and self.mip_start:
            warm = self._start(start, make())
        else:
            m.obj = pe.Objective(expr=self.levels[0], sense=pe.minimize)
        # a fresh interface: the one that solved the fixed-y LP kept stale column data
        opt = make()
        if warm:
            opt.highs_options["presolve"] = "off"
        opt.config.warmstart = warm
        outcomes, layout = [], None
        n = len(self.levels)
        # per level, the most a plan's value can move: level_tol x its normaliser units (100 =
        # the costliest sample alone), at least the slack of the hold below (a later level may
        # spend it, so the plan's level k can exceed its optimum by that much)
        margin = [self.level_tol * 100.0 / self.unit] * n
        extra, late = {}, 0.0    # late: the most a solve has run past its HiGHS limit so far
        taken = 0  # levels whose solution ``layout`` is
        try:
            for k, expr in enumerate(self.levels):
                if k and budget.left() <= late:
                    # no time left for this level (each solve returns ``late`` after its limit):
                    # the plan so far stands, its later levels unproven
                    extra["skipped_levels"] = f"{k + 1}..{n}: time limit"
                    break
                m.obj.set_value(expr)
                opt.config.time_limit = max(budget.for_level(k, n) - late, 0.01)
                t0 = time.perf_counter()
                res, stopped = solve_pyomo(opt, m, on_interrupt="return")
                secs = time.perf_counter() - t0
                late = max(late, secs - opt.config.time_limit)
                tc = res.termination_condition
                stats = {"status": str(tc.name), "seconds": secs, "limit": opt.config.time_limit}
                if stopped:
                    # Ctrl-C: HiGHS's incumbent (Pyomo's results do not report it), no bound,
                    # no later level
                    stats["interrupted"] = True
                    try:
                        opt.load_vars()
                    except RuntimeError:  # HiGHS had no solution yet
                        outcomes.append(LevelOutcome("no_solution", None, None, secs, stats))
                        break
                    outcomes.append(LevelOutcome("feasible", float(pe.value(expr)) / self.unit, None, secs, stats))
                    layout, taken = self.layout_from(), len(outcomes)
                    break
                has = res.best_feasible_objective is not None
                if has and tc in (TerminationCondition.optimal, TerminationCondition.maxTimeLimit,
                                  TerminationCondition.maxIterations, TerminationCondition.objectiveLimit):
                    res.solution_loader.load_vars()
                    value = float(pe.value(expr))
                    bound = res.best_objective_bound
                    bound = float(bound) if bound is not None else None
                    optimal = tc == TerminationCondition.optimal
                    reported = float(res.best_feasible_objective)
                    if abs(reported - value) > 1e-6 * max(1.0, abs(value)):
                        # HiGHS's objective is not that of the solution it returned (the MIP
                        # start bug above): trust neither its optimality nor its bound
                        stats["objective_mismatch"] = (reported, value)
                        optimal, bound = False, None
                    outcomes.append(LevelOutcome("optimal" if optimal else "feasible", value / self.unit,
                                                 None if bound is None else bound / self.unit, secs, stats))
                    layout, taken = self.layout_from(), len(outcomes)
                    # hold level k at its value within the tolerance, start the next solve here
                    m.hold.add(expr <= value + self.level_tol * max(1.0, abs(value)))
                    margin[k] = self.level_tol * max(100.0, abs(value)) / self.unit
                    # the same HiGHS bug strikes the later levels, warm-started from this one: with
                    # presolve on it reported their optimum but returned the start's values
                    # (tests/test_exact.py, test_highs_later_levels_return_the_solution_they_report)
                    opt.config.warmstart = True
                    opt.highs_options["presolve"] = "off"
                else:
                    st = "infeasible" if tc == TerminationCondition.infeasible else "no_solution"
                    outcomes.append(LevelOutcome(st, None, None, secs, stats))
                    break
        except KeyboardInterrupt:
            # a Ctrl-C between HiGHS's solves (one during a solve comes back above): the
            # levels solved so far stand with their plan; a level whose plan was not read
            # yet is dropped, and no later level runs
            del outcomes[taken:]
            extra["interrupted"] = True
            extra["skipped_levels"] = f"{len(outcomes) + 1}..{n}: interrupted (Ctrl-C)"
        return SolveOutcome(layout, outcomes, margin, extra)


def relaxation_bound(data: PackingData, objective: Objective, mode: str | None, *, eq4: np.ndarray | None,
                     integral: int, time_limit: float, seed: int = 0, rounds: bool = True):
    """A lower bound on level 1 from partial LP relaxations, solved by HiGHS.

    The ``integral`` costliest samples (attention plus expert cost alone) keep binary y;
    every other y is continuous in [0, 1]. Every layout is feasible for it with the same
    level-1 value, so its optimum, and any dual bound HiGHS proves for it, bounds level 1
    of the packing. It is much tighter than the full LP: the lumpy samples decide which
    maxima they raise, while the light ones still carry their own per-stage work and
    per-rank tokens. With ``rounds``, the samples whose y is fractional in the relaxation's
    optimum become binary and it is solved again (each bound is valid; they increase);
    when the optimum has no fractional sample it is a layout, optimal for level 1.

    Returns
    -------
    (bound, stats, layout)
        The best bound in cost units (None when none was proven), lowered by 1e-6 of
        max(|bound|, the costliest sample) to cover HiGHS's tolerances; stats per round; the level-1 optimal
        layout when a relaxation came out integral, else None.
    """
    t0 = time.perf_counter()
    per_sample = data.att.sum(axis=0) + data.gamma * data.demand.max(axis=2).sum(axis=1)
    relax = np.ones(data.num_samples, dtype=bool)
    relax[np.argsort(-per_sample, kind="stable")[:integral]] = False
    builder = PyomoPacking(data, objective, mode, tighten=True, eq4=eq4, relax=relax)
    m = builder.m
    m.obj = pe.Objective(expr=builder.levels[0], sense=pe.minimize)
    best, layout, history = None, None, []
    while True:
        left = time_limit - (time.perf_counter() - t0)
        if left < 0.05:
            break
        opt = Highs()
        opt.config.load_solution = False
        opt.config.mip_gap = 1e-7
        opt.config.time_limit = left
        # only the dual bound is wanted: no primal heuristics
        opt.highs_options = {"random_seed": int(seed), "mip_abs_gap": 1e-9, "mip_heuristic_effort": 0.0, **NO_RESTART}
        res = solve_pyomo(opt, m)
        tc = res.termination_condition
        bound = res.best_objective_bound
        step = {"integral": int((~relax).sum()), "status": tc.name}
        history.append(step)
        if bound is None or not np.isfinite(bound):
            break
        # HiGHS's tolerances are absolute in the model's units (100 = the costliest sample)
        bound = (float(bound) - 1e-6 * max(abs(float(bound)), 100.0)) / builder.unit
        step["bound"] = bound
        best = bound if best is None else max(best, bound)
        if tc != TerminationCondition.optimal:
            break
        res.solution_loader.load_vars()
        frac = np.zeros(data.num_samples, dtype=bool)
        for (i, c), v in m.y.items():
            val = pe.value(v)
            if 1e-6 < val < 1 - 1e-6:
                frac[i] = True
        if not frac.any():
            layout = builder.layout_from()
            break
        if not rounds:
            break
        for (i, c), v in m.y.items():
            if frac[i]:
                v.domain = pe.Binary
        relax &= ~frac
    return best, {"rounds": history, "seconds": time.perf_counter() - t0, "bound": best,
                  "integral_optimum": layout is not None}, layout
