"""The trainer-facing planner: configure once, call :meth:`Planner.plan` every optimizer step.

::

    planner = Planner(Cluster(dp=8, edp=1, ep=4, capacity=4096), "ling-tiny-like", mode="auto")
    step = planner.plan(routing=per_sample_ids, num_experts=64)   # [T_i, L, k] per sample
    step.placement, step.rows, step.migration                      # apply, then train

Per step it (1) turns the replayed routing into a window (:mod:`rp_opt.replay`), (2)
certifies the minimum row count R* (:func:`rp_opt.rows.certify_rows`), (3) runs the solver
of the chosen mode (looked up through :func:`rp_opt.solvers.get_solver`, with a warm start
from the previous step where its shape allows), and (4) relabels the new placement against
the placement in force and lists the transfers (:func:`rp_opt.materialise.migration_plan`).
The planner tracks the placement in force from step to step.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

import numpy as np

from .cost import get_objective, score
from .errors import InputError, integer, number, require, switch
from .result import INFEASIBLE, Plan, Result
from .solution import Layout, Placement, placement_for
from .window import Cluster, CostModel, Instance, Window

log = logging.getLogger("rp_opt")

# mode -> solvers tried in order (the first one registered is used); any registered solver
# name is also accepted as a mode and then used alone
MODES = {
    "auto": ("auto", "heuristic", "lpt-ffd", "baseline"),
    "heuristic": ("heuristic", "lpt-ffd", "baseline"),
    "exact": ("exact", "auto", "heuristic", "lpt-ffd", "baseline"),
}
# baseline planners choose their own placement rule (identity or LPT) and take no seed
_FIXED_PLACEMENT = {"baseline", "kk", "lpt-ffd"}
# solver arguments the Planner sets itself on every call (not accepted in solver_options)
_PLANNER_SET = {"objective", "time_limit", "seed", "warm_start"}


@dataclass(frozen=True)
class StepPlan:
    """The plan of one optimizer step.

    Attributes
    ----------
    step
        Step counter of the planner (0 for the first call).
    instance
        The window, cluster and cost model that were planned.
    plan
        Placement (relabelled to keep experts where they are; same cost) and layout.
    result
        The solver's :class:`~rp_opt.result.Result` (its placement is not relabelled).
    certificate
        The R* certificate (:class:`rp_opt.rows.RowCertificate`).
    migration
        :class:`rp_opt.materialise.MigrationPlan` from the placement in force to ``plan.placement``.
    timings
        Seconds per phase: ``replay``, ``certify``, ``warm_start`` (placement seed and
        warm-start plan), ``solve``, ``migrate``, and ``total``.
    warm_start
        ``"layout"`` (previous placement and layout), ``"placement"`` (previous placement
        with the certificate's layout) or None.
    stats
        ``mode``, and ``migration_decision`` when the planner has a ``migration_cost``
        (then ``plan`` may keep the placement in force: ``score`` is the plan's, while
        ``bound`` and ``gap`` are the solver's).
    """

    step: int
    instance: Instance
    plan: Plan
    result: Result
    certificate: object | None
    migration: object | None
    timings: dict
    warm_start: str | None = None
    stats: dict = field(default_factory=dict, compare=False)

    @property
    def placement(self) -> Placement:
        return self.plan.placement

    @property
    def layout(self) -> Layout:
        return self.plan.layout

    @property
    def rows(self) -> list[list[list[int]]]:
        """rows[r][d] = sample indices of cell (r, d)."""
        return self.plan.layout.to_rows()

    @property
    def num_rows(self) -> int:
        return self.plan.layout.num_rows

    @property
    def r_star(self) -> int | None:
        return self.certificate.r_star

    @property
    def score(self) -> tuple[float, ...]:
        return self.plan.score

    @property
    def bound(self) -> float | None:
        return self.result.bound

    @property
    def gap(self) -> float | None:
        return self.result.gap

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def solver(self) -> str:
        return self.result.solver

    @property
    def seconds(self) -> float:
        return float(self.timings.get("total", 0.0))

    def to_dict(self) -> dict:
        """Plan-file form plus the step's figures (JSON-ready)."""
        out = self.plan.to_dict()
        out.update({
            "step": self.step, "status": self.status, "solver": self.solver, "bound": self.bound,
            "gap": self.gap, "r_star": self.r_star, "timings": dict(self.timings), "warm_start": self.warm_start,
            "migration": None if self.migration is None else self.migration.summary(),
        })
        if "migration_decision" in self.stats:
            out["migration_decision"] = dict(self.stats["migration_decision"])
        return out


def load_cost(cost) -> tuple[CostModel | None, object | None]:
    """(cost model, model spec) from a CostModel, a dict, a JSON path (``rp-opt calibrate -o``)
    or a model spec name (the model is then None: built per window from the spec). A path
    that exists and does not end in ``.toml`` is read as a cost file whatever its name (a
    spec name would call it an unknown model)."""
    if isinstance(cost, CostModel):
        return cost, None
    if isinstance(cost, dict):
        return CostModel.from_dict(cost), None
    require(isinstance(cost, (str, os.PathLike)), "cost",
            f"must be a CostModel, a dict, a cost JSON file or a model name, got {type(cost).__name__}")
    path = os.fspath(cost)
    if path.endswith(".json") or (os.path.exists(path) and not path.endswith(".toml")):
        from .io import read_json

        return CostModel.from_dict(read_json(path, "cost")), None
    from .models import load_spec

    return None, load_spec(path)


class Planner:
    """Plans every optimizer step of a trainer (module docstring).

    Parameters
    ----------
    cluster
        The trainer's :class:`~rp_opt.window.Cluster` (D, G, P, C, m).
    cost
        A :class:`~rp_opt.window.CostModel`, its dict, a cost JSON file (e.g. from
        ``rp-opt calibrate``), or a model spec name (``"ling-flash-like"``): FLOP defaults
        rescaled to the window's MoE layer count.
    objective
        ``sync`` (default), ``shard`` or another registered objective.
    time_limit
        Seconds per step for certification and solving together (a finite number > 0).
    mode
        ``auto``, ``heuristic``, ``exact``, or any registered solver name. A mode's solver
        that is not installed falls back along :data:`MODES` (logged; ``step.solver`` says
        which one ran) unless ``fallback`` is False.
    seed
        Seed of randomised solvers.
    expert_bytes
        Bytes of one expert's state for the migration plan, an integer >= 0 (default: from
        the model spec, else 0).
    current_placement
        The placement in force before the first step (default: identity).
    warm_start
        Seed each step with the previous step's plan where its shape allows.
    certify_share
        Share of ``time_limit`` given to the R* certifier, in (0, 1): the rest is the solver's.
    keep_placement
        Keep the placement in force and plan the packing only (no migration), for
        trainers that cannot hide expert transfers; needs a solver that takes a fixed
        ``placement`` (``heuristic``, ``exact``, ``auto``).
    solver_options
        Extra keyword options passed to the solver.
    migration_cost
        Modelled cost of one byte on the migration's critical path (the busiest rank's
        transfers in sequence, :attr:`~rp_opt.materialise.MigrationPlan.critical_bytes`),
        in the cost model's units (with a calibrated model in seconds: 1 / bandwidth), a
        finite number >= 0. Set,
        the planner adopts a new placement only when its modelled gain on this step's layout
        (the layout scored under the placement in force minus under the new one), times
        ``migration_horizon``, exceeds the migration's cost; otherwise it keeps the placement
        in force with the new layout (``step.stats["migration_decision"]`` says which and
        why). None (default): always adopt the solver's placement.
    migration_horizon
        Steps a new placement is expected to serve (its gain counts this many times), an
        integer >= 1.

    ``warm_start``, ``fallback`` and ``keep_placement`` are switches: True or False
    (Python or numpy bools; the integers 1 and 0 too, as :func:`rp_opt.errors.switch`
    reads every on/off input). Anything else (``"no"``, 2, None) raises
    :class:`~rp_opt.errors.InputError` naming the flag, as do the other bad arguments.
    """

    def __init__(self, cluster: Cluster, cost="ling-tiny-like", *, objective: str = "sync",
                 time_limit: float = 10.0, mode: str = "auto", seed: int = 0, expert_bytes: int | None = None,
                 current_placement: Placement | None = None, warm_start: bool = True, fallback: bool = True,
                 certify_share: float = 0.2, keep_placement: bool = False, solver_options: dict | None = None,
                 migration_cost: float | None = None, migration_horizon: int = 1):
        require(isinstance(cluster, Cluster), "cluster", f"must be a Cluster, got {type(cluster).__name__}")
        self.time_limit = number("time_limit", time_limit, above=0, hint="seconds")
        self.certify_share = number("certify_share", certify_share, above=0)
        # an open upper bound, which errors.number has not: at 1 the solver would get no share
        require(self.certify_share < 1, "certify_share", f"must be a number in (0, 1), got {certify_share!r}")
        self.cluster = cluster
        self.objective = get_objective(objective).name
        from .packing.anneal import check_option

        self.seed = check_option("seed", seed)  # in [0, 2^31 - 1], checked here rather than at step 1
        self.warm_start = switch("warm_start", warm_start)
        self.fallback = switch("fallback", fallback)
        require(solver_options is None or isinstance(solver_options, dict), "solver_options",
                f"must be a dict of solver options, got {type(solver_options).__name__}")
        self.solver_options = dict(solver_options or {})
        clash = sorted(set(self.solver_options) & _PLANNER_SET)
        if clash:
            raise InputError("solver_options", f"{clash[0]!r} is set by the Planner; use Planner's own argument")
        self.keep_placement = switch("keep_placement", keep_placement)
        self._cost, self._spec = load_cost(cost)
        if expert_bytes is None:
            expert_bytes = self._spec.expert_bytes if self._spec is not None else 0
        self.expert_bytes = integer("expert_bytes", expert_bytes, low=0)
        require(isinstance(mode, str) and mode != "", "mode", f"must be a solver mode name, got {mode!r}")
        self.mode = mode
        require(not (self.keep_placement and (MODES.get(mode, (mode,))[0] in _FIXED_PLACEMENT)), "keep_placement",
                f"mode {mode!r} chooses its own placement; use heuristic, exact or auto")
        require(not (self.keep_placement and self.solver_options.get("refine")), "solver_options",
                "refine=True changes the placement, keep_placement=True keeps it: choose one")
        self.migration_cost = number("migration_cost", migration_cost, low=0, none=True)
        self.migration_horizon = integer("migration_horizon", migration_horizon, low=1)
        self._cost_by_layers: dict[int, CostModel] = {}
        self._current = placement_for(current_placement, cluster.ep, "current_placement", none=True)
        self._previous: Plan | None = None
        self.step = 0
        self.solver_name  # resolve now: a bad mode fails at configuration, not at step 1

    # ---------------------------------------------------------------- configuration
    @property
    def solver_name(self) -> str:
        """The solver this planner runs (after fallback)."""
        from .solvers import get_solver

        chain = MODES.get(self.mode, (self.mode,))
        if not self.fallback:
            chain = chain[:1]
        last = None
        for name in chain:
            try:
                get_solver(name)
            except InputError as exc:
                last = exc
                continue
            if name != chain[0]:
                log.info("planner: solver %r is not installed; mode %r uses %r", chain[0], self.mode, name)
            return name
        raise InputError("mode", f"no solver of mode {self.mode!r} is installed ({last})")

    @property
    def current_placement(self) -> Placement | None:
        """The placement in force (None before the first step unless one was given)."""
        return self._current

    def reset(self, placement: Placement | None = None) -> None:
        """Forget the previous step; the placement in force becomes ``placement``."""
        self._current = placement_for(placement, self.cluster.ep, "placement", none=True)
        self._previous = None

    def cost_model(self, num_layers: int) -> CostModel:
        """The cost model for windows of ``num_layers`` MoE layers."""
        if self._cost is not None:
            return self._cost
        if num_layers not in self._cost_by_layers:
            from .models import cost_from_spec

            self._cost_by_layers[num_layers] = cost_from_spec(self._spec, num_layers)
        return self._cost_by_layers[num_layers]

    # ---------------------------------------------------------------- one step
    def instance(self, lengths=None, routing=None, *, num_experts: int | None = None, mask=None,
                 top_k: int | None = None, attn_work=None) -> Instance:
        """The :class:`~rp_opt.window.Instance` of one step (see :meth:`plan`)."""
        from .replay import Replay, replay

        require(routing is not None, "routing", "is required (per-sample ids, a padded batch, or counts [N, L, E])")
        if num_experts is None:
            if self._spec is not None:
                num_experts = self._spec.num_experts
            elif isinstance(routing, np.ndarray) and routing.ndim == 3:
                num_experts = routing.shape[2]
            elif isinstance(routing, Replay):
                num_experts = routing.demand.shape[2]
            else:
                raise InputError("num_experts", "is needed to read expert ids when the planner has no model spec")
        if top_k is None and self._spec is not None and not isinstance(routing, (list, tuple)) \
                and np.ndim(routing) == 3:
            top_k = self._spec.top_k
        rep = replay(routing, num_experts=num_experts, mask=mask, lengths=lengths, top_k=top_k)
        # a padded batch (or a Replay) carries its own k; replay() does not compare it with top_k
        require(top_k is None or rep.top_k is None or int(top_k) == rep.top_k, "top_k",
                f"is {top_k}, the routing's ids have k={rep.top_k}")
        if lengths is not None:
            lengths = np.asarray(lengths)
            require(lengths.shape == rep.lengths.shape, "lengths",
                    f"has shape {lengths.shape}, the routing has {rep.lengths.size} samples")
        else:
            lengths = rep.lengths
        window = Window(lengths, rep.demand, top_k or rep.top_k or _infer_k(rep), attn_work)
        meta = {"step": self.step}
        return Instance(window, self.cluster, self.cost_model(window.num_layers),
                        self._spec.name if self._spec is not None else "custom", meta)

    def plan(self, lengths=None, routing=None, *, num_experts: int | None = None, mask=None,
             top_k: int | None = None, attn_work=None, commit: bool = True) -> StepPlan:
        """Plan one optimizer step.

        Parameters
        ----------
        lengths
            T[N] (optional: taken from the routing; given lengths override them).
        routing
            Per-sample expert ids [T_i, L, k] (list), a padded batch [B, S, L, k] with
            ``mask``, precomputed counts [N, L, E], or an :class:`~rp_opt.replay.Replay`.
        num_experts
            E (default: the model spec's, or the counts' last axis).
        mask
            [B, S] attention mask of a padded batch.
        top_k
            k (default: from the routing, or the model spec for counts).
        attn_work
            Q[N] (default T^2).
        commit
            Make the new placement the one in force and remember the plan for the next
            step's warm start (default). False plans without changing the planner. A
            switch (True or False; see the class docstring).

        Returns
        -------
        StepPlan
        """
        from .materialise import migration_plan

        commit = switch("commit", commit)
        start = time.perf_counter()
        instance = self.instance(lengths, routing, num_experts=num_experts, mask=mask, top_k=top_k,
                                 attn_work=attn_work)
        window = instance.window
        timings = {"replay": time.perf_counter() - start}
        current = self._current
        if current is None:
            current = Placement.identity(window.num_layers, window.num_experts, self.cluster.ep)
        require(current.ranks.shape == (window.num_layers, window.num_experts), "routing",
                f"has (L, E) = ({window.num_layers}, {window.num_experts}), the placement in force has "
                f"{current.ranks.shape}")

        t = time.perf_counter()
        certificate = self._certify(window)
        timings["certify"] = time.perf_counter() - t

        t = time.perf_counter()
        warm, seed_placement, warm_kind = self._warm_start(instance, certificate)
        timings["warm_start"] = time.perf_counter() - t
        name = self.solver_name
        from .solvers import get_solver

        solver = get_solver(name)
        options = dict(self.solver_options)
        if certificate.r_star is not None:
            # R* is proven once per step; every registered planner takes it as ``num_rows``
            options.setdefault("num_rows", certificate.r_star)
        if name not in _FIXED_PLACEMENT:
            if self.keep_placement:
                options.setdefault("placement", current)
            elif seed_placement is not None:
                options.setdefault("placement", seed_placement)
        remaining = max(0.1 * self.time_limit, self.time_limit - (time.perf_counter() - start))
        t = time.perf_counter()
        result = solver(instance, objective=self.objective, time_limit=remaining, seed=self.seed,
                        warm_start=warm, **options)
        timings["solve"] = time.perf_counter() - t
        if result.plan is None:
            raise InputError("window", f"solver {result.solver} returned no plan (status {result.status_text()})")

        t = time.perf_counter()
        migration = migration_plan(current, result.plan.placement, self.expert_bytes)
        # relabelling permutes ranks within each layer: the cost is unchanged
        plan = Plan(migration.placement, result.plan.layout, result.plan.objective, result.plan.score,
                    result.plan.stats)
        extra = {"mode": self.mode}
        if self.migration_cost is not None and migration.num_transfers:
            # gain of moving experts for this layout vs the price of moving them
            stay = score(instance, current, result.plan.layout, self.objective)
            gain = stay[0] - result.plan.score[0]
            price = self.migration_cost * migration.critical_bytes
            adopt = gain * self.migration_horizon > price
            extra["migration_decision"] = {"migrate": bool(adopt), "gain": float(gain), "price": float(price),
                                           "horizon": self.migration_horizon, "score_kept": list(stay)}
            if not adopt:
                migration = migration_plan(current, current, self.expert_bytes)
                plan = Plan(current, result.plan.layout, result.plan.objective, stay, result.plan.stats)
        timings["migrate"] = time.perf_counter() - t
        timings["total"] = time.perf_counter() - start
        step = StepPlan(self.step, instance, plan, result, certificate, migration, timings, warm_kind, extra)
        if commit:
            self._current = plan.placement
            self._previous = plan
            self.step += 1
        log.info("planner step %d: %s %s in %.3f s, R=%d, %d transfers", step.step, result.solver, result.status,
                 timings["total"], plan.num_rows, migration.num_transfers)
        return step

    # ---------------------------------------------------------------- helpers
    def _certify(self, window: Window):
        from .rows import certify_rows

        cert = certify_rows(window, self.cluster, time_limit=self.certify_share * self.time_limit)
        if cert.status == INFEASIBLE:
            raise InputError("window", cert.no_rows()[1])
        return cert

    def _warm_start(self, instance: Instance, certificate) -> tuple[Plan | None, Placement | None, str | None]:
        """(warm-start plan, placement seed, kind) from the previous step.

        The placement seed is, per layer, the better (lower max_p L[l,p], ties to the
        previous one: fewer moves) of LPT + swap local search and the previous step's
        placement improved by the same local search. The warm-start layout is the previous
        layout when it is a layout of this window (same N, capacity, R = R*), else the
        certificate's witness (a layout for other samples is no layout here).
        """
        prev = self._previous
        window, cluster = instance.window, instance.cluster
        if not self.warm_start or prev is None:
            return None, None, None
        if prev.placement.ranks.shape != (window.num_layers, window.num_experts):
            return None, None, None
        seed = _seed_placement(window, prev.placement)
        r_star = certificate.r_star
        layout, kind = None, "placement"
        if _layout_fits(prev.layout, window, cluster) and (r_star is None or prev.layout.num_rows == r_star):
            layout, kind = prev.layout, "layout"
        elif certificate.witness is not None and \
                (r_star is None or certificate.witness.num_rows == r_star):
            layout = certificate.witness
        if layout is None:
            return None, seed, kind
        value = score(instance, seed, layout, self.objective)
        return Plan(seed, layout, self.objective, value, {"warm_start": kind}), seed, kind


def _seed_placement(window: Window, previous: Placement) -> Placement:
    """Per layer, the better of LPT + local search and local search from ``previous``."""
    from .placement import layer_rank_loads, local_search_placement

    load = window.expert_load()
    fresh = local_search_placement(window, previous.num_ranks)
    kept = local_search_placement(window, previous.num_ranks, start=previous)
    peak_fresh = layer_rank_loads(load, fresh.ranks, previous.num_ranks).max(axis=1)
    peak_kept = layer_rank_loads(load, kept.ranks, previous.num_ranks).max(axis=1)
    use_fresh = peak_fresh < peak_kept
    return Placement(np.where(use_fresh[:, None], fresh.ranks, kept.ranks), previous.num_ranks)


def _layout_fits(layout: Layout, window: Window, cluster: Cluster) -> bool:
    """True when ``layout`` is a valid layout of ``window`` (shape, capacity, non-empty, m)."""
    if layout.cell_of.size != window.num_samples or layout.num_slots != cluster.dp:
        return False
    tokens = np.bincount(layout.cell_of, weights=window.lengths, minlength=layout.num_cells)
    sizes = np.bincount(layout.cell_of, minlength=layout.num_cells)
    m = cluster.max_samples_per_cell
    return bool(np.all(tokens <= cluster.capacity) and np.all(sizes >= 1) and (m is None or np.all(sizes <= m)))


def _infer_k(rep) -> int:
    from .replay import infer_top_k

    return infer_top_k(rep.lengths, rep.demand)

