"""Eq. 4 for what is left when some samples leave: the placement bound of a remainder.

For ``sync``, the rows that hold a full-length sample may hide the expert excess of their
blocks without one below the row's maximum (:func:`rp_opt.bounds.row_excess_bound`); the
other blocks still owe theirs. For every placement pi the blocks that cannot hide owe at
least Eq. 4 over their own samples: with H the samples of the hidden blocks (at most tau
tokens, none full-length) and L' = L - d_H the loads of the others,

    sum_{b not hidden} (X_b - E_b) >= gamma sum_l (max_p L'[l,p] - L'[l]/P),

and max_p L'[l,p] is at least the pigeonhole bound of :mod:`rp_opt.placement.bounds`
applied to L'[l]. H is unknown, so this module bounds that from below over every H of
at most tau tokens. Each term of the pigeonhole bound is a sum over order statistics of
the loads; with y = L - d (d >= 0 the depletion by H):

* the h heaviest: top_h(y) >= y(S_h) = L(S_h) - d(S_h), S_h the h heaviest under L, and a
  range of order statistics a..b loses at most d(S_b);
* the q lightest: bottom_q(y) = min over q-sets S' of L(S') - d(S'). With B_q the q
  lightest under L, S' = B_q - out + in has d(S') <= d(B_q) + sum_in d_e, so
  bottom_q(y) >= L(B_q) - d(B_q) + sum over pairs of min(0, (L_in - ub_in) - L_out), the
  cheapest in against the heaviest out (ub_e >= d_e: one expert alone);
* d(S) for a set S is at most the fractional knapsack of H's capacity over the samples'
  tokens on S (:func:`_knapsack_curves`): one knapsack for the whole set, so that a sample
  cannot count its routing noise once per expert;
* an expert that every sample routes at one rate c_e per token ("exact", e.g. an expert
  every token visits) loses exactly c_e T_H, and the mean L'/P loses at least
  r_min T_H / P (r_min: the least routed tokens per token of a layer).

Between two capacities of the grid the knapsacks are taken at the larger one and the
linear parts (exact experts, the mean) are exact, so each term is concave in T_H there
and its least value is at an end; the bound of an interval is the largest such term.
"""

from __future__ import annotations

import numpy as np

from .lpt import _check_load


def hidden_excess(load: np.ndarray, demand: np.ndarray, lengths: np.ndarray, num_ranks: int,
                  capacities: np.ndarray, bucket_ratio: float = 1.1, samples: np.ndarray | None = None,
                  threads: int = 1) -> np.ndarray:
    """Lower bound on sum_l (max_p L'[l,p] - L'[l]/P) for every balanced placement and every
    set H of the given samples with at most ``capacities[m]`` tokens, L' = ``load`` less H's
    demand.

    Parameters
    ----------
    load
        [L, E] expert loads of the whole window.
    demand
        [n, L, E] a[i,l,e] of the samples that may leave (those a hidden block can hold), or
        of a whole window with ``samples`` naming them (no copy of a: one layer at a time).
    lengths
        [n] their tokens T_i >= 1 (of the whole window with ``samples``).
    num_ranks
        P, dividing E.
    capacities
        [M] non-decreasing token capacities, the first 0.
    bucket_ratio
        The one-expert knapsacks (the swaps' ub_e) group samples by their tokens per token
        on the expert in buckets whose edges are at most this ratio apart (a float's
        exponent and leading mantissa bits), each taken at its upper edge: an upper bound
        on the exact knapsack, within that ratio on the bucket it splits.
    samples
        Indices (or a boolean mask) of the samples that may leave, into ``demand`` and
        ``lengths``; None: all of them.
    threads
        Threads that share the layers (the result does not depend on it).

    Returns
    -------
    np.ndarray
        [M] non-increasing and >= 0, in tokens (times gamma: cost units).
    """
    load, num_ranks = _check_load(load, num_ranks)
    demand = np.asarray(demand)
    chosen = np.arange(demand.shape[0]) if samples is None else np.arange(demand.shape[0])[samples]
    lengths = np.asarray(lengths, dtype=np.float64)[chosen]
    capacities = np.asarray(capacities, dtype=np.float64)
    num_layers, num_experts = load.shape
    if chosen.size == 0:
        point = _layer_terms_at_zero(load.astype(np.float64), num_ranks)
        return np.full(capacities.shape, max(point, 0.0))
    def one_layer(layer: int) -> np.ndarray:
        return _layer(load[layer].astype(np.float64), demand[chosen, layer, :], lengths, num_ranks, capacities,
                      bucket_ratio)

    # layers are independent and numpy's bulk work releases the GIL: two threads share them
    # (each layer's result lands in its own row, so the sum below is in a fixed order)
    if threads > 1 and num_layers > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(threads, num_layers)) as pool:
            per_layer = np.stack(list(pool.map(one_layer, range(num_layers))))
    else:
        per_layer = np.stack([one_layer(layer) for layer in range(num_layers)])
    # a sum of per-layer lower bounds over the same interval of T_H; then T_H <= capacity
    # ranges over every interval up to it
    total = np.minimum.accumulate(per_layer.sum(axis=0))
    return np.maximum(total, 0.0)


def _layer_terms_at_zero(load: np.ndarray, num_ranks: int) -> float:
    """sum_l (pigeonhole bound - mean) with nothing removed."""
    from .bounds import placement_lower_bound

    return float((placement_lower_bound(load, num_ranks) - load.sum(axis=1) / num_ranks).sum())


def _knapsack_curves(values: np.ndarray, weights: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """[S, M]: the fractional knapsack of each value row (``values`` [S, n], items in
    columns) at every capacity: items by value per unit of weight, the last one in part
    (exact; items of equal ratio in any order give the same curve)."""
    order = np.argsort(-(values / weights[None, :]), axis=1)
    zero = np.zeros((values.shape[0], 1))
    cum_w = np.concatenate([zero, np.cumsum(weights[order], axis=1)], axis=1)
    cum_v = np.concatenate([zero, np.cumsum(np.take_along_axis(values, order, axis=1), axis=1)], axis=1)
    return np.stack([np.interp(capacities, cum_w[s], cum_v[s]) for s in range(values.shape[0])])


def _bucket_knapsack(values: np.ndarray, weights: np.ndarray, capacities: np.ndarray, ratio: float,
                     per_unit: np.ndarray) -> np.ndarray:
    """[S, M] upper bounds on :func:`_knapsack_curves` (``values`` [S, n]) without sorting:
    items grouped by value per unit of weight (``per_unit`` [S, n], values / weights) in
    buckets whose edges are at most ``ratio`` apart, whole buckets best first, the one a
    capacity splits at its upper edge (and never above its value).

    A bucket is a float's exponent and its leading b mantissa bits, 2^-b <= ratio - 1: the
    bit pattern of a non-negative double, read as an integer, grows with its value, so a
    shift of it numbers the buckets without a logarithm, and a bucket's upper edge is the
    float whose pattern starts the next one."""
    per_unit = np.ascontiguousarray(per_unit, dtype=np.float64)
    rows = values.shape[0]
    top = float(per_unit.max()) if per_unit.size else 0.0
    if top <= 0:
        return np.zeros((rows, capacities.size))
    mantissa = int(min(52, max(0, np.ceil(-np.log2(ratio - 1.0)))))
    shift = 52 - mantissa
    span = int(np.ceil(np.log2(1e6))) << mantissa        # the last bucket: below about top / 1e6 (and 0)
    top_key = int(np.array(top).view(np.int64)) >> shift
    index = per_unit.view(np.int64) >> shift
    np.subtract(top_key, index, out=index)
    np.minimum(index, span, out=index)
    index += (np.arange(rows, dtype=np.int64) * (span + 1))[:, None]         # one count for all rows
    size = rows * (span + 1)
    bucket_w = np.bincount(index.ravel(), np.broadcast_to(weights, per_unit.shape).ravel(),
                           minlength=size).reshape(rows, span + 1)
    bucket_v = np.bincount(index.ravel(), np.ascontiguousarray(values, dtype=np.float64).ravel(),
                           minlength=size).reshape(rows, span + 1)
    # each bucket's upper edge: the first float of the next key (> every member's value)
    keys = np.maximum(top_key - np.arange(span + 1, dtype=np.int64) + 1, 1)
    edge = (keys << shift).view(np.float64)
    cum_w = np.concatenate([np.zeros((rows, 1)), np.cumsum(bucket_w, axis=1)], axis=1)
    cum_v = np.concatenate([np.zeros((rows, 1)), np.cumsum(bucket_v, axis=1)], axis=1)
    # whole buckets 0..j-1 below each capacity (cum_w is non-decreasing along a row), by a
    # loop over the shorter of the capacities and the rows
    if capacities.size <= rows:
        j = np.stack([np.count_nonzero(cum_w <= c, axis=1) for c in capacities], axis=1) - 1
    else:
        j = np.stack([np.searchsorted(row, capacities, side="right") for row in cum_w]) - 1
    j = np.minimum(j, span)                                                             # [rows, M]
    part = np.minimum(np.take_along_axis(bucket_v, j, axis=1),
                      (capacities[None, :] - np.take_along_axis(cum_w, j, axis=1)) * edge[j])
    return np.take_along_axis(cum_v, j, axis=1) + np.maximum(part, 0.0)


def _layer(load: np.ndarray, demand: np.ndarray, lengths: np.ndarray, num_ranks: int, capacities: np.ndarray,
           bucket_ratio: float) -> np.ndarray:
    """[M] for one layer: entry 0 at T_H = 0, entry m over T_H in [capacities[m-1], capacities[m]]."""
    num_experts = load.size
    per_rank = num_experts // num_ranks
    # one row per expert (contiguous for the per-expert knapsacks); token counts, whose
    # sums are exact in float64
    values = np.array(demand.T, dtype=np.float64, order="C")                  # [E, n]
    weights = lengths
    # exact experts: a[i,e] = c_e T_i for every sample (c_e = 0 for an expert none of them
    # visits); equal float quotients flag them, integers confirm
    per_token = values / weights[None, :]
    best_rate = per_token.max(axis=1)
    exact = per_token.min(axis=1) == best_rate
    whole = lengths.astype(np.int64)
    flagged = np.flatnonzero(exact)                  # a_ie T_0 == a_0e T_i
    counts = demand[:, flagged].astype(np.int64)
    exact[flagged] = np.all(counts * whole[0] == counts[0][None, :] * whole[:, None], axis=0)
    rate = np.where(exact, best_rate, 0.0)
    inexact = ~exact
    order = np.argsort(-load, kind="stable")                  # heaviest first
    heavy = load[order]
    lightest = order[::-1]
    # sets whose depletion the terms need: the h heaviest (h = 1..P), the q lightest
    sizes = sorted({per_rank - 1, per_rank - 2} | {h * (per_rank - 1) for h in range(2, num_ranks + 1)})
    sizes = np.array([q for q in sizes if 0 < q < num_experts], dtype=np.int64)
    top_sets = [order[:h] for h in range(1, num_ranks + 1)]
    low_sets = [lightest[:q] for q in sizes]
    sets = top_sets + low_sets
    # every sample's tokens on the inexact experts of each set, and its routed tokens, as
    # one product with a 0/1 matrix (one pass over a instead of a running sum per set)
    select = np.zeros((num_experts, len(sets) + 1))
    for column, members in enumerate(sets):
        select[members, column] = inexact[members]
    select[:, -1] = 1.0
    sums = select.T @ values                                                  # [sets + 1, n]
    columns = sums[:-1]
    routed_rate = sums[-1] / weights
    rate_min, rate_max = float(routed_rate.min()), float(routed_rate.max())
    knap = np.minimum(_knapsack_curves(columns, weights, capacities),
                      np.array([load[s[inexact[s]]].sum() for s in sets])[:, None])        # [sets, M]
    linear = np.array([rate[s].sum() for s in sets])                                     # c(S) per token
    # one-expert bounds ub_e for the experts a swap could bring in: only those whose load
    # less the most they could lose (capacity times their best rate) falls below the
    # heaviest expert of a bottom set matter
    reach = load[lightest[sizes.max() - 1]] if sizes.size else 0.0
    candidates = np.flatnonzero(inexact & (load - capacities[-1] * best_rate < reach))
    single = np.zeros((num_experts, capacities.size))
    if candidates.size:
        single[candidates] = np.minimum(
            _bucket_knapsack(values[candidates], weights, capacities, bucket_ratio, per_token[candidates]),
            load[candidates][:, None])
    outs = [np.sort(load[s])[::-1] for s in low_sets]          # heaviest out first
    others = [np.setdiff1d(np.arange(num_experts), s, assume_unique=True) for s in low_sets]
    total = load.sum()
    top_count = len(top_sets)

    def terms(at: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """[terms, len(at)]: every pigeonhole term less the mean, knapsacks at capacity
        index ``at``, linear parts at T_H = ``tokens``."""
        loss = linear[:, None] * tokens[None, :] + knap[:, at]                 # d(S) <= this
        bottom = np.zeros((num_experts + 1, tokens.size))                       # 0 <= bottom_q
        for j, q in enumerate(sizes):
            s = low_sets[j]
            base = load[s].sum() - loss[top_count + j]
            cost_in = (load[others[j]][:, None] - single[others[j]][:, at]
                       - rate[others[j]][:, None] * tokens[None, :])
            cheapest = np.sort(cost_in, axis=0)[:outs[j].size]
            bottom[q] = base + np.minimum(cheapest - outs[j][:cheapest.shape[0], None], 0.0).sum(axis=0)
        mean = (total - rate_min * tokens) / num_ranks
        out = [np.zeros(tokens.size)]                                          # the average: 0
        out.append(heavy[0] - loss[0] + bottom[per_rank - 1] - mean)           # j = 0
        for j in range(1, per_rank):
            last = j * num_ranks + 1
            if last > num_experts:
                break
            # a range up to position jP+1 loses at most d(S_{jP+1}) <= H's routed tokens
            out.append(heavy[last - j - 1:last].sum() - rate_max * tokens + bottom[per_rank - j - 1] - mean)
        for h in range(2, num_ranks + 1):
            held = (heavy[:h].sum() - loss[h - 1] + bottom[h * (per_rank - 1)]) / h
            if per_rank >= 2:
                held = np.minimum(held, heavy[h - 2] + heavy[h - 1] - loss[h - 1] + bottom[per_rank - 2])
            out.append(held - mean)
        return np.stack(out)

    result = np.empty(capacities.size)
    result[0] = terms(np.array([0]), capacities[:1]).max(axis=0)[0]
    if capacities.size > 1:
        upper = np.arange(1, capacities.size)
        low_end = terms(upper, capacities[:-1])
        high_end = terms(upper, capacities[1:])
        result[1:] = np.minimum(low_end, high_end).max(axis=0)
    # floats: sums of up to E loads rounded, a hair below
    return result - 1e-9 * max(total, 1.0)
