"""Tests of the common result shape (rp_opt.result)."""

import json
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


def test_summary_says_why_there_is_no_plan():
    """6 samples for D = 8 slots: the heuristic's result is infeasible, and its summary
    (and `rp-opt plan`'s table) gives the reason with its fix, which it left out."""
    from rp_opt import synth
    from rp_opt.solvers import get_solver

    inst = synth.generate(samples=6, dp=8, edp=2, ep=2, capacity=4096, layers=2, experts=4, top_k=2, seed=0)
    result = get_solver("heuristic")(inst, objective="sync", time_limit=1)
    assert result.status == "infeasible" and result.plan is None
    assert "  reason    window has 6 samples for 8 cells" in result.summary()
    assert "use at most 6 DP slots or add 2 samples" in result.summary()


def test_plan_table_shows_fractions_in_percent(capsys, tmp_path):
    """`rp-opt plan`'s stats table gives placement_gap and improvement in % like the gap
    (they were raw fractions beside it); --json keeps the fractions."""
    from rp_opt.cli import main

    assert main(["plan", "--solver", "heuristic", "--time-limit", "1", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)["stats"]
    assert main(["plan", "--solver", "heuristic", "--time-limit", "1"]) == 0
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if line.strip().startswith("improvement"))
    assert line.strip().endswith("%") and 0 < stats["improvement"] < 1
