"""The independent plan checker rejects every corrupted plan."""

import copy

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rp_opt import Cluster, CostModel, Instance, InputError, Placement, Stage, Window, check_plan
from rp_opt.packing.baseline import pack

from conftest import random_instance


def _valid_plan(instance):
    w = instance.window
    placement = Placement.identity(w.num_layers, w.num_experts, instance.cluster.ep).to_list()
    layout, _ = pack(instance, "ffd")
    rows = layout.to_rows()
    assert check_plan(instance, placement, rows).valid
    return placement, rows


def _nonempty_cells(rows):
    return [(r, d) for r, row in enumerate(rows) for d, cell in enumerate(row) if cell]


seeds = st.integers(0, 100_000)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, pick=st.integers(0, 10_000))
def test_duplicated_sample_rejected(seed, pick):
    instance = random_instance(seed, n=12, dp=2, capacity=64)
    placement, rows = _valid_plan(instance)
    cells = _nonempty_cells(rows)
    (r1, d1), (r2, d2) = cells[pick % len(cells)], cells[(pick // 7) % len(cells)]
    bad = copy.deepcopy(rows)
    bad[r2][d2].append(rows[r1][d1][0])
    report = check_plan(instance, placement, bad)
    assert not report.valid
    assert any("appears 2 times" in v for v in report.violations)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, pick=st.integers(0, 10_000))
def test_dropped_sample_rejected(seed, pick):
    instance = random_instance(seed, n=12, dp=2, capacity=64)
    placement, rows = _valid_plan(instance)
    r, d = _nonempty_cells(rows)[pick % len(_nonempty_cells(rows))]
    bad = copy.deepcopy(rows)
    dropped = bad[r][d].pop()
    report = check_plan(instance, placement, bad)
    assert not report.valid
    assert f"rows: sample {dropped} is in no cell" in report.violations


@settings(max_examples=40, deadline=None)
@given(seed=seeds, pick=st.integers(0, 10_000))
def test_over_capacity_cell_rejected(seed, pick):
    """Lengths above C/2: every valid cell holds one sample, so moving one into another
    cell overfills it."""
    rng = np.random.default_rng(seed)
    n, capacity = 6, 100
    lengths = rng.integers(51, 101, n)
    window = Window(lengths, rng.integers(0, 5, (n, 2, 4)), top_k=1)
    instance = Instance(window, Cluster(2, 1, 2, capacity), CostModel((Stage("a", 1, 1.0, 0.0),), 1.0))
    placement, rows = _valid_plan(instance)
    cells = _nonempty_cells(rows)
    (r1, d1) = cells[pick % len(cells)]
    (r2, d2) = cells[(pick + 1 + pick // 7 % (len(cells) - 1)) % len(cells)]
    bad = copy.deepcopy(rows)
    bad[r2][d2].append(bad[r1][d1].pop())
    report = check_plan(instance, placement, bad)
    assert not report.valid
    assert any("more than the capacity" in v for v in report.violations)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, pick=st.integers(0, 10_000))
def test_empty_cell_rejected(seed, pick):
    instance = random_instance(seed, n=20, dp=2, capacity=2000)  # loose capacity: moving stays within C
    placement, rows = _valid_plan(instance)
    cells = _nonempty_cells(rows)
    (r1, d1) = cells[pick % len(cells)]
    (r2, d2) = cells[(pick + 1) % len(cells)]
    bad = copy.deepcopy(rows)
    bad[r2][d2].extend(bad[r1][d1])
    bad[r1][d1] = []
    report = check_plan(instance, placement, bad)
    assert not report.valid
    assert f"rows[{r1}][{d1}]: empty cell" in report.violations


@settings(max_examples=40, deadline=None)
@given(seed=seeds, layer=st.integers(0, 2), expert=st.integers(0, 7))
def test_unbalanced_placement_rejected(seed, layer, expert):
    instance = random_instance(seed, n=12, layers=3, experts=8, ep=2)
    placement, rows = _valid_plan(instance)
    bad = copy.deepcopy(placement)
    bad[layer][expert] = 1 - bad[layer][expert]
    report = check_plan(instance, bad, rows)
    assert not report.valid
    assert any(v.startswith(f"placement: layer {layer} rank") for v in report.violations)


def test_sample_limit_and_shape_and_row_count():
    instance = random_instance(3, n=12, dp=2, capacity=2000, m=2)
    placement, rows = _valid_plan(random_instance(3, n=12, dp=2, capacity=2000))
    report = check_plan(instance, placement, rows, num_rows=len(rows) + 1)
    assert not report.valid
    assert any("more than m=2" in v for v in report.violations)
    assert any("expected R=" in v for v in report.violations)
    ragged = [row[:1] for row in rows]
    assert not check_plan(instance, placement, ragged).valid
    assert not check_plan(instance, [[0, 1]], rows).valid
    assert not check_plan(instance, placement, [[[-1] + rows[0][0], rows[0][1]]] + rows[1:]).valid


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2", np.int64(0), float("nan")])
def test_num_rows_is_checked_by_the_shared_rules(bad):
    """A bad ``num_rows`` is one line naming it and the value (rp_opt.errors wording); an
    integral float counts as that integer."""
    instance = random_instance(3, n=12, dp=2, capacity=2000)
    placement, rows = _valid_plan(instance)
    with pytest.raises(InputError) as info:
        check_plan(instance, placement, rows, num_rows=bad)
    assert str(info.value) == f"num_rows: must be an integer >= 1 or None, got {bad!r}"
    assert check_plan(instance, placement, rows, num_rows=float(len(rows))).valid
    assert not check_plan(instance, placement, rows, num_rows=float(len(rows) + 1)).valid


def _peak_objective():
    """An unregistered objective: (max_{r,g} J, sum J)."""
    from rp_opt.objectives import PEAK, TOTAL, Objective

    return Objective("peak", (((1.0, PEAK),), ((1.0, TOTAL),)))


def test_check_scores_under_an_unregistered_objective(hand):
    """Solvers take an Objective object that is not registered; the plan keeps only its
    name ("peak"), which check then looked up and rejected. Given the object, check scores
    the plan under it (the solver's score); without it, one line on ``objective`` says to
    pass it. Hand window, baseline plan: identity placement, one row of cells {0, 1} and
    {2, 3}: A = 1 * max(4, 4) + 2 * max(10, 8) = 24, X = 0.5 * (5 + 4) = 4.5 (layer 0
    ranks (5, 3), layer 1 (4, 4)), so J = 28.5 and the score (28.5, 28.5)."""
    from rp_opt.check import check
    from rp_opt.solvers import get_solver

    objective = _peak_objective()
    result = get_solver("baseline")(hand, objective=objective, time_limit=1.0, seed=0, warm_start=None)
    assert result.plan.objective == "peak" and result.score == (28.5, 28.5)
    report = check(hand, result.plan, objective)
    assert report.valid and report.score == result.score
    assert check_plan(hand, result.plan.placement.to_list(), result.plan.layout.to_rows(), objective).score \
        == result.score
    with pytest.raises(InputError, match=r"^objective: the plan was made under objective 'peak', which is not "
                                         r"registered: pass that Objective itself"):
        check(hand, result.plan)
    assert check(hand, result.plan, "sync").valid


def test_check_without_a_plan_is_one_line(hand):
    """check(instance, None), e.g. on the plan of an infeasible result, was an
    AttributeError; a Result instead of its plan, or any other object, is named too."""
    from rp_opt.check import check
    from rp_opt.solvers import get_solver

    with pytest.raises(InputError, match=r"^plan: is None, there is no plan to check"):
        check(hand, None)
    result = get_solver("baseline")(hand, objective="sync", time_limit=1.0, seed=0, warm_start=None)
    with pytest.raises(InputError, match=r"^plan: must be a Plan, got a Result \(status .*\): pass result\.plan$"):
        check(hand, result)
    with pytest.raises(InputError, match=r"^plan: must be a Plan, got dict$"):
        check(hand, {"placement": [], "rows": []})
    with pytest.raises(InputError, match=r"^instance: must be an Instance, got Window$"):
        check_plan(hand.window, [[0, 0, 1, 1]] * 2, result.plan.layout.to_rows())


def test_huge_index_is_a_violation_and_a_boolean_rank_malformed():
    """The checker itself reads a raw plan's numbers as what they are: a sample index beyond
    64-bit integers is out of range like -1 (no OverflowError; a violation, the plan
    unscored), and JSON ``true`` or a float is not a rank (malformed input, as a
    non-integer sample index is)."""
    instance = random_instance(3)
    placement, rows = _valid_plan(instance)
    rows = copy.deepcopy(rows)
    rows[0][0] = [2**70] + list(rows[0][0])[1:]
    report = check_plan(instance, placement, rows)
    n = instance.window.num_samples
    assert not report.valid and report.score is None
    assert report.violations[0] == f"rows[0][0]: sample {2**70} is not in [0, {n})"
    flagged = [list(layer) for layer in placement]
    flagged[0][1] = True
    with pytest.raises(InputError, match=r"^placement\[0\]\[1\]: must be an integer rank, got True$"):
        check_plan(instance, flagged, _valid_plan(instance)[1])
    with pytest.raises(InputError, match="^placement: ranks must be integers, got dtype float64$"):
        check_plan(instance, np.asarray(placement, dtype=float), _valid_plan(instance)[1])
