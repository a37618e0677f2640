"""The production heuristic (solver ``heuristic``): placement, R* and its witness, diverse
seed layouts, then cycles of block-pair search (:mod:`.improve`), population annealing
(:mod:`.anneal`) and placement refinement (:mod:`rp_opt.placement.refine`), with the
report's lower bounds (:mod:`.report`).

Time-limited runs
-----------------
Under a time limit the plan is: placement, R*, the rank-major demand
(:func:`rp_opt.cost.rank_demand_major`), the seeds (the best scoring one is the usual start;
under ``sync``, where the greedy seed sits above the bound mostly by attention, the anchor
seed of :mod:`.anchors` when it scores within 0.1 % of the best), then the block-pair
search (:mod:`.improve`, screened swaps; on two processes by row groups when a core is
free); the anneal runs only to leave a local optimum of the search. Measured
(scripts/bench_heuristic.py, N = 16 to 16384): per second the search lowers the energy
more than the anneal. With ``temperatures=`` (deterministic) the anneal runs first.
While a tenth of the limit is left after a cycle, another cycle starts from the best plan.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace

import numpy as np

from ..bounds import every_placement_row_excess, hidden_seconds, uses_row_maxima
from ..cost import layout_costs, rank_demand_major, rank_major_view
from ..errors import require
from ..objectives import get_objective
from ..result import EVERY_PLACEMENT, INFEASIBLE, NO_SOLUTION, Plan, Result, relative_gap
# rp_opt.rows (with the row certifier's OR-Tools, HiGHS, SciPy: 0.4-0.7 s to import) loads with
# this module, that is in get_solver("heuristic"), not in the first plan's time limit (at
# N = 2048 and 1 s that import was 0.57 s of the plan's 1.43 s); certified_rows still looks
# certify_rows up when it runs
from ..rows import certify_seconds, row_count_reason
from ..solution import Layout, Placement, placement_for
from ..solvers import register_solver
from ..stop import MaxIterations, MaxSeconds, NoImprovement
from ..window import Instance
from .anchors import anchor_seconds
from .anneal import AnnealStats, anneal
from .baseline import proven_status
from .heuristic_options import heuristic_inputs
from .improve import search_layout
from .report import BACKGROUND_SHARE, HIDDEN_SHARE, BackgroundBound, baseline_score, improvement, report_bounds
from .seeds import greedy_seconds, layout_violation, seed_layouts
from .state import Problem, State, load_layouts, make_problem

# progress of a run (INFO, ``rp-opt -v``): a logger of its own, as the exact solver's
progress_log = logging.getLogger("rp_opt.progress")


def default_placement(window, num_ranks: int, load: np.ndarray | None = None) -> tuple[Placement, str]:
    """LPT + swap local search (:mod:`rp_opt.placement`). ``load`` is
    ``window.expert_load()`` when the caller has it (one pass over the demand)."""
    from ..placement.local_search import local_search_ranks
    from ..placement.lpt import lpt_ranks

    load = window.expert_load() if load is None else load
    return Placement(local_search_ranks(load, lpt_ranks(load, num_ranks), num_ranks, None),
                     num_ranks), "lpt+local-search"


def _l1_rows(instance: Instance) -> int:
    """ceil(max(ceil(sum T / C), ceil(N / m)) / D): no layout has fewer rows."""
    window, cluster = instance.window, instance.cluster
    low = -(-int(window.lengths.sum()) // cluster.capacity)
    if cluster.max_samples_per_cell is not None:
        low = max(low, -(-window.num_samples // cluster.max_samples_per_cell))
    return -(-low // cluster.dp)


def _quick_rows(instance: Instance):
    """R* without the certifier when a first-fit packing meets the L1 / cardinality bound:
    a packing into the R*·D cells of R* = ceil(L1 / D) rows proves R*. Tries the
    AReaL-style FFD of :mod:`.baseline` first (no per-cell limit; its layout is also the
    ``ffd`` seed), then the certifier package's FFD. Returns (R*, witness, stats) or None."""
    window, cluster = instance.window, instance.cluster
    rows = _l1_rows(instance)
    if rows * cluster.dp > window.num_samples:
        return None
    if cluster.max_samples_per_cell is None:
        from .baseline import ffd_bins
        bins = ffd_bins(window.lengths, rows * cluster.dp, cluster.capacity)
        if bins is not None and np.bincount(bins, minlength=rows * cluster.dp).min() > 0:
            return rows, Layout.from_bins(bins, rows, cluster.dp), {"rows_method": "L1 = FFD (AReaL ffd)",
                                                                    "rows_status": "optimal"}
    from ..rows.heuristics import expand_bins, first_fit_decreasing

    bins = first_fit_decreasing(window.lengths, cluster.capacity, cluster.max_samples_per_cell)
    if -(-(int(bins.max()) + 1) // cluster.dp) != rows:
        return None
    witness = Layout.from_bins(expand_bins(bins, rows * cluster.dp), rows, cluster.dp)
    return rows, witness, {"rows_method": "L1 = FFD", "rows_status": "optimal"}


def certified_rows(instance: Instance, time_limit: float) -> tuple[int | None, Layout | None, dict]:
    """(rows, witness layout or None, what proved them) for planning ``instance``: R* when
    proven, else the rows of the certifier's witness (:attr:`RowCertificate.rows`; the
    stats say it is not proven). ``rows`` is None when no layout is known; the stats then
    carry ``rows_status`` and ``reason`` (:meth:`RowCertificate.no_rows`)."""
    from ..rows import certify_rows

    quick = _quick_rows(instance)
    if quick is not None:
        return quick
    cert = certify_rows(instance.window, instance.cluster, time_limit)
    if cert.rows is None:
        status, reason = cert.no_rows()
        return None, None, {"rows_method": cert.bound_method, "rows_status": status, "reason": reason}
    if cert.r_star is None:
        return cert.rows, cert.witness, {"rows_method": f"witness, not proven ({cert.status})",
                                         "rows_lower_bound": cert.lower_bound}
    return cert.rows, cert.witness, {"rows_method": cert.bound_method, "rows_status": cert.status}


# most of the time limit the greedy seed may take (by :func:`.seeds.greedy_seconds`), and
# the anchor seed (by :func:`.anchors.anchor_seconds`)
GREEDY_SHARE = 0.3
ANCHOR_SHARE = 0.25


def others_running(samples: int = 5, interval: float = 0.004) -> int | None:
    """Threads of other processes running now: the median over ``samples`` reads of
    /proc/loadavg's running count, less this one; None where there is no such file.

    The 1-min load average lags: after a minute of two busy cores (a benchmark, the
    previous plan) it still reads about 2 when the machine has gone idle, and a plan then
    ran one search process (about 0.13 % worse on the N = 4096 reference window)."""
    counts = []
    try:
        for i in range(samples):
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)
            if i + 1 < samples:
                time.sleep(interval)
    except (OSError, ValueError, IndexError):
        return None
    return max(0, int(np.median(counts)))


@register_solver("heuristic", "LPT placement + diverse seeds + population annealing + block-pair search")
def heuristic(instance: Instance, *, objective="sync", time_limit: float = 5.0, seed: int = 0, warm_start=None,
              placement: Placement | None = None, workers: int | None = None, **options):
    """Production heuristic: placement (LPT + local search, or given), R* and its witness,
    diverse seeds, population annealing of the layout (diversification), then the
    vectorised block-pair search (:mod:`.improve`) on the anneal's best layout.

    The time limit covers everything that makes the plan: placement, R*, rank demand,
    seeds, anneal, search, scoring and the lower bounds. The identity + ffd baseline
    (``report_baseline``, default True) is only for the report: it runs after the plan,
    reuses the ffd seed, and its time is ``stats["report_seconds"]`` (not in ``seconds``).

    Options: ``replicas`` (K, default 32, at most 4096), ``candidates`` (moves drawn per
    replica per step, 4, at most 1024; replicas x candidates at most 2^16),
    ``steps_per_temperature`` (20; a time-limited anneal stops at its limit inside a
    temperature too), ``temperatures`` (fixed number of temperature
    steps: deterministic schedule; the search then runs ``search_evaluations`` block pairs,
    default 200), ``anneal_share`` (share of the packing time for the first anneal; default
    0 without ``temperatures``: the search starts from the best seed; 0.3 with them; an
    anneal from the search's local optimum and the seeds runs, with at least 0.3 of the
    time left, whenever the search stops at one), ``no_improvement`` (N: every anneal round
    also stops after N temperature steps without a better plan, and a round that it stops
    without one ends the run, ``stats["stopped"]``; so a long limit need not be used up),
    ``seeds`` (seed rules,
    default witness, ffd, kk, blocks, blocks-kk, greedy when it fits the budget, and anchors
    (:mod:`.anchors`) when the primary is a sum over rows of maxima such as ``sync``),
    ``anchor_margin`` (the search starts from the anchor seed when its energy is within
    this fraction of the best seed's, default 0.001),
    ``num_rows``, ``search`` (default True), ``search_cap`` (at most that many samples of a
    block per evaluation, default None: whole blocks), ``search_screen`` (swaps evaluated
    exactly per block pair after the lower-bound screen, default 32; None: all),
    ``refine`` (after the search, refine the placement for the layout,
    :mod:`rp_opt.placement.refine`, and search again under it; kept only when the exact
    energy falls; default on when the placement is not given),
    ``refine_share`` (share of the packing time for it, 0.4), ``regroup`` (every seed also
    with its cells regrouped whole, :mod:`.regroup`; default None: on when the primary's
    first aggregate is a maximum of sums such as ``shard``; unless it is False, after each
    search (also the placement refinement's) the blocks are arranged whole for
    that aggregate when it is a sum of maxima or a maximum of sums, the time counted in
    ``timings["search"]``), ``refine_rounds`` (per cycle, 1),
    ``refine_sweeps`` (swap sweeps with a fixed schedule, 20), ``cycles`` (true: while a
    tenth of the limit is left after the refinement, another cycle of anneal, search and
    refinement from the best plan, unless ``search_evaluations`` caps the searches;
    ``stats["cycles"]`` counts them),
    ``search_workers`` (processes of the block search; default: ``workers`` with
    ``temperatures`` or when no other thread runs now (:func:`others_running`; the 1-min
    load average where that cannot be read) so that a core is free, else 1), ``surrogate`` (0.05), ``reserve`` (seconds
    kept for the final scoring, default 0.04 * time_limit plus the time the lower bounds
    took less the row excess for every placement: what a refined placement computes
    again), ``background_bound`` (false; true: under a primary of row maxima, the row excess
    for every placement too slow for a tenth of the limit runs in a process of its own
    beside the search when it fits :data:`BACKGROUND_SHARE` of it, for a tighter reported
    bound at a slightly worse plan; ``stats["hidden_background"]`` says whether it was
    ready). Every value is checked before
    anything runs (:mod:`.heuristic_options`): a bad one is a one-line
    :class:`~rp_opt.errors.InputError` naming the option.

    Repeatability: by default the run is time-limited, so how much work it does (anneal
    steps, block pairs searched) depends on the machine's speed and load, and two runs with
    the same ``seed`` may return different plans. With ``temperatures=N`` the schedule is
    fixed (N temperature steps, ``search_evaluations`` block pairs, ``refine_sweeps``): the
    same seed and worker count give the same plan, and the run does that work (every seed
    rule included) whatever ``time_limit`` says; only the R* certificate before it keeps
    to the limit (with less time it may prove less and start from another witness).
    ``stats["deterministic"]`` says which kind of run it was.

    The result is never worse (by the exact tuple) than the best seed, nor than the warm
    start. ``stats["best_from"]`` says what made it: ``seed`` (a seed layout, unchanged;
    ``search_start`` names the search's), ``warm_start``, ``anneal``, ``search`` or
    ``refine`` (the search under a refined placement), or ``witness`` (the R* witness,
    after a Ctrl-C during the set-up); ``temperatures``, ``steps``,
    ``proposals`` and ``accepted`` are summed over the ``anneal_rounds`` rounds that
    annealed (of ``rounds``); ``stopped`` says why the run ended.

    Ctrl-C (KeyboardInterrupt) during the anneal, the search or a refine round ends the run
    with the best plan found so far (``stats["interrupted"]``; worker processes leave the
    signal to this one and exit quietly); during the set-up (R*, seeds, bounds), with the
    best layout built by then (the seeds, else the certifier's witness) under the placement
    at hand (``stats["interrupted_in"]``), and before there is one the KeyboardInterrupt
    propagates.
    """
    started = time.perf_counter()
    time_limit, seed, workers, options = heuristic_inputs(time_limit, seed, workers, options)
    run = _Run(instance, get_objective(objective), time_limit, seed, options, started)
    try:
        run.choose_placement(warm_start, placement)
        for step in (run.choose_rows, run.build_seeds):
            no_plan = step()        # the Result of a window with no row count or no seed
            if no_plan is not None:
                return no_plan
        run.build_problem()
        run.add_seed_variants()
        run.schedule(workers)
    except KeyboardInterrupt:
        # Ctrl-C in the set-up (R*, seeds, bounds: seconds at N = 16384): the best layout
        # built so far under the placement at hand; nothing to return before one exists
        interrupted = run.setup_interrupted()
        if interrupted is None:
            raise
        return interrupted
    while True:
        # a cycle: packing rounds (anneal, block search), then rounds of placement
        # refinement; another cycle from the best plan while a tenth of the limit is left
        # (a small window's searches end at local optima long before the limit: the
        # README's default window, 10 s, ended at 6.5 s)
        run.packing_rounds()
        run.refinement_rounds()
        run.cycles += 1
        if not run.next_cycle():
            break
    run.stats["cycles"] = run.cycles
    return run.result()


class _Stale(NoImprovement):
    """:class:`~rp_opt.stop.NoImprovement` that remembers whether its last call said stop
    (so that a round knows whether ``no_improvement`` or its time share ended its anneal)."""

    fired = False

    def __call__(self, best) -> bool:
        self.fired = super().__call__(best)
        return self.fired


class _Run:
    """What one :func:`heuristic` run shares between its phases: the set-up (placement,
    rows, rank demand, seeds, problem and bounds, schedule), the cycles of packing rounds
    and placement refinement, and the result. Each phase is a method, in that order."""

    def __init__(self, instance: Instance, objective, time_limit: float, seed: int, options: dict, started: float):
        self.instance, self.objective, self.options = instance, objective, options
        self.time_limit, self.seed, self.started = time_limit, seed, started
        self.window, self.cluster = instance.window, instance.cluster
        self.stats: dict = {}
        self.timings: dict = {}
        self.bound_stats: dict = {}
        self.warm_layout: Layout | None = None
        # a fixed schedule (``temperatures``): the same work whatever the limit
        self.deterministic = options.get("temperatures") is not None
        self.background: BackgroundBound | None = None
        # the search so far: the best layout, its energy and what made it (``best_from``),
        # the seeds' and the first anneal's energies, rounds (all cycles), refinement rounds,
        # cycles
        self.best, self.best_energy, self.best_from = None, np.inf, None
        self.seed_energy, self.anneal_energy = None, None
        # every anneal round's figures summed (``stats["temperatures"]`` ...), and the rounds
        # that annealed (the first round of a time-limited run starts from the best seed)
        self.anneal_total, self.anneal_rounds = AnnealStats(), 0
        # the best seed (name, layout, energy, and the placement and rank demand it was scored
        # under): a candidate for the result, since the search may start from another seed
        # (the anchor seed, ``anchor_margin``) and end above it
        self.best_seed: tuple | None = None
        self.search_stats: dict = {}
        self.rounds = self.refine_rounds = self.cycles = 0
        self.overrun = 0.0
        # ``no_improvement``: the anneal's criterion of the current round, and why the run
        # ended (``stats["stopped"]``)
        self.stale: _Stale | None = None
        self.stopped: str | None = None
        # the set-up phase running now (for a Ctrl-C in it, ``stats["interrupted_in"]``)
        self.phase = "placement"
        self.placement = self.witness = self.seeds = self.demand = self.lower_bounds = None
        self.others, self.others_read = None, False                   # others_running(), once
        # Ctrl-C (KeyboardInterrupt) during the anneal, a search or a refine round ends the
        # run with the best plan so far (stats["interrupted"]); the workers leave it to us
        self.interrupted = False
        self._said = np.inf  # the energy of the last progress line

    # -- set-up ---------------------------------------------------------------------------

    def choose_placement(self, warm_start, placement: Placement | None) -> None:
        """The placement: given, the warm start's, or LPT + local search; and the window's
        expert load (one pass over the demand, for the placement and the bounds)."""
        window, cluster, stats = self.window, self.cluster, self.stats
        if warm_start is not None:
            require(isinstance(warm_start, Plan), "warm_start", f"must be a Plan, got {type(warm_start).__name__}")
            require(warm_start.layout.cell_of.size == window.num_samples, "warm_start",
                    f"places {warm_start.layout.cell_of.size} samples, the window has N={window.num_samples}")
            if placement is None:
                placement = warm_start.placement
                stats["placement"] = "warm start"
            self.warm_layout = warm_start.layout
        t = time.perf_counter()
        self.load = window.expert_load()
        if placement is None:
            placement, stats["placement"] = default_placement(window, cluster.ep, self.load)
        else:
            placement = placement_for(placement, cluster.ep,
                                      "warm_start" if stats.get("placement") == "warm start" else "placement",
                                      window.num_layers, window.num_experts)
            stats.setdefault("placement", "given")
        self.placement = placement
        self.timings["placement"] = time.perf_counter() - t

    def choose_rows(self) -> Result | None:
        """R (given, the warm start's, or R* certified within half a second of the limit)
        and the certifier's witness; the Result of the run when there is no row count to
        plan with."""
        window, cluster, stats, options = self.window, self.cluster, self.stats, self.options
        self.phase = "rows"
        t = time.perf_counter()
        if options.get("num_rows") is not None:
            num_rows, witness, row_stats = int(options["num_rows"]), None, {"rows_method": "given"}
        elif self.warm_layout is not None and options.get("trust_warm_rows", False):
            num_rows, witness, row_stats = self.warm_layout.num_rows, None, {"rows_method": "warm start"}
        else:
            num_rows, witness, row_stats = certified_rows(self.instance, certify_seconds(self.time_limit, 0.5))
        stats.update(row_stats)
        empty = None if num_rows is None else row_count_reason(window.lengths, num_rows, cluster.dp,
                                                               cluster.capacity, cluster.max_samples_per_cell)
        if empty:
            # a given R that counting rules out (R*D > N, or fewer cells than a bin bound needs)
            stats.update(rows_status=INFEASIBLE, reason=empty)
            num_rows = None
        if num_rows is None:
            # no row count to plan with: infeasible (proven) or no_solution, like every planner
            return Result(stats.pop("rows_status"), None, (), None, time.perf_counter() - self.started,
                          "heuristic", stats)
        # R* only when this run proved it; a given or warm-start R, or a witness's unproven
        # rows, is what the layout uses, not R*
        stats["num_rows"] = num_rows
        if stats.get("rows_status") == "optimal":
            stats["r_star"] = num_rows
        self.num_rows, self.witness = num_rows, witness
        self.timings["rows"] = time.perf_counter() - t
        return None

    def build_seeds(self) -> Result | None:
        """The rank-major demand, then the seed layouts of the seed rules (and the warm
        start's layout); the Result of the run when no seed could be built."""
        instance, window, cluster, options = self.instance, self.window, self.cluster, self.options
        num_rows, witness = self.num_rows, self.witness
        self.phase = "rank demand"
        t = time.perf_counter()
        self.major = rank_demand_major(window, self.placement)                  # [N, P*L] int32
        self.demand = rank_major_view(self.major, window.num_layers)            # [N, L, P] view, no copy
        self.timings["rank_demand"] = time.perf_counter() - t
        self.phase = "seeds"
        t = time.perf_counter()
        # under a time limit the later (costlier) seed rules wait for time left: from 60 % of
        # the limit on, no further rule starts (N = 16384 at 1 s: the fixed phases alone took
        # 1.05 s with every rule); a fixed schedule (temperatures) builds every seed
        self.seeds_deadline = None if self.deterministic else self.started + 0.6 * self.time_limit
        rules = options.get("seeds")
        if rules is None:
            rules = ["witness", "ffd", "blocks", "kk", "blocks-kk"]
            # the expert-aware greedy costs O(N R G L P): only when it takes at most 0.3 of the
            # budget. It is the best seed on the production windows of scripts/bench_heuristic.py
            # (docs/benchmarks.md: N = 4096 at 5 s, 0.55 % above the bound with it, 0.72 %
            # without; N = 1024 at 2 s and N = 2048 or 8192 at 5 s also gain); at 0.36-0.41 of
            # the budget (N = 4096 at 1 s, 8192 at 3 s) it won one run and lost the next
            # (a fixed schedule does its work whatever the limit: the greedy too)
            if self.deterministic or greedy_seconds(instance, num_rows, cluster.ep) <= GREEDY_SHARE * self.time_limit:
                rules.append("greedy")
            # a sum over rows of maxima (sync): the anchor seed (:mod:`.anchors`) builds the rows
            # of like blocks that the search does not reach from the other seeds; it is decided
            # after the bounds (:func:`_anchors_pay`)
            self.probe_anchors = _row_maxima(self.objective)
        else:
            self.probe_anchors = False
        reuse_witness = self.stats.get("rows_method") == "L1 = FFD (AReaL ffd)"
        if witness is not None and reuse_witness and "ffd" in rules:
            # the witness IS the AReaL ffd layout (same rule, same R*·D bins): reuse it
            # (the ffd rule runs as the witness rule, even when ``seeds`` names no witness)
            seeds = seed_layouts(instance, num_rows, self.demand, witness,
                                 tuple(dict.fromkeys("witness" if r == "ffd" else r for r in rules)),
                                 self.seeds_deadline)
            # renamed in place: the order of the seeds is the order of the replicas' starts
            seeds = {("ffd" if name == "witness" else name): layout for name, layout in seeds.items()}
        else:
            seeds = seed_layouts(instance, num_rows, self.demand, witness, tuple(rules), self.seeds_deadline)
        if self.warm_layout is not None:
            why = layout_violation(instance, self.warm_layout, num_rows)
            require(why is None, "warm_start", f"is not a valid layout of R*={num_rows} rows: {why}")
            seeds = {"warm_start": self.warm_layout, **seeds}
        if not seeds and witness is not None and witness.num_rows == num_rows and "witness" not in rules:
            # the rules asked for built nothing (``seeds=anchors`` at a tight capacity): the R*
            # certificate's witness is a layout of these rows, and a plan beats no_solution
            seeds = {"witness": witness}
            self.stats["seeds_fallback"] = f"no layout from the seed rules {', '.join(rules)}: the R* witness"
        self.timings["seeds"] = time.perf_counter() - t
        if not seeds:
            self.stats["reason"] = (f"no seed layout of R={num_rows} rows could be built "
                                    f"(seed rules: {', '.join(rules)})")
            return Result(NO_SOLUTION, None, (), None, time.perf_counter() - self.started, "heuristic", self.stats)
        self.seeds = seeds
        return None

    def build_problem(self) -> None:
        """The kernel's problem and the report's lower bounds (the row excess for every
        placement in the report where it fits a tenth of the limit on the machine as loaded
        now, else, with ``background_bound``, beside the search where it fits most of it)."""
        instance, window, cluster, options = self.instance, self.window, self.cluster, self.options
        self.phase = "bounds"
        # the row excess for every placement (a primary of row maxima and a full-length
        # sample, else it is 0) where it fits a tenth of the limit on the machine as loaded
        # now (:func:`hidden_seconds`; beside others' numpy runs it took 3-5 times as long;
        # the load is read outside the bounds' time, which the reserve counts)
        applies = uses_row_maxima(self.objective, cluster.edp) and bool(np.any(window.lengths == cluster.capacity))
        idle = hidden_seconds(instance)
        inline = applies and idle <= HIDDEN_SHARE * self.time_limit \
            and hidden_seconds(instance, self._others()) <= HIDDEN_SHARE * self.time_limit
        t = time.perf_counter()
        self.problem = make_problem(instance, self.major, self.num_rows, self.objective)
        if (applies and not inline and not self.deterministic and options.get("background_bound", False)
                and idle <= BACKGROUND_SHARE * self.time_limit and (os.cpu_count() or 1) > 1):
            self.background = BackgroundBound(instance, self.num_rows, self.load)
        # timed apart: it depends on no placement, so a refined placement's bounds reuse it
        # (_adopt) and the reserve leaves it out (l4k.npz, N = 4096: 0.3-0.9 s of the 2-s
        # plan's bounds)
        every_row_excess = None
        if inline:
            h = time.perf_counter()
            every_row_excess = every_placement_row_excess(instance, self.num_rows, None, self.load)
            self.timings["hidden_bound"] = time.perf_counter() - h
        self._set_bounds(every_row_excess)
        self.timings["bounds"] = time.perf_counter() - t
        self.names = list(self.seeds)
        self.starts = [self.seeds[name].cell_of for name in self.names]

    def _set_bounds(self, every_row_excess: float | None = None) -> None:
        """The report's bounds for the current placement, with ``every_row_excess`` (the
        row excess for every placement, placement-free; None: left out of them)."""
        # (hidden_budget 0: build_problem decides on the row excess for every placement)
        bound_stats = report_bounds(self.instance, self.placement, self.num_rows, self.objective, self.demand,
                                    baseline=False, load=self.load, hidden_budget=0.0,
                                    every_row_excess=every_row_excess)
        bound_stats.pop("analytic_bounds")
        self.every_row_excess = bound_stats.pop("every_row_excess")
        self.lower_bounds = bound_stats.pop("lower_bounds")
        self.bound_stats = bound_stats

    def add_seed_variants(self) -> None:
        """Every seed also with its cells regrouped whole (``regroup``), and the anchor seed
        where the probe says it pays (:func:`_anchors_pay`)."""
        instance, options, problem = self.instance, self.options, self.problem
        self.phase = "seed variants"
        regroup = options.get("regroup")
        # the primary's first aggregate decides (regroup_cells and arrange_blocks arrange for it)
        first = problem.aggregates[0]
        if regroup is None:
            # measured (docs/benchmarks.md, twelfth session): for a max of sums (shard) the
            # regrouped seeds win (N = 4096 at 5 s: 0.50 % -> 0.18 % above the bound); for a sum
            # of maxima (sync) they start lower but the search from them ends higher at N = 8192
            # and 16384 (4.15 -> 4.66 %, 4.56 -> 4.83 %)
            regroup = first.inner == "sum" and first.outer == "max"
        if regroup and problem.per_shard > 1:
            # every seed also with its cells regrouped whole into blocks of like attention
            # (:mod:`.regroup`): sample moves cannot undo a block that mixes full-length cells
            # with cells of several samples
            from .regroup import regroup_cells

            t = time.perf_counter()
            # each rule's copy right after it: with fewer replicas than starts the anneal loads
            # the first ones, and the best-ranked rules keep their regrouped copy
            self.names, self.starts = [], []
            for rule in self.seeds:
                self.names += [rule, f"{rule}+regroup"]
                self.starts += [self.seeds[rule].cell_of, regroup_cells(problem, self.seeds[rule].cell_of)]
            self.timings["regroup"] = time.perf_counter() - t
        if self.probe_anchors:
            t = time.perf_counter()
            probe = self.seeds.get("greedy", next(iter(self.seeds.values())))
            split = self.lower_bounds.gap_split(layout_costs(instance, self.placement, probe, self.demand),
                                                self.objective)
            self.stats["anchor_probe"] = {key: float(split[key]) for key in ("attention", "expert")}
            affordable = self.deterministic or \
                anchor_seconds(self.num_rows * self.cluster.dp) <= ANCHOR_SHARE * self.time_limit
            if _anchors_pay(split) and affordable and (self.seeds_deadline is None
                                                       or time.perf_counter() < self.seeds_deadline):
                more = seed_layouts(instance, self.num_rows, self.demand, None, ("anchors",))
                if more:
                    self.seeds.update(more)
                    self.names.append("anchors")
                    self.starts.append(more["anchors"].cell_of)
            self.timings["seeds"] += time.perf_counter() - t

    def schedule(self, workers: int | None) -> None:
        """How the packing time is spent: replicas and processes, the anneal's share and
        stopping rule, the search's processes and deadline, the refinement's share."""
        options, time_limit, deterministic = self.options, self.time_limit, self.deterministic
        self.phase = "schedule"
        self.replicas = int(options.get("replicas", 32))
        workers = os.cpu_count() or 1 if workers is None else int(workers)
        self.workers = max(1, min(workers, self.replicas))
        self.do_search = bool(options.get("search", True)) and self.problem.num_pairs > 1
        # time left for the packing, less a reserve for what follows the last search: the final
        # scoring (one full evaluation) and, when a refined placement is adopted, its bounds
        # again (as long as the first time, 0.09-0.16 s at N = 16384, less the row excess for
        # every placement, which it reuses: with it the reserve took 0.9 s of the 2-s plan of
        # l4k.npz, N = 4096, and its search never ran)
        again = self.timings["bounds"] - self.timings.get("hidden_bound", 0.0)
        self.reserve = float(options.get("reserve", 0.04 * time_limit + again))
        self.stats["reserve"] = self.reserve
        remaining = max(time_limit - (time.perf_counter() - self.started) - self.reserve, 0.05)
        # measured (scripts/bench_heuristic.py, N = 16..16384): the block search gains more per
        # second than the anneal, so the first round starts from the best seed; the anneal runs
        # when the search stops at a local optimum (diversification)
        self.share = float(options.get("anneal_share", 0.3 if deterministic else 0.0)) if self.do_search else 1.0
        search_workers = options.get("search_workers")
        if search_workers is None:
            # a second search process only pays when a core is free (measured: under a full
            # machine the session gets the same CPU time with one or two processes); with a fixed
            # schedule it is ``workers`` (deterministic for a seed and a worker count)
            read = self.others_read                           # (read before this plan's own bound started)
            others = self._others()
            if others is not None and not read and self.background is not None and self.background.running():
                others -= 1                                    # this plan's own bound
            if others is None:
                free = not hasattr(os, "getloadavg") or os.getloadavg()[0] <= (os.cpu_count() or 1) - 1
            else:
                free = others <= (os.cpu_count() or 1) - 2
            search_workers = self.workers if deterministic or free else 1
        self.search_workers = int(search_workers)
        self.run_limit = None
        if deterministic:
            self.stop = self._with_stale(MaxIterations(int(options["temperatures"])))
        else:
            self.run_limit = max(self.share * remaining, 0.02)
            self.stop = self._with_stale(MaxSeconds(self.run_limit))
        self.skip_anneal = self.share == 0.0
        self.deadline = None if deterministic else self.started + time_limit - self.reserve
        # placement refined for the found layout, then more search (``refine``): the last
        # ``refine_share`` of the packing time. On by default unless the caller fixed the
        # placement; measured on the N = 4096 ling-flash-like window (docs/benchmarks.md) it
        # lowers the primary by 0.03-0.12 % of the bound at 5 s and 0.15-0.22 % at 20 s
        default_refine = self.stats.get("placement") not in ("given", "warm start")
        self.do_refine = bool(options.get("refine", default_refine)) and self.do_search
        self.refine_share = float(options.get("refine_share", 0.4))
        self.final_deadline = self.deadline
        if self.do_refine and self.deadline is not None:
            self.deadline = self.deadline - self.refine_share * remaining
        self.timings["anneal"] = self.timings["search"] = self.timings["refine"] = 0.0
        self.stats["refine"] = []
        self.tag = f"heuristic {self.objective.name}, N = {self.window.num_samples}, R = {self.num_rows}"

    def setup_interrupted(self) -> Result | None:
        """The Result of a run that a Ctrl-C stopped in its set-up: the best layout built so
        far (the seeds, else the certifier's witness and the warm start's layout) under the
        placement at hand, scored exactly, with the bounds when they were computed;
        ``stats["interrupted"]`` and ``stats["interrupted_in"]`` (the phase). None when there
        is no placement or no layout yet."""
        instance, objective, stats = self.instance, self.objective, self.stats
        if self.placement is None:
            return None
        layouts = dict(self.seeds or {})
        if not layouts:
            num_rows = getattr(self, "num_rows", None)
            if self.witness is not None:
                layouts["witness"] = self.witness
            if (self.warm_layout is not None and num_rows is not None
                    and layout_violation(instance, self.warm_layout, num_rows) is None):
                layouts["warm_start"] = self.warm_layout
        if not layouts:
            return None
        if self.background is not None:
            self.background.close()
        # one full evaluation each (the seeds: about 7 of them), least exact tuple first
        scored = {name: objective.evaluate(layout_costs(instance, self.placement, layout, self.demand))
                  for name, layout in layouts.items()}
        name = min(scored, key=scored.get)
        value, layout = scored[name], layouts[name]
        bound, level_bounds = None, None
        if self.lower_bounds is not None:
            stats.update(self.bound_stats)
            bound, level_bounds = stats["lower_bound"], self.lower_bounds.objective(objective)
            stats["bound_scope"] = EVERY_PLACEMENT
        stats.update(objective=objective.name, interrupted=True, interrupted_in=f"set-up ({self.phase})",
                     stopped="interrupted (Ctrl-C)", best_from=name if name in ("witness", "warm_start") else "seed",
                     search_start=name, seeds=list(layouts), deterministic=self.deterministic, timings=self.timings)
        return Result(proven_status(value, level_bounds), Plan(self.placement, layout, objective.name, value, stats),
                      value, bound, time.perf_counter() - self.started, "heuristic", stats)

    def _others(self) -> int | None:
        """:func:`others_running`, read once a run (the bounds and the search's processes
        both ask; each read takes about 16 ms)."""
        if not self.others_read:
            self.others, self.others_read = others_running(), True
        return self.others

    def _with_stale(self, stop):
        """A round's anneal criterion ``stop``, or'ed with ``no_improvement`` (temperature
        steps without a better plan) when it is set: in every round, so that a run with a
        long limit ends once an anneal round stops improving (:meth:`packing_rounds`)."""
        self.stale = None
        if self.options.get("no_improvement"):
            self.stale = _Stale(int(self.options["no_improvement"]))
            return stop | self.stale
        return stop

    def progress(self, what: str, energy: float, always: bool = False) -> None:
        """One progress line when the best energy fell (or ``always``): the phase, the
        best energy (the scalar that orders plans as the objective does; about the
        primary), the primary's bound and the seconds."""
        if energy < self._said or always:
            self._said = energy
            progress_log.info("%s: %s: energy %.8g (bound %.8g), %.1f s", self.tag, what, energy,
                              self.bound_stats.get("lower_bound", float("nan")), time.perf_counter() - self.started)

    # -- a cycle --------------------------------------------------------------------------

    def packing_rounds(self) -> None:
        """Rounds of population annealing from the best so far and the seeds
        (diversification), then the block-pair search from the anneal's best
        (intensification); another round only when the search stopped at a local optimum
        with time left. With ``no_improvement``, an anneal round that it stops without a
        better plan ends the run (``stats["stopped"]``)."""
        options, seed = self.options, self.seed
        while True:
            before = self.best_energy
            annealed = not (self.skip_anneal and self.best is None)
            found, energy, astats = self._anneal()
            self.timings["anneal"] += astats.seconds
            self._count_anneal(astats, annealed)
            label = "anneal"
            if self.seed_energy is None:
                self.seed_energy = dict(zip(self.names, astats.start_energies or []))
                self.anneal_energy = energy
                if self.seed_energy:
                    rule = min(self.seed_energy, key=self.seed_energy.get)
                    self.progress(f"best seed {rule}", self.seed_energy[rule])
                    self.best_seed = (rule, np.asarray(self.starts[self.names.index(rule)], dtype=np.int64),
                                      self.seed_energy[rule], self.placement, self.demand,
                                      self.stats.get("placement"))
                    # no anneal, or one that did not go below its best start: a seed is the plan
                    start = self.stats.get("search_start", rule) if not annealed else rule
                    if not annealed or not energy < self.seed_energy[rule]:
                        label = "warm_start" if start == "warm_start" else "seed"
            if energy < self.best_energy:
                self.best, self.best_energy, self.best_from = found, energy, label
            self.rounds += 1
            if annealed:
                self.progress(f"anneal, round {self.rounds}", self.best_energy)
            self.interrupted = astats.interrupted
            if self.interrupted or not self.do_search:
                return
            if annealed and self.stale is not None and self.stale.fired and before < np.inf and not energy < before:
                # the anneal from the best plan found nothing better in ``no_improvement``
                # temperature steps: the search from it would end where it started
                self.stopped = (f"no_improvement: the anneal of round {self.rounds} ran "
                                f"{self.stale.iterations} temperature steps without a better plan")
                return
            if self.deadline is not None and time.perf_counter() >= self.deadline:
                # the phases before it (placement, R*, rank demand, seeds, bounds) took the time: a
                # search would only build its state and stop, past the limit (0.1 s at N = 8192, 1 s)
                self.search_stats = self.search_stats or {"skipped": "deadline passed before the search"}
                return
            t = time.perf_counter()
            before = self.best_energy
            try:
                found, energy, self.search_stats = search_layout(
                    self.problem, self.best, deadline=self.deadline, seed=seed + 1000 * self.rounds,
                    workers=self.search_workers, **_search_settings(options, self.deterministic))
            except KeyboardInterrupt:  # outside the search's own loop (its set-up or teardown): the anneal's best
                found, energy, self.search_stats = self.best, self.best_energy, {"interrupted": True}
            if energy <= self.best_energy:
                self.best, self.best_energy = found, energy
            if not self.search_stats.get("interrupted"):
                self.best, self.best_energy = _arrange_after_search(self.problem, self.best, self.best_energy,
                                                                    options, self.search_stats)
            if self.best_energy < before:
                self.best_from = "search"
            if self.deadline is not None:
                # a search returns after its deadline by its last block pair and its own teardown;
                # the refinement's search ends that much earlier
                self.overrun = max(self.overrun, time.perf_counter() - self.deadline)
            self.timings["search"] += time.perf_counter() - t
            self.progress(f"block search, round {self.rounds}", self.best_energy)
            left = (self.started + self.time_limit - self.reserve) - time.perf_counter()
            self.interrupted = bool(self.search_stats.get("interrupted"))
            if (self.interrupted or self.deterministic or not self.search_stats.get("local_optimum")
                    or left < 0.1 * self.time_limit):
                return
            # the search is at a local optimum: diversify with an anneal from it and the seeds
            self.run_limit = max(self.share, 0.3) * left
            self.stop = self._with_stale(MaxSeconds(self.run_limit))

    def _count_anneal(self, astats: AnnealStats, annealed: bool) -> None:
        """Adds a round's anneal figures to the run's (``stats["temperatures"]``, ``steps``,
        ``proposals``, ``accepted``: sums over the rounds that annealed)."""
        total = self.anneal_total
        total.temperatures += astats.temperatures
        total.steps += astats.steps
        total.proposals += astats.proposals
        total.accepted += astats.accepted
        total.seconds += astats.seconds
        if annealed:
            self.anneal_rounds += 1
            total.t_start, total.t_end = astats.t_start, astats.t_end

    def _anneal(self) -> tuple[np.ndarray, float, AnnealStats]:
        """The round's anneal from the best so far and the seeds; the best seed (no anneal)
        for the first round of a run that starts with the search."""
        options = self.options
        if self.skip_anneal and self.best is None:
            found, energy, astats = _best_start(self.problem, self.starts)
            found, energy, self.stats["search_start"] = _preferred_start(
                self.names, self.starts, astats.start_energies, found, energy,
                float(options.get("anchor_margin", 1e-3)))
            return found, energy, astats
        starts = self.starts if self.best is None else [self.best] + self.starts
        try:
            return anneal(self.problem, starts, replicas=self.replicas, workers=self.workers,
                          seed=self.seed + 1000 * self.rounds, stop=self.stop, time_limit=self.run_limit,
                          temperatures=int(options.get("temperatures") or 60),
                          steps_per_temperature=int(options.get("steps_per_temperature", 20)),
                          candidates=int(options.get("candidates", 4)))
        except KeyboardInterrupt:
            # Ctrl-C outside the anneal's own loop (its set-up or teardown): the best start
            found, energy, astats = _best_start(self.problem, starts)
            astats.interrupted = True
            return found, energy, astats

    def refinement_rounds(self) -> None:
        """Rounds of (refine the placement for the layout, search the layout again) until
        the time is up, a round is not adopted, or ``refine_rounds`` rounds ran."""
        options = self.options
        per_cycle = int(options.get("refine_rounds", 1))
        cycle_refines = 0
        while self.do_refine and not self.interrupted and self.stopped is None:
            t = time.perf_counter()
            left = None if self.final_deadline is None else self.final_deadline - self.overrun - t
            if left is not None and left <= self.timings["rank_demand"]:
                # the round's placement refinement gets half of what summing the block demand and
                # the new rank demand (each about the rank demand's time) leave: nothing, so it
                # would end after that sum with no swap, past the limit (0.2-0.4 s at N = 8192-16384)
                self.stats["refine_skipped"] = (f"{max(left, 0.0):.2f} s left, the rank demand took "
                                                f"{self.timings['rank_demand']:.2f} s")
                return
            end = None if left is None else t + left / max(1, per_cycle - cycle_refines)
            try:
                refined = _refine_round(self.instance, self.objective, self.placement, self.problem, self.best,
                                        self.best_energy, end, seed=self.seed + self.refine_rounds,
                                        deterministic=self.deterministic, options=options,
                                        search_workers=self.search_workers,
                                        rank_demand_seconds=self.timings["rank_demand"])
            except KeyboardInterrupt:  # in the placement refinement: keep the plan before this round
                self.interrupted = True
                return
            self.interrupted = bool(refined["stats"].get("search", {}).get("interrupted"))
            self.refine_rounds += 1
            cycle_refines += 1
            self.timings["refine"] += time.perf_counter() - t
            self.stats["refine"].append(refined["stats"])
            if refined.get("adopted"):
                self._adopt(refined)
            verdict = "adopted" if refined.get("adopted") else "kept the plan"
            self.progress(f"placement refined, round {self.refine_rounds} ({verdict})", self.best_energy,
                          always=True)
            now = time.perf_counter()
            if (self.interrupted or not refined.get("adopted") or cycle_refines >= per_cycle
                    or (self.final_deadline is not None and self.final_deadline - now < 0.05 * self.time_limit)):
                return

    def _adopt(self, refined: dict) -> None:
        """The refined placement, its problem and searched layout, and its bounds."""
        self.placement, self.major, self.problem = refined["placement"], refined["major"], refined["problem"]
        self.demand = rank_major_view(self.major, self.window.num_layers)
        self.best, self.best_energy, self.best_from = refined["layout"], refined["energy"], "refine"
        if self.best_seed is not None and self.best_energy < self.best_seed[2]:
            # below the best seed: no longer a candidate (nor its placement's rank demand kept)
            self.best_seed = None
        if not self.stats["placement"].endswith("refined for the layout"):
            self.stats["placement"] = f"{self.stats.get('placement')} + refined for the layout"
        # (the row excess for every placement, placement-free, is not computed again)
        self._set_bounds(self.every_row_excess)

    def next_cycle(self) -> bool:
        """Whether another cycle runs (a tenth of the limit left, a time-limited run with
        ``cycles`` and no cap on the searches); if so, its anneal limit and deadlines."""
        options = self.options
        left = None if self.final_deadline is None else self.final_deadline - self.overrun - time.perf_counter()
        if self.interrupted or self.stopped is not None:
            return False
        why = None
        if self.deterministic or left is None:
            why = "fixed schedule (temperatures): one cycle"
        elif not self.do_search:
            why = "no search: one anneal"
        elif not bool(options.get("cycles", True)):
            why = "cycles=False: one cycle"
        elif options.get("search_evaluations"):
            why = "search_evaluations caps the searches: one cycle"
        elif left < 0.1 * self.time_limit:
            why = "time limit"
            if self.anneal_rounds == 0 and self.search_stats.get("skipped"):
                # (a 16384-sample window at 2 s: the seeds and bounds took the limit)
                why = "time limit, spent in the set-up: the plan is the best seed (no anneal or search ran)"
        if why is not None:
            self.stopped = why
            return False
        # diversify from the best plan (under its refined placement) and search again,
        # leaving the refinement its share of what is left
        self.run_limit = max(self.share, 0.3) * left * (1 - self.refine_share if self.do_refine else 1)
        self.stop = self._with_stale(MaxSeconds(self.run_limit))
        self.deadline = self.final_deadline - self.refine_share * left if self.do_refine else self.final_deadline
        return True

    # -- the result -----------------------------------------------------------------------

    def result(self) -> Result:
        """The run's Result: the best layout (or the warm start's, when it scores better),
        scored exactly, with its bounds, gap split and stats; the identity + ffd baseline
        for the report after it (not in ``seconds``)."""
        instance, objective, stats, timings = self.instance, self.objective, self.stats, self.timings
        t = time.perf_counter()
        layout, chosen = Layout(self.best, self.num_rows, self.cluster.dp), self.best_from
        # the costs of ``layout`` under self.placement: one full evaluation per candidate
        costs = None
        seed = self.best_seed
        if seed is not None and seed[2] <= self.best_energy + 1e-9 * abs(self.best_energy) and seed[1] is not self.best:
            # the exact tuple decides against the best seed: the search may have started from
            # another one (the anchor seed, ``anchor_margin``) and ended above it
            costs = layout_costs(instance, self.placement, layout, self.demand)
            seed_layout = Layout(seed[1], self.num_rows, self.cluster.dp)
            seed_costs = layout_costs(instance, seed[3], seed_layout, seed[4])
            seed_value = objective.evaluate(seed_costs)
            stats["best_seed_score"] = list(seed_value)
            if seed_value < objective.evaluate(costs):
                layout, costs, self.best_energy = seed_layout, seed_costs, seed[2]
                chosen = "warm_start" if seed[0] == "warm_start" else "seed"
                if seed[3] is not self.placement:
                    # scored under the placement before a refinement: its bounds again, and
                    # the stats name that placement (the refinement's plan is not returned)
                    self.placement, self.demand = seed[3], seed[4]
                    self._set_bounds(self.every_row_excess)
                    stats["placement"] = f"{seed[5]} (a refined placement's plan scored above the best seed)"
        placement = self.placement
        # the exact tuple decides against the warm start (never return worse than it)
        if self.warm_layout is not None:
            if costs is None:
                costs = layout_costs(instance, placement, layout, self.demand)
            start_costs = layout_costs(instance, placement, self.warm_layout, self.demand)
            start_value = objective.evaluate(start_costs)
            stats["warm_start_score"] = list(start_value)
            if start_value < objective.evaluate(costs):
                layout, costs, chosen = self.warm_layout, start_costs, "warm_start"
        # the anneal's figures summed over the rounds that annealed (``anneal_rounds`` of
        # ``rounds``); t_start and t_end are the last one's
        total = self.anneal_total
        stats.update(
            objective=objective.name, workers=self.workers, replicas=self.replicas,
            candidates=int(self.options.get("candidates", 4)), seeds=self.names, seed_energy=self.seed_energy,
            best_from=chosen, temperatures=total.temperatures, steps=total.steps, proposals=total.proposals,
            accepted=total.accepted, moves_per_second=total.proposals / max(total.seconds, 1e-9),
            t_start=total.t_start, t_end=total.t_end, anneal_energy=self.anneal_energy, energy=self.best_energy,
            eps=self.problem.eps, search=self.search_stats, search_workers=self.search_workers,
            deterministic=self.deterministic, interrupted=self.interrupted, rounds=self.rounds,
            anneal_rounds=self.anneal_rounds,
            stopped="interrupted (Ctrl-C)" if self.interrupted else self.stopped)
        bound_stats, lower_bounds = self.bound_stats, self.lower_bounds
        if self.background is not None:
            excess = self.background.result()
            stats["hidden_background"] = "ready" if excess is not None else "not ready"
            if excess is not None:
                lower_bounds = replace(lower_bounds, row_excess=max(lower_bounds.row_excess, excess))
                bound_stats["lower_bound"] = max(bound_stats["lower_bound"], lower_bounds.objective(objective)[0])
                # (the bound for every placement holds for this one too)
                bound_stats["placement_bound"] = max(bound_stats["placement_bound"], bound_stats["lower_bound"])
                bound_stats["hidden_bound"] = True
        stats.update(bound_stats)
        stats["timings"] = timings
        # what plan_result does, without recomputing the analytic bounds (one pass over a[i,l,e])
        if costs is None:
            costs = layout_costs(instance, placement, layout, self.demand)
        value = objective.evaluate(costs)
        # where the primary sits above the lower bound, in the gap's units (fractions of the
        # primary, rp_opt.result.relative_gap): attention + expert + spread - bound_slack = gap
        stats["gap_split"] = lower_bounds.gap_split(costs, objective, relative=True)
        stats["primary_proven"] = bool(stats["lower_bound"] >= value[0] * (1 - 1e-9))
        stats["bound_scope"] = EVERY_PLACEMENT  # lower_bound; placement_bound is this placement's
        # the packing's own gap: to the bound that holds for this placement only
        stats["placement_gap"] = relative_gap(value[0], stats["placement_bound"])
        timings["score"] = time.perf_counter() - t
        status = proven_status(value, lower_bounds.objective(objective))
        result = Result(status, Plan(placement, layout, objective.name, value, stats), value, stats["lower_bound"],
                        time.perf_counter() - self.started, "heuristic", stats)
        if self.options.get("report_baseline", True) and not self.interrupted:
            # report only (not part of the plan's time): identity + ffd on the same window
            t = time.perf_counter()
            base = baseline_score(instance, self.num_rows, objective, self.seeds.get("ffd"))
            result.stats.update(base)
            if base.get("baseline_score"):
                result.stats["improvement"] = improvement(base["baseline_score"][0], result.score[0])
            result.stats["report_seconds"] = time.perf_counter() - t
        return result


def _best_start(problem: Problem, starts: list) -> tuple[np.ndarray, float, AnnealStats]:
    """(layout, energy, stats) of the best of ``starts``, by one evaluation of each (no
    anneal: ``skip_anneal``, or a Ctrl-C before the anneal had a state of its own)."""
    state = State(problem, len(starts))
    try:
        load_layouts(problem, state, range(len(starts)), starts)
        k = int(np.argmin(state.energy))
        return np.asarray(starts[k], dtype=np.int64), float(state.energy[k]), \
            AnnealStats(start_energies=state.energy.tolist())
    finally:
        state.close()


def _row_maxima(objective) -> bool:
    """True when the primary's first aggregate is a sum over rows of maxima over shards
    (``sync``): the aggregate the anchor seed is built for."""
    first = get_objective(objective).levels[0][0][1]
    return first.inner == "max" and first.over == "shards" and first.outer == "sum"


def _anchors_pay(split: dict) -> bool:
    """Whether to build the anchor seed, from the ``gap_split`` of a seed (the greedy's):
    when the seed sits above the bound by attention at least as much as by the expert
    excess. The anchor seed builds the attention structure and ignores routing; measured
    on the windows of scripts/bench_heuristic.py (docs/benchmarks.md), the greedy's split is
    0.40 / 0.06 % (attention / expert) on the N = 4096 window with uncorrelated routing,
    where the anchor seed's basin is 0.09 % lower, and 0.4-2.4 / 3.9-4.3 % on the default
    windows (N = 512-4096), where building it only took search time (0.05 % worse)."""
    return split["attention"] >= split["expert"]


def _preferred_start(names: list, starts: list, energies, found: np.ndarray, energy: float,
                     margin: float) -> tuple[np.ndarray, float, str]:
    """The search's start: the anchor seed when its energy is within ``margin`` (relative)
    of the best seed's, else the best seed. Its rows of like blocks are a basin the block
    search does not reach from the others (measured, docs/benchmarks.md: on the N = 4096
    ling-flash-like window with uncorrelated routing, 0.04 % above the greedy seed, 0.09 %
    below it after the 5-s search); on windows where it starts several per cent higher
    the best seed starts, and so does a warm start that scores best."""
    best_name = names[int(np.argmin(energies))] if energies else "best"
    # a warm start that scores best (the previous step's plan) stays the start
    if "anchors" in names and energies and best_name != "warm_start":
        k = names.index("anchors")
        if energies[k] <= energy + margin * abs(energy):
            return np.asarray(starts[k], dtype=np.int64), float(energies[k]), "anchors"
    return found, energy, best_name


def _arrange_after_search(problem: Problem, layout: np.ndarray, energy: float, options: dict,
                          search_stats: dict) -> tuple[np.ndarray, float]:
    """The searched layout with its blocks moved whole into the order the primary's first
    aggregate wants (:func:`rp_opt.packing.regroup.rearranged`; sync: rows of like blocks,
    the least sum of row maxima for these blocks; shard: equal shard totals), when that
    lowers the energy; both energies come from one fresh evaluation, so float noise does
    not decide. Off with ``regroup=False`` and for a sum of sums or a max of maxima, where
    every order is as good. Sets ``search_stats["arranged"]``."""
    first = problem.aggregates[0]
    inner, outer = first.inner, first.outer
    if options.get("regroup") is False or inner == outer:
        return layout, energy
    from .regroup import rearranged

    moved, moved_energy, energy_now = rearranged(problem, layout)
    search_stats["arranged"] = bool(moved_energy < energy_now)
    return (moved, moved_energy) if moved_energy < energy_now else (layout, energy)


def _search_settings(options: dict, deterministic: bool) -> dict:
    """The block search's keyword arguments from the heuristic's options (every search of a
    run, the refinement's too): block pairs it may evaluate (``search_evaluations``, 200
    with a fixed schedule; else None: until the deadline), ``search_cap``, ``surrogate``
    and ``search_screen``."""
    evals = options.get("search_evaluations")
    return {"max_evaluations": (evals or 200) if deterministic else evals, "cap": options.get("search_cap"),
            "surrogate": float(options.get("surrogate", 0.05)), "screen": options.get("search_screen", 32)}


def _refine_round(instance: Instance, objective, placement: Placement, problem: Problem, best: np.ndarray,
                  best_energy: float, deadline: float | None, *, seed: int, deterministic: bool, options: dict,
                  search_workers: int, rank_demand_seconds: float = 0.0) -> dict:
    """Refine the placement for the layout ``best``
    (:func:`rp_opt.placement.refine.refine_placement`, half of the time to ``deadline`` that
    the rank demand of the new placement, about ``rank_demand_seconds``, leaves), then
    search the layout again under the new placement. The new plan is adopted only when its
    exact energy is lower."""
    from ..cost import block_sums
    from ..placement.refine import refine_placement

    out: dict = {"stats": {}}
    cluster = instance.cluster
    layout = Layout(np.asarray(best, dtype=np.int64), problem.rows, cluster.dp)
    # weights 1: the total expert cost sum_b X_b, which also credits swaps that do not yet
    # lower the primary; summing a[i,l,e] over blocks takes a pass (0.3 s at N = 16384)
    block_demand = block_sums(layout, instance.window.demand, cluster.edp)             # [B, L, E]
    if deterministic:
        limit, sweeps = np.inf, int(options.get("refine_sweeps", 20))
    else:
        limit, sweeps = max(0.0, 0.5 * (deadline - time.perf_counter() - rank_demand_seconds)), None
    new_place, rstats = refine_placement(placement, block_demand, time_limit=limit, seed=seed, max_sweeps=sweeps)
    out["stats"] = {"swaps": rstats.swaps, "candidates": rstats.candidates, "sweeps": rstats.sweeps,
                    "seconds": rstats.seconds, "adopted": False}
    if rstats.swaps == 0:
        return out
    major = rank_demand_major(instance.window, new_place)
    new_problem = make_problem(instance, major, problem.rows, objective)
    found, energy, search_stats = search_layout(new_problem, best, deadline=deadline, seed=seed + 7919,
                                                workers=search_workers, **_search_settings(options, deterministic))
    found, energy = _arrange_after_search(new_problem, found, energy, options, search_stats)
    out["stats"].update(energy_before=best_energy, energy_after=energy, search=search_stats)
    if energy < best_energy:
        out.update(adopted=True, placement=new_place, major=major, problem=new_problem, layout=found, energy=energy)
    out["stats"]["adopted"] = bool(out.get("adopted"))
    return out


