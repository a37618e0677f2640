"""The packing model in OR-Tools CP-SAT (integer coefficients).

Costs are scaled and rounded (:class:`~.common.IntegerScale`); the bound on how far the
rounding can move a level is computed per level (``rounding``) and returned in the stats.
The lexicographic objective is a sequence of solves; level k is then held at its integer
optimum exactly (``level_k <= v_k``), so no tolerance is needed. A level that is the same
function of J as an earlier one for this shape (e.g. with G = 1, sync's sum_r max_g J is
sum J; with R = G = 1 every level is J[0,0]) is not solved again: the held constraint
already fixes it at its optimum (:func:`~.common.level_key`).

Variables: y[i,c] (sample i in cell c), z[i,b] = sum_{c in b} y[i,c] (sample i in block
b = (r,g); the expert loads are sums over blocks, so they are written with z: N terms per
load instead of N k, and constants when there is one block), a[b,s] (attention epigraph of
stage s), x[b,l] (expert epigraph of layer l).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
from ortools.sat.python import cp_model

from ..._cpsat import interrupted, mark_interrupted, solve as cpsat_solve
from ..._cubes import CubeSearch, solve_cubes
from ...bounds import attention_waste
from ...errors import InputError, require
from ...objectives import Objective
from ...solution import Layout
from .common import (Budget, PackingData, aggregate_count, integer_scale, level_key, linearize_aggregate, rational,
                     symmetry_chains)
from .row_search import rows_separable

log = logging.getLogger("rp_opt")
# progress of long solves (INFO): a logger of its own, so that a trainer that logs rp_opt
# at INFO can leave it out (logging.getLogger("rp_opt.progress").setLevel(logging.WARNING))
progress_log = logging.getLogger("rp_opt.progress")

# which levels one CP-SAT solve minimises together (CpsatPacking.solve_groups): ``auto``
# is ``leading`` for windows of at most two rows when a second solve remains, else ``later``
TOGETHER_MODES = ("auto", "leading", "later", "none")
TOGETHER = "auto"
# the time share of a first solve that minimises several levels together
LEADING_SHARE = 0.95


def check_together(together) -> str:
    """``together`` when it is one of :data:`TOGETHER_MODES`, else a one-line InputError."""
    require(together in TOGETHER_MODES, "together",
            f"must be one of {', '.join(TOGETHER_MODES)}, got {together!r}")
    return together

# CP-SAT's shared-tree worker, as a name in a list of subsolvers (repeated: that many)
SHARED_TREE = "shared_tree"

# search orders of CpsatPacking(branch=...)
BRANCH_ORDERS = ("blocks", "cells")

# ``subsolvers="proof"``: CP-SAT's full-problem workers chosen per solve by
# :func:`proof_subsolvers`; CP-SAT adds one worker for its interleaved subsolvers (LNS,
# local search), which improve the start. On the 2-core benchmark machine CP-SAT's own
# 8-worker portfolio spends most of its time improving a start that is often optimal
# already; proofs of packing windows come from the ``fixed`` worker, which follows the
# model's search order (block first, longest sample first: CpsatPacking), with a full core.
PROOF = "proof"


def proof_subsolvers(level, num_shards: int, num_rows: int, first: bool = True) -> tuple[str, ...]:
    """CP-SAT's workers for a solve of the lexicographic sequence whose objective's first
    level is ``level``. Level 1 (``first``) of a two-row window whose objective adds up
    rows, each row's own cost (:func:`.row_search.rows_separable`: ``sync``, any objective
    with G = 1): ``fixed``, whose block-first order splits the samples between the rows,
    and one CP-SAT shared-tree worker (:data:`SHARED_TREE`; its own search, which raises
    the bound by splitting on it), each on a core. Otherwise (``shard``'s max over shards
    of sums over rows, later levels, which hold level 1, windows of more rows, whose bound
    comes from the LP): ``fixed`` and ``default_lp``. Measured on scripts/bench_exact.py's windows, 2
    cores, one run each unless a range is given. N = 24, G = 2, seed 0, level 1 proven in:
    ``sync`` 31 s with ``fixed``, 48 s with both, 70 s with the three earlier workers
    (default_lp, fixed, no_lp), not in 79 s with ``default_lp``; ``shard`` 31-47 s with
    both, 44 s with the three, 70 s with ``default_lp``, not in 119 s with ``fixed``.
    Later levels: seed 0 ``sync`` 12 s with ``fixed``, 16 s with both; seed 1 ``sync``
    38 s and 14 s; seed 0 ``shard`` not in 17 s with ``fixed``, 12-13 s with both.
    N = 64, G = 2 (R = 4), ``sync`` at 60 s: bound 35956.5 in two of four runs with
    ``fixed`` (gap 2.65-2.75 %; 0.65 % and 0.81 % in the others), 36673.9 with both (0.72 %).

    The shared-tree worker beside ``fixed`` (twenty-fourth session, same machine): level 1
    of ``sync``, N = 24, G = 2, from the optimum, alone: seed 1 in 31.2 s with both, 47.7 s
    with ``fixed`` alone (then on one thread beside the last solve), 8.9-40.9 s with two
    shared-tree workers; seed 0 in 38.5 s, 43.7 s, 52.4 s and twice not in 60 s. Whole
    60-s solves (scripts/bench_exact.py): N = 24 seed 2 proven in every run (31.4-48.3 s;
    never before), seed 0 levels 1-2 in every run (level 3 not always), seed 1 depends on
    its start; N = 32 seeds 0, 1, 3, 4 all proven (22.2-39.2 s; seed 0 never before)."""
    alone = first and num_rows <= 2 and rows_separable(level, num_shards)
    return ("fixed", SHARED_TREE) if alone else ("fixed", "default_lp")


def proof_without_lns(num_rows: int) -> bool:
    """Whether the :data:`PROOF` workers of a window of ``num_rows`` rows run without
    CP-SAT's interleaved LNS thread (``use_lns`` off, one thread per named worker) when the
    caller does not say (:meth:`CpsatPacking.solve`'s ``improve``). With two rows the start
    is often optimal already (the heuristic's, or a row search's pair) and then the proof
    is the work: the LNS thread takes a share of the two cores from the workers that prove.
    Measured on scripts/bench_exact.py's ``shard`` windows, G = 2, 60 s, 2 cores (one run
    each, 04:48-05:00 UTC 12-01), level 1 and 2 proven in (without / with LNS): N = 32 seed
    0 40.5 s / not in 60 s (0.0094 % short; 56 s in a 150-s run), seed 1 81.9 s / 115-126 s
    (150-s runs); N = 24 seeds 0-2 24.3 / 42.1, 4.1 / 6.8, 14.5 / 15.2 s; N = 20 seeds 0-2
    1.7 / 3.0, 1.8 / 2.3, 1.0 / 1.7 s. With four rows (N = 64, seed 0) the LNS thread
    improves the start: 36309.1 with it, 36362.3 without. The price, where the start is far
    from optimal: N = 32, G = 2, ``shard``, seed 3 (unproven either way) ends 0.27-0.32 %
    short at 60 s without the thread, 0.18-0.20 % with it (07:02-07:06 UTC, with and
    without :func:`block_means`). :func:`rp_opt.packing.exact.solve_packing` also runs
    without it for ``sync`` with three rows or more after a row search
    (``BOUND_FIRST_SECONDS``, where it is measured)."""
    return num_rows <= 2


def block_means(num_rows: int, num_shards: int) -> bool:
    """Whether the model states the block mean of every stage's slot costs on the block
    literals: k a[b,s] >= sum_i att_int[s,i] z[i,b]. The LP has it (the sum of the slot
    epigraphs), but propagation reaches it only through the cells, and the search fixes a
    sample's block before its cell. It shortens the proofs of two-row windows with two
    shards or more, and slows the larger ones. Measured on scripts/bench_exact.py's windows,
    2 cores, 12-01: N = 32, G = 2, ``shard``, levels 1-2 with the optimum given, ``fixed``
    on one thread: seed 0 35.6 -> 23.5 s, seed 1 71.8 -> 46.2 s; whole solves at 60 s:
    seed 0 proven in 23.6 s (44.9 s without), seed 1 in 39.3 s (not within 60 s
    without), ``sync`` seed 1 in 11.8 s. N = 64, G = 2 (four rows) at 60 s: gaps 1.01 %
    (``sync``) and 1.02 % (``shard``) with it, 0.68 % and 0.81 % without; N = 32, G = 1,
    ``sync``: 13.4 s with it, 7.9 s without. The same for the rank loads per shard and
    layer (sum_r x[r,g,l] >= sum_i a[i,l,p] z[i,g]) made the N = 32 seed-1 proof slower
    (87.6 s), and is not stated."""
    return num_rows <= 2 and num_shards >= 2


@dataclass
class LevelOutcome:
    """What one level's solve proved: its integer value, bound and status."""

    status: str          # "optimal" | "feasible" | "infeasible" | "no_solution"
    value: float | None  # in cost units (level_int / scale)
    bound: float | None  # in cost units, before the rounding margin
    seconds: float
    stats: dict = field(default_factory=dict)


@dataclass
class SolveOutcome:
    layout: Layout | None
    levels: list
    rounding: list
    extra: dict


def _lcm(values) -> int:
    out = 1
    for v in values:
        out = out * v // math.gcd(out, v)
    return out


def lexicographic_weights(uppers: list) -> list | None:
    """w_last = 1 and w_j = w_{j+1} (U_{j+1} + 1) for levels bounded by ``uppers`` U_j, so
    that one unit more of level j costs more than the later levels can save; None when
    sum_j w_j U_j reaches 2^53 (the LP's doubles would then no longer tell one unit from
    the next)."""
    weights = [1]
    for upper in reversed(uppers[1:]):
        weights.insert(0, weights[0] * (upper + 1))
    return weights if sum(w * u for w, u in zip(weights, uppers)) < 2 ** 53 else None


def _wsum(vs, coefs):
    return cp_model.LinearExpr.weighted_sum(list(vs), [int(c) for c in coefs])


class _Conquered:
    """A cube search (:class:`rp_opt._cubes.CubeSearch`) as the level loop of
    :meth:`CpsatPacking.solve` reads a CP-SAT solver: status, value and bound from the
    search, variable values from ``fixed`` (the model solved with the best layout's
    assignment fixed), or None when no cube found a layout."""

    def __init__(self, search: CubeSearch, fixed):
        self.search, self.fixed = search, fixed
        self.objective_value = float(search.value) if search.value is not None else float("nan")
        # the levels are non-negative: a cube never searched has no bound of its own
        self.best_objective_bound = max(float(search.bound), 0.0)
        self.num_branches = int(search.stats.get("branches", 0))
        self.num_conflicts = 0  # not summed over the processes
        self.parameters = SimpleNamespace(num_workers=search.stats["processes"], use_lns=False)
        mark_interrupted(self, bool(search.stats.get("interrupted")))

    @staticmethod
    def status_name(status) -> str:
        return cp_model.CpSolverStatus(status).name

    def value(self, expr):
        return self.fixed.value(expr)

    def boolean_value(self, literal):
        return self.fixed.boolean_value(literal)


def first_level_bound(bound: float, weights: list) -> float:
    """A bound of the first level (integer units) from the bound of a solve that minimised
    sum_j w_j L_j: the later levels add at most w_0 - 1 (:meth:`CpsatPacking.stacked`).
    The levels are non-negative, so no bound (-inf, a cube search that has not searched)
    is 0."""
    if len(weights) == 1 or not math.isfinite(bound):
        return max(bound, 0)
    return max(0, math.ceil((bound - weights[0] + 1) / weights[0]))


class _Progress(cp_model.CpSolverSolutionCallback):
    """Progress of one CP-SAT solve, logged at ``level`` (INFO, shown by ``rp-opt -v``; the
    row search's pair solves at DEBUG): the value and bound of the first level the solve
    minimises, in the objective's units (before the rounding margin), the gap and the
    seconds since the solve started; a line when that value or bound changes with a
    solution, and at most one per :attr:`EVERY` seconds for a rising bound alone (a
    proof finds no solutions). A long exact solve is otherwise silent until it ends."""

    EVERY = 5.0

    def __init__(self, label: str, expr, unit: float, weights: list, level: int):
        super().__init__()
        self.label, self.expr, self.unit, self.weights, self.level = label, expr, unit, weights, level
        self.t0 = time.perf_counter()
        self.said, self.value_now, self.at = None, None, -math.inf

    def _say(self, bound: float, note: str = "", done: bool = False):
        bound = first_level_bound(bound, self.weights) / self.unit
        # one line per new (value, bound), and the line that says the search is done (its
        # bound may have met the value while cubes were still open)
        if self.value_now is None or (self.value_now, bound, done) == self.said:
            return
        self.said, self.at = (self.value_now, bound, done), time.perf_counter()
        gap = (self.value_now - bound) / self.value_now if self.value_now > 0 else 0.0
        progress_log.log(self.level, "%s: %.8g, bound %.8g (gap %.4f %%), %.1f s%s", self.label, self.value_now,
                         bound, 100 * gap, self.at - self.t0, note)

    def on_solution_callback(self):
        self.value_now = self.value(self.expr) / self.unit
        self._say(self.best_objective_bound)

    def on_bound(self, bound: float):
        """CP-SAT's best_bound_callback (the whole objective's bound)."""
        if time.perf_counter() - self.at >= self.EVERY:
            self._say(bound)

    def on_cubes(self, value, bound: float, searched: int, open_cubes: int):
        """:func:`rp_opt._cubes.solve_cubes`'s progress: the whole objective's best value
        and bound (the later levels of a stacked solve add less than w_0 to it)."""
        if value is not None:
            self.value_now = (value // self.weights[0]) / self.unit
        self._say(bound, f" (cubes: {searched} searched, {open_cubes} open)", open_cubes == 0)


class CpsatPacking:
    """Builds the model once; :meth:`solve` runs the lexicographic sequence.

    Parameters
    ----------
    data
        Packing data (``data.demand`` may be None when ``expert_hook`` builds W).
    objective
        The registered objective.
    mode
        Symmetry mode (``rows``, ``cols``, ``grid``) or None for the plain model.
    expert_hook
        ``hook(builder) -> dict[(r, g, l)] -> list of linear expressions`` (the W[r,g,l,p]
        of every rank; :meth:`block` gives the block's samples and z literals); default:
        W from the fixed placement's ``data.demand``.
    demand_cap
        Bound on sum_l max_p W of one (row, shard), in tokens.
    tighten
        Add Eq. 4, the average bounds and the single-sample bounds as constraints on the
        epigraph variables.
    context
        ``(attention, expert_tokens)``, each [R', G]: rows of a larger window that stay
        fixed (A in cost units, and sum_l max_p W in tokens, of each of their blocks). The
        objective is then that of the larger window, with these rows as constants after
        the model's R rows; the shard columns keep their order (no chain sorts them). For
        :func:`.row_search.row_pair_search` with objectives that are not sums over rows.
        The rounding margins stay those of the model's own data: the search keeps a
        result only when the whole window's exact score is better.
    branch
        The search order of the ``fixed`` worker, longest sample first: ``blocks`` (each
        sample's (row, shard) block, then its cell inside the block) or ``cells`` (its
        cell directly). Block first proves the benchmark windows faster: the block alone
        sets a sample's expert loads, so the LP bound rises before cells are chosen
        (scripts/bench_exact.py, N = 24, with the three workers default_lp, fixed, no_lp:
        G = 2, level 1 of ``sync`` in 70 s instead of about 145 s; G = 1, every level of
        ``sync``, in 5 s instead of 58 s).
    """

    def __init__(self, data: PackingData, objective: Objective, mode: str | None, *, expert_hook=None,
                 demand_cap: float | None = None, tighten: bool = True, eq4: np.ndarray | None = None,
                 context: tuple[np.ndarray, np.ndarray] | None = None, branch: str = "blocks"):
        self.data = data
        self.objective = objective
        self.model = m = cp_model.CpModel()
        N, R, G, k = data.num_samples, data.num_rows, data.num_shards, data.per_shard
        if demand_cap is None:
            demand_cap = float(data.demand.max(axis=2).sum()) if data.demand is not None else 0.0
        weighs_attention, weighs_expert = objective.weighs
        self.scale = sc = integer_scale(data, demand_cap, attention=weighs_attention, expert=weighs_expert)
        self.chains = symmetry_chains(data, mode, fixed_shards=context is not None) if mode else None
        low = self.chains.min_sample if self.chains else np.zeros(data.num_cells, dtype=np.int64)

        # y[i,c] = 1 when sample i is in cell c (not created where symmetry fixes it to 0)
        self.y = y = {}
        for c in range(data.num_cells):
            for i in range(int(low[c]), N):
                y[i, c] = m.new_bool_var(f"y[{i},{c}]")
        self.cells_of = [[c for c in range(data.num_cells) if (i, c) in y] for i in range(N)]
        self.members = [[i for i in range(N) if (i, c) in y] for c in range(data.num_cells)]
        T = data.lengths
        # sum_c y[i,c] = 1                               (every sample in exactly one cell)
        for i in range(N):
            m.add_exactly_one([y[i, c] for c in self.cells_of[i]])
        for c in range(data.num_cells):
            vs = [y[i, c] for i in self.members[c]]
            # sum_i T_i y[i,c] <= C                        (capacity)
            m.add(_wsum(vs, [T[i] for i in self.members[c]]) <= data.capacity)
            # sum_i y[i,c] >= 1                            (non-empty cells)
            m.add_bool_or(vs)
            if data.max_per_cell is not None:
                # sum_i y[i,c] <= m                        (sample limit)
                m.add(sum(vs) <= data.max_per_cell)
        if self.chains:
            # yb[i,b_q] <= sum_{j<i} yb[j,b_{q-1}]          (symmetry chains, see common.py)
            for chain in self.chains.chains:
                for prev, cur in zip(chain, chain[1:]):
                    prev_by_i = sorted((i, c) for c in prev for i in self.members[c])
                    for i in range(N):
                        lhs = [y[i, c] for c in cur if (i, c) in y]
                        if not lhs:
                            continue
                        rhs = [y[j, c] for j, c in prev_by_i if j < i]
                        m.add(sum(lhs) <= sum(rhs))

        # z[i,b] = sum_{c in b} y[i,c]                    (block membership)
        self.blocks = [(r, g) for r in range(R) for g in range(G)]
        one = m.new_constant(1)
        self.z = z = {}
        for r, g in self.blocks:
            cells = data.block_cells(r, g)
            for i in range(N):
                lits = [y[i, c] for c in cells if (i, c) in y]
                if not lits:
                    continue
                if len(self.blocks) == 1:
                    z[i, (r, g)] = one
                elif len(lits) == 1:
                    z[i, (r, g)] = lits[0]
                else:
                    v = m.new_bool_var(f"z[{i},{r},{g}]")
                    m.add(sum(lits) == v)
                    z[i, (r, g)] = v

        self._search_order(branch)

        # attention: a[b,s] >= sum_i att_int[s,i] y[i,(r,d)] for d in b   (epigraph of the slot max)
        S = sc.att_int.shape[0]
        self.a = {}
        for r, g in self.blocks:
            idx, zs = self.block(r, g)
            for s in range(S):
                w = sc.att_int[s]
                lo = int(w[idx].max()) if len(self.blocks) == 1 and idx.size else 0
                v = m.new_int_var(lo, int(w.sum()), f"a[{r},{g},{s}]")
                self.a[r, g, s] = v
                for c in data.block_cells(r, g):
                    mem = [i for i in self.members[c] if w[i] > 0]
                    m.add(v >= _wsum([y[i, c] for i in mem], [w[i] for i in mem]))
                if tighten and k > 1 and len(self.blocks) > 1:
                    # a[b,s] >= att_int[s,i] z[i,b]            (a block holding i costs >= i alone)
                    for q, i in enumerate(idx):
                        if w[i] > 0:
                            m.add(v >= int(w[i]) * zs[q])
                    nz = [q for q, i in enumerate(idx) if w[i] > 0]
                    if block_means(R, G) and len(nz) > 1:
                        # k a[b,s] >= sum_i att_int[s,i] z[i,b]   (the max of k slots >= their mean)
                        m.add(k * v >= _wsum([zs[q] for q in nz], [w[idx[q]] for q in nz]))
        if tighten and S and k > 1:
            # k sum_b a[b,s] >= sum_i att_int[s,i] + waste_s  (averages: a max >= the mean of
            # k slots, plus the waste big samples force, rp_opt.bounds.attention_waste)
            waste = attention_waste(sc.att_int, data.lengths, data.capacity, k, R * G)
            for s in range(S):
                extra = max(0, math.floor(waste[s] * (1 - 1e-9)))
                m.add(sum(self.a[r, g, s] for r, g in self.blocks) * k >= int(sc.att_int[s].sum()) + extra)

        # expert: x[b,l] >= W[b,l,p] for every p            (epigraph of the rank max)
        loads = expert_hook(self) if expert_hook else self._fixed_loads()
        num_layers = len({key[2] for key in loads})
        self.x = {}
        for (r, g, l), terms in loads.items():
            v = m.new_int_var(0, int(demand_cap) + 1 if demand_cap else 0, f"x[{r},{g},{l}]")
            self.x[r, g, l] = v
            for t in terms:
                m.add(v >= t)
        if tighten and eq4 is not None and len(self.blocks) > 1:
            # sum_b x[b,l] >= max_p L[l,p]                    (MODEL.md Eq. 4)
            for l in range(num_layers):
                m.add(sum(self.x[r, g, l] for r, g in self.blocks) >= int(eq4[l]))

        # A_int[r,g] = att_mult sum_s a,  X_int[r,g] = gamma_int sum_l x
        self.A = [[sc.att_mult * sum(self.a[r, g, s] for s in range(S)) for g in range(G)] for r in range(R)]
        self.X = [[sc.gamma_int * sum(self.x[r, g, l] for l in range(num_layers)) for g in range(G)]
                  for r in range(R)]
        # j_max >= every entry A_int, X_int of a layout's true costs (epigraphs on their terms)
        j_max = sc.att_mult * int(sc.att_int.sum()) + sc.gamma_int * int(demand_cap + 1)
        # fixed rows of a larger window: integer constants in this model's scale
        self.context_A, self.context_X = [], []
        if context is not None:
            attention, tokens = (np.asarray(part) for part in context)
            self.context_A = np.rint(attention * sc.K).astype(np.int64).tolist()
            self.context_X = (sc.gamma_int * np.rint(tokens).astype(np.int64)).tolist()
            if attention.size:
                j_max = max(j_max, max(map(max, self.context_A)), max(map(max, self.context_X)))
        self._ub = j_max
        self.level_keys = [level_key(level, R + len(self.context_A), G) for level in objective.levels]
        self.level_shapes: list = []
        self.levels = [self._level(level) for level in objective.levels]

    def _search_order(self, branch: str):
        """The decision strategy: the longest sample first (first fit decreasing, the order
        that makes a packing proof short: long samples decide which cells are full and
        which maxima are set). ``blocks``: every sample's block first (z, which alone sets
        the expert loads), then its cell (y); ``cells``: the cells only."""
        if branch not in BRANCH_ORDERS:
            raise InputError("branch", f"must be one of {BRANCH_ORDERS}, got {branch!r}")
        order = np.argsort(-self.data.lengths, kind="stable")
        if branch == "blocks" and len(self.blocks) > 1:  # with one block z is the constant 1
            self.model.add_decision_strategy([self.z[i, b] for i in order for b in self.blocks if (i, b) in self.z],
                                             cp_model.CHOOSE_FIRST, cp_model.SELECT_MAX_VALUE)
        self.model.add_decision_strategy([self.y[i, c] for i in order for c in self.cells_of[i]],
                                         cp_model.CHOOSE_FIRST, cp_model.SELECT_MAX_VALUE)

    def block(self, r: int, g: int):
        """Samples that may sit in block (r, g) and their z literals (model constants 1
        when the layout has one block)."""
        idx = [i for i in range(self.data.num_samples) if (i, (r, g)) in self.z]
        return np.array(idx, dtype=np.int64), [self.z[i, (r, g)] for i in idx]

    # -- expert loads for a fixed placement ------------------------------------------------
    def _fixed_loads(self):
        data = self.data
        dem = data.demand
        out = {}
        for r, g in self.blocks:
            idx, zs = self.block(r, g)
            for l in range(dem.shape[1]):
                terms = []
                for p in range(dem.shape[2]):
                    coef = dem[idx, l, p]
                    nz = np.flatnonzero(coef)
                    terms.append(_wsum([zs[q] for q in nz], coef[nz]))
                out[r, g, l] = terms
        return out

    # -- one level: sum_k c_k Aggregate_k, linearised generically ---------------------------
    def _level(self, level):
        data, sc, m = self.data, self.scale, self.model
        G = data.num_shards
        R = data.num_rows + len(self.context_A)  # the fixed rows of a larger window count too
        parts, fracs, error, uppers, shapes = [], [], 0.0, [], []
        for coef, agg in level:
            fa, fx = rational(agg.attention), rational(agg.expert)
            den = _lcm([fa.denominator, fx.denominator])
            qa, qx = int(fa * den), int(fx * den)
            matrix = [[qa * A[g] + qx * X[g] for g in range(G)]
                      for A, X in zip(self.A + self.context_A, self.X + self.context_X)]
            ub = (qa + qx) * self._ub * R * G

            def new_max(terms, name, ub=ub):
                v = m.new_int_var(0, ub, name)
                for t in terms:
                    m.add(v >= t)  # epigraph: v >= every term of the max
                return v

            expr = linearize_aggregate(agg, matrix, R, G, new_max)
            fc = rational(coef)
            fracs.append(fc / den)
            parts.append(expr)
            count = aggregate_count(agg, R, G)
            shapes.append((count, qa, qx))
            # every entry qa A_int + qx X_int of a layout's true costs is at most (qa + qx) j_max,
            # and the aggregate at most ``count`` entries
            uppers.append(count * (qa + qx) * self._ub)
            # rounding of data and of the weights (see IntegerScale)
            error += count * (float(fc) * (float(fa) * sc.err_attention + float(fx) * sc.err_expert
                                           + abs(float(fa) - agg.attention) * sc.upper_attention
                                           + abs(float(fx) - agg.expert) * sc.upper_expert)
                              + abs(float(fc) - coef) * (agg.attention * sc.upper_attention
                                                         + agg.expert * sc.upper_expert))
        lcd = _lcm([f.denominator for f in fracs])
        expr = sum(int(f * lcd) * p for f, p in zip(fracs, parts))
        upper = sum(int(f * lcd) * u for f, u in zip(fracs, uppers))
        # the level as sum_k c_k aggregate_k(qa_k A_int + qx_k X_int), for entry_caps
        self.level_shapes.append([(int(f * lcd), count, qa, qx) for f, (count, qa, qx) in zip(fracs, shapes)])
        return expr, sc.K * lcd, error, upper

    # -- solving -----------------------------------------------------------------------------
    def hint(self, layout: Layout | None, extra: dict | None = None):
        """Hint every y (and ``extra`` var -> value) from ``layout``."""
        self.model.clear_hints()
        if layout is None:
            return
        for (i, c), v in self.y.items():
            self.model.add_hint(v, int(layout.cell_of[i] == c))
        for v, val in (extra or {}).items():
            self.model.add_hint(v, int(val))

    def _hint_from(self, solver, extra_hint=None):
        """Hint the next solve with ``solver``'s solution."""
        m = self.model
        m.clear_hints()
        for v in self.y.values():
            m.add_hint(v, solver.value(v))
        if extra_hint:
            for v, val in extra_hint(solver).items():
                m.add_hint(v, int(val))

    def stacked(self, levels: list) -> list | None:
        """Weights w_j such that minimising sum_j w_j L_j over ``levels`` (indices into
        :attr:`levels`) minimises them lexicographically, or None when the sum could exceed
        2^53 (the LP's doubles would then no longer tell one unit from the next).

        Every level is a non-negative integer expression, and some lexicographic optimum
        has every level at most its ``upper`` U_j (the entries of J at their true values are
        at most j_max). With w_last = 1 and w_j = w_{j+1} (U_{j+1} + 1), the levels after j
        add at most w_j - 1 at that optimum, so one unit more of level j costs more than
        anything they can save.
        """
        return lexicographic_weights([self.levels[k][3] for k in levels])

    def entry_caps(self, cutoff: int) -> list | None:
        """For every level, a cap on each entry qa A_int + qx X_int of each of its aggregates
        at a layout whose first level is at most ``cutoff`` (integer units), or None when the
        first level does not bound a part a later level weighs. Every aggregate of
        non-negative entries is at least each of them, so level 1 = sum_k c_k agg_k(qa_k A +
        qx_k X) >= wa A[r,g] + wx X[r,g] with wa = sum_k c_k qa_k, wx = sum_k c_k qx_k, and an
        entry qa A + qx X of a later level is at most max(qa / wa, qx / wx) ``cutoff``."""
        if any(c < 0 or qa < 0 or qx < 0 for level in self.level_shapes for c, _, qa, qx in level):
            return None
        first = self.level_shapes[0]
        wa, wx = sum(c * qa for c, _, qa, _ in first), sum(c * qx for c, _, _, qx in first)

        def ratio(q, w):
            return 0.0 if q == 0 else (q / w if w > 0 else None)

        caps = []
        for level in self.level_shapes:
            ratios = [(ratio(qa, wa), ratio(qx, wx)) for _, _, qa, qx in level]
            if any(None in pair for pair in ratios):
                return None
            caps.append([max(pair) * cutoff for pair in ratios])
        return caps

    # steps of a coarse stack, as shares of each later level's value at the start: the
    # first that fits 2^53 (1e-4 of a level at most, where ROUNDING_TOLERANCE allows 1e-3)
    STEP_SHARES = (1e-6, 3e-6, 1e-5, 2e-5, 5e-5)

    def coarse_stack(self, levels: list, cutoff: int, at_start: list) -> tuple[list, list, list] | None:
        """Weights w_j, steps q_j and the caps of ceil(L_j / q_j) such that minimising
        w_0 L_0 + sum_{j>0} w_j ceil(L_j / q_j) over the layouts whose first level is at most
        ``cutoff`` minimises ``levels`` (indices into :attr:`levels`, the first level first)
        lexicographically, each later level to within q_j - 1 integer units; or None when
        no steps of at most :data:`STEP_SHARES` of the levels' values ``at_start`` (integer
        units, per level) keep the sum below 2^53.

        :meth:`stacked` bounds every level by the largest value any layout could give it,
        so three levels of a two-row window need weights near 10^20; under the cutoff (the
        start's first level) every entry of J is capped (:meth:`entry_caps`), which bounds
        the later levels far tighter, and steps of about 10^-5 of a level close the rest
        (they are added to the level's rounding margin). Why three levels in one solve: with
        two rows every later level is proven by searching the layouts at the first level's
        optimum again (N = 24, G = 2, ``sync`` window of scripts/bench_exact.py, from the
        optimum, 2 cores: seed 0, levels 1 and 2 together 37.0 s, then level 3 alone
        17.1 s, all three in one solve 37.0-38.6 s; seed 1: 21.8 + 15.1 s against 28.7 s).
        """
        caps = self.entry_caps(cutoff)
        if caps is None or not levels or levels[0] != 0:
            return None
        uppers = [cutoff] + [math.ceil(sum(c * n * cap for (c, n, _, _), cap in zip(self.level_shapes[k], caps[k])))
                             for k in levels[1:]]
        for share in self.STEP_SHARES:
            steps = [1] + [max(1, math.floor(share * at_start[k])) for k in levels[1:]]
            coarse = [uppers[0]] + [-(-u // q) for u, q in zip(uppers[1:], steps[1:])]
            weights = lexicographic_weights(coarse)
            if weights is not None:
                return weights, steps, coarse
        return None

    def hinted_value(self, k: int, seconds: float = 5.0) -> int | None:
        """Level ``k``'s integer value at the hinted layout (CP-SAT with every hinted
        variable fixed), or None when that solve does not finish. A Ctrl-C raises
        KeyboardInterrupt."""
        solver, status = self._solve_at_hints(self.levels[k][0], seconds)
        return round(solver.objective_value) if status == cp_model.OPTIMAL else None

    def _solve_at_hints(self, expr, seconds: float | None = None):
        """Minimise ``expr`` with every hinted variable fixed at its hint (one thread, the
        other variables free: the epigraphs at their least); ``(solver, status)``. A
        Ctrl-C raises KeyboardInterrupt."""
        solver = cp_model.CpSolver()
        solver.parameters.fix_variables_to_their_hinted_value = True
        solver.parameters.num_workers = 1
        if seconds is not None:
            solver.parameters.max_time_in_seconds = seconds
        self.model.minimize(expr)
        return solver, cpsat_solve(solver, self.model)

    def solve_groups(self, todo: list, together: str = TOGETHER, at_start: list | None = None) -> list[list]:
        """The levels ``todo`` (indices into :attr:`levels`) split into the solves that run
        them: each solve takes the longest run of the next levels whose :meth:`stacked`
        weights stay exact. ``together``: ``"leading"`` from the first level on, ``"later"``
        from the second on, ``"none"`` one level per solve, ``"auto"`` (the default)
        ``"leading"`` for at most two rows when that leaves a level for a second solve, else
        ``"later"``; with ``at_start`` (the start's level values, integer units), at most
        two rows and three levels or more, all of them in one solve when
        :meth:`coarse_stack` finds weights for them.

        Why ``auto``: every level after the first is proven by searching the layouts at the
        first level's optimum again, and with two rows that search is most of the work.
        Solved with level 1, level 2 costs little more (N = 32, G = 2, ``sync`` window of
        scripts/bench_exact.py, seed 0: levels 1 and 2 together 48.8 s, level 3 then 0.1 s;
        level 1 alone 45.0 s, then levels 2 and 3 36.4 s). With four rows level 1 is not
        proven within a minute, and a bound from the stacked sum is weaker (N = 64, G = 1,
        60 s: gap 1.34 % against 0.37 %). Why not all levels in one solve: with G = 1 level 2
        is level 1, and levels 1 and 3 as one took 9.3-40.0 s on the N = 32, G = 1 window
        (four runs), one after the other 11.4-12.6 s (three).
        """
        if check_together(together) == "auto":
            if (at_start is not None and self.data.num_rows <= 2 and len(todo) >= 3
                    and self.coarse_stack(todo, at_start[0], at_start)):
                return [list(todo)]
            leading = self.solve_groups(todo, "leading") if self.data.num_rows <= 2 else []
            return leading if len(leading) > 1 else self.solve_groups(todo, "later")
        groups, pos = [], 0
        while pos < len(todo):
            size = 1
            if together == "leading" or (together == "later" and pos >= 1):
                size = next((k for k in range(len(todo) - pos, 1, -1) if self.stacked(todo[pos:pos + k])), 1)
            groups.append(todo[pos:pos + size])
            pos += size
        return groups

    def polish(self, start: Layout, seconds: float, seed: int = 0) -> tuple[Layout, dict]:
        """Improve ``start`` on level 1 for ``seconds`` with CP-SAT's own portfolio on two
        threads (its LNS workers), before a proof solve that runs without them
        (:func:`proof_without_lns`): with two rows the proving workers keep the incumbent
        they are given, so a start far from the optimum is where they fail (see
        :data:`rp_opt.packing.exact.POLISH_SHARE`). Returns the better layout (``start``
        when none was found) and the stats: ``seconds``, ``status``, ``value`` (level 1 of
        the layout, cost units) and, after a Ctrl-C, ``interrupted``
        (:func:`~rp_opt.packing.exact.solve_packing` adds ``start``, the start's level 1,
        and ``improved``). Adds nothing to the model but its hints."""
        expr, unit = self.levels[0][0], self.levels[0][1]
        self.hint(start)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(seconds, 0.01)
        solver.parameters.num_workers = 2
        solver.parameters.random_seed = seed
        self.model.minimize(expr)
        t0 = time.perf_counter()
        status = cpsat_solve(solver, self.model, None, on_interrupt="return")
        stats = {"seconds": time.perf_counter() - t0, "status": solver.status_name(status)}
        if interrupted(solver):
            stats["interrupted"] = True
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return start, stats
        layout = self.layout_from(solver)
        stats["value"] = round(solver.objective_value) / unit
        return layout, stats

    def layout_from(self, solver) -> Layout:
        cell_of = np.empty(self.data.num_samples, dtype=np.int64)
        for i, cells in enumerate(self.cells_of):
            for c in cells:
                if solver.boolean_value(self.y[i, c]):
                    cell_of[i] = c
                    break
        return Layout(cell_of, self.data.num_rows, self.data.num_slots)

    def decision_groups(self) -> list[list[int]]:
        """The search order's decisions as groups of literal indices of which exactly one
        is true: every sample's block literals, longest sample first (samples with one
        block left out)."""
        order = np.argsort(-self.data.lengths, kind="stable")
        groups = [[self.z[i, b].index for b in self.blocks if (i, b) in self.z] for i in order]
        return [g for g in groups if len(g) > 1]

    def conquer(self, expr, limit: float, seed: int, processes: int, progress=None):
        """Minimise ``expr`` by cube and conquer (:func:`rp_opt._cubes.solve_cubes`, split
        on :meth:`decision_groups`; ``progress`` goes to it); returns ``(solver, status)``
        where ``solver`` answers what the level loop of :meth:`solve` reads from a CP-SAT
        solver."""
        m = self.model
        m.minimize(expr)
        search = solve_cubes(m, self.decision_groups(), [v.index for v in self.y.values()],
                             processes=processes, time_limit=limit, seed=seed, progress=progress)
        fixed = None
        if search.values is not None:
            # the best layout's values of every other variable (its epigraphs at their least)
            m.clear_hints()
            for v, val in zip(self.y.values(), search.values):
                m.add_hint(v, int(val))
            fixed, status = self._solve_at_hints(expr)
            if status != cp_model.OPTIMAL or round(fixed.objective_value) > search.value:
                raise RuntimeError("cube search: the best layout does not score its value in the model")
            # a cube stopped by the time limit may hold its layout with slack in the epigraphs
            search.value = round(fixed.objective_value)
        return _Conquered(search, fixed), search.status

    def solve(self, budget: Budget, *, seed: int = 0, workers: int | None = None,
              subsolvers: tuple[str, ...] | str | None = PROOF, start: Layout | None = None,
              extra_hint=None, on_solution=None, params: dict | None = None,
              extra_bound=None, together: str = TOGETHER, improve: bool | None = None,
              cubes: bool = False) -> SolveOutcome:
        """Lexicographic sequence of solves within ``budget``.

        Consecutive levels are solved as one where ``together`` says so
        (:meth:`solve_groups`): the minimum of sum_j w_j L_j with w_j > the largest value the
        later levels can take (:meth:`stacked`) is their lexicographic minimum, proven in one
        search instead of one per level (N = 20, G = 2, sync window of
        scripts/bench_exact.py, level 1 held: 16.7 s for levels 2 and 3 together, 25.2 +
        23.3 s one after the other). With a ``start``, the default workers and two rows,
        the start's level values are scored first (:meth:`hinted_value`), level 1 is held at
        most at the start's, and all levels may run as one solve (:meth:`coarse_stack`; the
        stats of that solve carry ``steps``, and the outcome's rounding counts them).

        ``subsolvers``: CP-SAT's full-problem workers by name (default :data:`PROOF`:
        :func:`proof_subsolvers`, per solve; None: CP-SAT's own
        portfolio); ``workers``: how many threads (default: one per subsolver plus one
        for CP-SAT's interleaved LNS, 8 with CP-SAT's portfolio; CP-SAT keeps one of them
        for LNS, so with two or fewer only the first named subsolver searches). With the
        default workers, whether several workers run beside the LNS thread is ``improve``:
        True, the search is there to improve its start (the row search's two-row solves,
        where the LNS thread finds more; N = 64, G = 2, ``shard`` window of
        scripts/bench_exact.py, seed 0, 60 s: 36309.1 with it, 36351.6 without); False, it
        is there for the bound (each worker on a thread of its own, no LNS thread); None,
        :func:`proof_without_lns` decides (without it for two rows).

        ``subsolvers`` may name :data:`SHARED_TREE` (once per worker): CP-SAT's shared-tree
        workers, splitting the tree by objective bound.

        ``extra_hint(solver or None) -> dict var -> value`` adds hints for the caller's own
        variables (the joint model's placement); ``on_solution(solver)`` reads them back.
        ``params`` sets further CP-SAT parameters by name. ``extra_bound()`` is called once
        when level 1 ends unproven, before the later levels (which get the time left): the
        caller computes and reports a bound of its own there (:func:`.solve_packing`: the
        partial LP relaxation).

        ``cubes``: the one-search proof of a two-row window (the start scored, all levels in
        one solve: :meth:`coarse_stack`) runs as cubes (:meth:`conquer`): the tree split on
        the longest samples' blocks, each cube searched by ``fixed`` in a process of its own
        (``workers`` processes; default as many as the proof's workers). Other solves ignore
        it. Faster where the start is optimal or nearly so; slower from a start the search
        must still improve, since a cube learns only the incumbent it starts with
        (scripts/bench_exact.py's N = 32, G = 2 windows, 2 cores, 12-03: from the optimum,
        ``shard`` seeds 1, 3, 4 proven in 34.7, 121.1, 44.5 s as cubes, about 110, 138 and
        73.8 s without, ``sync`` seed 0 in 15.5 against 38.6 s; whole 60-s solves from the
        heuristic start, ``shard`` seed 0 0.05 % short as cubes where it is proven in
        about 43 s without, seeds 1 and 4 0.06 % and 0.08 % short, 0.008 % and 0.03 %
        without).
        """
        m = self.model
        outcomes, layout, extra = [], None, {}
        # per level, how much coarser than its integer unit a stacked solve minimised it
        # (coarse_stack; 1: exactly)
        steps = [1] * len(self.levels)
        self.hint(start, extra_hint(None) if extra_hint else None)
        todo = [k for k in range(len(self.levels)) if self.level_keys[k] not in self.level_keys[:k]]

        def configured(limit, names, threads, lns=True):
            solver = cp_model.CpSolver()
            solver.parameters.max_time_in_seconds = limit
            solver.parameters.num_workers = threads
            if names:
                solver.parameters.subsolvers.extend(list(dict.fromkeys(names)))  # each name once
                trees = list(names).count(SHARED_TREE)
                if trees:
                    # the shared-tree workers split the search tree between them by
                    # objective bound (one worker: it alone proves "objective >= b" for
                    # ever larger b beside the other workers)
                    solver.parameters.shared_tree_num_workers = trees
                    solver.parameters.shared_tree_split_strategy = type(solver.parameters).SPLIT_STRATEGY_OBJECTIVE_LB
            if not lns:
                # one thread per proving worker, none for LNS (proof_without_lns)
                solver.parameters.num_full_subsolvers = len(names)
                solver.parameters.use_lns = False
            solver.parameters.random_seed = seed
            for key, val in (params or {}).items():
                setattr(solver.parameters, key, val)
            return solver

        def names_of(first):
            if subsolvers != PROOF:
                return subsolvers
            return proof_subsolvers(self.objective.levels[0], self.data.num_shards, self.data.num_rows, first)

        def run(expr, limit, first, ks, weights):
            names = names_of(first)
            # progress: the row search's pair solves (improve=True) only at debug level
            level = logging.DEBUG if improve else logging.INFO
            progress = None
            if progress_log.isEnabledFor(level):
                solved = f" (levels {ks[0] + 1}-{ks[-1] + 1} together)" if len(ks) > 1 else ""
                label = (f"exact {self.objective.name}, N = {self.data.num_samples}, R = {self.data.num_rows}: "
                         f"level {ks[0] + 1}{solved}")
                progress = _Progress(label, self.levels[ks[0]][0], self.levels[ks[0]][1], weights, level)
            if cubes and first and at_start is not None:
                processes = workers or len(names)
                solver, status = self.conquer(expr, limit, seed, processes,
                                              progress.on_cubes if progress is not None else None)
                return solver, status, ("fixed",) * processes
            without = proof_without_lns(self.data.num_rows) if improve is None else not improve
            lns = not (subsolvers == PROOF and workers is None and len(names) > 1 and without)
            threads = workers or (len(names) + (1 if lns else 0) if names else 8)
            solver = configured(limit, names, threads, lns)
            m.minimize(expr)
            if progress is not None:
                solver.best_bound_callback = progress.on_bound
            # Ctrl-C stops the search; the caller gets what it found (stats "interrupted")
            status = cpsat_solve(solver, m, progress, on_interrupt="return")
            if status == cp_model.MODEL_INVALID:
                # e.g. an unknown subsolver name: say so, never a silent "no solution"
                info = solver.solution_info()
                raise InputError("subsolvers" if "subsolver" in info else "model", info)
            return solver, status, names

        def group_expr(ks):
            if len(ks) == 1:
                return self.levels[ks[0]][0], [1]
            weights = self.stacked(ks)
            if weights is not None:
                return sum(w * self.levels[k][0] for w, k in zip(weights, ks)), weights
            # under the cutoff: the later levels in steps (coarse_stack), ceil(L_k / q_k)
            weights, qs, caps = self.coarse_stack(ks, at_start[0], at_start)
            terms = []
            for w, k, q, cap in zip(weights, ks, qs, caps):
                if q > 1:
                    coarse = m.new_int_var(0, cap, f"level{k + 1}_in_steps_of_{q}")
                    m.add(q * coarse >= self.levels[k][0])
                    steps[k] = q
                    terms.append(w * coarse)
                else:
                    terms.append(w * self.levels[k][0])
            return sum(terms), weights

        # the start's first level (integer units) caps every entry of J at the optimum, so
        # all levels of a two-row proof fit one solve (coarse_stack); only where the
        # defaults prove (not the row search's solves that improve a pair)
        at_start = None
        if (start is not None and subsolvers == PROOF and improve is not True and self.data.num_rows <= 2
                and len(todo) >= 3 and check_together(together) == "auto"):
            try:
                values = [self.hinted_value(k, min(5.0, 0.02 * budget.left())) for k in range(len(self.levels))]
            except KeyboardInterrupt:
                return self._outcome(todo, [], None, {"interrupted": True}, steps)  # the start is the answer
            if None not in values:
                at_start = values
                m.add(self.levels[0][0] <= values[0])  # the lexicographic optimum is no worse
        groups = self.solve_groups(todo, together, at_start)
        for g, ks in enumerate(groups):
            expr, weights = group_expr(ks)
            # a first solve of several levels leaves a search of the last ones with those
            # held, which is short (N = 32, G = 2, sync window of scripts/bench_exact.py:
            # level 3 proven in 0.1 s once levels 1 and 2 were held)
            limit = (budget.for_level(g, len(groups), LEADING_SHARE) if len(groups[0]) > 1
                     else budget.for_level(g, len(groups)))
            t0 = time.perf_counter()
            solver, status, names = run(expr, limit, g == 0, ks, weights)
            secs = time.perf_counter() - t0
            stop = interrupted(solver)
            if (g == 0 and extra_bound is not None and not stop
                    and status in (cp_model.FEASIBLE, cp_model.UNKNOWN)):
                # level 1 unproven: a bound of another kind (e.g. the relaxation) before the
                # later levels take what is left. Not a constraint of the search: on the
                # benchmark that cost more time than it pruned (N = 20, G = 2, sync window
                # of scripts/bench_exact.py: level 1 proven in 13 s without it, in 33 s
                # with a first short solve, the relaxation and a second solve)
                try:
                    extra_bound()
                except KeyboardInterrupt:
                    stop = True
            stats = {"status": solver.status_name(status), "seconds": secs, "limit": limit,
                     "branches": solver.num_branches, "conflicts": solver.num_conflicts,
                     "subsolvers": list(names) if names else "cpsat",
                     # whether a thread ran CP-SAT's LNS beside the named workers
                     "threads": solver.parameters.num_workers,
                     "lns": solver.parameters.use_lns and solver.parameters.num_workers > len(names or ())}
            if isinstance(solver, _Conquered):
                stats["cubes"] = dict(solver.search.stats)  # the proof ran as cubes (``cubes``)
            if stop:
                stats["interrupted"] = True  # Ctrl-C: no later level runs
            if len(ks) > 1:
                stats["solved_together"] = [k + 1 for k in ks]  # level numbers, 1-based
                if any(steps[k] > 1 for k in ks):
                    # levels minimised in steps of q integer units (coarse_stack)
                    stats["steps"] = {k + 1: steps[k] for k in ks if steps[k] > 1}
            if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                st = "infeasible" if status == cp_model.INFEASIBLE else "no_solution"
                outcomes.append(LevelOutcome(st, None, None, secs, stats))
                break
            st = "optimal" if status == cp_model.OPTIMAL else "feasible"
            # the first level's bound: w_0 L_0 + (the rest, at most w_0 - 1) >= the solve's bound
            first = first_level_bound(solver.best_objective_bound, weights)
            for j, k in enumerate(ks):
                lexpr, unit = self.levels[k][0], self.levels[k][1]
                value = round(solver.objective_value) if len(ks) == 1 else round(solver.value(lexpr))
                outcomes.append(LevelOutcome(st, value / unit, first / unit if j == 0 else None, secs, stats))
                # hold this level at its value (integer: exact) for the next solve
                m.add(lexpr <= value)
            layout = self.layout_from(solver)
            if on_solution:
                extra = on_solution(solver)
            self._hint_from(solver, extra_hint)
            if stop:
                break
        return self._outcome(todo, outcomes, layout, extra, steps)

    def _outcome(self, todo, outcomes, layout, extra, steps) -> SolveOutcome:
        """The solves' outcomes per level; levels that repeat an earlier one get its outcome
        (already held at its value)."""
        full = []
        by_key = {}
        for pos, o in zip(todo, outcomes):
            by_key[self.level_keys[pos]] = o
        for k in range(len(self.levels)):
            o = by_key.get(self.level_keys[k])
            if o is None:
                break
            full.append(o if k in todo else LevelOutcome(o.status, o.value, o.bound, 0.0,
                                                        {"implied": True,
                                                         "same_as_level": self.level_keys.index(self.level_keys[k])}))
        # a level minimised in steps of q units is within q - 1 units of its minimum
        rounding = [err + (q - 1) / unit for (_, unit, err, _), q in zip(self.levels, steps)]
        return SolveOutcome(layout, full, rounding, extra)
