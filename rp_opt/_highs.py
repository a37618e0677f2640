"""HiGHS prints a banner on stdout the first time a solver object is made in a process.

Stdout belongs to the caller (``--json`` output, a trainer's logs), so every module that
uses HiGHS calls :func:`silence_banner` on import: the first solver object is then made
with stdout pointing at stderr, and the banner never reaches stdout. The CLI drops it
altogether unless asked to be verbose (``keep=True`` sends it to stderr).
"""

from __future__ import annotations

import os
import sys

_done = False


def silence_banner(keep: bool = True) -> None:
    """Make the process's first HiGHS object with stdout sent to stderr (``keep``) or to
    the null device (once per process: later calls do nothing)."""
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
