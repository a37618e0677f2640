"""Review of the trainer-facing API (planner, materialise, export, replay): hostile and edge inputs."""

from __future__ import annotations

import numpy as np
import pytest

from rp_opt import Cluster, CostModel, InputError, Placement, Planner, Stage, check
from rp_opt.export import physical_maps
from rp_opt.materialise import edge_colouring_rounds, migration_plan
from rp_opt.replay import demand_from_samples

COST = CostModel((Stage("attn", 2, 1.0, 0.01),), gamma=0.5)
CLUSTER = Cluster(dp=2, edp=1, ep=2, capacity=64)


def routing_of(seed: int, n: int = 12, layers: int = 2, experts: int = 8, k: int = 2):
    rng = np.random.default_rng(seed)
    popularity = np.log(rng.dirichlet(np.full(experts, 0.4), size=layers))
    return [np.argsort(-(popularity[None] + rng.gumbel(size=(t, layers, experts))), axis=2)[:, :, :k]
            for t in rng.integers(4, 30, n)]


def test_placement_in_force_on_other_ranks_is_refused_at_configuration():
    """A current placement over P=4 ranks on an EP=2 cluster: with keep_placement the
    heuristic returned a plan whose placement uses ranks 2 and 3 (the checker rejects it);
    without it the error came only after the whole solve. A bare array raised
    AttributeError. Now one line at configuration (and in reset)."""
    on_four = Placement(np.tile(np.arange(8) // 2, (2, 1)), 4)
    with pytest.raises(InputError, match=r"^current_placement: has P=4 ranks, the cluster has P=2$"):
        Planner(CLUSTER, COST, mode="heuristic", keep_placement=True, current_placement=on_four)
    with pytest.raises(InputError, match=r"^current_placement: must be a Placement or None, got ndarray$"):
        Planner(CLUSTER, COST, mode="lpt-ffd", current_placement=np.tile(np.arange(8) // 4, (2, 1)))
    planner = Planner(CLUSTER, COST, mode="lpt-ffd")
    with pytest.raises(InputError, match=r"^placement: has P=4 ranks, the cluster has P=2$"):
        planner.reset(on_four)
    with pytest.raises(InputError, match=r"^placement: must be a Placement or None, got list$"):
        planner.reset([[0, 0, 1, 1]])
    assert planner.current_placement is None
    good = Placement(np.tile([1, 0, 1, 0, 1, 0, 1, 0], (2, 1)), 2)
    planner.reset(good)
    step = planner.plan(routing=routing_of(0), num_experts=8)
    assert check(step.instance, step.plan).valid


@pytest.mark.parametrize("key", ["time_limit", "seed", "objective", "warm_start"])
def test_solver_options_that_clash_with_planner_arguments(key):
    """solver_options={'time_limit': 3} raised TypeError ("got multiple values for keyword
    argument") at the first step; now one line at configuration."""
    with pytest.raises(InputError, match=rf"^solver_options: {key!r} is set by the Planner"):
        Planner(CLUSTER, COST, mode="heuristic", solver_options={key: 1})


def test_solver_options_must_be_a_dict():
    with pytest.raises(InputError, match=r"^solver_options: must be a dict of solver options, got str$"):
        Planner(CLUSTER, COST, mode="heuristic", solver_options="refine")


def test_padded_batch_top_k_disagreeing_with_its_ids():
    """A padded batch takes k from its ids; the planner wrote the caller's top_k into the
    window instead (top_k=4 for k=2 ids passed silently). Now a mismatch is one line."""
    routing = routing_of(1, n=4)
    width = max(len(r) for r in routing)
    padded = np.zeros((4, width, 2, 2), dtype=np.int64)
    mask = np.zeros((4, width), dtype=bool)
    for i, r in enumerate(routing):
        padded[i, :len(r)], mask[i, :len(r)] = r, True
    planner = Planner(CLUSTER, COST, mode="lpt-ffd")
    with pytest.raises(InputError, match=r"^top_k: is 4, the routing's ids have k=2$"):
        planner.instance(routing=padded, mask=mask, num_experts=8, top_k=4)
    assert planner.instance(routing=padded, mask=mask, num_experts=8, top_k=2).window.top_k == 2


def test_replay_object_needs_no_num_experts():
    """A Replay carries its counts [N, L, E]; without a model spec the planner still asked
    for num_experts."""
    replayed = demand_from_samples(routing_of(2), 8)
    planner = Planner(CLUSTER, COST, mode="lpt-ffd")
    step = planner.plan(routing=replayed)
    assert step.instance.window.num_experts == 8 and check(step.instance, step.plan).valid


def test_previous_phy2log_with_fractional_ids_is_refused():
    """0.7 was truncated to expert 0 and accepted as a permutation."""
    placement = Placement(np.array([[0, 0, 1, 1]]), 2)
    with pytest.raises(InputError, match=r"^previous_phy2log: must hold integer expert ids"):
        physical_maps(placement, np.array([[0.7, 1, 2, 3]]))
    with pytest.raises(InputError, match=r"^previous_phy2log: must hold integer expert ids"):
        physical_maps(Placement(np.array([[0, 1]]), 2), np.array([[True, False]]))
    phy2log, _ = physical_maps(placement, np.array([[1.0, 0.0, 2.0, 3.0]]))
    assert phy2log.tolist() == [[1, 0, 2, 3]]


def test_physical_maps_of_a_placement_without_layers():
    """Placement.identity(0, E, P) is a valid placement; physical_maps raised ValueError
    (reshape of an empty array with -1)."""
    empty = Placement.identity(0, 4, 2)
    for previous in (None, np.zeros((0, 4), dtype=np.int64)):
        phy2log, log2phy = physical_maps(empty, previous)
        assert phy2log.shape == log2phy.shape == (0, 4)
    assert migration_plan(empty, empty).num_transfers == 0


def test_self_transfer_is_not_dropped_silently():
    """An edge p -> p was taken for a padding edge: it appeared in no round."""
    with pytest.raises(InputError, match=r"^transfers: "):
        edge_colouring_rounds(np.array([0, 1, 1]), np.array([1, 0, 1]), 2)


@pytest.mark.parametrize("solver", ["heuristic", "exact"])
def test_solvers_check_a_given_placement(solver):
    """A bare array, a placement for another P or another (L, E): one line naming the
    field, before any solving (it failed inside the solver: an AttributeError)."""
    from conftest import random_instance
    from rp_opt.solvers import get_solver

    inst = random_instance(0, n=12, layers=2, experts=8, dp=2, edp=1, ep=2, capacity=64)
    run = get_solver(solver)
    for bad, needle in ((np.zeros((2, 8), dtype=int), "must be a Placement"),
                        (Placement.identity(2, 8, 4), "P=4"),
                        (Placement.identity(3, 8, 2), "(L, E)")):
        with pytest.raises(InputError) as err:
            run(inst, time_limit=1.0, placement=bad)
        assert err.value.field == "placement" and needle in str(err.value)
    with pytest.raises(InputError) as err:
        run(inst, time_limit=1.0, warm_start="plan.json")
    assert err.value.field == "warm_start"
