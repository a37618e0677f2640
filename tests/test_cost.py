"""Cost model, objectives and bounds (rp_opt.cost) against hand computation and invariants."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rp_opt import InputError, Layout, Placement, check_plan, cost_bounds, get_objective, layout_costs, score
from rp_opt.cost import Costs, rank_demand, rank_load
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


def test_model_example_shard_vs_sync():
    """MODEL.md: J_A = [[100,0],[0,100]] vs J_B = [[60,60],[60,60]] (rows x shards)."""
    zero = np.zeros((2, 2))
    a = Costs(np.array([[100.0, 0.0], [0.0, 100.0]]), zero, np.zeros((2, 2, 1, 1)))
    b = Costs(np.full((2, 2), 60.0), zero, np.zeros((2, 2, 1, 1)))
    shard, sync = get_objective("shard"), get_objective("sync")
    assert shard.evaluate(a)[0] == 100 and sync.evaluate(a)[0] == 200
    assert shard.evaluate(b)[0] == 120 and sync.evaluate(b)[0] == 120
    assert shard.evaluate(a) < shard.evaluate(b)
    assert sync.evaluate(b) < sync.evaluate(a)


def test_unknown_objective_names_known_ones():
    from rp_opt import InputError
    with pytest.raises(InputError, match="unknown objective 'fast'.*shard.*sync"):
        get_objective("fast")


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


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), objective=st.sampled_from(["shard", "sync", "weighted"]))
def test_bounds_below_scores(seed, objective):
    """Analytic bounds (placement-free and for the plan's placement) never exceed a plan's score."""
    instance = random_instance(seed, n=16, dp=4, edp=2, ep=2, capacity=64)
    w = instance.window
    placement = Placement.identity(w.num_layers, w.num_experts, 2)
    for rule in ("ffd", "kk"):
        layout, _ = pack(instance, rule)
        value = score(instance, placement, layout, objective)
        for bounds in (cost_bounds(instance, layout.num_rows), cost_bounds(instance, layout.num_rows, placement)):
            for b, v in zip(bounds.objective(objective), value):
                assert b <= v * (1 + 1e-12)


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


def _min_attention_waste(work, lengths, capacity, dp, edp, rows):
    """Brute force: min over every layout (all cells non-empty, capacity kept) of
    sum_b sum_{d in b} (max_{d' in b} c_s(d') - c_s(d)), per stage; None if no layout."""
    n = lengths.size
    cells = rows * dp
    assign = np.stack(np.meshgrid(*[np.arange(cells)] * n, indexing="ij"), axis=-1).reshape(-1, n)
    onehot = np.zeros((assign.shape[0], n, cells))
    np.put_along_axis(onehot, assign[:, :, None], 1.0, axis=2)
    tokens = np.einsum("mnc,n->mc", onehot, lengths)
    ok = (onehot.sum(axis=1).min(axis=1) >= 1) & (tokens.max(axis=1) <= capacity)
    if not ok.any():
        return None
    cost = np.einsum("mnc,sn->smc", onehot[ok], work).reshape(work.shape[0], -1, rows * edp, dp // edp)
    return (cost.max(axis=3, keepdims=True) - cost).sum(axis=(2, 3)).min(axis=1)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), shape=st.sampled_from([(4, 1, 1, 6), (4, 2, 1, 6), (2, 1, 2, 6), (4, 1, 2, 5),
                                                           (4, 2, 2, 5), (2, 1, 3, 6)]))
def test_attention_waste_below_brute_force(seed, shape):
    """attention_waste never exceeds the least waste of any layout (tiny windows with big
    samples, arbitrary Q_i, so the bound is tested beyond Q = T^2)."""
    from rp_opt.cost import attention_waste

    dp, edp, rows, n = shape
    rng = np.random.default_rng(seed)
    capacity = 100
    lengths = np.where(rng.random(n) < 0.5, rng.integers(51, 101, n), rng.integers(1, 51, n))
    q = np.where(rng.random(n) < 0.5, lengths.astype(float) ** 2, rng.random(n) * 1e4)
    work = np.stack([0.7 * lengths, 0.1 * lengths + 0.01 * q, 0.05 * q])
    bound = attention_waste(work, lengths, capacity, dp // edp, rows * edp)
    best = _min_attention_waste(work, lengths, capacity, dp, edp, rows)
    if best is None:
        return
    assert np.all(bound >= 0)
    assert np.all(bound <= best * (1 + 1e-9) + 1e-9), (bound, best)


def test_attention_waste_hand_example():
    """C = 100, 2 rows of 4 cells, one stage whose cost is Q = T^2: five full samples (100
    tokens, cost 10000) and ten 10-token samples (cost 100 each). No two full samples share
    a cell, so two rows hold them and 2 * 4 - 5 = 3 cells of their rows hold none; such a
    cell costs at most the fractional fill of 100 tokens by 10-token samples, 10 * 100 =
    1000. Waste >= 3 (10000 - 1000) = 27000; the best layout ({4 full} / {full, cells of 4,
    3, 3 small samples}) wastes 3 * 10000 - 1000 = 29000."""
    from rp_opt.cost import attention_waste

    lengths = np.array([100] * 5 + [10] * 10)
    q = lengths.astype(float) ** 2
    bound = attention_waste(q[None, :], lengths, 100, 4, 2)
    assert bound[0] == pytest.approx(3 * (10000 - 1000))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000),
       agg=st.sampled_from([("max", "shards", "sum"), ("sum", "rows", "max"), ("max", "rows", "sum"),
                            ("sum", "shards", "max"), ("max", "rows", "max"), ("sum", "rows", "sum")]))
def test_aggregate_bounds_and_gap_split(seed, agg):
    """Every aggregate's bound is below its value, including those that average over rows
    (sum_g max_r J >= total / R; total / G overstated them on these R = 3 > G = 2 windows in
    60 of 100 cases), and the gap split adds up: attention + expert + spread - bound_slack
    = value - bound."""
    from rp_opt.cost import Aggregate, Objective

    instance = random_instance(seed, n=16, dp=2, edp=2, ep=2, capacity=64)
    w = instance.window
    placement = Placement.identity(w.num_layers, w.num_experts, 2)
    layout, _ = pack(instance, "ffd")
    objective = Objective("custom", (((1.0, Aggregate(*agg, 1.0, 0.5)),),))
    costs = layout_costs(instance, placement, layout)
    value = objective.evaluate(costs)[0]
    for bounds in (cost_bounds(instance, layout.num_rows), cost_bounds(instance, layout.num_rows, placement)):
        bound = bounds.objective(objective)[0]
        assert bound <= value * (1 + 1e-12)
        split = bounds.gap_split(costs, objective)
        assert min(split["attention"], split["expert"], split["spread"], split["bound_slack"]) >= -1e-9 * value
        assert (split["attention"] + split["expert"] + split["spread"] - split["bound_slack"]
                == pytest.approx(value - bound, rel=1e-9, abs=1e-9))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), -0.5, True, "1"])
def test_objective_weights_must_be_finite_and_non_negative(bad):
    """NaN passed the old `< 0` checks (and inf made every score inf or NaN); the weights
    of A and X and the level coefficients are read by rp_opt.errors.number."""
    from rp_opt.cost import Aggregate, Objective, objective_names, register_objective

    with pytest.raises(InputError, match=r"^objective\.attention: must be a finite number >= 0 \(weight of A\)"):
        Aggregate("sum", "rows", "max", bad, 1.0)
    with pytest.raises(InputError, match=r"^objective\.expert: must be a finite number >= 0 \(weight of X\)"):
        Aggregate("sum", "rows", "max", 1.0, bad)
    good = Aggregate("sum", "rows", "max")
    with pytest.raises(InputError, match=r"^objective\.levels\[0\]\[1\]: must be a finite number >= 0 "
                                         r"\(coefficient in objective 'bad'\)"):
        Objective("bad", (((1.0, good), (bad, good)),))
    with pytest.raises(InputError, match=r"^objective: must be an Objective"):
        register_objective("bad")
    assert "bad" not in objective_names()


def test_valid_objective_weights_still_score(hand):
    from rp_opt.cost import Aggregate, Objective

    agg = Aggregate("max", "shards", "sum", np.float32(1), 0)
    assert (agg.attention, agg.expert) == (1.0, 0.0) and type(agg.expert) is float
    objective = Objective("custom-a", (((2, agg), (0.0, Aggregate("sum", "rows", "sum"))),))
    # sum_r max_g A = 21 + 10 (test_hand_computed_costs), twice
    assert score(hand, HAND_PLACEMENT, HAND_LAYOUT, objective) == (62.0,)
