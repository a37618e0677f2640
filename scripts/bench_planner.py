"""Planning overhead of `Planner.plan` on production-sized windows (docs/trainer.md).

Windows: ling-flash-like proxy (L = 48 MoE layers, E = 256 experts, top-8), D = 64 DP
slots, G = 8 EDP shards, P = 8 EP ranks, C = 32768 tokens, N = 1024 .. 8192 samples
(rp_opt.synth). For every N, two consecutive steps are planned: step 0 cold, step 1 on the
same samples with routing drifted by one policy update (the previous layout is a valid
warm start). Reported per step: wall time of each phase (replay = validating the counts,
certify = R*, warm_start = placement seed and warm-start plan, solve, migrate, choose = scoring
the plans that move nothing), the score against identity placement + FFD packing (what
AReaL runs), the bound and gap, and the experts moved.

Also measures the routing-replay adapter on per-sample ids [T_i, L, k] (tokens per second).

Usage: python scripts/bench_planner.py [--sizes 1024 2048 4096 8192] [--limits 2 10] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from rp_opt import Planner, check
from rp_opt.replay import demand_from_samples
from rp_opt.solvers import get_solver
from rp_opt.synth import generate

MODEL = "ling-flash-like"


def replay_throughput(seed: int = 0, samples: int = 32) -> dict:
    """Tokens/s of the per-sample adapter on ids shaped like ling-flash-like (L=48, k=8)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(512, 4096, samples)
    # k distinct experts per token (a repeated id is refused): a random first one, then
    # every 32nd
    routing = [((rng.integers(0, 256, (t, 48, 1)) + 32 * np.arange(8)) % 256).astype(np.int16) for t in lengths]
    start = time.perf_counter()
    demand_from_samples(routing, 256)
    seconds = time.perf_counter() - start
    return {"samples": samples, "tokens": int(lengths.sum()), "seconds": seconds,
            "tokens_per_second": float(lengths.sum() / seconds)}


def windows_of(size: int) -> tuple[list, float]:
    """Step 0 and step 1 (same samples, routing drifted by one policy update)."""
    t = time.perf_counter()
    windows = [generate(model=MODEL, samples=size, dp=64, edp=8, ep=8, capacity=32768, seed=size, drift_steps=d)
               for d in (0, 1)]
    return windows, time.perf_counter() - t


def bench(windows: list, gen_seconds: float, size: int, limit: float, mode: str) -> list[dict]:
    planner = Planner(windows[0].cluster, MODEL, mode=mode, time_limit=limit, seed=0)
    rows = []
    for k, inst in enumerate(windows):
        w = inst.window
        step = planner.plan(lengths=w.lengths, routing=np.asarray(w.demand), top_k=w.top_k)
        base = get_solver("baseline")(step.instance, objective="sync", num_rows=step.num_rows)
        report = check(step.instance, step.plan)
        rows.append({
            "N": size, "step": k, "limit": limit, "solver": step.solver, "status": step.status,
            "R": step.num_rows, "r_star": step.r_star, "warm_start": step.warm_start,
            "timings": {key: round(v, 3) for key, v in step.timings.items()},
            "score": step.score[0], "baseline": base.score[0], "improvement": 1 - step.score[0] / base.score[0],
            "bound": step.bound, "gap": step.gap, "decision": step.decision, "moved": step.migration.num_transfers,
            "moved_bytes": step.migration.total_bytes, "valid": report.valid, "generate_seconds": gen_seconds,
        })
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--limits", type=float, nargs="+", default=[2.0, 10.0])
    parser.add_argument("--mode", default="auto")
    parser.add_argument("--json", help="write all rows to this file")
    args = parser.parse_args()
    out = {"replay": replay_throughput(), "rows": []}
    print(json.dumps({"replay": out["replay"]}), flush=True)
    for size in args.sizes:
        windows, gen_seconds = windows_of(size)
        for limit in args.limits:
            out["rows"].extend(bench(windows, gen_seconds, size, limit, args.mode))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(out, handle, indent=1)
    print(markdown(out["rows"]))


def markdown(rows: list[dict]) -> str:
    """The table of docs/trainer.md."""
    keys = ("replay", "certify", "warm_start", "solve", "migrate", "choose", "total")
    lines = ["| N | limit (s) | step | warm start | R* | " + " | ".join(keys)
             + " | plan returned | vs identity+FFD | gap | experts moved |",
             "|" + "---|" * (9 + len(keys))]
    for r in rows:
        t = r["timings"]
        lines.append(f"| {r['N']} | {r['limit']:g} | {r['step']} | {r['warm_start'] or 'none'} | {r['r_star']} | "
                     + " | ".join(f"{t.get(k, 0.0):.2f}" for k in keys)
                     + f" | {r.get('decision', 'new')} | {-100 * r['improvement']:+.1f} % | {100 * r['gap']:.1f} % | "
                     f"{r['moved']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
