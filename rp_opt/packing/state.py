"""The packing kernel's data: one window's constant arrays (:class:`Problem`) and the
arrays of a population of layouts (:class:`State`), shared by the anneal (:mod:`.anneal`),
the block-pair search (:mod:`.improve`) and the block arrangements (:mod:`.regroup`).

Energy
------
E = sum_k eps^k * level_k, the lexicographic objective's levels (``rp_opt.cost``) folded
into one scalar with eps = 1e-6 / (G R). Why this orders plans as the tuple does: for every
registered objective whose first level is ``sync`` or ``shard``, each later level is at
most G R times the primary (sum J <= G * sum_r max_g J <= G R * max J, and max J <= the
primary), so eps^k level_k <= 1e-6 * primary: two plans whose primaries differ by more
than a relative 2e-6 are ordered by the primary, and exact ties of the primary fall to the
next level. Closer primaries may be ordered by the secondary instead; the returned plan is
therefore chosen among candidates by the exact tuple (:func:`rp_opt.cost.score`).

State
-----
A replica holds its cell token sums T_c and attention sums Q_c, the per-layer rank loads
W[pair, l, p], and A[pair], X[pair], so that a move is scored from the two (row, shard)
pairs it touches. The arrays may live in ``multiprocessing.shared_memory``
(:mod:`.workers`), where forked workers update their own replicas in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import require
from ..objectives import _AXIS, get_objective
from ..window import Instance
from .workers import new_segment, release

_REDUCERS = {"sum": np.sum, "max": np.max}


# ---------------------------------------------------------------------------------------
# Constant data of one problem (shared by all replicas, inherited by forked workers)
# ---------------------------------------------------------------------------------------

class Term(NamedTuple):
    """One aggregate of the objective as the kernel evaluates it: ``coef`` *
    ``outer``_r/g ``inner`` (``attention`` A + ``expert`` X), ``inner`` reducing over
    ``axis`` of the [R, G] block matrix (1: over shards, 0: over rows); ``coef`` holds the
    level's weight eps**level of the scalar energy."""

    attention: float
    expert: float
    inner: str
    axis: int
    outer: str
    coef: float


@dataclass
class Problem:
    """Window data the kernel needs, in flat arrays; names follow MODEL.md."""

    demand: np.ndarray          # dem[N, P*L] int32 (rank-major): tokens of sample i on rank p of layer l
    lengths: np.ndarray         # T[N] int64
    work: np.ndarray            # Q[N] float64
    alpha: np.ndarray           # [S]
    beta: np.ndarray            # [S]
    layers: np.ndarray          # n_s [S]
    gamma: float
    rows: int                   # R
    slots: int                  # D
    shards: int                 # G
    num_layers: int             # L
    num_ranks: int              # P
    capacity: int               # C
    limit: int | None           # m
    aggregates: list            # [Term], the primary's first aggregate first
    eps: float

    @property
    def per_shard(self) -> int:
        return self.slots // self.shards

    @property
    def num_cells(self) -> int:
        return self.rows * self.slots

    @property
    def num_pairs(self) -> int:
        return self.rows * self.shards

    def __post_init__(self):
        cells = np.arange(self.num_cells)
        # pair = r * G + g of every cell, and the D/G cells of every pair
        self.pair_of_cell = (cells // self.slots) * self.shards + (cells % self.slots) // self.per_shard
        self.cells_of_pair = np.argsort(self.pair_of_cell, kind="stable").reshape(self.num_pairs, self.per_shard)

    def energy(self, attention: np.ndarray, expert: np.ndarray) -> np.ndarray:
        """[B] scalar energy of B plans from A[B, R*G], X[B, R*G]."""
        batch = attention.shape[0]
        a = attention.reshape(batch, self.rows, self.shards)
        x = expert.reshape(batch, self.rows, self.shards)
        total = np.zeros(batch)
        for wa, wx, inner, axis, outer, coef in self.aggregates:
            m = wa * a + wx * x
            total += coef * _REDUCERS[outer](_REDUCERS[inner](m, axis=axis + 1), axis=1)
        return total


def make_problem(instance: Instance, demand_by_rank: np.ndarray, num_rows: int, objective) -> Problem:
    """The kernel's :class:`Problem` for ``instance`` with the given rank demand and R."""
    objective = get_objective(objective)
    window, cluster, cost = instance.window, instance.cluster, instance.cost
    if demand_by_rank.ndim == 2:
        # already rank-major flat [N, P*L] int32 (:func:`rp_opt.cost.rank_demand_major`)
        n, num_layers, num_ranks = (demand_by_rank.shape[0], window.num_layers,
                                    demand_by_rank.shape[1] // window.num_layers)
        flat = np.ascontiguousarray(demand_by_rank, dtype=np.int32)
    else:
        n, num_layers, num_ranks = demand_by_rank.shape
        flat = None
    eps = 1e-6 / (cluster.edp * num_rows)
    aggregates = []
    for k, level in enumerate(objective.levels):
        for coef, agg in level:
            aggregates.append(Term(agg.attention, agg.expert, agg.inner, _AXIS[agg.over], agg.outer, coef * eps ** k))
    # no block's rank load exceeds the window's total on that rank: all of them fit int32
    most = int(demand_by_rank.sum(axis=0, dtype=np.int64).max(initial=0))
    require(most < 2 ** 31, "demand", f"a rank's load reaches {most} tokens, beyond the heuristic's 32-bit "
                                      "loads (2^31 - 1); the exact solver and the baselines take it")
    if flat is None:
        # rank-major [N, P, L]: the max over p is then an elementwise max of P contiguous rows
        flat = np.ascontiguousarray(demand_by_rank.transpose(0, 2, 1).reshape(n, -1), dtype=np.int32)
    return Problem(flat,
                   window.lengths.astype(np.int64), window.attn_work.astype(np.float64),
                   cost.alpha, cost.beta, cost.layers, float(cost.gamma), int(num_rows), cluster.dp, cluster.edp,
                   num_layers, num_ranks, cluster.capacity, cluster.max_samples_per_cell, aggregates, eps)


# ---------------------------------------------------------------------------------------
# Replica state
# ---------------------------------------------------------------------------------------

_FIELDS = {  # name -> (shape builder, dtype)
    "cell_of": (lambda p, n: (n,), np.int32),
    "count": (lambda p, n: (p.num_cells,), np.int32),
    "tokens": (lambda p, n: (p.num_cells,), np.float64),   # exact integer sums
    "qwork": (lambda p, n: (p.num_cells,), np.float64),
    "loads": (lambda p, n: (p.num_pairs, p.num_layers * p.num_ranks), np.int32),
    "attention": (lambda p, n: (p.num_pairs,), np.float64),
    "expert": (lambda p, n: (p.num_pairs,), np.float64),
    "energy": (lambda p, n: (), np.float64),
}


class State:
    """Arrays of K replicas (optionally in shared memory); field[k] is replica k."""

    def __init__(self, problem: Problem, num_replicas: int, shared: bool = False):
        self.num_replicas = num_replicas
        self._shm = []
        n = problem.lengths.size
        try:
            for name, (shape_of, dtype) in _FIELDS.items():
                shape = (num_replicas,) + shape_of(problem, n)
                if shared:
                    shm = new_segment(int(np.prod(shape)) * np.dtype(dtype).itemsize)
                    self._shm.append(shm)
                    array = np.ndarray(shape, dtype=dtype, buffer=shm.buf)
                    array[...] = 0
                else:
                    array = np.zeros(shape, dtype=dtype)
                setattr(self, name, array)
        except BaseException:  # Ctrl-C or no memory half way: no segment outlives the failure
            self.close()
            raise

    def close(self):
        for name in _FIELDS:
            setattr(self, name, None)
        release(self._shm)

    def permute(self, index: np.ndarray):
        """Replica k becomes the old replica index[k] (resampling), in place."""
        for name in _FIELDS:
            array = getattr(self, name)
            array[...] = array[index]


def load_layouts(problem: Problem, state: State, replicas, layouts) -> None:
    """Full evaluation of ``layouts[j]`` into replica ``replicas[j]`` (the only full scoring)."""
    for k, cell_of in zip(replicas, layouts):
        cell_of = np.asarray(cell_of, dtype=np.int64)
        state.cell_of[k] = cell_of
        state.count[k] = np.bincount(cell_of, minlength=problem.num_cells)
        state.tokens[k] = np.bincount(cell_of, weights=problem.lengths.astype(np.float64), minlength=problem.num_cells)
        state.qwork[k] = np.bincount(cell_of, weights=problem.work, minlength=problem.num_cells)
        pair = problem.pair_of_cell[cell_of]
        order = np.argsort(pair, kind="stable")
        starts = np.searchsorted(pair[order], np.arange(problem.num_pairs))
        loads = np.zeros((problem.num_pairs, problem.demand.shape[1]), dtype=np.int64)
        filled = np.bincount(pair, minlength=problem.num_pairs) > 0
        # per-pair sums in one pass (every pair of a valid layout is non-empty)
        sums = np.add.reduceat(problem.demand[order].astype(np.int64), np.minimum(starts, order.size - 1), axis=0)
        loads[filled] = sums[filled]
        state.loads[k] = loads
        state.expert[k] = (problem.gamma
                           * loads.reshape(problem.num_pairs, problem.num_ranks, -1).max(axis=1).sum(axis=1))
        t = state.tokens[k][problem.cells_of_pair]
        q = state.qwork[k][problem.cells_of_pair]
        per_stage = problem.alpha[:, None, None] * t[None] + problem.beta[:, None, None] * q[None]
        state.attention[k] = problem.layers @ per_stage.max(axis=2)
    sel = np.asarray(replicas)
    state.energy[sel] = problem.energy(state.attention[sel], state.expert[sel])




def settled(problem: Problem, layout: np.ndarray, fallback: np.ndarray) -> tuple[np.ndarray, float]:
    """(layout, energy from a full evaluation) of ``layout`` when it keeps every constraint
    (non-empty cells, C, m), else of ``fallback``: a layout taken from a search that Ctrl-C
    stopped may be cut in the middle of a move."""
    state = State(problem, 2)
    try:
        load_layouts(problem, state, [0, 1], [layout, fallback])
        count = state.count[0]
        ok = count.min() > 0 and state.tokens[0].max() <= problem.capacity and \
            (problem.limit is None or count.max() <= problem.limit)
        k = 0 if ok else 1
        return state.cell_of[k].astype(np.int64), float(state.energy[k])
    finally:
        state.close()

