"""LPT placement with the per-rank cardinality E/P, vectorised over layers.

Longest processing time first: experts in decreasing load go, one at a time, to the least
loaded rank that still has a free slot (ties to the lowest rank). MODEL.md notes that it is
not optimal for three or more experts per rank ([10,9,8,7,6,2] on 2 ranks of 3: 23 vs 21).
"""

from __future__ import annotations

import numpy as np

from ..errors import integer, require
from ..solution import Placement
from ..window import Window


def _check_load(load: np.ndarray, num_ranks: int) -> tuple[np.ndarray, int]:
    """(load as [L, E], P as an int), or :class:`~rp_opt.errors.InputError` for a bad one."""
    load = np.asarray(load)
    if load.ndim == 1:
        load = load[None, :]
    require(load.ndim == 2, "load", f"must be [L, E], got shape {load.shape}")
    require(load.dtype.kind in "biuf", "load", f"must be numbers, got dtype {load.dtype}")
    require(load.shape[1] >= 1, "load", "has no experts (E = 0)")
    if load.dtype.kind in "bu":
        # signed: the bounds negate loads to sort them decreasingly (unsigned would wrap)
        load = load.astype(np.int64)
    num_ranks = integer("num_ranks", num_ranks, low=1)
    require(load.shape[1] % num_ranks == 0, "num_ranks", f"P={num_ranks} does not divide E={load.shape[1]}")
    require(bool(np.all(np.isfinite(load))) and bool(np.all(load >= 0)), "load", "must be finite and >= 0")
    return load, num_ranks


def lpt_ranks(load: np.ndarray, num_ranks: int) -> np.ndarray:
    """LPT with E/P experts per rank for every layer at once.

    Parameters
    ----------
    load
        [L, E] (or [E]) expert loads, load[l, e] = sum_i a[i,l,e].
    num_ranks
        P, an integer >= 1; must divide E.

    Returns
    -------
    numpy.ndarray
        [L, E] int64 ranks, every rank holding exactly E/P experts of every layer.
    """
    load, num_ranks = _check_load(load, num_ranks)
    num_layers, num_experts = load.shape
    per_rank = num_experts // num_ranks
    layers = np.arange(num_layers)
    # heaviest first; stable so equal loads keep expert order (deterministic)
    order = np.argsort(-load, axis=1, kind="stable")
    rank_total = np.zeros((num_layers, num_ranks), dtype=np.float64 if load.dtype.kind == "f" else np.int64)
    count = np.zeros((num_layers, num_ranks), dtype=np.int64)
    ranks = np.empty((num_layers, num_experts), dtype=np.int64)
    for k in range(num_experts):  # sorted position; every layer advances together
        expert = order[:, k]
        # full ranks are excluded by giving them an infinite load
        masked = np.where(count < per_rank, rank_total, np.inf)
        target = np.argmin(masked, axis=1)
        ranks[layers, expert] = target
        rank_total[layers, target] += load[layers, expert]
        count[layers, target] += 1
    return ranks


def lpt_placement(window: Window, num_ranks: int) -> Placement:
    """LPT placement of ``window``'s aggregate expert loads on ``num_ranks`` EP ranks."""
    return Placement(lpt_ranks(window.expert_load(), num_ranks), num_ranks)


def layer_rank_loads(load: np.ndarray, ranks: np.ndarray, num_ranks: int) -> np.ndarray:
    """[L, P]: L[l,p] = sum_{e: ranks[l,e] = p} load[l,e] (works for any assignment)."""
    load = np.atleast_2d(load)
    ranks = np.atleast_2d(ranks)
    num_layers = load.shape[0]
    flat = ranks + num_ranks * np.arange(num_layers)[:, None]
    out = np.bincount(flat.ravel(), weights=load.ravel().astype(np.float64), minlength=num_layers * num_ranks)
    out = out.reshape(num_layers, num_ranks)
    return out.astype(np.int64) if load.dtype.kind in "iu" else out
