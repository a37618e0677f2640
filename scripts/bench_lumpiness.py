"""How balanced can a plan's (row, shard) blocks be on the EP ranks? The evidence behind the
heuristic's gap on production windows.

A plan's expert total is gamma sum_b sum_l max_p W[b,l,p]; the bound counts only the
aggregate loads (Eq. 4). This script plans the window with the heuristic and reports the
blocks' excess of sum_l max_p W over sum_l mean_p W (in % of the latter) for:

- ``aggregate``: the aggregate loads L[l,p] (the placement's own imbalance, which Eq. 4
  and the placement bound count);
- ``plan``: the heuristic's blocks;
- ``random``: the same samples re-assigned to blocks of the same sizes at random;
- ``expert swaps``: the plan after ``--swap-seconds`` of best-improvement sample swaps
  between random block pairs judged on the expert total alone (capacity and attention
  ignored, so not a valid plan: an optimistic estimate of how far local moves can go).

Usage::

    python scripts/bench_lumpiness.py --window /tmp/prod4096.npz --time-limit 5 --swap-seconds 60 [--json]

Without ``--window`` a ling-flash-like window is generated (``--samples``, default 4096, D=64,
G=8, P=8, C=32768, seed 0).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from rp_opt.bench.suites import add_window_arguments, window_from_arguments
from rp_opt.check import check
from rp_opt.cost import block_of, group_sums, rank_demand
from rp_opt.solvers import get_solver


def excess(loads: np.ndarray) -> float:
    """sum_{b,l} max_p W / sum_{b,l} mean_p W - 1 of loads [..., L, P]."""
    return float(loads.max(axis=-1).sum() / loads.mean(axis=-1).sum() - 1.0)


def expert_swaps(demand_by_rank: np.ndarray, block: np.ndarray, num_blocks: int, seconds: float,
                 rng: np.random.Generator) -> tuple[np.ndarray, int, int]:
    """Best-improvement swaps between random block pairs on sum_b sum_l max_p W alone
    (every n1 x n2 swap of a pair evaluated at once). Returns (block, pairs, swaps)."""
    block = block.copy()
    loads = group_sums(block, demand_by_rank, num_blocks)
    deadline = time.perf_counter() + seconds
    pairs = swaps = 0
    while time.perf_counter() < deadline:
        b1, b2 = rng.choice(num_blocks, 2, replace=False)
        I, J = np.flatnonzero(block == b1), np.flatnonzero(block == b2)
        diff = demand_by_rank[J][None] - demand_by_rank[I][:, None]           # [n1, n2, L, P]
        delta = ((loads[b1] + diff).max(axis=-1).sum(axis=-1) + (loads[b2] - diff).max(axis=-1).sum(axis=-1)
                 - loads[b1].max(axis=-1).sum() - loads[b2].max(axis=-1).sum())
        pairs += 1
        best = np.unravel_index(np.argmin(delta), delta.shape)
        if delta[best] < -1e-9:
            i, j = I[best[0]], J[best[1]]
            loads[b1] += demand_by_rank[j] - demand_by_rank[i]
            loads[b2] += demand_by_rank[i] - demand_by_rank[j]
            block[i], block[j] = b2, b1
            swaps += 1
    return block, pairs, swaps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_window_arguments(ap)
    ap.add_argument("--time-limit", type=float, default=5.0, help="seconds of the heuristic plan")
    ap.add_argument("--swap-seconds", type=float, default=60.0)
    ap.add_argument("--random", type=int, default=3, help="random re-assignments")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    inst = window_from_arguments(args)
    res = get_solver("heuristic")(inst, objective="sync", time_limit=args.time_limit, seed=args.seed,
                                  report_baseline=False)
    if res.plan is None:  # a window with no layout: one line and exit code 1, as rp-opt plan
        print(f"error: window: heuristic returned no plan ({res.status_text()})", file=sys.stderr)
        return 1
    assert check(inst, res.plan).valid
    demand = rank_demand(inst.window, res.plan.placement).astype(np.float64)      # [N, L, P]
    block = block_of(res.plan.layout, inst.cluster.edp)
    num_blocks = res.plan.layout.num_rows * inst.cluster.edp
    rng = np.random.default_rng(args.seed)
    out = {"samples": inst.window.num_samples, "blocks": num_blocks,
           "samples_per_block": [int(x) for x in np.percentile(np.bincount(block, minlength=num_blocks), [0, 50, 100])],
           "gap": res.gap, "aggregate": excess(demand.sum(axis=0)),
           "plan": excess(group_sums(block, demand, num_blocks)),
           "random": [excess(group_sums(rng.permutation(block), demand, num_blocks)) for _ in range(args.random)]}
    swapped, pairs, swaps = expert_swaps(demand, block, num_blocks, args.swap_seconds, rng)
    out.update({"expert_swaps": excess(group_sums(swapped, demand, num_blocks)), "swap_pairs": pairs,
                "swaps": swaps, "swap_seconds": args.swap_seconds})
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"N = {out['samples']}, {num_blocks} blocks (samples per block min/median/max "
          f"{'/'.join(map(str, out['samples_per_block']))}), heuristic gap {100 * res.gap:.3f} % "
          "((score - bound) / score)")
    print("| blocks | sum_l max_p W over sum_l mean_p W, % |")
    print("|---|---|")
    print(f"| aggregate loads (placement) | {100 * out['aggregate']:.2f} |")
    print(f"| heuristic plan | {100 * out['plan']:.2f} |")
    print(f"| random re-assignments | {', '.join(f'{100 * x:.2f}' for x in out['random'])} |")
    print(f"| plan + {args.swap_seconds:g} s of expert-only swaps ({swaps} of {pairs} pairs) | "
          f"{100 * out['expert_swaps']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
