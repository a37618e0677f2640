#!/usr/bin/env python
"""Scaling of the heuristic planner: plan seconds and peak memory against N, L, E and D.

Each point runs in a fresh process (spawned, one task per process), so imports and earlier
points do not pollute its memory figures. The window is built first (not measured); then
the planner runs with a FIXED annealing schedule (--temperatures x --steps moves per
replica, --replicas replicas, 1 process), so the time measures work for a given schedule
rather than a time limit. Reported: plan seconds, the planner's own phase timings, the
tracemalloc peak during planning (numpy buffers included), and the process's peak RSS.

    python scripts/bench_scaling.py --out docs/bench
    python scripts/bench_scaling.py --quick            # seconds (CI)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
import multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rp_opt.bench.gap import machine  # noqa: E402
from rp_opt.bench.report import add_output_arguments, image_path, print_tables, write_outputs  # noqa: E402
from rp_opt.bench.suites import InstanceSpec  # noqa: E402

BASE = dict(model="ling-tiny-like", samples=1024, dp=16, edp=2, ep=8, capacity=32768, layers=8, experts=64)
SWEEP = {"N": ("samples", (256, 512, 1024, 2048, 4096)), "L": ("layers", (4, 8, 16, 32)),
         "E": ("experts", (16, 32, 64, 128)), "D": ("dp", (8, 16, 32, 64))}
QUICK_BASE = dict(model="ling-tiny-like", samples=32, dp=4, edp=2, ep=2, capacity=8192, layers=2, experts=4)
QUICK_SWEEP = {"N": ("samples", (16, 32)), "L": ("layers", (2, 4))}


def measure(spec: InstanceSpec, solver: str, options: dict, time_limit: float, trace: bool = False) -> dict:
    """Run in a fresh process: build the window, then time one plan (untraced: tracemalloc
    slows Python code several times) and, with ``trace``, run it again under tracemalloc
    for the peak of traced allocations."""
    import resource
    import tracemalloc

    from rp_opt.check import check
    from rp_opt.solvers import get_solver

    t0 = time.perf_counter()
    instance = spec.build()
    build = time.perf_counter() - t0
    solve = get_solver(solver)
    # warm up on a tiny window: imports (OR-Tools, HiGHS) and first-call costs stay out of the figures
    warm = InstanceSpec(config="warm-up", **{**QUICK_BASE, "samples": 16}).build()
    solve(warm, objective="sync", time_limit=time_limit, seed=0, **options)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    t0 = time.perf_counter()
    result = solve(instance, objective="sync", time_limit=time_limit, seed=0, **options)
    seconds = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = None
    if trace:
        tracemalloc.start()
        solve(instance, objective="sync", time_limit=time_limit, seed=0, **options)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    valid = bool(result.plan is not None and check(instance, result.plan).valid)
    timings = (result.stats or {}).get("timings", {})
    return {"seconds": seconds, "build_seconds": build, "peak_mib": None if peak is None else peak / 2**20,
            "rss_mib": rss / 1024, "rss_growth_mib": (rss - rss_before) / 1024,
            "rss_before_mib": rss_before / 1024, "valid": valid, "rows": result.plan.num_rows if result.plan else None,
            "status": result.status, "timings": {k: float(v) for k, v in timings.items()},
            "demand_mib": instance.window.demand.nbytes / 2**20}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--solver", default="heuristic")
    parser.add_argument("--params", default="N,L,E,D", help="which parameters to sweep")
    parser.add_argument("--temperatures", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="steps per temperature")
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--time-limit", type=float, default=60.0,
                        help="solver time limit (the schedule decides the annealing; R* gets 20%% of it)")
    parser.add_argument("--tracemalloc", action="store_true", help="also run each point under tracemalloc (peak)")
    parser.add_argument("--quick", action="store_true", help="two tiny points per parameter (CI)")
    parser.add_argument("--in-process", action="store_true",
                        help="no subprocess per point (memory figures then mix points)")
    add_output_arguments(parser, "scaling")
    args = parser.parse_args(argv)
    base, sweep = (QUICK_BASE, QUICK_SWEEP) if args.quick else (BASE, SWEEP)
    params = [p.strip() for p in args.params.split(",") if p.strip()]
    unknown = [p for p in params if p not in sweep]
    if unknown or not params:
        # an unknown name was dropped without a word (--params N,X swept N alone)
        got = f"{unknown[0]!r} is not one of them" if unknown else f"got {args.params!r}"
        print(f"error: --params: choose from {', '.join(sweep)}; {got}", file=sys.stderr)
        return 2
    options = {}
    if args.solver == "heuristic":
        options = {"temperatures": args.temperatures, "steps_per_temperature": args.steps,
                   "replicas": args.replicas, "workers": 1, "report_baseline": False}
    points = []
    for param in params:
        field, values = sweep[param]
        for value in values:
            spec = InstanceSpec(config=f"scaling-{param}{value}", **{**base, field: value})
            if args.in_process:
                out = measure(spec, args.solver, options, args.time_limit, args.tracemalloc)
            else:
                with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
                    out = pool.submit(measure, spec, args.solver, options, args.time_limit, args.tracemalloc).result()
            points.append({"param": param, "value": value, "N": spec.samples, "L": spec.layers,
                           "E": spec.experts, "D": spec.dp, **out})
            print(f"{param}={value}: {out['seconds']:.2f} s, max RSS {out['rss_mib']:.0f} MiB", file=sys.stderr)
    rows = [[p["param"], p["value"], p["N"], p["L"], p["E"], p["D"], p["rows"], p["seconds"],
             *(p["timings"].get(k) for k in ("rows", "rank_demand", "seeds", "anneal")),
             p["peak_mib"], p["rss_mib"], p["rss_growth_mib"], p["demand_mib"], "yes" if p["valid"] else "NO"]
            for p in points]
    headers = ["swept", "value", "N", "L", "E", "D", "R*", "plan s", "R* s", "rank demand s", "seeds s",
               "anneal s", "traced peak MiB", "max RSS MiB", "RSS growth in plan MiB", "demand a[N,L,E] MiB", "valid"]
    tables = {f"Scaling of {args.solver} (base point {base})": (headers, rows)}
    meta = {"solver": args.solver, "options": options, "base": base,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "command": " ".join(sys.argv)}
    if args.out:
        name = "scaling_quick" if args.quick else "scaling"
        write_outputs(args.out, name, tables, {"meta": meta, "points": points},
                      f"Measured {meta['date']} on {meta['machine']}; schedule {options}.")
        from rp_opt.bench.plots import scaling_panels
        scaling_panels(points, image_path(args, name))
    if args.json:
        from rp_opt.commands._common import emit_json
        emit_json({"meta": meta, "points": points})
    else:
        print_tables(tables)
    return 0 if all(p["valid"] for p in points) else 1


if __name__ == "__main__":
    sys.exit(main())
