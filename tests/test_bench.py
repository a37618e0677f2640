"""Benchmarks: suites, runner (in-process, process pool, Ray), statistics, report tables,
plots, and every benchmark script's main() on tiny settings (CI runs them in seconds)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import sys

import numpy as np
import pytest

from rp_opt.bench import Task, mean_std, run_tasks, suite, suite_names
from rp_opt.bench.report import add_gaps, instance_summary, markdown, per_instance_rows, per_solver_rows
from rp_opt.bench.suites import InstanceSpec
from rp_opt.bench.stats import block_bootstrap_ci, kendall_tau, pm
from rp_opt.errors import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(name: str):
    """Import scripts/NAME.py as a module (the scripts are not a package)."""
    path = os.path.join(ROOT, "scripts", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"script_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------
# suites
# ---------------------------------------------------------------------------------------

def test_suites_have_fixed_seeds_and_the_stated_shapes():
    assert set(suite_names()) == {"tiny", "small", "medium", "production"}
    small = suite("small")
    assert {s.samples for s in small} == {8, 12, 16, 24}
    assert {s.edp for s in small} == {1, 2} and {(s.dp, s.ep, s.layers, s.experts) for s in small} == {(4, 4, 8, 16)}
    assert suite("small") == small  # same specs every call
    prod = suite("production")
    assert {(s.dp, s.edp, s.ep, s.capacity) for s in prod} == {(64, 8, 8, 32768)}
    assert {s.model for s in prod} >= {"ling-tiny-like", "ling-flash-like", "deepseek-v3-like", "qwen3-30b-a3b-like"}
    assert max(s.samples for s in prod) == 8192
    assert [s.seed for s in suite("tiny", seeds=[5, 6])] == [5, 6]
    with pytest.raises(InputError):
        suite("huge")


def test_small_spec_builds_deterministically_with_r_star_in_range():
    """The length scale is searched so that R* lies in [2, 4]; the build is deterministic."""
    from rp_opt.rows import certify_rows

    spec = suite("small")[0]
    a = spec.build()
    b = spec.with_(rows=(2, 4)).build()  # equal spec: cached object
    assert a is b
    cert = certify_rows(a.window, a.cluster, 5.0)
    assert 2 <= cert.r_star <= 4
    from rp_opt.bench import suites as suites_module

    suites_module._CACHE.clear()
    again = spec.build()
    assert np.array_equal(again.window.lengths, a.window.lengths)
    assert np.array_equal(again.window.demand, a.window.demand)


# ---------------------------------------------------------------------------------------
# runner
# ---------------------------------------------------------------------------------------

def test_runner_checks_every_plan_and_exact_closes_the_tiny_gap():
    specs = suite("tiny")[:1]
    tasks = [Task(s, name, time_limit=5.0, threads=1) for s in specs for name in ("baseline", "kk", "exact")]
    records = run_tasks(tasks)
    assert [r["solver"] for r in records] == ["baseline", "kk", "exact"]
    for rec in records:
        assert rec["valid"] and rec["check_agrees"], rec
        assert rec["bound"] <= rec["score"] * (1 + 1e-9)
    info = instance_summary(records)[specs[0].name]
    exact = records[2]
    assert exact["status"] == "optimal" and exact["primary_proven"]
    # exact proves the optimum of the reference placement's packing, not of the instance
    assert info["proven_for"] == ["reference"] and info["best"] == pytest.approx(exact["score"])
    assert info["placement_bounds"]["reference"] >= info["bound"]
    # no valid plan may beat a proven bound of the same packing problem
    assert all(r["score"] >= info["bound"] * (1 - 1e-6) for r in records if r["solver"] == "exact")


def test_runner_records_errors_instead_of_raising():
    spec = suite("tiny")[0]
    rec = run_tasks([Task(spec, "exact", options={"no_such_option": 1})])[0]
    assert rec["status"] == "error" and "no_such_option" in rec["error"] and rec["valid"] is False


def test_runner_records_the_reason_of_a_window_without_a_plan():
    """3 samples cannot fill one row of D = 4 slots: the record says infeasible, invalid,
    and why (the certifier's reason), for a packer and for the exact solver alike."""
    from rp_opt.bench.suites import InstanceSpec

    spec = InstanceSpec("too-few", "ling-tiny-like", samples=3, dp=4, edp=1, ep=2, capacity=4096, layers=2,
                        experts=4, top_k=2)
    for rec in run_tasks([Task(spec, "baseline"), Task(spec, "exact", time_limit=2)]):
        assert rec["status"] == "infeasible" and rec["valid"] is False and rec["score"] is None
        assert "3 samples for 4 cells" in rec["reason"]


def test_runner_counts_a_heuristic_whose_bound_meets_its_primary_as_proven():
    """Three samples of 2 tokens, C = 4, D = 1, one rank: R* = 2 (two samples share a
    row), and with one slot and one rank the primary sum_r J = A + X is the same for every
    layout: the attention sum 3 (2 + 0.4) plus gamma 6 = 3, exactly the analytic bound.
    The third level, max J = (4 + 0.8) + 2 = 6.8, is above its bounds (the mean 5.1 and
    one sample's 3.4), so the heuristic reports ``feasible`` with its primary proven, and
    the record counts it (it used to count only exact's first level or ``optimal``)."""
    from rp_opt import Cluster, CostModel, Instance, Stage, Window
    from rp_opt.bench import suites as suites_module
    from rp_opt.bench.suites import InstanceSpec

    demand = np.zeros((3, 1, 2), dtype=np.int64)
    demand[[0, 1, 2], 0, [0, 1, 0]] = 2
    inst = Instance(Window(np.array([2, 2, 2]), demand, top_k=1), Cluster(1, 1, 1, 4),
                    CostModel((Stage("softmax", 1, 1.0, 0.1),), gamma=0.5))
    spec = InstanceSpec("two-rows", "ling-tiny-like", samples=3, dp=1, edp=1, ep=1, capacity=4)
    suites_module._CACHE[spec] = inst  # the spec names this hand-made window
    try:
        rec = run_tasks([Task(spec, "heuristic", time_limit=1.0)])[0]
    finally:
        suites_module._CACHE.pop(spec, None)
    assert rec["valid"] and rec["status"] == "feasible" and rec["score"] == pytest.approx(10.2)
    assert rec["bound"] == pytest.approx(10.2) and rec["primary_proven"]


def test_process_pool_gives_the_same_records_as_in_process():
    specs = suite("tiny")
    tasks = [Task(s, name) for s in specs for name in ("baseline", "kk")]
    here = run_tasks(tasks, workers=1)
    pool = run_tasks(tasks, workers=2)
    assert ([(r["instance"], r["solver"], r["score"]) for r in here]
            == [(r["instance"], r["solver"], r["score"]) for r in pool])


@pytest.fixture(scope="class")
def local_ray():
    """One local Ray (1 CPU) for the tests of :class:`TestRay`: starting it takes seconds."""
    ray = pytest.importorskip("ray", reason="ray is an optional extra (pip install 'rp-opt[ray]')")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@dataclasses.dataclass(frozen=True)
class _DyingSpec(InstanceSpec):
    """A spec whose build ends its worker process at once (as the OOM killer or a segfault
    would), before the run can record anything."""

    def build(self):
        os._exit(3)


def _dying(spec: InstanceSpec) -> _DyingSpec:
    return _DyingSpec(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)})


class TestRay:
    """Runs on a local Ray (one start for the class)."""

    def test_ray_local_mode(self, local_ray):
        tasks = [Task(s, "baseline") for s in suite("tiny")]
        records = run_tasks(tasks, ray_address="local")
        local = run_tasks(tasks)
        assert [r["score"] for r in records] == [r["score"] for r in local]
        assert all(r["valid"] for r in records)

    def test_a_ray_worker_that_dies_becomes_an_error_record(self, local_ray):
        """A Ray worker that dies in its run: ray.get raised WorkerCrashedError (after three
        retries, each dying again) and the whole bench was lost; now that run is an error
        record naming the reason, at once, and the other runs are recorded as usual."""
        spec = suite("tiny")[0]
        tasks = [Task(_dying(spec), "baseline", time_limit=1.0), Task(spec, "baseline", time_limit=1.0)]
        seen = []
        # Ray's workers cannot import this test module: send _DyingSpec's code with the task
        local_ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        try:
            records = run_tasks(tasks, ray_address="local", on_record=seen.append)
        finally:
            local_ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        assert len(records) == 2 and len(seen) == 2
        dead, alive = records
        assert dead["status"] == "error" and dead["valid"] is False
        assert dead["error"].startswith("WorkerCrashedError: The worker died unexpectedly")
        assert "\n" not in dead["error"]
        assert dead["instance"] == spec.name and dead["solver"] == "baseline"
        assert alive["valid"] and alive["status"] in ("optimal", "feasible")
        add_gaps(records)
        per_solver_rows(records)  # the report takes the error record


def test_a_pool_process_that_dies_costs_only_its_own_run():
    """A process that dies breaks the whole ``ProcessPoolExecutor``; the runs it left
    unfinished run again, each in a process of its own, so only the run that kills its
    process is a one-line ``BrokenProcessPool`` error record and the other three are
    valid; run_tasks returns a record per task and the report takes them."""
    spec = suite("tiny")[0]
    tasks = [Task(_dying(spec), "baseline", time_limit=1.0)] + [Task(spec, "baseline", time_limit=1.0)] * 3
    records = _only_the_dying_run_lost(tasks)
    assert "\n" not in records[0]["error"]
    add_gaps(records)
    per_solver_rows(records)


def _only_the_dying_run_lost(tasks: list) -> list[dict]:
    """run_tasks on 2 processes: a record per task, each announced once; the first (the
    dying run) a BrokenProcessPool error record, every other one valid."""
    seen = []
    records = run_tasks(tasks, workers=2, on_record=seen.append)
    assert len(records) == len(tasks) and len(seen) == len(tasks)
    assert records[0]["status"] == "error" and records[0]["error"].startswith("BrokenProcessPool: ")
    assert all(rec["status"] != "error" and rec["valid"] for rec in records[1:]), records[1:]
    return records


def test_a_pool_that_breaks_while_runs_are_still_being_submitted(monkeypatch):
    """The pool can break before every run is submitted (a run that kills its process at
    once, many runs): ``submit`` then raises ``BrokenProcessPool`` itself. The runs not
    submitted yet run again alone like the unfinished ones, instead of the exception
    leaving run_tasks and losing every record. (Found by review: 3,000 tiny runs after a
    dying one raised it in 0.02 s.) The pool here waits for the first run to end before
    taking the next, so the break comes during submission every time."""
    from concurrent.futures import ProcessPoolExecutor, wait

    import rp_opt.bench.runner as runner

    class SlowToSubmit(ProcessPoolExecutor):
        first = None

        def submit(self, fn, /, *args, **kwargs):
            if self.first is not None:
                wait([self.first])              # the dying run has broken the pool by now
            future = super().submit(fn, *args, **kwargs)
            if self.first is None:
                self.first = future
            return future

    monkeypatch.setattr(runner, "ProcessPoolExecutor", SlowToSubmit)
    spec = suite("tiny")[0]
    tasks = [Task(_dying(spec), "baseline", time_limit=0.5)] + [Task(spec, "baseline", time_limit=0.5)] * 2
    _only_the_dying_run_lost(tasks)


def test_error_record_of_ray_exceptions():
    """Ray's errors for a worker that died or a task that failed before run_task could
    record it become one-line error records naming the type (Ray's task errors carry
    terminal colours, the worker's process title and a traceback)."""
    exceptions = pytest.importorskip("ray.exceptions", reason="ray is an optional extra")
    from rp_opt.bench.runner import error_record

    task = Task(suite("tiny")[0], "kk", label="kk-1")
    task_error = exceptions.RayTaskError("run_task", "Traceback (most recent call last):\n  File x\nValueError: boom",
                                         ValueError("boom\nsecond line"), proctitle="ray::run_task()", pid=1,
                                         ip="127.0.0.1").as_instanceof_cause()
    cases = [
        (exceptions.WorkerCrashedError(),
         "WorkerCrashedError: The worker died unexpectedly while executing this task."),
        (exceptions.OutOfMemoryError("Task was killed due to the node running low on memory.\nMemory on the node ..."),
         "OutOfMemoryError: Task was killed due to the node running low on memory."),
        (exceptions.NodeDiedError("node 1 died"), "NodeDiedError: node 1 died"),
        (task_error, "RayTaskError(ValueError): boom"),
    ]
    for exc, start in cases:
        rec = error_record(task, exc)
        assert rec["status"] == "error" and rec["valid"] is False and rec["solver"] == "kk-1"
        assert rec["instance"] == task.spec.name and rec["time_limit"] == task.time_limit
        assert rec["error"].startswith(start), rec["error"]
        assert "\n" not in rec["error"] and "\x1b" not in rec["error"] and len(rec["error"]) <= 240


# ---------------------------------------------------------------------------------------
# statistics and tables
# ---------------------------------------------------------------------------------------

def test_mean_std_and_pm():
    assert mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0, 3)
    assert mean_std([None, 4.0]) == (4.0, 0.0, 1)
    assert pm([1.0, 3.0]) == "2.00 ± 1.41"
    assert pm([]) == "-"


def test_block_bootstrap_interval():
    """Constant series: a point interval. A series: the interval holds its mean, is
    deterministic for a seed, and longer blocks on a trending series widen it."""
    assert block_bootstrap_ci([2.0] * 10) == (2.0, 2.0, 2.0)
    rng = np.random.default_rng(0)
    x = rng.normal(5.0, 1.0, 40)
    est, low, high = block_bootstrap_ci(x, block=4, seed=1)
    assert low < est < high and est == pytest.approx(x.mean())
    assert block_bootstrap_ci(x, block=4, seed=1) == (est, low, high)
    trend = np.repeat([0.0, 10.0], 20)  # strongly dependent: neighbours are equal
    _, l1, h1 = block_bootstrap_ci(trend, block=1, seed=0)
    _, l8, h8 = block_bootstrap_ci(trend, block=8, seed=0)
    assert h8 - l8 > h1 - l1


def test_kendall_tau_hand_cases():
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_gap_tables_from_hand_records():
    """Instance a: bounds 90 (x) and 95 (y), scores 100 (x) and 95 (y, proven) -> best bound 95,
    optimal; x's gap to the bound is 5/95."""
    recs = [
        {"instance": "a", "config": "c", "solver": "x", "valid": True, "score": 100.0, "bound": 90.0, "seconds": 1.0},
        {"instance": "a", "config": "c", "solver": "y", "valid": True, "score": 95.0, "bound": 95.0, "seconds": 2.0,
         "primary_proven": True},
        {"instance": "b", "config": "c", "solver": "x", "valid": False, "score": 1.0, "bound": 0.5, "seconds": 0.1},
    ]
    summary = add_gaps(recs)
    assert summary["a"]["bound"] == 95.0 and summary["a"]["best"] == 95.0 and summary["a"]["optimal"]
    assert recs[0]["gap_bound_pct"] == pytest.approx(100 * 5 / 95)
    assert recs[1]["gap_bound_pct"] == 0.0
    assert summary["b"]["best"] is None and recs[2]["gap_bound_pct"] is None  # invalid plans do not count
    headers, rows = per_solver_rows(recs)
    x = rows[[r[0] for r in rows].index("x")]
    assert x[1:3] == [2, 1]  # runs, valid
    text = markdown(headers, rows)
    assert text.count("\n") == len(rows) + 1


def _rec(instance, solver, score, bound, rows=2, placement=None, bound_placement=None, **more):
    rec = {"instance": instance, "config": "c", "solver": solver, "valid": score is not None, "score": score,
           "score_levels": [score] if score is not None else [], "bound": bound, "num_rows": rows,
           "bound_rows": rows, "placement": placement, "bound_placement": bound_placement, "seconds": 1.0,
           "status": "feasible" if score is not None else "no_solution"}
    rec.update(more)
    return rec


def test_a_fixed_placement_bound_is_no_bound_for_other_placements():
    """exact on the identity placement proves 120 (optimal for that placement); joint, free
    to choose its placement, finds 100 with bound 95 (every placement); the heuristic on the
    identity placement finds 125. The instance's best bound is 95, not 120 (a plan of 100
    exists), the optimum is not proven (95 < 100), joint's gap is 100/95 - 1, not -16.7 %,
    and only the heuristic's plan (same placement) is measured against 120. The old report
    took the maximum of every bound: 120 > best score 100, 'optimal', negative gaps."""
    recs = [_rec("a", "exact-id", 120.0, 120.0, placement="identity", bound_placement="identity",
                 primary_proven=True, status="optimal"),
            _rec("a", "joint", 100.0, 95.0),
            _rec("a", "heuristic", 125.0, 90.0, placement="identity")]
    info = add_gaps(recs)["a"]
    assert info["bound"] == 95.0 and info["best"] == 100.0 and info["best_solver"] == "joint"
    assert not info["optimal"] and info["proven_by"] is None and info["proven_for"] == ["identity"]
    assert info["placement_bounds"] == {"identity": 120.0}
    assert recs[1]["gap_bound_pct"] == pytest.approx(100 * 5 / 95)
    assert recs[2]["gap_bound_pct"] == pytest.approx(100 * 5 / 120) and recs[0]["gap_bound_pct"] == 0.0
    assert all(r["gap_bound_pct"] >= 0 for r in recs)
    # a bound for a placement the solver chose itself ("own") holds for that run alone
    own = [_rec("b", "auto", 110.0, 110.0, bound_placement="own"), _rec("b", "kk", 100.0, 80.0)]
    info = add_gaps(own)["b"]
    assert info["bound"] == 80.0 and own[0]["gap_bound_pct"] == 0.0 and own[1]["gap_bound_pct"] == pytest.approx(25.0)


def test_a_bound_for_r_rows_is_no_bound_for_more_rows():
    """The exact solver bounds 2-row layouts by 100 (its plan: 101); a baseline that needed a
    third row scores 99 with its own 3-row bound 90. The instance's problem is R = 2 (the
    fewest rows of a valid plan): best 101, bound 100; the 3-row plan's gap is to 90, and the
    2-row bound is not compared with it (old report: bound 100 > best 99, 'optimal', a gap of
    -1 %)."""
    recs = [_rec("a", "exact", 101.0, 100.0, rows=2), _rec("a", "baseline", 99.0, 90.0, rows=3)]
    info = add_gaps(recs)["a"]
    assert info["rows"] == 2 and info["bound"] == 100.0 and info["best"] == 101.0 and not info["optimal"]
    assert recs[0]["gap_bound_pct"] == pytest.approx(1.0) and recs[1]["gap_bound_pct"] == pytest.approx(100 * 9 / 90)
    assert recs[1]["gap_best_pct"] == pytest.approx(100 * -2 / 101)


def test_a_bound_above_a_plan_with_more_rows_is_flagged_and_marked():
    """The heuristic plans at R = 2 (bound 90); kk needs R = 3 and reports a 3-row bound of
    130 above its own 3-row plan of 120. Only bounds at the instance's R were compared, so
    the wrong certificate passed (exit 0, a gap of -7.7 %); now it is flagged, and kk's cell
    in the per-instance table says its plan has other rows."""
    from rp_opt.bench.report import problems

    recs = [_rec("i", "heuristic", 100.0, 90.0, rows=2), _rec("i", "kk", 120.0, 130.0, rows=3)]
    info = add_gaps(recs)
    assert info["i"]["crossed_bounds"] == ["R=3: kk's bound above kk's plan"] and not info["i"]["optimal"]
    assert problems(recs, info) == ["a reported bound exceeds a valid plan's score on i (a wrong certificate; "
                                    "see --json)"]
    fine = [_rec("i", "heuristic", 100.0, 90.0, rows=2), _rec("i", "kk", 120.0, 110.0, rows=3)]
    headers, rows = per_instance_rows(fine)
    row = dict(zip(headers, rows[0]))
    assert row["R"] == 2 and row["kk: gap% (s)"] == "9.09 (1.0) [R=3]" and row["heuristic: gap% (s)"] == "11.11 (1.0)"
    assert problems(fine, add_gaps(fine)) == []


def test_best_solver_breaks_primary_ties_lexicographically():
    """Two plans with primary 100: x's levels (100, 50) and y's (100, 40); y is the best plan
    whatever the order of the records (the old report kept the first one seen)."""
    recs = [_rec("a", "x", 100.0, 90.0, score_levels=[100.0, 50.0]),
            _rec("a", "y", 100.0, 90.0, score_levels=[100.0, 40.0])]
    assert instance_summary(recs)["a"]["best_solver"] == "y"
    assert instance_summary(recs[::-1])["a"]["best_solver"] == "y"


def test_per_instance_cells_of_invalid_plans_and_missing_bounds():
    """An invalid plan (checker said no) shows 'invalid', not its solver's status 'feasible';
    a plan whose solver's score the checker contradicts does not count as the best; a valid
    plan with no bound for its rows shows '-' (the old table raised TypeError on None)."""
    from rp_opt.bench.report import per_instance_rows

    recs = [_rec("a", "x", 80.0, None, valid=False),
            _rec("a", "y", 90.0, None, check_agrees=False),
            _rec("a", "z", 100.0, None),
            _rec("a", "w", None, None, status="error", valid=False)]
    headers, rows = per_instance_rows(recs)
    row = dict(zip(headers, rows[0]))
    assert row["best score"] == 100.0 and row["best bound"] is None
    assert row["x: gap% (s)"] == "invalid" and row["y: gap% (s)"] == "score != checker's"
    assert row["z: gap% (s)"] == "- (1.0)" and row["w: gap% (s)"] == "error"


def test_plots_skip_without_matplotlib(monkeypatch, tmp_path):
    from rp_opt.bench import plots

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert plots.pyplot() is None
    recs = [{"solver": "x", "valid": True, "gap_bound_pct": 1.0}]
    assert plots.gap_distribution(recs, str(tmp_path / "g.png")) is None
    assert not (tmp_path / "g.png").exists()


@pytest.mark.parametrize("argv, message", [
    (["--time-limit", "0"], "--time-limit: must be a finite number > 0 (seconds), got 0.0"),
    (["--time-limit", "inf"], "--time-limit: must be a finite number > 0 (seconds), got inf"),
    (["--workers", "0"], "--workers: must be an integer >= 1, got 0"),
    (["--threads", "0"], "--threads: must be an integer in [1, 256], got 0"),
    (["--threads", "-2"], "--threads: must be an integer in [1, 256], got -2"),
    # (were found by each run: exit 1, every run an error naming the solver's ``workers``)
    (["--threads", "300"], "--threads: must be an integer in [1, 256], got 300"),
    (["--objective", "foo"], "--objective: unknown objective 'foo'; known: attention, expert, shard, sync, weighted"),
    (["--limit", "-1"], "--limit: must be an integer >= 0 (instances; 0 means all), got -1"),
    (["--seeds", "1,x"], "--seeds: must be an integer in [0, 2147483647] (each of the comma-separated seeds), got 'x'"),
    (["--seeds", "1,2.5"], "--seeds: must be an integer in [0, 2147483647] (each of the comma-separated seeds), "
                           "got '2.5'"),
    (["--seeds", "1,-1"], "--seeds: must be an integer in [0, 2147483647] (each of the comma-separated seeds), "
                          "got '-1'"),
    (["--seeds", ","], "--seeds: names no seed, got ','"),
])
def test_gap_arguments_follow_the_shared_rules(argv, message, capsys):
    """The gap benchmark's scalar arguments (the script's parser leaves them unchecked) are
    read by rp_opt.errors before anything runs: one line naming the flag and the value."""
    import argparse

    from rp_opt.bench.gap import add_arguments, tasks_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser, "tiny")
    with pytest.raises(InputError) as info:
        tasks_from_args(parser.parse_args(["--solvers", "baseline"] + argv))
    assert str(info.value) == message
    assert load_script("bench_gap").main(["--suite", "tiny", "--solvers", "baseline"] + argv) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    args = parser.parse_args(["--solvers", "baseline", "--seeds", "3, 4.0"])
    assert [t.spec.seed for t in tasks_from_args(args)] == [3, 4]


def test_gap_threads_and_limit_accept_valid_values(capsys):
    """--threads 2 reaches every task; --limit 1 keeps the first instance, 0 (and none)
    the whole suite; a non-integer stops at argparse (exit 2, one line)."""
    import argparse

    from rp_opt.bench.gap import add_arguments, tasks_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser, "tiny")
    every = tasks_from_args(parser.parse_args(["--solvers", "baseline"]))
    one = tasks_from_args(parser.parse_args(["--solvers", "baseline", "--threads", "2", "--limit", "1"]))
    assert len(one) == 1 and one[0].threads == 2 and one[0].spec == every[0].spec
    assert len(tasks_from_args(parser.parse_args(["--solvers", "baseline", "--limit", "0"]))) == len(every) > 1
    with pytest.raises(SystemExit) as info:
        load_script("bench_gap").main(["--suite", "tiny", "--limit", "2.5"])
    assert info.value.code == 2 and "--limit: invalid int value: '2.5'" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# scripts and the CLI (tiny settings)
# ---------------------------------------------------------------------------------------

def test_bench_gap_script(tmp_path, capsys):
    out = tmp_path / "out"
    rc = load_script("bench_gap").main(["--suite", "tiny", "--limit", "1", "--time-limit", "1",
                                        "--solvers", "baseline,lpt-ffd,exact", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "Per instance (tiny)" in text and "exact" in text
    data = json.loads((out / "gap_tiny.json").read_text())
    assert len(data["records"]) == 3 and all(r["valid"] for r in data["records"])
    assert "| instance |" in (out / "gap_tiny.md").read_text()
    if importlib.util.find_spec("matplotlib"):
        assert (out / "img" / "gap_tiny.png").stat().st_size > 0


@pytest.mark.parametrize("seeds, message", [("1,1", "error: --seeds: 1 given twice"),
                                            ("1.5", "error: --seeds: must be an integer"),
                                            # as rp-opt bench (review): a seed in [0, 2^31-1], at least one
                                            # (were: every run an error record, exit 1; nothing run, exit 0)
                                            ("-1", "error: --seeds: must be an integer in [0, 2147483647]"),
                                            ("2147483648", "error: --seeds: must be an integer in [0, 2147483647]"),
                                            (",", "error: --seeds: names no seed")])
def test_bench_prod_reads_seeds_as_rp_opt_bench_does(capsys, seeds, message):
    """scripts/bench_prod.py parses its own --seeds: a repeated or fractional seed is one
    line naming --seeds and exit 2, before any run (int() said 'invalid literal')."""
    assert load_script("bench_prod").main(["--quick", "--seeds", seeds]) == 2
    assert capsys.readouterr().err.startswith(message)


def test_bench_prod_script(tmp_path, capsys):
    out = tmp_path / "out"
    assert load_script("bench_prod").main(["--quick", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Gain split" in text and "LPT+heuristic" in text
    data = json.loads((out / "prod_tiny.json").read_text())
    labels = {r["solver"] for r in data["records"]}
    assert labels == {"identity+ffd", "identity+kk", "LPT+ffd", "LPT+heuristic", "heuristic+refine", "LPT+exact"}
    assert all(r["valid"] for r in data["records"])
    if importlib.util.find_spec("matplotlib"):
        assert list((out / "img").glob("heatmap_*.png"))


def test_bench_scaling_script(tmp_path, capsys):
    out = tmp_path / "out"
    assert load_script("bench_scaling").main(["--quick", "--in-process", "--params", "N", "--out", str(out)]) == 0
    data = json.loads((out / "scaling_quick.json").read_text())
    assert [p["N"] for p in data["points"]] == [16, 32]
    assert all(p["valid"] and p["seconds"] > 0 for p in data["points"])


def test_bench_scaling_refuses_an_unknown_parameter(capsys):
    """``--params N,X`` swept N and dropped X without a word: one line naming it, exit 2
    (the quick sweep has N and L)."""
    assert load_script("bench_scaling").main(["--quick", "--in-process", "--params", "N,X"]) == 2
    assert capsys.readouterr().err == "error: --params: choose from N, L; 'X' is not one of them\n"


def test_bench_refine_script(capsys):
    """scripts/bench_refine.py on a 96-sample window, 1 s per run: both runs checked and
    reported, the refine round's swaps counted."""
    assert load_script("bench_refine").main(["--samples", "96", "--dp", "8", "--edp", "2", "--ep", "8",
                                            "--limits", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["refine"] for r in rows] == [False, True]
    assert all(r["primary"] >= r["bound"] > 0 for r in rows)
    assert rows[0]["swaps"] == 0


def test_bench_lumpiness_script(capsys):
    """scripts/bench_lumpiness.py on a 96-sample window: the plan's blocks are no better
    balanced than the aggregate loads allow, and expert-only swaps never raise the excess."""
    assert load_script("bench_lumpiness").main(["--samples", "96", "--dp", "8", "--edp", "2", "--ep", "8",
                                               "--time-limit", "1", "--swap-seconds", "0.5", "--random", "2",
                                               "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"] >= out["aggregate"] - 1e-12 and len(out["random"]) == 2
    assert out["expert_swaps"] <= out["plan"] + 1e-12 and out["swap_pairs"] >= 1


@pytest.mark.parametrize("name", ["question_objective", "question_replay_lag", "question_control",
                                  "question_sensitivity"])
def test_question_scripts(name, tmp_path, capsys):
    out = tmp_path / "out"
    assert load_script(name).main(["--quick", "--out", str(out)]) == 0
    data = json.loads((out / f"{name}.json").read_text())
    assert data["points"]
    if name == "question_objective":
        # with G = 1 both objectives are the same: planning with either gives the same plan cost
        assert all(abs(p["sync_regret"]) < 1e-9 for p in data["points"] if p["G"] == 1)
    if name == "question_sensitivity":
        own = [p for p in data["points"] if p["a"] == 1.0 and p["b"] == 1.0]
        assert all(p["regret"] == 0 and p["tau"] == pytest.approx(1.0) for p in own)


def test_cli_bench_json(capsys):
    from rp_opt.cli import main

    assert main(["bench", "tiny", "--limit", "1", "--solvers", "baseline,kk", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["solver"] for r in data["records"]] == ["baseline", "kk"]
    assert main(["bench", "nope"]) == 2


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "3,4,3"], "--seeds: 3 given twice"),
    (["--seeds", "3, 03,4"], "--seeds: 3 given twice"),
    (["--seeds", "5,5.0"], "--seeds: 5 given twice"),
    (["--solvers", "baseline,kk,baseline"], "--solvers: 'baseline' given twice"),
    (["--solvers", "kk, kk"], "--solvers: 'kk' given twice"),
])
def test_bench_refuses_a_seed_or_solver_given_twice(argv, message, capsys):
    """A seed or solver named twice ran its runs twice (the run counts of the per-solver
    table doubled, the per-instance table showed one of them): now bad input before
    anything runs, one line naming the flag and the value, exit 2 (with --json also the
    error object), the same for scripts/bench_gap.py and for suite() itself."""
    from rp_opt.cli import main

    base = ["bench", "tiny", "--solvers", "baseline", "--time-limit", "1", "--limit", "1"]
    assert main(base + argv) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {message}\n" and captured.out == ""
    assert main(base + argv + ["--json"]) == 2
    field, text = message.split(": ", 1)
    assert json.loads(capsys.readouterr().out) == {"error": {"field": field, "message": text}}
    script = ["--suite", "tiny", "--solvers", "baseline", "--time-limit", "1", "--limit", "1"]
    assert load_script("bench_gap").main(script + argv) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


def test_suite_refuses_a_seed_given_twice():
    with pytest.raises(InputError) as info:
        suite("tiny", seeds=[1, 2, 1])
    assert str(info.value) == "seeds: 1 given twice"
    assert [s.seed for s in suite("tiny", seeds=[2, 1])] == [2, 1]


def _strict_loads(text: str):
    """json.loads that refuses NaN and Infinity (what strict JSON readers do)."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_write_outputs_writes_strict_json(tmp_path):
    """json.dump wrote bare NaN / Infinity into the --out files, which strict readers
    reject; every non-finite float (Python or numpy, in lists, tuples, arrays) is null."""
    from rp_opt.bench.report import write_outputs

    data = {"meta": {"wall_seconds": math.inf}, "records": [
        {"gap": math.nan, "score_levels": (1.0, -math.inf), "bound": np.float64("nan"),
         "seconds": np.float32(2.5), "counts": np.array([1.0, np.nan]), "N": np.int64(8), "note": None}]}
    write_outputs(str(tmp_path), "x", {"t": (["a"], [[math.nan]])}, data)
    written = _strict_loads((tmp_path / "x.json").read_text())
    assert written == {"meta": {"wall_seconds": None}, "records": [
        {"gap": None, "score_levels": [1.0, None], "bound": None, "seconds": 2.5, "counts": [1.0, None], "N": 8,
         "note": None}]}
    from rp_opt.bench.report import strict_json

    assert strict_json(data) == written
    assert "| - |" in (tmp_path / "x.md").read_text()


def test_cli_bench_out_and_json_are_strict_json(tmp_path, monkeypatch, capsys):
    """rp-opt bench --out DIR --json on a real run whose records hold a NaN and an
    infinity (put there after the solver, as an overflowing measure would): the file and
    stdout are strict JSON with null for them; the other fields are as measured."""
    import rp_opt.bench.gap as gap
    from rp_opt.cli import main

    real = gap.run_tasks

    def with_non_finite(tasks, **kwargs):
        records = real(tasks, **kwargs)
        records[0].update(gap=math.nan, build_seconds=math.inf)
        return records

    monkeypatch.setattr(gap, "run_tasks", with_non_finite)
    out = tmp_path / "out"
    assert main(["bench", "tiny", "--solvers", "baseline", "--time-limit", "1", "--limit", "1", "--out", str(out),
                 "--json"]) == 0
    printed = _strict_loads(capsys.readouterr().out)
    written = _strict_loads((out / "bench_tiny.json").read_text())
    for data in (printed, written):
        (rec,) = data["records"]
        assert rec["gap"] is None and rec["build_seconds"] is None
        assert rec["valid"] and rec["score"] > 0 and rec["solver"] == "baseline"
    assert written["records"] == printed["records"]


def test_question_plan_names_the_reason():
    """``rp_opt.bench.questions.plan`` on 3 samples for D = 4 slots (no layout): one line
    with the status and the solver's reason (it said only "baseline returned no plan
    (infeasible)")."""
    from rp_opt import Cluster, CostModel, Instance, Stage, Window
    from rp_opt.bench.questions import plan

    lengths = np.array([2, 4, 2])
    demand = np.zeros((3, 1, 2), dtype=np.int64)
    demand[np.arange(3), 0, np.arange(3) % 2] = lengths
    inst = Instance(Window(lengths, demand, top_k=1), Cluster(4, 1, 1, 7),
                    CostModel((Stage("softmax", 1, 1.0, 0.1),), gamma=0.5))
    with pytest.raises(InputError) as info:
        plan(inst, "baseline")
    assert str(info.value).startswith("window: baseline returned no plan (infeasible: window has 3 samples for 4 cells")
    assert "\n" not in str(info.value)


def test_a_bound_above_a_valid_plan_is_flagged():
    """Hand-made records (no solver): a bound of 101 beside a valid plan of 100 is no bound
    (some certificate is wrong), so the instance says bound_above_best; a bound of 99 does
    not."""
    from rp_opt.bench.report import instance_summary

    crossed = instance_summary([_rec("a", "x", 100.0, None), _rec("a", "y", 105.0, 101.0)])["a"]
    assert crossed["bound_above_best"] and crossed["bound"] == 101.0
    fine = instance_summary([_rec("b", "x", 100.0, None), _rec("b", "y", 105.0, 99.0)])["b"]
    assert not fine["bound_above_best"]
    # nothing is proven while a certificate is wrong, and no gap is taken to that bound
    # (the instance read "optimal", and every plan showed a negative gap)
    recs = [_rec("a", "x", 100.0, None), _rec("a", "y", 105.0, 101.0)]
    info = add_gaps(recs)["a"]
    assert not info["optimal"] and info["crossed_bounds"] == ["every placement"]
    assert recs[0]["gap_bound_pct"] is None and recs[1]["gap_bound_pct"] is None


def test_a_fixed_placement_bound_above_that_placements_plan_is_flagged():
    """exact's bound of 150 for the LPT placement beside the heuristic's plan of 110 on that
    placement: a wrong certificate too (only the every-placement bound was compared), so
    the instance says so, is not optimal, and the column names the placement."""
    recs = [_rec("a", "kk", 120.0, 80.0), _rec("a", "heuristic", 110.0, None, placement="lpt"),
            _rec("a", "exact", 112.0, 150.0, placement="lpt", bound_placement="lpt", primary_proven=True)]
    info = add_gaps(recs)["a"]
    assert info["bound_above_best"] and info["crossed_bounds"] == ["lpt"] and not info["optimal"]
    headers, rows = per_instance_rows(recs)
    assert rows[0][headers.index("optimal")] == "? (a bound above a valid plan: lpt)"
    from rp_opt.bench.report import problems

    assert problems(recs, {"a": info}) == ["a reported bound exceeds a valid plan's score on a (a wrong certificate; "
                                           "see --json)"]


def test_strict_json_reads_numpy_values_inside_object_arrays():
    """An object array's tolist() keeps its numpy values as they are: strict_json left them
    to json.dump's default=str, so np.int64(5) was written as the string "5" (and a NaN
    float32 as "nan"). They are numbers (or null) like numpy values anywhere else, and
    finite values keep their value: large integers, -0.0, nested tuples."""
    from rp_opt.bench.report import strict_json

    data = {"k": np.array([np.int64(5), np.float32("nan"), np.array([1.5, np.inf]), "x", (1, np.int64(2))],
                          dtype=object),
            "a": (np.int64(2**62), 2**100, -0.0, ((np.uint64(2**64 - 1),),))}
    out = strict_json(data)
    assert json.loads(json.dumps(out, allow_nan=False)) == out
    assert out == {"k": [5, None, [1.5, None], "x", [1, 2]], "a": [2**62, 2**100, -0.0, [[2**64 - 1]]]}
    assert type(out["k"][0]) is int and math.copysign(1.0, out["a"][2]) == -1.0


def test_unreachable_ray_address_fails_fast():
    """An address where nothing listens is a one-line InputError on --ray within seconds
    (ray.init would retry for about a minute)."""
    import socket
    import time

    from rp_opt.bench.runner import probe_ray_address

    with socket.socket() as sock:          # a port that was free a moment ago
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    t0 = time.perf_counter()
    with pytest.raises(InputError) as err:
        probe_ray_address(f"127.0.0.1:{port}", seconds=2.0)
    assert err.value.field == "--ray" and time.perf_counter() - t0 < 3.0
    probe_ray_address("local")  # nothing to reach


def test_ctrl_c_ends_the_suite_with_the_runs_done(ctrl_c, capsys, tmp_path):
    """A Ctrl-C one second into the first of two 4-s heuristic runs: that run returns its
    best plan (``interrupted``), the second never starts, the table shows the one run, no
    --out files are written, and the exit code is 130 (the suite used to go on, and exit
    0, with the cut run recorded as a normal one)."""
    from rp_opt.cli import main

    out = tmp_path / "out"
    ctrl_c(1.0)
    code = main(["bench", "tiny", "--solvers", "heuristic", "--time-limit", "4", "--json", "--out", str(out)])
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert code == 130 and "error: interrupted (Ctrl-C): 1 of 2 runs done" in captured.err
    assert data["meta"]["interrupted"] is True and len(data["records"]) == 1
    assert data["records"][0]["interrupted"] is True and data["records"][0]["valid"] is True
    assert data["records"][0]["seconds"] < 3.5
    assert not out.exists() or not any(out.iterdir())


_BUILD = InstanceSpec.build   # (the patched one below calls the real one)


def _ctrl_c_at_the_second_window(monkeypatch):
    """A Ctrl-C while the second run builds its window (outside any solver's own Ctrl-C
    handling): InstanceSpec.build raises KeyboardInterrupt from its second call on."""
    calls = []

    def interrupted(self):
        calls.append(self)
        if len(calls) >= 2:
            raise KeyboardInterrupt
        return _BUILD(self)

    monkeypatch.setattr(InstanceSpec, "build", interrupted)


def test_ctrl_c_outside_a_solver_keeps_the_runs_done(monkeypatch, capsys):
    """``rp-opt bench`` lost every finished run when the Ctrl-C came outside a solver (a
    window being built, a baseline rule): only ``error: interrupted``, no table, no JSON.
    Now the runs done are kept, the cut run is an ``interrupted`` record, exit 130."""
    from rp_opt.cli import main

    tasks = [Task(spec, "baseline", time_limit=1.0) for spec in suite("tiny")]
    _ctrl_c_at_the_second_window(monkeypatch)
    records = run_tasks(tasks)
    assert [r["status"] for r in records] == ["feasible", "interrupted"] and records[0]["valid"]
    assert records[1]["interrupted"] and not records[1]["valid"] and records[1]["instance"] == tasks[1].spec.name

    _ctrl_c_at_the_second_window(monkeypatch)
    assert main(["bench", "tiny", "--solvers", "baseline,kk", "--json"]) == 130
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["meta"]["interrupted"] and [r["status"] for r in data["records"]] == ["feasible", "interrupted"]
    assert "error: interrupted (Ctrl-C): 2 of 4 runs done, the last cut short" in captured.err


@pytest.mark.parametrize("script, argv", [
    ("bench_gap", ["--suite", "tiny", "--solvers", "baseline,kk"]),
    ("bench_prod", ["--quick"]),
])
def test_scripts_interrupted_write_nothing_and_exit_130(monkeypatch, capsys, tmp_path, script, argv):
    """A Ctrl-C during the documented ``--out docs/bench`` runs wrote the part of the suite
    that ran over the published tables and exited 0; now the runs done are shown, nothing
    is written, and the exit code is 130 (as rp-opt bench)."""
    out = tmp_path / "out"
    _ctrl_c_at_the_second_window(monkeypatch)
    assert load_script(script).main(argv + ["--out", str(out)]) == 130
    captured = capsys.readouterr()
    assert "error: interrupted (Ctrl-C): 2 of" in captured.err and captured.err.rstrip().endswith("nothing written")
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("argv, message", [
    (["--quick", "--out", "/etc/passwd"], "error: --out: /etc/passwd is not a directory"),
    (["--quick", "--ray", "foo"], "error: --ray: must be 'local', 'auto' or [ray://]HOST:PORT, got 'foo'"),
    (["--suite", "tiny", "--limit", "-1"], "error: --limit: must be an integer >= 0 (instances; 0 means all), got -1"),
    (["--quick", "--threads", "0"], "error: --threads: must be an integer in [1, 256], got 0"),
    (["--quick", "--objective", "foo"], "error: --objective: unknown objective 'foo'"),
    (["--quick", "--exact-max-samples", "-3"], "error: --exact-max-samples: must be an integer >= 0, got -3"),
])
def test_bench_prod_refuses_bad_arguments_before_any_run(capsys, argv, message):
    """scripts/bench_prod.py read these only in its runs: a traceback after every run for
    an --out that is a file, one for a bad --ray, a silently shorter suite for --limit -1,
    a warning per run and exit 1 for --threads 0 or an unknown objective. Now one line
    naming the flag, exit 2, before anything runs."""
    assert load_script("bench_prod").main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_ctrl_c_in_the_progress_callback_keeps_the_finished_run():
    """A Ctrl-C while the progress line of a finished run was printed replaced that run's
    record with an interrupted one (a review's case): the record stays, and the next run
    is the one cut short."""
    tasks = [Task(spec, "baseline", time_limit=1.0) for spec in suite("tiny")]

    def progress(record):
        raise KeyboardInterrupt

    records = run_tasks(tasks, on_record=progress)
    assert [r["status"] for r in records] == ["feasible", "interrupted"] and records[0]["valid"]
    assert records[1]["instance"] == tasks[1].spec.name
