#!/usr/bin/env python
"""Open question 3, the control case: uniform routing and equal lengths, where little gain
is expected, beside the synthetic skewed case (a 2 x 2 of lengths x routing).

Equal lengths: every sample has T = C / 4 tokens (four per microbatch). Uniform routing:
a[i,l,:] is a multinomial draw of k T tokens over E experts with equal probabilities
(capped at T per expert), built with numpy. The other cells use the synthetic generator's
long-tailed lengths and skewed, correlated routing. Gains are over identity + ffd, scored
by the checker.

    python scripts/question_control.py --out docs/bench
    python scripts/question_control.py --quick
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rp_opt.bench.questions import base_spec, checked_score, finish, img_path, parser, plan  # noqa: E402
from rp_opt.bench.stats import pm  # noqa: E402
from rp_opt.window import Instance, Window  # noqa: E402

PLANS = (("identity+kk", "kk"), ("LPT+ffd", "lpt-ffd"), ("LPT+heuristic", "heuristic"))


def uniform_demand(lengths: np.ndarray, layers: int, experts: int, top_k: int, rng) -> np.ndarray:
    """a[N, L, E]: k T_i tokens per layer spread uniformly over the experts (<= T_i each)."""
    tokens = np.broadcast_to((top_k * lengths)[:, None], (lengths.size, layers))
    counts = rng.multinomial(tokens, np.full(experts, 1.0 / experts))
    return np.minimum(counts, lengths[:, None, None]).astype(np.uint16)


def variant(synthetic: Instance, equal_lengths: bool, uniform_routing: bool, seed: int) -> Instance:
    """The synthetic window with its lengths and/or routing replaced."""
    window, cluster = synthetic.window, synthetic.cluster
    rng = np.random.default_rng(seed + 1000)
    lengths = np.full(window.num_samples, cluster.capacity // 4, dtype=np.int64) if equal_lengths else window.lengths
    if uniform_routing:
        demand = uniform_demand(lengths, window.num_layers, window.num_experts, window.top_k, rng)
    elif equal_lengths:
        # keep the synthetic routing shares, rescaled to the new lengths
        share = window.demand / np.maximum(window.demand.sum(axis=2, keepdims=True), 1)
        demand = np.stack([rng.multinomial(window.top_k * lengths[i], share[i] / share[i].sum(axis=1, keepdims=True))
                           for i in range(window.num_samples)])
        demand = np.minimum(demand, lengths[:, None, None]).astype(np.uint16)
    else:
        demand = window.demand
    new = Window(lengths, demand, window.top_k)
    return Instance(new, cluster, synthetic.cost, synthetic.model, {"control": [equal_lengths, uniform_routing]})


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__).parse_args(argv)
    seeds = args.seeds or (1 if args.quick else 5)
    cases = [(False, False), (True, False), (False, True), (True, True)]
    points = []
    for seed in range(seeds):
        synthetic = base_spec(args.quick, "control", seed).build()
        for equal, uniform in cases:
            instance = variant(synthetic, equal, uniform, seed)
            base = checked_score(instance, plan(instance, "baseline"))
            point = {"seed": seed, "equal_lengths": equal, "uniform_routing": uniform, "baseline": base}
            for label, solver in PLANS:
                value = checked_score(instance, plan(instance, solver, quick=args.quick, seed=seed))
                point[label] = 100 * (base - value) / base
            points.append(point)
    rows = []
    for equal, uniform in cases:
        pts = [p for p in points if p["equal_lengths"] == equal and p["uniform_routing"] == uniform]
        rows.append(["equal" if equal else "synthetic (long tail)", "uniform" if uniform else "synthetic (skewed)",
                     len(pts)] + [pm([p[label] for p in pts]) for label, _ in PLANS])
    headers = ["lengths", "routing", "windows"] + [f"gain % of {label}" for label, _ in PLANS]
    tables = {"Control case: gain over identity+ffd (mean ± std over seeds)": (headers, rows)}
    path = img_path(args, "question_control")
    if path:
        from rp_opt.bench.plots import pyplot
        plt = pyplot()
        if plt is not None:
            fig, ax = plt.subplots(figsize=(6, 3.2))
            width = 0.25
            for j, (label, _) in enumerate(PLANS):
                means = [np.mean([p[label] for p in points if (p["equal_lengths"], p["uniform_routing"]) == c])
                         for c in cases]
                ax.bar(np.arange(len(cases)) + (j - 1) * width, means, width, label=label)
            ax.set_xticks(range(len(cases)), ["synth/synth", "equal/synth", "synth/uniform", "equal/uniform"])
            ax.set_xlabel("lengths / routing")
            ax.set_ylabel("gain over identity+ffd (%)")
            ax.legend(fontsize=8)
            ax.grid(axis="y", alpha=0.3)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fig.tight_layout()
            fig.savefig(path, dpi=110)
            plt.close(fig)
    finish(args, "question_control", tables, {"points": points}, f"{seeds} seeds; heuristic schedule fixed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
