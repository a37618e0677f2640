"""Calibration audit: whether the measured times pin the coefficients (standard errors,
condition number, refusal of data that cannot tell them apart), fits worse than the mean
or of equal times, and strict timings files (one test per defect found)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from rp_opt import CostModel, InputError, Stage
from rp_opt.calibrate import (COEFFICIENTS, CONDITION_WARNING, TimingRun, fit_cost, load_timings, predicted_times,
                              save_timings)
from rp_opt.cli import main
from rp_opt.io import save_instance
from rp_opt.solvers import get_solver
from rp_opt.synth import generate
from rp_opt.window import Cluster, Instance, Window


def _true(cost: CostModel) -> CostModel:
    """The true model of these tests: the FLOP defaults times (3 on alpha, 0.5 on beta, 2 on gamma)."""
    return CostModel(tuple(Stage(s.name, s.layers, 3 * s.alpha, 0.5 * s.beta) for s in cost.stages), 2 * cost.gamma)


def _totals(cost: CostModel) -> np.ndarray:
    return np.array([float(cost.layers @ cost.alpha), float(cost.layers @ cost.beta), cost.gamma])


def _plans(instance, names=("baseline", "kk", "lpt-ffd")):
    return [get_solver(n)(instance, objective="sync").plan for n in names]


@pytest.fixture(scope="module")
def measured():
    """A 48-sample window (D = 4, G = 2) under three plans: 3 x 3 x 2 = 18 times."""
    instance = generate(model="ling-tiny-like", samples=48, dp=4, edp=2, ep=4, capacity=4096, layers=4,
                        experts=16, seed=3)
    return instance, _plans(instance)


def _uniform(bump: int = 0, attn_work=None) -> Instance:
    """32 samples of 1024 tokens (the first four ``bump`` more), every token to experts 0
    and 1 of 8 at both layers: every plan's cells alike (bump 0) or nearly so."""
    lengths = np.full(32, 1024)
    lengths[:4] += bump
    demand = np.zeros((32, 2, 8), dtype=np.int64)
    demand[:, :, :2] = lengths[:, None, None]
    base = generate(model="ling-tiny-like", samples=32, dp=4, edp=2, ep=4, capacity=8192, layers=2, experts=8,
                    seed=0)
    return Instance(Window(lengths, demand, top_k=2, attn_work=attn_work), base.cluster, base.cost)


def _runs(instance, plans, noise=0.0, seed=0, multiplicative=True):
    rng = np.random.default_rng(seed)
    true = _true(instance.cost)
    out = []
    for plan in plans:
        t = predicted_times(instance, plan, true)
        e = noise * rng.standard_normal(t.shape)
        out.append(TimingRun(instance, plan, t * (1 + e) if multiplicative else t + t.mean() * e))
    return out


# ------------------------------------------------------------------ A: are the coefficients pinned?
def test_no_more_times_than_coefficients_is_refused():
    """Three times for the three totals (a, b, gamma) were fitted exactly, whatever they
    were (R^2 1, nothing checked the model); a fit now needs more times than unknowns,
    and says so in one line naming the times."""
    lengths = np.array([1, 4, 8, 4, 5, 5])
    prior = CostModel((Stage("lin", 1, 1.0, 0.0), Stage("soft", 1, 1.0, 0.1)), 1.0)
    instance = Instance(Window(lengths, lengths.reshape(6, 1, 1), top_k=1), Cluster(2, 1, 1, 100), prior)
    from rp_opt import Layout, Placement
    from rp_opt.result import Plan

    plan = Plan(Placement(np.zeros((1, 1), dtype=np.int64), 1), Layout(np.arange(6), 3, 2), "sync", (0.0,))
    run = TimingRun(instance, plan, np.array([[8.0], [27.0], [22.0]]))
    with pytest.raises(InputError, match=r"^times: hold 3 measured values; the fit of 3 coefficients "
                                         r"\(attention_tokens, attention_pairs and gamma\) needs more than 3"):
        fit_cost([run])
    assert fit_cost([run, run]).observations == 6  # the same plan measured twice: 6 times


def test_times_that_cannot_tell_coefficients_apart_are_refused(tmp_path, capsys):
    """Every cell of every plan alike (32 samples of 1024 tokens, the same routing): the
    token and pair regressors are proportional, so any mix of a and b fits alike. The fit
    returned a = 0 and b 6.8 x too large, reported as the global optimum with R^2 0.9993
    and no warning (/tmp/s37/cert/cal/coll.py); it is now refused in one line naming the
    two totals, exit code 2 from the CLI, no file written."""
    instance = _uniform()
    runs = _runs(instance, _plans(instance), noise=0.01)
    with pytest.raises(InputError, match=r"^times: the 6 measured times cannot tell apart attention_tokens and "
                                         r"attention_pairs: their regressors are linearly dependent \(rank 2 of 3\)"):
        fit_cost(runs)
    save_instance(tmp_path / "w.npz", instance)
    save_timings(tmp_path / "t.json", runs, windows=[str(tmp_path / "w.npz")] * len(runs))
    assert main(["calibrate", str(tmp_path / "t.json"), "-o", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: times: the 6 measured times cannot tell apart")
    assert not (tmp_path / "c.json").exists()


def test_nearly_collinear_times_warn_and_show_the_uncertainty():
    """Four of the 32 samples one token longer: the regressors are barely independent
    (condition number about 2e4). Noise-free times still give the true totals, with a
    warning naming the totals the data hardly tells apart; under 1 % noise the standard
    error of a is larger than a itself, and a second warning says a is not pinned."""
    instance = _uniform(bump=1)
    plans = _plans(instance)
    exact = fit_cost(_runs(instance, plans))
    assert exact.condition > CONDITION_WARNING
    assert np.allclose(list(exact.totals.values()), _totals(_true(instance.cost)), rtol=1e-6)
    assert len(exact.warnings) == 1
    assert exact.warnings[0].startswith("the measured times hardly tell apart attention_tokens and attention_pairs")
    noisy = fit_cost(_runs(instance, plans, noise=0.01))
    assert noisy.relative_stderr["attention_tokens"] > 1
    assert any(w.startswith("attention_tokens is not pinned by the times: standard error") for w in noisy.warnings)


def test_standard_errors_measure_the_spread_of_the_fit(measured):
    """100 draws of additive noise (1 % of the mean time) on 18 times: the standard error
    each fit reports is, on average, within 25 % of the spread of the fitted totals over the
    draws (measured: 0.97-1.05 of it), more than 85 % of the draws lie within 2 standard
    errors of the truth (93-96 %), and noise-free times report standard errors of about 0."""
    instance, plans = measured
    truth = _totals(_true(instance.cost))
    fits = [fit_cost(_runs(instance, plans, 0.01, seed, multiplicative=False), log_warnings=False)
            for seed in range(100)]
    est = np.array([list(f.totals.values()) for f in fits])
    se = np.array([list(f.stderr.values()) for f in fits])
    ratio = se.mean(axis=0) / est.std(axis=0, ddof=1)
    assert np.all((ratio > 0.75) & (ratio < 1.25)), ratio
    assert np.all((np.abs(est - truth) < 2 * se).mean(axis=0) > 0.85)
    exact = fit_cost(_runs(instance, plans))
    assert all(exact.relative_stderr[k] < 1e-9 for k in COEFFICIENTS) and exact.warnings == ()


def test_the_cli_reports_standard_errors_and_the_condition(measured, tmp_path, capsys):
    """--json carries stderr, relative_stderr, condition and warnings; the table a
    "std error" and a "relative" column, and the condition number."""
    instance, plans = measured
    save_instance(tmp_path / "w.npz", instance)
    save_timings(tmp_path / "t.json", _runs(instance, plans, noise=0.02, seed=1))
    argv = ["calibrate", str(tmp_path / "t.json"), "--window", str(tmp_path / "w.npz")]
    assert main(argv + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["stderr"]) == set(COEFFICIENTS) == set(out["relative_stderr"])
    assert all(v > 0 for v in out["stderr"].values()) and out["condition"] > 1
    for k in COEFFICIENTS:
        if out["totals"][k] > 0:
            assert out["relative_stderr"][k] == pytest.approx(out["stderr"][k] / out["totals"][k])
    assert isinstance(out["warnings"], list)
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "std error" in text and "relative" in text and "condition number" in text


def test_a_total_without_work_is_fitted_as_zero_with_a_warning(measured):
    """A window whose attention work is 0 for every sample (attn_work given as zeros)
    measures no pair cost: b is fitted as 0 and said so (standard error None), the other
    totals are recovered; the fit used to say nothing."""
    instance = _uniform(bump=300, attn_work=np.zeros(32))
    fit = fit_cost(_runs(instance, _plans(instance)), log_warnings=False)
    assert fit.totals["attention_pairs"] == 0 and fit.stderr["attention_pairs"] is None
    assert fit.relative_stderr["attention_pairs"] is None
    assert fit.warnings == ("attention_pairs: the measured plans give it no work (regressor 0 in every measured "
                            "time): fitted as 0, not measured",)
    truth = _totals(_true(instance.cost))
    assert fit.totals["attention_tokens"] == pytest.approx(truth[0], rel=1e-6)
    assert fit.totals["gamma"] == pytest.approx(truth[2], rel=1e-6)


# ------------------------------------------------------------------ B: R^2 of equal times
def test_equal_times_warn(measured, tmp_path, capsys, caplog):
    """Every time 1 s (/tmp/s37/cert/cal/b_const.json): R^2 is undefined and was set to 0
    without a word; the fit now warns (logged on the rp_opt logger, and the CLI's
    "warning:" line)."""
    instance, plans = measured
    runs = [TimingRun(instance, p, np.ones((p.layout.num_rows, 2))) for p in plans]
    with caplog.at_level(logging.WARNING, logger="rp_opt"):
        fit = fit_cost(runs)
    assert fit.r2 == 0
    assert any(w.startswith("all 18 measured times are equal (1 s): R^2 is undefined") for w in fit.warnings)
    assert any("measured times are equal" in r.getMessage() for r in caplog.records)
    save_instance(tmp_path / "w.npz", instance)
    save_timings(tmp_path / "t.json", runs)
    assert main(["calibrate", str(tmp_path / "t.json"), "--window", str(tmp_path / "w.npz")]) == 0
    assert "warning: all 18 measured times are equal" in capsys.readouterr().err


# ------------------------------------------------------------------ C: save_timings
@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -1.0, "1.0", True])
def test_save_timings_refuses_broken_times(measured, tmp_path, bad):
    """An infinite time was written as the non-standard JSON ``Infinity``, which
    ``rp-opt calibrate`` then refused, and NaN silently as null (not measured), although the
    docs call both bad input; save_timings now raises the one-line InputError naming the
    entry and writes nothing."""
    instance, plans = measured
    times = [predicted_times(instance, p, instance.cost).tolist() for p in plans]
    times[1][2][0] = bad
    with pytest.raises(InputError, match=r"^runs\[1\]\.times\[2\]\[0\]: must be a finite time >= 0 or None "
                                         r"\(not measured\), got "):
        save_timings(tmp_path / "t.json", list(zip(plans, times)))
    assert not (tmp_path / "t.json").exists()
    with pytest.raises(InputError, match=r"^runs\[1\]\.times\[2\]\[0\]: must be a finite time"):
        save_timings(tmp_path / "t.json", [(plans[0], times[0]), (plans[1], np.array(times[1], dtype=object))])


def test_save_timings_writes_standard_json_with_null_for_unmeasured(measured, tmp_path):
    """None in a list, a masked entry of a masked array and a TimingRun's NaN are times not
    measured: written as null (strict JSON) and read back as missing; a shape that is not
    the plan's [R][G] and a windows list of another length are InputErrors."""
    instance, plans = measured
    times = [predicted_times(instance, p, instance.cost) for p in plans]
    as_list = times[0].tolist()
    as_list[0][1] = None
    masked = np.ma.masked_array(times[1], mask=np.zeros(times[1].shape, dtype=bool))
    masked[1, 0] = np.ma.masked
    run = TimingRun(instance, plans[2], np.where(np.arange(times[2].size).reshape(times[2].shape) == 3, np.nan,
                                                 times[2]))
    path = tmp_path / "t.json"
    save_timings(path, [(plans[0], as_list), (plans[1], masked), run])
    data = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-standard {c}"))
    assert data["runs"][0]["times"][0][1] is None and data["runs"][1]["times"][1][0] is None
    assert data["runs"][2]["times"][1][1] is None
    back = load_timings(path, instance)
    assert [int(np.isnan(r.times).sum()) for r in back] == [1, 1, 1]
    assert np.isnan(back[0].times[0, 1]) and np.isnan(back[1].times[1, 0]) and np.isnan(back[2].times[1, 1])
    with pytest.raises(InputError, match=r"^runs\[0\]\.times: must be a rectangular \[R\]\[G\] list"):
        save_timings(path, [(plans[0], times[0][:-1])])
    with pytest.raises(InputError, match=r"^windows: has 1 entries, runs has 3"):
        save_timings(path, [run, run, run], windows=["w.npz"])
