"""Calibrate the cost model (alpha_s, beta_s, gamma) from timings a trainer measured.

Record format (``rp-opt-timings/1``, JSON)::

    {"format": "rp-opt-timings/1",
     "runs": [{"plan": {...plan file...},          # or "plan_file": "PLAN.json"
               "window": "STEP.npz",               # optional; default: the --window file
               "times": [[t_00, t_01, ...], ...]}]}  # seconds of row r on EDP shard g, [R][G]

``times[r][g]`` is the measured time of row r (one microbatch per DP slot) on shard g, i.e.
the modelled J[r,g] = A[r,g] + X[r,g]; ``null`` marks a value that was not measured.

Model (MODEL.md): J[r,g] = sum_s n_s max_{d in g}(alpha_s T_{r,d} + beta_s Q_{r,d})
+ gamma sum_l max_p W[r,g,l,p]. The per-microbatch totals cannot tell stages apart (the
token and pair counts of a cell are the same for every stage), so the fit estimates the
totals a = sum_s n_s alpha_s, b = sum_s n_s beta_s and gamma, and splits a and b across
stages in the proportions of the prior cost model (the FLOP defaults). With the slot that
attains each stage's maximum fixed, J is linear in (a, b, gamma): non-negative least
squares (:func:`scipy.optimize.nnls`) fits them; the maximising slots are then recomputed
with the fitted coefficients and the fit repeated until they no longer change (they may
cycle: of the passes, the coefficients whose own maximising slots predict the times with
the least squared error are returned, and r2 and rms are of those predictions). The first
pass uses the regressors of :func:`rp_opt.cost.layout_costs` with unit coefficients
(max_d T, max_d Q, sum_l max_p W).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from .cost import cell_sums, layout_costs
from .errors import InputError, require
from .result import Plan
from .window import CostModel, Instance, Stage

FORMAT = "rp-opt-timings/1"


@dataclass(frozen=True)
class TimingRun:
    """Measured times of one plan: ``times[r, g]`` seconds of row r on shard g (NaN: missing)."""

    instance: Instance
    plan: Plan
    times: np.ndarray

    def __post_init__(self):
        times = np.asarray(self.times, dtype=np.float64)
        shape = (self.plan.layout.num_rows, self.instance.cluster.edp)
        require(times.shape == shape, "times", f"has shape {times.shape}, the plan has (R, G) = {shape}")
        bad = np.argwhere(~np.isnan(times) & ~((times >= 0) & np.isfinite(times)))
        if bad.size:
            r, g = bad[0]
            raise InputError(f"times[{r}][{g}]", f"must be a finite time >= 0, got {times[r, g]}")
        object.__setattr__(self, "times", times)


@dataclass(frozen=True)
class Fit:
    """Outcome of :func:`fit_cost`.

    Attributes
    ----------
    cost
        The calibrated cost model.
    r2
        Coefficient of determination of the measured times.
    rel_rms
        sqrt(mean(((predicted - measured) / measured)^2)) over the measured times > 0
        (None when no measured time is > 0).
    rms
        Root mean square error in seconds.
    observations
        Measured (row, shard) times used.
    iterations
        NNLS passes until the maximising slots were stable.
    totals
        ``{"attention_tokens": a, "attention_pairs": b, "gamma": gamma}``.
    """

    cost: CostModel
    r2: float
    rel_rms: float | None
    rms: float
    observations: int
    iterations: int
    totals: dict
    predicted: np.ndarray = field(repr=False, compare=False, default=None)
    measured: np.ndarray = field(repr=False, compare=False, default=None)

    def to_dict(self) -> dict:
        return {"cost": self.cost.to_dict(), "r2": self.r2, "rel_rms": self.rel_rms, "rms": self.rms,
                "observations": self.observations, "iterations": self.iterations, "totals": dict(self.totals)}


def _unit_cost(prior: CostModel) -> CostModel:
    return CostModel((Stage("unit", 1, 1.0, 0.0),), 1.0)


def _splits(prior: CostModel) -> tuple[np.ndarray, np.ndarray]:
    """u_s, v_s with sum_s n_s u_s = sum_s n_s v_s = 1, proportional to the prior."""
    layers = prior.layers
    out = []
    for coef in (prior.alpha, prior.beta):
        total = float(layers @ coef)
        out.append(coef / total if total > 0 else np.full(coef.shape, 1.0 / max(layers.sum(), 1.0)))
    return out[0], out[1]


def _regressors(run: TimingRun, prior: CostModel, a: float | None, b: float | None,
                unit_expert: np.ndarray) -> np.ndarray:
    """[R*G, 3] regressors of (a, b, gamma) with the maximising slot of every stage fixed by
    the coefficients (a u_s, b v_s); the first pass (a is None) uses max_d T and max_d Q."""
    inst, layout = run.instance, run.plan.layout
    num_shards = inst.cluster.edp
    if a is None:
        unit = Instance(inst.window, inst.cluster, _unit_cost(prior))
        x_tokens = layout_costs(unit, run.plan.placement, layout).attention
        pairs = Instance(inst.window, inst.cluster, CostModel((Stage("unit", 1, 0.0, 1.0),), 0.0))
        x_pairs = layout_costs(pairs, run.plan.placement, layout).attention
        return np.stack([x_tokens.ravel(), x_pairs.ravel(), unit_expert.ravel()], axis=1)
    u, v = _splits(prior)
    rows = layout.num_rows
    tokens = cell_sums(layout, inst.window.lengths.astype(np.float64)).reshape(rows, num_shards, -1)
    work = cell_sums(layout, inst.window.attn_work).reshape(rows, num_shards, -1)
    per_stage = (a * u)[:, None, None, None] * tokens + (b * v)[:, None, None, None] * work  # [S, R, G, D/G]
    best = per_stage.argmax(axis=3)[..., None]                                             # [S, R, G, 1]
    t_best = np.take_along_axis(np.broadcast_to(tokens, per_stage.shape), best, axis=3)[..., 0]
    q_best = np.take_along_axis(np.broadcast_to(work, per_stage.shape), best, axis=3)[..., 0]
    x_tokens = np.tensordot(prior.layers * u, t_best, axes=1)
    x_pairs = np.tensordot(prior.layers * v, q_best, axes=1)
    return np.stack([x_tokens.ravel(), x_pairs.ravel(), unit_expert.ravel()], axis=1)


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # columns differ by orders of magnitude (tokens vs token pairs): scale to unit norm
    norms = np.linalg.norm(x, axis=0)
    keep = norms > 0
    coef = np.zeros(x.shape[1])
    if keep.any():
        sol, _ = nnls(x[:, keep] / norms[keep], y)
        coef[keep] = sol / norms[keep]
    return coef


def _better(best, coef, x, y):
    """``best`` or (error, coef, x), whichever predicts ``y`` with the smaller squared error
    (ties go to the later pass, ``coef``)."""
    error = float(((x @ coef - y) ** 2).sum())
    return (error, coef, x) if best is None or error <= best[0] else best


def fit_cost(runs: list[TimingRun], prior: CostModel | None = None, max_iterations: int = 20) -> Fit:
    """Fit alpha_s, beta_s, gamma to measured (row, shard) times (module docstring).

    Parameters
    ----------
    runs
        Measured plans (any windows; the cost model is shared).
    prior
        Stage structure and the split of the totals across stages (default: the first
        run's cost model).
    max_iterations
        Most NNLS passes.
    """
    require(len(runs) >= 1, "runs", "need at least one measured plan")
    prior = runs[0].instance.cost if prior is None else prior
    for k, run in enumerate(runs):
        names = [s.name for s in run.instance.cost.stages]
        require(names == [s.name for s in prior.stages], f"runs[{k}]",
                f"has stages {names}, the prior has {[s.name for s in prior.stages]}")
    unit_experts = []
    for run in runs:
        unit = Instance(run.instance.window, run.instance.cluster, _unit_cost(prior))
        unit_experts.append(layout_costs(unit, run.plan.placement, run.plan.layout).expert)
    y_all = np.concatenate([run.times.ravel() for run in runs])
    measured = ~np.isnan(y_all)
    y = y_all[measured]
    require(y.size >= 3, "times", f"hold {y.size} measured values; the fit needs at least 3")
    require(bool(np.any(y > 0)), "times", f"all {y.size} measured values are 0; there is nothing to fit")

    def regressors(a, b):
        return np.concatenate([_regressors(run, prior, a, b, ux) for run, ux in zip(runs, unit_experts)])[measured]

    a = b = None
    coef = np.zeros(3)
    previous = None
    iterations = 0
    best = None  # (squared error of the model's own predictions, coefficients, their regressors)
    for iterations in range(1, max_iterations + 1):
        x = regressors(a, b)
        if previous is not None:
            # x holds the maximising slots of the model with ``coef``: x @ coef is what it predicts
            best = _better(best, coef, x, y)
            if np.array_equal(x, previous):
                break
        coef = _nnls(x, y)
        previous = x
        a, b = float(coef[0]), float(coef[1])
        if a == 0 and b == 0:
            best = _better(best, coef, x, y)  # no attention term: x @ coef is its prediction
            break
    else:
        # out of passes (the maximising slots cycle): the last fit is scored as the others
        best = _better(best, coef, regressors(a, b), y)
    if best is not None:
        _, coef, previous = best
    require(bool(np.any(coef > 0)), "times",
            f"cannot be fitted: every non-negative coefficient fit of the {y.size} measured values is 0 "
            "(do the times grow with the tokens of the rows?)")
    predicted = previous @ coef
    u, v = _splits(prior)
    stages = tuple(Stage(s.name, s.layers, coef[0] * u[k], coef[1] * v[k]) for k, s in enumerate(prior.stages))
    cost = CostModel(stages, float(coef[2]))
    residual = predicted - y
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((residual ** 2).sum()) / total if total > 0 else (1.0 if np.allclose(residual, 0) else 0.0)
    positive = y > 0
    rel_rms = float(np.sqrt(np.mean((residual[positive] / y[positive]) ** 2))) if positive.any() else None
    rms = float(np.sqrt(np.mean(residual ** 2)))
    totals = {"attention_tokens": float(coef[0]), "attention_pairs": float(coef[1]), "gamma": float(coef[2])}
    return Fit(cost, r2, rel_rms, rms, int(y.size), iterations, totals, predicted, y)


def predicted_times(instance: Instance, plan: Plan, cost: CostModel) -> np.ndarray:
    """J[R, G] of ``plan`` under ``cost`` (what a perfect calibration would measure)."""
    inst = Instance(instance.window, instance.cluster, cost)
    return layout_costs(inst, plan.placement, plan.layout).joint


# ------------------------------------------------------------------------- files
def save_timings(path: str | os.PathLike, runs: list[tuple[Plan, np.ndarray]] | list[TimingRun],
                 windows: list[str | None] | None = None) -> None:
    """Write measured times in the ``rp-opt-timings/1`` format (a trainer's logging helper)."""
    out = []
    for k, item in enumerate(runs):
        plan, times = (item.plan, item.times) if isinstance(item, TimingRun) else item
        times = np.asarray(times, dtype=np.float64)
        entry = {"plan": plan.to_dict(),
                 "times": [[None if np.isnan(t) else float(t) for t in row] for row in times]}
        if windows is not None and windows[k] is not None:
            entry["window"] = windows[k]
        out.append(entry)
    with open(path, "w") as handle:
        json.dump({"format": FORMAT, "runs": out}, handle)
        handle.write("\n")


def load_timings(path: str | os.PathLike, window: Instance | str | None = None) -> list[TimingRun]:
    """Read a timings file; ``window`` (instance or ``.npz`` path) is the default window."""
    from .io import load_instance, plan_from_dict, read_json, read_plan_file

    path = os.fspath(path)
    data = read_json(path)
    require(isinstance(data, dict), "timings", "must be a JSON object")
    require(data.get("format") == FORMAT, "timings.format", f"must be {FORMAT!r}, got {data.get('format')!r}")
    runs = data.get("runs")
    require(isinstance(runs, list) and len(runs) >= 1, "timings.runs", "must be a non-empty list")
    base = os.path.dirname(os.path.abspath(path))
    cache: dict[str, Instance] = {}

    def resolve(p):
        return p if os.path.isabs(p) else os.path.join(base, p)

    default = load_instance(window) if isinstance(window, (str, os.PathLike)) else window
    out = []
    for k, entry in enumerate(runs):
        field_name = f"timings.runs[{k}]"
        require(isinstance(entry, dict), field_name, "must be an object")
        if "window" in entry:
            wpath = resolve(str(entry["window"]))
            if wpath not in cache:
                cache[wpath] = load_instance(wpath)
            instance = cache[wpath]
        else:
            require(default is not None, f"{field_name}.window", "is missing and no --window was given")
            instance = default
        if "plan" in entry:
            plan_data = entry["plan"]
            require(isinstance(plan_data, dict) and "placement" in plan_data and "rows" in plan_data,
                    f"{field_name}.plan", "must be a plan object with placement and rows")
        else:
            require("plan_file" in entry, field_name, "needs a plan or a plan_file")
            plan_data = read_plan_file(resolve(str(entry["plan_file"])))
        plan = plan_from_dict(instance, plan_data)
        require("times" in entry, f"{field_name}.times", "is missing")
        require(isinstance(entry["times"], list) and all(isinstance(row, list) for row in entry["times"]),
                f"{field_name}.times", "must be a rectangular [R][G] list of seconds (or null)")
        for r, row in enumerate(entry["times"]):
            for g, t in enumerate(row):
                # null marks a time that was not measured; NaN or infinity is a broken measurement
                require(t is None or (isinstance(t, (int, float)) and not isinstance(t, bool) and np.isfinite(t)),
                        f"{field_name}.times[{r}][{g}]", f"must be a finite time >= 0 or null, got {t!r}")
        try:
            times = np.array([[np.nan if t is None else t for t in row] for row in entry["times"]], dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(f"{field_name}.times", "must be a rectangular [R][G] list of seconds (or null)") from None
        try:
            out.append(TimingRun(instance, plan, times))
        except InputError as exc:
            raise InputError(field_name, str(exc)) from None
    return out


def save_cost(path: str | os.PathLike, cost: CostModel) -> None:
    """Write a cost model file (the dict of :meth:`CostModel.to_dict`)."""
    with open(path, "w") as handle:
        json.dump(cost.to_dict(), handle, indent=1)
        handle.write("\n")
