"""CP-SAT's ``solve`` and Ctrl-C.

Left to itself, CP-SAT catches Ctrl-C with a C-level SIGINT handler: the search stops as
at its time limit, nothing tells the caller, and the handler it leaves behind (the
default action) kills the process at a later Ctrl-C. :func:`solve` turns that off and
runs the search through :func:`rp_opt._stoppable.call_stoppable`, so that the main thread
keeps Python's handler: a Ctrl-C stops the search (``stop_search``) and is then either
raised as the usual :class:`KeyboardInterrupt` or, for callers that return the best plan
found so far, reported by :func:`interrupted`.
"""

from __future__ import annotations

from ._stoppable import call_stoppable

_FLAG = "_rp_opt_interrupted"


def solve(solver, model, callback=None, *, on_interrupt: str = "raise") -> int:
    """``solver.solve(model, callback)`` with Ctrl-C stopping the search.

    ``on_interrupt``: ``"raise"`` (KeyboardInterrupt once the search has stopped) or
    ``"return"`` (the status of the stopped search; :func:`interrupted` is then true for
    ``solver``). Outside the main thread the solve runs as it is, without CP-SAT's handler.
    """
    solver.parameters.catch_sigint_signal = False
    status, stopped = call_stoppable(lambda: solver.solve(model, callback), solver.stop_search)
    mark_interrupted(solver, stopped)
    if stopped and on_interrupt == "raise":
        raise KeyboardInterrupt("CP-SAT search interrupted (Ctrl-C)")
    return status


def mark_interrupted(solver, stopped: bool) -> None:
    """Record for :func:`interrupted` whether Ctrl-C stopped ``solver`` (also an object that
    stands for a solver, e.g. a search split over processes)."""
    setattr(solver, _FLAG, bool(stopped))


def interrupted(solver) -> bool:
    """Whether Ctrl-C stopped ``solver``'s last :func:`solve`."""
    return bool(getattr(solver, _FLAG, False))
