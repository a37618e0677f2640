"""Regrouping whole cells and arranging whole blocks (rp_opt.packing.regroup)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rp_opt import Cluster, CostModel, Instance, Stage, Window
from rp_opt.check import check
from rp_opt.cost import layout_costs, rank_demand
from rp_opt.packing.heuristic import certified_rows, heuristic
from rp_opt.packing.state import load_layouts, make_problem, State
from rp_opt.packing.baseline import pack
from rp_opt.packing.regroup import _balanced, arrange_blocks, rearranged, regroup_cells
from rp_opt.result import Plan
from rp_opt.solution import Layout, Placement
from rp_opt.synth import cap_counts
from tests.helpers import assert_checked, small


def full_length_instance() -> Instance:
    """R = 1 row of D = 4 slots in G = 2 shards (2 cells a block), C = 8, one attention
    stage with Q only (n = 1, alpha = 0, beta = 1), gamma = 0 (no expert cost).

    Samples: two of length 8 (full cells, Q = 64 each) and four of length 4 (two cells of
    two, Q = 16 + 16 = 32 each). A block's A is its larger cell's Q: a block mixing a full
    cell with a two-sample cell costs 64, two full cells 64, two two-sample cells 32.
    """
    lengths = np.array([8, 8, 4, 4, 4, 4])
    demand = np.zeros((6, 1, 2), dtype=np.int64)
    demand[:, 0, 0] = lengths                      # top-1, every token to expert 0
    window = Window(lengths, demand, top_k=1)
    cost = CostModel((Stage("soft", 1, 0.0, 1.0),), gamma=0.0)
    return Instance(window, Cluster(dp=4, edp=2, ep=1, capacity=8), cost)


def _cells(cell_of: np.ndarray) -> set:
    """The partition of the samples into cells, without the cells' positions."""
    return {frozenset(np.flatnonzero(cell_of == c).tolist()) for c in np.unique(cell_of)}


def test_full_length_cells_end_up_in_one_block():
    """Mixed blocks [full, two] + [full, two] cost A = 64 + 64 = 128; regrouped, the full
    cells share one block: 64 + 32 = 96. No sample move can get there (a full cell takes
    nothing else, and no single sample of a two-sample cell fits it)."""
    inst = full_length_instance()
    placement = Placement.identity(1, 2, 1)
    demand = rank_demand(inst.window, placement)
    problem = make_problem(inst, demand, 1, "sync")
    mixed = np.array([0, 2, 1, 1, 3, 3])          # cells 0, 1 = shard 0; cells 2, 3 = shard 1
    before = layout_costs(inst, placement, Layout(mixed, 1, 4), demand)
    assert before.attention.tolist() == [[64.0, 64.0]]
    grouped = regroup_cells(problem, mixed)
    after = layout_costs(inst, placement, Layout(grouped, 1, 4), demand)
    assert sorted(after.attention.ravel().tolist()) == [32.0, 64.0]
    assert grouped[0] // 2 == grouped[1] // 2      # the two full samples share a block
    assert _cells(grouped) == _cells(mixed)


@pytest.mark.parametrize("objective", ["sync", "shard", "weighted"])
@pytest.mark.parametrize("edp", [1, 2])
def test_regrouped_seed_is_valid_with_the_same_cells(objective, edp):
    """On a synthetic window (G = 1 and 2) the regrouped ffd layout passes the checker and
    holds exactly the same cells (only their positions changed)."""
    inst = small(samples=40, dp=4, edp=edp)
    placement = Placement.identity(4, 8, 4)
    demand = rank_demand(inst.window, placement)
    rows, _, _ = certified_rows(inst, 5.0)
    start = pack(inst, "ffd", rows)[0]
    problem = make_problem(inst, demand, rows, objective)
    grouped = regroup_cells(problem, start.cell_of)
    report = check(inst, Plan(placement, Layout(grouped, rows, inst.cluster.dp), objective, (0.0,)))
    assert report.valid, report.violations
    assert _cells(grouped) == _cells(start.cell_of)


def _blocks_problem(rows: int, shards: int, objective: str):
    """A kernel problem of ``rows`` x ``shards`` blocks of one cell each (D = G)."""
    inst = small(samples=40, dp=shards, edp=shards)
    placement = Placement.identity(4, 8, 4)
    return make_problem(inst, rank_demand(inst.window, placement), rows, objective)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=6, max_size=6), st.lists(st.floats(0, 100), min_size=6, max_size=6))
def test_sync_arrangement_is_the_brute_force_best(attention, expert):
    """For fixed blocks (A, X), sorted rows give the least sum_r max_g J over all 6!
    arrangements of 3 rows x 2 shards, and every block keeps its cells."""
    problem = _blocks_problem(3, 2, "sync")
    a, x = np.array(attention), np.array(expert)
    cell_of = np.arange(6)                           # sample i alone in cell i = block i
    moved = arrange_blocks(problem, cell_of, a, x)
    j = np.empty(6)
    j[moved] = a + x                                 # block i's J now at position moved[i]
    best = min(np.max((a + x)[list(p)].reshape(3, 2), axis=1).sum() for p in itertools.permutations(range(6)))
    assert np.max(j.reshape(3, 2), axis=1).sum() == pytest.approx(best)
    assert sorted(moved.tolist()) == list(range(6))


def _lpt(values: np.ndarray, groups: int, size: int) -> np.ndarray:
    """Plain LPT with ``size`` per group (the reference for :func:`_balanced`)."""
    group, totals, counts = np.empty(values.size, dtype=np.int64), np.zeros(groups), np.zeros(groups)
    for b in np.argsort(-values, kind="stable"):
        g = min(np.flatnonzero(counts < size), key=lambda g: totals[g])
        group[b], totals[g], counts[g] = g, totals[g] + values[b], counts[g] + 1
    return group


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=8, max_size=8))
def test_balanced_groups_improve_on_lpt_to_a_swap_optimum(values):
    """Two groups of four: the larger sum is never above plain LPT's, no single swap of two
    blocks between the fullest group and the other lowers it, and it is at least the
    brute-force best split."""
    v = np.array(values, dtype=float)
    group = _balanced(v, 2, 4)
    assert np.bincount(group, minlength=2).tolist() == [4, 4]
    sums = np.array([v[group == g].sum() for g in range(2)])
    lpt = _lpt(v, 2, 4)
    assert sums.max() <= max(v[lpt == g].sum() for g in range(2))
    top = int(np.argmax(sums))
    for i in np.flatnonzero(group == top):
        for j in np.flatnonzero(group != top):
            d = v[i] - v[j]
            assert not max(sums[top] - d, sums[1 - top] + d) < sums[top] - 1e-9
    best = min(max(v[list(c)].sum(), v.sum() - v[list(c)].sum()) for c in itertools.combinations(range(8), 4))
    assert sums.max() >= best


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=6, max_size=6), st.lists(st.floats(0, 100), min_size=6, max_size=6))
def test_shard_arrangement_balances_shard_totals(attention, expert):
    """``shard`` (max_g sum_r J) on 3 rows x 2 shards: arrange_blocks puts 3 blocks in each
    shard (not 2 in each row), its max shard total is at most LPT's over the shards and at
    least the brute-force optimum."""
    problem = _blocks_problem(3, 2, "shard")
    a, x = np.array(attention), np.array(expert)
    j = a + x
    moved = arrange_blocks(problem, np.arange(6), a, x)
    placed = np.empty(6)
    placed[moved] = j
    shard_totals = placed.reshape(3, 2).sum(axis=0)
    best = min(max(j[list(c)].sum(), j.sum() - j[list(c)].sum()) for c in itertools.combinations(range(6), 3))
    lpt = _lpt(j, 2, 3)
    assert best - 1e-9 <= shard_totals.max() <= max(j[lpt == g].sum() for g in range(2)) + 1e-9


def test_rearranged_reports_both_energies():
    """rearranged returns the moved layout's energy and the input's; the moved one is the
    energy of that layout in a fresh state, and its cells are the input's."""
    inst = small(samples=40, dp=4, edp=2)
    placement = Placement.identity(4, 8, 4)
    demand = rank_demand(inst.window, placement)
    rows, _, _ = certified_rows(inst, 5.0)
    start = pack(inst, "ffd", rows)[0].cell_of
    problem = make_problem(inst, demand, rows, "sync")
    moved, moved_energy, energy = rearranged(problem, start)
    state = State(problem, 2)
    load_layouts(problem, state, [0, 1], [start, moved])
    assert (energy, moved_energy) == pytest.approx(tuple(state.energy.tolist()))
    assert moved_energy <= energy * (1 + 1e-12)     # sorted rows never raise sync for fixed blocks
    assert _cells(moved) == _cells(start)


@pytest.mark.parametrize("objective", ["sync", "shard"])
def test_heuristic_regroups_full_length_cells(objective):
    """A window with 6 full-length samples on D = 4, G = 2: the heuristic with regrouping
    is never worse than without, the regrouped seeds are reported, and plans check."""
    rng = np.random.default_rng(3)
    lengths = np.concatenate([np.full(6, 64), rng.integers(8, 40, 30)])
    popularity = rng.dirichlet(np.full(8, 0.5), size=2)
    demand = np.stack([rng.multinomial(2 * t, popularity[layer]) for t in lengths for layer in range(2)])
    demand = cap_counts(demand, np.repeat(lengths, 2), np.tile(popularity, (lengths.size, 1)), rng)
    window = Window(lengths, demand.reshape(lengths.size, 2, 8), top_k=2)
    cost = CostModel((Stage("lin", 2, 1.0, 0.0), Stage("soft", 1, 0.5, 0.01)), gamma=0.3)
    inst = Instance(window, Cluster(4, 2, 2, 64), cost)
    runs = {}
    for regroup in (True, False):
        res = heuristic(inst, objective=objective, time_limit=2.0, seed=0, temperatures=4,
                               search_evaluations=50, regroup=regroup, refine=False, report_baseline=False,
                               workers=1)
        assert_checked(inst, res)
        runs[regroup] = res
    energy = runs[True].stats["seed_energy"]
    # the six full-length cells share blocks in the regrouped copy of some seed: it starts lower
    assert any(energy[f"{rule}+regroup"] < energy[rule] for rule in energy if not rule.endswith("+regroup"))
    assert "arranged" in runs[True].stats["search"] and "arranged" not in runs[False].stats["search"]
    assert runs[True].score <= runs[False].score


@pytest.mark.parametrize("objective, regrouped", [("shard", True), ("sync", False)])
def test_default_regroups_seeds_for_a_max_of_sums_only(objective, regrouped):
    """By default the seeds are regrouped for ``shard`` (a maximum of shard sums) and not
    for ``sync``; an explicit regroup=False turns it off for ``shard`` too."""
    inst = small(samples=40, dp=4, edp=2)
    res = heuristic(inst, objective=objective, time_limit=2.0, seed=0, temperatures=2,
                           search_evaluations=10, refine=False, report_baseline=False)
    assert_checked(inst, res)
    assert any(name.endswith("+regroup") for name in res.stats["seeds"]) == regrouped
    off = heuristic(inst, objective=objective, time_limit=2.0, seed=0, temperatures=2,
                           search_evaluations=10, refine=False, report_baseline=False, regroup=False)
    assert not any(name.endswith("+regroup") for name in off.stats["seeds"])
    assert "arranged" not in off.stats["search"]


def test_regrouped_copy_follows_its_rule_when_replicas_are_few():
    """With fewer replicas than starts the anneal takes the first starts: each rule's
    regrouped copy comes right after it, so the first rule keeps its copy."""
    inst = small(samples=40, dp=4, edp=2)
    res = heuristic(inst, objective="shard", time_limit=2.0, seed=0, temperatures=2, replicas=2,
                           anneal_share=0.5, search_evaluations=5, refine=False, report_baseline=False,
                           workers=1)
    assert_checked(inst, res)
    first, second = list(res.stats["seed_energy"])
    assert second == f"{first}+regroup"


def test_refinement_search_is_arranged_too():
    """The placement refinement's search ends with the block arrangement as the packing
    rounds' searches do (stats of the refine round carry ``arranged``)."""
    inst = small(samples=48, dp=4, edp=2, seed=0)      # a window where the refinement swaps experts
    res = heuristic(inst, objective="shard", time_limit=5.0, seed=0, temperatures=2, search_evaluations=20,
                           refine=True, refine_sweeps=5, report_baseline=False, workers=1)
    assert_checked(inst, res)
    rounds = [r for r in res.stats["refine"] if "search" in r]
    assert rounds and all("arranged" in r["search"] for r in rounds)
