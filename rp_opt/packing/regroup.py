"""Regrouping whole cells: a layout's cells, kept as they are, moved to new (row, slot)
positions so that cells of like attention share a (row, shard) block.

A block's attention A[r,g] = sum_s n_s max_{d in g} c_s(d) is set by its costliest cell;
every other cell of the block is waste (MODEL.md, "Cost of a layout"). Sample moves (the
anneal's relocations and swaps, the block search's) cannot undo a block that mixes a
full-length sample (T_i = C, a cell of its own) with cells of two or more samples: the
full sample fits no other cell and no single sample of the other cells fits its cell. On
the N = 4096 ling-flash-like window the 5-s plan under ``shard`` had 0.37 % of its 0.51 %
gap in such waste, with three or four full-length cells in every block of one row.

Moving whole cells keeps every constraint (capacity, non-empty cells, the per-cell limit
m): only positions change. :func:`regroup_cells` sorts the cells by their stand-alone
attention sum_s n_s c_s(d), cuts the order into blocks of D/G cells (for one stage this
minimises sum over blocks of the max), and arranges the blocks in the [R, G] matrix for
the primary's first aggregate: sorted into consecutive groups for a sum of maxima (``sync``:
rows of like blocks), balanced by LPT with R (or G) blocks per group for a maximum of sums
(``shard``: equal shard totals). The caller keeps the result only when its energy is
lower; the search then trades the expert peaks the regrouping ignored.
"""

from __future__ import annotations

import numpy as np

from .state import Problem, State, load_layouts


def _cell_work(problem: Problem, cell_of: np.ndarray) -> np.ndarray:
    """[S, cells] stage work sum_i (alpha_s T_i + beta_s Q_i) of every cell."""
    work = problem.alpha[:, None] * problem.lengths[None, :] + problem.beta[:, None] * problem.work[None, :]
    return np.stack([np.bincount(cell_of, weights=w, minlength=problem.num_cells) for w in work])


def _balanced(values: np.ndarray, groups: int, size: int) -> np.ndarray:
    """[groups*size] group of every block, ``size`` blocks per group, with group sums as
    equal as LPT and then swaps of two blocks between the fullest group and another make
    them (the max of the sums never rises)."""
    order = np.argsort(-values, kind="stable")
    group = np.empty(values.size, dtype=np.int64)
    totals, counts = np.zeros(groups), np.zeros(groups, dtype=np.int64)
    for b in order:
        open_groups = np.flatnonzero(counts < size)
        g = open_groups[np.argmin(totals[open_groups])]
        group[b] = g
        totals[g] += values[b]
        counts[g] += 1
    for _ in range(4 * values.size):
        top = int(np.argmax(totals))
        mine = np.flatnonzero(group == top)
        others = np.flatnonzero(group != top)
        if others.size == 0:                     # one group (G = 1): nothing to balance
            break
        # swap (i in top, j elsewhere): top falls by d = v_i - v_j, the other rises by d;
        # the new larger of the two totals, for every pair at once
        d = values[mine][:, None] - values[others][None, :]
        new_max = np.maximum(totals[top] - d, totals[group[others]][None, :] + d)
        i, j = np.unravel_index(np.argmin(new_max), new_max.shape)
        if not new_max[i, j] < totals[top] - 1e-9 * max(abs(totals[top]), 1.0):
            break
        bi, bj = mine[i], others[j]
        totals[top] -= d[i, j]
        totals[group[bj]] += d[i, j]
        group[bi], group[bj] = group[bj], top
    return group


def _positions(problem: Problem, attention: np.ndarray, expert: np.ndarray) -> np.ndarray:
    """[blocks] new pair index r*G + g of blocks with these A and X, arranged for the
    primary's first aggregate: consecutive in decreasing value for a sum of maxima (optimal
    for fixed blocks), balanced groups for a maximum of sums."""
    p = problem
    first = p.aggregates[0]                 # a Term: the primary's first aggregate
    inner, axis, outer = first.inner, first.axis, first.outer
    values = first.attention * attention + first.expert * expert
    # the aggregate reduces `inner` within a row (axis 1: over shards) or a shard (axis 0)
    groups, size = (p.rows, p.shards) if axis == 1 else (p.shards, p.rows)
    if inner == "sum" and outer == "max":
        group = _balanced(values, groups, size)
    else:
        group = np.empty(values.size, dtype=np.int64)
        group[np.argsort(-values, kind="stable")] = np.arange(values.size) // size
    slot = np.empty(values.size, dtype=np.int64)
    for g in range(groups):
        members = np.flatnonzero(group == g)
        slot[members] = np.arange(members.size)
    row, shard = (group, slot) if axis == 1 else (slot, group)
    return row * p.shards + shard


def arrange_blocks(problem: Problem, cell_of: np.ndarray, attention: np.ndarray,
                   expert: np.ndarray) -> np.ndarray:
    """``cell_of`` with its (row, shard) blocks moved whole to new positions: each block's
    A and X stay, and the primary's first aggregate of them is as low as :func:`_positions`
    arranges it (for ``sync`` the least possible for these blocks).

    Parameters
    ----------
    problem
        The kernel's :class:`~rp_opt.packing.state.Problem`.
    cell_of
        [N] cell r*D + d of every sample.
    attention, expert
        [R*G] A and X of the layout's blocks, indexed by pair r*G + g.

    Returns
    -------
    numpy.ndarray
        [N] new cell of every sample (the block at pair b moves to its new pair with its
        slots in the same order).
    """
    p = problem
    target = _positions(p, attention, expert)
    new_cell = np.empty(p.num_cells, dtype=np.int64)
    new_cell[p.cells_of_pair] = p.cells_of_pair[target]
    return new_cell[np.asarray(cell_of, dtype=np.int64)]


def regroup_cells(problem: Problem, cell_of: np.ndarray) -> np.ndarray:
    """The layout ``cell_of`` with its cells moved whole to new positions (see the module
    docstring); the samples of each cell stay together, so the result is valid whenever
    ``cell_of`` is.

    Parameters
    ----------
    problem
        The kernel's :class:`~rp_opt.packing.state.Problem`.
    cell_of
        [N] cell r*D + d of every sample, every cell non-empty.

    Returns
    -------
    numpy.ndarray
        [N] new cell of every sample.
    """
    p = problem
    cell_of = np.asarray(cell_of, dtype=np.int64)
    # cells by stand-alone attention sum_s n_s c_s(d), costliest first: the b-th D/G of
    # them become pair b, and those blocks are arranged with the kernel's A and X
    order = np.argsort(-(p.layers @ _cell_work(p, cell_of)), kind="stable")
    new_cell = np.empty(p.num_cells, dtype=np.int64)
    new_cell[order] = p.cells_of_pair.ravel()
    state = State(p, 1)
    try:
        return _arranged(p, new_cell[cell_of], state)
    finally:
        state.close()


def _arranged(problem: Problem, cell_of: np.ndarray, state: State) -> np.ndarray:
    """:func:`arrange_blocks` of ``cell_of`` with A and X from replica 0 of ``state``, which
    it loads with ``cell_of``."""
    load_layouts(problem, state, [0], [cell_of])
    return arrange_blocks(problem, cell_of, state.attention[0], state.expert[0])


def rearranged(problem: Problem, cell_of: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The layout with its blocks arranged by :func:`arrange_blocks`, and both energies.

    Parameters
    ----------
    problem
        The kernel's :class:`~rp_opt.packing.state.Problem`.
    cell_of
        [N] a valid layout.

    Returns
    -------
    tuple
        (moved [N] layout, its energy, the energy of ``cell_of``), both energies from one
        fresh evaluation in a private two-replica state, freed before returning; the
        caller keeps the lower.
    """
    state = State(problem, 2)
    try:
        moved = _arranged(problem, cell_of, state)
        load_layouts(problem, state, [1], [moved])
        return moved, float(state.energy[1]), float(state.energy[0])
    finally:
        state.close()
