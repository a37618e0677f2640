"""Certified minimum row count R* of a window (MODEL.md, "Minimum row count").

A layout of R rows exists iff B_m <= R D <= N, where B_m is the least number of bins of
capacity C (at most m items each, where m is set) that hold the lengths T_i: a layout is
such a packing, and a packing into B_m <= R D <= N bins splits into exactly R D non-empty
bins by moving single items into empty bins (capacity and the item limit are kept). So
R* = ceil(B_m / D) when ceil(B_m / D) D <= N, and the window is infeasible otherwise; only
ceil(B_m / D) has to be proven, i.e. the decision "B_m <= K" for K = R D.

Pipeline (each stage only while the bounds are open, within the time limit):

1. Lower bounds L1, L2 (Martello-Toth), ceil(N / m); packings by FFD, BFD and MBS'.
2. The arc-flow graph and its LP bound, certified through integer duals and an exact
   knapsack (:mod:`.arcflow`).
3. For the target K = ceil(lower / D) D bins: the graph is pruned by the waste budget
   W = K C - sum T (no bin of a K-bin packing wastes more; for triplets W = 0 and only
   exactly-full bins remain) and by the LP's reduced costs (no bin of a K-bin packing has
   reduced cost above K - LP), then LP diving (:mod:`.rounding`, each dive's LPs re-solved
   from the last basis) looks for a K-bin packing on that graph. Where the reduced costs
   bring a large graph to the MIP's size, the MIP of step 4 gets a share of the time
   before the dives. Together they close the IRUP instances of BPPLIB's Falkenauer,
   Scholl_1 and Hard28 sets (Hard28's five others, LP = B - 1, need step 4's proof).
4. The exact decision "B <= K" on the pruned graph: a short HiGHS branch-and-bound on small
   graphs (it proves non-IRUP cases such as LP = 22 < B = 23), then CP-SAT with the rest
   of the time; an infeasible K raises the lower bound to K + 1 and the loop repeats.
   Without a graph (too large): the bin-emptying LNS and the CP-SAT assignment model.

Every packing is verified (capacity, item limit) before it counts. No stage has a floor on
its time, and model builds count against the limit (:mod:`.clock`): a stage that cannot
finish in the time left is skipped, so time_limit 0 gives the certificate of step 1 at once.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field

import numpy as np

from ..result import FEASIBLE, INFEASIBLE, NO_SOLUTION, OPTIMAL
from ..solution import Layout
from ..window import Cluster, Window
from . import arcflow, bounds, cpsat, heuristics, lns, rounding
from .bounds import cardinality_bound, item_count_bound, l2_bound
from .clock import OutOfTime

__all__ = ["RowCertificate", "certify_rows", "certify_bins", "certify_seconds", "empty_cells", "row_count_reason",
           "read_bpplib"]

log = logging.getLogger("rp_opt")
# progress of a long certification (INFO; not for the quick ones every plan runs)
progress_log = logging.getLogger("rp_opt.progress")
# seconds into a certification before its progress is logged
PROGRESS_AFTER = 0.5

# size guards of the exact models (graph cells touched while building; x[i,b] booleans)
ARCFLOW_MAX_WORK = 60_000_000
ARCFLOW_MAX_ARCS = 3_000_000
CPSAT_MAX_VARS = 400_000
MBS_MAX_ITEMS = 2_000
MBS_MAX_WORK = 20_000_000  # N (C + 1): cells of one MBS subset-sum DP (its arrays have C + 1 entries)
DIVE_SHARE = 0.5          # share of the time left spent on LP diving before the exact decision
DIVE_SHARE_LARGE = 0.85   # ... on graphs too large for the MIP (hard28), where CP-SAT rarely helps
REPAIR_SECONDS = 0.4      # per repair of a failed dive (4x on large graphs, whose dives are slow)
MIP_SHARE = 0.5          # share of the time left for the HiGHS MIP on the pruned graph ...
MIP_MAX_ARCS = 10_000     # ... when it has at most this many item arcs
QUICK_MIP_SECONDS = 0.2   # the MIP's first, short try before the LP diving
RC_MIP_SHARE = 0.4        # the MIP's share before the dives where the reduced costs made a large graph small
DIVE_FIX_SHARES = (1.0, 0.5, 1.0, 0.25)   # per dive, cyclic: share of integral LP patterns fixed per step


@dataclass(frozen=True)
class RowCertificate:
    """Outcome of :func:`certify_rows`.

    Attributes
    ----------
    status
        ``optimal`` (r_star proven), ``feasible`` (a witness, bounds not closed in time),
        ``infeasible`` (no layout exists; see ``reason`` and ``fix``) or ``no_solution``
        (bounds not closed and no layout found).
    r_star
        R*, when proven.
    lower_bound, upper_bound
        Proven bounds on the row count (upper: rows of the witness).
    bound_method
        What proved the lower bound: ``L1``, ``L2``, ``cardinality``, ``arc-flow LP``,
        ``exact search`` (or ``samples`` for an infeasible window).
    witness
        A layout with ``upper_bound`` rows, every one of its R D cells non-empty.
    bins_lower, bins_upper
        Bounds on B (bins of capacity C, at most m items each).
    seconds
        Wall time.
    reason, fix
        For an infeasible window: why, and what would make it feasible.
    stats
        Per-stage figures (bounds, heuristics, exact-search times).
    """

    status: str
    r_star: int | None
    lower_bound: int | None
    upper_bound: int | None
    bound_method: str
    witness: Layout | None
    bins_lower: int | None
    bins_upper: int | None
    seconds: float
    reason: str | None = None
    fix: str | None = None
    stats: dict = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        """JSON-ready form (the witness as nested rows[r][d] lists)."""
        return {
            "status": self.status, "r_star": self.r_star, "lower_bound": self.lower_bound,
            "upper_bound": self.upper_bound, "bound_method": self.bound_method,
            "bins_lower": self.bins_lower, "bins_upper": self.bins_upper,
            "seconds": round(self.seconds, 6), "reason": self.reason, "fix": self.fix,
            "stats": self.stats,
            "witness": None if self.witness is None else self.witness.to_rows(),
        }

    @property
    def rows(self) -> int | None:
        """The row count a planner uses: R* when proven, else the rows of the witness (the
        bounds did not close in time, but that layout exists); None when no layout is known."""
        if self.r_star is not None:
            return int(self.r_star)
        if self.status != INFEASIBLE and self.witness is not None:
            return int(self.upper_bound)
        return None

    def no_rows(self) -> tuple[str, str]:
        """``(status, reason)`` of a planner's result when it has no row count to plan with:
        ``infeasible`` when no layout exists (the reason and the fix), else ``no_solution``
        (R* was not proven in time: a layout may well exist)."""
        if self.status == INFEASIBLE:
            reason = self.reason or "no row count R with R*D <= N admits a layout"
            return INFEASIBLE, reason + (f"; {self.fix}" if self.fix else "")
        return NO_SOLUTION, f"R* not proven within the time limit ({self.summary()})"

    def summary(self) -> str:
        if self.status == INFEASIBLE:
            return f"infeasible: {self.reason}; {self.fix}"
        if self.status == OPTIMAL:
            return f"R* = {self.r_star} (proven by {self.bound_method}, {self.seconds:.3f}s)"
        stopped = ", interrupted (Ctrl-C)" if self.stats.get("interrupted") else ""
        return (f"{self.status}: {self.lower_bound} <= R* <= {self.upper_bound} "
                f"(lower bound by {self.bound_method}, {self.seconds:.3f}s{stopped})")


def certify_seconds(time_limit: float, at_least: float) -> float:
    """Seconds a planner with ``time_limit`` gives the R* certification: a fifth of the
    limit, at least ``at_least``, at most half (the floor must not take a short limit)."""
    return min(max(at_least, 0.2 * time_limit), 0.5 * time_limit)


def empty_cells(num_samples: int, num_rows: int, num_slots: int) -> str | None:
    """Why ``num_rows`` rows of ``num_slots`` slots admit no layout of ``num_samples``
    samples (R D > N: every cell needs a sample), or None when R D <= N."""
    cells = int(num_rows) * int(num_slots)
    if cells <= num_samples:
        return None
    return f"N={num_samples} < R x D = {cells} cells: some cell would be empty"


def row_count_reason(lengths, num_rows: int, num_slots: int, capacity: int,
                     max_per_cell: int | None = None) -> str | None:
    """Why ``num_rows`` rows of ``num_slots`` slots admit no layout of samples with these
    ``lengths``, as far as counting proves it, or None when counting does not rule it out.

    Three reasons, checked in this order: R D > N (every cell needs a sample), R D below
    the best bin-packing lower bound of :mod:`.bounds` (L2 from the lengths, or N/m from
    the per-cell sample limit m, named as the cause when it needs more cells), and R D
    below the item-count bound (the samples that fit beside each one, and m). The
    one reason the heuristic and the exact planners give for a row count they were told to
    use and cannot fill (the baselines add rows instead, so only R D > N stops them).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    cells = int(num_rows) * int(num_slots)
    empty = empty_cells(lengths.size, num_rows, num_slots)
    if empty:
        return empty
    # L2 >= L1 and >= the count of samples above C/2 (its threshold alpha = 0)
    by_lengths, by_limit = l2_bound(lengths, capacity), cardinality_bound(lengths.size, max_per_cell)
    held = f"R={int(num_rows)} rows hold R x D = {cells} cells"
    if by_limit > max(by_lengths, cells):
        return (f"{held}, but with at most m={int(max_per_cell)} samples per cell the N={lengths.size} samples "
                f"need at least {by_limit} cells (N/m bound)")
    if by_lengths > cells:
        return f"{held}, but the samples need at least {by_lengths} cells of C={int(capacity)} (L2 bound)"
    by_count = item_count_bound(lengths, capacity, max_per_cell)
    if by_count > cells:
        return (f"{held}, but counting the samples that fit beside each one, the N={lengths.size} samples need "
                f"at least {by_count} cells of C={int(capacity)} (item-count bound)")
    return None


def _ceil_div(a: int, b: int) -> int:
    return -(-int(a) // int(b))


class _Search:
    """Bookkeeping of the bin bounds and the best verified packing."""

    def __init__(self, lengths, capacity, max_items):
        self.lengths, self.capacity, self.max_items = lengths, capacity, max_items
        self.lower, self.method = 0, "L1"
        self.upper, self.packing = None, None
        self.stats: dict = {}
        self.start = time.perf_counter()

    def say(self, what: str) -> None:
        """A progress line (INFO on ``rp_opt.progress``) once the certification has run
        :data:`PROGRESS_AFTER` seconds: the bins' bounds so far and ``what`` happened."""
        elapsed = time.perf_counter() - self.start
        if elapsed >= PROGRESS_AFTER:
            progress_log.info("R*: %s <= bins <= %s, %s, %.1f s", self.lower,
                              "?" if self.upper is None else self.upper, what, elapsed)

    def raise_lower(self, value: int, method: str) -> None:
        if value > self.lower:
            self.lower, self.method = int(value), method
            self.say(f"lower bound by {method}")

    def offer(self, bin_of, source: str) -> None:
        """Accept a packing only after verifying capacity and the item limit."""
        if bin_of is None:
            return
        bad = heuristics.packing_violation(self.lengths, bin_of, self.capacity, self.max_items)
        if bad is not None:
            log.warning("rows: %s packing rejected: %s", source, bad)
            return
        used = int(np.unique(bin_of).size)
        if self.upper is None or used < self.upper:
            self.upper, self.packing = used, np.asarray(bin_of, dtype=np.int64)
            self.stats["upper_source"] = source
            self.say(f"packing by {source}")


def _worst_fit_search(s: _Search, d: int, k_max: int, deadline: float) -> None:
    """Where m binds: WFD into K bins for K a multiple of D between the lower bound and the
    best packing, by bisection on K (WFD's success is not monotone in K, so this finds a K
    that works, not the least)."""
    lo, hi = _ceil_div(s.lower, d), min(_ceil_div(s.upper, d) - 1, k_max // d)   # rows
    tries = 0
    while lo <= hi and time.perf_counter() < deadline:
        rows = (lo + hi) // 2
        bin_of = heuristics.worst_fit_decreasing(s.lengths, s.capacity, rows * d, s.max_items)
        tries += 1
        if bin_of is None:
            lo = rows + 1
        else:
            s.offer(bin_of, "WFD")
            hi = rows - 1
    s.stats["WFD"] = {"bins": s.upper, "tries": tries}


def certify_bins(lengths, capacity: int, num_slots: int = 1, max_items: int | None = None,
                 time_limit: float = 10.0, exact: str = "auto", on_interrupt: str = "raise") -> RowCertificate:
    """Certify R* for lengths T, capacity C, D = ``num_slots`` and item limit m.

    Parameters
    ----------
    lengths
        T[N] (positive integers).
    capacity
        C.
    num_slots
        D; with D = 1, R* is the bin-packing optimum B.
    max_items
        m, or None.
    time_limit
        Seconds for the whole certification (bounds, FFD and BFD always run; with 0 nothing
        else does, and the exact stages are skipped or cut short rather than run past it).
    exact
        ``auto`` (CP-SAT on the arc-flow graph when it is small enough, else the CP-SAT
        assignment model), ``arcflow`` (the former only), ``cpsat`` (the latter only),
        ``highs`` (the arc-flow MIP with HiGHS), or ``none`` (bounds and heuristics only).
    on_interrupt
        A Ctrl-C during the exact stages: ``raise`` (KeyboardInterrupt, once CP-SAT's
        search has stopped) or ``return`` (the bounds and the best packing so far as the
        certificate, ``stats["interrupted"]``; what ``rp-opt certify`` does).
    """
    from ..errors import integer, number, read_array, require
    from ..window import checked_lengths

    start = time.perf_counter()
    deadline = start + number("time_limit", time_limit, 0, hint="seconds")  # 0: bounds and heuristics
    raw = read_array(lengths, "lengths")
    require(raw.ndim == 1, "lengths", f"must be 1-D [N], got shape {raw.shape}")
    lengths = checked_lengths(raw)                       # integers >= 1 (no truncation, no wrap-around)
    c, d = integer("capacity", capacity, 1, int(np.iinfo(np.int64).max)), integer("num_slots", num_slots, 1)
    m = integer("max_items", max_items, 1, none=True)
    require(exact in ("auto", "arcflow", "cpsat", "highs", "none"), "exact",
            f"must be auto, arcflow, cpsat, highs or none, got {exact!r}")
    require(on_interrupt in ("raise", "return"), "on_interrupt", f"must be raise or return, got {on_interrupt!r}")
    n = int(lengths.size)

    def done(status, r_star, lower_rows, upper_rows, method, witness, bins_lo, bins_hi, reason=None, fix=None,
             stats=None):
        return RowCertificate(status, r_star, lower_rows, upper_rows, method, witness, bins_lo, bins_hi,
                              time.perf_counter() - start, reason, fix, stats or {})

    too_long = np.flatnonzero(lengths > c)
    if too_long.size:
        i = int(too_long[0])
        return done(INFEASIBLE, None, None, None, "samples", None, None, None,
                    reason=f"sample {i} has {int(lengths[i])} tokens, more than the cell capacity C={c}"
                           + (f" ({too_long.size} samples are too long)" if too_long.size > 1 else ""),
                    fix=f"raise the capacity to at least {int(lengths.max())} tokens or truncate/drop the "
                        f"{too_long.size} longer sample{'s' if too_long.size > 1 else ''}")
    if m is not None and m >= int(np.searchsorted(np.cumsum(np.sort(lengths)), c, side="right")):
        # no cell holds more than m samples anyway (the m shortest already fill C): the limit
        # binds nothing, and the m-aware models grow with m (m = 10^6 dropped the arc-flow
        # graph of Falkenauer_t60_00 and left it unproven in 5 s, proven in 0.07 s without)
        m = None
    # largest usable bin count: R D <= N, so K <= floor(N / D) D
    k_max = (n // d) * d
    if k_max == 0:
        # which fewer slots work depends on the bins the lengths need: FFD's count (N < D here)
        bins = int(heuristics.first_fit_decreasing(lengths, c, m).max(initial=-1)) + 1
        return done(INFEASIBLE, None, None, None, "samples", None, None, None,
                    reason=f"window has {n} samples for {d} cells (one row of D={d} slots); every cell needs a sample",
                    fix=_fewer_slots(bins, n, d, d - n))

    s = _Search(lengths, c, m)
    t0 = time.perf_counter()
    found = {"L1": bounds.l1_bound(lengths, c), "L2": bounds.l2_bound(lengths, c),
             "cardinality": bounds.cardinality_bound(n, m), "item count": bounds.item_count_bound(lengths, c, m)}
    for name, value in found.items():
        s.raise_lower(value, name)
    s.stats["bounds"] = {**found, "seconds": time.perf_counter() - t0}
    t0 = time.perf_counter()
    s.offer(heuristics.first_fit_decreasing(lengths, c, m), "FFD")
    s.stats["FFD"] = s.upper
    s.offer(heuristics.best_fit_decreasing(lengths, c, m), "BFD")
    s.stats["BFD"] = s.upper
    if not _closed(s, d, n) and n <= MBS_MAX_ITEMS and n * (c + 1) <= MBS_MAX_WORK:
        s.offer(heuristics.minimum_bin_slack(lengths, c, m, deadline), "MBS")
        s.stats["MBS"] = s.upper
    if m is not None and not _closed(s, d, n):
        _worst_fit_search(s, d, k_max, deadline)
    s.stats["heuristic_seconds"] = time.perf_counter() - t0

    def closed() -> bool:
        return _closed(s, d, n)

    def proven_infeasible() -> bool:
        return _ceil_div(s.lower, d) * d > n

    # Ctrl-C during the exact stages (CP-SAT's searches stop at once, HiGHS's solves at
    # their end): raised, or the bounds and the best packing so far are the certificate
    try:
        graph, lp = None, None
        # with no time left (time_limit 0 or spent by the heuristics) the certificate is the
        # bounds and heuristics above: no stage below may start and run past the deadline
        if (not closed() and not proven_infeasible() and exact in ("auto", "arcflow", "highs")
                and time.perf_counter() < deadline):
            if arcflow.estimate_work(lengths, c, m) <= ARCFLOW_MAX_WORK:
                t0 = time.perf_counter()
                try:
                    graph = arcflow.build_graph(lengths, c, m, max_arcs=ARCFLOW_MAX_ARCS, deadline=deadline)
                except arcflow.GraphTooLarge:
                    graph = None
                except OutOfTime:
                    graph = None
                    s.stats.setdefault("skipped", []).append("arc-flow graph: deadline passed while building it")
                s.stats["graph"] = None if graph is None else {"nodes": int(graph.nodes.size), "arcs": graph.num_arcs,
                                                               "seconds": time.perf_counter() - t0}
            if graph is not None:
                # no floor on the LP's time (a 0.5-s floor ran time_limit 0 to 0.5 s and more);
                # lp_bound does not start an LP that cannot finish, nor wait for a late bound
                left = deadline - time.perf_counter()
                lp = arcflow.lp_bound(graph, left)
                if lp is not None:
                    s.stats["arcflow_lp"] = {"value": lp.value, "bound": lp.bound, "seconds": lp.seconds}
                    s.raise_lower(lp.bound, "arc-flow LP")
                    s.say(f"arc-flow LP {lp.value:.6g} ({graph.num_arcs} arcs)")
                else:
                    s.stats["arcflow_lp"] = {"unsolved": f"{max(left, 0.0):.3f} s left for {graph.num_arcs} arcs"}

        # bin-oriented LNS toward K = ceil(lower / D) D bins, where no arc-flow graph (and so no
        # LP diving) is available, or where m binds: the greedy packings are then far from
        # the optimum, and the dives aim at the lower bound only (Hard28_BPP14 as one slot with
        # m = 3: FFD 66 bins for the whole 10 s, while CP-SAT finds 62 in 2 s) (a short share)
        if (not closed() and not proven_infeasible() and s.packing is not None and exact != "none"
                and (graph is None or m is not None)):
            target = min(_ceil_div(s.lower, d) * d, k_max)
            left = deadline - time.perf_counter()
            t0 = time.perf_counter()
            tries: dict = {}
            s.offer(lns.reduce_bins(lengths, c, m, s.packing, target, t0 + min(0.15 * left, 2.0), stats=tries), "LNS")
            s.stats["LNS"] = {"bins": s.upper, "seconds": time.perf_counter() - t0, **tries}

        # exact decision "B <= K" for K = ceil(lower / D) D bins, raising the lower bound on failure
        total = int(np.sum(lengths, dtype=np.int64))
        rng = np.random.default_rng(0)

        def mip_decides(pruned, target: int, seconds: float, **note) -> bool:
            """HiGHS branch-and-bound on the pruned graph for "B <= target": offers its packing,
            raises the lower bound when it proves "Infeasible" (HiGHS works in floating point on
            a 0/1 integer model: the stats say who proved it); True when the target is decided."""
            res = arcflow.solve_mip(pruned, lengths, seconds, min_bins=s.lower, max_bins=target)
            s.stats.setdefault("arcflow_mip", []).append({"target": target, "status": res.status,
                                                          "seconds": res.seconds, **note})
            s.offer(res.bin_of, "arc-flow MIP")
            if res.status == "Infeasible":
                s.raise_lower(target + 1, "exact search")
                s.stats["exact_search_by"] = "HiGHS MIP"
            s.say(f"HiGHS MIP for {target} bins: {res.status} in {res.seconds:.1f} s")
            return closed() or proven_infeasible() or res.status == "Infeasible"

        def dive_until(dive_graph, target: int, dive_end: float) -> None:
            """LP dives toward ``target`` bins on ``dive_graph`` until ``dive_end`` or a
            packing; each failed dive is repaired, every other one resumes from a random
            middle state of the last (its first LPs are the same each time)."""
            t0 = time.perf_counter()
            small = graph.arc_tail.size <= MIP_MAX_ARCS
            dives: dict = {"target": target, "dives": 0}
            resume = None
            while time.perf_counter() < dive_end and not closed():
                share = DIVE_FIX_SHARES[dives["dives"] % len(DIVE_FIX_SHARES)]
                dives["dives"] += 1
                trail: list = []
                s.offer(rounding.dive(dive_graph, lengths, target, dive_end, rng, stats=dives, fix_share=share,
                                      start=resume, trail=trail), "LP diving")
                if not closed() and trail and time.perf_counter() < dive_end:
                    # repair the failed dive: re-decide its last residual plus a few of its
                    # bins exactly (HiGHS MIP on the small sub-instance)
                    s.offer(rounding.repair(graph, lengths, target, trail[-1],
                                            min(dive_end, time.perf_counter() + REPAIR_SECONDS * (1 if small else 4)),
                                            rng, stats=dives, max_arcs=MIP_MAX_ARCS), "LP diving + repair")
                    if closed():
                        break
                resume = None
                if dives["dives"] % 2 == 1 and len(trail) >= 3:
                    resume = trail[int(rng.integers(1, len(trail) - 1))]
            dives["seconds"] = time.perf_counter() - t0
            if dives["dives"]:
                s.stats.setdefault("diving", []).append(dives)
                s.say(f"LP diving toward {target} bins ({dives['dives']} dives, {dives['seconds']:.1f} s)")

        while not closed() and not proven_infeasible() and time.perf_counter() < deadline and exact != "none":
            target = min(_ceil_div(s.lower, d) * d, k_max)
            left = deadline - time.perf_counter()
            pruned = None
            if graph is not None:
                # K bins waste exactly K C - sum T in all: no bin may waste more (arcflow.prune)
                pruned = arcflow.prune(graph, target * c - total)
                # and by reduced cost: only the bins within K - LP of the LP's dual prices
                # (arcflow.prune_by_reduced_cost). Where that alone brings a graph too large
                # for the MIP down to the MIP's size, the MIP gets its share early (Hard28_BPP40
                # and BPP60: 38721 and 26785 item arcs -> 1058 and 1164; the MIP found their
                # packings in 8.8 and 13.2 s, where 60 s of dives and exact searches on the
                # whole graph had not)
                rc_small = False
                if lp is not None:
                    before = pruned.arc_tail.size
                    pruned = arcflow.prune_by_reduced_cost(pruned, lp, target)
                    rc_small = pruned.arc_tail.size <= MIP_MAX_ARCS < before
                    s.stats.setdefault("reduced_cost_pruning", []).append(
                        {"target": target, "arcs_before": int(before), "arcs_after": int(pruned.arc_tail.size)})
                if time.perf_counter() >= deadline:
                    break                                    # pruning a large graph used the last of the time
                if exact == "auto" and pruned.arc_tail.size <= MIP_MAX_ARCS:
                    # a short HiGHS MIP first: where the LP bound is not tight, no dive can reach
                    # K bins, and diving spent half the time limit before the MIP proved it (Scholl
                    # N1C3W2_H: 30 s of a 60-s limit, then 0.03 s of MIP)
                    if mip_decides(pruned, target, min(QUICK_MIP_SECONDS, 0.1 * left), probe=True):
                        continue
                    # the reduced costs brought a large graph to the MIP's size: the MIP for a
                    # share of the time, then the dives (they find different packings: Hard28_BPP40
                    # by the MIP in 8 s, by no dive in 30 s; BPP178 by a dive in 2 s, by no MIP in
                    # 29 s; dives first, for 15 % of the time, delayed the MIP's packings and the
                    # non-IRUP proofs by about 9 s each, and at a 10-s limit proved 15 of 28, not 18)
                    if rc_small and mip_decides(pruned, target, RC_MIP_SHARE * (deadline - time.perf_counter()),
                                                reduced_cost=True):
                        continue
                    left = deadline - time.perf_counter()
                # LP diving toward K bins on the pruned graph (every bin of a K-bin packing is
                # a path of it), up to DIVE_SHARE of the time left
                share = DIVE_SHARE if graph.arc_tail.size <= MIP_MAX_ARCS else DIVE_SHARE_LARGE
                dive_until(pruned if pruned is not None else graph, target, time.perf_counter() + share * left)
                if closed():
                    break
                left = deadline - time.perf_counter()
            hint = None
            if pruned is not None and s.packing is not None and left > 0:
                hint = arcflow.hint_from_bins(pruned, lengths, s.packing)
                left = deadline - time.perf_counter()       # the exact models' budgets end at the deadline
            if left <= 0:
                break                                        # diving used the time: no exact model past the deadline
            if graph is not None and exact == "highs":
                res = arcflow.solve_mip(pruned, lengths, left, min_bins=s.lower, max_bins=target, hint=hint)
                s.stats.setdefault("arcflow_mip", []).append({"target": target, "status": res.status,
                                                              "seconds": res.seconds})
                s.offer(res.bin_of, "arc-flow MIP")
                if res.bound > s.lower:
                    s.stats["exact_search_by"] = "HiGHS MIP"
                s.raise_lower(res.bound, "exact search")
                if res.bin_of is None and res.bound <= s.lower and res.status != "Infeasible":
                    break                                    # time limit without progress
                continue
            if graph is not None and exact in ("auto", "arcflow"):
                if exact == "auto" and pruned.arc_tail.size <= MIP_MAX_ARCS:
                    # HiGHS branch-and-bound on the pruned graph: it proves "not in K bins" where
                    # the LP bound is not tight (Scholl N1C3W2_H, LP = 22, B = 23: 0.03 s)
                    # and CP-SAT stalls; only on small graphs, where its LPs are fast and it keeps
                    # to its time limit (large ones can overrun it by LP solves of seconds)
                    if mip_decides(pruned, target, MIP_SHARE * left):
                        continue
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        break
                res = arcflow.cpsat_decide(pruned, lengths, target, left, hint=hint)
                s.stats.setdefault("arcflow_cpsat", []).append({"target": target, "status": res.status,
                                                                "seconds": res.seconds})
            elif n * target <= CPSAT_MAX_VARS and exact in ("auto", "cpsat"):
                res = cpsat.fits_in_bins(lengths, c, target, m, left, hint=s.packing)
                s.stats.setdefault("cpsat", []).append({"target": target, "status": res.status, "seconds": res.seconds})
            else:
                # no exact model fits (no arc-flow graph, N K above CPSAT_MAX_VARS): the LNS
                # gets the rest of the time (a 16384-sample window with m = 12 stopped at 1.6 s
                # of 10, one row above L1, with the LNS still emptying a bin a try)
                why = []
                if exact in ("auto", "arcflow", "highs"):
                    why.append("no arc-flow graph (too large, or no time to build it)" if graph is None else "")
                if exact in ("auto", "cpsat"):
                    why.append(f"N K = {n} x {target} > {CPSAT_MAX_VARS} assignment variables")
                else:
                    why.append(f"exact={exact} runs no CP-SAT assignment model")
                s.stats["exact_skipped"] = "no exact model: " + "; ".join(w for w in why if w) + (
                    "; the bin-emptying LNS (CP-SAT on a few bins) gets the rest of the time"
                    if graph is None and s.packing is not None and exact != "none" else "")
                if graph is None and s.packing is not None and exact != "none":
                    t0, tries = time.perf_counter(), {}
                    s.offer(lns.reduce_bins(lengths, c, m, s.packing, target, deadline, stats=tries,
                                            seed=1), "LNS")
                    s.stats["LNS_rest"] = {"bins": s.upper, "seconds": time.perf_counter() - t0, **tries}
                break
            s.say(f"exact search for {target} bins: {res.status} in {res.seconds:.1f} s")
            if res.status == "feasible":
                before = s.upper
                s.offer(res.bin_of, "exact search")
                if s.upper == before:
                    break                                    # a packing that failed verification
            elif res.status == "infeasible":
                s.raise_lower(target + 1, "exact search")
                s.stats["exact_search_by"] = "CP-SAT"
            else:
                break
    except KeyboardInterrupt:
        if on_interrupt == "raise":
            raise
        s.stats["interrupted"] = True

    lower_rows = _ceil_div(s.lower, d)
    if proven_infeasible():
        need = lower_rows * d
        fix = _fewer_slots(s.upper, n, d, need - n)
        if s.method == "cardinality":
            # the per-cell limit m, not the lengths, forces the cells (lengths [10, 20, 30],
            # C = 100, m = 1 fit one cell but need three)
            cause = f"with at most m={m} samples per cell, {n} samples need at least {s.lower} cells"
        elif s.method == "item count":
            cause = (f"no cell holds more samples than fit beside its longest one"
                     f"{'' if m is None else f' (nor more than m={m})'}, so {n} samples need at least "
                     f"{s.lower} cells of capacity C={c}")
        else:
            # the arc-flow and exact bounds are for packings with at most m items a bin
            limit = f" with at most m={m} samples per cell" if m is not None and s.method in (
                "arc-flow LP", "exact search") else ""
            cause = f"its lengths need at least {s.lower} cells of capacity C={c}{limit}"
        return done(INFEASIBLE, None, lower_rows, None, s.method, None, s.lower, s.upper,
                    reason=f"window has {n} samples for at least {need} cells: {cause}, so {lower_rows} rows of "
                           f"D={d} slots, and every cell needs a sample", fix=fix, stats=s.stats)
    upper_rows = _ceil_div(s.upper, d) if s.upper is not None else None
    witness = None
    if upper_rows is not None and upper_rows * d > n:
        upper_rows = None                                # packing exists but no R D <= N fits it
    if upper_rows is not None:
        cells = heuristics.expand_bins(s.packing, upper_rows * d)
        bad = heuristics.packing_violation(lengths, cells, c, m, num_bins=upper_rows * d)
        if bad is not None:  # pragma: no cover - expand_bins keeps every property
            raise AssertionError(f"witness layout is invalid: {bad}")
        witness = Layout.from_bins(cells, upper_rows, d)
    if upper_rows is not None and upper_rows == lower_rows:
        return done(OPTIMAL, lower_rows, lower_rows, upper_rows, s.method, witness, s.lower, s.upper, stats=s.stats)
    status = FEASIBLE if witness is not None else NO_SOLUTION
    return done(status, None, lower_rows, upper_rows, s.method, witness, s.lower, s.upper, stats=s.stats)


def _closed(s: _Search, d: int, n: int) -> bool:
    """ceil(lower / D) = ceil(upper / D) and that many rows fit the samples."""
    return s.upper is not None and _ceil_div(s.lower, d) == _ceil_div(s.upper, d) and _ceil_div(s.upper, d) * d <= n


def _fewer_slots(upper: int | None, n: int, d: int, missing: int, shown: int = 4) -> str:
    """The fix of an infeasible window: the slot counts D' other than D whose layout a
    packing into ``upper`` bins guarantees (ceil(U / D') D' <= N: the N samples fill the
    cells), as "at most X" when every count up to X works, else the largest ``shown`` of
    them; or just adding the ``missing`` samples. Not every D' below the largest works:
    [10] * 5 in C = 10 fills D' = 5 or 1, not 2 to 4."""
    more = f"add {missing} sample{'s' if missing > 1 else ''}"
    if upper is None or upper < 1:
        return more
    works = [dd for dd in range(n, 0, -1) if dd != d and _ceil_div(upper, dd) * dd <= n]
    if not works:
        return more
    if works == list(range(works[0], 0, -1)):  # every count up to the largest
        return f"use at most {works[0]} DP slot{'s' if works[0] > 1 else ''} or {more}"
    works = works[:shown]
    counts = " or ".join([", ".join(map(str, works[:-1])), str(works[-1])])
    return f"use {counts} DP slots or {more}"


def certify_rows(window: Window, cluster: Cluster, time_limit: float = 10.0, exact: str = "auto",
                 on_interrupt: str = "raise") -> RowCertificate:
    """Certified minimum row count R* of ``window`` on ``cluster``.

    Parameters
    ----------
    window
        The samples (only the lengths T_i matter).
    cluster
        D = ``cluster.dp``, C = ``cluster.capacity``, m = ``cluster.max_samples_per_cell``.
    time_limit
        Seconds for the whole certification.
    exact, on_interrupt
        Exact model choice and what a Ctrl-C does, see :func:`certify_bins`.

    Returns
    -------
    RowCertificate
        ``optimal`` with ``r_star`` and a witness layout of R* rows; ``feasible`` with bounds
        and a witness when the time ran out; ``infeasible`` with ``reason`` and ``fix``.
    """
    lengths = window.lengths if isinstance(window, Window) else np.asarray(window)
    return certify_bins(lengths, cluster.capacity, cluster.dp, cluster.max_samples_per_cell, time_limit, exact,
                        on_interrupt)


def read_bpplib(path) -> tuple[np.ndarray, int]:
    """Read a BPPLIB instance: line 1 n, line 2 capacity c, then n weights (CRLF allowed)."""
    from ..errors import InputError, require

    try:
        with open(path, "rb") as handle:
            tokens = handle.read().decode("ascii").split()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError("file", f"{path} cannot be read as a BPPLIB text file ({type(exc).__name__})") from None

    def exact_int(token):
        # digits, with a sign and a ".0" at most ("12", "+12", "12.0"); not "1_2" (Python's
        # int() reads 12), "12.0000000000000001" (float() rounds to 12) or "1e3"
        match = re.fullmatch(r"([+-]?[0-9]+)(?:\.0*)?", token)
        if match is not None:
            return int(match.group(1))
        try:
            float(token)
        except ValueError:
            raise InputError("file", f"{path} holds a non-numeric token") from None
        raise InputError("file", f"{path} holds {token!r}, not an integer")

    numbers = [exact_int(t) for t in tokens]
    require(len(numbers) >= 2, "file", f"{path} is not a BPPLIB file (n, capacity, weights)")
    n, cap = numbers[0], numbers[1]
    require(n >= 1, "file", f"{path}: item count {n} must be >= 1")
    require(cap >= 1, "file", f"{path}: capacity {cap} must be >= 1")
    require(len(numbers) - 2 == n, "file", f"{path}: header says {n} items but {len(numbers) - 2} weights follow")
    weights = np.asarray(numbers[2:], dtype=np.int64)
    require(bool(np.all(weights >= 1)), "file", f"{path}: weight {int(weights.min())} must be >= 1")
    big = np.flatnonzero(weights > cap)
    require(big.size == 0, "file", f"{path}: item {int(big[0]) if big.size else 0} has weight "
            f"{int(weights[big[0]]) if big.size else 0}, more than the capacity {cap}")
    return weights, int(cap)
