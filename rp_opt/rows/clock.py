"""Deadlines inside the certifier's model builds.

HiGHS and CP-SAT keep to their own time limits, but only once they run: building a model
(Python loops over items, bins or arcs) and the solvers' set-up before they first read
their clock are not timed: at capacity C = 2^31 - 1 (no arc-flow graph) the CP-SAT
assignment model of 600 lengths took 1.26 s to build and solve against a 0.5-s limit. The
builders check :func:`past` (or iterate through :func:`ticking`) and give up with
:class:`OutOfTime`; the stages skip a model whose fixed cost alone (``*_SECONDS_PER_*``)
exceeds the time left (:func:`cpsat_deadline`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Callable, TypeVar

__all__ = ["CPSAT_BUILD_SECONDS_PER_VAR", "CPSAT_UNTIMED_SECONDS_PER_VAR", "OutOfTime", "build_and_solve",
           "cpsat_deadline", "past", "ticking"]

T = TypeVar("T")

# CP-SAT models are built in Python loops at 4-7 us per variable with its constraints (0.65 s
# for the 94k booleans of 600 items in 185 bins, 0.17 s for hard28's 40k flow arcs): with
# less than half that per variable left a model cannot be built and solved, so it is not
# started. Untimed by anyone: CP-SAT's set-up past its own limit (0.4-1.2 us per variable)
# and freeing the Python model afterwards (0.4-0.7 us), kept back from the build and solve
CPSAT_BUILD_SECONDS_PER_VAR = 3e-6
CPSAT_UNTIMED_SECONDS_PER_VAR = 1.5e-6
CHECK_EVERY = 1024    # loop items between clock reads (a read costs ~0.1 us; an item ~2-5 us)


class OutOfTime(RuntimeError):
    """The clock passed the caller's deadline while a graph or model was being built."""


def past(deadline: float | None) -> bool:
    """True when ``deadline`` (a ``time.perf_counter()`` value; None: no deadline) has passed."""
    return deadline is not None and time.perf_counter() > deadline


def cpsat_deadline(start: float, time_limit: float, num_vars: int) -> float | None:
    """When the build and solve of a CP-SAT model of ``num_vars`` variables, started at
    ``start`` (``time.perf_counter()``) with ``time_limit`` seconds, must end so that the
    untimed set-up and clean-up still end by ``start + time_limit``; None when the time
    cannot even cover the build (:data:`CPSAT_BUILD_SECONDS_PER_VAR`)."""
    if time_limit <= (CPSAT_BUILD_SECONDS_PER_VAR + CPSAT_UNTIMED_SECONDS_PER_VAR) * num_vars:
        return None
    return start + time_limit - CPSAT_UNTIMED_SECONDS_PER_VAR * num_vars


def ticking(items: Iterable[T], deadline: float | None, every: int = CHECK_EVERY) -> Iterator[T]:
    """``items``, reading the clock every ``every`` of them.

    Raises
    ------
    OutOfTime
        When ``deadline`` has passed at a check.
    """
    for k, item in enumerate(items):
        if k % every == 0 and past(deadline):
            raise OutOfTime("model build passed its deadline")
        yield item


def build_and_solve(start: float, time_limit: float, num_vars: int, build: Callable, workers: int, what: str):
    """Build a CP-SAT model with ``build(deadline)`` and solve it, all within ``time_limit``
    seconds from ``start``: not built when the time cannot cover the build
    (:func:`cpsat_deadline`), abandoned when the build passes its deadline, not solved
    when no time is left after it.

    ``build`` returns ``(model, *parts)``, or None (the builder's own answer, e.g. no
    packing can exist). Returns None when the model was not solved for lack of time (the
    answer is "unknown"), ``(None, None, None)`` when ``build`` returned None, else
    ``(parts, solver, status)``. ``what`` names the model in the debug log.
    """
    from ortools.sat.python import cp_model

    from .._cpsat import solve

    log = logging.getLogger("rp_opt")
    deadline = cpsat_deadline(start, float(time_limit), num_vars)
    if deadline is None:
        log.debug("rows: %s skipped, %.3f s left", what, time_limit)
        return None
    try:
        built = build(deadline)
    except OutOfTime:
        log.debug("rows: %s not built in %.3f s", what, time_limit)
        return None
    if built is None:
        return None, None, None
    left = deadline - time.perf_counter()
    if left <= 0:
        return None
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = left
    solver.parameters.num_workers = workers
    return built[1:], solver, solve(solver, built[0])
