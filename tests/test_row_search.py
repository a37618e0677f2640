"""Tests of the row-pair search of the exact planner (rp_opt.packing.exact.row_search).

The two-row solves are real CP-SAT solves; local optimality is checked by brute force over
every layout of each pair of rows.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rp_opt.cost import layout_costs, score
from rp_opt.objectives import get_objective
from rp_opt.packing.exact import _two_row_layout, default_placement, solve_packing
from rp_opt.packing.exact.common import greedy_layout, layout_valid, packing_data
from rp_opt.result import lex_better
from rp_opt.packing.exact.row_search import put_back, row_pair_search, rows_separable, two_rows
from rp_opt.solution import Layout

from test_exact import assert_lex_close, checked, make_window


@pytest.mark.parametrize("name, shards, expected", [
    ("sync", 2, True),       # sum_r max_g J
    ("sync", 1, True),
    ("attention", 4, True),
    ("expert", 2, True),
    ("shard", 2, False),     # max_g sum_r J couples the rows
    ("shard", 1, True),      # with one shard: sum_r J
    ("weighted", 2, False),  # contains max_g sum_r J
])
def test_rows_separable(name, shards, expected):
    assert rows_separable(get_objective(name).levels[0], shards) is expected


def test_two_rows_and_put_back_round_trip():
    """Cutting two rows out of a layout and putting them back unchanged gives the layout;
    the cut keeps the window's numbering and each row's slots."""
    layout = Layout(np.array([0, 5, 1, 2, 3, 4, 5, 0, 2]), 3, 2)
    samples, sub = two_rows(layout, (2, 0))
    assert samples.tolist() == [0, 1, 2, 5, 6, 7]        # rows 0 and 2, increasing index
    assert sub.cell_of.tolist() == [2, 1, 3, 0, 1, 2]    # row 2 first (cells 0, 1), then row 0
    assert np.array_equal(put_back(layout, (2, 0), samples, sub).cell_of, layout.cell_of)


def _pair_can_improve(inst, place, layout, rows, objective) -> bool:
    """Brute force: does any valid layout of the samples of ``rows`` (the others kept) score
    lexicographically better than ``layout``?"""
    samples, _ = two_rows(layout, rows)
    data = packing_data(inst, place, layout.num_rows)
    current = score(inst, place, layout, objective)
    for assign in itertools.product(range(2 * layout.num_slots), repeat=samples.size):
        candidate = put_back(layout, rows, samples, Layout(np.array(assign), 2, layout.num_slots))
        if layout_valid(data, candidate) and lex_better(score(inst, place, candidate, objective), current):
            return True
    return False


@pytest.mark.parametrize("objective, G", [("sync", 2), ("sync", 1), ("shard", 2), ("weighted", 2)])
def test_search_ends_in_a_row_pair_optimum(objective, G):
    """From the greedy layout of a 3-row window the search keeps only improvements, ends
    when no pair of rows improves, and then brute force finds no better layout of any pair.
    With shard and weighted (rows coupled) the two-row models count the third row as
    constants; brute force scores the whole window."""
    inst = make_window(9, D=2, G=G, C=50, seed=1)
    place = default_placement(inst)
    start = greedy_layout(packing_data(inst, place, 3))
    obj = get_objective(objective)

    def solve(sub, sub_start, seconds, fixed):
        assert (fixed is None) is rows_separable(obj.levels[0], G)
        return _two_row_layout(sub, place, obj, sub_start, seconds, fixed, 0, "cpsat", None, None, True, True,
                               "auto")

    layout, stats = row_pair_search(inst, place, start, obj, 60.0, solve)
    assert stats.stopped == "every pair of rows solved without a gain"
    assert stats.kept >= 1  # the greedy layout is not pair-optimal on this window
    assert layout_valid(packing_data(inst, place, 3), layout)
    assert not lex_better(score(inst, place, start, obj), score(inst, place, layout, obj))
    assert stats.end == pytest.approx(score(inst, place, layout, obj)[0])
    for rows in itertools.combinations(range(3), 2):
        assert not _pair_can_improve(inst, place, layout, rows, obj)


@pytest.mark.parametrize("objective", ["sync", "shard"])
def test_solve_packing_runs_the_search_with_two_shards_and_three_rows(objective):
    """A 3-row window with G = 2: the search runs (shard: with the third row as constants)
    and the optimum is the one found without it; R = 2, G = 1 or row_search=False: it does
    not run."""
    inst = make_window(12, D=2, G=2, C=50, seed=1)
    place = default_placement(inst)
    with_search = solve_packing(inst, place, 3, objective=objective, time_limit=30)
    without = solve_packing(inst, place, 3, objective=objective, time_limit=30, row_search=False)
    assert with_search.status == without.status == "optimal"
    assert with_search.stats["row_search"]["solves"] >= 1 and "row_search" not in without.stats
    checked(inst, with_search, num_rows=3)
    assert_lex_close(with_search.score, without.score)
    assert "row_search" not in solve_packing(inst, place, 2, objective="sync", time_limit=5).stats
    one_shard = make_window(12, D=2, G=1, C=50, seed=1)
    assert "row_search" not in solve_packing(one_shard, default_placement(one_shard), 3, time_limit=5).stats


def test_search_leaves_the_model_time_to_build(monkeypatch):
    """When the search's share would leave less than the model's build needs (too_big: half
    of the time left), the search is skipped with a reason and the model still runs."""
    import rp_opt.packing.exact as exact

    monkeypatch.setattr(exact, "build_seconds", lambda *args, **kwargs: 1.3)
    inst = make_window(12, D=2, G=2, C=50, seed=1)
    res = solve_packing(inst, default_placement(inst), 3, objective="sync", time_limit=3.0, heuristic_start=False)
    assert "skipped" in res.stats["row_search"]
    assert "model" not in res.stats and res.stats["levels"]  # built and solved
    checked(inst, res, num_rows=3)


def test_time_left_goes_to_the_heuristic_when_the_model_stops_fitting(monkeypatch):
    """The model fits the limit at first but no longer once the start has been built
    (``too_big`` answers so on its third call: the first two decide the numbering and the
    first check): the heuristic, from the start, gets the
    time left instead of the solve ending early. The plan is valid and the time is used."""
    import rp_opt.packing.exact as exact

    calls = []

    def fits_only_first(seconds, left):
        calls.append(left)
        return None if len(calls) <= 2 else "not built: about 9 s to build (test)"

    monkeypatch.setattr(exact, "too_big", fits_only_first)
    inst = make_window(12, D=2, G=1, C=50, seed=1)
    res = solve_packing(inst, default_placement(inst), 3, objective="sync", time_limit=3.0)
    assert len(calls) == 3 and res.stats["model"].startswith("not built")
    assert res.seconds >= 2.0  # before: the solve returned the start right after the second check
    checked(inst, res, num_rows=3)


@pytest.mark.parametrize("objective", ["shard", "weighted", "sync"])
def test_two_row_model_with_fixed_rows_minimises_the_whole_window(objective):
    """The two-row CP-SAT model with the third row as constants returns, proven, a layout of
    the pair whose whole-window score no layout of the pair beats (brute force over every
    layout of the pair; the third row kept)."""
    from rp_opt.packing.exact.row_search import context

    inst = make_window(8, D=2, G=2, C=50, seed=3)
    place = default_placement(inst)
    start = greedy_layout(packing_data(inst, place, 3))
    obj = get_objective(objective)
    rows = (0, 2)
    samples, sub_start = two_rows(start, rows)
    from rp_opt.packing.exact.common import renumbered

    fixed = context(layout_costs(inst, place, start), rows)
    assert fixed[0].shape == fixed[1].shape == (1, 2)
    sub, proven = _two_row_layout(renumbered(inst, samples), place, obj, sub_start, 30.0, fixed, 0, "cpsat", None,
                                  None, True, True, "auto")
    assert proven
    best = put_back(start, rows, samples, sub)
    assert layout_valid(packing_data(inst, place, 3), best)
    assert not _pair_can_improve(inst, place, best, rows, obj)


def test_pair_solves_of_sync_improve_with_fixed_and_lns(monkeypatch):
    """The row search's two-row solve of an objective that adds up rows is there to
    improve the pair: with the default workers (``"proof"``) it runs ``fixed`` beside
    CP-SAT's LNS thread, not the proof's shared-tree worker, and returns a pair layout
    that no layout of the pair beats (brute force)."""
    import rp_opt.packing.exact as exact
    from rp_opt.packing.exact.common import renumbered
    from rp_opt.packing.exact.cpsat_model import PROOF

    inst = make_window(8, D=2, G=2, C=50, seed=3)
    place = default_placement(inst)
    start = greedy_layout(packing_data(inst, place, 3))
    obj = get_objective("sync")
    rows = (0, 2)
    samples, sub_start = two_rows(start, rows)
    seen = []
    original = exact.solve_packing

    def spy(*args, **kwargs):
        res = original(*args, **kwargs)
        seen.append((kwargs["subsolvers"], res.stats["levels"][0]))
        return res

    monkeypatch.setattr(exact, "solve_packing", spy)
    sub, proven = _two_row_layout(renumbered(inst, samples), place, obj, sub_start, 30.0, None, 0, "cpsat", None,
                                  PROOF, True, True, "auto")
    assert proven and len(seen) == 1
    names, first = seen[0]
    assert names == ("fixed",) and first["subsolvers"] == ["fixed"] and first["lns"] and first["threads"] == 2
    best = put_back(start, rows, samples, sub)
    assert layout_valid(packing_data(inst, place, 3), best)
    assert not _pair_can_improve(inst, place, best, rows, obj)
