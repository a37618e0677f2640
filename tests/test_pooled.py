"""Tests of the pooled bound of the exact planner (rp_opt.packing.exact.pooled): the
pooled window has the grid's layouts and block costs, its objective is below level 1 for
every layout, and its CP-SAT bound is below the brute-force optimum of level 1."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rp_opt.cost import layout_costs, score
from rp_opt.objectives import Aggregate, Objective
from rp_opt.packing.exact import default_placement, solve_packing
from rp_opt.packing.exact.common import layout_valid, packing_data
from rp_opt.packing.exact.pooled import pooled_bound, pooled_instance, pooled_objective, pooled_useful
from rp_opt.solution import Layout

from test_exact import brute_force, checked, make_window


@pytest.mark.parametrize("name, rows, shards, alpha, beta", [
    ("shard", 3, 2, 1 / 2, 1 / 2),       # max_g sum_r J >= sum J / G
    ("sync", 3, 2, 1 / 2, 1 / 2),        # sum_r max_g J >= sum J / G
    ("shard", 4, 1, 1.0, 1.0),           # one shard: sum_r J
    ("attention", 3, 4, 1 / 4, 0.0),     # A only
    ("weighted", 2, 2, 1.1, 1.1),        # 1/2 + 1/2 + 0.1
])
def test_pooled_weights(name, rows, shards, alpha, beta):
    """alpha and beta: each aggregate's count of entries over the R G blocks, weighted by
    its coefficient and its A and X weights."""
    total = pooled_objective(name, rows, shards).levels[0][0][1]
    assert (total.inner, total.over, total.outer) == ("sum", "rows", "sum")
    assert total.attention == pytest.approx(alpha) and total.expert == pytest.approx(beta)


def test_pooled_objective_of_a_level_that_weighs_nothing_is_none():
    nothing = Objective("nothing", (((1.0, Aggregate("sum", "rows", "max", 0.0, 0.0)),),))
    assert pooled_objective(nothing, 3, 2) is None


@pytest.mark.parametrize("name, rows, shards, useful", [
    ("shard", 3, 2, True), ("weighted", 4, 2, True),
    ("shard", 2, 2, False),   # two rows: the model proves these itself
    ("shard", 3, 1, False),   # one shard: the pooled window is the window
    ("sync", 4, 2, False),    # a sum over rows: the model's row maxima bound it better
])
def test_pooled_useful(name, rows, shards, useful):
    assert pooled_useful(name, rows, shards) is useful


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), objective=st.sampled_from(["shard", "sync", "weighted"]))
def test_pooled_window_keeps_blocks_and_bounds_level_one(seed, objective):
    """Any layout of the grid (R = 3 rows, D = 4 slots, G = 2 shards) is, cell for cell, a
    layout of the pooled window (6 rows of 2 slots); pooled row r G + g holds block (r, g)
    and costs what the block costs; the pooled objective is at most level 1."""
    rng = np.random.default_rng(seed)
    inst = make_window(14, D=4, G=2, C=200, seed=seed % 7)
    place = default_placement(inst)
    cell_of = np.concatenate([np.arange(12), rng.integers(0, 12, 2)])  # every cell non-empty
    rng.shuffle(cell_of)
    grid = Layout(cell_of, 3, 4)
    pooled, sub = pooled_instance(inst), Layout(cell_of, 6, 2)
    assert layout_valid(packing_data(inst, place, 3), grid) == layout_valid(packing_data(pooled, place, 6), sub)
    costs, pooled_costs = layout_costs(inst, place, grid), layout_costs(pooled, place, sub)
    assert np.allclose(costs.attention.reshape(6, 1), pooled_costs.attention)
    assert np.allclose(costs.expert.reshape(6, 1), pooled_costs.expert)
    below = score(pooled, place, sub, pooled_objective(objective, 3, 2))[0]
    assert below <= score(inst, place, grid, objective)[0] * (1 + 1e-12)


@pytest.mark.parametrize("objective", ["shard", "weighted"])
def test_pooled_bound_is_below_the_optimum(objective):
    """Brute force, 7 samples in R = 3 rows of D = 2 slots, G = 2 (blocks of one cell):
    the pooled solve proves the least pooled objective (the brute-force minimum over the
    pooled window's layouts), which is at most level 1's optimum, and its bound is that
    minimum (up to the rounding margin)."""
    inst = make_window(7, D=2, G=2, C=60, seed=3)
    place = default_placement(inst)
    best = brute_force(inst, place, 3, objective)
    pooled_best = brute_force(pooled_instance(inst), place, 6, pooled_objective(objective, 3, 2))
    out = pooled_bound(inst, place, 3, objective, None, 20.0, 0)
    assert out["status"] == "optimal"
    assert out["value"] == pytest.approx(pooled_best[0], rel=1e-6)
    assert out["bound"] <= pooled_best[0] + 1e-9 and out["bound"] == pytest.approx(pooled_best[0], rel=1e-3)
    assert out["bound"] <= best[0] + 1e-9


def test_solve_packing_reports_the_pooled_bound():
    """``shard`` with R = 3, G = 2: the pooled solve runs before the model and its bound
    counts in the result's; ``pooled_bound=False`` and ``sync`` (a sum over rows) run
    none. Every plan passes the checker."""
    inst = make_window(14, D=4, G=2, C=120, seed=2)
    place = default_placement(inst)
    # 6-8 s each to prove on a quiet machine: a 60-s limit keeps "optimal" under load (20 s
    # ran out beside four helper sessions)
    res = solve_packing(inst, place, 3, objective="shard", time_limit=60)
    checked(inst, res, num_rows=3)
    pooled = res.stats["pooled"]
    assert pooled["alpha"] == pooled["beta"] == 0.5
    assert pooled["bound"] <= res.score[0] + 1e-9
    assert res.bound >= pooled["bound"] - 1e-9 and res.bound <= res.score[0] + 1e-9
    # the result names its largest bound, and the summary says it
    sources = {"analytic": res.stats["analytic_bound"], "pooled": pooled["bound"]}
    assert res.stats["bound_from"] in ("analytic", "model", "pooled")
    if res.stats["bound_from"] != "model":
        assert sources[res.stats["bound_from"]] == pytest.approx(res.bound, rel=1e-9)
    assert f"(from: {res.stats['bound_from']};" in res.summary()
    off = solve_packing(inst, place, 3, objective="shard", time_limit=60, pooled_bound=False)
    assert res.status == off.status == "optimal"
    checked(inst, off, num_rows=3)
    assert "pooled" not in off.stats
    assert "pooled" not in solve_packing(inst, place, 3, objective="sync", time_limit=2).stats   # any status
    assert res.score[0] == pytest.approx(off.score[0], rel=1e-6)


def test_pooled_bound_option_words():
    """``--option pooled_bound=no`` reaches the exact solver as text and switches it off;
    a word that is not a switch is a one-line InputError naming the option."""
    from rp_opt.errors import InputError
    from rp_opt.packing.exact import check_args
    from rp_opt.solvers import get_solver

    assert check_args(pooled_bound="no") == {"pooled_bound": False}
    inst = make_window(12, D=4, G=2, C=120, seed=4)
    res = get_solver("exact")(inst, objective="shard", time_limit=10.0, num_rows=3, pooled_bound="no")
    checked(inst, res, num_rows=3)
    assert "pooled" not in res.stats
    with pytest.raises(InputError) as err:
        get_solver("exact")(inst, objective="shard", time_limit=1.0, pooled_bound="maybe")
    assert err.value.field == "pooled_bound"
