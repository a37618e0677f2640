"""Forked workers and shared memory (rp_opt.packing.workers): nothing outlives a Ctrl-C or a killed parent."""

from __future__ import annotations

import pytest

from rp_opt.solvers import get_solver
from tests.helpers import interrupt_at, assert_checked, small


@pytest.mark.parametrize("where,nth", [("segment", 1), ("segment", 5), ("segment", 12), ("join", 1), ("join", 2)])
def test_ctrl_c_anywhere_leaves_no_worker_or_shared_memory(monkeypatch, where, nth):
    """A Ctrl-C that lands while the heuristic creates its shared arrays (anneal or parallel
    search) or joins its worker processes: the run still returns a checked plan, marked
    interrupted, and leaves no live worker and no linked shared-memory segment."""
    import multiprocessing
    import os

    inst = small(samples=48)
    made = interrupt_at(monkeypatch, where, nth)
    result = get_solver("heuristic")(inst, objective="sync", time_limit=1.0, seed=0, workers=2,
                                      search_workers=2, anneal_share=0.3, report_baseline=False)
    monkeypatch.undo()
    assert_checked(inst, result)
    assert result.stats["interrupted"] is True
    assert made and not [n for n in made if os.path.exists("/dev/shm/" + n.lstrip("/"))]
    assert multiprocessing.active_children() == []


def _alive(pid: int) -> bool:
    """``pid`` runs (exists and is not a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (Linux /proc)."""
    import os

    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry))
    return out


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux")
def test_workers_end_when_the_planner_is_killed():
    """A planner killed from outside (SIGKILL: no chance to stop its workers) leaves no
    worker running: each forked worker gets SIGTERM when its parent dies (they used to
    keep a core busy, orphaned, since they hold copies of the parent's pipe ends)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = ("import sys; sys.path.insert(0, 'tests')\n"
            "from conftest import random_instance\n"
            "from rp_opt.solvers import get_solver\n"
            "inst = random_instance(0, n=400, layers=4, experts=16, dp=8, edp=2, ep=4, capacity=4096)\n"
            "print('start', flush=True)\n"
            "get_solver('heuristic')(inst, time_limit=60, seed=0, workers=2, search_workers=2)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        assert proc.stdout.readline().strip() == "start"
        deadline = time.time() + 30
        while len(_children(proc.pid)) < 2 and time.time() < deadline:  # a worker and shm's tracker
            time.sleep(0.2)
        kids = _children(proc.pid)
        assert kids, "the planner started no worker"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.time() + 10
    while any(_alive(k) for k in kids) and time.time() < deadline:
        time.sleep(0.2)
    alive = [k for k in kids if _alive(k)]
    for k in alive:
        os.kill(k, signal.SIGKILL)
    assert not alive
