"""Review of the calibration and the benchmark runner: defects found, one test each."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from rp_opt import CostModel, InputError, Stage
from rp_opt.calibrate import TimingRun, fit_cost, load_timings, predicted_times, save_timings
from rp_opt.io import save_instance
from rp_opt.solvers import get_solver
from rp_opt.synth import generate


def _window(layers=4, seed=3):
    return generate(model="ling-tiny-like", samples=48, dp=4, edp=2, ep=4, capacity=4096, layers=layers,
                    experts=16, seed=seed)


def _scaled(cost):
    """The true model of the tests: the FLOP defaults times (3 on alpha, 0.5 on beta, 2 on gamma)."""
    return CostModel(tuple(Stage(s.name, s.layers, 3 * s.alpha, 0.5 * s.beta) for s in cost.stages), 2 * cost.gamma)


def _plans(instance, names=("baseline", "kk")):
    return [get_solver(n)(instance, objective="sync").plan for n in names]


def test_windows_of_different_depth_are_fitted_with_their_own_layer_counts():
    """Runs of a 4-layer window (stages linear x3, mla x1) and an 8-layer one (x6, x2), timed
    with the same per-layer coefficients: the fit used the first window's layer counts for
    every run and returned alpha = beta = 0, gamma 2.4x too large (R^2 0.99); each run's
    attention term now counts its own window's layers, and the coefficients are recovered."""
    runs = []
    for inst in (_window(4, 3), _window(8, 4)):
        for plan in _plans(inst):
            runs.append(TimingRun(inst, plan, predicted_times(inst, plan, _scaled(inst.cost))))
    fit = fit_cost(runs)
    true = _scaled(runs[0].instance.cost)
    for got, want in zip(fit.cost.stages, true.stages):
        assert got.alpha == pytest.approx(want.alpha, rel=1e-6)
        assert got.beta == pytest.approx(want.beta, rel=1e-6, abs=1e-15)
    assert fit.cost.gamma == pytest.approx(true.gamma, rel=1e-6)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)


def test_a_timings_file_of_another_window_is_an_input_error(tmp_path):
    """Plans made for window A (seed 3) and their times, calibrated with --window B (seed 4,
    same N, D, G): the cells exceed B's capacity, so B cannot have run them. The fit used to
    go ahead (R^2 -17.6, a cost model with beta = gamma = 0 written, exit 0); loading the
    file now raises one line naming the run's plan."""
    a, b = _window(seed=3), _window(seed=4)
    save_instance(tmp_path / "b.npz", b)
    plans = _plans(a)
    save_timings(tmp_path / "t.json", [(p, predicted_times(a, p, a.cost)) for p in plans])
    with pytest.raises(InputError, match=r"^timings\.runs\[0\]\.plan: is not a valid plan of its window .*capacity"):
        load_timings(tmp_path / "t.json", str(tmp_path / "b.npz"))
    from rp_opt.cli import main

    assert main(["calibrate", str(tmp_path / "t.json"), "--window", str(tmp_path / "b.npz")]) == 2


def test_an_integer_time_beyond_the_float_range_is_an_input_error(tmp_path):
    """A times entry 10**400 (valid JSON, a Python int) raised numpy's TypeError from
    np.isfinite (a traceback from the CLI); it is now the one-line InputError."""
    a = _window()
    save_instance(tmp_path / "a.npz", a)
    plan = _plans(a, ("baseline",))[0]
    save_timings(tmp_path / "t.json", [(plan, predicted_times(a, plan, a.cost))])
    data = json.load(open(tmp_path / "t.json"))
    data["runs"][0]["times"][0][0] = 10 ** 400
    (tmp_path / "t.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"^timings\.runs\[0\]\.times\[0\]\[0\]: must be a finite time"):
        load_timings(tmp_path / "t.json", str(tmp_path / "a.npz"))


def test_relative_error_of_a_huge_outlier_is_finite():
    """Times of about 1e3 s with one of 1e308 s: the relative RMS error squared ratios of
    about 1e300 and overflowed to inf (a RuntimeWarning; "inf %" in the table, null in
    --json); it is now the finite value, computed in units of the largest ratio."""
    a = _window()
    plans = _plans(a)
    times = [predicted_times(a, p, a.cost) for p in plans]
    times[0][0, 0] = 1e308
    with np.errstate(over="raise"):
        fit = fit_cost([TimingRun(a, p, t) for p, t in zip(plans, times)])
    assert fit.rel_rms is not None and math.isfinite(fit.rel_rms) and fit.rel_rms > 1
    assert math.isfinite(fit.rms) and all(c >= 0 for c in fit.totals.values())


@dataclasses.dataclass(frozen=True)
class _DyingSpec:
    """An instance recipe whose build kills its process (a worker killed for memory)."""

    inner: object

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def build(self):
        os._exit(3)


def test_a_worker_that_dies_becomes_error_records_not_a_crash():
    """Two workers, one task whose worker process dies: run_tasks raised BrokenProcessPool
    and every record of the benchmark was lost; the tasks the broken pool could not finish
    are now ``status='error'`` records naming the reason, in task order."""
    from rp_opt.bench import Task, run_tasks, suite

    spec = suite("tiny")[0]
    tasks = [Task(_DyingSpec(spec), "baseline", time_limit=1.0), Task(spec, "baseline", time_limit=1.0)]
    seen = []
    records = run_tasks(tasks, workers=2, on_record=seen.append)
    assert len(records) == 2 and len(seen) == 2
    assert records[0]["status"] == "error" and records[0]["valid"] is False
    assert "BrokenProcessPool" in records[0]["error"] and records[0]["instance"] == spec.name
    assert all(r["solver"] == "baseline" for r in records)
    from rp_opt.bench.report import add_gaps, per_instance_rows

    add_gaps(records)
    per_instance_rows(records)  # the report takes the error records


def test_a_fit_worse_than_the_mean_is_refused_unless_forced(tmp_path, capsys):
    """Times that fall as the work grows (each run's times reversed against its modelled
    ones) fit worse than their mean (R^2 -1.42): the cost model was still written with a
    warning and exit code 0; it is now refused with exit code 1, one line on stderr, no
    file written (and the fit still in --json, with the reason as "error"). ``--force``
    writes it, warns and exits 0."""
    from rp_opt.cli import main

    a = _window()
    save_instance(tmp_path / "a.npz", a)
    runs = []
    for plan in _plans(a):
        t = predicted_times(a, plan, a.cost)
        runs.append((plan, t.max() + t.min() - t))
    save_timings(tmp_path / "t.json", runs)
    argv = ["calibrate", str(tmp_path / "t.json"), "--window", str(tmp_path / "a.npz"), "-o", str(tmp_path / "c.json")]
    assert main(argv + ["--json"]) == 1
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    err = captured.err.strip().splitlines()
    assert out["r2"] < 0 and out["output"] is None and out["error"]["field"] == "timings"
    assert "worse than their mean" in out["error"]["message"] and "--force" in out["error"]["message"]
    assert len(err) == 1 and err[0].startswith("error: timings: R^2 = -1.") and "not written" in err[0]
    assert not (tmp_path / "c.json").exists()
    assert main(argv) == 1 and not (tmp_path / "c.json").exists()
    assert "nothing written" in capsys.readouterr().out
    assert main(argv + ["--force", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["output"] == str(tmp_path / "c.json") and (tmp_path / "c.json").exists() and "error" not in out
    assert any("worse than their mean" in w for w in out["warnings"])
    assert captured.err.count("warning: R^2") == 1 and "error: " not in captured.err


def test_bench_counts_a_checker_disagreement_as_a_wrong_plan():
    """Hand-made records (no solver): a valid plan whose checker score differs from its
    solver's is a wrong plan, like an invalid one; the bench exit code was 0 for it. A
    returned plan without a score is one too (the report could not count it)."""
    from rp_opt.bench.report import wrong_plans

    records = [{"status": "optimal", "valid": True, "check_agrees": True, "score": 1.0},
               {"status": "feasible", "valid": True, "check_agrees": False, "score": 1.0},
               {"status": "feasible", "valid": False, "score": 1.0},
               {"status": "optimal", "valid": True, "check_agrees": True, "score": None},
               {"status": "infeasible", "valid": False},
               {"status": "error", "valid": False}]
    assert wrong_plans(records) == records[1:4]
