"""Upper bounds: first-fit and best-fit decreasing, with an optional per-bin item limit m,
and the expansion of a packing into exactly K non-empty bins (MODEL.md, "Minimum row count").
"""

from __future__ import annotations

import bisect
import heapq
import time

import numpy as np


def first_fit_decreasing(sizes: np.ndarray, capacity: int, max_items: int | None = None) -> np.ndarray:
    """FFD: items by non-increasing size, each into the first bin with room (and < m items).

    Returns ``bin_of[N]`` with bins numbered 0..B-1 in opening order.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    n = sizes.size
    order = np.argsort(-sizes, kind="stable")
    residual = np.full(n, -1, dtype=np.int64)   # -1 marks a bin not opened yet
    count = np.zeros(n, dtype=np.int64)
    limit = n if max_items is None else int(max_items)
    bin_of = np.empty(n, dtype=np.int64)
    opened = 0
    for i in order.tolist():
        w = sizes[i]
        fits = (residual[:opened] >= w) & (count[:opened] < limit)
        b = int(np.argmax(fits)) if opened else 0
        if not opened or not fits[b]:
            b = opened
            opened += 1
            residual[b] = capacity
        residual[b] -= w
        count[b] += 1
        bin_of[i] = b
    return bin_of


def best_fit_decreasing(sizes: np.ndarray, capacity: int, max_items: int | None = None) -> np.ndarray:
    """BFD: items by non-increasing size, each into the feasible bin with least room left.

    Bins are kept in a list sorted by residual capacity (bisect), O(N log N) searches;
    bins that reached m items are dropped from the list.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    n = sizes.size
    order = np.argsort(-sizes, kind="stable")
    limit = n if max_items is None else int(max_items)
    keys: list[tuple[int, int]] = []          # (residual, bin) sorted
    count: list[int] = []
    bin_of = np.empty(n, dtype=np.int64)
    for i in order.tolist():
        w = int(sizes[i])
        k = bisect.bisect_left(keys, (w, -1))
        if k < len(keys):
            res, b = keys.pop(k)
            res -= w
        else:
            b = len(count)
            count.append(0)
            res = int(capacity) - w
        count[b] += 1
        bin_of[i] = b
        if count[b] < limit:
            bisect.insort(keys, (res, b))
    return bin_of


def worst_fit_decreasing(sizes: np.ndarray, capacity: int, num_bins: int,
                         max_items: int | None = None) -> np.ndarray | None:
    """WFD into ``num_bins`` bins: items by non-increasing size, each into the least-loaded
    bin that has fewer than m items (None when an item fits no bin).

    Where m binds, FFD and BFD fill their first bins with m long items and strand the short
    ones in bins of their own (N = 4096, C = 32768, m = 6: FFD 1139 bins, WFD 1024 with
    L1 = 973); spreading the items over a fixed bin count keeps every bin below m.
    A heap of (load, bin), O(N log K): the least-loaded bin is the only candidate, since
    a longer load has less room, and a bin that reached m items leaves the heap.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    k = int(num_bins)
    if k <= 0:
        return None
    limit = sizes.size if max_items is None else int(max_items)
    heap = [(0, b) for b in range(k)]              # already a heap: equal loads, bins in order
    count = [0] * k
    bin_of = np.empty(sizes.size, dtype=np.int64)
    for i in np.argsort(-sizes, kind="stable").tolist():
        if not heap:
            return None                            # every bin holds m items
        load, b = heap[0]
        w = int(sizes[i])
        if load + w > capacity:
            return None
        bin_of[i] = b
        count[b] += 1
        if count[b] < limit:
            heapq.heapreplace(heap, (load + w, b))
        else:
            heapq.heappop(heap)
    return bin_of


def expand_bins(bin_of: np.ndarray, num_bins: int) -> np.ndarray:
    """Split a packing into exactly ``num_bins`` non-empty bins.

    Moves single items out of bins holding two or more into the empty bins, which keeps
    capacity and the item limit. Needs used bins <= num_bins <= N.
    """
    bin_of = np.asarray(bin_of, dtype=np.int64)
    used, relabel = np.unique(bin_of, return_inverse=True)
    bin_of = relabel.astype(np.int64)                 # bins 0..U-1
    missing = num_bins - used.size
    if missing < 0 or num_bins > bin_of.size:
        raise ValueError(f"cannot expand {used.size} bins into {num_bins} non-empty bins of {bin_of.size} items")
    if missing == 0:
        return bin_of
    order = np.argsort(bin_of, kind="stable")
    first = np.ones(order.size, dtype=bool)
    first[1:] = bin_of[order[1:]] != bin_of[order[:-1]]   # each bin keeps its first item
    movable = order[~first][:missing]
    out = bin_of.copy()
    out[movable] = used.size + np.arange(missing)
    return out


def packing_violation(sizes: np.ndarray, bin_of: np.ndarray, capacity: int, max_items: int | None,
                      num_bins: int | None = None) -> str | None:
    """None when ``bin_of`` is a valid packing (capacity, item limit, and when ``num_bins`` is
    given: bins 0..num_bins-1 all non-empty); else the first violation in words."""
    sizes = np.asarray(sizes, dtype=np.int64)
    bin_of = np.asarray(bin_of, dtype=np.int64)
    if bin_of.shape != sizes.shape or (bin_of.size and bin_of.min() < 0):
        return "not every item has a bin"
    k = int(bin_of.max()) + 1 if num_bins is None else int(num_bins)
    if bin_of.size and bin_of.max() >= k:
        return f"bin {int(bin_of.max())} outside [0, {k})"
    load = np.zeros(k, dtype=np.int64)
    np.add.at(load, bin_of, sizes)
    count = np.bincount(bin_of, minlength=k)
    if np.any(load > capacity):
        b = int(np.argmax(load > capacity))
        return f"bin {b} holds {int(load[b])} > C={capacity}"
    if max_items is not None and np.any(count > max_items):
        b = int(np.argmax(count > max_items))
        return f"bin {b} holds {int(count[b])} items > m={max_items}"
    if num_bins is not None and np.any(count == 0):
        return f"bin {int(np.argmax(count == 0))} is empty"
    return None


def minimum_bin_slack(sizes: np.ndarray, capacity: int, max_items: int | None = None,
                      deadline: float | None = None) -> np.ndarray | None:
    """MBS' (Gupta and Ho, 1999, largest item fixed): open a bin with the largest item left,
    then fill it with the subset of the remaining items that leaves the least slack.

    The subset is found by a 0/1 subset-sum DP over the remaining items (numpy boolean
    shifts, the first item to reach each sum recorded for backtracking). Fills exact bins
    greedily, which FFD cannot do on triplet instances. Returns None when ``max_items`` is
    set (the DP ignores counts) or when ``time.perf_counter()`` passes ``deadline``.
    """
    if max_items is not None:
        return None
    sizes = np.asarray(sizes, dtype=np.int64)
    c = int(capacity)
    left = list(np.argsort(-sizes, kind="stable").tolist())   # remaining items, largest first
    bin_of = np.full(sizes.size, -1, dtype=np.int64)
    b = 0
    while left:
        if deadline is not None and time.perf_counter() > deadline:
            return None
        first = left.pop(0)
        bin_of[first] = b
        room = c - int(sizes[first])
        if room > 0 and left:
            pred = np.full(room + 1, -1, dtype=np.int64)      # item that first reached each sum
            reach = np.zeros(room + 1, dtype=bool)
            reach[0] = True
            for k, i in enumerate(left):
                w = int(sizes[i])
                if w > room:
                    continue
                new = reach[: room + 1 - w] & ~reach[w:]
                if new.any():
                    hit = np.flatnonzero(new) + w
                    reach[hit] = True
                    pred[hit] = k
                    if reach[room]:
                        break
            s = int(np.flatnonzero(reach)[-1])
            taken = []
            while s > 0:
                k = int(pred[s])
                taken.append(k)
                s -= int(sizes[left[k]])
            for k in sorted(taken, reverse=True):
                bin_of[left.pop(k)] = b
        b += 1
    return bin_of
