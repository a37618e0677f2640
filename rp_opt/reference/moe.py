"""A tiny MoE transformer that applies rp-opt plans the way a trainer must (MODEL.md,
"Materialisation").

- Experts of every MoE layer are stored in E physical slots (rank p owns slots
  p·E/P .. (p+1)·E/P - 1); a buffer ``log2phy`` [E] maps logical experts to slots. The
  router works on logical ids only, so a new placement changes the slots and the map and
  nothing else.
- The router records its top-k logical ids per token, and can replay given ids.
- A microbatch is a packed cell: its samples are concatenated and attend only within their
  own sample (block-diagonal causal mask), so packing changes no sample's computation.
- :func:`train_step` accumulates gradients over the cells of a layout with the loss
  normalised by the window's total number of predicted tokens, so the step's loss and
  gradients do not depend on the layout.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class MoELayer(nn.Module):
    """Top-k routed SwiGLU experts stored in physical slots."""

    def __init__(self, hidden: int, ffn: int, num_experts: int, top_k: int, generator: torch.Generator):
        super().__init__()
        self.num_experts, self.top_k = num_experts, top_k
        scale = hidden ** -0.5
        self.router = nn.Parameter(torch.randn(hidden, num_experts, generator=generator, dtype=torch.float64) * scale)
        # physical slot s holds the weights of logical expert phy2log[s]; identity at start
        self.w_gate = nn.Parameter(torch.randn(num_experts, hidden, ffn, generator=generator,
                                               dtype=torch.float64) * scale)
        self.w_up = nn.Parameter(torch.randn(num_experts, hidden, ffn, generator=generator,
                                             dtype=torch.float64) * scale)
        self.w_down = nn.Parameter(torch.randn(num_experts, ffn, hidden, generator=generator,
                                               dtype=torch.float64) * ffn ** -0.5)
        self.register_buffer("log2phy", torch.arange(num_experts))

    def forward(self, x: torch.Tensor, replay: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(output [M, h], logical ids [M, k]); ``replay`` [M, k] forces the ids."""
        ids, weights = self.route(x, replay)
        slots = self.log2phy[ids]  # logical -> physical: the only place the placement enters
        out = torch.zeros_like(x)
        for s in torch.unique(slots).tolist():
            token, choice = torch.nonzero(slots == s, as_tuple=True)
            h = x[token]
            y = (F.silu(h @ self.w_gate[s]) * (h @ self.w_up[s])) @ self.w_down[s]
            out = out.index_add(0, token, y * weights[token, choice, None])
        return out, ids

    def route(self, x: torch.Tensor, replay: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logical ids [M, k], gate weights [M, k]): top-k of the router, or ``replay``."""
        logits = x @ self.router
        ids = torch.topk(logits, self.top_k, dim=1).indices if replay is None else replay
        return ids, torch.softmax(logits.gather(1, ids), dim=1)

    @torch.no_grad()
    def materialise(self, log2phy: np.ndarray, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Move every logical expert's weights to its new slot and swap the map.

        ``optimizer``: its per-parameter state of the expert weights (tensors shaped like
        the weights: Adam's moments, SGD's momentum buffer) moves with the weights; without
        it, a stateful optimizer's next step applies one expert's moments to another.
        """
        new = torch.as_tensor(np.asarray(log2phy), dtype=torch.long)
        source = torch.empty_like(new)
        source[new] = self.log2phy  # new slot of e <- old slot of e
        for w in (self.w_gate, self.w_up, self.w_down):
            w.copy_(w[source].clone())
            state = optimizer.state.get(w, {}) if optimizer is not None else {}
            for value in state.values():
                if torch.is_tensor(value) and value.shape == w.shape:
                    value.copy_(value[source].clone())
        self.log2phy.copy_(new)

    def logical_grads(self) -> dict[str, torch.Tensor]:
        """Gradients of the expert weights in logical order."""
        return {name: getattr(self, name).grad[self.log2phy] for name in ("w_gate", "w_up", "w_down")}


class TinyMoE(nn.Module):
    """Embedding, ``layers`` x (causal attention + MoE), output head; float64."""

    def __init__(self, vocab: int = 32, hidden: int = 16, ffn: int = 24, layers: int = 2, num_experts: int = 8,
                 top_k: int = 2, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.vocab, self.num_layers, self.num_experts, self.top_k = vocab, layers, num_experts, top_k
        self.embed = nn.Parameter(torch.randn(vocab, hidden, generator=g, dtype=torch.float64))
        self.qkv = nn.ParameterList([nn.Parameter(torch.randn(hidden, 3 * hidden, generator=g, dtype=torch.float64)
                                                  * hidden ** -0.5) for _ in range(layers)])
        self.moe = nn.ModuleList([MoELayer(hidden, ffn, num_experts, top_k, g) for _ in range(layers)])
        self.head = nn.Parameter(torch.randn(hidden, vocab, generator=g, dtype=torch.float64) * hidden ** -0.5)

    def attend(self, layer: int, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """x plus single-head attention of ``layer`` under the mask ``allowed`` [M, M]."""
        q, k, v = (x @ self.qkv[layer]).chunk(3, dim=1)
        scores = (q @ k.T) / q.shape[1] ** 0.5
        return x + torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=1) @ v

    def forward(self, samples: list[torch.Tensor], replay: list[np.ndarray] | None = None):
        """Run one packed microbatch.

        Parameters
        ----------
        samples
            Token ids of the cell's samples ([T_i] each).
        replay
            Routing to replay per sample ([T_i, L, k]) or None to route freely.

        Returns
        -------
        (loss_sum, routing)
            Sum of next-token cross-entropy over the cell, and the routing per sample
            ([T_i, L, k] int64 arrays).
        """
        lengths = [int(s.numel()) for s in samples]
        tokens = torch.cat(samples)
        allowed = packed_causal_mask(lengths)
        forced = None
        if replay is not None:
            forced = torch.as_tensor(np.concatenate(replay, axis=0), dtype=torch.long)  # [M, L, k]
        x = self.embed[tokens]
        routed = []
        for l in range(self.num_layers):
            x = self.attend(l, x, allowed)
            y, ids = self.moe[l](x, None if forced is None else forced[:, l])
            x = x + y
            routed.append(ids)
        loss = packed_next_token_loss(x @ self.head, tokens, lengths)
        ids = torch.stack(routed, dim=1).numpy()  # [M, L, k]
        return loss, np.split(ids, np.cumsum(lengths)[:-1])

    def materialise(self, log2phy: np.ndarray, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Apply a placement: ``log2phy`` [L, E] from :func:`rp_opt.export.physical_maps`;
        pass the ``optimizer`` to move the experts' optimizer state too (MoELayer.materialise)."""
        for l, layer in enumerate(self.moe):
            layer.materialise(log2phy[l], optimizer)

    def log2phy(self) -> np.ndarray:
        return np.stack([layer.log2phy.numpy() for layer in self.moe])


def packed_causal_mask(lengths) -> torch.Tensor:
    """[M, M] block-diagonal causal mask of samples packed back to back: a token sees the
    earlier tokens of its own sample only."""
    owner = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    pos = torch.arange(owner.numel())
    return (owner[:, None] == owner[None, :]) & (pos[None, :] <= pos[:, None])


def packed_next_token_loss(logits: torch.Tensor, tokens: torch.Tensor, lengths) -> torch.Tensor:
    """Summed next-token cross entropy over samples packed back to back: targets stay
    inside each sample (the last token of a sample has none)."""
    last = torch.cumsum(torch.tensor(lengths), 0) - 1
    has_target = torch.ones(tokens.numel(), dtype=torch.bool)
    has_target[last] = False
    idx = torch.nonzero(has_target, as_tuple=True)[0]
    return F.cross_entropy(logits[idx], tokens[idx + 1], reduction="sum")


def predicted_tokens(samples: list[torch.Tensor]) -> int:
    """Tokens with a next-token target: sum_i (T_i - 1)."""
    return int(sum(s.numel() - 1 for s in samples))


def train_step(model: TinyMoE, samples: list[torch.Tensor], cells: list[list[int]],
               replay: list[np.ndarray] | None = None) -> tuple[float, list[np.ndarray]]:
    """Gradient accumulation over ``cells`` (lists of sample indices, in execution order).

    The loss of a cell is divided by the window's predicted tokens, so the accumulated loss
    and gradients equal those of the whole window in one pass, for any layout.

    Parameters
    ----------
    model
        The :class:`TinyMoE` to train; its gradients are zeroed first, then accumulated
        (no optimizer step is taken).
    samples
        Token ids of every sample of the window ([T_i] each); the loss is normalised by
        all of them (:func:`predicted_tokens`), so ``cells`` should hold every index once.
    cells
        Microbatches in execution order, each a list of indices into ``samples`` packed
        into one forward pass (e.g. :func:`layout_cells` of a plan's rows).
    replay
        Per sample (window order), the routing to force ([T_i, L, k] logical expert ids)
        instead of the router's top-k choice; the gate weights are still the router's
        softmax over the forced ids. None: free routing.

    Returns
    -------
    (loss, routing)
        The step's loss and the routing of every sample (window order; [T_i, L, k] int64
        arrays, None for a sample in no cell).
    """
    model.zero_grad(set_to_none=True)
    total = predicted_tokens(samples)
    loss_value = 0.0
    routing: list[np.ndarray | None] = [None] * len(samples)
    for cell in cells:
        loss, ids = model([samples[i] for i in cell], None if replay is None else [replay[i] for i in cell])
        (loss / total).backward()
        loss_value += float(loss.detach()) / total
        for i, r in zip(cell, ids):
            routing[i] = r
    return loss_value, routing


def layout_cells(rows: list[list[list[int]]]) -> list[list[int]]:
    """Cells of a plan's rows in execution order (row by row, slot by slot)."""
    return [cell for row in rows for cell in row]
