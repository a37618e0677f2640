"""Small windows and checks shared by the packing tests."""

from __future__ import annotations

import functools

import numpy as np

from rp_opt import synth
from rp_opt.check import check
from rp_opt.packing.heuristic import certified_rows


def small(samples=40, dp=4, edp=2, m=None, seed=1, capacity=4096):
    """A small synthetic window: L=4 layers, E=8 experts on P=4 ranks."""
    return synth.generate(model="ling-flash-like", samples=samples, dp=dp, edp=edp, ep=4, capacity=capacity,
                          layers=4, experts=8, top_k=2, seed=seed, max_samples_per_cell=m)


@functools.lru_cache(maxsize=None)
def small_rows(samples=48, dp=4, edp=2, m=None, seed=1, capacity=4096):
    """``small(...)`` with its R* and witness (cached: the certifier needs seconds when m is
    set, and the instance is immutable, so tests share one)."""
    inst = small(samples=samples, dp=dp, edp=edp, m=m, seed=seed, capacity=capacity)
    rows, layout, _ = certified_rows(inst, 5.0)
    return inst, rows, layout


def assert_checked(instance, result):
    """The independent checker accepts the plan and agrees with the solver's score."""
    report = check(instance, result.plan)
    assert report.valid, report.violations
    np.testing.assert_allclose(report.score, result.score, rtol=1e-9)


def interrupt_at(monkeypatch, where: str, nth: int) -> list:
    """Make the ``nth`` shared-memory creation (``where="segment"``: right after the segment
    exists, before its creator holds it) or the ``nth`` join of a worker process
    (``"join"``) raise KeyboardInterrupt, as a Ctrl-C landing there does; returns the names
    of the segments created."""
    import multiprocessing.process
    from multiprocessing import shared_memory

    made, joins = [], []
    init, join = shared_memory.SharedMemory.__init__, multiprocessing.process.BaseProcess.join

    def segment(self, name=None, create=False, size=0, **kwargs):
        init(self, name=name, create=create, size=size, **kwargs)
        if create:
            made.append(self.name)
            if where == "segment" and len(made) == nth:
                raise KeyboardInterrupt

    def joining(self, timeout=None):
        joins.append(1)
        if where == "join" and len(joins) == nth:
            raise KeyboardInterrupt
        return join(self, timeout)

    monkeypatch.setattr(shared_memory.SharedMemory, "__init__", segment)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "join", joining)
    return made
