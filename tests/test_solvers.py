"""The solver registry's contract: every registered planner answers a window it cannot plan
with the common Result (status, no plan, the reason), never an exception."""

from __future__ import annotations

import numpy as np
import pytest

import rp_opt.rows as rows
from rp_opt import Cluster, CostModel, Instance, Stage, Window
from rp_opt.check import check
from rp_opt.solvers import get_solver, solver_names

BUILT_IN = ["auto", "baseline", "exact", "heuristic", "joint", "kk", "lpt-ffd"]


def lengths_window(lengths, dp: int, capacity: int = 7) -> Instance:
    """One layer, two experts on one rank, top-1: sample i sends all its tokens to expert
    i mod 2. Only the lengths matter for the row count."""
    lengths = np.asarray(lengths)
    demand = np.zeros((lengths.size, 1, 2), dtype=np.int64)
    demand[np.arange(lengths.size), 0, np.arange(lengths.size) % 2] = lengths
    cost = CostModel((Stage("softmax", 1, 1.0, 0.1),), gamma=0.5)
    return Instance(Window(lengths, demand, top_k=1), Cluster(dp, 1, 1, capacity), cost)


def test_every_built_in_solver_is_registered():
    assert set(BUILT_IN) <= set(solver_names())


@pytest.mark.parametrize("solver", BUILT_IN)
def test_infeasible_window_is_an_infeasible_result(solver):
    """3 samples cannot fill one row of D = 4 slots (every cell needs a sample): every
    planner returns ``infeasible`` with the certifier's reason and its fix, and no plan."""
    res = get_solver(solver)(lengths_window([2, 4, 2], dp=4), objective="sync", time_limit=2)
    assert res.status == "infeasible" and res.plan is None and res.score == ()
    assert "3 samples for 4 cells" in res.stats["reason"] and "add 1 sample" in res.stats["reason"]
    assert res.gap is None and "infeasible" in res.summary()


@pytest.mark.parametrize("solver", BUILT_IN)
def test_rows_not_proven_in_time(solver, monkeypatch):
    """Lengths [2, 4, 2, 2, 4], C = 7, D = 1: L1 = ceil(14 / 7) = 2, but every length is
    even and 7 is odd, so no bin is full and B = R* = 3 (FFD: {4,2}, {4,2}, {2}). A
    certifier limited to bounds and heuristics (exact="none") stands in for one out of time:
    it stops at 2 <= R* <= 3 with the FFD witness.

    The exact planners claim optimality for R = R* only, so they answer ``no_solution``
    (regression: they used to say ``infeasible``); the packers plan with the witness's 3
    rows and say R* is not proven. With the real certifier every planner gets R* = 3."""
    inst = lengths_window([2, 4, 2, 2, 4], dp=1)
    real = rows.certify_rows
    monkeypatch.setattr(rows, "certify_rows", lambda window, cluster, time_limit=10.0, exact="auto":
                        real(window, cluster, time_limit, exact="none"))
    res = get_solver(solver)(inst, objective="sync", time_limit=2)
    if solver in ("exact", "joint"):
        assert res.status == "no_solution" and res.plan is None
        assert "2 <= R* <= 3" in res.stats["reason"]
    else:
        assert res.plan is not None and res.plan.num_rows == 3 and check(inst, res.plan).valid
        # optimal for R = 3 is not optimal for the window while R* < 3 is open
        assert res.status == "feasible"
        # nor is 3 reported as R* (the baselines used to say r_star = 3 here)
        assert "r_star" not in res.stats
        if solver in ("heuristic", "auto"):
            assert res.stats["rows_lower_bound"] == 2 and "not proven" in res.stats["rows_method"]
    if solver == "auto":
        # a limit that leaves the exact model about a millisecond: whether or not it proves
        # its plan, the stats say the rows are not proven (they were kept only when it did)
        res = get_solver(solver)(inst, objective="sync", time_limit=0.01)
        assert res.plan.num_rows == 3 and "r_star" not in res.stats
        assert res.stats["rows_lower_bound"] == 2 and "not proven" in res.stats["rows_method"]
    monkeypatch.setattr(rows, "certify_rows", real)
    res = get_solver(solver)(inst, objective="sync", time_limit=2)
    assert res.plan is not None and res.plan.num_rows == 3 and check(inst, res.plan).valid


@pytest.mark.parametrize("solver", ["baseline", "kk", "lpt-ffd", "heuristic", "exact"])
def test_too_few_rows_given(solver):
    """``num_rows=1`` for a window whose R* is 3 (14 tokens, C = 7, D = 1: no layout of one
    row). The heuristic and the exact planner return no plan rather than raising; the
    baselines, as documented (:mod:`rp_opt.packing.baseline`), add the rows their rule
    needs and say how many in ``stats["extra_rows"]``."""
    inst = lengths_window([2, 4, 2, 2, 4], dp=1)
    res = get_solver(solver)(inst, objective="sync", time_limit=2, num_rows=1)
    if solver in ("heuristic", "exact"):
        assert res.plan is None and res.status in ("infeasible", "no_solution") and res.stats["reason"]
    else:
        assert res.plan.num_rows == 3 and res.stats["extra_rows"] == 2 and check(inst, res.plan).valid


@pytest.mark.parametrize("solver", BUILT_IN)
def test_more_rows_given_than_samples_fill(solver):
    """``num_rows=6`` for 5 samples on D = 1: 6 cells, 5 samples, some cell would be empty,
    so no layout of 6 rows exists. Every planner says ``infeasible`` with that reason
    (regression: the heuristic and auto raised InputError("window") from the ffd seed, which
    the CLI then reported as a bad ``--option`` with exit code 2; the baselines said
    ``no_solution``)."""
    inst = lengths_window([2, 4, 2, 2, 4], dp=1)
    res = get_solver(solver)(inst, objective="sync", time_limit=2, num_rows=6)
    assert res.status == "infeasible" and res.plan is None
    assert "N=5 < R x D = 6 cells" in res.stats["reason"]


@pytest.mark.parametrize("solver", ["heuristic", "auto"])
def test_seed_rules_that_overflow_the_window(solver):
    """Lengths 15, 15, 10, 8, 7, 4, 3 with C = 16, D = 4, ``num_rows=1``: L2 = 4 cells, so
    counting does not rule one row out, but no packing into 4 cells exists (5 at best), so
    ffd cannot fill one row and its extra row would need 8 cells for 7 samples; the
    baseline packer raises InputError("window"). The heuristic's seed rules skip that rule,
    and with no seed left it returns ``no_solution`` with the reason instead of raising
    (regression: InputError is a ValueError, which the seed loop re-raised)."""
    inst = lengths_window([15, 15, 10, 8, 7, 4, 3], dp=4, capacity=16)
    res = get_solver(solver)(inst, objective="sync", time_limit=2, num_rows=1)
    assert res.status == "no_solution" and res.plan is None
    assert "no seed layout of R=1 rows" in res.stats["reason"]


@pytest.mark.parametrize("solver", ["heuristic", "auto", "exact", "joint"])
def test_rows_ruled_out_by_a_bin_bound(solver):
    """Five samples of length 6, C = 10, D = 4, ``num_rows=1``: no two samples share a cell,
    so the 4 cells of one row cannot hold them (L2 = 5). Every planner that packs the given
    R says ``infeasible`` with that reason, at once (the heuristic said ``no_solution`` when
    its seeds failed, while the exact model proved it infeasible)."""
    inst = lengths_window([6, 6, 6, 6, 6], dp=4, capacity=10)
    res = get_solver(solver)(inst, objective="sync", time_limit=2, num_rows=1)
    assert res.status == "infeasible" and res.plan is None
    assert res.stats["reason"] == "R=1 rows hold R x D = 4 cells, but the samples need at least 5 cells of C=10 (L2 bound)"


def test_heuristic_says_r_star_only_when_it_proved_it():
    """R* = 3 for these lengths (test_rows_not_proven_in_time). Certified in the run, the
    stats carry ``r_star`` = 3; with ``num_rows`` given (a caller's R, here 4: a valid
    layout of one more row) they carry ``num_rows`` = 4 and no ``r_star``, which used to
    read 4."""
    inst = lengths_window([2, 4, 2, 2, 4], dp=1)
    heuristic = get_solver("heuristic")
    res = heuristic(inst, objective="sync", time_limit=1)
    assert res.stats["r_star"] == 3 and res.stats["num_rows"] == 3 and res.plan.num_rows == 3
    res = heuristic(inst, objective="sync", time_limit=1, num_rows=4)
    assert "r_star" not in res.stats and res.stats["num_rows"] == 4 and res.plan.num_rows == 4
    assert check(inst, res.plan).valid


def test_auto_second_heuristic_run_keeps_proven_rows():
    """Lengths 2, 4, 2, 2, 4 six times, C = 7, D = 6: every bin holds at most 6 tokens (all
    lengths even, C odd), so B = 84 / 6 = 14 bins and R* = 3, while L1 gives 2 rows. The
    exact model is then too large (N R* D = 540 > 400, but N L1 D = 360 is not), so auto
    runs the heuristic twice. The first run proves R* = 3; the second keeps those rows,
    warm-started from the first plan, instead of certifying them again."""
    inst = lengths_window([2, 4, 2, 2, 4] * 6, dp=6)
    res = get_solver("auto")(inst, objective="sync", time_limit=3.0, seed=0, workers=1)
    assert res.stats["auto_choice"] == "heuristic" and res.plan.num_rows == 3
    assert res.stats["rows_method"] == "warm start" and check(inst, res.plan).valid


@pytest.mark.parametrize("limit", [0, -1.0, None, "soon"])
def test_joint_refuses_a_bad_time_limit(limit):
    """``joint`` checks its limit as ``exact`` does: 0, a negative number, None or text is
    one InputError naming ``time_limit`` (it used to run anyway, or fail with a TypeError)."""
    from rp_opt.errors import InputError

    with pytest.raises(InputError, match=r"^time_limit"):
        get_solver("joint")(lengths_window([2, 4, 2], dp=1), objective="sync", time_limit=limit)


@pytest.mark.parametrize("solver", BUILT_IN)
def test_not_an_instance_is_one_line(solver):
    """Every registered planner names ``instance`` when given something else (it failed
    with an AttributeError on ``None.window``)."""
    from rp_opt.errors import InputError

    with pytest.raises(InputError, match=r"^instance: must be an Instance .*got NoneType"):
        get_solver(solver)(None, objective="sync", time_limit=1)


@pytest.mark.parametrize("solver", ["baseline", "kk", "lpt-ffd"])
@pytest.mark.parametrize("seed", ["a", -1, True, 2**40])
def test_baselines_check_the_seed(solver, seed):
    """The baselines use no randomness but check ``seed`` as every planner does (they
    accepted anything)."""
    from rp_opt.errors import InputError

    with pytest.raises(InputError, match=r"^seed: must be an integer in \[0, 2147483647\]"):
        get_solver(solver)(lengths_window([2, 4, 2], dp=1), seed=seed)


def test_joint_checks_its_warm_start():
    """``joint`` checks a warm start as ``exact`` does: not a Plan, or a plan of another
    window, is one line naming ``warm_start`` (a list raised an AttributeError, another
    window's plan was used quietly); its own window's plan is a valid start."""
    from rp_opt.errors import InputError

    inst, other = lengths_window([2, 4, 2, 2, 4], dp=1), lengths_window([2, 4, 2, 2, 4, 3], dp=1)
    with pytest.raises(InputError, match=r"^warm_start: must be a Plan, got list"):
        get_solver("joint")(inst, time_limit=1, warm_start=[[1, 2]])
    theirs = get_solver("baseline")(other, time_limit=1).plan
    with pytest.raises(InputError, match=r"^warm_start: "):
        get_solver("joint")(inst, time_limit=1, warm_start=theirs)
    ours = get_solver("baseline")(inst, time_limit=1).plan
    res = get_solver("joint")(inst, time_limit=2, warm_start=ours)
    assert res.plan is not None and check(inst, res.plan).valid and res.score <= ours.score
