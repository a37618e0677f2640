"""Lower bounds on the bin-packing number B of lengths T_i into bins of capacity C.

All bounds are exact integer arithmetic; each is valid for the cardinality-constrained
problem too (at most m items per bin), whose optimum is never smaller.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def _ceil_div(a, b):
    return -(-a // b)


def l1_bound(sizes: np.ndarray, capacity: int) -> int:
    """L1 = ceil(sum T / C), the area bound."""
    return int(_ceil_div(int(np.sum(sizes, dtype=np.int64)), int(capacity)))


def l2_bound(sizes: np.ndarray, capacity: int) -> int:
    """L2 of Martello and Toth (1990), maximised over every threshold alpha.

    For 0 <= alpha <= C/2, with J1 = {w > C - alpha}, J2 = {C/2 < w <= C - alpha},
    J3 = {alpha <= w <= C/2}:
    L(alpha) = |J1| + |J2| + max(0, ceil((sum J3 - (|J2| C - sum J2)) / C)).
    Vectorised over all thresholds (alpha = 0 and every distinct size <= C/2).
    """
    c = int(capacity)
    w = np.sort(np.asarray(sizes, dtype=np.int64))
    if w.size == 0:
        return 0
    prefix = np.concatenate([[0], np.cumsum(w)])
    alphas = np.unique(np.concatenate([[0], w[2 * w <= c]]))

    def count_le(x):  # number of sizes <= x
        return np.searchsorted(w, x, side="right")

    def count_lt(x):
        return np.searchsorted(w, x, side="left")

    n = w.size
    half_le = count_le(c // 2)                     # sizes <= C/2
    hi = count_le(c - alphas)                      # sizes <= C - alpha
    n1 = n - hi                                    # |J1|
    n2 = hi - half_le                              # |J2|
    s2 = prefix[hi] - prefix[half_le]              # sum J2
    lo3 = count_lt(alphas)
    s3 = prefix[half_le] - prefix[lo3]             # sum J3
    extra = np.maximum(0, _ceil_div(s3 - (n2 * c - s2), c))
    return int(np.max(n1 + n2 + extra))


def cardinality_bound(num_items: int, max_items: int | None) -> int:
    """ceil(N / m): every bin holds at most m items (0 without a limit)."""
    if max_items is None:
        return 0
    return int(_ceil_div(int(num_items), int(max_items)))


def item_count_bound(sizes: np.ndarray, capacity: int, max_items: int | None) -> int:
    """ceil(sum_i 1 / c_i), where c_i = min(m, 1 + k_i) bounds the items of any bin that
    holds item i, and k_i counts the shortest items whose sum fits beside it (C - T_i).

    A bin S holds at most min_{i in S} c_i items, so sum_{i in S} 1 / c_i <= 1: every bin
    pays at most 1. It joins ceil(N / m) and the long items that no other item fits
    beside: N = 2048, C = 32768, m = 5 with 179 such samples needs 553 bins, where
    L1 = 491 and N / m = 410. k_i counts the shortest items of all (item i among them
    perhaps), at least the count beside i: c_i is never too small. Exact (fractions).
    """
    w = np.asarray(sizes, dtype=np.int64)
    if w.size == 0:
        return 0
    prefix = np.cumsum(np.sort(w))
    beside = np.searchsorted(prefix, int(capacity) - w, side="right")     # k_i
    most = w.size if max_items is None else int(max_items)
    per_bin = np.minimum(most, 1 + beside)                               # c_i
    values, counts = np.unique(per_bin, return_counts=True)
    # the float sum is exact to far below 1e-6 (at most N terms of relative error 1e-16);
    # only a sum that close to an integer is summed again exactly (Fractions over many
    # distinct c_i took 0.7 s at N = 65536)
    approx = float(np.sum(counts / values))
    if abs(approx - round(approx)) > 1e-6:
        return int(math.ceil(approx))
    total = sum((Fraction(int(k), int(v)) for v, k in zip(values, counts)), Fraction(0))
    return int(-(-total.numerator // total.denominator))


def large_item_bound(sizes: np.ndarray, capacity: int) -> int:
    """Items larger than C/2 pairwise exclude each other: one bin each."""
    return int(np.count_nonzero(2 * np.asarray(sizes, dtype=np.int64) > capacity))
