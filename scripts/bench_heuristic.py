"""Benchmarks of the production heuristic (issue 8). Prints three tables:

1. small windows (N <= 24, D=4, L=8, E=16, P=4): heuristic vs the exact solver's plan;
2. the production window (N=4096, L=48, E=256, D=64, G=8, P=8, ling-flash-like): identity+ffd,
   identity+kk, LPT+ffd and the heuristic, against the best provable lower bound;
3. move-kernel throughput and plan time from N=512 to N=16384 (``--scaling``).

Usage: python scripts/bench_heuristic.py [--small K] [--production] [--scaling] [--time S]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from rp_opt import synth
from rp_opt.check import check
from rp_opt.solvers import get_solver


def small(count: int, exact_time: float):
    print("| seed | N | exact status | exact primary | heuristic primary | gap % | heuristic s |")
    print("|---|---|---|---|---|---|---|")
    gaps = []
    for seed in range(count):
        n = 16 + (seed % 3) * 4
        inst = synth.generate(model="ling-flash-like", samples=n, dp=4, edp=2, ep=4, capacity=4096, layers=8,
                              experts=16, seed=seed)
        heur = get_solver("heuristic")(inst, objective="sync", time_limit=1.0, seed=seed, workers=1)
        assert check(inst, heur.plan).valid
        exact = get_solver("exact")(inst, objective="sync", time_limit=exact_time, seed=0, warm_start=heur.plan,
                                    placement=heur.plan.placement)
        ref = min(exact.score[0], heur.score[0])
        gap = (heur.score[0] - ref) / ref
        if exact.status == "optimal":
            gaps.append(gap)
        print(f"| {seed} | {n} | {exact.status} | {exact.score[0]:.1f} | {heur.score[0]:.1f} | {100 * gap:.3f} | "
              f"{heur.seconds:.2f} |")
    if gaps:
        print(f"proven windows {len(gaps)}: median gap {100 * statistics.median(gaps):.3f} %, worst {100 * max(gaps):.3f} %")


def production(seconds: float, samples: int = 4096):
    inst = synth.generate(model="ling-flash-like", samples=samples, dp=64, edp=8, ep=8, capacity=32768, seed=0)
    print(f"| solver | primary (sync) | vs identity+ffd | vs bound | seconds |")
    print("|---|---|---|---|---|")
    rows = {}
    for name in ("baseline", "kk", "lpt-ffd"):
        r = get_solver(name)(inst, objective="sync")
        rows[name] = r
    heur = get_solver("heuristic")(inst, objective="sync", time_limit=seconds, seed=0)
    assert check(inst, heur.plan).valid
    rows["heuristic"] = heur
    bound = heur.stats["lower_bound"]
    base = rows["baseline"].score[0]
    for name, r in rows.items():
        print(f"| {name} | {r.score[0]:.6g} | {100 * (r.score[0] - base) / base:+.2f} % | "
              f"{100 * (r.score[0] - bound) / bound:+.2f} % | {r.seconds:.2f} |")
    print(f"best provable lower bound {bound:.6g} (analytic {heur.stats['analytic_bound']:.6g}); "
          f"for this placement {heur.stats['placement_bound']:.6g}")
    print("heuristic timings", {k: round(v, 2) for k, v in heur.stats["timings"].items()},
          "seeds", heur.stats["seeds"], "moves/s", round(heur.stats["moves_per_second"]))


def scaling(seconds: float):
    from rp_opt.cost import rank_demand
    from rp_opt.packing import anneal
    from rp_opt.placement import local_search_placement

    print("| N | R* | plan s (limit) | kernel moves/s (1 core) |")
    print("|---|---|---|---|")
    for n in (512, 2048, 4096, 16384):
        inst = synth.generate(model="ling-flash-like", samples=n, dp=64, edp=8, ep=8, capacity=32768, seed=0)
        start = time.perf_counter()
        r = get_solver("heuristic")(inst, objective="sync", time_limit=seconds, seed=0, report_baseline=False)
        wall = time.perf_counter() - start
        placement = local_search_placement(inst.window, 8)
        rows = r.plan.num_rows
        problem = anneal.make_problem(inst, rank_demand(inst.window, placement), rows, "sync")
        state = anneal.State(problem, 32)
        anneal.load_layouts(problem, state, range(32), [r.plan.layout.cell_of] * 32)
        t = time.perf_counter()
        anneal.metropolis_steps(problem, state, 0, 32, 1.0, 100, np.random.default_rng(0), 4)
        rate = 100 * 32 * 4 / (time.perf_counter() - t)
        print(f"| {n} | {rows} | {wall:.2f} ({seconds}) | {rate:.0f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=0)
    parser.add_argument("--exact-time", type=float, default=30.0)
    parser.add_argument("--production", action="store_true")
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--time", type=float, default=5.0)
    args = parser.parse_args()
    if args.small:
        small(args.small, args.exact_time)
    if args.production:
        production(args.time)
    if args.scaling:
        scaling(args.time)
