"""Population annealing over layouts for a fixed placement: the production heuristic.

A population of K replicas (layouts with R*·D non-empty cells) runs Metropolis steps of
moves that keep every constraint -- relocate one sample to another cell (capacity, the
per-cell limit m, the source cell keeps a sample) or swap two samples of different cells
(capacity of both) -- at a temperature that falls geometrically; after every temperature
step the replicas are resampled by their Boltzmann weights exp(-(1/T' - 1/T) E).

Energy
------
E = sum_k eps^k * level_k, the lexicographic objective's levels (``rp_opt.cost``) folded
into one scalar with eps = 1e-6 / (G R). Why this orders plans as the tuple does: for every
registered objective whose first level is ``sync`` or ``shard``, each later level is at
most G R times the primary (sum J <= G * sum_r max_g J <= G R * max J, and max J <= the
primary), so eps^k level_k <= 1e-6 * primary: two plans whose primaries differ by more
than a relative 2e-6 are ordered by the primary, and exact ties of the primary fall to the
next level. Closer primaries may be ordered by the secondary instead; the returned plan is
therefore chosen among candidates by the exact tuple (:func:`rp_opt.cost.score`).

Incremental evaluation
----------------------
A move touches at most two cells c1, c2 and so two (row, shard) pairs p1, p2. The state
of a replica holds the cell token sums T_c and attention sums Q_c, the per-layer rank
loads W[pair, l, p], and A[pair], X[pair]. A proposal computes only
W[p1] -+ dem, its per-layer maxima, X[p1], X[p2] (O(L P) each), and A[p1], A[p2] from the
D/G slots of the two shards (O(S D/G)); the objective is then reduced from the R x G
matrices A, X with the two entries replaced (O(R G), independent of N, L, E). Never a
full rescore per move.

Parallelism and the GPU seam
----------------------------
:func:`metropolis_steps` is the move kernel: batched numpy over a block of replicas times
``candidates`` proposals each (one flat batch; every array op runs over the whole batch).
The same code over cupy/torch arrays would run thousands of replicas on a GPU: THIS
FUNCTION IS THE SEAM (its only host work is the RNG draws, which can move to the device
generator). Across cores, replicas are split in contiguous blocks; the state lives in
``multiprocessing.shared_memory`` arrays, forked workers run the kernel on their blocks,
and the parent resamples the population in place between temperature steps.
Deterministic for a seed and a worker count when stopped by temperature steps
(``temperatures=``) or no-improvement; a time limit cuts the run at a wall-clock point.

Time-limited runs
-----------------
Under a time limit the plan is: placement, R*, the rank-major demand
(:func:`rp_opt.cost.rank_demand_major`), the seeds (the best scoring one is the usual start;
under ``sync``, where the greedy seed sits above the bound mostly by attention, the anchor
seed of :mod:`.anchors` when it scores within 0.1 % of the best), then the block-pair
search (:mod:`.improve`, screened swaps; on two processes by row groups when a core is
free); the anneal runs only to leave a local optimum of the search. Measured
(scripts/bench_heuristic.py, N = 16 to 16384): per second the search lowers the energy
more than the anneal. With ``temperatures=`` (deterministic) the anneal runs first.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import NamedTuple

import numpy as np

from ..cost import (_AXIS, cost_bounds, get_objective, layout_costs, placement_row_excess, rank_demand_major,
                    rank_major_view, uses_row_maxima)
from ..errors import MAX_SEED, InputError, integer, is_none, number, require, switch
# rp_opt.rows (with the row certifier's OR-Tools, HiGHS, SciPy: 0.4-0.7 s to import) loads with
# this module, that is in get_solver("heuristic"), not in the first plan's time limit (at
# N = 2048 and 1 s that import was 0.57 s of the plan's 1.43 s); certified_rows still looks
# certify_rows up when it runs
from ..rows import certify_seconds, row_count_reason
from ..result import EVERY_PLACEMENT, INFEASIBLE, NO_SOLUTION, Plan, Result, relative_gap
from ..solution import Layout, Placement, placement_for
from ..stop import MaxIterations, MaxSeconds, NoImprovement, StoppingCriterion
from ..solvers import register_solver
from ..window import Instance

log = logging.getLogger("rp_opt")
# progress of a run (INFO, ``rp-opt -v``): a logger of its own, as the exact solver's
progress_log = logging.getLogger("rp_opt.progress")

_REDUCERS = {"sum": np.sum, "max": np.max}


# ---------------------------------------------------------------------------------------
# Constant data of one problem (shared by all replicas, inherited by forked workers)
# ---------------------------------------------------------------------------------------

class Term(NamedTuple):
    """One aggregate of the objective as the kernel evaluates it: ``coef`` *
    ``outer``_r/g ``inner`` (``attention`` A + ``expert`` X), ``inner`` reducing over
    ``axis`` of the [R, G] block matrix (1: over shards, 0: over rows); ``coef`` holds the
    level's weight eps**level of the scalar energy."""

    attention: float
    expert: float
    inner: str
    axis: int
    outer: str
    coef: float


@dataclass
class Problem:
    """Window data the kernel needs, in flat arrays; names follow MODEL.md."""

    demand: np.ndarray          # dem[N, P*L] int32 (rank-major): tokens of sample i on rank p of layer l
    lengths: np.ndarray         # T[N] int64
    work: np.ndarray            # Q[N] float64
    alpha: np.ndarray           # [S]
    beta: np.ndarray            # [S]
    layers: np.ndarray          # n_s [S]
    gamma: float
    rows: int                   # R
    slots: int                  # D
    shards: int                 # G
    num_layers: int             # L
    num_ranks: int              # P
    capacity: int               # C
    limit: int | None           # m
    aggregates: list            # [Term], the primary's first aggregate first
    eps: float

    @property
    def per_shard(self) -> int:
        return self.slots // self.shards

    @property
    def num_cells(self) -> int:
        return self.rows * self.slots

    @property
    def num_pairs(self) -> int:
        return self.rows * self.shards

    def __post_init__(self):
        cells = np.arange(self.num_cells)
        # pair = r * G + g of every cell, and the D/G cells of every pair
        self.pair_of_cell = (cells // self.slots) * self.shards + (cells % self.slots) // self.per_shard
        self.cells_of_pair = np.argsort(self.pair_of_cell, kind="stable").reshape(self.num_pairs, self.per_shard)

    def energy(self, attention: np.ndarray, expert: np.ndarray) -> np.ndarray:
        """[B] scalar energy of B plans from A[B, R*G], X[B, R*G]."""
        batch = attention.shape[0]
        a = attention.reshape(batch, self.rows, self.shards)
        x = expert.reshape(batch, self.rows, self.shards)
        total = np.zeros(batch)
        for wa, wx, inner, axis, outer, coef in self.aggregates:
            m = wa * a + wx * x
            total += coef * _REDUCERS[outer](_REDUCERS[inner](m, axis=axis + 1), axis=1)
        return total


def make_problem(instance: Instance, demand_by_rank: np.ndarray, num_rows: int, objective) -> Problem:
    """The kernel's :class:`Problem` for ``instance`` with the given rank demand and R."""
    objective = get_objective(objective)
    window, cluster, cost = instance.window, instance.cluster, instance.cost
    if demand_by_rank.ndim == 2:
        # already rank-major flat [N, P*L] int32 (:func:`rp_opt.cost.rank_demand_major`)
        n, num_layers, num_ranks = demand_by_rank.shape[0], window.num_layers, demand_by_rank.shape[1] // window.num_layers
        flat = np.ascontiguousarray(demand_by_rank, dtype=np.int32)
    else:
        n, num_layers, num_ranks = demand_by_rank.shape
        flat = None
    eps = 1e-6 / (cluster.edp * num_rows)
    aggregates = []
    for k, level in enumerate(objective.levels):
        for coef, agg in level:
            aggregates.append(Term(agg.attention, agg.expert, agg.inner, _AXIS[agg.over], agg.outer, coef * eps ** k))
    require(int(demand_by_rank.max(initial=0)) * n < 2 ** 31, "demand", "rank loads overflow int32")
    if flat is None:
        # rank-major [N, P, L]: the max over p is then an elementwise max of P contiguous rows
        flat = np.ascontiguousarray(demand_by_rank.transpose(0, 2, 1).reshape(n, -1), dtype=np.int32)
    return Problem(flat,
                   window.lengths.astype(np.int64), window.attn_work.astype(np.float64),
                   cost.alpha, cost.beta, cost.layers, float(cost.gamma), int(num_rows), cluster.dp, cluster.edp,
                   num_layers, num_ranks, cluster.capacity, cluster.max_samples_per_cell, aggregates, eps)


# ---------------------------------------------------------------------------------------
# Replica state
# ---------------------------------------------------------------------------------------

_FIELDS = {  # name -> (shape builder, dtype)
    "cell_of": (lambda p, n: (n,), np.int32),
    "count": (lambda p, n: (p.num_cells,), np.int32),
    "tokens": (lambda p, n: (p.num_cells,), np.float64),   # exact integer sums
    "qwork": (lambda p, n: (p.num_cells,), np.float64),
    "loads": (lambda p, n: (p.num_pairs, p.num_layers * p.num_ranks), np.int32),
    "attention": (lambda p, n: (p.num_pairs,), np.float64),
    "expert": (lambda p, n: (p.num_pairs,), np.float64),
    "energy": (lambda p, n: (), np.float64),
}


class State:
    """Arrays of K replicas (optionally in shared memory); field[k] is replica k."""

    def __init__(self, problem: Problem, num_replicas: int, shared: bool = False):
        self.num_replicas = num_replicas
        self._shm = []
        n = problem.lengths.size
        try:
            for name, (shape_of, dtype) in _FIELDS.items():
                shape = (num_replicas,) + shape_of(problem, n)
                if shared:
                    shm = new_segment(int(np.prod(shape)) * np.dtype(dtype).itemsize)
                    self._shm.append(shm)
                    array = np.ndarray(shape, dtype=dtype, buffer=shm.buf)
                    array[...] = 0
                else:
                    array = np.zeros(shape, dtype=dtype)
                setattr(self, name, array)
        except BaseException:  # Ctrl-C or no memory half way: no segment outlives the failure
            self.close()
            raise

    def close(self):
        for name in _FIELDS:
            setattr(self, name, None)
        release(self._shm)

    def permute(self, index: np.ndarray):
        """Replica k becomes the old replica index[k] (resampling), in place."""
        for name in _FIELDS:
            array = getattr(self, name)
            array[...] = array[index]


def load_layouts(problem: Problem, state: State, replicas, layouts) -> None:
    """Full evaluation of ``layouts[j]`` into replica ``replicas[j]`` (the only full scoring)."""
    for k, cell_of in zip(replicas, layouts):
        cell_of = np.asarray(cell_of, dtype=np.int64)
        state.cell_of[k] = cell_of
        state.count[k] = np.bincount(cell_of, minlength=problem.num_cells)
        state.tokens[k] = np.bincount(cell_of, weights=problem.lengths.astype(np.float64), minlength=problem.num_cells)
        state.qwork[k] = np.bincount(cell_of, weights=problem.work, minlength=problem.num_cells)
        pair = problem.pair_of_cell[cell_of]
        order = np.argsort(pair, kind="stable")
        starts = np.searchsorted(pair[order], np.arange(problem.num_pairs))
        loads = np.zeros((problem.num_pairs, problem.demand.shape[1]), dtype=np.int64)
        filled = np.bincount(pair, minlength=problem.num_pairs) > 0
        # per-pair sums in one pass (every pair of a valid layout is non-empty)
        sums = np.add.reduceat(problem.demand[order].astype(np.int64), np.minimum(starts, order.size - 1), axis=0)
        loads[filled] = sums[filled]
        state.loads[k] = loads
        state.expert[k] = problem.gamma * loads.reshape(problem.num_pairs, problem.num_ranks, -1).max(axis=1).sum(axis=1)
        t = state.tokens[k][problem.cells_of_pair]
        q = state.qwork[k][problem.cells_of_pair]
        per_stage = problem.alpha[:, None, None] * t[None] + problem.beta[:, None, None] * q[None]
        state.attention[k] = problem.layers @ per_stage.max(axis=2)
    sel = np.asarray(replicas)
    state.energy[sel] = problem.energy(state.attention[sel], state.expert[sel])


# ---------------------------------------------------------------------------------------
# The move kernel (batched over replicas x candidates): the GPU seam
# ---------------------------------------------------------------------------------------

def propose(problem: Problem, state: State, k0: int, k1: int, rng: np.random.Generator, candidates: int,
            swap_share: float = 0.5):
    """Draw and evaluate ``candidates`` moves for each replica in [k0, k1).

    Returns a dict of flat [B] arrays (B = (k1 - k0) * candidates): replica ``rep`` (local),
    samples ``i``, ``j``, ``swap``, cells ``c1``, ``c2``, feasibility ``ok``, and the new
    W rows, A, X, energies of the two touched pairs.
    """
    p = problem
    kb = k1 - k0
    b = kb * candidates
    n = p.lengths.size
    rep = np.repeat(np.arange(kb), candidates)
    i = rng.integers(0, n, b)
    j = rng.integers(0, n, b)
    swap = rng.random(b) < swap_share
    target = rng.integers(0, p.num_cells, b)
    cell_of = state.cell_of[k0:k1]
    c1 = cell_of[rep, i].astype(np.int64)
    c2 = np.where(swap, cell_of[rep, j], target).astype(np.int64)
    d_tok = p.lengths[i] - np.where(swap, p.lengths[j], 0)          # moves c1 -> c2
    d_q = p.work[i] - np.where(swap, p.work[j], 0.0)
    tokens = state.tokens[k0:k1]
    count = state.count[k0:k1]
    # constraints: distinct cells; capacity of both cells; relocation keeps c1 non-empty
    # and respects m in c2
    ok = (c1 != c2) & (tokens[rep, c2] + d_tok <= p.capacity) & (tokens[rep, c1] - d_tok <= p.capacity)
    ok &= swap | (count[rep, c1] > 1)
    if p.limit is not None:
        ok &= swap | (count[rep, c2] < p.limit)
    p1, p2 = p.pair_of_cell[c1], p.pair_of_cell[c2]
    same = p1 == p2
    # expert: W[p1] - dem, W[p2] + dem (dem = a_i - a_j for a swap)
    moved = np.take(p.demand, i, axis=0)
    if swap.any():
        moved[swap] -= np.take(p.demand, j[swap], axis=0)
    loads = state.loads[k0:k1].reshape(kb * p.num_pairs, -1)
    w1 = np.take(loads, rep * p.num_pairs + p1, axis=0)
    w1 -= moved
    w2 = np.take(loads, rep * p.num_pairs + p2, axis=0)
    w2 += moved
    shape = (b, p.num_ranks, p.num_layers)
    x1 = p.gamma * w1.reshape(shape).max(axis=1).sum(axis=1, dtype=np.int64)
    x2 = p.gamma * w2.reshape(shape).max(axis=1).sum(axis=1, dtype=np.int64)
    expert = state.expert[k0:k1]
    x1 = np.where(same, expert[rep, p1], x1)
    x2 = np.where(same, expert[rep, p2], x2)
    # attention: the D/G slots of each touched shard, with both cells updated
    a_new = []
    for pair in (p1, p2):
        cells = p.cells_of_pair[pair]                                          # [B, D/G]
        t = tokens[rep[:, None], cells]
        q = state.qwork[k0:k1][rep[:, None], cells]
        t = t - np.where(cells == c1[:, None], d_tok[:, None], 0) + np.where(cells == c2[:, None], d_tok[:, None], 0)
        q = q - np.where(cells == c1[:, None], d_q[:, None], 0.0) + np.where(cells == c2[:, None], d_q[:, None], 0.0)
        per_stage = p.alpha[:, None, None] * t[None] + p.beta[:, None, None] * q[None]
        a_new.append(p.layers @ per_stage.max(axis=2))
    a1, a2 = a_new
    rows = np.arange(b)
    attention = state.attention[k0:k1][rep]
    expert_m = expert[rep]
    attention[rows, p1] = a1
    attention[rows, p2] = a2
    expert_m[rows, p1] = x1
    expert_m[rows, p2] = x2
    energy = p.energy(attention, expert_m)
    return dict(rep=rep, i=i, j=j, swap=swap, c1=c1, c2=c2, p1=p1, p2=p2, same=same, ok=ok, d_tok=d_tok,
                d_q=d_q, w1=w1, w2=w2, attention=attention, expert=expert_m, energy=energy)


def apply_moves(problem: Problem, state: State, k0: int, k1: int, moves: dict, chosen: np.ndarray) -> None:
    """Apply the flat moves ``chosen`` (at most one per replica) to the state."""
    if chosen.size == 0:
        return
    m = {key: value[chosen] for key, value in moves.items()}
    k = m["rep"] + k0
    state.cell_of[k, m["i"]] = m["c2"]
    sw = m["swap"]
    state.cell_of[k[sw], m["j"][sw]] = m["c1"][sw]
    rel = ~sw
    state.count[k[rel], m["c1"][rel]] -= 1
    state.count[k[rel], m["c2"][rel]] += 1
    state.tokens[k, m["c1"]] -= m["d_tok"]
    state.tokens[k, m["c2"]] += m["d_tok"]
    state.qwork[k, m["c1"]] -= m["d_q"]
    state.qwork[k, m["c2"]] += m["d_q"]
    moves_w = ~m["same"]
    state.loads[k[moves_w], m["p1"][moves_w]] = m["w1"][moves_w]
    state.loads[k[moves_w], m["p2"][moves_w]] = m["w2"][moves_w]
    state.attention[k] = m["attention"]
    state.expert[k] = m["expert"]
    state.energy[k] = m["energy"]


def metropolis_steps(problem: Problem, state: State, k0: int, k1: int, temperature: float, steps: int,
                     rng: np.random.Generator, candidates: int = 4) -> int:
    """``steps`` Metropolis steps on replicas [k0, k1): each step every replica draws
    ``candidates`` moves, keeps the feasible one of least energy and accepts it with
    probability min(1, exp(-dE / T)). Returns the number of accepted moves.

    This is the move kernel; see the module docstring ("the GPU seam").
    """
    kb = k1 - k0
    accepted = 0
    for _ in range(steps):
        moves = propose(problem, state, k0, k1, rng, candidates)
        delta = np.where(moves["ok"], moves["energy"] - state.energy[k0:k1][moves["rep"]], np.inf)
        delta = delta.reshape(kb, candidates)
        best = np.argmin(delta, axis=1)
        d = delta[np.arange(kb), best]
        u = rng.random(kb)
        with np.errstate(over="ignore", invalid="ignore"):
            take = np.isfinite(d) & ((d <= 0) | (u < np.exp(-np.maximum(d, 0) / max(temperature, 1e-300))))
        chosen = np.flatnonzero(take) * candidates + best[take]
        apply_moves(problem, state, k0, k1, moves, chosen)
        accepted += int(take.sum())
    return accepted


# ---------------------------------------------------------------------------------------
# Workers (forked processes on blocks of replicas; the state is in shared memory)
# ---------------------------------------------------------------------------------------

_WORKER: dict = {}


def stop_workers(conns, procs) -> None:
    """Tell worker processes to stop (``None`` on their pipe), then join them (terminate
    after 5 s); a worker that already died is skipped. A Ctrl-C in the middle does not
    leave a worker behind: every worker is still stopped (terminated, if need be), and the
    KeyboardInterrupt is raised at the end."""
    pending = None
    for conn in conns:
        try:
            conn.send(None)
            conn.close()
        except (BrokenPipeError, OSError):
            pass
        except KeyboardInterrupt as exc:
            pending = exc
    for proc in procs:
        try:
            proc.join(timeout=5 if pending is None else 0.5)
        except KeyboardInterrupt as exc:
            pending = exc
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=1)
    if pending is not None:
        raise pending


def new_segment(size: int):
    """A new shared-memory segment of ``size`` bytes (>= 1) under a name chosen here, so that
    a Ctrl-C that lands inside its creation (after the segment exists, before the caller
    holds it) can still unlink it. The name is short: macOS allows 30 characters."""
    import secrets
    from multiprocessing import shared_memory

    name = f"rp{os.getpid() % 10 ** 6}_{secrets.token_hex(6)}"
    try:
        return shared_memory.SharedMemory(name=name, create=True, size=max(1, int(size)))
    except FileExistsError:  # another's segment (48 random bits: not ours to unlink)
        raise
    except BaseException:
        try:
            orphan = shared_memory.SharedMemory(name=name)
            orphan.close()
            orphan.unlink()
        except (FileNotFoundError, OSError, ValueError):
            pass  # it was never made
        raise


def release(segments: list) -> None:
    """Close and unlink shared-memory ``segments`` (all of them, whatever happens to one:
    a segment left linked outlives the process until Python's resource tracker notices)."""
    pending = None
    for shm in segments:
        try:
            shm.close()
        except BufferError:  # an array still views it: unlinking below frees the name
            pass
        except KeyboardInterrupt as exc:
            pending = exc
        try:
            shm.unlink()
        except FileNotFoundError:
            pass
        except KeyboardInterrupt as exc:
            pending = exc
    segments.clear()
    if pending is not None:
        raise pending


def quiet_worker() -> None:
    """In a forked worker: leave Ctrl-C (SIGINT to the process group) to the parent, which
    stops the workers through their pipes (:func:`stop_workers`) and keeps its best plan;
    and end with the parent (:func:`_die_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()


def _die_with_parent() -> None:
    """Linux: SIGTERM this worker when its parent dies. A parent killed from outside
    (SIGKILL) cannot stop its workers, and a forked worker holds copies of the parent's
    pipe ends, so it would never read EOF and keep a core busy, orphaned (found by review
    helper-32). Elsewhere the EOF of the pipe is the only signal."""
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    except (OSError, AttributeError):
        return
    parent = mp.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(0)  # the parent died before prctl took effect


def worker_tasks(conn):
    """In a forked worker (:func:`quiet_worker` applied): the tasks the parent sends on
    ``conn`` until it sends None or is gone; the pipe is closed at the end."""
    quiet_worker()
    try:
        while True:
            try:
                task = conn.recv()
            except EOFError:  # the parent is gone
                return
            if task is None:
                return
            yield task
    finally:
        conn.close()


def _worker_loop(conn, problem, state, k0, k1):
    for temperature, steps, entropy, candidates in worker_tasks(conn):
        rng = np.random.default_rng(entropy)
        conn.send(metropolis_steps(problem, state, k0, k1, temperature, steps, rng, candidates))


class BackgroundBound:
    """The row excess for every placement (:func:`rp_opt.cost.every_placement_row_excess`)
    in a forked process beside the plan, so that the plan's report gets the bound a
    separate certificate would give. It costs the search: measured on the 5-s `sync` plan
    of the N = 4096 reference window, 8864637, 8865242, 8865555 with it against 8863727,
    8863636 without (about 0.015 %; niced, 8864355-8865034); on 2026-12-06, 8867994 and
    8868816 against 8864288 and 8864528 (about 0.04 %): hence off by default."""

    def __init__(self, instance: Instance, num_rows: int, load: np.ndarray | None):
        ctx = mp.get_context("fork")
        self._conn, child = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_background_row_excess, args=(child, instance, num_rows, load), daemon=True)
        self._proc.start()
        child.close()

    def running(self) -> bool:
        return self._proc.is_alive()

    def result(self) -> float | None:
        """The row excess if it is ready now (else None); the process is stopped."""
        value = None
        try:
            if self._conn.poll(0):
                value = self._conn.recv()
        except (EOFError, OSError):
            value = None
        self.close()
        return value

    def close(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join()
        self._conn.close()


def _background_row_excess(conn, instance, num_rows, load):
    from ..cost import every_placement_row_excess

    quiet_worker()
    try:
        conn.send(every_placement_row_excess(instance, num_rows, None, load))
    except Exception:  # the plan keeps its other bounds
        conn.send(None)
    finally:
        conn.close()


class Pool:
    """Blocks of replicas; block 0 runs in this process, the others in forked workers."""

    def __init__(self, problem: Problem, state: State, workers: int):
        self.problem, self.state = problem, state
        k = state.num_replicas
        edges = np.linspace(0, k, workers + 1).round().astype(int)
        self.blocks = [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]
        self.conns, self.procs = [], []
        if workers > 1:
            ctx = mp.get_context("fork")
            try:
                for k0, k1 in self.blocks[1:]:
                    parent, child = ctx.Pipe()
                    proc = ctx.Process(target=_worker_loop, args=(child, problem, state, k0, k1), daemon=True)
                    proc.start()
                    child.close()
                    self.conns.append(parent)
                    self.procs.append(proc)
            except BaseException:  # Ctrl-C while starting them: stop the ones started
                self.close()
                raise

    def run(self, temperature: float, steps: int, seed: int, step_index: int, candidates: int) -> int:
        for b, conn in enumerate(self.conns, start=1):
            conn.send((temperature, steps, (seed, step_index, b), candidates))
        k0, k1 = self.blocks[0]
        accepted = metropolis_steps(self.problem, self.state, k0, k1, temperature, steps,
                                    np.random.default_rng((seed, step_index, 0)), candidates)
        for conn in self.conns:
            accepted += conn.recv()
        return accepted

    def close(self):
        stop_workers(self.conns, self.procs)


# ---------------------------------------------------------------------------------------
# Population annealing driver
# ---------------------------------------------------------------------------------------

@dataclass
class AnnealStats:
    temperatures: int = 0
    steps: int = 0
    proposals: int = 0
    accepted: int = 0
    seconds: float = 0.0
    t_start: float = 0.0
    t_end: float = 0.0
    start_energies: list | None = None
    interrupted: bool = False


def anneal(problem: Problem, starts: list[np.ndarray], *, replicas: int = 32, workers: int = 1, seed: int = 0,
           stop: StoppingCriterion | None = None, time_limit: float | None = None, temperatures: int = 60,
           steps_per_temperature: int = 20, candidates: int = 4, t_start: float | None = None,
           t_ratio: float = 1e-3) -> tuple[np.ndarray, float, AnnealStats]:
    """Population annealing from ``starts`` (cell_of arrays); returns (best cell_of, its
    energy, stats).

    The temperature falls geometrically from ``t_start`` (default: from the spread of the
    energy changes of a probe batch) to ``t_start * t_ratio``; progress is the share of
    ``time_limit`` spent when one is given, else the share of ``temperatures`` done.
    ``stop`` is checked before every temperature step with the best energy. Ctrl-C
    (KeyboardInterrupt) ends the run with the best layout so far (``stats.interrupted``).
    """
    started = time.perf_counter()
    workers = max(1, min(int(workers), replicas))
    state = State(problem, replicas, shared=workers > 1)
    pool = None
    try:
        first = min(len(starts), replicas)
        load_layouts(problem, state, range(first), starts[:first])
        stats = AnnealStats()
        stats.start_energies = state.energy[:first].tolist()
        if replicas > first:  # replica k starts from start k mod (number of starts)
            state.permute(np.arange(replicas) % first)
        best_energy = float(state.energy.min())
        best = state.cell_of[int(np.argmin(state.energy))].astype(np.int64)
        if t_start is None:
            probe = propose(problem, state, 0, replicas, np.random.default_rng((seed, 1 << 30)), candidates)
            delta = (probe["energy"] - state.energy[probe["rep"]])[probe["ok"]]
            up = delta[delta > 0]
            t_start = float(np.median(up)) if up.size else max(abs(best_energy) * 1e-6, 1e-12)
        t_end = t_start * t_ratio
        stats.t_start, stats.t_end = t_start, t_end
        if stop is None:
            stop = MaxIterations(temperatures) if time_limit is None else MaxSeconds(time_limit)
        pool = Pool(problem, state, workers)
        beta_old = 1.0 / t_start
        step = 0
        try:
            # checked before every step, so MaxIterations(N) runs N steps (the schedule's N)
            while not stop(best_energy):
                if time_limit is not None:
                    progress = (time.perf_counter() - started) / max(time_limit, 1e-9)
                else:
                    progress = step / max(temperatures - 1, 1)
                temp = t_start * (t_end / t_start) ** min(1.0, progress)
                # population annealing: resample by Boltzmann weights of the temperature change
                beta_new = 1.0 / temp
                if step > 0 and replicas > 1:
                    logw = -(beta_new - beta_old) * (state.energy - state.energy.min())
                    weight = np.exp(logw - logw.max())
                    weight /= weight.sum()
                    rng = np.random.default_rng((seed, step, 1 << 20))
                    # systematic resampling keeps the population size and is low-variance
                    points = (rng.random() + np.arange(replicas)) / replicas
                    index = np.minimum(np.searchsorted(np.cumsum(weight), points), replicas - 1)
                    state.permute(index)
                beta_old = beta_new
                stats.accepted += pool.run(temp, steps_per_temperature, seed, step, candidates)
                stats.steps += steps_per_temperature
                stats.proposals += steps_per_temperature * replicas * candidates
                step += 1
                k = int(np.argmin(state.energy))
                if state.energy[k] < best_energy:
                    best_energy, best = float(state.energy[k]), state.cell_of[k].astype(np.int64)
        except KeyboardInterrupt:  # Ctrl-C: keep the best layout so far (the workers ignore it)
            stats.interrupted = True
        stats.temperatures = step
        stats.seconds = time.perf_counter() - started
        return best, best_energy, stats
    finally:
        try:
            if pool is not None:
                pool.close()
        finally:
            state.close()


# ---------------------------------------------------------------------------------------
# The solver
# ---------------------------------------------------------------------------------------

def default_placement(window, num_ranks: int, load: np.ndarray | None = None) -> tuple[Placement, str]:
    """LPT + swap local search (:mod:`rp_opt.placement`). ``load`` is
    ``window.expert_load()`` when the caller has it (one pass over the demand)."""
    from ..placement.local_search import local_search_ranks
    from ..placement.lpt import lpt_ranks

    load = window.expert_load() if load is None else load
    return Placement(local_search_ranks(load, lpt_ranks(load, num_ranks), num_ranks, None),
                     num_ranks), "lpt+local-search"


def _l1_rows(instance: Instance) -> int:
    """ceil(max(ceil(sum T / C), ceil(N / m)) / D): no layout has fewer rows."""
    window, cluster = instance.window, instance.cluster
    low = -(-int(window.lengths.sum()) // cluster.capacity)
    if cluster.max_samples_per_cell is not None:
        low = max(low, -(-window.num_samples // cluster.max_samples_per_cell))
    return -(-low // cluster.dp)


def _quick_rows(instance: Instance):
    """R* without the certifier when a first-fit packing meets the L1 / cardinality bound:
    a packing into the R*·D cells of R* = ceil(L1 / D) rows proves R*. Tries the
    AReaL-style FFD of :mod:`.baseline` first (no per-cell limit; its layout is also the
    ``ffd`` seed), then the certifier package's FFD. Returns (R*, witness, stats) or None."""
    window, cluster = instance.window, instance.cluster
    rows = _l1_rows(instance)
    if rows * cluster.dp > window.num_samples:
        return None
    if cluster.max_samples_per_cell is None:
        from .baseline import ffd_bins
        bins = ffd_bins(window.lengths, rows * cluster.dp, cluster.capacity)
        if bins is not None and np.bincount(bins, minlength=rows * cluster.dp).min() > 0:
            return rows, Layout.from_bins(bins, rows, cluster.dp), {"rows_method": "L1 = FFD (AReaL ffd)",
                                                                    "rows_status": "optimal"}
    from ..rows.heuristics import expand_bins, first_fit_decreasing

    bins = first_fit_decreasing(window.lengths, cluster.capacity, cluster.max_samples_per_cell)
    if -(-(int(bins.max()) + 1) // cluster.dp) != rows:
        return None
    witness = Layout.from_bins(expand_bins(bins, rows * cluster.dp), rows, cluster.dp)
    return rows, witness, {"rows_method": "L1 = FFD", "rows_status": "optimal"}


def certified_rows(instance: Instance, time_limit: float) -> tuple[int | None, Layout | None, dict]:
    """(rows, witness layout or None, what proved them) for planning ``instance``: R* when
    proven, else the rows of the certifier's witness (:attr:`RowCertificate.rows`; the
    stats say it is not proven). ``rows`` is None when no layout is known; the stats then
    carry ``rows_status`` and ``reason`` (:meth:`RowCertificate.no_rows`)."""
    from ..rows import certify_rows

    quick = _quick_rows(instance)
    if quick is not None:
        return quick
    cert = certify_rows(instance.window, instance.cluster, time_limit)
    if cert.rows is None:
        status, reason = cert.no_rows()
        return None, None, {"rows_method": cert.bound_method, "rows_status": status, "reason": reason}
    if cert.r_star is None:
        return cert.rows, cert.witness, {"rows_method": f"witness, not proven ({cert.status})",
                                         "rows_lower_bound": cert.lower_bound}
    return cert.rows, cert.witness, {"rows_method": cert.bound_method, "rows_status": cert.status}


def search_layout(problem: Problem, start: np.ndarray, *, deadline: float | None = None,
                  max_evaluations: int | None = None, seed: int = 0, cap: int | None = 16,
                  surrogate: float = 0.05, screen: int | None = None, workers: int = 1,
                  round_evaluations: int = 64):
    """Block-pair search (:mod:`.improve`) from ``start``: first passes over all block pairs
    under the energy plus ``surrogate`` * sum J (credit for lowering the total, which makes
    room for the primary), then the exact energy on the blocks that decide the primary.

    With ``workers`` > 1 (and at least two rows per worker) both phases run as rounds of
    :class:`rp_opt.packing.improve.ParallelSearch` (disjoint row groups on separate
    processes, merged after each round); rounds last 0.25 s
    under a deadline, or ``round_evaluations`` block pairs per worker with
    ``max_evaluations`` (deterministic). Returns (cell_of, exact energy, stats dict)."""

    from .improve import BlockSearch, ParallelSearch, SearchStats

    deadline = np.inf if deadline is None else deadline
    rng = np.random.default_rng((seed, 7))
    out = {}
    layout = np.asarray(start, dtype=np.int64)
    evals = None if max_evaluations is None else max(1, int(0.85 * max_evaluations))
    rest = None if max_evaluations is None else max(1, max_evaluations - (evals or 0))
    sur = replace(problem, aggregates=list(problem.aggregates) + [Term(1.0, 1.0, "sum", 1, "sum", surrogate)]) \
        if surrogate > 0 else None
    workers = max(1, min(int(workers), problem.rows // 2))
    if workers > 1:
        par = ParallelSearch({"sweep": sur if sur is not None else problem, "run": problem}, layout, workers,
                             cap=cap, screen=screen)
        try:
            # a round costs two messages and copies of the state of half the rows
            round_len = 0.25
            now = time.perf_counter()
            phases = [("run", deadline, rest)]
            if sur is not None:
                phases.insert(0, ("sweep", now + 0.85 * (deadline - now) if np.isfinite(deadline) else deadline, evals))
            energy, rounds = None, 0
            try:
                for phase, end, budget in phases:
                    st = SearchStats()
                    began = time.perf_counter()
                    while time.perf_counter() < end - 0.02 and (budget is None or st.evaluations < budget):
                        per_round = None if budget is None else min(budget - st.evaluations, round_evaluations * workers)
                        before = st.improvements
                        # evaluation-bounded rounds take no wall-clock cut, so that a seed and a
                        # worker count give the same layout however loaded the machine is
                        round_end = end if budget is not None else min(end, time.perf_counter() + round_len)
                        energy = par.round(phase, round_end, per_round, (seed, rounds, 11), st)
                        rounds += 1
                        if st.local_optimum and st.improvements == before:
                            break
                    key = "sweep" if phase == "sweep" else "exact"
                    out.update({f"{key}_evaluations": st.evaluations, f"{key}_improvements": st.improvements,
                                f"{key}_candidates": st.candidates, f"{key}_seconds": time.perf_counter() - began})
                    if phase == "run":
                        out["local_optimum"] = st.local_optimum
            except KeyboardInterrupt:  # Ctrl-C: the last merged round (checked below)
                out["interrupted"] = True
            merged = par.current
            out.update(workers=workers, rounds=rounds)
        finally:
            par.close()
        layout, energy = settled(problem, merged, layout)
        return layout, energy, out
    search = None
    try:
        if sur is not None:
            search = BlockSearch(sur, layout, cap=cap, seed=seed, screen=screen)
            now = time.perf_counter()
            st = search.sweep(now + 0.85 * (deadline - now) if np.isfinite(deadline) else deadline, rng, evals)
            layout = search.layout()
            search.close()
            search = None
            out.update(sweep_evaluations=st.evaluations, sweep_improvements=st.improvements,
                       sweep_candidates=st.candidates, sweep_seconds=st.seconds)
        search = BlockSearch(problem, layout, cap=cap, seed=seed + 1, screen=screen)
        st = search.run(deadline, rng, max_evaluations=rest)
        out.update(exact_evaluations=st.evaluations, exact_improvements=st.improvements,
                   exact_candidates=st.candidates, exact_seconds=st.seconds, local_optimum=st.local_optimum,
                   workers=1)
        layout, energy = search.layout(), search.energy()
    except KeyboardInterrupt:  # Ctrl-C: the search's layout, unless it was cut in the middle of a move
        out["interrupted"] = True
        layout, energy = settled(problem, layout if search is None else search.layout(), layout)
    finally:
        if search is not None:
            search.close()
    return layout, energy, out


def settled(problem: Problem, layout: np.ndarray, fallback: np.ndarray) -> tuple[np.ndarray, float]:
    """(layout, energy from a full evaluation) of ``layout`` when it keeps every constraint
    (non-empty cells, C, m), else of ``fallback``: a layout taken from a search that Ctrl-C
    stopped may be cut in the middle of a move."""
    state = State(problem, 2)
    try:
        load_layouts(problem, state, [0, 1], [layout, fallback])
        count = state.count[0]
        ok = count.min() > 0 and state.tokens[0].max() <= problem.capacity and \
            (problem.limit is None or count.max() <= problem.limit)
        k = 0 if ok else 1
        return state.cell_of[k].astype(np.int64), float(state.energy[k])
    finally:
        state.close()


# most of the time limit the greedy seed may take (by :func:`.seeds.greedy_seconds`), and
# the anchor seed (by :func:`.anchors.anchor_seconds`)
GREEDY_SHARE = 0.3
ANCHOR_SHARE = 0.25
# most of the time limit the row excess for every placement may take (by
# :func:`hidden_seconds`): beyond it the report keeps the other bounds
HIDDEN_SHARE = 0.1
# ... and beside the search, in a process of its own, where it fits this share
BACKGROUND_SHARE = 0.7

_SEED_RULES = ("witness", "ffd", "kk", "blocks", "greedy", "anchors")


def _seed_rules(field: str, value, *, text: bool = True) -> tuple[str, ...] | None:
    """``seeds``: None, or a non-empty list (or comma-separated string) of seed rules."""
    if is_none(value, text):
        return None
    rules = [r.strip() for r in value.split(",")] if isinstance(value, str) else value
    require(isinstance(rules, (list, tuple)) and rules and all(
        isinstance(r, str) and (r in _SEED_RULES or (r.startswith("blocks-") and r[7:] in _SEED_RULES))
        for r in rules), field,
        f"must be a non-empty list of seed rules ({', '.join(_SEED_RULES)}, blocks-<rule>) or None, got {value!r}")
    return tuple(rules)


def _auto_switch(field: str, value, *, text: bool = True) -> bool | None:
    """A switch, or None (the default: the heuristic decides)."""
    if is_none(value, text):
        return None
    try:
        return switch(field, value, text=text)
    except InputError:
        raise InputError(field, f"must be true, false or None (None: decided by the objective), got {value!r}") \
            from None


def _count(none: str | None = None):
    """An integer >= 1; with ``none``, also None, meaning ``none``."""
    return partial(integer, low=1, none=none is not None, hint=none and f"None: {none}")


# name -> check. The heuristic's arguments and options, checked by :func:`check_option`
# before anything runs, with the shared rules of :mod:`rp_opt.errors` and ``text=True`` (the
# CLI's strings "3", "0.5", "yes" pass too): ``integer`` takes whole numbers only (1.7 is an
# error, 8.0 is 8), ``number`` finite numbers, ``switch`` true/false (also 1/0, yes/no);
# ``seeds`` takes seed rule names.
OPTION_RULES: dict = {
    "time_limit": partial(number, above=0, hint="seconds"),
    "seed": partial(integer, low=0, high=MAX_SEED),
    "workers": _count("one per core"),
    "anneal_share": partial(number, low=0, high=1),
    "candidates": _count(),
    "cycles": switch,
    "no_improvement": _count("off"),
    "num_rows": _count("R*"),
    "refine": switch,
    "regroup": _auto_switch,
    "refine_rounds": _count(),
    "refine_share": partial(number, low=0, high=1),
    "refine_sweeps": _count(),
    "replicas": _count(),
    "report_baseline": switch,
    "reserve": partial(number, low=0, hint="seconds, below time_limit"),
    "search": switch,
    "search_cap": _count("whole blocks"),
    "search_evaluations": _count("until the deadline"),
    "search_screen": _count("every swap"),
    "search_workers": _count("by the load"),
    "seeds": _seed_rules,
    "steps_per_temperature": _count(),
    "surrogate": partial(number, low=0),
    "anchor_margin": partial(number, low=0),
    "background_bound": switch,
    "temperatures": _count("time-limited run"),
    "trust_warm_rows": switch,
}
HEURISTIC_OPTIONS = frozenset(OPTION_RULES) - {"time_limit", "seed"}
"""Option names :func:`heuristic` accepts (any other is an input error)."""


def check_option(name: str, value):
    """``value`` of the heuristic's argument or option ``name`` as its type (``OPTION_RULES``).

    Values come as Python values or as the CLI's ``--option KEY=VALUE`` gives them (read
    as JSON when they parse, else as text), so numbers and true/false may also be strings.

    Raises
    ------
    InputError
        One line naming the option and the value when the value is not valid.
    """
    return OPTION_RULES[name](name, value, text=True)


def others_running(samples: int = 5, interval: float = 0.004) -> int | None:
    """Threads of other processes running now: the median over ``samples`` reads of
    /proc/loadavg's running count, less this one; None where there is no such file.

    The 1-min load average lags: after a minute of two busy cores (a benchmark, the
    previous plan) it still reads about 2 when the machine has gone idle, and a plan then
    ran one search process (about 0.13 % worse on the N = 4096 reference window)."""
    counts = []
    try:
        for i in range(samples):
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)
            if i + 1 < samples:
                time.sleep(interval)
    except (OSError, ValueError, IndexError):
        return None
    return max(0, int(np.median(counts)))


def heuristic_inputs(time_limit, seed, workers, options: dict) -> tuple[float, int, int | None, dict]:
    """The heuristic's ``time_limit`` (None: 5 s), ``seed``, ``workers`` and ``options``,
    checked (:func:`check_option`) and converted, before anything runs.

    Returns
    -------
    (time_limit, seed, workers, options)

    Raises
    ------
    InputError
        An unknown option, or the first invalid value (one line naming it).
    """
    unknown = sorted(set(options) - HEURISTIC_OPTIONS)
    require(not unknown, "options", f"unknown option(s) {unknown} for solver heuristic; known: "
            f"{', '.join(sorted(HEURISTIC_OPTIONS))}")
    time_limit = check_option("time_limit", 5.0 if time_limit is None else time_limit)
    options = {name: check_option(name, value) for name, value in options.items()}
    require(options.get("reserve", 0.0) < time_limit, "reserve",
            f"must be a number of seconds >= 0 and below time_limit={time_limit}, got {options.get('reserve')!r}")
    return time_limit, check_option("seed", seed), check_option("workers", workers), options


@register_solver("heuristic", "LPT placement + diverse seeds + population annealing + block-pair search")
def heuristic(instance: Instance, *, objective="sync", time_limit: float = 5.0, seed: int = 0, warm_start=None,
              placement: Placement | None = None, workers: int | None = None, **options):
    """Production heuristic: placement (LPT + local search, or given), R* and its witness,
    diverse seeds, population annealing of the layout (diversification), then the
    vectorised block-pair search (:mod:`.improve`) on the anneal's best layout.

    The time limit covers everything that makes the plan: placement, R*, rank demand,
    seeds, anneal, search, scoring and the lower bounds. The identity + ffd baseline
    (``report_baseline``, default True) is only for the report: it runs after the plan,
    reuses the ffd seed, and its time is ``stats["report_seconds"]`` (not in ``seconds``).

    Options: ``replicas`` (K, default 32), ``candidates`` (moves drawn per replica per
    step, 4), ``steps_per_temperature`` (20), ``temperatures`` (fixed number of temperature
    steps: deterministic schedule; the search then runs ``search_evaluations`` block pairs,
    default 200), ``anneal_share`` (share of the packing time for the first anneal; default
    0 without ``temperatures``: the search starts from the best seed; 0.3 with them; an
    anneal from the search's local optimum and the seeds runs, with at least 0.3 of the
    time left, whenever the search stops at one), ``no_improvement``, ``seeds`` (seed rules,
    default witness, ffd, kk, blocks, blocks-kk, greedy when it fits the budget, and anchors
    (:mod:`.anchors`) when the primary is a sum over rows of maxima such as ``sync``),
    ``anchor_margin`` (the search starts from the anchor seed when its energy is within
    this fraction of the best seed's, default 0.001),
    ``num_rows``, ``search`` (default True), ``search_cap`` (at most that many samples of a
    block per evaluation, default None: whole blocks), ``search_screen`` (swaps evaluated
    exactly per block pair after the lower-bound screen, default 32; None: all),
    ``refine`` (after the search, refine the placement for the layout,
    :mod:`rp_opt.placement.refine`, and search again under it; kept only when the exact
    energy falls; default on when the placement is not given),
    ``refine_share`` (share of the packing time for it, 0.4), ``regroup`` (every seed also
    with its cells regrouped whole, :mod:`.regroup`; default None: on when the primary's
    first aggregate is a maximum of sums such as ``shard``; unless it is False, after each
    search (also the placement refinement's) the blocks are arranged whole for
    that aggregate when it is a sum of maxima or a maximum of sums, the time counted in
    ``timings["search"]``), ``refine_rounds`` (per cycle, 1),
    ``refine_sweeps`` (swap sweeps with a fixed schedule, 20), ``cycles`` (true: while a
    tenth of the limit is left after the refinement, another cycle of anneal, search and
    refinement from the best plan, unless ``search_evaluations`` caps the searches;
    ``stats["cycles"]`` counts them),
    ``search_workers`` (processes of the block search; default: ``workers`` with
    ``temperatures`` or when no other thread runs now (:func:`others_running`; the 1-min
    load average where that cannot be read) so that a core is free, else 1), ``surrogate`` (0.05), ``reserve`` (seconds
    kept for the final scoring, default 0.04 * time_limit plus the time the lower bounds
    took), ``background_bound`` (false; true: under a primary of row maxima, the row excess
    for every placement too slow for a tenth of the limit runs in a process of its own
    beside the search when it fits :data:`BACKGROUND_SHARE` of it, for a tighter reported
    bound at a slightly worse plan; ``stats["hidden_background"]`` says whether it was
    ready). Every value is checked before
    anything runs (:data:`OPTION_RULES`, :func:`heuristic_inputs`): a bad one is a one-line
    :class:`~rp_opt.errors.InputError` naming the option.

    Repeatability: by default the run is time-limited, so how much work it does (anneal
    steps, block pairs searched) depends on the machine's speed and load, and two runs with
    the same ``seed`` may return different plans. With ``temperatures=N`` the schedule is
    fixed (N temperature steps, ``search_evaluations`` block pairs, ``refine_sweeps``): the
    same seed and worker count give the same plan, and the run does that work (every seed
    rule included) whatever ``time_limit`` says; only the R* certificate before it keeps
    to the limit (with less time it may prove less and start from another witness).
    ``stats["deterministic"]`` says which kind of run it was.

    Ctrl-C (KeyboardInterrupt) during the anneal, the search or a refine round ends the run
    with the best plan found so far (``stats["interrupted"]``; worker processes leave the
    signal to this one and exit quietly).
    """
    from .baseline import proven_status
    from .anchors import anchor_seconds
    from .seeds import greedy_seconds, layout_violation, seed_layouts

    started = time.perf_counter()
    time_limit, seed, workers, options = heuristic_inputs(time_limit, seed, workers, options)
    objective = get_objective(objective)
    window, cluster = instance.window, instance.cluster
    stats: dict = {}
    timings: dict = {}

    warm_layout = None
    if warm_start is not None:
        require(isinstance(warm_start, Plan), "warm_start", "must be a Plan")
        require(warm_start.layout.cell_of.size == window.num_samples, "warm_start",
                f"places {warm_start.layout.cell_of.size} samples, the window has N={window.num_samples}")
        if placement is None:
            placement = warm_start.placement
            stats["placement"] = "warm start"
        warm_layout = warm_start.layout
    t = time.perf_counter()
    load = window.expert_load()          # one pass over the demand: placement and the bounds
    if placement is None:
        placement, stats["placement"] = default_placement(window, cluster.ep, load)
    else:
        placement = placement_for(placement, cluster.ep,
                                  "warm_start" if stats.get("placement") == "warm start" else "placement",
                                  window.num_layers, window.num_experts)
        stats.setdefault("placement", "given")
    timings["placement"] = time.perf_counter() - t

    t = time.perf_counter()
    if options.get("num_rows") is not None:
        num_rows, witness, row_stats = int(options["num_rows"]), None, {"rows_method": "given"}
    elif warm_layout is not None and options.get("trust_warm_rows", False):
        num_rows, witness, row_stats = warm_layout.num_rows, None, {"rows_method": "warm start"}
    else:
        num_rows, witness, row_stats = certified_rows(instance, certify_seconds(time_limit, 0.5))
    stats.update(row_stats)
    empty = None if num_rows is None else row_count_reason(window.lengths, num_rows, cluster.dp, cluster.capacity,
                                                           cluster.max_samples_per_cell)
    if empty:
        # a given R that counting rules out (R*D > N, or fewer cells than a bin bound needs)
        stats.update(rows_status=INFEASIBLE, reason=empty)
        num_rows = None
    if num_rows is None:
        # no row count to plan with: infeasible (proven) or no_solution, like every planner
        return Result(stats.pop("rows_status"), None, (), None, time.perf_counter() - started, "heuristic", stats)
    # R* only when this run proved it; a given or warm-start R, or a witness's unproven
    # rows, is what the layout uses, not R*
    stats["num_rows"] = num_rows
    if stats.get("rows_status") == "optimal":
        stats["r_star"] = num_rows
    timings["rows"] = time.perf_counter() - t

    t = time.perf_counter()
    major = rank_demand_major(window, placement)                       # [N, P*L] int32
    demand = rank_major_view(major, window.num_layers)                 # [N, L, P] view, no copy
    timings["rank_demand"] = time.perf_counter() - t
    t = time.perf_counter()
    # under a time limit the later (costlier) seed rules wait for time left: from 60 % of
    # the limit on, no further rule starts (N = 16384 at 1 s: the fixed phases alone took
    # 1.05 s with every rule); a fixed schedule (temperatures) builds every seed
    deterministic = options.get("temperatures") is not None     # a fixed schedule
    seeds_deadline = None if deterministic else started + 0.6 * time_limit
    rules = options.get("seeds")
    if rules is None:
        rules = ["witness", "ffd", "blocks", "kk", "blocks-kk"]
        # the expert-aware greedy costs O(N R G L P): only when it takes at most 0.3 of the
        # budget. It is the best seed on the production windows of scripts/bench_heuristic.py
        # (docs/benchmarks.md: N = 4096 at 5 s, 0.55 % above the bound with it, 0.72 %
        # without; N = 1024 at 2 s and N = 2048 or 8192 at 5 s also gain); at 0.36-0.41 of
        # the budget (N = 4096 at 1 s, 8192 at 3 s) it won one run and lost the next
        # (a fixed schedule does its work whatever the limit: the greedy too)
        if deterministic or greedy_seconds(instance, num_rows, cluster.ep) <= GREEDY_SHARE * time_limit:
            rules.append("greedy")
        # a sum over rows of maxima (sync): the anchor seed (:mod:`.anchors`) builds the rows
        # of like blocks that the search does not reach from the other seeds; it is decided
        # after the bounds (:func:`_anchors_pay`)
        probe_anchors = _row_maxima(objective)
    else:
        probe_anchors = False
    if witness is not None and row_stats.get("rows_method") == "L1 = FFD (AReaL ffd)" and "ffd" in rules:
        # the witness IS the AReaL ffd layout (same rule, same R*·D bins): reuse it
        # (the ffd rule runs as the witness rule, even when ``seeds`` names no witness)
        seeds = seed_layouts(instance, num_rows, demand, witness,
                             tuple(dict.fromkeys("witness" if r == "ffd" else r for r in rules)), seeds_deadline)
        # renamed in place: the order of the seeds is the order of the replicas' starts
        seeds = {("ffd" if name == "witness" else name): layout for name, layout in seeds.items()}
    else:
        seeds = seed_layouts(instance, num_rows, demand, witness, tuple(rules), seeds_deadline)
    if warm_layout is not None:
        why = layout_violation(instance, warm_layout, num_rows)
        require(why is None, "warm_start", f"is not a valid layout of R*={num_rows} rows: {why}")
        seeds = {"warm_start": warm_layout, **seeds}
    timings["seeds"] = time.perf_counter() - t
    if not seeds:
        stats["reason"] = f"no seed layout of R={num_rows} rows could be built (seed rules: {', '.join(rules)})"
        return Result(NO_SOLUTION, None, (), None, time.perf_counter() - started, "heuristic", stats)

    t = time.perf_counter()
    problem = make_problem(instance, major, num_rows, objective)
    # the row excess for every placement: in the report where it fits a tenth of the limit,
    # else (``background_bound``) beside the search where it fits most of it
    background = None
    if (uses_row_maxima(objective, cluster.edp) and not deterministic and options.get("background_bound", False)
            and bool(np.any(window.lengths == cluster.capacity))          # else it is 0
            and HIDDEN_SHARE * time_limit < hidden_seconds(instance) <= BACKGROUND_SHARE * time_limit
            and (os.cpu_count() or 1) > 1):
        background = BackgroundBound(instance, num_rows, load)
    bound_stats = report_bounds(instance, placement, num_rows, objective, demand, baseline=False, load=load,
                                hidden_budget=HIDDEN_SHARE * time_limit)
    bound_stats.pop("analytic_bounds")
    every_row_excess = bound_stats.pop("every_row_excess")
    lower_bounds = bound_stats.pop("lower_bounds")
    timings["bounds"] = time.perf_counter() - t
    names = list(seeds)
    starts = [seeds[name].cell_of for name in names]
    tag = f"heuristic {get_objective(objective).name}, N = {window.num_samples}, R = {num_rows}"

    said = [np.inf]  # the energy of the last progress line

    def progress(what: str, energy: float, always: bool = False) -> None:
        """One progress line when the best energy fell (or ``always``): the phase, the
        best energy (the scalar that orders plans as the objective does; about the
        primary), the primary's bound and the seconds."""
        if energy < said[0] or always:
            said[0] = energy
            progress_log.info("%s: %s: energy %.8g (bound %.8g), %.1f s", tag, what, energy,
                              bound_stats.get("lower_bound", float("nan")), time.perf_counter() - started)

    regroup = options.get("regroup")
    # the primary's first aggregate decides (regroup_cells and arrange_blocks arrange for it)
    first = problem.aggregates[0]
    inner, outer = first.inner, first.outer
    if regroup is None:
        # measured (docs/benchmarks.md, twelfth session): for a max of sums (shard) the
        # regrouped seeds win (N = 4096 at 5 s: 0.50 % -> 0.18 % above the bound); for a sum
        # of maxima (sync) they start lower but the search from them ends higher at N = 8192
        # and 16384 (4.15 -> 4.66 %, 4.56 -> 4.83 %)
        regroup = inner == "sum" and outer == "max"
    if regroup and problem.per_shard > 1:
        # every seed also with its cells regrouped whole into blocks of like attention
        # (:mod:`.regroup`): sample moves cannot undo a block that mixes full-length cells
        # with cells of several samples
        from .regroup import regroup_cells

        t = time.perf_counter()
        # each rule's copy right after it: with fewer replicas than starts the anneal loads
        # the first ones, and the best-ranked rules keep their regrouped copy
        names, starts = [], []
        for rule in seeds:
            names += [rule, f"{rule}+regroup"]
            starts += [seeds[rule].cell_of, regroup_cells(problem, seeds[rule].cell_of)]
        timings["regroup"] = time.perf_counter() - t
    if probe_anchors:
        t = time.perf_counter()
        probe = seeds.get("greedy", next(iter(seeds.values())))
        split = lower_bounds.gap_split(layout_costs(instance, placement, probe, demand), objective)
        stats["anchor_probe"] = {key: float(split[key]) for key in ("attention", "expert")}
        affordable = deterministic or anchor_seconds(num_rows * cluster.dp) <= ANCHOR_SHARE * time_limit
        if _anchors_pay(split) and affordable and (seeds_deadline is None or time.perf_counter() < seeds_deadline):
            more = seed_layouts(instance, num_rows, demand, None, ("anchors",))
            if more:
                seeds.update(more)
                names.append("anchors")
                starts.append(more["anchors"].cell_of)
        timings["seeds"] += time.perf_counter() - t
    replicas = int(options.get("replicas", 32))
    workers = os.cpu_count() or 1 if workers is None else int(workers)
    workers = max(1, min(workers, replicas))
    do_search = bool(options.get("search", True)) and problem.num_pairs > 1

    # time left for the packing, less a reserve for what follows the last search: the final
    # scoring (one full evaluation) and, when a refined placement is adopted, its bounds
    # again (as long as the first time: 0.09-0.16 s at N = 16384)
    reserve = float(options.get("reserve", 0.04 * time_limit + timings["bounds"]))
    remaining = max(time_limit - (time.perf_counter() - started) - reserve, 0.05)
    # measured (scripts/bench_heuristic.py, N = 16..16384): the block search gains more per
    # second than the anneal, so the first round starts from the best seed; the anneal runs
    # when the search stops at a local optimum (diversification)
    share = float(options.get("anneal_share", 0.3 if deterministic else 0.0)) if do_search else 1.0
    search_workers = options.get("search_workers")
    if search_workers is None:
        # a second search process only pays when a core is free (measured: under a full
        # machine the session gets the same CPU time with one or two processes); with a fixed
        # schedule it is ``workers`` (deterministic for a seed and a worker count)
        others = others_running()
        if others is not None and background is not None and background.running():
            others -= 1                                    # this plan's own bound
        if others is None:
            free = not hasattr(os, "getloadavg") or os.getloadavg()[0] <= (os.cpu_count() or 1) - 1
        else:
            free = others <= (os.cpu_count() or 1) - 2
        search_workers = workers if deterministic or free else 1
    run_limit = None
    if deterministic:
        stop = MaxIterations(int(options["temperatures"]))
        if options.get("no_improvement"):
            stop = stop | NoImprovement(int(options["no_improvement"]))
    else:
        run_limit = max(share * remaining, 0.02)
        stop = MaxSeconds(run_limit)
        if options.get("no_improvement"):
            stop = stop | NoImprovement(int(options["no_improvement"]))
    skip_anneal = share == 0.0
    deadline = None if deterministic else started + time_limit - reserve
    # placement refined for the found layout, then more search (``refine``): the last
    # ``refine_share`` of the packing time. On by default unless the caller fixed the
    # placement; measured on the N = 4096 ling-flash-like window (docs/benchmarks.md) it
    # lowers the primary by 0.03-0.12 % of the bound at 5 s and 0.15-0.22 % at 20 s
    default_refine = stats.get("placement") not in ("given", "warm start")
    do_refine = bool(options.get("refine", default_refine)) and do_search
    refine_share = float(options.get("refine_share", 0.4))
    final_deadline = deadline
    if do_refine and deadline is not None:
        deadline = deadline - refine_share * remaining
    timings["anneal"] = timings["search"] = 0.0
    search_stats: dict = {}
    best, best_energy, seed_energy, anneal_energy, rounds = None, np.inf, None, None, 0
    overrun = 0.0
    # Ctrl-C (KeyboardInterrupt) during the anneal, a search or a refine round ends the run
    # with the best plan so far (stats["interrupted"]); the workers leave it to this process
    interrupted = False
    refine_rounds, stats["refine"], timings["refine"] = 0, [], 0.0
    cycles = 0
    while True:
        # a cycle: packing rounds (anneal, block search), then rounds of placement
        # refinement; another cycle from the best plan while a tenth of the limit is left
        # (a small window's searches end at local optima long before the limit: the
        # README's default window, 10 s, ended at 6.5 s)
        while True:
            # one round: population annealing from the best so far and the seeds (diversification),
            # then the block-pair search from the anneal's best (intensification); another round
            # only when the search stopped at a local optimum with time left
            if skip_anneal and best is None:
                found, energy, astats = _best_start(problem, starts)
                found, energy, stats["search_start"] = _preferred_start(
                    names, starts, astats.start_energies, found, energy, float(options.get("anchor_margin", 1e-3)))
            else:
                try:
                    found, energy, astats = anneal(
                        problem, starts if best is None else [best] + starts, replicas=replicas, workers=workers,
                        seed=int(seed) + 1000 * rounds, stop=stop, time_limit=run_limit,
                        temperatures=int(options.get("temperatures") or 60),
                        steps_per_temperature=int(options.get("steps_per_temperature", 20)),
                        candidates=int(options.get("candidates", 4)))
                except KeyboardInterrupt:
                    # Ctrl-C outside the anneal's own loop (its set-up or teardown): the best start
                    found, energy, astats = _best_start(problem, starts if best is None else [best] + starts)
                    astats.interrupted = True
            timings["anneal"] += astats.seconds
            if seed_energy is None:
                seed_energy = dict(zip(names, astats.start_energies or []))
                anneal_energy = energy
                if seed_energy:
                    rule = min(seed_energy, key=seed_energy.get)
                    progress(f"best seed {rule}", seed_energy[rule])
            if energy < best_energy:
                best, best_energy = found, energy
            rounds += 1
            if not (skip_anneal and rounds == 1):
                progress(f"anneal, round {rounds}", best_energy)
            interrupted = astats.interrupted
            if interrupted or not do_search:
                break
            if deadline is not None and time.perf_counter() >= deadline:
                # the phases before it (placement, R*, rank demand, seeds, bounds) took the time: a
                # search would only build its state and stop, past the limit (0.1 s at N = 8192, 1 s)
                search_stats = search_stats or {"skipped": "deadline passed before the search"}
                break
            t = time.perf_counter()
            evals = (options.get("search_evaluations") or 200) if deterministic else options.get("search_evaluations")
            try:
                found, energy, search_stats = search_layout(
                    problem, best, deadline=deadline, max_evaluations=evals, seed=int(seed) + 1000 * rounds,
                    cap=options.get("search_cap"), surrogate=float(options.get("surrogate", 0.05)),
                    screen=options.get("search_screen", 32), workers=int(search_workers))
            except KeyboardInterrupt:  # outside the search's own loop (its set-up or teardown): the anneal's best
                found, energy, search_stats = best, best_energy, {"interrupted": True}
            if energy <= best_energy:
                best, best_energy = found, energy
            if not search_stats.get("interrupted"):
                best, best_energy = _arrange_after_search(problem, best, best_energy, options, search_stats)
            if deadline is not None:
                # a search returns after its deadline by its last block pair and its own teardown;
                # the refinement's search ends that much earlier
                overrun = max(overrun, time.perf_counter() - deadline)
            timings["search"] += time.perf_counter() - t
            progress(f"block search, round {rounds}", best_energy)
            left = (started + time_limit - reserve) - time.perf_counter()
            interrupted = bool(search_stats.get("interrupted"))
            if interrupted or deterministic or not search_stats.get("local_optimum") or left < 0.1 * time_limit:
                break
            # the search is at a local optimum: diversify with an anneal from it and the seeds
            run_limit = max(share, 0.3) * left
            stop = MaxSeconds(run_limit)
        stats["rounds"] = rounds
        cycle_refines = 0
        while do_refine and not interrupted:
            # rounds of (refine the placement for the layout, search the layout again) until the
            # time is up, a round is not adopted, or (fixed schedule) ``refine_rounds`` rounds
            t = time.perf_counter()
            left = None if final_deadline is None else final_deadline - overrun - t
            if left is not None and left <= timings["rank_demand"]:
                # the round's placement refinement gets half of what summing the block demand and
                # the new rank demand (each about the rank demand's time) leave: nothing, so it
                # would end after that sum with no swap, past the limit (0.2-0.4 s at N = 8192-16384)
                stats["refine_skipped"] = (f"{max(left, 0.0):.2f} s left, the rank demand took "
                                           f"{timings['rank_demand']:.2f} s")
                break
            end = None if left is None else t + left / max(1, int(options.get("refine_rounds", 1)) - cycle_refines)
            try:
                refined = _refine_round(instance, objective, placement, problem, best, best_energy, end,
                                        seed=int(seed) + refine_rounds, deterministic=deterministic, options=options,
                                        search_workers=int(search_workers), rank_demand_seconds=timings["rank_demand"])
            except KeyboardInterrupt:  # in the placement refinement: keep the plan before this round
                interrupted = True
                break
            interrupted = bool(refined["stats"].get("search", {}).get("interrupted"))
            refine_rounds += 1
            cycle_refines += 1
            timings["refine"] += time.perf_counter() - t
            stats["refine"].append(refined["stats"])
            if refined.get("adopted"):
                placement, major, problem = refined["placement"], refined["major"], refined["problem"]
                demand = rank_major_view(major, window.num_layers)
                best, best_energy = refined["layout"], refined["energy"]
                if not stats["placement"].endswith("refined for the layout"):
                    stats["placement"] = f"{stats.get('placement')} + refined for the layout"
                # (the row excess for every placement, placement-free, is not computed again)
                bound_stats = report_bounds(instance, placement, num_rows, objective, demand, baseline=False, load=load,
                                            hidden_budget=HIDDEN_SHARE * time_limit, every_row_excess=every_row_excess)
                bound_stats.pop("analytic_bounds")
                bound_stats.pop("every_row_excess")
                lower_bounds = bound_stats.pop("lower_bounds")
            verdict = "adopted" if refined.get("adopted") else "kept the plan"
            progress(f"placement refined, round {refine_rounds} ({verdict})", best_energy, always=True)
            now = time.perf_counter()
            if (interrupted or not refined.get("adopted") or cycle_refines >= int(options.get("refine_rounds", 1))
                    or (final_deadline is not None and final_deadline - now < 0.05 * time_limit)):
                break
        cycles += 1
        left = None if final_deadline is None else final_deadline - overrun - time.perf_counter()
        if (interrupted or deterministic or not do_search or left is None or left < 0.1 * time_limit
                or not bool(options.get("cycles", True)) or options.get("search_evaluations")):
            break
        # diversify from the best plan (under its refined placement) and search again,
        # leaving the refinement its share of what is left
        run_limit = max(share, 0.3) * left * (1 - refine_share if do_refine else 1)
        stop = MaxSeconds(run_limit)
        deadline = final_deadline - refine_share * left if do_refine else final_deadline
    stats["cycles"] = cycles

    t = time.perf_counter()
    layout = Layout(best, num_rows, cluster.dp)
    chosen = "search" if do_search and best_energy < anneal_energy else "anneal"
    # the exact tuple decides against the warm start (never return worse than it)
    if warm_layout is not None:
        value = objective.evaluate(layout_costs(instance, placement, layout, demand))
        start_value = objective.evaluate(layout_costs(instance, placement, warm_layout, demand))
        stats["warm_start_score"] = list(start_value)
        if start_value < value:
            layout, chosen = warm_layout, "warm_start"
    stats.update(
        objective=objective.name, workers=workers, replicas=replicas, candidates=int(options.get("candidates", 4)),
        seeds=names, seed_energy=seed_energy, best_from=chosen, temperatures=astats.temperatures,
        steps=astats.steps, proposals=astats.proposals, accepted=astats.accepted,
        moves_per_second=astats.proposals / max(astats.seconds, 1e-9), t_start=astats.t_start, t_end=astats.t_end,
        anneal_energy=anneal_energy, energy=best_energy, eps=problem.eps, search=search_stats,
        search_workers=int(search_workers), deterministic=deterministic, interrupted=interrupted)
    if background is not None:
        excess = background.result()
        stats["hidden_background"] = "ready" if excess is not None else "not ready"
        if excess is not None:
            lower_bounds = replace(lower_bounds, row_excess=max(lower_bounds.row_excess, excess))
            bound_stats["lower_bound"] = max(bound_stats["lower_bound"], lower_bounds.objective(objective)[0])
            # (the bound for every placement holds for this one too)
            bound_stats["placement_bound"] = max(bound_stats["placement_bound"], bound_stats["lower_bound"])
            bound_stats["hidden_bound"] = True
    stats.update(bound_stats)
    stats["timings"] = timings
    # what plan_result does, without recomputing the analytic bounds (one pass over a[i,l,e])
    costs = layout_costs(instance, placement, layout, demand)
    value = objective.evaluate(costs)
    # where the primary sits above the lower bound, in the gap's units (fractions of the
    # primary, rp_opt.result.relative_gap): attention + expert + spread - bound_slack = gap
    stats["gap_split"] = lower_bounds.gap_split(costs, objective, relative=True)
    stats["primary_proven"] = bool(stats["lower_bound"] >= value[0] * (1 - 1e-9))
    stats["bound_scope"] = EVERY_PLACEMENT  # lower_bound; placement_bound is this placement's
    # the packing's own gap: to the bound that holds for this placement only
    stats["placement_gap"] = relative_gap(value[0], stats["placement_bound"])
    timings["score"] = time.perf_counter() - t
    status = proven_status(value, lower_bounds.objective(objective))
    result = Result(status, Plan(placement, layout, objective.name, value, stats), value, stats["lower_bound"],
                    time.perf_counter() - started, "heuristic", stats)
    if options.get("report_baseline", True) and not interrupted:
        # report only (not part of the plan's time): identity + ffd on the same window
        t = time.perf_counter()
        base = baseline_score(instance, num_rows, objective, seeds.get("ffd"))
        result.stats.update(base)
        if base.get("baseline_score"):
            result.stats["improvement"] = improvement(base["baseline_score"][0], result.score[0])
        result.stats["report_seconds"] = time.perf_counter() - t
    return result


def improvement(baseline: float, value: float) -> float | None:
    """(baseline - value) / baseline: the share of the baseline's primary a plan saves.

    0 when both are 0 (a window whose every plan costs nothing), None when only the
    baseline is 0 (no share of nothing).
    """
    if baseline == 0:
        return 0.0 if value == 0 else None
    return (baseline - value) / baseline


def _best_start(problem: Problem, starts: list) -> tuple[np.ndarray, float, AnnealStats]:
    """(layout, energy, stats) of the best of ``starts``, by one evaluation of each (no
    anneal: ``skip_anneal``, or a Ctrl-C before the anneal had a state of its own)."""
    state = State(problem, len(starts))
    try:
        load_layouts(problem, state, range(len(starts)), starts)
        k = int(np.argmin(state.energy))
        return np.asarray(starts[k], dtype=np.int64), float(state.energy[k]), \
            AnnealStats(start_energies=state.energy.tolist())
    finally:
        state.close()


def _row_maxima(objective) -> bool:
    """True when the primary's first aggregate is a sum over rows of maxima over shards
    (``sync``): the aggregate the anchor seed is built for."""
    first = get_objective(objective).levels[0][0][1]
    return first.inner == "max" and first.over == "shards" and first.outer == "sum"


def _anchors_pay(split: dict) -> bool:
    """Whether to build the anchor seed, from the ``gap_split`` of a seed (the greedy's):
    when the seed sits above the bound by attention at least as much as by the expert
    excess. The anchor seed builds the attention structure and ignores routing; measured
    on the windows of scripts/bench_heuristic.py (docs/benchmarks.md), the greedy's split is
    0.40 / 0.06 % (attention / expert) on the N = 4096 window with uncorrelated routing,
    where the anchor seed's basin is 0.09 % lower, and 0.4-2.4 / 3.9-4.3 % on the default
    windows (N = 512-4096), where building it only took search time (0.05 % worse)."""
    return split["attention"] >= split["expert"]


def _preferred_start(names: list, starts: list, energies, found: np.ndarray, energy: float,
                     margin: float) -> tuple[np.ndarray, float, str]:
    """The search's start: the anchor seed when its energy is within ``margin`` (relative)
    of the best seed's, else the best seed. Its rows of like blocks are a basin the block
    search does not reach from the others (measured, docs/benchmarks.md: on the N = 4096
    ling-flash-like window with uncorrelated routing, 0.04 % above the greedy seed, 0.09 %
    below it after the 5-s search); on windows where it starts several per cent higher
    the best seed starts, and so does a warm start that scores best."""
    best_name = names[int(np.argmin(energies))] if energies else "best"
    # a warm start that scores best (the previous step's plan) stays the start
    if "anchors" in names and energies and best_name != "warm_start":
        k = names.index("anchors")
        if energies[k] <= energy + margin * abs(energy):
            return np.asarray(starts[k], dtype=np.int64), float(energies[k]), "anchors"
    return found, energy, best_name


def _arrange_after_search(problem: Problem, layout: np.ndarray, energy: float, options: dict,
                          search_stats: dict) -> tuple[np.ndarray, float]:
    """The searched layout with its blocks moved whole into the order the primary's first
    aggregate wants (:func:`rp_opt.packing.regroup.rearranged`; sync: rows of like blocks,
    the least sum of row maxima for these blocks; shard: equal shard totals), when that
    lowers the energy; both energies come from one fresh evaluation, so float noise does
    not decide. Off with ``regroup=False`` and for a sum of sums or a max of maxima, where
    every order is as good. Sets ``search_stats["arranged"]``."""
    first = problem.aggregates[0]
    inner, outer = first.inner, first.outer
    if options.get("regroup") is False or inner == outer:
        return layout, energy
    from .regroup import rearranged

    moved, moved_energy, energy_now = rearranged(problem, layout)
    search_stats["arranged"] = bool(moved_energy < energy_now)
    return (moved, moved_energy) if moved_energy < energy_now else (layout, energy)


def _refine_round(instance: Instance, objective, placement: Placement, problem: Problem, best: np.ndarray,
                  best_energy: float, deadline: float | None, *, seed: int, deterministic: bool, options: dict,
                  search_workers: int, rank_demand_seconds: float = 0.0) -> dict:
    """Refine the placement for the layout ``best``
    (:func:`rp_opt.placement.refine.refine_placement`, half of the time to ``deadline`` that
    the rank demand of the new placement, about ``rank_demand_seconds``, leaves), then
    search the layout again under the new placement. The new plan is adopted only when its
    exact energy is lower."""
    from ..cost import block_sums
    from ..placement.refine import refine_placement

    out: dict = {"stats": {}}
    cluster = instance.cluster
    layout = Layout(np.asarray(best, dtype=np.int64), problem.rows, cluster.dp)
    # weights 1: the total expert cost sum_b X_b, which also credits swaps that do not yet
    # lower the primary; summing a[i,l,e] over blocks takes a pass (0.3 s at N = 16384)
    block_demand = block_sums(layout, instance.window.demand, cluster.edp)             # [B, L, E]
    if deterministic:
        limit, sweeps = np.inf, int(options.get("refine_sweeps", 20))
    else:
        limit, sweeps = max(0.0, 0.5 * (deadline - time.perf_counter() - rank_demand_seconds)), None
    new_place, rstats = refine_placement(placement, block_demand, time_limit=limit, seed=seed, max_sweeps=sweeps)
    out["stats"] = {"swaps": rstats.swaps, "candidates": rstats.candidates, "sweeps": rstats.sweeps,
                    "seconds": rstats.seconds, "adopted": False}
    if rstats.swaps == 0:
        return out
    major = rank_demand_major(instance.window, new_place)
    new_problem = make_problem(instance, major, problem.rows, objective)
    evals = (options.get("search_evaluations") or 200) if deterministic else options.get("search_evaluations")
    found, energy, search_stats = search_layout(
        new_problem, best, deadline=deadline, max_evaluations=evals, seed=seed + 7919,
        cap=options.get("search_cap"), surrogate=float(options.get("surrogate", 0.05)),
        screen=options.get("search_screen", 32), workers=search_workers)
    found, energy = _arrange_after_search(new_problem, found, energy, options, search_stats)
    out["stats"].update(energy_before=best_energy, energy_after=energy, search=search_stats)
    if energy < best_energy:
        out.update(adopted=True, placement=new_place, major=major, problem=new_problem, layout=found, energy=energy)
    out["stats"]["adopted"] = bool(out.get("adopted"))
    return out


def strong_bounds(instance: Instance, num_rows: int, load: np.ndarray | None = None, base=None,
                  hidden: bool = True, every_row_excess: float | None = None):
    """:class:`rp_opt.cost.CostBounds` valid for every placement, with the expert total
    sum_{r,g} X >= gamma sum_l LB_l where LB_l is the pigeonhole bound on the best max rank
    load of layer l (:func:`rp_opt.placement.placement_lower_bound`, >= MODEL.md's
    max(max_e load, sum_e load / P)), since sum_{r,g} max_p W[r,g,l,p] >= max_p L[l,p]
    (Eq. 4) holds for whatever placement the plan uses; with ``hidden``, the row excess
    for every placement too (:func:`rp_opt.cost.every_placement_row_excess`: the charge
    and the excess of the blocks that cannot hide it), or ``every_row_excess`` when an
    earlier call for this window and R computed it (it depends on no placement)."""

    from ..cost import every_placement_row_excess
    from ..placement import placement_lower_bound

    base = cost_bounds(instance, num_rows) if base is None else base
    load = instance.window.expert_load() if load is None else load
    lb = placement_lower_bound(load, instance.cluster.ep)
    expert_total = instance.cost.gamma * float(np.sum(lb))
    row_excess = base.row_excess
    if hidden:
        if every_row_excess is None:
            every_row_excess = every_placement_row_excess(instance, num_rows, base.sample_attention, load)
        row_excess = max(row_excess, every_row_excess)
    return replace(base, expert_total=max(base.expert_total, expert_total), row_excess=row_excess)


def window_bound(instance: Instance, num_rows: int, objective) -> float:
    """The primary's bound for every placement and layout of ``num_rows`` rows with no time
    limit: :func:`strong_bounds`, with the row excess for every placement where the primary
    takes row maxima (a plan's report adds that part only within its budget)."""
    base = cost_bounds(instance, num_rows)
    return strong_bounds(instance, num_rows, base=base, hidden=base.uses_row_maxima(objective)).objective(objective)[0]


def hidden_seconds(instance: Instance) -> float:
    """Estimated seconds of :func:`rp_opt.cost.every_placement_row_excess`: a few passes
    over a[i,l,e] and some work per layer and expert (on the 2-core machine 0.22, 0.35,
    1.1 and 4.7 s for N = 512, 1024, 4096 and 16384 with L x E = 48 x 256; 0.09 s for
    512 x 8 x 256)."""
    window = instance.window
    return window.num_layers * window.num_experts * (1e-5 + 2.5e-8 * window.num_samples)


def report_bounds(instance: Instance, placement: Placement, num_rows: int, objective, demand_by_rank,
                  baseline: bool = True, ffd: Layout | None = None, load: np.ndarray | None = None,
                  hidden_budget: float | None = None, every_row_excess: float | None = None) -> dict:
    """Lower bounds on the primary (and, with ``baseline``, the baseline's score).

    ``lower_bound`` holds for every placement and layout of ``num_rows`` rows (MODEL.md
    analytic bounds with the placement-free expert bound strengthened by the pigeonhole
    bound of :func:`rp_opt.placement.placement_lower_bound`, and for a primary of row
    maxima the row excess for every placement where :func:`hidden_seconds` fits
    ``hidden_budget`` seconds, always when None: ``hidden_bound``, None where it does not
    apply; ``every_row_excess`` is that part, None where not computed, and taken as given
    when the caller passes it from an earlier call: a refined placement needs no new one);
    ``placement_bound`` holds
    only for this placement (the packing's own gap); ``lower_bounds`` is the
    :class:`rp_opt.cost.CostBounds` behind ``lower_bound`` (for its gap split). Reuses ``demand_by_rank`` and
    ``load`` (= ``window.expert_load()``) instead of recomputing them.
    """

    out: dict = {}
    objective = get_objective(objective)
    if load is not None and demand_by_rank.ndim == 3 and demand_by_rank.strides[1] < demand_by_rank.strides[2]:
        # the rank-major demand's [N, L, P] view: the bounds from it and the load (no pass over a)
        analytic = cost_bounds(instance, num_rows, load=load, tokens=demand_by_rank.sum(axis=2, dtype=np.int64))
    else:
        analytic = cost_bounds(instance, num_rows)
    # (only a primary of row maxima takes it, and only with a full-length sample it is > 0)
    applies = analytic.row_charge > 0 and analytic.uses_row_maxima(objective)
    hidden = applies and (every_row_excess is not None or hidden_budget is None
                          or hidden_seconds(instance) <= hidden_budget)
    strong = strong_bounds(instance, num_rows, load, analytic, hidden=hidden, every_row_excess=every_row_excess)
    out["hidden_bound"] = bool(hidden) if applies else None
    out["every_row_excess"] = strong.row_excess if hidden else None
    out["analytic_bounds"] = analytic
    out["analytic_bound"] = analytic.objective(objective)[0]
    strong_value = strong.objective(objective)[0]
    out["lower_bound"] = max(out["analytic_bound"], strong_value)
    out["lower_bounds"] = strong if strong_value >= out["analytic_bound"] else analytic
    # this placement: Eq. 4 with its aggregate rank loads, and each sample's own peak
    gamma = instance.cost.gamma
    rank_loads = demand_by_rank.sum(axis=0)                                # [L, P]
    own = replace(analytic, expert_total=gamma * float(rank_loads.max(axis=1).sum()),
                  sample_expert=gamma * demand_by_rank.max(axis=2).sum(axis=1).astype(np.float64),
                  row_excess=max(strong.row_excess,   # (every placement's holds for this one too)
                                 placement_row_excess(instance, num_rows, demand_by_rank, analytic.sample_attention,
                                                      rank_loads)))
    out["placement_bound"] = own.objective(objective)[0]
    if baseline:
        out.update(baseline_score(instance, num_rows, objective, ffd))
    return out


def baseline_score(instance: Instance, num_rows: int, objective, ffd: Layout | None = None) -> dict:
    """Score of the baseline plan identity placement + ffd packing (for the report)."""
    from ..cost import score as full_score
    from .baseline import pack

    out: dict = {}
    try:
        layout = ffd if ffd is not None else pack(instance, "ffd", num_rows)[0]
        identity = Placement.identity(instance.window.num_layers, instance.window.num_experts, instance.cluster.ep)
        out["baseline_score"] = list(full_score(instance, identity, layout, objective))
        out["baseline_rows"] = layout.num_rows
    except InputError as exc:
        out["baseline_error"] = str(exc)
    return out
