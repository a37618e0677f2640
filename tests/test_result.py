"""Tests of the common result shape (rp_opt.result)."""

import math

import pytest

from rp_opt.result import relative_gap


@pytest.mark.parametrize("score, bound, gap", [
    (100.0, 99.0, 0.01),          # (score - bound) / |score|
    (100.0, 101.0, 0.0),          # a bound above the score (rounding) is no negative gap
    (0.0, 0.0, 0.0),
    (0.0, -1.0, None),
    (None, 1.0, None),
    (1.0, None, None),
    (math.inf, 1.0, None),        # gave nan, and max(0, nan) read as a gap of 0
    (1.0, -math.inf, None),
    (math.nan, 1.0, None),
])
def test_relative_gap(score, bound, gap):
    out = relative_gap(score, bound)
    assert out == pytest.approx(gap) if gap is not None else out is None
