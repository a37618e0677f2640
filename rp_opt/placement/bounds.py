"""Lower bounds on the best max rank load of a layer under the E/P cardinality.

For every layer, with loads sorted decreasingly w_1 >= ... >= w_E, k = E/P:

* average: max_p L[l,p] >= ceil(sum_e w_e / P) (integer loads) -- MODEL.md;
* pigeonhole, j = 0..k-1: the jP+1 heaviest experts occupy P ranks, so some rank holds
  j+1 of them, whose sum is at least w_{jP+1-j} + ... + w_{jP+1} (the j+1 lightest of
  them); its other k-j-1 experts weigh at least the k-j-1 lightest of the remaining
  experts w_{E-k+j+2..E}. j = 0 is "the heaviest expert plus the k-1 lightest".

Both hold for every balanced placement, so their maximum is a valid bound.
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
    best = average
    for j in range(per_rank):
        last = j * num_ranks + 1                                  # 1-based index of w_{jP+1}
        if last > num_experts:
            break
        group = prefix[:, last] - prefix[:, last - j - 1]         # w_{jP+1-j} .. w_{jP+1}
        rest = per_rank - j - 1                                   # k-j-1 lightest of the others
        light = prefix[:, num_experts] - prefix[:, num_experts - rest] if rest > 0 else 0
        # the lightest experts must not overlap the group: E - rest >= last holds since
        # last = jP+1 <= (k-1)P+1 and E - rest = kP - k + j + 1 >= jP + 1 for P >= 1
        best = np.maximum(best, group + light)
    return best
