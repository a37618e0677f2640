"""CP-SAT decision model: do the items fit in K bins (capacity C, at most m items each)?"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from .._cpsat import solve


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
    """
    start = time.perf_counter()
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    order = np.argsort(-lengths, kind="stable")
    w = lengths[order].tolist()
    k = int(num_bins)
    model = cp_model.CpModel()
    x: list[dict[int, cp_model.IntVar]] = []
    fixed = set()
    for i in range(n):
        if 2 * w[i] > capacity and i < k:
            x.append({i: model.new_constant(1)})        # big items: one bin each
            fixed.add(i)
            continue
        x.append({b: model.new_bool_var(f"x{i}_{b}") for b in range(min(k, i + 1))})
        if not x[-1]:
            return FitResult("infeasible", None, time.perf_counter() - start)
    for i in range(n):
        model.add_exactly_one(x[i].values())            # sum_b x[i,b] = 1
    per_bin: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(k)]
    for i in range(n):
        for b, var in x[i].items():
            per_bin[b].append((i, var))
    for b in range(k):
        if not per_bin[b]:
            continue
        # capacity: sum_i T_i x[i,b] <= C
        model.add(sum(w[i] * v for i, v in per_bin[b]) <= capacity)
        if max_items is not None:
            # cardinality: sum_i x[i,b] <= m
            model.add(sum(v for _, v in per_bin[b]) <= max_items)
    if hint is not None:
        rank_bin = np.asarray(hint)[order]
        # relabel hint bins by first item so the hint obeys the symmetry breaking
        first: dict[int, int] = {}
        for i, b in enumerate(rank_bin.tolist()):
            first.setdefault(b, len(first))
        for i, b in enumerate(rank_bin.tolist()):
            if i in fixed:
                continue
            nb = first[b]
            for bb, var in x[i].items():
                model.add_hint(var, 1 if bb == nb else 0)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(float(time_limit), 0.01)
    solver.parameters.num_workers = workers
    code = solve(solver, model)
    seconds = time.perf_counter() - start
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        bin_of = np.empty(n, dtype=np.int64)
        for i in range(n):
            bin_of[order[i]] = next(b for b, v in x[i].items() if solver.value(v))
        return FitResult("feasible", bin_of, seconds)
    if code == cp_model.INFEASIBLE:
        return FitResult("infeasible", None, seconds)
    return FitResult("unknown", None, seconds)
