"""Tests of the materialisation plan: relabelling, transfers, one-send-one-receive rounds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rp_opt import Cluster, CostModel, Instance, Layout, Placement, Stage, Window
from rp_opt.cost import layout_costs, rank_load, score
from rp_opt.errors import InputError
from rp_opt.materialise import (Transfer, apply_transfers, edge_colouring_rounds, migration_plan, overlap,
                                relabel)


def random_placement(rng, num_layers, num_experts, num_ranks) -> Placement:
    """Every layer a random permutation of the identity layer (balanced)."""
    base = np.arange(num_experts) // (num_experts // num_ranks)
    return Placement(np.stack([rng.permutation(base) for _ in range(num_layers)]), num_ranks)


def check_rounds(plan, num_ranks):
    """Every transfer in exactly one round; every rank sends <= 1 and receives <= 1 per round."""
    seen = sorted(i for r in plan.rounds for i in r)
    assert seen == list(range(plan.num_transfers))
    for r in plan.rounds:
        senders = [plan.transfers[i].src for i in r]
        receivers = [plan.transfers[i].dst for i in r]
        assert len(set(senders)) == len(senders) and len(set(receivers)) == len(receivers)
    if plan.num_transfers:
        deg = np.bincount([t.src for t in plan.transfers], minlength=num_ranks)
        assert plan.num_rounds == deg.max()   # Konig: exactly the max degree
    else:
        assert plan.num_rounds == 0


def test_hand_example_swap_of_two_experts():
    """Layer of 4 experts on 2 ranks: current {0,1}|{2,3}, new {0,2}|{1,3}. Relabelling
    cannot help (overlap 1 either way): experts 1 and 2 swap, in one round, 2 x bytes."""
    current = Placement(np.array([[0, 0, 1, 1]]), 2)
    new = Placement(np.array([[0, 1, 0, 1]]), 2)
    plan = migration_plan(current, new, expert_bytes=100)
    assert plan.num_transfers == 2 and plan.total_bytes == 200 and plan.num_rounds == 1
    assert plan.kept == 2
    assert sorted((t.expert, t.src, t.dst) for t in plan.transfers) == [(1, 0, 1), (2, 1, 0)]
    assert apply_transfers(current, plan.transfers).ranks.tolist() == plan.placement.ranks.tolist()


def test_relabelling_alone_needs_no_transfer():
    """A new placement that only renames ranks moves nothing."""
    current = Placement(np.array([[0, 0, 1, 1, 2, 2], [2, 1, 0, 2, 1, 0]]), 3)
    new = Placement(np.array([[2, 2, 0, 0, 1, 1], [0, 1, 2, 0, 1, 2]]), 3)
    plan = migration_plan(current, new, expert_bytes=7)
    assert plan.num_transfers == 0 and plan.num_rounds == 0 and plan.total_bytes == 0
    assert plan.placement.ranks.tolist() == current.ranks.tolist()


@pytest.mark.parametrize("seed", range(4))
def test_relabel_is_the_best_permutation(seed):
    """For P = 3, the kept count after relabelling equals the best of all 6 permutations."""
    rng = np.random.default_rng(seed)
    current = random_placement(rng, 5, 9, 3)
    new = random_placement(rng, 5, 9, 3)
    best = relabel(current, new)
    kept = (best.ranks == current.ranks).sum(axis=1)
    for l in range(5):
        brute = max(int((np.array(perm)[new.ranks[l]] == current.ranks[l]).sum())
                    for perm in itertools.permutations(range(3)))
        assert kept[l] == brute
    assert overlap(current.ranks, new.ranks, 3).sum() == 5 * 9


def test_relabelled_placement_scores_the_same():
    """Relabelling ranks within a layer changes no cost: rank loads are permuted, the
    score under every objective is identical."""
    rng = np.random.default_rng(5)
    demand = rng.integers(0, 12, size=(8, 3, 8))
    lengths = np.maximum(1, demand.sum(axis=2).max(axis=1))
    window = Window(lengths, demand, top_k=1)
    instance = Instance(window, Cluster(4, 2, 4, int(lengths.sum())), CostModel((Stage("s", 2, 1.0, 0.01),), 2.0))
    layout = Layout(rng.permutation(8) % 8, 2, 4)
    current = random_placement(rng, 3, 8, 4)
    new = random_placement(rng, 3, 8, 4)
    plan = migration_plan(current, new, expert_bytes=1)
    for objective in ("shard", "sync", "expert", "weighted"):
        assert score(instance, plan.placement, layout, objective) == score(instance, new, layout, objective)
    assert np.array_equal(np.sort(rank_load(window, plan.placement), axis=1), np.sort(rank_load(window, new), axis=1))
    a = layout_costs(instance, plan.placement, layout)
    b = layout_costs(instance, new, layout)
    assert np.array_equal(a.expert, b.expert)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([(8, 2), (8, 4), (12, 3), (16, 8), (6, 6)]), st.integers(1, 4))
def test_plan_reproduces_new_placement_and_rounds_are_valid(seed, shape, num_layers):
    rng = np.random.default_rng(seed)
    num_experts, num_ranks = shape
    current = random_placement(rng, num_layers, num_experts, num_ranks)
    new = random_placement(rng, num_layers, num_experts, num_ranks)
    plan = migration_plan(current, new, expert_bytes=3)
    assert np.array_equal(apply_transfers(current, plan.transfers).ranks, plan.placement.ranks)
    # the relabelled placement is the new one up to a rank permutation in every layer
    for l in range(num_layers):
        pairs = set(zip(new.ranks[l].tolist(), plan.placement.ranks[l].tolist()))
        assert len(pairs) == num_ranks
    # relabelling never keeps fewer experts than the new labels as given
    assert plan.kept >= int((new.ranks == current.ranks).sum())
    assert plan.total_bytes == 3 * plan.num_transfers
    check_rounds(plan, num_ranks)
    unrelabelled = migration_plan(current, new, expert_bytes=3, relabel_ranks=False)
    assert np.array_equal(apply_transfers(current, unrelabelled.transfers).ranks, new.ranks)
    check_rounds(unrelabelled, num_ranks)


def test_rounds_of_a_multigraph_with_parallel_edges():
    """Rank 0 sends 3 experts to rank 1 and rank 1 three to rank 0 (across layers), rank 2
    swaps one with rank 3: max degree 3, so 3 rounds, each with 0->1, 1->0 once."""
    src = np.array([0, 0, 0, 1, 1, 1, 2, 3])
    dst = np.array([1, 1, 1, 0, 0, 0, 3, 2])
    rounds = edge_colouring_rounds(src, dst, 4)
    assert len(rounds) == 3
    for r in rounds:
        assert len(set(src[r])) == len(r) and len(set(dst[r])) == len(r)
    assert sorted(i for r in rounds for i in r) == list(range(8))


@pytest.mark.parametrize("bad", [-1, 2.5, True, "10", None, float("inf")])
def test_expert_bytes_follows_the_shared_rules(bad):
    """A bad expert_bytes is one line in the wording of rp_opt.errors; 10.0 counts as 10."""
    current = Placement(np.array([[0, 0, 1, 1]]), 2)
    new = Placement(np.array([[0, 1, 0, 1]]), 2)
    with pytest.raises(InputError) as info:
        migration_plan(current, new, expert_bytes=bad)
    assert str(info.value) == f"expert_bytes: must be an integer >= 0, got {bad!r}"
    plan = migration_plan(current, new, expert_bytes=10.0)
    assert plan.total_bytes == 10 * plan.num_transfers > 0
    assert all(type(t.bytes) is int for t in plan.transfers)


@pytest.mark.parametrize("transfer, message", [
    ((1.5, 0, 0, 1), "transfers[0].layer: must be an integer, got 1.5"),         # was layer 1
    ((1, 0.5, 0, 1), "transfers[0].expert: must be an integer, got 0.5"),        # was expert 0
    ((1, 0, 0.9, 1), "transfers[0].src: must be an integer, got 0.9"),           # was rank 0
    ((1, 0, 0, 1.5), "transfers[0].dst: must be an integer, got 1.5"),           # was rank 1
    ((1, 0, 0, 1, 2.5), "transfers[0].bytes: must be an integer >= 0, got 2.5"),
    ((1, "0", 0, 1), "transfers[0].expert: must be an integer, got '0'"),         # was expert 0
    ((1, 0, 0, True), "transfers[0].dst: must be an integer, got True"),         # was rank 1
    ((1, 0, 0, float("nan")), "transfers[0].dst: must be an integer, got nan"),  # was a ValueError
    ((1, None, 0, 1), "transfers[0].expert: must be an integer, got None"),      # was a TypeError
    ((1, 0, 0), "transfers[0]: must be (layer, expert, src, dst[, bytes]), got (1, 0, 0)"),  # was an IndexError
    (7, "transfers[0]: must be (layer, expert, src, dst[, bytes]), got 7"),                  # was a TypeError
])
def test_apply_transfers_rejects_fractional_and_non_numeric_fields(transfer, message):
    """Every field went through int(), which cut 1.5 to 1 (and read '0' and True as
    numbers): a fractional layer moved another layer's expert without a word. Fields now
    follow rp_opt.errors.integer, naming the transfer and field."""
    current = Placement(np.array([[0, 0, 1, 1], [0, 0, 1, 1]]), 2)
    with pytest.raises(InputError) as info:
        apply_transfers(current, [(1, 2, 1, 0, 0), transfer])
    assert str(info.value) == message.replace("transfers[0]", "transfers[1]")
    with pytest.raises(InputError, match=r"^transfers: must be a sequence of transfers, got int$"):
        apply_transfers(current, 3)


def test_apply_transfers_accepts_integral_floats_only():
    """As rp_opt.errors.integer reads them, 1.0 is 1: a transfer list read back from JSON
    or held in a float array applies as the integer one does, while the same array with
    one fractional entry (which int() cut to 1) is refused, naming the entry."""
    current = Placement(np.array([[0, 0, 1, 1], [0, 0, 1, 1]]), 2)
    expected = [[0, 0, 1, 1], [1, 0, 0, 1]]
    array = np.array([[1, 0, 0, 1, 0], [1, 2, 1, 0, 0]], dtype=np.float64)
    for transfers in ([Transfer(1, 0, 0, 1, 0), Transfer(1, 2, 1, 0, 0)],
                      [(1.0, 0.0, 0.0, 1.0), [1, 2, 1, 0, 8.0]], array,
                      [(np.int32(1), np.uint8(0), np.int64(0), np.float32(1.0))] + [(1, 2, 1, 0)]):
        assert apply_transfers(current, transfers).ranks.tolist() == expected
    array[1, 0] = 1.25
    with pytest.raises(InputError, match=r"^transfers\[1\]\.layer: must be an integer, got np\.float64\(1\.25\)$"):
        apply_transfers(current, array)


def test_apply_transfers_rejects_wrong_source():
    current = Placement(np.array([[0, 0, 1, 1]]), 2)
    with pytest.raises(InputError, match="transfers"):
        apply_transfers(current, [Transfer(0, 0, 1, 0, 0)])
    with pytest.raises(InputError, match="placement"):
        apply_transfers(current, [Transfer(0, 0, 0, 1, 0)])   # unbalanced result
    with pytest.raises(InputError, match="expert_bytes"):
        migration_plan(current, current, expert_bytes=-1)
    with pytest.raises(InputError, match="current"):
        migration_plan(current, Placement(np.array([[0, 1]]), 2))


def test_apply_transfers_reads_a_torch_tensor_of_transfers():
    """int() read every field before, so a transfer list held in a torch tensor (one
    broadcast to every rank, say) applied as the list does; the integer checks refused its
    0-d tensor fields (``transfers[0].layer: must be an integer, got tensor(0)``). They
    read as their numbers again, and a fractional one is still refused."""
    import json

    torch = pytest.importorskip("torch")
    current = Placement.identity(3, 8, 4)
    rng = np.random.default_rng(1)
    new = Placement(np.stack([rng.permutation(np.repeat(np.arange(4), 2)) for _ in range(3)]), 4)
    plan = migration_plan(current, new, expert_bytes=2**40 + 1)
    listed = json.loads(json.dumps(plan.to_dict()))["transfer_list"]
    expected = plan.placement.ranks.tolist()
    tensor = torch.tensor(listed)
    for transfers in (listed, np.array(listed), tensor, tensor[:, :4], list(tensor),
                      [tuple(torch.tensor(t)) for t in listed]):
        assert apply_transfers(current, transfers).ranks.tolist() == expected
    fractional = tensor.double()
    fractional[0, 0] = 0.5
    with pytest.raises(InputError, match=r"^transfers\[0\]\.layer: must be an integer, got 0\.5$"):
        apply_transfers(current, fractional)
    with pytest.raises(InputError, match=r"^transfers: must be a sequence of transfers, got Tensor$"):
        apply_transfers(current, torch.tensor(3))
