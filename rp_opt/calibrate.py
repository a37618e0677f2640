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
stages in the proportions of the prior cost model (the FLOP defaults): alpha_s = a u_s,
beta_s = b v_s. (A prior whose beta_s, or alpha_s, are all 0 gives no proportions: the
total is then split evenly per layer, and the fit may still find b > 0, or a > 0.)

The fit is the global least-squares optimum over (a, b, gamma) >= 0. Which slot attains
a stage's maximum depends on the ratio rho = b / a alone (slot d's cost is
a (u_s T_d + rho v_s Q_d)), and changes only where two slots of a block tie:
rho = u_s (T_j - T_i) / (v_s (Q_i - Q_j)). Between consecutive ties (a "piece"
[rho_lo, rho_hi]) the maximising slots are fixed and J is linear in (a, b, gamma); the
pairs (a, b) of the piece form the cone spanned by (1, rho_lo) and (1, rho_hi) (or (0, 1)
for rho_hi = inf), so J = l1 (x_T + rho_lo x_Q) + l2 (x_T + rho_hi x_Q) + gamma x_W with
l1, l2, gamma >= 0: one non-negative least squares (:func:`scipy.optimize.nnls`) gives the
exact optimum of the piece. The best piece is the global fit, and its predictions are
the model's own. With more than :data:`MAX_PIECES` pieces, :data:`MAX_PIECES` of them
evenly spaced in the order of the ties are solved (``Fit.exhaustive`` False).

Whether the times pin the totals is judged on the linear model of the best piece, with
its regressors x_T, x_Q, x_W scaled to unit norm: no more times than the 3 totals, or
linearly dependent regressors (the times cannot tell some totals apart), are refused
(:class:`InputError`); otherwise the fit reports the least-squares standard error of each
total and the condition number, and warns (``Fit.warnings``) when the condition number is
above :data:`CONDITION_WARNING`, a standard error above :data:`RELATIVE_ERROR_WARNING` of its
total, a regressor 0 in every time, the times all equal, or R^2 < 0.
"""

from __future__ import annotations

import json
import logging
import numbers
import os
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from .cost import cell_sums, layout_costs
from .errors import InputError, integer, require
from .result import Plan
from .window import CostModel, Instance, Stage

FORMAT = "rp-opt-timings/1"
COEFFICIENTS = ("attention_tokens", "attention_pairs", "gamma")
"""The fitted totals: a = sum_s n_s alpha_s, b = sum_s n_s beta_s and gamma."""
CONDITION_WARNING = 1e3
"""Condition number of the regressors (columns scaled to unit norm) above which the fit
warns that the measured times hardly tell the coefficients apart."""
RELATIVE_ERROR_WARNING = 0.1
"""Standard error, as a fraction of its coefficient, above which the fit warns that the
coefficient is poorly pinned by the measured times."""

log = logging.getLogger("rp_opt")


@dataclass(frozen=True)
class TimingRun:
    """Measured times of one plan: ``times[r, g]`` seconds of row r on shard g (NaN: missing)."""

    instance: Instance
    plan: Plan
    times: np.ndarray

    def __post_init__(self):
        try:
            times = np.asarray(self.times, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError("times", "must be a rectangular [R][G] array of seconds (NaN: missing)") from None
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
        NNLS solves: the pieces of rho = b / a searched.
    totals
        ``{"attention_tokens": a, "attention_pairs": b, "gamma": gamma}``.
    pieces
        Pieces of rho between the ties of the maximising slots.
    exhaustive
        True when every piece was solved: the fit is the global optimum.
    stderr
        Standard error of each total (keys of ``totals``), seconds per unit: that of the
        least-squares fit of the linear model of the fit's piece of rho (its maximising
        slots fixed, the bounds at 0 not counted), from the residual variance
        SSE / (observations - 3). Noise-free times give about 0; None for a total whose
        regressor is 0 in every measured time (nothing measures it; fitted as 0).
    condition
        Condition number of the regressors of the three totals (x_T, x_Q, x_W at the fit's
        maximising slots) with every column scaled to unit norm: 1 when the measured plans
        vary the three independently, large when they hardly tell them apart (a warning
        above :data:`CONDITION_WARNING`).
    warnings
        One line each: a total whose regressor is 0 in every measured time (fitted as 0),
        totals the times hardly tell apart, a total whose standard error is above
        :data:`RELATIVE_ERROR_WARNING` of its value, times all equal, R^2 < 0.
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
    pieces: int = 1
    exhaustive: bool = True
    stderr: dict = field(default_factory=dict)
    condition: float = 1.0
    warnings: tuple[str, ...] = ()

    @property
    def relative_stderr(self) -> dict:
        """``stderr / total`` of each total (None for a total fitted as 0)."""
        return {k: (self.stderr[k] / v if v > 0 and self.stderr.get(k) is not None else None)
                for k, v in self.totals.items() if k in self.stderr}

    def to_dict(self) -> dict:
        return {"cost": self.cost.to_dict(), "r2": self.r2, "rel_rms": self.rel_rms, "rms": self.rms,
                "observations": self.observations, "iterations": self.iterations, "pieces": self.pieces,
                "exhaustive": self.exhaustive, "totals": dict(self.totals), "stderr": dict(self.stderr),
                "relative_stderr": self.relative_stderr, "condition": self.condition,
                "warnings": list(self.warnings)}


MAX_PIECES = 4096
"""Most pieces of rho = b / a the fit solves (all of them when there are no more)."""


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


@dataclass(frozen=True)
class _Cells:
    """Per-slot sums of one run, [R, G, D/G]: tokens T and attention work Q, and the
    expert regressor sum_l max_p W [R, G] (gamma = 1)."""

    tokens: np.ndarray
    work: np.ndarray
    expert: np.ndarray
    layers: np.ndarray  # n_s of the run's own window (windows of one fit may differ in depth)

    @classmethod
    def of(cls, run: TimingRun, prior: CostModel) -> "_Cells":
        inst, layout = run.instance, run.plan.layout
        shape = (layout.num_rows, inst.cluster.edp, -1)
        unit = Instance(inst.window, inst.cluster, _unit_cost(prior))
        # layout_costs first: it rejects a plan that does not fit the window and the cluster
        expert = layout_costs(unit, run.plan.placement, layout).expert
        return cls(cell_sums(layout, inst.window.lengths.astype(np.float64)).reshape(shape),
                   cell_sums(layout, inst.window.attn_work).reshape(shape), expert, inst.cost.layers)

    def ties(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Every rho > 0 at which two slots of a block tie in some stage."""
        dt = self.tokens[..., :, None] - self.tokens[..., None, :]   # T_i - T_j  [R, G, k, k]
        dq = self.work[..., None, :] - self.work[..., :, None]       # Q_j - Q_i
        crossing = dt * dq > 0                                        # one slot more T, the other more Q
        ratio = dt[crossing] / dq[crossing]                           # (T_i - T_j) / (Q_j - Q_i) > 0
        both = (u > 0) & (v > 0)
        return (ratio[None, :] * (u[both] / v[both])[:, None]).ravel()

    def regressors(self, rho: float, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """[R*G, 3]: x_T = sum_s n_s u_s T, x_Q = sum_s n_s v_s Q at the slot of every stage
        that maximises u_s T + rho v_s Q, and x_W."""
        per_stage = u[:, None, None, None] * self.tokens + (rho * v)[:, None, None, None] * self.work
        best = per_stage.argmax(axis=3)[..., None]                                    # [S, R, G, 1]
        shape = per_stage.shape
        t_best = np.take_along_axis(np.broadcast_to(self.tokens, shape), best, axis=3)[..., 0]
        q_best = np.take_along_axis(np.broadcast_to(self.work, shape), best, axis=3)[..., 0]
        return np.stack([np.tensordot(self.layers * u, t_best, axes=1).ravel(),
                         np.tensordot(self.layers * v, q_best, axes=1).ravel(), self.expert.ravel()], axis=1)


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # columns differ by orders of magnitude (tokens vs token pairs): scale to unit norm
    norms = np.linalg.norm(x, axis=0)
    keep = norms > 0
    coef = np.zeros(x.shape[1])
    if keep.any():
        sol, _ = nnls(x[:, keep] / norms[keep], y)
        coef[keep] = sol / norms[keep]
    return coef


def _pieces(ties: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(rho_lo, rho_hi) of the pieces to solve (at most ``limit``), and how many pieces
    there are: [0, t_1], [t_1, t_2], ..., [t_K, inf] over the sorted distinct ties t."""
    edges = np.unique(ties[np.isfinite(ties) & (ties > 0)])
    lo = np.concatenate([[0.0], edges])
    hi = np.concatenate([edges, [np.inf]])
    if lo.size > limit:
        # ``limit`` pieces evenly spaced in the order of the ties (the first and the last
        # among them): every quantile of the ties is represented, none twice
        pick = np.unique(np.linspace(0, lo.size - 1, limit).round().astype(np.int64))
        return lo[pick], hi[pick], int(lo.size)
    return lo, hi, int(lo.size)


def _names(keys) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    keys = list(keys)
    return keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " and " + keys[-1]


def _identify(x: np.ndarray, residual: np.ndarray, scale: float) -> tuple[float, np.ndarray, list[str]]:
    """Whether the measured times pin the three totals, from the regressors ``x`` [n, 3] of
    the fit's piece and its ``residual`` (in units of ``scale`` seconds).

    Returns the condition number and the standard errors (seconds per unit; NaN for a total
    whose regressor is 0 in every measured time: nothing measures it) of the least-squares
    fit of the linear model ``x @ (a, b, gamma)``, with the columns of ``x`` scaled to unit
    norm (tokens and token pairs differ by orders of magnitude), and the totals that make up
    its least determined direction. Raises :class:`InputError` on ``times`` when the non-zero
    columns are linearly dependent (numpy's matrix-rank tolerance): the times cannot tell
    those totals apart, any mix of them along the null space fits alike."""
    n = x.shape[0]
    norms = np.linalg.norm(x, axis=0)
    used = np.flatnonzero(norms > 0)
    unit = x[:, used] / norms[used]
    _, sv, vt = np.linalg.svd(unit, full_matrices=False)
    tol = sv.max() * max(unit.shape) * np.finfo(np.float64).eps  # np.linalg.matrix_rank's tolerance
    rank = int(np.sum(sv > tol))
    if rank < used.size:
        # the totals with a component in the null space: the data cannot tell them apart
        null = np.abs(vt[rank:]).max(axis=0) > 1e-6
        raise InputError("times", f"the {n} measured times cannot tell apart "
                         f"{_names(COEFFICIENTS[k] for k, z in zip(used, null) if z)}: their regressors are "
                         f"linearly dependent (rank {rank} of {used.size}); time plans whose rows differ in tokens, "
                         "token pairs and expert load")
    # least-squares covariance sigma^2 (U^T U)^-1 = sigma^2 V S^-2 V^T, sigma^2 = SSE / (n - p)
    sigma2 = float((residual ** 2).sum()) / (n - used.size)
    stderr = np.full(x.shape[1], np.nan)
    stderr[used] = np.sqrt(sigma2 * ((vt / sv[:, None]) ** 2).sum(axis=0)) / norms[used] * scale
    weak = [COEFFICIENTS[k] for k, w in zip(used, np.abs(vt[-1])) if w > 0.1]
    return float(sv[0] / sv[-1]), stderr, weak


def fit_cost(runs: list[TimingRun], prior: CostModel | None = None, max_iterations: int | None = None,
             log_warnings: bool = True) -> Fit:
    """Fit alpha_s, beta_s, gamma to measured (row, shard) times: the least-squares optimum
    over non-negative coefficients (module docstring).

    Parameters
    ----------
    runs
        Measured plans (any windows; the cost model is shared).
    prior
        Stage structure and the split of the totals across stages (default: the first
        run's cost model).
    max_iterations
        Most pieces of rho = b / a to solve (default :data:`MAX_PIECES`).
    log_warnings
        Log ``Fit.warnings`` on the ``rp_opt`` logger (the CLI prints them itself).

    Returns
    -------
    Fit
        With the standard error of each total and the condition number of the regressors
        (``Fit.stderr``, ``Fit.condition``): a total whose standard error is a large part of
        its value is not pinned by the times, however close R^2 is to 1.

    Raises
    ------
    InputError
        On ``times``: no more measured times than the 3 totals; every measured time 0;
        no non-negative fit; regressors that are linearly dependent (the measured plans
        cannot tell some totals apart: every cell alike, say), naming those totals.
    """
    require(len(runs) >= 1, "runs", "need at least one measured plan")
    prior = runs[0].instance.cost if prior is None else prior
    for k, run in enumerate(runs):
        names = [s.name for s in run.instance.cost.stages]
        require(names == [s.name for s in prior.stages], f"runs[{k}]",
                f"has stages {names}, the prior has {[s.name for s in prior.stages]}")
    y_all = np.concatenate([run.times.ravel() for run in runs])
    measured = ~np.isnan(y_all)
    y = y_all[measured]
    unknowns = len(COEFFICIENTS)
    # as many values as unknowns fit exactly whatever they are: nothing would check the model
    require(y.size > unknowns, "times",
            f"hold {y.size} measured values; the fit of {unknowns} coefficients ({_names(COEFFICIENTS)}) needs "
            f"more than {unknowns} (time more rows, shards or plans)")
    require(bool(np.any(y > 0)), "times", f"all {y.size} measured values are 0; there is nothing to fit")
    u, v = _splits(prior)
    cells = [_Cells.of(run, prior) for run in runs]
    ties = np.concatenate([c.ties(u, v) for c in cells])
    limit = integer("max_iterations", max_iterations, 1, none=True, hint="None: MAX_PIECES") or MAX_PIECES
    lo, hi, pieces = _pieces(ties, limit)
    # fit times in units of the largest one (squared errors of times near 1e154 s would
    # overflow, near 1e-154 s underflow); the coefficients scale back linearly
    scale = float(np.max(y))
    unit_y = y / scale

    best = None  # (squared error, coefficients, regressors)
    for rho_lo, rho_hi in zip(lo, hi):
        # any rho strictly inside the piece fixes the maximising slots of the whole piece
        rho = (rho_lo + rho_hi) / 2 if np.isfinite(rho_hi) else max(2 * rho_lo, 1.0)
        x = np.concatenate([c.regressors(rho, u, v) for c in cells])[measured]
        # the piece's (a, b) cone: rays (1, rho_lo) and (1, rho_hi), or (0, 1) when rho_hi = inf
        far = x[:, 0] + rho_hi * x[:, 1] if np.isfinite(rho_hi) else x[:, 1]
        lam = _nnls(np.stack([x[:, 0] + rho_lo * x[:, 1], far, x[:, 2]], axis=1), unit_y)
        a = lam[0] + (lam[1] if np.isfinite(rho_hi) else 0.0)
        b = lam[0] * rho_lo + lam[1] * (rho_hi if np.isfinite(rho_hi) else 1.0)
        coef = np.array([a, b, lam[2]])
        error = float(((x @ coef - unit_y) ** 2).sum())
        if best is None or error < best[0]:
            best = (error, coef, x)
    _, coef, x = best
    coef = coef * scale
    require(bool(np.any(coef > 0)), "times",
            f"cannot be fitted: every non-negative coefficient fit of the {y.size} measured values is 0 "
            "(do the times grow with the tokens of the rows?)")
    predicted = x @ coef
    residual = predicted / scale - unit_y
    condition, stderr, weak = _identify(x, residual, scale)
    stages = tuple(Stage(s.name, s.layers, coef[0] * u[k], coef[1] * v[k]) for k, s in enumerate(prior.stages))
    cost = CostModel(stages, float(coef[2]))
    # the statistics in units of the largest time too (r2 and the relative error do not
    # depend on them; the RMS error scales back)
    total = float(((unit_y - unit_y.mean()) ** 2).sum())
    r2 = 1.0 - float((residual ** 2).sum()) / total if total > 0 else (1.0 if np.allclose(residual, 0) else 0.0)
    positive = y > 0
    rel_rms = None
    if positive.any():
        ratio = np.abs(residual[positive] / unit_y[positive])
        peak = float(ratio.max())
        # in units of the largest ratio: a tiny time beside a huge one must not overflow the square
        rel_rms = peak * float(np.sqrt(np.mean((ratio / peak) ** 2))) if 0 < peak < np.inf else peak
    rms = float(np.sqrt(np.mean(residual ** 2))) * scale
    totals = dict(zip(COEFFICIENTS, map(float, coef)))
    warnings = []
    idle = [c for c, e in zip(COEFFICIENTS, stderr) if np.isnan(e)]
    if idle:
        warnings.append(f"{_names(idle)}: the measured plans give {'it' if len(idle) == 1 else 'them'} no work "
                        "(regressor 0 in every measured time): fitted as 0, not measured")
    if condition > CONDITION_WARNING:
        warnings.append(f"the measured times hardly tell apart {_names(weak)} (condition number {condition:.3g} of "
                        "the regressors scaled to unit norm): see their standard errors")
    # a standard error that moves no predicted time by 1e-6 of the largest time is rounding
    # (a total fitted as 1e-23 +- 1e-22 to times that have none of it), not a loose total
    loose = [(c, stderr[k] / coef[k]) for k, c in enumerate(COEFFICIENTS)
             if coef[k] > 0 and stderr[k] > RELATIVE_ERROR_WARNING * coef[k]
             and stderr[k] * float(x[:, k].max()) > 1e-6 * scale]
    if loose:
        warnings.append(f"{_names(c for c, _ in loose)} {'is' if len(loose) == 1 else 'are'} not pinned by the "
                        f"times: standard error {_names(f'{100 * r:.3g} %' for _, r in loose)} of the value")
    if total == 0:
        warnings.append(f"all {y.size} measured times are equal ({y[0]:.6g} s): R^2 is undefined (reported as "
                        f"{r2:g}); times that do not vary with the rows' work do not measure the cost model")
    elif r2 < 0:
        warnings.append(f"R^2 = {r2:.3g} < 0: the cost model fits these times worse than their mean "
                        "(times of another window or plan, or not per (row, shard)?)")
    if log_warnings:
        for line in warnings:
            log.warning("calibrate: %s", line)
    return Fit(cost, r2, rel_rms, rms, int(y.size), int(lo.size), totals, predicted, y, pieces, lo.size == pieces,
               {c: None if np.isnan(e) else float(e) for c, e in zip(COEFFICIENTS, stderr)}, condition,
               tuple(warnings))


def predicted_times(instance: Instance, plan: Plan, cost: CostModel) -> np.ndarray:
    """J[R, G] of ``plan`` under ``cost`` (what a perfect calibration would measure)."""
    inst = Instance(instance.window, instance.cluster, cost)
    return layout_costs(inst, plan.placement, plan.layout).joint


# ------------------------------------------------------------------------- files
def _time_value(t, field: str):
    """One entry of a pair's times as written: None (not measured) or a finite float >= 0."""
    if t is None or t is np.ma.masked:
        return None
    ok = isinstance(t, numbers.Real) and not isinstance(t, (bool, np.bool_))
    try:
        value = float(t) if ok else None
    except OverflowError:  # an integer beyond the float range
        value = None
    require(value is not None and np.isfinite(value) and value >= 0, field,
            f"must be a finite time >= 0 or None (not measured), got {t if value is None else value!r}")
    return value


def _time_rows(run: TimingRun | tuple, field: str) -> list[list[float | None]]:
    """The [R][G] times of one entry of :func:`save_timings` as JSON values."""
    if isinstance(run, TimingRun):
        # a TimingRun's NaN marks a time that was not measured (its other values are checked)
        return [[None if np.isnan(t) else float(t) for t in row] for row in run.times]
    require(isinstance(run, (tuple, list)) and len(run) == 2 and isinstance(run[0], Plan), field,
            "must be a pair (plan, times) or a TimingRun")
    plan, times = run
    if isinstance(times, np.ma.MaskedArray):
        times = [[None if m else t for t, m in zip(row, mask)]
                 for row, mask in zip(times.data.tolist(), np.ma.getmaskarray(times).tolist())]
    elif isinstance(times, np.ndarray):
        times = times.tolist()
    rows = plan.layout.num_rows
    shape = f"must be a rectangular [R][G] list of seconds with R = {rows} rows (None: not measured)"
    require(isinstance(times, (list, tuple)) and len(times) == rows, f"{field}.times", shape)
    times = [list(row) if isinstance(row, (list, tuple, np.ndarray)) else None for row in times]
    require(all(row is not None and len(row) == len(times[0]) >= 1 for row in times), f"{field}.times", shape)
    return [[_time_value(t, f"{field}.times[{r}][{g}]") for g, t in enumerate(row)] for r, row in enumerate(times)]


def save_timings(path: str | os.PathLike, runs: list[tuple[Plan, np.ndarray]] | list[TimingRun],
                 windows: list[str | None] | None = None) -> None:
    """Write measured times in the ``rp-opt-timings/1`` format (a trainer's logging helper).

    Parameters
    ----------
    path
        File to write (standard JSON: no NaN or Infinity in it).
    runs
        One entry per measured plan: a pair ``(plan, times)`` or a :class:`TimingRun`.
        ``times[r][g]`` is the time in seconds of row r on EDP shard g, [R][G] for the plan's
        R rows (a nested list or an array): a finite number >= 0, or None for a time that
        was not measured (written as ``null``; in a :class:`numpy.ma.MaskedArray`, a masked
        entry). A TimingRun's NaN entries are its times that were not measured (``null``).
    windows
        Window file of each run, written as its ``window`` (the reader resolves a relative
        path against the timings file's directory); None, or a None entry: the run names no
        window and the reader's ``--window`` applies. As many entries as ``runs``.

    Raises
    ------
    InputError
        One line naming the entry (``runs[1].times[0][2]: must be a finite time >= 0 or
        None (not measured), got nan``): a NaN, infinite or negative time (a broken
        measurement, which ``rp-opt calibrate`` would refuse), times that are not [R][G],
        or ``windows`` of another length than ``runs``. Nothing is written then.
    """
    from .io import plan_to_dict

    runs = list(runs)
    require(windows is None or len(windows) == len(runs), "windows",
            f"has {len(windows) if windows is not None else 0} entries, runs has {len(runs)}")
    out = []
    for k, item in enumerate(runs):
        times = _time_rows(item, f"runs[{k}]")
        plan = item.plan if isinstance(item, TimingRun) else item[0]
        # stamped with the window's fingerprint when the run knows its window
        entry = {"plan": plan_to_dict(plan, item.instance if isinstance(item, TimingRun) else None), "times": times}
        if windows is not None and windows[k] is not None:
            entry["window"] = os.fspath(windows[k])
        out.append(entry)
    text = json.dumps({"format": FORMAT, "runs": out}, allow_nan=False)
    with open(path, "w") as handle:
        handle.write(text + "\n")


def _finite(t) -> bool:
    """Whether the JSON number ``t`` is a finite float (an integer beyond the float range is not)."""
    try:
        return bool(np.isfinite(float(t)))
    except OverflowError:
        return False


def _resolve(base: str, name) -> str:
    """A path named in a timings file: relative ones are relative to the file's directory."""
    name = str(name)
    return name if os.path.isabs(name) else os.path.join(base, name)


def named_inputs(path: str | os.PathLike) -> dict[str, str]:
    """The files a timings file names (``runs[k].window``, ``runs[k].plan_file``), resolved
    as :func:`load_timings` resolves them: ``{"window of timings.runs[0]": PATH, ...}``, for
    a writer to refuse to overwrite them. A file that cannot be read names none (the loader
    reports it)."""
    from .io import read_json

    try:
        data = read_json(path, "timings")
    except InputError:
        return {}
    runs = data.get("runs") if isinstance(data, dict) else None
    base = os.path.dirname(os.path.abspath(os.fspath(path)))
    out = {}
    for k, entry in enumerate(runs if isinstance(runs, list) else ()):
        for key, what in (("window", "window"), ("plan_file", "plan file")):
            if isinstance(entry, dict) and entry.get(key) is not None:
                out[f"{what} of timings.runs[{k}]"] = _resolve(base, entry[key])
    return out


def _within(field: str, exc: InputError) -> InputError:
    """``exc`` raised while reading the input ``field`` of a run, named by the run
    (``timings.runs[0].plan_file: rows: sample 16 is in no cell``); a message about the
    file itself (field ``file`` or ``plan``) keeps only its message."""
    return InputError(field, exc.message if exc.field in ("file", "plan", field) else str(exc))


def load_timings(path: str | os.PathLike, window: Instance | str | None = None) -> list[TimingRun]:
    """Read a timings file; ``window`` (instance or ``.npz`` path) is the default window.

    A problem inside a run is named by the run and its input
    (``timings.runs[1].plan_file: rows: sample 16 is in no cell``); a plan stamped with
    another window's fingerprint is refused."""
    from .check import check
    from .io import check_fingerprint, load_instance, plan_from_dict, read_json, read_plan_file

    path = os.fspath(path)
    data = read_json(path, "timings")
    require(isinstance(data, dict), "timings", "must be a JSON object")
    require(data.get("format") == FORMAT, "timings.format", f"must be {FORMAT!r}, got {data.get('format')!r}")
    runs = data.get("runs")
    require(isinstance(runs, list) and len(runs) >= 1, "timings.runs", "must be a non-empty list")
    base = os.path.dirname(os.path.abspath(path))
    cache: dict[str, Instance] = {}

    default = load_instance(window) if isinstance(window, (str, os.PathLike)) else window
    out = []
    for k, entry in enumerate(runs):
        field_name = f"timings.runs[{k}]"
        require(isinstance(entry, dict), field_name, "must be an object")
        if "window" in entry:
            wpath = _resolve(base, entry["window"])
            if wpath not in cache:
                try:
                    cache[wpath] = load_instance(wpath)
                except InputError as exc:
                    raise _within(f"{field_name}.window", exc) from None
            instance = cache[wpath]
        else:
            require(default is not None, f"{field_name}.window", "is missing and no --window was given")
            instance = default
        plan_field = f"{field_name}.plan" if "plan" in entry else f"{field_name}.plan_file"
        if "plan" in entry:
            plan_data = entry["plan"]
            require(isinstance(plan_data, dict) and "placement" in plan_data and "rows" in plan_data,
                    plan_field, "must be a plan object with placement and rows")
        else:
            require("plan_file" in entry, field_name, "needs a plan or a plan_file")
            try:
                plan_data = read_plan_file(_resolve(base, entry["plan_file"]), plan_field)
            except InputError as exc:
                raise _within(plan_field, exc) from None
        try:
            check_fingerprint(plan_data, instance.window, plan_field)
            plan = plan_from_dict(instance, plan_data)
        except InputError as exc:
            raise _within(plan_field, exc) from None
        # a plan this window cannot run (capacity, coverage): the timings are of another window
        report = check(instance, plan, objective="sync")
        require(report.valid, plan_field, "is not a valid plan of its window (another window's timings?): "
                + "; ".join(report.violations[:1]))
        require("times" in entry, f"{field_name}.times", "is missing")
        require(isinstance(entry["times"], list) and all(isinstance(row, list) for row in entry["times"]),
                f"{field_name}.times", "must be a rectangular [R][G] list of seconds (or null)")
        for r, row in enumerate(entry["times"]):
            for g, t in enumerate(row):
                # null marks a time that was not measured; NaN or infinity is a broken measurement
                require(t is None or (isinstance(t, (int, float)) and not isinstance(t, bool) and _finite(t)),
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
