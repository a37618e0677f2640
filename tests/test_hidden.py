"""rp_opt.placement.hidden.hidden_excess against brute force over every hidden set and placement."""

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rp_opt.placement import placement_lower_bound
from rp_opt.placement.hidden import hidden_excess


@lru_cache(maxsize=None)
def _partitions(num_experts: int, num_ranks: int) -> np.ndarray:
    """[G, E, P] one-hot: every split of the E experts into P unlabelled groups of E/P
    (the group of the lowest unplaced expert is chosen next, so each split appears once)."""
    from itertools import combinations

    per_rank = num_experts // num_ranks
    found = []

    def grow(left, groups):
        if not left:
            found.append(groups)
            return
        first, rest = left[0], left[1:]
        for others in combinations(rest, per_rank - 1):
            grow(tuple(e for e in rest if e not in others), groups + ((first,) + others,))

    grow(tuple(range(num_experts)), ())
    onehot = np.zeros((len(found), num_experts, num_ranks))
    for g, groups in enumerate(found):
        for p, members in enumerate(groups):
            onehot[g, list(members), p] = 1.0
    return onehot


def _brute_force(load, demand, lengths, num_ranks, capacities):
    """[M]: min over every H of the samples with T_H <= capacities[m] of
    sum_l (min over balanced placements of max_p L'[l,p] - L'[l].sum() / P), L' = load - d_H."""
    n = lengths.size
    num_layers, num_experts = load.shape
    pick = ((np.arange(2 ** n)[:, None] >> np.arange(n)[None, :]) & 1).astype(np.float64)     # [S, n]
    tokens = pick @ lengths
    rest = load[None].astype(np.float64) - np.einsum("sn,nle->sle", pick, demand.astype(np.float64))
    onehot = _partitions(num_experts, num_ranks)
    value = np.zeros(pick.shape[0])
    for layer in range(num_layers):
        ranks = np.einsum("se,gep->sgp", rest[:, layer], onehot)
        value += ranks.max(axis=2).min(axis=1) - rest[:, layer].sum(axis=1) / num_ranks
    return np.array([value[tokens <= cap].min() for cap in capacities])


def _window(seed, num_layers, num_experts, exact, dead, partial, extra, floats):
    """A random tiny window: n samples of 1..20 tokens, each token routed to 2 distinct
    experts drawn from a skewed popularity (an ``exact`` expert every token visits, a
    ``dead`` expert none visits; ``partial``: some samples route fewer tokens), loads the
    samples' demand plus ``extra`` integer load of samples that stay (``floats``: as floats,
    the extra with fractions)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8))
    lengths = rng.integers(1, 21, n) if rng.random() < 0.7 else rng.integers(1, 6, n)
    demand = np.zeros((n, num_layers, num_experts), dtype=np.int64)
    for layer in range(num_layers):
        popularity = rng.dirichlet(np.full(num_experts, rng.choice([0.2, 0.5, 2.0])))
        forced = int(rng.integers(num_experts)) if exact else None
        if dead:
            popularity[(int(rng.integers(num_experts)) if forced is None else (forced + 1) % num_experts)] = 0.0
        if forced is not None:
            popularity[forced] = 0.0
        popularity = popularity + 1e-9 * (popularity > 0)
        popularity /= popularity.sum()
        for i, t in enumerate(lengths):
            for _ in range(t):
                if forced is not None:
                    demand[i, layer, forced] += 1
                    demand[i, layer, rng.choice(num_experts, p=popularity)] += 1
                else:
                    demand[i, layer, rng.choice(num_experts, 2, replace=False, p=popularity)] += 1
    if partial:
        for i in np.flatnonzero(rng.random(n) < 0.5):
            layer = int(rng.integers(num_layers))
            drop = int(rng.integers(0, demand[i, layer].sum() + 1))
            for _ in range(drop):
                e = rng.choice(np.flatnonzero(demand[i, layer]))
                demand[i, layer, e] -= 1
    load = demand.sum(axis=0)
    if extra == "some":
        load = load + rng.integers(0, 30, load.shape) * (rng.random(load.shape) < 0.5)
    elif extra == "heavy":
        load = load + rng.integers(0, 200, load.shape)
    if floats:
        load = load.astype(np.float64) + (rng.random(load.shape) * 3 if extra != "none" else 0.0)
    total = int(lengths.sum())
    if rng.random() < 0.3:
        capacities = np.arange(total + 2)
    else:
        capacities = np.unique(np.concatenate([[0], rng.integers(1, total + 2, int(rng.integers(1, 8)))]))
    return load, demand, lengths, capacities


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), num_layers=st.sampled_from([1, 2]),
       shape=st.sampled_from([(4, 2), (4, 4), (4, 1), (6, 2), (6, 3), (6, 6), (8, 2), (8, 4), (8, 8)]),
       exact=st.booleans(), dead=st.booleans(), partial=st.booleans(),
       extra=st.sampled_from(["none", "some", "heavy"]), floats=st.booleans(),
       bucket_ratio=st.sampled_from([1.1, 1.0001, 2.0]))
def test_hidden_excess_below_brute_force(seed, num_layers, shape, exact, dead, partial, extra, floats, bucket_ratio):
    """For every capacity the bound is at most the least excess of any hidden set that fits,
    under the best balanced placement of each layer (every subset and every split into P
    groups of E/P enumerated); it is >= 0 and non-increasing in the capacity."""
    num_experts, num_ranks = shape
    load, demand, lengths, capacities = _window(seed, num_layers, num_experts, exact, dead, partial, extra, floats)
    bound = hidden_excess(load, demand, lengths, num_ranks, capacities, bucket_ratio=bucket_ratio)
    best = _brute_force(load, demand, lengths, num_ranks, capacities)
    assert bound.shape == capacities.shape
    assert np.all(bound >= 0)
    assert np.all(np.diff(bound) <= 0), bound
    tolerance = 1e-6 * (1.0 + float(np.abs(load).sum()))
    assert np.all(bound <= best + tolerance), (bound, best, load.tolist(), demand.tolist(), lengths.tolist(),
                                               capacities.tolist())


def test_hand_example_exact_expert():
    """One layer, E = 4 experts on P = 2 ranks (2 each), two samples of T = 10 and 4 tokens,
    every token visiting expert 0 and one other: a = [[10, 6, 4, 0], [4, 0, 0, 4]], and 6
    tokens of samples that stay on expert 3: load = [14, 6, 4, 10] (34, mean 17).
    Nothing hidden: the best placement {0, 2} / {1, 3} has 18 on its busiest rank and the
    pigeonhole bound (heaviest plus lightest) is 14 + 4 = 18: excess 18 - 17 = 1, the bound
    at capacity 0. Hiding the 4-token sample (capacity 4) leaves [10, 6, 4, 6] (mean 13):
    {0, 2} / {1, 3} = 14 / 12, excess 1; hiding the 10-token one (capacity 10) leaves
    [4, 0, 0, 10] (mean 7): 10 / 4, excess 3 -- so at capacity 10 the least is still 1, and
    hiding both (capacity 14) leaves [0, 0, 0, 6], excess 3."""
    load = np.array([[14, 6, 4, 10]])
    demand = np.array([[[10, 6, 4, 0]], [[4, 0, 0, 4]]])
    lengths = np.array([10, 4])
    capacities = np.array([0, 4, 10, 14])
    bound = hidden_excess(load, demand, lengths, 2, capacities)
    pigeonhole = placement_lower_bound(load, 2)[0]
    assert pigeonhole == 18
    assert bound[0] == pytest.approx(pigeonhole - 34 / 2, abs=1e-6)
    np.testing.assert_allclose(_brute_force(load, demand, lengths, 2, capacities), [1.0, 1.0, 1.0, 1.0])
    assert np.all(bound <= 1.0 + 1e-6)
    assert np.all(np.diff(bound) <= 0) and np.all(bound >= 0)


def test_no_samples_gives_the_value_at_zero():
    """n = 0: nothing can leave, so every capacity gets sum_l (pigeonhole - mean): here
    layer 0 [9, 1, 1, 1] on 2 ranks: 9 + 1 - 6 = 4; layer 1 [3, 3, 3, 3]: 6 - 6 = 0."""
    load = np.array([[9, 1, 1, 1], [3, 3, 3, 3]])
    got = hidden_excess(load, np.zeros((0, 2, 4), dtype=np.int64), np.zeros(0, dtype=np.int64), 2,
                        np.array([0, 5, 100]))
    np.testing.assert_allclose(got, [4.0, 4.0, 4.0])
    as_float = hidden_excess(load.astype(np.float64), np.zeros((0, 2, 4)), np.zeros(0), 2, np.array([0, 5]))
    np.testing.assert_allclose(as_float, [4.0, 4.0], rtol=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_float_and_integer_loads_agree(seed):
    """The same integer loads as int64 and as float64 give (nearly) the same bound, both
    below brute force."""
    load, demand, lengths, capacities = _window(seed, 2, 8, seed % 2 == 0, seed % 3 == 0, False, "some", False)
    as_int = hidden_excess(load, demand, lengths, 4, capacities)
    as_float = hidden_excess(load.astype(np.float64), demand, lengths, 4, capacities)
    np.testing.assert_allclose(as_int, as_float, rtol=1e-6, atol=1e-6)
    best = _brute_force(load, demand, lengths, 4, capacities)
    assert np.all(as_int <= best + 1e-6) and np.all(as_float <= best + 1e-6)


def test_capacity_below_every_sample():
    """Samples of 5 and 7 tokens with capacities 0, 3 and 4: no sample fits, the brute force
    is the value at 0 at each, and the bound stays at or below it (capacity 12 lets both go)."""
    load = np.array([[20, 3, 9, 0, 6, 2]])
    demand = np.array([[[5, 2, 3, 0, 0, 0]], [[7, 0, 4, 0, 3, 0]]])
    lengths = np.array([5, 7])
    capacities = np.array([0, 3, 4, 12])
    bound = hidden_excess(load, demand, lengths, 3, capacities)
    best = _brute_force(load, demand, lengths, 3, capacities)
    assert best[0] == best[1] == best[2]
    assert np.all(bound <= best + 1e-6)
    assert np.all(np.diff(bound) <= 0) and np.all(bound >= 0)


def test_samples_select_without_a_copy_of_the_window():
    """``samples`` (a mask or indices into the whole window's demand and lengths) gives the
    bound of those samples alone, as their own arrays do."""
    rng = np.random.default_rng(7)
    demand = rng.integers(0, 4, size=(9, 2, 6))
    lengths = demand.sum(axis=2).max(axis=1) + 1
    load = demand.sum(axis=0) + rng.integers(0, 5, size=(2, 6))
    mask = np.array([True, False, True, True, False, True, False, True, True])
    caps = np.array([0.0, 3.0, 10.0, 40.0])
    alone = hidden_excess(load, demand[mask], lengths[mask], 2, caps)
    np.testing.assert_array_equal(hidden_excess(load, demand, lengths, 2, caps, samples=mask), alone)
    np.testing.assert_array_equal(hidden_excess(load, demand, lengths, 2, caps, samples=np.flatnonzero(mask)), alone)


@pytest.mark.parametrize("seed", range(4))
def test_threads_give_the_same_bound(seed):
    """Two or three threads sharing the layers give exactly the one-thread bound (each
    layer's row is its own; the sum over layers is taken in a fixed order)."""
    load, demand, lengths, capacities = _window(seed, 2, 8, seed % 2 == 0, seed % 3 == 0, True, "some", False)
    # six layers: the window's two, repeated with their experts rolled
    load = np.concatenate([np.roll(load, k, axis=1) for k in range(3)])
    demand = np.concatenate([np.roll(demand, k, axis=2) for k in range(3)], axis=1)
    one = hidden_excess(load, demand, lengths, 4, capacities)
    for threads in (2, 3):
        np.testing.assert_array_equal(hidden_excess(load, demand, lengths, 4, capacities, threads=threads), one)
