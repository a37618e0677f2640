"""Solver calls that a Ctrl-C stops without losing their answer.

A native solver (CP-SAT, HiGHS) holds the calling thread until it ends, so Python sees a
Ctrl-C only afterwards. :func:`call_stoppable` runs the call in a thread and waits in the
caller's: a Ctrl-C there asks the solver to stop (its own cancel function) and still
returns what the solver had found by then.
"""

from __future__ import annotations

import atexit
import threading
import time
from typing import Any, Callable


# seconds a call may run on after its stop was asked for at ``give_up_after``
GRACE_SECONDS = 1.0


# seconds the interpreter waits at exit for a call that was given up (see _join_abandoned)
EXIT_WAIT_SECONDS = 30.0

# (thread, stop) of every call given up and maybe still running
_abandoned: list[tuple[threading.Thread, Callable[[], Any]]] = []


class Abandoned(RuntimeError):
    """A call ran past its ``give_up_after`` and did not stop when asked: it runs on in its
    thread until it ends by itself, and nothing of it may be read (it still writes)."""


@atexit.register
def _join_abandoned():
    """Ask every call given up to stop again and wait for it (at most
    :data:`EXIT_WAIT_SECONDS` in all). A native solver that comes back into Python while
    the interpreter shuts down aborts the process (exit 134, "terminate called without an
    active exception"); atexit hooks run before the shutdown starts."""
    end = time.monotonic() + EXIT_WAIT_SECONDS
    for thread, stop in _abandoned:
        while thread.is_alive() and time.monotonic() < end:
            try:
                stop()
            except Exception:  # a solver that is ending may refuse: it ends anyway
                pass
            thread.join(0.1)


def call_stoppable(call: Callable[[], Any], stop: Callable[[], Any],
                   give_up_after: float | None = None) -> tuple[Any, bool]:
    """``(call(), stopped)``: ``call`` runs in a thread; after a Ctrl-C while it runs,
    ``stop`` is called every 0.1 s until ``call`` returns (a solver may not be ready to stop
    at the first one, e.g. while its model is still being built), and ``stopped`` is True.
    Outside the main thread, where Python takes no signals, ``call`` runs as it is unless
    ``give_up_after`` is given. An exception raised by ``call`` is raised here.

    ``give_up_after``: seconds after which ``stop`` is called too (a time limit the solver
    itself may overrun: HiGHS checks its clock only between some steps), and
    :class:`Abandoned` is raised when ``call`` has not returned :data:`GRACE_SECONDS`
    later (KeyboardInterrupt instead when a Ctrl-C came too). ``stopped`` stays False for
    this stop: it is a time limit, not a Ctrl-C.
    """
    if threading.current_thread() is not threading.main_thread() and give_up_after is None:
        return call(), False
    box, done = {}, threading.Event()

    def run():
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=run, name="rp-opt solver", daemon=True)
    thread.start()
    stopped = False
    deadline = None if give_up_after is None else time.monotonic() + max(float(give_up_after), 0.0)
    timed_out = None  # when stop was asked for at the deadline
    # an Event, not Thread.join: a join that Ctrl-C interrupts can leave the thread
    # marked as ended while it still runs (CPython 3.11)
    while not done.is_set():
        wait = 0.1 if stopped or timed_out is not None else None
        if deadline is not None and timed_out is None:
            left = deadline - time.monotonic()
            if left <= 0:
                stop()
                timed_out = time.monotonic()
                continue
            # Event.wait refuses more than threading.TIMEOUT_MAX (about 292 years)
            wait = min(left, threading.TIMEOUT_MAX) if wait is None else min(wait, left)
        try:
            done.wait(wait)
        except KeyboardInterrupt:
            stopped = True
        if stopped or (timed_out is not None and not done.is_set()):
            if timed_out is not None and time.monotonic() - timed_out > GRACE_SECONDS:
                _abandoned.append((thread, stop))
                message = (f"the solver ran {GRACE_SECONDS:g} s past its {give_up_after:g}-s limit "
                           "after being asked to stop")
                if stopped:  # a Ctrl-C came too: it is not lost in a time limit
                    raise KeyboardInterrupt(message)
                raise Abandoned(message)
            try:
                stop()
            except KeyboardInterrupt:  # stop can be Python code: asked again on the next pass
                stopped = True
    if "error" in box:
        raise box["error"]
    return box["value"], stopped
