"""Defects found by a review of the command line with hostile inputs: each is one line
naming the field and the value, exit code 2, never a traceback (with --json also the
error object on stdout)."""

import json

import numpy as np
import pytest

from rp_opt.cli import main
from test_cli_inputs import GEN


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A 16-sample window, a baseline plan of it and its export."""
    root = tmp_path_factory.mktemp("cli_review")
    window, plan, export = str(root / "w16.npz"), str(root / "p.json"), str(root / "ex")
    assert main(GEN + ["--seed", "0", "-o", window, "--json"]) == 0
    assert main(["plan", window, "--solver", "baseline", "-o", plan, "--json"]) == 0
    assert main(["export", window, plan, "-o", export, "--json"]) == 0
    return {"root": root, "window": window, "plan": plan, "export": export + ".npz"}


def _bad(capsys, argv, field, *needles):
    """``argv`` with --json: exit code 2, one stderr line naming ``field`` and every needle,
    and the error object (with that field) as the only thing on stdout."""
    code = main(argv + ["--json"])
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, (code, captured.err)
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), captured.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert json.loads(captured.out)["error"]["field"] == field
    return captured


def _window(files, name, **changes):
    """A copy of the window with some arrays (or the meta's cost) replaced."""
    with np.load(files["window"]) as archive:
        arrays = {key: archive[key] for key in archive.files}
    if "cost" in changes:
        meta = json.loads(str(arrays["meta"]))
        meta["cost"] = changes.pop("cost")
        arrays["meta"] = np.array(json.dumps(meta))
    arrays.update(changes)
    path = str(files["root"] / name)
    np.savez(path, **arrays)
    return path


# ------------------------------------------------------------------ place --tolerance
def test_place_huge_tolerance_is_one_line(files, capsys):
    """--tolerance 1e308 overflowed the migration model's load cap (OverflowError)."""
    _bad(capsys, ["place", files["window"], "--method", "exact", "--objective", "migration", "--time-limit", "1",
                  "--tolerance", "1e308"], "--tolerance", "<= 1e+06", "1e+308")


# ------------------------------------------------------------------ cost magnitudes
def _cost_file(files, name, alpha, beta, gamma):
    path = files["root"] / name
    path.write_text(json.dumps({"stages": [{"name": "a", "layers": 1, "alpha": alpha, "beta": beta}],
                                "gamma": gamma}))
    return str(path)


@pytest.mark.parametrize("command", [["plan", "--solver", "heuristic", "--time-limit", "1"],
                                     ["plan", "--solver", "exact", "--time-limit", "1"], ["show"], ["eval"]])
def test_cost_that_overflows_is_one_line(files, capsys, command):
    """A cost model whose costs overflow a float (alpha = 1e308) crashed plan and printed
    numpy warnings and a null score in show and eval."""
    cost = _cost_file(files, "huge.json", 1e308, 1e308, 1e308)
    argv = [command[0], files["window"], *(["--plan", files["plan"]] if command[0] == "show" else []),
            *([files["plan"]] if command[0] == "eval" else []), *command[1:], "--cost", cost]
    _bad(capsys, argv, "--cost", "1e+100")


def test_subnormal_cost_coefficient_is_one_line(files, capsys):
    """gamma = 1e-320 made the exact solver's integer scale infinite (OverflowError)."""
    cost = _cost_file(files, "tiny.json", 1e-320, 1e-320, 1e-320)
    _bad(capsys, ["plan", files["window"], "--solver", "exact", "--time-limit", "1", "--cost", cost],
         "--cost", "cost.stages[a].alpha", "1e-320")


def test_window_attention_work_that_overflows_is_one_line(files, capsys):
    """attn_work of 1e308 (finite, so the window loaded) crashed the heuristic."""
    path = _window(files, "aw.npz", attn_work=np.full(16, 1e308))
    _bad(capsys, ["plan", path, "--solver", "heuristic", "--time-limit", "1"], "cost", "1e+100")


# ------------------------------------------------------------------ export --previous
@pytest.mark.parametrize("name, change", [
    ("strings", lambda a: {"phy2log": np.array(["a"] * a["phy2log"].size).reshape(a["phy2log"].shape)}),
    ("nan_placement", lambda a: {"placement": np.full(a["placement"].shape, np.nan)}),
    ("not_permutation", lambda a: {"phy2log": np.zeros_like(a["phy2log"])}),
])
def test_export_previous_with_bad_arrays(files, capsys, name, change):
    """A --previous whose phy2log holds strings or whose placement holds NaN crashed; one
    whose phy2log is not a permutation was reported as '-o: cannot write' after the work."""
    with np.load(files["export"]) as archive:
        arrays = {key: archive[key] for key in archive.files}
    arrays.update(change(arrays))
    previous = str(files["root"] / f"prev_{name}.npz")
    np.savez(previous, **arrays)
    out = str(files["root"] / f"out_{name}")
    _bad(capsys, ["export", files["window"], files["plan"], "-o", out, "--previous", previous], "--previous", previous)
    assert not (files["root"] / f"out_{name}.json").exists()


# ------------------------------------------------------------------ certify
def test_certify_lengths_beyond_64_bit_integers(files, capsys):
    """uint64 lengths of 2^64-1 wrapped to -1 and crashed the certifier (IndexError)."""
    path = _window(files, "u64.npz", lengths=np.full(16, 2**64 - 1, dtype=np.uint64))
    _bad(capsys, ["certify", path, "--time-limit", "1"], "lengths", str(2**64 - 1))


def test_export_previous_identity(files, capsys):
    """``--previous identity``: the identity map is in force (a trainer's first step), so
    every expert that stays on its rank (after the ranks are relabelled: at least as many as
    in the plan) keeps slot e = its own id; without it the slots of each rank are filled
    anew."""
    from rp_opt.io import load_instance, read_plan_file, plan_from_dict

    lpt = str(files["root"] / "lpt.json")
    assert main(["plan", files["window"], "--solver", "lpt-ffd", "-o", lpt, "--json"]) == 0
    out, fresh = str(files["root"] / "first"), str(files["root"] / "fresh")
    assert main(["export", files["window"], lpt, "-o", out, "--previous", "identity", "--json"]) == 0
    assert main(["export", files["window"], lpt, "-o", fresh, "--json"]) == 0
    capsys.readouterr()
    plan = plan_from_dict(load_instance(files["window"]), read_plan_file(lpt))
    per_rank = plan.placement.ranks.shape[1] // plan.placement.num_ranks
    in_force = np.arange(plan.placement.ranks.shape[1])[None, :] // per_rank   # rank of slot e = expert e
    ranks = np.load(out + ".npz")["placement"]                              # relabelled
    stays = ranks == in_force                                               # expert e still on slot e's rank
    assert stays.any() and not stays.all() and stays.sum() >= (plan.placement.ranks == in_force).sum()
    layer, expert = np.nonzero(stays)
    kept = np.load(out + ".npz")["phy2log"]
    assert np.all(kept[layer, expert] == expert)
    assert np.all(np.sort(kept, axis=1) == np.arange(ranks.shape[1]))
    # filled anew, some staying expert changes slot: what --previous identity avoids
    assert not np.all(np.load(fresh + ".npz")["phy2log"][layer, expert] == expert)
