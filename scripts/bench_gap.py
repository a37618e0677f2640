#!/usr/bin/env python
"""Gap benchmark: per instance the optimum or best bound, every solver's score and gap,
seconds; then per solver and per configuration the count proven optimal and mean ± std of
the gaps over seeds.

All solvers that take a placement (exact, heuristic) get the same reference placement
(LPT + swap local search); each run's gap is to the best bound valid for its plan (exact's
bound holds for that placement only, so the baselines, with their own placements, are
measured against the bounds valid for every placement; docs/benchmarks.md).

    python scripts/bench_gap.py --suite small --time-limit 10 --workers 2 --out docs/bench
    python scripts/bench_gap.py --suite tiny --time-limit 1          # seconds (CI)
    python scripts/bench_gap.py --suite medium --ray local           # on Ray
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rp_opt.bench.gap import add_arguments, emit, run_gap  # noqa: E402
from rp_opt.bench.report import add_output_arguments, check_out_folders, interrupted_message, problems  # noqa: E402
from rp_opt.errors import InputError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    add_output_arguments(parser, "gap_SUITE")
    args = parser.parse_args(argv)
    try:
        # before the runs: a folder that cannot be written would lose them
        check_out_folders(args, f"gap_{args.suite}")
        result = run_gap(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a Ctrl-C with --workers > 1 or on Ray: no records to show
        print("error: interrupted (Ctrl-C); nothing written", file=sys.stderr)
        return 130
    meta = result["meta"]
    if meta["interrupted"]:
        # the runs done are shown, but a part of the suite is not its benchmark: the files of
        # --out (docs/bench in the documented command) are not replaced (as rp-opt bench)
        wrote_nothing = bool(args.out or args.img)
        args.out = args.img = None
        emit(result, args, f"gap_{args.suite}")
        print(interrupted_message(meta["runs"], meta["runs_planned"], wrote_nothing), file=sys.stderr)
        return 130
    emit(result, args, f"gap_{args.suite}")
    # failed runs, plans the checker rejects or scores differently, bounds above a valid
    # plan: a defect, exit 1 (as rp-opt bench)
    found = problems(result["records"], result["instances"])
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
