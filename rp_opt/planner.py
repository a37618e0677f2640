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

A step never returns a plan worse (lexicographically) than one that moves no expert and
that it can score: the previous step's plan when it is still a plan of this window (same
N, its layout within capacity, no empty cell, at most m samples a cell, the same row
count), and the placement in force with the new layout. Ties go to the plan that moves
nothing; ``StepPlan.decision`` says which plan was returned (``new``, ``previous`` or
``placement``), and ``bound``/``gap`` describe that plan.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

import numpy as np

from .cost import score
from .errors import InputError, integer, number, require, switch
from .objectives import get_objective
from .result import EVERY_PLACEMENT, FEASIBLE, INFEASIBLE, OPTIMAL, Plan, Result, lex_better, relative_gap
from .solution import Layout, Placement, placement_for
from .solvers import get_solver, takes_placement
from .window import Cluster, CostModel, Instance, Window

log = logging.getLogger("rp_opt")

# mode -> solvers tried in order (the first one registered is used); any registered solver
# name is also accepted as a mode and then used alone
MODES = {
    "auto": ("auto", "heuristic", "lpt-ffd", "baseline"),
    "heuristic": ("heuristic", "lpt-ffd", "baseline"),
    "exact": ("exact", "auto", "heuristic", "lpt-ffd", "baseline"),
}
# baseline planners: fixed rules (identity or LPT placement, a packing rule), num_rows only
_BASELINES = {"baseline", "kk", "lpt-ffd"}
# solver arguments the Planner sets itself on every call (not accepted in solver_options)
_PLANNER_SET = {"objective", "time_limit", "seed", "warm_start"}
# StepPlan.decision: which plan a step returned
NEW, PREVIOUS, KEPT_PLACEMENT = "new", "previous", "placement"


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
        The solver's :class:`~rp_opt.result.Result` (its placement is not relabelled; its
        plan is the one returned only when ``decision`` is ``new``).
    certificate
        The R* certificate (:class:`rp_opt.rows.RowCertificate`).
    migration
        :class:`rp_opt.materialise.MigrationPlan` from the placement in force to ``plan.placement``.
    timings
        Seconds per phase: ``replay``, ``certify``, ``warm_start`` (placement seed and
        warm-start plan), ``solve``, ``migrate``, ``choose`` (scoring the plans that move
        nothing, and the bound of a kept plan), and ``total``.
    warm_start
        ``"layout"`` (previous placement and layout), ``"placement"`` (previous placement
        with the certificate's layout) or None.
    stats
        ``mode``; ``decision`` (see :attr:`decision`) and ``candidates`` (the score of
        every plan the step chose among: ``new``, and ``previous`` / ``placement`` where
        they applied); ``bound``, ``bound_scope``, ``bound_from`` and ``status`` of the
        returned plan; ``inputs`` (where E, k and the lengths came from: the call, the
        routing, the model spec, or derived); ``migration_decision`` when the planner has
        a ``migration_cost``.
    placement, layout
        Properties: ``plan.placement`` and ``plan.layout``.
    rows, num_rows
        Properties: ``rows[r][d]`` = sample indices of cell (r, d); the plan's row count R.
    r_star
        Property: R* from :attr:`certificate` (None when it was not proven in time).
    score
        Property: the returned plan's lexicographic score (``plan.score``).
    bound, bound_scope, gap, status, decision, solver, engine
        Properties of the returned plan and the solve (each documented below).
    seconds
        Property: wall time of the whole step, ``timings["total"]``.
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
        """The returned plan's placement (``plan.placement``)."""
        return self.plan.placement

    @property
    def layout(self) -> Layout:
        """The returned plan's layout (``plan.layout``)."""
        return self.plan.layout

    @property
    def rows(self) -> list[list[list[int]]]:
        """rows[r][d] = sample indices of cell (r, d)."""
        return self.plan.layout.to_rows()

    @property
    def num_rows(self) -> int:
        """Rows R of the returned plan's layout."""
        return self.plan.layout.num_rows

    @property
    def r_star(self) -> int | None:
        """R*, the certified minimum row count (``certificate.r_star``); None when the
        certifier did not prove it within its share of the time limit."""
        return self.certificate.r_star

    @property
    def score(self) -> tuple[float, ...]:
        """Lexicographic score of the returned plan under the planner's objective
        (``plan.score``)."""
        return self.plan.score

    @property
    def decision(self) -> str:
        """Which plan the step returned: ``new`` (the solver's), ``previous`` (the previous
        step's plan, still valid here and at least as good) or ``placement`` (the placement
        in force with the solver's layout: at least as good, or the migration was not worth
        its ``migration_cost``). The last two move no expert."""
        return self.stats.get("decision", NEW)

    @property
    def bound(self) -> float | None:
        """Proven lower bound on the primary level, valid for the returned plan
        (:attr:`bound_scope` says over which plans)."""
        return self.stats["bound"] if "bound" in self.stats else self.result.bound

    @property
    def bound_scope(self) -> str | None:
        """What :attr:`bound` ranges over: ``every placement`` (any placement and layout of
        the plan's rows) or ``the given placement`` (layouts for the plan's own placement)."""
        if "bound_scope" in self.stats:
            return self.stats["bound_scope"]
        return self.result.stats.get("bound_scope") if isinstance(self.result.stats, dict) else None

    @property
    def gap(self) -> float | None:
        """Relative gap of the returned plan's primary level to :attr:`bound`."""
        return relative_gap(self.score[0] if self.score else None, self.bound)

    @property
    def status(self) -> str:
        """``optimal`` or ``feasible``, of the returned plan (the solver's status when it is
        the solver's plan)."""
        return self.stats.get("status", self.result.status)

    @property
    def solver(self) -> str:
        """The registered solver that ran (``auto`` in mode auto: :attr:`engine` says which
        of its solvers produced the plan; a baseline's rule, e.g. ``identity+ffd`` for
        ``baseline``, is ``result.solver``)."""
        return self.stats.get("solver") or self.result.solver

    @property
    def engine(self) -> str:
        """The solver that produced the solver's plan: in mode ``auto``, its choice
        (``heuristic``, or ``exact`` with a heuristic MIP start; ``heuristic`` again when the
        exact model did not beat its start), else :attr:`solver`."""
        stats = self.result.stats if isinstance(self.result.stats, dict) else {}
        return stats.get("auto_kept") or stats.get("auto_choice") or self.solver

    @property
    def seconds(self) -> float:
        """Wall time of the whole step in seconds (``timings["total"]``; 0 when absent)."""
        return float(self.timings.get("total", 0.0))

    def to_dict(self) -> dict:
        """Plan-file form (with the window's fingerprint, :func:`rp_opt.io.plan_to_dict`)
        plus the step's figures (JSON-ready). ``migration`` has the summary and, for a
        trainer outside Python, ``transfer_list`` ([layer, expert, from rank, to rank,
        bytes] each) and ``round_list`` (each round's transfers, by their index in
        ``transfer_list``): :meth:`rp_opt.materialise.MigrationPlan.to_dict`."""
        from .io import plan_to_dict

        out = plan_to_dict(self.plan, self.instance)
        out.update({
            "step": self.step, "status": self.status, "solver": self.solver, "engine": self.engine,
            "bound": self.bound, "bound_scope": self.bound_scope, "gap": self.gap, "r_star": self.r_star,
            "timings": dict(self.timings), "warm_start": self.warm_start, "decision": self.decision,
            "migration": None if self.migration is None else self.migration.to_dict(),
        })
        for key in ("candidates", "inputs", "migration_decision"):
            if key in self.stats:
                out[key] = dict(self.stats[key])
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
        Seed each step with the previous step's plan where its shape allows. (Whatever
        this says, a step returns the previous plan instead of a worse one when it is
        still valid: module docstring.)
    fallback
        True (default): when the mode's solver is not installed, use the next installed
        one along :data:`MODES` (logged at INFO on the ``rp_opt`` logger;
        ``step.solver`` says which one ran). False: only the mode's own solver; when it is
        not installed, the constructor raises :class:`~rp_opt.errors.InputError` naming
        ``mode``.
    certify_share
        Share of ``time_limit`` given to the R* certifier, in (0, 1): the rest is the solver's.
    keep_placement
        Keep the placement in force and plan the packing only (no migration), for
        trainers that cannot hide expert transfers; needs a solver that takes a fixed
        ``placement`` (``heuristic``, ``exact``, ``auto``).
    solver_options
        Extra keyword options passed to the solver, checked here against the options of
        the solver the mode runs (``heuristic`` and ``auto``: the heuristic's own check,
        :func:`rp_opt.packing.heuristic_options.heuristic_inputs`; ``exact``:
        :func:`rp_opt.packing.exact.check_options`; the baselines: ``num_rows``); an unknown
        option or a bad value is one line naming ``solver_options``. Other registered
        solvers check their options when they run.
    migration_cost
        Modelled cost of one byte on the migration's critical path (the busiest rank's
        transfers in sequence, :attr:`~rp_opt.materialise.MigrationPlan.critical_bytes`),
        in the cost model's units (with a calibrated model in seconds: 1 / bandwidth), a
        finite number >= 0. Set,
        the planner adopts a new placement only when its modelled gain (primary level) over
        the best plan that moves nothing (the previous plan when it is still valid, else the
        placement in force with the new layout), times ``migration_horizon``, exceeds the
        migration's cost; otherwise it returns that plan (``step.stats["migration_decision"]``
        says which and why). None (default): the solver's placement is adopted when its plan
        scores strictly better (lexicographically) than every plan that moves nothing.
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
        from .packing.heuristic_options import check_option

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
        require(not (self.keep_placement and not takes_placement(self.solver_name)), "keep_placement",
                f"mode {mode!r} chooses its own placement; use heuristic, exact or auto")
        require(not (self.keep_placement and self.solver_options.get("refine")), "solver_options",
                "refine=True changes the placement, keep_placement=True keeps it: choose one")
        require(not (self.keep_placement and "placement" in self.solver_options), "solver_options",
                "a placement here replaces the one in force, keep_placement=True keeps it: choose one")
        self.migration_cost = number("migration_cost", migration_cost, low=0, none=True)
        self.migration_horizon = integer("migration_horizon", migration_horizon, low=1)
        self._cost_by_layers: dict[int, CostModel] = {}
        self._current = placement_for(current_placement, cluster.ep, "current_placement", none=True)
        self._previous: Plan | None = None
        # seconds the last step spent after its solve (migration plan, choice, scaled to
        # three candidates) and past the solver's limit: the next solve leaves them (at
        # N = 16384 they were 0.6 s beyond a 5-s limit)
        self._after_solve = 0.0
        self._score_seconds = 0.0    # one scoring of a candidate plan, as last measured
        self._warned_lengths = False
        self.step = 0
        # resolve now: a bad mode, or an option its solver does not take, fails at
        # configuration rather than at step 1 (after replay and certification)
        check_solver_options(self.solver_name, self.solver_options, self.time_limit, self.seed)
        if self.solver_name == "exact":
            # Pyomo (the exact planner's HiGHS backend and partial relaxation) imports here,
            # once, not inside a step's limit: 0.45-0.5 s of a 0.5-s first step. Not for
            # auto: at production sizes it runs the heuristic alone, which never needs it
            from ._highs import import_pyomo

            import_pyomo()

    # ---------------------------------------------------------------- configuration
    @property
    def solver_name(self) -> str:
        """The solver this planner runs (after fallback)."""
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
        return self._instance(lengths, routing, num_experts=num_experts, mask=mask, top_k=top_k,
                              attn_work=attn_work)[0]

    def _instance(self, lengths, routing, *, num_experts, mask, top_k, attn_work) -> tuple[Instance, dict]:
        """(instance, inputs): ``inputs`` says where E, k and the lengths came from.

        E and k the call does not give come from the model spec (ids, or counts without
        ``top_k``); every error that depends on such a value says so, and lengths derived
        from counts with the spec's k are logged (a warning, once per planner)."""
        from .replay import Replay, replay

        require(routing is not None, "routing", "is required (per-sample ids, a padded batch, or counts [N, L, E])")
        spec = f"the model spec {self._spec.name!r}" if self._spec is not None else None
        replayed = isinstance(routing, Replay)
        counts = not replayed and not isinstance(routing, (list, tuple)) and _ndim(routing) == 3
        inputs, experts_from, k_from = {}, None, None
        if num_experts is not None:
            inputs["num_experts"] = "num_experts"
        elif replayed:
            num_experts, inputs["num_experts"] = routing.demand.shape[2], "the Replay"
        elif self._spec is not None:
            num_experts, experts_from = self._spec.num_experts, spec
            inputs["num_experts"] = spec
        elif counts:  # a numpy array or a tensor of counts [N, L, E]
            num_experts, inputs["num_experts"] = int(routing.shape[2]), "the counts"
        else:
            raise InputError("num_experts", "is needed to read expert ids when the planner has no model spec")
        if replayed:
            require(num_experts == routing.demand.shape[2] and not isinstance(num_experts, bool), "num_experts",
                    f"is {num_experts!r}, the Replay has E={routing.demand.shape[2]}")
            require(mask is None, "mask", "is only used with a padded batch, not with a Replay")
        if top_k is not None:
            inputs["top_k"] = "top_k"
        elif counts and self._spec is not None:
            top_k, k_from = self._spec.top_k, spec
        rep = replay(routing, num_experts=num_experts, mask=mask, lengths=lengths, top_k=top_k, top_k_from=k_from,
                     num_experts_from=experts_from)
        # a padded batch (or a Replay) carries its own k; replay() does not compare it with top_k
        require(top_k is None or rep.top_k is None or int(top_k) == rep.top_k, "top_k",
                f"is {top_k}, the routing's ids have k={rep.top_k}")
        if lengths is not None:
            lengths = np.asarray(lengths)
            require(lengths.shape == rep.lengths.shape, "lengths",
                    f"has shape {lengths.shape}, the routing has {rep.lengths.size} samples")
            inputs["lengths"] = "lengths"
        else:
            lengths = rep.lengths
            inputs["lengths"] = f"the counts: T_i = tokens per layer / k={top_k}" if counts else "the routing"
        k = top_k or rep.top_k
        if k_from is not None:
            inputs["top_k"] = k_from
        elif "top_k" not in inputs:
            inputs["top_k"] = "the routing" if k is not None else "the counts and lengths (most routed per token)"
        if k is None:
            k = _infer_k(rep)
        if counts and lengths is rep.lengths and k_from is not None:
            (log.info if self._warned_lengths else log.warning)(
                "planner: lengths derived from counts as T_i = tokens per layer / k, k=%d from %s; pass top_k= or "
                "lengths= if your router differs", k, k_from)
            self._warned_lengths = True
        try:
            window = Window(lengths, rep.demand, k, attn_work)
        except InputError as exc:
            if exc.field != "demand":
                raise
            # the window's demand is the caller's routing (ids or counts) read against the
            # lengths: name what was passed, not the internal array
            given = "lengths" if inputs["lengths"] == "lengths" else "routing"
            raise InputError(given, exc.message + (" (the routing does not fit these lengths)"
                                                   if given == "lengths" else "")) from None
        meta = {"step": self.step}
        return Instance(window, self.cluster, self.cost_model(window.num_layers),
                        self._spec.name if self._spec is not None else "custom", meta), inputs

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
            E (default: a Replay's, else the model spec's, else the counts' last axis). An
            error that depends on the spec's E says so; pass it whenever the trainer's
            model is not the spec's (ids of a 16-expert model read with E = 256 give a
            window of 256 experts).
        mask
            [B, S] attention mask of a padded batch.
        top_k
            k (default: from the ids; for counts, the model spec's). Counts without
            ``lengths`` derive T_i = tokens per layer / k: with the spec's k (logged as a
            warning once per planner; every error that depends on it says so) top-2
            counts read as top-8 give lengths 4x too small whenever the counts are
            consistent with both (:func:`rp_opt.replay.demand_from_counts`). Pass
            ``lengths`` with counts.
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
        # ``total`` counts from here: the first step's imports (0.17 s) are in it, not in ``replay``
        start = time.perf_counter()
        from .materialise import migration_plan

        commit = switch("commit", commit)
        t = time.perf_counter()
        instance, inputs = self._instance(lengths, routing, num_experts=num_experts, mask=mask, top_k=top_k,
                                          attn_work=attn_work)
        window = instance.window
        timings = {"replay": time.perf_counter() - t}
        current = self._current
        if current is None:
            current = Placement.identity(window.num_layers, window.num_experts, self.cluster.ep)
        from .replay import experts_note

        source = experts_note(window.num_experts, None if inputs["num_experts"] == "num_experts" else
                              inputs["num_experts"])
        require(current.ranks.shape == (window.num_layers, window.num_experts), "routing",
                f"has (L, E) = ({window.num_layers}, {window.num_experts}), the placement in force has "
                f"{current.ranks.shape}{source}; planner.reset() when the model itself changed")

        t = time.perf_counter()
        certificate = self._certify(window)
        timings["certify"] = time.perf_counter() - t

        t = time.perf_counter()
        # the rows the solver plans with: the caller's num_rows, else R*
        rows = integer("num_rows", self.solver_options.get("num_rows"), 1, text=True, none=True)
        warm, seed_placement, warm_kind = self._warm_start(instance, certificate,
                                                           certificate.r_star if rows is None else rows)
        timings["warm_start"] = time.perf_counter() - t
        name = self.solver_name
        solver = get_solver(name)
        options = dict(self.solver_options)
        if certificate.r_star is not None:
            # R* is proven once per step; every registered planner takes it as ``num_rows``
            options.setdefault("num_rows", certificate.r_star)
        if name == "exact":
            # the exact planner starts from a caller's warm start instead of running the
            # heuristic for one: the certificate's layout only shows that R* rows fit (a
            # 7 % worse step 1 than a cold solve), so it goes as ``witness`` (the start when
            # first fit finds none; without it a short limit left no plan at all)
            if warm is not None and warm_kind != "layout":
                warm = None
            if certificate.witness is not None:
                options.setdefault("witness", certificate.witness)
        if name in ("heuristic", "auto"):
            # the identity + ffd score for the report runs after the plan, outside the
            # heuristic's limit (0.17 s at N = 16384): a trainer's step has no use for it
            options.setdefault("report_baseline", False)
        if takes_placement(name):
            if self.keep_placement:
                options.setdefault("placement", current)
            elif seed_placement is not None:
                options.setdefault("placement", seed_placement)
        remaining = max(0.1 * self.time_limit, self.time_limit - (time.perf_counter() - start) - self._after_solve)
        timings["solve_limit"] = remaining
        t = time.perf_counter()
        result = solver(instance, objective=self.objective, time_limit=remaining, seed=self.seed,
                        warm_start=warm, **options)
        timings["solve"] = time.perf_counter() - t
        if isinstance(result.stats, dict) and result.stats.get("interrupted"):
            # the solver kept its best plan on Ctrl-C (what the command line wants); a
            # training loop wants to stop: the step is not committed
            raise KeyboardInterrupt(f"planner step {self.step} interrupted (Ctrl-C during the solve)")
        if result.plan is None:
            raise InputError("window", f"solver {result.solver} returned no plan (status {result.status_text()})")

        t = time.perf_counter()
        migration = migration_plan(current, result.plan.placement, self.expert_bytes)
        # relabelling permutes ranks within each layer: the cost is unchanged
        plan = Plan(migration.placement, result.plan.layout, result.plan.objective, result.plan.score,
                    result.plan.stats)
        timings["migrate"] = time.perf_counter() - t
        t = time.perf_counter()
        extra = {"mode": self.mode, "inputs": inputs, "solver": name}
        solved = plan.placement   # the solver's placement, relabelled (the same costs)
        plan, migration = self._choose(instance, current, plan, migration, result, extra)
        extra.update(self._bound_of(instance, plan, result, extra["decision"],
                                    np.array_equal(solved.ranks, plan.placement.ranks)))
        timings["choose"] = time.perf_counter() - t
        timings["total"] = time.perf_counter() - start
        # the next step may score more candidates (at most three: the previous plan, the
        # placement in force, the new plan); the first scores at most two (N = 16384: 0.32 s,
        # then 0.49 s with three, beyond the limit left for it). A step that scored none
        # keeps the last estimate of one scoring.
        scored, scoring = extra["scored"], extra["scoring_seconds"]
        if commit:   # (commit=False changes nothing in the planner, its time estimates neither)
            if scored:
                self._score_seconds = scoring / scored
            self._after_solve = (timings["migrate"] + (timings["choose"] - scoring)
                                 + 3 * self._score_seconds
                                 # and what the solver ran past its limit (its final scoring:
                                 # 0.11 s at N = 16384)
                                 + max(0.0, timings["solve"] - timings["solve_limit"]))
        step = StepPlan(self.step, instance, plan, result, certificate, migration, timings, warm_kind, extra)
        if commit:
            self._current = plan.placement
            self._previous = plan
            self.step += 1
        log.info("planner step %d: %s %s in %.3f s, R=%d, %s plan, %d transfers", step.step, result.solver,
                 step.status, timings["total"], plan.num_rows, step.decision, migration.num_transfers)
        return step

    # ---------------------------------------------------------------- helpers
    def _choose(self, instance: Instance, current: Placement, new: Plan, migration, result: Result,
                extra: dict) -> tuple[Plan, object]:
        """The plan this step returns, with its migration; ``extra`` gets ``decision``,
        ``candidates`` and (with a ``migration_cost``) ``migration_decision``.

        The candidates that move nothing are the previous step's plan, when it is still a
        plan of this window with the new plan's row count (:func:`_layout_fits`), and the
        placement in force with the new layout; the better of the two (ties: the previous
        plan) is returned unless the new plan is strictly better (lexicographically), or,
        with a ``migration_cost``, unless its primary gain times the horizon exceeds the
        price of its migration. All candidates are scored by :func:`rp_opt.cost.score`, so
        that equal plans tie exactly."""
        from .materialise import migration_plan

        objective = self.objective
        candidates: list[tuple[str, Plan]] = []
        prev = self._previous
        started = time.perf_counter()
        if (prev is not None and prev.objective == objective
                and prev.placement.ranks.shape == current.ranks.shape
                and np.array_equal(prev.placement.ranks, current.ranks)
                and prev.layout.num_rows == new.layout.num_rows
                and _layout_fits(prev.layout, instance.window, instance.cluster)):
            value = score(instance, current, prev.layout, objective)
            candidates.append((PREVIOUS, Plan(current, prev.layout, objective, value, {"decision": PREVIOUS})))
        if migration.num_transfers:
            value = score(instance, current, new.layout, objective)
            candidates.append((KEPT_PLACEMENT, Plan(current, new.layout, objective, value, new.stats)))
        if not candidates:
            extra.update(decision=NEW, candidates={NEW: list(new.score)}, scored=0, scoring_seconds=0.0)
            return new, migration
        # the same function scores every candidate (the solver's own sum may differ in the last bits)
        new_value = score(instance, new.placement, new.layout, objective)
        new = Plan(new.placement, new.layout, new.objective, new_value, new.stats)
        # (for the next step's limit)
        extra.update(scored=len(candidates) + 1, scoring_seconds=time.perf_counter() - started)
        name, stay = min(candidates, key=lambda item: item[1].score)  # min keeps the first of equals
        extra["candidates"] = {NEW: list(new_value), **{key: list(plan.score) for key, plan in candidates}}
        if migration.num_transfers and self.migration_cost is not None:
            gain = stay.score[0] - new_value[0]
            price = self.migration_cost * migration.critical_bytes
            adopt = gain * self.migration_horizon > price
            extra["migration_decision"] = {"migrate": bool(adopt), "gain": float(gain), "price": float(price),
                                           "horizon": self.migration_horizon, "score_kept": list(stay.score),
                                           "kept": name}
        else:
            adopt = new_value < stay.score
        if adopt:
            extra["decision"] = NEW
            return new, migration
        extra["decision"] = name
        return stay, migration_plan(current, current, self.expert_bytes)

    def _bound_of(self, instance: Instance, plan: Plan, result: Result, decision: str,
                  same_placement: bool = False) -> dict:
        """``bound``, ``bound_scope``, ``bound_from`` and ``status`` of the returned plan.

        The solver's plan keeps the solver's. A plan that moves nothing instead keeps the
        solver's bound when it holds for every placement and the same row count (the
        heuristic's; :data:`rp_opt.result.EVERY_PLACEMENT`): that plan is one of those
        plans. A bound for the solver's own placement only (``exact``, ``auto`` when it ran
        the exact model) says nothing about another placement: the plan then gets the
        analytic bound that holds for every placement and layout of its rows
        (:func:`rp_opt.bounds.cost_bounds`). It is ``optimal`` only when the solver proved
        optimality over every placement and it scores no worse. Where the plan that moves
        nothing has the solver's own placement (``same_placement``: the solver moved no
        expert, e.g. ``keep_placement``) with the same rows, the solver's bound for that
        placement holds for it too, and so does its proof."""
        stats = result.stats if isinstance(result.stats, dict) else {}
        scope = stats.get("bound_scope")
        if decision == NEW:
            return {"bound": result.bound, "bound_scope": scope, "bound_from": "solver", "status": result.status}
        if (same_placement and result.bound is not None and result.plan is not None
                and plan.num_rows == result.plan.num_rows):
            # (no worse than the solver's plan, to the last bits of their sums)
            proven = result.status == OPTIMAL and not lex_better(result.score, plan.score)
            return {"bound": min(result.bound, plan.score[0]) if proven else result.bound, "bound_scope": scope,
                    "bound_from": "solver", "status": OPTIMAL if proven else FEASIBLE}
        if result.bound is not None and scope == EVERY_PLACEMENT and result.plan is not None \
                and plan.num_rows == result.plan.num_rows:
            bound, origin = result.bound, "solver"
        else:
            from .bounds import cost_bounds

            bound = float(cost_bounds(instance, plan.num_rows).objective(self.objective)[0])
            origin = "analytic (every placement)"
        proven = result.status == OPTIMAL and scope == EVERY_PLACEMENT and tuple(plan.score) <= tuple(result.score)
        return {"bound": bound, "bound_scope": EVERY_PLACEMENT, "bound_from": origin,
                "status": OPTIMAL if proven else FEASIBLE}

    def _certify(self, window: Window):
        from .rows import certify_rows

        cert = certify_rows(window, self.cluster, time_limit=self.certify_share * self.time_limit)
        if cert.status == INFEASIBLE:
            raise InputError("window", cert.no_rows()[1])
        return cert

    def _warm_start(self, instance: Instance, certificate, rows: int | None) -> tuple[
            Plan | None, Placement | None, str | None]:
        """(warm-start plan, placement seed, kind) from the previous step, for a solver that
        plans with ``rows`` rows (R*, or the caller's ``num_rows``; None: not known).

        The placement seed is, per layer, the better (lower max_p L[l,p], ties to the
        previous one: fewer moves) of LPT + swap local search and the previous step's
        placement improved by the same local search. The warm-start layout is the previous
        layout when it is a layout of this window (same N, capacity, ``rows`` rows), else the
        certificate's witness when it has ``rows`` rows (a layout for other samples is no
        layout here), else none.
        """
        prev = self._previous
        window, cluster = instance.window, instance.cluster
        if not self.warm_start or prev is None:
            return None, None, None
        if prev.placement.ranks.shape != (window.num_layers, window.num_experts):
            return None, None, None
        seed = _seed_placement(window, prev.placement)
        layout, kind = None, "placement"
        if _layout_fits(prev.layout, window, cluster) and (rows is None or prev.layout.num_rows == rows):
            layout, kind = prev.layout, "layout"
        elif certificate.witness is not None and (rows is None or certificate.witness.num_rows == rows):
            layout = certificate.witness
        if layout is None:
            return None, seed, kind
        value = score(instance, seed, layout, self.objective)
        return Plan(seed, layout, self.objective, value, {"warm_start": kind}), seed, kind


def check_solver_options(solver: str, options: dict, time_limit: float, seed: int) -> None:
    """Check ``options`` (a Planner's ``solver_options``) against what ``solver`` takes,
    before any step runs: one :class:`~rp_opt.errors.InputError` naming ``solver_options``
    (``solver_options: unknown option(s) ['bogus'] for solver heuristic; known: ...``) or
    ``solver_options.NAME`` for a bad value (:func:`check_options_of` says which solvers
    are checked and how).
    """
    try:
        check_options_of(solver, options, time_limit, seed)
    except InputError as exc:
        field = "solver_options" if exc.field == "options" else f"solver_options.{exc.field}"
        raise InputError(field, exc.message) from None


def check_options_of(solver: str, options: dict, time_limit: float, seed: int) -> None:
    """Check ``options`` against what ``solver`` takes, with the error the solver itself
    would raise (field ``options`` or the option's name), before it reads a window.

    ``heuristic`` and ``auto`` (whose options go to the heuristic) use the heuristic's own
    check, :func:`rp_opt.packing.heuristic_options.heuristic_inputs`; ``exact``
    :func:`rp_opt.packing.exact.check_options`; ``joint``
    :func:`rp_opt.packing.exact.joint.check_joint_options`; the baselines take ``num_rows``
    only (what they check when they run). ``placement`` (which the Planner sets otherwise) is left to the
    solver. Other registered solvers are not checked here: they check their options when
    they run.
    """
    rest = {name: value for name, value in options.items() if name != "placement"}
    if solver in ("heuristic", "auto"):
        from .packing.heuristic_options import heuristic_inputs

        workers = rest.pop("workers", None)
        heuristic_inputs(time_limit, seed, workers, rest, solver)
    elif solver == "exact":
        from .packing.exact import BACKENDS, check_options

        # backend and num_rows are solve_exact's keyword arguments, not options
        backend = rest.pop("backend", "cpsat")
        require(backend in BACKENDS, "backend", f"must be one of {BACKENDS}, got {backend!r}")
        integer("num_rows", rest.pop("num_rows", None), 1, text=True, none=True, hint="None: R*")
        check_options(rest)
    elif solver == "joint":
        from .packing.exact.joint import check_joint_options

        check_joint_options(options)
    elif solver in _BASELINES:
        unknown = sorted(set(options) - {"num_rows"})
        require(not unknown, "options", f"unknown option(s) {unknown} for solver {solver}; known: num_rows")
        integer("num_rows", options.get("num_rows"), 1, text=True, none=True, hint="None: R*")


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


def _ndim(value) -> int | None:
    """Dimensions of an array-like, or None when numpy cannot read it (replay() then says
    so in one line)."""
    ndim = getattr(value, "ndim", None)
    if isinstance(ndim, int):
        return ndim
    try:
        return int(np.ndim(value))
    except Exception:  # ragged lists, tensors numpy cannot take
        return None


def _infer_k(rep) -> int:
    from .replay import infer_top_k

    return infer_top_k(rep.lengths, rep.demand)

