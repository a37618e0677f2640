"""Placement refined for a fixed layout: expert swaps that lower the blocks' expert peaks.

LPT and its local search balance the *aggregate* load L[l,p] of every layer (the
placement objective of MODEL.md). The step cost does not see L: it sees, for every
(row, shard) block b, max_p W[b,l,p]. When samples that share a block are routed alike
(responses of one prompt, prompts of one topic) the hot experts of a block are not the
hot experts of the window, and a placement that spreads each block's own hot experts
beats the aggregate-balanced one. Once the packing has fixed the blocks, this module
swaps experts between ranks to lower sum_b w_b sum_l max_p W[b,l,p] (w = 1: the total
expert cost, level 2 of ``shard`` and ``sync``); the caller re-packs under the new
placement and keeps the plan only when its exact objective is lower
(:func:`rp_opt.packing.heuristic.heuristic`, option ``refine``).

A swap of experts e1 (rank p1) and e2 (rank p2) of layer l changes two columns of that
layer's block loads: W[:,p1] += d, W[:,p2] -= d with d = a[:,e2] - a[:,e1] (a: block
demand of the layer's experts); the new per-block maximum is max(W1, W2, the largest of
the other ranks), which the top-3 ranks of every block give without touching the other
P - 2 columns. The objective is separable by layer, so one sweep evaluates a batch of
candidates for every layer at once ([L, B, C] arrays) and keeps each layer's best.
Aggregate balance is not a constraint: every placement keeps E/P experts per rank, and
the analytic lower bounds that hold for every placement stay valid.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from ..cost import expert_rank_sums
from ..solution import Placement

log = logging.getLogger("rp_opt")

# Seconds per (layer, block, candidate) of a sweep, measured on the 2-core benchmark machine
# (ling-flash-like N = 16384: 48 layers x 488 blocks x 256 candidates in 1.56 s), rounded up
SECONDS_PER_SWAP_BLOCK = 1.5e-7


@dataclass(frozen=True)
class RefineStats:
    """What a refinement did: swaps kept, candidates evaluated, sweeps over the layers,
    energy before and after, seconds."""

    swaps: int
    candidates: int
    sweeps: int
    energy_before: float
    energy_after: float
    seconds: float


def _top3(loads: np.ndarray):
    """Values and ranks of the 3 largest entries of every row of ``loads`` [B, P]."""
    k = min(3, loads.shape[1])
    idx = np.argpartition(-loads, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(loads, idx, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    idx = np.take_along_axis(idx, order, axis=1)
    vals = np.take_along_axis(vals, order, axis=1)
    if k < 3:  # P < 3: pad with a rank that never matches and a value that never wins
        pad = 3 - k
        idx = np.concatenate([idx, np.full((loads.shape[0], pad), -1)], axis=1)
        vals = np.concatenate([vals, np.full((loads.shape[0], pad), np.iinfo(np.int64).min // 4)], axis=1)
    return vals, idx


def refine_placement(placement: Placement, block_demand: np.ndarray, *, weights: np.ndarray | None = None,
                     time_limit: float = 1.0, candidates: int = 256, seed: int = 0,
                     max_sweeps: int | None = None, per_layer: int = 8) -> tuple[Placement, RefineStats]:
    """Swap experts between ranks while sum_b w_b sum_l max_p W[b,l,p] falls.

    The objective is separable by layer, so every sweep evaluates a batch of candidate
    swaps of every layer at once ([L, B, C] arrays) and keeps the best improving swap of
    each layer.

    Parameters
    ----------
    placement
        The placement to start from (not modified).
    block_demand
        [B, L, E] tokens every (row, shard) block b = r G + g sends to every expert
        (:func:`rp_opt.cost.block_sums` of the demand over the layout's blocks).
    weights
        [B] non-negative weight of every block (default 1: the total expert cost sum X,
        level 2 of ``shard`` and ``sync`` in token units).
    time_limit
        Seconds; the best placement so far is returned when it runs out.
    candidates
        Candidate swaps drawn per layer per sweep; the first expert is drawn from the
        layer's ranks in proportion to the weight of the blocks where each is the busiest,
        the second uniformly from the other ranks.
    seed
        Seed of the candidate draws (deterministic for a seed when ``max_sweeps`` stops it).
    max_sweeps
        Stop after this many sweeps (default: the time limit, or 3 sweeps in a row with no
        kept swap).
    per_layer
        Swaps kept per layer per sweep at most: the best candidate, then the next ones (on
        other experts) whose gain, re-scored after the swaps already made, is still positive.

    Returns
    -------
    (Placement, RefineStats)
        ``energy_*`` are sum_b w_b sum_l max_p W (tokens).
    """
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    ranks = placement.ranks.copy()
    num_ranks = placement.num_ranks
    num_blocks, num_layers, num_experts = block_demand.shape
    w_b = np.ones(num_blocks) if weights is None else np.asarray(weights, dtype=np.float64)
    demand = np.ascontiguousarray(block_demand.transpose(1, 0, 2), dtype=np.int64)   # [L, B, E]
    # W[l, b, p] = sum_{e : pi_l(e) = p} a[b, l, e]
    by_rank = expert_rank_sums(np.asarray(block_demand, dtype=np.int64), placement)   # [B, L, P]
    loads = np.ascontiguousarray(by_rank.transpose(1, 0, 2))                           # [L, B, P]
    before = float((loads.max(axis=2) * w_b).sum())
    swaps = evaluated = sweeps = idle = 0
    deadline = t0 + time_limit
    if np.isfinite(time_limit):
        # a sweep scores L x B x candidates swaps: no more candidates than fit half the time
        fit = int(0.5 * time_limit / (SECONDS_PER_SWAP_BLOCK * num_layers * num_blocks))
        candidates = max(1, min(candidates, fit))
    last = 0.0
    while time.perf_counter() + last < deadline and (max_sweeps is None or sweeps < max_sweeps) and idle < 3:
        began = time.perf_counter()
        # first expert: from a rank that is the busiest of heavily weighted blocks
        busiest = np.argmax(loads, axis=2)                                           # [L, B]
        heat = np.zeros((num_layers, num_ranks))
        np.add.at(heat, (np.repeat(np.arange(num_layers), num_blocks), busiest.ravel()), np.tile(w_b, num_layers))
        prob = np.take_along_axis(heat, ranks, axis=1) + 1e-9                        # [L, E]
        cum = np.cumsum(prob, axis=1)
        draw = rng.random((num_layers, candidates)) * cum[:, -1:]
        e1 = np.minimum(np.array([np.searchsorted(cum[l], draw[l]) for l in range(num_layers)]), num_experts - 1)
        e2 = rng.integers(0, num_experts, size=(num_layers, candidates))
        p1 = np.take_along_axis(ranks, e1, axis=1)
        p2 = np.take_along_axis(ranks, e2, axis=1)
        gain = _swap_gains(loads, demand, e1, e2, p1, p2, w_b)                       # [L, C]
        gain[p1 == p2] = -np.inf
        evaluated += num_layers * candidates
        kept = 0
        order = np.argsort(-gain, axis=1)[:, :per_layer]
        for l in np.flatnonzero(gain[np.arange(num_layers), order[:, 0]] > 1e-9):
            used: set = set()
            for j, c in enumerate(order[l]):
                if gain[l, c] <= 1e-9:
                    break
                x1, x2 = int(e1[l, c]), int(e2[l, c])
                if x1 in used or x2 in used:
                    continue
                q1, q2 = int(ranks[l, x1]), int(ranks[l, x2])
                d = demand[l, :, x2] - demand[l, :, x1]
                if j:
                    # later candidates were scored before the swaps just made: re-score exactly
                    new = loads[l].copy()
                    new[:, q1] += d
                    new[:, q2] -= d
                    if float(((loads[l].max(axis=1) - new.max(axis=1)) * w_b).sum()) <= 1e-9:
                        continue
                loads[l, :, q1] += d
                loads[l, :, q2] -= d
                ranks[l, x1], ranks[l, x2] = q2, q1
                used.update((x1, x2))
                kept += 1
        swaps += kept
        sweeps += 1
        idle = 0 if kept else idle + 1
        last = time.perf_counter() - began if np.isfinite(time_limit) else 0.0  # the next sweep must fit
    after = float((loads.max(axis=2) * w_b).sum())
    log.debug("placement refine: %d swaps in %d sweeps, %.6g -> %.6g", swaps, sweeps, before, after)
    return Placement(ranks, num_ranks), RefineStats(swaps, evaluated, sweeps, before, after, time.perf_counter() - t0)


def _swap_gains(loads, demand, e1, e2, p1, p2, w_b) -> np.ndarray:
    """[L, C] decrease of sum_b w_b max_p W[l, b, p] for every candidate swap of every layer."""
    num_layers = loads.shape[0]
    vals, idx = _top3(loads.reshape(-1, loads.shape[2]))
    vals = vals.reshape(num_layers, -1, 3)
    idx = idx.reshape(num_layers, -1, 3)
    lay = np.arange(num_layers)[:, None, None]
    blocks = np.arange(loads.shape[1])[None, :, None]
    d = demand[lay, blocks, e2[:, None, :]] - demand[lay, blocks, e1[:, None, :]]   # [L, B, C]
    w1 = loads[lay, blocks, p1[:, None, :]] + d
    w2 = loads[lay, blocks, p2[:, None, :]] - d
    other = np.broadcast_to(vals[:, :, 2:3], d.shape)
    for j in (1, 0):
        hit = (idx[:, :, j:j + 1] != p1[:, None, :]) & (idx[:, :, j:j + 1] != p2[:, None, :])
        other = np.where(hit, vals[:, :, j:j + 1], other)
    new_peak = np.maximum(np.maximum(w1, w2), other)
    return ((vals[:, :, 0:1] - new_peak) * w_b[None, :, None]).sum(axis=1)
