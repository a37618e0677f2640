"""Tests of the anchor seed (rp_opt.packing.anchors) and how the heuristic uses it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rp_opt import synth
from rp_opt.check import check, check_plan
from rp_opt.cost import rank_demand
from rp_opt.packing.heuristic import _anchors_pay, _preferred_start, certified_rows, default_placement, heuristic
from rp_opt.packing.anchors import anchor_layout, fluid_levels
from rp_opt.packing.seeds import layout_violation, seed_layouts
from rp_opt.solution import Placement
from rp_opt.window import Cluster, CostModel, Instance, Stage, Window


def window(samples=48, dp=4, edp=2, m=None, seed=1, capacity=4096):
    """A small synthetic window: L=4 layers, E=8 experts on P=4 ranks."""
    return synth.generate(model="ling-flash-like", samples=samples, dp=dp, edp=edp, ep=4, capacity=capacity,
                          layers=4, experts=8, top_k=2, seed=seed, max_samples_per_cell=m)


def test_fluid_levels_hand_example():
    """One row, one block of two cells holding anchors of work 10 and 4, room 5 each, no
    expert cost; 3 filler tokens of work 2 per token. The level cannot fall below the
    first anchor's 10, and the second cell takes all 3 tokens (4 + 6 = 10) without raising
    it: fill [0, 3], level 10, row cost 10."""
    fill, level, row_cost = fluid_levels(np.array([10.0, 4.0]), np.zeros(2), np.array([5.0, 5.0]), 2, 1,
                                         3.0, 2.0, 0.0)
    np.testing.assert_allclose(fill, [0.0, 3.0], atol=1e-9)
    np.testing.assert_allclose(level, [10.0], atol=1e-9)
    np.testing.assert_allclose(row_cost, [10.0], atol=1e-9)


def test_fluid_levels_fill_rows_in_order_and_refuse_too_little_room():
    """Two rows of one cell (work 5, room 10), 4 filler tokens of work 1: every split costs
    5 + 5 + 4, and the row tie-break puts the tokens in the first row (the window's spare
    room goes to its last rows). With 4 tokens and 3 of room: None."""
    fill, level, row_cost = fluid_levels(np.array([5.0, 5.0]), np.zeros(2), np.array([10.0, 10.0]), 1, 1,
                                         4.0, 1.0, 0.0)
    np.testing.assert_allclose(fill, [4.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(row_cost.sum(), 14.0, rtol=1e-6)
    assert fluid_levels(np.array([5.0]), np.zeros(1), np.array([3.0]), 1, 1, 4.0, 1.0, 0.0) is None


def test_fluid_levels_expert_share_balances_blocks():
    """One row of two blocks (one cell each), anchors of work 10 and 0, room 100 each, no
    anchor expert cost; 10 filler tokens of work 1 and expert cost 1 per token. Block 0
    costs (10 + f0) + f0, block 1 costs f1 + f1 (its level is its own filler work), and
    f0 + f1 = 10: both cost 15 at f0 = 2.5, the least row cost (f0 = 0 costs 20)."""
    fill, level, row_cost = fluid_levels(np.array([10.0, 0.0]), np.zeros(2), np.array([100.0, 100.0]), 1, 2,
                                         10.0, 1.0, 1.0)
    np.testing.assert_allclose(fill, [2.5, 7.5], rtol=1e-6)
    np.testing.assert_allclose(level, [12.5, 7.5], rtol=1e-6)
    np.testing.assert_allclose(row_cost, [15.0], rtol=1e-6)


def test_anchor_layout_is_valid_and_anchored_in_decreasing_length():
    """The layout has R* rows, every cell non-empty, within C; each cell's longest sample is
    its anchor, and the anchors run in decreasing length row by row, block by block."""
    inst = window(samples=64)
    rows, _, _ = certified_rows(inst, 5.0)
    lay = anchor_layout(inst, rows)
    assert lay is not None
    assert layout_violation(inst, lay, rows) is None
    longest = np.zeros(lay.num_cells, dtype=np.int64)
    np.maximum.at(longest, lay.cell_of, inst.window.lengths)
    assert np.all(np.diff(longest) <= 0)
    np.testing.assert_array_equal(longest, np.sort(inst.window.lengths)[::-1][:lay.num_cells])
    report = check_plan(inst, Placement.identity(4, 8, 4).to_list(), lay.to_rows(), "sync", num_rows=rows)
    assert report.valid, report.violations


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(samples=st.integers(16, 60), seed=st.integers(0, 10_000), edp=st.sampled_from([1, 2, 4]),
       m=st.sampled_from([None, 3, 6]))
def test_anchor_layout_keeps_every_constraint_or_declines(samples, seed, edp, m):
    """Whatever the window, the seed is None or a layout of R* rows with every cell
    non-empty, within C and within m."""
    inst = window(samples=samples, seed=seed, edp=edp, m=m)
    rows = max(1, -(-int(inst.window.lengths.sum()) // (inst.cluster.capacity * inst.cluster.dp)))
    if rows * inst.cluster.dp > samples:
        return
    lay = anchor_layout(inst, rows)
    if lay is not None:
        assert layout_violation(inst, lay, rows) is None


def hand_window(lengths, capacity=100):
    """One slot, one shard, two ranks of two experts, one layer; sample i sends all its
    tokens to expert i mod 4 (top-1); attention 1 per token plus 0.01 per T^2."""
    lengths = np.asarray(lengths, dtype=np.int64)
    demand = np.zeros((lengths.size, 1, 4), dtype=np.int64)
    demand[np.arange(lengths.size), 0, np.arange(lengths.size) % 4] = lengths
    cost = CostModel((Stage("attention", 1, 1.0, 0.01),), 0.5)
    return Instance(Window(lengths, demand, 1), Cluster(1, 1, 2, capacity), cost)


def test_anchor_layout_declines_a_window_without_spare_room():
    """Two rows of one cell, capacity 100. Lengths 90, 90, 10, 9: R* = 2 (90+10, 90+9), but
    one token of spare room is less than a quarter of a typical filler per cell
    (4 * 1 < 2 * 9.5): None. Lengths 60, 60, 10, 9: room enough, a valid layout with the
    fillers beside the anchors."""
    assert anchor_layout(hand_window([90, 90, 10, 9]), 2) is None
    inst = hand_window([60, 60, 10, 9])
    lay = anchor_layout(inst, 2)
    assert lay is not None and layout_violation(inst, lay, 2) is None
    assert lay.cell_of[0] != lay.cell_of[1]


def test_seed_rule_anchors_is_a_valid_seed():
    """``seed_layouts(rules=("anchors",))`` returns the anchor layout, valid."""
    inst = window(samples=64)
    rows, witness, _ = certified_rows(inst, 5.0)
    placement = default_placement(inst.window, inst.cluster.ep)[0]
    seeds = seed_layouts(inst, rows, rank_demand(inst.window, placement), witness=witness, rules=("anchors",))
    assert list(seeds) == ["anchors"]
    np.testing.assert_array_equal(seeds["anchors"].cell_of, anchor_layout(inst, rows).cell_of)


@pytest.mark.parametrize("objective", ["sync", "shard"])
def test_heuristic_probes_the_anchor_seed_for_sums_of_row_maxima(objective):
    """For ``sync`` (a sum over rows of maxima) the heuristic weighs the greedy seed's gap
    to the bound (``stats["anchor_probe"]``) and adds the ``anchors`` seed exactly when
    attention outweighs the expert excess there; for ``shard`` there is no probe and no
    anchor seed. The plan passes the checker either way."""
    inst = window(samples=64)
    result = heuristic(inst, objective=objective, time_limit=3.0, temperatures=2, search_evaluations=20,
                              refine=False)
    probe = result.stats.get("anchor_probe")
    if objective == "sync":
        assert set(probe) == {"attention", "expert"}
        assert ("anchors" in result.stats["seeds"]) is _anchors_pay(probe)
    else:
        assert probe is None and "anchors" not in result.stats["seeds"]
    report = check(inst, result.plan)
    assert report.valid, report.violations
    np.testing.assert_allclose(report.score, result.score, rtol=1e-9)


def test_anchors_pay_when_attention_outweighs_the_expert_excess():
    """The probe's rule on the two production windows' greedy splits (docs/benchmarks.md):
    attention 0.40 % and expert 0.06 % builds the seed, 0.38 % and 4.29 % does not."""
    assert _anchors_pay({"attention": 0.0040, "expert": 0.0006})
    assert not _anchors_pay({"attention": 0.0038, "expert": 0.0429})


def test_preferred_start_takes_the_anchor_seed_only_within_the_margin():
    """Energies 100 (greedy) and 100.05 (anchors): within 0.1 % the anchor seed starts; with
    a margin of 0.01 % the best seed does; a warm start scoring best is never replaced."""
    starts = [np.array([0, 1]), np.array([1, 0])]
    names = ["greedy", "anchors"]
    layout, energy, name = _preferred_start(names, starts, [100.0, 100.05], starts[0], 100.0, 1e-3)
    assert name == "anchors" and energy == 100.05 and np.array_equal(layout, starts[1])
    layout, energy, name = _preferred_start(names, starts, [100.0, 100.05], starts[0], 100.0, 1e-4)
    assert name == "greedy" and energy == 100.0 and np.array_equal(layout, starts[0])
    # a warm start (the previous step's plan) that scores best stays the start
    layout, energy, name = _preferred_start(["warm_start", "anchors"], starts, [100.0, 100.05], starts[0],
                                                   100.0, 1e-3)
    assert name == "warm_start" and np.array_equal(layout, starts[0])
