"""CP-SAT decision model: do the items fit in K bins (capacity C, at most m items each)?"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from .clock import build_and_solve, ticking

log = logging.getLogger("rp_opt")


@dataclass
class FitResult:
    status: str                 # "feasible", "infeasible" or "unknown"
    bin_of: np.ndarray | None   # a packing into <= K bins when feasible (unverified)
    seconds: float


def fits_in_bins(lengths: np.ndarray, capacity: int, num_bins: int, max_items: int | None = None,
                 time_limit: float = 10.0, hint: np.ndarray | None = None, workers: int = 2) -> FitResult:
    """Decide whether the items fit in ``num_bins`` bins.

    Symmetry breaking: with items in non-increasing size order and bins labelled by their
    first (largest) item, item i lies in a bin b <= i, and each item larger than C/2 opens
    its own bin (b = i). ``hint`` (a bin per item, e.g. FFD) is passed as a solution hint for
    the items whose bin is < K.

    ``time_limit`` covers the model build too: a model of more booleans than the time allows
    (:func:`~.clock.cpsat_deadline`) is not built, a build that passes the limit is
    abandoned, and both answer ``unknown``.
    """
    start = time.perf_counter()
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    order = np.argsort(-lengths, kind="stable")
    k = int(num_bins)
    # x[i, b] for b <= i (b = i fixed for big items): about N K / 2 booleans, built in Python
    # at 4-7 us each (94k for 600 items in 185 bins: 0.65 s with the hint), which CP-SAT's
    # own time limit does not cover
    rank = np.arange(n)
    fixed_big = (2 * lengths[order] > capacity) & (rank < k)
    num_vars = int(np.minimum(k, rank + 1)[~fixed_big].sum())
    out = build_and_solve(start, time_limit, num_vars,
                          lambda deadline: _assignment_model(lengths[order], capacity, k, max_items,
                                                             None if hint is None else np.asarray(hint)[order],
                                                             deadline),
                          workers, f"CP-SAT model of {num_vars} booleans")
    if out is None:
        return FitResult("unknown", None, time.perf_counter() - start)
    parts, solver, code = out
    if solver is None:                          # the builder found no packing can exist
        return FitResult("infeasible", None, time.perf_counter() - start)
    (x,) = parts
    seconds = time.perf_counter() - start
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        bin_of = np.empty(n, dtype=np.int64)
        for i in range(n):
            bin_of[order[i]] = next(b for b, v in x[i].items() if solver.value(v))
        return FitResult("feasible", bin_of, seconds)
    if code == cp_model.INFEASIBLE:
        return FitResult("infeasible", None, seconds)
    return FitResult("unknown", None, seconds)


def _assignment_model(w_sorted: np.ndarray, capacity: int, k: int, max_items: int | None,
                      rank_bin: np.ndarray | None, deadline: float | None):
    """The model of :func:`fits_in_bins` over items in non-increasing size order:
    ``(model, x)`` with ``x[i]`` the booleans {bin: var} of item i, or None when an item has
    no bin (infeasible). ``rank_bin``: the hint's bin per item, in the same order.

    Raises
    ------
    OutOfTime
        When ``deadline`` passes during the build (checked once per item and per bin).
    """
    w = w_sorted.tolist()
    n = len(w)
    model = cp_model.CpModel()
    x: list[dict[int, cp_model.IntVar]] = []
    fixed = set()
    for i in ticking(range(n), deadline, every=1):   # one item: up to K booleans
        if 2 * w[i] > capacity and i < k:
            x.append({i: model.new_constant(1)})        # big items: one bin each
            fixed.add(i)
            continue
        x.append({b: model.new_bool_var(f"x{i}_{b}") for b in range(min(k, i + 1))})
        if not x[-1]:
            return None
    for i in ticking(range(n), deadline):
        model.add_exactly_one(x[i].values())            # sum_b x[i,b] = 1
    per_bin: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(k)]
    for i in ticking(range(n), deadline, every=16):
        for b, var in x[i].items():
            per_bin[b].append((i, var))
    for b in ticking(range(k), deadline, every=1):   # one bin: up to N terms
        if not per_bin[b]:
            continue
        # capacity: sum_i T_i x[i,b] <= C
        model.add(sum(w[i] * v for i, v in per_bin[b]) <= capacity)
        if max_items is not None:
            # cardinality: sum_i x[i,b] <= m
            model.add(sum(v for _, v in per_bin[b]) <= max_items)
    if rank_bin is not None:
        # relabel hint bins by first item so the hint obeys the symmetry breaking
        first: dict[int, int] = {}
        for i, b in enumerate(rank_bin.tolist()):
            first.setdefault(b, len(first))
        for i, b in ticking(enumerate(rank_bin.tolist()), deadline, every=1):
            if i in fixed:
                continue
            nb = first[b]
            for bb, var in x[i].items():
                model.add_hint(var, 1 if bb == nb else 0)
    return model, x
