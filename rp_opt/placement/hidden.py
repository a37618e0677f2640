"""Eq. 4 for what is left when some samples leave: the placement bound of a remainder.

For ``sync``, the rows that hold a full-length sample may hide the expert excess of their
blocks without one below the row's maximum (:func:`rp_opt.cost.row_excess_bound`); the
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
                  capacities: np.ndarray, bucket_ratio: float = 1.1, samples: np.ndarray | None = None) -> np.ndarray:
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
        on the expert in geometric buckets of this ratio, each taken at its upper edge: an
        upper bound on the exact knapsack, within that ratio on the bucket it splits.
    samples
        Indices (or a boolean mask) of the samples that may leave, into ``demand`` and
        ``lengths``; None: all of them.

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
    per_layer = np.zeros((num_layers, capacities.size))
    for layer in range(num_layers):
        per_layer[layer] = _layer(load[layer].astype(np.float64), demand[chosen, layer, :], lengths, num_ranks,
                                  capacities, bucket_ratio)
    # a sum of per-layer lower bounds over the same interval of T_H; then T_H <= capacity
    # ranges over every interval up to it
    total = np.minimum.accumulate(per_layer.sum(axis=0))
    return np.maximum(total, 0.0)


def _layer_terms_at_zero(load: np.ndarray, num_ranks: int) -> float:
    """sum_l (pigeonhole bound - mean) with nothing removed."""
    from .bounds import placement_lower_bound

    return float((placement_lower_bound(load, num_ranks) - load.sum(axis=1) / num_ranks).sum())


def _knapsack_curves(values: np.ndarray, weights: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """[S, M]: the fractional knapsack of each value column (``values`` [n, S]) at every
    capacity: items by value per unit of weight, the last one in part (exact)."""
    ratio = values / weights[:, None]
    order = np.argsort(-ratio, axis=0, kind="stable")
    zero = np.zeros((1, values.shape[1]))
    cum_w = np.concatenate([zero, np.cumsum(weights[order], axis=0)])
    cum_v = np.concatenate([zero, np.cumsum(np.take_along_axis(values, order, axis=0), axis=0)])
    return np.stack([np.interp(capacities, cum_w[:, s], cum_v[:, s]) for s in range(values.shape[1])])


def _bucket_knapsack(values: np.ndarray, weights: np.ndarray, capacities: np.ndarray, ratio: float) -> np.ndarray:
    """[S, M] upper bounds on :func:`_knapsack_curves` without sorting: items grouped by value
    per unit of weight in geometric buckets (factor ``ratio``), whole buckets best first,
    the one a capacity splits at its upper edge (and never above its value)."""
    per_unit = values / weights[:, None]
    top = float(per_unit.max()) if per_unit.size else 0.0
    columns = values.shape[1]
    if top <= 0:
        return np.zeros((columns, capacities.size))
    step = np.log(ratio)
    span = int(np.ceil(np.log(1e6) / step))                  # the last bucket: below top / 1e6 (and 0)
    with np.errstate(divide="ignore"):
        index = np.minimum(np.log(top / per_unit) / step, span).astype(np.int64)
    flat = (index + np.arange(columns)[None, :] * (span + 1)).ravel()
    size = columns * (span + 1)
    bucket_w = np.bincount(flat, np.repeat(weights, columns), minlength=size).reshape(columns, span + 1)
    bucket_v = np.bincount(flat, values.ravel(), minlength=size).reshape(columns, span + 1)
    edge = top / np.exp(step * np.arange(span + 1))            # each bucket's highest value per unit
    cum_w = np.concatenate([np.zeros((columns, 1)), np.cumsum(bucket_w, axis=1)], axis=1)
    cum_v = np.concatenate([np.zeros((columns, 1)), np.cumsum(bucket_v, axis=1)], axis=1)
    out = np.empty((columns, capacities.size))
    for s in range(columns):
        j = np.minimum(np.searchsorted(cum_w[s], capacities, side="right") - 1, span)   # whole buckets 0..j-1
        part = np.minimum(bucket_v[s, j], (capacities - cum_w[s, j]) * edge[j])
        out[s] = cum_v[s, j] + np.maximum(part, 0.0)
    return out


def _layer(load: np.ndarray, demand: np.ndarray, lengths: np.ndarray, num_ranks: int, capacities: np.ndarray,
           bucket_ratio: float) -> np.ndarray:
    """[M] for one layer: entry 0 at T_H = 0, entry m over T_H in [capacities[m-1], capacities[m]]."""
    num_experts = load.size
    per_rank = num_experts // num_ranks
    demand = demand.astype(np.int64)
    weights = lengths
    routed_rate = demand.sum(axis=1) / weights
    rate_min, rate_max = float(routed_rate.min()), float(routed_rate.max())
    # exact experts: a[i,e] = c_e T_i for every sample (c_e = 0 for an expert none of them
    # visits); equal float quotients flag them, integers confirm
    per_token = demand / weights[:, None]
    best_rate = per_token.max(axis=0)
    exact = per_token.min(axis=0) == best_rate
    whole = lengths.astype(np.int64)
    flagged = np.flatnonzero(exact)                  # a_ie T_0 == a_0e T_i
    exact[flagged] = np.all(demand[:, flagged] * whole[0] == demand[0, flagged][None, :] * whole[:, None], axis=0)
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
    # the sets are prefixes of the two orders: their samples' tokens by cumulative sums
    widest = int(sizes.max()) if sizes.size else 0
    heavy_part = np.cumsum(demand[:, order[:num_ranks]] * inexact[order[:num_ranks]], axis=1)
    light_part = np.cumsum(demand[:, lightest[:widest]] * inexact[lightest[:widest]], axis=1)
    columns = np.concatenate([heavy_part, light_part[:, sizes - 1]], axis=1).astype(np.float64)
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
            _bucket_knapsack(demand[:, candidates].astype(np.float64), weights, capacities, bucket_ratio),
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
