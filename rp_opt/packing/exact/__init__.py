"""Exact packing: given a placement and R = R* rows, the optimal cell of every sample.

Two backends build the same model (binary y[i,r,d], capacity, non-empty cells, sample
limit, epigraphs of the attention and expert maxima, the objective's aggregates
linearised generically) and solve the objective's levels in sequence:

* ``cpsat`` (:mod:`.cpsat_model`): OR-Tools CP-SAT on integer-scaled costs; the stats
  carry ``rounding``, per level, the most the rounding can move a plan's level value
  (the integer optimum is then within 2x that of the true optimum; the status is
  ``optimal`` only when 2x the margin is within :data:`ROUNDING_TOLERANCE` of every
  level, else ``feasible`` with ``stats["not_optimal"]``). The scale counts only the
  parts (A, X) the objective weighs. A later level is minimised with the earlier ones
  held at their integer-scaled optimum (or stacked below them in one solve), so
  "optimal" for it means among the layouts whose earlier levels round to that optimum: a
  layout tied with it in true costs that rounds one unit higher is not searched, and its
  later levels can be lower (a brute-force stress test found 30 among about 7,700
  "optimal" results on windows of N <= 8, 26 of them in a search aimed at such ties, most
  with gamma 0 or 1e6 against attention near 1). Level 1's
  value and bound are not affected; ``stats["levels"][j]["bound_given_earlier_levels"]``
  is that conditional bound;
* ``highs`` (:mod:`.pyomo_model`): Pyomo + HiGHS on the float costs.

Before the model runs, :func:`solve_packing` takes the better of a greedy layout and a
short run of the ``heuristic`` planner as the start; with R >= 3 and G >= 2, pairs of rows
are then re-solved exactly (:mod:`.row_search`; as two-row windows of their own when level
1 adds up rows, as ``sync`` does, else with the other rows as constants), which improves
the start and, through it, CP-SAT's bound. When level 1 is not a sum over rows (``shard``)
and R >= 3, G >= 2, a bound on the pooled window (:mod:`.pooled`: the R G blocks as the
interchangeable rows of one shard, minimising the block mean that bounds level 1) gives a
bound the model's own does not reach: the set-partitioning LP over blocks by column
generation (:mod:`.columns`) up to 48 samples, a CP-SAT solve of the pooled model above. With
symmetry breaking, the models number the
samples heaviest first (:func:`.common.heaviest_first`), so the chains fix where the
longest samples sit; plans come back in the caller's numbering. CP-SAT
searches longest sample first, each sample's block before its cell, with the workers
:func:`.cpsat_model.proof_subsolvers` picks for each solve of the sequence (with two rows,
all levels in one solve under the start's level 1, the later ones in steps of about 1e-5
of their value that the rounding margin counts, :meth:`.cpsat_model.CpsatPacking.coarse_stack`,
or else levels 1 and 2 as one solve and level 3 the next; with more rows level 1, then the
later levels as one: :meth:`.cpsat_model.CpsatPacking.solve_groups`); when level 1
ends unproven, a partial LP relaxation bounds it (:func:`.pyomo_model.relaxation_bound`:
the costliest samples binary, the rest continuous). Before the heaviest-first numbering it
gave most reported bounds; now
CP-SAT's own is close or above (N = 24, G = 2, sync: 13977.6 against 13981.6; N = 64,
G = 2: 36580.3 against 35815.2). Levels that are the same function of J as an earlier one
for this R and G are not solved again.

:mod:`.joint` chooses placement and packing together for tiny windows. Both planners are
registered (``exact``, ``joint``) in :mod:`rp_opt.solvers`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import numpy as np

from ..._highs import import_pyomo
from ...bounds import cost_bounds
from ...cost import rank_load, score
from ...errors import MAX_SEED, MAX_WORKERS, integer, number, require, switch
from ...objectives import get_objective
from ...result import FEASIBLE, GIVEN_PLACEMENT, INFEASIBLE, NO_SOLUTION, OPTIMAL, Plan, Result, lex_better
from ...rows import certify_seconds, row_count_reason
from ...solution import Layout, Placement, placement_for
from ...solvers import register_solver
from ...window import Instance
from ..seeds import layout_violation
from .common import (Budget, build_seconds, canonical_layout, greedy_layout, heaviest_first,
                     layout_valid, packing_data, renumbered, symmetry_mode, too_big)
from .cpsat_model import PROOF, TOGETHER, SolveOutcome, check_together, progress_log
from .pooled import pooled_bound as pooled_level_bound
from .pooled import pooled_useful
from .row_search import INTERRUPTED, row_pair_search, rows_separable

# share of the time left after the start that the row-pair search may take (it ends
# earlier when no pair of rows improves)
ROW_SEARCH_SHARE = 0.2
# the same when level 1 adds up rows (sync), G >= 2 and at least BOUND_FIRST_SECONDS are
# left: the model's level 1 then runs without CP-SAT's LNS thread (``improve=False``), so the
# row search is what improves the plan, and a better plan lets CP-SAT fix more at the
# root, which raises its bound. N = 64, G = 2, sync, seed 0 of scripts/bench_exact.py,
# 60 s, 2 cores (12-03), level 1 without LNS: with 0.2, 3 pair solves, plan 36996.4, bound
# 36584.5 (1.11 %); with 0.4, 8-10 solves, plans 36922.2 and 36959.6, bounds 36679.4 and
# 36676.3 (0.66 %, 0.77 %)
ROW_SEARCH_SHARE_ROWS_ADD_UP = 0.4
# Why without the LNS thread: level 1's bound comes from root fixings that ``fixed`` and
# ``default_lp`` find sooner with a better incumbent and with both cores; beside the LNS
# thread (a third thread on 2 cores) it stalled at the root LP in most runs. Same windows,
# 60 s (12-03): seed 0, five runs with the thread and a fifth of the time for the row
# search: gaps 1.08, 0.73, 1.17, 2.90, 2.86 % (bound 35870-36675); without it and two
# fifths: 0.66, 0.77, 0.84, 0.73, 0.73, 0.76 % (bound 36672-36680), and 2.99 % and 1.23 %
# in two runs whose row search ended on a poorer plan (37022.9, 37019.4); seed 2 0.88, 0.87, 0.98, 0.90 % (with the
# thread and two fifths: 0.79, 2.75 %); seed 1 0.15-0.30 %. With less time left than
# BOUND_FIRST_SECONDS the bound does not rise above the root LP's anyway (it jumped 7-17 s
# into level 1 where it did) and the plan is what counts: level 1 keeps the LNS thread
# and the row search its usual share. Same windows, 10-s limit, the rule above against
# this one: N = 64, seed 0, plan 37167.2 against 37047.6; seed 2 33525.3 against 33488.1;
# N = 32, seed 2 (three rows) 19109.3 against 19099.1
BOUND_FIRST_SECONDS = 30.0
# share of the time left after the row search that the pooled bound's solve takes (.pooled)
POOLED_SHARE = 0.4
# two-row CP-SAT windows whose level 1 adds up rows: share of the time left before the
# model that CP-SAT's own portfolio takes to improve the start (CpsatPacking.polish), and
# at most this many seconds. scripts/bench_exact.py's N = 32 sync windows, 60 s, 2 cores
# (12-01, 19:25-20:05 UTC, one run each unless said): proven with / without it, G = 2:
# seed 1 in 33.6 and 34.1 s / 0.10 % short; seed 3 42.0 s / 0.73 % short; seed 4 0.24 %
# short / 53.7 and 53.8 s; seed 0 short either way (0.06-0.44 % / 0.04-0.05 %); G = 1,
# seed 0: 23.1 s / 0.14 % short. Its improvements come all through the 8 s (seed 3:
# 17873.1 -> 17831.9, the optimum 17798.7), so it does not stop on a stall. Since the
# proof runs a shared-tree worker beside ``fixed`` (twenty-fourth session, same machine as
# the 12-03 figures in docs/benchmarks.md) a start at the optimum is proven fast (N = 24,
# G = 2, seed 1: level 1 in 9.8-12.8 s), so the polish got longer (0.12 and 8 s before).
# N = 24, G = 2 sync, 60 s, with / before: seed 1 proven 2 of 2 (36.1, 41.5 s) / 1 of 5
# (0.28 % short otherwise); seed 2 2 of 2 / 5 of 5; seed 0 levels 1-2 proven 2 of 2, level
# 3 not / 2 of 5 wholly proven. N = 32, G = 2 sync: seeds 0, 4, 1 proven in 50.7, 42.0,
# 27.3 s / 37.6, 39.2, 23.8 s. Polish on its own from 3.6-s heuristic starts of seed 1:
# the optimum in 3 of 4 runs at 6.8 s, 4 of 4 at 12 s. Since the three levels of these
# windows are one solve (CpsatPacking.coarse_stack; twenty-fifth session) the proof also
# finds the optimum from a start short of it (N = 24 seed 1: from 11329.1 in 55.3 s), and
# the polish is 6 s again. 60 s, PS = 12 / 6 s (14:15-14:30 UTC 12-03): N = 24, G = 2
# seeds 0-2 proven in 47.6, 45.0, 42.5 / 57.6, 38.6, 33.2 s; N = 32, G = 2 seeds 0, 1,
# 3, 4 in 51.9, 27.4, 24.0, 47.1 / 40.6, 23.5, 22.3, 36.0 s.
POLISH_SHARE = 0.2
POLISH_SECONDS = 6.0

log = logging.getLogger("rp_opt")

BACKENDS = ("cpsat", "highs")

__all__ = ["solve_exact", "solve_packing", "default_placement", "default_num_rows", "num_rows_or_status", "BACKENDS",
           "OPTIONS", "check_options"]


def default_placement(instance: Instance) -> Placement:
    """LPT placement (:func:`rp_opt.placement.lpt_placement`)."""
    from ...placement.lpt import lpt_placement

    return lpt_placement(instance.window, instance.cluster.ep)


def default_num_rows(instance: Instance, time_limit: float = 10.0) -> int | None:
    """R* (:func:`rp_opt.rows.certify_rows`). None when the window fits no R (N < R D for
    every feasible R) or R* was not proven in time (:func:`num_rows_or_status` tells the
    two apart)."""
    return num_rows_or_status(instance, time_limit)[0]


def num_rows_or_status(instance: Instance, time_limit: float = 10.0) -> tuple[int | None, str | None, str | None]:
    """``(R*, None, None)``, or ``(None, status, reason)`` for the planners' result when
    there is no proven R*: ``infeasible`` when no R with R D <= N admits a layout,
    ``no_solution`` when the certifier did not prove R* within ``time_limit`` (a layout may
    well exist; the exact planners claim optimality for R = R* only)."""
    return _certified_rows(instance, time_limit)[:3]


def _certified_rows(instance: Instance, time_limit: float) -> tuple[int | None, str | None, str | None,
                                                                     Layout | None]:
    """:func:`num_rows_or_status` and the certificate's witness layout (None without R*)."""
    from ...rows import certify_rows

    cert = certify_rows(instance.window, instance.cluster, time_limit=time_limit)
    if cert.r_star is not None:
        return int(cert.r_star), None, None, cert.witness
    return (None, *cert.no_rows(), None)


def _heuristic_layout(instance, placement, num_rows, obj, data, time_limit, seed,
                      seconds: float | None = None, start: Plan | None = None,
                      stats: dict | None = None) -> Layout | None:
    """The ``heuristic`` planner's layout for this placement and R, run for ``seconds``
    (default min(10% of the time limit, 0.15 s per sample, 5 s)), from the plan ``start``
    when given; None when too little time is left, or it returns no layout that fits.
    A Ctrl-C that stopped the heuristic sets ``stats["interrupted"]`` (its layout still
    comes back)."""
    if seconds is None:
        # a better start shortens the proof: N = 32, G = 2, sync, seed-1 window of
        # scripts/bench_exact.py (solver seed 1), 60 s: not proven in three runs with a
        # 1.6-s start (17773.4 against the optimum 17739.4), proven in 33.7 and 30.8 s
        # with a 5-s one (the first started from 17751.2)
        seconds = min(0.1 * float(time_limit), 0.15 * data.num_samples, 5.0)
    if seconds < 0.2:
        return None
    from ...solvers import get_solver

    try:
        res = get_solver("heuristic")(instance, objective=obj, time_limit=seconds, seed=seed, placement=placement,
                        num_rows=num_rows, report_baseline=False, warm_start=start)
    except Exception as exc:  # a start is optional: never fail the exact solve for it
        log.debug("heuristic start failed: %s", exc)
        return None
    if res.stats.get("interrupted") and stats is not None:
        stats["interrupted"] = True
    layout = res.plan.layout if res.plan is not None else None
    if layout is None or not layout_valid(data, layout):
        return None
    return layout


_SWITCHES = ("symmetry", "tighten", "mip_start", "heuristic_start", "relax_bound", "row_search", "pooled_bound",
             "polish", "cubes")


def check_args(**args) -> dict:
    """The arguments of the exact solvers, checked and converted by the same rules as the
    heuristic's options (values of ``--option KEY=VALUE`` may arrive as text): ``workers``
    None or an integer in [1, 256] (CP-SAT threads), ``num_rows`` None or an integer >= 1,
    ``seed`` an integer in [0, 2^31 - 1] (CP-SAT's random_seed), the switches (symmetry,
    tighten, ...) true or false (true/false/yes/no/1/0; 'nope' is an error); any other
    argument comes back as it is. A bad one is a one-line :class:`InputError`."""
    out = dict(args)
    for name, value in args.items():
        if name == "workers":
            out[name] = integer(name, value, 1, MAX_WORKERS, none=True, text=True)
        elif name == "num_rows":
            out[name] = integer(name, value, 1, none=True, text=True)
        elif name == "seed":
            out[name] = integer(name, value, 0, MAX_SEED, text=True)
        elif name in _SWITCHES:
            out[name] = switch(name, value, text=True)
        elif name == "together":
            check_together(value)
    return out


# the options solve_exact takes besides its keyword arguments (``--option KEY=VALUE``)
OPTIONS = ("workers", "subsolvers", "together", *_SWITCHES)


def check_options(options: dict) -> dict:
    """``options`` of the ``exact`` solver (:data:`OPTIONS`), checked and converted as
    :func:`check_args` does; an unknown name is a one-line :class:`InputError` on
    ``options`` listing the known ones. Also what the Planner checks its
    ``solver_options`` with before the first step."""
    unknown = set(options) - set(OPTIONS)
    require(not unknown, "options", f"unknown option(s) {sorted(unknown)} for solver exact; known: "
            f"{', '.join(sorted({*OPTIONS, 'backend', 'num_rows', 'placement'}))}")
    return check_args(**options)


def _subsolver_names(value) -> tuple[str, ...] | str | None:
    """``subsolvers`` as CP-SAT takes them: None or ``"cpsat"`` (CP-SAT's own portfolio),
    ``"proof"`` (:data:`.cpsat_model.PROOF`, chosen per solve), a comma-separated string or
    a sequence of names (CP-SAT itself rejects unknown ones)."""
    if value is None or value == "cpsat":
        return None
    if value == PROOF:
        return PROOF
    names = value.split(",") if isinstance(value, str) else value
    require(isinstance(names, (list, tuple)) and len(names) > 0
            and all(isinstance(x, str) and x.strip() for x in names), "subsolvers",
            f"must be 'proof', 'cpsat', a comma-separated string or a list of CP-SAT subsolver names, got {value!r}")
    return tuple(x.strip() for x in names)


def solve_packing(instance: Instance, placement: Placement, num_rows: int, *, objective="sync",
                  time_limit: float = 60.0, seed: int = 0, start: Layout | None = None,
                  backend: str = "cpsat", symmetry: bool = True, tighten: bool = True,
                  workers: int | None = None, subsolvers: tuple[str, ...] | str | None = PROOF,
                  mip_start: bool = False, heuristic_start: bool = True,
                  relax_bound: bool = True, row_search: bool = True, pooled_bound: bool = True,
                  polish: bool = True, together: str = TOGETHER, cubes: bool = False,
                  solver_name: str = "exact", witness: Layout | None = None) -> Result:
    """Optimal layout of ``instance`` for a fixed ``placement`` and ``num_rows`` rows.

    Parameters
    ----------
    instance, placement, num_rows
        The window, the fixed placement and R.
    objective
        Registered objective name (or :class:`~rp_opt.objectives.Objective`).
    time_limit
        Seconds for the whole lexicographic sequence (a cheap start is built first so a
        plan always comes back when one exists and is easy to find).
    seed
        An integer in [0, 2^31 - 1] (checked by :func:`check_args`), passed to every solve
        it runs: CP-SAT's and HiGHS's ``random_seed`` (the model, the row search, the
        pooled bound, the relaxation, the polish) and the heuristic start's ``seed``.
    start
        A layout to start from (any row/slot/shard order: it is canonicalised).
    witness
        Without ``start``: a layout of ``num_rows`` rows to start from when the greedy
        layout finds none (the R* certificate's witness; first fit needs more than R* rows
        on some windows), and the heuristic start's warm start then.
    backend
        ``cpsat`` or ``highs``.
    symmetry, tighten
        Symmetry-breaking chains (the model then numbers the samples heaviest first, see
        :func:`.common.heaviest_first`); Eq. 4 and average bounds as constraints.
    workers, subsolvers
        CP-SAT's threads, None or an integer in [1, 256] (default None: one per
        subsolver plus one for its interleaved LNS, 8 with CP-SAT's portfolio), and its
        full-problem workers by name (default ``"proof"``: for each solve, the ones that
        prove the benchmark's packing windows fastest,
        :func:`.cpsat_model.proof_subsolvers`; None or ``"cpsat"``: CP-SAT's own
        portfolio; a comma-separated string is split). HiGHS runs one thread.
    heuristic_start
        Without ``start``, also run the production heuristic (``heuristic`` planner, same
        placement and R) for min(10% of the time limit, 0.15 s per sample, 5 s) and start
        from the better of its layout and the greedy one (the model's own search finds
        good layouts of large windows slowly: N = 64, G = 2, sync: 32618 after 60 s of
        CP-SAT, 31648 after 1 s of the heuristic).
    relax_bound
        When CP-SAT ends level 1 unproven (HiGHS backend: always, first), bound level 1 by
        a partial LP relaxation (the 8 costliest samples binary, the others continuous;
        :func:`.pyomo_model.relaxation_bound`, HiGHS, at most 80% of the time left, 20 s;
        samples fractional in its optimum are made binary and it is solved again); the
        bound is reported, and proves level 1 when it meets the plan's value.
    row_search
        CP-SAT, R >= 3 and G >= 2: before the model, improve the start by solving pairs of
        rows exactly (:func:`.row_search.row_pair_search`, at most :data:`ROW_SEARCH_SHARE`
        of the time left, less when no pair improves). When level 1 is not a sum over rows
        (``shard``), the two-row models count the other rows as constants. When it is
        (``sync``) and at least :data:`BOUND_FIRST_SECONDS` are left, the search takes
        :data:`ROW_SEARCH_SHARE_ROWS_ADD_UP` of them and the model's level 1 then runs
        without CP-SAT's LNS thread; without a row search, or with less time, with it.
    pooled_bound
        CP-SAT, R >= 3, G >= 2 and a level 1 that is not a sum over rows (``shard``):
        before the model, bound level 1 by the pooled window, in which the R G blocks are
        interchangeable rows of one shard (:mod:`.pooled`, :data:`POOLED_SHARE` of the time
        left); the bound is reported (stats ``pooled``), and proves level 1 when it meets
        the plan's value.
    polish
        CP-SAT, two rows, a level 1 that adds up rows (``sync``; any objective with G = 1),
        the default workers: before the proof solve, improve the start's level 1 with
        CP-SAT's own portfolio and its LNS (:data:`POLISH_SHARE` of the time left, at most
        :data:`POLISH_SECONDS`; :meth:`.cpsat_model.CpsatPacking.polish`; stats
        ``polish``). That proof runs ``fixed`` and a shared-tree worker, without LNS
        (:func:`.cpsat_model.proof_subsolvers`, :func:`.cpsat_model.proof_without_lns`),
        and keeps a poor start poor.
    together
        CP-SAT: which levels one solve minimises together (``auto``, ``leading``, ``later``,
        ``none``; :meth:`.cpsat_model.CpsatPacking.solve_groups`).
    cubes
        CP-SAT, two rows, the default workers: the one-search proof splits its tree into
        cubes searched by processes side by side (:mod:`rp_opt._cubes`; stats
        ``levels[0].cubes``). Off by default: it proves a plan that is already optimal in
        about half the time, but from a start the search must still improve it ends
        further from the proof (measured in :meth:`.cpsat_model.CpsatPacking.solve`). For
        certifying a given plan (``start``), e.g. one a longer run found.
    mip_start
        HiGHS only: pass ``start`` as a MIP start (HiGHS then runs without presolve, see
        :mod:`.pyomo_model` for the HiGHS 1.16 bug this avoids); CP-SAT always gets hints.
    solver_name
        The name the returned :class:`Result` carries as ``solver`` (also in its plan's
        ``stats["solver"]``); default ``"exact"``.

    Returns
    -------
    Result
        ``bound`` is a valid lower bound of the primary level (rounding margin removed);
        stats carry per-level values, bounds, statuses, ``rounding`` and ``start_score``.
        A Ctrl-C stops the solve at once: the best plan so far comes back, ``feasible``
        unless every level was already proven, with ``stats["interrupted"]`` (HiGHS takes
        it only when its current solve ends).
    """
    t0 = time.perf_counter()
    obj = get_objective(objective)
    require(backend in BACKENDS, "backend", f"must be one of {BACKENDS}, got {backend!r}")
    subsolvers = _subsolver_names(subsolvers)
    num_rows = integer("num_rows", num_rows, 1)
    args = check_args(seed=seed, workers=workers, symmetry=symmetry, tighten=tighten, mip_start=mip_start,
                      heuristic_start=heuristic_start, relax_bound=relax_bound, row_search=row_search,
                      pooled_bound=pooled_bound, polish=polish, together=together, cubes=cubes)
    seed = args.pop("seed")
    if args["mip_start"] and backend == "cpsat":
        # (said, not refused: a caller switching backends keeps its options)
        log.warning("exact: mip_start is a HiGHS option; CP-SAT always gets the start as hints")
    # the build estimate needs the model's size only: no rank demand (the model computes it,
    # in its own numbering)
    build = build_seconds(packing_data(instance, None, num_rows), _coefficients(instance),
                          "cpsat" if backend == "cpsat" else "pyomo")
    order = None
    if args["symmetry"] and not too_big(build, float(time_limit) - (time.perf_counter() - t0)):
        # the models number the samples heaviest first (common.heaviest_first; renumbering
        # copies the window, so not for a model too big to build, nor for a window numbered
        # so already); the plan comes back in the caller's numbering
        order = heaviest_first(instance)
    if order is not None and not np.array_equal(order, np.arange(order.size)):
        res = _solve_packing(renumbered(instance, order), placement, num_rows, obj, time_limit, seed,
                             in_model_numbering(start, order), backend, subsolvers, solver_name, t0, build,
                             in_model_numbering(witness, order), **args)
        return in_callers_numbering(res, order)
    res = _solve_packing(instance, placement, num_rows, obj, time_limit, seed, start, backend, subsolvers,
                         solver_name, t0, build, witness, **args)
    if order is not None:
        res.stats["sample_order"] = "heaviest first"
    return res


def in_model_numbering(layout: Layout | None, order: np.ndarray) -> Layout | None:
    """``layout`` (the caller's numbering) for the model numbered by ``order``
    (:func:`.common.renumbered`); one of another size is left for the model to reject."""
    if layout is None or layout.cell_of.size != order.size:
        return layout
    return Layout(layout.cell_of[order], layout.num_rows, layout.num_slots)


def in_callers_numbering(res: Result, order: np.ndarray) -> Result:
    """A model's :class:`Result` (samples numbered by ``order``) in the caller's numbering."""
    res.stats["sample_order"] = "heaviest first"
    if res.plan is None:
        return res
    cell_of = np.empty_like(res.plan.layout.cell_of)
    cell_of[order] = res.plan.layout.cell_of
    plan = replace(res.plan, layout=Layout(cell_of, res.plan.layout.num_rows, res.plan.layout.num_slots))
    return replace(res, plan=plan)


def _coefficients(instance: Instance) -> int:
    """Non-zero coefficients of one block's rank loads in the packing model: N L P."""
    return instance.window.num_samples * instance.window.num_layers * instance.cluster.ep


# "optimal" needs every level proven with twice its rounding margin within this share of
# the level's value. The margin is a worst case (every sample's rounding in one direction):
# on the 16-24-sample bench windows it is 2-6e-5 of a level, and 1e-4 turned proofs there
# into "feasible"; an objective whose costs round away (X alone scaled for an attention
# 10^8 times larger) has margins of the order of the value itself
ROUNDING_TOLERANCE = 1e-3


def _interrupted(out) -> bool:
    """Whether Ctrl-C stopped one of the solves of a model outcome, or came between two."""
    return bool((out.extra or {}).get("interrupted")) or any(o.stats.get("interrupted") for o in out.levels)


def _all_proven(levels, obj) -> bool:
    """Every level of ``obj`` solved to a proven optimum (implied levels count as theirs)."""
    return len(levels) == len(obj.levels) and all(o.status == "optimal" for o in levels)


def _two_row_layout(sub: Instance, placement: Placement, obj, start: Layout, seconds: float, fixed, seed, backend,
                    workers, subsolvers, symmetry, tighten, together) -> tuple[Layout | None, bool]:
    """The exact solve of one two-row sub-window for :func:`.row_search.row_pair_search`
    (warm-started by ``start``; no heuristic start, relaxation or row search of its own):
    its layout and whether it is proven optimal. ``fixed``: None, or the other rows'
    :func:`.row_search.context`, which the CP-SAT model then counts as constants. No
    polish: the row search's solves were measured without it (the polish is not measured
    there)."""
    if fixed is None:
        # the search is there to improve the pair: ``fixed`` beside CP-SAT's LNS thread, not
        # the proof's shared-tree worker (N = 64, G = 2, sync, seed 1 of
        # scripts/bench_exact.py: with that worker the row search ended at 26076.8-26146.7
        # and level 1's bound stayed at 25933.4-25954.4, 0.55-0.74 % short)
        names = ("fixed",) if subsolvers == PROOF and backend == "cpsat" else subsolvers
        res = solve_packing(sub, placement, 2, objective=obj, time_limit=seconds, seed=seed, start=start,
                            backend=backend, symmetry=symmetry, tighten=tighten, workers=workers,
                            subsolvers=names, heuristic_start=False, relax_bound=False, row_search=False,
                            polish=False, together=together)
        if res.stats.get("interrupted"):
            raise KeyboardInterrupt("row search interrupted (Ctrl-C)")
        return (res.plan.layout if res.plan is not None else None), res.status == OPTIMAL
    from .cpsat_model import CpsatPacking

    t0 = time.perf_counter()
    data = packing_data(sub, placement, 2)
    mode = symmetry_mode(obj) if symmetry else None
    eq4 = rank_load(sub.window, placement).max(axis=1) if tighten else None
    builder = CpsatPacking(data, obj, mode, tighten=tighten, eq4=eq4, context=fixed)
    if mode:
        start = canonical_layout(start, data.num_shards, mode, fixed_shards=True)
    out = builder.solve(Budget(seconds - (time.perf_counter() - t0)), seed=seed, workers=workers,
                        subsolvers=subsolvers, start=start, together=together, improve=True)
    if _interrupted(out):
        raise KeyboardInterrupt("row search interrupted (Ctrl-C)")
    return out.layout, _all_proven(out.levels, obj)


def _better_start(instance, placement, obj, mode, start, start_score, better, stats, how):
    """``(start, start_score, taken)``: ``better`` (a layout, or None) in place of ``start``
    when it scores lexicographically better, canonicalised for ``mode`` (that relabels
    rows, shards and slots only: the score stays), with ``how`` added to
    ``stats["start"]``."""
    better_score = score(instance, placement, better, obj) if better is not None else None
    if better is None or not lex_better(better_score, start_score):
        return start, start_score, False
    stats["start"] += how
    return (canonical_layout(better, instance.cluster.edp, mode) if mode else better), better_score, True


def _solve_packing(instance: Instance, placement: Placement, num_rows: int, obj, time_limit, seed, start, backend,
                   subsolvers, solver_name, t0, build, witness, *, workers, symmetry, tighten, mip_start,
                   heuristic_start, relax_bound, row_search, pooled_bound, polish, together, cubes) -> Result:
    """:func:`solve_packing` on checked arguments, in the numbering of ``instance``
    (``build``: the model's build estimate, seconds)."""
    window, coefficients = instance.window, _coefficients(instance)
    data = packing_data(instance, placement, int(num_rows))
    empty = row_count_reason(data.lengths, data.num_rows, data.num_slots, data.capacity, data.max_per_cell)
    if empty:
        return Result(INFEASIBLE, None, (), None, time.perf_counter() - t0, solver_name, {"reason": empty})
    mode = symmetry_mode(obj) if symmetry else None
    # the bound and "optimal" are for this placement and R (the hierarchical problem): the
    # ``joint`` solver is the one that chooses the placement too
    stats = {"backend": backend, "num_rows": int(num_rows), "symmetry": mode, "tighten": tighten,
             "bound_scope": GIVEN_PLACEMENT}
    # a model whose build would not fit in the time limit is not built (the build and
    # CP-SAT's loading do not stop at the limit): the best start is the answer
    skip = too_big(build, float(time_limit) - (time.perf_counter() - t0))

    # a start: the caller's if valid, else the greedy
    if start is not None and not layout_valid(data, start):
        stats["warm_start"] = "rejected (wrong shape or violates a constraint)"
        start = None
    if start is None:
        start = greedy_layout(data)
        stats["start"] = "greedy" if start is not None else "none"
        warm = None
        if start is None and witness is not None and layout_valid(data, witness):
            # first fit needs more rows than R* here: the certificate's layout is the start,
            # and the heuristic's (it builds no witness of its own for a given R)
            start, stats["start"] = witness, "witness"
            warm = Plan(placement, witness, obj.name, score(instance, placement, witness, obj), {})
        if heuristic_start:
            # without a model to solve, the heuristic gets the time
            seconds = 0.8 * (float(time_limit) - (time.perf_counter() - t0)) if skip else None
            better = _heuristic_layout(instance, placement, int(num_rows), obj, data, time_limit, seed, seconds,
                                       start=warm, stats=stats)
            if better is not None and (start is None or lex_better(score(instance, placement, better, obj),
                                                                 score(instance, placement, start, obj))):
                start = better
                stats["start"] = "heuristic"
    else:
        stats["start"] = "warm_start"
    bound_first = False  # see BOUND_FIRST_SECONDS
    if (row_search and backend == "cpsat" and start is not None and num_rows >= 3 and data.num_shards >= 2
            and not stats.get("interrupted")):
        # re-solve pairs of rows exactly before the whole model runs (a better incumbent
        # also lets CP-SAT prune more; see .row_search). Not with one shard: there CP-SAT's
        # own search finds layouts as good, and its bound needs the time (N = 64, G = 1
        # windows of scripts/bench_exact.py, seeds 0-2: gap 0.99 / 0.10 / 0.76 % with the
        # search, 0.55 / 0.12 / 0.37 % without)
        left = float(time_limit) - (time.perf_counter() - t0)
        # without a model it may take what is left; with one, never so much that the model
        # no longer fits (too_big: the build takes at most half of the time left)
        bound_first = rows_separable(obj.levels[0], data.num_shards) and left >= BOUND_FIRST_SECONDS
        share = ROW_SEARCH_SHARE_ROWS_ADD_UP if bound_first else ROW_SEARCH_SHARE
        seconds = 0.9 * left if skip else min(share * left, left - 2 * build)
        if seconds >= 0.5:
            start, found = row_pair_search(
                instance, placement, start, obj, seconds,
                lambda sub, sub_start, limit, fixed: _two_row_layout(sub, placement, obj, sub_start, limit, fixed,
                                                                     seed, backend, workers, subsolvers, symmetry,
                                                                     tighten, together),
                seed=seed)
            stats["row_search"] = found.to_dict()
            if found.stopped == INTERRUPTED:
                stats["interrupted"] = True
        else:
            bound_first = False  # no search improved the start: level 1's LNS thread does
            # the search's share of what is left (after two builds of the model) under 0.5 s
            why = (f"{left:.1f} s left" if skip else
                   f"its share of the {left:.1f} s left is {max(seconds, 0.0):.1f} s, under 0.5 s "
                   f"(the model's build needs about {build:.1f} s)")
            stats["row_search"] = {"skipped": why}
    if (pooled_bound and backend == "cpsat" and not skip and not stats.get("interrupted")
            and pooled_useful(obj, int(num_rows), data.num_shards)):
        left = float(time_limit) - (time.perf_counter() - t0)
        # the pooled model is as large as the model: both builds must still fit
        seconds = min(POOLED_SHARE * left, left - 2 * build)
        if seconds >= 1.0:
            try:
                stats["pooled"] = pooled_level_bound(instance, placement, int(num_rows), obj, start, seconds,
                                                     seed, workers=workers, subsolvers=subsolvers,
                                                     symmetry=symmetry, tighten=tighten, together=together)
            except KeyboardInterrupt:  # between its solver's calls (a Ctrl-C inside one comes back marked)
                stats["pooled"] = {"bound": None, "status": "interrupted"}
                stats["interrupted"] = True
            if stats["pooled"].pop("interrupted", False):
                stats["interrupted"] = True
        else:
            stats["pooled"] = {"skipped": f"{left:.1f} s left, the builds need about {2 * build:.1f} s"}
    if start is not None and mode:
        start = canonical_layout(start, data.num_shards, mode)
    start_score = score(instance, placement, start, obj) if start is not None else None
    # progress (rp-opt -v): the model is otherwise silent until it ends
    tag = f"exact {obj.name}, N = {data.num_samples}, R = {data.num_rows}"
    if start_score is not None:
        progress_log.info("%s: start (%s) level 1 %.8g, %.1f s", tag, stats.get("start"), start_score[0],
                          time.perf_counter() - t0)
    if (stats.get("pooled") or {}).get("bound") is not None:
        progress_log.info("%s: pooled bound %.8g", tag, stats["pooled"]["bound"])

    eq4 = rank_load(window, placement).max(axis=1) if tighten else None
    budget = Budget(float(time_limit) - (time.perf_counter() - t0))
    relaxation = None
    if relax_bound and data.num_samples > data.num_cells and not skip:
        def run_relaxation():
            if budget.left() < 1.0:
                stats["relaxation"] = {"skipped": f"{budget.left():.1f} s left"}
                return None
            if (stats.get("pooled") or {}).get("bound") is not None:
                # the pooled bound is the stronger (N = 64, G = 2, shard window of
                # scripts/bench_exact.py, seed 0: 35956.1 after 18 s against the
                # relaxation's 35788.7 after 4 s): the later levels get the time
                stats["relaxation"] = {"skipped": "the pooled bound ran"}
                return None
            import_pyomo()  # about a second, once; a Ctrl-C during it leaves no half-made Pyomo
            from .pyomo_model import relaxation_bound

            limit = min(0.8 * budget.left(), 20.0)
            why = too_big(build_seconds(data, coefficients, "pyomo"), limit)
            if why:
                stats["relaxation"] = {"skipped": why}
                return None
            bound, stats["relaxation"], _ = relaxation_bound(
                data, obj, mode, eq4=rank_load(window, placement).max(axis=1) if eq4 is None else eq4,
                integral=min(data.num_samples, 8), time_limit=limit, seed=seed)
            if bound is not None:
                progress_log.info("%s: relaxation bound %.8g", tag, bound)
            return bound

        relaxation = run_relaxation
    if backend == "highs" and relaxation is not None and not stats.get("interrupted"):
        try:
            relaxation()  # reported only
        except KeyboardInterrupt:
            stats["interrupted"] = True
    # again after the start (and HiGHS's relaxation): what is left must still fit the build
    late = not skip and too_big(build, budget.left())
    skip = skip or late
    if stats.get("interrupted"):
        # Ctrl-C before the model: the best start is the answer
        skip, late = "interrupted (Ctrl-C) before the model ran", False
    if skip:
        stats["model"] = skip
        if late and heuristic_start and start is not None and budget.left() >= 1.0:
            # the model stopped fitting only now (the start took its time): the heuristic,
            # from the start, gets what is left instead of leaving it unused
            better = _heuristic_layout(instance, placement, int(num_rows), obj, data, time_limit, seed,
                                       0.9 * budget.left(), start=Plan(placement, start, obj.name, start_score))
            start, start_score, _ = _better_start(instance, placement, obj, mode, start, start_score, better,
                                                  stats, ", then the heuristic from it")
        out = SolveOutcome(None, [], [], {})
    elif backend == "cpsat":
        from .cpsat_model import CpsatPacking

        builder = CpsatPacking(data, obj, mode, tighten=tighten, eq4=eq4)
        stats["scale"] = {"K": builder.scale.K, "att_mult": builder.scale.att_mult,
                          "gamma_int": builder.scale.gamma_int}
        if (polish and start is not None and num_rows == 2 and subsolvers == PROOF and workers is None
                and rows_separable(obj.levels[0], data.num_shards)):
            seconds = min(POLISH_SHARE * budget.left(), POLISH_SECONDS)
            if seconds >= 0.5:
                better, stats["polish"] = builder.polish(start, seconds, seed)
                stats["polish"]["start"] = float(start_score[0])
                start, start_score, stats["polish"]["improved"] = _better_start(
                    instance, placement, obj, mode, start, start_score, better, stats,
                    ", then CP-SAT's portfolio from it")
                progress_log.info("%s: polish -> level 1 %.8g, %.1f s", tag, start_score[0], time.perf_counter() - t0)
                if stats["polish"].pop("interrupted", False):
                    stats["interrupted"] = True
        if stats.get("interrupted"):
            # Ctrl-C while polishing: its layout (or the start) is the answer
            stats["model"] = "interrupted (Ctrl-C) before the model ran"
            out = SolveOutcome(None, [], [], {})
        else:
            # three rows or more: level 1 is there for the bound once the row search improved
            # the start with time for the bound to rise (BOUND_FIRST_SECONDS); else the
            # model's own LNS improves the start
            improve = None if num_rows <= 2 else not bound_first
            out = builder.solve(budget, seed=seed, workers=workers, subsolvers=subsolvers, start=start,
                                extra_bound=relaxation, together=together, improve=improve, cubes=cubes)
    else:
        import_pyomo()
        from .pyomo_model import PyomoPacking

        builder = PyomoPacking(data, obj, mode, tighten=tighten, eq4=eq4, mip_start=mip_start)
        try:
            out = builder.solve(budget, seed=seed, start=start)
        except KeyboardInterrupt:
            # a Ctrl-C before HiGHS's first level ran (e.g. while the MIP start was set up;
            # one during or after a level comes back in the levels): the start is the answer
            stats["interrupted"] = True
            out = SolveOutcome(None, [], [], {})
    stats["build_seconds"] = None
    return _result(instance, placement, obj, out, start, start_score, stats, t0, solver_name, int(num_rows))


def _result(instance, placement, obj, out, start, start_score, stats, t0, solver_name, num_rows) -> Result:
    """Assemble a :class:`Result` from a model outcome (shared with the joint model)."""
    levels = out.levels
    # per level: its own status (a HiGHS level downgraded to feasible says so); what the
    # solver said of its solve moves to "solver_status" (CP-SAT's or HiGHS's name)
    stats["levels"] = []
    for j, o in enumerate(levels):
        entry = dict(o.stats)
        if "status" in entry:
            entry["solver_status"] = entry.pop("status")
        # a later level is solved with the earlier ones held at their integer-scaled optimum:
        # its bound holds only among those layouts (not a bound of the true lexicographic
        # optimum: a layout tied with it in true costs may round one unit higher)
        bound_key = "bound" if j == 0 else "bound_given_earlier_levels"
        stats["levels"].append({**entry, "status": o.status, "value": o.value, bound_key: o.bound})
    stats["rounding"] = list(out.rounding)
    if _interrupted(out):
        stats["interrupted"] = True
    stats["start_score"] = None if start_score is None else list(start_score)
    layout = out.layout
    place = out.extra.get("placement", placement) if out.extra else placement
    if out.extra and "skipped_levels" in out.extra:
        stats["skipped_levels"] = out.extra["skipped_levels"]
    model_broken = layout is not None and layout_violation(instance, layout, num_rows) is not None
    if model_broken:
        # a solver's answer that is no layout (numerics) proves nothing: the start stands
        stats["model_layout"] = f"not a layout ({layout_violation(instance, layout, num_rows)}): discarded"
        layout = None
    plan_score = score(instance, place, layout, obj) if layout is not None else None
    kept_start = start is not None and (plan_score is None or lex_better(start_score, plan_score))
    if kept_start:
        # the solver returned nothing better than the start: keep the start
        layout, place, plan_score = start, placement, start_score
        stats["kept_start"] = True
    # the joint solver's bound holds for every placement, also when its model did not run
    # (then ``place`` is only its start's)
    analytic = cost_bounds(instance, num_rows, None if stats.get("joint") else place)
    bound = analytic.objective(obj)[0]
    stats["analytic_bound"] = bound
    stats["bound_from"] = "analytic"  # which of the bounds below is the largest
    if levels and levels[0].bound is not None and levels[0].bound - out.rounding[0] > bound:
        bound, stats["bound_from"] = levels[0].bound - out.rounding[0], "model"
    # bounds of level 1 from other models: the partial relaxation, the pooled window
    others = {name: (stats.get(name) or {}).get("bound") for name in ("relaxation", "pooled")}
    others = {name: b for name, b in others.items() if b is not None}
    other_bound, other_source = None, None
    if others:
        other_source = max(others, key=others.get)
        other_bound = others[other_source]
        if other_bound > bound:
            bound, stats["bound_from"] = other_bound, other_source
    if levels and levels[0].status == "infeasible":
        stats["reason"] = f"no layout of R={num_rows} rows exists (proven by the {stats['backend']} model)"
        return Result(INFEASIBLE, None, (), None, time.perf_counter() - t0, solver_name, stats)
    if layout is None:
        stats["reason"] = f"no layout of R={num_rows} rows found within the time limit"
        return Result(NO_SOLUTION, None, (), bound, time.perf_counter() - t0, solver_name, stats)
    all_opt = _all_proven(levels, obj) and not model_broken
    if (not all_opt and not model_broken and other_bound is not None and plan_score is not None
            and len(levels) == len(obj.levels)
            and all(o.status == "optimal" for o in levels[1:])
            and other_bound >= plan_score[0] - out.rounding[0] - 1e-9 * abs(plan_score[0])):
        # the relaxation (or the pooled window) proves level 1 (within the rounding margin);
        # the later levels were solved optimally with level 1 held at this value
        all_opt = True
        stats["level1_proven_by"] = other_source
    if all_opt and kept_start:
        # the proofs are of the model's own layout; the start is proven only where it scores
        # what the model proved, level by level (HiGHS: a final layout that broke a held level
        # by its tolerances was worse than the start, and the start's later levels were not)
        off = [j for j, o in enumerate(levels[:len(plan_score)])
               if o.value is not None and abs(plan_score[j] - o.value) > 2 * out.rounding[j] + 1e-9 * abs(o.value)]
        if off:
            all_opt = False
            stats["not_optimal"] = (f"the start was kept (the model's layout scored worse), and its level {off[0] + 1} "
                                    f"({plan_score[off[0]]:.6g}) is not the proven {levels[off[0]].value:.6g}")
    if all_opt and plan_score is not None:
        # a proof of the integer model is one of the true objective only up to twice the
        # rounding margin (CP-SAT's scaled costs): "optimal" within 1e-3 of each level
        # (a level at 0 is at its least: every cost is >= 0)
        loose = [j for j, err in enumerate(out.rounding[:len(plan_score)])
                 if plan_score[j] != 0 and 2 * err > ROUNDING_TOLERANCE * abs(plan_score[j])]
        if loose:
            all_opt = False
            stats["not_optimal"] = (f"level {loose[0] + 1} proven for the integer-scaled costs only: their rounding "
                                    f"can move it by {out.rounding[loose[0]]:.6g}")
    if plan_score is not None and bound > plan_score[0]:
        # (no rounding when the model did not run: skipped, too big, a Ctrl-C before it)
        rounding = out.rounding[0] if out.rounding else 0.0
        if bound > plan_score[0] + 2 * rounding + 1e-9 * abs(plan_score[0]):
            # above a plan's true score by more than the rounding can move it: the solver's
            # proof is wrong (a HiGHS fault, see pyomo_model.NO_RESTART), so neither its
            # bound nor its optimality stands; the analytic bound always holds
            log.warning("exact: the %s bound %.9g is above the plan's score %.9g: not a valid bound; "
                        "the analytic bound is reported and nothing is proven", stats["bound_from"], bound,
                        plan_score[0])
            stats["invalid_bound"] = {"source": stats["bound_from"], "bound": bound}
            stats["not_optimal"] = f"the {stats['bound_from']} bound {bound:.9g} is above the plan's score"
            bound, stats["bound_from"], all_opt = min(stats["analytic_bound"], plan_score[0]), "analytic", False
        else:
            bound = plan_score[0]  # the rounding margin can only widen, never cross the score
    status = OPTIMAL if all_opt else FEASIBLE
    plan = Plan(place, layout, obj.name, plan_score, {"solver": solver_name})
    return Result(status, plan, plan_score, bound, time.perf_counter() - t0, solver_name, stats)


def check_warm_start(instance: Instance, warm_start) -> Placement | None:
    """The placement of a caller's ``warm_start`` (None when there is none), checked
    against ``instance``: one :class:`~rp_opt.errors.InputError` naming ``warm_start``
    when it is not a :class:`Plan` or its placement has the wrong shape."""
    require(warm_start is None or isinstance(warm_start, Plan), "warm_start",
            f"must be a Plan, got {type(warm_start).__name__}")
    if warm_start is None:
        return None
    window = instance.window
    return placement_for(warm_start.placement, instance.cluster.ep, "warm_start", window.num_layers,
                         window.num_experts)


def warm_layout(instance: Instance, warm_start: Plan | None, num_rows: int) -> Layout | None:
    """The layout of a caller's ``warm_start`` (checked by :func:`check_warm_start`), which
    must be a layout of ``instance`` with ``num_rows`` rows (an InputError naming
    ``warm_start`` otherwise), or None. A plan of another window would be planned with as
    if it were this window's (:func:`solve_packing` drops a bad start quietly, for its own
    internal starts)."""
    if warm_start is None:
        return None
    why = layout_violation(instance, warm_start.layout, num_rows)
    require(why is None, "warm_start", f"is not a valid layout of this window's R={num_rows} rows: {why}")
    return warm_start.layout


@register_solver("exact", "exact packing (CP-SAT or HiGHS) for a fixed placement at R = R*")
def solve_exact(instance: Instance, *, objective="sync", time_limit: float = 60.0, seed: int = 0,
                warm_start: Plan | None = None, placement: Placement | None = None, num_rows: int | None = None,
                backend: str = "cpsat", witness: Layout | None = None, **options) -> Result:
    """Exact packing planner.

    Parameters
    ----------
    instance
        Window, cluster, cost model.
    objective
        Registered objective.
    time_limit
        Seconds for everything (R* search included when ``num_rows`` is None).
    seed
        Solver seed.
    warm_start
        A :class:`Plan` to start from; its placement is used when ``placement`` is None.
    placement
        Fixed placement; default ``warm_start.placement``, else LPT.
    num_rows
        R; default R* (:func:`rp_opt.rows.certify_rows`). An integer >= 1 (a string of
        one, as every planner reads it, too).
    backend
        ``cpsat`` (default, faster in the measurements of ``scripts/bench_exact.py``) or ``highs``.
    witness
        A layout of ``num_rows`` rows known to fit, such as R*'s certificate's (the
        :class:`~rp_opt.Planner` passes it): the start when first fit finds none, beside
        the heuristic's start. Unlike ``warm_start`` it does not replace the heuristic's
        start. Ignored when it is not a layout of this window with ``num_rows`` rows, and
        when ``num_rows`` is None (the certification gives one).
    options
        ``symmetry`` (bool), ``tighten`` (bool), ``workers`` (int), ``subsolvers`` (names or None),
        ``mip_start`` (bool), ``heuristic_start`` (bool), ``relax_bound`` (bool), ``row_search`` (bool),
        ``pooled_bound`` (bool), ``polish`` (bool), ``cubes`` (bool), ``together`` (``auto``, ``leading``,
        ``later``, ``none``): see :func:`solve_packing`.
    """
    t0 = time.perf_counter()
    num_rows = integer("num_rows", num_rows, 1, none=True, text=True)
    options = check_options(options)
    time_limit = number("time_limit", time_limit, above=0, hint="seconds")
    warm_placement = check_warm_start(instance, warm_start)
    if placement is not None:
        window = instance.window
        placement = placement_for(placement, instance.cluster.ep, "placement", window.num_layers, window.num_experts)
    else:
        placement = warm_placement if warm_placement is not None else default_placement(instance)
    require(witness is None or isinstance(witness, Layout), "witness",
            f"must be a Layout, got {type(witness).__name__}")
    if num_rows is not None and witness is not None and layout_violation(instance, witness, num_rows) is not None:
        witness = None
    if num_rows is None:
        num_rows, status, reason, witness = _certified_rows(instance, certify_seconds(time_limit, 1.0))
        if num_rows is None:
            return Result(status, None, (), None, time.perf_counter() - t0, "exact", {"reason": reason})
    start = warm_layout(instance, warm_start, num_rows)
    left = max(time_limit - (time.perf_counter() - t0), 1e-3)
    res = solve_packing(instance, placement, num_rows, objective=objective, time_limit=left, seed=seed,
                        start=start, backend=backend, witness=witness, **options)
    # seconds of the whole call, the R* certification and the LPT placement included
    return replace(res, seconds=time.perf_counter() - t0)


from . import joint as _joint  # noqa: E402,F401  (registers the "joint" solver)
