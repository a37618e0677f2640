"""Run benchmark tasks (instance spec x solver x options) on a process pool or on Ray.

Every task rebuilds its instance from the spec, runs the solver, and sends the returned
plan through the independent checker :func:`rp_opt.check.check` before anything is
recorded: ``valid`` is the checker's verdict and ``check_agrees`` says whether its
recomputed score equals the solver's. A record is a flat dict (JSON-ready).

Parallelism: ``workers <= 1`` runs in this process (deterministic order, easy to debug);
otherwise a ``concurrent.futures.ProcessPoolExecutor``; with ``ray_address`` the tasks go
to a Ray cluster (``pip install rp-opt[ray]``; ``"local"`` starts a local Ray with
``workers`` CPUs, any other value is passed to ``ray.init(address=...)``).

A run whose worker gives no record (a pool process or Ray worker that died: killed for
memory, a segfault; a task that could not be sent or unpacked) becomes an error record of
that run (:func:`error_record`), as a crashing solver does; the other runs go on. On Ray
that is per run. A process that dies breaks a ``ProcessPoolExecutor`` as a whole, so the
runs it left unfinished (the dead one among them, unknown) run again, each in a process of
its own (``workers`` at a time): only the run that kills its own process again ends as an
error record (``BrokenProcessPool: ...``). Ray does not retry a run whose worker died
(``max_retries=0``): the pool's second try is only there to find out which run it was.
"""

from __future__ import annotations

import logging
import re
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Callable

from ..errors import InputError, require
from .suites import InstanceSpec

log = logging.getLogger("rp_opt")

# solvers that take a fixed placement (the others choose their own)
PLACEMENT_SOLVERS = {"exact", "heuristic"}
# solvers whose bound (and proof of optimality) holds only for the placement they plan with:
# ``exact`` packs for a fixed placement, ``auto`` keeps the better of exact's bound for the
# heuristic's placement and the heuristic's placement-free one. Every other solver reports
# a bound valid for every placement (the analytic bounds of MODEL.md, the heuristic's
# strengthened ones, the joint model's).
FIXED_PLACEMENT_BOUND = {"exact", "auto"}
# option name of each solver's thread count
THREAD_OPTION = {"exact": "workers", "heuristic": "workers", "joint": "workers"}
PLACEMENTS = ("identity", "lpt", "reference")


@dataclass(frozen=True)
class Task:
    """One solver run.

    Attributes
    ----------
    spec
        The instance recipe.
    solver
        Registered solver name.
    objective, time_limit, seed
        Passed to the solver.
    placement
        For solvers that take one (``exact``, ``heuristic``): ``identity``, ``lpt``, or
        ``reference`` (LPT + swap local search, the heuristic's default), so that several
        solvers solve the same packing problem; None lets the solver choose.
    threads
        Threads the solver may use (CP-SAT workers, annealing processes).
    options
        Extra solver options.
    score_under
        Further objectives to score the returned plan under (recorded as
        ``score_<name>``, by the checker).
    label
        Name of the run in tables (default: the solver name).
    keep_plan
        Keep the :class:`~rp_opt.result.Plan` in the record (key ``_plan``).
    """

    spec: InstanceSpec
    solver: str
    objective: str = "sync"
    time_limit: float = 10.0
    seed: int = 0
    placement: str | None = "reference"
    threads: int = 1
    options: dict = field(default_factory=dict, hash=False, compare=False)
    score_under: tuple[str, ...] = ()
    label: str | None = None
    keep_plan: bool = False


def reference_placement(instance, kind: str):
    """The placement named ``kind`` for ``instance`` (see :class:`Task`)."""
    from ..solution import Placement

    window, cluster = instance.window, instance.cluster
    if kind == "identity":
        return Placement.identity(window.num_layers, window.num_experts, cluster.ep)
    if kind == "lpt":
        from ..placement import lpt_placement
        return lpt_placement(window, cluster.ep)
    if kind == "reference":
        from ..placement import local_search_placement
        return local_search_placement(window, cluster.ep)
    raise InputError("placement", f"must be one of {PLACEMENTS}, got {kind!r}")


def _record_head(task: Task) -> dict:
    """The fields of a record that name its task (instance, cluster, solver, options)."""
    spec = task.spec
    return {"instance": spec.name, "config": spec.config, "seed": spec.seed, "model": spec.model,
            "N": spec.samples, "D": spec.dp, "G": spec.edp, "P": spec.ep, "solver": task.label or task.solver,
            "objective": task.objective, "time_limit": task.time_limit}


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours the process title of its task errors
_LONGEST_REASON = 200  # characters of an exception's text kept in an error record


def error_record(task: Task, exc: BaseException) -> dict:
    """The record of ``task`` when its worker gave none: ``status='error'``, ``valid=False``
    and ``error``, one line naming the exception.

    Parameters
    ----------
    task
        The run whose record is missing.
    exc
        What fetching its record raised: ``BrokenProcessPool`` (a pool process died),
        Ray's ``WorkerCrashedError``, ``OutOfMemoryError``, ``NodeDiedError`` and the like,
        or a ``RayTaskError`` (the task failed in the worker before :func:`run_task` could
        record it, e.g. unpacking its arguments).

    Returns
    -------
    dict
        The task's head fields (instance, solver, ...) and ``error`` as
        ``<type>: <first line of its message>``; for a ``RayTaskError`` the message is its
        cause's (its own text starts with the worker's process title and holds a traceback).
    """
    cause = getattr(exc, "cause", None)
    text = _ANSI.sub("", str(cause if isinstance(cause, BaseException) else exc))
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    reason = lines[0] if lines else ""
    if len(reason) > _LONGEST_REASON:
        reason = reason[:_LONGEST_REASON - 3] + "..."
    # the whole text (a worker's traceback) only in the debug log: a record's error is one line
    log.debug("bench: %s %s: no record from its worker: %s", task.spec.name, task.label or task.solver,
              _ANSI.sub("", str(exc)))
    return {**_record_head(task), "status": "error", "valid": False,
            "error": f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__}


def interrupted_record(task: Task) -> dict:
    """The record of ``task`` when a Ctrl-C ended it before its solver returned a plan:
    ``status='interrupted'``, ``interrupted``, ``valid=False``, no score."""
    return {**_record_head(task), "status": "interrupted", "interrupted": True, "valid": False,
            "error": "interrupted (Ctrl-C) before the solver returned"}


def _import_for(solver: str) -> None:
    """Import what ``solver`` imports on its first call (once per process), before its
    clock starts: the first run of a process paid it in its ``seconds`` (baseline 0.41 s
    against 0.03 s, most of it OR-Tools for R*), a cost of the process, not of the run."""
    import importlib

    importlib.import_module("rp_opt.rows")   # R*: OR-Tools' CP-SAT, every planner

    if solver in ("exact", "auto", "joint"):
        from .._highs import import_pyomo

        import_pyomo()   # the partial relaxation and the HiGHS backend


def run_task(task: Task) -> dict:
    """Run one task and return its record (never raises: failures become ``status='error'``)."""
    from ..check import check
    from ..solvers import get_solver

    spec = task.spec
    record = _record_head(task)
    try:
        t0 = time.perf_counter()
        instance = spec.build()
        record["L"], record["E"] = instance.window.num_layers, instance.window.num_experts
        record["build_seconds"] = time.perf_counter() - t0
        options = dict(task.options)
        if task.solver in THREAD_OPTION:
            options.setdefault(THREAD_OPTION[task.solver], task.threads)
        if task.solver in PLACEMENT_SOLVERS and task.placement is not None and "placement" not in options:
            options["placement"] = reference_placement(instance, task.placement)
            record["placement"] = task.placement
        solve = get_solver(task.solver)
        _import_for(task.solver)
        result = solve(instance, objective=task.objective, time_limit=task.time_limit, seed=task.seed, **options)
    except InputError as exc:
        record.update(status="error", error=str(exc), valid=False)
        return record
    except Exception as exc:  # a crashing solver is a result of the benchmark, not the end of it
        record.update(status="error", error=f"{type(exc).__name__}: {exc}", valid=False,
                      traceback=traceback.format_exc(limit=4))
        return record
    stats = result.stats or {}
    levels = stats.get("levels") or []
    record.update(
        status=result.status, seconds=result.seconds, interrupted=bool(stats.get("interrupted")),
        bound=result.bound, gap=result.gap,
        score=result.score[0] if result.score else None, score_levels=[float(x) for x in result.score],
        num_rows=result.plan.num_rows if result.plan else None,
        # proven by the solver's search (exact's first level), its status, or its own bound
        # meeting the primary (stats["primary_proven"]: the heuristic and the baselines)
        primary_proven=bool(levels and str(levels[0].get("status", "")).upper() == "OPTIMAL")
        or result.status == "optimal" or bool(stats.get("primary_proven")),
        stats_placement=stats.get("placement"),
        # the problem the bound (and a proof) is for: R rows, and None (every placement), the
        # task's placement name, or "own" (a placement the solver chose: this run only)
        bound_rows=result.plan.num_rows if result.plan else stats.get("num_rows"),
        bound_placement=(record.get("placement") or "own") if task.solver in FIXED_PLACEMENT_BOUND else None,
    )
    if result.plan is None:
        # no plan: why (infeasible window, R* not proven, nothing found in time)
        record.update(valid=False, reason=stats.get("reason"))
        return record
    report = check(instance, result.plan)
    if task.keep_plan:
        record["_plan"] = result.plan  # for pictures; strip_private() removes it before JSON
    record["valid"] = bool(report.valid)
    record["violations"] = list(report.violations[:3])
    record["check_agrees"] = bool(report.score is not None and abs(report.score[0] - result.score[0])
                                  <= 1e-6 * max(1.0, abs(result.score[0])))
    for name in task.score_under:
        other = check(instance, result.plan, objective=name)
        record[f"score_{name}"] = other.score[0] if other.score else None
    return record


def check_ray_address(address: str) -> str:
    """Check a Ray address before anything runs: ``local``, ``auto``, or ``[ray://]HOST:PORT``.

    Returns
    -------
    The address; :class:`InputError` on ``--ray`` naming it otherwise.
    """
    import re

    ok = isinstance(address, str) and (address in ("local", "auto") or re.fullmatch(
        r"(ray://)?[A-Za-z0-9_.\-\[\]:]*[A-Za-z0-9_.\-\]]:([0-9]{1,5})", address) is not None)
    require(ok and (address in ("local", "auto") or 0 < int(address.rsplit(":", 1)[1]) < 65536), "--ray",
            f"must be 'local', 'auto' or [ray://]HOST:PORT, got {address!r}")
    return address


def probe_ray_address(address: str, seconds: float = 5.0) -> None:
    """For a ``[ray://]HOST:PORT`` address: open a TCP connection to it within ``seconds``,
    else an :class:`InputError` on ``--ray``. ``ray.init`` keeps retrying an address where
    nothing listens for about a minute, printing its C++ log; a run must fail fast instead."""
    import socket

    if address in ("local", "auto"):
        return
    host, port = address.removeprefix("ray://").rsplit(":", 1)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except OSError as exc:
        reason = " ".join(str(exc).split())[:120] or type(exc).__name__
        raise InputError("--ray", f"cannot reach Ray at {address!r} within {seconds:g} s ({reason})") from None


def _filing(num_tasks: int, on_record) -> tuple[list, Callable[[int, dict], None]]:
    """The records' list (one slot per task, in task order) and ``arrived(k, record)``,
    which files task k's record and announces it to ``on_record`` (when given)."""
    out: list[dict | None] = [None] * num_tasks

    def arrived(k: int, record: dict) -> None:
        out[k] = record
        if on_record:
            on_record(record)

    return out, arrived


def _ray_run(tasks: list[Task], address: str, workers: int, on_record) -> list[dict]:
    """:func:`run_tasks` on Ray: one remote call per task, records in task order (a run
    whose worker died: :func:`error_record`)."""
    check_ray_address(address)
    try:
        import ray
    except ImportError:
        raise InputError("ray", "Ray is not installed; install the extra: pip install 'rp-opt[ray]'") from None
    if not ray.is_initialized():
        try:
            if address == "local":
                ray.init(num_cpus=max(1, workers), include_dashboard=False, log_to_driver=False)
            else:
                probe_ray_address(address)
                ray.init(address=address, log_to_driver=False)
        except (ValueError, ConnectionError, RuntimeError, TimeoutError) as exc:
            reason = " ".join(str(exc).split())[:200]
            raise InputError("--ray", f"cannot start or reach Ray at {address!r} "
                                      f"({type(exc).__name__}: {reason})") from None
    out, arrived = _filing(len(tasks), on_record)

    refs = {}
    for k, task in enumerate(tasks):
        # no retry of a run whose worker died: the death (killed for memory, a segfault) is
        # the run's result, recorded at once as with the process pool; a retry would spend
        # the time limit again, as often as Ray retries, to die the same way
        remote = ray.remote(num_cpus=max(1, task.threads), max_retries=0)(run_task)
        try:
            refs[remote.remote(task)] = k
        except Exception as exc:  # a task that cannot be sent (pickled): its run fails, not the bench
            arrived(k, error_record(task, exc))
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            k = refs[ref]
            try:
                record = ray.get(ref)
            except Exception as exc:  # the worker died (WorkerCrashedError, OutOfMemoryError, ...)
                record = error_record(tasks[k], exc)
            arrived(k, record)
    return out


def run_tasks(tasks: list[Task], *, workers: int = 1, ray_address: str | None = None,
              on_record: Callable[[dict], None] | None = None) -> list[dict]:
    """Run ``tasks`` and return their records in task order.

    Parameters
    ----------
    tasks
        The runs.
    workers
        Local processes (1: run here, in order).
    ray_address
        Run on Ray instead (``"local"`` or a cluster address).
    on_record
        Called with every record as it arrives (a progress bar).

    Returns
    -------
    list of dict
        One record per task; a run whose worker died (or that could not be sent to one) is
        an error record (:func:`error_record`) instead of an exception that loses them all.
        Run here (``workers`` 1), a Ctrl-C stops the run in progress (the solver returns its
        best, ``interrupted``; or, outside a solver's own handling, its
        :func:`interrupted_record`) and no further run starts: the records of the runs done.
        With processes or Ray, a Ctrl-C raises KeyboardInterrupt.
    """
    tasks = list(tasks)
    if ray_address:
        return _ray_run(tasks, ray_address, workers, on_record)
    out, arrived = _filing(len(tasks), on_record)
    if workers <= 1 or len(tasks) <= 1:
        for k, task in enumerate(tasks):
            try:
                record = run_task(task)
            except KeyboardInterrupt:
                # a Ctrl-C outside a solver's own handling (building the window, a baseline
                # rule, the checker): the runs done, and this one as cut short
                record = interrupted_record(task)
            try:
                arrived(k, record)
            except KeyboardInterrupt:
                # in the progress callback: this run's record is filed, finished; the next
                # run is the one cut short (none: the suite is done)
                out[k] = record
                if k + 1 < len(tasks):
                    out[k + 1] = interrupted_record(tasks[k + 1])
                    return out[:k + 2]
                return out
            if out[k].get("interrupted"):
                return out[:k + 1]
        return out

    broken = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {}
        for k, task in enumerate(tasks):
            try:
                futures[pool.submit(run_task, task)] = k
            except BrokenProcessPool:   # a process died before all were submitted: the rest run alone
                broken.extend(range(k, len(tasks)))
                break
        for future in as_completed(futures):
            k = futures[future]
            try:
                arrived(k, future.result())
            except BrokenProcessPool:
                broken.append(k)        # this run or another killed a process: run it again alone
            except Exception as exc:    # a task that cannot be sent (pickled)
                arrived(k, error_record(tasks[k], exc))
    if broken:
        log.warning("bench: a pool process died; %d unfinished runs run again, each in a process of its own",
                    len(broken))
        with ThreadPoolExecutor(max_workers=workers) as threads:
            for k, record in zip(sorted(broken), threads.map(_alone, [tasks[k] for k in sorted(broken)])):
                arrived(k, record)
    return out


def _alone(task: Task) -> dict:
    """:func:`run_task` in a process of its own: if it dies, only this run's record is an
    error (a dead process breaks every run of its pool)."""
    with ProcessPoolExecutor(max_workers=1) as pool:
        try:
            return pool.submit(run_task, task).result()
        except Exception as exc:  # this run's own process died
            return error_record(task, exc)


def strip_private(records: list[dict]) -> list[dict]:
    """Records without their ``_``-prefixed entries (plans kept for pictures)."""
    return [{k: v for k, v in rec.items() if not k.startswith("_")} for rec in records]
