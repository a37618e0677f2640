"""rp-opt bench: run a benchmark suite (gap to the best bound per solver) with a progress bar."""

from __future__ import annotations

from ._common import Progress, add_json


def register(sub) -> None:
    from ..bench.gap import DEFAULT_SOLVERS

    p = sub.add_parser("bench", help="run a benchmark suite: gap to the best bound, seconds, per solver")
    p.add_argument("suite", help="tiny, small, medium or production")
    p.add_argument("--solvers", default=",".join(DEFAULT_SOLVERS), help="comma-separated solver names")
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default: the suite's)")
    p.add_argument("--time-limit", type=float, default=10.0, help="seconds per solver run")
    p.add_argument("--objective", default="sync")
    p.add_argument("--workers", type=int, default=1, help="local processes")
    p.add_argument("--threads", type=int, default=1, help="threads per solver run")
    p.add_argument("--ray", metavar="ADDRESS", default=None, help="run on Ray ('local' or a cluster address)")
    p.add_argument("--limit", type=int, default=None, help="only the first LIMIT instances")
    p.add_argument("--out", metavar="DIR", help="write bench_SUITE.md / .json (and a gap plot) here")
    p.add_argument("--img", metavar="DIR", help="write the gap plot here (default OUT/img)")
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from ..bench.gap import emit, run_gap, tasks_from_args
    from ..bench.report import per_solver_rows
    from ._common import emit_json, table

    total = len(tasks_from_args(args))  # validates the arguments before anything runs
    progress = Progress(total, f"bench {args.suite}", enabled=True if args.progress else None)
    result = run_gap(args, on_record=lambda rec: progress.step(f"{rec['instance']} {rec['solver']}"))
    if args.out:
        saved_json, args.json = args.json, False
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            emit(result, args, f"bench_{args.suite}")
        args.json = saved_json
    if args.json:
        emit_json({"meta": result["meta"], "records": result["records"], "instances": result["instances"]})
    else:
        headers, rows = per_solver_rows(result["records"])
        print(table(headers, rows))
    errors = [r for r in result["records"] if r.get("status") == "error"]
    invalid = [r for r in result["records"] if r.get("status") in ("optimal", "feasible") and not r.get("valid")]
    return 1 if invalid else 0 if not errors else 1
