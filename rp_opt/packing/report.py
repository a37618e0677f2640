"""What the heuristic's report adds to a plan: its lower bounds (for every placement and
layout of R rows, :mod:`rp_opt.bounds`, and for the plan's own placement) and the
baseline plan's score.

The row excess for every placement (:func:`rp_opt.bounds.every_placement_row_excess`)
takes a few passes over a[i,l,e]; a plan adds it where
:func:`rp_opt.bounds.hidden_seconds` fits its budget, or computes it beside the search
(:class:`BackgroundBound`).
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import replace

import numpy as np

from ..bounds import cost_bounds, hidden_seconds, placement_row_excess, strong_bounds
from ..errors import InputError
from ..objectives import get_objective
from ..solution import Layout, Placement
from ..window import Instance
from .workers import quiet_worker

# most of the time limit the row excess for every placement may take (by
# :func:`hidden_seconds`): beyond it the report keeps the other bounds
HIDDEN_SHARE = 0.1
# ... and beside the search, in a process of its own, where it fits this share
BACKGROUND_SHARE = 0.7


class BackgroundBound:
    """The row excess for every placement (:func:`rp_opt.bounds.every_placement_row_excess`)
    in a forked process beside the plan, so that the plan's report gets the bound a
    separate certificate would give. It costs the search: measured on the 5-s `sync` plan
    of the N = 4096 reference window, 8864637, 8865242, 8865555 with it against 8863727,
    8863636 without (about 0.015 %; niced, 8864355-8865034); on 2026-12-06, 8867994 and
    8868816 against 8864288 and 8864528 (about 0.04 %): hence off by default."""

    def __init__(self, instance: Instance, num_rows: int, load: np.ndarray | None):
        ctx = mp.get_context("fork")
        self._conn, child = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_background_row_excess, args=(child, instance, num_rows, load), daemon=True)
        self._proc.start()
        child.close()

    def running(self) -> bool:
        return self._proc.is_alive()

    def result(self) -> float | None:
        """The row excess if it is ready now (else None); the process is stopped."""
        value = None
        try:
            if self._conn.poll(0):
                value = self._conn.recv()
        except (EOFError, OSError):
            value = None
        self.close()
        return value

    def close(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join()
        self._conn.close()


def _background_row_excess(conn, instance, num_rows, load):
    from ..bounds import every_placement_row_excess

    quiet_worker()
    try:
        # one thread: the search runs beside it
        conn.send(every_placement_row_excess(instance, num_rows, None, load, threads=1))
    except Exception:  # the plan keeps its other bounds
        conn.send(None)
    finally:
        conn.close()


def report_bounds(instance: Instance, placement: Placement, num_rows: int, objective, demand_by_rank,
                  baseline: bool = True, ffd: Layout | None = None, load: np.ndarray | None = None,
                  hidden_budget: float | None = None, every_row_excess: float | None = None) -> dict:
    """Lower bounds on the primary (and, with ``baseline``, the baseline's score).

    ``lower_bound`` holds for every placement and layout of ``num_rows`` rows (MODEL.md
    analytic bounds with the placement-free expert bound strengthened by the pigeonhole
    bound of :func:`rp_opt.placement.placement_lower_bound`, and for a primary of row
    maxima the row excess for every placement where :func:`hidden_seconds` fits
    ``hidden_budget`` seconds, always when None: ``hidden_bound``, None where it does not
    apply; ``every_row_excess`` is that part, None where not computed, and taken as given
    when the caller passes it from an earlier call: a refined placement needs no new one);
    ``placement_bound`` holds
    only for this placement (the packing's own gap); ``lower_bounds`` is the
    :class:`rp_opt.bounds.CostBounds` behind ``lower_bound`` (for its gap split). Reuses ``demand_by_rank`` and
    ``load`` (= ``window.expert_load()``) instead of recomputing them.
    """

    out: dict = {}
    objective = get_objective(objective)
    if load is not None and demand_by_rank.ndim == 3 and demand_by_rank.strides[1] < demand_by_rank.strides[2]:
        # the rank-major demand's [N, L, P] view: the bounds from it and the load (no pass over a)
        analytic = cost_bounds(instance, num_rows, load=load, tokens=demand_by_rank.sum(axis=2, dtype=np.int64))
    else:
        analytic = cost_bounds(instance, num_rows)
    # (only a primary of row maxima takes it, and only with a full-length sample it is > 0)
    applies = analytic.row_charge > 0 and analytic.uses_row_maxima(objective)
    hidden = applies and (every_row_excess is not None or hidden_budget is None
                          or hidden_seconds(instance) <= hidden_budget)
    strong = strong_bounds(instance, num_rows, load, analytic, hidden=hidden, every_row_excess=every_row_excess)
    out["hidden_bound"] = bool(hidden) if applies else None
    out["every_row_excess"] = strong.row_excess if hidden else None
    out["analytic_bounds"] = analytic
    out["analytic_bound"] = analytic.objective(objective)[0]
    strong_value = strong.objective(objective)[0]
    out["lower_bound"] = max(out["analytic_bound"], strong_value)
    out["lower_bounds"] = strong if strong_value >= out["analytic_bound"] else analytic
    # this placement: Eq. 4 with its aggregate rank loads, and each sample's own peak
    gamma = instance.cost.gamma
    rank_loads = demand_by_rank.sum(axis=0)                                # [L, P]
    own = replace(analytic, expert_total=gamma * float(rank_loads.max(axis=1).sum()),
                  sample_expert=gamma * demand_by_rank.max(axis=2).sum(axis=1).astype(np.float64),
                  row_excess=max(strong.row_excess,   # (every placement's holds for this one too)
                                 placement_row_excess(instance, num_rows, demand_by_rank, analytic.sample_attention,
                                                      rank_loads)))
    out["placement_bound"] = own.objective(objective)[0]
    if baseline:
        out.update(baseline_score(instance, num_rows, objective, ffd))
    return out


def baseline_score(instance: Instance, num_rows: int, objective, ffd: Layout | None = None) -> dict:
    """Score of the baseline plan identity placement + ffd packing (for the report)."""
    from ..cost import score as full_score
    from .baseline import pack

    out: dict = {}
    try:
        layout = ffd if ffd is not None else pack(instance, "ffd", num_rows)[0]
        identity = Placement.identity(instance.window.num_layers, instance.window.num_experts, instance.cluster.ep)
        out["baseline_score"] = list(full_score(instance, identity, layout, objective))
        out["baseline_rows"] = layout.num_rows
    except InputError as exc:
        out["baseline_error"] = str(exc)
    return out


def improvement(baseline: float, value: float) -> float | None:
    """(baseline - value) / baseline: the share of the baseline's primary a plan saves.

    0 when both are 0 (a window whose every plan costs nothing), None when only the
    baseline is 0 (no share of nothing).
    """
    if baseline == 0:
        return 0.0 if value == 0 else None
    return (baseline - value) / baseline


