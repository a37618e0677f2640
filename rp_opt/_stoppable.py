"""Solver calls that a Ctrl-C stops without losing their answer.

A native solver (CP-SAT, HiGHS) holds the calling thread until it ends, so Python sees a
Ctrl-C only afterwards. :func:`call_stoppable` runs the call in a thread and waits in the
caller's: a Ctrl-C there asks the solver to stop (its own cancel function) and still
returns what the solver had found by then.
"""

from __future__ import annotations

import threading
from typing import Any, Callable


def call_stoppable(call: Callable[[], Any], stop: Callable[[], Any]) -> tuple[Any, bool]:
    """``(call(), stopped)``: ``call`` runs in a thread; after a Ctrl-C while it runs,
    ``stop`` is called every 0.1 s until ``call`` returns (a solver may not be ready to stop
    at the first one, e.g. while its model is still being built), and ``stopped`` is True.
    Outside the main thread, where Python takes no signals, ``call`` runs as it is. An
    exception raised by ``call`` is raised here."""
    if threading.current_thread() is not threading.main_thread():
        return call(), False
    box, done = {}, threading.Event()

    def run():
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="rp-opt solver", daemon=True).start()
    stopped = False
    # an Event, not Thread.join: a join that Ctrl-C interrupts can leave the thread
    # marked as ended while it still runs (CPython 3.11)
    while not done.is_set():
        try:
            done.wait(0.1 if stopped else None)
        except KeyboardInterrupt:
            stopped = True
        if stopped:
            stop()
    if "error" in box:
        raise box["error"]
    return box["value"], stopped
