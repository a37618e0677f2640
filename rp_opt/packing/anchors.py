"""Anchor seed: one long sample per cell, the other samples poured to the levels of a
fluid linear program, row by row.

Under ``sync`` every row pays the attention of its slowest cell in each block, so a good
layout gives the cells of a block one attention level and the blocks of a row one cost J.
The seed builds that shape directly:

1. **Anchors.** The R*·D longest samples, in decreasing length, one to each cell, row by
   row and block by block: a block holds anchors of like length (their quadratic
   attention cannot be evened out by short samples), and the full-length samples fill
   whole rows first, the last of them gathered in as few blocks as they need.
2. **Levels.** The other samples ("fillers") are treated as a fluid of their mean
   attention work and mean expert cost per token. A linear program (HiGHS) over the rows
   not yet filled chooses how many filler tokens f_c each cell takes (within its room),
   each block's attention level lambda_b and each row's cost M_r:

       min  sum_r M_r
       s.t. w_c + omega f_c <= lambda_b            (cell c of block b: its work under the level)
            lambda_b + x_b + rho sum_{c in b} f_c <= M_r   (block b of row r: J_b <= M_r)
            sum_c f_c = F                           (every filler token placed)

   (w_c, x_b: the work and the expert cost already there; omega, rho: the fillers' mean
   attention work and expert cost per token; F: their tokens.) A tiny cost on tokens in
   later rows breaks the LP's many ties towards filling rows in order, leaving the
   window's spare room in its last rows.
3. **Rounding.** The first open row takes fillers up to its cells' levels: the cell
   furthest below its level takes the largest filler that fits under the level and in
   its room, until none fits; the row then takes more if the rows after it could not hold
   what is left. The LP is solved again for the remaining rows with the fillers left
   (their means change as the large ones go). The last row takes every filler left,
   largest first, each to the cell whose block's J rises least.

The seed ignores which experts a sample routes to (the expert cost is the mean share
gamma/P of its routed tokens); the block search that follows balances the ranks. Measured
(docs/benchmarks.md, thirty-second session): on the N = 4096 ling-flash-like window with
uncorrelated routing the seed (0.18 s) scores 0.04 % above the expert-aware greedy's, and
the 5-s search from it ends 0.09 % below the search from the greedy's; on windows whose
gap is mostly the expert excess it starts 2-3 % above the greedy's and is not used.
"""

from __future__ import annotations

import bisect

import highspy
import numpy as np
import scipy.sparse as sp

from .._highs import run as run_highs, silence_banner
from ..cost import stage_work
from ..solution import Layout
from ..window import Instance

# cost per filler token and row index: breaks the LP's ties towards earlier rows (moving
# all 32M tokens of the N = 4096 reference window one row on costs 32, against a sum of
# row costs of 8.8e6)
ROW_TIE = 1e-6

silence_banner()


def anchor_seconds(num_cells: int) -> float:
    """Rough wall time of :func:`anchor_layout` for R*·D = ``num_cells`` cells: 2e-4 s a
    cell (measured on the 2-core benchmark machine: 0.18 s for 1024 cells, N = 4096;
    0.7-0.9 s for 4096-4224 cells, N = 16384)."""
    return 2e-4 * num_cells


def fluid_levels(work: np.ndarray, expert: np.ndarray, room: np.ndarray, per_shard: int, num_shards: int,
                 filler_tokens: float, filler_work: float, filler_expert: float) -> tuple[np.ndarray, ...] | None:
    """The fluid LP of the module docstring over the cells of whole rows.

    Parameters
    ----------
    work, expert, room
        [cells] attention work already in each cell, its expert cost (mean share), and the
        tokens it can still take; cells row-major, ``per_shard`` to a block, ``num_shards``
        blocks to a row.
    filler_tokens, filler_work, filler_expert
        F, and omega and rho (per token).

    Returns
    -------
    (fill f [cells], level lambda [blocks], row cost M [rows]), or None when the fillers do
    not fit (sum room < F).
    """
    cells = work.size
    blocks = cells // per_shard
    rows = blocks // num_shards
    if room.sum() < filler_tokens:
        return None
    cell_block = np.arange(cells) // per_shard
    block_row = np.arange(blocks) // num_shards
    nv = cells + blocks + rows                                  # f_c, lambda_b, M_r
    lam, big_m = cells, cells + blocks
    c_idx, b_idx = np.arange(cells), np.arange(blocks)
    # w_c + omega f_c - lambda_b <= 0
    work_rows = sp.csr_matrix((np.r_[np.full(cells, filler_work), -np.ones(cells)],
                               (np.r_[c_idx, c_idx], np.r_[c_idx, lam + cell_block])), shape=(cells, nv))
    # lambda_b + rho sum_{c in b} f_c - M_r <= -x_b
    cost_rows = sp.csr_matrix((np.r_[np.ones(blocks), np.full(cells, filler_expert), -np.ones(blocks)],
                               (np.r_[b_idx, cell_block, b_idx], np.r_[lam + b_idx, c_idx, big_m + block_row])),
                              shape=(blocks, nv))
    block_expert = np.bincount(cell_block, weights=expert, minlength=blocks)
    # sum_c f_c = F
    total = sp.csr_matrix((np.ones(cells), (np.zeros(cells, dtype=np.int64), c_idx)), shape=(1, nv))
    matrix = sp.vstack([work_rows, cost_rows, total]).tocsc()
    matrix.sort_indices()
    objective = np.r_[ROW_TIE * block_row[cell_block], np.zeros(blocks), np.ones(rows)]
    inf = highspy.kHighsInf
    lower = np.r_[np.full(cells + blocks, -inf), [filler_tokens]]
    upper = np.r_[-work, -block_expert, [filler_tokens]]
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.passModel(nv, matrix.shape[0], int(matrix.nnz), int(highspy.MatrixFormat.kColwise),
                int(highspy.ObjSense.kMinimize), 0.0, objective,
                np.r_[np.zeros(cells), np.full(blocks + rows, -inf)], np.r_[room, np.full(blocks + rows, inf)],
                lower, upper, matrix.indptr[:-1].astype(np.int32), matrix.indices.astype(np.int32),
                matrix.data.astype(np.float64), np.zeros(nv, dtype=np.int32))
    run_highs(h)      # a Ctrl-C stops the solve at once (KeyboardInterrupt)
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    x = np.asarray(h.getSolution().col_value)
    return x[:cells], x[lam:big_m], x[big_m:]


def anchor_layout(instance: Instance, num_rows: int, max_solves: int = 16,
                  demand_by_rank: np.ndarray | None = None) -> Layout | None:
    """Anchor seed layout (module docstring), or None when the rounding cannot place every
    sample within the capacity and the per-cell limit.

    Parameters
    ----------
    instance
        The window.
    num_rows
        R*; the layout has exactly R*·D cells, each with its anchor (never empty).
    max_solves
        At most this many LP solves: with more open rows, each solve's levels serve
        ceil(rows / max_solves) rows in turn (N = 16384 has 61 rows).
    demand_by_rank
        ``rank_demand`` [N, L, P] when the caller has it: the samples' routed tokens come
        from it instead of a pass over a[i,l,e] (0.02 s at N = 4096, E = 256).
    """
    window, cluster, cost = instance.window, instance.cluster, instance.cost
    lengths = window.lengths.astype(np.int64)
    n = lengths.size
    slots, shards = cluster.dp, cluster.edp
    per_shard = slots // shards
    cells = num_rows * slots
    capacity = cluster.capacity
    limit = cluster.max_samples_per_cell or n
    if cells > n:
        return None
    order = np.lexsort((np.arange(n), -lengths))                  # longest first, ties by index
    fillers = order[cells:]
    if fillers.size and 4 * (cells * capacity - lengths.sum()) < cells * np.median(lengths[fillers]):
        # less spare room per cell than a quarter of a typical filler: each row ends short of
        # its levels by up to a filler, and the rows after it could not take up what is left
        # (N = 16384 of scripts/bench_heuristic.py, 99.1 % full, fails after 1.4 s)
        return None
    stages = stage_work(window, cost) * np.asarray(cost.layers, dtype=np.float64)[:, None]   # [S, N]
    attention = stages.sum(axis=0)
    routed = (window.demand if demand_by_rank is None else demand_by_rank).sum(axis=(1, 2), dtype=np.int64)
    expert = cost.gamma / cluster.ep * routed                                                  # mean share
    anchors = order[:cells]
    fill = _Fill(stages, lengths, expert, capacity, limit, cells, per_shard)
    fill.add(anchors, np.arange(cells))
    # fillers left, by attention work increasing
    fill.left = sorted(fillers.tolist(), key=lambda i: (attention[i], i))
    fill.left_key = [float(attention[i]) for i in fill.left]

    open_rows = np.flatnonzero(fill.room(np.arange(cells)).reshape(num_rows, slots).max(axis=1) > 0)
    stride = max(1, -(-open_rows.size // max_solves))
    level, solved_at = None, 0
    for step, r in enumerate(open_rows.tolist()):
        if not fill.left:
            break
        row = np.arange(r * slots, (r + 1) * slots)
        if r == num_rows - 1:
            if not fill.last_row(row):
                return None
            break
        if step % stride == 0:
            rest = np.arange(r * slots, cells)
            left = np.asarray(fill.left)
            filler_tokens = float(lengths[left].sum())
            solved = fluid_levels(fill.work[:, rest].sum(axis=0), fill.expert[rest],
                                  fill.room(rest).astype(np.float64), per_shard, shards, filler_tokens,
                                  float(attention[left].sum()) / filler_tokens,
                                  float(expert[left].sum()) / filler_tokens)
            if solved is None:
                return None
            level, solved_at = solved[1], r
        fill.to_levels(row, np.repeat(level[(r - solved_at) * shards:(r - solved_at + 1) * shards], per_shard))
        # the rows after this one must hold what is left: if not, this row takes more
        if not fill.top_up(row, fill.room(np.arange((r + 1) * slots, cells)).sum()):
            return None
    if fill.left:
        return None
    return Layout(fill.cell_of, num_rows, slots)


class _Fill:
    """The rounding's state: cells' per-stage work, tokens, counts and expert shares, and
    the fillers left sorted by attention work (``left_key``)."""

    def __init__(self, stages, lengths, expert_share, capacity, limit, cells, per_shard):
        self.stages, self.lengths, self.share = stages, lengths, expert_share
        self.capacity, self.limit, self.per_shard = capacity, limit, per_shard
        self.cell_of = np.full(lengths.size, -1, dtype=np.int64)
        self.work = np.zeros((stages.shape[0], cells))
        self.tokens = np.zeros(cells, dtype=np.int64)
        self.count = np.zeros(cells, dtype=np.int64)
        self.expert = np.zeros(cells)
        self.left: list = []
        self.left_key: list = []

    def add(self, samples, cells) -> None:
        """Place ``samples`` in ``cells`` (distinct cells: the anchors)."""
        self.cell_of[samples] = cells
        self.work[:, cells] += self.stages[:, samples]
        self.tokens[cells] += self.lengths[samples]
        self.count[cells] += 1
        self.expert[cells] += self.share[samples]

    def room(self, cells) -> np.ndarray:
        return np.where(self.count[cells] < self.limit, self.capacity - self.tokens[cells], 0)

    def take(self, pos: int, cell: int) -> int:
        """Place the filler at ``pos`` of ``left`` in ``cell``; returns the sample."""
        self.left_key.pop(pos)
        i = self.left.pop(pos)
        self.cell_of[i] = cell
        self.work[:, cell] += self.stages[:, i]
        self.tokens[cell] += self.lengths[i]
        self.count[cell] += 1
        self.expert[cell] += self.share[i]
        return i

    def block_costs(self, row) -> tuple[np.ndarray, np.ndarray]:
        """(per-stage maxima [S, blocks], expert [blocks]) of the row's blocks."""
        k = self.per_shard
        return self.work[:, row].reshape(self.work.shape[0], -1, k).max(axis=2), \
            self.expert[row].reshape(-1, k).sum(axis=1)

    def to_levels(self, row, level) -> None:
        """Fill ``row`` up to its cells' attention ``level``: the cell furthest below its level
        takes the largest filler that stays within the level and the cell's room, until none
        fits."""
        open_cell = self.room(row) > 0
        deficit = level - self.work[:, row].sum(axis=0)
        while self.left:
            j = int(np.argmax(np.where(open_cell, deficit, -np.inf)))
            if not open_cell[j] or deficit[j] <= 0:
                break
            c = int(row[j])
            pos = bisect.bisect_right(self.left_key, deficit[j]) - 1
            room = self.capacity - self.tokens[c] if self.count[c] < self.limit else 0
            while pos >= 0 and self.lengths[self.left[pos]] > room:
                pos -= 1
            if pos < 0:
                open_cell[j] = False
                continue
            deficit[j] -= self.stages[:, self.take(pos, c)].sum()

    def top_up(self, row, later_room: int) -> bool:
        """While the rooms after ``row`` cannot hold the fillers left, ``row`` takes the
        largest that fits its roomiest cell; False when none fits."""
        while self.left and later_room < self.lengths[np.asarray(self.left)].sum():
            room = self.room(row)
            j = int(np.argmax(room))
            pos = len(self.left) - 1
            while pos >= 0 and self.lengths[self.left[pos]] > room[j]:
                pos -= 1
            if pos < 0:
                return False
            self.take(pos, int(row[j]))
        return True

    def last_row(self, row) -> bool:
        """Every filler left into the last row, largest first, each to the cell whose
        block's J rises least; False when one fits nowhere."""
        k = self.per_shard
        for i in sorted(self.left, key=lambda i: (-self.lengths[i], i)):
            fits = self.room(row) >= self.lengths[i]
            if not fits.any():
                return False
            stage_max, block_x = self.block_costs(row)
            joined = np.maximum(np.repeat(stage_max, k, axis=1), self.work[:, row] + self.stages[:, i:i + 1])
            new_cost = joined.sum(axis=0) + np.repeat(block_x, k)
            j = int(np.argmin(np.where(fits, new_cost + 1e-9 * self.tokens[row], np.inf)))
            pos = self.left.index(i)
            self.take(pos, int(row[j]))
        return True
