"""The gap benchmark shared by ``scripts/bench_gap.py`` and ``rp-opt bench``: run a suite
with several solvers on the same reference placement, then tabulate optimum / best bound,
gaps and seconds."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import datetime, timezone

from ..errors import MAX_SEED, MAX_WORKERS, InputError, integer, number, require
from .report import image_path, add_gaps, per_instance_rows, per_solver_rows, print_tables, write_outputs
from .runner import Task, run_tasks
from .suites import require_unique, suite

DEFAULT_SOLVERS = ("baseline", "kk", "lpt-ffd", "heuristic", "exact")


def machine() -> str:
    """One line naming the machine (for the reports)."""
    return f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def read_seeds(text: str | None, field: str = "--seeds") -> list[int] | None:
    """The comma-separated seeds of ``text`` (None or empty: None, the suite's own).

    Each an integer in [0, MAX_SEED] (CP-SAT and HiGHS take 32-bit seeds), at least one,
    none twice; otherwise a one-line :class:`~rp_opt.errors.InputError` on ``field``.
    """
    if not text:
        return None
    seeds = [integer(field, s, 0, MAX_SEED, text=True, hint="each of the comma-separated seeds")
             for s in text.split(",") if s.strip()]
    require(len(seeds) > 0, field, f"names no seed, got {text!r}")
    require_unique(field, seeds)
    return seeds


def add_arguments(parser: argparse.ArgumentParser, default_suite: str = "small") -> None:
    parser.add_argument("--suite", default=default_suite, help="tiny, small, medium or production")
    parser.add_argument("--solvers", default=",".join(DEFAULT_SOLVERS), help="comma-separated solver names")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default: the suite's)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per solver run")
    parser.add_argument("--objective", default="sync")
    parser.add_argument("--workers", type=int, default=1, help="local processes")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads per solver run (CP-SAT workers, annealing processes), in [1, 256]")
    parser.add_argument("--ray", metavar="ADDRESS", default=None, help="run on Ray ('local' or a cluster address)")
    parser.add_argument("--limit", type=int, default=None,
                        help="only the first LIMIT instances of the suite (>= 0; 0 means all, the default)")


def check_run_args(args) -> list:
    """The suite's instance specs of ``args`` (``--suite``, ``--seeds``, ``--limit``), after
    checking the arguments every benchmark script shares; a bad one is a one-line
    :class:`~rp_opt.errors.InputError` naming its flag, before anything runs (a run that
    found it would fail every run alike, exit 1, and name the solver's option instead).

    ``--time-limit`` (seconds > 0), ``--workers`` (>= 1), ``--threads`` (in [1, 256]: what
    every solver takes) and ``--limit`` (>= 0 or None; 0 and None mean the whole suite) are
    stored back in ``args`` as float and ints (a script's parser gives them unchecked);
    ``--objective`` must be registered and ``--ray`` (when given) an address."""
    from ..objectives import get_objective
    from .runner import check_ray_address

    args.time_limit = number("--time-limit", args.time_limit, above=0, hint="seconds")
    args.workers = integer("--workers", args.workers, low=1)
    args.threads = integer("--threads", args.threads, low=1, high=MAX_WORKERS)
    if args.limit is not None:
        args.limit = integer("--limit", args.limit, low=0, hint="instances; 0 means all")
    try:
        get_objective(args.objective)
    except InputError as exc:
        raise InputError("--objective", exc.message) from None
    if args.ray is not None:
        check_ray_address(args.ray)
    specs = suite(args.suite, read_seeds(args.seeds))
    return specs[: args.limit] if args.limit else specs


def tasks_from_args(args) -> list[Task]:
    """The tasks of ``args`` (suite x solvers), after checking every argument.

    The shared arguments are checked by :func:`check_run_args`.

    A seed or solver named twice is refused (``--seeds: 3 given twice``): it would run the
    same runs twice, count them twice in the per-solver statistics, and the per-instance
    table would show one of them.

    Raises
    ------
    InputError
        One line naming the first bad argument and its value.
    """
    specs = check_run_args(args)
    solvers = [s.strip() for s in args.solvers.split(",") if s.strip()]
    require(solvers, "--solvers", "names no solver")
    require_unique("--solvers", solvers)
    from ..solvers import get_solver

    for name in solvers:
        get_solver(name)  # unknown names fail here, with the list of known ones
    return [Task(spec, name, objective=args.objective, time_limit=args.time_limit, threads=args.threads)
            for spec in specs for name in solvers]


def run_gap(args, on_record=None) -> dict:
    """Run the tasks of ``args`` and return {records, instances, tables, meta}."""
    tasks = tasks_from_args(args)
    start = time.perf_counter()
    records = run_tasks(tasks, workers=args.workers, ray_address=args.ray, on_record=on_record)
    wall = time.perf_counter() - start
    instances = add_gaps(records)
    tables = {
        f"Per instance ({args.suite}): gap % to the best bound valid for each plan (its rows; its placement "
        f"when fixed) (seconds); [R=n]: a plan with other rows than the instance's R": per_instance_rows(records),
        f"Per solver ({args.suite}): mean ± std over instances": per_solver_rows(records),
        f"Per configuration ({args.suite}): mean ± std over seeds": per_solver_rows(records, by_config=True),
    }
    meta = {"suite": args.suite, "solvers": args.solvers, "time_limit": args.time_limit, "workers": args.workers,
            "threads": args.threads, "objective": args.objective, "ray": args.ray, "wall_seconds": wall,
            # a Ctrl-C: the records of the runs done (the last one cut short)
            "interrupted": any(rec.get("interrupted") for rec in records), "runs": len(records),
            "runs_planned": len(tasks),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "command": " ".join(sys.argv)}
    return {"records": records, "instances": instances, "tables": tables, "meta": meta}


def gap_plot(records: list[dict], path: str) -> str | None:
    """Box plot of the gap to the best bound per solver (None when matplotlib is missing)."""
    from .plots import gap_distribution

    return gap_distribution(records, path)


def emit(result: dict, args, name: str) -> None:
    """Print tables (or JSON), write --out files."""
    from ..commands._common import emit_json

    meta = result["meta"]
    if getattr(args, "out", None):
        preamble = (f"Measured {meta['date']} on {meta['machine']}; wall {meta['wall_seconds']:.0f} s; "
                    f"time limit {meta['time_limit']} s per run, {meta['workers']} worker(s), "
                    f"{meta['threads']} thread(s) per run.")
        write_outputs(args.out, name, result["tables"], {"meta": meta, "records": result["records"],
                                                         "instances": result["instances"]}, preamble)
        gap_plot(result["records"], image_path(args, name))
    if getattr(args, "json", False):
        emit_json({"meta": meta, "records": result["records"], "instances": result["instances"]})
    else:
        print_tables(result["tables"])
