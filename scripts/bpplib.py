"""Run the R* certifier over BPPLIB instance folders and compare with the proven optima.

Usage: python scripts/bpplib.py [--root ../shared/bpplib] [--folders a,b] [--time-limit S]
       [--limit K] [--log [FILE]] [--json]

Per folder: instances, proven optimal, wrong (a certified value different from optima.tsv;
must be 0), mean / max seconds. Exit code 1 when anything is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from rp_opt.rows import certify_bins, read_bpplib  # noqa: E402


DEFAULT_ROOT = os.path.join(os.path.dirname(HERE), "..", "shared", "bpplib")


def read_optima(root: str) -> dict[str, int]:
    with open(os.path.join(root, "optima.tsv")) as handle:
        lines = handle.read().split()
    return {name: int(value) for name, value in zip(lines[2::2], lines[3::2])}


def run_folder(root: str, folder: str, optima: dict, time_limit: float, limit: int | None, log=None) -> dict:
    names = sorted(f for f in os.listdir(os.path.join(root, folder)) if f.endswith(".txt"))
    if limit is not None:
        names = names[:limit]
    rows, wrong_names = [], []
    for name in names:
        weights, capacity = read_bpplib(os.path.join(root, folder, name))
        cert = certify_bins(weights, capacity, 1, None, time_limit)
        best = optima.get(name[:-4])
        # a certificate is wrong when it claims an optimum, or bounds, that contradict the known optimum
        wrong = best is not None and ((cert.r_star is not None and cert.r_star != best)
                                      or cert.bins_lower > best
                                      or (cert.bins_upper is not None and cert.bins_upper < best))
        if wrong:
            wrong_names.append(name)
        rows.append((name, cert.status, cert.bins_lower, cert.bins_upper, best, cert.seconds))
        if log:
            print(f"{folder}/{name} {cert.status} {cert.bins_lower}..{cert.bins_upper} opt={best} "
                  f"{cert.bound_method} {cert.seconds:.2f}s", file=log, flush=True)
    seconds = [r[5] for r in rows]
    return {"folder": folder, "instances": len(rows), "optimal": sum(r[1] == "optimal" for r in rows),
            "wrong": len(wrong_names), "wrong_names": wrong_names,
            "mean_s": sum(seconds) / max(len(seconds), 1), "max_s": max(seconds, default=0.0),
            "open": [r[0] for r in rows if r[1] != "optimal"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=DEFAULT_ROOT, help="folder with optima.tsv and the instance folders")
    parser.add_argument("--folders", default="falkenauer_u,falkenauer_t,scholl_1,hard28")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per instance")
    parser.add_argument("--limit", type=int, default=None, help="at most K instances per folder")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--log", nargs="?", const="-", default=None, metavar="FILE",
                        help="one line per instance, flushed, to FILE (appended) or stderr")
    args = parser.parse_args(argv)
    optima = read_optima(args.root)
    start = time.time()
    if args.log not in (None, "-") and os.path.dirname(args.log):
        os.makedirs(os.path.dirname(args.log), exist_ok=True)  # docs/bpplib.md logs to /tmp/rw/
    log = None if args.log is None else (sys.stderr if args.log == "-" else open(args.log, "a"))
    results = [run_folder(args.root, f, optima, args.time_limit, args.limit, log) for f in args.folders.split(",")]
    if args.json:
        json.dump({"time_limit": args.time_limit, "limit": args.limit, "wall_s": time.time() - start,
                   "folders": results}, sys.stdout, indent=1)
        print()
    else:
        print(f"{'folder':<14} {'instances':>9} {'optimal':>8} {'wrong':>6} {'mean s':>8} {'max s':>8}")
        for r in results:
            print(f"{r['folder']:<14} {r['instances']:>9} {r['optimal']:>8} {r['wrong']:>6} "
                  f"{r['mean_s']:>8.2f} {r['max_s']:>8.2f}")
    return 1 if any(r["wrong"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
