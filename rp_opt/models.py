"""MoE architecture specs (``models/*.toml``) and the FLOP-based default cost model.

Costs are in GFLOP of forward work (one multiply-add = 2 FLOP); only ratios matter to a
plan, and a calibration from measured timings may replace them (MODEL.md).

- alpha_s: projection work per token of one stage-s layer (plus, for linear attention, the
  per-token state update and read-out, 4 H d^2).
- beta_s: score work per unit of Q = T^2: QK^T and AV over a causal mask touch T^2/2 pairs,
  each 2 H (d_qk + d_v) FLOP, so beta = H (d_qk + d_v). Zero for linear attention.
- gamma: one routed token through one SwiGLU expert, 3 matrices of hidden x intermediate:
  6 h I.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass

from .errors import InputError, require
from .window import CostModel, Stage

GFLOP = 1e9
_KINDS = {
    "linear": ("heads", "head_dim"),
    "gqa": ("heads", "kv_heads", "head_dim"),
    "mla": ("heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
}


def models_dir() -> str:
    """The ``models/`` folder of the repository."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")


@dataclass(frozen=True)
class ModelSpec:
    """An MoE architecture as far as planning needs it."""

    name: str
    hidden: int
    num_experts: int
    top_k: int
    expert_intermediate: int
    moe_layers: int
    stages: tuple[dict, ...]
    dtype_bytes: int = 2
    note: str = ""

    @property
    def expert_bytes(self) -> int:
        """Bytes of one expert's weights (3 matrices hidden x intermediate)."""
        return 3 * self.hidden * self.expert_intermediate * self.dtype_bytes

    @property
    def attention_layers(self) -> int:
        return sum(int(s["layers"]) for s in self.stages)


def available_models() -> list[str]:
    return sorted(f[:-5] for f in os.listdir(models_dir()) if f.endswith(".toml"))


def load_spec(name_or_path: str) -> ModelSpec:
    """Read ``models/NAME.toml`` (or a path to a TOML file)."""
    path = name_or_path if name_or_path.endswith(".toml") else os.path.join(models_dir(), f"{name_or_path}.toml")
    if not os.path.exists(path):
        raise InputError("model", f"unknown model {name_or_path!r}; known: {', '.join(available_models())}")
    with open(path, "rb") as handle:
        try:
            data = tomllib.load(handle)
        except tomllib.TOMLDecodeError as exc:
            raise InputError("model", f"{path} is not valid TOML ({exc})") from None
    for key in ("name", "hidden", "num_experts", "top_k", "expert_intermediate", "moe_layers", "stages"):
        require(key in data, f"model.{key}", f"is missing from {path}")
    for k, stage in enumerate(data["stages"]):
        kind = stage.get("kind")
        require(kind in _KINDS, f"model.stages[{k}].kind", f"must be one of {sorted(_KINDS)}, got {kind!r}")
        for key in ("name", "layers") + _KINDS[kind]:
            require(key in stage, f"model.stages[{k}].{key}", "is missing")
    return ModelSpec(
        str(data["name"]), int(data["hidden"]), int(data["num_experts"]), int(data["top_k"]),
        int(data["expert_intermediate"]), int(data["moe_layers"]), tuple(data["stages"]),
        int(data.get("dtype_bytes", 2)), str(data.get("note", "")),
    )


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


def cost_from_spec(spec: ModelSpec | str, moe_layers: int | None = None) -> CostModel:
    """Default FLOP-based :class:`CostModel` of ``spec`` (module docstring).

    ``moe_layers`` rescales the attention stages when a window has a different number of
    MoE layers than the spec, keeping the ratio of attention layers to MoE layers.
    """
    if isinstance(spec, str):
        spec = load_spec(spec)
    scale = 1.0 if moe_layers is None else moe_layers / spec.moe_layers
    stages = []
    for stage in spec.stages:
        alpha, beta = stage_coefficients(stage, spec.hidden)
        layers = max(1, round(stage["layers"] * scale)) if stage["layers"] else 0
        stages.append(Stage(str(stage["name"]), layers, alpha / GFLOP, beta / GFLOP))
    gamma = 6 * spec.hidden * spec.expert_intermediate / GFLOP
    return CostModel(tuple(stages), gamma)
