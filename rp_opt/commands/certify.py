"""``rp-opt certify``: the certified minimum row count R* of a window (or a BPPLIB file)."""

from __future__ import annotations

import os

from ..errors import InputError, require
from ..result import INFEASIBLE, OPTIMAL
from ._common import add_json, emit_json, number_arg, open_instance, table

MAX_BPP_CAPACITY = 2**31 - 1


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "certify", help="prove the minimum row count R* of a window (or the optimum of a BPPLIB file)",
        description="Certify R*, the least number of rows of a layout: lower bounds (L1, L2, "
                    "cardinality, arc-flow LP), packings (FFD, BFD, MBS, LP diving on the arc-flow "
                    "LP) and an exact search on the arc-flow graph pruned by the waste budget "
                    "(HiGHS MIP, CP-SAT). Exit code 0 when proven, 1 when infeasible or not closed "
                    "in time, 2 on bad input.")
    parser.add_argument("file", nargs="?", help="instance .npz (rp-opt-window/1); default: the embedded instance")
    parser.add_argument("--bpp", metavar="FILE.txt", help="a BPPLIB bin-packing file instead (D = 1); reports bins")
    parser.add_argument("--time-limit", type=number_arg(0.0), default=10.0, metavar="S",
                        help="seconds (default 10); 0: the bounds and the FFD/BFD packings only, at once")
    parser.add_argument("--exact", choices=["auto", "arcflow", "cpsat", "highs", "none"], default="auto",
                        help="exact model for the row-count decision (default auto)")
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
        weights, capacity = _read_bpp(args.bpp)
        cert = certify_bins(weights, capacity, 1, None, args.time_limit, args.exact, on_interrupt="return")
        data = {"file": args.bpp, "items": int(weights.size), "capacity": capacity,
                "bins": cert.r_star, "lower_bound": cert.bins_lower, "upper_bound": cert.bins_upper,
                "status": cert.status, "bound_method": cert.bound_method, "seconds": round(cert.seconds, 4)}
        if cert.stats.get("exact_search_by"):
            data["exact_search_by"] = cert.stats["exact_search_by"]
        if cert.stats.get("interrupted"):
            data["interrupted"] = True
        # how it was proven (bounds, LP, pruning, dives, exact decisions), as for windows
        data["stats"] = cert.stats
        if args.json:
            emit_json(data)
        else:
            print(table(["file", "items", "C", "bins", "lower", "upper", "status", "bound", "seconds"],
                        [[os.path.basename(args.bpp), data["items"], capacity, cert.r_star if cert.r_star is not None else "-",
                          cert.bins_lower, cert.bins_upper, cert.status, cert.bound_method, round(cert.seconds, 3)]]))
            _interrupted_note(cert)
        return 0 if cert.status == OPTIMAL else 1

    if args.file is None:
        from ._common import default_instance_path

        args.file = default_instance_path()
    # the same validated loader as every other command (shapes, counts, attn_work, the cost
    # model, T_i <= C): certify answers for windows the planners accept, never for broken ones
    instance, _ = open_instance(args.file)
    lengths, cluster = instance.window.lengths, instance.cluster
    cert = certify_bins(lengths, cluster.capacity, cluster.dp, cluster.max_samples_per_cell, args.time_limit, args.exact,
                        on_interrupt="return")
    if args.json:
        data = cert.to_dict()
        data.update(file=args.file, samples=int(lengths.size), dp=cluster.dp, capacity=cluster.capacity,
                    max_samples_per_cell=cluster.max_samples_per_cell)
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
    return 0 if cert.status == OPTIMAL else 1


def _interrupted_note(cert) -> None:
    """One line when a Ctrl-C ended the certification early."""
    if cert.stats.get("interrupted"):
        print("interrupted (Ctrl-C): the bounds and the best packing found until then")
