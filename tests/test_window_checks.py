"""Loading rejects physically impossible routing and non-numeric cost fields (QA items 3, 12)."""

import json

import numpy as np
import pytest

from rp_opt import InputError
from rp_opt.cli import main
from rp_opt.io import load_instance, save_instance
from rp_opt.synth import generate
from rp_opt.window import Cluster, CostModel, Stage, Window


def _window(demand, lengths=(10, 20), top_k=2):
    return Window(np.asarray(lengths), np.asarray(demand), top_k)


def test_partial_replay_passes():
    """sum_e a < k T_i (a partial replay) and a[i,l,e] = T_i exactly are allowed."""
    demand = np.zeros((2, 2, 4), dtype=np.uint16)
    demand[0, 0] = [10, 10, 0, 0]  # full top-2 replay of sample 0 at layer 0
    demand[1, 1] = [3, 0, 0, 1]    # partial
    _window(demand).check_routing()


@pytest.mark.parametrize("demand_at, value, message", [
    ((1, 0, 2), 21, "demand: sample 1, layer 0: expert 2 gets 21 tokens from a sample of 20 tokens"),
    ((0, 1, 3), 2**40, "demand: sample 0, layer 1: expert 3 gets 1099511627776 tokens from a sample of 10 tokens"),
    ((0, 1, 3), 65535, "demand: sample 0, layer 1: expert 3 gets 65535 tokens"),  # a -1 wrapped to uint16
])
def test_expert_above_sample_length(demand_at, value, message):
    demand = np.zeros((2, 2, 4), dtype=np.uint64)
    demand[demand_at] = value
    with pytest.raises(InputError) as info:
        _window(demand).check_routing()
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_layer_above_k_times_length():
    demand = np.zeros((2, 2, 4), dtype=np.uint16)
    demand[1, 1] = [20, 20, 1, 0]  # 41 > 2 x 20, every count <= 20
    with pytest.raises(InputError,
                       match=r"^demand: sample 1, layer 1 routes 41 tokens, more than top_k x T = 2 x 20 = 40$"):
        _window(demand).check_routing()


def test_generated_windows_pass_and_files_are_checked(tmp_path, capsys):
    """Generated windows route exactly k T_i; a file with doubled demand is bad input for
    every command (exit 2, one line), not an int32 overflow later."""
    inst = generate("ling-tiny-like", samples=12, dp=4, edp=2, ep=2, capacity=4096, layers=2, experts=8, top_k=4,
                    seed=1)
    inst.window.check_routing()
    path = tmp_path / "w.npz"
    save_instance(path, inst)
    load_instance(path)
    meta = json.loads(str(np.load(path)["meta"]))
    np.savez(path, lengths=inst.window.lengths, demand=2 * inst.window.demand.astype(np.int64),
             meta=np.array(json.dumps(meta)))
    with pytest.raises(InputError, match="^demand: sample "):
        load_instance(path)
    assert main(["show", str(path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and err[0].startswith("error: demand: sample ")


@pytest.mark.parametrize("cost, message", [
    ({"stages": [{"name": "s", "layers": 1, "alpha": "a", "beta": 0.0}], "gamma": 1.0},
     "cost.stages[s].alpha: must be a finite number >= 0, got 'a'"),
    ({"stages": [{"name": "s", "layers": 1, "alpha": 1.0, "beta": [1]}], "gamma": 1.0},
     "cost.stages[s].beta: must be a finite number >= 0, got [1]"),
    ({"stages": [{"name": "s", "layers": "two", "alpha": 1.0, "beta": 0.0}], "gamma": 1.0},
     "cost.stages[s].layers: must be an integer >= 0, got 'two'"),
    ({"stages": [{"name": "s", "layers": float("nan"), "alpha": 1.0, "beta": 0.0}], "gamma": 1.0},
     "cost.stages[s].layers: must be an integer >= 0, got nan"),
    ({"stages": [{"name": "s", "layers": 1, "alpha": 1.0, "beta": 0.0}], "gamma": "1"},
     "cost.gamma: must be a finite number >= 0, got '1'"),
    ({"stages": [{"name": "s", "layers": 1, "alpha": True, "beta": 0.0}], "gamma": 1.0},
     "cost.stages[s].alpha: must be a finite number >= 0, got True"),
])
def test_cost_fields_must_be_numbers(cost, message):
    with pytest.raises(InputError) as info:
        CostModel.from_dict(cost)
    assert str(info.value) == message


@pytest.mark.parametrize("cost, message", [
    ({"stages": [], "gamma": 1.0, "gama": 2.0}, "cost: unknown keys ['gama'] (a cost model has 'stages' and 'gamma')"),
    ({"cost": {"stages": [], "gamma": 1.0}, "r2": 0.9},
     "cost: unknown keys ['cost', 'r2'] (a cost model has 'stages' and 'gamma')"),
    ({"stages": [{"name": "s", "layers": 1, "alpha": 1.0, "beta": 0.0, "betta": 2.0}], "gamma": 1.0},
     "cost.stages[0]: unknown keys ['betta'] (a stage has 'name', 'layers', 'alpha' and 'beta')"),
])
def test_cost_keys_must_be_known(cost, message):
    """A misspelt or foreign key is an error naming it, never dropped (a calibration
    report given where its cost model belongs, a typo in a coefficient's name)."""
    with pytest.raises(InputError) as info:
        CostModel.from_dict(cost)
    assert str(info.value) == message


@pytest.mark.parametrize("top_k", ["a", None, float("nan"), float("inf"), 1.5, True])
def test_top_k_must_be_a_positive_integer(top_k):
    with pytest.raises(InputError, match="^top_k: must be an integer >= 1, got "):
        _window(np.zeros((2, 1, 4)), top_k=top_k)


def test_whole_floats_are_integers_everywhere():
    """Cluster sizes, m, a stage's layer count and top_k follow one rule: integers and
    integral floats (8.0 is 8), never bools."""
    cluster = Cluster(8.0, np.int64(2), 4, 100.0, np.float64(3.0))
    assert (cluster.dp, cluster.edp, cluster.ep, cluster.capacity, cluster.max_samples_per_cell) == (8, 2, 4, 100, 3)
    assert all(type(v) is int for v in (cluster.dp, cluster.edp, cluster.capacity, cluster.max_samples_per_cell))
    assert type(Stage("s", 2.0, 1, 0).layers) is int
    assert _window(np.zeros((2, 1, 4)), top_k=2.0).top_k == 2
    for bad in (True, 1.5, "8"):
        with pytest.raises(InputError, match=r"^cluster.dp: must be an integer >= 1, got "):
            Cluster(bad, 1, 1, 100)
    with pytest.raises(InputError, match=r"^cluster.max_samples_per_cell: must be an integer >= 1 or None, got 0$"):
        Cluster(8, 2, 4, 100, 0)


def test_stage_accepts_numpy_numbers():
    stage = Stage("s", np.int64(2), np.float32(0.5), np.float64(0.0))
    assert (stage.layers, stage.alpha, stage.beta) == (2, 0.5, 0.0)


def test_cluster_capacity_beyond_the_file_limit_refused():
    """A capacity of 2^63 built in Python (the window file already refused it) reached the
    baselines and the exact solver as an OverflowError traceback; Cluster now refuses what
    a window file cannot hold (C <= 2^31 - 1), so every saved instance loads again."""
    from rp_opt.window import MAX_CAPACITY

    assert Cluster(1, 1, 1, MAX_CAPACITY).capacity == 2**31 - 1
    with pytest.raises(InputError,
                       match=r"^cluster.capacity: must be at most 2147483647 tokens, got 9223372036854775808$"):
        Cluster(1, 1, 1, 2**63)


@pytest.mark.parametrize("field, kwargs, message", [
    ("lengths", dict(lengths=[[10], [20, 1]]), r"^lengths: cannot be read as an array \(ValueError: "),
    ("demand", dict(demand=[[[1, 1]], [[1]]]), r"^demand: cannot be read as an array \(ValueError: "),
    ("attn_work", dict(attn_work=[[1.0], [1.0, 2.0]]), r"^attn_work: cannot be read as an array \(ValueError: "),
    ("attn_work", dict(attn_work=["a", "b"]), r"^attn_work: must be real numbers, got dtype <U1$"),
    ("attn_work", dict(attn_work=[1j, 2.0]), r"^attn_work: must be real numbers, got dtype complex128$"),
])
def test_unreadable_window_arrays_are_one_line(field, kwargs, message):
    """Two samples of 10 and 20 tokens, L=1, E=2. Ragged lists raised numpy's ValueError,
    non-numeric attention work a ValueError (strings) or TypeError (complex); each is now
    an InputError naming the array."""
    args = dict(lengths=[10, 20], demand=[[[1, 1]], [[2, 0]]], top_k=1, attn_work=None) | kwargs
    with pytest.raises(InputError, match=message):
        Window(args["lengths"], args["demand"], args["top_k"], args["attn_work"])
    assert Window([10, 20], [[[1, 1]], [[2, 0]]], 1, [100, 400.0]).attn_work.tolist() == [100.0, 400.0]


def test_uint64_lengths_beyond_int64_are_named_not_wrapped():
    """uint64 lengths above 2^63 wrapped to negative int64 and were reported as a length
    below 1 with a wrong value (noticed by review helper-35): now the sample and its value."""
    from rp_opt.window import checked_lengths

    with pytest.raises(InputError, match=r"^lengths: sample 1 has length 9223372036854775813, beyond 64-bit"):
        checked_lengths(np.array([3, 2**63 + 5], dtype=np.uint64))
    assert checked_lengths(np.array([3, 2**61], dtype=np.uint64)).dtype == np.int64


def test_lengths_whose_sum_overflows_are_named():
    """Each length fits int64 but their sum (of a cell, a row, the window) would wrap
    around: one line, not a wrong R* from a negative total."""
    from rp_opt.window import checked_lengths

    with pytest.raises(InputError, match=r"^lengths: sum to 6.918e\+18 tokens, beyond 2\^62"):
        checked_lengths(np.array([2**61, 2**61, 2**61], dtype=np.int64))
    with pytest.raises(InputError, match=r"^lengths: sum to .* beyond 2\^62"):
        checked_lengths(np.array([2**63 - 1, 1], dtype=np.uint64))
