"""The production heuristic (rp_opt.packing.heuristic)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rp_opt import synth
from rp_opt.cost import rank_demand, score
from rp_opt.packing.heuristic import certified_rows, heuristic, others_running
from rp_opt.packing.seeds import layout_violation
from rp_opt.solution import Layout, Placement
from rp_opt.solvers import get_solver
from tests.helpers import assert_checked, small


def test_heuristic_is_deterministic_for_seed_and_workers():
    """Same seed and worker count, fixed number of temperature steps: the same plan."""
    inst = small(samples=40)
    runs = []
    for workers in (1, 1, 2, 2):
        result = get_solver("heuristic")(inst, objective="sync", time_limit=30, seed=3, workers=workers,
                                          temperatures=4, steps_per_temperature=10, replicas=8,
                                          report_baseline=False)
        assert_checked(inst, result)
        runs.append(result.plan.layout.cell_of)
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[2], runs[3])


def test_progress_is_logged_at_info(caplog):
    """INFO on ``rp_opt.progress`` (``rp-opt plan``'s stderr): the run logs its best seed,
    then the best energy whenever a round lowers it (and each refine round), never rising,
    above the primary's bound; the last energy is the plan's."""
    import logging
    import re

    inst = small(samples=40)
    with caplog.at_level(logging.INFO, logger="rp_opt"):
        result = get_solver("heuristic")(inst, objective="sync", time_limit=30, seed=3, workers=1,
                                          temperatures=4, steps_per_temperature=10, replicas=8,
                                          report_baseline=False)
    assert_checked(inst, result)
    lines = [r.getMessage() for r in caplog.records if r.name == "rp_opt.progress"]
    assert lines and "best seed" in lines[0], lines
    found = [re.search(r"energy ([0-9.e+]+) \(bound ([0-9.e+]+)\)", line) for line in lines]
    energies = [float(m.group(1)) for m in found]
    assert energies == sorted(energies, reverse=True)
    assert all(float(m.group(2)) <= e * (1 + 1e-9) for m, e in zip(found, energies))
    assert float(found[-1].group(2)) == pytest.approx(result.bound)
    assert energies[-1] == pytest.approx(result.stats["energy"], rel=1e-7)


def test_fixed_schedule_ignores_the_time_limit():
    """With temperatures=N the run does the same work whatever the limit: every seed rule
    (the greedy too, which a timed run skips when the limit is short), the same plan."""
    inst = small(samples=40)
    runs = []
    for limit in (0.001, 30.0):
        result = get_solver("heuristic")(inst, objective="sync", time_limit=limit, seed=3, workers=1,
                                          temperatures=3, steps_per_temperature=10, replicas=4,
                                          report_baseline=False)
        assert_checked(inst, result)
        assert "greedy" in result.stats["seeds"], result.stats["seeds"]
        assert result.stats["temperatures"] == 3  # the schedule's N steps, not N + 1
        runs.append(result.plan.layout.cell_of)
    np.testing.assert_array_equal(runs[0], runs[1])


def test_warm_start_never_worse_and_improves_baseline():
    """From the baseline's plan the heuristic returns a plan at least as good as it."""
    inst = small(samples=40)
    base = get_solver("lpt-ffd")(inst, objective="sync")
    result = get_solver("heuristic")(inst, objective="sync", time_limit=0.6, seed=0, warm_start=base.plan, workers=1)
    assert_checked(inst, result)
    assert result.score <= base.score
    assert result.stats["baseline_score"] and "improvement" in result.stats
    assert result.bound is not None and result.bound <= result.score[0]


@pytest.mark.parametrize("seed", [0, 1])
def test_tiny_window_reaches_brute_force_optimum(seed):
    """N=7 samples on 4 cells (D=2, G=2, R*=2): the heuristic (fixed identity placement)
    reaches the optimum of exhaustive enumeration (sample 0 in cell 0 is w.l.o.g.: every
    cell is interchangeable with cell 0 under a row swap and a shard swap... only for the
    primary; so enumeration is over all assignments when the symmetry does not hold)."""
    inst = synth.generate(model="ling-flash-like", samples=7, dp=2, edp=2, ep=2, capacity=4096, layers=3,
                          experts=4, top_k=2, seed=seed)
    placement = Placement.identity(3, 4, 2)
    rows, _, _ = certified_rows(inst, 5.0)
    # full enumeration (no symmetry assumption): 4^7 = 16384 assignments
    n, cells = inst.window.num_samples, rows * inst.cluster.dp
    demand = rank_demand(inst.window, placement)
    best = None
    for assign in itertools.product(range(cells), repeat=n):
        lay = Layout(np.array(assign), rows, inst.cluster.dp)
        if np.bincount(lay.cell_of, minlength=cells).min() == 0:
            continue
        if layout_violation(inst, lay, rows) is not None:
            continue
        value = score(inst, placement, lay, "sync", demand)
        best = value if best is None or value < best else best
    result = get_solver("heuristic")(inst, objective="sync", time_limit=0.8, seed=seed, placement=placement,
                                      workers=1)
    assert_checked(inst, result)
    assert result.score[0] == pytest.approx(best[0], rel=1e-9)


def test_bad_warm_start_is_one_line_input_error():
    """A warm start for another window is rejected naming the field."""
    from rp_opt.errors import InputError

    inst = small(samples=40)
    other = small(samples=41)
    plan = get_solver("baseline")(other, objective="sync").plan
    with pytest.raises(InputError, match="warm_start"):
        get_solver("heuristic")(inst, warm_start=plan, time_limit=0.5, workers=1)


def test_heuristic_time_limit_covers_the_plan():
    """The plan's seconds (placement, R*, seeds, anneal, search, scoring, bounds) stay near
    the time limit (within 50 %: a gross overrun, not the machine's load, fails it; auto
    once took 1.93 s here with other tests before it); the baseline report is timed apart
    and the search made the plan."""
    inst = synth.generate(model="ling-flash-like", samples=256, dp=16, edp=4, ep=4, capacity=8192, layers=8,
                          experts=16, seed=4)
    result = get_solver("heuristic")(inst, objective="sync", time_limit=1.5, seed=0, workers=1)
    assert_checked(inst, result)
    assert result.seconds <= 1.5 * 1.5
    assert "report_seconds" in result.stats and result.stats["timings"]["search"] > 0
    assert result.stats["energy"] <= result.stats["anneal_energy"]
    assert result.bound <= result.score[0]
    auto = get_solver("auto")(inst, objective="sync", time_limit=1.5, seed=0, workers=1)
    assert auto.stats["auto_choice"] == "heuristic" and "too large" in auto.stats["auto_reason"]
    assert_checked(inst, auto)
    assert auto.seconds <= 1.5 * 1.5


def test_others_running_sees_a_busy_process_at_once():
    """The second search process's rule reads the threads running now (not the lagging
    1-min load average): a CPU-bound child counts at once, and none after it ends."""
    import subprocess
    import sys
    import time

    before = others_running()
    if before is None:
        pytest.skip("no /proc/loadavg here")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        assert others_running(samples=9) >= 1
    finally:
        busy.kill()
        busy.wait()
    assert others_running(samples=9) <= before + 1


def test_cycles_use_the_time_a_converged_search_leaves():
    """A 40-sample window's block search ends at a local optimum long before a 2-s limit
    (the README's default window at 10 s ended at 6.5 s before cycles): by default the
    heuristic then runs further cycles of anneal, search and placement refinement from its
    best plan (``stats["cycles"]``, every refine round in ``stats["refine"]``), each plan
    checked; ``cycles=False`` keeps one cycle, and so do a cap on the searches
    (``search_evaluations``) and a fixed schedule, whose two runs stay equal."""
    inst = small(samples=40, seed=3)
    res = heuristic(inst, objective="sync", time_limit=2.0, seed=0, report_baseline=False)
    assert_checked(inst, res)
    assert res.stats["cycles"] >= 2 and len(res.stats["refine"]) >= 2
    one = heuristic(inst, objective="sync", time_limit=2.0, seed=0, cycles=False, report_baseline=False)
    assert_checked(inst, one)
    assert one.stats["cycles"] == 1 and len(one.stats["refine"]) == 1
    capped = heuristic(inst, objective="sync", time_limit=2.0, seed=0, search_evaluations=5,
                              report_baseline=False)
    assert_checked(inst, capped)
    assert capped.stats["cycles"] == 1
    fixed = [heuristic(inst, objective="sync", seed=0, temperatures=4, replicas=8, report_baseline=False)
             for _ in range(2)]
    for res in fixed:
        assert_checked(inst, res)
        assert res.stats["cycles"] == 1
    assert fixed[0].score == fixed[1].score
