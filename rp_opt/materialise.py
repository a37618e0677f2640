"""Materialisation plan: how a trainer moves from the current placement to a new one.

1. Relabel the new placement's ranks within each layer so that as many experts as possible
   stay where they are (MODEL.md: rank labels inside a shard are symmetric). That is a
   maximum-weight assignment between new and current labels on the P x P overlap matrix
   (:func:`scipy.optimize.linear_sum_assignment`). Relabelling changes no cost.
2. List the transfers (layer, expert, from rank, to rank, bytes).
3. Group them into rounds in which every rank sends at most one and receives at most one
   expert: a proper edge colouring of the bipartite multigraph senders -> receivers. By
   Konig's edge-colouring theorem max-degree colours suffice. Within a layer every rank
   sends as many experts as it receives (E/P per rank before and after), so padding each
   rank p with Delta - deg(p) dummy edges p -> p makes the multigraph Delta-regular; a
   regular bipartite multigraph has a perfect matching (Hall), so peeling Delta perfect
   matchings (:func:`scipy.sparse.csgraph.maximum_bipartite_matching`) gives exactly Delta
   rounds.

The same plan runs in every EDP shard at once (every shard holds the same placement).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching

from .errors import InputError, integer, require, shown
from .solution import Placement


class Transfer(NamedTuple):
    """Copy expert ``expert`` of layer ``layer`` from rank ``src`` to rank ``dst``."""

    layer: int
    expert: int
    src: int
    dst: int
    bytes: int


@dataclass(frozen=True)
class MigrationPlan:
    """Everything a trainer needs to materialise a new placement.

    Attributes
    ----------
    placement
        The new placement after relabelling (same cost as the one asked for).
    transfers
        One :class:`Transfer` per expert that changes rank.
    rounds
        Indices into ``transfers``; in every round each rank sends <= 1 and receives <= 1.
    total_bytes
        Sum of the transfers' bytes (per shard; every shard does the same).
    kept
        Experts (over all layers) that stay on their rank.
    """

    placement: Placement
    transfers: tuple[Transfer, ...]
    rounds: tuple[tuple[int, ...], ...]
    total_bytes: int
    kept: int

    @property
    def num_rounds(self) -> int:
        return len(self.rounds)

    @property
    def num_transfers(self) -> int:
        return len(self.transfers)

    @property
    def critical_bytes(self) -> int:
        """Bytes the busiest rank moves in sequence: one transfer per rank per round, so
        the sum over rounds of the round's largest transfer."""
        return int(sum(max(self.transfers[i].bytes for i in r) for r in self.rounds if r))

    def summary(self) -> dict:
        moved = np.zeros(self.placement.num_layers, dtype=np.int64)
        for t in self.transfers:
            moved[t.layer] += 1
        return {"transfers": self.num_transfers, "kept": self.kept, "rounds": self.num_rounds,
                "total_bytes": self.total_bytes, "critical_bytes": self.critical_bytes,
                "moved_per_layer": moved.tolist()}

    def to_dict(self) -> dict:
        out = self.summary()
        out["transfer_list"] = [list(t) for t in self.transfers]
        out["round_list"] = [list(r) for r in self.rounds]
        return out


def overlap(current: np.ndarray, new: np.ndarray, num_ranks: int) -> np.ndarray:
    """[L, P, P]: M[l, p, q] = experts of layer l on current rank p and new rank q."""
    num_layers = current.shape[0]
    flat = (np.arange(num_layers)[:, None] * num_ranks + current) * num_ranks + new
    return np.bincount(flat.ravel(), minlength=num_layers * num_ranks * num_ranks).reshape(
        num_layers, num_ranks, num_ranks)


def relabel(current: Placement, new: Placement) -> Placement:
    """``new`` with its ranks relabelled per layer to keep the most experts in place.

    Parameters
    ----------
    current, new
        Placements with the same (L, E, P).

    Returns
    -------
    Placement
        sigma_l(new.ranks[l]) with sigma_l a permutation of ranks maximising
        |{e : sigma_l(new_l(e)) = current_l(e)}|.
    """
    _same_shape(current, new)
    num_ranks = new.num_ranks
    counts = overlap(current.ranks, new.ranks, num_ranks)
    sigma = np.empty((new.num_layers, num_ranks), dtype=np.int64)
    for l in range(new.num_layers):  # one P x P assignment per layer
        cur_rank, new_rank = linear_sum_assignment(counts[l], maximize=True)
        sigma[l, new_rank] = cur_rank
    return Placement(np.take_along_axis(sigma, new.ranks, axis=1), num_ranks)


def _same_shape(current: Placement, new: Placement) -> None:
    if current.ranks.shape != new.ranks.shape or current.num_ranks != new.num_ranks:
        raise InputError("current", f"placement of shape {current.ranks.shape} on P={current.num_ranks} does not "
                                    f"match the new one, {new.ranks.shape} on P={new.num_ranks}")


def edge_colouring_rounds(src: np.ndarray, dst: np.ndarray, num_ranks: int) -> list[list[int]]:
    """Proper edge colouring of a bipartite multigraph with max-degree colours.

    Parameters
    ----------
    src, dst
        [M] endpoints of the edges (sender rank, receiver rank); every rank must send as
        many edges as it receives (true for a transfer list between balanced placements).
    num_ranks
        P.

    Returns
    -------
    list of lists
        Edge indices per round; every rank appears at most once as sender and at most once
        as receiver in a round; the number of rounds is the max degree.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if src.size == 0:
        return []
    # p -> p is indistinguishable from a padding edge below and would be in no round
    require(not bool(np.any(src == dst)), "transfers", "a transfer from a rank to itself moves nothing")
    out_deg = np.bincount(src, minlength=num_ranks)
    in_deg = np.bincount(dst, minlength=num_ranks)
    require(bool(np.array_equal(out_deg, in_deg)), "transfers", "every rank must send as many experts as it receives")
    delta = int(out_deg.max())
    mult = np.zeros((num_ranks, num_ranks), dtype=np.int64)
    np.add.at(mult, (src, dst), 1)
    # dummy p -> p edges pad every rank to degree delta (a Delta-regular multigraph)
    mult[np.arange(num_ranks), np.arange(num_ranks)] += delta - out_deg
    # edges of each (src, dst) pair, handed out one per round that matches the pair
    order = np.lexsort((dst, src))
    pair = src[order] * num_ranks + dst[order]
    starts = np.searchsorted(pair, np.arange(num_ranks * num_ranks))
    next_edge = starts.copy()
    rounds = []
    for _ in range(delta):
        graph = csr_matrix((mult > 0).astype(np.int8))
        match = maximum_bipartite_matching(graph, perm_type="column")  # match[p] = receiver of p
        if np.any(match < 0):  # pragma: no cover - impossible for a regular bipartite multigraph
            raise RuntimeError("edge colouring: no perfect matching in a regular bipartite multigraph")
        senders = np.arange(num_ranks)
        mult[senders, match] -= 1
        round_edges = []
        for p, q in zip(senders.tolist(), match.tolist()):
            if p == q:
                continue  # a dummy edge: rank p idles in this round
            k = p * num_ranks + q
            round_edges.append(int(order[next_edge[k]]))
            next_edge[k] += 1
        rounds.append(round_edges)
    return rounds


def migration_plan(current: Placement, new: Placement, expert_bytes: int = 0,
                   relabel_ranks: bool = True) -> MigrationPlan:
    """Relabel ``new`` to keep experts in place, list the transfers and schedule them.

    Parameters
    ----------
    current
        The placement the trainer holds now.
    new
        The placement to materialise (any labelling).
    expert_bytes
        Bytes of one expert's state, an integer >= 0 (e.g.
        ``rp_opt.models.load_spec(name).expert_bytes``).
    relabel_ranks
        Relabel first (default); False schedules ``new`` as it is labelled.
    """
    _same_shape(current, new)
    expert_bytes = integer("expert_bytes", expert_bytes, low=0)
    target = relabel(current, new) if relabel_ranks else new
    layer, expert = np.nonzero(target.ranks != current.ranks)
    src = current.ranks[layer, expert]
    dst = target.ranks[layer, expert]
    transfers = tuple(Transfer(int(l), int(e), int(s), int(d), expert_bytes)
                      for l, e, s, d in zip(layer, expert, src, dst))
    rounds = edge_colouring_rounds(src, dst, new.num_ranks)
    kept = int(current.ranks.size - len(transfers))
    return MigrationPlan(target, transfers, tuple(tuple(r) for r in rounds),
                         expert_bytes * len(transfers), kept)


_TRANSFER_FIELDS = Transfer._fields  # layer, expert, src, dst, bytes


def apply_transfers(current: Placement, transfers) -> Placement:
    """The placement after performing ``transfers`` on ``current``.

    Parameters
    ----------
    current
        The placement the transfers start from.
    transfers
        A sequence of :class:`Transfer` or of (layer, expert, src, dst[, bytes]) sequences
        (e.g. ``MigrationPlan.to_dict()["transfer_list"]`` read back from JSON, or an
        array or torch tensor [M, 4 or 5] of them, a field being a 0-d tensor). Every
        field is an integer under the rules of :func:`rp_opt.errors.integer`: an integral
        float such as 2.0 counts as 2; a fractional (1.5), non-finite, boolean or
        non-numeric value is refused, never cut to an integer.

    Raises
    ------
    InputError
        One line: a field that is not an integer, naming it and the value
        (``transfers[0].layer: must be an integer, got 1.5``); a transfer that is not a
        sequence of 4 or 5 fields; a transfer whose source is not where the expert is, an
        expert that moves twice, a rank or expert outside the placement, or a result that
        is not balanced.
    """
    ranks = np.array(current.ranks, copy=True)
    moved = set()
    require(not isinstance(transfers, (str, bytes, dict)) and hasattr(transfers, "__iter__")
            and getattr(transfers, "ndim", 1) != 0, "transfers",  # a 0-d array or tensor
            f"must be a sequence of transfers, got {type(transfers).__name__}")
    for i, t in enumerate(transfers):
        field = f"transfers[{i}]"
        require(not isinstance(t, (str, bytes, dict)) and hasattr(t, "__getitem__") and _size(t) in (4, 5), field,
                f"must be (layer, expert, src, dst[, bytes]), got {shown(t)}")
        layer, expert, src, dst = (integer(f"{field}.{name}", _scalar(t[j]))
                                   for j, name in enumerate(_TRANSFER_FIELDS[:4]))
        if len(t) == 5:
            integer(f"{field}.bytes", _scalar(t[4]), low=0)
        require(0 <= layer < ranks.shape[0] and 0 <= expert < ranks.shape[1], "transfers",
                f"layer {layer} expert {expert} is outside the placement")
        require((layer, expert) not in moved, "transfers", f"layer {layer} expert {expert} moves twice")
        require(ranks[layer, expert] == src, "transfers",
                f"layer {layer} expert {expert} is on rank {ranks[layer, expert]}, not {src}")
        require(0 <= dst < current.num_ranks, "transfers",
                f"destination rank {dst} is outside [0, {current.num_ranks})")
        ranks[layer, expert] = dst
        moved.add((layer, expert))
    return Placement(ranks, current.num_ranks)


def _size(value) -> int | None:
    """``len(value)``, or None when it has none (a number, a 0-d array)."""
    try:
        return len(value)
    except TypeError:
        return None


def _scalar(value):
    """A 0-d tensor or array (a field of a torch tensor of transfers, e.g. one broadcast to
    every rank) as its Python number, which :func:`~rp_opt.errors.integer` then checks as
    any other (int() read them before); numpy scalars and anything else as they are."""
    if isinstance(value, (np.generic, numbers.Number, str, bytes)) or not hasattr(value, "item") \
            or getattr(value, "ndim", None) != 0:
        return value
    try:
        return value.item()
    except Exception:  # not a number after all: integer() names it
        return value
