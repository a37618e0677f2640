#!/usr/bin/env python
"""Production-sized windows: modelled step cost of what trainers run today and of the plans,
with the gain split into placement and packing, and planning seconds.

Plans (at R = R*, except where a baseline's rule needs more rows: such a cell says
[R=...]; scored under --objective, every plan checked by rp_opt.check):

    identity + ffd      solver baseline (AReaL's length-only packing)
    identity + kk       solver kk (verl's Karmarkar-Karp workload balancing)
    LPT + ffd           solver lpt-ffd
    LPT + heuristic     solver heuristic with the LPT placement
    heuristic+refine    solver heuristic choosing its placement (LPT + local search, then
                        refined for the found blocks: the heuristic's ``refine`` round)
    LPT + exact         solver exact with the LPT placement, only where N <= --exact-max-samples

Gain split (percent of the identity + ffd cost): placement = ffd under identity -> ffd
under LPT; packing = LPT + ffd -> LPT + heuristic; refine = LPT + heuristic ->
heuristic+refine (placement refined for the blocks, then more search).

    python scripts/bench_prod.py --time-limit 30 --out docs/bench          # production suite
    python scripts/bench_prod.py --quick                                    # seconds (CI)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rp_opt.bench.gap import check_run_args, machine  # noqa: E402
from rp_opt.bench.report import (add_output_arguments, check_out_folders, image_path,  # noqa: E402
                                 interrupted_message, print_tables, usable, write_outputs)
from rp_opt.bench.runner import Task, run_tasks, strip_private  # noqa: E402
from rp_opt.errors import InputError, integer  # noqa: E402

RUNS = (  # label, solver, placement
    ("identity+ffd", "baseline", None),
    ("identity+kk", "kk", None),
    ("LPT+ffd", "lpt-ffd", None),
    ("LPT+heuristic", "heuristic", "lpt"),
    ("heuristic+refine", "heuristic", None),
    ("LPT+exact", "exact", "lpt"),
)


def pct(a, b):
    return None if a is None or b is None or not b else 100.0 * (a - b) / b


def build_tables(records: list[dict]) -> dict:
    by = {}
    for rec in records:
        by.setdefault(rec["instance"], {})[rec["solver"]] = rec
    cost_rows, split_rows, time_rows = [], [], []
    labels = [r[0] for r in RUNS]
    for name, runs in by.items():
        first = next(iter(runs.values()))
        base = runs.get("identity+ffd", {}).get("score") if usable(runs.get("identity+ffd", {})) else None

        def cost(label):
            rec = runs.get(label)
            return rec["score"] if rec and usable(rec) else None

        r_star = runs.get("identity+ffd", {}).get("num_rows")
        cost_rows.append([name, first.get("model"), first["N"], first.get("L"), first.get("E"), r_star]
                         + [_cell(cost(l), base, runs.get(l, {}).get("num_rows"), r_star) for l in labels])
        placement = -pct(cost("LPT+ffd"), base) if cost("LPT+ffd") is not None and base else None
        packing = (100.0 * (cost("LPT+ffd") - cost("LPT+heuristic")) / base
                   if cost("LPT+heuristic") is not None and cost("LPT+ffd") is not None and base else None)
        kk = -pct(cost("identity+kk"), base) if cost("identity+kk") is not None and base else None
        total = None if placement is None or packing is None else placement + packing
        refine = (100.0 * (cost("LPT+heuristic") - cost("heuristic+refine")) / base
                  if cost("LPT+heuristic") is not None and cost("heuristic+refine") is not None and base else None)
        split_rows.append([name, kk, placement, packing, total, refine])
        time_rows.append([name, first.get("build_seconds")] + [
            (runs[l]["seconds"] if l in runs and runs[l].get("seconds") is not None else None) for l in labels])
    return {
        "Modelled step cost (objective primary, GFLOP-equivalent; % vs identity+ffd)": (
            ["instance", "model", "N", "L", "E", "R*"] + labels, cost_rows),
        "Gain split (% of the identity+ffd cost)": (
            ["instance", "identity+kk vs ffd", "placement (id->LPT, ffd)", "packing (ffd->heuristic, LPT)",
             "placement+packing", "refine (LPT+heuristic -> heuristic+refine)"], split_rows),
        "Seconds (window generation, then each plan)": (["instance", "generate"] + labels, time_rows),
    }


def _cell(value, base, rows=None, r_star=None):
    """A plan's cost, its change against identity+ffd, and its rows where they are not R*
    (kk's rule can need more: its cost is then that of more microbatches)."""
    if value is None:
        return "-"
    more = f" [R={rows}]" if rows is not None and r_star is not None and rows != r_star else ""
    if base is None or value == base:
        return f"{value:.4g}{more}"
    return f"{value:.4g} ({pct(value, base):+.2f}%){more}"


def heatmap(records: list[dict], args) -> str | None:
    """Rank-load heat map of the first instance: identity+ffd against LPT+heuristic."""
    from rp_opt.bench.plots import load_heatmap

    first = records[0]["instance"]
    plans = {r["solver"]: r.get("_plan") for r in records if r["instance"] == first and r.get("_plan") is not None}
    if "identity+ffd" not in plans or "LPT+heuristic" not in plans:
        return None
    spec = next(r["_spec"] for r in records if r["instance"] == first)
    instance = spec.build()
    chosen = {k: plans[k] for k in ("identity+ffd", "LPT+ffd", "LPT+heuristic") if k in plans}
    slug = first.replace("/", "-")
    return load_heatmap(instance, chosen, image_path(args, f"heatmap_{slug}"),
                        title=f"{first}: per-row per-rank expert load (max over layers)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="production")
    parser.add_argument("--quick", action="store_true", help="the tiny suite with 1 s limits (CI)")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default: the suite's)")
    parser.add_argument("--limit", type=int, default=None, help="only the first LIMIT instances")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds for the heuristic / exact runs")
    parser.add_argument("--objective", default="sync")
    parser.add_argument("--exact-max-samples", type=int, default=128, help="run exact only up to this N")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="threads per heuristic / exact run")
    parser.add_argument("--ray", metavar="ADDRESS", default=None)
    add_output_arguments(parser, "prod_SUITE")
    args = parser.parse_args(argv)
    if args.quick:
        args.suite, args.time_limit = "tiny", min(args.time_limit, 1.0)
        args.limit = args.limit or 1
    try:
        # every argument before the runs (one line, exit 2), and the output folders: a
        # folder that cannot be written would lose them
        specs = check_run_args(args)
        args.exact_max_samples = integer("--exact-max-samples", args.exact_max_samples, low=0)
        check_out_folders(args, f"prod_{args.suite}")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    tasks = []
    for spec in specs:
        for label, solver, placement in RUNS:
            if solver == "exact" and spec.samples > args.exact_max_samples:
                continue
            tasks.append(Task(spec, solver, objective=args.objective, time_limit=args.time_limit,
                              placement=placement, threads=args.threads, label=label,
                              keep_plan=bool(args.out) and spec is specs[0]))
    start = time.perf_counter()
    try:
        records = run_tasks(tasks, workers=args.workers, ray_address=args.ray)
    except InputError as exc:  # Ray that cannot be started or reached
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a Ctrl-C with --workers > 1 or on Ray: no records to show
        print("error: interrupted (Ctrl-C); nothing written", file=sys.stderr)
        return 130
    wall = time.perf_counter() - start
    # a Ctrl-C run here: the runs done, the last cut short (its plan, if any, is not the
    # suite's result): shown, never written over --out
    interrupted = any(rec.get("interrupted") for rec in records)
    for rec, task in zip(records, tasks):
        rec["_spec"] = task.spec
    tables = build_tables(records)
    meta = {"suite": args.suite, "time_limit": args.time_limit, "objective": args.objective,
            "workers": args.workers, "threads": args.threads, "wall_seconds": wall, "interrupted": interrupted,
            "runs": len(records), "runs_planned": len(tasks),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "command": " ".join(sys.argv)}
    if args.out and not interrupted:
        name = f"prod_{args.suite}"
        write_outputs(args.out, name, tables, {"meta": meta, "records": strip_private(records)},
                      f"Measured {meta['date']} on {meta['machine']}; wall {wall:.0f} s; heuristic/exact "
                      f"limit {args.time_limit} s, {args.threads} thread(s).")
        heatmap(records, args)
    if args.json:
        from rp_opt.commands._common import emit_json
        emit_json({"meta": meta, "records": strip_private(records)})
    else:
        print_tables(tables)
    if interrupted:
        print(interrupted_message(len(records), len(tasks), bool(args.out or args.img)), file=sys.stderr)
        return 130
    # failed runs, and plans the checker rejects or scores differently (check_agrees)
    bad = [r for r in records
           if r.get("status") == "error" or (r.get("status") in ("optimal", "feasible") and not usable(r))]
    for rec in bad:
        print(f"warning: {rec['instance']} {rec['solver']}: {rec.get('error') or rec.get('violations')}",
              file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
