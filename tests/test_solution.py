"""Placement and Layout: balanced and bijective by construction, round trips."""

import numpy as np
import pytest

from rp_opt import InputError, Layout, Placement
from rp_opt.window import Cluster


def test_identity_placement():
    p = Placement.identity(2, 6, 3)
    np.testing.assert_array_equal(p.ranks, [[0, 0, 1, 1, 2, 2]] * 2)
    np.testing.assert_array_equal(p.experts_of_ranks()[1], [[0, 1], [2, 3], [4, 5]])


def test_unbalanced_placement_rejected():
    with pytest.raises(InputError, match="layer 0 rank 0 holds 3 experts, not E/P=2"):
        Placement(np.array([[0, 0, 0, 1]]), 2)
    with pytest.raises(InputError, match="outside"):
        Placement(np.array([[0, 0, 1, 2]]), 2)
    with pytest.raises(InputError, match="P=3 does not divide E=4"):
        Placement(np.zeros((1, 4), dtype=int), 3)


def test_layout_rows_round_trip():
    """Samples 0..4 in 2 rows x 2 slots; row 1 slot 0 holds {1, 4}."""
    rows = [[[0], [3]], [[1, 4], [2]]]
    layout = Layout.from_rows(rows, 5)
    np.testing.assert_array_equal(layout.cell_of, [0, 2, 3, 1, 2])
    assert layout.to_rows() == rows
    np.testing.assert_array_equal(layout.cell_sizes(), [[1, 1], [2, 1]])
    assert layout.permute_rows([1, 0]).to_rows() == [rows[1], rows[0]]


@pytest.mark.parametrize("rows, message", [
    ([[[0], [1]], [[1], [2]]], "sample 1 appears twice"),
    ([[[0], [1]]], "sample 2 is in no cell"),
    ([[[0], [1]], [[2]]], r"rows\[1\]: must be a list of 2 slots"),
    ([[[0], [7]]], "sample 7 is not in"),
])
def test_layout_from_bad_rows(rows, message):
    with pytest.raises(InputError, match=message):
        Layout.from_rows(rows, 3)


def test_cluster_validation():
    assert Cluster(8, 2, 4, 100).shard_of_slot().tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(InputError, match="cluster.capacity: must be an integer >= 1, got -1"):
        Cluster(8, 2, 4, -1)
    with pytest.raises(InputError, match="cluster.max_samples_per_cell"):
        Cluster(8, 2, 4, 100, 0)


@pytest.mark.parametrize("field, make", [
    ("layout.num_rows", lambda bad: Layout(np.array([0, 1]), bad, 2)),
    ("layout.num_slots", lambda bad: Layout(np.array([0, 1]), 1, bad)),
    ("placement.num_ranks", lambda bad: Placement(np.array([[0, 1]]), bad)),
    ("placement.num_ranks", lambda bad: Placement.identity(1, 2, bad)),
])
@pytest.mark.parametrize("bad", [2.5, True, np.bool_(True), 0, "2", None])
def test_shape_counts_follow_the_shared_rules(field, make, bad):
    """R, D and P are read by rp_opt.errors.integer: a fraction is not truncated and a bool
    is not 1 (int() took 2.5 as 2 and True as 1); one line naming the field."""
    with pytest.raises(InputError, match=rf"^{field}: must be an integer >= 1, got "):
        make(bad)


def test_integral_float_shape_counts_are_integers():
    """2.0 counts as 2 (the shared rule); the stored counts are ints."""
    layout = Layout(np.array([0, 1, 3]), 2.0, np.int64(2))
    assert (layout.num_rows, layout.num_slots) == (2, 2) and type(layout.num_rows) is int
    placement = Placement(np.array([[0, 1, 1, 0]]), 2.0)
    assert placement.num_ranks == 2 and type(placement.num_ranks) is int
    assert Placement.identity(1.0, 4.0, 2.0).ranks.tolist() == [[0, 0, 1, 1]]
    with pytest.raises(InputError, match=r"^placement\.num_experts: must be an integer >= 0, got 4\.5$"):
        Placement.identity(1, 4.5, 2)
    with pytest.raises(InputError, match="P=3 does not divide E=2"):
        Placement.identity(1, 2, 3)


def test_ragged_placement_is_one_line():
    """Layers of 2 and 1 experts are not an [L, E] array: one line on ``placement``
    (numpy's "inhomogeneous shape" ValueError before); a ragged layout likewise."""
    with pytest.raises(InputError, match=r"^placement: cannot be read as an array \(ValueError: "):
        Placement([[0, 1], [0]], 2)
    with pytest.raises(InputError, match=r"^layout: cannot be read as an array \(ValueError: "):
        Layout([[0, 1], [0]], 1, 2)


@pytest.mark.parametrize("order, message", [
    ([1], r"^order: must list the R=2 rows once each, got shape \(1,\)$"),
    ([0, 1, 0], r"^order: must list the R=2 rows once each, got shape \(3,\)$"),
    ([0, 0], r"^order: is not a permutation of the rows 0\.\.1, got \[0, 0\]$"),
    ([1, 2], r"^order: is not a permutation of the rows 0\.\.1, got \[1, 2\]$"),
    ([0.0, 1.0], r"^order: must hold integer row indices, got array\(\[0\., 1\.\]\)$"),
], ids=["short", "long", "repeat", "out-of-range", "float"])
def test_permute_rows_needs_a_permutation(order, message):
    """Two rows (samples 0 and 1 in row 0, 2 and 3 in row 1): an order of the wrong length
    was a numpy broadcast error, and [0, 0] gave row 1's samples a row read from
    uninitialised memory (a garbage cell number); both are one line on ``order`` now."""
    layout = Layout(np.array([0, 1, 2, 3]), 2, 2)
    with pytest.raises(InputError, match=message):
        layout.permute_rows(order)
    assert layout.permute_rows(np.array([1, 0])).cell_of.tolist() == [2, 3, 0, 1]


def test_placement_and_layout_compare_contents_and_are_unhashable():
    """Equal ranks (an int32 list and an int64 array) make equal placements, another rank
    map or P does not; layouts likewise by cell_of, R and D (== raised "truth value of an
    array is ambiguous"). hash raises TypeError naming the class."""
    placement = Placement([[0, 0, 1, 1]], 2)
    assert placement == Placement(np.array([[0, 0, 1, 1]], dtype=np.int32), 2)
    assert placement != Placement([[0, 1, 0, 1]], 2)
    assert placement != Placement([[0, 0, 0, 0]], 1)
    assert placement == Placement.identity(1, 4, 2)
    layout = Layout([0, 1, 2, 3], 2, 2)
    assert layout == Layout(np.array([0, 1, 2, 3]), 2.0, 2)
    assert layout != Layout([0, 1, 2, 3], 4, 1)
    assert layout != Layout([0, 1, 2, 3], 3, 2)
    assert layout != layout.permute_rows([1, 0])
    assert layout != placement
    for thing, name in ((placement, "Placement"), (layout, "Layout")):
        with pytest.raises(TypeError, match=f"unhashable type: '{name}'"):
            hash(thing)
