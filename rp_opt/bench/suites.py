"""Benchmark suites: lists of instance specs with fixed seeds.

A spec is a recipe (model, N, cluster, synthetic-routing knobs, seed) rather than data, so a
task sent to another process or machine carries a few numbers and rebuilds the same window
there (:func:`rp_opt.synth.generate` is deterministic for its seed).

Suites
------
``tiny``
    Two N = 8 windows on a 2-slot cluster (seconds; for CI).
``small``
    N = 8..24, D = 4, L = 8, E = 16, P = 4, G = 1 and 2 (ling-tiny-like with layers and
    experts overridden); the response-length scale is chosen so that R* is 2..4. Sizes the
    exact solver is meant to prove optimal (it does up to about N = 12 in 15 s on 2 cores).
``medium``
    N = 32..96, D = 8, G = 1 and 2: the exact solver gives a bound, not a proof.
``production``
    ling-tiny-like and ling-flash-like at N = 1024..8192 with D = 64, G = 8, P = 8,
    C = 32768; deepseek-v3-like and qwen3-30b-a3b-like at N = 2048.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import InputError
from ..window import Instance

# response-length scales (median / C) tried in order when a spec asks for R* in a range
_LENGTH_SCALES = (0.3, 0.45, 0.2, 0.6, 0.15, 0.8, 0.1)
_CACHE: dict = {}


@dataclass(frozen=True)
class InstanceSpec:
    """Recipe of one benchmark window.

    Attributes
    ----------
    config
        Name of the configuration (the instance without its seed); ``name`` adds the seed.
    model
        Model spec name (``models/*.toml``).
    samples, dp, edp, ep, capacity
        N, D, G, P, C.
    layers, experts, top_k
        Overrides of the model's L, E, k (None keeps the spec's).
    seed
        Seed of :func:`rp_opt.synth.generate`.
    median_frac
        Median response length as a share of C (None: the generator's default, C/10).
    rows
        (lo, hi): pick the first length scale of ``_LENGTH_SCALES`` (``median_frac`` first
        when set) whose R* lies in [lo, hi]; None: use ``median_frac`` as is.
    skew, drift_steps
        Routing knobs of the generator.
    """

    config: str
    model: str
    samples: int
    dp: int
    edp: int
    ep: int
    capacity: int
    layers: int | None = None
    experts: int | None = None
    top_k: int | None = None
    seed: int = 0
    median_frac: float | None = None
    rows: tuple[int, int] | None = None
    skew: float = 1.0
    drift_steps: int = 0

    @property
    def name(self) -> str:
        return f"{self.config}/s{self.seed}"

    def with_(self, **changes) -> "InstanceSpec":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["name"] = self.name
        return out

    def _generate(self, median_frac):
        from ..synth import generate

        median = None if median_frac is None else median_frac * self.capacity
        return generate(self.model, samples=self.samples, dp=self.dp, edp=self.edp, ep=self.ep,
                        capacity=self.capacity, layers=self.layers, experts=self.experts, top_k=self.top_k,
                        seed=self.seed, skew=self.skew, drift_steps=self.drift_steps, median_response=median)

    def build(self) -> Instance:
        """The instance (cached per process: a pool worker builds each spec once)."""
        if self in _CACHE:
            return _CACHE[self]
        if self.rows is None:
            instance = self._generate(self.median_frac)
        else:
            from ..rows import certify_rows

            lo, hi = self.rows
            scales = ((self.median_frac,) if self.median_frac is not None else ()) + _LENGTH_SCALES
            instance = None
            for frac in scales:
                candidate = self._generate(frac)
                cert = certify_rows(candidate.window, candidate.cluster, 5.0)
                if cert.r_star is not None and lo <= cert.r_star <= hi:
                    instance = candidate
                    break
            if instance is None:
                raise InputError("suite", f"{self.name}: no length scale gives R* in [{lo}, {hi}]")
        if len(_CACHE) > 64:
            _CACHE.clear()
        _CACHE[self] = instance
        return instance


def _grid(prefix: str, seeds, **fixed) -> list[InstanceSpec]:
    return [InstanceSpec(config=prefix, seed=s, **fixed) for s in seeds]


def _tiny(seeds=(0, 1)) -> list[InstanceSpec]:
    return _grid("tiny-N8-G1", seeds, model="ling-tiny-like", samples=8, dp=2, edp=1, ep=2, capacity=4096,
                 layers=2, experts=4, top_k=2, rows=(2, 4))


def _small(seeds=(0, 1, 2)) -> list[InstanceSpec]:
    out = []
    for n in (8, 12, 16, 24):
        for g in (1, 2):
            out += _grid(f"small-N{n}-G{g}", seeds, model="ling-tiny-like", samples=n, dp=4, edp=g, ep=4,
                         capacity=4096, layers=8, experts=16, rows=(2, 4))
    return out


def _medium(seeds=(0, 1)) -> list[InstanceSpec]:
    out = []
    for n in (32, 64, 96):
        for g in (1, 2):
            out += _grid(f"medium-N{n}-G{g}", seeds, model="ling-tiny-like", samples=n, dp=8, edp=g, ep=4,
                         capacity=8192, layers=8, experts=16, median_frac=0.15)
    return out


def _production(seeds=(0,)) -> list[InstanceSpec]:
    cluster = dict(dp=64, edp=8, ep=8, capacity=32768)
    out = []
    for n in (1024, 4096):
        out += _grid(f"ling-tiny-N{n}", seeds, model="ling-tiny-like", samples=n, **cluster)
    for n in (1024, 8192):
        out += _grid(f"ling-flash-N{n}", seeds, model="ling-flash-like", samples=n, **cluster)
    out += _grid("deepseek-v3-N2048", seeds, model="deepseek-v3-like", samples=2048, **cluster)
    out += _grid("qwen3-30b-a3b-N2048", seeds, model="qwen3-30b-a3b-like", samples=2048, **cluster)
    return out


_SUITES = {"tiny": _tiny, "small": _small, "medium": _medium, "production": _production}


def suite_names() -> list[str]:
    return list(_SUITES)


def suite(name: str, seeds=None) -> list[InstanceSpec]:
    """The specs of suite ``name`` (``seeds`` replaces the suite's default seeds).

    Raises
    ------
    InputError
        On ``suite`` for an unknown name; on ``seeds`` for a seed given twice (the same
        instance twice: its runs would count twice).
    """
    if name not in _SUITES:
        raise InputError("suite", f"unknown suite {name!r}; known: {', '.join(_SUITES)}")
    if seeds is None:
        return _SUITES[name]()
    seeds = tuple(seeds)
    require_unique("seeds", seeds)
    return _SUITES[name](seeds)


def require_unique(field: str, values) -> None:
    """:class:`InputError` on ``field`` naming the first value that ``values`` holds twice
    (``--seeds: 3 given twice``).

    Parameters
    ----------
    field
        Name of the input (``--seeds``, ``--solvers``, ``seeds``).
    values
        The input's items, as read (seeds as integers, so ``3`` and ``3.0`` are the same).
    """
    seen = set()
    for value in values:
        if value in seen:
            raise InputError(field, f"{value!r} given twice")
        seen.add(value)


def add_window_arguments(parser) -> None:
    """``--window FILE.npz`` or the generated ling-flash-like window of the production
    scripts (``--samples``, ``--dp``, ``--edp``, ``--ep``; C = 32768, seed 0)."""
    parser.add_argument("--window", help=".npz instance (default: generate one)")
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--dp", type=int, default=64)
    parser.add_argument("--edp", type=int, default=8)
    parser.add_argument("--ep", type=int, default=8)


def window_from_arguments(args) -> Instance:
    """The instance :func:`add_window_arguments` describes."""
    from ..io import load_instance
    from ..synth import generate

    if args.window:
        return load_instance(args.window)
    return generate(model="ling-flash-like", samples=args.samples, dp=args.dp, edp=args.edp, ep=args.ep,
                    capacity=32768, seed=0)
