"""rp-opt calibrate: fit alpha_s, beta_s, gamma to measured per-microbatch times."""

from __future__ import annotations

import dataclasses
import sys

from ._common import add_json, check_cost_range, check_output, emit_json, open_instance, table, write_reported


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit the cost model to measured (row, shard) times (rp-opt-timings/1)")
    p.add_argument("timings", help="timings .json (format rp-opt-timings/1)")
    p.add_argument("--window", metavar="FILE.npz",
                   help="instance of the runs that name no window; its cost model is the prior")
    p.add_argument("-o", "--output", metavar="COST.json",
                   help="write the calibrated cost model (for 'rp-opt plan/show/eval --cost COST.json')")
    p.add_argument("--force", action="store_true",
                   help="accept (and write) a fit worse than the mean of the times (R^2 < 0), which is refused "
                        "with exit code 1 otherwise")
    add_json(p)
    p.set_defaults(run=run)


def _percent(value) -> str:
    return "-" if value is None else f"{100 * value:.3g} %"


def run(args) -> int:
    from ..calibrate import fit_cost, load_timings, named_inputs, save_cost
    from ..errors import InputError

    check_output(args.output, inputs={"timings file": args.timings, "window": args.window})
    # nor any file the timings file names (a run's window or plan file), resolved as the loader does
    check_output(args.output, inputs=named_inputs(args.timings))
    try:
        window = open_instance(args.window)[0] if args.window else None
    except InputError as exc:  # the file itself (missing, not an archive) is --window's
        raise InputError("--window", exc.message) if exc.field == "file" else exc from None
    runs = load_timings(args.timings, window)
    fit = fit_cost(runs, window.cost if window is not None else None, log_warnings=False)
    for run_ in runs:
        # a cost model that every other command would refuse for these windows (times of
        # 1e300 s fit coefficients of 1e294) is not written
        check_cost_range(dataclasses.replace(run_.instance, cost=fit.cost), "timings")
    out = fit.to_dict()
    out["runs"] = len(runs)
    refused = None
    if fit.r2 < 0 and not args.force:
        # the model explains the times worse than their mean: the coefficients are not to be trusted
        refused = (f"R^2 = {fit.r2:.3g} < 0: the cost model fits these times worse than their mean (times of another "
                   "window or plan, or not per (row, shard)?); "
                   + (f"{args.output} not written, " if args.output else "") + "--force accepts the fit")
        out["error"] = {"field": "timings", "message": refused}
        print(f"error: timings: {refused}", file=sys.stderr)
        out["output"] = None
        write_error = None
    else:
        for line in fit.warnings:
            print(f"warning: {line}", file=sys.stderr)
        write_error = write_reported(out, save_cost, args.output, fit.cost)
    if args.json:
        emit_json(out)
    else:
        scope = "global optimum" if fit.exhaustive else f"{fit.iterations} of {fit.pieces} pieces of b/a solved"
        print(f"fit of {fit.observations} measured times from {len(runs)} runs ({scope})")
        rel = "-" if fit.rel_rms is None else f"{100 * fit.rel_rms:.3f} %"
        print(f"  R^2 {fit.r2:.6f}   relative RMS error {rel}   RMS {fit.rms:.6g} s")
        print(table(["stage", "layers", "alpha", "beta"],
                    [[s.name, s.layers, s.alpha, s.beta] for s in fit.cost.stages]))
        print(f"gamma {fit.cost.gamma:.6g}")
        relative = fit.relative_stderr
        print(table(["total", "value", "std error", "relative"],
                    [[k, v, "-" if fit.stderr.get(k) is None else fit.stderr[k], _percent(relative.get(k))]
                     for k, v in fit.totals.items()]))
        print(f"condition number {fit.condition:.3g} (regressors of the totals, columns scaled to unit norm)")
        if out["output"]:
            print(f"cost model written to {args.output}")
        elif refused:
            print("nothing written" if args.output else "fit refused")
    if refused:
        return 1
    return 2 if write_error else 0
