"""Instance and plan files: round trips, and one-line errors (exit code 2) for bad input."""

import json
import os

import numpy as np
import pytest

from rp_opt import InputError
from rp_opt.cli import main
from rp_opt.cost import score
from rp_opt.io import load_instance, load_plan, save_instance, save_plan
from rp_opt.packing.baseline import pack
from rp_opt.solution import Placement
from rp_opt.result import Plan
from rp_opt.synth import generate

from conftest import random_instance

GOOD_META = {
    "format": "rp-opt-window/1", "top_k": 2, "model": "test",
    "cluster": {"dp": 2, "edp": 1, "ep": 2, "capacity": 100, "max_samples_per_cell": None},
    "cost": {"stages": [{"name": "lin", "layers": 2, "alpha": 1.0, "beta": 0.0}], "gamma": 0.5},
}


def _write(path, lengths=None, demand=None, meta=None, **extra):
    lengths = np.array([10, 20, 30, 40]) if lengths is None else lengths
    demand = np.ones((4, 3, 4), dtype=np.int64) if demand is None else demand
    meta = GOOD_META if meta is None else meta
    np.savez(path, lengths=lengths, demand=demand, meta=np.array(json.dumps(meta)), **extra)
    return str(path)


def _demand(i, l, e, value):
    """The default demand (1 token per expert) with a[i, l, e] = value."""
    demand = np.ones((4, 3, 4), dtype=np.int64)
    demand[i, l, e] = value
    return demand


def _meta(**changes):
    meta = json.loads(json.dumps(GOOD_META))
    for key, value in changes.items():
        if key in meta["cluster"]:
            meta["cluster"][key] = value
        else:
            meta[key] = value
    return meta


BAD_CASES = {
    "demand wrong shape": (dict(demand=np.ones((3, 3, 4))), "demand: has 3 samples but lengths has 4"),
    "demand 2-D": (dict(demand=np.ones((4, 4))), "demand: must be 3-D [N, L, E], got shape (4, 4)"),
    "lengths 2-D": (dict(lengths=np.ones((4, 1))), "lengths: must be 1-D [N], got shape (4, 1)"),
    "negative demand": (dict(demand=-np.ones((4, 3, 4))), "demand: holds a negative count -1"),
    "zero length": (dict(lengths=np.array([10, 0, 30, 40])), "lengths: sample 1 has length 0"),
    "sample longer than C": (dict(lengths=np.array([10, 20, 300, 40])),
                             "lengths: sample 2 has 300 tokens, more than the capacity C=100"),
    "E not divisible by P": (dict(meta=_meta(ep=3)), "cluster.ep: P=3 does not divide E=4"),
    "D not divisible by G": (dict(meta=_meta(dp=3, edp=2)), "cluster.edp: G=2 does not divide D=3"),
    "bad format": (dict(meta=_meta(format="other")), "meta.format: must be 'rp-opt-window/1', got 'other'"),
    "negative attn_work": (dict(attn_work=np.array([1.0, -2.0, 3.0, 4.0])),
                           "attn_work: sample 1 has negative work -2.0"),
    "non-positive dp": (dict(meta=_meta(dp=0)), "cluster.dp: must be an integer >= 1, got 0"),
    "top_k too big": (dict(meta=_meta(top_k=9)), "top_k: 9 exceeds the 4 experts"),
    "top_k not a number": (dict(meta=_meta(top_k="a")), "top_k: must be an integer >= 1, got 'a'"),
    "expert gets more than T": (dict(demand=_demand(1, 2, 3, 21)),
                                "demand: sample 1, layer 2: expert 3 gets 21 tokens from a sample of 20 tokens"),
    "layer routes more than k T": (dict(demand=_demand(0, 1, slice(0, 3), 7)),
                                   "demand: sample 0, layer 1 routes 22 tokens, more than top_k x T = 2 x 10 = 20"),
    "alpha not a number": (dict(meta=_meta(cost={"stages": [{"name": "lin", "layers": 2, "alpha": "a", "beta": 0.0}],
                                                 "gamma": 0.5})),
                           "cost.stages[lin].alpha: must be a finite number >= 0, got 'a'"),
    "gamma not a number": (dict(meta=_meta(cost={"stages": [{"name": "lin", "layers": 2, "alpha": 1.0, "beta": 0.0}],
                                                 "gamma": None})),
                           "cost.gamma: must be a finite number >= 0, got None"),
    "object array": (dict(lengths=np.array([10, "x", 30, 40], dtype=object)),
                     "lengths: array in"),
    # overflowed the row certifier's int64 bounds (a traceback from plan and certify)
    "capacity beyond 2^31-1": (dict(meta=_meta(capacity=10**30)),
                               f"cluster.capacity: must be at most 2147483647 tokens, got {10**30}"),
    # a misspelt m was dropped without a word: the window planned with no sample limit
    "cluster key misspelt": (dict(meta={**GOOD_META, "cluster": {**GOOD_META["cluster"], "max_sample_per_cell": 2}}),
                             "cluster.max_sample_per_cell: is not a cluster key (known: dp, edp, ep, capacity, "
                             "max_samples_per_cell)"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_instance_one_line_error(tmp_path, capsys, case):
    kwargs, message = BAD_CASES[case]
    path = _write(tmp_path / "bad.npz", **kwargs)
    with pytest.raises(InputError) as info:
        load_instance(path)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)
    # the CLI prints the same line and exits 2, never a traceback
    assert main(["plan", path, "--json"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {info.value}"


def test_largest_capacity_plans_and_certifies(tmp_path, capsys):
    path = _write(tmp_path / "w.npz", meta=_meta(capacity=2**31 - 1))
    assert main(["certify", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["r_star"] == 1
    assert main(["plan", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True
    capsys.readouterr()
    _write(tmp_path / "big.npz", meta=_meta(capacity=10**30))
    assert main(["certify", str(tmp_path / "big.npz")]) == 2
    assert capsys.readouterr().err.startswith("error: cluster.capacity: must be at most 2147483647")


def test_missing_and_garbage_files(tmp_path, capsys):
    assert main(["plan", str(tmp_path / "nope.npz")]) == 2
    assert "does not exist" in capsys.readouterr().err
    junk = tmp_path / "junk.npz"
    junk.write_text("not a zip")
    assert main(["eval", str(junk), str(junk)]) == 2
    assert "is not an .npz archive" in capsys.readouterr().err


def test_files_that_are_not_window_archives_are_one_line(tmp_path, capsys):
    """A lone .npy array renamed .npz (np.load returns an array: an AttributeError
    traceback) and a meta string nested 10^5 deep (RecursionError): one line, exit 2."""
    single = tmp_path / "single.npz"
    with open(single, "wb") as handle:
        np.save(handle, np.arange(3))
    assert main(["plan", str(single), "--solver", "baseline"]) == 2
    assert capsys.readouterr().err.strip() == f"error: file: {single} is not an .npz archive (it holds one .npy array)"
    deep = tmp_path / "deep.npz"
    np.savez(deep, lengths=np.array([10, 20, 30, 40]), demand=np.ones((4, 3, 4), dtype=np.int64),
             meta=np.array("[" * 100_000 + "]" * 100_000))
    assert main(["plan", str(deep), "--solver", "baseline"]) == 2
    assert capsys.readouterr().err.strip() == "error: meta: is not valid JSON (nested too deeply)"


def test_an_unknown_array_is_left_unread_with_a_warning(tmp_path, caplog):
    """A misspelt ``attn_wrok`` fell back to Q = T^2 silently: the window loads (its
    attention work T^2) and a warning names the array."""
    path = _write(tmp_path / "typo.npz", attn_wrok=np.array([1.0, 2.0, 3.0, 4.0]))
    with caplog.at_level("WARNING", logger="rp_opt"):
        instance = load_instance(path)
    assert np.array_equal(instance.window.attn_work, instance.window.lengths.astype(float) ** 2)
    assert "attn_wrok not read" in caplog.text


def test_fingerprint_tells_attention_work_apart(tmp_path, capsys):
    """Two windows that differ only in their attention work Q had one fingerprint, so a
    plan of one passed for the other. Q = T^2 (the default) adds nothing to the hash."""
    from rp_opt.io import window_fingerprint
    from rp_opt.window import Window

    lengths, demand = np.array([10, 20, 30, 40]), np.ones((4, 3, 4), dtype=np.int64)
    plain = Window(lengths, demand, 2)
    same = Window(lengths, demand, 2, lengths.astype(float) ** 2)
    other = Window(lengths, demand, 2, 0.5 * lengths.astype(float) ** 2)
    assert window_fingerprint(plain) == window_fingerprint(same) != window_fingerprint(other)
    first, second = _write(tmp_path / "q1.npz"), _write(tmp_path / "q2.npz", attn_work=0.5 * lengths ** 2.0)
    plan = str(tmp_path / "p1.json")
    assert main(["plan", first, "--solver", "baseline", "-o", plan, "--json"]) == 0
    capsys.readouterr()
    assert main(["eval", second, plan]) == 2
    assert "plan was made for another window" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
@pytest.mark.parametrize("command", ["gen", "plan", "place", "calibrate", "export"])
def test_output_in_proc_refused_before_any_work(tmp_path, capsys, command):
    """/proc takes no new files, although os.access says its directory is writable (as root)."""
    instance = generate("ling-tiny-like", samples=8, dp=2, ep=2, capacity=512, layers=2, experts=4, top_k=2, seed=1)
    window = str(tmp_path / "w.npz")
    save_instance(window, instance)
    argv = {"gen": ["gen", "--samples", "8", "--dp", "2", "--ep", "2", "--layers", "2"],
            "plan": ["plan", window], "place": ["place", window, "--method", "lpt"],
            "calibrate": ["calibrate", str(tmp_path / "timings.json"), "--window", window],
            "export": ["export", window, str(tmp_path / "p.json")]}[command]
    assert main(argv + ["-o", "/proc/rp-opt-test", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: -o: cannot write /proc/rp-opt-test")
    assert json.loads(captured.out) == {"error": {"field": "-o", "message": captured.err[len("error: -o: "):].strip()}}


def test_check_writable_leaves_no_file(tmp_path):
    from rp_opt.io import check_writable

    assert check_writable(tmp_path / "new.json") == str(tmp_path / "new.json")
    assert not (tmp_path / "new.json").exists()
    (tmp_path / "old.json").write_text("kept")
    check_writable(tmp_path / "old.json")
    assert (tmp_path / "old.json").read_text() == "kept"


@pytest.mark.parametrize("argv, field", [
    (["eval", "{w}", "{d}"], "plan"), (["show", "{w}", "--plan", "{d}"], "--plan"),
    (["plan", "{w}", "--warm-start", "{d}"], "--warm-start"), (["place", "{w}", "--current", "{d}"], "--current"),
    (["calibrate", "{d}"], "timings"), (["export", "{w}", "{d}", "-o", "{t}/ex"], "plan")])
def test_directory_given_as_json_file_one_line(tmp_path, capsys, argv, field):
    instance = generate("ling-tiny-like", samples=8, dp=2, ep=2, capacity=512, layers=2, experts=4, top_k=2, seed=1)
    save_instance(tmp_path / "w.npz", instance)
    folder = tmp_path / "plans"
    folder.mkdir()
    argv = [a.format(w=tmp_path / "w.npz", d=folder, t=tmp_path) for a in argv]
    assert main(argv + ["--json"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == f"error: {field}: {folder} cannot be read (Is a directory)"
    assert json.loads(captured.out)["error"]["field"] == field


@pytest.mark.parametrize("command", ["plan", "show", "certify", "place"])
def test_empty_instance_file_one_line(tmp_path, capsys, command):
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    assert main([command, str(empty), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == f"error: file: {empty} is not an .npz archive (EOFError)"
    assert json.loads(captured.out)["error"]["field"] == "file"


def test_round_trip(tmp_path):
    # conftest.random_instance's routing is not physically possible (an expert gets more
    # tokens than the sample has), which loading rejects; a generated window is
    instance = generate("ling-tiny-like", samples=10, dp=2, ep=2, capacity=512, layers=3, experts=8, top_k=2,
                        seed=5)
    save_instance(tmp_path / "w.npz", instance)
    loaded = load_instance(tmp_path / "w.npz")
    np.testing.assert_array_equal(loaded.window.demand, instance.window.demand)
    np.testing.assert_array_equal(loaded.window.lengths, instance.window.lengths)
    assert loaded.cluster == instance.cluster and loaded.cost == instance.cost
    w = instance.window
    layout, _ = pack(instance, "ffd")
    plan = Plan(Placement.identity(w.num_layers, w.num_experts, 2), layout, "sync", (1.0, 2.0, 3.0))
    save_plan(tmp_path / "p.json", plan)
    again = load_plan(tmp_path / "p.json", loaded)
    np.testing.assert_array_equal(again.layout.cell_of, layout.cell_of)
    assert again.score == (1.0, 2.0, 3.0)


@pytest.mark.parametrize("rank, shown", [(0.5, "0.5"), (1.0, "1.0"), (True, "True"), (2**70, str(2**70)), ("1", "'1'")])
def test_plan_placement_rank_must_be_an_integer(tmp_path, capsys, rank, shown):
    """A placement rank of 0.5 was truncated to 0 and accepted (the checker rejects it),
    2**70 raised OverflowError as a traceback; both are named now, for every reader."""
    instance = generate("ling-tiny-like", samples=8, dp=2, ep=2, capacity=512, layers=2, experts=4, top_k=2, seed=1)
    save_instance(tmp_path / "w.npz", instance)
    layout, _ = pack(instance, "ffd")
    placement = Placement.identity(2, 4, 2)
    # its true score: export refuses a plan file whose claimed score the window does not give
    save_plan(tmp_path / "p.json", Plan(placement, layout, "sync", score(instance, placement, layout, "sync")))
    data = json.loads((tmp_path / "p.json").read_text())
    data["placement"][1][2] = rank
    (tmp_path / "p.json").write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        load_plan(tmp_path / "p.json", instance)
    assert str(info.value) == f"placement[1][2]: must be an integer rank, got {shown}"
    w, p = str(tmp_path / "w.npz"), str(tmp_path / "p.json")
    for argv in (["show", w, "--plan", p], ["plan", w, "--warm-start", p],
                 ["place", w, "--method", "lpt", "--current", p]):
        assert main(argv + ["--json"]) == 2
        captured = capsys.readouterr()
        assert captured.err.strip() == f"error: {info.value}"
        assert json.loads(captured.out)["error"]["field"] == "placement[1][2]"


@pytest.mark.parametrize("key, value, message", [
    ("stats", [1, 2], "stats: must be a JSON object, got [1, 2]"),        # was a TypeError traceback
    ("score", ["a"], "score: must be a list of numbers, got ['a']"),     # was a ValueError traceback (export)
    ("score", 5, "score: must be a list of numbers, got 5"),
    ("score", None, None), ("stats", None, None)])                      # null: not given
def test_plan_optional_fields_checked(tmp_path, capsys, key, value, message):
    instance = generate("ling-tiny-like", samples=8, dp=2, ep=2, capacity=512, layers=2, experts=4, top_k=2, seed=1)
    save_instance(tmp_path / "w.npz", instance)
    layout, _ = pack(instance, "ffd")
    placement = Placement.identity(2, 4, 2)
    # its true score: export refuses a plan file whose claimed score the window does not give
    save_plan(tmp_path / "p.json", Plan(placement, layout, "sync", score(instance, placement, layout, "sync")))
    data = json.loads((tmp_path / "p.json").read_text())
    data[key] = value
    (tmp_path / "p.json").write_text(json.dumps(data))
    w, p = str(tmp_path / "w.npz"), str(tmp_path / "p.json")
    if message is None:
        plan = load_plan(p, instance)
        assert (plan.score if key == "score" else plan.stats) in ((), {})
        assert main(["export", w, p, "-o", str(tmp_path / "ex"), "--json"]) == 0
        capsys.readouterr()
        return
    with pytest.raises(InputError) as info:
        load_plan(p, instance)
    assert str(info.value) == message
    for argv in (["show", w, "--plan", p], ["plan", w, "--warm-start", p],
                 ["export", w, p, "-o", str(tmp_path / "ex")]):
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == f"error: {message}"


def test_compact_demand_dtype():
    instance = random_instance(1)
    assert instance.window.demand.dtype == np.uint16
    from rp_opt.window import compact_counts
    assert compact_counts(np.array([[[70000]]])).dtype == np.uint32


def test_a_loaded_window_keeps_numpy_s_buffer_without_a_copy(tmp_path):
    """np.load's fresh arrays are the loader's alone: the window freezes them in place
    (its copy took 1.1 s and 400 MB at N = 16384). The window's arrays stay read-only, and
    an array that shares a buffer with another (a slice) is still copied."""
    from rp_opt.window import _adopted

    path = _write(tmp_path / "w.npz")
    fresh = np.load(path)["demand"]
    kept = _adopted(fresh)
    assert np.shares_memory(kept, fresh) and not kept.flags.writeable
    bigger = np.ones((8, 3, 4), dtype=np.int64)
    part = _adopted(bigger[:4])
    assert not np.shares_memory(part, bigger) and bigger.flags.writeable
    window = load_instance(path).window
    assert not window.demand.flags.writeable and np.array_equal(window.demand, np.ones((4, 3, 4)))
    with pytest.raises(ValueError):
        window.demand[0, 0, 0] = 5


def test_plan_reports_the_seconds_it_spent_reading(tmp_path, capsys):
    """``plan --json`` says how much of --time-limit reading the window took
    (``read_seconds``; the solver gets the rest)."""
    path = _write(tmp_path / "w.npz")
    assert main(["plan", path, "--solver", "heuristic", "--time-limit", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 0 <= out["read_seconds"] < 1 and out["status"] in ("feasible", "optimal")


def test_review_edges_of_the_window_file(tmp_path, capsys):
    """A view the loader froze is read-only too; -0.0 and 0.0 attention work give one
    fingerprint (equal windows); meta nested 100 deep is refused in one line (it loaded,
    and copying the instance then recursed too deep)."""
    from rp_opt.io import window_fingerprint
    from rp_opt.window import Window, _adopted

    buffer = np.zeros(6)
    view = buffer.reshape(2, 3)
    kept = _adopted(view)
    assert not view.flags.writeable and not kept.flags.writeable
    lengths, demand = np.array([1, 5]), np.zeros((2, 1, 2), dtype=np.int64)
    plus, minus = Window(lengths, demand, 1, [0.0, 5.0]), Window(lengths, demand, 1, [-0.0, 5.0])
    assert plus == minus and window_fingerprint(plus) == window_fingerprint(minus)
    deep = tmp_path / "deep.npz"
    np.savez(deep, lengths=np.array([10, 20, 30, 40]), demand=np.ones((4, 3, 4), dtype=np.int64),
             meta=np.array(json.dumps({**GOOD_META, "extra": json.loads("[" * 100 + "]" * 100)})))
    assert main(["show", str(deep)]) == 2
    assert capsys.readouterr().err.strip() == "error: meta: is nested more than 64 deep"


def test_plan_warns_when_reading_uses_the_whole_limit(tmp_path, capsys, caplog):
    """A limit shorter than reading the window: a warning (logger rp_opt), and a plan."""
    path = _write(tmp_path / "w.npz")
    with caplog.at_level("WARNING", logger="rp_opt"):
        assert main(["plan", path, "--solver", "heuristic", "--time-limit", "1e-9", "--json"]) == 0
    assert "the solver returns its first plan" in caplog.text
    assert json.loads(capsys.readouterr().out)["status"] in ("feasible", "optimal")
