"""rp_opt._cubes: one CP-SAT search split into cubes that processes search side by side."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from ortools.sat.python import cp_model

from rp_opt import _cubes
from rp_opt._cubes import solve_cubes


def _bins_model(weights, bins):
    """Spread ``weights`` over ``bins`` bins, the fullest as light as possible; returns the
    model, the assignment literals x[i][b] (one true per item: the decision groups) and
    the objective variable."""
    model = cp_model.CpModel()
    x = [[model.new_bool_var(f"x{i}_{b}") for b in range(bins)] for i in range(len(weights))]
    for row in x:
        model.add_exactly_one(row)
    top = model.new_int_var(0, int(sum(weights)), "top")
    for b in range(bins):
        model.add(sum(int(w) * row[b] for w, row in zip(weights, x)) <= top)
    # the first item in bin 0 (symmetry): the first group then has one literal left
    model.add(x[0][0] == 1)
    model.add_decision_strategy([v for row in x for v in row], cp_model.CHOOSE_FIRST, cp_model.SELECT_MAX_VALUE)
    model.minimize(top)
    return model, x, top


def _fullest(weights, values, bins):
    """The fullest bin's load of the assignment ``values`` (x flattened item by item)."""
    assign = np.asarray(values).reshape(len(weights), bins)
    assert (assign.sum(axis=1) == 1).all()
    return int((np.asarray(weights)[:, None] * assign).sum(axis=0).max())


def _groups(x):
    return [[v.index for v in row] for row in x]


@pytest.fixture
def split_at_once(monkeypatch):
    """Cubes split before any search, so that even small models run through the
    processes."""
    monkeypatch.setattr(_cubes, "SLICE_SECONDS", 0.0)
    monkeypatch.setattr(_cubes, "TARGET_CUBES", 12)


def test_cubes_reach_the_optimum_of_one_search(split_at_once):
    """Eleven weights over three bins: the cubes (split over two processes) end with the
    optimum a single CP-SAT search proves, and the values they return are a layout that
    scores it."""
    weights = [31, 29, 23, 19, 17, 13, 11, 7, 5, 3, 2]
    model, x, _ = _bins_model(weights, 3)
    want = [v.index for row in x for v in row]
    search = solve_cubes(model, _groups(x), want, processes=2, time_limit=60)
    reference = cp_model.CpSolver()
    assert reference.solve(_bins_model(weights, 3)[0]) == cp_model.OPTIMAL
    assert search.status == cp_model.OPTIMAL
    assert search.value == round(reference.objective_value) == 54  # 160 / 3 rounded up
    assert search.bound == search.value
    assert _fullest(weights, search.values, 3) == search.value
    assert search.stats["cubes"] > 1 and search.stats["split"] >= 1


def test_a_model_that_ends_in_its_first_slice_starts_no_process():
    """A small model proven within the first slice (in this process) is the answer as it
    is: one search, nothing split."""
    weights = [5, 4, 3, 2]
    model, x, _ = _bins_model(weights, 2)
    search = solve_cubes(model, _groups(x), [v.index for row in x for v in row], processes=2, time_limit=30)
    assert search.status == cp_model.OPTIMAL and search.value == 7
    assert search.stats["cubes"] == 1 and search.stats["split"] == 0


def test_infeasible_in_every_cube(split_at_once):
    """Nine items of weight 10 into three bins of at most 25 each (two per bin at most):
    every cube is infeasible, so the search is, with no values."""
    model, x, top = _bins_model([10] * 9, 3)
    model.add(top <= 25)
    search = solve_cubes(model, _groups(x), [top.index], processes=2, time_limit=30)
    assert search.status == cp_model.INFEASIBLE
    assert search.value is None and search.values is None


def test_time_limit_keeps_the_best_layout_and_a_bound(split_at_once):
    """Forty 40-bit weights over five bins cannot be proven in two seconds: the search
    stops near its limit with a layout, the value it scores, and a bound below it."""
    weights = [int(w) for w in np.random.default_rng(0).integers(1 << 39, 1 << 40, 40)]
    model, x, _ = _bins_model(weights, 5)
    t0 = time.perf_counter()
    search = solve_cubes(model, _groups(x), [v.index for row in x for v in row], processes=2, time_limit=2.0)
    assert time.perf_counter() - t0 < 6.0
    assert search.status == cp_model.FEASIBLE
    assert search.bound <= search.value == _fullest(weights, search.values, 5)


def test_ctrl_c_returns_the_best_so_far(split_at_once, ctrl_c):
    """A Ctrl-C while the cubes run stops them: the best layout found comes back, marked
    interrupted, long before the time limit."""
    weights = [int(w) for w in np.random.default_rng(1).integers(1 << 39, 1 << 40, 40)]
    model, x, _ = _bins_model(weights, 5)
    ctrl_c(1.5)
    t0 = time.perf_counter()
    search = solve_cubes(model, _groups(x), [v.index for row in x for v in row], processes=2, time_limit=60)
    assert time.perf_counter() - t0 < 10
    assert search.stats.get("interrupted") is True
    assert search.status == cp_model.FEASIBLE and search.bound <= search.value


def test_processes_that_end_without_answering_leave_their_cubes_open(split_at_once, monkeypatch):
    """Worker processes that exit at once (here: a command that does nothing else): no hang
    and no error; the cubes they took stay open, so the search is not proven."""
    monkeypatch.setattr(_cubes, "WORKER_COMMAND", [sys.executable, "-c", "pass"])
    model, x, top = _bins_model([31, 29, 23, 19, 17, 13, 11, 7, 5, 3, 2], 3)
    t0 = time.perf_counter()
    search = solve_cubes(model, _groups(x), [top.index], processes=2, time_limit=30)
    assert time.perf_counter() - t0 < 10
    assert search.status == cp_model.UNKNOWN and search.value is None
    assert search.stats["lost"] >= 1


def test_a_script_without_a_main_guard():
    """The processes do not import the caller's main module again (multiprocessing's
    spawn would): a script with its work at top level runs once and gets its answer."""
    code = (
        "import sys; sys.path[:0] = " + repr(sys.path) + "\n"
        "from rp_opt import _cubes\n"
        "_cubes.SLICE_SECONDS = 0.0\n"
        "from tests.test_cubes import _bins_model, _groups\n"
        "model, x, top = _bins_model([31, 29, 23, 19, 17, 13, 11, 7, 5, 3, 2], 3)\n"
        "s = _cubes.solve_cubes(model, _groups(x), [top.index], processes=2, time_limit=60)\n"
        "print('RESULT', s.value, s.stats['cubes'] > 1)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("RESULT") == 1 and "RESULT 54 True" in out.stdout
