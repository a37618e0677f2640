"""The block-pair search (rp_opt.packing.improve)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rp_opt.check import check_plan
from rp_opt.cost import rank_demand, score
from rp_opt.packing.heuristic import certified_rows
from rp_opt.packing.improve import search_layout
from rp_opt.packing.state import load_layouts, make_problem, State
from rp_opt.packing.baseline import pack
from rp_opt.packing.seeds import layout_violation
from rp_opt.solution import Layout, Placement
from tests.helpers import small, small_rows


@pytest.mark.parametrize("objective", ["sync", "shard", "weighted"])
def test_block_pair_search_deltas_and_state_are_exact(objective):
    """Block-pair search (rp_opt.packing.improve): for random block pairs the predicted
    energy change of the best move equals the change of a from-scratch evaluation after
    applying it, every candidate's pair_delta equals Problem.energy on the full matrices,
    and after many applied moves the incremental state equals a full rescore and the
    layout keeps every constraint (capacity, non-empty cells, m)."""
    from rp_opt.packing.improve import BlockSearch, pair_delta

    inst, rows, layout = small_rows(samples=48, dp=4, edp=2, m=5)
    placement = Placement.identity(4, 8, 4)
    demand = rank_demand(inst.window, placement)
    problem = make_problem(inst, demand, rows, objective)
    search = BlockSearch(problem, layout.cell_of)
    rng = np.random.default_rng(3)
    applied = 0
    for _ in range(60):
        b1, b2 = (int(b) for b in rng.choice(problem.num_pairs, 2, replace=False))
        delta, move = search.evaluate(b1, b2)
        # pair_delta against the full energy for random replacement values
        a1, x1, a2, x2 = (rng.uniform(0, 2, 5) * v for v in
                          (search.state.attention[0, b1], search.state.expert[0, b1],
                           search.state.attention[0, b2], search.state.expert[0, b2]))
        att = np.repeat(search.state.attention[:1], 5, axis=0)
        exp = np.repeat(search.state.expert[:1], 5, axis=0)
        att[:, b1], exp[:, b1], att[:, b2], exp[:, b2] = a1, x1, a2, x2
        full = problem.energy(att, exp) - search.energy()
        np.testing.assert_allclose(pair_delta(problem, search.state.attention[0], search.state.expert[0],
                                              b1, b2, a1, x1, a2, x2), full, rtol=1e-9, atol=1e-9 * search.energy())
        if move is None:
            continue
        before = search.energy()
        search.apply(move)
        applied += 1
        np.testing.assert_allclose(search.energy() - before, delta, rtol=1e-6, atol=1e-9 * before)
    assert applied > 20
    fresh = State(problem, 1)
    load_layouts(problem, fresh, [0], [search.layout()])
    for name in ("count", "tokens", "qwork", "loads", "attention", "expert", "energy"):
        np.testing.assert_allclose(getattr(search.state, name), getattr(fresh, name), rtol=1e-12, err_msg=name)
    lay = Layout(search.layout(), rows, inst.cluster.dp)
    assert layout_violation(inst, lay, rows) is None
    assert check_plan(inst, placement.to_list(), lay.to_rows(), objective, num_rows=rows).valid


def test_block_search_never_worsens_and_reaches_local_optimum():
    """From the ffd layout the search only lowers the energy and, on a small window, stops
    at a local optimum: no block pair then holds an improving move."""
    from rp_opt.packing.improve import BlockSearch

    inst = small(samples=40, dp=4, edp=2)
    placement = Placement.identity(4, 8, 4)
    demand = rank_demand(inst.window, placement)
    rows, _, _ = certified_rows(inst, 5.0)
    problem = make_problem(inst, demand, rows, "sync")
    start = pack(inst, "ffd", rows)[0]
    search = BlockSearch(problem, start.cell_of)
    e0 = search.energy()
    stats = search.sweep(np.inf, np.random.default_rng(0))
    assert stats.local_optimum and search.energy() <= e0
    for b1 in range(problem.num_pairs):
        for b2 in range(b1 + 1, problem.num_pairs):
            delta, move = search.evaluate(b1, b2)
            assert move is None or delta >= -1e-9 * abs(search.energy())
    lay = Layout(search.layout(), rows, inst.cluster.dp)
    np.testing.assert_allclose(score(inst, placement, lay, "sync", demand)[0],
                               score(inst, placement, lay, "sync")[0])
    assert score(inst, placement, lay, "sync", demand) <= score(inst, placement, start, "sync", demand)


def test_screened_swaps_bound_and_exact_moves():
    """Screened evaluation (rp_opt.packing.improve): the swap lower bounds never exceed the
    exact X after the swap; the move returned is exact (its delta equals the change after
    applying it) and is never better than the exhaustive best (which it may miss)."""
    from rp_opt.packing.improve import BlockSearch

    inst, rows, layout = small_rows(samples=48, dp=4, edp=2, m=5)
    placement = Placement.identity(4, 8, 4)
    problem = make_problem(inst, rank_demand(inst.window, placement), rows, "sync")
    full = BlockSearch(problem, layout.cell_of)
    screened = BlockSearch(problem, layout.cell_of, screen=3)
    rng = np.random.default_rng(1)
    shape = (problem.num_ranks, problem.num_layers)
    applied = 0
    for _ in range(40):
        b1, b2 = (int(b) for b in rng.choice(problem.num_pairs, 2, replace=False))
        st = screened.state
        I = np.flatnonzero(screened.pair_of_sample == b1)
        J = np.flatnonzero(screened.pair_of_sample == b2)
        W1, W2 = st.loads[0, b1], st.loads[0, b2]
        DI, DJ = problem.demand[I], problem.demand[J]
        x1, x2 = screened._swap_bounds(W1, W2, DI, DJ)
        e1 = problem.gamma * (W1 - DI[:, None] + DJ[None]).reshape(-1, *shape).max(axis=1).sum(axis=1)
        e2 = problem.gamma * (W2 + DI[:, None] - DJ[None]).reshape(-1, *shape).max(axis=1).sum(axis=1)
        assert np.all(x1 <= e1 + 1e-9) and np.all(x2 <= e2 + 1e-9)
        full.state, full.pair_of_sample = screened.state, screened.pair_of_sample
        best, _ = full.evaluate(b1, b2)
        delta, move = screened.evaluate(b1, b2)
        if move is None:
            continue
        assert delta >= best - 1e-9 * screened.energy()
        before = screened.energy()
        screened.apply(move)
        applied += 1
        np.testing.assert_allclose(screened.energy() - before, delta, rtol=1e-6, atol=1e-9 * before)
    assert applied > 10
    lay = Layout(screened.layout(), rows, inst.cluster.dp)
    assert layout_violation(inst, lay, rows) is None


@pytest.mark.parametrize("objective", ["sync", "shard"])
def test_block_pair_best_move_is_the_exhaustive_best(objective):
    """evaluate() costs only the moves that keep every constraint: its delta equals the
    least energy change over every feasible swap and relocation between the two blocks
    (each applied to a copy of the layout and rescored from scratch), and it says (inf,
    None) exactly when no move is feasible. The start is the R* witness, so capacity is
    tight and many moves are not feasible."""
    from rp_opt.packing.improve import BlockSearch

    inst, rows, layout = small_rows(samples=48, dp=4, edp=2, m=5)
    placement = Placement.identity(4, 8, 4)
    problem = make_problem(inst, rank_demand(inst.window, placement), rows, objective)
    search = BlockSearch(problem, layout.cell_of)
    cell_of, lengths = search.state.cell_of[0].astype(np.int64), inst.window.lengths
    tokens = np.bincount(cell_of, weights=lengths, minlength=problem.num_cells)
    count = np.bincount(cell_of, minlength=problem.num_cells)
    base = search.energy()

    def change(new_cells):
        state = State(problem, 1)
        load_layouts(problem, state, [0], [new_cells])
        out = float(state.energy[0]) - base
        state.close()
        return out

    none_feasible = 0
    for b1, b2 in itertools.permutations(range(problem.num_pairs), 2):
        delta, move = search.evaluate(b1, b2)
        I = np.flatnonzero(search.pair_of_sample == b1)
        J = np.flatnonzero(search.pair_of_sample == b2)
        changes = []
        for i in I:
            for j in J:
                ci, cj = cell_of[i], cell_of[j]
                if (tokens[ci] - lengths[i] + lengths[j] <= inst.cluster.capacity
                        >= tokens[cj] - lengths[j] + lengths[i]):
                    new = cell_of.copy()
                    new[i], new[j] = cj, ci
                    changes.append(change(new))
        for movers, into in ((I, b2), (J, b1)):
            for i in movers:
                for c in problem.cells_of_pair[into]:
                    if count[cell_of[i]] > 1 and tokens[c] + lengths[i] <= inst.cluster.capacity and count[c] < 5:
                        new = cell_of.copy()
                        new[i] = c
                        changes.append(change(new))
        if not changes:
            none_feasible += 1
            assert move is None and delta == np.inf
        else:
            assert move is not None
            np.testing.assert_allclose(delta, min(changes), rtol=1e-9, atol=1e-9 * base)
    assert 0 < none_feasible < problem.num_pairs * (problem.num_pairs - 1)  # both outcomes seen


@pytest.mark.parametrize("objective", ["sync", "shard"])
def test_parallel_search_is_valid_never_worse_and_deterministic(objective):
    """Two-process row-group search (ParallelSearch through search_layout): the merged
    layout keeps every constraint, its energy is the from-scratch energy, it is never
    worse than the start, and with evaluation-bounded rounds the same seed and worker
    count give the same layout."""
    inst = small(samples=96, dp=4, edp=2, seed=5, capacity=2048)
    placement = Placement.identity(4, 8, 4)
    rows, _, _ = certified_rows(inst, 5.0)
    assert rows >= 4
    problem = make_problem(inst, rank_demand(inst.window, placement), rows, objective)
    start = pack(inst, "ffd", rows)[0].cell_of
    fresh = State(problem, 1)
    load_layouts(problem, fresh, [0], [start])
    e0 = float(fresh.energy[0])
    runs = []
    for _ in range(2):
        lay, energy, stats = search_layout(problem, start, max_evaluations=120, seed=4, workers=2,
                                                  cap=None, screen=8, round_evaluations=15)
        assert stats["workers"] == 2 and stats["rounds"] >= 2
        load_layouts(problem, fresh, [0], [lay])
        assert energy == pytest.approx(float(fresh.energy[0]), rel=1e-12)
        assert energy <= e0
        layout = Layout(lay, rows, inst.cluster.dp)
        assert layout_violation(inst, layout, rows) is None
        assert check_plan(inst, placement.to_list(), layout.to_rows(), objective, num_rows=rows).valid
        runs.append(lay)
    fresh.close()
    np.testing.assert_array_equal(runs[0], runs[1])
