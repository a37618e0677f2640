"""Synthetic windows: determinism, shape, lengths spike, calibrated skew."""

import numpy as np

from rp_opt.cost import rank_load
from rp_opt.solution import Placement
from rp_opt.synth import generate


def test_deterministic_and_valid():
    a = generate("ling-tiny-like", samples=64, dp=4, ep=4, capacity=8192, layers=3, seed=11)
    b = generate("ling-tiny-like", samples=64, dp=4, ep=4, capacity=8192, layers=3, seed=11)
    c = generate("ling-tiny-like", samples=64, dp=4, ep=4, capacity=8192, layers=3, seed=12)
    np.testing.assert_array_equal(a.window.demand, b.window.demand)
    np.testing.assert_array_equal(a.window.lengths, b.window.lengths)
    assert not np.array_equal(a.window.lengths, c.window.lengths)
    w = a.window
    assert w.demand.shape == (64, 3, 256) and w.lengths.max() <= 8192
    # at most T_i tokens per expert, at most k T_i per layer
    assert np.all(w.demand <= w.lengths[:, None, None])
    assert np.all(w.demand.sum(axis=2) <= w.top_k * w.lengths[:, None])


def test_spike_at_maximum_and_groups():
    inst = generate("ling-tiny-like", samples=512, dp=8, ep=8, capacity=16384, layers=1, seed=0)
    lengths = inst.window.lengths
    assert (lengths == 16384).mean() > 0.03  # truncated responses fill the cell


def test_identity_imbalance_span():
    """Default skew: identity max/mean per layer spans roughly 1.3 to 4 (E/P = 32)."""
    inst = generate("ling-flash-like", samples=512, dp=64, edp=8, ep=8, capacity=32768, seed=1)
    w = inst.window
    load = rank_load(w, Placement.identity(w.num_layers, w.num_experts, 8))
    ratio = load.max(axis=1) / load.mean(axis=1)
    assert ratio.min() < 1.45 and ratio.max() > 2.8


def test_drift_changes_routing_only():
    a = generate("ling-tiny-like", samples=32, dp=4, ep=4, capacity=8192, layers=2, seed=5)
    b = generate("ling-tiny-like", samples=32, dp=4, ep=4, capacity=8192, layers=2, seed=5, drift_steps=3)
    np.testing.assert_array_equal(a.window.lengths, b.window.lengths)
    assert not np.array_equal(a.window.demand, b.window.demand)
