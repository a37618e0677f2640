"""MoE architecture specs (``models/*.toml``) and the FLOP-based default cost model.

Costs are in GFLOP of forward work (one multiply-add = 2 FLOP); only ratios matter to a
plan, and a calibration from measured timings may replace them (MODEL.md).

- alpha_s: projection work per token of one stage-s layer (plus, for linear attention, the
  per-token state update and read-out, 4 H d^2).
- beta_s: score work per unit of Q = T^2: QK^T and AV over a causal mask touch T^2/2 pairs,
  each 2 H (d_qk + d_v) FLOP, so beta = H (d_qk + d_v). Zero for linear attention.
- gamma: one routed token through one SwiGLU expert, 3 matrices of hidden x intermediate:
  6 h I.

A spec is checked whole when it is read (:func:`load_spec`) or built (:class:`ModelSpec`),
before any work: every key's type and range, one line ``model.<key>: ...`` naming the file.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from fractions import Fraction

from .errors import InputError, integer, require, shown
from .window import CostModel, Stage

GFLOP = 1e9
_KINDS = {
    "linear": ("heads", "head_dim"),
    "gqa": ("heads", "kv_heads", "head_dim"),
    "mla": ("heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
}
# sizes and counts of a spec are at most 2^31 - 1, as rp-opt gen's flags for E, k and L
# (larger counts overflowed inside numpy)
MAX_SIZE = 2**31 - 1
MAX_DTYPE_BYTES = 8  # bytes of one weight: fp64 at most
_REQUIRED = ("name", "hidden", "num_experts", "top_k", "expert_intermediate", "moe_layers", "stages")
_OPTIONAL = ("dtype_bytes", "note")


def models_dir() -> str:
    """The ``models/`` folder of the repository."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")


@dataclass(frozen=True)
class ModelSpec:
    """An MoE architecture as far as planning needs it.

    Every field is checked on construction (:class:`~rp_opt.errors.InputError` on
    ``model.<field>``, one line): the name a non-empty string, the sizes and counts
    integers in [1, :data:`MAX_SIZE`] (integral floats such as ``2048.0`` are taken),
    ``top_k`` at most ``num_experts``, ``dtype_bytes`` in [1, :data:`MAX_DTYPE_BYTES`].

    Parameters
    ----------
    name, note
        The spec's name and a free-text remark.
    hidden, expert_intermediate
        Model width h and the experts' intermediate size I.
    num_experts, top_k
        E routed experts, k of them per token.
    moe_layers
        MoE layers of the model (the default L of a window).
    stages
        Attention stages, dicts with ``name`` (unique, non-empty), ``kind`` (``linear``,
        ``gqa`` or ``mla``), ``layers`` (an integer >= 0; at least one stage has a layer)
        and the kind's sizes (integers >= 1). Stored as new dicts of checked values.
    dtype_bytes
        Bytes of one expert weight.
    """

    name: str
    hidden: int
    num_experts: int
    top_k: int
    expert_intermediate: int
    moe_layers: int
    stages: tuple[dict, ...]
    dtype_bytes: int = 2
    note: str = ""

    def __post_init__(self):
        require(isinstance(self.name, str) and self.name.strip() != "", "model.name",
                f"must be a non-empty string, got {self.name!r}")
        require(isinstance(self.note, str), "model.note", f"must be a string, got {self.note!r}")
        for key in ("hidden", "num_experts", "expert_intermediate", "moe_layers"):
            object.__setattr__(self, key, integer(f"model.{key}", getattr(self, key), 1, MAX_SIZE))
        object.__setattr__(self, "top_k", integer("model.top_k", self.top_k, 1, self.num_experts,
                                                  hint="at most num_experts"))
        object.__setattr__(self, "dtype_bytes", integer("model.dtype_bytes", self.dtype_bytes, 1, MAX_DTYPE_BYTES))
        object.__setattr__(self, "stages", _checked_stages(self.stages))

    @property
    def expert_bytes(self) -> int:
        """Bytes of one expert's weights (3 matrices hidden x intermediate)."""
        return 3 * self.hidden * self.expert_intermediate * self.dtype_bytes

    @property
    def attention_layers(self) -> int:
        return sum(int(s["layers"]) for s in self.stages)


def available_models() -> list[str]:
    return sorted(f[:-5] for f in os.listdir(models_dir()) if f.endswith(".toml"))


def _checked_stages(stages) -> tuple[dict, ...]:
    """``stages`` of a :class:`ModelSpec` as a tuple of new dicts of checked values (see
    there); :class:`InputError` on ``model.stages...`` naming the first fault."""
    require(isinstance(stages, (list, tuple)) and len(stages) >= 1 and all(isinstance(s, dict) for s in stages),
            "model.stages", f"must be a non-empty list of [[stages]] tables, got {shown(stages)}")
    out, names = [], set()
    for k, stage in enumerate(stages):
        field = f"model.stages[{k}]"
        kind = stage.get("kind")
        require(isinstance(kind, str) and kind in _KINDS, f"{field}.kind",
                f"must be one of {sorted(_KINDS)}, got {kind!r}")
        keys = ("name", "kind", "layers") + _KINDS[kind]
        for key in keys:
            require(key in stage, f"{field}.{key}", "is missing")
        # a key of another kind (kv_heads left in a linear stage) or a typo was ignored
        unknown = [key for key in stage if key not in keys]
        require(not unknown, f"{field}.{unknown[0] if unknown else ''}",
                f"is not a key of a {kind} stage (it has {', '.join(keys)})")
        name = stage["name"]
        require(isinstance(name, str) and name.strip() != "", f"{field}.name",
                f"must be a non-empty string, got {name!r}")
        require(name not in names, f"{field}.name", f"{name!r} names an earlier stage too")
        names.add(name)
        checked = {"name": name, "kind": kind, "layers": integer(f"{field}.layers", stage["layers"], 0, MAX_SIZE)}
        for key in _KINDS[kind]:
            checked[key] = integer(f"{field}.{key}", stage[key], 1, MAX_SIZE)
        out.append(checked)
    require(sum(s["layers"] for s in out) >= 1, "model.stages", "have 0 layers in all: a model needs attention")
    return tuple(out)


def load_spec(name_or_path: str) -> ModelSpec:
    """Read ``models/NAME.toml`` (or a path to a TOML file) and check it whole.

    Raises
    ------
    InputError
        ``model`` for an unknown name or a file that is not TOML; ``model.<key>`` (for
        example ``model.stages[0].heads``) for a key that is missing, unknown, of the wrong
        type or out of range (:class:`ModelSpec`), one line ending with ``(in PATH)``.
    """
    require(isinstance(name_or_path, (str, os.PathLike)), "model",
            f"must be a model name or a path to a .toml file, got {type(name_or_path).__name__}")
    name_or_path = os.fspath(name_or_path)
    path = name_or_path if name_or_path.endswith(".toml") else os.path.join(models_dir(), f"{name_or_path}.toml")
    if not os.path.isfile(path):
        raise InputError("model", f"unknown model {name_or_path!r}; known: {', '.join(available_models())}")
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError("model", f"{path} is not valid TOML ({exc})") from None
    except OSError as exc:
        raise InputError("model", f"{path} cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        for key in _REQUIRED:
            require(key in data, f"model.{key}", "is missing")
        unknown = [key for key in data if key not in _REQUIRED + _OPTIONAL]
        require(not unknown, f"model.{unknown[0] if unknown else ''}",
                f"is not a key of a model spec (it has {', '.join(_REQUIRED + _OPTIONAL)})")
        return ModelSpec(data["name"], data["hidden"], data["num_experts"], data["top_k"],
                         data["expert_intermediate"], data["moe_layers"], data["stages"],
                         data.get("dtype_bytes", 2), data.get("note", ""))
    except InputError as exc:
        raise InputError(exc.field, f"{exc.message} (in {path})") from None


def stage_coefficients(stage: dict, hidden: int) -> tuple[float, float]:
    """(alpha, beta) in FLOP of one layer of ``stage``."""
    kind, h, heads = stage["kind"], hidden, stage["heads"]
    if kind == "linear":
        d = stage["head_dim"]
        # q, k, v, o projections + recurrent state update and read-out per token
        return 2 * h * 3 * heads * d + 2 * heads * d * h + 4 * heads * d * d, 0.0
    if kind == "gqa":
        d, kv = stage["head_dim"], stage["kv_heads"]
        alpha = 2 * h * d * (heads + 2 * kv) + 2 * heads * d * h
        return alpha, heads * (d + d)
    qk = stage["qk_nope_head_dim"] + stage["qk_rope_head_dim"]
    v = stage["v_head_dim"]
    q_lora, kv_lora, rope = stage["q_lora_rank"], stage["kv_lora_rank"], stage["qk_rope_head_dim"]
    alpha = 2 * (h * q_lora + q_lora * heads * qk + h * (kv_lora + rope)
                 + kv_lora * heads * (stage["qk_nope_head_dim"] + v) + heads * v * h)
    return alpha, heads * (qk + v)


def scaled_layers(layers, spec_moe_layers: int, moe_layers: int) -> list[int]:
    """Attention layers of each stage for a window of ``moe_layers`` MoE layers, from a
    spec with ``layers`` per stage for ``spec_moe_layers`` MoE layers.

    The total is the spec's attention layers scaled by ``moe_layers / spec_moe_layers``,
    rounded half up (``moe_layers`` itself when the spec has as many attention layers as
    MoE layers), and is split over the stages in proportion to their layers by largest
    remainder (ties to the earlier stage), so the stages add up to that total. Rounding
    each stage on its own did not: ling-tiny-like (15 linear + 5 MLA for 20 MoE layers)
    at 2 MoE layers got round(1.5) + max(1, round(0.5)) = 3 attention layers.

    Every stage that has layers in the spec keeps at least one: a stage rounded away
    would take its kind of cost with it (MLA's per-T^2 term, which makes long samples
    expensive). So when there are fewer layers to share than such stages (ling-tiny-like
    at 1 MoE layer), the total is the number of stages instead, one layer each, above the
    spec's ratio. With three stages or more, largest remainder can give a stage fewer
    layers for more MoE layers (the Alabama paradox: stages [7, 5, 7] of a 51-layer spec
    give [3, 3, 3] at 25 MoE layers and [4, 2, 4] at 26); the shipped specs have at most two
    stages, where it cannot.

    Examples
    --------
    >>> scaled_layers([15, 5], 20, 2), scaled_layers([15, 5], 20, 6), scaled_layers([15, 5], 20, 1)
    ([1, 1], [5, 1], [1, 1])
    """
    if sum(layers) == 0:
        return [0] * len(layers)
    quota_total = Fraction(sum(layers) * moe_layers, spec_moe_layers)
    present = sum(1 for n in layers if n > 0)
    total = max(math.floor(quota_total + Fraction(1, 2)), present)
    quotas = [Fraction(n * total, sum(layers)) for n in layers]
    counts = [max(1, math.floor(q)) if n > 0 else 0 for n, q in zip(layers, quotas)]
    # raised to 1 above the spec's share: give back from the stages furthest above theirs
    while sum(counts) > total:
        s = max((s for s in range(len(counts)) if counts[s] > 1), key=lambda s: (counts[s] - quotas[s], -s))
        counts[s] -= 1
    # the rest by largest remainder
    while sum(counts) < total:
        s = max((s for s in range(len(counts)) if layers[s] > 0), key=lambda s: (quotas[s] - counts[s], -s))
        counts[s] += 1
    return counts


def cost_from_spec(spec: ModelSpec | str, moe_layers: int | None = None) -> CostModel:
    """Default FLOP-based :class:`CostModel` of ``spec`` (module docstring).

    ``moe_layers`` rescales the attention stages when a window has a different number of
    MoE layers than the spec, keeping the ratio of attention layers to MoE layers as
    :func:`scaled_layers` describes (the stages add up to the scaled total; each stage
    with layers keeps at least one).
    """
    if isinstance(spec, str):
        spec = load_spec(spec)
    require(isinstance(spec, ModelSpec), "model", f"must be a ModelSpec or a model name, got {type(spec).__name__}")
    moe_layers = integer("moe_layers", moe_layers, 1, none=True)
    counts = [s["layers"] for s in spec.stages]
    if moe_layers is not None and moe_layers != spec.moe_layers:
        counts = scaled_layers(counts, spec.moe_layers, moe_layers)
    stages = []
    for stage, layers in zip(spec.stages, counts):
        alpha, beta = stage_coefficients(stage, spec.hidden)
        stages.append(Stage(str(stage["name"]), layers, alpha / GFLOP, beta / GFLOP))
    gamma = 6 * spec.hidden * spec.expert_intermediate / GFLOP
    return CostModel(tuple(stages), gamma)
