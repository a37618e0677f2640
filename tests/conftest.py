"""Shared fixtures: tiny hand-checkable windows and small synthetic ones."""

from __future__ import annotations

import numpy as np
import pytest

from rp_opt import Cluster, CostModel, Instance, Stage, Window
from rp_opt.synth import cap_counts


def hand_instance() -> Instance:
    """4 samples, 2 layers, 4 experts, top-1; D=2, G=1, P=2, C=4.

    lengths T = [3, 1, 2, 2], Q = T^2 = [9, 1, 4, 4].
    Stages: "proj" (1 layer, alpha=1, beta=0) and "score" (2 layers, alpha=0, beta=1);
    gamma = 0.5.
    """
    demand = np.array([
        [[3, 0, 0, 0], [0, 1, 2, 0]],
        [[0, 0, 1, 0], [1, 0, 0, 0]],
        [[1, 1, 0, 0], [0, 0, 0, 2]],
        [[0, 0, 0, 2], [0, 2, 0, 0]],
    ])
    window = Window(np.array([3, 1, 2, 2]), demand, top_k=1)
    cost = CostModel((Stage("proj", 1, 1.0, 0.0), Stage("score", 2, 0.0, 1.0)), gamma=0.5)
    return Instance(window, Cluster(dp=2, edp=1, ep=2, capacity=4), cost)


def random_instance(seed: int, n: int = 12, layers: int = 3, experts: int = 8, dp: int = 2, edp: int = 1,
                    ep: int = 2, capacity: int = 64, m: int | None = None) -> Instance:
    """A small random instance with skewed routing (numpy only, deterministic for seed)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, capacity // 2 + 1, n)
    popularity = rng.dirichlet(np.full(experts, 0.5), size=layers)
    demand = np.stack([rng.multinomial(2 * t, popularity[l]) for t in lengths for l in range(layers)])
    # a token picks 2 distinct experts: at most T_i per expert (excess drawn again)
    demand = cap_counts(demand, np.repeat(lengths, layers), np.tile(popularity, (n, 1)), rng)
    demand = demand.reshape(n, layers, experts)
    window = Window(lengths, demand, top_k=2)
    cost = CostModel((Stage("lin", 2, 1.0, 0.0), Stage("soft", 1, 0.5, 0.01)), gamma=0.3)
    return Instance(window, Cluster(dp, edp, ep, capacity, m), cost)


@pytest.fixture
def hand():
    return hand_instance()


@pytest.fixture
def ctrl_c():
    """``ctrl_c(seconds)`` sends this process a real Ctrl-C (SIGINT) after ``seconds``,
    under Python's own handler (a solver library run by an earlier test may have replaced
    it); a signal not yet sent is cancelled, and the handler restored, at teardown.

    A KeyboardInterrupt that Python raises inside a finalizer (a weakref callback or
    ``__del__`` running when the signal lands) is dropped ("Exception ignored in"): that
    Ctrl-C reached no code under test, so it is sent again, as a user would press it again
    (one CI run lost it so, and a 30-s heuristic ran to its limit)."""
    import os
    import signal
    import sys
    import threading

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timers = []

    def arm(seconds):
        timers.append(threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT)))
        timers[-1].start()

    hook = sys.unraisablehook

    def resend(unraisable):
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            arm(0.01)
            return
        hook(unraisable)

    sys.unraisablehook = resend
    yield arm
    sys.unraisablehook = hook
    for timer in timers:
        timer.cancel()
    signal.signal(signal.SIGINT, previous)
