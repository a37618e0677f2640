"""Bin-oriented large-neighbourhood search: empty one bin at a time.

Given a packing with U bins, dissolve a few bins (the least-filled ones plus random others)
and ask the CP-SAT decision model whether their items fit in one bin fewer. A success lowers
U by one; the sub-problems are small (tens of items), so each try takes milliseconds. This
closes triplet instances (Falkenauer T) where greedy fills leave the last bins stuck.
"""

from __future__ import annotations

import time

import numpy as np

from . import cpsat


def reduce_bins(lengths: np.ndarray, capacity: int, max_items: int | None, bin_of: np.ndarray,
                target: int, deadline: float, seed: int = 0, size: int = 10, stats: dict | None = None) -> np.ndarray:
    """Try to bring ``bin_of`` down to ``target`` bins before ``deadline``; returns the best
    packing found (possibly the input). The result is unverified: the caller checks it."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, dtype=np.int64)
    _, bin_of = np.unique(bin_of, return_inverse=True)
    bin_of = bin_of.astype(np.int64)
    tries = 0
    stats = {} if stats is None else stats
    while time.perf_counter() < deadline:
        used = int(bin_of.max()) + 1
        if used <= target or used < 2:
            break
        load = np.bincount(bin_of, weights=lengths, minlength=used)
        k = min(used, size + tries % 7)                 # vary the neighbourhood size
        slack_first = np.argsort(load + rng.random(used) * 0.5 * capacity / max(k, 1), kind="stable")
        low = slack_first[: max(2, k // 3)]             # the emptiest bins ...
        rest = np.setdiff1d(np.arange(used), low)
        pick = np.concatenate([low, rng.choice(rest, size=min(k - low.size, rest.size), replace=False)])
        members = np.flatnonzero(np.isin(bin_of, pick))
        left = deadline - time.perf_counter()
        if left <= 0:
            break                                       # no floor: a try would end past the deadline
        res = cpsat.fits_in_bins(lengths[members], capacity, pick.size - 1, max_items,
                                 time_limit=min(0.2, left), workers=1)
        tries += 1
        stats["tries"] = tries
        stats[res.status] = stats.get(res.status, 0) + 1
        if res.status == "feasible":
            new = bin_of.copy()
            new[members] = pick[np.minimum(res.bin_of, pick.size - 1)]
            _, new = np.unique(new, return_inverse=True)
            bin_of = new.astype(np.int64)
    return bin_of
