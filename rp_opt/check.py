"""The independent plan checker.

It reads a plan in its raw file form (placement lists, nested row lists), verifies every
constraint of MODEL.md, and recomputes the cost from the definitions with code of its own
(a direct loop over cells), so that it stays independent of the solvers and of the
vectorised :mod:`rp_opt.cost` it is used to test. It imports no solver.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .cost import Costs
from .errors import InputError, integer, require
from .objectives import Objective, get_objective, objective_names
from .result import Plan, Result
from .solution import cell_samples, require_integer_ranks
from .window import Instance


@dataclass(frozen=True)
class CheckReport:
    """Outcome of :func:`check_plan`.

    Attributes
    ----------
    valid
        True when no constraint is violated.
    violations
        One line per violation found.
    score
        Lexicographic score recomputed from scratch (None when the plan is too broken to
        score: bad shape, or a sample missing or repeated).
    costs
        The recomputed A, X, W.
    """

    valid: bool
    violations: list[str] = field(default_factory=list)
    score: tuple[float, ...] | None = None
    costs: Costs | None = None

    def to_dict(self) -> dict:
        return {"valid": self.valid, "violations": list(self.violations),
                "score": None if self.score is None else [float(x) for x in self.score]}


def _check_placement(placement, num_layers: int, num_experts: int, num_ranks: int, out: list[str]):
    # a rank that is not an integer (JSON true, 0.5, 2.0) is a malformed file, as a cell's
    # non-integer sample is (InputError, in the words of every other reader); one beyond
    # 64 bits is out of range, a violation (below)
    require_integer_ranks(placement)
    try:
        ranks = np.asarray(placement)
    except Exception:  # ragged nested lists
        out.append("placement: not a rectangular [L][E] list")
        return None
    if ranks.shape != (num_layers, num_experts):
        out.append(f"placement: shape {ranks.shape}, expected (L, E) = ({num_layers}, {num_experts})")
        return None
    if ranks.dtype == object and isinstance(placement, (list, tuple)):
        # integers beyond 64 bits: out of range, like -1 (a violation, as for a sample index)
        out.append(f"placement: a rank beyond 64-bit integers, outside [0, {num_ranks})")
        return None
    # an array (library use) of another dtype: the same malformed input
    require(ranks.dtype.kind in "iu", "placement", f"ranks must be integers, got dtype {ranks.dtype}")
    if ranks.min() < 0 or ranks.max() >= num_ranks:
        out.append(f"placement: rank values span [{ranks.min()}, {ranks.max()}], outside [0, {num_ranks})")
        return None
    per_rank = num_experts // num_ranks
    for l in range(num_layers):
        counts = np.bincount(ranks[l], minlength=num_ranks)
        for p in np.flatnonzero(counts != per_rank):
            out.append(f"placement: layer {l} rank {p} holds {counts[p]} experts, not E/P={per_rank}")
    return ranks.astype(np.int64)


def _check_rows(rows, num_samples: int, num_slots: int, out: list[str]):
    """Shape and bijection; returns the cells as arrays, or None when unusable."""
    if not isinstance(rows, (list, tuple)) or len(rows) == 0:
        out.append("rows: must be a non-empty list of rows")
        return None
    cells = []
    seen = np.zeros(num_samples, dtype=np.int64)
    broken = False
    for r, row in enumerate(rows):
        if not isinstance(row, (list, tuple)) or len(row) != num_slots:
            out.append(f"rows[{r}]: has {len(row) if isinstance(row, (list, tuple)) else 'no'} slots, "
                       f"the cluster has D={num_slots}")
            broken = True
            continue
        for d, cell in enumerate(row):
            # a cell that is not a list of integer indices is a malformed file (InputError),
            # not a plan violation: the same parser as every other reader of plan files
            samples = cell_samples(cell, f"rows[{r}][{d}]")
            # in Python ints: an index beyond 64 bits is out of range like -1, not an overflow
            outside = [i for i in samples if not 0 <= i < num_samples]
            if outside:
                out.append(f"rows[{r}][{d}]: sample {outside[0]} is not in [0, {num_samples})")
                broken = True
                samples = [i for i in samples if 0 <= i < num_samples]
            members = np.asarray(samples, dtype=np.int64)
            np.add.at(seen, members, 1)
            cells.append((r, d, members))
    for i in np.flatnonzero(seen > 1):
        out.append(f"rows: sample {i} appears {seen[i]} times")
        broken = True
    for i in np.flatnonzero(seen == 0):
        out.append(f"rows: sample {i} is in no cell")
        broken = True
    return None if broken else cells


def check_plan(instance: Instance, placement, rows, objective="sync", num_rows: int | None = None) -> CheckReport:
    """Verify a plan and recompute its score.

    Constraint violations (a sample out of range, missing or repeated, a wrong shape,
    capacity, balance) are reported in the :class:`CheckReport`; a value of the wrong type
    (a cell that is not a list of integer sample indices, a rank that is not an integer)
    raises :class:`~rp_opt.errors.InputError` (a malformed file), as in every reader of
    plan files.

    Parameters
    ----------
    instance
        The window, cluster and cost model the plan is for.
    placement
        [L][E] ranks (list or array).
    rows
        rows[r][d] = sample indices of cell (r, d).
    objective
        Objective to score under: a registered name or an :class:`~rp_opt.objectives.Objective`
        (registered or not).
    num_rows
        When given (an integer >= 1), the plan must have exactly this many rows (e.g. R*);
        another value raises :class:`~rp_opt.errors.InputError`.
    """
    require(isinstance(instance, Instance), "instance", f"must be an Instance, got {type(instance).__name__}")
    window, cluster, cost = instance.window, instance.cluster, instance.cost
    num_rows = integer("num_rows", num_rows, low=1, none=True)
    objective = get_objective(objective)  # a bad name fails before the work, not after it
    violations: list[str] = []
    ranks = _check_placement(placement, window.num_layers, window.num_experts, cluster.ep, violations)
    cells = _check_rows(rows, window.num_samples, cluster.dp, violations)
    if num_rows is not None and isinstance(rows, (list, tuple)) and len(rows) != num_rows:
        violations.append(f"rows: the plan has {len(rows)} rows, expected R={num_rows}")
    if cells is None:
        return CheckReport(False, violations)

    per_shard = cluster.slots_per_shard
    num_r = len(rows)
    tokens = np.zeros((num_r, cluster.dp))
    work = np.zeros((num_r, cluster.dp))
    members_of = {}
    for r, d, members in cells:
        tokens[r, d] = window.lengths[members].sum()
        work[r, d] = window.attn_work[members].sum()
        members_of[r, d] = members
        if members.size == 0:
            violations.append(f"rows[{r}][{d}]: empty cell")
        if tokens[r, d] > cluster.capacity:
            violations.append(f"rows[{r}][{d}]: {int(tokens[r, d])} tokens, more than the capacity "
                              f"C={cluster.capacity}")
        m = cluster.max_samples_per_cell
        if m is not None and members.size > m:
            violations.append(f"rows[{r}][{d}]: {members.size} samples, more than m={m}")

    costs = None
    score = None
    if ranks is not None:
        attention = np.zeros((num_r, cluster.edp))
        expert = np.zeros((num_r, cluster.edp))
        loads = np.zeros((num_r, cluster.edp, window.num_layers, cluster.ep))
        layer_index = np.repeat(np.arange(window.num_layers), window.num_experts)
        for r in range(num_r):
            for g in range(cluster.edp):
                slots = range(g * per_shard, (g + 1) * per_shard)
                for stage in cost.stages:
                    slot_work = [stage.alpha * tokens[r, d] + stage.beta * work[r, d] for d in slots]
                    attention[r, g] += stage.layers * max(slot_work)
                members = np.concatenate([members_of[r, d] for d in slots])
                expert_tokens = window.demand[members].sum(axis=0, dtype=np.int64)  # [L, E]
                np.add.at(loads[r, g], (layer_index, ranks.ravel()), expert_tokens.ravel())
                expert[r, g] = cost.gamma * loads[r, g].max(axis=1).sum()
        costs = Costs(attention, expert, loads)
        score = objective.evaluate(costs)
    return CheckReport(not violations, violations, score, costs)


def check(instance: Instance, plan: Plan, objective: str | Objective | None = None,
          num_rows: int | None = None) -> CheckReport:
    """:func:`check_plan` for a :class:`~rp_opt.result.Plan` object.

    Parameters
    ----------
    instance
        The window, cluster and cost model the plan is for.
    plan
        The plan (``result.plan``).
    objective
        A registered name or an :class:`~rp_opt.objectives.Objective`; by default the plan's
        own. A plan keeps only its objective's name, so a plan made under an unregistered
        :class:`~rp_opt.objectives.Objective` needs that object here.
    num_rows
        As for :func:`check_plan`.

    Raises
    ------
    InputError
        ``plan`` is None (no plan: the solver found none, or the window is infeasible) or
        not a plan; ``objective`` is missing for a plan made under an unregistered one.
    """
    if plan is None:
        raise InputError("plan", "is None, there is no plan to check (the solver found none, e.g. the window "
                                 "is infeasible: see result.status_text())")
    if isinstance(plan, Result):
        raise InputError("plan", f"must be a Plan, got a Result (status {plan.status}): pass result.plan")
    require(isinstance(plan, Plan), "plan", f"must be a Plan, got {type(plan).__name__}")
    if objective is None:
        objective = plan.objective
        if isinstance(objective, str) and objective not in objective_names():
            raise InputError("objective", f"the plan was made under objective {objective!r}, which is not "
                                          f"registered: pass that Objective itself, check(instance, plan, objective)")
    return check_plan(instance, plan.placement.to_list(), plan.layout.to_rows(), objective, num_rows)
