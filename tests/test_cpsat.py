"""rp_opt._cpsat: CP-SAT solves that a Ctrl-C stops (a real SIGINT to this process)."""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest
from ortools.sat.python import cp_model

from rp_opt._cpsat import interrupted, solve


def _partition_model():
    """Spread 40 random 40-bit weights over 5 bins, the fullest as light as possible: far
    more than a second of search (CP-SAT stops only at its limit or when told)."""
    weights = np.random.default_rng(0).integers(1 << 39, 1 << 40, 40)
    model = cp_model.CpModel()
    x = [[model.new_bool_var(f"x{i}_{b}") for b in range(5)] for i in range(40)]
    for row in x:
        model.add_exactly_one(row)
    top = model.new_int_var(0, int(weights.sum()), "top")
    for b in range(5):
        model.add(sum(int(w) * row[b] for w, row in zip(weights, x)) <= top)
    model.minimize(top)
    return model


@pytest.mark.parametrize("on_interrupt", ["raise", "return"])
def test_ctrl_c_stops_the_search(on_interrupt, ctrl_c):
    """CP-SAT's own handler took Ctrl-C as its time limit and told nobody; :func:`solve`
    stops the search and raises KeyboardInterrupt, or returns what it found with
    :func:`interrupted` true. Python's SIGINT handler stays in place afterwards."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 60.0
    solver.parameters.num_workers = 2
    ctrl_c(1.0)
    start = time.perf_counter()
    if on_interrupt == "raise":
        with pytest.raises(KeyboardInterrupt):
            solve(solver, _partition_model())
    else:
        status = solve(solver, _partition_model(), on_interrupt="return")
        assert status in (cp_model.FEASIBLE, cp_model.UNKNOWN) and interrupted(solver)
    assert time.perf_counter() - start < 10
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_solve_without_ctrl_c_is_not_interrupted():
    """A solve that ends by itself answers as CP-SAT does, and is not marked."""
    model = cp_model.CpModel()
    x = model.new_int_var(0, 10, "x")
    model.add(x >= 3)
    model.minimize(x)
    solver = cp_model.CpSolver()
    assert solve(solver, model, on_interrupt="return") == cp_model.OPTIMAL
    assert solver.value(x) == 3 and not interrupted(solver)
