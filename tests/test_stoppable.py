"""rp_opt._stoppable: solver calls stopped by a Ctrl-C or given up after a time limit."""

from __future__ import annotations

import threading
import time

import pytest

from rp_opt._stoppable import GRACE_SECONDS, Abandoned, call_stoppable


def test_a_call_that_stops_when_asked_returns_its_answer():
    """At ``give_up_after`` the stop is asked for; a call that honours it returns its
    answer, and ``stopped`` stays False (a time limit, not a Ctrl-C)."""
    told = threading.Event()
    start = time.perf_counter()
    value, stopped = call_stoppable(lambda: "stopped" if told.wait(10) else "ran out", told.set, give_up_after=0.3)
    assert value == "stopped" and not stopped
    assert 0.3 <= time.perf_counter() - start < 1.0


def test_a_call_that_ignores_its_stop_is_abandoned():
    """A call that does not stop (HiGHS between its clock checks) is given up
    :data:`GRACE_SECONDS` after the stop was asked for, and asked again meanwhile."""
    asks = []
    release = threading.Event()
    start = time.perf_counter()
    with pytest.raises(Abandoned, match="past its 0.2-s limit"):
        call_stoppable(lambda: release.wait(10), lambda: asks.append(time.perf_counter()), give_up_after=0.2)
    took = time.perf_counter() - start
    release.set()
    assert 0.2 + GRACE_SECONDS <= took < 0.2 + GRACE_SECONDS + 0.5
    assert len(asks) >= 5 and asks[0] - start >= 0.2


def test_without_a_limit_the_answer_and_errors_come_back():
    """No limit: the call's value, or its exception, as if called directly."""
    assert call_stoppable(lambda: 42, lambda: None) == (42, False)
    with pytest.raises(ZeroDivisionError):
        call_stoppable(lambda: 1 / 0, lambda: None, give_up_after=5.0)


def test_outside_the_main_thread_the_limit_still_holds():
    """Python takes no signals outside the main thread, so the call ran there directly;
    with ``give_up_after`` it still runs in a thread of its own, and is given up."""
    out = {}

    def worker():
        try:
            call_stoppable(lambda: time.sleep(3) or "late", lambda: None, give_up_after=0.1)
        except Abandoned:
            out["abandoned"] = True

    t = threading.Thread(target=worker)
    t.start()
    t.join(5)
    assert out == {"abandoned": True}
    assert call_stoppable(lambda: "direct", lambda: None) == ("direct", False)


def test_a_ctrl_c_is_not_lost_when_the_call_is_given_up(ctrl_c):
    """A Ctrl-C before the limit, then a call that stops neither for it nor for the limit:
    KeyboardInterrupt, not the time limit's :class:`Abandoned`."""
    release = threading.Event()
    ctrl_c(0.2)
    with pytest.raises(KeyboardInterrupt, match="past its 0.5-s limit"):
        call_stoppable(lambda: release.wait(10), lambda: None, give_up_after=0.5)
    release.set()


def test_a_limit_beyond_what_a_wait_takes_is_no_error():
    """``give_up_after`` above ``threading.TIMEOUT_MAX`` (about 292 years): the call's
    answer, not an OverflowError with the call left running."""
    assert call_stoppable(lambda: 5, lambda: None, give_up_after=1e12) == (5, False)


def test_the_interpreter_waits_at_exit_for_a_call_it_gave_up():
    """A given-up call runs on in a daemon thread; a native solver that comes back into
    Python while the interpreter shuts down aborts the process (exit 134). The exit hook
    asks it to stop again and waits for it: here a call that ends by itself 1.5 s in
    finishes (its print comes out) and the process exits 0."""
    import subprocess
    import sys

    script = (
        "import time\n"
        "from rp_opt._stoppable import Abandoned, call_stoppable\n"
        "try:\n"
        "    call_stoppable(lambda: time.sleep(1.5) or print('finished', flush=True), lambda: None,"
        " give_up_after=0.1)\n"
        "except Abandoned:\n"
        "    print('abandoned', flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["abandoned", "finished"]


def test_a_ctrl_c_during_the_pyomo_import_leaves_no_half_made_pyomo():
    """A Ctrl-C while Pyomo imports (its first use in a process: the HiGHS models) left
    ``pyomo.common`` without ``errors`` in ``sys.modules``, and every later HiGHS model in
    the process failed with an AttributeError. In a fresh interpreter, a Ctrl-C raised
    from inside that import is passed on, and the next call imports Pyomo and builds a
    model."""
    import subprocess
    import sys

    code = """
import builtins, sys
from rp_opt._highs import import_pyomo
real = builtins.__import__
def interrupting(name, *args, **kwargs):
    if name == "pyomo.common.errors":  # a module Pyomo imports early
        raise KeyboardInterrupt
    return real(name, *args, **kwargs)
builtins.__import__ = interrupting
try:
    import_pyomo()
except KeyboardInterrupt:
    print("interrupted", any(n.startswith("pyomo") for n in sys.modules))
builtins.__import__ = real
import_pyomo()
import pyomo.environ as pe
m = pe.ConcreteModel(); m.x = pe.Var(); print("built", type(m.x).__name__)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["interrupted", "False", "built", "ScalarVar"]


def test_the_ctrl_c_fixture_resends_a_ctrl_c_dropped_in_a_finalizer(ctrl_c):
    """Python drops a KeyboardInterrupt raised inside a weakref callback ("Exception
    ignored in"): a Ctrl-C that lands there reaches no code (one CI run lost the test's
    Ctrl-C so). The fixture sends it again; the code under test then sees it."""
    import os
    import signal
    import time
    import weakref

    class Thing:
        pass

    def finalizer(ref):
        os.kill(os.getpid(), signal.SIGINT)   # raised in here, and dropped
        time.sleep(0.05)

    with pytest.raises(KeyboardInterrupt):
        thing = Thing()
        ref = weakref.ref(thing, finalizer)
        del thing
        time.sleep(5)                          # the resent Ctrl-C lands here
    assert ref() is None
