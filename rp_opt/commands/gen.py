"""rp-opt gen: write a synthetic window file."""

from __future__ import annotations

import os
import sys
import time

from ..errors import InputError, require
from ..io import save_instance
from ..synth import MAX_ROUTING_SCALE, SAMPLES_PER_CHUNK, generate
from ._common import Progress, add_json, check_output, emit_json, int_arg, number_arg, seed_arg, write_reported


def register(sub) -> None:
    p = sub.add_parser("gen", help="generate a synthetic window (.npz)")
    p.add_argument("--model", default="ling-tiny-like", help="model spec in models/ (default ling-tiny-like)")
    p.add_argument("--samples", type=int_arg(1, MAX_COUNT), default=256, help="N (default 256)")
    p.add_argument("--dp", type=int_arg(1, MAX_COUNT), default=8, help="D, DP slots (default 8)")
    p.add_argument("--edp", type=int_arg(1, MAX_COUNT), default=1, help="G, EDP shards (default 1)")
    p.add_argument("--ep", type=int_arg(1, MAX_COUNT), default=8, help="P, EP ranks per shard (default 8)")
    p.add_argument("--capacity", type=int_arg(32, MAX_COUNT), default=32768, help="C, tokens per cell (default 32768)")
    p.add_argument("--max-samples-per-cell", type=int_arg(1, MAX_COUNT), default=None, help="m (default: no limit)")
    p.add_argument("--layers", type=int_arg(1, MAX_COUNT), default=None, help="L (default: the model's MoE layers)")
    p.add_argument("--experts", type=int_arg(1, MAX_COUNT), default=None, help="E (default: the model's)")
    p.add_argument("--top-k", type=int_arg(1, MAX_COUNT), default=None, help="k (default: the model's)")
    p.add_argument("--skew", type=number_arg(0, MAX_ROUTING_SCALE), default=1.0,
                   help=f"expert popularity skew, in [0, {MAX_ROUTING_SCALE}] (default 1)")
    p.add_argument("--group-corr", type=number_arg(0, MAX_ROUTING_SCALE), default=0.5,
                   help=f"routing correlation of the responses to one prompt, in [0, {MAX_ROUTING_SCALE}] "
                        "(default 0.5; 0: none)")
    p.add_argument("--topic-corr", type=number_arg(0, MAX_ROUTING_SCALE), default=0.5,
                   help=f"routing correlation of the prompts of one topic, in [0, {MAX_ROUTING_SCALE}] "
                        "(default 0.5; 0: none)")
    p.add_argument("--group-size", type=int_arg(1, MAX_COUNT), default=8, help="responses per prompt (default 8)")
    p.add_argument("--drift-steps", type=int_arg(0, MAX_COUNT), default=0,
                   help="policy updates of routing drift (default 0)")
    p.add_argument("--seed", type=seed_arg, default=0, help="random seed, an integer in [0, 2^31-1] (default 0)")
    p.add_argument("-o", "--output", required=True,
                   help="output .npz (its directory must exist; an existing file is refused unless --force)")
    p.add_argument("--force", action="store_true", help="replace the -o file if it exists")
    add_json(p)
    p.set_defaults(run=run)


# counts are 32-bit (larger ones overflowed inside numpy)
MAX_COUNT = 2**31 - 1

# the flag of each field synth.generate (and the Cluster, the model spec) may name in an
# InputError: one flag's error had a different JSON field by value (--top-k 0 -> --top-k
# from argparse, --top-k 300 -> top_k from the library)
_FLAG_OF = {
    "model": "--model", "samples": "--samples", "capacity": "--capacity", "cluster.capacity": "--capacity",
    "layers": "--layers", "experts": "--experts", "top_k": "--top-k", "seed": "--seed",
    "group_size": "--group-size", "drift_steps": "--drift-steps", "skew": "--skew",
    "group_corr": "--group-corr", "topic_corr": "--topic-corr", "cluster.dp": "--dp", "cluster.edp": "--edp",
    "cluster.ep": "--ep", "cluster.max_samples_per_cell": "--max-samples-per-cell",
}


def flag_error(exc: InputError) -> InputError:
    """``exc`` with its library field replaced by the ``rp-opt gen`` flag that sets it, the
    message kept. A fault of the model spec (``model.hidden``) is on ``--model``, its key
    leading the message (``--model: model.hidden must be ...``); fields no flag sets are
    kept."""
    if exc.field.startswith("model."):
        return InputError("--model", f"{exc.field} {exc.message}")
    return InputError(_FLAG_OF.get(exc.field, exc.field), exc.message)


def run(args) -> int:
    check_output(args.output)
    # a window may be a recorded replay that cannot be made again: never replaced unasked
    require(args.force or not os.path.lexists(args.output), "-o",
            f"{args.output} exists; pass --force to replace it")
    start = time.perf_counter()
    chunks = -(-args.samples // SAMPLES_PER_CHUNK)
    bar = Progress(chunks, "routing", enabled=None if not args.json else False)
    try:
        # every argument, the spec and the memory needed are checked before any work
        instance = generate(args.model, samples=args.samples, dp=args.dp, edp=args.edp, ep=args.ep,
                            capacity=args.capacity, layers=args.layers, experts=args.experts, top_k=args.top_k,
                            seed=args.seed, max_samples_per_cell=args.max_samples_per_cell, skew=args.skew,
                            group_corr=args.group_corr, topic_corr=args.topic_corr,
                            group_size=args.group_size, drift_steps=args.drift_steps,
                            progress=lambda done, total: bar.step(f"{done}/{total} samples"))
    except InputError as exc:
        raise flag_error(exc) from None
    info: dict = {}
    write_error = write_reported(info, save_instance, args.output, instance)
    w = instance.window
    info.update(model=instance.model, samples=w.num_samples, layers=w.num_layers, experts=w.num_experts,
                top_k=w.top_k, tokens=int(w.lengths.sum()), max_length=int(w.lengths.max()),
                seconds=time.perf_counter() - start)
    if w.num_samples < instance.cluster.dp:
        # still written (a window to test infeasibility with), but not silently
        info["warning"] = (f"the window has N={w.num_samples} samples, fewer than the D={instance.cluster.dp} slots "
                           "of one row: no layout fills every cell, every solver will call it infeasible")
        print(f"warning: {info['warning']}", file=sys.stderr)
    if args.json:
        emit_json(info)
    else:
        print(f"{'not written' if write_error else 'wrote ' + args.output}: {w.num_samples} samples, "
              f"{int(w.lengths.sum())} tokens, "
              f"L={w.num_layers}, E={w.num_experts}, top-{w.top_k} ({instance.model})")
    return 2 if write_error else 0
