"""CP-SAT's ``solve`` and Ctrl-C.

Left to itself, CP-SAT catches Ctrl-C with a C-level SIGINT handler: the search stops as
at its time limit, nothing tells the caller, and the handler it leaves behind (the
default action) kills the process at a later Ctrl-C. :func:`solve` turns that off and
runs the search in a thread instead, so that the main thread keeps Python's handler: a
Ctrl-C stops the search (``stop_search``) and is then either raised as the usual
:class:`KeyboardInterrupt` or, for callers that return the best plan found so far,
reported by :func:`interrupted`.
"""

from __future__ import annotations

import threading

_FLAG = "_rp_opt_interrupted"


def solve(solver, model, callback=None, *, on_interrupt: str = "raise") -> int:
    """``solver.solve(model, callback)`` with Ctrl-C stopping the search.

    ``on_interrupt``: ``"raise"`` (KeyboardInterrupt once the search has stopped) or
    ``"return"`` (the status of the stopped search; :func:`interrupted` is then true for
    ``solver``). Outside the main thread, where Python takes no signals, the solve runs
    as it is, without CP-SAT's handler.
    """
    solver.parameters.catch_sigint_signal = False
    setattr(solver, _FLAG, False)
    if threading.current_thread() is not threading.main_thread():
        return solver.solve(model, callback)
    box, done = {}, threading.Event()

    def search():
        try:
            box["status"] = solver.solve(model, callback)
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=search, name="rp-opt CP-SAT", daemon=True).start()
    stopped = False
    # an Event, not Thread.join: a join that Ctrl-C interrupts can leave the thread
    # marked as ended while it still runs (CPython 3.11)
    while not done.is_set():
        try:
            done.wait()
        except KeyboardInterrupt:
            # stop the search and wait for its answer (a second Ctrl-C lands here again)
            stopped = True
            solver.stop_search()
    if "error" in box:
        raise box["error"]
    if stopped:
        setattr(solver, _FLAG, True)
        if on_interrupt == "raise":
            raise KeyboardInterrupt("CP-SAT search interrupted (Ctrl-C)")
    return box["status"]


def interrupted(solver) -> bool:
    """Whether Ctrl-C stopped ``solver``'s last :func:`solve`."""
    return bool(getattr(solver, _FLAG, False))
