"""Calibration: coefficients behind synthetic timings are recovered by NNLS."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rp_opt import CostModel, InputError, Stage, check
from rp_opt.calibrate import TimingRun, fit_cost, load_timings, predicted_times, save_timings
from rp_opt.cli import main
from rp_opt.io import save_instance
from rp_opt.solvers import get_solver
from rp_opt.synth import generate


@pytest.fixture(scope="module")
def measured():
    """A window measured under three plans; the true coefficients are the FLOP defaults
    scaled by (2.5 on alpha, 0.7 on beta, 1.3 on gamma)."""
    instance = generate(model="ling-tiny-like", samples=96, dp=4, edp=2, ep=4, capacity=4096, layers=4,
                        experts=16, seed=1)
    true = CostModel(tuple(Stage(s.name, s.layers, 2.5 * s.alpha, 0.7 * s.beta) for s in instance.cost.stages),
                     1.3 * instance.cost.gamma)
    plans = []
    for name in ("baseline", "kk", "lpt-ffd"):
        result = get_solver(name)(instance, objective="sync")
        assert check(instance, result.plan).valid
        plans.append(result.plan)
    return instance, true, plans


def _close(fit_cost_model, true, rel):
    for got, want in zip(fit_cost_model.stages, true.stages):
        assert got.alpha == pytest.approx(want.alpha, rel=rel)
        assert got.beta == pytest.approx(want.beta, rel=rel, abs=1e-15)
    assert fit_cost_model.gamma == pytest.approx(true.gamma, rel=rel)


def test_exact_timings_are_recovered(measured):
    instance, true, plans = measured
    runs = [TimingRun(instance, p, predicted_times(instance, p, true)) for p in plans]
    fit = fit_cost(runs)
    _close(fit.cost, true, 1e-6)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    assert fit.rel_rms < 1e-8


def test_noisy_timings_are_recovered(measured):
    instance, true, plans = measured
    rng = np.random.default_rng(0)
    runs = []
    for p in plans:
        t = predicted_times(instance, p, true)
        runs.append(TimingRun(instance, p, t * (1 + 0.01 * rng.standard_normal(t.shape))))
    fit = fit_cost(runs)
    _close(fit.cost, true, 0.05)
    assert fit.r2 > 0.98
    assert 0.002 < fit.rel_rms < 0.03  # about the 1 % noise


def test_file_round_trip_and_cli(measured, tmp_path, capsys):
    instance, true, plans = measured
    save_instance(tmp_path / "w.npz", instance)
    times = [predicted_times(instance, p, true) for p in plans]
    times[0][0, 1] = np.nan  # a missing measurement is skipped
    save_timings(tmp_path / "t.json", list(zip(plans, times)))
    runs = load_timings(tmp_path / "t.json", str(tmp_path / "w.npz"))
    assert len(runs) == 3 and np.isnan(runs[0].times[0, 1])
    code = main(["calibrate", str(tmp_path / "t.json"), "--window", str(tmp_path / "w.npz"),
                 "-o", str(tmp_path / "cost.json"), "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["observations"] == sum(t.size for t in times) - 1
    cost = CostModel.from_dict(json.load(open(tmp_path / "cost.json")))
    _close(cost, true, 1e-6)
    # the cost file feeds a Planner directly
    from rp_opt import Planner

    planner = Planner(instance.cluster, str(tmp_path / "cost.json"), mode="baseline")
    assert planner.cost_model(4) == cost


def test_bad_timings(measured, tmp_path):
    instance, true, plans = measured
    with pytest.raises(InputError, match=r"^times: has shape"):
        TimingRun(instance, plans[0], np.ones((1, 1)))
    t = predicted_times(instance, plans[0], true)
    t[0, 0] = -1
    with pytest.raises(InputError, match=r"^times\[0\]\[0\]: must be a finite time >= 0"):
        TimingRun(instance, plans[0], t)
    (tmp_path / "t.json").write_text(json.dumps({"format": "other"}))
    assert main(["calibrate", str(tmp_path / "t.json")]) == 2
    (tmp_path / "t.json").write_text(json.dumps({"format": "rp-opt-timings/1", "runs": [{"times": [[1]]}]}))
    with pytest.raises(InputError, match="window"):
        load_timings(tmp_path / "t.json")
