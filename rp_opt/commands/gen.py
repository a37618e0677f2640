"""rp-opt gen: write a synthetic window file."""

from __future__ import annotations

import time

from ..io import save_instance
from ..synth import SAMPLES_PER_CHUNK, generate
from ._common import Progress, add_json, check_output, emit_json, seed_arg, write_reported


def register(sub) -> None:
    p = sub.add_parser("gen", help="generate a synthetic window (.npz)")
    p.add_argument("--model", default="ling-tiny-like", help="model spec in models/ (default ling-tiny-like)")
    p.add_argument("--samples", type=int, default=256, help="N")
    p.add_argument("--dp", type=int, default=8, help="D, DP slots")
    p.add_argument("--edp", type=int, default=1, help="G, EDP shards")
    p.add_argument("--ep", type=int, default=8, help="P, EP ranks per shard")
    p.add_argument("--capacity", type=int, default=32768, help="C, tokens per cell")
    p.add_argument("--max-samples-per-cell", type=int, default=None, help="m (default: no limit)")
    p.add_argument("--layers", type=int, default=None, help="L (default: the model's MoE layers)")
    p.add_argument("--experts", type=int, default=None, help="E (default: the model's)")
    p.add_argument("--top-k", type=int, default=None, help="k (default: the model's)")
    p.add_argument("--skew", type=float, default=1.0, help="expert popularity skew")
    p.add_argument("--group-size", type=int, default=8, help="responses per prompt")
    p.add_argument("--drift-steps", type=int, default=0, help="policy updates of routing drift")
    p.add_argument("--seed", type=seed_arg, default=0, help="random seed, an integer in [0, 2^31-1] (default 0)")
    p.add_argument("-o", "--output", required=True, help="output .npz (its directory must exist)")
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    check_output(args.output)
    start = time.perf_counter()
    chunks = -(-args.samples // SAMPLES_PER_CHUNK)
    bar = Progress(chunks, "routing", enabled=None if not args.json else False)
    instance = generate(args.model, samples=args.samples, dp=args.dp, edp=args.edp, ep=args.ep,
                        capacity=args.capacity, layers=args.layers, experts=args.experts, top_k=args.top_k,
                        seed=args.seed, max_samples_per_cell=args.max_samples_per_cell, skew=args.skew,
                        group_size=args.group_size, drift_steps=args.drift_steps,
                        progress=lambda done, total: bar.step(f"{done}/{total} samples"))
    info: dict = {}
    write_error = write_reported(info, save_instance, args.output, instance)
    w = instance.window
    info.update(model=instance.model, samples=w.num_samples, layers=w.num_layers, experts=w.num_experts,
                top_k=w.top_k, tokens=int(w.lengths.sum()), max_length=int(w.lengths.max()),
                seconds=time.perf_counter() - start)
    if args.json:
        emit_json(info)
    else:
        print(f"{'not written' if write_error else 'wrote ' + args.output}: {w.num_samples} samples, "
              f"{int(w.lengths.sum())} tokens, "
              f"L={w.num_layers}, E={w.num_experts}, top-{w.top_k} ({instance.model})")
    return 2 if write_error else 0
