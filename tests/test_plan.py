"""The ``auto`` planner (rp_opt.plan)."""

from __future__ import annotations

import pytest

from rp_opt import synth
from rp_opt.solvers import get_solver
from tests.helpers import assert_checked, small


def test_auto_reports_choice_and_plans_are_valid():
    """auto runs the exact model on a tiny window (heuristic MIP start) and says so."""
    pytest.importorskip("ortools")
    inst = synth.generate(model="ling-flash-like", samples=8, dp=2, edp=1, ep=2, capacity=4096, layers=3,
                          experts=4, top_k=2, seed=2)
    result = get_solver("auto")(inst, objective="sync", time_limit=4.0, seed=0, workers=1)
    assert result.stats["auto_choice"] in ("exact", "heuristic") and result.stats["auto_reason"]
    assert_checked(inst, result)
    heur = result.stats.get("heuristic_score")
    if heur is not None:
        assert result.score <= tuple(heur)


def test_auto_with_a_tiny_limit_on_a_large_window_still_plans():
    """A window too large for the exact model (40 samples: N R D > 400) and a limit of
    1e-4 s: auto hands the heuristic what is left of the limit, kept above 0, and returns
    its plan (regression: the remainder went negative after auto's own checks and the
    heuristic refused it as a bad time_limit)."""
    inst = small(samples=40)
    result = get_solver("auto")(inst, objective="sync", time_limit=1e-4, seed=0, workers=1)
    assert result.stats["auto_choice"] == "heuristic" and "too large" in result.stats["auto_reason"]
    assert_checked(inst, result)


def test_auto_keeps_a_valid_reserve_valid_on_a_large_window():
    """auto accepts any ``reserve`` below its ``time_limit`` (1 s here, reserve 1 s less
    1 ns). On a window too large for the exact model it hands the heuristic what is left
    of the limit, which auto's own checks have already cut below that reserve: the
    heuristic must still get a reserve below its limit and plan, not raise InputError."""
    inst = small(samples=40)
    result = get_solver("auto")(inst, objective="sync", time_limit=1.0, reserve=1.0 - 1e-9, seed=0, workers=1)
    assert result.stats["auto_choice"] == "heuristic" and "too large" in result.stats["auto_reason"]
    assert_checked(inst, result)


def test_auto_keeps_a_valid_reserve_valid_for_its_first_heuristic_run():
    """A window small enough for the exact model (16 samples, D = 2), ``time_limit`` 2 s and
    ``reserve`` 0.5 s (below 2 s: valid for auto). auto's first heuristic run gets
    min(1, 0.25 * 2) = 0.5 s, so the reserve it passes on must shrink with that budget
    (else 0.5 is not below 0.5 and the heuristic raises InputError)."""
    inst = small(samples=16, dp=2)
    result = get_solver("auto")(inst, objective="sync", time_limit=2.0, reserve=0.5, seed=0, workers=1)
    assert result.plan is not None
    assert_checked(inst, result)
