"""The heuristic's inputs: windows that cost nothing, option values, seeds, time limits and
whether a run says it is repeatable (rp_opt.packing.heuristic_options)."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from rp_opt import Cluster, CostModel, Planner, Stage, synth
from rp_opt.check import check
from rp_opt.errors import InputError
from rp_opt.packing.report import improvement
from rp_opt.packing.heuristic_options import check_option
from rp_opt.solvers import get_solver
from rp_opt.window import Window


@functools.lru_cache(maxsize=None)
def tiny():
    """16 samples, D=4, G=2, P=2 (the QA report's w16 window)."""
    return synth.generate("ling-tiny-like", samples=16, dp=4, edp=2, ep=2, capacity=4096, seed=0)


def zero_cost(instance):
    """``instance`` with every coefficient (alpha, beta, gamma) 0: every plan costs 0."""
    stages = tuple(Stage(s.name, s.layers, 0.0, 0.0) for s in instance.cost.stages)
    return dataclasses.replace(instance, cost=CostModel(stages, gamma=0.0))


def zero_demand(instance):
    """``instance`` with all-zero routing demand (the ``expert`` objective is then 0)."""
    w = instance.window
    return dataclasses.replace(instance, window=Window(w.lengths, np.zeros_like(w.demand), w.top_k, w.attn_work))


def assert_valid(instance, result):
    report = check(instance, result.plan)
    assert report.valid, report.violations
    np.testing.assert_allclose(report.score, result.score, rtol=1e-9, atol=1e-12)


FAST = {"time_limit": 0.5, "workers": 1}


# ----------------------------------------------------------------------- zero costs

@pytest.mark.parametrize("solver", ["heuristic", "auto", "baseline"])
def test_zero_cost_window_plans_and_is_optimal(solver):
    """All coefficients 0 (QA item 3): no ZeroDivisionError; every plan is optimal, and
    the status says so (score = bound = 0, gap 0, improvement 0)."""
    inst = zero_cost(tiny())
    options = dict(FAST) if solver != "baseline" else {"time_limit": 0.5}
    result = get_solver(solver)(inst, **options)
    assert_valid(inst, result)
    assert result.score == (0.0, 0.0, 0.0) and result.bound == 0.0 and result.gap == 0.0
    assert result.status == "optimal"
    assert result.stats.get("improvement") in (None, 0.0)


@pytest.mark.parametrize("options", [{"temperatures": 2, "replicas": 4}, {"refine": True}, {"search": False},
                                     {"anneal_share": 1.0}])
def test_zero_cost_window_every_phase(options):
    """The anneal (temperature from zero energy changes), the search and the refine all run
    on zero energies."""
    inst = zero_cost(tiny())
    result = get_solver("heuristic")(inst, **FAST, **options)
    assert_valid(inst, result)
    assert result.status == "optimal" and result.stats["improvement"] == 0.0


@pytest.mark.parametrize("solver", ["heuristic", "auto"])
def test_zero_demand_expert_objective(solver):
    inst = zero_demand(tiny())
    result = get_solver(solver)(inst, objective="expert", **FAST)
    assert_valid(inst, result)
    assert result.score[0] == 0.0 and result.gap == 0.0


def test_improvement_never_divides_by_zero():
    assert improvement(0.0, 0.0) == 0.0
    assert improvement(0.0, 1.0) is None
    assert improvement(4.0, 3.0) == 0.25


def test_planner_with_zero_cost_model():
    """A calibrated all-zero cost model (QA item 3, via ``rp-opt calibrate``) plans."""
    cluster = Cluster(dp=4, edp=2, ep=2, capacity=4096)
    cost = {"stages": [{"name": "linear", "layers": 4, "alpha": 0.0, "beta": 0.0}], "gamma": 0.0}
    planner = Planner(cluster, cost, mode="heuristic", time_limit=1.0, solver_options={"workers": 1})
    rng = np.random.default_rng(0)
    # top-2 of 8 experts, two distinct ids per token (the adapter refuses a repeat)
    routing = [np.argsort(rng.random((50 + 10 * i, 4, 8)), axis=2)[:, :, :2] for i in range(8)]
    step = planner.plan(routing=routing, num_experts=8)
    assert check(step.instance, step.plan).valid
    assert step.score[0] == 0.0 and step.gap == 0.0 and step.status == "optimal"


# ----------------------------------------------------------------------- seeds, time limits

@pytest.mark.parametrize("seed", [-1, 1.5, "a", True, None, 2**31])
def test_bad_seed_is_one_line_error(seed):
    """2^31 is one past CP-SAT's 32-bit random_seed (it raised a TypeError inside CP-SAT)."""
    with pytest.raises(InputError, match=r"^seed: ") as planner_error:
        Planner(Cluster(dp=4, edp=2, ep=2, capacity=4096), seed=seed)
    assert "\n" not in str(planner_error.value)
    for solver in ("heuristic", "auto"):
        with pytest.raises(InputError, match=r"^seed: "):
            get_solver(solver)(tiny(), seed=seed, **FAST)
    for solver in ("exact", "joint"):
        with pytest.raises(InputError, match=r"^seed: "):
            get_solver(solver)(tiny(), seed=seed, time_limit=1)


@pytest.mark.parametrize("solver", ["heuristic", "auto"])
@pytest.mark.parametrize("limit", [float("inf"), float("nan"), 0, -1, "abc"])
def test_bad_time_limit_is_one_line_error(solver, limit):
    """QA item 9: an infinite limit used to run forever."""
    with pytest.raises(InputError, match=r"^time_limit: .*finite") as error:
        get_solver(solver)(tiny(), time_limit=limit, workers=1)
    assert error.value.field == "time_limit" and "\n" not in str(error.value)


# ----------------------------------------------------------------------- option values

BAD = [
    ("workers", 0), ("workers", -1), ("workers", 1.7), ("workers", "abc"),
    ("temperatures", "nan"), ("temperatures", float("nan")), ("temperatures", -5), ("temperatures", 0),
    ("temperatures", 1.5), ("refine", "maybe"), ("refine", 2), ("anneal_share", -1), ("anneal_share", 2),
    ("search_evaluations", -1), ("search_evaluations", 0), ("replicas", 0), ("candidates", 0),
    ("steps_per_temperature", -3), ("no_improvement", 0), ("search_cap", 0), ("search_screen", "x"),
    ("refine_share", 1.5), ("refine_rounds", 0), ("refine_sweeps", 0.5), ("search_workers", 0),
    ("surrogate", -0.1), ("surrogate", float("inf")), ("reserve", -1), ("reserve", 0.5), ("seeds", "nope"),
    ("seeds", []), ("search", "sometimes"), ("num_rows", 0), ("regroup", "maybe"), ("regroup", 2),
    ("anchor_margin", -0.1), ("anchor_margin", "x"), ("background_bound", "maybe"), ("cycles", "maybe"),
    ("replicas", 4097), ("candidates", 1025), ("candidates", 10**9),
]


@pytest.mark.parametrize("name,value", BAD)
def test_bad_option_value_is_one_line_error(name, value):
    """QA item 6: one line naming the option and the value, before anything runs."""
    for solver in ("heuristic", "auto"):
        with pytest.raises(InputError) as error:
            get_solver(solver)(tiny(), time_limit=0.5, **({"workers": 1} | {name: value}))
        assert error.value.field == name
        message = str(error.value)
        assert "\n" not in message and message.startswith(f"{name}: must be ") and repr(value) in message


def test_moves_per_step_are_bounded():
    """replicas x candidates moves are drawn (and held in memory) every step: at most 2^16,
    one line before anything runs (candidates=10^9 used to fail allocating 238 GiB)."""
    for solver in ("heuristic", "auto"):
        with pytest.raises(InputError, match=r"^candidates: replicas x candidates must be at most 65536.* 4096 x 32$"):
            get_solver(solver)(tiny(), time_limit=0.5, replicas=4096, candidates=32)


def test_unknown_option_lists_workers():
    with pytest.raises(InputError, match=r"unknown option.*known: .*\bworkers\b"):
        get_solver("heuristic")(tiny(), bogus=1, **FAST)


@pytest.mark.parametrize("name,value,expected", [
    ("refine", "yes", True), ("refine", "no", False), ("refine", 1, True), ("refine", "0", False),
    ("refine", "TRUE", True), ("workers", "2", 2), ("workers", np.int64(3), 3), ("temperatures", None, None),
    ("temperatures", "none", None), ("anneal_share", "0.5", 0.5), ("anneal_share", 1, 1.0),
    ("seeds", "ffd,blocks-kk", ("ffd", "blocks-kk")), ("seeds", ["witness"], ("witness",)),
    ("search_screen", None, None), ("workers", 8.0, 8), ("workers", "3.0", 3), ("surrogate", "0", 0.0),
    ("time_limit", "2.5", 2.5), ("seeds", "none", None), ("regroup", "none", None), ("regroup", None, None),
    ("regroup", "no", False), ("regroup", 1, True), ("seeds", "anchors,greedy", ("anchors", "greedy")),
    ("anchor_margin", "0.01", 0.01), ("background_bound", "yes", True), ("cycles", "no", False),
])
def test_option_values_from_python_and_the_cli(name, value, expected):
    """The CLI's ``--option KEY=VALUE`` gives JSON values when they parse, else text."""
    assert check_option(name, value) == expected


def test_string_options_run_as_their_values():
    inst = tiny()
    result = get_solver("heuristic")(inst, time_limit=0.5, workers="1", refine="yes", anneal_share="0.5",
                                     seeds="ffd,kk,blocks", regroup="yes")
    assert_valid(inst, result)
    # each seed rule's layout, and each again with its cells regrouped (rp_opt.packing.regroup)
    assert result.stats["workers"] == 1 and sorted(result.stats["seeds"]) == [
        "blocks", "blocks+regroup", "ffd", "ffd+regroup", "kk", "kk+regroup"]


def test_anneal_share_one_keeps_the_time_limit():
    """anneal_share is a share of the time: at most 1 (2 used to double the run)."""
    inst = tiny()
    result = get_solver("heuristic")(inst, time_limit=0.5, workers=1, anneal_share=1.0, report_baseline=False)
    assert_valid(inst, result)
    assert result.seconds < 0.5 * 1.3


# ----------------------------------------------------------------------- repeatability

def test_stats_say_whether_the_run_repeats():
    """QA item 4: a time-limited run is not repeatable for a seed, a fixed schedule is."""
    inst = tiny()
    timed = get_solver("heuristic")(inst, seed=3, **FAST)
    assert timed.stats["deterministic"] is False
    fixed = [get_solver("heuristic")(inst, seed=3, temperatures=2, replicas=4, search_evaluations=20, **FAST)
             for _ in range(2)]
    for result in fixed:
        assert_valid(inst, result)
        assert result.stats["deterministic"] is True
    assert fixed[0].score == fixed[1].score
    np.testing.assert_array_equal(fixed[0].plan.layout.cell_of, fixed[1].plan.layout.cell_of)
    assert get_solver("auto")(inst, seed=3, **FAST).stats["deterministic"] is False


# ----------------------------------------------------------------------- Ctrl-C

@pytest.mark.parametrize("options", [{"temperatures": 100000, "replicas": 4}, {}])
def test_ctrl_c_returns_the_best_plan_so_far(options, ctrl_c):
    """QA item 10: KeyboardInterrupt during the anneal (fixed schedule) or the time-limited
    search ends the run with a valid plan marked ``interrupted`` instead of losing it."""
    inst = tiny()
    ctrl_c(0.6)
    try:
        result = get_solver("heuristic")(inst, time_limit=30.0, workers=1, **options)
    except KeyboardInterrupt:
        pytest.fail("the interrupt escaped the heuristic")
    assert_valid(inst, result)
    assert result.stats["interrupted"] is True and result.seconds < 10
