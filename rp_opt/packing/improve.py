"""Vectorised best-improvement search between pairs of (row, shard) blocks.

A *block* is one (row, shard) pair b = r*G + g: its D/G cells share the expert cost
X[b] = gamma sum_l max_p W[b,l,p] and the attention cost A[b] = sum_s n_s max_{d in g} (...).
For two blocks b1 != b2 the search evaluates EVERY move between them at once with numpy:

- swaps (i in b1, j in b2): W[b1] - dem_i + dem_j and W[b2] + dem_i - dem_j for all n1 x n2
  pairs as one [n1, n2, P, L] array (max over P, sum over L), the attention of the two
  touched cells per stage against the maximum of the shard's other cells, capacity of both
  cells as a mask;
- relocations of i in b1 to each cell of b2 (and of j in b2 to each cell of b1): the
  source cell keeps a sample, capacity and the per-cell limit m of the target.

The objective change of every candidate is exact (:func:`pair_delta`): the lexicographic
energy of :mod:`.state` with only the two blocks' entries of A and X replaced, computed
from scalars of the untouched rows / shards (O(1) per candidate and aggregate). The best
candidate is applied when it lowers the energy. Blocks are chosen where the objective is
decided: for ``sync`` the block holding each row's maximum against any other block (a
block of the same row fixes the row's balance across shards; a block of another row
trades expert peaks between rows, which is where routing correlation leaves headroom).
Block pairs evaluated without success are remembered until either row changes.

One evaluation costs about n1 n2 L P element operations (32 x 32 x 384 ~ 4e5 at the
production window): hundreds to thousands of block pairs a second on one core.

Screening (``screen=K``): the new X of a block after a swap is at least the new load of
the rank that is the block's busiest now, summed over layers, which is an outer sum of
two per-sample vectors (O(n1 + n2) L + n1 n2 instead of n1 n2 L P). The energy does not
decrease when any A or X entry grows, so the swap deltas with these bounds are lower
bounds; only the K swaps of least bound are evaluated exactly (relocations always are).
The move applied is always exact; the best swap may be missed when its bound is not
among the K least.

Two cores: :class:`ParallelSearch` splits the rows into disjoint groups per round, one
process per group (forked, layouts in shared memory), and merges the groups' layouts.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass, field, replace

import numpy as np

from .state import Problem, State, Term, load_layouts, settled
from .workers import new_segment, release, stop_workers, worker_tasks


def _groups(problem: Problem, axis: int, block: int) -> tuple[int, int]:
    """(group, position) of ``block`` in the [R, G] matrix reduced over ``axis``."""
    r, g = divmod(block, problem.shards)
    return (r, g) if axis == 1 else (g, r)


def pair_delta(problem: Problem, attention: np.ndarray, expert: np.ndarray, b1: int, b2: int,
               a1: np.ndarray, x1: np.ndarray, a2: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """[M] change of the energy (:meth:`Problem.energy`) when A[b1], X[b1], A[b2], X[b2]
    become a1, x1, a2, x2 (b1 != b2); every other entry stays.

    Each aggregate ``outer_groups inner_within m`` (m = wa A + wx X as [R, G]) changes in at
    most two groups: the new group values come from the group's untouched entries (a
    scalar) and the new entries; the outer reduction from the untouched groups (a scalar).
    The old value is computed the same way, so the difference has no cancellation beyond
    one rounding of each level.
    """
    total = np.zeros(np.shape(a1))
    for term in problem.aggregates:
        wa, wx, inner, axis, outer, coef = term.attention, term.expert, term.inner, term.axis, term.outer, term.coef
        if coef == 0.0:
            continue
        m = (wa * attention + wx * expert).reshape(problem.rows, problem.shards)
        mg = m if axis == 1 else m.T                     # [groups, positions]
        v1 = wa * a1 + wx * x1
        v2 = wa * a2 + wx * x2
        (g1, q1), (g2, q2) = _groups(problem, axis, b1), _groups(problem, axis, b2)
        group_val = mg.sum(axis=1) if inner == "sum" else mg.max(axis=1)

        def group_new(g, drop, values):
            # the group's value with the entries ``drop`` replaced by ``values`` (masking, not
            # np.delete: this runs for every evaluated block pair)
            if inner == "sum":
                return float(mg[g].sum() - mg[g][drop].sum()) + sum(values)
            out = values[0]
            for v in values[1:]:
                out = np.maximum(out, v)
            if mg.shape[1] > len(drop):
                row = mg[g].copy()
                row[drop] = -np.inf
                out = np.maximum(out, row.max())
            return out

        if g1 == g2:
            changed, news = [g1], [group_new(g1, [q1, q2], [v1, v2])]
        else:
            changed, news = [g1, g2], [group_new(g1, [q1], [v1]), group_new(g2, [q2], [v2])]
        old = group_val[changed]
        if outer == "sum":
            delta = sum(news) - old.sum()
        else:
            if group_val.size > len(changed):
                rest = group_val.copy()
                rest[changed] = -np.inf
                base = rest.max()
            else:
                base = -np.inf
            new = news[0] if len(news) == 1 else np.maximum(news[0], news[1])
            delta = np.maximum(new, base) - max(float(old.max()), base)
        total += coef * delta
    return total


@dataclass
class SearchStats:
    evaluations: int = 0        # block pairs evaluated
    candidates: int = 0         # moves evaluated (swaps + relocations)
    improvements: int = 0       # moves applied
    seconds: float = 0.0
    local_optimum: bool = False
    history: list = field(default_factory=list)


class BlockSearch:
    """Best-improvement block-pair search on one layout (a one-replica :class:`State`).

    Parameters
    ----------
    problem
        The kernel's :class:`Problem` (:func:`rp_opt.packing.state.make_problem`).
    cell_of
        Starting layout (cell of every sample), valid for R* rows.
    """

    def __init__(self, problem: Problem, cell_of: np.ndarray, cap: int | None = None, seed=0,
                 screen: int | None = None):
        self.p = p = problem
        self.cap = cap
        self.screen = screen
        self.allowed = None          # bool [blocks]: search only pairs of these blocks (a worker's rows)
        self.rng = np.random.default_rng(seed)
        self.subsampled = False
        self.state = State(problem, 1)
        load_layouts(problem, self.state, [0], [cell_of])
        self.work = p.alpha[:, None] * p.lengths[None, :] + p.beta[:, None] * p.work[None, :]   # [S, N]
        self.pair_of_sample = p.pair_of_cell[self.state.cell_of[0]].astype(np.int64)
        self.row_version = np.zeros(p.rows, dtype=np.int64)
        self.clean: dict = {}
        k = p.per_shard
        self._off = ~np.eye(k, dtype=bool)           # [k, k]: other cells of the shard

    # -- evaluation -----------------------------------------------------------------

    def _shard_work(self, b: int):
        """Per-stage work of the block's cells [S, k] and the max over the other cells [S, k]."""
        p, st = self.p, self.state
        cells = p.cells_of_pair[b]
        w = p.alpha[:, None] * st.tokens[0, cells][None] + p.beta[:, None] * st.qwork[0, cells][None]
        if p.per_shard == 1:
            return cells, w, np.full_like(w, -np.inf)
        excl = np.where(self._off[None], w[:, None, :], -np.inf).max(axis=2)
        return cells, w, excl

    def evaluate(self, b1: int, b2: int):
        """The best move between blocks b1 and b2: (delta energy, move) or (inf, None)."""
        p, st = self.p, self.state
        cell_of, tokens, count = st.cell_of[0], st.tokens[0], st.count[0]
        I = np.flatnonzero(self.pair_of_sample == b1)
        J = np.flatnonzero(self.pair_of_sample == b2)
        self.subsampled = False
        if self.cap is not None and max(I.size, J.size) > self.cap:
            # bounded work per block pair: a random subset of each large block's samples
            self.subsampled = True
            if I.size > self.cap:
                I = np.sort(self.rng.choice(I, self.cap, replace=False))
            if J.size > self.cap:
                J = np.sort(self.rng.choice(J, self.cap, replace=False))
        ci, cj = cell_of[I].astype(np.int64), cell_of[J].astype(np.int64)
        li, lj = ci % p.per_shard, cj % p.per_shard
        cells1, w1, ex1 = self._shard_work(b1)
        cells2, w2, ex2 = self._shard_work(b2)
        TI, TJ = p.lengths[I], p.lengths[J]
        wI, wJ = self.work[:, I], self.work[:, J]                       # [S, n]
        n1, n2, shape = I.size, J.size, (p.num_ranks, p.num_layers)
        DI, DJ = p.demand[I], p.demand[J]
        W1, W2 = st.loads[0, b1], st.loads[0, b2]
        gamma, layers = p.gamma, p.layers

        # which moves keep every constraint, first: only those are costed (capacity is tight
        # in production windows, where most swaps break it and many block pairs have no
        # feasible move at all; on the N = 4096 window 871 of 2001 pairs had none)
        # swaps (i, j): cell ci gets T_j - T_i, cell cj the opposite
        dT = TJ[None, :] - TI[:, None]
        ok_s = (tokens[ci][:, None] + dT <= p.capacity) & (tokens[cj][None, :] - dT <= p.capacity)
        # relocations i -> cell of b2 [n1, k] and j -> cell of b1 [n2, k]
        k = p.per_shard
        limit = p.limit if p.limit is not None else np.iinfo(np.int64).max
        ok_r1 = (count[ci] > 1)[:, None] & (tokens[cells2][None] + TI[:, None] <= p.capacity) \
            & (count[cells2] < limit)[None]
        ok_r2 = (count[cj] > 1)[:, None] & (tokens[cells1][None] + TJ[:, None] <= p.capacity) \
            & (count[cells1] < limit)[None]
        self.last_candidates = ok_s.size + ok_r1.size + ok_r2.size
        if not (ok_s.any() or ok_r1.any() or ok_r2.any()):
            return np.inf, None
        si, sj = np.nonzero(ok_s)                                        # feasible swaps, i-major
        ns = si.size
        dw = wJ[:, sj] - wI[:, si]                                       # [S, ns]
        a1_s = layers @ np.maximum(ex1[:, li[si]], w1[:, li[si]] + dw)
        a2_s = layers @ np.maximum(ex2[:, lj[sj]], w2[:, lj[sj]] - dw)
        U1 = W1[None] - DI                                              # [n1, PL]
        U2 = W2[None] - DJ                                              # [n2, PL]
        screened = self.screen is not None and ns > self.screen
        if screened:
            # lower bounds of the swaps' X: the new max over ranks of layer l is at least the
            # new load of the rank that is the block's busiest now (p*_l), which is linear in
            # the two samples: X1 >= gamma (sum_l W1[p*_l, l] - s_i + s_j), an outer sum
            x1_s, x2_s = (x[si * n2 + sj] for x in self._swap_bounds(W1, W2, DI, DJ))
        else:
            x1_s = gamma * (U1[si] + DJ[sj]).reshape(ns, *shape).max(axis=1).sum(axis=1)
            x2_s = gamma * (U2[sj] + DI[si]).reshape(ns, *shape).max(axis=1).sum(axis=1)

        a1_r1 = layers @ np.maximum(ex1[:, li], w1[:, li] - wI)                                   # [n1]
        a2_r1 = layers @ np.maximum(ex2[:, None, :], w2[:, None, :] + wI[:, :, None]).reshape(len(layers), -1)
        x1_r1 = gamma * U1.reshape(n1, *shape).max(axis=1).sum(axis=1)
        x2_r1 = gamma * (W2[None] + DI).reshape(n1, *shape).max(axis=1).sum(axis=1)
        a2_r2 = layers @ np.maximum(ex2[:, lj], w2[:, lj] - wJ)                                   # [n2]
        a1_r2 = layers @ np.maximum(ex1[:, None, :], w1[:, None, :] + wJ[:, :, None]).reshape(len(layers), -1)
        x2_r2 = gamma * U2.reshape(n2, *shape).max(axis=1).sum(axis=1)
        x1_r2 = gamma * (W1[None] + DJ).reshape(n2, *shape).max(axis=1).sum(axis=1)

        a1 = np.concatenate([a1_s, np.repeat(a1_r1, k), a1_r2])
        a2 = np.concatenate([a2_s, a2_r1, np.repeat(a2_r2, k)])
        x1 = np.concatenate([x1_s, np.repeat(x1_r1, k), np.repeat(x1_r2, k)])
        x2 = np.concatenate([x2_s, np.repeat(x2_r1, k), np.repeat(x2_r2, k)])
        ok = np.concatenate([np.ones(ns, dtype=bool), ok_r1.ravel(), ok_r2.ravel()])
        delta = pair_delta(p, st.attention[0], st.expert[0], b1, b2, a1, x1, a2, x2)
        delta = np.where(ok, delta, np.inf)
        if screened:
            # the swap deltas so far are lower bounds (the energy is non-decreasing in every
            # A, X entry): evaluate exactly the ``screen`` swaps of least bound; a swap left
            # out cannot beat the best exact move when its bound is not below it
            top = np.argpartition(delta[:ns], self.screen - 1)[:self.screen]
            top = top[np.isfinite(delta[top])]
            if top.size:
                ii, jj = si[top], sj[top]
                x1e = gamma * (U1[ii] + DJ[jj]).reshape(top.size, *shape).max(axis=1).sum(axis=1)
                x2e = gamma * (U2[jj] + DI[ii]).reshape(top.size, *shape).max(axis=1).sum(axis=1)
                exact = pair_delta(p, st.attention[0], st.expert[0], b1, b2, a1[top], x1e, a2[top], x2e)
                delta[:ns] = np.inf
                delta[top] = exact
            else:
                delta[:ns] = np.inf
        best = int(np.argmin(delta))
        if not np.isfinite(delta[best]):
            return np.inf, None
        if best < ns:
            move = ("swap", int(I[si[best]]), int(J[sj[best]]), None)
        elif best < ns + n1 * k:
            q = best - ns
            move = ("move", int(I[q // k]), None, int(cells2[q % k]))
        else:
            q = best - ns - n1 * k
            move = ("move", int(J[q // k]), None, int(cells1[q % k]))
        return float(delta[best]), move

    def _swap_bounds(self, W1, W2, DI, DJ):
        """[n1*n2] lower bounds of X[b1], X[b2] after every swap (i in b1, j in b2), from the
        busiest rank p*_l of each layer of each block: O((n1 + n2) L + n1 n2)."""
        p = self.p
        num_ranks, num_layers = p.num_ranks, p.num_layers
        layer = np.arange(num_layers)
        out = []
        for W, out_of, into in ((W1, DI, DJ), (W2, DJ, DI)):
            top = W.reshape(num_ranks, num_layers).argmax(axis=0) * num_layers + layer   # flat p*_l
            base = float(W[top].sum())
            s_out = out_of[:, top].sum(axis=1, dtype=np.int64)
            s_in = into[:, top].sum(axis=1, dtype=np.int64)
            out.append((base, s_out, s_in))
        (b1, o1, i1), (b2, o2, i2) = out
        x1 = p.gamma * (b1 - o1[:, None] + i1[None, :]).ravel()       # i leaves b1, j joins
        x2 = p.gamma * (b2 - o2[None, :] + i2[:, None]).ravel()       # j leaves b2, i joins
        return x1, x2

    # -- applying a move ------------------------------------------------------------------

    def apply(self, move) -> None:
        """Apply ("swap", i, j, None) or ("move", i, None, target cell); update the state
        incrementally (cells, loads of the two blocks, A, X of the two blocks, energy)."""
        p, st = self.p, self.state
        kind, i, j, target = move
        cell_of = st.cell_of[0]
        c1 = int(cell_of[i])
        c2 = int(cell_of[j]) if kind == "swap" else int(target)
        b1, b2 = int(p.pair_of_cell[c1]), int(p.pair_of_cell[c2])
        dem = p.demand[i].astype(np.int32)
        d_tok, d_q = p.lengths[i], p.work[i]
        if kind == "swap":
            dem = dem - p.demand[j]
            d_tok, d_q = d_tok - p.lengths[j], d_q - p.work[j]
            cell_of[j] = c1
            self.pair_of_sample[j] = b1
        else:
            st.count[0, c1] -= 1
            st.count[0, c2] += 1
        cell_of[i] = c2
        self.pair_of_sample[i] = b2
        st.tokens[0, c1] -= d_tok
        st.tokens[0, c2] += d_tok
        st.qwork[0, c1] -= d_q
        st.qwork[0, c2] += d_q
        st.loads[0, b1] -= dem
        st.loads[0, b2] += dem
        for b in {b1, b2}:
            st.expert[0, b] = p.gamma * st.loads[0, b].reshape(p.num_ranks, p.num_layers).max(axis=0).sum()
            cells = p.cells_of_pair[b]
            t, q = st.tokens[0, cells], st.qwork[0, cells]
            st.attention[0, b] = p.layers @ (p.alpha[:, None] * t[None] + p.beta[:, None] * q[None]).max(axis=1)
        st.energy[0] = p.energy(st.attention[:1], st.expert[:1])[0]
        self.row_version[b1 // p.shards] += 1
        self.row_version[b2 // p.shards] += 1

    # -- the search -------------------------------------------------------------------------

    def _blocks(self) -> np.ndarray:
        return np.arange(self.p.num_pairs) if self.allowed is None else np.flatnonzero(self.allowed)

    def critical_blocks(self) -> np.ndarray:
        """Blocks that decide the primary: each group's maximum when the primary's first
        aggregate has an inner max (sync: every row's worst shard), all blocks of the
        worst group when its outer is a max (shard: the slowest shard), else all blocks."""
        p, st = self.p, self.state
        first = p.aggregates[0]             # a Term: the primary's first aggregate
        inner, axis, outer = first.inner, first.axis, first.outer
        m = (first.attention * st.attention[0] + first.expert * st.expert[0]).reshape(p.rows, p.shards)
        blocks = np.arange(p.num_pairs).reshape(p.rows, p.shards)
        mg, bg = (m, blocks) if axis == 1 else (m.T, blocks.T)
        if inner == "max":
            crit = bg[np.arange(bg.shape[0]), mg.argmax(axis=1)]
            crit = crit[np.argsort(-mg.max(axis=1), kind="stable")]
        elif outer == "max":
            g = int(np.argmax(mg.sum(axis=1)))
            crit = bg[g][np.argsort(-mg[g], kind="stable")]
        else:
            crit = np.argsort(-m.ravel(), kind="stable")
        return crit if self.allowed is None else crit[self.allowed[crit]]

    def _key(self, b1: int, b2: int):
        g = self.p.shards
        return (self.row_version[b1 // g], self.row_version[b2 // g])

    def try_pair(self, b1: int, b2: int, stats: SearchStats, tol: float) -> bool:
        key = (min(b1, b2), max(b1, b2))
        if self.clean.get(key) == self._key(b1, b2):
            return False
        delta, move = self.evaluate(b1, b2)
        stats.evaluations += 1
        stats.candidates += self.last_candidates
        if move is not None and delta < -tol:
            self.apply(move)
            stats.improvements += 1
            return True
        if not self.subsampled:
            self.clean[key] = self._key(b1, b2)
        return False

    def sweep(self, deadline: float, rng: np.random.Generator, max_evaluations: int | None = None,
              stats: SearchStats | None = None) -> SearchStats:
        """First-improvement passes over ALL block pairs in random order (best move within
        each pair) until a pass improves nothing, ``deadline`` or ``max_evaluations``."""
        stats = SearchStats() if stats is None else stats
        started = time.perf_counter()
        blocks = self._blocks()
        a, b = (blocks[x] for x in np.triu_indices(blocks.size, 1))
        while True:
            improved = False
            tol = 1e-15 * abs(float(self.state.energy[0])) + 1e-300
            for q in rng.permutation(a.size).tolist():
                if time.perf_counter() >= deadline or (max_evaluations is not None
                                                       and stats.evaluations >= max_evaluations):
                    stats.seconds += time.perf_counter() - started
                    return stats
                improved |= self.try_pair(int(a[q]), int(b[q]), stats, tol)
            if not improved:
                stats.local_optimum = True
                break
        stats.seconds += time.perf_counter() - started
        return stats

    def run(self, deadline: float, rng: np.random.Generator, same_row_share: float = 0.5,
            max_evaluations: int | None = None) -> SearchStats:
        """Improve until ``deadline`` (perf_counter), ``max_evaluations`` block pairs, or a
        local optimum (no critical block improves with any block, and no random block pair
        improves either). Returns the search statistics."""
        p, st = self.p, self.state
        stats = SearchStats()
        started = time.perf_counter()
        nb, g = p.num_pairs, p.shards
        allowed = np.ones(nb, dtype=bool) if self.allowed is None else self.allowed
        pool = np.flatnonzero(allowed)

        def out_of_budget():
            return time.perf_counter() >= deadline or (max_evaluations is not None
                                                       and stats.evaluations >= max_evaluations)

        while not out_of_budget():
            tol = 1e-15 * abs(float(st.energy[0])) + 1e-300
            improved = False
            for b1 in self.critical_blocks():
                b1 = int(b1)
                r1 = b1 // g
                # partners: the same row first (share), then every other block in random order
                same = [r1 * g + q for q in range(g) if r1 * g + q != b1 and allowed[r1 * g + q]]
                others = [b for b in rng.permutation(pool).tolist() if b // g != r1]
                if same and rng.random() < same_row_share:
                    order = list(rng.permutation(same)) + others
                else:
                    order = others + list(rng.permutation(same))
                for b2 in order:
                    if out_of_budget():
                        break
                    if self.try_pair(b1, int(b2), stats, tol):
                        improved = True
                        break
                if improved or out_of_budget():
                    break
            if improved:
                continue
            # no critical block improves: random non-critical pairs lower the later levels
            # (sum J), which makes room for the primary
            for _ in range(4 * pool.size if pool.size > 1 else 0):
                if out_of_budget():
                    break
                b1, b2 = (int(b) for b in rng.choice(pool, 2, replace=False))
                if self.try_pair(b1, b2, stats, tol):
                    improved = True
                    break
            if not improved:
                stats.local_optimum = not out_of_budget()
                break
        stats.seconds = time.perf_counter() - started
        return stats

    def layout(self) -> np.ndarray:
        return self.state.cell_of[0].astype(np.int64)

    def energy(self) -> float:
        return float(self.state.energy[0])

    def close(self):
        self.state.close()


# ---------------------------------------------------------------------------------------
# Two (or more) cores: disjoint row groups searched in parallel, merged every round
# ---------------------------------------------------------------------------------------

_SHARED = ("cell_of", "count", "tokens", "qwork", "loads", "attention", "expert")


def _adopt(search: BlockSearch, published: dict, owner_of_row: np.ndarray, me: int) -> None:
    """Copy into ``search`` the state of every row owned by another worker in the last
    round, from that worker's published state (cells and blocks of a row depend only on
    the samples of that row); rows that changed hands invalidate the clean-pair memo."""
    p, st = search.p, search.state
    cell_row = np.arange(p.num_cells) // p.slots
    block_row = np.arange(p.num_pairs) // p.shards
    for w in np.unique(owner_of_row).tolist():
        if w == me:
            continue
        rows = owner_of_row == w
        cells, blocks = rows[cell_row], rows[block_row]
        src = published[w]
        samples = rows[src["cell_of"] // p.slots]
        st.cell_of[0, samples] = src["cell_of"][samples]
        for name in ("count", "tokens", "qwork"):
            getattr(st, name)[0, cells] = src[name][cells]
        for name in ("loads", "attention", "expert"):
            getattr(st, name)[0, blocks] = src[name][blocks]
        search.row_version[rows] += 1
    search.pair_of_sample = p.pair_of_cell[st.cell_of[0]].astype(np.int64)


def _search_round(search: BlockSearch, problem: Problem, allowed: np.ndarray, phase: str, deadline: float,
                  max_evaluations: int | None, seed, previous: list, published: list, owner_of_row, me: int):
    """One worker's round: adopt the other workers' rows from ``previous`` (the states
    published in the last round), then the search restricted to pairs of the ``allowed``
    blocks under ``problem``; publish the state into ``published[me]``. The two lists are
    different buffers, so a worker that finishes early never overwrites a state another
    worker is still adopting."""
    if owner_of_row is not None:
        _adopt(search, previous, owner_of_row, me)
    if search.p is not problem:
        search.p = problem
        search.clean = {}
    st = search.state
    st.energy[0] = problem.energy(st.attention[:1], st.expert[:1])[0]
    search.allowed = allowed
    search.rng = np.random.default_rng((*seed, 1))
    rng = np.random.default_rng(seed)
    if phase == "sweep":
        stats = search.sweep(deadline, rng, max_evaluations)
    else:
        stats = search.run(deadline, rng, max_evaluations=max_evaluations)
    mine = published[me]
    for name in _SHARED:
        mine[name][...] = getattr(st, name)[0]
    return search.energy(), stats


def _search_worker(conn, search, problems, published, me):
    for allowed, phase, deadline, max_evaluations, seed, owner_of_row, write in worker_tasks(conn):
        conn.send(_search_round(search, problems[phase], allowed, phase, deadline, max_evaluations, seed,
                                published[1 - write], published[write], owner_of_row, me))


class ParallelSearch:
    """The block-pair search on ``workers`` processes (forked; states in shared memory).

    Every round splits the R rows at random into ``workers`` disjoint groups; worker w
    searches only block pairs inside its group (every move then stays inside the group's
    rows, so the groups' results merge into one valid layout: each sample takes its cell
    from the worker that owns its row). Each worker keeps its own incremental state
    between rounds and at the start of a round copies the rows the other workers owned
    from their published states (no full re-evaluation). For ``sync`` the primary
    sum_r max_g J and the secondary sum J are sums over rows, so the merged change is the
    sum of the workers' changes; for an objective that couples rows (``shard``: max over
    shards of sums over rows) the merge is checked: when one worker's own layout has a
    lower energy than the merge, that layout is kept (every worker adopts all its rows).
    A new random split each round lets every pair of rows meet. Deterministic for a seed
    and a worker count when rounds are bounded by evaluations instead of a deadline.

    Parameters
    ----------
    problems
        {"sweep": surrogate Problem, "run": exact Problem} (same window, rows, demand).
    start
        Starting layout.
    workers
        Processes (this one included).
    """

    def __init__(self, problems: dict, start: np.ndarray, workers: int, cap=None, screen=None):
        self.problems = problems
        self.workers = workers
        self.search, self._shm, self.published = None, [], [[], []]
        self.conns, self.procs = [], []
        self.last = 0  # the buffer holding the latest round's states
        self.owner_of_row = None
        try:
            p = problems["run"]
            self.search = BlockSearch(p, start, cap=cap, screen=screen)
            st = self.search.state
            # two buffers of published states: round k writes buffer k mod 2 and reads the other
            for buffer in self.published:
                for _ in range(workers):
                    arrays = {}
                    for name in _SHARED:
                        like = getattr(st, name)[0]
                        shm = new_segment(like.nbytes)
                        self._shm.append(shm)
                        arrays[name] = np.ndarray(like.shape, dtype=like.dtype, buffer=shm.buf)
                        arrays[name][...] = like
                    buffer.append(arrays)
            ctx = mp.get_context("fork")
            for w in range(1, workers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_search_worker, args=(child, self.search, problems, self.published, w),
                                   daemon=True)
                proc.start()
                child.close()
                self.conns.append(parent)
                self.procs.append(proc)
        except BaseException:  # Ctrl-C or no memory half way: stop what started, free what was made
            self.close()
            raise

    @property
    def current(self) -> np.ndarray:
        """The merged layout after the last round (cell of every sample)."""
        latest = self.published[self.last]
        if self.owner_of_row is None:
            return latest[0]["cell_of"].astype(np.int64)
        p = self.problems["run"]
        out = latest[0]["cell_of"].astype(np.int64)
        for w in range(1, self.workers):
            cells = latest[w]["cell_of"]
            mine = self.owner_of_row[cells // p.slots] == w
            out[mine] = cells[mine]
        return out

    def round(self, phase: str, deadline: float, max_evaluations: int | None, seed, stats: SearchStats) -> float:
        """One round: split rows, search the groups in parallel, merge. Returns the energy
        (under ``phase``'s problem) of the layout kept (:attr:`current`)."""
        p = self.problems[phase]
        seed = tuple(np.atleast_1d(seed).tolist())
        rng = np.random.default_rng(seed)
        group_of_row = np.empty(p.rows, dtype=np.int64)
        group_of_row[rng.permutation(p.rows)] = np.arange(p.rows) % self.workers
        group_of_block = np.repeat(group_of_row, p.shards)
        per_worker = None if max_evaluations is None else max(1, max_evaluations // self.workers)
        write = 1 - self.last
        for w, conn in enumerate(self.conns, start=1):
            conn.send((group_of_block == w, phase, deadline, per_worker, (*seed, w), self.owner_of_row, write))
        energy, st = _search_round(self.search, p, group_of_block == 0, phase, deadline, per_worker, (*seed, 0),
                                   self.published[self.last], self.published[write], self.owner_of_row, 0)
        energies, parts = [energy], [st]
        for conn in self.conns:
            e, s = conn.recv()
            energies.append(e)
            parts.append(s)
        for s in parts:
            stats.evaluations += s.evaluations
            stats.candidates += s.candidates
            stats.improvements += s.improvements
        # A and X of a block depend only on its cells, which come from the block's owner
        blocks = np.arange(p.num_pairs)
        self.last = write
        merged_a = np.stack([pub["attention"] for pub in self.published[write]])[group_of_block, blocks]
        merged_x = np.stack([pub["expert"] for pub in self.published[write]])[group_of_block, blocks]
        merged = float(p.energy(merged_a[None], merged_x[None])[0])
        best = int(np.argmin(energies))
        if energies[best] < merged:
            # rows are coupled (e.g. ``shard``) and one worker's own layout is better
            group_of_row[:] = best
            merged = energies[best]
        self.owner_of_row = group_of_row
        stats.local_optimum = all(s.local_optimum for s in parts)
        return merged

    def close(self):
        """Stop the workers and free the shared memory, even when Ctrl-C comes in between
        (it is raised again at the end)."""
        try:
            stop_workers(self.conns, self.procs)
        finally:
            try:
                if self.search is not None:
                    self.search.close()
            finally:
                self.published = []
                release(self._shm)


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
                        per_round = None if budget is None else min(budget - st.evaluations,
                                                                    round_evaluations * workers)
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


