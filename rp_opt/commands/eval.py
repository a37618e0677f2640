"""rp-opt eval: check a plan file against a window and score it."""

from __future__ import annotations

from ..io import check_fingerprint, read_plan_file
from ..objectives import get_objective
from ._common import (add_cost, add_json, check_plan_data, emit_json, int_arg, open_instance, require_score,
                      scores_match)


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
    check_fingerprint(data, instance.window, "plan")  # a plan for another window: bad input, not a violation
    objective = get_objective(args.objective or data.get("objective", "sync"))
    require_score(data)
    claimed = data.get("score")
    report = check_plan_data(instance, data, objective, args.rows)
    out = report.to_dict()
    out["objective"] = objective.name
    out["num_rows"] = len(data["rows"]) if isinstance(data["rows"], list) else None
    if report.score is not None and claimed:
        out["claimed_score"] = claimed
        out["claimed_objective"] = data.get("objective")
        # a score under another objective is not comparable: null, neither a match nor not
        same = objective.name == data.get("objective")
        out["score_matches"] = scores_match(report.score, claimed) if same else None
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
            print(f"  the plan file claims {claimed}")
        if "bound" in out:
            print(f"bound ({out['bound_scope']}): {out['bound']:.6g}, gap {100 * out['gap']:.3f} % "
                  f"({out['bound_seconds']:.2f} s)")
    return 0 if report.valid else 1


def window_bound(instance, num_rows: int, objective, primary: float) -> dict:
    """The primary's bound for every placement (:func:`rp_opt.bounds.window_bound`),
    its seconds, and the relative gap of ``primary`` to it."""
    from ..bounds import timed_window_bound
    from ..result import relative_gap

    bound, seconds = timed_window_bound(instance, num_rows, objective)
    return {"bound": bound, "bound_scope": "every placement", "gap": relative_gap(primary, bound),
            "bound_seconds": seconds}
