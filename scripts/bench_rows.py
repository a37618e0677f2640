"""Time the R* certifier on synthetic production-like windows.

Lengths: log-normal response lengths clipped to [32, C] with a spike of truncated samples at
exactly the maximum (C = 32768 tokens by default). Only lengths matter for R*.

Usage: python scripts/bench_rows.py [--samples 1024,2048,4096,8192] [--dp 16,32,64,128]
       [--capacity 32768] [--max-samples-per-cell M] [--seeds 3] [--time-limit 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from rp_opt.rows import certify_bins  # noqa: E402


def synthetic_lengths(n: int, capacity: int, seed: int, spike: float = 0.06) -> np.ndarray:
    """Log-normal lengths (median ~ C/8) clipped to [32, C], a fraction ``spike`` at C."""
    rng = np.random.default_rng(seed)
    lengths = np.exp(rng.normal(np.log(capacity / 8), 1.0, size=n))
    lengths = np.clip(np.rint(lengths), 32, capacity).astype(np.int64)
    lengths[rng.random(n) < spike] = capacity
    return lengths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default="1024,2048,4096,8192")
    parser.add_argument("--dp", default="16,32,64,128")
    parser.add_argument("--capacity", type=int, default=32768)
    parser.add_argument("--max-samples-per-cell", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=3,
                        help="how many seeds per size (0, 1, ...): a count, unlike the gap scripts' list")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for n in map(int, args.samples.split(",")):
        for d in map(int, args.dp.split(",")):
            for seed in range(args.seeds):
                lengths = synthetic_lengths(n, args.capacity, seed)
                cert = certify_bins(lengths, args.capacity, d, args.max_samples_per_cell, args.time_limit)
                rows.append({"N": n, "D": d, "seed": seed, "status": cert.status, "r_star": cert.r_star,
                             "rows_lower": cert.lower_bound, "rows_upper": cert.upper_bound,
                             "bins_lower": cert.bins_lower, "bins_upper": cert.bins_upper,
                             "bound": cert.bound_method, "seconds": round(cert.seconds, 4)})
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    else:
        print(f"{'N':>5} {'D':>4} {'seed':>4} {'status':>9} {'R*':>4} {'bins lo':>7} {'bins hi':>7} "
              f"{'bound':>12} {'seconds':>8}")
        for r in rows:
            print(f"{r['N']:>5} {r['D']:>4} {r['seed']:>4} {r['status']:>9} {str(r['r_star']):>4} "
                  f"{r['bins_lower']!s:>7} {r['bins_upper']!s:>7} {r['bound']:>12} {r['seconds']:>8.3f}")
        secs = [r["seconds"] for r in rows]
        print(f"windows {len(rows)}, optimal {sum(r['status'] == 'optimal' for r in rows)}, "
              f"mean {np.mean(secs):.3f}s, max {np.max(secs):.3f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
