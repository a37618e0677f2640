"""rp-opt bench: run a benchmark suite (gap to the best bound per solver) with a progress bar."""

from __future__ import annotations

import argparse
import contextlib
import io
import sys

from ._common import Progress, add_json, int_arg, seconds_arg, seed_arg, write_output


def register(sub) -> None:
    from ..bench.gap import DEFAULT_SOLVERS

    p = sub.add_parser("bench", help="run a benchmark suite: gap to the best bound, seconds, per solver")
    p.add_argument("suite", help="tiny, small, medium or production")
    p.add_argument("--solvers", default=",".join(DEFAULT_SOLVERS),
                   help="comma-separated solver names, each at most once")
    p.add_argument("--seeds", type=seeds_arg, default=None,
                   help="comma-separated seeds, integers in [0, 2^31-1], each at most once (default: the suite's)")
    p.add_argument("--time-limit", type=seconds_arg, default=10.0, help="seconds per solver run (default 10)")
    p.add_argument("--objective", default="sync", help="shard, sync (the default), or another registered objective")
    p.add_argument("--workers", type=int_arg(1), default=1, help="local processes, >= 1 (default 1)")
    p.add_argument("--threads", type=int_arg(1), default=1, help="threads per solver run, in [1, 256] (default 1)")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run on Ray ('local', 'auto' or a cluster address HOST:PORT)")
    p.add_argument("--limit", type=int_arg(0), default=None,
                   help="only the first LIMIT instances (>= 0; 0 means all, the default)")
    p.add_argument("--out", metavar="DIR", help="write bench_SUITE.md / .json (and a gap plot) here (created if "
                                                 "missing); the .json is strict JSON, NaN and infinities as null")
    p.add_argument("--img", metavar="DIR", help="write the gap plot here (default OUT/img; also without --out)")
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    add_json(p)
    p.set_defaults(run=run)


def seeds_arg(text: str) -> str:
    """An argparse ``type`` for ``--seeds``: comma-separated integers in [0, 2^31-1] (returned as given)."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"names no seed, got {text!r}")
    for item in items:
        try:
            seed_arg(item)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError("must be comma-separated integers in [0, 2147483647], "
                                             f"got {text!r}") from None
    return ",".join(items)


def run(args) -> int:
    from ..bench.gap import run_gap, tasks_from_args
    from ..bench.report import check_out_folders, interrupted_message, per_solver_rows, problems
    from ._common import emit_json, table

    # validates the arguments before anything runs (--ray "" is an error, not a quiet local run)
    total = len(tasks_from_args(args))
    check_out_folders(args, f"bench_{args.suite}")
    progress = Progress(total, f"bench {args.suite}", enabled=True if args.progress else None)
    result = run_gap(args, on_record=lambda rec: progress.step(f"{rec['instance']} {rec['solver']}"))
    interrupted = result["meta"]["interrupted"]
    write_error = None
    # after a Ctrl-C what ran is shown, but no files are written (a part of the suite is not
    # its benchmark); a write that fails after the runs (disk full) is one line, and the
    # summary still prints
    if (args.out or args.img) and not interrupted:
        write_error = write_output(_write_files, args.out or args.img, result, args,
                                   flag="--out" if args.out else "--img")
    if args.json:
        out = {"meta": result["meta"], "records": result["records"], "instances": result["instances"]}
        emit_json({**out, "write_error": write_error} if write_error else out)
    else:
        headers, rows = per_solver_rows(result["records"])
        print(table(headers, rows))
    if interrupted:
        meta = result["meta"]
        print(interrupted_message(meta["runs"], meta["runs_planned"], bool(args.out or args.img)), file=sys.stderr)
        return 130
    # the defects, on stderr (otherwise they are only inside --json records): exit 1
    found = problems(result["records"], result["instances"])
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    if write_error:
        return 2
    return 1 if found else 0


def _write_files(folder: str, result: dict, args) -> None:
    """``--out``: the tables, the records and the gap plot; ``--img`` alone: the plot."""
    from ..bench.gap import emit, gap_plot
    from ..bench.report import image_path

    name = f"bench_{args.suite}"
    if not args.out:
        gap_plot(result["records"], image_path(args, name))
        return
    saved_json, args.json = args.json, False
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # emit also prints; the command prints once
            emit(result, args, name)
    finally:
        args.json = saved_json
