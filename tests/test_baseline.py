"""Baseline packers: ffd (AReaL's rule) and kk (verl's), and the baseline solvers."""

import numpy as np
import pytest

from rp_opt import InputError, check
from rp_opt.packing.baseline import ffd_bins, kk_partition, pack, repair_capacity
from rp_opt.solvers import get_solver
from rp_opt.window import Cluster, CostModel, Instance, Stage, Window

from conftest import random_instance


def test_ffd_fewest_sequences_rule():
    """Lengths 6,5,4,3,2,1 into 3 bins of 10: the first three open one bin each; 3 goes to
    the bin with fewest items among those it fits (all have one: lowest index, bin 0 with 6 -> 9);
    2 to bin 1 (5 -> 7), 1 to bin 2 (4 -> 5)."""
    bins = ffd_bins(np.array([6, 5, 4, 3, 2, 1]), 3, 10)
    np.testing.assert_array_equal(bins, [0, 1, 2, 0, 1, 2])
    assert ffd_bins(np.array([6, 6, 6]), 2, 10) is None


def test_kk_equal_counts_and_balance():
    weights = np.array([8.0, 7, 6, 5, 4, 3, 2, 1])
    parts = kk_partition(weights, 2)
    counts = np.bincount(parts)
    assert counts.tolist() == [4, 4]
    sums = np.bincount(parts, weights=weights)
    assert abs(sums[0] - sums[1]) <= 2
    uneven = kk_partition(np.arange(1, 8, dtype=float), 3)
    assert sorted(np.bincount(uneven).tolist()) == [2, 2, 3]


def test_repair_moves_out_of_over_capacity_bin():
    lengths = np.array([5, 5, 5, 1])
    fixed = repair_capacity(lengths, np.array([0, 0, 1, 1]), 2, 10)
    assert fixed is not None
    assert np.bincount(fixed, weights=lengths, minlength=2).max() <= 10


@pytest.mark.parametrize("solver", ["baseline", "kk"])
@pytest.mark.parametrize("seed", range(5))
def test_baseline_solvers_valid(solver, seed):
    instance = random_instance(seed, n=24, dp=4, edp=2, ep=2, capacity=64)
    result = get_solver(solver)(instance, objective="sync")
    report = check(instance, result.plan)
    assert report.valid, report.violations
    np.testing.assert_allclose(report.score, result.score)
    assert result.bound <= result.score[0]
    assert result.status == "feasible"


@pytest.mark.parametrize("solver", ["baseline", "kk", "lpt-ffd"])
def test_baseline_num_rows_option(solver):
    """num_rows is an integer >= 1 or None (R*); 0 reached kk's division, 1.5 was truncated."""
    instance = random_instance(0, n=24, dp=4, edp=2, ep=2, capacity=64)
    r_star = get_solver(solver)(instance).plan.num_rows
    for value in (0, -1, 1.5, "x"):
        with pytest.raises(InputError, match=r"^num_rows: must be an integer >= 1"):
            get_solver(solver)(instance, num_rows=value)
    for value in (r_star + 1, str(r_star + 1)):  # the command line's text too
        result = get_solver(solver)(instance, num_rows=value)
        assert result.plan.num_rows == r_star + 1 and check(instance, result.plan).valid


def test_pack_rows_at_least_area_bound():
    instance = random_instance(2, n=30, dp=2, capacity=64)
    layout, stats = pack(instance, "ffd")
    assert layout.num_rows * 2 * 64 >= instance.window.lengths.sum()
    assert stats["extra_rows"] == 0


def test_ffd_and_kk_keep_the_sample_limit():
    """Regression: ffd and kk ignored the per-cell sample limit m and returned invalid plans.

    ffd, lengths [2, 1, 1, 1, 2, 4], C = 6, m = 3, D = 1 (R* = 2: {4,1,1}, {2,2,1}): in 2
    bins FFD puts 4, 2 in bin 0 (full) and 2, 1, 1, 1 in bin 1, 4 samples > m; with m it
    fails at 2 bins and packs 3 rows. kk, lengths [2, 3, 2, 7, 1], C = 8, m = 3 (R* = 2:
    {7,1}, {3,2,2}), attention linear (weights = lengths): KK gives {7,2} (9 > C) and
    {3,1,2}; the repair moved 2 into the 3-sample bin; with m no bin can take it, so kk
    also packs 3 rows. Without m, ffd is unchanged.
    """
    def instance(lengths, capacity):
        n = len(lengths)
        window = Window(np.array(lengths), np.zeros((n, 1, 1), dtype=np.int64), 1)
        cost = CostModel((Stage("linear", 1, 1.0, 0.0),), 0.0)
        return Instance(window, Cluster(1, 1, 1, capacity, 3), cost)

    lengths = np.array([2, 1, 1, 1, 2, 4])
    assert np.bincount(ffd_bins(lengths, 2, 6)).tolist() == [2, 4]
    assert ffd_bins(lengths, 2, 6, max_items=3) is None
    for rule, inst in (("ffd", instance(lengths, 6)), ("kk", instance([2, 3, 2, 7, 1], 8))):
        layout, stats = pack(inst, rule)
        assert stats["extra_rows"] == 1 and stats["rows"] == 3
        assert layout.cell_sizes().max() <= 3
    for solver, inst in (("baseline", instance(lengths, 6)), ("kk", instance([2, 3, 2, 7, 1], 8))):
        result = get_solver(solver)(inst, objective="sync")
        assert check(inst, result.plan).valid
        # R* = 2 is proven by the certifier; the plan has the rule's 3 rows
        assert result.stats["r_star"] == 2 and result.plan.num_rows == 3


@pytest.mark.parametrize("solver", ["baseline", "kk", "lpt-ffd"])
def test_rows_not_proven_in_time_use_the_witness(solver, monkeypatch):
    """Regression: when the certifier did not prove R* (time out), the baselines raised
    InputError "window: None" (its reason is set only for infeasible windows) on a window
    that has a layout. They now pack into the rows of the certifier's witness, as the
    heuristic does.

    A certifier limited to bounds and heuristics (exact="none") stands in for one out of
    time: lengths [2, 4, 2, 2, 4], C = 7, D = 1: L1 = 2, but every length is even and 7 is
    odd, so B = 3 (FFD: {4,2}, {4,2}, {2}); bounds 2 <= R* <= 3, witness of 3 rows."""
    import rp_opt.rows as rows

    real = rows.certify_rows
    monkeypatch.setattr(rows, "certify_rows", lambda window, cluster, time_limit=10.0, exact="auto":
                        real(window, cluster, time_limit, exact="none"))
    window = Window(np.array([2, 4, 2, 2, 4]), np.ones((5, 1, 2), dtype=np.int64), 1)
    inst = Instance(window, Cluster(1, 1, 1, 7), CostModel((Stage("linear", 1, 1.0, 0.0),), 1.0))
    result = get_solver(solver)(inst, objective="sync")
    assert result.plan.num_rows == 3
    assert check(inst, result.plan).valid


def test_baseline_says_it_ignores_a_warm_start():
    """A baseline builds its plan by fixed rules: a warm start changes nothing, and the
    result says it was ignored rather than dropping it silently."""
    inst = random_instance(2, n=16)
    start = get_solver("heuristic")(inst, objective="sync", time_limit=0.5, seed=0).plan
    plain = get_solver("baseline")(inst, objective="sync")
    warm = get_solver("baseline")(inst, objective="sync", warm_start=start)
    assert check(inst, warm.plan).valid
    assert warm.score == plain.score and "warm_start" not in plain.stats
    assert warm.stats["warm_start"].startswith("ignored")


def test_kk_says_why_it_took_more_rows():
    """Lengths 6, 5, 3, 5, 4, 12, 12 with C = 12, D = 4: R* = 1 ({12}, {12}, {6, 5},
    {3, 5, 4}), but Karmarkar-Karp's balanced 4 bins break C beyond repair; its second row
    would need 8 cells for 7 samples. ``no_solution`` says so, and that no layout existing
    is not claimed. (Found by the brute-force stress test.)"""
    lengths = np.array([6, 5, 3, 5, 4, 12, 12])
    demand = np.zeros((7, 1, 4), dtype=np.int64)
    demand[:, 0, 0] = lengths
    inst = Instance(Window(lengths, demand, 1), Cluster(4, 1, 1, 12),
                    CostModel((Stage("lin", 1, 2.5, 0.0), Stage("soft", 1, 0.5, 0.02)), 0.01))
    res = get_solver("kk")(inst, objective="shard")
    assert res.status == "no_solution" and res.plan is None
    assert "layout of 1 row broke the capacity C=12" in res.stats["reason"]
    assert "no claim that no layout exists" in res.stats["reason"]
    assert check(inst, get_solver("baseline")(inst, objective="shard").plan).valid  # ffd fits one row


def test_baseline_bound_ranges_over_every_placement():
    """A baseline's bound is the analytic one, valid for every placement: its result says
    so (``bound_scope``), in the stats and in ``to_dict()``."""
    inst = random_instance(4, n=16)
    res = get_solver("lpt-ffd")(inst, objective="sync")
    assert check(inst, res.plan).valid
    assert res.stats["bound_scope"] == "every placement" and res.to_dict()["bound_scope"] == "every placement"
    assert res.bound == pytest.approx(res.stats["analytic_bound"])
