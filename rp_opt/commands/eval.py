"""rp-opt eval: check a plan file against a window and score it."""

from __future__ import annotations

from ..io import read_plan_file
from ..objectives import get_objective
from ._common import (add_cost, add_json, check_plan_data, compare_claimed, emit_json, int_arg, open_instance,
                      require_same_window, require_score)


def register(sub) -> None:
    p = sub.add_parser("eval", help="check a plan and recompute its score")
    p.add_argument("file", help="instance .npz")
    p.add_argument("plan", help="plan .json")
    p.add_argument("--objective", default=None, help="score under this objective (default: the plan's)")
    p.add_argument("--rows", type=int_arg(1), default=None, help="require exactly this many rows (e.g. R*), >= 1")
    p.add_argument("--bound", action="store_true",
                   help="also the window's lower bound for every placement at the plan's row count, with no "
                        "time limit (a plan's own report may leave out its slowest part), and the plan's gap to it")
    add_cost(p)
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    instance, _ = open_instance(args.file, args.cost)
    data = read_plan_file(args.plan, "plan")
    # a plan for another window (its fingerprint, N, D or placement shape): bad input in one
    # line, as for show, export and --warm-start, not dozens of violations
    require_same_window(data, instance, "plan", args.plan)
    objective = get_objective(args.objective or data.get("objective", "sync"))
    require_score(data)
    report = check_plan_data(instance, data, objective, args.rows)
    out = report.to_dict()
    out["objective"] = objective.name
    out["num_rows"] = len(data["rows"]) if isinstance(data["rows"], list) else None
    if report.score is not None:
        # null when not comparable (another objective or cost model), else whether it matches
        out.update(compare_claimed(report.score, data, objective.name, instance, cost_given=args.cost is not None))
    if args.bound and report.score is not None:
        out.update(window_bound(instance, out["num_rows"], objective, report.score[0]))
    if args.json:
        emit_json(out)
    else:
        print(f"valid: {str(report.valid).lower()}")
        for v in report.violations:
            print(f"  violation: {v}")
        if report.score is not None:
            print(f"score ({objective.name}): (" + ", ".join(f"{x:.6g}" for x in report.score) + ")")
        if out.get("score_matches") is False:
            print(f"  the plan file claims {out['claimed_score']}: not this score")
        elif out.get("score_note"):
            print(f"  {out['score_note']}")
        if "bound" in out:
            print(f"bound ({out['bound_scope']}): {out['bound']:.6g}, gap {100 * out['gap']:.3f} % "
                  f"({out['bound_seconds']:.2f} s)")
    # a claimed score that is not the recomputed one (same objective and cost model) is a
    # plan file that says something false: not to be passed by a gate that reads the exit code
    return 0 if report.valid and out.get("score_matches") is not False else 1


def window_bound(instance, num_rows: int, objective, primary: float) -> dict:
    """The primary's bound for every placement (:func:`rp_opt.bounds.window_bound`),
    its seconds, and the relative gap of ``primary`` to it."""
    from ..bounds import timed_window_bound
    from ..result import relative_gap

    bound, seconds = timed_window_bound(instance, num_rows, objective)
    return {"bound": bound, "bound_scope": "every placement", "gap": relative_gap(primary, bound),
            "bound_seconds": seconds}
