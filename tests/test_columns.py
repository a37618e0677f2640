"""Tests of the pooled bound by column generation (rp_opt.packing.exact.columns): block
costs are the layout's, the converged bound is the set-partitioning LP over every block
(enumerated here), it never exceeds the brute-force pooled optimum, and a time limit or a
Ctrl-C returns a valid bound."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.optimize import linprog

from rp_opt.cost import layout_costs, score
from rp_opt.packing.exact import default_placement, solve_packing
from rp_opt.packing.exact.columns import block_column_bound, block_cost
from rp_opt.packing.exact.common import packing_data
from rp_opt.packing.exact.pooled import pooled_instance, pooled_objective

from test_exact import brute_force, checked, make_window


def greedy_layout(inst, num_rows):
    """A valid layout from the package's ffd baseline (the start of the generation)."""
    from rp_opt.packing.baseline import pack

    return pack(inst, "ffd", num_rows)[0]


def every_block_lp(data, alpha, beta):
    """The set-partitioning LP with every block as a column: each sample in a cell of
    the block or out, cells non-empty and within capacity (brute force over 3^N or
    (k+1)^N choices), solved by HiGHS."""
    n, k = data.num_samples, data.per_shard
    blocks = data.num_rows * data.num_shards
    cols, costs = [], []
    for choice in itertools.product(range(k + 1), repeat=n):
        choice = np.array(choice)
        cells = [np.flatnonzero(choice == t + 1) for t in range(k)]
        if any(c.size == 0 or data.lengths[c].sum() > data.capacity for c in cells):
            continue
        if data.max_per_cell is not None and any(c.size > data.max_per_cell for c in cells):
            continue
        col = np.zeros(n + 1)
        col[np.concatenate(cells)] = 1.0
        col[n] = 1.0
        cols.append(col)
        costs.append(block_cost(data, cells, alpha, beta))
    rhs = np.ones(n + 1)
    rhs[n] = blocks
    lp = linprog(np.array(costs), A_eq=np.array(cols).T, b_eq=rhs, bounds=(0, None), method="highs")
    assert lp.status == 0
    return float(lp.fun)


def test_block_cost_is_the_layouts():
    """Each block (r, g) of a layout costs alpha A[r,g] + beta X[r,g] of
    :func:`rp_opt.cost.layout_costs`."""
    inst = make_window(12, D=4, G=2, C=120, seed=5)
    place = default_placement(inst)
    layout = greedy_layout(inst, 3)
    data = packing_data(inst, place, 3)
    costs = layout_costs(inst, place, layout)
    for r in range(3):
        for g in range(2):
            cells = [np.flatnonzero(layout.cell_of == r * 4 + g * 2 + t) for t in range(2)]
            assert block_cost(data, cells, 0.3, 0.7) == pytest.approx(
                0.3 * costs.attention[r, g] + 0.7 * costs.expert[r, g], rel=1e-12)


@pytest.mark.parametrize("seed, num_rows, slots, shards", [(0, 3, 2, 1), (1, 1, 4, 2), (2, 3, 2, 2)])
def test_converged_bound_is_the_lp_over_every_block(seed, num_rows, slots, shards):
    """6 samples, blocks of one or two cells: the generation converges to the LP with
    every block as a column (up to the roundings it subtracts), which is at most the
    least pooled objective over all layouts and level 1's optimum (brute force, where
    the cells are at most 6)."""
    inst = make_window(6, D=slots, G=shards, C=60, seed=seed)
    place = default_placement(inst)
    data = packing_data(inst, place, num_rows)
    objective = "shard"
    pooled = pooled_objective(objective, num_rows, shards)
    alpha, beta = pooled.levels[0][0][1].attention, pooled.levels[0][0][1].expert
    out = block_column_bound(data, alpha, beta, greedy_layout(inst, num_rows), 30.0)
    assert out["status"] == "converged" and out["method"] == "columns"
    full = every_block_lp(data, alpha, beta)
    assert out["bound"] <= full + 1e-9
    assert out["bound"] == pytest.approx(full, rel=1e-6)
    if num_rows * slots > 6:
        return
    blocks = num_rows * shards
    pooled_best = brute_force(pooled_instance(inst), place, blocks, pooled)[0]
    assert full <= pooled_best + 1e-9
    assert out["bound"] <= brute_force(inst, place, num_rows, objective)[0] + 1e-9


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), weights=st.sampled_from([(1.0, 1.0), (0.5, 0.5), (1.0, 0.0), (0.0, 2.0)]))
def test_bound_never_exceeds_the_pooled_optimum(seed, weights):
    """Random 6-sample windows, 3 blocks of 2 cells (one shard), any weights of A and X:
    the bound, converged or stopped after a quarter second, is at most the brute-force
    least alpha sum A + beta sum X."""
    inst = make_window(6, D=2, G=1, C=70, seed=seed)
    place = default_placement(inst)
    data = packing_data(inst, place, 3)
    alpha, beta = weights
    from rp_opt.objectives import Aggregate, Objective

    total = Objective("pooled-test", (((1.0, Aggregate("sum", "rows", "sum", alpha, beta)),),))
    best = brute_force(inst, place, 3, total)[0]
    for seconds in (0.25, 20.0):
        out = block_column_bound(data, alpha, beta, greedy_layout(inst, 3), seconds, seed=seed)
        assert out["bound"] is None or out["bound"] <= best + 1e-9


def test_time_limit_and_ctrl_c_return_a_valid_bound(ctrl_c):
    """24 samples, 6 blocks of 2 cells: a 1-s limit and a Ctrl-C after 1 s each end the
    generation within about a second more, with a bound at most the pooled value of the
    start (which the LP's optimum is below) or None, and the stop said."""
    inst = make_window(24, D=4, G=2, L=4, E=8, P=4, C=120, seed=6)
    place = default_placement(inst)
    data = packing_data(inst, place, 3)
    start = greedy_layout(inst, 3)
    start_value = score(inst, place, start, pooled_objective("shard", 3, 2))[0]
    t = time.perf_counter()
    out = block_column_bound(data, 0.5, 0.5, start, 1.0)
    assert time.perf_counter() - t < 3.0
    assert out["status"] in ("time limit", "converged")
    assert out["bound"] is None or out["bound"] <= start_value + 1e-9
    ctrl_c(1.0)
    t = time.perf_counter()
    out = block_column_bound(data, 0.5, 0.5, start, 60.0)
    assert time.perf_counter() - t < 3.0
    assert out["status"] == "interrupted" and out["interrupted"] is True
    assert out["bound"] is None or out["bound"] <= start_value + 1e-9


def test_ctrl_c_in_the_master_lp_keeps_the_bound(monkeypatch):
    """A Ctrl-C that lands in the master LP (not in a pricing solve) ends the generation
    the same way: status ``interrupted``, the Lagrangian bound of the pricing solves so
    far kept (the whole-suite run once had it escape as a KeyboardInterrupt)."""
    from rp_opt.packing.exact import columns

    inst = make_window(24, D=4, G=2, L=4, E=8, P=4, C=120, seed=6)
    place = default_placement(inst)
    data = packing_data(inst, place, 3)
    start = greedy_layout(inst, 3)
    start_value = score(inst, place, start, pooled_objective("shard", 3, 2))[0]
    calls = []

    def master(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return linprog(*args, **kwargs)

    monkeypatch.setattr(columns, "linprog", master)
    out = block_column_bound(data, 0.5, 0.5, start, 60.0)
    assert len(calls) == 3 and out["status"] == "interrupted" and out["interrupted"] is True
    assert out["iterations"] == 2 and out["bound"] is not None and out["bound"] <= start_value + 1e-9


def test_solve_packing_takes_the_pooled_bound_by_columns():
    """``shard`` with R = 3, G = 2 and at most 48 samples: the pooled bound comes from
    the generation; it bounds the score, the result's bound is at least it, and the
    plan passes the checker."""
    inst = make_window(14, D=4, G=2, C=120, seed=2)
    place = default_placement(inst)
    res = solve_packing(inst, place, 3, objective="shard", time_limit=20)
    checked(inst, res, num_rows=3)
    pooled = res.stats["pooled"]
    assert pooled["method"] == "columns" and pooled["iterations"] >= 1 and pooled["columns"] >= 6
    assert pooled["bound"] <= res.score[0] + 1e-9
    assert res.bound >= pooled["bound"] - 1e-9
