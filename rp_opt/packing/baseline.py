"""Baseline packers: what trainers run today.

- ``ffd``: the length-only first-fit-decreasing allocator used by AReaL: lengths in
  decreasing order into R*·D bins of capacity C; among the bins an item fits, the one
  holding the fewest sequences (ties: the lowest bin index).
- ``kk``: Karmarkar-Karp largest differencing on the workload w(T) = c·T + T^2 into R*·D
  partitions of equal sample counts (as verl does; counts differ by at most one when R*·D
  does not divide N), then a repair that moves samples out of any cell over capacity.

Bins become cells by index: bin b is cell (b div D, b mod D), i.e. row r holds bins
r·D .. r·D + D - 1. When a rule cannot fit the window into R*·D bins it retries with one
more row, and says so in ``stats["extra_rows"]``.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import time

import numpy as np

from ..errors import MAX_SEED, InputError, integer, number, require
from ..result import FEASIBLE, INFEASIBLE, NO_SOLUTION, OPTIMAL, Result
from ..solution import Layout, Placement
from ..solvers import plan_result, register_solver
from ..window import CostModel, Instance, Window

log = logging.getLogger("rp_opt")


def ffd_bins(lengths: np.ndarray, num_bins: int, capacity: int, max_items: int | None = None) -> np.ndarray | None:
    """AReaL-style FFD into ``num_bins`` bins; bin of every item, or None if an item fits nowhere
    (a bin fits when it has room and, where ``max_items`` = m is given, fewer than m items)."""
    order = np.argsort(-lengths, kind="stable")
    load = np.zeros(num_bins, dtype=np.int64)
    count = np.zeros(num_bins, dtype=np.int64)
    bin_of = np.empty(lengths.size, dtype=np.int64)
    big = np.iinfo(np.int64).max
    for i in order:
        fits = load + lengths[i] <= capacity
        if max_items is not None:
            fits &= count < max_items
        if not fits.any():
            return None
        b = int(np.argmin(np.where(fits, count, big)))
        bin_of[i] = b
        load[b] += lengths[i]
        count[b] += 1
    return bin_of


def workload_constant(cost: CostModel) -> float:
    """c of w(T) = c·T + T^2: the ratio of per-token to per-pair attention work."""
    beta = float(cost.layers @ cost.beta)
    alpha = float(cost.layers @ cost.alpha)
    return alpha / beta if beta > 0 else float("inf")


def kk_partition(weights: np.ndarray, num_parts: int) -> np.ndarray:
    """Largest differencing into ``num_parts`` parts of equal counts (+-1); part of every item."""
    n = weights.size
    order = np.argsort(-weights, kind="stable")
    padded = -(-n // num_parts) * num_parts
    order = np.concatenate([order, np.full(padded - n, -1)])  # -1: zero-weight dummies
    heap = []
    for k, start in enumerate(range(0, padded, num_parts)):
        chunk = order[start:start + num_parts]
        sums = np.where(chunk >= 0, weights[np.maximum(chunk, 0)], 0.0)
        parts = [[int(i)] if i >= 0 else [] for i in chunk]
        # a state: (-spread, tie, sums, parts) with parts sorted by decreasing sum
        heapq.heappush(heap, (-(sums.max() - sums.min()), k, sums, parts))
    tie = len(heap)
    while len(heap) > 1:
        _, _, sums_a, parts_a = heapq.heappop(heap)
        _, _, sums_b, parts_b = heapq.heappop(heap)
        # largest part of one state with the smallest of the other
        a = np.argsort(-sums_a, kind="stable")
        b = np.argsort(sums_b, kind="stable")
        sums = sums_a[a] + sums_b[b]
        parts = [parts_a[x] + parts_b[y] for x, y in zip(a, b)]
        tie += 1
        heapq.heappush(heap, (-(sums.max() - sums.min()), tie, sums, parts))
    part_of = np.empty(n, dtype=np.int64)
    for p, items in enumerate(heap[0][3]):
        part_of[np.asarray(items, dtype=np.int64)] = p
    return part_of


def repair_capacity(lengths: np.ndarray, bin_of: np.ndarray, num_bins: int, capacity: int,
                    max_items: int | None = None) -> np.ndarray | None:
    """Move samples out of bins over capacity (largest that fits elsewhere, into the emptiest
    bin with fewer than ``max_items`` = m items, where m is given); None when no move helps
    or a bin holds more than m items. Bins keep at least one sample."""
    bin_of = bin_of.copy()
    load = np.bincount(bin_of, weights=lengths, minlength=num_bins)
    count = np.bincount(bin_of, minlength=num_bins)
    if max_items is not None and count.max() > max_items:
        return None
    for _ in range(lengths.size):
        over = np.flatnonzero(load > capacity)
        if over.size == 0:
            return bin_of
        b = int(over[0])
        members = np.flatnonzero(bin_of == b)
        members = members[np.argsort(-lengths[members], kind="stable")]
        # a bin already holding m samples takes none (its load counts as infinite)
        open_load = load if max_items is None else np.where(count < max_items, load, np.inf)
        target = int(np.argmin(open_load))
        moved = False
        for i in members:
            if count[b] > 1 and open_load[target] + lengths[i] <= capacity:
                bin_of[i] = target
                load[b] -= lengths[i]
                load[target] += lengths[i]
                count[b] -= 1
                count[target] += 1
                moved = True
                break
        if not moved:
            return None
    return bin_of if not np.any(load > capacity) else None


def _kk_bins(instance: Instance, num_bins: int) -> np.ndarray | None:
    window, cluster = instance.window, instance.cluster
    c = workload_constant(instance.cost)
    lengths = window.lengths.astype(np.float64)
    weights = lengths if not np.isfinite(c) else c * lengths + lengths ** 2
    part_of = kk_partition(weights, num_bins)
    return repair_capacity(window.lengths, part_of, num_bins, cluster.capacity, cluster.max_samples_per_cell)


_RULES = {"ffd": lambda inst, bins: ffd_bins(inst.window.lengths, bins, inst.cluster.capacity,
                                              inst.cluster.max_samples_per_cell), "kk": _kk_bins}


def min_rows(window: Window, cluster) -> int:
    """The rows to pack with: R* from the certifier, or the rows of its witness when it did
    not close R* in time (:attr:`rp_opt.rows.RowCertificate.rows`, as the heuristic does).

    Raises
    ------
    InputError
        ``window``: no layout exists, or none was found in time (the certificate's reason).
    """
    from ..rows import certify_rows

    cert = certify_rows(window, cluster)
    if cert.rows is None:
        raise InputError("window", cert.no_rows()[1])
    return cert.rows


def pack(instance: Instance, rule: str = "ffd", num_rows: int | None = None) -> tuple[Layout, dict]:
    """A baseline layout by ``rule`` (``ffd`` or ``kk``) with ``num_rows`` rows (default R*)."""
    if rule not in _RULES:
        raise InputError("packing", f"unknown rule {rule!r}; known: {', '.join(_RULES)}")
    window, cluster = instance.window, instance.cluster
    rows = min_rows(window, cluster) if num_rows is None else int(num_rows)
    extra = 0
    while True:
        if (rows + extra) * cluster.dp > window.num_samples:
            tried = f"{rows} row{'s' if rows != 1 else ''}" if extra == 1 else f"{rows}-{rows + extra - 1} rows"
            why = f"its layout of {tried} broke the capacity C={cluster.capacity} (or m) beyond repair, and " \
                if extra else ""
            raise InputError("window", f"{rule} cannot fill {(rows + extra) * cluster.dp} cells with "
                                       f"{window.num_samples} samples ({why}every cell needs a sample; the "
                                       f"rule fails, no claim that no layout exists)")
        bin_of = _RULES[rule](instance, (rows + extra) * cluster.dp)
        if bin_of is not None:
            break
        extra += 1
    if extra:
        log.info("%s needed %d rows more than R=%d", rule, extra, rows)
    return Layout.from_bins(bin_of, rows + extra, cluster.dp), {"rows": rows + extra, "extra_rows": extra}


def proven_status(score, level_bounds=None) -> str:
    """``optimal`` when every level of ``score`` meets its lower bound (``level_bounds``,
    each valid on its own: :meth:`rp_opt.bounds.CostBounds.objective`), so that no plan has a
    smaller tuple; without bounds, when every level is 0 (levels are non-negative
    combinations of non-negative costs: a window whose plans all cost nothing). Otherwise
    ``feasible``."""
    bounds = (0.0,) * len(score) if level_bounds is None else level_bounds
    proven = len(score) > 0 and all(bound >= value for value, bound in zip(score, bounds))
    return OPTIMAL if proven else FEASIBLE


def _baseline_solver(placement_rule: str, packing_rule: str):
    def solve(instance: Instance, *, objective="sync", time_limit=None, seed=0, warm_start=None, **options):
        start = time.perf_counter()
        unknown = sorted(set(options) - {"num_rows"})
        require(not unknown, "options", f"unknown option(s) {unknown} for this baseline; known: num_rows")
        time_limit = number("time_limit", time_limit, above=0, none=True, hint="seconds, or None: R* within 10 s")
        # the rules use no randomness; the seed is checked as every planner checks it
        integer("seed", seed, 0, MAX_SEED)
        window, cluster = instance.window, instance.cluster
        if placement_rule == "lpt":
            from ..placement import lpt_placement
            placement = lpt_placement(window, cluster.ep)
        else:
            placement = Placement.identity(window.num_layers, window.num_experts, cluster.ep)
        rows = integer("num_rows", options.get("num_rows"), 1, text=True, none=True, hint="None: R*")
        name = f"{placement_rule}+{packing_rule}"
        from ..rows import certify_rows, empty_cells

        proven = None  # R*, when this call proved it (a given R or a witness's rows are not R*)
        if rows is None:
            # R* within the certifier's default 10 s, or less when less of the limit is left
            # (the rule and the scoring after it are not cut): given the 10 s, N1C3W2_H of
            # BPPLIB as a window (D = 1) took 5.1 s where 1 s was asked; with 1 s, the same R*
            left = 10.0 if time_limit is None else min(10.0, time_limit - (time.perf_counter() - start))
            cert = certify_rows(window, cluster, max(left, 0.01))
            if cert.rows is None:
                # no row count to pack with: the result shape of every planner, with the reason
                status, reason = cert.no_rows()
                return Result(status, None, (), None, time.perf_counter() - start, name, {"reason": reason})
            rows, proven = cert.rows, cert.r_star
        else:
            empty = empty_cells(window.num_samples, rows, cluster.dp)
            if empty:  # a given R with R*D > N: no layout exists (the reason every planner gives)
                return Result(INFEASIBLE, None, (), None, time.perf_counter() - start, name, {"reason": empty})
        try:
            layout, stats = pack(instance, packing_rule, rows)
        except InputError as exc:
            if exc.field != "window":
                raise
            # the rule fills no R*.D..N cells; a layout may exist all the same (not proven infeasible)
            return Result(NO_SOLUTION, None, (), None, time.perf_counter() - start, name, {"reason": exc.message})
        stats.update(placement=placement_rule, packing=packing_rule)
        if warm_start is not None:
            # a baseline is what a trainer runs today, by fixed rules: a start would change it
            stats["warm_start"] = f"ignored: {name} builds its plan by fixed rules"
        if proven is not None:
            stats["r_star"] = proven
        result = plan_result(instance, placement, layout, objective, solver=name,
                             seconds=time.perf_counter() - start, status=FEASIBLE, stats=stats)
        status = proven_status(result.score)
        # seconds of the whole call: the scoring and its bounds too (0.7-0.9 s at N = 16384)
        return dataclasses.replace(result, status=status, seconds=time.perf_counter() - start)

    solve.__doc__ = f"{placement_rule} placement + {packing_rule} packing (baseline)"
    return solve


register_solver("baseline", "identity placement + ffd packing (what AReaL runs)")(_baseline_solver("identity", "ffd"))
register_solver("kk", "identity placement + Karmarkar-Karp workload packing (what verl runs)")(
    _baseline_solver("identity", "kk"))
register_solver("lpt-ffd", "LPT placement + ffd packing")(_baseline_solver("lpt", "ffd"))
