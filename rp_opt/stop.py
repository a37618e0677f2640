"""Stopping criteria: small objects combined with ``|`` (stop when any says stop).

A criterion is called once per iteration with the best score found so far and returns
True to stop::

    stop = MaxSeconds(2.0) | NoImprovement(50)
    while not stop(best):
        ...
"""

from __future__ import annotations

import math
import numbers
import time

import numpy as np

from .errors import integer, require


class StoppingCriterion:
    """Base class; subclasses implement ``__call__(best) -> bool``."""

    def __call__(self, best) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def __or__(self, other: "StoppingCriterion") -> "AnyOf":
        if not isinstance(other, StoppingCriterion):
            return NotImplemented  # TypeError now, not at the first call
        return AnyOf(self, other)


class AnyOf(StoppingCriterion):
    """Stops when any of its criteria stops. A criterion given twice (``m | m``) is asked
    once per call: its counters advance once."""

    def __init__(self, *criteria: StoppingCriterion):
        self.criteria = []
        for c in criteria:
            require(isinstance(c, StoppingCriterion), "criteria",
                    f"must be stopping criteria, got {type(c).__name__}")
            for one in c.criteria if isinstance(c, AnyOf) else [c]:
                if not any(one is seen for seen in self.criteria):
                    self.criteria.append(one)

    def __call__(self, best) -> bool:
        # evaluate all so every counter advances in step
        return any([c(best) for c in self.criteria])


class MaxSeconds(StoppingCriterion):
    """Stops once ``seconds`` of wall time have passed since the first call."""

    def __init__(self, seconds: float):
        ok = isinstance(seconds, numbers.Real) and not isinstance(seconds, (bool, np.bool_)) and not math.isnan(seconds)
        require(ok and seconds >= 0, "seconds", f"must be a number >= 0 (inf: no limit), got {seconds!r}")
        self.seconds = float(seconds)
        self._start: float | None = None

    def __call__(self, best) -> bool:
        now = time.perf_counter()
        if self._start is None:
            self._start = now
        return now - self._start >= self.seconds


class MaxIterations(StoppingCriterion):
    """Stops after ``iterations`` calls."""

    def __init__(self, iterations: int):
        self.iterations = integer("iterations", iterations, 0)
        self._count = 0

    def __call__(self, best) -> bool:
        self._count += 1
        return self._count > self.iterations


class NoImprovement(StoppingCriterion):
    """Stops after ``iterations`` consecutive calls without a strictly better ``best``."""

    def __init__(self, iterations: int):
        self.iterations = integer("iterations", iterations, 1)
        self._best = None
        self._stale = 0

    def __call__(self, best) -> bool:
        # a NaN best so far is no best: the first number after it is an improvement
        if self._best is None or self._best != self._best or best < self._best:
            self._best = best
            self._stale = 0
        else:
            self._stale += 1
        return self._stale >= self.iterations
