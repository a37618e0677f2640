"""Placement refinement in the production heuristic: the same window planned with and
without the refine round (``refine=True/False``), at several time limits.

Usage::

    python scripts/bench_refine.py --window /tmp/prod4096.npz --limits 5 20 60 --seeds 0 1 [--json]

Without ``--window`` a ling-flash-like window is generated (``--samples``, default 4096,
L=48, E=256; ``--dp/--edp/--ep``, default D=64, G=8, P=8). Prints, per run, the primary, its gap to the heuristic's
placement-free lower bound and where it sits (attention and expert totals above their
bounds, maxima above means: the heuristic's ``gap_split`` rescaled to fractions of the bound), the swaps
kept and whether
the refined plan was adopted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rp_opt.bench.suites import add_window_arguments, window_from_arguments
from rp_opt.check import check
from rp_opt.solvers import get_solver


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_window_arguments(ap)
    ap.add_argument("--limits", type=float, nargs="+", default=[5.0, 20.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--objective", default="sync")
    ap.add_argument("--search-workers", type=int, default=2,
                    help="processes of the block search (fixed: by default the heuristic picks 1 or 2 from the load)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    inst = window_from_arguments(args)
    rows = []
    if not args.json:
        print("| limit s | seed | refine | seconds | primary | gap to bound % | attention % | expert % | spread % "
              "| swaps | adopted |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
    for limit in args.limits:
        for seed in args.seeds:
            for refine in (False, True):
                t0 = time.perf_counter()
                res = get_solver("heuristic")(inst, objective=args.objective, time_limit=limit, seed=seed,
                                              refine=refine, report_baseline=False,
                                              search_workers=args.search_workers)
                seconds = time.perf_counter() - t0
                if res.plan is None:  # a window with no layout: one line and exit code 1, as rp-opt plan
                    print(f"error: window: heuristic returned no plan ({res.status_text()})", file=sys.stderr)
                    return 1
                assert check(inst, res.plan).valid
                rounds = res.stats.get("refine") or []
                row = {"limit": limit, "seed": seed, "refine": refine, "seconds": seconds, "primary": res.score[0],
                       "bound": res.bound, "gap": (res.score[0] - res.bound) / res.bound,
                       "swaps": sum(r["swaps"] for r in rounds), "adopted": any(r.get("adopted") for r in rounds),
                       # the split in this table's units (fractions of the bound, like "gap")
                       "gap_split": {k: v * res.score[0] / res.bound
                                     for k, v in res.stats.get("gap_split", {}).items()}}
                rows.append(row)
                if not args.json:
                    print(f"| {limit:g} | {seed} | {'on' if refine else 'off'} | {seconds:.2f} | "
                          f"{row['primary']:.6g} | "
                          f"{100 * row['gap']:.3f} | "
                          + " | ".join(f"{100 * row['gap_split'].get(k, float('nan')):.3f}"
                                       for k in ("attention", "expert", "spread"))
                          + f" | {row['swaps']} | {row['adopted'] if refine else '-'} |", flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
