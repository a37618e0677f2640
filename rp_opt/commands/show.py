"""rp-opt show: describe a window file (and a plan for it)."""

from __future__ import annotations

import numpy as np

from ..bounds import cost_bounds
from ..check import check
from ..cost import layout_costs, rank_load
from ..io import read_plan_file
from ..objectives import get_objective
from ..result import relative_gap
from ..solution import Placement
from ._common import add_cost, add_json, compare_claimed, emit_json, open_instance, plan_for_data, table


def register(sub) -> None:
    p = sub.add_parser("show", help="describe a window (and optionally a plan)")
    p.add_argument("file", nargs="?", help="instance .npz (default: the embedded default)")
    p.add_argument("--plan", help="plan .json to describe row by row")
    add_cost(p)
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    instance, path = open_instance(args.file, args.cost)
    w, c = instance.window, instance.cluster
    identity = Placement.identity(w.num_layers, w.num_experts, c.ep)
    load = rank_load(w, identity)
    imbalance = load.max(axis=1) / np.maximum(load.mean(axis=1), 1e-12)
    info = {
        "file": path, "model": instance.model, "samples": w.num_samples, "layers": w.num_layers,
        "experts": w.num_experts, "top_k": w.top_k,
        "cluster": {"dp": c.dp, "edp": c.edp, "ep": c.ep, "capacity": c.capacity,
                    "max_samples_per_cell": c.max_samples_per_cell},
        "cost": instance.cost.to_dict(),
        "tokens": int(w.lengths.sum()),
        "lengths": {q: float(np.percentile(w.lengths, p)) for q, p in
                    (("min", 0), ("p50", 50), ("p90", 90), ("max", 100))},
        "identity_max_over_mean": {"min": float(imbalance.min()), "median": float(np.median(imbalance)),
                                   "max": float(imbalance.max())},
    }
    rows = None
    report = None
    if args.plan:
        data = read_plan_file(args.plan, "--plan")
        plan = plan_for_data(data, instance, "--plan", args.plan)
        # the independent checker: a plan that breaks a constraint (capacity, an empty cell,
        # more than m samples) is shown as invalid, with exit code 1 as from eval
        report = check(instance, plan)
        costs = layout_costs(instance, plan.placement, plan.layout)
        rows = [[r, *(f"{x:.4g}" for x in costs.joint[r])] for r in range(plan.num_rows)]
        bounds = cost_bounds(instance, plan.num_rows, plan.placement)   # for the plan's placement
        score = get_objective(plan.objective).evaluate(costs)
        bound = bounds.objective(plan.objective)
        info["plan"] = {"rows": plan.num_rows, "J": costs.joint.tolist(), "score": list(score), "bound": bound,
                        "gap": relative_gap(score[0], bound[0]),
                        # where the primary sits above the bound, in the gap's units
                        "gap_split": bounds.gap_split(costs, plan.objective, relative=True),
                        "valid": report.valid, "violations": list(report.violations)}
        # the score the file claims, against the recomputed one (eval says the same)
        info["plan"].update(compare_claimed(score, data, plan.objective, instance, cost_given=args.cost is not None))
    # an invalid plan, or one whose file claims another score, exits 1 as from eval
    code = 0 if report is None or (report.valid and info["plan"].get("score_matches") is not False) else 1
    if args.json:
        emit_json(info)
        return code
    print(f"{path}: {instance.model}, N={w.num_samples}, L={w.num_layers}, E={w.num_experts}, top-{w.top_k}")
    print(f"cluster: D={c.dp} G={c.edp} P={c.ep} C={c.capacity} m={c.max_samples_per_cell}")
    print("lengths: " + ", ".join(f"{k} {v:.0f}" for k, v in info["lengths"].items()) + f"; {info['tokens']} tokens")
    print("identity placement, per-layer max/mean rank load: "
          + ", ".join(f"{k} {v:.2f}" for k, v in info["identity_max_over_mean"].items()))
    print(table(["stage", "layers", "alpha", "beta"],
                [[s.name, s.layers, s.alpha, s.beta] for s in instance.cost.stages]))
    print(f"gamma {instance.cost.gamma:.6g}")
    if rows is not None:
        if not report.valid:  # first, where it cannot be missed (eval prints the same lines)
            count = len(report.violations)
            print(f"INVALID plan: {count} violation{'s' if count != 1 else ''}")
            for v in report.violations:
                print(f"  violation: {v}")
        print(table(["row"] + [f"J[g={g}]" for g in range(c.edp)], rows))
        pl = info["plan"]
        line = f"{plan.objective} primary {pl['score'][0]:.6g}, bound for this placement {pl['bound'][0]:.6g}"
        if pl["gap"] is not None:
            line += f", gap {100 * pl['gap']:.3f} %: " + ", ".join(f"{k} {100 * v:.3f} %"
                                                                for k, v in pl["gap_split"].items())
        print(line)
        if pl.get("score_matches") is False:
            print(f"  the plan file claims {list(plan.score)}: not this score")
        elif pl.get("score_note"):
            print(f"  {pl['score_note']}")
    return code
