"""Tests of the R* certifier (rp_opt.rows) and ``rp-opt certify``."""

from __future__ import annotations

import json
import os
import time

import highspy
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rp_opt import rows
from rp_opt.check import check_plan
from rp_opt.cli import main
from rp_opt.io import save_instance
from rp_opt.errors import InputError
from rp_opt.rows import arcflow, certify_bins, certify_rows, read_bpplib, rounding
from rp_opt.rows.bounds import cardinality_bound, item_count_bound, l1_bound, l2_bound
from rp_opt.rows.heuristics import (expand_bins, first_fit_decreasing, minimum_bin_slack, packing_violation,
                                   worst_fit_decreasing)
from rp_opt.solution import Placement
from rp_opt.window import Cluster, CostModel, Instance, Stage, Window

def _bpplib_root() -> str:
    """The shared BPPLIB folder next to the repository when present, else the CI subset
    vendored in tests/data/bpplib (so a clean clone runs the check too)."""
    here = os.path.dirname(os.path.abspath(__file__))
    shared = os.path.join(os.path.dirname(here), "..", "shared", "bpplib")
    return os.environ.get("RP_OPT_BPPLIB") or (shared if os.path.isdir(shared)
                                               else os.path.join(here, "data", "bpplib"))


BPPLIB = _bpplib_root()


def make_instance(lengths, dp=1, capacity=10, m=None) -> Instance:
    """A window of the given lengths with trivial routing (1 layer, 1 expert) and cost."""
    lengths = np.asarray(lengths, dtype=np.int64)
    window = Window(lengths, np.zeros((lengths.size, 1, 1), dtype=np.uint16), 1)
    cost = CostModel((Stage("attn", 1, 1.0, 0.0),), 1.0)
    return Instance(window, Cluster(dp, 1, 1, capacity, m), cost)


def assert_witness(instance: Instance, cert) -> None:
    """The witness passes the independent checker with exactly upper_bound rows."""
    assert cert.witness is not None
    placement = Placement.identity(1, 1, 1)
    report = check_plan(instance, placement.to_list(), cert.witness.to_rows(), num_rows=cert.upper_bound)
    assert report.valid, report.violations
    assert cert.witness.num_rows == cert.upper_bound


def brute_force_rows(lengths, capacity, dp, m):
    """Least R with a partition into exactly R*D blocks within capacity and m (None: none)."""
    n = len(lengths)
    counts = set()

    def rec(i, loads, sizes):
        if i == n:
            counts.add(len(loads))
            return
        for b in range(len(loads)):
            if loads[b] + lengths[i] <= capacity and (m is None or sizes[b] < m):
                loads[b] += lengths[i]; sizes[b] += 1
                rec(i + 1, loads, sizes)
                loads[b] -= lengths[i]; sizes[b] -= 1
        loads.append(lengths[i]); sizes.append(1)
        rec(i + 1, loads, sizes)
        loads.pop(); sizes.pop()

    rec(0, [], [])
    feasible = [k // dp for k in counts if k % dp == 0]
    return min(feasible) if feasible else None


# ---------------------------------------------------------------- bounds and heuristics

def test_l2_beats_l1_on_half_items():
    """Three items of 6 in bins of 10: L1 = 2, but no two fit together, so L2 = 3."""
    assert l2_bound(np.array([6, 6, 6]), 10) == 3


def test_item_count_bound_counts_long_items_alone():
    """Two items of 99 and eight of 5, C = 100, m = 3: no item fits beside a 99, so they
    take a bin each, and the eight 5s need ceil(8 / 3) = 3 more: 5 bins, where L1 = L2 = 3
    and N / m = 4. Brute force agrees."""
    sizes = np.array([99, 99] + [5] * 8)
    assert item_count_bound(sizes, 100, 3) == 5
    assert max(l1_bound(sizes, 100), l2_bound(sizes, 100), cardinality_bound(sizes.size, 3)) == 4
    assert brute_force_rows(sizes.tolist(), 100, 1, 3) == 5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=7), st.integers(12, 16), st.sampled_from([None, 1, 2, 3]))
def test_item_count_bound_never_exceeds_the_optimum(sizes, capacity, m):
    """On tiny instances, the item-count bound is at most the least bin count (brute force)."""
    assert item_count_bound(np.array(sizes), capacity, m) <= brute_force_rows(sizes, capacity, 1, m)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=12), st.integers(12, 16), st.sampled_from([None, 1, 2, 3]),
       st.integers(1, 6))
def test_worst_fit_packs_into_the_bins_asked_or_says_none(sizes, capacity, m, bins):
    """WFD into K bins returns a packing of exactly K non-empty bins (when N >= K) within
    capacity and m, or None."""
    sizes = np.array(sizes)
    out = worst_fit_decreasing(sizes, capacity, bins, m)
    if out is not None:
        assert out.max() < bins
        assert packing_violation(sizes, out, capacity, m, num_bins=bins if sizes.size >= bins else None) is None


def test_sample_limit_with_full_length_samples_is_proven_at_once():
    """A synthetic window of 2048 samples, 8 % of them at full length C, D = 32, m = 5: FFD
    strands the short samples (619 cells, 20 rows), and L1 (491 cells) is far below the
    optimum. WFD into 18 rows and the item-count bound (the 179 samples that nothing fits
    beside, plus ceil(1869 / 5)) prove R* = 18 well within the limit (it stopped at 20 rows
    unproven, 1.5 s into a 10-s limit)."""
    from rp_opt import synth

    inst = synth.generate(samples=2048, dp=32, edp=8, ep=8, capacity=32768, max_samples_per_cell=5, layers=2,
                          experts=16, top_k=2, seed=2)
    cert = certify_rows(inst.window, inst.cluster, time_limit=10)
    assert cert.status == "optimal" and cert.r_star == 18 and cert.bound_method == "item count"
    assert cert.stats["bounds"]["item count"] > max(cert.stats["bounds"]["L2"], cert.stats["bounds"]["cardinality"])
    assert_witness(make_instance(inst.window.lengths, 32, 32768, 5), cert)


def test_without_an_exact_model_the_lns_gets_the_rest_of_the_time():
    """8192 samples, D = 32, m = 12: the arc-flow graph is too large and N K is above the
    CP-SAT assignment model's size, so no exact model runs. The certificate stopped after
    the LNS's first share (1.5 s of 10), one row above L1; the LNS now goes on to the
    deadline and reaches L1's 61 rows: R* proven, the skipped model named in the stats."""
    from rp_opt import synth

    inst = synth.generate(model="ling-flash-like", samples=8192, dp=32, edp=8, ep=8, capacity=32768,
                          max_samples_per_cell=12, layers=2, experts=16, top_k=2, seed=0)
    cert = certify_rows(inst.window, inst.cluster, time_limit=10)
    assert "no exact model" in cert.stats["exact_skipped"]
    assert cert.status == "optimal" and cert.r_star == 61 and cert.stats["LNS"]["bins"] > 61 * 32
    assert_witness(make_instance(inst.window.lengths, 32, 32768, 12), cert)


def test_expand_bins_keeps_packing_valid():
    """Two bins {5,4,1}, {6} expand to 4 non-empty bins, capacity kept."""
    sizes = np.array([5, 4, 1, 6])
    bins = np.array([0, 0, 0, 1])
    out = expand_bins(bins, 4)
    assert packing_violation(sizes, out, 10, None, num_bins=4) is None
    with pytest.raises(ValueError):
        expand_bins(bins, 5)


def test_mbs_fills_exact_bins():
    """Triplets summing to 10 exactly: MBS finds the 2-bin packing FFD misses."""
    sizes = np.array([4, 4, 3, 3, 3, 3])   # FFD: {4,4}, {3,3,3}, {3}
    assert np.unique(first_fit_decreasing(sizes, 10)).size == 3
    bins = minimum_bin_slack(sizes, 10)
    assert np.unique(bins).size == 2 and packing_violation(sizes, bins, 10, None) is None


def _patterns(graph):
    """Every bin pattern of an arc-flow graph: (sizes along the path, fill), by DFS."""
    out = {}
    for t, h, j in zip(graph.arc_tail.tolist(), graph.arc_head.tolist(), graph.arc_type.tolist()):
        out.setdefault(t, []).append((h, int(graph.sizes[j])))
    node_set = set(graph.nodes.tolist())
    found = set()

    def walk(v, items):
        if v != 0 and v in node_set and v // graph.width >= graph.min_fill:
            found.add(tuple(items))                       # the loss arc closes the bin here
        for h, w in out.get(v, []):
            walk(h, items + [w])

    walk(0, [])
    return found


@pytest.mark.parametrize("seed", range(6))
def test_prune_keeps_exactly_the_low_waste_patterns(seed):
    """The pruned graph's bins are exactly the unpruned graph's bins that waste <= W."""
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(10, 25))
    lengths = rng.integers(2, capacity, size=int(rng.integers(4, 10)))
    graph = arcflow.build_graph(lengths, capacity, None if seed % 2 else 3)
    for waste in (0, 1, 3, capacity):
        pruned = arcflow.prune(graph, waste)
        expected = {p for p in _patterns(graph) if capacity - sum(p) <= waste}
        assert _patterns(pruned) == expected, waste


@pytest.mark.parametrize("seed", range(8))
def test_reduced_cost_pruning_keeps_every_bin_a_packing_can_use(seed):
    """Pruning by reduced cost for K bins keeps every bin whose y-weight reaches
    sum_j b_j y_j - (K - 1) M (the certificate's integer duals y and heaviest pattern M),
    keeps only bins of the graph, and keeps every bin of an optimal packing (K = B, the
    certified optimum, its witness)."""
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(12, 30))
    lengths = rng.integers(2, capacity, size=int(rng.integers(6, 12)))
    limit = None if seed % 2 else 3
    cert = certify_bins(lengths, capacity, 1, limit, time_limit=10)
    assert cert.status == "optimal"
    graph = arcflow.prune(arcflow.build_graph(lengths, capacity, limit),
                          cert.bins_upper * capacity - int(lengths.sum()))
    lp = arcflow.lp_bound(graph, 10.0)
    assert lp is not None
    pruned = arcflow.prune_by_reduced_cost(graph, lp, cert.bins_upper)
    before, after = _patterns(graph), _patterns(pruned)
    assert after <= before
    if lp.duals is not None and lp.heaviest:
        y = dict(zip(graph.sizes.tolist(), lp.duals.tolist()))
        need = lp.total - (cert.bins_upper - 1) * lp.heaviest
        assert {p for p in before if sum(y[w] for w in p) >= need} <= after
    cells = cert.witness.cell_of
    for b in np.unique(cells):
        assert tuple(sorted(lengths[cells == b].tolist(), reverse=True)) in after


def test_paths_decompose_the_lp_flow():
    """Path decomposition of an LP optimum covers each size exactly as the flow does."""
    lengths = np.array([6, 6, 5, 5, 4, 4, 3, 3, 3, 2])
    graph = arcflow.build_graph(lengths, 10)
    flow = rounding.lp_flow(graph, 10, 10.0)
    covered = sum(v * counts for counts, v in rounding.paths(graph, flow))
    per_size = np.bincount(graph.arc_type, weights=flow[: graph.arc_tail.size], minlength=graph.sizes.size)
    assert np.allclose(covered, per_size, atol=1e-6)
    assert np.isclose(sum(v for _, v in rounding.paths(graph, flow)),
                      flow[: graph.arc_tail.size][graph.arc_tail == 0].sum())


def _triplets(seed: int, count: int = 30) -> np.ndarray:
    """``count`` random triplets of sizes in (250, 500) summing to C = 1000 (Falkenauer T
    style: the optimum is ``count`` exactly full bins)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(251, 400, size=count)
    b = rng.integers(251, np.minimum(499, 1000 - a - 251) + 1)
    return np.concatenate([a, b, 1000 - a - b])


def _near_irup(seed: int) -> tuple[np.ndarray, int]:
    """Sizes in [C/5, C/2 + 5) with C in [100, 200): seeds 19 and 42 have FFD one bin above
    ceil(LP) = the optimum, and reduced costs that prune about half the arcs."""
    rng = np.random.default_rng(seed)
    n, capacity = int(rng.integers(40, 80)), int(rng.integers(100, 200))
    return rng.integers(capacity // 5, capacity // 2 + 5, size=n), capacity


def _dive_until_found(graph, lengths, bins: int, tries: int = 20):
    """The first packing into ``bins`` bins of up to ``tries`` dives (seeds 0, 1, ...)."""
    for seed in range(tries):
        found = rounding.dive(graph, lengths, bins, time.perf_counter() + 10, np.random.default_rng(seed))
        if found is not None:
            return found
    return None


def test_dive_packs_triplets_exactly():
    """30 random triplets summing to C = 1000 (Falkenauer T style, waste budget 0): diving
    finds the 30-bin packing, which FFD misses."""
    lengths = _triplets(3)
    assert np.all((lengths > 250) & (lengths < 500))
    assert np.unique(first_fit_decreasing(lengths, 1000)).size > 30
    bins = _dive_until_found(arcflow.build_graph(lengths, 1000), lengths, 30)
    assert bins is not None and np.unique(bins).size == 30
    assert packing_violation(lengths, bins, 1000, None) is None


@pytest.mark.parametrize("seed", [19, 42])
def test_dive_on_the_reduced_cost_pruned_graph(seed):
    """Diving on the graph pruned by waste and by reduced cost for K = ceil(LP) bins (what
    the certifier dives on) finds a K-bin packing, and every bin it uses is a bin of that
    pruned graph."""
    lengths, capacity = _near_irup(seed)
    graph = arcflow.build_graph(lengths, capacity)
    lp = arcflow.lp_bound(graph, 10.0)
    pruned = arcflow.prune_by_reduced_cost(arcflow.prune(graph, lp.bound * capacity - int(lengths.sum())),
                                           lp, lp.bound)
    assert pruned.arc_tail.size < graph.arc_tail.size
    bins = _dive_until_found(pruned, lengths, lp.bound)
    assert bins is not None and np.unique(bins).size == lp.bound
    assert packing_violation(lengths, bins, capacity, None) is None
    allowed = _patterns(pruned)
    for b in np.unique(bins):
        assert tuple(sorted(lengths[bins == b].tolist(), reverse=True)) in allowed


def test_dive_lp_warm_solve_matches_a_cold_solve():
    """:class:`rounding.DiveLP` re-solving subgraphs of one graph from its last basis gives
    each subgraph's LP optimum: the same number of bins as a cold :func:`rounding.lp_flow`
    of that subgraph, and a flow that conserves at every node and meets the residual
    demand (the first LP, then the LP after taking away a few items)."""
    lengths, capacity = _near_irup(19)
    graph = arcflow.prune(arcflow.build_graph(lengths, capacity), 30 * capacity)
    model = rounding.DiveLP(graph, 60)
    demand = graph.demand.astype(np.int64).copy()
    for step in range(3):
        sub = arcflow.prune(rounding._restrict(graph, demand), 60 * capacity)
        warm = model.solve(sub, 60, 10.0)
        cold = rounding.lp_flow(sub, 60, 10.0)
        assert warm is not None and cold is not None
        first = sub.arc_tail == 0
        n_item = sub.arc_tail.size
        assert np.isclose(warm[:n_item][first].sum(), cold[:n_item][first].sum(), atol=1e-6)
        per_size = np.bincount(sub.arc_type, weights=warm[:n_item], minlength=sub.sizes.size)
        assert np.all(per_size >= demand - 1e-6)
        covered = sum(v * counts for counts, v in rounding.paths(sub, warm))
        assert np.allclose(covered, per_size, atol=1e-6)
        demand[np.flatnonzero(demand)[: 2 + step]] -= 1      # the next step wants fewer items


def test_dive_lp_time_limit_is_per_solve():
    """HiGHS keeps one clock per model across solves; a :class:`rounding.DiveLP` solve still
    gets the time it is given once the earlier solves have used more than that (with the
    limit on the model's clock alone, such a solve stopped at once: dives ended early)."""
    lengths, capacity = _near_irup(19)
    graph = arcflow.build_graph(lengths, capacity)
    model = rounding.DiveLP(graph, 60)
    fewer = graph.demand.astype(np.int64).copy()
    fewer[np.flatnonzero(fewer)[:3]] -= 1
    for step in range(5000):
        demand = graph.demand if step % 2 else fewer
        assert model.solve(rounding._restrict(graph, demand), 60, 10.0) is not None
        if model._h.getRunTime() > 0.3:
            break
    assert model._h.getRunTime() > 0.3
    # half the demand: the simplex must iterate (and so look at its clock) to re-solve
    assert model.solve(rounding._restrict(graph, graph.demand // 2), 30, 0.2) is not None
    assert model._h.getModelStatus() == highspy.HighsModelStatus.kOptimal


@pytest.mark.parametrize("seed", [19, 42])
def test_certifier_runs_mip_then_dives_where_reduced_costs_shrink_the_graph(monkeypatch, seed):
    """Where the reduced-cost pruning brings a graph above the MIP's size down to it (here
    the MIP's size is lowered to the pruned graph's), the certifier runs the MIP for a
    share of the time, then the dives on the pruned graph. On these windows (sizes in
    [C/5, C/2 + 5), FFD one bin above ceil(LP), the pruning drops 54 % and 69 % of the
    arcs), with the MIP held to 0 s only the dives can find the packing: the certificate
    is still optimal with a valid witness."""
    lengths, capacity = _near_irup(seed)
    graph = arcflow.build_graph(lengths, capacity)
    lp = arcflow.lp_bound(graph, 10.0)
    assert np.unique(first_fit_decreasing(lengths, capacity)).size > lp.bound
    pruned = arcflow.prune(graph, lp.bound * capacity - int(lengths.sum()))
    small = arcflow.prune_by_reduced_cost(pruned, lp, lp.bound)
    assert small.arc_tail.size < pruned.arc_tail.size
    monkeypatch.setattr(rows, "MIP_MAX_ARCS", small.arc_tail.size)
    monkeypatch.setattr(rows, "RC_MIP_SHARE", 0.0)
    monkeypatch.setattr(rows, "QUICK_MIP_SECONDS", 0.0)
    cert = certify_bins(lengths, capacity, 1, None, time_limit=30)
    assert cert.status == "optimal" and cert.bins_upper == lp.bound
    assert packing_violation(lengths, cert.witness.cell_of, capacity, None) is None
    assert any(m.get("reduced_cost") for m in cert.stats["arcflow_mip"])
    assert cert.stats["diving"][0]["dives"] >= 1
    assert cert.stats["upper_source"].startswith("LP diving")


# ---------------------------------------------------------------- brute force cross-checks

@pytest.mark.parametrize("seed", range(24))
def test_matches_brute_force(seed):
    """R* equals brute force on tiny windows (N <= 8), with and without a sample limit."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    capacity = int(rng.integers(5, 20))
    lengths = rng.integers(1, capacity + 1, size=n).tolist()
    dp = int(rng.integers(1, 4))
    m = None if seed % 2 else int(rng.integers(1, 4))
    expected = brute_force_rows(lengths, capacity, dp, m)
    cert = certify_bins(lengths, capacity, dp, m, time_limit=10)
    if expected is None:
        assert cert.status == "infeasible" and cert.reason and cert.fix
    else:
        assert cert.status == "optimal" and cert.r_star == expected
        assert_witness(make_instance(lengths, dp, capacity, m), cert)


def test_sample_limit_forces_more_rows():
    """Six items of 1 with C = 100, D = 1: one row without a limit, three with m = 2."""
    assert certify_bins([1] * 6, 100, 1, None).r_star == 1
    cert = certify_bins([1] * 6, 100, 1, 2)
    assert cert.r_star == 3 and cert.bound_method == "cardinality"


def test_each_exact_model_agrees():
    """CP-SAT assignment, CP-SAT arc-flow and the HiGHS MIP prove the same R* on an instance
    where FFD is one bin off (FFD: {5,4}, {4,3,3}? no: sizes 5,5,4,4,3,3,3,3 with C=10 -> 3 bins)."""
    lengths = [5, 5, 4, 4, 3, 3, 3, 3]
    for exact in ("auto", "arcflow", "cpsat", "highs"):
        cert = certify_bins(lengths, 10, 1, None, time_limit=20, exact=exact)
        assert cert.status == "optimal" and cert.r_star == 3, exact


# ---------------------------------------------------------------- invariants

@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.integers(1, 4),
       st.one_of(st.none(), st.integers(1, 5)), st.integers(40, 80))
def test_random_windows(lengths, dp, m, capacity):
    """lower <= upper; the witness is valid per the checker; optimal means closed bounds."""
    cert = certify_bins(lengths, capacity, dp, m, time_limit=3)
    assert cert.status in ("optimal", "feasible", "infeasible", "no_solution")
    if cert.status == "infeasible":
        assert len(lengths) < (cert.lower_bound or 1) * dp
        return
    assert cert.lower_bound <= cert.upper_bound
    assert cert.bins_lower <= cert.bins_upper
    assert_witness(make_instance(lengths, dp, capacity, m), cert)
    if cert.status == "optimal":
        assert cert.r_star == cert.lower_bound == cert.upper_bound


def test_certify_rows_takes_window_and_cluster():
    """The Window/Cluster entry point: 5 samples of 6 into C = 10, D = 2 -> 5 bins -> 3 rows needs 6 cells > 5."""
    inst = make_instance([6, 6, 6, 6, 2, 2], dp=2, capacity=10)
    cert = certify_rows(inst.window, inst.cluster, time_limit=5)
    assert cert.status == "optimal" and cert.r_star == 2
    assert_witness(inst, cert)


# ---------------------------------------------------------------- infeasible windows

def test_fewer_samples_than_slots():
    cert = certify_bins([3] * 40, 100, 64)
    assert cert.status == "infeasible"
    assert "40 samples" in cert.reason and "64" in cert.reason
    assert "at most 40 DP slots" in cert.fix


def test_sample_longer_than_capacity():
    cert = certify_bins([5, 12, 3], 10, 1)
    assert cert.status == "infeasible" and "sample 1" in cert.reason and "12" in cert.fix


def test_rows_need_more_cells_than_samples():
    """Three items of 6 (C = 10) need 3 bins; with D = 2 that is 2 rows = 4 cells > 3 samples."""
    cert = certify_bins([6, 6, 6], 10, 2)
    assert cert.status == "infeasible" and cert.lower_bound == 2
    assert cert.fix == "use 3 or 1 DP slots or add 1 sample"   # one row of 3 cells, or 3 rows of 1


# ---------------------------------------------------------------- BPPLIB

def _optima():
    with open(os.path.join(BPPLIB, "optima.tsv")) as handle:
        tokens = handle.read().split()
    return {k: int(v) for k, v in zip(tokens[2::2], tokens[3::2])}


def _subset():
    if not os.path.isdir(BPPLIB):
        return []
    files = []
    for folder, prefix, count in (("falkenauer_u", "Falkenauer_u120", 20), ("falkenauer_t", "Falkenauer_t60", 20),
                                  ("scholl_1", "N", 20)):
        names = sorted(f for f in os.listdir(os.path.join(BPPLIB, folder)) if f.startswith(prefix))
        step = max(1, len(names) // count)
        files += [os.path.join(BPPLIB, folder, f) for f in names[::step][:count]]
    return files


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(BPPLIB), reason=f"BPPLIB instances not found at {BPPLIB}")
def test_bpplib_subset():
    """All Falkenauer U120, T60 and 20 Scholl_1 instances: never a wrong certificate, and
    every one proven (measured: U120 mean 0.5 s, max 5.0 s of the 10 s limit on 2 shared cores)."""
    optima = _optima()
    proven = {}
    for path in _subset():
        weights, capacity = read_bpplib(path)
        cert = certify_bins(weights, capacity, 1, None, time_limit=10)
        best = optima[os.path.basename(path)[:-4]]
        assert cert.bins_lower <= best <= cert.bins_upper, path
        if cert.status == "optimal":
            assert cert.r_star == best, path
        folder = os.path.basename(os.path.dirname(path))
        proven.setdefault(folder, []).append(cert.status == "optimal")
    assert all(all(v) for v in proven.values()), proven


@pytest.mark.skipif(not os.path.isdir(BPPLIB), reason=f"BPPLIB instances not found at {BPPLIB}")
def test_non_irup_instance_needs_the_exact_search():
    """Scholl N1C3W2_H: arc-flow LP = 22.000, optimum 23 (FFD finds 23): only the exact
    decision "not in 22 bins" (HiGHS branch-and-bound on the pruned graph) proves it."""
    weights, capacity = read_bpplib(os.path.join(BPPLIB, "scholl_1", "N1C3W2_H.txt"))
    cert = certify_bins(weights, capacity, 1, None, time_limit=4)
    assert cert.stats["arcflow_lp"]["bound"] == 22
    assert cert.status == "optimal" and cert.r_star == 23 and cert.bound_method == "exact search"
    # the short MIP probe proves it before any LP diving (diving spent half the time limit
    # in vain: 30 s of a 60-s limit)
    assert cert.stats["arcflow_mip"][0] == {**cert.stats["arcflow_mip"][0], "target": 22, "status": "Infeasible",
                                            "probe": True}
    assert "diving" not in cert.stats


# ---------------------------------------------------------------- CLI

def test_cli_certify_npz(tmp_path, capsys):
    path = tmp_path / "w.npz"
    save_instance(path, make_instance([6, 6, 6, 6, 2, 2], dp=2, capacity=10))
    assert main(["certify", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "optimal" and data["r_star"] == 2 and len(data["witness"]) == 2
    assert main(["certify", str(path)]) == 0
    assert "optimal" in capsys.readouterr().out


def test_cli_certify_bpp(tmp_path, capsys):
    path = tmp_path / "tiny.txt"
    path.write_bytes(b"4\r\n10\r\n6\r\n6\r\n4\r\n4\r\n")
    assert main(["certify", "--bpp", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["bins"] == 2 and data["lower_bound"] == 2 and data["status"] == "optimal"
    assert {"seconds", "bound_method"} <= set(data)


def test_cli_certify_writes_its_witness(tmp_path, capsys):
    """``-o``: a window's witness is a plan file (identity placement, the witness's layout)
    that ``eval`` finds valid and ``plan --warm-start`` takes; a BPPLIB file's is its bins
    of item indices, each item once, within C. ``interrupted`` is in both JSON forms, and
    the table says where the witness is."""
    from rp_opt import synth

    inst = synth.generate(samples=24, dp=4, edp=2, ep=2, capacity=4096, layers=2, experts=4, top_k=2, seed=1)
    path, out = tmp_path / "w.npz", tmp_path / "witness.json"
    save_instance(path, inst)
    assert main(["certify", str(path), "-o", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["output"] == str(out) and data["interrupted"] is False
    plan = json.loads(out.read_text())
    assert len(plan["rows"]) == data["r_star"] == len(data["witness"]) and plan["stats"]["source"] == "certify"
    assert main(["eval", str(path), str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True
    assert main(["plan", str(path), "--solver", "heuristic", "--time-limit", "1", "--warm-start", str(out),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] in ("feasible", "optimal")
    assert main(["certify", str(path)]) == 0
    assert "-o FILE.json writes it" in capsys.readouterr().out

    bpp, bins = tmp_path / "tiny.txt", tmp_path / "bins.json"
    bpp.write_text("5\n10\n6\n6\n4\n4\n3\n")
    assert main(["certify", "--bpp", str(bpp), "-o", str(bins)]) == 0
    assert f"witness (3 bins) written to {bins}" in capsys.readouterr().out
    written = json.loads(bins.read_text())
    weights = np.array([6, 6, 4, 4, 3])
    assert sorted(i for b in written["witness"] for i in b) == list(range(5))
    assert all(weights[b].sum() <= 10 for b in written["witness"]) and len(written["witness"]) == 3
    assert main(["certify", "--bpp", str(bpp), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["interrupted"] is False and len(data["witness"]) == 3
    assert main(["certify", str(path), "-o", str(path)]) == 2       # would overwrite the window
    assert "is the window this command reads" in capsys.readouterr().err


def test_cli_infeasible_and_bad_input(tmp_path, capsys):
    path = tmp_path / "few.npz"
    save_instance(path, make_instance([3, 3, 3], dp=4, capacity=10))
    assert main(["certify", str(path), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "infeasible"
    bad = tmp_path / "bad.txt"
    bad.write_text("3\n10\n4\n")
    assert main(["certify", "--bpp", str(bad)]) == 2
    assert "header says 3 items" in capsys.readouterr().err
    assert main(["certify", str(tmp_path / "missing.npz")]) == 2


def test_infeasible_reason_reads_in_order():
    """Lengths [6, 6, 6, 6, 3] in bins of 7 need 5 bins (no two 6s share one), so with D = 2
    slots R* would be 3 rows = 6 cells, one more than the 5 samples: infeasible, with the
    reason in that order and the fix (5 slots or 1, or one more sample: with 3 or 4
    slots the 5 bins need 6 or 8 cells)."""
    cert = certify_bins([6, 6, 6, 6, 3], 7, 2)
    assert cert.status == "infeasible"
    assert cert.reason == ("window has 5 samples for at least 6 cells: its lengths need at least 5 cells of "
                           "capacity C=7, so 3 rows of D=2 slots, and every cell needs a sample")
    assert cert.fix == "use 5 or 1 DP slots or add 1 sample"


@pytest.mark.parametrize("lengths, capacity, slots, fix", [
    ([10] * 5, 10, 3, "use 5 or 1 DP slots or add 1 sample"),       # D = 3 itself is no fix
    ([10] * 5, 10, 8, "use 5 or 1 DP slots or add 3 samples"),      # N < D: 2 to 4 slots fail too
    ([10] * 6, 10, 4, "use 6, 3, 2 or 1 DP slots or add 2 samples"),
    ([10] * 8, 4096, 16, "use at most 8 DP slots or add 8 samples"),  # one bin: any D' <= N
    ([7], 10, 2, "use at most 1 DP slot or add 1 sample"),
])
def test_infeasible_fix_names_slot_counts_that_work(lengths, capacity, slots, fix):
    """The fix lists the slot counts D' whose cells the samples fill (ceil(B / D') D' <= N):
    it said "use at most 5 DP slots" where 2 to 4 fail, and included the D that failed."""
    cert = certify_bins(lengths, capacity, slots)
    assert cert.status == "infeasible" and cert.fix == fix
    words = fix.split(" DP slot")[0].replace(",", "").split()
    named = {int(w) for w in words if w.isdigit()}
    if words[1:3] == ["at", "most"]:
        named = set(range(1, max(named) + 1))
    # every count named works, and (all of them listed here) no other does
    for d in range(1, len(lengths) + 1):
        assert (certify_bins(lengths, capacity, d).status == "optimal") == (d in named), d


def test_row_count_reason_names_the_counting_argument():
    """Hand-checked reasons: 9 cells for 8 samples leave one empty; lengths 2, 4, 2, 2, 4 in
    C = 7 need 2 cells (L2 = ceil(14 / 7)), one row of D = 1 has 1; eight samples with at
    most 3 per cell need ceil(8 / 3) = 3 cells, one row of D = 2 has 2; two rows of D = 1
    hold the first window (a packing into 2 cells exists), so counting says nothing."""
    from rp_opt.rows import row_count_reason

    assert row_count_reason([1] * 8, 1, 9, 10) == "N=8 < R x D = 9 cells: some cell would be empty"
    assert row_count_reason([2, 4, 2, 2, 4], 1, 1, 7) == (
        "R=1 rows hold R x D = 1 cells, but the samples need at least 2 cells of C=7 (L2 bound)")
    assert row_count_reason([1] * 8, 1, 2, 10, max_per_cell=3) == (
        "R=1 rows hold R x D = 2 cells, but with at most m=3 samples per cell the N=8 samples need at least 3 cells "
        "(N/m bound)")
    assert row_count_reason([2, 4, 2, 2, 4], 2, 1, 7) is None
    # two 99s and eight 5s in C = 100, m = 3: five cells (each 99 alone), L2 and N/m say 3 and 4
    assert row_count_reason([99, 99] + [5] * 8, 1, 4, 100, max_per_cell=3) == (
        "R=1 rows hold R x D = 4 cells, but counting the samples that fit beside each one, the N=10 samples need at "
        "least 5 cells of C=100 (item-count bound)")


def test_infeasible_reason_names_m_when_the_sample_limit_forces_the_cells():
    """Lengths [10, 20, 30] fit one cell of C = 100 (sum 60), but with at most m = 1 sample
    per cell they need 3 cells, so 2 rows of D = 2 = 4 cells for 3 samples: infeasible
    because of m. The reason names m (certify_bins, with and without the exact stages, and
    row_count_reason for one row), not the lengths or the capacity."""
    from rp_opt.rows import row_count_reason

    expected = ("window has 3 samples for at least 4 cells: with at most m=1 samples per cell, 3 samples need "
                "at least 3 cells, so 2 rows of D=2 slots, and every cell needs a sample")
    for time_limit in (0, 10):
        cert = certify_bins([10, 20, 30], 100, 2, max_items=1, time_limit=time_limit)
        assert cert.status == "infeasible"
        assert cert.reason == expected
    assert row_count_reason([10, 20, 30], 1, 2, 100, max_per_cell=1) == (
        "R=1 rows hold R x D = 2 cells, but with at most m=1 samples per cell the N=3 samples need at least 3 cells "
        "(N/m bound)")
    # without the limit the same lengths fit: one row of two cells
    assert certify_bins([10, 20, 30], 100, 2).r_star == 1


def test_ctrl_c_during_certification_keeps_the_bounds(ctrl_c):
    """A Ctrl-C during the exact stages (here CP-SAT's assignment model, which does not
    close this window in a minute) ended ``rp-opt certify`` with KeyboardInterrupt and lost
    the bounds; with ``on_interrupt="return"`` (the command's) they come back at once as
    the certificate, marked interrupted. The default raises, once the search has stopped."""
    lengths = np.random.default_rng(1).integers(200, 700, 120)
    ctrl_c(1.5)
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        certify_bins(lengths, 1000, 1, None, 60.0, "cpsat")
    assert time.perf_counter() - start < 10
    ctrl_c(1.5)
    start = time.perf_counter()
    cert = certify_bins(lengths, 1000, 1, None, 60.0, "cpsat", on_interrupt="return")
    assert time.perf_counter() - start < 10
    assert cert.status == "feasible" and cert.stats["interrupted"] is True
    assert cert.bins_lower <= 57 <= cert.bins_upper       # 57: proven by the auto pipeline
    assert "interrupted" in cert.summary()
    bins = cert.witness.cell_of
    assert np.bincount(bins, weights=lengths).max() <= 1000


def test_ctrl_c_stops_a_highs_solve_at_once(ctrl_c):
    """HiGHS held the thread until its solve ended, so a Ctrl-C waited for it (seconds on
    the arc-flow LPs of large windows; about 5 s for this one); now HiGHS is told to stop
    and the interrupt is raised at once."""
    lengths = np.random.default_rng(0).integers(20, 400, 800)
    graph = arcflow.build_graph(lengths, 1000)
    ctrl_c(0.3)
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        arcflow.lp_bound(graph, 60.0)
    assert time.perf_counter() - start < 2.0


def test_a_highs_mip_that_overruns_its_limit_is_given_up():
    """HiGHS's MIP checks its clock (and its interrupt) only between some steps of the root
    node: on this arc-flow MIP (200 lengths in [150, 650), C = 1000, 26,000 arcs, 80
    bins asked) a 5-s limit ran to about 13 s. :func:`arcflow.solve_mip` now comes back
    1.5 s after the limit at most: no packing, the bound it was given."""
    lengths = np.random.default_rng(5).integers(150, 650, 200)
    graph = arcflow.build_graph(lengths, 1000)
    low = int(np.ceil(lengths.sum() / 1000))
    start = time.perf_counter()
    res = arcflow.solve_mip(graph, lengths, 5.0, min_bins=low, max_bins=low)
    assert time.perf_counter() - start < 5.0 + arcflow.MIP_OVERRUN_SECONDS + 1.5
    assert res.status != "Interrupted by user"  # stopped at the limit: said as a time limit
    if res.status.endswith("given up)"):
        assert res.bin_of is None and res.bound == low
    elif res.bin_of is not None:  # a faster machine: HiGHS stopped, or packed, in time
        assert np.bincount(res.bin_of, weights=lengths).max() <= 1000


# ---------------------------------------------------------------- progress

def _progress_lines(caplog, weights, capacity, time_limit):
    import logging

    with caplog.at_level(logging.INFO, logger="rp_opt"):
        cert = certify_bins(weights, capacity, 1, None, time_limit=time_limit)
    return cert, [r.getMessage() for r in caplog.records if r.name == "rp_opt.progress"]


def test_progress_of_a_long_certification(caplog, monkeypatch):
    """Past :data:`rp_opt.rows.PROGRESS_AFTER` seconds (0 here) a certification logs its
    bins' bounds as they move and each exact stage: the lower bounds never fall, the
    packings never grow, and the last line holds the certificate's bins. A Falkenauer T
    instance (triplets filling every bin) goes through the arc-flow LP and the diving."""
    import re

    monkeypatch.setattr(rows, "PROGRESS_AFTER", 0.0)
    weights, capacity = read_bpplib(os.path.join(BPPLIB, "falkenauer_t", "Falkenauer_t60_00.txt"))
    cert, lines = _progress_lines(caplog, weights, capacity, 10)
    assert cert.status == "optimal"
    assert any("arc-flow LP" in line for line in lines), lines
    bounds = [re.match(r"R\*: (\d+) <= bins <= (\d+|\?), ", line).groups() for line in lines]
    lower = [int(lo) for lo, _ in bounds]
    upper = [int(up) for _, up in bounds if up != "?"]
    assert lower == sorted(lower) and upper == sorted(upper, reverse=True)
    assert (lower[-1], upper[-1]) == (cert.bins_lower, cert.bins_upper)


def test_no_progress_from_a_quick_certification(caplog):
    """A certification that ends within PROGRESS_AFTER (every plan runs one) logs nothing."""
    cert, lines = _progress_lines(caplog, np.array([60, 50, 40, 30, 20, 10]), 100, 10)
    assert cert.status == "optimal" and lines == []


def test_a_limit_no_cell_reaches_is_no_limit():
    """m = 10^6 on Falkenauer_t60_00 (triplets: the 4 shortest items exceed C, no bin holds
    more than 3): a limit that binds nothing gives the answer of no limit (it dropped the
    arc-flow graph, which grows with m, and stayed unproven in 5 s)."""
    weights, capacity = read_bpplib(os.path.join(BPPLIB, "falkenauer_t", "Falkenauer_t60_00.txt"))
    free = certify_bins(weights, capacity, 1, None, 5)
    limited = certify_bins(weights, capacity, 1, 10**6, 5)
    assert free.status == limited.status == "optimal" and free.r_star == limited.r_star == 20
    assert limited.bound_method == free.bound_method


@pytest.mark.parametrize("token", ["5_0", "5.0000000000000001", "1e-400", "1e3", "0x10"])
def test_bpplib_weights_are_plain_integers(tmp_path, token):
    """Digits only (a sign and a trailing ".0" allowed): Python's int() read "5_0" as 50 and
    float precision took "5.0000000000000001" for 5."""
    path = tmp_path / "w.txt"
    path.write_text(f"2\n100\n{token}\n7\n")
    with pytest.raises(InputError, match=r"holds '.*', not an integer$|holds a non-numeric token$"):
        read_bpplib(path)
    path.write_text("2\n100\n+5\n7.0\n")
    weights, capacity = read_bpplib(path)
    assert weights.tolist() == [5, 7] and capacity == 100
