"""Export a plan for trainers outside Python: the plan JSON plus an ``.npz`` of arrays.

Physical slots (the convention of the expert-placement maps of serving engines' EPLB):
EP rank p holds physical slots p·E/P .. (p+1)·E/P - 1 of every layer (no replicas, so there
are E physical slots per layer).

- ``phy2log`` [L, E]: logical expert held in physical slot s of layer l.
- ``log2phy`` [L, E]: physical slot of logical expert e of layer l (its inverse).
- ``logical_to_physical_map`` [L, E, 1] and ``logical_replica_count`` [L, E] (all ones):
  the same map in the replica-aware shape that EPLB-style dispatch code reads.
- ``microbatch_samples`` (flat int64) and ``microbatch_offsets`` [D, R + 1]: the sample
  indices of cell (r, d) are ``microbatch_samples[offsets[d, r]:offsets[d, r + 1]]``, i.e.
  for every DP slot d the list over rows r of its microbatches, in row order.
- ``placement`` [L, E] (rank of every expert) and ``cell_of`` [N] (r·D + d of every sample).

Within a rank, slots are given to experts so that an expert that stays on its rank also
stays in the slot it held (when the previous ``phy2log`` is given): a trainer then copies
only the experts that move. Without a previous map, experts fill their rank's slots in
increasing expert order. With one, :func:`export_plan` first relabels the plan's ranks per
layer (:func:`relabel_to_previous`; rank labels are symmetric, so the cost stays) so that
as many experts as possible stay on the rank that holds them.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np

from .errors import InputError, require
from .io import check_writable
from .materialise import relabel
from .result import Plan
from .solution import Layout, Placement

FORMAT = "rp-opt-export/1"


def checked_phy2log(phy2log, num_layers: int, num_experts: int, field: str = "previous_phy2log",
                    name: str = "") -> np.ndarray:
    """``phy2log`` as int64 [L, E] when every layer holds a permutation of the experts
    (integral floats such as 3.0 count); else a one-line :class:`InputError` on ``field``,
    its message starting with ``name`` (what the array is, e.g. a file's)."""
    raw = np.asarray(phy2log)
    integral = raw.dtype.kind in "iu" or (
        raw.dtype.kind == "f" and bool(np.all(np.isfinite(raw) & (raw == np.round(raw)))))
    require(integral, field, f"{name}must hold integer expert ids, got {raw.dtype} values")
    ids = raw.astype(np.int64)
    require(ids.shape == (num_layers, num_experts), field,
            f"{name}has shape {ids.shape}, expected (L, E) = ({num_layers}, {num_experts})")
    require(bool(np.all(np.sort(ids, axis=1) == np.arange(num_experts))), field,
            f"{name}is not a permutation of the experts 0..{num_experts - 1} in every layer")
    return ids


def physical_maps(placement: Placement, previous_phy2log: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(phy2log [L, E], log2phy [L, E]) of ``placement`` (module docstring).

    Parameters
    ----------
    placement
        Rank of every logical expert of every layer.
    previous_phy2log
        The map in force; experts that stay on their rank keep their slot. None: no map in
        force (each rank's slots in increasing expert order). A trainer whose experts sit
        in the identity layout (slot e holds expert e) passes ``np.tile(np.arange(E), (L,
        1))``, not None: with None an expert that stays on its rank may change slot, which
        no migration transfer covers.
    """
    num_layers, num_experts = placement.ranks.shape
    per_rank = num_experts // placement.num_ranks
    if previous_phy2log is None:
        # experts_of_ranks() flattened (its reshape cannot infer E/P of a placement without layers)
        phy2log = np.argsort(placement.ranks, axis=1, kind="stable")
    else:
        prev = checked_phy2log(previous_phy2log, num_layers, num_experts)
        slot_rank = np.arange(num_experts) // per_rank                       # rank of every slot
        stays = placement.ranks[np.arange(num_layers)[:, None], prev] == slot_rank[None, :]  # [L, slots]
        phy2log = np.where(stays, prev, -1)
        # movers: experts whose previous slot is on another rank; they fill the freed slots of
        # their new rank in increasing expert order (one stable sort per layer of both lists)
        prev_rank = np.empty_like(prev)
        np.put_along_axis(prev_rank, prev, slot_rank[None, :].repeat(num_layers, 0), axis=1)
        for l in range(num_layers):
            movers = np.flatnonzero(placement.ranks[l] != prev_rank[l])
            if movers.size == 0:
                continue
            movers = movers[np.argsort(placement.ranks[l, movers], kind="stable")]
            free = np.flatnonzero(phy2log[l] < 0)  # already ordered by rank (slots are contiguous)
            phy2log[l, free] = movers
    log2phy = np.empty_like(phy2log)
    np.put_along_axis(log2phy, phy2log, np.arange(num_experts)[None, :].repeat(num_layers, 0), axis=1)
    return phy2log, log2phy


def microbatch_lists(layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(samples, offsets [D, R + 1]): slot-major CSR of the cells (module docstring)."""
    rows, slots = layout.num_rows, layout.num_slots
    # slot-major cell key d·R + r, samples in increasing index inside a cell
    key = layout.slot_of * rows + layout.row_of
    order = np.lexsort((np.arange(key.size), key))
    counts = np.bincount(key, minlength=rows * slots).reshape(slots, rows)
    flat = np.concatenate([[0], np.cumsum(counts.ravel())])
    offsets = flat[np.arange(slots)[:, None] * rows + np.arange(rows + 1)[None, :]].astype(np.int64)
    return order.astype(np.int64), offsets


def placement_in_force(previous_phy2log: np.ndarray, num_ranks: int) -> Placement:
    """The placement a physical map puts in force: the expert in slot s is on rank
    s div (E/P). ``previous_phy2log`` [L, E] must be a checked map (:func:`checked_phy2log`)."""
    prev = np.asarray(previous_phy2log)
    return Placement(np.argsort(prev, axis=1) // (prev.shape[1] // num_ranks), num_ranks)


def relabel_to_previous(plan: Plan, previous_phy2log: np.ndarray) -> tuple[Plan, dict]:
    """``plan`` with its ranks relabelled per layer so that the most experts stay on the rank
    that holds them under the map in force (rank labels are symmetric: the score stays),
    and how many stay: ``experts`` (L E), ``kept_on_rank``, ``kept_without_relabelling``.

    Parameters
    ----------
    plan
        The plan to relabel (its layout, objective, score and stats are kept).
    previous_phy2log
        The physical map in force, [L, E] (slot s of layer l holds expert
        ``previous_phy2log[l, s]``; rank p owns slots p E/P .. (p+1) E/P - 1), every layer
        a permutation of the experts (:func:`checked_phy2log`). At a trainer's first
        step, the identity ``np.tile(np.arange(E), (L, 1))``.

    Returns
    -------
    (Plan, dict)
        The relabelled plan (a layer whose labels already keep the most experts keeps
        them), and ``{"experts", "kept_on_rank", "kept_without_relabelling"}``.

    Raises
    ------
    InputError
        ``previous_phy2log`` not such a map (one line naming ``previous_phy2log``).
    """
    placement = plan.placement
    prev = checked_phy2log(previous_phy2log, placement.num_layers, placement.num_experts)
    current = placement_in_force(prev, placement.num_ranks)
    relabelled = relabel(current, placement).ranks
    kept_before = np.sum(placement.ranks == current.ranks, axis=1)
    # a layer whose labels already keep the most (e.g. a Planner's plan, relabelled when it
    # was made) keeps them: another optimal labelling would only disagree with its maker
    ranks = np.where((np.sum(relabelled == current.ranks, axis=1) > kept_before)[:, None], relabelled,
                     placement.ranks)
    info = {"experts": int(placement.ranks.size),
            "kept_on_rank": int(np.sum(ranks == current.ranks)),
            "kept_without_relabelling": int(kept_before.sum())}
    return replace(plan, placement=Placement(ranks, placement.num_ranks)), info


def export_arrays(plan: Plan, previous_phy2log: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` export of ``plan``."""
    phy2log, log2phy = physical_maps(plan.placement, previous_phy2log)
    samples, offsets = microbatch_lists(plan.layout)
    return {
        "phy2log": phy2log, "log2phy": log2phy,
        "logical_to_physical_map": log2phy[:, :, None].copy(),
        "logical_replica_count": np.ones_like(log2phy),
        "microbatch_samples": samples, "microbatch_offsets": offsets,
        "placement": np.asarray(plan.placement.ranks), "cell_of": np.asarray(plan.layout.cell_of),
    }


def export_plan(plan: Plan, prefix: str | os.PathLike, previous_phy2log: np.ndarray | None = None,
                extra: dict | None = None, relabel_ranks: bool = True) -> tuple[str, str]:
    """Write ``PREFIX.json`` (plan file + per-slot microbatch lists) and ``PREFIX.npz``.

    Parameters
    ----------
    plan
        The plan to export.
    prefix
        Output path without extension.
    previous_phy2log
        The physical map in force (keeps staying experts in their slots).
    extra
        More JSON fields (e.g. the migration summary).
    relabel_ranks
        With ``previous_phy2log``: relabel the plan's ranks first
        (:func:`relabel_to_previous`; the JSON's ``relabelled`` says how many experts stay
        on their rank). The exported placement is then the relabelled one.

    Returns
    -------
    (json_path, npz_path)
    """
    prefix = os.fspath(prefix)
    relabelled = None
    if previous_phy2log is not None and relabel_ranks:
        plan, relabelled = relabel_to_previous(plan, previous_phy2log)
    arrays = export_arrays(plan, previous_phy2log)
    num_ranks = plan.placement.num_ranks
    data = plan.to_dict()
    samples, offsets = arrays["microbatch_samples"], arrays["microbatch_offsets"]
    data.update({
        "format": FORMAT,
        "num_ranks": num_ranks,
        "slots_per_rank": plan.placement.num_experts // num_ranks,
        "phy2log": arrays["phy2log"].tolist(),
        "log2phy": arrays["log2phy"].tolist(),
        "microbatches": [[samples[offsets[d, r]:offsets[d, r + 1]].tolist() for r in range(plan.layout.num_rows)]
                         for d in range(plan.layout.num_slots)],
    })
    if relabelled is not None:
        data["relabelled"] = relabelled
    if extra:
        data.update(extra)
    json_path, npz_path = prefix + ".json", prefix + ".npz"
    check_writable(json_path, "-o")
    check_writable(npz_path, "-o")
    with open(json_path, "w") as handle:
        json.dump(data, handle)
        handle.write("\n")
    with open(npz_path, "wb") as handle:
        np.savez_compressed(handle, **arrays)
    return json_path, npz_path


def load_export(npz_path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of an export ``.npz``."""
    path = os.fspath(npz_path)
    require(os.path.exists(path), "file", f"{path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {k: archive[k] for k in archive.files}
    except (OSError, ValueError) as exc:
        raise InputError("file", f"{path} is not an export .npz ({type(exc).__name__})") from None
