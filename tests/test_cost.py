"""Cost model (rp_opt.cost) against hand computation and invariants."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rp_opt import InputError, Layout, Placement, check_plan, cost_bounds, get_objective, layout_costs, score
from rp_opt.cost import rank_demand, rank_load
from rp_opt.packing.baseline import pack

from conftest import random_instance

HAND_PLACEMENT = Placement(np.array([[0, 0, 1, 1], [0, 1, 0, 1]]), 2)
# row 0: slot 0 {0}, slot 1 {1}; row 1: slot 0 {2}, slot 1 {3}
HAND_LAYOUT = Layout(np.array([0, 1, 2, 3]), 2, 2)


def test_hand_computed_costs(hand):
    """A[0] = 1*max(3,1) + 2*max(9,1) = 21; A[1] = 1*2 + 2*4 = 10.
    Row 0 (samples 0, 1): layer 0 ranks (3, 1), layer 1 ranks (3, 1): X = 0.5 (3 + 3) = 3.
    Row 1 (samples 2, 3): layer 0 ranks (2, 2), layer 1 ranks (0, 4): X = 0.5 (2 + 4) = 3."""
    costs = layout_costs(hand, HAND_PLACEMENT, HAND_LAYOUT)
    np.testing.assert_allclose(costs.attention, [[21.0], [10.0]])
    np.testing.assert_allclose(costs.expert, [[3.0], [3.0]])
    np.testing.assert_allclose(costs.joint, [[24.0], [13.0]])
    np.testing.assert_allclose(costs.rank_load[0, 0], [[3, 1], [3, 1]])
    np.testing.assert_allclose(costs.rank_load[1, 0], [[2, 2], [0, 4]])
    assert score(hand, HAND_PLACEMENT, HAND_LAYOUT, "sync") == (37.0, 37.0, 24.0)
    assert score(hand, HAND_PLACEMENT, HAND_LAYOUT, "shard") == (37.0, 37.0, 24.0)
    report = check_plan(hand, HAND_PLACEMENT.to_list(), HAND_LAYOUT.to_rows(), "sync")
    assert report.valid and report.score == (37.0, 37.0, 24.0)


def test_rank_demand_and_load(hand):
    rd = rank_demand(hand.window, HAND_PLACEMENT)
    assert rd.shape == (4, 2, 2)
    np.testing.assert_array_equal(rd[0], [[3, 0], [2, 1]])
    np.testing.assert_array_equal(rank_load(hand.window, HAND_PLACEMENT), rd.sum(axis=0))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), perm_seed=st.integers(0, 10_000), objective=st.sampled_from(["shard", "sync"]))
def test_row_permutation_and_rank_relabelling_invariance(seed, perm_seed, objective):
    instance = random_instance(seed, n=14, dp=4, edp=2, ep=2, capacity=80)
    window = instance.window
    placement = Placement.identity(window.num_layers, window.num_experts, 2)
    layout, _ = pack(instance, "ffd")
    base = score(instance, placement, layout, objective)
    rng = np.random.default_rng(perm_seed)
    permuted = layout.permute_rows(rng.permutation(layout.num_rows))
    np.testing.assert_allclose(score(instance, placement, permuted, objective), base)
    # relabel ranks consistently within every layer
    relabel = np.stack([rng.permutation(2) for _ in range(window.num_layers)])
    relabelled = Placement(np.take_along_axis(relabel, placement.ranks, axis=1), 2)
    np.testing.assert_allclose(score(instance, relabelled, layout, objective), base)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), objective=st.sampled_from(["shard", "sync", "weighted", "attention"]))
def test_vectorised_cost_equals_checker(seed, objective):
    instance = random_instance(seed, n=16, dp=4, edp=2, ep=4, capacity=64)
    w = instance.window
    rng = np.random.default_rng(seed)
    placement = Placement(np.stack([rng.permutation(np.arange(w.num_experts) % 4) for _ in range(w.num_layers)]), 4)
    layout, _ = pack(instance, "ffd")
    report = check_plan(instance, placement.to_list(), layout.to_rows(), objective)
    assert report.valid, report.violations
    np.testing.assert_allclose(report.score, score(instance, placement, layout, objective), rtol=1e-12)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_block_first_and_sample_first_rank_loads_agree(seed):
    """W from block totals (no rank demand given) equals W from per-sample rank demand."""
    instance = random_instance(seed, n=18, dp=4, edp=2, ep=4, capacity=64)
    w = instance.window
    rng = np.random.default_rng(seed)
    placement = Placement(np.stack([rng.permutation(np.arange(w.num_experts) % 4) for _ in range(w.num_layers)]), 4)
    layout, _ = pack(instance, "ffd")
    direct = layout_costs(instance, placement, layout)
    via_samples = layout_costs(instance, placement, layout, rank_demand(w, placement))
    np.testing.assert_array_equal(direct.rank_load, via_samples.rank_load)
    np.testing.assert_allclose(direct.expert, via_samples.expert)


def test_score_checks_the_plan_against_the_cluster(hand):
    """The hand window runs on P = 2 ranks: a placement on P = 1 (4 experts on one rank)
    was scored as if the cluster had one rank; a placement as nested lists, or rows
    instead of a Layout, ended in an AttributeError. Each is one line naming the field."""
    one_rank = Placement(np.zeros((2, 4), dtype=int), 1)
    with pytest.raises(InputError, match=r"^placement: has P=1 ranks, the cluster has P=2$"):
        score(hand, one_rank, HAND_LAYOUT, "sync")
    with pytest.raises(InputError, match=r"^placement: has P=1 ranks, the cluster has P=2$"):
        cost_bounds(hand, 2, one_rank)
    with pytest.raises(InputError, match=r"^placement: has \(L, E\) = \(1, 4\), the window has \(2, 4\)$"):
        score(hand, Placement([[0, 0, 1, 1]], 2), HAND_LAYOUT)
    with pytest.raises(InputError, match=r"^placement: must be a Placement, got list$"):
        score(hand, HAND_PLACEMENT.to_list(), HAND_LAYOUT)
    with pytest.raises(InputError, match=r"^layout: must be a Layout, got list$"):
        score(hand, HAND_PLACEMENT, HAND_LAYOUT.to_rows())
    with pytest.raises(InputError, match=r"^instance: must be an Instance, got Window$"):
        layout_costs(hand.window, HAND_PLACEMENT, HAND_LAYOUT)
    assert score(hand, HAND_PLACEMENT, HAND_LAYOUT, get_objective("sync")) == (37.0, 37.0, 24.0)
