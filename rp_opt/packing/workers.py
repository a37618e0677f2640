"""Forked worker processes and shared-memory segments, for the anneal's replica blocks
(:mod:`.anneal`) and the parallel block search (:mod:`.improve`).

A worker leaves Ctrl-C to its parent and ends with it; the parent stops its workers
through their pipes and unlinks every segment it made, whatever interrupts it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal


def stop_workers(conns, procs) -> None:
    """Tell worker processes to stop (``None`` on their pipe), then join them (terminate
    after 5 s); a worker that already died is skipped. A Ctrl-C in the middle does not
    leave a worker behind: every worker is still stopped (terminated, if need be), and the
    KeyboardInterrupt is raised at the end."""
    pending = None
    for conn in conns:
        try:
            conn.send(None)
            conn.close()
        except (BrokenPipeError, OSError):
            pass
        except KeyboardInterrupt as exc:
            pending = exc
    for proc in procs:
        try:
            proc.join(timeout=5 if pending is None else 0.5)
        except KeyboardInterrupt as exc:
            pending = exc
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=1)
    if pending is not None:
        raise pending


def new_segment(size: int):
    """A new shared-memory segment of ``size`` bytes (>= 1) under a name chosen here, so that
    a Ctrl-C that lands inside its creation (after the segment exists, before the caller
    holds it) can still unlink it. The name is short: macOS allows 30 characters."""
    import secrets
    from multiprocessing import shared_memory

    name = f"rp{os.getpid() % 10 ** 6}_{secrets.token_hex(6)}"
    try:
        return shared_memory.SharedMemory(name=name, create=True, size=max(1, int(size)))
    except FileExistsError:  # another's segment (48 random bits: not ours to unlink)
        raise
    except BaseException:
        try:
            orphan = shared_memory.SharedMemory(name=name)
            orphan.close()
            orphan.unlink()
        except (FileNotFoundError, OSError, ValueError):
            pass  # it was never made
        raise


def release(segments: list) -> None:
    """Close and unlink shared-memory ``segments`` (all of them, whatever happens to one:
    a segment left linked outlives the process until Python's resource tracker notices)."""
    pending = None
    for shm in segments:
        try:
            shm.close()
        except BufferError:  # an array still views it: unlinking below frees the name
            pass
        except KeyboardInterrupt as exc:
            pending = exc
        try:
            shm.unlink()
        except FileNotFoundError:
            pass
        except KeyboardInterrupt as exc:
            pending = exc
    segments.clear()
    if pending is not None:
        raise pending


def quiet_worker() -> None:
    """In a forked worker: leave Ctrl-C (SIGINT to the process group) to the parent, which
    stops the workers through their pipes (:func:`stop_workers`) and keeps its best plan;
    and end with the parent (:func:`_die_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()


def _die_with_parent() -> None:
    """Linux: SIGTERM this worker when its parent dies. A parent killed from outside
    (SIGKILL) cannot stop its workers, and a forked worker holds copies of the parent's
    pipe ends, so it would never read EOF and keep a core busy, orphaned (found by review
    helper-32). Elsewhere the EOF of the pipe is the only signal."""
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    except (OSError, AttributeError):
        return
    parent = mp.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(0)  # the parent died before prctl took effect


def worker_tasks(conn):
    """In a forked worker (:func:`quiet_worker` applied): the tasks the parent sends on
    ``conn`` until it sends None or is gone; the pipe is closed at the end."""
    quiet_worker()
    try:
        while True:
            try:
                task = conn.recv()
            except EOFError:  # the parent is gone
                return
            if task is None:
                return
            yield task
    finally:
        conn.close()


