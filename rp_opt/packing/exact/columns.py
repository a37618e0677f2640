"""The pooled bound by column generation over blocks (a set-partitioning LP).

The pooled window (:mod:`.pooled`) asks for the least alpha sum A + beta sum X over the
R G blocks of a layout, wherever they sit. Each block is a set of samples in k = D / G
cells, and its cost c(b) = alpha A_b + beta X_b depends on nothing else, so the pooled
optimum is a set partition:

    min sum_b c_b lambda_b   s.t.  sum_{b ∋ i} lambda_b = 1 (every sample i),
                                   sum_b lambda_b = R G,   lambda_b in {0, 1}.

Its LP (lambda_b >= 0) is far stronger than the LP of the assignment model: the blocks'
maxima are exact in every column, where the assignment LP spreads every sample over every
block and sees only Eq. 4. The LP has one column per possible block, so columns are
generated: the master LP over the columns found so far gives duals pi_i (samples) and
sigma (block count), and a CP-SAT model of one block finds the block of least reduced
cost c_b - sum_{i in b} pi_i. For any pi, every layout costs

    sum_b c_b = sum_i pi_i + sum_b (c_b - pi(b))  >=  sum_i pi_i + R G min_b (c_b - pi(b)),

so each pricing solve proves a Lagrangian bound, valid whether or not the generation has
converged (with the pricing's own proven bound on the minimum, when it was stopped early).
The duals are smoothed towards those of the best bound so far (Wentges' stabilisation):
plain LP duals jump between the vertices of a degenerate master and the bound stalls.

Measured on scripts/bench_exact.py's N = 32, G = 2 (R = 3) ``shard`` windows, 2 cores
(throw-away script, 12-01): seed 5, sum J >= 45412.2 when converged (78 s, 90 pricing
solves), 45380 after 14 s, against the CP-SAT pooled model's 2 x 22525.3 in its share of a
60-s solve, and a best plan of 2 x 22728.2; seed 6, 48321.3 (66 s) against the model's own
2 x 24157.7. With N = 64 the pricing solves slow down (10-s limits hit) and the CP-SAT
pooled model is the stronger in the time (71658 after 120 s against 2 x 36007.5 in 44 s).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import numpy as np
from ortools.sat.python import cp_model
from scipy.optimize import linprog

from ..._cpsat import interrupted, solve as cpsat_solve
from ...solution import Layout
from .common import PackingData, integer_scale

log = logging.getLogger("rp_opt")

# the duals priced are this share of the best bound's plus the rest of the master LP's
SMOOTHING = 0.5
# the bound counts as converged within this share of the master LP's value
TOLERANCE = 1e-7
# the most seconds one pricing solve may take (its proven bound still counts when it stops)
PRICING_SECONDS = 10.0


def block_cost(data: PackingData, cells: list[np.ndarray], alpha: float, beta: float) -> float:
    """c = alpha A + beta X of one block whose k cells hold the samples ``cells``
    (MODEL.md: A = sum_s max over the cells of the stage work, X = gamma sum_l max_p W)."""
    attention = sum(max(float(data.att[s, c].sum()) for c in cells) for s in range(data.att.shape[0]))
    members = np.concatenate(cells)
    expert = data.gamma * float(data.demand[members].sum(axis=0).max(axis=1).sum()) if members.size else 0.0
    return alpha * attention + beta * expert


class BlockPricing:
    """CP-SAT model of one block: which samples, in which of its k cells (capacity,
    non-empty cells, the sample limit, cells ordered by their first sample), with the
    objective c_b - sum_{i in b} pi_i in integers (:func:`.common.integer_scale`)."""

    def __init__(self, data: PackingData, alpha: float, beta: float):
        self.data = data
        n, k = data.num_samples, data.per_shard
        demand = data.demand
        cap = float(demand.max(axis=2).sum()) if demand.size else 0.0
        # alpha A + beta X = A' + X' with att' = alpha att and gamma' = beta gamma
        # finer than the packing model's scale (2^17): one small model, and its rounding
        # is paid R G times in the bound
        self.scale = sc = integer_scale(replace(data, att=alpha * data.att, gamma=beta * data.gamma), cap,
                                        target=2.0 ** 22)
        self.model = m = cp_model.CpModel()
        self.y = y = {(i, t): m.new_bool_var(f"y[{i},{t}]") for i in range(n) for t in range(k)}
        self.u = u = []
        for i in range(n):
            # u_i = sum_t y[i,t] <= 1                    (sample i in the block, in one cell)
            ui = m.new_bool_var(f"u[{i}]")
            m.add(sum(y[i, t] for t in range(k)) == ui)
            u.append(ui)
        T = data.lengths
        for t in range(k):
            cell = [y[i, t] for i in range(n)]
            # sum_i T_i y[i,t] <= C                      (capacity)
            m.add(sum(int(T[i]) * cell[i] for i in range(n)) <= data.capacity)
            # sum_i y[i,t] >= 1                          (non-empty cells)
            m.add_bool_or(cell)
            if data.max_per_cell is not None:
                m.add(sum(cell) <= data.max_per_cell)
            if t:
                # y[i,t] <= sum_{j<i} y[j,t-1]            (cells ordered by their first sample)
                for i in range(n):
                    m.add(y[i, t] <= sum(y[j, t - 1] for j in range(i)))
        terms = []
        for s in range(sc.att_int.shape[0]):
            w = sc.att_int[s]
            if not w.any():
                continue
            # a_s >= sum_i att'[s,i] y[i,t] for every cell t   (the slot maximum)
            a = m.new_int_var(0, int(w.sum()), f"a[{s}]")
            for t in range(k):
                m.add(a >= sum(int(w[i]) * y[i, t] for i in range(n) if w[i]))
            terms.append(sc.att_mult * a)
        if sc.gamma_int:
            for l in range(demand.shape[1]):
                # x_l >= sum_i W[i,l,p] u_i for every rank p      (the rank maximum)
                x = m.new_int_var(0, int(demand[:, l, :].sum()), f"x[{l}]")
                for p in range(demand.shape[2]):
                    col = demand[:, l, p]
                    m.add(x >= sum(int(col[i]) * u[i] for i in range(n) if col[i]))
                terms.append(sc.gamma_int * x)
        self.cost = sum(terms)
        # what rounding can hide, per block in cost units: each stage's maximum moves by at
        # most the sum of its samples' roundings, and gamma's rounding (0 where exact)
        att = alpha * data.att
        self.slack = float(np.abs(sc.att_int * sc.att_mult / sc.K - att).sum()) + sc.err_expert

    def solve(self, pi: np.ndarray, seconds: float, seed: int, workers: int) -> tuple[list, float | None, bool, bool]:
        """(blocks found, a lower bound on min_b c_b - pi(b) in cost units or None,
        proven (the least block was found), interrupted). Every block is a list of k
        arrays of sample indices."""
        K = self.scale.K
        pi_int = np.rint(np.asarray(pi) * K).astype(np.int64)
        self.model.minimize(self.cost - sum(int(pi_int[i]) * self.u[i] for i in range(len(self.u)) if pi_int[i]))
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(seconds, 0.01)
        solver.parameters.num_workers = workers
        solver.parameters.random_seed = seed
        found = []
        k, n, y = self.data.per_shard, len(self.u), self.y

        class Found(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(cb):
                found.append([np.array([i for i in range(n) if cb.value(y[i, t])], dtype=np.int64)
                              for t in range(k)])

        status = cpsat_solve(solver, self.model, Found(), on_interrupt="return")
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return found, None, False, interrupted(solver)
        # pi rounded to integers moves a block's reduced cost by at most the roundings' sum
        slack = self.slack + float(np.abs(pi_int / K - pi).sum())
        return found, solver.best_objective_bound / K - slack, status == cp_model.OPTIMAL, interrupted(solver)


def block_column_bound(data: PackingData, alpha: float, beta: float, start: Layout, seconds: float, *,
                       seed: int = 0, workers: int = 2) -> dict:
    """Lower bound on min alpha sum A + beta sum X over the blocks of every layout of
    ``data`` (the pooled objective), by column generation from the blocks of ``start``.

    Returns the stats: ``bound`` (the best Lagrangian bound, valid at any stop; None when
    no pricing solve finished), ``lp`` (the master LP's value at the end: the bound once
    converged), ``iterations``, ``columns``, ``seconds``, ``status`` (``converged``, ``time
    limit`` or ``interrupted``) and ``method`` = ``columns``.
    """
    t0 = time.perf_counter()
    n, k, blocks = data.num_samples, data.per_shard, data.num_rows * data.num_shards
    columns: list[tuple[np.ndarray, float]] = []
    seen: set = set()

    def add(cells) -> bool:
        key = tuple(sorted(tuple(sorted(c.tolist())) for c in cells))
        if key in seen:
            return False
        seen.add(key)
        columns.append((np.concatenate(cells), block_cost(data, cells, alpha, beta)))
        return True

    for r in range(start.num_rows):
        for g in range(data.num_shards):
            add([np.flatnonzero(start.cell_of == r * data.num_slots + g * k + t) for t in range(k)])
    pricing = BlockPricing(data, alpha, beta)
    out = {"method": "columns", "bound": None, "status": "time limit"}
    best, center, lp_value, it, plain = -np.inf, None, None, 0, True
    while True:
        try:
            # the master LP over the columns so far: every sample once, R G blocks
            matrix = np.zeros((n + 1, len(columns)))
            for j, (members, _) in enumerate(columns):
                matrix[members, j] = 1.0
            matrix[n] = 1.0
            rhs = np.ones(n + 1)
            rhs[n] = blocks
            lp = linprog(np.array([c for _, c in columns]), A_eq=matrix, b_eq=rhs, bounds=(0, None), method="highs")
            if lp.status != 0:  # the start's blocks are a solution: this is HiGHS failing
                out["status"] = f"master LP: {lp.message}"
                break
            lp_value = float(lp.fun)
            pi_lp, sigma = lp.eqlin.marginals[:n], float(lp.eqlin.marginals[n])
            if best >= lp_value - TOLERANCE * max(1.0, abs(lp_value)):
                out["status"] = "converged"
                break
            left = seconds - (time.perf_counter() - t0)
            if left <= 0:
                break
            # smoothed duals, or the LP's own after a smoothed price found no column
            pi = pi_lp if plain or center is None else SMOOTHING * center + (1 - SMOOTHING) * pi_lp
            found, least, proven, stopped = pricing.solve(pi, min(left, PRICING_SECONDS), seed + it, workers)
            it += 1
            if least is not None:
                # sum_b c_b >= sum_i pi_i + R G min_b (c_b - pi(b))      (Lagrangian bound)
                bound = float(pi.sum()) + blocks * least
                if bound > best:
                    best, center = bound, pi.copy()
            if stopped:
                out.update(status="interrupted", interrupted=True)
                break
            # columns of negative reduced cost under the LP's duals enter the master
            added = sum(add(cells) for cells in found
                        if block_cost(data, cells, alpha, beta) - pi_lp[np.concatenate(cells)].sum() - sigma < -1e-9)
            if not added and plain and proven:
                # no block below the LP's own duals: the master LP is the set partition's LP
                # (its value, less the roundings, is the bound just taken)
                out["status"] = "converged"
                break
            plain = not added
        except KeyboardInterrupt:
            # a Ctrl-C outside the pricing solve (the master LP, the columns' costs): the
            # bound so far stands, as after a stopped pricing solve
            out.update(status="interrupted", interrupted=True)
            break
    out.update(bound=None if best == -np.inf else float(best), lp=lp_value, iterations=it, columns=len(columns),
               seconds=time.perf_counter() - t0)
    log.debug("pooled bound by columns: %s after %d pricing solves, %d columns", out["bound"], it, len(columns))
    return out
