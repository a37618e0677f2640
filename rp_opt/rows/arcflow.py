"""Arc-flow model of bin packing (Valerio de Carvalho, 1999), solved with HiGHS (highspy).

Nodes are the partial sums u of a bin (and, with a per-bin item limit m, the item count c:
node (u, c)); an item arc (u, c) -> (u + w_j, c + 1) places one item of size w_j; a loss arc
(u, c) -> sink closes the bin. A bin is a path from (0, 0) to the sink, a packing is an
integral flow. Compression: only partial sums reachable by larger-or-equal items get arcs
of size w_j (items in non-increasing order along a path), each size at most
min(b_j, C div w_j, m) times from the source's reach.

The LP bound is certified without trusting floating point: the LP duals y_j of the demand
rows are rounded down to integers, the heaviest bin pattern M = max sum_j y_j x_j is
computed exactly by a bounded-knapsack DP, and B >= ceil(sum_j b_j y_j / M) by weak duality.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from .._highs import run as run_highs, silence_banner
from .._stoppable import Abandoned
from .clock import OutOfTime, build_and_solve, past, ticking

silence_banner()  # the banner would go to stdout (see rp_opt._highs)

log = logging.getLogger("rp_opt")


class GraphTooLarge(RuntimeError):
    """The arc-flow graph would exceed the configured size."""


# Fixed cost of an arc-flow LP before HiGHS first reads its clock (the model's arrays,
# passModel, the start of its solve), measured 0.7-8 us per arc when the model was passed
# as a HighsLp (2.2 s for a 3.3M-arc graph, 0.1 s for hard28's 40k arcs; pass_model's numpy
# form takes a third of that), while no LP of a BPPLIB sample finished in under 7 us per
# arc: an LP given less than this per arc cannot finish and would only run past its time
# limit (see lp_fits)
LP_SECONDS_PER_ARC = 2e-6
# The knapsack DP that certifies the LP bound touches up to sum_j K_j (C + 1)(m + 1) cells at
# about 4 ns each (0.21 s for 55M cells at C = 10^6, where the graph took 0.02 s to build):
# lp_bound keeps its share back from the LP
KNAPSACK_SECONDS_PER_CELL = 4e-9
# seconds past its own limit after which a HiGHS MIP is stopped from outside (HiGHS
# overshoots by up to about 0.6 s where its clock checks work; see solve_mip)
MIP_OVERRUN_SECONDS = 0.5


@dataclass
class ArcFlowGraph:
    """The compressed arc-flow graph.

    Attributes
    ----------
    sizes, demand
        Distinct sizes w_j (decreasing) and their multiplicities b_j.
    capacity, max_items
        C and m (None without a limit).
    width
        Count states per partial sum: m + 1 with a limit, else 1.
    copies
        K_j = min(b_j, C div w_j, m), the most copies of size j in one bin.
    nodes
        Flat state ids u * width + c of the reachable nodes (sorted; node 0 is the source).
    arc_tail, arc_head, arc_type
        Item arcs as flat state ids and size index j.
    """

    sizes: np.ndarray
    demand: np.ndarray
    capacity: int
    max_items: int | None
    width: int
    copies: np.ndarray
    nodes: np.ndarray
    arc_tail: np.ndarray
    arc_head: np.ndarray
    arc_type: np.ndarray
    min_fill: int = 0     # loss arcs only from nodes with partial sum >= min_fill (see prune)

    @property
    def num_arcs(self) -> int:
        return int(self.arc_tail.size + self.nodes.size - 1)


def size_classes(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct sizes in decreasing order and their counts."""
    values, counts = np.unique(np.asarray(lengths, dtype=np.int64), return_counts=True)
    return values[::-1].copy(), counts[::-1].copy()


def _copies(sizes, demand, capacity, max_items):
    k = np.minimum(demand, capacity // sizes)
    if max_items is not None:
        k = np.minimum(k, max_items)
    return k.astype(np.int64)


def estimate_work(lengths: np.ndarray, capacity: int, max_items: int | None) -> int:
    """Array cells touched while building the graph: sum_j K_j (C+1)(m+1)."""
    sizes, demand = size_classes(lengths)
    width = 1 if max_items is None else max_items + 1
    return int(_copies(sizes, demand, capacity, max_items).sum()) * (capacity + 1) * width


def build_graph(lengths: np.ndarray, capacity: int, max_items: int | None = None,
                max_arcs: int = 3_000_000, deadline: float | None = None) -> ArcFlowGraph:
    """Build the compressed graph; :class:`GraphTooLarge` beyond ``max_arcs`` arcs,
    :class:`OutOfTime` once ``time.perf_counter()`` passes ``deadline`` (None: no deadline)."""
    sizes, demand = size_classes(lengths)
    c = int(capacity)
    width = 1 if max_items is None else int(max_items) + 1
    copies = _copies(sizes, demand, c, max_items)
    reach = np.zeros((c + 1, width), dtype=bool)
    reach[0, 0] = True
    tails, types = [], []
    total = 0
    for j, (w, k) in enumerate(zip(sizes.tolist(), copies.tolist())):
        if k == 0:
            continue
        valid = np.zeros_like(reach)
        valid[: c + 1 - w, : max(width - 1, 1)] = True   # u + w <= C and c < m
        shift = w * width + (1 if width > 1 else 0)      # flat offset of one item arc
        src = None
        for _ in range(k):
            # each step touches (C + 1)(m + 1) cells: up to 0.2 s per graph near
            # ARCFLOW_MAX_WORK, so a short time limit is checked between steps
            if past(deadline):
                raise OutOfTime("arc-flow graph build passed its deadline")
            src = reach & valid
            heads = np.zeros_like(reach)
            heads.ravel()[np.flatnonzero(src) + shift] = True
            grown = reach | heads
            if np.array_equal(grown, reach):
                break
            reach = grown
        flat = np.flatnonzero(src)
        total += flat.size
        if total > max_arcs:
            raise GraphTooLarge(f"arc-flow graph exceeds {max_arcs} arcs")
        tails.append(flat)
        types.append(np.full(flat.size, j, dtype=np.int64))
    tail = np.concatenate(tails) if tails else np.zeros(0, dtype=np.int64)
    arc_type = np.concatenate(types) if types else np.zeros(0, dtype=np.int64)
    head = tail + sizes[arc_type] * width + (1 if width > 1 else 0)
    nodes = np.flatnonzero(reach)
    return ArcFlowGraph(sizes, demand, c, max_items, width, copies, nodes, tail, head, arc_type)


def prune(graph: ArcFlowGraph, waste: int) -> ArcFlowGraph:
    """The subgraph of bins that waste at most ``waste`` (= K C - sum T for K bins).

    In a packing into K bins the total waste is exactly K C - sum T, so no single bin wastes
    more: a loss arc may leave a node only if its partial sum is >= C - waste, and a node
    survives only if such a node is reachable from it (backward reachability over the DAG,
    one numpy sweep per path length). With waste = 0 (triplets) only exactly-full paths
    remain. Every surviving node stays reachable from the source.
    """
    nodes = graph.nodes
    min_fill = max(graph.capacity - int(waste), 0)
    tail = np.searchsorted(nodes, graph.arc_tail)
    head = np.searchsorted(nodes, graph.arc_head)
    good = nodes // graph.width >= min_fill
    while True:
        grown = good.copy()
        grown[tail[good[head]]] = True
        if np.array_equal(grown, good):
            break
        good = grown
    keep = good[head]
    alive = np.flatnonzero(good)
    if alive.size == 0 or alive[0] != 0:
        alive = np.concatenate([[0], alive])              # keep the source even if no bin fits
    return ArcFlowGraph(graph.sizes, graph.demand, graph.capacity, graph.max_items, graph.width, graph.copies,
                        nodes[alive], graph.arc_tail[keep], graph.arc_head[keep], graph.arc_type[keep],
                        max(min_fill, graph.min_fill))


def pass_model(h: highspy.Highs, graph: ArcFlowGraph, integral: bool, min_bins: int = 0,
               max_bins: float = np.inf) -> None:
    """Pass the arc-flow model of ``graph`` to ``h``. Columns: item arcs, then one loss arc
    per non-source node. Rows: conservation at every node but the source, demand of every
    size, and lo <= bins <= hi.

    The arrays go to HiGHS through ``passModel``'s numpy form: filling a ``HighsLp``'s
    fields copied them element by element (0.61 s of a 1.76M-arc model, before HiGHS
    could start its clock)."""
    nodes = graph.nodes
    num_nodes = nodes.size
    n_item = graph.arc_tail.size
    n_loss = num_nodes - 1
    num_cols = n_item + n_loss
    k = graph.sizes.size
    row_of_node = lambda flat: np.searchsorted(nodes, flat) - 1   # source (node 0) has no row
    t_row = row_of_node(graph.arc_tail)
    h_row = row_of_node(graph.arc_head)
    loss_tail = np.arange(1, num_nodes) - 1
    cols_item = np.arange(n_item)
    cols_loss = n_item + np.arange(n_loss)
    bins_row = (num_nodes - 1) + k
    from_source = graph.arc_tail == 0
    rows = [h_row, t_row[~from_source], (num_nodes - 1) + graph.arc_type, loss_tail,
            np.full(int(from_source.sum()), bins_row)]
    cols = [cols_item, cols_item[~from_source], cols_item, cols_loss, cols_item[from_source]]
    vals = [np.ones(n_item), -np.ones(int((~from_source).sum())), np.ones(n_item), -np.ones(n_loss),
            np.ones(int(from_source.sum()))]
    # flow conservation: sum_in x - sum_out x = 0 at every node but source and sink
    # demand: sum_{arcs of size j} x >= b_j
    # bins: min_bins <= sum_{arcs leaving the source} x <= max_bins
    matrix = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(bins_row + 1, num_cols))
    matrix.sort_indices()
    cost = np.zeros(num_cols)
    cost[cols_item[from_source]] = 1.0                     # minimise the number of bins
    col_upper = np.full(num_cols, highspy.kHighsInf)
    col_upper[cols_loss[nodes[1:] // graph.width < graph.min_fill]] = 0.0   # loss only from full-enough nodes
    if integral:
        # a packing's flow carries at most b_j items on an arc of size j and at most K bins
        # on a loss arc; finite bounds also keep HiGHS' bound propagation from crawling
        # (unbounded general integers stalled its root node for 40 s on Falkenauer U1000)
        col_upper[cols_item] = graph.demand[graph.arc_type]
        if np.isfinite(max_bins):
            col_upper[cols_loss] = np.minimum(col_upper[cols_loss], float(max_bins))
    inf = highspy.kHighsInf
    lower = np.concatenate([np.zeros(num_nodes - 1), graph.demand.astype(float), [float(min_bins)]])
    upper = np.concatenate([np.zeros(num_nodes - 1), np.full(k, inf),
                            [inf if not np.isfinite(max_bins) else float(max_bins)]])
    kind = highspy.HighsVarType.kInteger if integral else highspy.HighsVarType.kContinuous
    status = h.passModel(num_cols, bins_row + 1, int(matrix.nnz), int(highspy.MatrixFormat.kColwise),
                         int(highspy.ObjSense.kMinimize), 0.0, cost, np.zeros(num_cols), col_upper, lower, upper,
                         matrix.indptr[:-1].astype(np.int32), matrix.indices.astype(np.int32),
                         matrix.data.astype(np.float64), np.full(num_cols, int(kind), dtype=np.int32))
    if status == highspy.HighsStatus.kError:  # pragma: no cover - the arrays are built consistent above
        raise RuntimeError("HiGHS refused the arc-flow model")


def lp_fits(graph: ArcFlowGraph, seconds: float) -> bool:
    """Whether an LP on ``graph`` can finish in ``seconds``: more than its fixed cost,
    :data:`LP_SECONDS_PER_ARC` per arc (model arrays and HiGHS' set-up are not timed)."""
    return seconds > LP_SECONDS_PER_ARC * graph.num_arcs


def _highs(time_limit: float) -> highspy.Highs:
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    # no floor (a floor ran every solve past the caller's deadline): HiGHS refuses a
    # negative limit, and with 0 it stops at its first clock check
    h.setOptionValue("time_limit", float(max(time_limit, 0.0)))
    h.setOptionValue("threads", 1)
    return h


def knapsack_cells(graph: ArcFlowGraph) -> int:
    """Cells the DP of :func:`max_pattern_weight` touches at most: sum_j K_j (C + 1)(m + 1)."""
    return int(graph.copies.sum()) * (int(graph.capacity) + 1) * int(graph.width)


def max_pattern_weight(graph: ArcFlowGraph, weights: np.ndarray, deadline: float | None = None) -> int:
    """max sum_j weights_j x_j over bins: sum w_j x_j <= C, x_j <= K_j, sum x_j <= m.

    Exact bounded-knapsack DP in int64: best[u, c] = best weight of size <= u, count <= c.
    :class:`~.clock.OutOfTime` once ``time.perf_counter()`` passes ``deadline`` (checked
    between steps of (C + 1)(m + 1) cells; None: no deadline).
    """
    c = graph.capacity
    width = graph.width
    best = np.zeros((c + 1, width), dtype=np.int64)
    step = 1 if width > 1 else 0
    for w, k, y in zip(graph.sizes.tolist(), graph.copies.tolist(), weights.tolist()):
        if y <= 0 or k == 0:
            continue
        for _ in range(k):
            if past(deadline):
                raise OutOfTime("knapsack DP passed its deadline")
            cand = best[: c + 1 - w, : width - step] + y
            region = best[w:, step:]
            grown = np.maximum(region, cand)
            if np.array_equal(grown, region):
                break
            best[w:, step:] = grown
    return int(best[c, width - 1])


@dataclass
class LPBound:
    value: float          # LP optimum as HiGHS reports it
    bound: int            # certified integer lower bound on the number of bins
    seconds: float
    # the certificate: integer duals y_j of the demand rows, the heaviest pattern M =
    # max sum_j y_j x_j over bins, and sum_j b_j y_j (None where no dual was positive)
    duals: np.ndarray | None = None
    heaviest: int | None = None
    total: int | None = None


def lp_bound(graph: ArcFlowGraph, time_limit: float) -> LPBound | None:
    """Solve the LP relaxation; certify ceil(sum b_j y_j / M) from its duals (see module doc).

    ``time_limit`` covers both: the LP gets what the DP's estimated share leaves
    (:data:`KNAPSACK_SECONDS_PER_CELL`). None when the LP is not solved, when its time is
    below its untimed fixed cost (:func:`lp_fits`: not started), or when the DP passes the
    limit (a bound found after the deadline is not waited for).
    """
    start = time.perf_counter()
    deadline = start + float(time_limit)
    lp_seconds = float(time_limit) - KNAPSACK_SECONDS_PER_CELL * knapsack_cells(graph)
    if not lp_fits(graph, lp_seconds):
        return None
    h = _highs(lp_seconds)
    # arc-flow LPs are very degenerate: interior point without crossover is several times
    # faster than simplex, and the bound below needs no basic (vertex) duals
    h.setOptionValue("solver", "ipm")
    h.setOptionValue("run_crossover", "off")
    pass_model(h, graph, integral=False)
    run_highs(h)
    if h.getModelStatus() not in (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kUnknown):
        return None
    value = float(h.getInfo().objective_function_value)
    num_nodes = graph.nodes.size
    duals = np.asarray(h.getSolution().row_dual)[num_nodes - 1: num_nodes - 1 + graph.sizes.size]
    duals = np.maximum(duals, 0.0)
    if duals.max(initial=0.0) <= 0:
        return LPBound(value, 0, time.perf_counter() - start)
    # integer duals: any y >= 0 gives B >= sum b y / max-pattern(y); scaling keeps ~30 bits
    y = np.floor(duals * ((1 << 30) / duals.max())).astype(np.int64)
    try:
        heaviest = max_pattern_weight(graph, y, deadline)
    except OutOfTime:
        log.debug("rows: LP bound %.3f not certified within %.3f s", value, time_limit)
        return None
    total = int(np.dot(graph.demand.astype(object), y.astype(object)))
    bound = -(-total // heaviest) if heaviest > 0 else 0
    return LPBound(value, int(bound), time.perf_counter() - start, y, int(heaviest), total)


# "no path" in the longest-path sweeps (far below any sum of weights, no overflow)
_NO_PATH = np.iinfo(np.int64).min // 4


def _heaviest(best: np.ndarray, src: np.ndarray, dst: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Longest paths over a DAG by sweeps: ``best`` (per node, :data:`_NO_PATH` where none)
    grown along the arcs src -> dst of ``weight`` until no sweep changes it (one sweep per
    arc of the longest path)."""
    while True:
        grown = best.copy()
        np.maximum.at(grown, dst, np.where(best[src] > _NO_PATH, best[src] + weight, _NO_PATH))
        if np.array_equal(grown, best):
            return best
        best = grown


def prune_by_reduced_cost(graph: ArcFlowGraph, lp: LPBound, bins: int) -> ArcFlowGraph:
    """The subgraph of the bins that a packing into ``bins`` bins can use, by reduced cost.

    With the certificate's integer duals y >= 0 and M = the heaviest pattern's y-weight,
    pi = y / M is dual feasible (every bin has pi-weight <= 1, reduced cost 1 - pi.a >= 0).
    A packing into K bins covers every demand, so sum over its bins of (1 - pi.a) =
    K - pi.(covered) <= K - pi.b: each of its bins has reduced cost at most K - pi.b, that
    is y-weight y.a >= sum_j b_j y_j - (K - 1) M (exact integers). A path survives when
    the heaviest path through it reaches that weight: forward and backward longest-path
    sweeps over the DAG (one numpy pass per path length), as :func:`prune` does for waste.
    On IRUP instances (K = ceil(LP)) that leaves the bins of near-zero reduced cost only
    (Hard28_BPP13: K - LP = 0.0004), a far smaller MIP.
    """
    if lp.duals is None or not lp.heaviest:
        return graph
    need = int(lp.total) - (int(bins) - 1) * int(lp.heaviest)
    if need <= 0:
        return graph                                          # every bin qualifies
    nodes = graph.nodes
    tail = np.searchsorted(nodes, graph.arc_tail)
    head = np.searchsorted(nodes, graph.arc_head)
    weight = np.asarray(lp.duals, dtype=np.int64)[graph.arc_type]
    low = _NO_PATH
    # forward: heaviest y-weight from the source to each node; backward: from each node to
    # the sink (a loss arc where allowed)
    start = np.full(nodes.size, low, dtype=np.int64)
    start[0] = 0
    ahead = _heaviest(start, tail, head, weight)
    behind = _heaviest(np.where(nodes // graph.width >= graph.min_fill, 0, low).astype(np.int64), head, tail, weight)
    keep = (ahead[tail] > low) & (behind[head] > low) & (ahead[tail] + weight + behind[head] >= need)
    alive = np.zeros(nodes.size, dtype=bool)
    alive[0] = True
    alive[tail[keep]] = True
    alive[head[keep]] = True
    # a loss arc leaves a node only when its fill is at least min_fill; one leaving a node
    # whose heaviest path from the source is short of ``need`` is useless but harmless
    idx = np.flatnonzero(alive)
    return ArcFlowGraph(graph.sizes, graph.demand, graph.capacity, graph.max_items, graph.width, graph.copies,
                        nodes[idx], graph.arc_tail[keep], graph.arc_head[keep], graph.arc_type[keep],
                        graph.min_fill)


def _path_start(graph: ArcFlowGraph):
    """Lookup (tail state, size index) -> item-arc column."""
    keys = graph.arc_tail * graph.sizes.size + graph.arc_type
    order = np.argsort(keys, kind="stable")
    return keys[order], order


def hint_from_bins(graph: ArcFlowGraph, lengths: np.ndarray, bin_of: np.ndarray) -> np.ndarray | None:
    """Arc flows of a packing (each bin as a path of non-increasing sizes), or None."""
    keys, order = _path_start(graph)
    index_of_size = {int(w): j for j, w in enumerate(graph.sizes.tolist())}
    flow = np.zeros(graph.arc_tail.size + graph.nodes.size - 1)
    step = 1 if graph.width > 1 else 0
    groups = np.argsort(bin_of, kind="stable")
    bounds = np.flatnonzero(np.diff(bin_of[groups])) + 1
    for members in np.split(groups, bounds):
        state = 0
        for w in sorted(lengths[members].tolist(), reverse=True):
            j = index_of_size[int(w)]
            key = state * graph.sizes.size + j
            pos = np.searchsorted(keys, key)
            if pos >= keys.size or keys[pos] != key:
                return None
            flow[order[pos]] += 1
            state = state + w * graph.width + step
        loss = np.searchsorted(graph.nodes, state)
        if loss >= graph.nodes.size or graph.nodes[loss] != state or state // graph.width < graph.min_fill:
            return None
        flow[graph.arc_tail.size + loss - 1] += 1
    return flow


def decompose(graph: ArcFlowGraph, flow: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Integral flow -> bin_of[N]: walk paths from the source, assign real items to arcs,
    drop items a path covers beyond their demand (over-cover) and bins left empty."""
    x = np.rint(flow).astype(np.int64)
    n_item = graph.arc_tail.size
    out: dict[int, list[int]] = {}
    for a in np.flatnonzero(x[:n_item] > 0).tolist():
        out.setdefault(int(graph.arc_tail[a]), []).append(a)
    left = x.copy()
    sizes = graph.sizes
    pools = {j: [] for j in range(sizes.size)}
    order = np.argsort(-np.asarray(lengths), kind="stable")
    index_of_size = {int(w): j for j, w in enumerate(sizes.tolist())}
    for i in order.tolist():
        pools[index_of_size[int(lengths[i])]].append(i)
    bin_of = np.full(len(lengths), -1, dtype=np.int64)
    num_bins = 0
    while True:
        arcs = out.get(0, [])
        while arcs and left[arcs[-1]] == 0:
            arcs.pop()
        if not arcs:
            break
        state, placed = 0, False
        while True:
            arcs = out.get(state, [])
            while arcs and left[arcs[-1]] == 0:
                arcs.pop()
            if not arcs:
                break                                   # take the loss arc to the sink
            a = arcs[-1]
            left[a] -= 1
            pool = pools[int(graph.arc_type[a])]
            if pool:
                bin_of[pool.pop()] = num_bins
                placed = True
            state = int(graph.arc_head[a])
        num_bins += placed
    return bin_of


@dataclass
class MIPResult:
    bin_of: np.ndarray | None   # a packing (unverified: the caller checks it)
    bound: int                  # lower bound on the bins proven by the MIP (or min_bins)
    status: str                 # HiGHS model status in words
    seconds: float


def solve_mip(graph: ArcFlowGraph, lengths: np.ndarray, time_limit: float, min_bins: int = 0,
              max_bins: float = np.inf, hint: np.ndarray | None = None) -> MIPResult:
    """Minimise the bins with lo <= bins <= hi; stops at the first packing within hi when
    hi is finite (all that a row-count decision needs). Ends by ``time_limit`` plus about
    1.5 s (:data:`MIP_OVERRUN_SECONDS`, :data:`rp_opt._stoppable.GRACE_SECONDS`) even where
    HiGHS does not: the result is then no packing and ``min_bins``, and HiGHS finishes in
    the background (one thread) at its next clock check."""
    start = time.perf_counter()
    h = _highs(time_limit)
    h.setOptionValue("mip_rel_gap", 0.0)
    if np.isfinite(max_bins):
        h.setOptionValue("mip_abs_gap", float(max_bins - min_bins) + 0.5)
    else:
        h.setOptionValue("mip_abs_gap", 0.5)
    pass_model(h, graph, integral=True, min_bins=min_bins, max_bins=max_bins)
    if hint is not None and hint[: graph.arc_tail.size][graph.arc_tail == 0].sum() <= max_bins:
        sol = highspy.HighsSolution()
        sol.col_value = list(hint)
        sol.value_valid = True
        h.setSolution(sol)
    try:
        # HiGHS's own limit first; stopped from here, and given up, where it overruns that
        run_highs(h, give_up_after=float(time_limit) + MIP_OVERRUN_SECONDS)
    except Abandoned:
        return MIPResult(None, int(min_bins), "Time limit reached (HiGHS did not stop: given up)",
                         time.perf_counter() - start)
    status = h.modelStatusToString(h.getModelStatus())
    if h.getModelStatus() == highspy.HighsModelStatus.kInterrupt:
        status = "Time limit reached"  # stopped from outside at the limit (a Ctrl-C raises)
    info = h.getInfo()
    bin_of = None
    if info.primal_solution_status == 2:  # feasible
        bin_of = decompose(graph, np.asarray(h.getSolution().col_value), lengths)
    if h.getModelStatus() == highspy.HighsModelStatus.kInfeasible:
        bound = int(max_bins) + 1 if np.isfinite(max_bins) else min_bins
    else:
        dual = float(info.mip_dual_bound)
        bound = int(np.ceil(dual - 1e-6)) if np.isfinite(dual) else min_bins
        bound = max(bound, min_bins)
    return MIPResult(bin_of, bound, status, time.perf_counter() - start)


@dataclass
class DecideResult:
    status: str                 # "feasible", "infeasible" or "unknown"
    bin_of: np.ndarray | None   # a packing into <= max_bins bins (unverified)
    seconds: float


def cpsat_decide(graph: ArcFlowGraph, lengths: np.ndarray, max_bins: int, time_limit: float,
                 hint: np.ndarray | None = None, workers: int = 2) -> DecideResult:
    """Decide "at most ``max_bins`` bins" on the arc-flow graph with CP-SAT (integer flows).

    CP-SAT keeps to its time limit and found packings on Scholl and Falkenauer U instances
    where the HiGHS MIP stalled past its limit; the HiGHS model stays as :func:`solve_mip`.
    """
    from ortools.sat.python import cp_model

    start = time.perf_counter()
    nodes = graph.nodes
    n_item = graph.arc_tail.size
    # the build is Python loops over the arcs (hard28: 0.17 s for 40k, where CP-SAT was
    # given 0.09 s): not started when it cannot fit, abandoned when the clock runs out
    out = build_and_solve(start, time_limit, n_item + nodes.size,
                          lambda deadline: _flow_model(graph, lengths, max_bins, hint, deadline), workers,
                          f"arc-flow CP-SAT model of {n_item} arcs")
    if out is None:
        return DecideResult("unknown", None, time.perf_counter() - start)
    (x, loss), solver, code = out
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        flow = np.zeros(n_item + nodes.size - 1)
        flow[:n_item] = [solver.value(v) for v in x]
        flow[n_item:] = [solver.value(v) for v in loss]
        return DecideResult("feasible", decompose(graph, flow, lengths), time.perf_counter() - start)
    status = "infeasible" if code == cp_model.INFEASIBLE else "unknown"
    return DecideResult(status, None, time.perf_counter() - start)


def _flow_model(graph: ArcFlowGraph, lengths: np.ndarray, max_bins: int, hint: np.ndarray | None,
                deadline: float | None):
    """The CP-SAT model of :func:`cpsat_decide`: ``(model, item-arc vars, loss vars)``.

    Its loops run through :func:`~.clock.ticking`, so a build that passes ``deadline``
    raises :class:`~.clock.OutOfTime` instead of running on.
    """
    from ortools.sat.python import cp_model

    nodes = graph.nodes
    n_item = graph.arc_tail.size
    tail = np.searchsorted(nodes, graph.arc_tail)
    head = np.searchsorted(nodes, graph.arc_head)
    model = cp_model.CpModel()
    cap = np.minimum(graph.demand[graph.arc_type], max_bins)
    x = [model.new_int_var(0, int(u), "") for u in ticking(cap.tolist(), deadline)]
    # loss arcs only from nodes filled to >= min_fill (a pruned graph, see prune)
    loss_cap = np.where(nodes[1:] // graph.width >= graph.min_fill, int(max_bins), 0)
    loss = [model.new_int_var(0, int(u), "") for u in ticking(loss_cap.tolist(), deadline)]
    into: list[list] = [[] for _ in range(nodes.size)]
    out: list[list] = [[] for _ in range(nodes.size)]
    for a, t, h in ticking(zip(range(n_item), tail.tolist(), head.tolist()), deadline):
        out[t].append(x[a])
        into[h].append(x[a])
    for v in ticking(range(1, nodes.size), deadline):
        # flow conservation: sum_in x = sum_out x + loss_v
        model.add(sum(into[v]) == sum(out[v]) + loss[v - 1])
    # bins: sum of flow leaving the source <= K
    model.add(sum(out[0]) <= int(max_bins))
    # waste: a bin closed at partial sum u wastes C - u, and K bins waste at most K C - sum T
    room = graph.capacity - nodes[1:] // graph.width
    slack = int(max_bins) * graph.capacity - int(np.sum(lengths, dtype=np.int64))
    model.add(sum(int(r) * v for r, v in zip(room.tolist(), loss) if r > 0) <= slack)
    # arcs grouped by size (stable: ascending arc index within a size, as one scan per size
    # gave, without its k passes over all arcs)
    by_type = np.argsort(graph.arc_type, kind="stable")
    ends = np.searchsorted(graph.arc_type[by_type], np.arange(graph.sizes.size + 1))
    for j in ticking(range(graph.sizes.size), deadline, every=16):
        # demand: sum_{arcs of size j} x >= b_j
        model.add(sum(x[a] for a in by_type[ends[j]:ends[j + 1]].tolist()) >= int(graph.demand[j]))
    if hint is not None:
        for a in ticking(range(n_item), deadline):
            model.add_hint(x[a], int(min(hint[a], cap[a])))
    return model, x, loss
