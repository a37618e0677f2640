"""Review of the R* certifier: regressions for defects found by brute force and edge inputs."""

from __future__ import annotations

import time

import numpy as np
import pytest

from rp_opt.errors import InputError
from rp_opt.rows import arcflow, certify_bins, cpsat, read_bpplib, rounding
from rp_opt.rows.clock import OutOfTime
from rp_opt.rows.heuristics import minimum_bin_slack

# FFD and BFD need 4 bins, the optimum is 3 (so MBS runs when it is allowed to)
FFD_GAP = [3, 4, 2, 6, 2, 2, 3, 6, 2]


def test_mbs_skipped_for_a_huge_capacity():
    # C = 2e9 <= Cluster's MAX_CAPACITY: MBS allocated O(C) arrays (MemoryError, 6 GiB)
    k = 200_000_000
    cert = certify_bins(np.array(FFD_GAP) * k, 10 * k, 1, None, 3.0)
    assert "MBS" not in cert.stats
    assert cert.bins_lower <= 3 and cert.status in ("optimal", "feasible")
    if cert.status == "optimal":
        assert cert.r_star == 3


def test_mbs_keeps_the_deadline():
    sizes = np.random.default_rng(1).integers(20_000, 50_001, 300)
    assert minimum_bin_slack(sizes, 100_000, deadline=time.perf_counter() - 1.0) is None
    assert minimum_bin_slack(np.array(FFD_GAP), 10) is not None


def test_certify_uses_mbs_within_its_limits():
    cert = certify_bins(FFD_GAP, 10, 1, None, 2.0)
    assert cert.status == "optimal" and cert.r_star == 3


def test_uint64_beyond_int64_is_bad_input_not_a_certificate():
    # wrapped to a negative length, it was certified R* = 1 though the sample exceeds C
    with pytest.raises(InputError, match="lengths"):
        certify_bins(np.array([2**63 + 5, 1], dtype=np.uint64), 10, 1)


def test_fractional_lengths_are_not_truncated():
    # 1.6 + 1.6 > 3, but truncated to 1 + 1 it was certified R* = 1
    with pytest.raises(InputError, match="lengths"):
        certify_bins([1.6, 1.6], 3, 1)


@pytest.mark.parametrize("lengths, capacity, slots, m, field", [
    ([0, 1, 2], 3, 1, None, "lengths"),
    ([-1, 2, 2], 3, 1, None, "lengths"),
    ([[1, 2], [3, 4]], 10, 1, None, "lengths"),
    (["a"], 1, 1, None, "lengths"),
    ([float("nan")], 1, 1, None, "lengths"),
    ([1], 0, 1, None, "capacity"),
    ([1, 2], 2.5, 1, None, "capacity"),
    ([1, 1], 2**70, 1, None, "capacity"),
    ([1], 1, 0, None, "num_slots"),
    ([1, 1], 2, 1, 0, "max_items"),
    ([1, 1], 2, 1, -1, "max_items"),
])
def test_bad_input_is_one_line_input_error(lengths, capacity, slots, m, field):
    with pytest.raises(InputError) as info:
        certify_bins(lengths, capacity, slots, m, 1.0)
    assert info.value.field == field and "\n" not in str(info.value)


def test_unknown_exact_model_is_refused():
    with pytest.raises(InputError, match="exact"):
        certify_bins([1, 2], 3, 1, None, 1.0, exact="cp-sat")


def test_int32_and_uint64_lengths_still_certify():
    for dtype in (np.int32, np.uint64):
        cert = certify_bins(np.array([5, 5, 5, 5, 5], dtype=dtype), 10, 2, None, 2.0)
        assert cert.status == "optimal" and cert.r_star == 2


def test_read_bpplib_reads_integers_exactly(tmp_path):
    # 2^53 + 1 was read through float as 2^53: 1 bin became 2
    path = tmp_path / "big.txt"
    path.write_text("2\n9007199254740993\n9007199254740991\n2\n")
    weights, capacity = read_bpplib(path)
    assert capacity == 2**53 + 1 and weights.tolist() == [2**53 - 1, 2]
    assert certify_bins(weights, capacity, 1, None, 2.0).r_star == 1


def test_read_bpplib_infinite_token_is_input_error(tmp_path):
    path = tmp_path / "inf.txt"
    path.write_text("2\n10\ninf\n5\n")
    with pytest.raises(InputError, match="holds 'inf', not an integer"):
        read_bpplib(path)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "10"])
def test_time_limit_must_be_a_number_at_least_zero(bad):
    """A negative time limit was taken as 0 without a word; it, NaN and a string are
    one-line errors naming time_limit (noticed by review helper-35)."""
    with pytest.raises(InputError, match=r"^time_limit: "):
        certify_bins(np.array([3, 4, 5]), 10, 1, time_limit=bad)


# ---------------------------------------------------------------- time limit (work past the deadline)

SLACK = 0.3      # seconds a certification may take beyond its limit (clock reads, freeing models)
C31 = 2**31 - 1  # too large for an arc-flow graph: the CP-SAT assignment model decides


def _lp_lengths():
    """200 lengths in [1000, 4500) of C = 10000: L1 = L2 = 57, FFD = 58 bins, a 373k-arc graph
    whose LP needs seconds (time_limit 0 took 0.77 s: the LP had a 0.5-s floor)."""
    return np.random.default_rng(1).integers(1_000, 4_500, 200), 10_000


def _c31_lengths():
    """600 lengths in [C/10, C/2) of C = 2^31 - 1: L1 = L2 = 185, FFD = 189 bins; its CP-SAT
    model (94k booleans) took 0.65 s to build in Python."""
    return np.random.default_rng(0).integers(C31 // 10, C31 // 2, 600), C31


def _graph_lengths():
    """120 lengths in [400, 1800) of C = 4000: a 99k-arc graph (its CP-SAT build 0.64 s)."""
    return np.random.default_rng(3).integers(400, 1_800, 120), 4_000


def _timed_certificate(lengths, capacity, slots, limit):
    start = time.perf_counter()
    cert = certify_bins(lengths, capacity, slots, None, time_limit=limit)
    return cert, time.perf_counter() - start


def _assert_valid(cert, lengths, capacity, slots):
    """A witness of upper_bound rows: every sample in exactly one of its R D cells, no cell
    empty or over C, and proven bounds that do not cross."""
    rows = cert.witness.to_rows()
    assert len(rows) == cert.upper_bound and all(len(row) == slots for row in rows)
    cells = [cell for row in rows for cell in row]
    assert sorted(i for cell in cells for i in cell) == list(range(len(lengths)))
    assert all(cell and int(np.sum(lengths[cell])) <= capacity for cell in cells)
    assert cert.lower_bound <= cert.upper_bound and cert.bins_lower <= cert.bins_upper


def test_time_limit_zero_returns_the_heuristics_at_once():
    """time_limit 0 built the arc-flow graph and gave its LP at least 0.5 s (0.77 s here,
    the LP unsolved all the same): the certificate is the bounds and FFD/BFD, at once."""
    lengths, capacity = _lp_lengths()
    cert, seconds = _timed_certificate(lengths, capacity, 1, 0)
    assert seconds < SLACK
    assert cert.status == "feasible" and cert.r_star is None
    assert (cert.bins_lower, cert.bins_upper, cert.bound_method) == (57, 58, "L1")
    assert "graph" not in cert.stats and "arcflow_lp" not in cert.stats
    _assert_valid(cert, lengths, capacity, 1)


@pytest.mark.parametrize("limit", [0.0, 0.05, 0.5])
def test_int32_capacity_keeps_short_limits(limit):
    """At C = 2^31 - 1 the CP-SAT model was built whatever the time left: 0.86 s at a
    0.05-s limit, 1.26 s at 0.5 s. A model that cannot be built in time is not started."""
    lengths, capacity = _c31_lengths()
    cert, seconds = _timed_certificate(lengths, capacity, 3, limit)
    assert seconds < limit + SLACK
    # FFD's 189 bins = 63 rows of D = 3 (LNS might close the gap on a faster machine)
    assert cert.lower_bound == 62 and cert.upper_bound <= 63
    _assert_valid(cert, lengths, capacity, 3)


def test_cpsat_build_counts_in_its_time_limit():
    """fits_in_bins built its whole model before CP-SAT's limit started (0.55 s at limit 0);
    a model too large for the limit answers unknown at once, a small one still decides."""
    lengths, capacity = _c31_lengths()
    for limit in (0.0, 0.2):
        start = time.perf_counter()
        res = cpsat.fits_in_bins(lengths, capacity, 185, None, limit)
        assert res.status == "unknown" and time.perf_counter() - start < limit + 0.1
    assert cpsat.fits_in_bins(np.array([6, 4, 5, 5]), 10, 2, None, 0.5).status == "feasible"
    assert cpsat.fits_in_bins(np.array([6, 6, 5]), 10, 2, None, 0.5).status == "infeasible"


def test_arcflow_cpsat_build_counts_in_its_time_limit():
    """cpsat_decide built its flow model in Python before CP-SAT's limit started: 0.64 s
    on a 99k-arc graph at a 0.01-s limit."""
    lengths, capacity = _graph_lengths()
    graph = arcflow.build_graph(lengths, capacity)
    target = -(-int(lengths.sum()) // capacity)
    pruned = arcflow.prune(graph, target * capacity - int(lengths.sum()))
    start = time.perf_counter()
    res = arcflow.cpsat_decide(pruned, lengths, target, 0.01)
    assert res.status == "unknown" and time.perf_counter() - start < 0.1


def test_lp_diving_has_no_floor_on_its_lp_time():
    """A dive gave every LP at least 0.05 s and its model build was untimed (0.25 s for a
    dive with 0.01 s left on a 99k-arc graph); lp_flow declines an LP it cannot finish."""
    lengths, capacity = _graph_lengths()
    graph = arcflow.build_graph(lengths, capacity)
    target = -(-int(lengths.sum()) // capacity)
    start = time.perf_counter()
    assert rounding.lp_flow(graph, target, 1e-3) is None
    assert time.perf_counter() - start < 0.06
    start = time.perf_counter()
    assert rounding.dive(graph, lengths, target, time.perf_counter() + 0.01, np.random.default_rng(0)) is None
    assert time.perf_counter() - start < 0.1


def test_graph_build_stops_at_its_deadline():
    lengths, capacity = _graph_lengths()
    with pytest.raises(OutOfTime):
        arcflow.build_graph(lengths, capacity, deadline=time.perf_counter() - 1.0)
    assert arcflow.build_graph(lengths, capacity, deadline=time.perf_counter() + 60).num_arcs > 90_000
