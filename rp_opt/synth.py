"""Synthetic windows shaped like RL rollouts of an MoE model.

Lengths: GRPO-style groups of ``group_size`` responses share a prompt; response lengths are
long-tailed (log-normal) and a share ``truncated`` of them hits the maximum response length
(truncated responses), which makes the spike at the top that length-only packers face.

Routing: per layer l, expert popularity logits z[l,e] ~ N(0, sigma_l^2) with sigma_l spread
across layers around ``skew`` (so some layers are mildly and some strongly skewed, as
measured on real MoE models); a topic offset shared by all prompts of a topic and a group
offset shared by the responses of a prompt add correlation; each sample's counts are a
multinomial draw of k T_i tokens over the group's routing distribution. A token picks an
expert at most once, so the distribution is the top-k inclusion probabilities of the
preferences (at most 1 per expert, :func:`inclusion_probs`; an expert at 1 gets all T_i
tokens), and counts above T_i are drawn again over the experts below the cap: every layer
routes exactly k T_i tokens with at most T_i per expert (:func:`cap_counts`).
``drift_steps`` = k moves the popularity logits by a random walk of k policy updates, to
emulate routing recorded k steps earlier.

Default ``skew``: under identity placement with E/P = 32 (ling-flash-like, N = 512), per-layer
max/mean EP-rank load spans roughly 1.25 to 2.7-3.4 across layers (seeds 0-4). Until the
generator kept every routed token (sum_e a = k T_i) the span read 1.3 to 4, because clipping
at T_i dropped up to a quarter of the routing and deflated the mean.
"""

from __future__ import annotations

import numpy as np

from .errors import integer, number, require
from .models import cost_from_spec, load_spec
from .window import Cluster, Instance, Window

SAMPLES_PER_CHUNK = 256  # samples per multinomial call: bounds memory at 256 x L x E probabilities
LAYER_SKEW = (1.1, 2.8)  # spread of sigma_l / skew across layers (calibrated, module docstring)
MAX_GENERATE_BYTES = 8 * 2**30  # generate() refuses windows whose generation needs more memory
REDRAW_ROUNDS = 16  # rounds that redraw tokens removed by the per-expert cap (cap_counts)
# largest skew, group_corr, topic_corr and drift: far above the measured ones (about 1);
# 1e308 overflowed the routing logits to inf and NaN (warnings, and routing from the NaN clean-up)
MAX_ROUTING_SCALE = 1000


def synth_lengths(num_samples: int, capacity: int, rng: np.random.Generator, *, group_size: int = 8,
                  truncated: float = 0.08, median_response: float | None = None,
                  tail: float = 0.9, prompt_share: float = 0.12) -> tuple[np.ndarray, np.ndarray]:
    """Lengths T[N] and the prompt group of every sample.

    Prompts take up to ``prompt_share`` of the capacity; responses are log-normal with the
    given median and shape ``tail``, clipped at the maximum response length, and a share
    ``truncated`` sits exactly at that maximum.
    """
    groups = -(-num_samples // group_size)
    group_of = np.arange(num_samples) // group_size
    max_prompt = max(1, int(prompt_share * capacity))
    prompt = np.clip(rng.lognormal(np.log(max_prompt / 6), 0.6, groups), 16, max_prompt).astype(np.int64)
    max_response = capacity - prompt[group_of]
    if median_response is None:
        median_response = capacity / 10
    response = rng.lognormal(np.log(median_response), tail, num_samples)
    response = np.minimum(np.maximum(response, 1), max_response).astype(np.int64)
    hit_max = rng.random(num_samples) < truncated
    response[hit_max] = max_response[hit_max]
    return prompt[group_of] + response, group_of


def synth_routing(lengths: np.ndarray, group_of: np.ndarray, num_layers: int, num_experts: int, top_k: int,
                  rng: np.random.Generator, *, skew: float = 1.0, group_corr: float = 0.5,
                  topic_corr: float = 0.5, topics: int = 16, drift: float = 0.15, drift_steps: int = 0,
                  drift_rng: np.random.Generator | None = None, progress=None) -> np.ndarray:
    """Demand a[N, L, E] (uint16/uint32) for the given lengths and prompt groups.

    ``progress(done, total)`` is called after every chunk of samples.
    """
    integer("top_k", top_k, 1, num_experts, hint="the experts")
    num_groups = int(group_of.max()) + 1
    # per-layer skew: spread around `skew` so layers range from mild to strongly skewed
    sigma = skew * rng.uniform(LAYER_SKEW[0], LAYER_SKEW[1], num_layers)
    popularity = sigma[:, None] * rng.standard_normal((num_layers, num_experts))
    if drift_steps:
        walker = drift_rng if drift_rng is not None else rng
        steps = walker.standard_normal((drift_steps, num_layers, num_experts)).sum(axis=0)
        popularity = popularity + drift * sigma[:, None] * steps
    topic_of_group = rng.integers(0, topics, num_groups)
    topic = topic_corr * rng.standard_normal((topics, num_layers, num_experts))
    group = group_corr * rng.standard_normal((num_groups, num_layers, num_experts))
    logits = popularity[None] + topic[topic_of_group] + group  # [groups, L, E]
    logits -= logits.max(axis=2, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=2, keepdims=True)
    # top-k inclusion probabilities: experts at 1 get every token of a sample (T_i), the
    # other (k - saturated) T_i tokens are drawn over the rest in proportion to pi
    probs = inclusion_probs(probs, top_k)
    saturated = probs > 1 - 1e-12
    probs[saturated] = 0.0
    free = top_k - saturated.sum(axis=2)  # [groups, L]
    probs /= np.maximum(free, 1)[:, :, None]

    n = lengths.size
    dtype = np.uint16 if lengths.max() <= np.iinfo(np.uint16).max else np.uint32
    demand = np.empty((n, num_layers, num_experts), dtype=dtype)
    for start in range(0, n, SAMPLES_PER_CHUNK):
        stop = min(n, start + SAMPLES_PER_CHUNK)
        groups, length = group_of[start:stop], lengths[start:stop]
        chunk_probs = probs[groups]
        counts = rng.multinomial(free[groups] * length[:, None], chunk_probs)
        counts += saturated[groups] * length[:, None, None]
        caps = np.broadcast_to(length[:, None], (stop - start, num_layers))
        demand[start:stop] = cap_counts(counts.reshape(-1, num_experts), caps.reshape(-1),
                                        chunk_probs.reshape(-1, num_experts), rng).reshape(counts.shape)
        if progress is not None:
            progress(stop, n)
    return demand


def inclusion_probs(probs: np.ndarray, top_k: int) -> np.ndarray:
    """Per-token inclusion probabilities pi[..., E] of top-k routing with preferences ``probs``.

    A token picks k distinct experts, so expert e is in its top-k with probability
    pi_e = min(1, c p_e) <= 1, with c such that sum_e pi_e = k (water-filling: the experts
    a plain multinomial would give more than one slot per token are saturated at 1, the
    rest keep their relative preferences). Sampling k T tokens with probabilities pi / k
    then gives every expert T pi_e <= T tokens in expectation. Rows of ``probs`` sum to 1;
    the result is a new array.
    """
    num_experts = probs.shape[-1]
    parts = np.partition(probs, num_experts - top_k, axis=-1)
    top = -np.sort(-parts[..., num_experts - top_k:], axis=-1)
    # mass outside the j largest, j = 0..k-1, summed from the small end (no cancellation)
    rest = parts[..., :num_experts - top_k].sum(axis=-1, keepdims=True) + np.cumsum(top[..., ::-1], axis=-1)[..., ::-1]
    del parts
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        scale = (top_k - np.arange(top_k)) / rest
        fits = scale * top <= 1  # with j saturated, the (j+1)-th largest stays below 1
        pi = probs * np.take_along_axis(scale, np.argmax(fits, axis=-1)[..., None], axis=-1)
    np.minimum(pi, 1.0, out=pi)
    np.nan_to_num(pi, copy=False, nan=0.0)
    # rounding, or preferences that underflowed to 0: spread the deficit over the room
    # 1 - pi_e left, pi += f (1 - pi) with f = deficit / room
    total = pi.sum(axis=-1, keepdims=True)
    share = (top_k - total) / np.maximum(num_experts - total, 1e-300)
    pi *= 1 - share
    pi += share
    return np.clip(pi, 0.0, 1.0, out=pi)


def cap_counts(counts: np.ndarray, caps: np.ndarray, weights: np.ndarray, rng: np.random.Generator,
               rounds: int = REDRAW_ROUNDS) -> np.ndarray:
    """Counts[rows, E] capped at ``caps[rows]`` per expert with the same row totals.

    A token picks each expert at most once, so a row of k T tokens holds at most T per
    expert. Every token the cap removes is drawn again over the experts still below
    their cap, with probabilities ``weights`` renormalised, for up to ``rounds`` rounds;
    anything still left then fills the experts with room in decreasing order of weight
    (deterministic water-fill). Needs ``counts.sum(axis=1) <= E * caps`` (top-k with
    k <= E). ``counts`` (int64) is changed in place and returned.
    """
    num_experts = counts.shape[1]
    caps = caps.astype(np.int64)[:, None]
    excess = np.zeros(counts.shape[0], dtype=np.int64)
    rows = np.flatnonzero(counts.max(axis=1) > caps[:, 0])
    sub = counts[rows]
    excess[rows] = np.maximum(sub - caps[rows], 0).sum(axis=1)
    counts[rows] = np.minimum(sub, caps[rows])
    for _ in range(rounds):
        rows = np.flatnonzero(excess)
        if rows.size == 0:
            return counts
        sub = counts[rows]
        open_weights = weights[rows] * (sub < caps[rows])
        total = open_weights.sum(axis=1)
        drawable = total > 0  # rows whose open experts all have zero weight wait for the fill
        if not drawable.any():
            break
        rows, sub, total = rows[drawable], sub[drawable], total[drawable]
        # one categorical draw per removed token: row r's cumulative weights span (r, r + 1]
        cum = np.cumsum(open_weights[drawable], axis=1) / total[:, None] + np.arange(rows.size)[:, None]
        local = np.repeat(np.arange(rows.size), excess[rows])
        pick = np.searchsorted(cum.ravel(), local + rng.random(local.size), side="right")
        pick = np.clip(pick, local * num_experts, (local + 1) * num_experts - 1)
        sub += np.bincount(pick, minlength=rows.size * num_experts).reshape(sub.shape)
        excess[rows] = np.maximum(sub - caps[rows], 0).sum(axis=1)
        np.minimum(sub, caps[rows], out=sub)
        counts[rows] = sub
    rows = np.flatnonzero(excess)
    if rows.size:
        sub = counts[rows]
        order = np.argsort(-weights[rows], axis=1, kind="stable")
        room = np.take_along_axis(caps[rows] - sub, order, axis=1)
        fill = np.clip(excess[rows, None] - (np.cumsum(room, axis=1) - room), 0, room)
        np.put_along_axis(sub, order, np.take_along_axis(sub, order, axis=1) + fill, axis=1)
        counts[rows] = sub
    return counts


def generation_bytes(samples: int, layers: int, experts: int, capacity: int, group_size: int) -> int:
    """About the peak memory :func:`synth_routing` needs: the demand array (uint16, or
    uint32 above 65535 tokens per sample), three float64 [groups, L, E] arrays of routing
    probabilities and one chunk's float64/int64 working set."""
    count_bytes = 2 if capacity <= np.iinfo(np.uint16).max else 4
    groups = -(-samples // group_size)
    chunk = min(samples, SAMPLES_PER_CHUNK)
    return layers * experts * (samples * count_bytes + 3 * 8 * groups + 4 * 8 * chunk)


def check_generate_args(spec, *, samples, capacity, layers, experts, top_k, seed, group_size, truncated, skew,
                        group_corr, topic_corr, drift, drift_steps, median_response) -> dict:
    """Validate :func:`generate`'s arguments before any work; return them checked.

    Every problem is a one-line :class:`InputError` naming the parameter and its value.
    ``top_k`` given explicitly must lie in [1, E]; the spec's default k is capped at an
    overridden E. ``skew``, ``group_corr``, ``topic_corr`` and ``drift`` lie in
    [0, :data:`MAX_ROUTING_SCALE`]. The memory the generation needs (the demand array and
    routing probabilities, and the drift walk of ``drift_steps`` x L x E draws) is at
    most :data:`MAX_GENERATE_BYTES` each (``samples``, ``layers``, ``experts`` or
    ``drift_steps`` named otherwise).

    Returns
    -------
    dict
        Every argument by name, counts as ``int`` (``samples=16.0`` gives 16) and
        coefficients as ``float``; ``layers``, ``experts`` and ``top_k`` filled in from
        ``spec`` when None.
    """
    out = {"samples": integer("samples", samples, 1), "capacity": integer("capacity", capacity, 32, hint="tokens"),
           "layers": integer("layers", spec.moe_layers if layers is None else layers, 1),
           "experts": integer("experts", spec.num_experts if experts is None else experts, 1)}
    num_experts = out["experts"]
    out["top_k"] = min(int(spec.top_k), num_experts) if top_k is None else \
        integer("top_k", top_k, 1, num_experts, hint="the experts")
    out["seed"] = integer("seed", seed, 0)
    out["group_size"] = integer("group_size", group_size, 1)
    out["drift_steps"] = integer("drift_steps", drift_steps, 0)
    out["truncated"] = number("truncated", truncated, 0, 1)
    for field, value in (("skew", skew), ("group_corr", group_corr), ("topic_corr", topic_corr), ("drift", drift)):
        out[field] = number(field, value, 0, MAX_ROUTING_SCALE)
    out["median_response"] = number("median_response", median_response, above=0, none=True)
    need = generation_bytes(out["samples"], out["layers"], num_experts, out["capacity"], out["group_size"])
    # named: the one of N, L, E furthest above a large window's (16384 samples, 96 layers, 512 experts)
    largest = max((out["samples"] / 16384, "samples"), (out["layers"] / 96, "layers"), (num_experts / 512, "experts"))
    require(need <= MAX_GENERATE_BYTES, largest[1],
            f"N={out['samples']} with L={out['layers']}, E={num_experts} needs about {need / 2**30:.1f} GiB "
            f"(demand N x L x E plus routing probabilities), more than the {MAX_GENERATE_BYTES / 2**30:g} GiB limit")
    # the drift walk draws steps x L x E float64 at once (10^8 steps raised MemoryError)
    walk = 8 * out["drift_steps"] * out["layers"] * num_experts
    require(walk <= MAX_GENERATE_BYTES, "drift_steps",
            f"{out['drift_steps']} steps with L={out['layers']}, E={num_experts} need about {walk / 2**30:.1f} GiB "
            f"for the drift walk, more than the {MAX_GENERATE_BYTES / 2**30:g} GiB limit")
    return out


def generate(model: str = "ling-tiny-like", samples: int = 256, dp: int = 8, edp: int = 1, ep: int = 8,
             capacity: int = 32768, layers: int | None = None, experts: int | None = None,
             top_k: int | None = None, seed: int = 0, max_samples_per_cell: int | None = None,
             group_size: int = 8, truncated: float = 0.08, skew: float = 1.0, group_corr: float = 0.5,
             topic_corr: float = 0.5, drift: float = 0.15, drift_steps: int = 0,
             median_response: float | None = None, progress=None) -> Instance:
    """A synthetic :class:`Instance`, deterministic for ``seed``.

    Parameters
    ----------
    model
        Name of a spec in ``models/`` (sets E, top-k, the cost model and L by default).
    samples, dp, edp, ep, capacity, max_samples_per_cell
        N and the cluster.
    layers, experts, top_k
        Override L, E and k of the spec (for small test windows).
    seed
        Seed of every random draw. Windows with the same seed and different
        ``drift_steps`` share lengths and base routing, and differ only by the drift.
    group_size
        Samples per prompt group (GRPO-style responses to one prompt, an integer >= 1,
        default 8): consecutive samples i // group_size share a prompt (and its length)
        and their routing is correlated by ``group_corr``.
    truncated
        Share of samples, in [0, 1] (default 0.08), whose response is cut at the maximum
        response length (C minus the prompt's length): the spike of samples of length C.
    median_response
        Median of the log-normal response lengths in tokens, > 0 (default None: C / 10);
        responses are clipped at the maximum response length.
    skew, group_corr, topic_corr
        Routing knobs, each in [0, :data:`MAX_ROUTING_SCALE`]: popularity skew across
        experts (default 1), and the scale of the routing offsets shared within a prompt
        group and within a topic (default 0.5 each; 0: no correlation).
    drift, drift_steps
        Size of one policy update's drift of popularity logits (in [0,
        :data:`MAX_ROUTING_SCALE`]), and how many updates (their walk must fit in
        :data:`MAX_GENERATE_BYTES`).
    progress
        Optional ``progress(done, total)`` callback over samples.
    """
    spec = load_spec(model)
    args = check_generate_args(
        spec, samples=samples, capacity=capacity, layers=layers, experts=experts, top_k=top_k, seed=seed,
        group_size=group_size, truncated=truncated, skew=skew, group_corr=group_corr, topic_corr=topic_corr,
        drift=drift, drift_steps=drift_steps, median_response=median_response)
    num_layers, num_experts, k = args["layers"], args["experts"], args["top_k"]
    cluster = Cluster(dp, edp, ep, args["capacity"], max_samples_per_cell)
    # before the routing is drawn (minutes for a large window), as the Instance would after
    cluster.check_experts(num_experts)
    length_seed, routing_seed, drift_seed = np.random.SeedSequence(args["seed"]).spawn(3)
    lengths, group_of = synth_lengths(args["samples"], args["capacity"], np.random.default_rng(length_seed),
                                      group_size=args["group_size"], truncated=args["truncated"],
                                      median_response=args["median_response"])
    demand = synth_routing(lengths, group_of, num_layers, num_experts, k, np.random.default_rng(routing_seed),
                           skew=args["skew"], group_corr=args["group_corr"], topic_corr=args["topic_corr"],
                           drift=args["drift"], drift_steps=args["drift_steps"],
                           drift_rng=np.random.default_rng(drift_seed), progress=progress)
    window = Window(lengths, demand, k)
    meta = {"generator": {key: args[key] for key in ("seed", "skew", "group_size", "truncated", "group_corr",
                                                     "topic_corr", "drift", "drift_steps")}}
    return Instance(window, cluster, cost_from_spec(spec, num_layers), spec.name, meta)
