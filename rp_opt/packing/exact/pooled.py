"""A bound on level 1 from the blocks alone, wherever they sit in the grid ("pooled").

Every aggregate of J is at least the mean of what it reduces: a sum over an axis adds its
entries, a max is at least their mean, so an aggregate that adds ``count`` entries of the
R x G matrix (:func:`.common.aggregate_count`: 1 per max, the axis length per sum) is at
least count / (R G) times the sum of all R G entries. For level 1 = sum_k c_k agg_k of
M_k = a_k A + x_k X:

    level 1  >=  alpha sum_{r,g} A[r,g] + beta sum_{r,g} X[r,g],
    alpha = sum_k c_k a_k count_k / (R G),   beta = sum_k c_k x_k count_k / (R G)

(``shard``: max_g sum_r J >= sum J / G). The right side depends only on the R G blocks
(which samples, in which k = D / G cells), not on where they sit. Minimising it is the
packing of a window with one shard and R G rows of k slots (same capacity, sample limit,
placement): cell r D + g k + j of a layout is cell (r G + g) k + j of the pooled window,
the same number, so the two windows have the same layouts, and a block (r, g) costs in
the pooled window what it costs in the grid. The pooled model's proven bound therefore
bounds level 1 of the grid.

Why it is worth a solve: in the pooled window every block is interchangeable with every
other (the model's symmetry chains cut (R G)! orders instead of R!^G G! for ``shard``),
and its objective is a sum, with no maximum over shards for the LP to average. N = 64,
G = 2 (R = 4) ``shard`` window of scripts/bench_exact.py, seed 0: the pooled bound after
25 s was 35999.9 and after 44 s 36007.5, against 35830.8 and 35857.2 from the ``shard``
model itself after 28 s and 60 s.
"""

from __future__ import annotations

from dataclasses import replace

from ...objectives import Aggregate, Objective, get_objective
from ...solution import Layout
from ...window import Cluster, Instance
from .common import aggregate_count
from .row_search import rows_separable


# windows of at most this many samples take the pooled bound by column generation over
# blocks (.columns: the set-partitioning LP), larger ones by the CP-SAT pooled model, whose
# bound was the stronger in the time at N = 64 (see .columns)
COLUMNS_MAX_SAMPLES = 48


def pooled_objective(objective, num_rows: int, num_shards: int) -> Objective | None:
    """The one-level objective alpha sum A + beta sum X that bounds level 1 of
    ``objective`` from below for every layout of ``num_rows`` x ``num_shards`` blocks (see
    the module docstring); None when it weighs nothing."""
    level = get_objective(objective).levels[0]
    blocks = num_rows * num_shards
    alpha = sum(c * agg.attention * aggregate_count(agg, num_rows, num_shards) for c, agg in level) / blocks
    beta = sum(c * agg.expert * aggregate_count(agg, num_rows, num_shards) for c, agg in level) / blocks
    if alpha <= 0 and beta <= 0:
        return None
    total = Aggregate("sum", "rows", "sum", alpha, beta)  # sum_{r,g} (alpha A + beta X)
    return Objective("pooled", (((1.0, total),),), "level 1's block-mean bound: alpha sum A + beta sum X")


def pooled_instance(instance: Instance) -> Instance:
    """``instance`` with one shard of D / G slots: its R G rows are the grid's blocks."""
    cluster = instance.cluster
    per_shard = cluster.dp // cluster.edp
    return replace(instance, cluster=Cluster(per_shard, 1, cluster.ep, cluster.capacity,
                                             cluster.max_samples_per_cell))


def pooled_useful(objective, num_rows: int, num_shards: int) -> bool:
    """Whether the pooled bound is worth its solve: G >= 2 (with one shard the pooled
    window is the window), R >= 3 (two-row windows of the benchmark are proven by the model
    itself), and a level 1 that is not a sum over rows of each row's cost (``sync``'s row
    maxima give its model a bound above the block mean: N = 64, G = 2, seed 0, 36677.7
    against the mean's 36007.5)."""
    level = get_objective(objective).levels[0]
    return num_shards >= 2 and num_rows >= 3 and not rows_separable(level, num_shards)


def pooled_bound(instance: Instance, placement, num_rows: int, objective, start, seconds: float, seed: int,
                 **options) -> dict:
    """Bound the pooled window (:func:`pooled_instance`, :func:`pooled_objective`) for
    ``seconds``, from ``start`` (a layout of the grid, or None), and return the stats:
    ``bound`` (a lower bound of level 1 of ``objective`` for every layout of the grid; None
    without one), ``status``, ``seconds``, ``alpha``, ``beta`` and, after a Ctrl-C,
    ``interrupted``. Windows of at most :data:`COLUMNS_MAX_SAMPLES` samples with a start:
    the set-partitioning LP over blocks by column generation
    (:func:`.columns.block_column_bound`; ``method`` = ``columns``, with ``lp``,
    ``iterations``, ``columns``); others: the pooled model solved by CP-SAT, with ``value``
    (the pooled objective of its best layout). ``options`` go to
    :func:`rp_opt.packing.exact.solve_packing` (workers, subsolvers, symmetry, tighten,
    together); the pooled solve runs no heuristic start, relaxation or row search."""
    from . import solve_packing

    num_shards = instance.cluster.edp
    pooled = pooled_objective(objective, num_rows, num_shards)
    if pooled is None:
        return {"bound": None, "status": "skipped", "reason": "level 1 weighs neither A nor X"}
    total = pooled.levels[0][0][1]
    if start is not None and instance.window.num_samples <= COLUMNS_MAX_SAMPLES:
        from .columns import block_column_bound
        from .common import packing_data

        data = packing_data(instance, placement, num_rows)
        out = block_column_bound(data, total.attention, total.expert, start, seconds, seed=seed,
                                 workers=options.get("workers") or 2)
        out.update(alpha=total.attention, beta=total.expert)
        return out
    sub = pooled_instance(instance)
    blocks = num_rows * num_shards
    sub_start = None if start is None else Layout(start.cell_of, blocks, sub.cluster.dp)  # same cell numbers
    res = solve_packing(sub, placement, blocks, objective=pooled, time_limit=seconds, seed=seed, start=sub_start,
                        heuristic_start=False, relax_bound=False, row_search=False, pooled_bound=False, **options)
    out = {"bound": res.bound, "value": res.score[0] if res.score else None, "status": res.status,
           "seconds": res.seconds, "alpha": total.attention, "beta": total.expert}
    if res.stats.get("interrupted"):
        out["interrupted"] = True  # Ctrl-C: the bound so far (still valid)
    return out
