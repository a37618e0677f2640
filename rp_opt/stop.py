"""Stopping criteria: small objects combined with ``|`` (stop when any says stop).

A criterion is called once per iteration with the best score found so far and returns
True to stop::

    stop = MaxSeconds(2.0) | NoImprovement(50)
    while not stop(best):
        ...
"""

from __future__ import annotations

import time


class StoppingCriterion:
    """Base class; subclasses implement ``__call__(best) -> bool``."""

    def __call__(self, best) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def __or__(self, other: "StoppingCriterion") -> "AnyOf":
        return AnyOf(self, other)


class AnyOf(StoppingCriterion):
    """Stops when any of its criteria stops."""

    def __init__(self, *criteria: StoppingCriterion):
        self.criteria = []
        for c in criteria:
            self.criteria.extend(c.criteria if isinstance(c, AnyOf) else [c])

    def __call__(self, best) -> bool:
        # evaluate all so every counter advances in step
        return any([c(best) for c in self.criteria])


class MaxSeconds(StoppingCriterion):
    """Stops once ``seconds`` of wall time have passed since the first call."""

    def __init__(self, seconds: float):
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
        self.iterations = int(iterations)
        self._count = 0

    def __call__(self, best) -> bool:
        self._count += 1
        return self._count > self.iterations


class NoImprovement(StoppingCriterion):
    """Stops after ``iterations`` consecutive calls without a strictly better ``best``."""

    def __init__(self, iterations: int):
        self.iterations = int(iterations)
        self._best = None
        self._stale = 0

    def __call__(self, best) -> bool:
        if self._best is None or best < self._best:
            self._best = best
            self._stale = 0
        else:
            self._stale += 1
        return self._stale >= self.iterations
