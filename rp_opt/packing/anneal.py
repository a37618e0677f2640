"""Population annealing over layouts for a fixed placement.

A population of K replicas (layouts with R*·D non-empty cells) runs Metropolis steps of
moves that keep every constraint -- relocate one sample to another cell (capacity, the
per-cell limit m, the source cell keeps a sample) or swap two samples of different cells
(capacity of both) -- at a temperature that falls geometrically; after every temperature
step the replicas are resampled by their Boltzmann weights exp(-(1/T' - 1/T) E), E the
scalar energy of :mod:`.state`. The production heuristic (:mod:`.heuristic`) runs it to
leave the local optima of the block-pair search.

Incremental evaluation
----------------------
A move touches at most two cells c1, c2 and so two (row, shard) pairs p1, p2. A proposal
computes only W[p1] -+ dem, its per-layer maxima, X[p1], X[p2] (O(L P) each), and A[p1],
A[p2] from the D/G slots of the two shards (O(S D/G)); the objective is then reduced from
the R x G matrices A, X with the two entries replaced (O(R G), independent of N, L, E).
Never a full rescore per move.

Parallelism and the GPU seam
----------------------------
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
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass

import numpy as np

from ..stop import MaxIterations, MaxSeconds, StoppingCriterion
from .state import Problem, State, load_layouts
from .workers import stop_workers, worker_tasks


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
    return _metropolis(problem, state, k0, k1, temperature, steps, rng, candidates)[0]


def _metropolis(problem: Problem, state: State, k0: int, k1: int, temperature: float, steps: int,
                rng: np.random.Generator, candidates: int, deadline: float | None = None) -> tuple[int, int]:
    """:func:`metropolis_steps`, stopping before a step that would start after ``deadline``
    (a ``time.perf_counter()`` value; None: no deadline). Returns (accepted moves, steps
    run): a time-limited anneal keeps its limit even when one temperature's steps would
    take longer (``steps_per_temperature`` and ``candidates`` are the caller's)."""
    kb = k1 - k0
    accepted = 0
    for step in range(steps):
        if deadline is not None and time.perf_counter() >= deadline:
            return accepted, step
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
    return accepted, steps



def _worker_loop(conn, problem, state, k0, k1):
    for temperature, steps, entropy, candidates, deadline in worker_tasks(conn):
        rng = np.random.default_rng(entropy)
        conn.send(_metropolis(problem, state, k0, k1, temperature, steps, rng, candidates, deadline))




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

    def run(self, temperature: float, steps: int, seed: int, step_index: int, candidates: int,
            deadline: float | None = None) -> tuple[int, int]:
        """One temperature: ``steps`` Metropolis steps on every block (fewer past
        ``deadline``). Returns (accepted moves, the most steps a block ran)."""
        for b, conn in enumerate(self.conns, start=1):
            conn.send((temperature, steps, (seed, step_index, b), candidates, deadline))
        k0, k1 = self.blocks[0]
        accepted, ran = _metropolis(self.problem, self.state, k0, k1, temperature, steps,
                                    np.random.default_rng((seed, step_index, 0)), candidates, deadline)
        for conn in self.conns:
            more, theirs = conn.recv()
            accepted, ran = accepted + more, max(ran, theirs)
        return accepted, ran

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
    ``stop`` is checked before every temperature step with the best energy; a
    ``time_limit`` also ends the steps of a temperature when it runs out. Ctrl-C
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
        deadline = None if time_limit is None else started + time_limit
        try:
            # checked before every step, so MaxIterations(N) runs N steps (the schedule's N)
            while not stop(best_energy) and (deadline is None or time.perf_counter() < deadline):
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
                accepted, ran = pool.run(temp, steps_per_temperature, seed, step, candidates, deadline)
                stats.accepted += accepted
                stats.steps += ran
                stats.proposals += ran * replicas * candidates
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


