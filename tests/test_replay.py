"""Routing-replay adapters: per-sample, padded and precomputed counts -> a[N, L, E]."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rp_opt import InputError
from rp_opt import replay as rp
from rp_opt.replay import (Replay, demand_from_counts, demand_from_padded, demand_from_samples, lengths_from_routing,
                           replay)


def hand_routing():
    """2 samples, L=2 layers, E=4 experts, k=2.

    sample 0 (3 tokens): layer 0 picks {0,1},{0,2},{0,1}; layer 1 picks {3,2},{3,1},{2,3}
    -> a[0,0] = [3,2,1,0], a[0,1] = [0,1,2,3]
    sample 1 (1 token):  layer 0 {2,3}, layer 1 {0,3} -> a[1,0] = [0,0,1,1], a[1,1] = [1,0,0,1]
    """
    s0 = np.array([[[0, 1], [3, 2]], [[0, 2], [3, 1]], [[0, 1], [2, 3]]])
    s1 = np.array([[[2, 3], [0, 3]]])
    demand = np.array([[[3, 2, 1, 0], [0, 1, 2, 3]], [[0, 0, 1, 1], [1, 0, 0, 1]]])
    return [s0, s1], demand


def test_per_sample_hand():
    routing, demand = hand_routing()
    rep = demand_from_samples(routing, 4)
    assert rep.lengths.tolist() == [3, 1]
    assert rep.top_k == 2
    assert rep.demand.tolist() == demand.tolist()
    window = rep.window()
    assert window.top_k == 2 and window.demand.sum() == 2 * 2 * 4


def test_padded_hand_ignores_padding():
    """Padded positions hold garbage (-1, 99) that must be ignored."""
    routing, demand = hand_routing()
    padded = np.full((2, 3, 2, 2), 99)
    padded[0] = routing[0]
    padded[1, 1] = routing[1][0]  # the token of sample 1 sits at position 1 (left padding)
    padded[1, 0] = -1
    mask = np.array([[1, 1, 1], [0, 1, 0]])
    rep = demand_from_padded(padded, mask, 4)
    assert rep.lengths.tolist() == [3, 1]
    assert rep.demand.tolist() == demand.tolist()
    assert lengths_from_routing(padded, mask).tolist() == [3, 1]
    assert lengths_from_routing(routing).tolist() == [3, 1]


def test_counts_and_dispatch():
    routing, demand = hand_routing()
    rep = demand_from_counts(demand, top_k=2)
    assert rep.lengths.tolist() == [3, 1]
    assert replay(demand, num_experts=4, top_k=2).demand.tolist() == demand.tolist()
    assert replay(routing, num_experts=4).demand.tolist() == demand.tolist()
    with pytest.raises(InputError, match="lengths"):
        demand_from_counts(demand)


def test_a_replay_keeps_its_arrays_apart_from_the_callers():
    """Counts already of the compact dtype are not copied by the dtype change, so the
    replay once held the caller's array: changing it later changed the replay. Now every
    form gives read-only arrays of its own, and the caller's stay writable."""
    routing, demand = hand_routing()
    counts = demand.astype(np.uint16)
    rep = demand_from_counts(counts, top_k=2)
    counts[0, 0, 0] += 5
    assert rep.demand.tolist() == demand.tolist() and counts.flags.writeable
    lengths, made = np.array([3, 1]), demand.astype(np.uint16)
    direct = Replay(lengths, made, 2)
    made[:] = 0
    lengths[0] = 9
    assert direct.demand.tolist() == demand.tolist() and direct.lengths.tolist() == [3, 1]
    for r in (rep, direct, replay(routing, num_experts=4)):
        assert not r.demand.flags.writeable and not r.lengths.flags.writeable
        with pytest.raises(ValueError):
            r.demand[0, 0, 0] = 1
        # the window shares the replay's frozen arrays
        assert np.shares_memory(r.window().demand, r.demand)
    # copies and pickles stay read-only (numpy makes the arrays it rebuilds writable), and
    # compare equal by content, as windows do
    import copy
    import pickle

    for twin in (copy.copy(rep), copy.deepcopy(rep), pickle.loads(pickle.dumps(rep))):
        assert not twin.demand.flags.writeable and not twin.lengths.flags.writeable
        assert twin == rep and twin.top_k == 2
    assert Replay(rep.lengths, rep.demand, 3) != rep


@pytest.mark.parametrize("bad, message", [
    (lambda r: [r[0], np.where(r[1] == 3, 4, r[1])],
     r"^routing\[1\]: expert id 4 at token 0 layer 0 is outside \[0, 4\)$"),
    (lambda r: [np.where(r[0] == 2, -1, r[0]), r[1]],
     r"^routing\[0\]: expert id -1 at token 0 layer 1 is outside \[0, 4\)$"),
    (lambda r: [r[0], r[1][:, :1]], r"^routing\[1\]: has 1 layers, expected L=2$"),
    (lambda r: [r[0], r[1][:, :, :1]], r"^routing\[1\]: has k=1 experts per token, expected k=2$"),
    (lambda r: [r[0], r[1][:0]], r"^routing\[1\]: has no tokens"),
    (lambda r: [r[0], r[1][0]], r"^routing\[1\]: must be \[T, L, k\]"),
    (lambda r: [r[0].astype(float) + 0.5, r[1]], r"^routing\[0\]: holds a non-integer expert id$"),
    (lambda r: [[[[0, 1], [2]]], r[1]], r"^routing\[0\]: "),
    (lambda r: [np.array([[[0, 0], [1, 2]]]), r[1]],
     r"^routing\[0\]: token 0 lists expert 0 twice at layer 0 \(top-k ids must be distinct\)$"),
])
def test_per_sample_errors_name_the_sample(bad, message):
    routing, _ = hand_routing()
    with pytest.raises(InputError, match=message):
        demand_from_samples(bad(routing), 4)


def test_repeated_expert_within_a_token_is_refused():
    """A token picks k distinct experts. Sample of 2 tokens, L=1, k=2, E=4: token 0 lists
    {0, 0}, token 1 {1, 2}. The counts [2, 1, 1, 0] stay within T_i = 2 per expert and sum
    to k T_i = 4, so a check on the counts alone let the repeat through; per-sample and
    padded routing now name the token."""
    bad = np.array([[[0, 0]], [[1, 2]]])
    with pytest.raises(InputError, match=r"^routing\[0\]: token 0 lists expert 0 twice at layer 0 "):
        replay([bad], num_experts=4)
    padded = np.zeros((2, 3, 1, 2), dtype=np.int64)
    padded[:, :, :, 1] = 1
    padded[1, 1:] = bad  # sample 1, tokens 1 and 2 (token 0 is padding)
    with pytest.raises(InputError, match=r"^routing\[1\]: token 1 lists expert 0 twice at layer 0 "):
        replay(padded, mask=[[1, 1, 1], [0, 1, 1]], num_experts=4)


@pytest.mark.parametrize("k", [2, 3, 8, 9, 12])
def test_repeat_found_at_any_position_and_top_k(k):
    """Both ways of finding a repeat (column pairs for k <= 8, a sort above) see one at
    any two positions of a token's k ids, and pass k distinct ids. Sample of 3 tokens,
    L = 2, E = 16: token 2 at layer 1 repeats its id at positions a < b."""
    rng = np.random.default_rng(k)
    ids = np.argsort(rng.random((3, 2, 16)), axis=2)[:, :, :k]
    assert replay([ids], num_experts=16).lengths.tolist() == [3]
    for a, b in [(0, 1), (0, k - 1), (k - 2, k - 1)]:
        bad = ids.copy()
        bad[2, 1, b] = bad[2, 1, a]
        with pytest.raises(InputError, match=rf"^routing\[0\]: token 2 lists expert {bad[2, 1, a]} twice at layer 1 "):
            replay([bad], num_experts=16)


def test_unreadable_arrays_are_one_line():
    """What numpy cannot read is bad input naming the argument, in every form: a ragged mask
    (sample 1 has 2 entries, sample 0 has 3) raised numpy's ValueError, and a padded batch
    or counts given as a torch tensor numpy cannot take (here on the 'meta' device, as one
    on a GPU) a TypeError traceback; per-sample tensors were already named."""
    padded = np.zeros((2, 3, 1, 1), dtype=np.int64)
    with pytest.raises(InputError, match=r"^mask: cannot be read as an array \(ValueError: "):
        replay(padded, mask=[[1, 1, 1], [1, 1]], num_experts=2)
    with pytest.raises(InputError, match=r"^lengths: cannot be read as an array \(ValueError: "):
        demand_from_counts(np.ones((2, 1, 2)), lengths=[[1], [1, 2]])
    torch = pytest.importorskip("torch")
    for form in (torch.zeros((2, 3, 1, 1), dtype=torch.int64, device="meta"),   # padded
                 torch.zeros((2, 1, 2), dtype=torch.int64, device="meta")):     # counts
        with pytest.raises(InputError, match=r"^routing: cannot be read as an array \(TypeError: .*Tensor.cpu\(\)"):
            replay(form, num_experts=2, top_k=1)


@pytest.mark.parametrize("lengths, top_k, message", [
    ([2.5, 1], None, r"^lengths: sample 0 has length 2.5, not an integer$"),      # was read as 2
    ([3, float("nan")], None, r"^lengths: sample 1 has length nan, not an integer$"),  # was -2^63
    ([3, 0], None, r"^lengths: sample 1 has length 0; every sample needs >= 1 token$"),
    (["3", "1"], None, r"^lengths: must be integers, got dtype <U1$"),              # was a ValueError
])
def test_counts_lengths_are_checked(lengths, top_k, message):
    """Lengths given with counts (the hand routing's a: T = [3, 1], k = 2) are integers >= 1;
    an integral float (3.0) counts."""
    _, demand = hand_routing()
    with pytest.raises(InputError, match=message):
        demand_from_counts(demand, lengths=lengths, top_k=top_k)
    assert demand_from_counts(demand, lengths=[3.0, 1.0]).lengths.tolist() == [3, 1]


def test_counts_without_layers_experts_or_tokens():
    """Counts of shape [1, 0, 2] raised an IndexError (lengths from layer 0); [1, 1, 0] and a
    sample routing no token with top_k given came back as a replay Window then refused."""
    with pytest.raises(InputError, match=r"^counts: shape \(1, 0, 2\) has no layers or no experts$"):
        demand_from_counts(np.zeros((1, 0, 2), dtype=np.int64), top_k=1)
    with pytest.raises(InputError, match=r"^counts: shape \(1, 1, 0\) has no layers or no experts$"):
        demand_from_counts(np.zeros((1, 1, 0), dtype=np.int64), lengths=[1])
    with pytest.raises(InputError, match=r"^counts\[1\]: routes no tokens; every sample needs >= 1 token"):
        demand_from_counts(np.array([[[1, 1]], [[0, 0]]]), top_k=2)


def test_padded_errors():
    routing, _ = hand_routing()
    padded = np.zeros((2, 3, 2, 2), dtype=np.int64)
    padded[:, :, :, 1] = 1
    mask = np.ones((2, 3), dtype=bool)
    padded[1, 2, 1, 0] = 300
    with pytest.raises(InputError, match=r"^routing\[1\]: expert id 300 at token 2 layer 1 is outside \[0, 4\)$"):
        demand_from_padded(padded, mask, 4)
    mask[1, 2] = False  # the bad id is now padding
    assert demand_from_padded(padded, mask, 4).lengths.tolist() == [3, 2]
    with pytest.raises(InputError, match=r"^mask\[0\]: sample has no tokens"):
        demand_from_padded(padded, np.array([[0, 0, 0], [1, 1, 0]]), 4)
    with pytest.raises(InputError, match=r"^mask: must have shape"):
        demand_from_padded(padded, np.ones((2, 2)), 4)
    with pytest.raises(InputError, match=r"^routing: has 2 layers, expected L=3$"):
        demand_from_padded(padded, mask, 4, num_layers=3)
    with pytest.raises(InputError, match=r"^counts\[0\]: count -1"):
        demand_from_counts(np.array([[[1, -1]]]), top_k=1)
    with pytest.raises(InputError, match=r"^routing: must be per-sample arrays"):
        replay(np.zeros((2, 2)), num_experts=4)


@pytest.mark.parametrize("mask, message", [
    ([[1, 1, 1], [0, 2, 0]], r"^mask\[1\]: holds 2 at token 1; expected 0 or 1$"),        # was a token
    ([[1, 1, -1], [0, 1, 0]], r"^mask\[0\]: holds -1 at token 2; expected 0 or 1$"),       # was a token
    ([[1, 1, 1], [0, 1, 0.5]], r"^mask\[1\]: holds 0.5 at token 2; expected 0 or 1$"),     # was a token
    ([[1, 1, 1], [0, 2.0, 0]], r"^mask\[1\]: holds 2.0 at token 1; expected 0 or 1$"),     # was a token
    ([[1, 1, float("nan")], [0, 1, 0]], r"^mask\[0\]: holds nan at token 2; expected 0 or 1$"),
    ([["1", "1", "1"], ["0", "1", "0"]], r"^mask: must hold booleans or 0/1, got dtype <U1$"),  # was a ValueError
    (np.ones((2, 2)), r"^mask: must have shape \(B, S\) = \(2, 3\), got \(2, 2\)$"),          # was summed
])
def test_lengths_from_routing_checks_the_mask(mask, message):
    """lengths_from_routing read its mask with astype(bool), so a 2 (or -1, 0.5, NaN) was
    a token and a mask of another shape was summed as it came; it now rejects them as
    demand_from_padded does (one shared check), and both name the sample, the token and
    the value."""
    routing, _ = hand_routing()
    padded = np.zeros((2, 3, 2, 2), dtype=np.int64)
    padded[:, :, :, 1] = 1
    with pytest.raises(InputError, match=message):
        lengths_from_routing(padded, mask)
    with pytest.raises(InputError, match=message):
        demand_from_padded(padded, mask, 4)


def test_lengths_from_routing_accepts_booleans_and_0_1_numbers_only():
    """Booleans, integers 0/1 and floats 0.0/1.0 all read as the same mask (no mask: every
    position is a token); the same mask with a 2 in it, which counted as a token, is
    refused in every dtype."""
    padded = np.zeros((2, 3, 2, 2), dtype=np.int64)
    booleans = np.array([[True, True, True], [False, True, False]])
    for mask in (booleans, booleans.astype(np.uint8), booleans.astype(np.int64), booleans.astype(np.float32),
                 booleans.tolist()):
        assert lengths_from_routing(padded, mask).tolist() == [3, 1]
        if not isinstance(mask, list) and mask.dtype != bool:
            mask = mask.copy()
            mask[1, 2] = 2
            with pytest.raises(InputError, match=r"^mask\[1\]: holds 2(\.0)? at token 2; expected 0 or 1$"):
                lengths_from_routing(padded, mask)
    assert lengths_from_routing(padded).tolist() == [3, 3]


def test_lengths_from_routing_per_sample_input_errors():
    """A mask given with per-sample routing was ignored (replay() refuses it: a mask only
    goes with a padded batch); a sample without a token axis raised an IndexError and a
    ragged one numpy's ValueError."""
    routing, _ = hand_routing()
    with pytest.raises(InputError, match=r"^mask: is only used with a padded \[B, S, L, k\] batch$"):
        lengths_from_routing(routing, [[1, 1, 1], [1, 0, 0]])
    with pytest.raises(InputError, match=r"^routing\[1\]: must be \[T, L, k\], got shape \(\)$"):
        lengths_from_routing([routing[0], 5])
    with pytest.raises(InputError, match=r"^routing\[0\]: cannot be read as an array \(ValueError: "):
        lengths_from_routing([[[[0, 1]], [[0]]]])
    with pytest.raises(InputError,
                       match=r"^routing: lengths need per-sample arrays or a padded batch, got shape \(2, 3\)$"):
        lengths_from_routing(np.zeros((2, 3)))


@pytest.mark.parametrize("bad", [0, -1, 4.5, True, "4", None, np.int64(0)])
def test_num_experts_is_checked_by_the_shared_rules(bad):
    """Per-sample and padded routing reject a bad E with the one-line wording of
    rp_opt.errors; an integral float (4.0) counts as 4."""
    routing, demand = hand_routing()
    padded = np.stack([routing[0], np.concatenate([routing[1], routing[1], routing[1]])])
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    for read in (lambda e: demand_from_samples(routing, e), lambda e: demand_from_padded(padded, mask, e),
                 lambda e: replay(routing, num_experts=e)):
        with pytest.raises(InputError) as info:
            read(bad)
        assert str(info.value) == f"num_experts: must be an integer >= 1, got {bad!r}"
        assert read(4.0).demand.tolist() == demand.tolist()


@st.composite
def ragged_routing(draw):
    n = draw(st.integers(1, 6))
    layers = draw(st.integers(1, 3))
    experts = draw(st.integers(2, 9))
    k = draw(st.integers(1, experts))
    seed = draw(st.integers(0, 2 ** 31))
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 12, n)
    # distinct experts per token: argsort of random keys
    routing = [np.argsort(rng.random((t, layers, experts)), axis=2)[:, :, :k] for t in lengths]
    return routing, experts


@settings(max_examples=40, deadline=None)
@given(ragged_routing())
def test_forms_agree_with_a_direct_count(data):
    """Per-sample, padded (garbage in padding, random alignment) and counts all give the
    counts of a direct loop, and sum_e a[i,l,e] = k T_i. The checks on counts read with a
    k the caller did not give (a model spec's: no expert above T_i = S_i / k, at most k T_i
    ids with given lengths) pass every real top-k routing."""
    routing, experts = data
    n, layers, k = len(routing), routing[0].shape[1], routing[0].shape[2]
    direct = np.zeros((n, layers, experts), dtype=np.int64)
    for i, r in enumerate(routing):
        for t in range(r.shape[0]):
            for l in range(layers):
                for e in r[t, l]:
                    direct[i, l, e] += 1
    rep = demand_from_samples(routing, experts)
    assert np.array_equal(rep.demand, direct)
    assert np.array_equal(rep.demand.sum(axis=2), k * rep.lengths[:, None] * np.ones((1, layers)))
    width = max(r.shape[0] for r in routing) + 2
    padded = np.full((n, width, layers, k), -7)
    mask = np.zeros((n, width), dtype=np.int64)
    for i, r in enumerate(routing):
        shift = i % 3
        padded[i, shift:shift + r.shape[0]] = r
        mask[i, shift:shift + r.shape[0]] = 1
    assert np.array_equal(demand_from_padded(padded, mask, experts).demand, direct)
    assert np.array_equal(demand_from_counts(direct, top_k=k).lengths, rep.lengths)
    spec = "the model spec 'test'"
    assert np.array_equal(demand_from_counts(direct, top_k=k, top_k_from=spec).lengths, rep.lengths)
    assert np.array_equal(demand_from_counts(direct, lengths=rep.lengths, top_k=k, top_k_from=spec).lengths,
                          rep.lengths)


@pytest.mark.parametrize("slice_keys", [None, 5, 40])
def test_chunked_counting_matches(monkeypatch, slice_keys):
    """Counting in chunks of samples (production windows), and each chunk's ids in slices
    of a few tokens (one token, 3 L x 4 k = 12 ids, when the slice is smaller), gives the
    same counts."""
    rng = np.random.default_rng(1)
    routing = [np.argsort(rng.random((t, 3, 16)), axis=2)[:, :, :4] for t in rng.integers(1, 30, 25)]
    whole = demand_from_samples(routing, 16).demand
    padded = np.zeros((25, 30, 3, 4), dtype=np.int64)
    mask = np.zeros((25, 30), dtype=bool)
    for i, r in enumerate(routing):
        padded[i, :len(r)] = r
        mask[i, :len(r)] = True
    monkeypatch.setattr(rp, "_CHUNK_KEYS", 100)  # 2 samples per chunk
    if slice_keys is not None:
        monkeypatch.setattr(rp, "_SLICE_KEYS", slice_keys)
    assert np.array_equal(demand_from_samples(routing, 16).demand, whole)
    assert np.array_equal(demand_from_padded(padded, mask, 16).demand, whole)


@pytest.mark.parametrize("field", ["num_layers", "top_k"])
@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_layers_and_k_are_checked_by_the_shared_rules(field, bad):
    """L and k are integers >= 1 (or None) in every form: top_k = 0 divided by zero in
    the counts reader, 1.5 or True were compared with the shapes as they were."""
    routing, demand = hand_routing()
    padded = np.stack([routing[0], np.concatenate([routing[1], routing[1], routing[1]])])
    reads = [lambda v: demand_from_samples(routing, 4, **{field: v}),
             lambda v: demand_from_counts(demand, **{field: v, "top_k": v if field == "top_k" else 2}),
             lambda v: replay(routing, num_experts=4, **{field: v}),
             lambda v: replay(padded, mask=[[1, 1, 1], [1, 0, 0]], num_experts=4, **{field: v}),
             lambda v: replay(demand, num_experts=4, **{field: v, "top_k": v if field == "top_k" else 2})]
    if field == "num_layers":
        reads.append(lambda v: demand_from_padded(padded, [[1, 1, 1], [1, 0, 0]], 4, num_layers=v))
    for read in reads:
        with pytest.raises(InputError, match=rf"^{field}: must be an integer >= 1 or None, got "):
            read(bad)
        assert read(2.0).demand.tolist() == demand.tolist()  # L = k = 2 here; 2.0 counts as 2
    assert demand_from_counts(demand, top_k=np.int64(2)).lengths.tolist() == [3, 1]
