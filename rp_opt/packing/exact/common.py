"""Shared pieces of the exact packing models: problem data, generic linearisation of the
registered objectives, symmetry-breaking chains, canonical layouts and a cheap start.

Every model here takes its per-sample data from :mod:`rp_opt.cost` (``stage_work``,
``rank_demand``); nothing re-derives a cost formula.

Symmetry (MODEL.md costs are functions of the cells of each (row, shard) block only):

* slots inside a block: A[r,g] takes a max over the block's slots and W[r,g] a sum over
  them, so permuting the cells of one block (independently in every block) changes no A,
  X, W entry;
* rows and shards: every objective is built from sums and maxima over the rows and the
  shards of J[r,g]; a sum or a max does not depend on the order of its terms, so a global
  permutation of rows, or of shards, permutes J and leaves every level unchanged;
* in addition, an aggregate that reduces over shards first (``over='shards'``, e.g.
  sync's sum_r max_g J) or has inner == outer does not change when the shards are
  permuted independently in every row; an aggregate that reduces over rows first (e.g.
  shard's max_g sum_r J) or has inner == outer does not change when rows are permuted
  independently in every shard column.

A *bin* below is a set of cells; rep(bin) is the smallest sample index in it (defined:
cells are never empty). A *chain* b_0, b_1, ... of bins asks rep(b_0) < rep(b_1) < ...,
written with the assignment variables as

    y[i, b_q] <= sum_{j < i} y[j, b_{q-1}]      for all i              (chain order)

Proof that this is exactly rep(b_{q-1}) < rep(b_q): if the reps increase, every i in b_q
has i >= rep(b_q) > rep(b_{q-1}) and j = rep(b_{q-1}) is a smaller sample in b_{q-1};
conversely, applied to i = rep(b_q) it gives some j < rep(b_q) in b_{q-1}. Each rule
below keeps an optimum because for every layout there is a group element (a permutation
the objective is invariant under, see above) that maps it to a layout satisfying all the
chains at once: sort the cells of every block by rep (this does not change the content,
hence the rep, of any block, row or column); then sort the blocks as the mode says
(:func:`canonical_layout` does exactly this and the tests check its output against the
constraints). Reps are distinct integers, so a chain of length q forces rep(b_q) >= q;
:func:`symmetry_chains` turns that into fixed zeros y[i, c] = 0 for i < depth(c).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

from ...cost import rank_demand, sample_attention, stage_work
from ...objectives import Aggregate, Objective
from ...solution import Layout, Placement
from ...window import Instance

log = logging.getLogger("rp_opt")

# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PackingData:
    """Everything a packing model needs, as arrays indexed like MODEL.md.

    Attributes
    ----------
    att
        [S', N] n_s (alpha_s T_i + beta_s Q_i) for the stages with non-zero work
        (``cost.layers[:, None] * stage_work``).
    demand
        [N, L, P] tokens of sample i that layer l sends to rank p (``rank_demand``).
    gamma
        Cost of one routed token on one expert.
    """

    num_samples: int
    num_rows: int
    num_slots: int
    num_shards: int
    lengths: np.ndarray
    capacity: int
    max_per_cell: int | None
    att: np.ndarray
    demand: np.ndarray | None
    gamma: float

    @property
    def per_shard(self) -> int:
        """k = D/G slots per shard."""
        return self.num_slots // self.num_shards

    @property
    def num_cells(self) -> int:
        return self.num_rows * self.num_slots

    def cell(self, r: int, d: int) -> int:
        return r * self.num_slots + d

    def block_cells(self, r: int, g: int) -> list[int]:
        """Cells of block (r, g): slots g*k .. g*k + k - 1 of row r."""
        k = self.per_shard
        return [self.cell(r, g * k + t) for t in range(k)]

    @property
    def max_cell_samples(self) -> int:
        """Most samples any cell of a valid layout can hold."""
        most = self.num_samples - (self.num_cells - 1)
        if self.max_per_cell is not None:
            most = min(most, self.max_per_cell)
        # a cell holds at most the number of shortest samples that fit into C
        fit = int(np.searchsorted(np.cumsum(np.sort(self.lengths)), self.capacity, side="right"))
        return max(1, min(most, fit))


def packing_data(instance: Instance, placement: Placement | None, num_rows: int) -> PackingData:
    """Collect the model data of ``instance`` for ``placement`` (None: the joint model
    builds W itself) and ``num_rows`` rows."""
    window, cluster, cost = instance.window, instance.cluster, instance.cost
    att = cost.layers[:, None] * stage_work(window, cost)
    att = att[np.any(att > 0, axis=1)]
    demand = None if placement is None else rank_demand(window, placement)
    return PackingData(window.num_samples, int(num_rows), cluster.dp, cluster.edp,
                       window.lengths.astype(np.int64), cluster.capacity, cluster.max_samples_per_cell,
                       att, demand, cost.gamma)


# ---------------------------------------------------------------------------------------
# Generic linearisation of an Aggregate
# ---------------------------------------------------------------------------------------

def linearize_aggregate(agg: Aggregate, matrix, num_rows: int, num_shards: int, new_max):
    """Linear expression of ``agg`` over ``matrix[r][g]`` (linear expressions of M = wa A + wx X).

    A ``max`` becomes an epigraph variable, ``new_max(terms, name)`` (a variable >= every
    term, returned); a ``sum`` stays a sum. The result is >= the aggregate of the true
    matrix and equal to it when the epigraph variables sit on their terms, which a
    minimisation can always choose: every aggregate is non-decreasing in every entry.
    Reductions over an axis of length 1 are the entry itself (no variable).
    """
    if agg.over == "rows":
        lines = [[matrix[r][g] for r in range(num_rows)] for g in range(num_shards)]
    else:
        lines = [[matrix[r][g] for g in range(num_shards)] for r in range(num_rows)]

    def reduce(kind, terms, name):
        if len(terms) == 1:
            return terms[0]
        if kind == "sum":
            return sum(terms)
        return new_max(terms, name)

    inner = [reduce(agg.inner, line, f"{agg.inner}_{agg.over}_{k}") for k, line in enumerate(lines)]
    return reduce(agg.outer, inner, f"{agg.outer}_of_{agg.inner}_{agg.over}")


def aggregate_count(agg: Aggregate, num_rows: int, num_shards: int) -> int:
    """How many entries of J an aggregate adds up at most (1 per max, the axis per sum):
    a per-entry error e moves the aggregate by at most ``count * e``."""
    inner_len, outer_len = (num_rows, num_shards) if agg.over == "rows" else (num_shards, num_rows)
    return (inner_len if agg.inner == "sum" else 1) * (outer_len if agg.outer == "sum" else 1)


def aggregate_key(agg: Aggregate, num_rows: int, num_shards: int) -> tuple:
    """A key equal for two aggregates exactly when they are the same function of the
    R x G matrix M = wa A + wx X: a reduction over an axis of length 1 is the identity,
    and max-of-max / sum-of-sum do not depend on the order of the axes."""
    red = {"rows": agg.inner if agg.over == "rows" else agg.outer,
           "shards": agg.inner if agg.over == "shards" else agg.outer}
    if num_rows == 1:
        form = ("shards", red["shards"]) if num_shards > 1 else ("entry",)
    elif num_shards == 1:
        form = ("rows", red["rows"])
    elif agg.inner == agg.outer:
        form = ("both", agg.inner)
    else:
        form = (agg.over, agg.inner, agg.outer)
    return form, float(agg.attention), float(agg.expert)


def level_key(level, num_rows: int, num_shards: int) -> tuple:
    """Key of a level (sum_k c_k aggregate_k): equal keys are the same function of J for
    this shape, so a lexicographic sequence need not optimise a repeated level."""
    acc: dict = {}
    for coef, agg in level:
        form, wa, wx = aggregate_key(agg, num_rows, num_shards)
        # c (wa A + wx X) under one form: identical when the scaled weights are
        acc.setdefault(form, []).append((float(coef) * wa, float(coef) * wx))
    return tuple(sorted((form, tuple(sorted(v))) for form, v in acc.items()))


def symmetry_mode(objective: Objective) -> str:
    """Which block permutations leave every level of ``objective`` unchanged.

    ``'rows'``: shards may be permuted independently in every row (every aggregate reduces
    over shards first or has inner == outer; e.g. sync). ``'cols'``: rows may be permuted
    independently in every shard (e.g. shard). ``'grid'``: only global row and shard
    permutations (e.g. weighted, which mixes both).
    """
    aggs = objective.aggregates
    if all(a.over == "shards" or a.inner == a.outer for a in aggs):
        return "rows"
    if all(a.over == "rows" or a.inner == a.outer for a in aggs):
        return "cols"
    return "grid"


# ---------------------------------------------------------------------------------------
# Symmetry breaking
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Chains:
    """Chains of bins (each bin a tuple of cells) whose reps must increase, and the
    smallest sample index every cell can hold (its depth in the chain order)."""

    chains: list
    min_sample: np.ndarray


def symmetry_chains(data: PackingData, mode: str, fixed_shards: bool = False) -> Chains:
    """The symmetry-breaking chains of ``mode`` (see the module docstring).

    ``fixed_shards``: the shard columns may not be permuted as a whole (a sub-window whose
    objective also counts fixed rows of the whole window, column by column: the row search
    for objectives that are not sums over rows), so no chain orders them. ``rows`` mode
    keeps its per-row shard chains: its aggregates reduce each row's shards first, so the
    fixed rows do not care how the shards of another row are ordered.

    * every block (r, g): its k cells in slot order (slots inside a shard);
    * ``rows``: in every row, the leading cells (r, g*k) of its blocks in shard order;
      then the rows by their cell (r, 0). With the slot chains, rep(cell (r, g*k)) =
      rep(block (r, g)) and rep(cell (r, 0)) = rep(row r), so these are the chains
      "blocks of a row by rep" and "rows by rep": sorting the blocks of every row and
      then the rows reaches them (the first sort does not change a row's rep);
    * ``cols``: in every shard column, the leading cells (r, g*k) over the rows; then the
      shards by their cell (0, g*k) (= rep of the column after the first sort);
    * ``grid``: rows as bins (all their cells) by rep, and shard columns as bins by rep;
      each key is invariant under the other permutation, so both sorts hold together.
    """
    R, D, G, k = data.num_rows, data.num_slots, data.num_shards, data.per_shard
    chains = []
    for r in range(R):
        for g in range(G):
            if k > 1:
                chains.append([(c,) for c in data.block_cells(r, g)])
    if mode == "rows":
        for r in range(R):
            if G > 1:
                chains.append([(data.cell(r, g * k),) for g in range(G)])
        if R > 1:
            chains.append([(data.cell(r, 0),) for r in range(R)])
    elif mode == "cols":
        for g in range(G):
            if R > 1:
                chains.append([(data.cell(r, g * k),) for r in range(R)])
        if G > 1 and not fixed_shards:
            chains.append([(data.cell(0, g * k),) for g in range(G)])
    elif mode == "grid":
        if R > 1:
            chains.append([tuple(data.cell(r, d) for d in range(D)) for r in range(R)])
        if G > 1 and not fixed_shards:
            chains.append([tuple(c for r in range(R) for c in data.block_cells(r, g)) for g in range(G)])
    else:
        raise ValueError(f"unknown symmetry mode {mode!r}")
    # depth: a bin at position q of a chain has rep >= rep(previous bin) + 1; every cell of
    # a bin has min sample >= rep(bin). Longest path by relaxation (chains form a DAG).
    depth = np.zeros(data.num_cells, dtype=np.int64)
    for _ in range(data.num_cells + 1):
        changed = False
        for chain in chains:
            for prev, cur in zip(chain, chain[1:]):
                # rep(prev) = min over its cells >= the least of their depths
                need = min(depth[c] for c in prev) + 1
                for c in cur:
                    if depth[c] < need:
                        depth[c] = need
                        changed = True
        if not changed:
            break
    return Chains(chains, depth)


def canonical_layout(layout: Layout, num_shards: int, mode: str, fixed_shards: bool = False) -> Layout:
    """The layout equivalent to ``layout`` (same score under any objective of ``mode``)
    that satisfies every chain of :func:`symmetry_chains` (with the same ``fixed_shards``:
    then the shard columns keep their order)."""
    R, D = layout.num_rows, layout.num_slots
    G = num_shards
    k = D // G
    n = layout.cell_of.size
    rep = np.full(R * D, n, dtype=np.int64)
    np.minimum.at(rep, layout.cell_of, np.arange(n))
    rep = rep.reshape(R, G, k)
    # slots inside every block by rep
    slot_order = np.argsort(rep, axis=2, kind="stable")
    cells = (np.arange(R)[:, None, None] * D + np.arange(G)[None, :, None] * k + slot_order)  # [R,G,k] old cells
    rep = np.take_along_axis(rep, slot_order, axis=2)
    block_rep = rep[:, :, 0]
    if mode == "rows":
        order = np.argsort(block_rep, axis=1, kind="stable")
        cells = np.take_along_axis(cells, order[:, :, None], axis=1)
        block_rep = np.take_along_axis(block_rep, order, axis=1)
        cells = cells[np.argsort(block_rep[:, 0], kind="stable")]
    elif mode == "cols":
        order = np.argsort(block_rep, axis=0, kind="stable")
        cells = np.take_along_axis(cells, order[:, :, None], axis=0)
        block_rep = np.take_along_axis(block_rep, order, axis=0)
        if not fixed_shards:
            cells = cells[:, np.argsort(block_rep[0], kind="stable")]
    else:
        cells = cells[np.argsort(block_rep.min(axis=1), kind="stable")]
        block_rep = block_rep[np.argsort(block_rep.min(axis=1), kind="stable")]
        if not fixed_shards:
            cells = cells[:, np.argsort(block_rep.min(axis=0), kind="stable")]
    new_of_old = np.empty(R * D, dtype=np.int64)
    new_of_old[cells.reshape(-1)] = np.arange(R * D)
    return Layout(new_of_old[layout.cell_of], R, D)


def heaviest_first(instance: Instance) -> np.ndarray:
    """The numbering of the samples the models use: decreasing attention cost
    sum_s n_s (alpha_s T_i + beta_s Q_i), then decreasing T_i, then index.

    The symmetry chains take the least-numbered sample of every cell, block and row as its
    representative, which is valid for any numbering. With the heaviest sample first,
    the chains put it in cell (0, 0) and leave the next heavy samples a few cells, so the
    LP relaxation sees where the attention maxima sit instead of spreading the long
    samples over every cell (scripts/bench_exact.py, 60 s: N = 64, G = 1, sync bound
    49744 -> 50272, gap 1.61 % -> 0.42 %; N = 24, G = 1 proven in 24 s instead of 58 s).
    """
    window = instance.window
    attention = sample_attention(window, instance.cost)
    return np.lexsort((np.arange(window.num_samples), -window.lengths, -attention))


def renumbered(instance: Instance, order: np.ndarray) -> Instance:
    """``instance`` with sample j of the result = sample ``order[j]`` of ``instance``."""
    return replace(instance, window=instance.window.subset(order))


def satisfies_chains(layout: Layout, chains: Chains) -> bool:
    """True when ``layout`` meets every chain (a test helper and a warm-start check)."""
    n = layout.cell_of.size
    rep = np.full(layout.num_cells, n, dtype=np.int64)
    np.minimum.at(rep, layout.cell_of, np.arange(n))
    for chain in chains.chains:
        reps = [rep[list(b)].min() for b in chain]
        if any(a >= b for a, b in zip(reps, reps[1:])):
            return False
    return bool(np.all(rep >= chains.min_sample))


# ---------------------------------------------------------------------------------------
# A cheap feasible layout
# ---------------------------------------------------------------------------------------

def greedy_layout(data: PackingData) -> Layout | None:
    """Worst-fit decreasing into the R*D cells, then fill empty cells by moving one sample
    out of a cell that holds several. None when it fails (the model then searches alone)."""
    n, cells = data.num_samples, data.num_cells
    if n < cells:
        return None
    m = data.max_per_cell or n
    load = np.zeros(cells, dtype=np.int64)
    count = np.zeros(cells, dtype=np.int64)
    cell_of = np.full(n, -1, dtype=np.int64)
    for i in np.argsort(-data.lengths, kind="stable"):
        ok = (load + data.lengths[i] <= data.capacity) & (count < m)
        if not ok.any():
            return None
        c = int(np.flatnonzero(ok)[np.argmin(load[ok])])
        cell_of[i] = c
        load[c] += data.lengths[i]
        count[c] += 1
    for c in np.flatnonzero(count == 0):
        donors = np.flatnonzero(count[cell_of] > 1)
        if donors.size == 0:
            return None
        i = int(donors[np.argmin(data.lengths[donors])])
        count[cell_of[i]] -= 1
        cell_of[i] = c
        count[c] = 1
    return Layout(cell_of, data.num_rows, data.num_slots)


def layout_valid(data: PackingData, layout: Layout) -> bool:
    """Capacity, non-empty cells and the sample limit (the bijection holds by construction)."""
    if layout.num_rows != data.num_rows or layout.num_slots != data.num_slots:
        return False
    sizes = np.bincount(layout.cell_of, minlength=data.num_cells)
    load = np.bincount(layout.cell_of, weights=data.lengths, minlength=data.num_cells)
    if sizes.min() < 1 or load.max() > data.capacity:
        return False
    return data.max_per_cell is None or sizes.max() <= data.max_per_cell


# ---------------------------------------------------------------------------------------
# Integer scaling for CP-SAT
# ---------------------------------------------------------------------------------------

def rational(x: float, limit: int = 1000) -> Fraction:
    return Fraction(x).limit_denominator(limit)


@dataclass(frozen=True)
class IntegerScale:
    """Integer data of the CP-SAT model and the error rounding can cause.

    ``att_int[s, i] = round(K att[s, i])``; the model's J_int = att_mult sum_s a + gamma_int
    sum_l x is K (A + X) up to rounding, with gamma_int = round(K gamma) (att_mult = 1).

    Per entry of J: |A_int / K - A| <= 0.5 S n_cell / K (each of the at most n_cell
    samples of a cell is rounded by <= 1/2 per stage; a max of sums moves by at most the
    largest move), |X_int / K - X| <= |gamma_int / K - gamma| * Xcap, with Xcap >= any
    shard's sum_l max_p W.
    """

    att_int: np.ndarray
    att_mult: int
    gamma_int: int
    K: float
    err_attention: float
    err_expert: float
    upper_attention: float
    upper_expert: float


def integer_scale(data: PackingData, demand_cap: float, target: float = 2.0 ** 17, *, attention: bool = True,
                  expert: bool = True) -> IntegerScale:
    """Choose the scale K: J_int = K J up to rounding, with small integer coefficients
    (large ones slow CP-SAT's propagation and LP) and a rounding error that is reported.

    With gamma > 0, K = q / gamma for an integer q, so gamma_int = q is exact (no expert
    rounding) and the largest per-sample attention work becomes about ``target`` (2^17:
    each sample's work is rounded by <= 0.5 / 2^17 of the largest); when that would need
    attention coefficients above 2^24 (gamma tiny next to attention), K = 2^24 / max att
    and gamma is rounded (the error is then counted in ``err_expert``).

    ``attention`` / ``expert`` False: no aggregate of the objective weighs that part, so
    it is left out of the scale (its integer data 0): an objective of X alone must not be
    scaled for an attention work 10^8 times gamma, which rounds gamma_int to 0.

    ``demand_cap`` bounds sum_l max_p W of any (row, shard) in tokens.
    """
    amax = float(data.att.max()) if data.att.size and attention else 0.0
    gamma = float(data.gamma) if expert else 0.0
    if gamma > 0 and amax > 0:
        # q at most 2^20: gamma far above the attention (alpha 1e-30) made gamma_int ~1e36,
        # beyond CP-SAT's 64-bit domains; the attention then rounds, its error reported
        q = min(max(1, int(round(target * gamma / amax))), 2 ** 20)
        K = q / gamma
        if K * amax > 2.0 ** 24:
            K = 2.0 ** 24 / amax
    elif gamma > 0:
        K = 1.0 / gamma
    elif amax > 0:
        K = target / amax
    else:
        K = 1.0
    att_int = np.rint(data.att * K).astype(np.int64) if attention else np.zeros_like(data.att, dtype=np.int64)
    gamma_int = int(round(K * gamma))
    n_cell = data.max_cell_samples
    err_a = 0.5 * data.att.shape[0] * n_cell / K if amax > 0 else 0.0
    err_x = abs(gamma_int / K - gamma) * demand_cap
    return IntegerScale(att_int, 1, gamma_int, K, err_a, err_x, float(data.att.sum()), float(data.gamma) * demand_cap)


# ---------------------------------------------------------------------------------------
# Time budget for the lexicographic sequence
# ---------------------------------------------------------------------------------------

# Seconds per term a model builder writes, measured on the 2-core benchmark machine and
# rounded up: CP-SAT 3.3 s and Pyomo 10.4 s for the packing model of a window with N = 256,
# R = 8, D = 8, G = 2, L = 20, P = 4 (~0.33 M terms); the joint model 1.7 s for ~0.16 M
# terms, plus CP-SAT's loading, which ignores the time limit (27 s on a 5 M-term model).
SECONDS_PER_TERM = {"cpsat": 1.5e-5, "pyomo": 4e-5}


def build_seconds(data: PackingData, coefficients: int, kind: str) -> float:
    """Rough seconds to build (and, for CP-SAT, load) a packing model of ``data`` whose
    expert epigraphs have ``coefficients`` non-zero (sample, layer, column) coefficients
    per block (N L P for the rank loads; the joint model's non-zero a[i,l,e] times P):
    each enters every block's sums, and every sample's stage work every cell."""
    blocks = data.num_rows * data.num_shards
    terms = blocks * int(coefficients) + data.num_samples * data.num_cells * data.att.shape[0]
    return terms * SECONDS_PER_TERM[kind]


def too_big(seconds: float, left: float) -> str | None:
    """Why a model that takes ``seconds`` to build is not built with ``left`` seconds to
    go (half of them at most: the solve needs the rest), or None when it fits."""
    if seconds <= 0.5 * left:
        return None
    return f"not built: about {seconds:.1f} s to build, {left:.1f} s left"

@dataclass
class Budget:
    """Wall-clock budget shared by the levels: level k of n gets a share of what is left
    (the first level the most, ``first_share``: it decides the primary score and the
    bound), at least 0.05 s; a later level never more than is left (the first keeps the
    0.05 s: a plan needs one solve)."""

    seconds: float
    start: float = field(default_factory=time.perf_counter)

    def left(self) -> float:
        return max(0.0, self.seconds - (time.perf_counter() - self.start))

    def for_level(self, k: int, n: int, first_share: float = 0.8) -> float:
        left = self.left()
        share = 1.0 if k == n - 1 else first_share if k == 0 else 0.5
        limit = max(left * share, 0.05)
        return limit if k == 0 else min(limit, left)
