"""CP-SAT's ``solve`` catches Ctrl-C (the search stops as at its time limit) with a C-level
SIGINT handler that it resets to the default action when it returns, which kills the
process: a later Ctrl-C (e.g. while the heuristic runs after the exact solver in ``auto``)
would end the process without a KeyboardInterrupt and lose the best plan found so far.
:func:`solve` puts Python's own handler back after every solve.
"""

from __future__ import annotations

import signal
import threading


def solve(solver, model, callback=None) -> int:
    """``solver.solve(model, callback)``, then Python's SIGINT handler re-installed (main
    thread only: elsewhere signal handlers cannot be set, and Python's stays as it was)."""
    try:
        return solver.solve(model, callback)
    finally:
        if threading.current_thread() is threading.main_thread():
            handler = signal.getsignal(signal.SIGINT)
            if handler is not None:
                signal.signal(signal.SIGINT, handler)
