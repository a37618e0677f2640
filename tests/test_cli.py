"""The rp-opt command: gen -> plan -> eval round trip, JSON contract, exit codes."""

import json

import pytest

from rp_opt.cli import main


def _json(capsys):
    return json.loads(capsys.readouterr().out)


def test_gen_plan_eval_round_trip(tmp_path, capsys):
    window = str(tmp_path / "w.npz")
    plan = str(tmp_path / "p.json")
    assert main(["gen", "--model", "ling-flash-like", "--samples", "64", "--dp", "8", "--edp", "2", "--ep", "8",
                 "--capacity", "32768", "--layers", "4", "--seed", "3", "-o", window, "--json"]) == 0
    gen = _json(capsys)
    assert gen["samples"] == 64 and gen["layers"] == 4 and gen["experts"] == 256
    assert main(["plan", window, "--solver", "baseline", "--objective", "shard", "--json", "-o", plan]) == 0
    out = _json(capsys)
    assert out["objective"] == "shard" and out["valid"] is True
    assert isinstance(out["score"], list) and len(out["score"]) == 3
    assert out["num_rows"] >= 1 and out["seconds"] >= 0
    assert main(["eval", window, plan, "--json"]) == 0
    ev = _json(capsys)
    assert ev["valid"] is True and ev["violations"] == []
    assert ev["score"] == out["score"] and ev["score_matches"] is True and ev["claimed_objective"] == "shard"
    # scored under another objective, the plan's claim is not comparable: null (it said true)
    assert main(["eval", window, plan, "--objective", "sync", "--json"]) == 0
    ev = _json(capsys)
    assert ev["objective"] == "sync" and ev["score_matches"] is None and ev["claimed_score"] == out["score"]


def test_eval_bound_for_every_placement(tmp_path, capsys):
    """``eval --bound`` adds the window's bound for every placement at the plan's rows
    (no time limit: the row excess for every placement under ``sync``), at most the plan's
    score and at least the bound the plan's own report gave; text output names it."""
    window = str(tmp_path / "w.npz")
    plan = str(tmp_path / "p.json")
    assert main(["gen", "--model", "ling-flash-like", "--samples", "64", "--dp", "8", "--edp", "2", "--ep", "8",
                 "--capacity", "8192", "--layers", "4", "--seed", "3", "-o", window]) == 0
    capsys.readouterr()
    assert main(["plan", window, "--solver", "heuristic", "--time-limit", "1", "--json", "-o", plan]) == 0
    out = _json(capsys)
    assert main(["eval", window, plan, "--bound", "--json"]) == 0
    ev = _json(capsys)
    assert ev["bound_scope"] == "every placement" and ev["bound_seconds"] >= 0
    assert out["bound"] * (1 - 1e-12) <= ev["bound"] <= ev["score"][0] * (1 + 1e-12)
    assert ev["gap"] == pytest.approx((ev["score"][0] - ev["bound"]) / ev["score"][0])
    assert main(["eval", window, plan, "--bound"]) == 0
    assert "bound (every placement)" in capsys.readouterr().out


def test_plan_says_where_the_tighter_bound_is(tmp_path, capsys):
    """A `sync` plan whose row excess for every placement did not fit a tenth of the limit
    (estimated 0.090 s for 512 x 12 x 256 entries, against 0.05 s) says so in its text output,
    with the commands that add it; its JSON says ``hidden_bound: false``."""
    window = str(tmp_path / "w.npz")
    assert main(["gen", "--model", "ling-flash-like", "--samples", "512", "--dp", "8", "--edp", "2", "--ep", "8",
                 "--capacity", "8192", "--layers", "12", "--seed", "5", "-o", window]) == 0
    capsys.readouterr()
    assert main(["plan", window, "--solver", "heuristic", "--time-limit", "0.5", "--json"]) == 0
    assert _json(capsys)["stats"]["hidden_bound"] is False
    assert main(["plan", window, "--solver", "heuristic", "--time-limit", "0.5"]) == 0
    assert "rp-opt eval FILE PLAN --bound" in capsys.readouterr().out


def test_eval_invalid_plan_exit_1(tmp_path, capsys):
    window = str(tmp_path / "w.npz")
    plan = tmp_path / "p.json"
    main(["gen", "--samples", "32", "--dp", "4", "--ep", "4", "--layers", "2", "-o", window])
    main(["plan", window, "-o", str(plan)])
    capsys.readouterr()
    data = json.loads(plan.read_text())
    data["rows"][0][0].append(data["rows"][0][1][0])  # duplicate a sample
    plan.write_text(json.dumps(data))
    assert main(["eval", window, str(plan), "--json"]) == 1
    out = _json(capsys)
    assert out["valid"] is False and any("appears 2 times" in v for v in out["violations"])


def test_default_instance_and_show(capsys):
    assert main(["plan", "--json"]) == 0
    assert _json(capsys)["valid"] is True
    assert main(["show", "--json"]) == 0
    assert _json(capsys)["samples"] == 128


def test_show_plan_gap_split(tmp_path, capsys):
    """``show --plan``: the plan's score, the bound for its placement, the gap and its split
    (attention + expert + spread - bound_slack = gap)."""
    plan = str(tmp_path / "p.json")
    assert main(["plan", "--solver", "lpt-ffd", "-o", plan]) == 0
    capsys.readouterr()
    assert main(["show", "--plan", plan, "--json"]) == 0
    out = _json(capsys)["plan"]
    split = out["gap_split"]
    assert out["bound"][0] <= out["score"][0]
    assert abs(split["attention"] + split["expert"] + split["spread"] - split["bound_slack"] - out["gap"]) < 1e-9
    assert main(["show", "--plan", plan]) == 0
    assert "gap" in capsys.readouterr().out


@pytest.mark.parametrize("solver", ["baseline", "kk", "lpt-ffd", "heuristic", "auto", "exact", "joint"])
def test_infeasible_window_exit_1_for_every_solver(tmp_path, capsys, solver):
    """8 samples cannot fill one row of D = 16 slots: every solver answers ``infeasible``
    with the certifier's reason, exit code 1 (the packers used to raise it as bad input, exit 2)."""
    window = str(tmp_path / "w.npz")
    assert main(["gen", "--samples", "8", "--dp", "16", "--ep", "2", "--experts", "4", "--top-k", "2",
                 "--layers", "2", "--capacity", "4096", "-o", window]) == 0
    capsys.readouterr()
    assert main(["plan", window, "--solver", solver, "--time-limit", "1", "--json", "-o",
                 str(tmp_path / "p.json")]) == 1
    out = _json(capsys)
    assert out["status"] == "infeasible" and out["num_rows"] is None and out["output"] is None
    assert "8 samples for 16 cells" in out["stats"]["reason"]
    assert out["objective"] == "sync"  # the objective asked for (it was null without a plan)
    assert not (tmp_path / "p.json").exists()
    assert main(["plan", window, "--solver", solver, "--time-limit", "1"]) == 1
    captured = capsys.readouterr()
    assert "infeasible" in captured.out and "Traceback" not in captured.err and "error" not in captured.err


def test_solver_input_error_is_not_blamed_on_options(tmp_path, capsys):
    """With any ``--option`` given, an InputError the solver raised for another field (here
    ``warm_start``: a plan of R rows for ``num_rows=R+1``) was reported as a bad ``--option``,
    ``--option: num_rows=2: InputError: warm_start: ...``; it now prints as it was raised. And
    ``num_rows=5`` on 16 samples, D = 4 (20 cells) is an infeasible window for the heuristic,
    exit code 1 with the reason, where it was an ``--option`` error with exit code 2."""
    window, plan = str(tmp_path / "w.npz"), tmp_path / "p.json"
    assert main(["gen", "--samples", "16", "--dp", "4", "--ep", "2", "--experts", "4", "--top-k", "2",
                 "--layers", "2", "--capacity", "4096", "-o", window]) == 0
    assert main(["plan", window, "-o", str(plan)]) == 0
    rows = len(json.loads(plan.read_text())["rows"])
    assert (rows + 1) * 4 <= 16
    capsys.readouterr()
    assert main(["plan", window, "--solver", "heuristic", "--time-limit", "1", "--warm-start", str(plan),
                 "--option", f"num_rows={rows + 1}"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(err) == 1 and err[0].startswith("error: warm_start: is not a valid layout") and "--option" not in err[0]
    assert main(["plan", window, "--solver", "heuristic", "--time-limit", "1", "--option", "num_rows=5",
                 "--json"]) == 1
    out = _json(capsys)
    assert out["status"] == "infeasible" and out["stats"]["reason"] == "N=16 < R x D = 20 cells: some cell would be empty"


def test_unknown_solver_and_objective(capsys):
    assert main(["plan", "--solver", "magic"]) == 2
    assert "solver: unknown solver 'magic'" in capsys.readouterr().err
    assert main(["plan", "--objective", "fast"]) == 2
    assert "objective: unknown objective 'fast'" in capsys.readouterr().err


def test_plan_solver_options(capsys):
    """``--option KEY=VALUE`` reaches the solver (values read as JSON); an unknown option
    or a malformed one is a one-line input error naming it (exit 2)."""
    assert main(["plan", "--solver", "heuristic", "--time-limit", "3", "--option", "refine=true",
                 "--option", "refine_sweeps=3", "--option", "temperatures=2", "--option", "replicas=4",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] and len(out["stats"]["refine"]) == 1 and "swaps" in out["stats"]["refine"][0]
    assert main(["plan", "--solver", "heuristic", "--option", "refin=true"]) == 2
    err = capsys.readouterr().err
    assert "options: unknown option(s) ['refin']" in err and len(err.strip().splitlines()) == 1
    assert main(["plan", "--solver", "baseline", "--option", "replicas=4"]) == 2
    assert "unknown option(s) ['replicas']" in capsys.readouterr().err
    assert main(["plan", "--option", "noequals"]) == 2
    assert "--option: must be KEY=VALUE" in capsys.readouterr().err


def test_bad_option_is_rejected_before_the_window_is_read(caplog, capsys, tmp_path):
    """A bad ``--option`` (unknown, or a bad value) ends ``plan`` before it reads the
    window or logs "planning ...", with the error the solver itself would give; a window
    path that does not exist is then not even opened."""
    import logging

    missing = str(tmp_path / "nowhere.npz")
    for solver, option, said in (("heuristic", "refin=true", "options: unknown option(s) ['refin']"),
                                 ("auto", "replicas=0", "replicas"),
                                 ("exact", "cubes=maybe", "cubes: must be true or false"),
                                 ("kk", "replicas=4", "unknown option(s) ['replicas']")):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="rp_opt"):
            assert main(["plan", missing, "--solver", solver, "--option", option]) == 2
        err = capsys.readouterr().err
        assert said in err and "nowhere" not in err and len(err.strip().splitlines()) == 1, err
        assert not any("planning" in r.getMessage() for r in caplog.records), solver
        assert not any("nowhere" in r.getMessage() for r in caplog.records), solver


def test_closed_stdout_no_traceback():
    """``rp-opt show | head -1``: the reader closes the pipe early; exit 141 (128 +
    SIGPIPE), nothing on stderr (it used to be a BrokenPipeError traceback, exit 1)."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    child = subprocess.Popen([sys.executable, "-m", "rp_opt.cli", "show"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=root)
    child.stdout.close()  # before the child writes anything
    err = child.stderr.read().decode()
    assert child.wait(timeout=60) == 141 and err == ""


def test_json_stdout_is_clean_when_highs_runs():
    """HiGHS prints a banner on stdout when first used; with --json it must go to stderr.
    Scholl N1C3W2_H needs HiGHS' exact decision (LP bound 22, optimum 23)."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "tests", "data", "bpplib", "scholl_1", "N1C3W2_H.txt")
    out = subprocess.run([sys.executable, "-m", "rp_opt.cli", "certify", "--bpp", path, "--json"],
                         capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["bins"] == 23 and data["status"] == "optimal"
    # the stats say how: the arc-flow LP bound 22 and HiGHS' "infeasible in 22 bins"
    assert data["stats"]["arcflow_lp"]["bound"] == 22
    assert any(m["target"] == 22 and m["status"] == "Infeasible" for m in data["stats"]["arcflow_mip"])


def test_library_use_prints_no_highs_banner():
    """A trainer calling the library (here the R* certifier's HiGHS MIP) gets nothing on
    stdout or stderr outside the ``rp_opt`` logger: HiGHS's banner went to stderr."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("from rp_opt.rows import certify_bins\n"
            "assert certify_bins([5, 5, 4, 4, 3, 3, 3, 3], 10, 1, None, exact='highs').r_star == 3\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == "", out.stderr


def test_place_progress_is_logged_off_a_terminal(caplog, capsys):
    """Off a terminal (or with --json) the per-layer progress of ``place --method exact`` is
    a ``rp_opt.progress`` INFO line per layer, shown by ``rp-opt -v`` (it printed nothing)."""
    import logging

    with caplog.at_level(logging.INFO, logger="rp_opt.progress"):
        assert main(["place", "--method", "exact", "--time-limit", "5", "--json"]) == 0
    layers = json.loads(capsys.readouterr().out)["placement"]
    lines = [r.getMessage() for r in caplog.records if r.name == "rp_opt.progress"]
    assert len(lines) == len(layers) and lines[0].startswith(f"place 1/{len(layers)} ")


def test_show_says_when_the_plan_file_claims_another_score(tmp_path, capsys):
    """``show --plan`` recomputes the score; a file that claims another one is said to (as
    ``eval`` says it, with exit code 1), and ``--json`` carries ``score_matches``."""
    plan = str(tmp_path / "p.json")
    assert main(["plan", "--solver", "baseline", "-o", plan, "--json"]) == 0
    capsys.readouterr()
    data = json.load(open(plan))
    assert main(["show", "--plan", plan, "--json"]) == 0
    assert _json(capsys)["plan"]["score_matches"] is True
    data["score"][0] += 1.0
    json.dump(data, open(plan, "w"))
    assert main(["show", "--plan", plan]) == 1                      # a false claim exits 1, as eval
    assert f"the plan file claims {data['score']}" in capsys.readouterr().out
    assert main(["show", "--plan", plan, "--json"]) == 1
    out = _json(capsys)["plan"]
    assert out["score_matches"] is False and out["claimed_score"] == data["score"]
