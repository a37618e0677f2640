"""Large-neighbourhood search over pairs of rows: re-solve the samples of two rows exactly,
the other rows held.

When level 1 is a sum over rows of a function of each row alone (``sync``: sum_r max_g
J[r,g]; ``sum J``; any objective when G = 1), the rows contribute independently. Take
two rows, and solve their samples exactly as a two-row window of their own (same cluster,
placement and objective): the other rows keep their cells, so level 1 changes by exactly
the sub-window's change, and the sub-window's later levels (its sum J, ...) steer ties as
the whole window's do. Other objectives (``shard``: max_g sum_r J[r,g]) couple the rows:
the two-row model then carries the other rows' A and X as constants (:func:`context`,
``CpsatPacking(context=...)``) and minimises the whole window's objective. Either way a
result is kept only when the whole window's score is better.
:func:`rp_opt.packing.exact.solve_packing` runs it before the model with G >= 2 only (with
one shard CP-SAT's own search does as well, and its bound needs the time).

CP-SAT finds good layouts of a 2-row window in seconds (scripts/bench_exact.py windows:
N = 32, G = 2 within 0.02 % of optimal in 60 s, N = 24 proven at G = 1), while on a
4-row window its own search improves a start slowly. Measured on the N = 64, G = 2,
sync window of scripts/bench_exact.py (throw-away runs, 2 cores): the heuristic start
37161.8; 19 s of this search 36998.5; CP-SAT then ended at 36986.9 with a bound of
36669.0 (0.86 %), against 37028.5 / 36584.8 (1.20 %) for 57 s of CP-SAT from the start.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...cost import Costs, layout_costs
from ...objectives import Objective
from ...result import lex_better
from ...solution import Layout, Placement
from ...window import Instance
from .common import renumbered

log = logging.getLogger("rp_opt")

# seconds one two-row solve may take at most (most prove or stall well within this)
SOLVE_SECONDS = 4.0
INTERRUPTED = "interrupted (Ctrl-C)"  # RowSearchStats.stopped after a Ctrl-C


def rows_separable(level, num_shards: int) -> bool:
    """True when ``level`` (sum_k c_k aggregate_k) is a sum over rows of a function of each
    row's entries alone: every aggregate sums over rows last (reduces the shards of a row
    first, or sums everything), or G = 1 and it sums the rows."""
    def separable(agg) -> bool:
        if agg.over == "shards" and agg.outer == "sum":
            return True  # sum_r inner_g M[r,g]
        if agg.inner == "sum" and agg.outer == "sum":
            return True  # sum_{r,g} M[r,g]
        # with one shard the shard reduction is the identity: sum_r M[r,0]
        return num_shards == 1 and agg.over == "rows" and agg.inner == "sum"

    return all(separable(agg) for _, agg in level)


@dataclass
class RowSearchStats:
    """What the search did: two-row solves, how many were kept, level 1 before and after."""

    solves: int = 0
    kept: int = 0
    start: float = 0.0
    end: float = 0.0
    seconds: float = 0.0
    stopped: str = ""
    history: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"solves": self.solves, "kept": self.kept, "start": self.start, "end": self.end,
                "seconds": self.seconds, "stopped": self.stopped,
                "history": [{"seconds": t, "rows": list(rows), "level1": v} for t, rows, v in self.history]}


def two_rows(layout: Layout, rows: tuple[int, int]) -> tuple[np.ndarray, Layout]:
    """The samples of ``rows`` (in increasing index, the window's numbering kept) and their
    layout as a two-row window (row ``rows[0]`` first)."""
    D = layout.num_slots
    row_of = layout.cell_of // D
    samples = np.flatnonzero((row_of == rows[0]) | (row_of == rows[1]))
    cells = layout.cell_of[samples]
    return samples, Layout(np.where(cells // D == rows[0], 0, 1) * D + cells % D, 2, D)


def context(costs: Costs, rows: tuple[int, int]):
    """(attention, expert_tokens), each [R - 2, G]: A of every block of the rows other than
    ``rows`` (cost units) and sum_l max_p W of it (tokens), in row order, from the layout's
    :func:`rp_opt.cost.layout_costs`; the constants of ``CpsatPacking(context=...)``."""
    others = np.setdiff1d(np.arange(costs.attention.shape[0]), rows)
    # W holds integer token counts (as floats): sum_l max_p W of every block
    return costs.attention[others], np.rint(costs.rank_load.max(axis=3).sum(axis=2)[others]).astype(np.int64)


def put_back(layout: Layout, rows: tuple[int, int], samples: np.ndarray, sub: Layout) -> Layout:
    """``layout`` with ``samples`` laid out as ``sub`` (a two-row layout) in ``rows``."""
    D = layout.num_slots
    cell_of = layout.cell_of.copy()
    cell_of[samples] = np.asarray(rows)[sub.cell_of // D] * D + sub.cell_of % D
    return Layout(cell_of, layout.num_rows, D)


def row_pair_search(instance: Instance, placement: Placement, layout: Layout, objective: Objective,
                    seconds: float, solve: Callable[..., tuple[Layout | None, bool]], *,
                    seed: int = 0) -> tuple[Layout, RowSearchStats]:
    """Improve ``layout`` by re-solving pairs of rows for ``seconds`` at most.

    Parameters
    ----------
    instance, placement, layout
        The window, its fixed placement and a valid layout to improve.
    objective
        The objective.
    seconds
        Wall-clock limit of the whole search.
    solve
        ``solve(sub_window, start, seconds, fixed) -> (Layout or None, proven)``: an exact
        two-row solve warm-started by ``start``, and whether its layout is proven optimal.
        ``fixed`` is None when level 1 is :func:`rows_separable` (the sub-window is a
        window of its own: :func:`rp_opt.packing.exact.solve_packing` with R = 2), else the
        other rows' :func:`context`, which the solve must count as the whole window does.
    seed
        Order in which the pairs are tried.

    Returns
    -------
    (Layout, RowSearchStats)
        The best layout (``layout`` itself when nothing better was found) and what the
        search did. Pairs that gave nothing, or were just solved to a proven optimum, are
        not tried again until one of their rows changes; the search ends early when every
        pair is such.
    """
    t0 = time.perf_counter()
    stats = RowSearchStats()
    # the current layout's costs: its score, and the fixed rows of each pair (context)
    costs = layout_costs(instance, placement, layout)
    best = objective.evaluate(costs)
    stats.start = stats.end = best[0]
    pairs = list(itertools.combinations(range(layout.num_rows), 2))
    tried: set = set()
    rng = np.random.default_rng(seed)
    separable = rows_separable(objective.levels[0], instance.cluster.edp)
    while True:
        left = seconds - (time.perf_counter() - t0)
        todo = [p for p in pairs if p not in tried]
        if not todo:
            stats.stopped = "every pair of rows solved without a gain"
            break
        if left < 0.5:
            stats.stopped = "time limit"
            break
        rows = todo[int(rng.integers(len(todo)))]
        samples, start = two_rows(layout, rows)
        fixed = None if separable else context(costs, rows)
        try:
            sub, proven = solve(renumbered(instance, samples), start, min(SOLVE_SECONDS, left), fixed)
        except KeyboardInterrupt:
            stats.stopped = INTERRUPTED  # the best layout so far comes back
            break
        stats.solves += 1
        tried.add(rows)
        if sub is None:
            continue
        candidate = put_back(layout, rows, samples, sub)
        candidate_costs = layout_costs(instance, placement, candidate)
        value = objective.evaluate(candidate_costs)
        if lex_better(value, best):
            layout, costs, best = candidate, candidate_costs, value
            stats.kept += 1
            stats.end = best[0]
            stats.history.append((round(time.perf_counter() - t0, 2), rows, best[0]))
            log.info("row search: rows %d, %d -> level 1 %.6g (%.1f s)", rows[0], rows[1], best[0],
                     time.perf_counter() - t0)
            # the pairs that share a row with these have new neighbours: try them again (this
            # pair too, unless its layout is proven optimal)
            tried = {p for p in tried if not set(p) & set(rows)} | ({rows} if proven else set())
    stats.seconds = time.perf_counter() - t0
    return layout, stats
