"""Lower bounds on a plan's costs and objectives (MODEL.md "Bounds worth knowing" and
docs/MODEL.md's notes): the analytic bounds of :func:`cost_bounds` (averages, Eq. 4,
single samples, the waste big samples force, the rows that hold a full-length sample),
the row excess for one placement or for every placement, and :func:`window_bound`, the
primary's bound for every placement and layout of R rows (the certificate of
``rp-opt eval --bound``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace

import numpy as np

from .cost import Costs, rank_demand, stage_work
from .errors import integer, require
from .objectives import Aggregate, get_objective
from .solution import Placement, placement_for
from .window import Instance, Window


def placement_bound(window: Window, num_ranks: int, load: np.ndarray | None = None) -> np.ndarray:
    """[L]: max_p L[l,p] >= max(max_e load_e, ceil(sum_e load_e / P)) for any placement
    (``load`` = ``window.expert_load()`` when the caller has it)."""
    load = window.expert_load() if load is None else load
    return np.maximum(load.max(axis=1), -(-load.sum(axis=1) // num_ranks))


def _fractional_knapsack(weights: np.ndarray, values: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """Greatest value of items (fractions allowed) within each capacity: an upper bound on
    every integral selection. Items heavier than a capacity cannot be in it, so where the
    value per unit of weight never falls as the weight grows (attention with Q = T^2) the
    bound takes, for each capacity, the items that fit, by value per unit decreasingly
    (the LP optimum of the fitting items). Otherwise it takes every item (the LP optimum
    of all of them: looser, still an upper bound)."""
    capacities = np.asarray(capacities, dtype=np.float64)
    if weights.size == 0:
        return np.zeros_like(capacities)
    w, v = np.asarray(weights, dtype=np.float64), np.asarray(values, dtype=np.float64)
    ratio = v / w
    order = np.lexsort((-ratio, -w))                                     # heaviest first
    start = np.zeros(capacities.shape, dtype=np.int64)
    if np.all(np.diff(ratio[order]) <= 0):
        # heaviest first is also best ratio first, so the items that fit a capacity are a
        # suffix of this order in the greedy's order; start at the first that fits
        # (a hair of tolerance: a room computed in floats must not shut out an item that fits)
        start = np.searchsorted(-w[order], -(capacities + 1e-9 * np.maximum(capacities, 1.0)), side="left")
    else:
        order = np.argsort(-ratio, kind="stable")
    w, v, ratio = w[order], v[order], ratio[order]
    cum_w = np.concatenate([[0.0], np.cumsum(w)])
    cum_v = np.concatenate([[0.0], np.cumsum(v)])
    # items start.. whole-1 fit whole; item ``whole`` (if any) fills the rest in part
    whole = np.searchsorted(cum_w, cum_w[start] + capacities, side="right") - 1
    whole = np.maximum(whole, start)
    rest = capacities - (cum_w[whole] - cum_w[start])
    part = np.concatenate([ratio, [0.0]])[whole]
    return cum_v[whole] - cum_v[start] + np.maximum(rest, 0.0) * part


def _big_ceilings(lengths: np.ndarray, work: np.ndarray, capacity: int, big: np.ndarray) -> tuple[float, np.ndarray]:
    """(u, v): the most ``work`` a cell can hold without a sample of ``big`` (u: the
    fractional-knapsack fill of C with the samples of at most C/2 tokens) and with big
    sample j (v_j = work_j + that fill of C - T_j). A cell holds at most one sample longer
    than C/2; the ceilings ignore the per-cell sample limit (only loosens them)."""
    small = 2 * lengths <= capacity
    room = np.concatenate([[capacity], capacity - lengths[big]]).astype(np.float64)
    fill = _fractional_knapsack(lengths[small], work[small], room)
    return float(fill[0]), work[big] + fill[1:]


def attention_waste(work: np.ndarray, lengths: np.ndarray, capacity: int, per_shard: int,
                    num_blocks: int) -> np.ndarray:
    """[S] lower bound on sum_b sum_{d in b} (max_{d' in b} c_s(d') - c_s(d)) over every
    layout of ``num_blocks`` blocks of ``per_shard`` (= k) cells, for stage work ``work``
    [S, N] (a cell's cost c_s(d) is the sum of its samples' work).

    The average bound sum_b max_d c_s >= sum_i c_s(i) / k treats every block's cells as
    equal. A sample longer than C/2 ("big") shares no cell with another big one, and a
    cell costs at most the fractional-knapsack fill of its room with the non-big samples:
    u for a cell without a big sample, v_j = c_j + the fill of C - T_j for the cell of big
    j. Take the t costliest big samples as "heavy" (any t). If they occupy q blocks
    (ceil(t/k) <= q <= min(B, t)), pigeonhole puts the ((q-1)k+1)-th costliest heavy (or
    the last) at or below every such block's maximum m, and E = q k - t of their cells
    hold no heavy sample; each holds at most one of the other, distinct, big samples, so
    their ceilings are at most the E largest of {v_j: big j not heavy} and E copies of u,
    and the waste is at least sum over those ceilings w of (m - w)^+. The bound is the max
    over t (the ends of runs of equal cost and a grid: any t is valid) of the min over q.
    Ceilings ignore the per-cell sample limit (only loosens them).
    """
    work = np.atleast_2d(np.asarray(work, dtype=np.float64))
    lengths = np.asarray(lengths, dtype=np.int64)
    k, num_blocks = int(per_shard), int(num_blocks)
    out = np.zeros(work.shape[0])
    big = 2 * lengths > capacity
    h = int(big.sum())
    if k <= 1 or h == 0 or h > num_blocks * k:
        return out
    q = np.arange(1, num_blocks + 1)
    for s in range(work.shape[0]):
        c = work[s]
        u, v = _big_ceilings(lengths, c, capacity, big)
        order = np.argsort(-c[big], kind="stable")
        cost, ceiling = c[big][order], v[order]
        best = 0.0
        # every t gives a valid bound; try the ends of runs of equal cost and a grid (speed)
        ends = np.flatnonzero(np.diff(cost, append=-np.inf) != 0) + 1
        grid = np.unique(np.linspace(1, h, min(h, 64)).astype(np.int64))
        for t in np.union1d(ends if ends.size <= 192 else ends[np.linspace(0, ends.size - 1, 192).astype(int)], grid):
            t = int(t)
            qs = q[(q * k >= t) & (q <= t)]
            empty = qs * k - t                                            # cells without a heavy
            floor = cost[np.minimum((qs - 1) * k, t - 1)]                 # every heavy block's max >=
            # the largest ceilings those cells can have, decreasing, then prefix sums
            w = np.concatenate([np.sort(np.maximum(ceiling[t:], u))[::-1], np.full(int(empty.max()), u)])
            prefix = np.concatenate([[0.0], np.cumsum(w)])
            above = np.minimum(empty, np.searchsorted(-w, -floor, side="right"))  # ceilings >= floor
            waste = (empty - above) * floor - (prefix[empty] - prefix[above])
            best = max(best, float(waste.min()))
        out[s] = best
    return out


def _cell_ceiling(lengths: np.ndarray, work: np.ndarray, capacity: int, room: np.ndarray,
                  full: np.ndarray) -> np.ndarray:
    """Most attention ``work`` a cell without a full-length sample can have within each
    ``room`` tokens: at most one "big" sample (2 T > C) plus the fractional-knapsack fill of
    the rest with the others (an upper bound; the per-cell sample limit is ignored)."""
    big = (2 * lengths > capacity) & ~full
    small = 2 * lengths <= capacity
    weights, values = lengths[small].astype(np.float64), work[small]
    best = _fractional_knapsack(weights, values, room)
    if big.any():
        rest = room[None, :] - lengths[big][:, None]
        fill = _fractional_knapsack(weights, values, np.maximum(rest, 0.0).ravel()).reshape(rest.shape)
        # (a tolerance: a room rounded down by a hair must not shut a fitting sample out)
        best = np.maximum(best, np.where(rest >= -1e-9 * capacity, work[big][:, None] + fill, -np.inf).max(axis=0))
    return best


def full_row_charge(attention: np.ndarray, lengths: np.ndarray, routed: np.ndarray, capacity: int,
                    per_shard: int, num_shards: int, expert_rate: float, grid: int = 256,
                    num_rows: int | None = None) -> float:
    """Lower bound on sum_r (G M_r - sum_g Lambda_g) over the rows that hold a full-length
    sample (T_i = C), for the row maxima M_r = max_g J[r,g] of ``sync``.

    ``attention`` [N] is each sample's attention cost sum_s n_s (alpha_s T_i + beta_s Q_i),
    ``routed`` [N] its routed tokens sum_{l,e} a[i,l,e]; with E(g) = ``expert_rate`` (=
    gamma / P) times a block's routed tokens, X[r,g] >= E(g), and Lambda_g = (1/k) sum_{d in
    g} att_d + E(g) <= J[r,g] (k = D/G cells per block), so sum_r max_g J >= (1/G) (sum_i
    att_i / k + sum_i E_i + this charge).

    Why a row with a full-length cell is charged (theta: the least attention of a
    full-length sample; g_f: the row's block with the most tokens among those that hold
    one; s = k C - T_{g_f}): M_r >= theta + E(g_f), so block g owes
    (1/k) sum_{d in g} (theta - att_d) - (E(g) - E(g_f)), and E(g) - E(g_f) <= rho s for a
    block without a full-length sample (every sample routes rho tokens per token; the bound
    is 0 otherwise), <= 0 for one with; every block owes >= 0 (J >= Lambda). Cells'
    deficits are at least theta minus their knapsack ceiling (distinct big samples). In a
    row of n < G blocks with full-length samples (f of them), those blocks owe a: at least
    the deficits of their n k - f other cells and, when s > 0, at least n delta(s) / k
    (each has s tokens of room, which costs its cells at least delta(s): knapsack
    ceilings of cells with that little room); the other G - n blocks owe at least
    (b - (G - n) rho s)^+, b their cells' deficits, at least those of (G - n) k cells, and
    a + b >= x, the row's cells' deficits (each row the cheapest cells: a relaxation). The
    least of a + (b - (G - n) rho s)^+ over these takes a at its floor, and the row owes
    its least over n and over intervals of s (delta at the interval's start, rho s at its
    end; the first interval covers s = 0, e.g. a block of k full-length cells; s <=
    (k - ceil(f/n)) C, since g_f has at least as many tokens as the block with the most
    full-length samples). A row whose blocks all hold one (n = G), or whose f samples leave
    a block of k full-length cells (n (k - 1) < f), owes x, pooled over such rows (their
    cells are distinct). A DP over how the full-length samples split into rows takes the
    least. Each row alone takes the cheapest cells, the same for every two-case row; the
    rows' cells are distinct, which :func:`_distinct_cells` bounds too, by the class of
    layouts whose two-case rows have n >= n_min, one of them n = n_min: the charge is the
    least over the classes of the larger of the two. ``num_rows`` (R, optional) only sizes the DP's tables so that
    :func:`row_excess_bound` of the same window and R reuses them; the charge is the same.
    """
    tables = _split_tables(attention, lengths, routed, capacity, per_shard, num_shards, expert_rate, grid,
                           _hidden_top(num_rows, num_shards))
    if tables is None:
        return 0.0
    terms, owed, floor = tables
    return max(0.0, float(np.min(np.maximum(owed.min(axis=1), floor))) - terms["excess"])


def _hidden_top(num_rows: int | None, num_shards: int, span: int = 8) -> int:
    """Hidden blocks the split DP counts exactly (0: none; see :func:`row_excess_bound`)."""
    return 0 if num_rows is None else min(int(num_rows) * int(num_shards), span * int(num_shards))


_TABLES: dict = {}


def _split_tables(attention, lengths, routed, capacity, per_shard, num_shards, expert_rate, grid, top):
    """(terms, owed, floor) of :func:`_full_rows` and :func:`_class_owed`, or None; the last
    window's are kept (the charge and the row excess of one window share them)."""
    import hashlib

    arrays = [np.ascontiguousarray(a, dtype=t) for a, t in ((attention, np.float64), (lengths, np.int64),
                                                                 (routed, np.int64))]
    digest = hashlib.blake2b(b"".join(a.tobytes() for a in arrays), digest_size=16).hexdigest()
    key = (digest, int(capacity), int(per_shard), int(num_shards), float(expert_rate), int(grid), int(top))
    if key not in _TABLES:
        terms = _full_rows(*arrays, capacity, per_shard, num_shards, expert_rate, grid)
        _TABLES.clear()
        _TABLES[key] = None if terms is None else (terms, *_class_owed(terms, num_shards, top))
    return _TABLES[key]


def row_excess_bound(attention: np.ndarray, lengths: np.ndarray, routed: np.ndarray, capacity: int,
                     per_shard: int, num_shards: int, expert_rate: float, floors: np.ndarray,
                     num_rows: int, grid: int = 256, span: int = 8) -> float:
    """Lower bound on sum_r (G M_r - sum_g Lambda_g) over every row (see
    :func:`full_row_charge` for M_r, Lambda_g and E(g)), given ``floors`` [N]: c_i with
    sum_{i in g} c_i <= X[r,g] - E(g) for every block g (for a fixed placement, gamma
    sum_l (tokens of i on rank p_l - tokens of i / P) for any one rank p_l per layer).

    The full-row charge and the expert excess bound the same sum, so each alone gives a
    max; this adds them where they cannot overlap. A block without a full-length sample in
    a row with one ("hidden") may hide its excess below M_r; every other block owes the sum
    of its samples' c_i beside what the charge counts for it: a block with a full-length
    sample has J >= theta + X, so it owes M_r - Lambda_g >= (theta - its cells' mean) +
    (X - E), its deficits (all the charge counts for it) plus at least its c_i; a block in
    a row without one owes J[r,g] - Lambda_g >= X - E, which the charge does not count. A
    row with f full-length samples in n blocks has G - n hidden blocks (G - ceil(f / k) at
    most), and they hold at most k C tokens each and no full-length sample: so the sum is
    at least the charge of the split of the full-length samples into rows, plus sum_i c_i
    less the most c_i the other samples of h k C tokens can hold (fractional knapsack of
    their positive c_i, and never below 0: every block's X - E >= 0), h the split's hidden
    blocks; the least over splits (a DP over full-length samples and hidden blocks) is the
    bound. Without a full-length sample it is sum_i c_i.
    """
    floors = np.asarray(floors, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = float(floors.sum())
    # hidden blocks: at most all R G; the DP counts up to ``top`` of them exactly and more
    # at ``top`` (charged the excess kept when all R G hide: valid, and such splits owe much)
    top = _hidden_top(num_rows, num_shards, span)
    tables = _split_tables(attention, lengths, routed, capacity, per_shard, num_shards, expert_rate, grid, top)
    if tables is None:
        return max(0.0, total)
    # hidden blocks hold no full-length sample: only the others' floors can hide there
    positive = (floors > 0) & (lengths < capacity)
    # (each block's X - E >= 0 too: what the other blocks keep is never below 0)
    kept = np.maximum(total - _fractional_knapsack(lengths[positive].astype(np.float64), floors[positive],
                                                   hidden_capacities(num_rows, num_shards, per_shard, capacity, span)),
                      0.0)  # [h]
    return _split_excess(tables, kept, total)


def hidden_capacities(num_rows: int, num_shards: int, per_shard: int, capacity: int, span: int = 8) -> np.ndarray:
    """[top + 1] the most tokens h hidden blocks hold, h = 0..top - 1, and all R G blocks
    for the last entry (h >= top: :func:`row_excess_bound`)."""
    top = _hidden_top(num_rows, num_shards, span)
    return np.append(np.arange(top), int(num_rows) * int(num_shards)) * float(int(per_shard) * int(capacity))


def _split_excess(tables, kept: np.ndarray, total: float) -> float:
    """The row excess of the split DP's ``tables`` with ``kept[h]`` (the excess the blocks
    that cannot hide keep beside h hidden blocks) and ``total`` (the excess with none
    hidden, alone a bound)."""
    terms, owed, floor = tables
    best = float(np.min(np.maximum(owed, floor[:, None]) + kept[None, :]))
    return max(0.0, total, best - terms["excess"])


# a[i,l,e] entries per layer (N x E) from which two threads share the layers of the row
# excess for every placement: on the 2-core machine they take 0.72-0.75 of the time from
# N x E = 2048 x 256 up, and were slower at 1024 x 256 and below (docs/benchmarks.md)
THREADED_ENTRIES = 1 << 19


def excess_threads(instance: Instance) -> int:
    """Threads :func:`every_placement_row_excess` uses by default: 2 on a machine with two
    cores or more when a layer has at least :data:`THREADED_ENTRIES` entries, else 1."""
    window = instance.window
    big = window.num_samples * window.num_experts >= THREADED_ENTRIES
    return 2 if big and (os.cpu_count() or 1) >= 2 else 1


def every_placement_row_excess(instance: Instance, num_rows: int, attention: np.ndarray | None = None,
                               load: np.ndarray | None = None, span: int = 8, threads: int | None = None) -> float:
    """:func:`row_excess_bound` for every placement: the blocks that cannot hide keep at
    least gamma sum_l (max_p L'[l,p] - L'[l]/P) over their samples, L' the window's loads
    less those of the hidden blocks' samples (at most h k C tokens, none full-length),
    bounded below over every such set and every placement by
    :func:`rp_opt.placement.hidden.hidden_excess`. ``attention`` [N] is each sample's
    attention cost (``CostBounds.sample_attention``; computed when None). 0 without a
    full-length sample or with more than one routing rate (no charge to add it to).
    ``threads`` share the layers (None: :func:`excess_threads`; the value does not depend
    on it)."""
    from .placement.hidden import hidden_excess

    window, cluster, cost = instance.window, instance.cluster, instance.cost
    if attention is None:
        attention = cost.layers @ stage_work(window, cost)
    per_shard = cluster.dp // cluster.edp
    lengths = window.lengths
    routed = window.demand.sum(axis=(1, 2), dtype=np.int64)
    tables = _split_tables(np.asarray(attention, dtype=np.float64), lengths, routed, cluster.capacity, per_shard,
                           cluster.edp, cost.gamma / cluster.ep, 256, _hidden_top(num_rows, cluster.edp, span))
    if tables is None:
        return 0.0
    load = window.expert_load() if load is None else load
    hideable = lengths < cluster.capacity
    threads = excess_threads(instance) if threads is None else threads
    kept = cost.gamma * hidden_excess(load, window.demand, lengths, cluster.ep,
                                      hidden_capacities(num_rows, cluster.edp, per_shard, cluster.capacity, span),
                                      samples=hideable, threads=threads)
    return _split_excess(tables, kept, float(kept[0]))


def _full_rows(attention: np.ndarray, lengths: np.ndarray, routed: np.ndarray, capacity: int, per_shard: int,
               num_shards: int, expert_rate: float, grid: int = 256) -> dict | None:
    """What a row with f full-length samples owes (:func:`full_row_charge`): ``two_case``
    [f, n] (inf where not a two-case row), ``pooled`` [f], ``cheapest`` [K] (the K cheapest
    cells' deficits over k), ``excess`` (full-length cells above theta), and the window's
    figures behind them; None without a full-length sample or one routing rate."""
    attention = np.asarray(attention, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=np.int64)
    routed = np.asarray(routed, dtype=np.int64)
    k, num_shards, slots = int(per_shard), int(num_shards), int(per_shard) * int(num_shards)
    full = lengths == capacity
    heavy = int(full.sum())
    # E(g) - E(g_f) <= rho s needs one routing rate rho for every sample (a full replay)
    if heavy == 0 or not np.all(routed * lengths[0] == routed[0] * lengths):
        return None
    rho = expert_rate * float(routed[0]) / float(lengths[0])
    theta = float(attention[full].min())
    excess = float((attention[full] - theta).sum()) / k        # full-length cells above theta
    # the deficit theta - att_d of a cell without a full-length sample, at least: each
    # distinct big sample's ceiling, or that of a cell without one; cheapest first
    u, v = _big_ceilings(lengths, attention, capacity, (2 * lengths > capacity) & ~full)
    deficits = np.sort(np.concatenate([theta - v, np.full(slots * (heavy + 1), theta - u)]))
    cheapest = np.concatenate([[0.0], np.cumsum(deficits)]) / k   # [K]: the K cheapest cells
    # h[y]: deficit of a cell with >= y * step tokens of room; delta[j]: least deficit of
    # 1..k-1 cells with >= j * step of room between them (rounded down: a lower bound)
    step = capacity / grid
    h = theta - _cell_ceiling(lengths, attention, capacity,
                              np.maximum(capacity - np.arange(grid + 1) * step, 0.0), full)
    delta = np.full(grid + 1, np.inf)
    spread = h.copy()                                           # m cells, room exactly y
    for m in range(1, k if num_shards > 1 else 1):              # (one shard: every row pooled)
        at_least = np.minimum.accumulate(spread[::-1])[::-1]
        delta = np.minimum(delta, at_least[np.clip(np.arange(grid + 1) - m, 0, grid)])
        nxt = np.full(grid + 1, np.inf)
        for y in range(grid + 1):
            nxt[y:] = np.minimum(nxt[y:], spread[:grid + 1 - y] + h[y])
        spread = nxt
    # g_f's room s lies in [j step, (j+1) step) for some j (the last interval reaches the
    # most room a block with a full-length cell can have, (k - 1) C)
    room_top = np.append(np.arange(1, grid + 1) * step, (k - 1) * capacity)
    room_start = np.arange(grid + 1) * step
    room_deficit = np.append(0.0, delta[1:])       # s in [0, step) may be 0: k full cells
    # per row with f full-length samples: "pooled" (owes its cells' deficits) or the least
    # over the interval of s of the two-case bound with its cheapest cells, for each n
    pooled = np.zeros(slots + 1, dtype=bool)
    two_case = np.full((slots + 1, num_shards + 1), np.inf)             # [f, n]
    for f in range(1, slots + 1):
        x = cheapest[slots - f]
        for n in range(-(-f // k), min(num_shards, f) + 1):   # blocks holding the f samples
            if n == num_shards or n * (k - 1) < f:
                pooled[f] = True
            else:
                # blocks with one owe a >= their n k - f cells' deficits and, for s > 0 (each
                # then has a cell with room), >= n delta(s) / k; the others b - (G - n) rho s,
                # b >= their (G - n) k cells', a + b >= x; the least of a + (b - that)^+
                # takes a at its floor (raising a lowers it no more)
                # g_f holds at least ceil(f / n) of them: s <= (k - ceil(f / n)) C
                fits = room_start <= (k - -(-f // n)) * capacity
                a = np.maximum(n * room_deficit / k, cheapest[n * k - f])[fits]
                b = np.maximum(cheapest[(num_shards - n) * k], x - a)
                relief = (num_shards - n) * rho * np.minimum(room_top[fits], (k - -(-f // n)) * capacity)
                value = float(np.min(a + np.maximum(b - relief, 0.0)))
                two_case[f, n] = max(0.0, value)
    return {"two_case": two_case, "pooled": pooled, "cheapest": cheapest, "excess": excess, "k": k,
            "heavy": heavy, "slots": slots, "rho": rho, "theta": theta, "full": full, "attention": attention,
            "lengths": lengths, "capacity": capacity}


def _class_owed(terms: dict, num_shards: int, top: int) -> tuple[np.ndarray, np.ndarray]:
    """(owed [G, top + 1], floor [G]) for the classes n_min = 1..G of layouts of the
    full-length samples into rows (class n_min < G: two-case rows have n >= n_min and one
    has n = n_min; class G: no two-case row): ``owed[c, h]`` the least the split bound
    charges a layout of class c + 1 with h hidden blocks (G - n per row of n blocks with a
    full-length sample; h >= top counted at top), ``floor[c]`` the distinct-cells bound of
    the class (at its relief rate (G - n_min) rho / n_min per token of room)."""
    two_case, pooled, cheapest = terms["two_case"], terms["pooled"], terms["cheapest"]
    heavy, slots, rho = terms["heavy"], terms["slots"], terms["rho"]
    classes = np.arange(1, num_shards + 1)
    sizes = np.arange(1, slots + 1)
    k = int(terms["k"])
    # hidden blocks (those without a full-length sample; a block with one owes its excess
    # beside its deficits, J >= theta + X): G - n in a two-case row of n blocks with one,
    # and in a pooled row, n its least count of them (n = G, or n (k - 1) < f: a block of
    # k full-length cells)
    least = -(-sizes // k)
    shift = num_shards - np.where(least * (k - 1) < sizes, least, num_shards)
    width, pad = top + 1, num_shards
    # two-case rows of t samples and h hidden blocks: [0] without (free), [1] with (marked)
    # the n = n_min row; pooled rows: the least cells without a full-length sample (they
    # owe the cheapest of them, pooled). ``pad`` columns take the shift of one row before
    # h >= top folds onto top.
    two = np.full((2, num_shards, heavy + 1, width + pad), np.inf)
    cells = np.full((heavy + 1, width + pad), np.inf)
    two[0, :, 0, 0] = cells[0, 0] = 0.0

    def fold(array):
        """h >= top counted at top."""
        array[..., top] = array[..., top:].min(axis=-1)
        array[..., top + 1:] = np.inf

    # two-case rows by their n (classes c <= n take them; class n marks them), pooled rows
    # grouped by their hidden blocks
    cases = [(int(n), sizes[np.isfinite(two_case[sizes, n])]) for n in classes[:-1]]
    groups = [(int(h), sizes[(shift == h) & pooled[sizes]]) for h in np.unique(shift)]
    for t in range(1, heavy + 1):
        for n, fs in cases:
            fs = fs[fs <= t]
            if fs.size == 0:
                continue
            h, value = num_shards - n, two_case[fs, n]
            source = two[:, :n, t - fs, :width]                            # [2, n, |fs|, width]
            best = (source + value[None, None, :, None]).min(axis=2)       # classes 1..n take it
            best[1, n - 1] = np.minimum(best[1, n - 1], (source[0, n - 1] + value[:, None]).min(axis=0))
            np.minimum(two[:, :n, t, h:h + width], best, out=two[:, :n, t, h:h + width])
        for h, fs in groups:
            fs = fs[fs <= t]
            if fs.size:
                best = (cells[t - fs, :width] + (slots - fs)[:, None]).min(axis=0)
                np.minimum(cells[t, h:h + width], best, out=cells[t, h:h + width])
        fold(two[:, :, t])
        fold(cells[t])
    lowest = np.minimum.accumulate(cheapest[::-1])[::-1]
    cells = cells[:, :width]
    finite = np.isfinite(cells)
    pooled_owed = np.full(cells.shape, np.inf)                  # >= 0: cheapest is convex
    pooled_owed[finite] = np.maximum(lowest[np.minimum(cells[finite], lowest.size - 1).astype(np.int64)], 0.0)
    rows_owed = two[1, :, :, :width].copy()
    rows_owed[-1] = two[0, -1, :, :width]                       # class G: no two-case row
    # the split's hidden blocks add: h1 two-case, h2 pooled
    # (t two-case samples beside heavy - t pooled ones, every t at once)
    owed = np.full((num_shards, 2 * width), np.inf)
    rest = pooled_owed[::-1]                                    # [t, h2]: heavy - t pooled
    for h in np.flatnonzero(np.isfinite(rows_owed).any(axis=(0, 1))):
        joined = (rows_owed[:, :, h, None] + rest[None, :, :]).min(axis=1)     # [G, h2]
        np.minimum(owed[:, h:h + width], joined, out=owed[:, h:h + width])
    fold(owed)
    owed = owed[:, :width]
    small_room = _distinct_cells(terms["attention"], terms["lengths"], terms["capacity"], terms["full"],
                                 terms["theta"], terms["k"], heavy, slots)
    floor = np.array([small_room((num_shards - c) * rho / c) for c in classes])
    return owed, floor


def _distinct_cells(attention: np.ndarray, lengths: np.ndarray, capacity: int, full: np.ndarray, theta: float,
                    per_shard: int, heavy: int, slots: int, grid: int = 64):
    """``owed(rate)``: a lower bound on the sum over the rows with a full-length sample of
    what they owe (before the full-length cells above theta), for layouts whose every
    two-case row relieves at most ``rate`` per token of room of its cells.

    A row owes at least x - (G - n) rho s (x: its cells' deficits over k; s: the room of
    its g_f, which every one of its n blocks with a full-length sample has, so n s is at
    most the room of the row's cells without one): at least the sum over those cells of
    deficit / k - rate (C - T_d) with rate = (G - n) rho / n (0 for a pooled row). Cells
    are distinct across rows and the rows hold at least K = ceil(F / D) D - F of them (F
    full-length samples), so the rows owe at least the K cheapest of these per-cell
    floors: one per big sample (its own cell) and any number of cells without one. Each
    floor is the least over intervals of tokens of (theta - the ceiling at the interval's
    top) / k - rate (C - its bottom): the ceiling grows with the tokens."""
    big = (2 * lengths > capacity) & ~full
    small = 2 * lengths <= capacity
    weights, values = lengths[small].astype(np.float64), attention[small]
    steps = np.linspace(0.0, 1.0, grid + 1)
    # rows: each big sample, then a cell without one; columns: the grid of fill tokens
    base = np.concatenate([lengths[big], [0]]).astype(np.float64)
    fill_room = (capacity - base)[:, None] * steps[None, :]
    fill = _fractional_knapsack(weights, values, fill_room.ravel()).reshape(fill_room.shape)
    deficit = (theta - np.concatenate([attention[big], [0.0]])[:, None] - fill) / per_shard
    room = capacity - base[:, None] - fill_room                       # C - T_d at each grid point
    count = -(-heavy // slots) * slots - heavy

    def owed(rate: float) -> float:
        floor = (deficit[:, 1:] - rate * room[:, :-1]).min(axis=1)
        if floor[-1] < 0:                  # more rows, more cells: no floor
            return -np.inf
        cells = np.sort(np.concatenate([floor[:-1], np.full(count, floor[-1])]))
        # the K cheapest, and any further cell of a negative floor (more rows, K larger)
        return float(cells[:count].sum() + np.minimum(cells[count:], 0.0).sum())

    return owed


def row_maxima_attention(attention: np.ndarray, num_rows: int, num_slots: int) -> float:
    """A lower bound on sum_r max_{slots d} (attention of cell (r,d)) over every layout of
    ``num_rows`` rows of ``num_slots`` non-empty cells: a_max + sum_{k=1}^{R-1} b_{kD}, b the
    sample attentions ascending (1-based).

    Why: a cell's attention is at least that of each sample in it, so a row's maximum is at
    least its longest sample's. The row holding the longest sample gives a_max; every other
    row holds at least D samples, so the k-th least of their maxima is at least b_{kD}. With
    N = R D (one sample per cell) it is the sum over the sorted groups of D, the least sum
    of row maxima (an optimum when only attention counts)."""
    b = np.sort(np.asarray(attention, dtype=np.float64))
    if num_rows < 1 or b.size < num_rows * num_slots:
        return 0.0
    others = b[np.arange(1, num_rows) * num_slots - 1]
    return float(b[-1] + others.sum())


def _row_forms(agg: Aggregate) -> tuple[bool, bool]:
    """(``agg`` is sum_r max_g, ``agg`` sums over rows): the forms the row bounds hold for."""
    per_row = agg.inner == "max" and agg.over == "shards" and agg.outer == "sum"
    rows_summed = (agg.over == "rows" and agg.inner == "sum") or (agg.over == "shards" and agg.outer == "sum")
    return per_row, rows_summed


def _per_row(agg: Aggregate, num_shards: int) -> bool:
    """An aggregate equal to a multiple of sum_r max_g J: sum_r max_g, and with G = 1 every
    sum over rows (attention and expert weighed alike)."""
    per_row, rows_summed = _row_forms(agg)
    return agg.attention == agg.expert and (per_row or (num_shards == 1 and rows_summed))


def uses_row_maxima(objective, num_shards: int) -> bool:
    """Whether the primary of ``objective`` takes the full-row bound (the row charge and
    the row excess of :class:`CostBounds`): a sum over rows of maxima over shards, or with
    G = 1 any sum over rows."""
    return any(_per_row(agg, num_shards) for _, agg in get_objective(objective).levels[0])


@dataclass(frozen=True)
class CostBounds:
    """Valid lower bounds on the parts of any layout with ``num_rows`` rows.

    Attributes
    ----------
    attention_total
        sum_{r,g} A >= (G/D) sum_s n_s (sum_i (alpha_s T_i + beta_s Q_i) + waste_s)  (averages,
        raised by the waste big samples force: :func:`attention_waste`).
    expert_total
        sum_{r,g} X >= gamma sum_l max_p L[l,p]  (Eq. 4; placement-free form when no
        placement is given).
    sample_attention, sample_expert
        [N] cost of each sample alone: every cell, shard and row holding it costs at least
        this much.
    attention_mean, token_expert, row_charge
        sum_r max_g J >= (1/G) (attention_mean + token_expert + max(row_charge,
        expert_total - token_expert)): (G/D) sum_i att_i, (gamma/P) x the routed tokens
        (X[r,g] >= the block's share of them), and :func:`full_row_charge` (rows that hold
        a full-length sample). The expert total above ``token_expert`` may sit in those
        rows too, hence the max. 0 where not computed.
    row_excess
        The charge and the expert excess where they cannot overlap, a third term of that
        max: for a fixed placement :func:`row_excess_bound`, for every placement
        :func:`every_placement_row_excess`. 0 where not computed.
    row_attention
        sum_r max_g A[r,g] >= :func:`row_maxima_attention` (each row's maximum is at least
        its longest sample's attention); with one sample per cell (N = R D) it is the
        least such sum. 0 where not computed.
    """

    attention_total: float
    expert_total: float
    sample_attention: np.ndarray
    sample_expert: np.ndarray
    num_rows: int
    num_shards: int
    attention_mean: float = 0.0
    token_expert: float = 0.0
    row_charge: float = 0.0
    row_excess: float = 0.0
    row_attention: float = 0.0

    def _means(self, agg: Aggregate) -> int:
        """n such that ``agg`` >= (its matrix's total) / n: a max over n entries is at least
        their mean. sum_r max_g J and max_g sum_r J: G; sum_g max_r J and max_r sum_g J: R."""
        if agg.inner == "sum" and agg.outer == "sum":
            return 1
        if agg.inner == "max" and agg.outer == "max":
            return self.num_rows * self.num_shards
        maxed = agg.over if agg.inner == "max" else ("rows" if agg.over == "shards" else "shards")
        return self.num_shards if maxed == "shards" else self.num_rows

    def aggregate(self, agg: Aggregate) -> float:
        """Lower bound of one aggregate."""
        total = agg.attention * self.attention_total + agg.expert * self.expert_total
        if agg.inner == "sum" and agg.outer == "sum":
            # with G = 1 the sum of J is sum_r max_g J
            return max(total, self._rows(agg), self._row_maxima(agg))
        single = float(np.max(agg.attention * self.sample_attention + agg.expert * self.sample_expert))
        return max(total / self._means(agg), single, self._rows(agg), self._row_maxima(agg))

    def _row_maxima(self, agg: Aggregate) -> float:
        """``row_attention`` for the aggregates it bounds: the sum of every J (sum_{r,g} A >=
        sum_r max_g A), with G = 1 any sum over rows (sum_r J = sum_r A + sum_r X: Eq. 4 adds
        the expert bound), and sum_r max_g J for any G."""
        total = agg.inner == "sum" and agg.outer == "sum"
        per_row, rows_summed = _row_forms(agg)
        if total or (self.num_shards == 1 and rows_summed):
            return agg.attention * self.row_attention + agg.expert * self.expert_total
        # max_g (a A + b X) >= a A[r,g] at the shard of the row's longest sample (X >= 0)
        return agg.attention * self.row_attention if per_row else 0.0

    def uses_row_maxima(self, objective) -> bool:
        """Whether the primary of ``objective`` takes the full-row bound (``row_charge``,
        ``row_excess``): :func:`uses_row_maxima`."""
        return uses_row_maxima(objective, self.num_shards)

    def _rows(self, agg: Aggregate) -> float:
        """The full-row bound on sum_r max_g J (see ``row_charge``), for aggregates equal
        to a multiple of it: sum_r max_g, and with G = 1 every sum over rows."""
        if max(self.row_charge, self.row_excess) <= 0 or not _per_row(agg, self.num_shards):
            return 0.0
        charged = max(self.row_charge, self.expert_total - self.token_expert, self.row_excess)
        return agg.attention * (self.attention_mean + self.token_expert + charged) / self.num_shards

    def gap_split(self, costs: Costs, objective, relative: bool = False) -> dict:
        """Where a plan's primary sits above this bound, in cost units of the primary:
        ``attention`` and ``expert`` (the totals above their bounds, weighted as the
        primary's aggregates average them) and ``spread`` (the primary's maxima above the
        means of the entries they reduce) add up to primary - bound + ``bound_slack``
        (>= 0: how far the single-sample bound lifts the bound above the averaged totals).
        ``relative``: divided by |primary|, the units of :func:`rp_opt.result.relative_gap`."""
        objective = get_objective(objective)
        level = objective.levels[0]
        att = float(costs.attention.sum()) - self.attention_total
        exp = float(costs.expert.sum()) - self.expert_total
        out = {"attention": 0.0, "expert": 0.0, "spread": 0.0, "bound_slack": 0.0}
        for coef, agg in level:
            n = self._means(agg)
            total = float(agg.matrix(costs).sum())
            out["attention"] += coef * agg.attention * att / n
            out["expert"] += coef * agg.expert * exp / n
            out["spread"] += coef * (agg.evaluate(costs) - total / n)
            averaged = (agg.attention * self.attention_total + agg.expert * self.expert_total) / n
            out["bound_slack"] += coef * (self.aggregate(agg) - averaged)
        if relative:
            primary = abs(objective.evaluate(costs)[0])
            out = {key: part / max(primary, 1e-300) for key, part in out.items()}
        return out

    def objective(self, objective) -> tuple[float, ...]:
        """Bound on every level (each valid on its own; the first bounds the primary)."""
        objective = get_objective(objective)
        return tuple(sum(coef * self.aggregate(agg) for coef, agg in level) for level in objective.levels)


def cost_bounds(instance: Instance, num_rows: int, placement: Placement | None = None, *,
                load: np.ndarray | None = None, tokens: np.ndarray | None = None) -> CostBounds:
    """Analytic lower bounds for layouts of ``num_rows`` rows.

    With ``placement`` the bounds hold for that placement (the hierarchical problem);
    without, they hold for every placement (the joint problem). ``load`` (=
    ``window.expert_load()``) and ``tokens`` [N, L] (tokens each sample routes per layer)
    spare passes over a[i,l,e] when the caller already has them.

    Raises
    ------
    InputError
        ``num_rows`` not an integer >= 1, or ``placement`` not one for this cluster and
        window (one line naming the field).
    """
    require(isinstance(instance, Instance), "instance", f"must be an Instance, got {type(instance).__name__}")
    num_rows = integer("num_rows", num_rows, low=1)
    window, cluster, cost = instance.window, instance.cluster, instance.cost
    placement = placement_for(placement, cluster.ep, "placement", window.num_layers, window.num_experts, none=True)
    work = stage_work(window, cost)
    attention = cost.layers @ work
    # averages, plus the waste big samples force on the other cells of their blocks
    waste = attention_waste(work, window.lengths, cluster.capacity, cluster.dp // cluster.edp,
                            num_rows * cluster.edp)
    attention_total = cluster.edp / cluster.dp * (float(attention.sum()) + float(cost.layers @ waste))
    if placement is None:
        expert_total = cost.gamma * float(placement_bound(window, cluster.ep, load).sum())
        # per layer: the busiest rank holds at least the sample's largest expert count and
        # at least a 1/P share of its tokens
        widest = window.demand.max(axis=2).astype(np.int64)
        if tokens is None:
            tokens = window.demand.sum(axis=2, dtype=np.int64)
        share = -(-np.asarray(tokens, dtype=np.int64) // cluster.ep)
        sample_expert = cost.gamma * np.maximum(widest, share).sum(axis=1)
    else:
        demand = rank_demand(window, placement)                                # [N, L, P]
        rank_loads = demand.sum(axis=0)                                        # [L, P]
        expert_total = cost.gamma * float(rank_loads.max(axis=1).sum())
        sample_expert = cost.gamma * demand.max(axis=2).sum(axis=1).astype(np.float64)
    # rows that hold a full-length sample (sync's row maxima): needs the routed tokens
    routed = np.asarray(tokens, dtype=np.int64).sum(axis=1) if tokens is not None \
        else window.demand.sum(axis=(1, 2), dtype=np.int64)
    per_shard = cluster.dp // cluster.edp
    charge = full_row_charge(attention, window.lengths, routed, cluster.capacity, per_shard, cluster.edp,
                             cost.gamma / cluster.ep, num_rows=num_rows)
    excess = 0.0 if placement is None else placement_row_excess(instance, num_rows, demand, attention, rank_loads)
    return CostBounds(attention_total, expert_total, attention, np.asarray(sample_expert, dtype=np.float64),
                      int(num_rows), cluster.edp, float(attention.sum()) / per_shard,
                      cost.gamma / cluster.ep * float(routed.sum()), charge, excess,
                      row_maxima_attention(attention, num_rows, cluster.dp))


def placement_row_excess(instance: Instance, num_rows: int, demand_by_rank: np.ndarray,
                         attention: np.ndarray, rank_loads: np.ndarray | None = None) -> float:
    """:func:`row_excess_bound` of one placement, from its ``demand_by_rank`` [N, L, P]
    (``rank_demand``) and the samples' ``attention`` [N]. Each sample's floor c_i is gamma
    sum_l (its tokens on the busiest rank of the window's layer l - its tokens / P): a
    block's X - E is at least the sum over its samples, since its max over ranks is at
    least its load on that one rank. ``rank_loads`` [L, P] (``demand_by_rank`` summed over
    the samples) spares that pass when the caller has it."""
    cluster, cost = instance.cluster, instance.cost
    tokens = demand_by_rank.sum(axis=2, dtype=np.int64)                       # [N, L]
    if rank_loads is None:
        rank_loads = demand_by_rank.sum(axis=0, dtype=np.int64)
    busiest = np.asarray(rank_loads).argmax(axis=1)                           # [L]
    on_busiest = np.take_along_axis(demand_by_rank, busiest[None, :, None], axis=2)[:, :, 0]
    floors = cost.gamma * (on_busiest - tokens / cluster.ep).sum(axis=1)
    return row_excess_bound(attention, instance.window.lengths, tokens.sum(axis=1), cluster.capacity,
                            cluster.dp // cluster.edp, cluster.edp, cost.gamma / cluster.ep, floors, num_rows)


def strong_bounds(instance: Instance, num_rows: int, load: np.ndarray | None = None, base=None,
                  hidden: bool = True, every_row_excess: float | None = None):
    """:class:`rp_opt.bounds.CostBounds` valid for every placement, with the expert total
    sum_{r,g} X >= gamma sum_l LB_l where LB_l is the pigeonhole bound on the best max rank
    load of layer l (:func:`rp_opt.placement.placement_lower_bound`, >= MODEL.md's
    max(max_e load, sum_e load / P)), since sum_{r,g} max_p W[r,g,l,p] >= max_p L[l,p]
    (Eq. 4) holds for whatever placement the plan uses; with ``hidden``, the row excess
    for every placement too (:func:`rp_opt.bounds.every_placement_row_excess`: the charge
    and the excess of the blocks that cannot hide it), or ``every_row_excess`` when an
    earlier call for this window and R computed it (it depends on no placement)."""

    from .placement import placement_lower_bound

    base = cost_bounds(instance, num_rows) if base is None else base
    load = instance.window.expert_load() if load is None else load
    lb = placement_lower_bound(load, instance.cluster.ep)
    expert_total = instance.cost.gamma * float(np.sum(lb))
    row_excess = base.row_excess
    if hidden:
        if every_row_excess is None:
            every_row_excess = every_placement_row_excess(instance, num_rows, base.sample_attention, load)
        row_excess = max(row_excess, every_row_excess)
    return replace(base, expert_total=max(base.expert_total, expert_total), row_excess=row_excess)


def window_bound(instance: Instance, num_rows: int, objective) -> float:
    """The primary's bound for every placement and layout of ``num_rows`` rows with no time
    limit: :func:`strong_bounds`, with the row excess for every placement where the primary
    takes row maxima (a plan's report adds that part only within its budget)."""
    base = cost_bounds(instance, num_rows)
    return strong_bounds(instance, num_rows, base=base, hidden=base.uses_row_maxima(objective)).objective(objective)[0]


def timed_window_bound(instance: Instance, num_rows: int, objective) -> tuple[float, float]:
    """(:func:`window_bound`, its seconds): for reports that show what the certificate
    costs beside the plan (``rp-opt eval --bound``, scripts/bench_heuristic.py)."""
    started = time.perf_counter()
    bound = window_bound(instance, num_rows, objective)
    return bound, time.perf_counter() - started


def hidden_seconds(instance: Instance, others: int | None = None) -> float:
    """Estimated seconds of :func:`rp_opt.bounds.every_placement_row_excess`: its tables
    (about 1e-5 s per sample) and L E (1.5e-5 + 2.5e-8 N) for the layers, three quarters of
    that where two threads share them (:func:`excess_threads`); times 1 + ``others``, the
    threads of other processes running now (None: an idle machine).

    Measured on the 2-core machine, idle (min of 4 runs): 0.046-0.064 s for 256 x 8 x 256
    (N x L x E; estimated 0.046), 0.055 for 512 x 8 x 256 (0.062), 0.033 for 1024 x 8 x 64
    (0.031), 0.065 for 512 x 12 x 256 (0.090), 0.26-0.32 for 512 x 48 x 256 (0.35), 0.21
    for 4096 x 16 x 128 (0.22) and 0.68-0.87 for 16384 x 16 x 128 (0.82). Beside other
    work it is slower: with 1, 2, 3 busy loops (others_running 1-3) 1.3, 1.5, 2.2 times the
    idle time on 4096 x 16 x 128, and 3-5 times beside others' numpy runs (load average
    2.3-3.5), where the idle estimate let a 2-s plan spend 0.66-0.86 s, not a tenth, on it;
    too high an estimate only leaves the bound out of the report."""
    window = instance.window
    layers = window.num_layers * window.num_experts * (1.5e-5 + 2.5e-8 * window.num_samples)
    seconds = 1e-5 * window.num_samples + (0.75 * layers if excess_threads(instance) > 1 else layers)
    return seconds * (1 + max(0, int(others or 0)))
