"""Review of the R* certifier: regressions for defects found by brute force and edge inputs."""

from __future__ import annotations

import time

import numpy as np
import pytest

from rp_opt.errors import InputError
from rp_opt.rows import certify_bins, read_bpplib
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
    with pytest.raises(InputError, match="non-numeric"):
        read_bpplib(path)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "10"])
def test_time_limit_must_be_a_number_at_least_zero(bad):
    """A negative time limit was taken as 0 without a word; it, NaN and a string are
    one-line errors naming time_limit (noticed by review helper-35)."""
    with pytest.raises(InputError, match=r"^time_limit: "):
        certify_bins(np.array([3, 4, 5]), 10, 1, time_limit=bad)
