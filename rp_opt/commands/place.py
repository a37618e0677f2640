"""rp-opt place: expert placement for a window (identity, LPT, LPT + local search, exact),
with the per-layer rank loads before and after, the proven gap and the migration plan."""

from __future__ import annotations

import logging
import time

import numpy as np

from ..errors import InputError, require
from ..io import placement_from_list, read_json
from ..solution import Layout, Placement
from ._common import (Progress, add_json, check_output, default_instance_path, emit_json, int_arg, number_arg,
                      open_instance, require_same_window, seconds_arg, table, write_reported)

log = logging.getLogger("rp_opt")

METHODS = ("identity", "lpt", "local", "exact")
MAX_TOLERANCE = 1e6


def register(sub) -> None:
    p = sub.add_parser("place", help="expert placement: per-layer rank loads, proven gap, migration plan")
    p.add_argument("file", nargs="?", help="instance .npz (default: the embedded default instance)")
    p.add_argument("--method", choices=METHODS, default="exact",
                   help="identity, lpt, local (LPT + swap local search) or exact (MILP per layer; default)")
    p.add_argument("--objective", default="aggregate",
                   help="exact only: aggregate (min max rank load), migration (fewest moves within "
                        "--tolerance of the best load; needs --current or moves from identity), rows "
                        "(min sum_{r,g} max_p W for the layout of --current or a baseline layout)")
    p.add_argument("--current", metavar="PLAN.json",
                   help="plan file holding the current placement (and layout); default: identity")
    p.add_argument("--time-limit", type=seconds_arg, default=10.0,
                   help="exact: seconds for all layers, each layer an equal share of what is left (default 10)")
    p.add_argument("--mip-gap", type=number_arg(0), default=1e-3,
                   help="exact: relative gap to stop at, finite and >= 0 (default 1e-3); a layer solved within it "
                        "counts as optimal")
    p.add_argument("--tolerance", type=number_arg(0), default=0.0,
                   help=f"migration: allowed relative excess of the max rank load, finite, >= 0 and <= {MAX_TOLERANCE:g} "
                        "(default 0)")
    p.add_argument("--backend", choices=("highs", "cpsat"), default="highs", help="exact: solver (default highs)")
    p.add_argument("--expert-bytes", type=int_arg(0), default=None,
                   help="bytes of one expert, >= 0 (default: from the instance's model spec, else 0)")
    p.add_argument("-o", "--output", metavar="PLAN.json",
                   help="write a plan file with the new placement and the layout used for scoring")
    add_json(p)
    p.set_defaults(run=run)


def _read_current(path: str, instance) -> tuple[Placement, Layout | None]:
    data = read_json(path, "--current")
    require(isinstance(data, dict) and "placement" in data, "--current", f"{path} has no 'placement'")
    require_same_window(data, instance, "--current", path)
    placement = placement_from_list(instance, data["placement"])
    layout = None
    if data.get("rows") is not None:  # optional, but when given it must be a layout (not ignored)
        layout = Layout.from_rows(data["rows"], instance.window.num_samples)
        require(layout.num_slots == instance.cluster.dp, "rows",
                f"have {layout.num_slots} slots, the cluster has D={instance.cluster.dp}")
        # the rows objective scores this layout and -o writes it: it must be one (C, m, no empty cell)
        from ..packing.seeds import layout_violation

        why = layout_violation(instance, layout, layout.num_rows)
        require(why is None, "--current", f"{path} holds no valid layout of this window: {why}")
    return placement, layout


def _baseline_layout(instance):
    """The identity + ffd baseline's :class:`~rp_opt.result.Result` (its layout is the one
    a plan file and the rows objective use; no plan: infeasible or no_solution, with the
    reason)."""
    from ..solvers import get_solver

    return get_solver("baseline")(instance, objective="sync")


def _no_layout(args, path: str, result) -> int:
    """Exit code 1 when the baseline found no layout of the window (``infeasible``, or
    ``no_solution`` when R* was not proven in time), which the rows objective and ``-o``
    need; the reason on stdout (with ``--json`` as ``reason``)."""
    reason = result.stats.get("reason", "")
    out = {"file": path, "method": args.method, "objective": args.objective, "status": result.status,
           "reason": reason, "output": None}
    if args.json:
        emit_json(out)
    else:
        need = "the rows objective" if args.objective == "rows" else f"-o {args.output}"
        print(f"{path}: {result.status}: {reason} ({need} needs a layout; nothing written)")
    return 1


def _expert_bytes(args, instance) -> int:
    if args.expert_bytes is not None:  # checked by its argparse type
        return args.expert_bytes
    try:
        from ..models import load_spec

        return int(load_spec(instance.model).expert_bytes)
    except (ImportError, InputError, OSError, KeyError):
        return 0


def run(args) -> int:
    from ..cost import rank_load
    from ..materialise import migration_plan
    from ..placement import (exact_placement, get_placement_objective, local_search_placement, lpt_placement,
                             placement_lower_bound)
    from ..result import FEASIBLE, OPTIMAL

    objective = get_placement_objective(args.objective)
    require(args.method == "exact" or objective.name == "aggregate", "--objective",
            f"{objective.name!r} needs --method exact")
    # above P - 1 every placement is within the tolerance; far above, the load cap overflows
    require(args.tolerance <= MAX_TOLERANCE, "--tolerance", f"must be <= {MAX_TOLERANCE:g}, got {args.tolerance!r}")
    check_output(args.output, inputs={"window": args.file or default_instance_path()})
    instance, path = open_instance(args.file)
    window, num_ranks = instance.window, instance.cluster.ep
    if args.current:
        current, layout = _read_current(args.current, instance)
        current_name = args.current
    else:
        current, layout = Placement.identity(window.num_layers, window.num_experts, num_ranks), None
        current_name = "identity"
    if layout is None and (objective.name == "rows" or args.output):
        # before the work: the rows objective and the plan file need a layout of the window
        baseline = _baseline_layout(instance)
        if baseline.plan is None:
            return _no_layout(args, path, baseline)
        layout = baseline.plan.layout

    start = time.perf_counter()
    analytic = placement_lower_bound(window.expert_load(), num_ranks).astype(np.float64)
    value = bound = None
    statuses = None
    if args.method == "identity":
        new = Placement.identity(window.num_layers, window.num_experts, num_ranks)
    elif args.method == "lpt":
        new = lpt_placement(window, num_ranks)
    elif args.method == "local":
        new = local_search_placement(window, num_ranks)
    else:
        progress = Progress(window.num_layers, "place", enabled=None if not args.json else False)
        result = exact_placement(instance, objective=objective.name, current=current, layout=layout,
                                 time_limit=None, total_time_limit=args.time_limit, mip_gap=args.mip_gap,
                                 tolerance=args.tolerance,
                                 backend=args.backend, callback=lambda l, r: progress.step(r.status))
        new, value, bound, statuses = result.placement, result.value, result.bound, list(result.statuses)
    seconds = time.perf_counter() - start

    before = rank_load(window, current)
    after_raw = rank_load(window, new)
    after_max = after_raw.max(axis=1).astype(np.float64)
    if objective.name == "aggregate":
        if bound is None:  # heuristics: the analytic bound proves what it can
            value, bound = after_max, analytic
        bound = np.maximum(bound, analytic)
        if statuses is None:  # a heuristic is optimal only when the bound meets it
            statuses = [OPTIMAL if v <= b else FEASIBLE for v, b in zip(after_max, bound)]
    gap = np.where(value > 0, (value - bound) / np.where(value > 0, value, 1), 0.0)
    status = OPTIMAL if all(s == OPTIMAL for s in statuses) else FEASIBLE

    migration = migration_plan(current, new, expert_bytes=_expert_bytes(args, instance))
    placement = migration.placement  # relabelled: same cost, fewest moves
    mean = window.expert_load().sum(axis=1) / num_ranks
    out = {
        "file": path, "method": args.method, "objective": objective.name, "status": status,
        "seconds": seconds, "current": current_name,
        "placement": placement.to_list(),
        "max_load": after_max.tolist(),
        "mean_load": mean.tolist(),
        "before_max_load": before.max(axis=1).astype(np.float64).tolist(),
        "value": np.asarray(value, dtype=np.float64).tolist(),
        "bound": np.asarray(bound, dtype=np.float64).tolist(),
        "gap": gap.tolist(),
        "statuses": statuses,
        "load_bound": analytic.tolist(),
        "migration": migration.summary(),
    }
    if args.output:
        from ..cost import score
        from ..io import save_plan
        from ..result import Plan

        plan = Plan(placement, layout, "sync", score(instance, placement, layout, "sync"),
                    {"placement_method": args.method, "placement_objective": objective.name})
        write_reported(out, save_plan, args.output, plan, instance)
    else:
        out["output"] = None

    if args.json:
        emit_json(out)
        return 2 if out.get("write_error") else 0
    unit = "" if objective.name == "aggregate" else f"  ({objective.name} value / bound per layer)"
    rows = []
    for l in range(window.num_layers):
        rows.append([l, int(before[l].max()), round(float(mean[l]), 1), int(after_max[l]),
                     round(float(after_max[l] / mean[l]) if mean[l] else 1.0, 4),
                     float(value[l]), float(bound[l]), f"{100 * gap[l]:.4f}", statuses[l]])
    print(f"{path}: L={window.num_layers} E={window.num_experts} P={num_ranks}; {args.method} "
          f"({objective.name}) in {seconds:.3f} s{unit}")
    print(table(["layer", f"max before ({current_name})", "mean", "max after", "max/mean", "value", "bound",
                 "gap %", "status"], rows))
    tot_before, tot_after = float(before.max(axis=1).sum()), float(after_max.sum())
    # the bounds are of the objective's value per layer: beside the aggregate load only
    # when that is the objective (rows/migration: their own line, not a bound on the load)
    bounds = (f"sum of bounds {float(np.sum(bound)):.6g}" if objective.name == "aggregate" else
              f"{objective.name}: sum of values {float(np.sum(value)):.6g}, sum of bounds {float(np.sum(bound)):.6g}")
    print(f"sum_l max_p L[l,p]: before {tot_before:.6g}, after {tot_after:.6g} "
          f"({100 * (tot_before - tot_after) / tot_before if tot_before else 0:.2f} % lower); "
          f"{bounds}; largest gap {100 * float(np.max(gap)):.4f} %; {status}")
    m = migration.summary()
    print(f"migration: {m['transfers']} experts move, {m['kept']} stay; {m['rounds']} rounds "
          f"(each rank sends <= 1, receives <= 1); {m['total_bytes']} bytes per shard")
    if out.get("output"):
        print(f"plan written to {args.output}")
    return 2 if out.get("write_error") else 0
