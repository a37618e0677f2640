"""One CP-SAT search split into subtrees ("cubes") that processes solve side by side.

Why: with two rows the proofs of packing windows come from CP-SAT's ``fixed`` worker (the
model's own search order); a second full worker beside it, on the second core, shortens
them little or not at all (N = 32, G = 2, ``shard`` window of scripts/bench_exact.py,
seed 4, from the optimum: 73.8 s with ``fixed`` and ``default_lp``, 74.4 s with ``fixed``
alone on one thread). Cube and conquer splits the tree instead: a cube fixes the first
decisions of the search order (here: the blocks of the longest samples), and each process
runs the fixed search on a cube of its own, on one core.

How: the whole model is first searched in this process for ``slice_seconds`` (none when it
is 0); most small windows end there, and nothing else starts. Otherwise ``processes``
processes search cubes: a cube is searched for ``slice_seconds`` while fewer than
``target`` cubes are open (queued or running), and one that does not end is split on the
next decision group (one child per literal of the group: one of them is true in every
solution, so the children cover the cube); after that every cube gets the time left.
Every cube starts with "objective <= the best found so far" (the incumbent of the cubes
that ended before it). The search ends when every cube has ended (optimal or
infeasible): the best solution is then optimal; at the time limit or a Ctrl-C the bound
is the least of the best value and the bounds of the cubes still open.

A search that ends returns the optimal value whatever the timing; which cube a tie goes to
is decided by the decision path (the first in split order wins), but the incumbent a cube
starts with depends on which cubes ended before it, so among layouts of equal value the
one returned may differ between runs (as with CP-SAT's own parallel workers).
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import queue as queue_mod
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from ._cpsat import interrupted, solve as cpsat_solve

log = logging.getLogger("rp_opt")

# seconds a cube is searched before it is split (while fewer than ``target`` are open)
SLICE_SECONDS = 0.5
# open cubes (queued or running) below which a cube that does not end in its slice is split
TARGET_CUBES = 6

# how a worker process starts (:func:`_serve` answers on its stdin and stdout)
WORKER_COMMAND = [sys.executable, "-m", "rp_opt._cubes"]

# seconds the processes get, after a Ctrl-C, to answer with what they found
GRACE_SECONDS = 5.0

_DONE = ("OPTIMAL", "INFEASIBLE")


@dataclass
class CubeSearch:
    """What a cube search found.

    ``status``: a CP-SAT status (OPTIMAL: every cube ended; FEASIBLE: a solution, some cube
    open; INFEASIBLE: every cube ended without one; UNKNOWN). ``value``: the best objective
    (integer) or None; ``bound``: a lower bound of the objective over the whole model;
    ``values``: the values of the ``want`` variables at the best solution. ``stats``:
    ``cubes`` (searches run, the first included), ``split`` (cubes split), ``sliced_seconds``
    (search time of the cubes that were split: spent again by their children),
    ``branches``, ``processes``, ``seconds``; ``interrupted`` after a Ctrl-C."""

    status: int
    value: int | None
    bound: float
    values: list | None
    stats: dict = field(default_factory=dict)


def _search(model: cp_model.CpModel, limit: float, seed: int, want: list) -> dict:
    """The model's own search order (``fixed``) on one thread for ``limit`` seconds; a
    Ctrl-C stops it and its answer comes back marked."""
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.num_workers = 1
    p.search_branching = cp_model.FIXED_SEARCH
    p.max_time_in_seconds = max(limit, 0.01)
    p.random_seed = seed
    status = cpsat_solve(solver, model, on_interrupt="return")
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    return {"status": solver.status_name(status), "value": round(solver.objective_value) if found else None,
            "bound": solver.best_objective_bound, "branches": solver.num_branches,
            "values": [solver.value(model.get_int_var_from_proto_index(i)) for i in want] if found else None,
            "interrupted": interrupted(solver)}


def _solve_cube(text: str, fixed: list, limit: float, seed: int, cutoff: int | None, want: list) -> dict:
    """Worker: the model (text format) with the literals ``fixed`` true and
    objective <= ``cutoff``, searched for ``limit`` seconds on one thread."""
    t0 = time.perf_counter()
    model = cp_model.CpModel()
    model.proto.parse_text_format(text)
    for index in fixed:
        model.add(model.get_bool_var_from_proto_index(index) == 1)
    if cutoff is not None:
        # objective value = scaling (sum_v c_v v + offset) <= cutoff
        objective = model.proto.objective
        scaling = objective.scaling_factor or 1.0
        model.add(sum(int(c) * model.get_int_var_from_proto_index(v) for v, c in zip(objective.vars, objective.coeffs))
                  <= math.floor(cutoff / scaling - objective.offset + 1e-9))
    out = _search(model, limit, seed, want)
    out["seconds"] = time.perf_counter() - t0
    return out


def solve_cubes(model: cp_model.CpModel, groups: list, want: list, *, processes: int, time_limit: float,
                seed: int = 0, slice_seconds: float | None = None, target: int | None = None,
                progress=None) -> CubeSearch:
    """Minimise ``model``'s objective by cube and conquer (see the module docstring).

    Parameters
    ----------
    model
        A CP-SAT model with an integer objective to minimise; its hints and decision
        strategies travel with it.
    groups
        The decision groups in search order: lists of Boolean variable indices of which
        exactly one is true in every solution (e.g. the blocks a sample may take).
    want
        Variable indices whose values come back with the best solution.
    processes
        Cubes searched at once, one thread each.
    time_limit, seed
        Seconds in all (from this call), and CP-SAT's random seed.
    progress
        None, or called after every answer with the best value so far (or None), the
        search's bound so far, the searches run (``stats["cubes"]``) and the cubes open.
    """
    t0 = time.perf_counter()
    slice_seconds = SLICE_SECONDS if slice_seconds is None else slice_seconds
    target = TARGET_CUBES if target is None else target
    deadline = t0 + float(time_limit)
    stats = {"processes": int(processes), "cubes": int(slice_seconds > 0), "split": 0, "sliced_seconds": 0.0,
             "branches": 0}
    if slice_seconds > 0:
        first = _search(model, min(slice_seconds, time_limit), seed, want)
    else:  # split before any search (the tests run small models through the processes so)
        first = {"status": "UNKNOWN", "value": None, "bound": float("-inf"), "branches": 0, "values": None,
                 "interrupted": False}
    stats["branches"] += first["branches"]

    def first_only():
        """The first search as the answer."""
        if first["interrupted"]:
            stats["interrupted"] = True
        stats["seconds"] = time.perf_counter() - t0
        return CubeSearch(getattr(cp_model, first["status"]), first["value"], first["bound"], first["values"], stats)

    left = deadline - time.perf_counter()
    if first["status"] in _DONE or first["interrupted"] or left <= 0.05 or not groups:
        return first_only()
    stats["sliced_seconds"] += time.perf_counter() - t0

    text = str(model.proto)
    # best: (value, decision path) -> values; the path breaks ties
    best = (first["value"], ()) if first["value"] is not None else None
    best_values = first["values"]
    open_bounds = {}  # path -> a bound of its cube (its parent's) while not ended
    results: queue_mod.Queue = queue_mod.Queue()
    pending = []  # decision paths (tuples of chosen literal indices), split order
    running = set()
    try:
        workers = _Workers(processes, results)
    except OSError as exc:  # no processes: the first search is the answer
        log.warning("cube search: no worker process started (%s); the first search's result stands", exc)
        return first_only()
    except KeyboardInterrupt:  # the processes started so far end when their stdin closes
        first["interrupted"] = True
        return first_only()

    def split(path, bound):
        """Queue the children of the cube at ``path`` (one per literal of its next group)."""
        stats["split"] += 1
        for lit in groups[len(path)]:
            child = path + (lit,)
            pending.append(child)
            open_bounds[child] = bound

    def take(path, sliced, r):
        """Account for the answer ``r`` of the cube at ``path``."""
        nonlocal best, best_values
        running.discard(path)
        if r is None:
            # its process ended without an answer: the cube stays open (its bound counts)
            stats["lost"] = stats.get("lost", 0) + 1
            return
        stats["branches"] += r["branches"]
        if r["value"] is not None and (best is None or (r["value"], path) < best):
            best, best_values = (r["value"], path), r["values"]
        if r["status"] in _DONE:
            del open_bounds[path]
        elif sliced and not stats.get("interrupted") and time.perf_counter() < deadline:
            stats["sliced_seconds"] += r["seconds"]
            del open_bounds[path]
            split(path, r["bound"])
        else:
            open_bounds[path] = max(open_bounds[path], r["bound"])

    def take_next():
        """Account for the next answer, if one comes within 0.1 s."""
        try:
            (path, sliced), r = results.get(timeout=0.1)
        except queue_mod.Empty:
            return
        take(path, sliced, r)
        if progress is not None:
            value = best[0] if best else None
            bound = min([*open_bounds.values(), *([value] if value is not None else [])], default=float("inf"))
            progress(value, bound, stats["cubes"], len(open_bounds))

    split((), first["bound"])
    try:
        while pending or running:
            now = time.perf_counter()
            while pending and workers.free and now < deadline:
                path = pending.pop(0)
                left = deadline - now
                sliced = len(pending) + len(running) + 1 < target and len(path) < len(groups)
                limit = min(slice_seconds, left) if sliced else left
                cutoff = best[0] if best else None
                workers.send((path, sliced), (text, list(path), limit, seed, cutoff, want))
                running.add(path)
                stats["cubes"] += 1
            if not running:
                break  # the deadline passed (or every process ended) with cubes queued: they stay open
            take_next()
    except KeyboardInterrupt:
        # Ctrl-C: every process stops its search and answers with what it found
        stats["interrupted"] = True
        workers.interrupt()
        end = time.perf_counter() + GRACE_SECONDS
        try:
            while running and time.perf_counter() < end:
                take_next()
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: what came back is the answer
    finally:
        workers.close()
    value = best[0] if best else None
    bounds = list(open_bounds.values()) + ([value] if value is not None else [])
    bound = min(bounds) if bounds else float("inf")
    if not open_bounds:
        status = cp_model.OPTIMAL if value is not None else cp_model.INFEASIBLE
    else:
        status = cp_model.FEASIBLE if value is not None else cp_model.UNKNOWN
    stats["seconds"] = time.perf_counter() - t0
    log.debug("cube search: %s cubes, %s split, %.1f s", stats["cubes"], stats["split"], stats["seconds"])
    return CubeSearch(status, value, bound, best_values, stats)


class _Workers:
    """Processes that search cubes (``python -m rp_opt._cubes``), one request at a time
    each, over their stdin and stdout. Not multiprocessing: its spawned processes import
    the caller's main module again, which a script without ``if __name__ == "__main__"``
    does not survive. The processes run in a session of their own (a Ctrl-C at the
    terminal reaches this process only, which stops them)."""

    def __init__(self, count: int, results: queue_mod.Queue):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.results = results
        self.procs = [subprocess.Popen(WORKER_COMMAND, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                       start_new_session=True) for _ in range(count)]
        self.free = list(range(count))
        self.tags: dict = {}
        for k in range(count):
            threading.Thread(target=self._read, args=(k,), daemon=True).start()

    def send(self, tag, request) -> None:
        k = self.free.pop(0)
        self.tags[k] = tag
        try:
            _write(self.procs[k].stdin, request)
        except OSError:
            self.results.put((tag, None))  # the process has ended; its thread said so

    def _read(self, k: int) -> None:
        while True:
            try:
                answer = _read(self.procs[k].stdout)
            except (OSError, EOFError, pickle.UnpicklingError):
                answer = None
            tag = self.tags.pop(k, None)
            if answer is None:
                if tag is not None:
                    self.results.put((tag, None))
                return
            self.free.append(k)
            self.results.put((tag, answer))

    def interrupt(self) -> None:
        """A Ctrl-C for every process: its search stops (rp_opt._cpsat.solve) and it
        answers with the best it found."""
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGINT)
                except OSError:
                    pass

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass


def _write(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(8, "little") + data)
    stream.flush()


def _read(stream):
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError
    size = int.from_bytes(header, "little")
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def _serve() -> None:
    """A worker process: answer requests of :class:`_Workers` until stdin closes."""
    channel_in = os.fdopen(os.dup(0), "rb")
    channel_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the answers
    while True:
        try:
            request = _read(channel_in)
            _write(channel_out, _solve_cube(*request))
        except (EOFError, KeyboardInterrupt):
            return  # stdin closed, or a Ctrl-C between searches


if __name__ == "__main__":
    _serve()
