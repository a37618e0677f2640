"""Lower bounds (rp_opt.bounds) against brute force, hand examples and scores."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rp_opt import InputError, Placement, cost_bounds, layout_costs, score
from rp_opt.cost import rank_demand
from rp_opt.packing.baseline import pack
from rp_opt.bounds import strong_bounds
from rp_opt.objectives import get_objective

from conftest import random_instance


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


def test_fractional_knapsack_uses_only_items_that_fit():
    """Items of 1 and 5 tokens worth 1 and 25 (value per token 1 and 5, rising with the
    weight as attention with Q = T^2 does): a room of 2 holds only the small item, worth 1
    (the LP over every item would say 2 * 5 = 10); a room of 6 holds both, 26; a room of 7
    both and nothing more; a room of 0.5 holds nothing. With the value per token falling as weight grows, every item is
    taken (room 2: 1 + 1/5 of the other, 1 + 0.2)."""
    from rp_opt.bounds import _fractional_knapsack

    got = _fractional_knapsack(np.array([1, 5]), np.array([1.0, 25.0]), np.array([2.0, 6.0, 7.0, 0.0, 0.5]))
    np.testing.assert_allclose(got, [1.0, 26.0, 26.0, 0.0, 0.0])
    got = _fractional_knapsack(np.array([1, 5]), np.array([3.0, 1.0]), np.array([2.0]))
    np.testing.assert_allclose(got, [3.0 + 0.2])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), squared=st.booleans())
def test_fractional_knapsack_above_every_subset(seed, squared):
    """The fill is an upper bound: never below the best subset of items that fits, by
    brute force over every subset (values T^2-like, so the fitting-items path runs, or
    arbitrary, so the all-items path runs); and never above the LP over every item."""
    from itertools import product

    from rp_opt.bounds import _fractional_knapsack

    rng = np.random.default_rng(seed)
    weights = rng.integers(1, 40, rng.integers(1, 8))
    values = weights * (weights + 3.0) if squared else rng.random(weights.size) * 50
    rooms = np.concatenate([rng.integers(0, 100, 6).astype(float), rng.random(3) * 60])
    got = _fractional_knapsack(weights, values, rooms)
    pick = np.array(list(product([0, 1], repeat=weights.size)))
    load, worth = pick @ weights, pick @ values
    best = np.array([worth[load <= room].max() for room in rooms])
    assert np.all(got >= best - 1e-9 * (1 + best))
    ratio = np.argsort(-values / weights, kind="stable")
    cum_w, cum_v = np.cumsum(weights[ratio]), np.cumsum(values[ratio])
    lp = np.array([np.interp(room, np.r_[0, cum_w], np.r_[0, cum_v]) for room in rooms])
    assert np.all(got <= lp + 1e-9 * (1 + lp))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), shape=st.sampled_from([(4, 1, 1, 6), (4, 2, 1, 6), (2, 1, 2, 6), (4, 1, 2, 5),
                                                           (4, 2, 2, 5), (2, 1, 3, 6)]))
def test_attention_waste_below_brute_force(seed, shape):
    """attention_waste never exceeds the least waste of any layout (tiny windows with big
    samples, arbitrary Q_i, so the bound is tested beyond Q = T^2)."""
    from rp_opt.bounds import attention_waste

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
    from rp_opt.bounds import attention_waste

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
    from rp_opt.objectives import Aggregate, Objective

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


def _instance(lengths, *, dp, edp, gamma=0.3, seed=0, q=None, experts=4, ranks=2, layers=2):
    """Tiny window with these lengths (C = 100), skewed routing of 2 tokens per token (a
    full replay), the linear + softmax stages of tests/test_exact.py; ``q`` replaces Q_i."""
    from rp_opt.synth import cap_counts
    from rp_opt.window import Cluster, CostModel, Instance, Stage, Window

    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths)
    demand = np.zeros((lengths.size, layers, experts), dtype=np.int64)
    for l in range(layers):
        probs = rng.dirichlet(np.full(experts, 0.5), lengths.size)
        counts = np.array([rng.multinomial(2 * t, p) for t, p in zip(lengths, probs)])
        demand[:, l] = cap_counts(counts, lengths, probs, rng)
    window = Window(lengths, demand, 2, attn_work=q)
    cost = CostModel((Stage("linear", 2, 1.0, 0.0), Stage("softmax", 1, 0.5, 0.02)), gamma)
    return Instance(window, Cluster(dp, edp, ranks, 100), cost)


def _sync_optimum(instance, rows, assignments=None, placement=None):
    """Least sum_r max_g J over every layout of ``rows`` rows (``placement``, default the
    identity): every assignment of samples to cells (or the given ``assignments`` [M, N]),
    scored at once with the formulas of MODEL.md (tiny windows only)."""
    w, cl, cost = instance.window, instance.cluster, instance.cost
    cells, k = rows * cl.dp, cl.dp // cl.edp
    if assignments is None:
        # a one-hot of cells^N x N x cells floats: 8^8 was 8.6 GB (2026-12-06)
        assert cells ** w.num_samples <= 300_000, "too many layouts to enumerate"
        assignments = np.stack(np.meshgrid(*[np.arange(cells)] * w.num_samples, indexing="ij"),
                               axis=-1).reshape(-1, w.num_samples)
    onehot = np.zeros((assignments.shape[0], w.num_samples, cells))
    np.put_along_axis(onehot, assignments[:, :, None], 1.0, axis=2)
    tokens = np.einsum("mnc,n->mc", onehot, w.lengths.astype(float))
    ok = (onehot.sum(axis=1).min(axis=1) >= 1) & (tokens.max(axis=1) <= cl.capacity)
    if not ok.any():
        return np.inf
    onehot, tokens = onehot[ok], tokens[ok]
    work = np.einsum("mnc,n->mc", onehot, w.attn_work)
    stage = cost.alpha[:, None, None] * tokens + cost.beta[:, None, None] * work        # [S, M, cells]
    attention = np.tensordot(cost.layers, stage.reshape(len(cost.stages), -1, rows, cl.edp, k).max(axis=4), 1)
    placement = Placement.identity(w.num_layers, w.num_experts, cl.ep) if placement is None else placement
    demand = rank_demand(w, placement)                                                  # [N, L, P]
    loads = np.einsum("mnc,nlp->mclp", onehot, demand).reshape(onehot.shape[0], rows, cl.edp, k, *demand.shape[1:])
    expert = cost.gamma * loads.sum(axis=3).max(axis=4).sum(axis=3)
    return float((attention + expert).max(axis=2).sum(axis=1).min())


def test_full_row_charge_hand_example():
    """C = 100, D = 2 slots in G = 2 shards (one cell per block), 3 rows, gamma = 0; three
    full-length samples (attention 2*100 + 0.5*100 + 0.02*100^2 = 450) and three of 10
    tokens (27 each). Some row holds one full-length sample beside a cell without one,
    which holds at most all 30 short tokens (81): that row's maximum exceeds its mean by
    (450 - 81) / 2. Bound (1431 + 369) / 2 = 900; the averages alone give 1431 / 2; the
    best layout ({F, F}, {F, s}, {s, s}) scores 450 + 450 + 27 = 927. With one sample per
    cell (N = R D) the row maxima bound (the sorted pairs: 450 + 450 + 27) meets it."""
    from rp_opt.bounds import full_row_charge

    inst = _instance([100, 100, 100, 10, 10, 10], dp=2, edp=2, gamma=0.0)
    att = np.array([450.0] * 3 + [27.0] * 3)
    routed = inst.window.demand.sum(axis=(1, 2))
    assert full_row_charge(att, inst.window.lengths, routed, 100, 1, 2, 0.0) == pytest.approx(369.0)
    bounds = cost_bounds(inst, 3)
    assert bounds.row_charge == pytest.approx(369.0) and bounds.row_attention == pytest.approx(927.0)
    assert bounds._rows(get_objective("sync").levels[0][0][1]) == pytest.approx(900.0)
    assert bounds.objective("sync")[0] == pytest.approx(927.0)
    assert bounds.objective("shard")[0] == pytest.approx(1431 / 2)   # no row maxima in shard's primary
    assert _sync_optimum(inst, 3) == pytest.approx(927.0)


def test_full_row_charge_needs_one_routing_rate():
    """E(g) - E(g_f) <= rho s holds only when every sample routes the same number of
    tokens per token: a partial replay (one sample routing fewer) turns the charge off."""
    from rp_opt.bounds import full_row_charge

    inst = _instance([100, 100, 100, 10, 10, 10], dp=2, edp=2)
    att = np.array([450.0] * 3 + [27.0] * 3)
    routed = inst.window.demand.sum(axis=(1, 2))
    assert full_row_charge(att, inst.window.lengths, routed, 100, 1, 2, 0.15) > 0
    routed[4] -= 1
    assert full_row_charge(att, inst.window.lengths, routed, 100, 1, 2, 0.15) == 0.0


def test_row_excess_adds_the_charge_and_the_excess_outside_hidden_blocks():
    """C = 100, D = 2 slots in G = 2 shards (k = 1), 2 rows: F (100 tokens, attention 450),
    A (60 tokens, 222), B and D (30 tokens, 93 each). The full-length row's other cell owes
    at least 450 minus its ceiling, the least A plus 40 tokens of the 30-token samples at
    93/30 a token: 222 + 124 = 346, so the charge is 104. With excess floors c = [10, 0,
    20, 20] (sum 50) that cell is the one hidden block, at most 100 tokens and never F: the
    most floor it can take is B and D (60 tokens, 40); F's 10 is owed beside the charge:
    114, where the max of the two gave 104. With F's floor -30 instead (sum 10), the hidden
    cell could take 40 of floors: the other blocks keep 0, not -30, and the bound stays at
    the charge, 104. Without a full-length sample the bound is the floors' sum."""
    from rp_opt.bounds import full_row_charge, row_excess_bound

    att, lengths = np.array([450.0, 222.0, 93.0, 93.0]), np.array([100, 60, 30, 30])
    floors = np.array([10.0, 0.0, 20.0, 20.0])
    assert full_row_charge(att, lengths, 2 * lengths, 100, 1, 2, 0.1) == pytest.approx(104.0)
    assert row_excess_bound(att, lengths, 2 * lengths, 100, 1, 2, 0.1, floors, 2) == pytest.approx(114.0)
    mixed = np.array([-30.0, 0.0, 20.0, 20.0])
    assert row_excess_bound(att, lengths, 2 * lengths, 100, 1, 2, 0.1, mixed, 2) == pytest.approx(104.0)
    assert row_excess_bound(att, lengths, 2 * lengths, 100, 1, 2, 0.1, 10 * floors, 2) == pytest.approx(500.0)
    shorter = np.array([90, 60, 30, 30])
    assert row_excess_bound(att, shorter, 2 * shorter, 100, 1, 2, 0.1, floors, 2) == pytest.approx(50.0)


def test_row_excess_hides_only_blocks_without_a_full_length_sample():
    """C = 100, D = 4 slots in G = 2 shards (k = 2), one row: F (100 tokens) and A, B, E (90
    tokens each, floors c = 30 each). F's block holds F and one of them; only the other
    block (two cells, 200 tokens) hides excess: the most floor it can hold is 200 tokens at
    30/90 a token, 200/3, so 90 - 200/3 is owed beside the charge. (Counting F's block
    as hidden too, 400 tokens would hold all 90.)"""
    from rp_opt.bounds import full_row_charge, row_excess_bound

    att, lengths = np.array([450.0, 400.0, 400.0, 400.0]), np.array([100, 90, 90, 90])
    floors = np.array([0.0, 30.0, 30.0, 30.0])
    charge = full_row_charge(att, lengths, 2 * lengths, 100, 2, 2, 0.1, num_rows=1)
    assert charge > 0
    bound = row_excess_bound(att, lengths, 2 * lengths, 100, 2, 2, 0.1, floors, 1)
    assert bound == pytest.approx(charge + 90.0 - 200.0 / 3.0)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), shape=st.sampled_from([(4, 2, 1, 6), (4, 1, 1, 6), (2, 2, 2, 6), (2, 1, 2, 6),
                                                           (2, 2, 3, 6), (4, 2, 2, 8), (6, 3, 1, 7), (6, 2, 1, 7),
                                                           (6, 3, 1, 6), (6, 2, 1, 6)]),
       arbitrary_q=st.booleans(), gamma=st.sampled_from([0.0, 0.05, 0.3, 3.0, 10.0, 30.0]))
def test_full_row_bound_below_brute_force(seed, shape, arbitrary_q, gamma):
    """The sync bound with the full-row charge (and, for the identity placement, the row
    excess) never exceeds the best layout (every layout enumerated): windows with one to
    three full-length samples, samples just above and below C/2, Q_i = T_i^2 or arbitrary,
    G = 1, 2 and 3, one to three cells per block, expert costs small to dominant."""
    dp, edp, rows, n = shape
    rng = np.random.default_rng(seed)
    heavy = rng.integers(1, min(3, n - 1) + 1)
    lengths = np.concatenate([np.full(heavy, 100), np.where(rng.random(n - heavy) < 0.4,
                                                            rng.integers(45, 100, n - heavy),
                                                            rng.integers(1, 45, n - heavy))])
    if lengths.sum() > rows * dp * 100:
        return
    q = None
    if arbitrary_q:
        q = np.where(rng.random(n) < 0.5, lengths.astype(float) ** 2, rng.random(n) * 1e4)
    inst = _instance(lengths, dp=dp, edp=edp, gamma=gamma, seed=seed, q=q)
    # 8 samples in 8 cells: the 8! permutations, not the 8^8 assignments (8.6 GB of one-hot)
    assignments = _permutations(n) if n == 8 and rows * dp == 8 else None
    best = _sync_optimum(inst, rows, assignments)
    if not np.isfinite(best):
        return
    for bounds in (cost_bounds(inst, rows), cost_bounds(inst, rows, Placement.identity(2, 4, 2))):
        assert bounds.objective("sync")[0] <= best * (1 + 1e-9) + 1e-9, (bounds.row_charge, best)
    # for every placement (with the row excess of the blocks that cannot hide): below the
    # best layout of every placement (each layer's 4 experts on 2 ranks: 3 ways)
    every = strong_bounds(inst, rows)
    if every.row_excess > max(every.row_charge, every.expert_total - every.token_expert):
        best_every = min(_sync_optimum(inst, rows, assignments, placement=placement)
                         for placement in _placements(2, 4, 2))
        assert every.objective("sync")[0] <= best_every * (1 + 1e-9) + 1e-9, (every.row_excess, best_every)
    else:
        assert every.objective("sync")[0] <= best * (1 + 1e-9) + 1e-9


def _placements(layers, experts, ranks):
    """Every placement of ``experts`` on 2 ranks per layer up to relabelling (tiny only)."""
    import itertools

    assert ranks == 2
    halves = [np.array([0 if e in first else 1 for e in range(experts)])
              for first in itertools.combinations(range(experts), experts // 2) if 0 in first]
    for chosen in itertools.product(halves, repeat=layers):
        yield Placement(np.stack(chosen), ranks)


def _permutations(n):
    """Every permutation of n samples over n cells, [n!, n] (the layouts when N = R D)."""
    import itertools

    return np.array(list(itertools.permutations(range(n))))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_cost_bounds_needs_a_row_count(bad, hand):
    """Bounds for 0 or 1.5 rows were returned as if they meant something; num_rows follows
    the shared rule (an integer >= 1; 2.0 counts as 2)."""
    with pytest.raises(InputError) as info:
        cost_bounds(hand, bad)
    assert str(info.value) == f"num_rows: must be an integer >= 1, got {bad!r}"
    assert cost_bounds(hand, 2.0).objective("sync") == cost_bounds(hand, 2).objective("sync")


def test_row_maxima_attention_hand_example():
    """Attentions [9, 1, 5, 3, 7, 2], R = 2 rows of D = 2: the longest (9) is in some row,
    the other row holds at least 2 samples, the least of its maxima is b_2 = 2: 9 + 2 = 11
    (rows {9, 7, 5, 3}, {1, 2}). With N = R D = 6 on D = 3 rows, the sorted triples:
    9 + 3 = 12 ({9, 7, 5}, {3, 2, 1}). Too few samples for the cells: no bound (0)."""
    from rp_opt.bounds import row_maxima_attention

    att = np.array([9.0, 1, 5, 3, 7, 2])
    assert row_maxima_attention(att, 2, 2) == 11.0
    assert row_maxima_attention(att, 2, 3) == 12.0
    assert row_maxima_attention(att, 1, 6) == 9.0
    assert row_maxima_attention(att, 4, 2) == 0.0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), shape=st.sampled_from([(2, 1, 2, 6), (2, 2, 2, 6), (2, 1, 3, 6), (3, 3, 2, 6),
                                                           (2, 2, 3, 7), (4, 2, 1, 6), (4, 2, 2, 8)]))
def test_row_maxima_attention_below_brute_force(seed, shape):
    """Without expert cost (gamma = 0) the sync optimum is the least sum_r max_g A over
    every layout: the row maxima bound never exceeds it, and equals it when every cell
    holds one sample and capacity does not bind (N = R D, C = 100, lengths <= 100)."""
    dp, edp, rows, n = shape
    rng = np.random.default_rng(seed)
    inst = _instance(rng.integers(1, 101, n), dp=dp, edp=edp, gamma=0.0, seed=seed)
    best = _sync_optimum(inst, rows, _permutations(n) if n == rows * dp and n <= 8 else None)
    if not np.isfinite(best):
        return
    bounds = cost_bounds(inst, rows)
    assert bounds.row_attention <= best * (1 + 1e-9) + 1e-9
    assert bounds.objective("sync")[0] <= best * (1 + 1e-9) + 1e-9
    if n == rows * dp:
        assert bounds.row_attention == pytest.approx(best, rel=1e-9)
