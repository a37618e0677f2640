"""Benchmarks: instance suites with fixed seeds, a parallel runner (process pool or Ray),
statistics (mean +- std, moving-block bootstrap) and plots.

Public API::

    suite(name) -> list[InstanceSpec]            suite_names()
    InstanceSpec(...).build() -> Instance         Task(spec, solver, ...)
    run_tasks(tasks, workers=, ray_address=, on_record=) -> list[dict]
    best_bounds(records) -> dict, gap_table(records) -> rows

The scripts in ``scripts/bench_*.py`` and ``scripts/question_*.py`` and the ``rp-opt
bench`` command are thin layers over this package (docs/benchmarks.md).
"""

from .suites import InstanceSpec, suite, suite_names
from .runner import Task, run_task, run_tasks
from .stats import block_bootstrap_ci, mean_std, pm

__all__ = ["InstanceSpec", "suite", "suite_names", "Task", "run_task", "run_tasks", "block_bootstrap_ci",
           "mean_std", "pm"]
