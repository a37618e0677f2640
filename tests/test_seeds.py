"""Seed layouts of the heuristic (rp_opt.packing.seeds)."""

from __future__ import annotations

import dataclasses

import numpy as np

from rp_opt import synth
from rp_opt.check import check_plan
from rp_opt.cost import layout_costs, rank_demand
from rp_opt.packing.heuristic import certified_rows
from rp_opt.packing.seeds import layout_violation, seed_layouts
from rp_opt.solution import Layout, Placement
from tests.helpers import small, small_rows


def test_seeds_are_valid_layouts():
    """Every seed rule that returns a layout gives R* rows, non-empty cells, within C and m."""
    inst = small(samples=40, m=4)
    placement = Placement.identity(4, 8, 4)
    rows, witness, _ = certified_rows(inst, 5.0)
    seeds = seed_layouts(inst, rows, rank_demand(inst.window, placement), witness=witness)
    assert {"greedy", "witness"} <= set(seeds)
    for name, lay in seeds.items():
        assert layout_violation(inst, lay, rows) is None, name
        assert check_plan(inst, placement.to_list(), lay.to_rows(), "sync", num_rows=rows).valid


def test_seed_rules_stop_at_the_deadline():
    """A deadline already passed: the first rule that gives a layout still runs (a plan
    needs one start), no later rule starts; no deadline: every rule runs."""
    import time

    inst = small(samples=40, m=4)
    placement = Placement.identity(4, 8, 4)
    rows, witness, _ = certified_rows(inst, 5.0)
    demand = rank_demand(inst.window, placement)
    rules = ("ffd", "kk", "greedy")
    late = seed_layouts(inst, rows, demand, witness=witness, rules=rules, deadline=time.perf_counter() - 1.0)
    assert list(late) == ["ffd"]
    assert layout_violation(inst, late["ffd"], rows) is None
    assert list(seed_layouts(inst, rows, demand, witness=witness, rules=rules, deadline=None)) == list(rules)


def test_block_and_kk_seeds_keep_constraints_and_cell_contents():
    """kk (repaired), blocks and blocks-kk seeds are valid layouts of R* rows (C, m,
    non-empty cells, checker); a blocks seed holds exactly its base's cell contents."""
    from rp_opt.packing.seeds import block_layout

    inst, rows, witness = small_rows(samples=40, m=4)
    placement = Placement.identity(4, 8, 4)
    demand = rank_demand(inst.window, placement)
    seeds = seed_layouts(inst, rows, demand, witness=witness, rules=("ffd", "kk", "blocks", "blocks-kk"))
    assert {"ffd", "blocks"} <= set(seeds)
    for name, lay in seeds.items():
        assert layout_violation(inst, lay, rows) is None, name
        assert check_plan(inst, placement.to_list(), lay.to_rows(), "sync", num_rows=rows).valid
    base = seeds["ffd"]
    moved = block_layout(inst, base, demand)

    def contents(lay):
        return sorted(tuple(np.flatnonzero(lay.cell_of == c)) for c in range(lay.num_cells))

    assert contents(moved) == contents(base)


def test_block_layout_pairs_complementary_cells():
    """Hand-checkable: one row, D=4 cells in G=2 blocks of 2, one sample per cell, P=2 ranks,
    L=1. Samples 0 and 2 send 100 tokens to rank 0, samples 1 and 3 to rank 1. The base
    layout puts {0, 2} and {1, 3} together (X = 200 gamma per block); block_layout must pair
    a rank-0 sample with a rank-1 sample in each block (X = 100 gamma each)."""
    from rp_opt.packing.seeds import block_layout
    from rp_opt.window import Window

    base_inst = synth.generate(model="ling-flash-like", samples=4, dp=4, edp=2, ep=2, capacity=4096, layers=1,
                               experts=2, top_k=1, seed=0)
    demand = np.array([[[100, 0]], [[0, 100]], [[100, 0]], [[0, 100]]], dtype=np.uint16)
    inst = dataclasses.replace(base_inst, window=Window(np.full(4, 100), demand, 1))
    placement = Placement.identity(1, 2, 2)
    base = Layout(np.array([0, 2, 1, 3]), 1, 4)          # cells 0, 1 = block 0 = samples {0, 2}
    by_rank = rank_demand(inst.window, placement)
    assert layout_costs(inst, placement, base).expert.ravel().tolist() == [200 * inst.cost.gamma] * 2
    moved = block_layout(inst, base, by_rank)
    blocks = moved.cell_of // 2
    assert blocks[0] != blocks[2] and blocks[1] != blocks[3]
    np.testing.assert_allclose(layout_costs(inst, placement, moved).expert.ravel(), [100 * inst.cost.gamma] * 2)
