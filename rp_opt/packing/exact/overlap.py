"""The last solve of a lexicographic sequence, run beside the first.

With two rows, CP-SAT solves levels 1 and 2 as one and level 3 after them
(:meth:`.cpsat_model.CpsatPacking.solve_groups`). Proving level 3 means searching the
layouts at the optimum of levels 1 and 2 once more (9-18 s on the N = 24, G = 2 ``sync``
windows of scripts/bench_exact.py), while the first solve, whose ``fixed`` worker runs
alone, keeps one core busy and the other nearly idle (its LNS thread found none of the
solutions on the N = 32 window). :class:`LastSolve` runs the last solve on a copy of the
model, on that other core, against each new incumbent of the first solve: the levels of
the first solve held at the incumbent's values, as the sequence holds them. When the
first solve ends, the last solve against its final plan is running or done already; a
newer incumbent stops the one running and starts another. Whatever the first solve
proves, the answer is the one the sequence would give.
"""

from __future__ import annotations

import threading
import time

from ortools.sat.python import cp_model

from ..._cpsat import solve as cpsat_solve


class LastSolve:
    """The last solve of the sequence against the incumbents of the first, in a thread.

    Parameters
    ----------
    model
        The CP-SAT model (copied here, and the copy again for every solve).
    held
        The first solve's level expressions, held at each incumbent's values.
    objective
        What the last solve minimises.
    hint_vars
        The variables that fix a layout (hinted from each incumbent).
    make_solver
        ``make_solver(seconds) -> CpSolver``, configured for the last solve.
    deadline
        ``time.perf_counter()`` value at which no solve may still run.
    """

    def __init__(self, model: cp_model.CpModel, held: list, objective, hint_vars: list, make_solver,
                 deadline: float):
        # a copy of its own: the caller goes on adding to ``model`` once the first solve ends
        self._model, self._held, self._objective = model.clone(), held, objective
        self._hint_vars, self._make_solver, self._deadline = hint_vars, make_solver, deadline
        self._cond = threading.Condition()
        self._pending = None   # (generation, values, hint values) of the newest incumbent
        self._running = None   # (generation, solver) of the solve in progress
        self._done = {}        # generation -> (solver, status, seconds, values held)
        self.closed = False    # no more solves (set by close)
        self.generation = 0    # incumbents offered so far
        self.started = 0       # solves started (each newer incumbent stops the one before)
        self._thread = threading.Thread(target=self._loop, name="rp_opt-last-solve", daemon=True)
        self._thread.start()

    def offer(self, values: list[int], hint: list[int]) -> int:
        """A new incumbent of the first solve: its level values and the values of the
        hint variables; returns its generation. Called from CP-SAT's solution callback."""
        with self._cond:
            self.generation += 1
            self._pending = (self.generation, list(values), list(hint))
            if self._running is not None:
                self._running[1].stop_search()
            self._cond.notify_all()
            return self.generation

    def result(self, generation: int, values: list[int]):
        """``(solver, status, seconds)`` of the last solve against incumbent ``generation``
        held at ``values``, once it has ended; None when there is none (the deadline passed
        before it could start, or the values differ from those offered)."""
        with self._cond:
            while generation not in self._done and self._thread.is_alive() and not self._gave_up(generation):
                self._cond.wait(timeout=0.1)
            out = self._done.get(generation)
        return out[:3] if out is not None and out[3] == list(values) else None

    def close(self):
        """Stop whatever runs and end the thread."""
        with self._cond:
            self.closed = True
            if self._running is not None:
                self._running[1].stop_search()
            self._cond.notify_all()
        self._thread.join()

    # -- the thread ----------------------------------------------------------------------
    def _gave_up(self, generation: int) -> bool:
        """No solve against ``generation`` is queued or running (and, as the caller checks,
        none has ended): never offered, or dropped at the deadline. The thread takes an
        incumbent from the queue and starts its solve under the lock, so one of the three
        always holds while it lasts."""
        queued = self._pending is not None and self._pending[0] == generation
        running = self._running is not None and self._running[0] == generation
        return not queued and not running

    def _loop(self):
        while True:
            with self._cond:
                while self._pending is None and not self.closed:
                    self._cond.wait()
                if self.closed:
                    return
                generation, values, hint = self._pending
                self._pending = None
                left = self._deadline - time.perf_counter()
                if left <= 0:
                    self._cond.notify_all()
                    continue
                model = self._model.clone()
                model.clear_hints()
                for var, val in zip(self._hint_vars, hint):
                    model.add_hint(var, val)
                for expr, value in zip(self._held, values):
                    model.add(expr <= value)
                model.minimize(self._objective)
                solver = self._make_solver(left)
                self._running = (generation, solver)
                self.started += 1
            t0 = time.perf_counter()
            status = cpsat_solve(solver, model, _StopWhenStale(self, generation))
            with self._cond:
                self._running = None
                self._done[generation] = (solver, status, time.perf_counter() - t0, values)
                self._cond.notify_all()


class _StopWhenStale(cp_model.CpSolverSolutionCallback):
    """Stops a last solve whose incumbent is no longer the newest at its next solution
    (the hint gives one at once): :meth:`LastSolve.offer` cannot stop a solve that has
    not reached CP-SAT yet."""

    def __init__(self, owner: LastSolve, generation: int):
        super().__init__()
        self._owner, self._generation = owner, generation

    def on_solution_callback(self):
        if self._owner.generation != self._generation or self._owner.closed:
            self.stop_search()
