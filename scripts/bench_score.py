"""Time scoring and checking a production-sized plan (issue: scoring < 1 s).

    python scripts/bench_score.py [--samples 4096] [--repeat 5] [--json]

Generates (or reads from --cache) a ling-flash-like window with N samples, L = 48,
E = 256, D = 64, G = 8, P = 8, C = 32768, packs it with ffd under a random balanced
placement, and times `rp_opt.cost.score` (rank demand + A, W, X, J + objective) and the
independent checker. Prints the median and the best of --repeat runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rp_opt.check import check_plan  # noqa: E402
from rp_opt.cost import score  # noqa: E402
from rp_opt.io import load_instance, save_instance  # noqa: E402
from rp_opt.packing.baseline import pack  # noqa: E402
from rp_opt.solution import Placement  # noqa: E402
from rp_opt.synth import generate  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cache", default=None, help="window .npz to reuse (written if absent)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    if args.cache and os.path.exists(args.cache):
        instance = load_instance(args.cache)
    else:
        instance = generate("ling-flash-like", samples=args.samples, dp=64, edp=8, ep=8, capacity=32768,
                            layers=args.layers, seed=0)
        if args.cache:
            save_instance(args.cache, instance)
    window = instance.window
    rng = np.random.default_rng(0)
    placement = Placement(np.stack([rng.permutation(np.arange(window.num_experts) % 8)
                                    for _ in range(window.num_layers)]), 8)
    layout, _ = pack(instance, "ffd")
    rows = layout.to_rows()
    times = {"score": [], "check": []}
    for _ in range(args.repeat):
        start = time.perf_counter()
        value = score(instance, placement, layout, "sync")
        times["score"].append(time.perf_counter() - start)
        start = time.perf_counter()
        report = check_plan(instance, placement.to_list(), rows, "sync")
        times["check"].append(time.perf_counter() - start)
        assert report.valid and np.allclose(report.score, value)
    out = {"samples": window.num_samples, "layers": window.num_layers, "experts": window.num_experts,
           "rows": layout.num_rows, "cpus": os.cpu_count(),
           **{f"{k}_median_s": float(np.median(v)) for k, v in times.items()},
           **{f"{k}_best_s": float(np.min(v)) for k, v in times.items()}}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"N={out['samples']} L={out['layers']} E={out['experts']} R={out['rows']}: "
              f"score median {out['score_median_s']:.3f} s (best {out['score_best_s']:.3f}), "
              f"check median {out['check_median_s']:.3f} s (best {out['check_best_s']:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
