"""Stopping criteria (rp_opt.stop): each alone, combined with ``|``, and their inputs."""

from __future__ import annotations

import math
import time

import pytest

from rp_opt.errors import InputError
from rp_opt.stop import AnyOf, MaxIterations, MaxSeconds, NoImprovement


def calls_until_stop(criterion, values) -> int:
    """How many calls (with ``values`` as the best so far) until ``criterion`` says stop."""
    for k, value in enumerate(values, start=1):
        if criterion(value):
            return k
    return 0


def test_max_iterations_stops_after_n_calls():
    """MaxIterations(3): calls 1-3 go on, the 4th stops; 0 stops at once."""
    assert calls_until_stop(MaxIterations(3), [1.0] * 10) == 4
    assert calls_until_stop(MaxIterations(0), [1.0] * 10) == 1


def test_no_improvement_counts_calls_without_a_strictly_better_best():
    """NoImprovement(2) on 5, 4, 4, 3, 3, 3: 4 and 3 improve (the counter restarts), and
    the second 3 after the improving 3 is the second stale call."""
    assert calls_until_stop(NoImprovement(2), [5, 4, 4, 3, 3, 3]) == 6


def test_a_nan_best_is_no_best():
    """A first best of NaN compared as never beaten: NoImprovement(2) stopped after two
    calls while the best fell. Now the first number after a NaN is an improvement."""
    assert calls_until_stop(NoImprovement(2), [math.nan, 5, 4, 3, 3, 3]) == 6


def test_max_seconds_counts_from_the_first_call():
    """MaxSeconds(0.05): not at the first call, then after 0.05 s; inf never stops."""
    stop = MaxSeconds(0.05)
    assert not stop(1.0)
    time.sleep(0.06)
    assert stop(1.0)
    assert not MaxSeconds(math.inf)(1.0)


def test_any_of_stops_when_one_stops_and_advances_every_counter():
    """MaxIterations(5) | NoImprovement(2) on a constant best: NoImprovement stops at the
    3rd call; both counters advanced at every call (they are all asked)."""
    first, second = MaxIterations(5), NoImprovement(2)
    stop = first | second
    assert isinstance(stop, AnyOf) and calls_until_stop(stop, [1.0] * 10) == 3
    assert first._count == 3


def test_a_criterion_combined_with_itself_counts_once():
    """``m | m`` with MaxIterations(2) stopped after one call (its counter advanced twice
    per call); it is one criterion, asked once per call."""
    m = MaxIterations(2)
    assert calls_until_stop(m | m, [1.0] * 10) == 3
    m2 = MaxIterations(2)
    assert calls_until_stop((m2 | NoImprovement(10)) | m2, [1.0] * 10) == 3


@pytest.mark.parametrize("make, field", [
    (lambda: MaxSeconds(math.nan), "seconds"), (lambda: MaxSeconds(-1), "seconds"),
    (lambda: MaxSeconds("2"), "seconds"), (lambda: MaxSeconds(True), "seconds"),
    (lambda: MaxIterations(2.7), "iterations"), (lambda: MaxIterations(-1), "iterations"),
    (lambda: NoImprovement(0), "iterations"), (lambda: NoImprovement(1.5), "iterations"),
    (lambda: AnyOf(MaxIterations(1), 5), "criteria"),
])
def test_bad_inputs_are_one_line_errors(make, field):
    """NaN seconds never stopped, 2.7 iterations became 2, and a number among the criteria
    failed only at the first call: each is now an InputError naming its field."""
    with pytest.raises(InputError) as info:
        make()
    assert info.value.field == field


def test_or_with_something_else_is_a_type_error_at_once():
    """``criterion | 5`` fails where it is written, not at the first call."""
    with pytest.raises(TypeError):
        MaxIterations(1) | 5


def test_numpy_numbers_are_numbers():
    """MaxSeconds(np.float32(1.5)) and np.int64(2) were refused as not numbers."""
    import numpy as np

    assert MaxSeconds(np.float32(1.5)).seconds == 1.5 and MaxSeconds(np.int64(2)).seconds == 2.0
    assert MaxIterations(np.int64(2)).iterations == 2
    with pytest.raises(InputError):
        MaxSeconds(np.bool_(True))
