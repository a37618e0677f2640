"""rp-opt plan: plan a window with a registered solver."""

from __future__ import annotations

import logging
import time

from ..check import check
from ..io import save_plan
from ..solvers import get_solver
from ._common import (add_cost, add_json, check_output, default_instance_path, emit_json, load_plan_for,
                      open_instance, seconds_arg, seed_arg, table, write_reported)

log = logging.getLogger("rp_opt")


# scalar stats that are fractions (shown in % in the table)
PERCENT_STATS = frozenset({"placement_gap", "improvement", "gap", "primary_gap", "window_gap"})


def register(sub) -> None:
    p = sub.add_parser("plan", help="plan placement and packing for a window")
    p.add_argument("file", nargs="?", help="instance .npz (default: the embedded default instance)")
    p.add_argument("--solver", default="baseline",
                   help="baseline (identity+ffd; the default), kk, lpt-ffd, exact, joint, heuristic, auto")
    p.add_argument("--objective", default="sync", help="shard, sync (the default), or another registered objective")
    p.add_argument("--time-limit", type=seconds_arg, default=10.0,
                   help="seconds, finite and > 0 (default 10; the best plan so far is returned); reading "
                        "the window and the warm start counts against it")
    p.add_argument("--seed", type=seed_arg, default=0, help="random seed, an integer in [0, 2^31-1] (default 0)")
    p.add_argument("--warm-start", metavar="PLAN.json", help="start from this plan (a plan for the same window)")
    add_cost(p)
    p.add_argument("-o", "--output", metavar="PLAN.json", help="write the plan file (its directory must exist)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a solver option (repeatable), e.g. refine=true for heuristic, backend=highs for "
                        "exact; VALUE is read as JSON when it parses (numbers, true/false, lists), else as text")
    add_json(p)
    p.set_defaults(run=run)


# solver arguments that have their own flag; as an --option they would be given twice
FLAG_OPTIONS = {"seed": "--seed", "time_limit": "--time-limit", "objective": "--objective",
                "warm_start": "--warm-start", "instance": "FILE",
                "placement": "--warm-start PLAN.json (the plan's placement is planned with)"}


def parse_options(items: list[str]) -> dict:
    """``["refine=true", "replicas=16"]`` -> ``{"refine": True, "replicas": 16}``.

    :class:`~rp_opt.errors.InputError` on ``--option`` for an item that is not KEY=VALUE,
    names an argument that has its own flag (``seed=3``: use ``--seed``), or repeats a key
    (which of two values was meant is not for the command to guess).
    """
    import json

    from ..errors import InputError

    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise InputError("--option", f"must be KEY=VALUE, got {item!r}")
        if key.strip() in FLAG_OPTIONS:
            raise InputError("--option", f"{item!r}: {key.strip()} has its own flag, use {FLAG_OPTIONS[key.strip()]}")
        if key.strip() in out:
            raise InputError("--option", f"{key.strip()} is given twice ({item!r} after "
                                         f"{key.strip()}={out[key.strip()]!r})")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        out[key.strip()] = value
    return out


def run(args) -> int:
    from ..objectives import get_objective
    from ..errors import InputError
    from ..result import FEASIBLE, INFEASIBLE, OPTIMAL

    get_objective(args.objective)
    options = parse_options(args.option)
    check_output(args.output, inputs={"window": args.file or default_instance_path(), "cost model": args.cost})
    solver = get_solver(args.solver)
    # a bad --option is the error the solver would give, before the window is read
    from ..planner import check_options_of

    check_options_of(args.solver, options, args.time_limit, args.seed)
    started = time.perf_counter()  # --time-limit covers the run from here, as for place
    instance, path = open_instance(args.file, args.cost)
    warm = load_plan_for(args.warm_start, instance, "--warm-start") if args.warm_start else None
    read = time.perf_counter() - started
    # reading a 16384-sample window takes about 3 s: the solver gets what is left (at least
    # a millisecond: it then returns its first plan)
    left = max(args.time_limit - read, 1e-3)
    if read >= args.time_limit:
        log.warning("reading the window took %.2f s of the %g-s limit: the solver returns its first plan",
                    read, args.time_limit)
    log.info("planning %s with %s (%s, limit %g s)", path, args.solver, args.objective, args.time_limit)
    log.debug("reading took %.2f s of the limit", read)
    try:
        result = solver(instance, objective=args.objective, time_limit=left, seed=args.seed,
                        warm_start=warm, **options)
    except InputError:
        raise  # already one line naming its field (an InputError is a ValueError: not an option's fault)
    except (TypeError, ValueError, ArithmeticError) as exc:  # ArithmeticError: ZeroDivisionError, OverflowError
        if not options:
            raise
        # a solver that does not check an option's value itself: still one line, naming the options
        given = ", ".join(args.option)
        raise InputError("--option", f"{given}: {type(exc).__name__}: {exc}") from None
    out = result.to_dict()
    if out["objective"] is None:  # no plan (infeasible, no_solution): the objective asked for
        out["objective"] = get_objective(args.objective).name
    out["file"] = path
    out["read_seconds"] = read
    if result.plan is not None:
        report = check(instance, result.plan)
        out["valid"] = report.valid
        if not report.valid:
            out["violations"] = report.violations
    # the plan file, when asked for and there is a plan (out["output"], out["write_error"])
    # (stamped with the window's fingerprint: readers refuse it for another window)
    write_reported(out, save_plan, args.output if result.plan is not None else None, result.plan, instance)
    if args.json:
        emit_json(out)
    else:
        print(result.summary())
        stats = result.stats
        # relative gaps and improvements in % as the summary's gap (they are fractions in --json)
        extra = [[k, f"{100 * v:.4f} %" if k in PERCENT_STATS and isinstance(v, float) else v]
                 for k, v in stats.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)]
        # where the gap sits (rp_opt.bounds.CostBounds.gap_split, in the gap's units)
        extra += [[f"gap: {k}", f"{100 * v:.4f} %"] for k, v in (stats.get("gap_split") or {}).items()]
        if extra:
            print(table(["stat", "value"], extra))
        if stats.get("hidden_bound") is False and stats.get("primary_proven") is False:
            # the slowest bound part did not fit the limit: say where the tighter one is
            print("bound without the row excess for every placement (too slow for this limit): "
                  "`rp-opt eval FILE PLAN --bound` or `--option background_bound=true` adds it")
        if out["output"]:
            print(f"plan written to {args.output}")
    if out.get("write_error"):
        return 2
    if result.status == INFEASIBLE:
        return 1
    if result.plan is not None and not out.get("valid", True):
        return 1
    return 0 if result.status in (OPTIMAL, FEASIBLE) else 1
