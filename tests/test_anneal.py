"""Population annealing (rp_opt.packing.anneal) over the kernel's state (rp_opt.packing.state)."""

from __future__ import annotations

import numpy as np
import pytest

from rp_opt.check import check_plan
from rp_opt.cost import layout_costs, rank_demand
from rp_opt.packing import anneal
from rp_opt.packing.state import load_layouts, make_problem, State
from rp_opt.packing.seeds import layout_violation
from rp_opt.solution import Layout, Placement
from tests.helpers import small_rows


@pytest.mark.parametrize("objective", ["sync", "shard", "weighted"])
def test_incremental_state_equals_full_rescore(objective):
    """After many random accepted moves (infinite temperature), every replica's W, A, X and
    energy equal a from-scratch evaluation, its cost matrices equal cost.layout_costs, and
    the layout still keeps capacity, non-empty cells and the per-cell limit m."""
    inst, rows, layout = small_rows(samples=48, dp=4, edp=2, m=5)
    placement = Placement.identity(4, 8, 4)
    demand = rank_demand(inst.window, placement)
    problem = make_problem(inst, demand, rows, objective)
    state = State(problem, 6)
    load_layouts(problem, state, range(6), [layout.cell_of] * 6)
    accepted = anneal.metropolis_steps(problem, state, 0, 6, 1e300, 250, np.random.default_rng(5), candidates=3)
    assert accepted > 600
    fresh = State(problem, 6)
    load_layouts(problem, fresh, range(6), list(state.cell_of))
    for name in ("count", "tokens", "qwork", "loads", "attention", "expert", "energy"):
        np.testing.assert_allclose(getattr(state, name), getattr(fresh, name), rtol=1e-12, err_msg=name)
    for k in range(6):
        lay = Layout(state.cell_of[k].astype(np.int64), rows, inst.cluster.dp)
        assert layout_violation(inst, lay, rows) is None
        costs = layout_costs(inst, placement, lay)
        np.testing.assert_allclose(state.attention[k], costs.attention.ravel(), rtol=1e-12)
        np.testing.assert_allclose(state.expert[k], costs.expert.ravel(), rtol=1e-12)
        report = check_plan(inst, placement.to_list(), lay.to_rows(), objective, num_rows=rows)
        assert report.valid, report.violations


def test_time_limited_anneal_stops_inside_a_temperature():
    """A time limit holds even when one temperature's steps would take hours
    (steps_per_temperature=10^7): the steps stop at the deadline, and the stats count the
    steps that ran. With two workers the forked block stops too."""
    inst, rows, layout = small_rows(samples=48, dp=4, edp=2, m=5)
    demand = rank_demand(inst.window, Placement.identity(4, 8, 4))
    problem = make_problem(inst, demand, rows, "sync")
    for workers in (1, 2):
        best, energy, stats = anneal.anneal(problem, [layout.cell_of], replicas=4, workers=workers, time_limit=0.3,
                                            steps_per_temperature=10**7)
        assert stats.temperatures == 1 and 0 < stats.steps < 10**7 and stats.seconds < 3.0
        assert stats.proposals == stats.steps * 4 * 4
        assert layout_violation(inst, Layout(best, rows, inst.cluster.dp), rows) is None


def test_loads_up_to_int32_are_taken_and_beyond_are_one_line():
    """The heuristic's loads are 32-bit. A window whose rank totals stay below 2^31 plans
    (one sample of 2^30 tokens beside short ones: it was refused because max x N passed
    2^31); one whose total passes it is one line naming ``demand``."""
    from rp_opt import Cluster, CostModel, Instance, Stage, Window
    from rp_opt.errors import InputError
    from rp_opt.solvers import get_solver

    def window(long):
        lengths = np.array([long, 5, 7, 3])
        demand = np.zeros((4, 1, 2), dtype=np.int64)
        demand[:, 0, 0] = lengths
        return Instance(Window(lengths, demand, top_k=1), Cluster(2, 1, 1, 2**31 - 1),
                        CostModel((Stage("a", 1, 1.0, 0.0),), gamma=1.0))

    inst = window(2**30)
    res = get_solver("heuristic")(inst, time_limit=1, workers=1)
    assert res.plan is not None and check_plan(inst, res.plan.placement.to_list(), res.plan.layout.to_rows(),
                                               "sync").valid
    with pytest.raises(InputError, match=r"^demand: a rank's load reaches 2147483662 tokens"):
        get_solver("heuristic")(window(2**31 - 1), time_limit=1, workers=1)
