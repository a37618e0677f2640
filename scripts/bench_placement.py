"""Benchmark of expert placement (issue 4): prints the tables of the report.

1. A deepseek-v3-like window (58 MoE layers, 256 experts, top-8; rp_opt.synth) placed on
   P = 8, 16, 32, 64 EP ranks: time of LPT and LPT + local search for all layers, their
   gap to the best proven bound, and the exact solve (MILP per layer, HiGHS via Pyomo,
   optionally CP-SAT) to ``--mip-gap`` (default 0.1%): seconds per layer, how many layers
   the analytic bound already proved, largest remaining gap.
2. Ling-flash-like windows: max/mean rank load and the share of the EP-rank coefficient of
   variation removed, for identity, LPT, LPT + local search and exact placement.

   CV definitions (both reported), with L[l,p] the aggregate rank load:
   - per-layer CV: mean over layers l of std_p L[l,p] / mean_p L[l,p]  (each MoE layer's
     all-to-all waits for its busiest rank, so this is the one that costs time);
   - global CV: std_p / mean_p of the per-rank totals sum_l L[l,p] (one device per EP rank
     holds its experts of every layer).
   Share removed = 1 - CV(method) / CV(identity).

Usage: .venv/bin/python scripts/bench_placement.py [--samples 512] [--ranks 8 16 32 64]
       [--backends highs cpsat] [--time-limit 10] [--mip-gap 1e-3] [--ling-seeds 3]
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np

from rp_opt.commands._common import table
from rp_opt.cost import rank_load
from rp_opt.placement import (exact_placement, layer_rank_loads, local_search_ranks, lpt_ranks,
                              placement_lower_bound)
from rp_opt.solution import Placement
from rp_opt.synth import generate


def gaps(values, bound):
    g = (values - bound) / values
    return f"{100 * g.mean():.4f}", f"{100 * g.max():.4f}"


def bench_deepseek(args, skew):
    t0 = time.perf_counter()
    instance = generate(model="deepseek-v3-like", samples=args.samples, dp=16, edp=2, ep=8, seed=args.seed, skew=skew)
    window = instance.window
    load = window.expert_load()
    print(f"deepseek-v3-like window: N={window.num_samples} L={window.num_layers} E={window.num_experts} "
          f"top-{window.top_k}, synth skew {skew}, {load.sum()} routed tokens "
          f"(generated in {time.perf_counter() - t0:.1f} s)\n")
    heur_rows, exact_rows = [], []
    for num_ranks in args.ranks:
        t = time.perf_counter()
        lpt = lpt_ranks(load, num_ranks)
        t_lpt = time.perf_counter() - t
        ls = local_search_ranks(load, lpt, num_ranks)
        t_ls = time.perf_counter() - t
        lpt_max = layer_rank_loads(load, lpt, num_ranks).max(axis=1)
        ls_max = layer_rank_loads(load, ls, num_ranks).max(axis=1)
        analytic = placement_lower_bound(load, num_ranks)
        best_bound = analytic.astype(np.float64)
        for backend, mip_gap in [(b, g) for g in args.mip_gaps for b in args.backends]:
            t = time.perf_counter()
            res = exact_placement(window, num_ranks, "aggregate", time_limit=args.time_limit, mip_gap=mip_gap,
                                  backend=backend, threads=args.threads)
            wall = time.perf_counter() - t
            by_bound = sum(1 for s in res.stats if s.get("solved_by") == "bound")
            proven = int(np.sum(res.gap <= mip_gap + 1e-12))
            milp_secs = res.seconds[[s.get("solved_by") != "bound" for s in res.stats]]
            exact_rows.append([num_ranks, backend, f"{mip_gap:g}", f"{wall:.2f}", f"{res.seconds.mean():.3f}",
                               f"{res.seconds.max():.2f}",
                               f"{milp_secs.mean():.2f}" if milp_secs.size else "-",
                               f"{window.num_layers - by_bound}", f"{proven}/{window.num_layers}",
                               f"{100 * res.gap.max():.4f}", res.status])
            best_bound = np.maximum(best_bound, res.bound)
            assert np.array_equal(rank_load(window, res.placement).max(axis=1), res.value)
        heur_rows.append([num_ranks, f"{1000 * t_lpt:.1f}", f"{1000 * t_ls:.1f}", *gaps(lpt_max, best_bound),
                          *gaps(ls_max, best_bound), f"{float(np.mean(lpt_max / (load.sum(axis=1) / num_ranks))):.4f}"])
    print("LPT and LPT + local search, all 58 layers at once; gaps to the best proven bound (%)")
    print(table(["P", "LPT ms", "LPT+LS ms", "LPT gap mean", "LPT gap max", "LPT+LS gap mean", "LPT+LS gap max",
                 "LPT max/mean"], heur_rows))
    print(f"\nexact per layer (time limit {args.time_limit:g} s per layer, warm start "
          "LPT + local search; 'MILP layers' = layers the analytic bound did not already prove)")
    print(table(["P", "backend", "mip gap", "total s", "s/layer mean", "s/layer max", "s per MILP layer", "MILP layers",
                 "proven", "max gap %", "status"], exact_rows))


def cv_per_layer(loads):
    return float(np.mean(loads.std(axis=1) / loads.mean(axis=1)))


def cv_global(loads):
    totals = loads.sum(axis=0)
    return float(totals.std() / totals.mean())


def bench_ling(args):
    print("\nling-flash-like windows (48 layers, 256 experts, top-8)")
    rows = []
    for seed in range(args.ling_seeds):
        for num_ranks in args.ling_ranks:
            instance = generate(model="ling-flash-like", samples=args.samples, dp=16, edp=2, ep=num_ranks, seed=seed)
            window = instance.window
            load = window.expert_load()
            ident = Placement.identity(window.num_layers, window.num_experts, num_ranks)
            lpt = Placement(lpt_ranks(load, num_ranks), num_ranks)
            ls = Placement(local_search_ranks(load, lpt.ranks, num_ranks), num_ranks)
            t = time.perf_counter()
            ex = exact_placement(window, num_ranks, "aggregate", time_limit=args.time_limit, mip_gap=args.mip_gap,
                                 backend=args.backends[0], threads=args.threads)
            t_ex = time.perf_counter() - t
            base = rank_load(window, ident)
            base_cv, base_gcv = cv_per_layer(base), cv_global(base)
            mean = load.sum(axis=1) / num_ranks
            for name, placement in (("identity", ident), ("lpt", lpt), ("lpt+ls", ls), ("exact", ex.placement)):
                loads = rank_load(window, placement)
                ratio = loads.max(axis=1) / mean
                cv, gcv = cv_per_layer(loads), cv_global(loads)
                rows.append([seed, num_ranks, name, f"{ratio.mean():.4f}", f"{ratio.max():.4f}", f"{cv:.5f}",
                             f"{100 * (1 - cv / base_cv):.2f}", f"{gcv:.5f}", f"{100 * (1 - gcv / base_gcv):.2f}",
                             f"{t_ex:.2f}" if name == "exact" else ""])
    print(table(["seed", "P", "placement", "max/mean (avg l)", "max/mean (worst l)", "per-layer CV",
                 "CV removed %", "global CV", "global CV removed %", "exact s"], rows))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--backends", nargs="+", default=["highs", "cpsat"])
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--mip-gap", type=float, default=1e-3, help="gap of the Ling runs")
    parser.add_argument("--mip-gaps", type=float, nargs="+", default=[1e-3, 1e-5], help="gaps of the deepseek runs")
    parser.add_argument("--skews", type=float, nargs="+", default=[1.0, 0.5], help="synth popularity skews")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--ling-seeds", type=int, default=3)
    parser.add_argument("--ling-ranks", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--skip-deepseek", action="store_true")
    parser.add_argument("--skip-ling", action="store_true")
    args = parser.parse_args()
    logging.getLogger("pyomo").setLevel(logging.WARNING)
    if not args.skip_deepseek:
        for skew in args.skews:
            bench_deepseek(args, skew)
            print()
    if not args.skip_ling:
        bench_ling(args)


if __name__ == "__main__":
    main()
