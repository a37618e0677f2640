#!/usr/bin/env python
"""Open question 1, objective mismatch: plan with `shard`, score under `sync`, and the
reverse; how often and by how much the choice matters as the number of EDP shards G grows.

For every G in (1, 2, 4, 8) and seed, the heuristic (fixed annealing schedule, the same
reference placement) plans the window once under each objective; both plans are scored
under both objectives by the checker. Regret of planning with the wrong objective:

    sync regret  = sync(plan_shard) / sync(plan_sync) - 1
    shard regret = shard(plan_sync) / shard(plan_shard) - 1

A negative regret means the heuristic found a better plan for an objective while
optimising the other (it is not exact). "Matters" counts windows with regret > 0.1 %.

    python scripts/question_objective.py --out docs/bench
    python scripts/question_objective.py --quick
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rp_opt.bench.questions import base_spec, checked_score, finish, img_path, parser, plan  # noqa: E402
from rp_opt.bench.runner import reference_placement  # noqa: E402
from rp_opt.bench.stats import mean_std, pm  # noqa: E402

THRESHOLD = 0.1  # percent


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__).parse_args(argv)
    seeds = args.seeds or (1 if args.quick else 5)
    shards = (1, 2) if args.quick else (1, 2, 4, 8)
    points = []
    for g in shards:
        for seed in range(seeds):
            instance = base_spec(args.quick, f"objective-G{g}", seed, edp=g).build()
            placement = reference_placement(instance, "reference")
            plans = {obj: plan(instance, objective=obj, quick=args.quick, seed=seed, placement=placement)
                     for obj in ("shard", "sync")}
            s = {(p, o): checked_score(instance, plans[p], o) for p in plans for o in ("shard", "sync")}
            points.append({"G": g, "seed": seed,
                           "sync_regret": 100 * (s["shard", "sync"] / s["sync", "sync"] - 1),
                           "shard_regret": 100 * (s["sync", "shard"] / s["shard", "shard"] - 1),
                           "scores": {f"{p}->{o}": v for (p, o), v in s.items()}})
    rows = []
    for g in shards:
        pts = [p for p in points if p["G"] == g]
        rows.append([g, len(pts),
                     sum(p["sync_regret"] > THRESHOLD for p in pts), pm([p["sync_regret"] for p in pts], 3),
                     max(p["sync_regret"] for p in pts),
                     sum(p["shard_regret"] > THRESHOLD for p in pts), pm([p["shard_regret"] for p in pts], 3),
                     max(p["shard_regret"] for p in pts)])
    headers = ["G", "windows", "sync regret > 0.1%", "sync regret % (mean ± std)", "max",
               "shard regret > 0.1%", "shard regret % (mean ± std)", "max"]
    tables = {"Objective mismatch: regret of planning under the other objective": (headers, rows)}
    path = img_path(args, "question_objective")
    if path:
        from rp_opt.bench.plots import curves
        series, bands = {}, {}
        for key, label in (("sync_regret", "plan shard, score sync"), ("shard_regret", "plan sync, score shard")):
            stats = [mean_std([p[key] for p in points if p["G"] == g]) for g in shards]
            series[label] = (list(shards), [m for m, _, _ in stats])
            bands[label] = ([m - s for m, s, _ in stats], [m + s for m, s, _ in stats])
        curves(series, path, "EDP shards G", "regret % (mean ± std)", logx=True, bands=bands)
    finish(args, "question_objective", tables, {"points": points},
           f"{seeds} seeds per G; heuristic schedule fixed (rp_opt.bench.questions).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
