"""Window, CostModel and Instance: the window owns its data, inputs are type-checked, and
``==`` / ``hash`` behave on objects that hold arrays."""

import tracemalloc

import numpy as np
import pytest

from rp_opt import Cluster, CostModel, InputError, Instance, Stage, Window


def _counts(dtype=np.uint16):
    """Two samples of 3 tokens, top-1, all routed to expert 0 of the one layer (E = 4)."""
    counts = np.zeros((2, 1, 4), dtype=dtype)
    counts[:, 0, 0] = 3
    return counts


def _cost():
    return CostModel((Stage("a", 1, 1.0, 0.0),), 1.0)


@pytest.mark.parametrize("wrap", [lambda a: a, memoryview], ids=["ndarray", "memoryview"])
def test_window_copies_a_caller_array_of_its_own_dtype(wrap):
    """uint16 counts are already the compact type, so no conversion copies them: the
    window must still keep its own copy. The caller's array stays writable, and zeroing
    it afterwards leaves the window's demand (3 tokens each to expert 0) as it was; a
    memoryview (numpy reads it without a copy) is copied too."""
    counts = _counts()
    window = Window([3, 3], wrap(counts), 1)
    counts[:] = 0                                 # raised "read-only" when the window froze it
    assert counts.flags.writeable
    np.testing.assert_array_equal(window.demand[:, 0, 0], [3, 3])
    assert not np.shares_memory(window.demand, counts)


@pytest.mark.parametrize("field", ["lengths", "demand", "attn_work"])
def test_window_arrays_cannot_be_made_writable(field):
    """Each array of a window is read-only for good: setflags(write=True), which re-enabled
    writes on the caller's array before, is refused, so the window cannot be changed."""
    window = Window(np.array([3, 3]), _counts(), 1)
    array = getattr(window, field)
    with pytest.raises(ValueError):
        array.setflags(write=True)
    with pytest.raises(ValueError):
        array[0] = 0


def test_window_from_another_windows_arrays_shares_them():
    """A window built from another window's (frozen) arrays shares the demand instead of
    copying it again (a production demand is 100 MB), and so does ``subset``'s gather."""
    window = Window([3, 3], _counts(), 1)
    again = Window(window.lengths, window.demand, 2)
    assert np.shares_memory(again.demand, window.demand)
    part = window.subset([1, 0])
    np.testing.assert_array_equal(part.demand, window.demand[[1, 0]])
    assert part.demand.base is not None and not part.demand.flags.writeable


@pytest.mark.parametrize("dtype", [np.uint16, np.int64])
def test_window_makes_one_copy_of_the_demand_at_most(dtype):
    """A 64 x 4 x 1024 uint16 demand (512 KiB): building the window allocates it once
    (uint16 input: the window's copy; int64 input: the conversion, which the window then
    keeps), never twice; a second copy would lift the peak to 2x."""
    counts = np.zeros((64, 4, 1024), dtype=dtype)
    counts[:, :, 0] = 5
    size = counts.size * 2                        # bytes of the window's uint16 demand
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        window = Window(np.full(64, 5), counts, 1)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert window.demand.dtype == np.uint16
    assert size <= peak < 1.5 * size


def test_subset_names_a_bad_index():
    """Index 99 of a 2-sample window, a negative index and a 2-D list are one-line
    InputErrors on ``samples`` (were an IndexError from numpy, or a silent wrap-around)."""
    window = Window([3, 3], _counts(), 1)
    with pytest.raises(InputError, match=r"^samples: index 99 \(position 1\) is not a sample of the window, "
                                         r"outside \[0, 2\)$"):
        window.subset([0, 99])
    with pytest.raises(InputError, match=r"^samples: index -1 "):
        window.subset([-1])
    with pytest.raises(InputError, match=r"^samples: must be a 1-D list"):
        window.subset([[0, 1]])
    with pytest.raises(InputError, match=r"^samples: must hold integer sample indices"):
        window.subset([0.5])


@pytest.mark.parametrize("make, field, received", [
    (lambda w, cl, cm: Instance(w, cl, None), "cost", "NoneType"),
    (lambda w, cl, cm: Instance(w, cl, {"stages": [], "gamma": 1.0}), "cost", "dict"),
    (lambda w, cl, cm: Instance(w, cl, "sync"), "cost", "str"),
    (lambda w, cl, cm: Instance("w", cl, cm), "window", "str"),
    (lambda w, cl, cm: Instance(w, None, cm), "cluster", "NoneType"),
], ids=["cost-none", "cost-dict", "cost-str", "window-str", "cluster-none"])
def test_instance_checks_the_types_of_its_parts(make, field, received):
    """A cost, window or cluster of the wrong type is an InputError naming the field and
    the type received (every solver crashed later with an AttributeError)."""
    window, cluster = Window([3, 3], _counts(), 1), Cluster(2, 1, 2, 10)
    kind = {"cost": "CostModel", "window": "Window", "cluster": "Cluster"}[field]
    with pytest.raises(InputError, match=rf"^{field}: must be a {kind}, got {received}$"):
        make(window, cluster, _cost())


@pytest.mark.parametrize("stages, expected", [
    (({"name": "a", "layrs": 1, "alpha": 1.0, "beta": 0.0},),
     "cost.stages[0]: has an unexpected key 'layrs' (a stage has name, layers, alpha, beta)"),
    (({"name": "a", "alpha": 1.0, "beta": 0.0},), "cost.stages[0]: misses ['layers']"),
    ((Stage("a", 1, 1.0, 0.0), 3), "cost.stages[1]: must be a Stage or a dict, got int"),
    (Stage("a", 1, 1.0, 0.0), "cost.stages: must be a list of stages (Stage objects or dicts), got Stage"),
    (None, "cost.stages: must be a list of stages (Stage objects or dicts), got NoneType"),
], ids=["misspelt-key", "missing-key", "int-stage", "bare-stage", "none"])
def test_cost_model_names_a_bad_stage(stages, expected):
    """A misspelt or missing stage key, a stage of the wrong type and stages that are not
    a list give one line naming the field (were TypeErrors from Stage(**s) or iteration)."""
    with pytest.raises(InputError) as info:
        CostModel(stages, 1.0)
    assert str(info.value) == expected


def test_cost_model_still_takes_stage_dicts():
    """A list of complete stage dicts builds the same model as the Stage objects."""
    assert CostModel([{"name": "a", "layers": 1, "alpha": 1.0, "beta": 0.0}], 1.0) == _cost()


def test_window_and_instance_compare_contents_and_are_unhashable():
    """Two windows built from equal data are ==, one with another demand or top_k is not
    (== raised "truth value of an array is ambiguous"); instances compare their parts and
    ignore meta. Neither is hashable (TypeError naming the class, not numpy's)."""
    window, same = Window([3, 3], _counts(), 1), Window(np.array([3, 3]), _counts(np.int64), 1)
    other = _counts()
    other[1, 0, :2] = [2, 1]
    assert window == same and not window != same
    assert window != Window([3, 3], other, 1)
    assert window != Window([3, 3], _counts(), 2)
    assert window != "window"
    cluster = Cluster(2, 1, 2, 10)
    inst = Instance(window, cluster, _cost(), meta={"step": 1})
    assert inst == Instance(same, cluster, _cost(), meta={"step": 2})
    assert inst != Instance(window, Cluster(2, 1, 1, 10), _cost())
    for thing, name in ((window, "Window"), (inst, "Instance")):
        with pytest.raises(TypeError, match=f"unhashable type: '{name}'"):
            hash(thing)


def test_copies_keep_arrays_read_only():
    """``copy``, ``deepcopy`` and ``pickle`` gave a window (and a placement) writable arrays:
    numpy makes its copies writable, and the "frozen" data could then change under a
    planner. The copies are now frozen as the constructor freezes, and equal the original."""
    import copy
    import pickle

    from rp_opt import Placement

    window = Window(np.array([3, 1, 2]), np.array([[[2, 1]], [[0, 1]], [[1, 1]]]), 1)
    placement = Placement(np.array([[0, 1, 1, 0]]), 2)
    for make in (copy.copy, copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x))):
        for original, arrays in ((window, ("lengths", "demand", "attn_work")), (placement, ("ranks",))):
            clone = make(original)
            assert clone == original
            for name in arrays:
                with pytest.raises(ValueError):
                    getattr(clone, name)[0] = 1
