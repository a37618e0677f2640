#!/usr/bin/env python
"""Open question 2, replay lag: plan on routing recorded k policy updates earlier, score on
the current routing; the gain over the baseline as k grows (k = 0, 1, 2, 4, 8, 16).

``generate(..., drift_steps=k)`` with the same seed shares the lengths and the base routing
and moves the expert popularity by k steps of drift; k = 0 is the routing the step
executes. For each step t of a sequence (seed = t) and each k, the heuristic plans on the
k-lagged window (placement from the lagged loads, packing from the lagged routing) and the
checker scores the plan on the current window. The baseline (identity + ffd) depends on
lengths only, so its cost is the same for every k. LPT + ffd isolates the placement part.

The mean gain over the sequence gets a 95 % moving-block bootstrap interval over steps
(rp_opt.bench.stats.block_bootstrap_ci). Synthetic steps are independent windows, so the
blocks matter little here; on a recorded run consecutive steps are correlated and they do.

    python scripts/question_replay_lag.py --out docs/bench
    python scripts/question_replay_lag.py --quick
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rp_opt.bench.questions import base_spec, checked_score, finish, img_path, parser, plan  # noqa: E402
from rp_opt.bench.stats import block_bootstrap_ci, pm  # noqa: E402

LAGS = (0, 1, 2, 4, 8, 16)


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__).parse_args(argv)
    steps = args.seeds or (1 if args.quick else 8)
    lags = (0, 4) if args.quick else LAGS
    points = []
    for t in range(steps):
        current = base_spec(args.quick, "replay-lag", t).build()
        base = checked_score(current, plan(current, "baseline"))
        for k in lags:
            lagged = base_spec(args.quick, "replay-lag", t, drift_steps=k).build()
            heur = checked_score(current, plan(lagged, quick=args.quick, seed=t))
            lpt = checked_score(current, plan(lagged, "lpt-ffd"))
            points.append({"step": t, "k": k, "baseline": base, "heuristic": heur, "lpt_ffd": lpt,
                           "gain": 100 * (base - heur) / base, "placement_gain": 100 * (base - lpt) / base})
    rows, series, bands = [], {"LPT+heuristic": ([], []), "LPT+ffd": ([], [])}, {"LPT+heuristic": ([], [])}
    for k in lags:
        pts = sorted((p for p in points if p["k"] == k), key=lambda p: p["step"])
        gain = [p["gain"] for p in pts]
        est, low, high = block_bootstrap_ci(gain, seed=k)
        rows.append([k, len(pts), pm(gain), f"[{low:.2f}, {high:.2f}]", pm([p["placement_gain"] for p in pts])])
        series["LPT+heuristic"][0].append(k)
        series["LPT+heuristic"][1].append(est)
        bands["LPT+heuristic"][0].append(low)
        bands["LPT+heuristic"][1].append(high)
        series["LPT+ffd"][0].append(k)
        series["LPT+ffd"][1].append(sum(p["placement_gain"] for p in pts) / len(pts))
    headers = ["lag k", "steps", "gain % of LPT+heuristic (mean ± std)", "95% block-bootstrap CI of mean",
               "gain % of LPT+ffd (placement only)"]
    tables = {"Replay lag: gain over identity+ffd on the current routing, plan made k steps earlier": (headers, rows)}
    path = img_path(args, "question_replay_lag")
    if path:
        from rp_opt.bench.plots import curves
        curves(series, path, "lag k (policy updates)", "gain over identity+ffd (%)", bands=bands)
    finish(args, "question_replay_lag", tables, {"points": points},
           f"{steps} steps (seeds 0..{steps - 1}); heuristic schedule fixed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
