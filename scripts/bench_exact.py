"""Benchmark of the exact packing planner (and the joint model on tiny windows).

Usage::

    python scripts/bench_exact.py --runs 24:2:sync:cpsat:1 32:1:sync:cpsat:0 --time-limit 60
    python scripts/bench_exact.py --joint 20 --time-limit 20

A run is N:G:objective:backend:symmetry. Windows come from rp_opt.synth.generate
(ling-tiny-like, D=4, P=4, L=8, E=16, capacity 16384) with the LPT placement (identity
when LPT is absent) and R = R*. Prints one table row per run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rp_opt.check import check
from rp_opt.packing.exact import default_num_rows, default_placement, solve_packing
from rp_opt.solvers import get_solver
from rp_opt.synth import generate


def window(n, g, seed, layers=8, experts=16, capacity=16384):
    return generate(model="ling-tiny-like", samples=n, dp=4, edp=g, ep=4, capacity=capacity, layers=layers,
                    experts=experts, seed=seed)


def run_packing(spec: str, time_limit: float, seed: int):
    n, g, objective, backend, sym = spec.split(":")
    inst = window(int(n), int(g), seed)
    rows = default_num_rows(inst)
    place = default_placement(inst)
    t0 = time.perf_counter()
    res = solve_packing(inst, place, rows, objective=objective, backend=backend, symmetry=bool(int(sym)),
                        time_limit=time_limit, seed=seed)
    secs = time.perf_counter() - t0
    rep = check(inst, res.plan, num_rows=rows)
    gap = res.gap
    print(f"| {n:>3} | {g} | {rows} | {objective:5} | {backend:5} | {'on' if int(sym) else 'off':3} | "
          f"{res.status:8} | {secs:6.1f} | {res.score[0]:.6g} | {res.bound:.6g} | {100 * gap:.4f} | {rep.valid} |",
          flush=True)


def run_joint(count: int, time_limit: float):
    wins, total, gains = 0, 0, []
    for seed in range(count):
        inst = generate(model="ling-tiny-like", samples=6, dp=2, edp=2, ep=2, capacity=16384, layers=1,
                        experts=4, seed=seed)
        rows = default_num_rows(inst)
        hier = get_solver("exact")(inst, objective="sync", time_limit=time_limit, num_rows=rows)
        joint = get_solver("joint")(inst, objective="sync", time_limit=time_limit, num_rows=rows)
        assert check(inst, joint.plan).valid and check(inst, hier.plan).valid
        if joint.status != "optimal" or hier.status != "optimal":
            print(f"seed {seed}: not proven ({joint.status}, {hier.status}); skipped")
            continue
        total += 1
        gain = (hier.score[0] - joint.score[0]) / hier.score[0]
        if gain > 1e-9:
            wins += 1
            gains.append(gain)
        print(f"seed {seed}: R={rows} hier {hier.score[0]:.6g} joint {joint.score[0]:.6g} gain {100 * gain:.3f} %",
              flush=True)
    mean = 100 * float(np.mean(gains)) if gains else 0.0
    most = 100 * float(np.max(gains)) if gains else 0.0
    print(f"joint beats LPT-then-exact on {wins}/{total} windows; mean gain when it does {mean:.3f} %, max {most:.3f} %")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", nargs="*", default=["16:1:sync:cpsat:1", "16:2:shard:cpsat:1", "24:1:sync:cpsat:1",
                                                   "24:2:sync:cpsat:1", "24:2:shard:highs:1", "32:1:sync:cpsat:0",
                                                   "32:1:sync:cpsat:1", "64:2:sync:cpsat:1"])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--joint", type=int, default=0, help="number of tiny windows for the joint comparison")
    args = ap.parse_args()
    if args.runs:
        print("|   N | G | R | obj   | back  | sym | status   | secs   | score | bound | gap % | valid |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for spec in args.runs:
            run_packing(spec, args.time_limit, args.seed)
    if args.joint:
        run_joint(args.joint, args.time_limit)


if __name__ == "__main__":
    main()
