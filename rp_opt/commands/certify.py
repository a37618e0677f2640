"""``rp-opt certify``: the certified minimum row count R* of a window (or a BPPLIB file)."""

from __future__ import annotations

import json
import os

from ..errors import InputError, require
from ..io import save_plan
from ..result import INFEASIBLE, OPTIMAL
from ._common import add_json, check_output, emit_json, number_arg, open_instance, table, write_reported

MAX_BPP_CAPACITY = 2**31 - 1


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "certify", help="prove the minimum row count R* of a window (or the optimum of a BPPLIB file)",
        description="Certify R*, the least number of rows of a layout: lower bounds (L1, L2, "
                    "cardinality, item count, arc-flow LP), packings (FFD, BFD, MBS; with a sample limit m, "
                    "worst fit into a fixed cell count and a bin-emptying LNS; LP diving on the arc-flow "
                    "LP) and an exact search on the arc-flow graph pruned by the waste budget "
                    "(HiGHS MIP, CP-SAT). Exit code 0 when proven, 1 when infeasible or not closed "
                    "in time, 2 on bad input.")
    parser.add_argument("file", nargs="?", help="instance .npz (rp-opt-window/1); default: the embedded instance")
    parser.add_argument("--bpp", metavar="FILE.txt", help="a BPPLIB bin-packing file instead (D = 1); reports bins")
    parser.add_argument("--time-limit", type=number_arg(0.0), default=10.0, metavar="S",
                        help="seconds (default 10); 0: the bounds and the FFD/BFD packings only, at once")
    parser.add_argument("--exact", choices=["auto", "arcflow", "cpsat", "highs", "none"], default="auto",
                        help="exact model for the row-count decision (default auto)")
    parser.add_argument("-o", "--output", metavar="FILE.json",
                        help="write the witness: for a window, a plan file (identity placement, the witness's "
                             "layout, scored under sync) that plan --warm-start, eval, show --plan and export "
                             "read; with --bpp, the bins as lists of item indices (0-based, in file order)")
    add_json(parser)
    parser.set_defaults(run=run)


def _read_bpp(path: str):
    """``read_bpplib``, with numbers beyond the certifier's 64-bit arithmetic reported in
    one line (they overflowed: a huge weight when read, a huge capacity in the bounds).
    Weights are at most the capacity, so a capacity below 2^31 keeps every sum exact."""
    from ..rows import read_bpplib

    try:
        weights, capacity = read_bpplib(path)
    except OverflowError:
        raise InputError("--bpp", f"{path}: a weight does not fit in 64 bits") from None
    except InputError as exc:  # the reader names its input "file": here that is --bpp
        raise InputError("--bpp" if exc.field == "file" else exc.field, exc.message) from None
    require(capacity <= MAX_BPP_CAPACITY, "--bpp", f"{path}: capacity {capacity} must be <= {MAX_BPP_CAPACITY}")
    return weights, capacity


def run(args) -> int:
    from ..rows import certify_bins

    if args.bpp:
        require(args.file is None, "file", "give either FILE.npz or --bpp FILE.txt, not both")
        check_output(args.output, inputs={"BPPLIB file": args.bpp})
        weights, capacity = _read_bpp(args.bpp)
        cert = certify_bins(weights, capacity, 1, None, args.time_limit, args.exact, on_interrupt="return")
        data = {"file": args.bpp, "items": int(weights.size), "capacity": capacity,
                "bins": cert.r_star, "lower_bound": cert.bins_lower, "upper_bound": cert.bins_upper,
                "status": cert.status, "bound_method": cert.bound_method, "seconds": round(cert.seconds, 4),
                "interrupted": bool(cert.stats.get("interrupted")),
                "exact_search_by": cert.stats.get("exact_search_by")}
        # how it was proven (bounds, LP, pruning, dives, exact decisions), as for windows
        data["stats"] = cert.stats
        # the best packing: bins of item indices (D = 1: each row of the witness is one bin)
        data["witness"] = None if cert.witness is None else [row[0] for row in cert.witness.to_rows()]
        write_reported(data, _save_json, args.output if data["witness"] is not None else None,
                       {k: data[k] for k in ("file", "items", "capacity", "status", "lower_bound", "upper_bound",
                                             "witness")})
        if args.json:
            emit_json(data)
        else:
            print(table(["file", "items", "C", "bins", "lower", "upper", "status", "bound", "seconds"],
                        [[os.path.basename(args.bpp), data["items"], capacity,
                          cert.r_star if cert.r_star is not None else "-",
                          cert.bins_lower, cert.bins_upper, cert.status, cert.bound_method, round(cert.seconds, 3)]]))
            _interrupted_note(cert)
            _witness_note(data, args.output, f"{cert.bins_upper} bins")
        if data.get("write_error"):
            return 2
        return 0 if cert.status == OPTIMAL else 1

    if args.file is None:
        from ._common import default_instance_path

        args.file = default_instance_path()
    check_output(args.output, inputs={"window": args.file})
    # the same validated loader as every other command (shapes, counts, attn_work, the cost
    # model, T_i <= C): certify answers for windows the planners accept, never for broken ones
    instance, _ = open_instance(args.file)
    lengths, cluster = instance.window.lengths, instance.cluster
    cert = certify_bins(lengths, cluster.capacity, cluster.dp, cluster.max_samples_per_cell, args.time_limit,
                        args.exact, on_interrupt="return")
    data = cert.to_dict()
    data.update(file=args.file, samples=int(lengths.size), dp=cluster.dp, capacity=cluster.capacity,
                max_samples_per_cell=cluster.max_samples_per_cell, interrupted=bool(cert.stats.get("interrupted")))
    # the witness as a plan file: the identity placement (R* does not depend on it) and the layout
    write_reported(data, save_plan, args.output if cert.witness is not None else None,
                   _witness_plan(instance, cert) if args.output and cert.witness is not None else None, instance)
    if args.json:
        emit_json(data)
    else:
        print(f"{args.file}: N={lengths.size} samples, D={cluster.dp}, C={cluster.capacity}, "
              f"m={cluster.max_samples_per_cell}")
        print(table(["status", "R*", "rows lower", "rows upper", "bins lower", "bins upper", "bound", "seconds"],
                    [[cert.status, cert.r_star if cert.r_star is not None else "-",
                      cert.lower_bound if cert.lower_bound is not None else "-",
                      cert.upper_bound if cert.upper_bound is not None else "-",
                      cert.bins_lower if cert.bins_lower is not None else "-",
                      cert.bins_upper if cert.bins_upper is not None else "-",
                      cert.bound_method, round(cert.seconds, 3)]]))
        if cert.status == INFEASIBLE:
            print(f"infeasible: {cert.reason}\nfix: {cert.fix}")
        _interrupted_note(cert)
        _witness_note(data, args.output, f"a layout of {cert.upper_bound} rows")
    if data.get("write_error"):
        return 2
    return 0 if cert.status == OPTIMAL else 1


def _witness_plan(instance, cert):
    """The witness as a :class:`Plan`: the identity placement and the witness's layout,
    scored under ``sync`` (a start for ``plan --warm-start``)."""
    from ..cost import score
    from ..result import Plan
    from ..solution import Placement

    w = instance.window
    placement = Placement.identity(w.num_layers, w.num_experts, instance.cluster.ep)
    return Plan(placement, cert.witness, "sync", score(instance, placement, cert.witness, "sync"),
                {"source": "certify", "status": cert.status, "r_star": cert.r_star})


def _save_json(path: str, data: dict) -> None:
    with open(path, "w") as handle:
        json.dump(data, handle)
        handle.write("\n")


def _witness_note(data: dict, output: str | None, what: str) -> None:
    """Where the witness is: written to ``output``, or how to get it."""
    if data.get("witness") is None:
        return
    if data.get("output"):
        print(f"witness ({what}) written to {output}")
    elif not output:
        print(f"witness: {what} (in --json; -o FILE.json writes it)")


def _interrupted_note(cert) -> None:
    """One line when a Ctrl-C ended the certification early."""
    if cert.stats.get("interrupted"):
        print("interrupted (Ctrl-C): the bounds and the best packing found until then")
