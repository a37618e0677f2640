"""Defects of the command line found by an audit, each run through the real CLI on tiny
generated windows (no mocks): bad input is one line naming the field (exit 2), an
invalid plan exit 1, and no command overwrites or misreads what it was given."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from rp_opt.cli import main
from rp_opt.io import load_instance

GEN = ["gen", "--samples", "16", "--dp", "4", "--edp", "2", "--ep", "4", "--capacity", "4096"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two 16-sample windows of one shape (seeds 0 and 1), a 24-sample one, and a baseline
    plan of the first written by ``plan -o``."""
    root = tmp_path_factory.mktemp("cli_audit")
    paths = {name: str(root / f"{name}.npz") for name in ("w16", "w16b", "w24")}
    assert main(GEN + ["--seed", "0", "-o", paths["w16"], "--json"]) == 0
    assert main(GEN + ["--seed", "1", "-o", paths["w16b"], "--json"]) == 0
    assert main(["gen", "--samples", "24", "--dp", "4", "--edp", "2", "--ep", "4", "--capacity", "4096",
                 "-o", paths["w24"], "--json"]) == 0
    paths["plan"] = str(root / "p.json")
    assert main(["plan", paths["w16"], "--solver", "baseline", "-o", paths["plan"], "--json"]) == 0
    paths["root"] = root
    return paths


@pytest.fixture(autouse=True)
def _drain(capsys):
    """Leave the fixture's own output out of each test's captured output."""
    capsys.readouterr()


def _fingerprint(path_or_window) -> str:
    from rp_opt.io import window_fingerprint

    window = load_instance(path_or_window).window if isinstance(path_or_window, str) else path_or_window
    return window_fingerprint(window)


def _plan(files) -> dict:
    with open(files["plan"]) as handle:
        return json.load(handle)


def _write(directory, name, data) -> str:
    path = os.path.join(str(directory), name)
    with open(path, "w") as handle:
        json.dump(data, handle)
    return path


def _error(capsys, argv) -> str:
    """Run ``argv``: exit code 2 and exactly one line on stderr, ``error: ...``; return it."""
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(
        ("Running HiGHS", "Includes third-party", "planning "))]
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------ 1: calibrate -o
@pytest.mark.parametrize("target, what", [("w.npz", "window of timings.runs[0]"),
                                          ("p.json", "plan file of timings.runs[0]")])
def test_calibrate_output_may_not_name_a_file_the_timings_file_names(files, capsys, tmp_path, monkeypatch,
                                                                     target, what):
    """``calibrate -o`` naming the window or the plan file a run of the timings file reads
    (relative to the timings file's directory, as calibrate resolves them, not to the
    working directory) is refused before any work, and that file is left as it was."""
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(files["w16"], runs / "w.npz")
    shutil.copy(files["plan"], runs / "p.json")
    rows = len(_plan(files)["rows"])
    _write(runs, "t.json", {"format": "rp-opt-timings/1",
                            "runs": [{"window": "w.npz", "plan_file": "p.json", "times": [[1.0, 2.0]] * rows}]})
    before = (runs / target).read_bytes()
    monkeypatch.chdir(tmp_path)
    line = _error(capsys, ["calibrate", "runs/t.json", "-o", f"runs/{target}"])
    assert line == (f"error: -o: runs/{target} is the {what} this command reads; writing there would destroy it")
    assert (runs / target).read_bytes() == before


# ------------------------------------------------------------------ 2: show --plan checks the plan
def _overfull(files) -> dict:
    """The baseline plan with samples moved into its first cell until it holds more than
    C = 4096 tokens (every other cell keeps one sample at least)."""
    lengths = load_instance(files["w16"]).window.lengths
    data = _plan(files)
    cells = [cell for row in data["rows"] for cell in row]
    target = cells[0]
    for cell in cells[1:]:
        while len(cell) > 1 and int(lengths[target].sum()) <= 4096:
            target.append(cell.pop())
    assert int(lengths[target].sum()) > 4096
    return data


def test_show_plan_reports_capacity_and_empty_cell_violations(files, capsys, tmp_path):
    """``show --plan`` runs the independent checker: a plan over the capacity, or with an
    empty cell, is shown as invalid (``valid`` false and the violations in --json, an
    ``INVALID plan`` line in text) with exit code 1, as from eval; a valid plan says
    ``valid`` true and exits 0."""
    over = _write(tmp_path, "over.json", _overfull(files))
    empty = _plan(files)
    empty["rows"][0][1].extend(empty["rows"][0][0])
    empty["rows"][0][0] = []
    empty = _write(tmp_path, "empty.json", empty)
    for path, needle in ((over, "more than the capacity C=4096"), (empty, "rows[0][0]: empty cell")):
        assert main(["show", files["w16"], "--plan", path, "--json"]) == 1
        shown = json.loads(capsys.readouterr().out)["plan"]
        assert shown["valid"] is False and any(needle in v for v in shown["violations"]), shown["violations"]
        evaluated = main(["eval", files["w16"], path, "--json"])
        assert evaluated == 1 and json.loads(capsys.readouterr().out)["violations"] == shown["violations"]
        assert main(["show", files["w16"], "--plan", path]) == 1
        out = capsys.readouterr().out
        assert "INVALID plan" in out and needle in out
    assert main(["show", files["w16"], "--plan", files["plan"], "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["plan"]
    assert shown["valid"] is True and shown["violations"] == []
    assert main(["show", files["w16"], "--plan", files["plan"]]) == 0
    assert "INVALID" not in capsys.readouterr().out


# ------------------------------------------------------------------ 3: window fingerprint
def test_plan_files_carry_the_fingerprint_of_their_window(files, capsys, tmp_path):
    """``plan -o`` and ``place -o`` stamp the plan with the window's fingerprint: 16 hex
    digits, the same for the window generated in memory and read back from its file, and
    different for another window of the same N, D, L and E."""
    ours = _fingerprint(files["w16"])
    assert len(ours) == 16 and int(ours, 16) >= 0
    assert _plan(files)["window_fingerprint"] == ours
    assert _fingerprint(files["w16b"]) != ours
    from rp_opt.synth import generate

    again = generate("ling-tiny-like", samples=16, dp=4, edp=2, ep=4, capacity=4096, seed=0)
    assert _fingerprint(again.window) == ours
    placed = str(tmp_path / "placed.json")
    assert main(["place", files["w16"], "--method", "lpt", "-o", placed, "--json"]) == 0
    with open(placed) as handle:
        assert json.load(handle)["window_fingerprint"] == ours


def test_plan_for_another_window_of_the_same_shape_is_refused_by_every_reader(files, capsys, tmp_path):
    """A plan made for window A, read against window B of the same N, D, L, E: eval,
    export, show --plan, plan --warm-start, place --current and calibrate refuse it in one
    line naming their plan argument and both fingerprints (exit 2); the same file without
    the field (an older plan file) is read as before."""
    ours = _fingerprint(files["w16"])
    theirs = _fingerprint(files["w16b"])
    message = f"plan was made for another window (fingerprint {ours}, this window {theirs})"
    rows = len(_plan(files)["rows"])
    timings = _write(tmp_path, "t.json", {"format": "rp-opt-timings/1",
                                          "runs": [{"plan_file": files["plan"], "times": [[1.0, 2.0]] * rows}]})
    cases = [(["eval", files["w16b"], files["plan"]], "plan"),
             (["export", files["w16b"], files["plan"], "-o", str(tmp_path / "ex")], "plan"),
             (["show", files["w16b"], "--plan", files["plan"]], "--plan"),
             (["plan", files["w16b"], "--warm-start", files["plan"]], "--warm-start"),
             (["place", files["w16b"], "--method", "lpt", "--current", files["plan"]], "--current"),
             (["calibrate", timings, "--window", files["w16b"]], "timings.runs[0].plan_file")]
    for argv, field in cases:
        assert _error(capsys, argv) == f"error: {field}: {message}", argv
    assert not (tmp_path / "ex.json").exists()
    old = _plan(files)
    old.pop("window_fingerprint", None)
    old = _write(tmp_path, "old.json", old)
    assert main(["eval", files["w16"], old, "--json"]) == 0
    assert main(["show", files["w16"], "--plan", old, "--json"]) == 0
    assert main(["plan", files["w16"], "--warm-start", old, "--json"]) == 0


# ------------------------------------------------------------------ 4: certify validates the window
def _broken_window(files, directory, name, change) -> str:
    """``files["w16"]`` with ``change(arrays, meta)`` applied, written as ``name``."""
    with np.load(files["w16"]) as archive:
        arrays = {key: archive[key] for key in archive.files}
    meta = json.loads(str(arrays.pop("meta")))
    change(arrays, meta)
    path = os.path.join(str(directory), name)
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)
    return path


def _negative_count(arrays, meta):
    arrays["demand"] = arrays["demand"].astype(np.int32)
    arrays["demand"][0, 0, 0] = -1


BROKEN = {
    "negative count": _negative_count,
    "demand shape": lambda a, m: a.update(demand=a["demand"][:, :, :10]),
    "attn_work nan": lambda a, m: a.update(attn_work=np.full(a["lengths"].shape, np.nan)),
    "attn_work negative": lambda a, m: a.update(attn_work=-np.ones(a["lengths"].shape)),
    "gamma negative": lambda a, m: m["cost"].update(gamma=-1),
    "alpha nan": lambda a, m: m["cost"]["stages"][0].update(alpha=float("nan")),
    "top_k 0": lambda a, m: m.update(top_k=0),
    "sample longer than C": lambda a, m: a["lengths"].__setitem__(0, 5000),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_certify_validates_the_window_like_every_command(files, capsys, tmp_path, case):
    """certify loads the window with the same checks as show, plan and place: a broken
    window (negative count, demand of the wrong shape, NaN or negative attn_work, negative
    gamma, NaN alpha, top_k = 0, a sample longer than C) is the same one-line error naming
    the field, exit 2, not a certificate of R* = 1."""
    path = _broken_window(files, tmp_path, "bad.npz", BROKEN[case])
    expected = _error(capsys, ["show", path])
    assert _error(capsys, ["certify", path, "--time-limit", "1"]) == expected
    assert _error(capsys, ["plan", path]) == expected


def test_certify_still_certifies_a_good_window(files, capsys):
    """The validated loader changes nothing for a good window: R* proven, exit 0."""
    assert main(["certify", files["w16"], "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "optimal" and out["r_star"] >= 1 and out["samples"] == 16


# ------------------------------------------------------------------ 5: what is wrong with a plan file
def _duplicate(files) -> dict:
    data = _plan(files)
    data["rows"][0][1].append(data["rows"][0][0][0])   # a sample of cell (0, 0) also in (0, 1)
    return data


def _emptied(files) -> dict:
    data = _plan(files)
    data["rows"][0][0] = []
    return data


@pytest.mark.parametrize("make, needle", [(_duplicate, "appears twice"), (_emptied, "is in no cell")])
def test_duplicate_or_missing_sample_is_named_not_read_as_another_window(files, capsys, tmp_path, make, needle):
    """A plan file with a sample in two cells, or a cell's samples removed, is for this
    window all the same: show --plan, place --current and plan --warm-start name the
    sample (``rows[0][1]: sample 5 appears twice``, ``rows: sample 5 is in no cell``), not
    ``plan is for N=17 samples``; export reports the violation as eval does (exit 1)."""
    data = make(files)
    sample = data["rows"][0][1][-1] if make is _duplicate else min(_plan(files)["rows"][0][0])
    expected = (f"rows[0][1]: sample {sample} appears twice" if make is _duplicate
                else f"rows: sample {sample} is in no cell")
    path = _write(tmp_path, "broken.json", data)
    for argv in (["show", files["w16"], "--plan", path],
                 ["place", files["w16"], "--method", "lpt", "--current", path],
                 ["plan", files["w16"], "--warm-start", path]):
        line = _error(capsys, argv)
        assert line == f"error: {expected}" and needle in line and "plan is for" not in line, (argv, line)
    assert main(["eval", files["w16"], path, "--json"]) == 1
    violations = json.loads(capsys.readouterr().out)["violations"]
    assert main(["export", files["w16"], path, "-o", str(tmp_path / "ex"), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False and out["violations"] == violations
    assert any(f"sample {sample}" in v for v in violations)


def test_current_plan_with_an_empty_cell_is_refused(files, capsys, tmp_path):
    """``place --current`` with a plan whose first cell's samples were moved into the
    second (every sample once, but one cell empty): one line naming ``--current`` and the
    violation, and no plan file (it wrote a plan that ``eval`` then called invalid)."""
    data = _plan(files)
    data["rows"][0][1] = data["rows"][0][1] + data["rows"][0][0]
    data["rows"][0][0] = []
    path = _write(tmp_path, "moved.json", data)
    out = str(tmp_path / "new.json")
    line = _error(capsys, ["place", files["w16"], "--method", "lpt", "--current", path, "-o", out])
    assert line.startswith(f"error: --current: {path} holds no valid layout of this window: ") and "empty" in line
    assert not os.path.exists(out)


def test_plan_of_another_sample_count_is_still_said_to_be_so(files, capsys):
    """A plan holding exactly the samples 0..15 read against a 24-sample window is what the
    count says: ``plan is for N=16 samples, the window has 24``."""
    line = _error(capsys, ["show", files["w24"], "--plan", files["plan"]])
    assert line.endswith("plan is for N=16 samples, the window has 24")


# ------------------------------------------------------------------ 6: field names
def test_errors_name_the_argument_they_are_about(files, capsys, tmp_path):
    """A plan file that is not JSON names ``plan`` (eval, export); a bad BPPLIB file names
    ``--bpp``; a --window that is not a window names ``--window`` (calibrate)."""
    bad_json = tmp_path / "mal.json"
    bad_json.write_text("{nope")
    assert _error(capsys, ["eval", files["w16"], str(bad_json)]).startswith(
        f"error: plan: {bad_json} is not valid JSON")
    assert _error(capsys, ["export", files["w16"], str(bad_json), "-o", str(tmp_path / "ex")]).startswith(
        f"error: plan: {bad_json} is not valid JSON")
    bpp = tmp_path / "b.txt"
    bpp.write_text("x\n")
    assert _error(capsys, ["certify", "--bpp", str(bpp)]) == f"error: --bpp: {bpp} holds a non-numeric token"
    rows = len(_plan(files)["rows"])
    timings = _write(tmp_path, "t.json", {"format": "rp-opt-timings/1",
                                          "runs": [{"plan_file": files["plan"], "times": [[1.0, 2.0]] * rows}]})
    assert _error(capsys, ["calibrate", timings, "--window", files["plan"]]).startswith(
        f"error: --window: {files['plan']} is not an .npz archive")


def test_calibrate_errors_inside_a_run_name_the_run(files, capsys, tmp_path):
    """A plan of 16 samples timed on a 24-sample window: the error names the run and its
    input (``timings.runs[1].plan_file: rows: sample 16 is in no cell``), for a plan file
    and for a plan given inline, and a run's window that cannot be read names
    ``timings.runs[k].window``."""
    old = _plan(files)
    old.pop("window_fingerprint", None)   # an older plan file: only its rows can tell
    plan_file = _write(tmp_path, "old.json", old)
    times = [[1.0, 2.0]] * len(old["rows"])
    good = {"window": files["w16"], "plan_file": plan_file, "times": times}
    for run, field in (({"window": files["w24"], "plan_file": plan_file, "times": times}, "plan_file"),
                       ({"window": files["w24"], "plan": old, "times": times}, "plan")):
        timings = _write(tmp_path, "t.json", {"format": "rp-opt-timings/1", "runs": [good, run]})
        assert (_error(capsys, ["calibrate", timings])
                == f"error: timings.runs[1].{field}: rows: sample 16 is in no cell")
    missing = str(tmp_path / "nowhere.npz")
    timings = _write(tmp_path, "t.json", {"format": "rp-opt-timings/1",
                                          "runs": [{"window": missing, "plan_file": plan_file, "times": times}]})
    assert _error(capsys, ["calibrate", timings]) == f"error: timings.runs[0].window: {missing} does not exist"


# ------------------------------------------------------------------ 7: eval sample indices and ranks
@pytest.mark.parametrize("index", [-1, 10**30])
def test_eval_out_of_range_index_is_a_violation_whatever_its_size(files, capsys, tmp_path, index):
    """A sample index below 0 and one beyond 64-bit integers are the same kind of fault:
    a violation (exit 1) ``rows[0][0]: sample X is not in [0, 16)``, unscored."""
    data = _plan(files)
    data["rows"][0][0][0] = index
    path = _write(tmp_path, "oob.json", data)
    assert main(["eval", files["w16"], path, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False and out["score"] is None
    assert out["violations"][0] == f"rows[0][0]: sample {index} is not in [0, 16)"
    assert main(["eval", files["w16"], path]) == 1
    assert f"violation: rows[0][0]: sample {index} is not in [0, 16)" in capsys.readouterr().out


@pytest.mark.parametrize("make_rank", [lambda r: bool(r == 1), lambda r: r + 0.5, lambda r: float(r)],
                         ids=["true", "half", "float"])
def test_eval_rejects_a_rank_that_is_not_an_integer(files, capsys, tmp_path, make_rank):
    """JSON ``true`` is not the rank 1, nor is 1.5 or 1.0 a rank: a malformed file for
    eval (exit 2, one line) as for show and as a non-integer sample index is, with the
    words every other reader uses for it."""
    data = _plan(files)
    data["placement"][0][0] = make_rank(data["placement"][0][0])
    path = _write(tmp_path, "badrank.json", data)
    rank = data["placement"][0][0]
    line = f"error: placement[0][0]: must be an integer rank, got {rank!r}"
    assert _error(capsys, ["eval", files["w16"], path]) == line
    assert _error(capsys, ["show", files["w16"], "--plan", path]) == line
    assert main(["eval", files["w16"], path, "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["field"] == "placement[0][0]" and repr(rank) in error["message"]


def test_eval_rank_beyond_64_bits_is_a_violation(files, capsys, tmp_path):
    """A rank beyond 64-bit integers is out of range, like -1: a violation (exit 1),
    unscored, as a sample index beyond 64 bits is."""
    data = _plan(files)
    data["placement"][0][0] = 2**70
    path = _write(tmp_path, "hugerank.json", data)
    assert main(["eval", files["w16"], path, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False and out["score"] is None
    assert out["violations"] == ["placement: a rank beyond 64-bit integers, outside [0, 4)"]


# ------------------------------------------------------------------ 8: -v after the command
def test_verbose_flag_after_the_command(files):
    """``rp-opt plan FILE --json -v`` is accepted (it said ``unrecognized arguments: -v``)
    and logs as ``rp-opt -v plan FILE --json`` does; without -v --json logs nothing."""
    def run(*argv):
        return subprocess.run([sys.executable, "-m", "rp_opt.cli", *argv], capture_output=True, text=True,
                              timeout=300)

    after = run("plan", files["w16"], "--json", "-v")
    before = run("-v", "plan", files["w16"], "--json")
    quiet = run("plan", files["w16"], "--json")
    long_form = run("plan", files["w16"], "--json", "--verbose")
    for done in (after, before, quiet, long_form):
        assert done.returncode == 0, done.stderr
        json.loads(done.stdout)
    assert "planning" in after.stderr and "planning" in before.stderr and "planning" in long_form.stderr
    assert "planning" not in quiet.stderr


# ------------------------------------------------------------------ 9: gen warns of too few samples
def test_gen_warns_when_fewer_samples_than_slots(capsys, tmp_path):
    """``gen --samples 3 --dp 4`` still writes the window, but says on stderr (and as
    ``warning`` in --json) that no layout can fill a row of D = 4 cells; a window with
    N >= D has no warning."""
    path = tmp_path / "w3.npz"
    argv = ["gen", "--samples", "3", "--dp", "4", "--edp", "2", "--ep", "4", "--capacity", "4096", "-o", str(path)]
    assert main(argv + ["--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert path.exists() and out["output"] == str(path)
    assert "N=3" in out["warning"] and "D=4" in out["warning"]
    assert [line for line in captured.err.splitlines() if line.strip()] == [f"warning: {out['warning']}"]
    assert main(argv + ["--force"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("warning: ") and "wrote" in captured.out
    assert main(GEN + ["-o", str(tmp_path / "w16.npz"), "--json"]) == 0
    captured = capsys.readouterr()
    assert "warning" not in json.loads(captured.out) and "warning" not in captured.err


def test_bench_with_an_empty_ray_address_is_an_error(capsys):
    """``--ray ""`` names no cluster: a one-line error on --ray, not a quiet local run."""
    message = _error(capsys, ["bench", "tiny", "--ray", "", "--limit", "1", "--solvers", "baseline"])
    assert message.startswith("error: --ray:")


def test_exports_and_step_plans_carry_the_fingerprint(files, capsys, tmp_path):
    """``export`` writes a plan file too (PREFIX.json): it carries the window's fingerprint,
    so reading it against another window is refused like any plan file; a Planner step's
    ``to_dict()`` (what a trainer would save) carries it as well. A Plan compares by
    content and is unhashable, naming itself."""
    ours = _fingerprint(files["w16"])
    prefix = str(tmp_path / "ex")
    assert main(["export", files["w16"], files["plan"], "-o", prefix, "--json"]) == 0
    with open(prefix + ".json") as handle:
        assert json.load(handle)["window_fingerprint"] == ours
    message = _error(capsys, ["eval", files["w16b"], prefix + ".json"])
    assert "plan was made for another window" in message

    from rp_opt import Planner
    from rp_opt.io import load_plan, window_fingerprint

    instance = load_instance(files["w16"])
    step = Planner(instance.cluster, instance.cost, mode="baseline", time_limit=1.0).plan(
        lengths=instance.window.lengths, routing=np.array(instance.window.demand), top_k=instance.window.top_k)
    assert step.to_dict()["window_fingerprint"] == window_fingerprint(step.instance.window)
    plan = load_plan(files["plan"], instance)
    assert plan == load_plan(files["plan"], instance)
    with pytest.raises(TypeError, match="unhashable type: 'Plan'"):
        hash(plan)


def test_place_rows_summary_names_its_bound(files, capsys):
    """``place --objective rows``: the summary's bound is the objective's (per-layer sums of
    the busiest rank per (row, shard)), so it is shown with the objective's values, not
    beside the aggregate load it could exceed."""
    assert main(["place", files["w16"], "--method", "exact", "--objective", "rows", "--time-limit", "2"]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("sum_l max_p L[l,p]")][0]
    assert "rows: sum of values" in line and "sum of bounds" in line


def test_a_repeated_option_is_an_error(files, capsys):
    """``--option backend=highs --option backend=cpsat``: which one was meant is not the
    command's to guess (it kept the last in silence): one line naming --option."""
    message = _error(capsys, ["plan", files["w16"], "--solver", "exact", "--time-limit", "1",
                              "--option", "backend=highs", "--option", "backend=cpsat"])
    assert message.startswith("error: --option:") and "backend is given twice" in message
