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


def test_cycling_slots_return_a_fit_whose_statistics_are_its_own():
    """Six samples T = [1, 4, 8, 4, 5, 5] in 3 rows of 2 slots (G = 1, one layer, one expert
    on one rank, so X = gamma x the row's tokens 5, 12, 10), stages lin (alpha 1, beta 0)
    and soft (alpha 1, beta 0.1), times [8, 27, 22]. The fit alternates between two
    passes: (a, b, gamma) = (1.02, 0, 1.57), whose model predicts row 0 as
    1.02 x 4 + 1.57 x 5 = 11.93, and (0, 0.0449, 1.988). It used to return the first one
    after 20 passes with r2 and rms of the regressors of the pass before (row 0: 10.4, rms
    1.55 where the model's is 2.37); it now returns the pass whose own predictions fit
    best, and its predicted times, r2 and rms are the model's."""
    from rp_opt import Cluster, Instance, Layout, Placement, Window
    from rp_opt.result import Plan

    lengths = np.array([1, 4, 8, 4, 5, 5])
    window = Window(lengths, lengths.reshape(6, 1, 1), top_k=1)
    prior = CostModel((Stage("lin", 1, 1.0, 0.0), Stage("soft", 1, 1.0, 0.1)), 1.0)
    instance = Instance(window, Cluster(dp=2, edp=1, ep=1, capacity=100), prior)
    plan = Plan(Placement(np.zeros((1, 1), dtype=np.int64), 1), Layout(np.arange(6), 3, 2), "sync", (0.0,))
    times = np.array([[8.0], [27.0], [22.0]])
    fit = fit_cost([TimingRun(instance, plan, times)])
    model = predicted_times(instance, plan, fit.cost).ravel()
    assert fit.predicted == pytest.approx(model, rel=1e-12)
    assert fit.rms == pytest.approx(float(np.sqrt(np.mean((model - times.ravel()) ** 2))), rel=1e-12)
    assert fit.totals["attention_tokens"] == 0.0
    assert fit.rms < 1.65  # the other pass's model: 2.37
