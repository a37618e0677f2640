"""LP-based packing heuristic: round the arc-flow LP and solve the residual exactly.

For IRUP instances (Falkenauer, Scholl, most of hard28) the arc-flow LP optimum rounded up
is the bin-packing optimum, and an optimal LP vertex is "almost integral": its path
decomposition holds many patterns with value >= 1. Diving (sequential rounding) fixes
those, re-solves the LP of the residual items on the graph pruned by the residual waste
budget, until every item is in a fixed bin. (Fixing the floors once and deciding the
residual exactly with CP-SAT was tried first: the residuals stayed too large.)

Packings returned here are unverified: the caller checks them.
"""

from __future__ import annotations

import dataclasses
import time

import highspy
import numpy as np

from .. import _highs
from . import arcflow
from .clock import OutOfTime

EPS = 1e-6
SIMPLEX_MAX_ARCS = 10_000


def lp_flow(graph: arcflow.ArcFlowGraph, max_bins: int, time_limit: float) -> np.ndarray | None:
    """An optimum of the arc-flow LP with at most ``max_bins`` bins: the flow on item arcs
    then loss arcs, or None when not solved (or ``time_limit`` is below the LP's untimed
    fixed cost, :func:`.arcflow.lp_fits`). Simplex (a vertex: fewer fractional paths) on
    small graphs; interior point with crossover (still a vertex) on large ones, where the
    degenerate simplex takes many seconds (hard28: 8-30 s against about 3 s)."""
    return DiveLP(graph, max_bins).solve(graph, max_bins, time_limit)


class DiveLP:
    """The arc-flow LP of one graph, re-solved from its last basis as a dive goes on.

    A dive step's LP is the LP of a subgraph (the arcs of sizes still wanted, pruned by
    the residual waste) with less demand and fewer bins. Here that is one HiGHS model of the
    whole graph whose other arcs get upper bound 0 and whose demand and bin rows get the
    step's values: the dual simplex starts from the last step's basis instead of from
    nothing (Hard28_BPP742, 13108 arcs, 40 s of dives: 510 LPs against 149; BPP195, 39772
    arcs, found a 64-bin packing in 15.7 s where 50 s of cold dives found none). The first
    solve of a large graph is interior point with crossover (a basis), as :func:`lp_flow`
    (which is one solve of a fresh model). The HiGHS model is built at the first solve
    that fits its time.
    """

    def __init__(self, graph: arcflow.ArcFlowGraph, max_bins: int):
        self.graph = graph
        self.max_bins = max_bins
        self.num_items = graph.arc_tail.size
        self.num_cols = self.num_items + graph.nodes.size - 1
        self._h = None
        self._solved = False

    def _build(self) -> None:
        graph = self.graph
        self._keys = graph.arc_tail * graph.sizes.size + graph.arc_type    # (tail, size) names an arc
        self._order = np.argsort(self._keys, kind="stable")
        self._h = arcflow._highs(0.0)
        arcflow.pass_model(self._h, graph, integral=False, max_bins=self.max_bins)

    def solve(self, sub: arcflow.ArcFlowGraph, max_bins: int, time_limit: float) -> np.ndarray | None:
        """The LP optimum of ``sub`` (this graph or a subgraph of it, with its own demand
        and ``min_fill``) with at most ``max_bins`` bins, in ``sub``'s column order; None
        when not solved in ``time_limit`` (or below the LP's fixed cost,
        :func:`.arcflow.lp_fits`: then not started)."""
        if not arcflow.lp_fits(sub, time_limit):
            return None
        if self._h is None:
            self._build()
        graph, h = self.graph, self._h
        items = self._order[np.searchsorted(self._keys[self._order], sub.arc_tail * graph.sizes.size + sub.arc_type)]
        losses = np.searchsorted(graph.nodes, sub.nodes[1:]) - 1            # loss column of each sub node
        upper = np.zeros(self.num_cols)
        upper[items] = highspy.kHighsInf
        open_loss = sub.nodes[1:] // graph.width >= sub.min_fill
        upper[self.num_items + losses[open_loss]] = highspy.kHighsInf
        h.changeColsBounds(self.num_cols, np.arange(self.num_cols, dtype=np.int32), np.zeros(self.num_cols), upper)
        # demand rows: sum_{arcs of size j} x >= b_j (residual); bins row: sum x <= bins left
        k, first = graph.sizes.size, graph.nodes.size - 1
        h.changeRowsBounds(k, (first + np.arange(k)).astype(np.int32), sub.demand.astype(np.float64),
                           np.full(k, highspy.kHighsInf))
        h.changeRowBounds(first + k, 0.0, float(max_bins))
        cold_and_large = not self._solved and self.num_items > SIMPLEX_MAX_ARCS
        h.setOptionValue("solver", "ipm" if cold_and_large else "simplex")
        h.setOptionValue("run_crossover", "on")
        # HiGHS measures time_limit on the model's clock, which runs on across solves (a
        # limit of the time left alone stopped later solves at once, "time limit reached",
        # once the earlier ones had used more than that)
        h.setOptionValue("time_limit", h.getRunTime() + float(max(time_limit, 0.0)))
        _highs.run(h)
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        self._solved = True
        x = np.asarray(h.getSolution().col_value)
        return np.concatenate([x[items], x[self.num_items + losses]])


def paths(graph: arcflow.ArcFlowGraph, flow: np.ndarray) -> list[tuple[np.ndarray, float]]:
    """Decompose an arc flow into bin patterns: (count per size index, value) pairs.

    Greedy: from the source follow the largest outgoing flow (item arcs or the loss arc of
    the node) to the sink, take the path's bottleneck value, subtract it, repeat.
    """
    nodes = graph.nodes
    n_item = graph.arc_tail.size
    tail = np.searchsorted(nodes, graph.arc_tail)
    head = np.searchsorted(nodes, graph.arc_head)
    left = np.asarray(flow, dtype=float).copy()
    left[left < EPS] = 0.0
    out: list[list[int]] = [[] for _ in range(nodes.size)]
    for a in np.flatnonzero(left[:n_item] > 0).tolist():
        out[tail[a]].append(a)
    result = []
    k = graph.sizes.size
    while True:
        first = [a for a in out[0] if left[a] > EPS]
        if not first:
            break
        v, arcs, counts = 0, [], np.zeros(k, dtype=np.int64)
        while True:
            cand = [a for a in out[v] if left[a] > EPS]
            loss = n_item + v - 1 if v > 0 else None
            best = max(cand, key=lambda a: left[a]) if cand else None
            if loss is not None and left[loss] > EPS and (best is None or left[loss] >= left[best]):
                arcs.append(loss)
                break
            if best is None:
                arcs = []          # numerical dead end: drop this path
                break
            arcs.append(best)
            counts[graph.arc_type[best]] += 1
            v = head[best]
        if not arcs:
            break
        value = float(min(left[a] for a in arcs))
        left[arcs] -= value
        result.append((counts, value))
    return result


def _assemble(lengths, sizes, kept, res_lengths, sub_bin) -> np.ndarray:
    """bin_of over the real items: fixed bins first, then the residual packing's bins."""
    pools: dict[int, list[int]] = {}
    for i in np.argsort(lengths, kind="stable").tolist():
        pools.setdefault(int(lengths[i]), []).append(i)
    bin_of = np.full(lengths.size, -1, dtype=np.int64)
    b = 0
    for counts in kept:
        for j in np.flatnonzero(counts).tolist():
            for _ in range(int(counts[j])):
                bin_of[pools[int(sizes[j])].pop()] = b
        b += 1
    if res_lengths.size:
        _, sub_bin = np.unique(sub_bin, return_inverse=True)
        for w, sb in zip(res_lengths.tolist(), sub_bin.tolist()):
            bin_of[pools[int(w)].pop()] = b + int(sb)
    return bin_of


def _restrict(graph: arcflow.ArcFlowGraph, demand: np.ndarray) -> arcflow.ArcFlowGraph:
    """The graph with demand ``demand`` and no arcs of sizes whose demand is 0."""
    keep = demand[graph.arc_type] > 0
    return dataclasses.replace(graph, demand=demand, arc_tail=graph.arc_tail[keep],
                               arc_head=graph.arc_head[keep], arc_type=graph.arc_type[keep])


def dive(graph: arcflow.ArcFlowGraph, lengths: np.ndarray, max_bins: int, deadline: float,
         rng: np.random.Generator, stats: dict | None = None, fix_share: float = 1.0,
         start: tuple | None = None, trail: list | None = None) -> np.ndarray | None:
    """LP diving toward a packing into ``max_bins`` bins (sequential rounding).

    Repeat: solve the arc-flow LP of the residual items on the graph pruned by the residual
    waste budget, decompose it into patterns, fix floor(value) copies of each (or, when all
    values are fractional, one copy of a pattern drawn among the largest values), and
    subtract them; with ``fix_share`` < 1 only that share of the integral patterns (drawn at
    random) is fixed per LP, a slower but less greedy dive (better on triplets, where all
    bins must be exactly full). Stops when every item is in a fixed bin, or the residual LP needs more
    bins than are left (a failed dive). Randomised by ``rng`` (ties and fractional picks).
    ``start`` = (residual demand, fixed patterns) resumes from a state of an earlier dive;
    every state this dive passes through is appended to ``trail`` (for such restarts).
    """
    stats = {} if stats is None else stats
    lengths = np.asarray(lengths, dtype=np.int64)
    c = graph.capacity
    sizes = graph.sizes
    model = DiveLP(graph, max_bins)  # the step LPs, each re-solved from the last basis
    if start is None:
        demand, fixed = graph.demand.astype(np.int64).copy(), []
    else:
        demand, fixed = start[0].copy(), list(start[1])
    steps = 0
    while demand.sum() > 0:
        if trail is not None:
            trail.append((demand.copy(), list(fixed)))
        if time.perf_counter() >= deadline:
            return None
        bins_left = max_bins - len(fixed)
        waste = bins_left * c - int(np.dot(demand, sizes))
        if bins_left <= 0 or waste < 0:
            return None
        g = arcflow.prune(_restrict(graph, demand), waste)
        # no floor on the LP's time (0.05 s ran dives past the deadline); the LP declines
        # one that cannot finish in the time left (and then builds no model)
        flow = model.solve(g, bins_left, deadline - time.perf_counter())
        steps += 1
        stats["lp_solves"] = stats.get("lp_solves", 0) + 1
        if flow is None:
            return None
        pats = paths(g, flow)
        if not pats:
            return None
        whole = [(p, int(np.floor(v + EPS))) for p, v in pats if v + EPS >= 1.0]
        if not whole:
            values = np.array([v for _, v in pats])
            top = np.argsort(-values)[: 3]
            pick = int(rng.choice(top, p=values[top] / values[top].sum()))
            whole = [(pats[pick][0], 1)]
        rng.shuffle(whole)
        if fix_share < 1.0 and len(whole) > 1:
            whole = whole[: max(1, int(np.ceil(fix_share * len(whole))))]
        for counts, copies in whole:
            for _ in range(copies):
                take = np.minimum(counts, demand)
                if take.sum() == 0:
                    break
                demand -= take
                fixed.append(take)
    stats["dive_steps"] = steps
    if len(fixed) > max_bins:
        return None
    return _assemble(lengths, sizes, fixed, np.zeros(0, dtype=np.int64), None)


def repair(graph: arcflow.ArcFlowGraph, lengths: np.ndarray, max_bins: int, state: tuple, deadline: float,
           rng: np.random.Generator, release: int = 12, stats: dict | None = None,
           max_arcs: int = 10_000) -> np.ndarray | None:
    """Complete a failed dive: release ``release`` of its fixed bins (the most wasteful half,
    then random ones) and decide their items plus the residual exactly, with the HiGHS MIP on
    the sub-instance's arc-flow graph pruned by its waste budget (skipped beyond ``max_arcs``
    item arcs, where the MIP could overrun its time limit). A packing or None."""
    stats = {} if stats is None else stats
    demand, fixed = state
    c = graph.capacity
    sizes = graph.sizes
    if not fixed:
        return None
    waste_of = np.array([c - int(np.dot(f, sizes)) for f in fixed])
    r = min(release, len(fixed))
    worst = np.argsort(-waste_of, kind="stable")[: r // 2]
    rest = np.setdiff1d(np.arange(len(fixed)), worst)
    free = set(worst.tolist()) | set(rng.choice(rest, size=min(r - worst.size, rest.size), replace=False).tolist())
    kept = [f for i, f in enumerate(fixed) if i not in free]
    residual = graph.demand.astype(np.int64) - (np.sum(kept, axis=0) if kept else 0)
    res_lengths = np.repeat(sizes, residual)
    bins_left = max_bins - len(kept)
    waste = bins_left * c - int(res_lengths.sum())
    left = deadline - time.perf_counter()
    if waste < 0 or bins_left <= 0 or left <= 0.02:
        return None
    try:
        sub = arcflow.build_graph(res_lengths, c, graph.max_items, max_arcs=4 * max_arcs, deadline=deadline)
    except (arcflow.GraphTooLarge, OutOfTime):
        return None
    sub = arcflow.prune(sub, waste)
    if sub.arc_tail.size > max_arcs:
        return None
    res = arcflow.solve_mip(sub, res_lengths, left, max_bins=bins_left)
    stats["repairs"] = stats.get("repairs", 0) + 1
    if res.bin_of is None:
        return None
    stats["repaired"] = stats.get("repaired", 0) + 1
    return _assemble(np.asarray(lengths, dtype=np.int64), sizes, kept, res_lengths, res.bin_of)
