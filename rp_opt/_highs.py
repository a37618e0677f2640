"""HiGHS through highspy: its banner, and Ctrl-C.

HiGHS prints a banner on stdout the first time a solver object is made in a process.
Stdout belongs to the caller (``--json`` output, a trainer's logs), so every module that
uses HiGHS calls :func:`silence_banner` on import: the first solver object is then made
with stdout pointing at the null device, and the banner reaches neither stdout nor stderr
(a trainer's logs hold only what goes through the ``rp_opt`` logger). The CLI sends it
to stderr when asked to be verbose before any solver module is imported (``keep=True``).

``Highs.run`` holds the calling thread until HiGHS ends, so a Ctrl-C waited for the end of
the solve; :func:`run` stops it at once (HiGHS's user interrupt, about 2 % slower on an
arc-flow LP of Hard28) and raises KeyboardInterrupt. :func:`solve_pyomo` does the same
for Pyomo's ``appsi_highs`` interface (which turns HiGHS's interrupt on itself).
"""

from __future__ import annotations

import logging
import os
import sys

from ._stoppable import call_stoppable

_done = False


def silence_banner(keep: bool = False) -> None:
    """Make the process's first HiGHS object with stdout sent to stderr (``keep``) or to
    the null device (the default: a library prints nothing outside its logger; once per
    process: later calls do nothing)."""
    global _done
    if _done:
        return
    _done = True
    try:
        import highspy
    except ImportError:  # pragma: no cover - highspy is a core dependency
        return
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # pragma: no cover - no file descriptor 1
        highspy.Highs()
        return
    target = os.dup(2) if keep else os.open(os.devnull, os.O_WRONLY)
    os.dup2(target, 1)
    os.close(target)
    try:
        highspy.Highs()
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def run(h, give_up_after: float | None = None) -> None:
    """``h.run()``, stopped at once by a Ctrl-C, which is then raised as KeyboardInterrupt
    (HiGHS's answer so far stays in ``h``). highspy without user interrupts runs as it is.

    ``give_up_after``: seconds after which the solve is stopped as a Ctrl-C would, and
    :class:`~rp_opt._stoppable.Abandoned` raised when it does not end soon after (HiGHS's
    MIP checks its clock and its interrupt only between some steps of the root node: a
    6-s limit ran to 13 s on a 26,000-arc arc-flow MIP). ``h`` must not be read then: the
    solve runs on in its thread until it reaches such a check."""
    if not hasattr(h, "cancelSolve"):  # pragma: no cover - highspy < 1.8
        h.run()
        return
    h.HandleUserInterrupt = True
    _, stopped = call_stoppable(h.run, h.cancelSolve, give_up_after)
    if stopped:
        raise KeyboardInterrupt("HiGHS solve interrupted (Ctrl-C)")


def solve_pyomo(opt, model, on_interrupt: str = "raise"):
    """``opt.solve(model)`` for a Pyomo ``appsi_highs`` solver, stopped by a Ctrl-C, which is
    then raised as KeyboardInterrupt (``on_interrupt="raise"``), or ``(results, stopped)``
    comes back (``"return"``: Pyomo's results then say nothing of HiGHS's incumbent, which
    ``opt.load_vars()`` still loads when HiGHS had one). The stop goes to the highspy object
    the interface keeps (``_solver_model``; without one, e.g. while Pyomo builds the model,
    it is tried again until the solve ends)."""
    def stop():
        inner = getattr(opt, "_solver_model", None)
        if inner is not None and hasattr(inner, "cancelSolve"):
            inner.cancelSolve()

    # the interface warns of HiGHS's "interrupted" status, which is ours: not shown
    pyomo_log = logging.getLogger("pyomo.contrib.appsi.solvers.highs")
    pyomo_log.addFilter(_drop_interrupt_warning)
    try:
        res, stopped = call_stoppable(lambda: opt.solve(model), stop)
    finally:
        pyomo_log.removeFilter(_drop_interrupt_warning)
    if on_interrupt == "return":
        return res, stopped
    if stopped:
        raise KeyboardInterrupt("HiGHS solve interrupted (Ctrl-C)")
    return res


def _drop_interrupt_warning(record) -> bool:
    return "kInterrupt" not in record.getMessage()


def import_pyomo() -> None:
    """Import the parts of Pyomo that rp-opt uses (about a second, once per process). A
    Ctrl-C during that import leaves Pyomo's packages half made in ``sys.modules`` (e.g.
    ``pyomo.common`` without ``errors``), and every later import of Pyomo in the process
    then fails with an AttributeError: so on a Ctrl-C every Pyomo module is dropped from
    ``sys.modules`` before the KeyboardInterrupt goes on, and the next call imports Pyomo
    afresh."""
    try:
        import pyomo.environ  # noqa: F401
        import pyomo.contrib.appsi.base  # noqa: F401
        import pyomo.contrib.appsi.solvers  # noqa: F401
    except KeyboardInterrupt:
        for name in [n for n in sys.modules if n == "pyomo" or n.startswith("pyomo.")]:
            del sys.modules[name]
        raise
