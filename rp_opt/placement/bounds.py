"""Lower bounds on the best max rank load of a layer under the E/P cardinality.

For every layer, with loads sorted decreasingly w_1 >= ... >= w_E, k = E/P:

* average: max_p L[l,p] >= ceil(sum_e w_e / P) (integer loads) -- MODEL.md;
* pigeonhole, j = 0..k-1: the jP+1 heaviest experts occupy P ranks, so some rank holds
  j+1 of them, whose sum is at least w_{jP+1-j} + ... + w_{jP+1} (the j+1 lightest of
  them); its other k-j-1 experts weigh at least the k-j-1 lightest of the remaining
  experts w_{E-k+j+2..E}. j = 0 is "the heaviest expert plus the k-1 lightest".
* spread, h = 2..P: either two of the h heaviest experts share a rank, which then holds
  at least w_{h-1} + w_h + (the k-2 lightest), or they sit on h distinct ranks, which
  together hold h(k-1) other experts, at least the h(k-1) lightest, so the busiest of
  them holds at least (w_1 + ... + w_h + those lightest) / h. The smaller of the two
  cases is a bound. It matters when several experts each carry about a rank's share
  (experts every token visits): on the N = 4096 ling-flash-like window four experts of
  one layer each carry 1/P of the layer's load. The j = 0 bound then has only one of their
  ranks holding the 31 lightest, but all four ranks must hold 124 others. Over the 48
  layers the sum of the bounds rose by 2395593 tokens, to 3918 below LPT + local search.

All hold for every balanced placement, so their maximum is a valid bound.
"""

from __future__ import annotations

import numpy as np

from .lpt import _check_load


def placement_lower_bound(load: np.ndarray, num_ranks: int) -> np.ndarray:
    """[L] lower bound on min over balanced placements of max_p L[l,p].

    Parameters
    ----------
    load
        [L, E] (or [E]) expert loads.
    num_ranks
        P, dividing E.
    """
    load, num_ranks = _check_load(load, num_ranks)
    num_layers, num_experts = load.shape
    per_rank = num_experts // num_ranks
    integral = load.dtype.kind in "iu"
    total = load.sum(axis=1)
    average = -(-total // num_ranks) if integral else total / num_ranks
    w = -np.sort(-load, axis=1)                                   # decreasing
    prefix = np.concatenate([np.zeros((num_layers, 1), dtype=w.dtype), np.cumsum(w, axis=1)], axis=1)
    # sums of the m lightest, from the light end (no difference of large prefix sums,
    # which rounds float loads upwards next to a huge one)
    lightest = np.concatenate([np.zeros((num_layers, 1), dtype=w.dtype), np.cumsum(w[:, ::-1], axis=1)], axis=1)
    best = average
    for j in range(per_rank):
        last = j * num_ranks + 1                                  # 1-based index of w_{jP+1}
        if last > num_experts:
            break
        group = w[:, last - j - 1:last].sum(axis=1)                # w_{jP+1-j} .. w_{jP+1}
        rest = per_rank - j - 1                                   # k-j-1 lightest of the others
        light = lightest[:, rest]
        # the lightest experts must not overlap the group: E - rest >= last holds since
        # last = jP+1 <= (k-1)P+1 and E - rest = kP - k + j + 1 >= jP + 1 for P >= 1
        best = np.maximum(best, group + light)
    for h in range(2, num_ranks + 1):
        # h distinct ranks: the h heaviest plus at least the h(k-1) lightest others (which
        # do not overlap them: E - h(k-1) >= h for h <= P), averaged over the h ranks
        held = prefix[:, h] + lightest[:, h * (per_rank - 1)]
        spread = -(-held // h) if integral else held / h
        if per_rank >= 2:
            # two of them on one rank: the two lightest of the h and the k-2 lightest others
            spread = np.minimum(spread, w[:, h - 2] + w[:, h - 1] + lightest[:, per_rank - 2])
        best = np.maximum(best, spread)
    if not integral:
        # float sums of up to E terms round by at most about E * eps / 2 relative: a margin
        # of 8 times that keeps the bound below the optimum (e.g. [2**53, 3, ..., 3], 8
        # experts on 2 ranks: optimum 2**53 + 9, the sums alone gave 2**53 + 12)
        best = best * (1.0 - 4 * num_experts * float(np.finfo(w.dtype).eps))
    return best
