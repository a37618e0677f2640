#!/usr/bin/env python
"""Open question 4, sensitivity to the attention coefficients: plan under alpha, beta scaled
by factors in x0.25 .. x4, score under the original coefficients, and rank-correlate the
plans' orderings.

For each seed, candidate plans are: the heuristic under every scaled cost model
(alpha x a, beta x b for a, b in SCALES; fixed schedule, same reference placement) plus
identity+ffd, identity+kk and LPT+ffd. For each scaled model m:

* regret = score_orig(plan made under m) / score_orig(plan made under the original) - 1;
* tau = Kendall's tau (scipy.stats.kendalltau) between the candidates' ordering under m
  and under the original coefficients: does a mis-calibrated cost model still rank plans
  the way the true one does?

    python scripts/question_sensitivity.py --out docs/bench
    python scripts/question_sensitivity.py --quick
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rp_opt.bench.questions import base_spec, checked_score, finish, img_path, parser, plan  # noqa: E402
from rp_opt.bench.runner import reference_placement  # noqa: E402
from rp_opt.bench.stats import kendall_tau, pm  # noqa: E402
from rp_opt.window import CostModel, Stage  # noqa: E402

SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)


def scaled(instance, a: float, b: float):
    """``instance`` with every stage's alpha times ``a`` and beta times ``b``."""
    cost = instance.cost
    stages = tuple(Stage(s.name, s.layers, s.alpha * a, s.beta * b) for s in cost.stages)
    return replace(instance, cost=CostModel(stages, cost.gamma))


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__).parse_args(argv)
    seeds = args.seeds or (1 if args.quick else 3)
    scales = (0.25, 1.0, 4.0) if args.quick else SCALES
    grid = [(a, b) for a in scales for b in scales]
    points = []
    for seed in range(seeds):
        instance = base_spec(args.quick, "sensitivity", seed).build()
        placement = reference_placement(instance, "reference")
        candidates = {f"heuristic a={a} b={b}": plan(scaled(instance, a, b), quick=args.quick, seed=seed,
                                                     placement=placement) for a, b in grid}
        for solver in ("baseline", "kk", "lpt-ffd"):
            candidates[solver] = plan(instance, solver)
        names = list(candidates)
        models = {(a, b): scaled(instance, a, b) for a, b in grid}
        scores = {m: np.array([checked_score(inst, candidates[n]) for n in names]) for m, inst in models.items()}
        original = scores[1.0, 1.0]
        own = original[names.index("heuristic a=1.0 b=1.0")]
        for (a, b) in grid:
            made = original[names.index(f"heuristic a={a} b={b}")]
            points.append({"seed": seed, "a": a, "b": b, "regret": 100 * (made / own - 1),
                           "tau": kendall_tau(scores[a, b], original)})
    rows = []
    for a, b in grid:
        pts = [p for p in points if p["a"] == a and p["b"] == b]
        rows.append([a, b, len(pts), pm([p["regret"] for p in pts], 3), pm([p["tau"] for p in pts], 3)])
    headers = ["alpha x", "beta x", "seeds", "regret % under the original (mean ± std)",
               "Kendall tau vs original ranking"]
    tables = {"Sensitivity to the attention coefficients": (headers, rows)}
    path = img_path(args, "question_sensitivity")
    if path:
        from rp_opt.bench.plots import pyplot
        plt = pyplot()
        if plt is not None:
            fig, axes = plt.subplots(1, 2, figsize=(8, 3.4))
            for ax, key, label in ((axes[0], "regret", "regret %"), (axes[1], "tau", "Kendall tau")):
                mat = np.array([[np.mean([p[key] for p in points if p["a"] == a and p["b"] == b]) for b in scales]
                                for a in scales])
                im = ax.imshow(mat, cmap="magma" if key == "regret" else "viridis", origin="lower")
                ax.set_xticks(range(len(scales)), [str(s) for s in scales])
                ax.set_yticks(range(len(scales)), [str(s) for s in scales])
                ax.set_xlabel("beta x")
                ax.set_ylabel("alpha x")
                ax.set_title(label, fontsize=10)
                for i in range(len(scales)):
                    for j in range(len(scales)):
                        ax.text(j, i, f"{mat[i, j]:.2f}", ha="center", va="center", fontsize=7, color="w")
                fig.colorbar(im, ax=ax, shrink=0.8)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fig.tight_layout()
            fig.savefig(path, dpi=110)
            plt.close(fig)
    finish(args, "question_sensitivity", tables, {"points": points},
           f"{seeds} seeds; {len(grid)} scaled cost models; heuristic schedule fixed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
