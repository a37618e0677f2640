"""Swap local search for the aggregate placement objective, vectorised over layers.

Move: exchange an expert a on the most loaded rank p with an expert b on another rank q.
With d = load_a - load_b the pair becomes (L_p - d, L_q + d); it improves the pair's
maximum iff 0 < d < L_p - L_q, and then the sum of squared rank loads falls by
2 d (L_p - L_q - d) > 0, so the search terminates. Each sweep takes, in every layer still
improving, the swap that lowers the pair maximum the most (best improvement). The max rank
load never increases, so the result is never worse than the start (LPT).
"""

from __future__ import annotations

import numpy as np

from ..errors import integer, require
from ..solution import Placement, checked_ranks
from ..window import Window
from .lpt import _check_load, layer_rank_loads, lpt_ranks


def _swap(load, ranks, totals, layer, a, b) -> None:
    """Swap experts a and b (one pair per entry of ``layer``) between their ranks, in place,
    keeping the rank totals L[l, p] up to date."""
    p, q = ranks[layer, a], ranks[layer, b]
    delta = load[layer, a] - load[layer, b]
    ranks[layer, a], ranks[layer, b] = q, p
    totals[layer, p] -= delta
    totals[layer, q] += delta


def local_search_ranks(load: np.ndarray, ranks: np.ndarray, num_ranks: int,
                       max_sweeps: int | None = None, moves: str = "max") -> np.ndarray:
    """Improve ``ranks`` by best-improvement swaps out of the most loaded rank.

    Parameters
    ----------
    load
        [L, E] expert loads.
    ranks
        [L, E] start assignment: integer ranks in [0, P), E/P experts on every rank of
        every layer; not modified.
    num_ranks
        P.
    max_sweeps
        Stop after this many sweeps, an integer >= 0 (None: until no layer improves).
    moves
        ``"max"``: swaps out of the most loaded rank (O(E^2/P) per sweep and layer; the
        fast default). ``"all"``: swaps between any two ranks that lower the sum of squared
        rank loads (O(E^2) per sweep); its local optima are also local optima of "max"
        and are usually closer to the bound (used for the exact solver's warm start).

    Returns
    -------
    numpy.ndarray
        [L, E] int64 ranks, balanced, with max_p L[l,p] <= that of the start in every layer.

    Raises
    ------
    InputError
        One line naming the argument: a start of another shape, with non-integer ranks,
        ranks outside [0, P) or not E/P experts on every rank (the swaps keep the start's
        rank sizes: an unbalanced start came back unbalanced), a bad ``max_sweeps``.
    """
    load, num_ranks = _check_load(load, num_ranks)
    ranks = checked_ranks(np.atleast_2d(np.asarray(ranks)), num_ranks, "ranks", load.shape)
    num_layers, num_experts = load.shape
    per_rank = num_experts // num_ranks
    max_sweeps = integer("max_sweeps", max_sweeps, low=0, none=True, hint="None: until no layer improves")
    require(moves in ("max", "all"), "moves", f"must be 'max' or 'all', got {moves!r}")
    if num_ranks == 1 or num_experts == 0:
        return ranks
    if moves == "all":
        return _all_pairs(load, ranks, num_ranks, max_sweeps)
    totals = layer_rank_loads(load, ranks, num_ranks)
    active = np.arange(num_layers)
    sweeps = 0
    while active.size and (max_sweeps is None or sweeps < max_sweeps):
        sweeps += 1
        w = load[active]                                   # [A, E]
        rk = ranks[active]                                 # [A, E]
        tot = totals[active]                               # [A, P]
        rows = np.arange(active.size)
        p_max = np.argmax(tot, axis=1)                     # [A]
        top = tot[rows, p_max]                             # L_p
        # experts on the max rank: a stable sort puts them first
        on_max = rk == p_max[:, None]
        a_idx = np.argsort(~on_max, axis=1, kind="stable")[:, :per_rank]   # [A, k]
        w_a = np.take_along_axis(w, a_idx, axis=1)         # [A, k]
        gap = top[:, None] - tot[rows[:, None], rk]        # [A, E]: L_p - L_q(b); 0 on p
        d = w_a[:, :, None] - w[:, None, :]                # [A, k, E]
        # reduction of the pair maximum: L_p - max(L_p - d, L_q + d) = min(d, gap - d)
        gain = np.minimum(d, gap[:, None, :] - d)
        gain = np.where(d > 0, gain, 0)
        flat = gain.reshape(active.size, -1)
        best = np.argmax(flat, axis=1)
        best_gain = flat[rows, best]
        move = best_gain > 0
        if not move.any():
            break
        rows, best = rows[move], best[move]
        layer = active[move]
        _swap(load, ranks, totals, layer, a_idx[rows, best // num_experts], best % num_experts)
        active = layer
    return ranks


def _all_pairs(load, ranks, num_ranks, max_sweeps):
    """Best-improvement swaps between any two ranks on sum_p L[p]^2 (ranks modified in place).

    Swapping a (rank p) with b (rank q), d = load_a - load_b, changes sum_p L_p^2 by
    -2 d (L_p - L_q - d): a descent move iff 0 < d < L_p - L_q.
    """
    totals = layer_rank_loads(load, ranks, num_ranks)
    active = np.arange(load.shape[0])
    num_experts = load.shape[1]
    sweeps = 0
    while active.size and (max_sweeps is None or sweeps < max_sweeps):
        sweeps += 1
        w = load[active].astype(np.float64)
        rk = ranks[active]
        lr = np.take_along_axis(totals[active], rk, axis=1).astype(np.float64)   # L of each expert's rank
        d = w[:, :, None] - w[:, None, :]
        gap = lr[:, :, None] - lr[:, None, :]
        gain = np.where((d > 0) & (d < gap), d * (gap - d), 0.0)
        flat = gain.reshape(active.size, -1)
        best = np.argmax(flat, axis=1)
        rows = np.arange(active.size)
        move = flat[rows, best] > 0
        if not move.any():
            break
        layer, best = active[move], best[move]
        _swap(load, ranks, totals, layer, best // num_experts, best % num_experts)
        active = layer
    return ranks


def lpt_local_search_ranks(load: np.ndarray, num_ranks: int, max_sweeps: int | None = None) -> np.ndarray:
    """LPT followed by :func:`local_search_ranks` ([L, E] -> [L, E] ranks)."""
    return local_search_ranks(load, lpt_ranks(load, num_ranks), num_ranks, max_sweeps)


def local_search_placement(window: Window, num_ranks: int, start: Placement | None = None,
                           max_sweeps: int | None = None) -> Placement:
    """LPT (or ``start``) improved by swap local search, for every layer of ``window``."""
    load = window.expert_load()
    ranks = lpt_ranks(load, num_ranks) if start is None else start.ranks
    return Placement(local_search_ranks(load, ranks, num_ranks, max_sweeps), num_ranks)
