"""rp-opt place: expert placement for a window (identity, LPT, LPT + local search, exact),
with the per-layer rank loads before and after, the proven gap and the migration plan."""

from __future__ import annotations

import logging
import time

import numpy as np

from ..errors import InputError, integer, require, shown
from ..io import placement_from_list, read_json
from ..solution import Layout, Placement
from ._common import (Progress, _checked_arg, add_json, check_output, default_instance_path, emit_json,
                      number_arg, open_instance, require_same_window, seconds_arg, table, write_reported)

log = logging.getLogger("rp_opt")

METHODS = ("identity", "lpt", "local", "exact")
MAX_TOLERANCE = 1e6
MAX_EXPERT_BYTES = 2**63 - 1  # what a trainer's int64 holds
# the defaults of the flags that only some methods and objectives read: None in the parser,
# so that a flag given where it is ignored can be told from its default (and warned of)
DEFAULTS = {"time_limit": 10.0, "mip_gap": 1e-3, "tolerance": 0.0, "backend": "highs"}


def _mip_gap(field: str, value, *, text: bool = False) -> float:
    """``--mip-gap``: :func:`rp_opt.placement.milp.check_mip_gap` (a relative gap in [0, 1);
    imported when the flag is given, not for every command line)."""
    from ..placement.milp import check_mip_gap

    return check_mip_gap(value, field, text=text)


def _expert_bytes(field: str, value: str, *, text: bool = True) -> int:
    """``--expert-bytes``: an integer in [0, 2^63) written as one (1e3 was read as 1000, and
    1e30 too, beyond what a trainer's int64 holds; a float above 2^53 is not the integer
    it spells)."""
    plain = value.strip()
    what = f"must be an integer in [0, {MAX_EXPERT_BYTES}] (bytes), got {shown(value)}"
    require(plain.isascii() and plain.lstrip("+").isdigit(), field, what)
    try:
        return integer(field, plain, 0, MAX_EXPERT_BYTES, text=text)
    except InputError:
        raise InputError(field, what) from None


_mip_gap_arg = _checked_arg("mip_gap", _mip_gap)
_expert_bytes_arg = _checked_arg("expert_bytes", _expert_bytes)


def register(sub) -> None:
    p = sub.add_parser("place", help="expert placement: per-layer rank loads, proven gap, migration plan")
    p.add_argument("file", nargs="?", help="instance .npz (default: the embedded default instance)")
    p.add_argument("--method", choices=METHODS, default="exact",
                   help="identity, lpt, local (LPT + swap local search) or exact (MILP per layer; default)")
    p.add_argument("--objective", default="aggregate",
                   help="exact only: aggregate (min max rank load), migration (fewest moves within "
                        "--tolerance of the best load, whose status per layer is shown as 'load status' and "
                        "--json's aggregate_statuses; needs --current or moves from identity), rows "
                        "(min sum_{r,g} max_p W for the layout of --current or a baseline layout)")
    p.add_argument("--current", metavar="PLAN.json",
                   help="plan file holding the current placement (and layout); default: identity")
    p.add_argument("--time-limit", type=seconds_arg, default=None,
                   help="exact: seconds for the run: reading the window and --current, the baseline layout "
                        "(rows, -o) and all layers, each layer an equal share of what is left (default 10)")
    p.add_argument("--mip-gap", type=_mip_gap_arg, default=None,
                   help="exact: relative gap to stop at, in [0, 1) (default 1e-3); a layer solved within it "
                        "counts as optimal")
    p.add_argument("--tolerance", type=number_arg(0), default=None,
                   help="migration: allowed relative excess of the max rank load, finite, >= 0 and "
                        f"<= {MAX_TOLERANCE:g} (default 0)")
    p.add_argument("--backend", choices=("highs", "cpsat"), default=None, help="exact: solver (default highs)")
    p.add_argument("--expert-bytes", type=_expert_bytes_arg, default=None,
                   help=f"bytes of one expert, an integer in [0, {MAX_EXPERT_BYTES}] (default: from the instance's "
                        "model spec, else 0)")
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


def _objective(name: str):
    """The placement objective ``--objective`` names; else the one-line error of an argparse
    choice, naming the flag and the registry's names (read here, not by argparse: importing
    rp_opt.placement while the arguments are parsed would print HiGHS's banner, which the
    CLI silences after parsing; and a registered objective is a choice too)."""
    from ..placement import get_placement_objective, placement_objective_names

    names = placement_objective_names()
    require(name in names, "--objective",
            f"invalid choice: {name!r} (choose from {', '.join(map(repr, names))}) (see rp-opt place --help)")
    return get_placement_objective(name)


def _warn_ignored(args, objective) -> None:
    """One warning line on stderr for each flag given that this method or objective does not
    read (it was ignored without a word)."""
    if args.method != "exact":
        for flag in ("time_limit", "mip_gap", "backend"):
            if getattr(args, flag) is not None:
                log.warning("place: --%s is ignored: it applies to --method exact only", flag.replace("_", "-"))
    if args.tolerance is not None and objective.name != "migration":
        log.warning("place: --tolerance is ignored: it applies to --objective migration only")


def run(args) -> int:
    started = time.perf_counter()  # --time-limit covers the run from here (the window, the layout, the layers)
    from ..cost import rank_load
    from ..materialise import migration_plan
    from ..placement import exact_placement, local_search_placement, lpt_placement, placement_lower_bound
    from ..result import FEASIBLE, OPTIMAL

    objective = _objective(args.objective)
    require(args.method == "exact" or objective.name == "aggregate", "--objective",
            f"{objective.name!r} needs --method exact")
    _warn_ignored(args, objective)
    for name, value in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
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
    statuses = load_statuses = None
    if args.method == "identity":
        new = Placement.identity(window.num_layers, window.num_experts, num_ranks)
    elif args.method == "lpt":
        new = lpt_placement(window, num_ranks)
    elif args.method == "local":
        new = local_search_placement(window, num_ranks)
    else:
        progress = Progress(window.num_layers, "place", enabled=None if not args.json else False)
        # what is left of --time-limit after reading the inputs and the baseline layout (a
        # solver needs a limit above 0: a spent one gives every layer its warm start)
        left = max(args.time_limit - (time.perf_counter() - started), 1e-3)
        result = exact_placement(instance, objective=objective.name, current=current, layout=layout,
                                 time_limit=None, total_time_limit=left, mip_gap=args.mip_gap,
                                 tolerance=args.tolerance,
                                 backend=args.backend, callback=lambda l, r: progress.step(r.status))
        new, value, bound, statuses = result.placement, result.value, result.bound, list(result.statuses)
        if objective.name == "migration":
            # the first stage's: the best load that the moves are counted within (1 + tolerance)
            # of; not optimal when its layer ran out of time (the cap is then a found load)
            load_statuses = [st.get("aggregate", {}).get("status") for st in result.stats]
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
    if load_statuses is not None:
        out["aggregate_statuses"] = load_statuses
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
                     float(value[l]), float(bound[l]), f"{100 * gap[l]:.4f}", statuses[l]]
                    + ([load_statuses[l]] if load_statuses is not None else []))
    print(f"{path}: L={window.num_layers} E={window.num_experts} P={num_ranks}; {args.method} "
          f"({objective.name}) in {seconds:.3f} s{unit}")
    print(table(["layer", f"max before ({current_name})", "mean", "max after", "max/mean", "value", "bound",
                 "gap %", "status"] + (["load status"] if load_statuses is not None else []), rows))
    tot_before, tot_after = float(before.max(axis=1).sum()), float(after_max.sum())
    # the bounds are of the objective's value per layer: beside the aggregate load only
    # when that is the objective (rows/migration: their own line, not a bound on the load)
    bounds = (f"sum of bounds {float(np.sum(bound)):.6g}" if objective.name == "aggregate" else
              f"{objective.name}: sum of values {float(np.sum(value)):.6g}, sum of bounds {float(np.sum(bound)):.6g}")
    print(f"sum_l max_p L[l,p]: before {tot_before:.6g}, after {tot_after:.6g} "
          f"({100 * (tot_before - tot_after) / tot_before if tot_before else 0:.2f} % lower); "
          f"{bounds}; largest gap {100 * float(np.max(gap)):.4f} %; {status}")
    if load_statuses is not None:
        proven = sum(s == OPTIMAL for s in load_statuses)
        print(f"best load (the first stage, that the moves keep within --tolerance of): optimal in {proven} of "
              f"{len(load_statuses)} layers" + ("" if proven == len(load_statuses) else
                                                 "; the others compare with a load found, not proven"))
    m = migration.summary()
    print(f"migration: {m['transfers']} experts move, {m['kept']} stay; {m['rounds']} rounds "
          f"(each rank sends <= 1, receives <= 1); {m['total_bytes']} bytes per shard")
    if out.get("output"):
        print(f"plan written to {args.output}")
    return 2 if out.get("write_error") else 0
