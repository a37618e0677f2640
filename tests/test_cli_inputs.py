"""Bad input on the command line: one line naming the flag or field and the value, exit
code 2, never a traceback (and with --json an error object on stdout)."""

import json
import os

import numpy as np
import pytest

from rp_opt.cli import main

GEN = ["gen", "--samples", "16", "--dp", "4", "--edp", "2", "--ep", "2", "--capacity", "4096", "--layers", "2"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A 16-sample window, a 24-sample one, a baseline plan of the first and its export."""
    root = tmp_path_factory.mktemp("cli_inputs")
    w16, w24, plan = str(root / "w16.npz"), str(root / "w24.npz"), str(root / "p.json")
    assert main(GEN + ["--seed", "0", "-o", w16, "--json"]) == 0
    assert main(["gen", "--samples", "24", "--dp", "4", "--edp", "2", "--ep", "2", "--capacity", "4096",
                 "--layers", "2", "-o", w24, "--json"]) == 0
    assert main(["plan", w16, "--solver", "baseline", "-o", plan, "--json"]) == 0
    return {"root": root, "w16": w16, "w24": w24, "plan": plan}


def _bad(capsys, argv, *needles):
    """Run ``argv``: exit code 2, exactly one stderr line, holding every needle."""
    code = main(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip() and not line.startswith(
        ("Running HiGHS", "Includes third-party", "planning "))]
    assert code == 2, (code, captured.err)
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return captured


def _plan_data(files):
    with open(files["plan"]) as handle:
        return json.load(handle)


def _write(files, name, data):
    path = files["root"] / name
    path.write_text(json.dumps(data))
    return str(path)


# ------------------------------------------------------------------ item 2: output paths
@pytest.mark.parametrize("command", ["plan", "place", "gen", "calibrate"])
def test_output_path_checked_before_any_work(files, capsys, command, tmp_path):
    missing = str(tmp_path / "nodir" / "out.json")
    args = {"plan": ["plan", files["w16"], "--solver", "heuristic", "--time-limit", "1"],
            "place": ["place", files["w16"], "--method", "lpt"],
            "gen": GEN,
            "calibrate": ["calibrate", str(tmp_path / "does-not-matter.json"), "--window", files["w16"]]}[command]
    _bad(capsys, args + ["-o", missing], "-o:", "nodir", "does not exist")
    _bad(capsys, args + ["-o", str(tmp_path)], "-o:", str(tmp_path), "is a directory")


@pytest.mark.parametrize("command", ["gen", "plan", "place", "calibrate"])
def test_every_written_file_is_reported_as_output(files, capsys, command):
    """gen, plan, place and calibrate report the file they wrote under one key, ``output``
    (null without -o, which only gen requires), so a script reads it the same way from
    every command."""
    timings = _fittable_timings(files, capsys)
    args = {"plan": ["plan", files["w16"], "--solver", "baseline"],
            "place": ["place", files["w16"], "--method", "lpt"],
            "gen": GEN,
            "calibrate": ["calibrate", timings, "--window", files["w16"]]}[command]
    target = str(files["root"] / f"written-{command}.{'npz' if command == 'gen' else 'json'}")
    assert main(args + ["--json", "-o", target]) == 0
    assert json.loads(capsys.readouterr().out)["output"] == target
    if command != "gen":  # gen always writes: -o is required
        assert main(args + ["--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["output"] is None and "write_error" not in data


def test_output_never_overwrites_an_input_of_another_kind(files, capsys, tmp_path):
    """``plan w.npz -o w.npz`` replaced the window by a plan file (and export -o PREFIX the
    window or the plan, calibrate -o the timings); a plan may still replace the plan it
    started from (--warm-start, --current)."""
    import shutil

    window, plan = str(tmp_path / "w.npz"), str(tmp_path / "p.json")
    shutil.copy(files["w16"], window)
    shutil.copy(files["plan"], plan)
    timings = _write(files, "own_timings.json", _timings(files, [[1.0, 2.0]] * len(_plan_data(files)["rows"])))
    before = {path: open(path, "rb").read() for path in (window, plan, timings)}
    for argv, needles in (
            (["plan", window, "-o", window, "--json"], ["is the window"]),
            (["place", window, "--method", "lpt", "-o", window], ["is the window"]),
            (["export", window, plan, "-o", window[:-4]], ["w.npz is the window"]),
            (["export", window, plan, "-o", plan[:-5]], ["p.json is the plan"]),
            (["calibrate", timings, "--window", window, "-o", timings], ["is the timings file"]),
            (["calibrate", timings, "--window", window, "-o", window], ["is the window"])):
        _bad(capsys, argv, "-o:", *needles)
    assert before == {path: open(path, "rb").read() for path in before}
    assert main(["plan", window, "--warm-start", plan, "-o", plan, "--json"]) == 0
    assert main(["place", window, "--method", "lpt", "--current", plan, "-o", plan, "--json"]) == 0
    capsys.readouterr()
    assert main(["eval", window, plan, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True


def test_export_output_checked_up_front(files, capsys, tmp_path, monkeypatch):
    _bad(capsys, ["export", files["w16"], files["plan"], "-o", str(tmp_path / "nodir" / "x")], "-o:", "does not exist")
    # a prefix without a file name would write hidden files '.json' / '.npz' in that directory
    monkeypatch.chdir(tmp_path)
    for prefix in ("", str(tmp_path) + "/", "."):
        _bad(capsys, ["export", files["w16"], files["plan"], "-o", prefix], "-o:", "must end in a file name",
             repr(prefix))
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_export_output_naming_a_directory_is_refused(files, capsys, tmp_path):
    """``export -o DIR`` took DIR as a prefix and wrote DIR.json and DIR.npz beside the
    directory (``-o /tmp``: /tmp.json); it is now one line naming -o and the directory,
    with a prefix inside it as the example, and nothing is written anywhere."""
    folder = tmp_path / "out"
    folder.mkdir()
    captured = _bad(capsys, ["export", files["w16"], files["plan"], "-o", str(folder), "--json"],
                    "-o:", f"{folder} is a directory", f"-o {folder / 'export'} writes {folder / 'export'}.json")
    assert json.loads(captured.out)["error"]["field"] == "-o"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not any(folder.iterdir())
    # a prefix inside the directory writes there
    assert main(["export", files["w16"], files["plan"], "-o", str(folder / "step3"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["json"] == str(folder / "step3.json")
    assert sorted(p.name for p in folder.iterdir()) == ["step3.json", "step3.npz"]


@pytest.mark.parametrize("given", ["step4.json", "step4.npz"])
def test_export_output_with_an_extension_is_the_prefix(files, capsys, tmp_path, given):
    """``-o step4.json`` (or .npz) writes step4.json and step4.npz, not step4.json.json."""
    assert main(["export", files["w16"], files["plan"], "-o", str(tmp_path / given), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["json"] == str(tmp_path / "step4.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step4.json", "step4.npz"]


def test_export_help_says_what_o_takes(capsys):
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "writes OUT_PREFIX.json and OUT_PREFIX.npz" in text and "an existing directory is refused" in text


def test_export_write_failure_is_one_line(files, capsys, monkeypatch, tmp_path):
    import rp_opt.export

    def broken(plan, prefix, previous=None, extra=None, **options):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rp_opt.export, "export_plan", broken)
    captured = _bad(capsys, ["export", files["w16"], files["plan"], "-o", str(tmp_path / "ex"), "--json"],
                    "-o: cannot write", "No space left on device")
    data = json.loads(captured.out)
    assert data["valid"] is True and data["json"] is None and data["npz"] is None
    assert "No space left on device" in data["write_error"] and data["num_rows"] == len(_plan_data(files)["rows"])


def test_write_failure_after_solving_still_prints_the_result(files, capsys, monkeypatch, tmp_path):
    import rp_opt.commands.plan as plan_command

    def broken(path, plan, *rest):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plan_command, "save_plan", broken)
    out = str(tmp_path / "p.json")
    assert main(["plan", files["w16"], "--json", "-o", out]) == 2
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["valid"] is True and data["output"] is None
    assert "No space left on device" in data["write_error"]
    assert [line for line in captured.err.splitlines() if line.startswith("error:")] == [
        f"error: {data['write_error']}"]
    assert main(["plan", files["w16"], "-o", out]) == 2
    captured = capsys.readouterr()
    assert "score" in captured.out and "plan written" not in captured.out


# ------------------------------------------------------------------ items 3, 9: flags
@pytest.mark.parametrize("argv, needles", [
    (["plan", "--seed", "-1"], ["--seed", "-1"]),
    (GEN + ["--seed", "-1", "-o", "x.npz"], ["--seed", "-1"]),
    (["plan", "--time-limit", "inf"], ["--time-limit", "inf"]),
    (["plan", "--time-limit", "nan"], ["--time-limit", "nan"]),
    (["plan", "--time-limit", "0"], ["--time-limit", "0"]),
    (["certify", "--time-limit", "inf"], ["--time-limit", "inf"]),
    (["certify", "--time-limit", "-0.5"], ["--time-limit", "-0.5"]),
    (["place", "--time-limit=-inf"], ["--time-limit", "-inf"]),
    (["bench", "tiny", "--time-limit", "inf"], ["--time-limit", "inf"]),
    (["plan", "--seed", "1.5"], ["--seed", "1.5"]),
    (["plan", "--solver", "exact", "--seed", "2147483648"], ["--seed", "[0, 2147483647]", "2147483648"]),
    (["plan", "--seed", "1e30"], ["--seed", "1e30"]),
    (GEN + ["--seed", "4294967296", "-o", "x.npz"], ["--seed", "4294967296"]),
    (["bench", "tiny", "--seeds", "0,2147483648"], ["--seeds", "[0, 2147483647]"]),
    (["gen"], ["-o/--output", "rp-opt gen --help"]),
])
def test_bad_flags_one_line(capsys, argv, needles):
    _bad(capsys, argv, *needles)


def test_certify_time_limit_zero_gives_the_quick_certificate(capsys):
    """certify --time-limit 0: the bounds and the FFD/BFD packings only, at once (the
    certifier takes 0; the other commands need time to plan and refuse it). On a BPPLIB
    instance the bound stays at or below the bins found, and the answer is not "optimal"
    unless they meet."""
    import os

    bpp = os.path.join(os.path.dirname(__file__), "data", "bpplib", "falkenauer_t", "Falkenauer_t60_00.txt")
    code = main(["certify", "--bpp", bpp, "--time-limit", "0", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["seconds"] < 1.0
    assert data["lower_bound"] <= data["upper_bound"]
    assert (code == 0) == (data["status"] == "optimal") == (data["lower_bound"] == data["upper_bound"])


@pytest.mark.parametrize("flag, value, needles", [
    ("--capacity", "99999999999999999999", ["[32, 2147483647]"]),   # was OverflowError
    ("--group-size", "99999999999999999999", ["[1, 2147483647]"]),  # was OverflowError
    ("--drift-steps", "99999999999999999999", ["[0, 2147483647]"]),  # was numpy's ValueError
    ("--drift-steps", "2147483647", ["GiB for the drift walk", "8 GiB limit"]),  # was MemoryError
    ("--skew", "1e308", ["[0, 1000]"]),                             # was overflow warnings
    ("--samples", "nan", ["[1, 2147483647]", "'nan'"]),
])
def test_gen_huge_values_one_line(capsys, tmp_path, flag, value, needles):
    out = tmp_path / "w.npz"
    _bad(capsys, GEN + [flag, value, "-o", str(out), "--json"], flag, value, *needles)
    assert not out.exists()


def test_gen_refuses_to_overwrite_unless_forced(capsys, tmp_path):
    """``gen -o FILE`` replaced an existing FILE without a word (a recorded window among
    them); it is now one line naming -o and the file, exit code 2 before any work, the file
    untouched; --force replaces it."""
    out = tmp_path / "w.npz"
    assert main(GEN + ["--seed", "0", "-o", str(out), "--json"]) == 0
    capsys.readouterr()
    before = out.read_bytes()
    captured = _bad(capsys, GEN + ["--seed", "1", "-o", str(out), "--json"], "-o:", f"{out} exists", "--force")
    assert json.loads(captured.out) == {"error": {"field": "-o",
                                                  "message": f"{out} exists; pass --force to replace it"}}
    assert out.read_bytes() == before
    assert main(GEN + ["--seed", "1", "-o", str(out), "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["output"] == str(out)
    assert out.read_bytes() != before
    # --force without a file to replace writes as usual
    fresh = tmp_path / "fresh.npz"
    assert main(GEN + ["-o", str(fresh), "--force", "--json"]) == 0
    assert fresh.exists()
    with pytest.raises(SystemExit):
        main(["gen", "--help"])
    assert "refused unless --force" in " ".join(capsys.readouterr().out.split())


def test_gen_largest_values_accepted(capsys, tmp_path):
    out = str(tmp_path / "w.npz")
    assert main(GEN + ["--capacity", "2147483647", "--group-size", "2147483647", "--drift-steps", "3",
                       "--skew", "1000", "--experts", "4", "--top-k", "2", "-o", out, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples"] == 16
    assert main(["plan", out, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True


@pytest.mark.parametrize("solver", ["exact", "joint", "auto"])
def test_largest_seed_reaches_the_32_bit_solvers(files, capsys, solver):
    """2^31 - 1 is accepted and CP-SAT / HiGHS take it (2^31 made CP-SAT raise a TypeError)."""
    assert main(["plan", files["w16"], "--solver", solver, "--seed", "2147483647", "--time-limit", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True


@pytest.mark.parametrize("option, needles", [
    ("seed=3", ["--option", "seed=3", "--seed"]),
    ("time_limit=2", ["--option", "--time-limit"]),
    ("objective=shard", ["--option", "--objective"]),
    ("placement=lpt", ["--option", "placement", "--warm-start PLAN.json"]),
])
def test_option_that_has_its_own_flag(files, capsys, option, needles):
    """A placement comes in a plan file (``--warm-start``): as an --option no value could be
    one (every value was "placement: must be a Placement, got str")."""
    for solver in ("heuristic", "exact"):
        _bad(capsys, ["plan", files["w16"], "--solver", solver, "--time-limit", "1", "--option", option], *needles)


@pytest.mark.parametrize("solver, option", [("exact", "workers=1000000000000"), ("joint", "workers=257"),
                                            ("heuristic", "workers=1000"), ("auto", "search_workers=300")])
def test_thread_and_process_counts_are_bounded(files, capsys, solver, option):
    """At most 256 threads or processes (CP-SAT's error for 10^12 workers was four lines
    with an object address)."""
    name, value = option.split("=")
    _bad(capsys, ["plan", files["w16"], "--solver", solver, "--time-limit", "1", "--option", option],
         f"{name}: must be an integer in [1, 256]", value)


def test_unknown_option_of_auto_names_auto(files, capsys):
    _bad(capsys, ["plan", files["w16"], "--solver", "auto", "--option", "zz=1"], "for solver auto")


@pytest.mark.parametrize("limit, shown", [("0.001", "limit 0.001 s"), ("1e300", "limit 1e+300 s"),
                                          ("10", "limit 10 s")])
def test_plan_progress_line_shows_the_limit_as_given(files, capsys, caplog, limit, shown):
    """The "planning ..." line printed the limit with %.1f: 1e-3 s as "0.0 s", 1e300 s as 301 digits."""
    import logging

    with caplog.at_level(logging.INFO, logger="rp_opt"):
        assert main(["plan", files["w16"], "--time-limit", limit]) == 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("planning ")]
    assert len(lines) == 1 and lines[0].endswith(f"(sync, {shown})"), lines


def test_option_value_a_solver_does_not_check_is_one_line(files, capsys):
    _bad(capsys, ["plan", files["w16"], "--solver", "exact", "--time-limit", "1", "--option", "num_rows=abc"],
         "num_rows", "abc")
    # kk divided by the row count: a ZeroDivisionError traceback before; the baselines now
    # check num_rows themselves (0, -1 and 1.5 were taken or truncated)
    for value in ("0", "-1", "1.5"):
        _bad(capsys, ["plan", files["w16"], "--solver", "kk", "--option", f"num_rows={value}"], "num_rows", value)


# ------------------------------------------------------------------ item 14: --json errors
def test_json_error_object_on_stdout(files, capsys):
    captured = _bad(capsys, ["plan", files["w16"], "--seed", "-1", "--json"], "--seed")
    assert json.loads(captured.out) == {"error": {"field": "--seed",
                                                  "message": "must be an integer in [0, 2147483647], got '-1' "
                                                             "(see rp-opt plan --help)"}}
    for flag in ("--js", "--j"):  # argparse's abbreviations of --json: the same object
        captured = _bad(capsys, ["plan", files["w16"], "--seed", "-1", flag], "--seed")
        assert json.loads(captured.out)["error"]["field"] == "--seed"
    captured = _bad(capsys, ["plan", files["w16"], "--solver", "magic", "--json"], "solver")
    error = json.loads(captured.out)["error"]
    assert error["field"] == "solver" and "magic" in error["message"]
    captured = _bad(capsys, ["show", files["w16"], "--plan", "nope.json"], "nope.json")
    assert captured.out == ""  # without --json, nothing on stdout


# ------------------------------------------------------------------ items 3, 11: eval
@pytest.mark.parametrize("cell, needles", [
    ([None, 0], ["rows[0][0]", "None"]),
    (["a"], ["rows[0][0]", "'a'"]),
    (5, ["rows[0][0]", "must be a list", "5"]),
    ([[2]], ["rows[0][0]", "[2]"]),
    ([1.5], ["rows[0][0]", "1.5"]),
    ([2.0], ["rows[0][0]", "2.0"]),
    ([True], ["rows[0][0]", "True"]),
])
def test_eval_and_show_reject_malformed_cells_alike(files, capsys, cell, needles):
    data = _plan_data(files)
    data["rows"][0][0] = cell
    path = _write(files, "bad_cell.json", data)
    _bad(capsys, ["eval", files["w16"], path], *needles)
    _bad(capsys, ["eval", files["w16"], path, "--json"], *needles)
    _bad(capsys, ["show", files["w16"], "--plan", path], *needles)


def test_eval_out_of_range_sample_is_a_violation(files, capsys):
    data = _plan_data(files)
    data["rows"][0][0] = data["rows"][0][0] + [99]
    path = _write(files, "oob.json", data)
    assert main(["eval", files["w16"], path, "--json"]) == 1
    assert any("sample 99" in v for v in json.loads(capsys.readouterr().out)["violations"])


def test_eval_and_export_sample_index_beyond_64_bits(files, capsys, tmp_path):
    """The checker's int64 arrays overflowed on 2**70 (an OverflowError traceback); the
    cell is named instead, as a violation like any other out-of-range index (exit 1, as
    for -1), and nothing is exported."""
    data = _plan_data(files)
    data["rows"][0][0][0] = 2**70
    path = _write(files, "huge_index.json", data)
    for argv in (["eval", files["w16"], path, "--json"], ["export", files["w16"], path, "-o", str(tmp_path / "ex"),
                                                          "--json"]):
        assert main(argv) == 1
        out = json.loads(capsys.readouterr().out)
        assert out["valid"] is False and f"rows[0][0]: sample {2**70} is not in [0, 16)" in out["violations"]
    assert not (tmp_path / "ex.json").exists()


def test_eval_score_and_rows(files, capsys):
    data = _plan_data(files)
    data["score"] = "x"
    path = _write(files, "score.json", data)
    _bad(capsys, ["eval", files["w16"], path], "score", "'x'")
    _bad(capsys, ["show", files["w16"], "--plan", path], "score", "'x'")
    for rows in ("0", "-1", "abc"):
        _bad(capsys, ["eval", files["w16"], files["plan"], "--rows", rows], "--rows", rows)
    assert main(["eval", files["w16"], files["plan"], "--rows", "1", "--json"]) in (0, 1)


# ------------------------------------------------------------------ item 16: warm start
def test_warm_start_for_another_window(files, capsys):
    _bad(capsys, ["plan", files["w24"], "--warm-start", files["plan"]],
         "--warm-start", "plan is for N=16 samples, the window has 24")
    _bad(capsys, ["show", files["w24"], "--plan", files["plan"]], "--plan", "N=16", "24")
    data = _plan_data(files)
    data["rows"] = [row[:-1] for row in data["rows"]]
    path = _write(files, "fewslots.json", data)
    _bad(capsys, ["plan", files["w16"], "--warm-start", path], "--warm-start", "3 slots per row", "D=4")


# ------------------------------------------------------------------ item 17: export --previous
def test_export_previous_from_another_cluster(files, capsys, tmp_path):
    other = str(tmp_path / "w4.npz")
    other_plan = str(tmp_path / "p4.json")
    assert main(["gen", "--samples", "16", "--dp", "4", "--edp", "2", "--ep", "4", "--capacity", "4096",
                 "--layers", "2", "-o", other, "--json"]) == 0
    assert main(["plan", other, "-o", other_plan, "--json"]) == 0
    assert main(["export", other, other_plan, "-o", str(tmp_path / "ex4"), "--json"]) == 0
    capsys.readouterr()
    _bad(capsys, ["export", files["w16"], files["plan"], "-o", str(tmp_path / "ex2"),
                  "--previous", str(tmp_path / "ex4.npz")], "--previous", "P=4", "P=2")
    assert main(["export", files["w16"], files["plan"], "-o", str(tmp_path / "ex2"), "--json"]) == 0


def test_export_previous_unreadable(files, capsys, tmp_path):
    """An empty, damaged, missing or non-archive --previous is one line naming --previous."""
    good = str(tmp_path / "good")
    assert main(["export", files["w16"], files["plan"], "-o", good, "--json"]) == 0
    capsys.readouterr()
    empty, damaged = tmp_path / "empty.npz", tmp_path / "damaged.npz"
    empty.write_bytes(b"")
    data = bytearray(open(good + ".npz", "rb").read())
    data[60:100] = bytes(40)  # inside the first member's header and data
    damaged.write_bytes(bytes(data))
    out = ["export", files["w16"], files["plan"], "-o", str(tmp_path / "ex"), "--json", "--previous"]
    for previous, needles in ((empty, ["EOFError"]), (damaged, ["is not an export .npz"]),
                              (tmp_path / "missing.npz", ["does not exist"]), (tmp_path, ["is not an export .npz"])):
        captured = _bad(capsys, out + [str(previous)], "--previous:", str(previous), *needles)
        assert json.loads(captured.out)["error"]["field"] == "--previous"
    assert not (tmp_path / "ex.npz").exists()
    assert main(out + [good + ".npz"]) == 0


# ------------------------------------------------------------------ item 18: certify --bpp
def test_certify_bpp_item_larger_than_capacity(capsys, tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("3\n10\n4\n11\n5\n")
    _bad(capsys, ["certify", "--bpp", str(path)], "item 1", "11", "capacity 10")


@pytest.mark.parametrize("text, needles", [
    ("3\n99999999999999999999999\n4\n5\n6\n", ["capacity", "must be <= 2147483647"]),  # overflowed in L2
    ("2\n10\n99999999999999999999999\n5\n", ["a weight does not fit in 64 bits"]),     # overflowed when read
])
def test_certify_bpp_numbers_beyond_64_bits(capsys, tmp_path, text, needles):
    path = tmp_path / "huge.txt"
    path.write_text(text)
    captured = _bad(capsys, ["certify", "--bpp", str(path), "--json"], "--bpp:", *needles)
    assert json.loads(captured.out)["error"]["field"] == "--bpp"
    path.write_text("3\n2147483647\n4\n5\n6\n")
    assert main(["certify", "--bpp", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bins"] == 1


# ------------------------------------------------------------------ item 7: calibrate
def _timings(files, times):
    """Two measured runs of the plan (enough values to fit)."""
    return {"format": "rp-opt-timings/1", "runs": [{"plan_file": files["plan"], "times": times}] * 2}


def _fittable_timings(files, capsys):
    """Times of the baseline plan and of a kk plan (other rows), each the window's own cost
    of its (row, shard): regressors of full rank, which one plan's rows alone do not give
    (calibrate refuses those), and a fit of R^2 = 1."""
    from rp_opt.cost import layout_costs
    from rp_opt.io import load_instance, load_plan

    other = str(files["root"] / "p_kk.json")
    if not os.path.exists(other):
        assert main(["plan", files["w16"], "--solver", "kk", "-o", other, "--json"]) == 0
        capsys.readouterr()
    instance = load_instance(files["w16"])
    runs = []
    for path in (files["plan"], other):
        plan = load_plan(path, instance)
        costs = layout_costs(instance, plan.placement, plan.layout)
        runs.append({"plan_file": path, "times": (costs.attention + costs.expert).tolist()})
    return _write(files, "times.json", {"format": "rp-opt-timings/1", "runs": runs})


def test_calibrate_rejects_degenerate_timings(files, capsys):
    rows = len(_plan_data(files)["rows"])
    zeros = _write(files, "zeros.json", _timings(files, [[0.0, 0.0]] * rows))
    captured = _bad(capsys, ["calibrate", zeros, "--window", files["w16"], "--json"], "times", "are 0")
    assert json.loads(captured.out)["error"]["field"] == "times"
    text = json.dumps(_timings(files, [[1.0, 1.0]] * rows)).replace("1.0, 1.0]", "NaN, 1.0]", 1)
    nan = files["root"] / "nan.json"
    nan.write_text(text)
    _bad(capsys, ["calibrate", str(nan), "--window", files["w16"]], "times[0][0]", "nan")


def test_calibrate_json_is_strict(capsys, tmp_path):
    """No measured time above 0 would make the relative error NaN: --json holds null."""
    from rp_opt.commands._common import emit_json

    emit_json({"rel_rms": float("nan"), "nested": [float("inf"), 1.0]})
    text = capsys.readouterr().out
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard {c}")) == {
        "rel_rms": None, "nested": [None, 1.0]}


def test_calibrate_all_zero_fit_rejected():
    from rp_opt.calibrate import TimingRun, fit_cost
    from rp_opt.errors import InputError
    from rp_opt.solvers import get_solver
    from rp_opt.synth import generate

    instance = generate("ling-tiny-like", samples=16, dp=4, edp=2, ep=2, capacity=4096, layers=2, seed=0)
    plan = get_solver("baseline")(instance, objective="sync").plan
    run = TimingRun(instance, plan, np.zeros((plan.num_rows, 2)))
    with pytest.raises(InputError, match="are 0"):
        fit_cost([run, run])


# ------------------------------------------------------------------ item 8: --cost
def test_cost_option(files, capsys, tmp_path):
    from rp_opt.calibrate import save_cost
    from rp_opt.window import CostModel, Stage

    cost = str(tmp_path / "cost.json")
    save_cost(cost, CostModel((Stage("linear", 2, 1e-3, 0.0),), 1e-4))
    assert main(["plan", files["w16"], "--json"]) == 0
    default = json.loads(capsys.readouterr().out)["score"]
    assert main(["plan", files["w16"], "--cost", cost, "--json", "-o", str(tmp_path / "p.json")]) == 0
    calibrated = json.loads(capsys.readouterr().out)["score"]
    assert calibrated[0] < default[0] / 10  # scored with the file's much smaller coefficients
    assert main(["eval", files["w16"], str(tmp_path / "p.json"), "--cost", cost, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["score"] == calibrated and out["score_matches"] is True
    assert main(["show", files["w16"], "--cost", cost, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cost"]["gamma"] == 1e-4
    _bad(capsys, ["plan", files["w16"], "--cost", str(tmp_path / "nope.json")], "--cost", "nope.json")


def test_cost_file_under_another_name(files, capsys, tmp_path):
    """An existing --cost path that does not end in .json is read as a cost file (it was
    taken for a model spec name: "unknown model 'cost.txt'"); a directory or a window
    file given by mistake is named as such."""
    from rp_opt.calibrate import save_cost
    from rp_opt.window import CostModel, Stage

    cost = str(tmp_path / "cost.json")
    save_cost(cost, CostModel((Stage("linear", 2, 1e-3, 0.0),), 1e-4))
    assert main(["plan", files["w16"], "--cost", cost, "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)["score"]
    renamed = tmp_path / "cost.calibrated"
    renamed.write_text(open(cost).read())
    assert main(["plan", files["w16"], "--cost", str(renamed), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["score"] == expected and out["valid"] is True
    assert main(["show", files["w16"], "--cost", str(renamed), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cost"]["gamma"] == 1e-4
    _bad(capsys, ["plan", files["w16"], "--cost", str(tmp_path)], "--cost:", str(tmp_path), "cannot be read")
    _bad(capsys, ["eval", files["w16"], files["plan"], "--cost", files["w16"]], "--cost:", "w16.npz", "not valid JSON")
    _bad(capsys, ["plan", files["w16"], "--cost", "no-such-model"], "--cost:", "unknown model 'no-such-model'")


# ------------------------------------------------------------------ item 13: bench
@pytest.mark.parametrize("argv, needles", [
    (["--objective", "nope"], ["objective", "nope"]),
    (["--seeds", "-1"], ["--seeds", "-1"]),
    (["--seeds", "a,b"], ["--seeds", "a,b"]),
    (["--limit", "-1"], ["--limit", "-1"]),
    (["--threads", "0"], ["--threads", "0"]),
    (["--workers", "0"], ["--workers", "0"]),
    (["--ray", "nope"], ["--ray", "nope"]),
])
def test_bench_checks_arguments_up_front(capsys, argv, needles):
    _bad(capsys, ["bench", "tiny", "--solvers", "baseline", "--time-limit", "1"] + argv, *needles)


def test_bench_output_folders(files, capsys, monkeypatch, tmp_path):
    """--out / --img that cannot be directories are refused before the runs (a file given
    as --out was a FileExistsError traceback after them); --img alone writes the plot; a
    write that fails after the runs is one line, the table still prints, exit 2."""
    import rp_opt.bench.gap as gap

    run = ["bench", "tiny", "--solvers", "baseline", "--time-limit", "1", "--limit", "1"]
    calls = []
    real = gap.run_gap
    monkeypatch.setattr(gap, "run_gap", lambda *a, **k: calls.append(1) or real(*a, **k))
    for flag in ("--out", "--img"):
        _bad(capsys, run + [flag, files["w16"]], f"{flag}:", "is not a directory")
        if os.path.isdir("/proc/self"):
            _bad(capsys, run + [flag, "/proc/rp-opt-test"], f"{flag}:", "cannot create directory")
    assert calls == []
    assert main(run + ["--img", str(tmp_path / "img")]) == 0
    assert "baseline" in capsys.readouterr().out
    assert os.listdir(tmp_path / "img") in ([], ["bench_tiny.png"])  # [] without matplotlib

    import rp_opt.bench.report as report

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "write_outputs", full)
    monkeypatch.setattr(gap, "write_outputs", full)
    captured = _bad(capsys, run + ["--out", str(tmp_path / "out"), "--json"], "--out: cannot write",
                    "No space left on device")
    data = json.loads(captured.out)
    assert [r["solver"] for r in data["records"]] == ["baseline"] and "No space" in data["write_error"]


def test_bench_reports_why_runs_failed(capsys, monkeypatch):
    import rp_opt.bench.gap as gap

    def failing(tasks, **kwargs):
        return [{"instance": t.spec.name, "config": t.spec.config, "seed": t.spec.seed, "solver": t.solver,
                 "status": "error", "error": "objective: boom", "valid": False} for t in tasks]

    monkeypatch.setattr(gap, "run_tasks", failing)
    assert main(["bench", "tiny", "--solvers", "baseline", "--time-limit", "1", "--limit", "1"]) == 1
    err = capsys.readouterr().err
    assert "error: every run failed: objective: boom" in err


def test_plan_help_states_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "baseline (identity+ffd; the default)" in text and "default 10" in text


def test_joint_options_are_checked_before_the_window_is_read(files, capsys, tmp_path):
    """``joint``'s options (num_rows, symmetry, workers) are checked as exact's are: a bad
    one is its one line before the window is read (a missing window is not reported)."""
    missing = str(tmp_path / "nowhere.npz")
    _bad(capsys, ["plan", missing, "--solver", "joint", "--option", "zz=1"],
         "options: unknown option(s) ['zz'] for solver joint; known: num_rows, symmetry, workers")
    _bad(capsys, ["plan", missing, "--solver", "joint", "--option", "symmetry=maybe"],
         "symmetry: must be true or false")
