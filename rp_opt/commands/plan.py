"""rp-opt plan: plan a window with a registered solver."""

from __future__ import annotations

import logging

from ..check import check
from ..io import load_plan, save_plan
from ..solvers import get_solver
from ._common import add_json, emit_json, open_instance, table

log = logging.getLogger("rp_opt")


def register(sub) -> None:
    p = sub.add_parser("plan", help="plan placement and packing for a window")
    p.add_argument("file", nargs="?", help="instance .npz (default: the embedded default instance)")
    p.add_argument("--solver", default="baseline",
                   help="baseline (identity+ffd), kk, lpt-ffd, exact, joint, heuristic, auto")
    p.add_argument("--objective", default="sync", help="shard, sync, or another registered objective")
    p.add_argument("--time-limit", type=float, default=10.0, help="seconds (best plan so far is returned)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warm-start", metavar="PLAN.json", help="start from this plan")
    p.add_argument("-o", "--output", metavar="PLAN.json", help="write the plan file")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a solver option (repeatable), e.g. refine=true for heuristic, backend=highs for "
                        "exact; VALUE is read as JSON when it parses (numbers, true/false, lists), else as text")
    add_json(p)
    p.set_defaults(run=run)


def parse_options(items: list[str]) -> dict:
    """``["refine=true", "replicas=16"]`` -> ``{"refine": True, "replicas": 16}``."""
    import json

    from ..errors import InputError

    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise InputError("--option", f"must be KEY=VALUE, got {item!r}")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        out[key.strip()] = value
    return out


def run(args) -> int:
    from ..cost import get_objective
    from ..errors import InputError
    from ..result import FEASIBLE, INFEASIBLE, OPTIMAL

    if args.time_limit <= 0:
        raise InputError("--time-limit", f"must be > 0, got {args.time_limit}")
    get_objective(args.objective)
    instance, path = open_instance(args.file)
    solver = get_solver(args.solver)
    warm = load_plan(args.warm_start, instance) if args.warm_start else None
    log.info("planning %s with %s (%s, limit %.1f s)", path, args.solver, args.objective, args.time_limit)
    options = parse_options(args.option)
    result = solver(instance, objective=args.objective, time_limit=args.time_limit, seed=args.seed, warm_start=warm,
                    **options)
    out = result.to_dict()
    out["file"] = path
    if result.plan is not None:
        report = check(instance, result.plan)
        out["valid"] = report.valid
        if not report.valid:
            out["violations"] = report.violations
        if args.output:
            save_plan(args.output, result.plan)
            out["plan_file"] = args.output
    if args.json:
        emit_json(out)
    else:
        print(result.summary())
        stats = result.stats
        extra = [[k, v] for k, v in stats.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)]
        # where the gap sits (rp_opt.cost.CostBounds.gap_split, in the gap's units)
        extra += [[f"gap: {k}", f"{100 * v:.4f} %"] for k, v in (stats.get("gap_split") or {}).items()]
        if extra:
            print(table(["stat", "value"], extra))
        if args.output and result.plan is not None:
            print(f"plan written to {args.output}")
    if result.status == INFEASIBLE:
        return 1
    if result.plan is not None and not out.get("valid", True):
        return 1
    return 0 if result.status in (OPTIMAL, FEASIBLE) else 1
