"""Synthetic windows shaped like RL rollouts of an MoE model.

Lengths: GRPO-style groups of ``group_size`` responses share a prompt; response lengths are
long-tailed (log-normal) and a share ``truncated`` of them hits the maximum response length
(truncated responses), which makes the spike at the top that length-only packers face.

Routing: per layer l, expert popularity logits z[l,e] ~ N(0, sigma_l^2) with sigma_l spread
across layers around ``skew`` (so some layers are mildly and some strongly skewed, as
measured on real MoE models); a topic offset shared by all prompts of a topic and a group
offset shared by the responses of a prompt add correlation; each sample's counts are a
multinomial draw of k T_i tokens over the group's routing distribution, capped at T_i per
expert (a token picks an expert at most once). ``drift_steps`` = k moves the popularity
logits by a random walk of k policy updates, to emulate routing recorded k steps earlier.

Default ``skew`` is calibrated so that, under identity placement with E/P = 32, per-layer
max/mean EP-rank load spans roughly 1.3 to 4 across layers (``scripts/calibrate_synth.py``
prints the measured span).
"""

from __future__ import annotations

import numpy as np

from .errors import require
from .models import cost_from_spec, load_spec
from .window import Cluster, Instance, Window

SAMPLES_PER_CHUNK = 256  # samples per multinomial call: bounds memory at 256 x L x E probabilities
LAYER_SKEW = (1.1, 2.8)  # spread of sigma_l / skew across layers (calibrated, module docstring)


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

    n = lengths.size
    dtype = np.uint16 if lengths.max() <= np.iinfo(np.uint16).max else np.uint32
    demand = np.empty((n, num_layers, num_experts), dtype=dtype)
    for start in range(0, n, SAMPLES_PER_CHUNK):
        stop = min(n, start + SAMPLES_PER_CHUNK)
        tokens = np.broadcast_to((top_k * lengths[start:stop])[:, None], (stop - start, num_layers))
        counts = rng.multinomial(tokens, probs[group_of[start:stop]])
        # a token picks each expert at most once: at most T_i tokens per expert
        np.minimum(counts, lengths[start:stop, None, None], out=counts)
        demand[start:stop] = counts
        if progress is not None:
            progress(stop, n)
    return demand


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
    skew, group_corr, topic_corr
        Routing knobs: popularity skew across experts, correlation within a prompt group
        and within a topic.
    drift, drift_steps
        Size of one policy update's drift of popularity logits, and how many updates.
    progress
        Optional ``progress(done, total)`` callback over samples.
    """
    spec = load_spec(model)
    num_layers = spec.moe_layers if layers is None else int(layers)
    num_experts = spec.num_experts if experts is None else int(experts)
    k = min(spec.top_k if top_k is None else int(top_k), num_experts)
    require(samples >= 1, "samples", f"must be >= 1, got {samples}")
    require(num_layers >= 1, "layers", f"must be >= 1, got {num_layers}")
    require(capacity >= 32, "capacity", f"must be >= 32 tokens, got {capacity}")
    cluster = Cluster(dp, edp, ep, capacity, max_samples_per_cell)
    base = np.random.SeedSequence(seed)
    length_seed, routing_seed, drift_seed = base.spawn(3)
    lengths, group_of = synth_lengths(samples, capacity, np.random.default_rng(length_seed),
                                      group_size=group_size, truncated=truncated,
                                      median_response=median_response)
    demand = synth_routing(lengths, group_of, num_layers, num_experts, k, np.random.default_rng(routing_seed),
                           skew=skew, group_corr=group_corr, topic_corr=topic_corr, drift=drift,
                           drift_steps=drift_steps, drift_rng=np.random.default_rng(drift_seed),
                           progress=progress)
    window = Window(lengths, demand, k)
    meta = {"generator": {"seed": seed, "skew": skew, "group_size": group_size, "truncated": truncated,
                          "group_corr": group_corr, "topic_corr": topic_corr, "drift": drift,
                          "drift_steps": drift_steps}}
    return Instance(window, cluster, cost_from_spec(spec, num_layers), spec.name, meta)
