"""Synthetic windows: determinism, shape, lengths spike, calibrated skew."""

import numpy as np
import pytest

from rp_opt.cost import rank_load
from rp_opt.solution import Placement
from rp_opt.synth import cap_counts, generate, inclusion_probs


def test_deterministic_and_valid():
    a = generate("ling-tiny-like", samples=64, dp=4, ep=4, capacity=8192, layers=3, seed=11)
    b = generate("ling-tiny-like", samples=64, dp=4, ep=4, capacity=8192, layers=3, seed=11)
    c = generate("ling-tiny-like", samples=64, dp=4, ep=4, capacity=8192, layers=3, seed=12)
    np.testing.assert_array_equal(a.window.demand, b.window.demand)
    np.testing.assert_array_equal(a.window.lengths, b.window.lengths)
    assert not np.array_equal(a.window.lengths, c.window.lengths)
    w = a.window
    assert w.demand.shape == (64, 3, 256) and w.lengths.max() <= 8192
    # at most T_i tokens per expert (a token picks k distinct experts), exactly k T_i per layer
    assert np.all(w.demand <= w.lengths[:, None, None])
    assert np.all(w.demand.sum(axis=2, dtype=np.int64) == w.top_k * w.lengths[:, None])


@pytest.mark.parametrize("skew, experts, top_k", [(1.0, 32, 8), (10.0, 32, 8), (3.0, 16, 15), (1.0, 4, 4),
                                                  (50.0, 8, 1)])
def test_full_routing_under_skew(skew, experts, top_k):
    """Every sample-layer routes exactly k T_i tokens, at most T_i per expert, also when the
    skew wants most tokens on a few experts (QA item 5: clipping used to drop up to 26 %)."""
    inst = generate("ling-tiny-like", samples=40, dp=4, ep=4, capacity=8192, layers=3, experts=experts,
                    top_k=top_k, skew=skew, seed=3)
    w = inst.window
    assert np.all(w.demand <= w.lengths[:, None, None])
    assert np.all(w.demand.sum(axis=2, dtype=np.int64) == top_k * w.lengths[:, None])
    if top_k == experts:
        np.testing.assert_array_equal(w.demand, np.broadcast_to(w.lengths[:, None, None], w.demand.shape))


def test_inclusion_probs_water_fill():
    """pi = min(1, c p) with sum k: p = (0.7, 0.2, 0.1) and k = 2 saturate the first expert
    and split the other slot 2:1; probabilities that underflowed to 0 still sum to k."""
    np.testing.assert_allclose(inclusion_probs(np.array([0.7, 0.2, 0.1]), 2), [1.0, 2 / 3, 1 / 3])
    np.testing.assert_allclose(inclusion_probs(np.array([0.25] * 4), 2), [0.5] * 4)
    pi = inclusion_probs(np.array([1.0, 0.0, 0.0, 0.0]), 3)
    assert pi[0] == 1.0 and pi.sum() == pytest.approx(3.0) and np.all(pi <= 1.0)


def test_cap_counts_keeps_totals():
    """Counts above the cap go back to experts with room: redrawn, or after zero rounds by
    the deterministic fill in decreasing weight; experts of weight 0 take the rest."""
    rng = np.random.default_rng(0)
    counts = np.array([[10, 0, 0, 0], [4, 4, 0, 0]], dtype=np.int64)
    weights = np.array([[1.0, 0.0, 0.0, 0.0], [0.1, 0.2, 0.3, 0.4]])
    out = cap_counts(counts.copy(), np.array([3, 5]), weights, rng, rounds=0)
    np.testing.assert_array_equal(out, [[3, 3, 3, 1], [4, 4, 0, 0]])
    counts = rng.multinomial(8 * 50, np.full(16, 1 / 16), size=200)
    counts[:, 0] += 300
    out = cap_counts(counts.copy(), np.full(200, 50), np.full((200, 16), 1.0), rng)
    assert np.all(out <= 50)
    np.testing.assert_array_equal(out.sum(axis=1), counts.sum(axis=1))


def test_spike_at_maximum_and_groups():
    inst = generate("ling-tiny-like", samples=512, dp=8, ep=8, capacity=16384, layers=1, seed=0)
    lengths = inst.window.lengths
    assert (lengths == 16384).mean() > 0.03  # truncated responses fill the cell


def test_identity_imbalance_span():
    """Default skew: identity max/mean per layer spans roughly 1.25 to 2.8 (E/P = 32; the
    module docstring). Before the generator kept all k T_i routed tokens, it read 1.3 to 4."""
    inst = generate("ling-flash-like", samples=512, dp=64, edp=8, ep=8, capacity=32768, seed=1)
    w = inst.window
    load = rank_load(w, Placement.identity(w.num_layers, w.num_experts, 8))
    ratio = load.max(axis=1) / load.mean(axis=1)
    assert ratio.min() < 1.45 and ratio.max() > 2.5


def test_drift_changes_routing_only():
    a = generate("ling-tiny-like", samples=32, dp=4, ep=4, capacity=8192, layers=2, seed=5)
    b = generate("ling-tiny-like", samples=32, dp=4, ep=4, capacity=8192, layers=2, seed=5, drift_steps=3)
    np.testing.assert_array_equal(a.window.lengths, b.window.lengths)
    assert not np.array_equal(a.window.demand, b.window.demand)


BAD_GENERATE = [
    (dict(experts=0), "experts: must be an integer >= 1, got 0"),
    (dict(experts=-4), "experts: must be an integer >= 1, got -4"),
    (dict(top_k=-1), "top_k: must be an integer in [1, 256] (the experts), got -1"),
    (dict(top_k=1000), "top_k: must be an integer in [1, 256] (the experts), got 1000"),
    (dict(experts=8, top_k=9), "top_k: must be an integer in [1, 8] (the experts), got 9"),
    (dict(skew=float("nan")), "skew: must be a number in [0, 1000], got nan"),
    (dict(skew=float("inf")), "skew: must be a number in [0, 1000], got inf"),
    (dict(skew=-1.0), "skew: must be a number in [0, 1000], got -1.0"),
    (dict(group_size=0), "group_size: must be an integer >= 1, got 0"),
    (dict(drift_steps=-1), "drift_steps: must be an integer >= 0, got -1"),
    (dict(seed=-1), "seed: must be an integer >= 0, got -1"),
    (dict(group_corr=-0.5), "group_corr: must be a number in [0, 1000], got -0.5"),
    (dict(topic_corr=float("nan")), "topic_corr: must be a number in [0, 1000], got nan"),
    (dict(drift=-0.1), "drift: must be a number in [0, 1000], got -0.1"),
    (dict(truncated=1.5), "truncated: must be a number in [0, 1], got 1.5"),
    (dict(samples=1.5), "samples: must be an integer >= 1, got 1.5"),
    (dict(samples=True), "samples: must be an integer >= 1, got True"),
    (dict(capacity=16), "capacity: must be an integer >= 32 (tokens), got 16"),
    (dict(median_response=0.0), "median_response: must be a finite number > 0 or None, got 0.0"),
    (dict(samples=100_000_000), "samples: N=100000000 with L=2, E=256 needs about"),
    (dict(layers=2**31 - 1), "layers: N=16 with L=2147483647, E=256 needs about"),
    (dict(experts=10**8), "experts: N=16 with L=2, E=100000000 needs about"),
]


@pytest.mark.parametrize("change, message", BAD_GENERATE,
                         ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD_GENERATE)])
def test_generate_rejects_bad_input(change, message):
    """QA items 3 and 15: one-line errors naming the parameter and value, before any work
    (a huge N is refused by its memory estimate, not by numpy's ArrayMemoryError)."""
    from rp_opt import InputError

    kwargs = {**dict(samples=16, dp=4, edp=2, ep=2, capacity=4096, layers=2), **change}
    with pytest.raises(InputError) as info:
        generate("ling-tiny-like", **kwargs)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_generate_takes_whole_floats_as_integers():
    """Counts given as integral floats (16.0, from a JSON config) are the integers they
    hold: the same window as with ints, and ints in its metadata."""
    ints = generate("ling-tiny-like", samples=16, dp=4, edp=2, ep=2, capacity=4096, layers=2, seed=3, drift_steps=1)
    floats = generate("ling-tiny-like", samples=16.0, dp=4.0, edp=2, ep=2, capacity=4096.0, layers=2.0, seed=3.0,
                      drift_steps=np.float64(1.0))
    np.testing.assert_array_equal(ints.window.lengths, floats.window.lengths)
    np.testing.assert_array_equal(ints.window.demand, floats.window.demand)
    assert floats.cluster == ints.cluster and floats.meta == ints.meta
    assert type(floats.meta["generator"]["seed"]) is int


def test_generate_default_top_k_follows_fewer_experts():
    """An E override below the spec's k caps the default k (an explicit k is checked)."""
    inst = generate("ling-tiny-like", samples=8, dp=4, ep=2, capacity=4096, layers=1, experts=4, seed=0)
    assert inst.window.top_k == 4


def test_ranks_that_do_not_divide_the_experts_fail_before_the_routing():
    """P = 3 ranks for E = 8 experts: one line naming cluster.ep before any routing is drawn
    (the progress callback never runs; 3000 samples x 40 layers drew minutes of routing
    first)."""
    from rp_opt import InputError
    from rp_opt.synth import generate

    steps = []
    with pytest.raises(InputError, match=r"^cluster\.ep: P=3 does not divide E=8$"):
        generate(samples=10, dp=2, ep=3, layers=1, experts=8, top_k=2, progress=lambda *a: steps.append(a))
    assert steps == []
