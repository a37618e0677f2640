"""Diverse starting layouts for the heuristic (all with exactly R*·D non-empty cells).

Rules, each a different view of the window:

- ``witness``: the R* certifier's witness layout (length-only, proven row count);
- ``ffd``: first-fit-decreasing by length (the AReaL baseline, :mod:`.baseline`);
- ``kk``: Karmarkar-Karp by attention workload (the verl rule, :mod:`.baseline`) into
  R*·D cells, with a capacity repair (:func:`kk_layout`);
- ``blocks`` / ``blocks-<rule>``: the cells of ffd (or of another rule's seed) re-arranged
  over rows and (row, shard) blocks (:func:`block_layout`): rows by attention, blocks
  balanced on per-layer rank loads;
- ``greedy``: expert-aware greedy: samples in decreasing cost (attention + expert cost
  alone), each to the feasible cell whose choice raises the partial objective least;
- ``anchors``: the R*·D longest samples one to a cell in decreasing length, the others
  poured row by row to the levels of a fluid LP (:mod:`.anchors`).

A rule that cannot produce a valid layout of exactly R* rows (capacity, the per-cell limit
m, every cell non-empty) is skipped; :func:`layout_violation` is the validity test.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from ..errors import InputError
from ..solution import Layout
from ..window import Instance

log = logging.getLogger("rp_opt")


def layout_violation(instance: Instance, layout: Layout, num_rows: int) -> str | None:
    """None when ``layout`` has ``num_rows`` rows, every cell non-empty, within C and m;
    otherwise the first violation in words."""
    cluster = instance.cluster
    if layout.num_rows != num_rows or layout.num_slots != cluster.dp:
        return f"shape {layout.num_rows}x{layout.num_slots}, expected {num_rows}x{cluster.dp}"
    if layout.cell_of.size != instance.window.num_samples:
        return f"places {layout.cell_of.size} samples, the window has {instance.window.num_samples}"
    count = np.bincount(layout.cell_of, minlength=layout.num_cells)
    tokens = np.bincount(layout.cell_of, weights=instance.window.lengths, minlength=layout.num_cells)
    if np.any(count == 0):
        return f"cell {int(np.argmax(count == 0))} is empty"
    if np.any(tokens > cluster.capacity):
        return f"cell {int(np.argmax(tokens > cluster.capacity))} is over the capacity"
    m = cluster.max_samples_per_cell
    if m is not None and np.any(count > m):
        return f"cell {int(np.argmax(count > m))} holds more than m={m} samples"
    return None


def greedy_seconds(instance: Instance, num_rows: int, num_ranks: int) -> float:
    """Rough wall time of :func:`greedy_layout`: N (R G L P / 8e8 + 4e-5) seconds.

    Fitted on the 2-core benchmark machine (ling-flash-like windows of
    scripts/bench_heuristic.py, G = 8, L = 48, P = 8, N = 512 .. 16384 with R* = 2 .. 61;
    2026-12-05): measured 0.019, 0.042, 0.116, 0.36, 1.22 and 3.88 s; the formula gives
    0.024, 0.057, 0.145, 0.42, 1.30 and 4.49 s, at or above every measurement. (The first
    fit, 2026-11-29, N (R G L P / 5e8 + 7e-5), had become about twice the time; the heuristic
    then let the greedy take half the limit by it, now 0.3 by this one: the same windows get
    the greedy, docs/benchmarks.md.)
    """
    window = instance.window
    pairs = num_rows * instance.cluster.edp
    return window.num_samples * (pairs * window.num_layers * num_ranks / 8e8 + 4e-5)


def greedy_layout(instance: Instance, num_rows: int, demand_by_rank: np.ndarray, eps: float = 1e-6) -> Layout | None:
    """Expert-aware greedy layout, or None when it cannot place every sample.

    Samples go in decreasing stand-alone cost sum_s n_s(alpha_s T_i + beta_s Q_i) +
    gamma sum_l max_p dem[i,l,p]; each to the feasible cell (capacity, m, and once the
    samples left equal the empty cells, an empty cell) minimising the increase of
    sum_r max_g J + eps * sum J of the partial layout. Every cell's new J is computed at
    once: the shard's attention max only grows, max(old max, cell + sample), and the
    shard's expert cost is evaluated for all (row, shard) pairs in one array operation.
    """
    from ..cost import sample_attention, stage_work

    window, cluster, cost = instance.window, instance.cluster, instance.cost
    n, num_layers, num_ranks = demand_by_rank.shape
    slots, shards = cluster.dp, cluster.edp
    per_shard = slots // shards
    cells = num_rows * slots
    if cells > n:
        return None
    pairs = num_rows * shards
    pair_of_cell = (np.arange(cells) // slots) * shards + (np.arange(cells) % slots) // per_shard
    row_of_pair = np.arange(pairs) // shards
    work = stage_work(window, cost)                                       # [S, N]
    layers = cost.layers
    expert_alone = cost.gamma * demand_by_rank.max(axis=2).sum(axis=1)
    order = np.argsort(-(sample_attention(window, cost) + expert_alone), kind="stable")

    cell_work = np.zeros((work.shape[0], cells))                         # [S, cells]
    stage_max = np.zeros((work.shape[0], pairs))                         # [S, pairs]
    tokens = np.zeros(cells, dtype=np.int64)
    count = np.zeros(cells, dtype=np.int64)
    # rank-major [pairs, P, L]: the max over p is an elementwise max of P contiguous rows
    dem = np.ascontiguousarray(demand_by_rank.transpose(0, 2, 1), dtype=np.int32)
    loads = np.zeros((pairs, num_ranks, num_layers), dtype=np.int32)     # W[pair, p, l]
    attn = np.zeros(pairs)
    expert = np.zeros(pairs)
    limit = cluster.max_samples_per_cell or n
    cell_of = np.empty(n, dtype=np.int64)
    empty = cells
    for left, i in zip(range(n, 0, -1), order):
        ok = (tokens + window.lengths[i] <= cluster.capacity) & (count < limit)
        if left <= empty:
            ok &= count == 0
        if not ok.any():
            return None
        # attention of every cell's shard if i joins that cell (the shard max only grows)
        joined = np.maximum(stage_max[:, pair_of_cell], cell_work + work[:, i:i + 1])
        new_attn = layers @ joined                                          # [cells]
        new_expert = cost.gamma * (loads + dem[i]).max(axis=1).sum(axis=1)  # [pairs]
        joint = attn + expert
        row_max = joint.reshape(num_rows, shards).max(axis=1)[row_of_pair[pair_of_cell]]
        new_joint = new_attn + new_expert[pair_of_cell]
        rise = np.maximum(row_max, new_joint) - row_max + eps * (new_joint - joint[pair_of_cell])
        c = int(np.argmin(np.where(ok, rise, np.inf)))
        cell_of[i] = c
        empty -= count[c] == 0
        count[c] += 1
        tokens[c] += window.lengths[i]
        cell_work[:, c] += work[:, i]
        p = pair_of_cell[c]
        stage_max[:, p] = np.maximum(stage_max[:, p], cell_work[:, c])
        loads[p] += dem[i]
        attn[p] = new_attn[c]
        expert[p] = new_expert[p]
    return Layout(cell_of, num_rows, slots)


def kk_layout(instance: Instance, num_rows: int) -> Layout | None:
    """Karmarkar-Karp by attention workload (the verl rule, :func:`.baseline.kk_partition`)
    into R*·D cells of equal counts, made feasible by a repair; None when the repair fails.

    Repair: every cell over the capacity C (or over m samples) gives up its smallest samples
    until it fits (it keeps at least one); the displaced samples, longest first, go to the
    cell with the least room that still holds them (best fit) and is below m.
    """
    from .baseline import kk_partition, workload_constant

    window, cluster = instance.window, instance.cluster
    cells = num_rows * cluster.dp
    if cells > window.num_samples:
        return None
    lengths = window.lengths.astype(np.int64)
    c = workload_constant(instance.cost)
    weights = lengths.astype(np.float64) if not np.isfinite(c) else c * lengths + lengths.astype(np.float64) ** 2
    cell_of = kk_partition(weights, cells).astype(np.int64)
    capacity = cluster.capacity
    limit = cluster.max_samples_per_cell or window.num_samples
    tokens = np.bincount(cell_of, weights=lengths, minlength=cells).astype(np.int64)
    count = np.bincount(cell_of, minlength=cells)
    # samples of each cell in increasing length: a cell over C or m sheds its shortest prefix
    order = np.lexsort((lengths, cell_of))
    starts = np.searchsorted(cell_of[order], np.arange(cells))
    displaced = []
    for cell in np.flatnonzero((tokens > capacity) | (count > limit)).tolist():
        members = order[starts[cell]:starts[cell] + count[cell]]
        shed = np.cumsum(lengths[members])
        # the fewest shortest samples whose removal brings the cell within C and m
        need_tokens = int(np.searchsorted(shed, tokens[cell] - capacity)) + (tokens[cell] > capacity)
        drop = min(max(need_tokens, int(count[cell] - limit)), int(count[cell]) - 1)
        out = members[:drop]
        displaced.extend(out.tolist())
        tokens[cell] -= int(lengths[out].sum())
        count[cell] -= drop
        if tokens[cell] > capacity:
            return None
    big = np.iinfo(np.int64).max
    for i in sorted(displaced, key=lambda i: -lengths[i]):
        room = capacity - tokens - lengths[i]
        room = np.where((room >= 0) & (count < limit), room, big)
        cell = int(np.argmin(room))
        if room[cell] == big:
            return None
        cell_of[i] = cell
        tokens[cell] += lengths[i]
        count[cell] += 1
    return Layout(cell_of, num_rows, cluster.dp)


def block_layout(instance: Instance, base: Layout, demand_by_rank: np.ndarray) -> Layout:
    """Block-aware arrangement of the cells of ``base``: the same cell contents (so C, m and
    non-empty cells hold as in ``base``), moved to other (row, slot) positions.

    Rows: cells in decreasing stand-alone attention, D to a row. The attention of a row is
    the maximum over its cells (``sync`` pays sum_r max_g J), so long samples are gathered
    in the same rows rather than spread: spreading one full-length cell into every row
    would make every row pay its attention. Blocks: within every row, cells in decreasing
    stand-alone cost go LPT-style to the non-full (row, shard) block whose J = A + X is
    least after adding the cell, X computed from the block's summed per-layer rank loads
    (gamma sum_l max_p W), so cells with complementary routing share a block. All rows are
    processed at once: D steps, each one array operation over [R, G, P, L].
    """
    from ..cost import stage_work

    window, cluster, cost = instance.window, instance.cluster, instance.cost
    rows, slots, shards = base.num_rows, cluster.dp, cluster.edp
    per_shard = slots // shards
    cells = rows * slots
    n, num_layers, num_ranks = demand_by_rank.shape
    cell_of = base.cell_of
    work = stage_work(window, cost)                                        # [S, N]
    cell_work = np.stack([np.bincount(cell_of, weights=w, minlength=cells) for w in work])  # [S, cells]
    order = np.argsort(cell_of, kind="stable")
    starts = np.searchsorted(cell_of[order], np.arange(cells))
    major = demand_by_rank.transpose(0, 2, 1).reshape(n, -1)               # [N, P*L]
    loads = np.add.reduceat(major[order].astype(np.int64), starts, axis=0)  # [cells, P*L]
    attention = cost.layers @ cell_work                                    # [cells]
    expert_alone = cost.gamma * loads.reshape(cells, num_ranks, num_layers).max(axis=1).sum(axis=1)
    by_attention = np.lexsort((-expert_alone, -attention))                 # decreasing attention
    row_cells = by_attention.reshape(rows, slots)
    # within each row: decreasing stand-alone cost (LPT order)
    alone = (attention + expert_alone)[row_cells]
    row_cells = np.take_along_axis(row_cells, np.argsort(-alone, axis=1, kind="stable"), axis=1)
    stages = work.shape[0]
    stage_max = np.zeros((stages, rows, shards))
    block_load = np.zeros((rows, shards, num_ranks * num_layers), dtype=np.int64)
    fill = np.zeros((rows, shards), dtype=np.int64)
    new_cell = np.empty(cells, dtype=np.int64)
    r_idx = np.arange(rows)
    for k in range(slots):
        c = row_cells[:, k]                                                # [R] one cell per row
        joined = block_load + loads[c][:, None, :]                         # [R, G, P*L]
        x = cost.gamma * joined.reshape(rows, shards, num_ranks, num_layers).max(axis=2).sum(axis=2)
        a = np.tensordot(cost.layers, np.maximum(stage_max, cell_work[:, c][:, :, None]), axes=1)  # [R, G]
        g = np.argmin(np.where(fill < per_shard, a + x, np.inf), axis=1)   # [R]
        new_cell[c] = r_idx * slots + g * per_shard + fill[r_idx, g]
        fill[r_idx, g] += 1
        block_load[r_idx, g] += loads[c]
        stage_max[:, r_idx, g] = np.maximum(stage_max[:, r_idx, g], cell_work[:, c])
    return Layout(new_cell[cell_of], rows, slots)


def seed_layouts(instance: Instance, num_rows: int, demand_by_rank: np.ndarray, witness: Layout | None = None,
                 rules=("witness", "ffd", "kk", "greedy"), deadline: float | None = None) -> dict[str, Layout]:
    """Valid starting layouts by name (rules that fail or break a constraint are left out).

    Parameters
    ----------
    instance
        The window.
    num_rows
        R*; every layout returned has exactly this many rows, all R*·D cells non-empty.
    demand_by_rank
        ``rank_demand(window, placement)`` [N, L, P] for the expert-aware greedy.
    witness
        The certifier's witness layout, when known.
    rules
        Which rules to run, in order.
    deadline
        ``time.perf_counter()`` value after which no further rule starts once one layout
        is built (a time limit shorter than all the rules take: the first rules are the
        cheap ones). None: every rule runs.
    """
    from .baseline import pack

    out: dict[str, Layout] = {}
    for rule in rules:
        if deadline is not None and out and time.perf_counter() >= deadline:
            log.info("seed rules %s skipped: deadline", ", ".join(rules[rules.index(rule):]))
            break
        layout = None
        try:
            if rule == "witness":
                layout = witness
            elif rule == "ffd":
                layout, _ = pack(instance, rule, num_rows)
            elif rule == "kk":
                layout = kk_layout(instance, num_rows)
            elif rule.startswith("blocks"):
                # blocks (of ffd / the witness) and blocks-<rule> (of another seed's cells)
                base_rule = rule.partition("-")[2]
                base = out.get(base_rule) if base_rule else out.get("ffd", out.get("witness"))
                if base is None and not base_rule:
                    base = pack(instance, "ffd", num_rows)[0] if witness is None else witness
                layout = None if base is None else block_layout(instance, base, demand_by_rank)
            elif rule == "greedy":
                layout = greedy_layout(instance, num_rows, demand_by_rank)
            elif rule == "anchors":
                from .anchors import anchor_layout

                layout = anchor_layout(instance, num_rows, demand_by_rank=demand_by_rank)
            else:
                raise ValueError(f"unknown seed rule {rule!r}")
        except Exception as exc:
            # a bad argument (ValueError: an unknown rule, a bad option) propagates; a baseline
            # that cannot fill R* rows (InputError("window"), itself a ValueError) or any
            # other failure of a rule only leaves that rule without a seed
            if isinstance(exc, ValueError) and not (isinstance(exc, InputError) and exc.field == "window"):
                raise
            log.info("seed %s failed: %s", rule, exc)
            layout = None
        if layout is None:
            continue
        why = layout_violation(instance, layout, num_rows)
        if why is None:
            out[rule] = layout
        else:
            log.info("seed %s skipped: %s", rule, why)
    return out
