"""Audit of ``rp-opt gen``, the model specs and the generator (second round).

1. a bad ``models/*.toml`` is refused whole when read, one line ``model.<key>: ...``
   naming the file, before any work (it crashed, or was used as it was);
2. every error of ``rp-opt gen`` names the flag, whatever part of the library found it;
3. a window with fewer MoE layers than the spec gets attention stages that add up;
4. the library checks the drift walk's memory, and huge lengths are not misreported;
5. ``--group-corr`` and ``--topic-corr`` on the command line, bounded like the library.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from rp_opt import InputError, Window
from rp_opt.cli import main
from rp_opt.commands.gen import flag_error
from rp_opt.io import load_instance
from rp_opt.models import ModelSpec, available_models, cost_from_spec, load_spec, models_dir, scaled_layers
from rp_opt.synth import generate
from rp_opt.window import routing_violation

GEN = ["gen", "--samples", "16", "--dp", "4", "--edp", "2", "--ep", "2", "--capacity", "4096", "--layers", "2"]
SMALL = dict(samples=16, dp=4, edp=2, ep=2, capacity=4096, layers=2)


def _tiny_text() -> str:
    with open(os.path.join(models_dir(), "ling-tiny-like.toml")) as handle:
        return handle.read()


def _spec_file(tmp_path, old: str, new: str) -> str:
    """ling-tiny-like.toml with the first ``old`` replaced by ``new``, written under tmp_path."""
    text = _tiny_text()
    assert old in text
    path = tmp_path / "spec.toml"
    path.write_text(text.replace(old, new, 1))
    return str(path)


def _run(capsys, argv):
    """Run ``argv`` with --json: (exit code, the JSON on stdout, stderr lines)."""
    code = main(argv + ["--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out.strip() else None, captured.err.strip().splitlines()


# ------------------------------------------------------------------ 1: the spec is checked whole
STAGES = _tiny_text()[_tiny_text().index("[[stages]]"):]
BAD_SPECS = [
    # (old, new, field, start of the message)
    # was a ValueError traceback; -2048 was refused only after the routing was drawn
    ("hidden = 2048", 'hidden = "abc"', "model.hidden", "must be an integer in [1, 2147483647], got 'abc'"),
    ("hidden = 2048", "hidden = -2048", "model.hidden", "must be an integer in [1, 2147483647], got -2048"),
    ("head_dim = 128", 'head_dim = "x"', "model.stages[0].head_dim", "must be an integer in [1, 2147483647], got 'x'"),
    (STAGES, "stages = 3\n", "model.stages", "must be a non-empty list of [[stages]] tables, got 3"),  # TypeError
    ("moe_layers = 20", "moe_layers = 0", "model.moe_layers", "must be an integer in [1, 2147483647], got 0"),
    ("top_k = 8", "top_k = 300", "model.top_k", "must be an integer in [1, 256] (at most num_experts), got 300"),
    ("layers = 15", "layers = -15", "model.stages[0].layers", "must be an integer in [0, 2147483647], got -15"),
    ("heads = 16", "heads = 1.5", "model.stages[0].heads", "must be an integer in [1, 2147483647], got 1.5"),
    ("num_experts = 256", "num_experts = 0", "model.num_experts", "must be an integer in [1, 2147483647], got 0"),
    ("dtype_bytes = 2", "dtype_bytes = 0", "model.dtype_bytes", "must be an integer in [1, 8], got 0"),
    ('name = "ling-tiny-like"', 'name = ""', "model.name", "must be a non-empty string, got ''"),
    ('name = "ling-tiny-like"', "name = 7", "model.name", "must be a non-empty string, got 7"),
    ("dtype_bytes = 2", "dtype_byte = 1", "model.dtype_byte", "is not a key of a model spec"),  # typo was ignored
    ("top_k = 8", "top-k = 8", "model.top_k", "is missing"),
    ('kind = "linear"', 'kind = "mamba"', "model.stages[0].kind",
     "must be one of ['gqa', 'linear', 'mla'], got 'mamba'"),
    ('kind = "linear"', "kind = [1]", "model.stages[0].kind", "must be one of"),  # unhashable: was a TypeError
    ("head_dim = 128", "head_dim = 128\nkv_heads = 4", "model.stages[0].kv_heads", "is not a key of a linear stage"),
    ('name = "mla"', 'name = "linear"', "model.stages[1].name", "'linear' names an earlier stage too"),
    ("heads = 16\nhead_dim", "head_dim", "model.stages[0].heads", "is missing"),
    ("layers = 5", "layers = 0", None, None),  # one stage of 0 layers is fine ...
]


@pytest.mark.parametrize("old, new, field, message", BAD_SPECS, ids=[str(i) for i in range(len(BAD_SPECS))])
def test_bad_spec_is_one_line_naming_the_key_and_file(tmp_path, old, new, field, message):
    path = _spec_file(tmp_path, old, new)
    if field is None:
        assert [s["layers"] for s in load_spec(path).stages] == [15, 0]
        return
    with pytest.raises(InputError) as info:
        load_spec(path)
    assert info.value.field == field
    assert info.value.message.startswith(message), info.value.message
    assert info.value.message.endswith(f"(in {path})") and "\n" not in str(info.value)


def test_spec_with_no_attention_layer_is_refused(tmp_path):
    """... but a model with no attention at all is not a spec the cost model can use."""
    path = tmp_path / "spec.toml"
    path.write_text(_tiny_text().replace("layers = 15", "layers = 0").replace("layers = 5", "layers = 0"))
    with pytest.raises(InputError, match=r"^model\.stages: have 0 layers in all"):
        load_spec(str(path))


def test_shipped_specs_load_as_integers():
    """The four shipped specs pass; whole floats in a spec (hidden = 2048.0) are integers."""
    assert len(available_models()) == 4
    for name in available_models():
        spec = load_spec(name)
        assert all(type(v) is int for s in spec.stages for k, v in s.items() if k not in ("name", "kind"))
    spec = ModelSpec("x", 2048.0, 8, 2, 512, 4, [{"name": "a", "kind": "gqa", "layers": 4.0, "heads": 4,
                                                  "kv_heads": 2, "head_dim": 64}])
    assert (type(spec.hidden), type(spec.stages[0]["layers"])) == (int, int)
    with pytest.raises(InputError, match=r"^model\.top_k: must be an integer in \[1, 8\]"):
        ModelSpec("x", 2048, 8, 9, 512, 4, spec.stages)


def test_bad_spec_fails_before_any_routing(tmp_path):
    """hidden = -2048 was refused by the cost model after the routing had been drawn."""
    steps = []
    with pytest.raises(InputError, match=r"^model\.hidden: "):
        generate(_spec_file(tmp_path, "hidden = 2048", "hidden = -2048"), **SMALL,
                 progress=lambda *a: steps.append(a))
    assert steps == []


def test_gen_bad_spec_names_model_flag(capsys, tmp_path):
    """``rp-opt gen --model PATH.toml`` with moe_layers = 0 and --layers 2 was a
    ZeroDivisionError traceback; now one line on --model naming the key and the file."""
    path = _spec_file(tmp_path, "moe_layers = 20", "moe_layers = 0")
    out = tmp_path / "w.npz"
    code, data, err = _run(capsys, GEN + ["--model", path, "-o", str(out)])
    assert code == 2 and not out.exists() and len(err) == 1
    assert data == {"error": {"field": "--model", "message": "model.moe_layers must be an integer in [1, 2147483647], "
                                                             f"got 0 (in {path})"}}


# ------------------------------------------------------------------ 2: gen's errors name the flag
@pytest.mark.parametrize("change, field, message", [
    (["--top-k", "300", "--layers", "1"], "--top-k", "must be an integer in [1, 256] (the experts), got 300"),
    (["--top-k", "0"], "--top-k", "must be an integer in [1, 2147483647], got '0'"),  # argparse's, as before
    (["--ep", "5"], "--ep", "P=5 does not divide E=256"),
    (["--dp", "4", "--edp", "3"], "--edp", "G=3 does not divide D=4"),
    (["--model", "nope"], "--model", "unknown model 'nope'"),
    (["--samples", "2000000", "--layers", "20"], "--samples", "N=2000000 with L=20, E=256 needs about 47.7 GiB"),
    (["--layers", "2147483647"], "--layers", "N=16 with L=2147483647, E=256 needs about"),
    (["--experts", "100000000"], "--experts", "N=16 with L=2, E=100000000 needs about"),
    (["--drift-steps", "2147483647"], "--drift-steps", "2147483647 steps with L=2, E=256 need about"),
])
def test_gen_errors_name_the_flag(capsys, tmp_path, change, field, message):
    out = tmp_path / "w.npz"
    code, data, err = _run(capsys, GEN + change + ["-o", str(out)])
    assert code == 2 and not out.exists() and len(err) == 1
    assert data["error"]["field"] == field and data["error"]["message"].startswith(message), data


def test_flag_error_keeps_fields_no_flag_sets():
    assert str(flag_error(InputError("cluster.max_samples_per_cell", "x"))) == "--max-samples-per-cell: x"
    assert str(flag_error(InputError("lengths", "x"))) == "lengths: x"
    assert str(flag_error(InputError("model.stages[0].heads", "is missing (in f.toml)"))) == \
        "--model: model.stages[0].heads is missing (in f.toml)"


# ------------------------------------------------------------------ 3: scaled layers add up
def test_small_layer_override_keeps_the_spec_ratio():
    """ling-tiny-like (15 linear + 5 MLA attention layers for 20 MoE layers) at L=2 had
    round(1.5) + max(1, round(0.5)) = 3 attention layers for 2 MoE layers."""
    layers = lambda model, count: [s.layers for s in cost_from_spec(model, count).stages]  # noqa: E731
    assert layers("ling-tiny-like", 2) == [1, 1]
    assert layers("ling-tiny-like", 6) == [5, 1]      # 4.5 + 1.5: the tie to the first stage, not [4, 2]
    assert layers("ling-tiny-like", 8) == [6, 2]
    assert layers("ling-tiny-like", 1) == [1, 1]      # each stage keeps one (the MLA T^2 term with it)
    assert layers("ling-tiny-like", None) == layers("ling-tiny-like", 20) == [15, 5]
    assert layers("deepseek-v3-like", 29) == [31]      # 61 x 29 / 58 = 30.5, half up (round() gave 30)
    assert layers("ling-tiny-like", 40) == [30, 10]
    for count in range(2, 41):
        got = layers("ling-tiny-like", count)
        assert sum(got) == count and min(got) >= 1, (count, got)
        assert all(abs(n - share * count) < 1 for n, share in zip(got, (0.75, 0.25))), (count, got)
    assert [s.layers for s in generate(**SMALL).cost.stages] == [1, 1]


def test_scaled_layers_each_stage_keeps_one():
    assert scaled_layers([10, 1, 1], 12, 2) == [1, 1, 1]  # 3 stages for 2 layers: one each
    assert scaled_layers([10, 0, 2], 12, 6) == [5, 0, 1]  # a stage without layers stays without
    assert scaled_layers([0, 0], 4, 2) == [0, 0]
    with pytest.raises(InputError, match=r"^moe_layers: must be an integer >= 1 or None, got 0$"):
        cost_from_spec("ling-tiny-like", 0)


# ------------------------------------------------------------------ 4: library gaps
def test_generate_checks_the_drift_walk_memory():
    """Only rp-opt gen checked it: the library raised MemoryError (410 GB for the walk)."""
    with pytest.raises(InputError, match=r"^drift_steps: 100000000 steps with L=2, E=256 need about 381\.5 GiB "
                                         r"for the drift walk, more than the 8 GiB limit$"):
        generate(**SMALL, drift_steps=10**8)


def test_huge_lengths_are_checked_without_wrapping():
    """k x T_i wrapped around in int64: one routed token of a 2^61-token sample was "more
    than top_k x T = 4 x 2^61" (with the Python product printed)."""
    assert Window([2**61], [[[1, 0, 0, 0]]], 4).top_k == 4
    with pytest.raises(InputError, match=r"^demand: sample 0, layer 0 routes 9223372036854775808 tokens, more than "
                                         r"top_k x T = 3 x 2305843009213693952 = 6917529027641081856$"):
        Window([2**61], [[[2**61] * 4]], 3)
    # the replay's check (no per-expert bound): the layer's sum itself beyond int64
    demand = np.array([[[2**62, 2**62, 2**62, 0]]], dtype=np.uint64)
    assert routing_violation(demand, np.array([2**61]), 4, visits=False) == ("routed", 0, 0, None, 3 * 2**62)
    assert routing_violation(demand, np.array([2**61]), 6, visits=False) is None


@pytest.mark.parametrize("length, message", [
    (2.0**62, r"^lengths: sample 0 has length 4\.61169e\+18, too large: at least 2\^62 tokens"),  # "not an integer"
    (1e300, r"^lengths: sample 0 has length 1e\+300, too large"),
    (-1e300, r"^lengths: sample 0 has length -1e\+300; every sample needs >= 1 token$"),
    (2.5, r"^lengths: sample 0 has length 2\.5, not an integer$"),
])
def test_float_lengths_say_what_is_wrong(length, message):
    with pytest.raises(InputError, match=message):
        Window([length], [[[1, 0, 0, 0]]], 4)


# ------------------------------------------------------------------ 5: --group-corr, --topic-corr
def test_gen_takes_the_correlation_knobs(capsys, tmp_path):
    out = str(tmp_path / "w.npz")
    assert main(GEN + ["--group-corr", "0", "--topic-corr", "2.5", "--seed", "3", "-o", out, "--json"]) == 0
    capsys.readouterr()
    written = load_instance(out)
    same = generate(**SMALL, seed=3, group_corr=0, topic_corr=2.5)
    np.testing.assert_array_equal(written.window.demand, same.window.demand)
    assert (written.meta["generator"]["group_corr"], written.meta["generator"]["topic_corr"]) == (0.0, 2.5)
    with pytest.raises(SystemExit):
        main(["gen", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--group-corr" in text and "--topic-corr" in text and "in [0, 1000] (default 0.5; 0: none)" in text


@pytest.mark.parametrize("flag, value", [("--group-corr", "-0.1"), ("--group-corr", "1001"),
                                         ("--topic-corr", "nan"), ("--topic-corr", "1e308")])
def test_gen_correlation_knobs_are_bounded(capsys, tmp_path, flag, value):
    out = tmp_path / "w.npz"
    code, data, err = _run(capsys, GEN + [flag, value, "-o", str(out)])
    assert code == 2 and not out.exists() and len(err) == 1
    assert data["error"]["field"] == flag
    assert data["error"]["message"].startswith(f"must be a number in [0, 1000], got '{value}'")


@pytest.mark.parametrize("knob", ["skew", "group_corr", "topic_corr", "drift"])
def test_library_bounds_the_routing_knobs(knob):
    """1e308 overflowed the logits (RuntimeWarnings, routing from the NaN clean-up); the
    library now refuses what rp-opt gen refuses."""
    with pytest.raises(InputError, match=rf"^{knob}: must be a number in \[0, 1000\], got 1e\+308$"):
        generate(**SMALL, **{knob: 1e308})
    assert generate(**SMALL, **{knob: 1000}).window.num_samples == 16


def test_a_model_file_that_is_not_text_is_one_line(tmp_path, capsys):
    """A .toml of bytes that are not UTF-8 raised UnicodeDecodeError (a traceback)."""
    from rp_opt.cli import main

    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe")
    assert main(["gen", "--samples", "16", "-o", str(tmp_path / "x.npz"), "--model", str(bad)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(err) == 1 and "is not valid TOML" in err[0]
