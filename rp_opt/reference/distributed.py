"""Expert-parallel simulation of a plan with torch.distributed (gloo, one process per rank).

World of P processes; process p is EP rank p and DP slot d = p of a single shard (G = 1,
D = P). Every process holds the replicated weights (embedding, attention, routers, head)
and only the expert slots p·E/P .. (p+1)·E/P - 1 of every layer.

1. Materialise: starting from the identity slots, the plan's transfers are executed round
   by round with point-to-point send/recv (each rank sends and receives at most one expert
   per round), staged, then written into the slots given by the new ``log2phy``.
2. Train: in row r, rank d runs the microbatch of cell (r, d). At each MoE layer the
   tokens of every slot and their gate weights are exchanged (an all-reduce of a
   zero-padded buffer, so autograd sums gradients across ranks), each rank applies its
   local experts to the tokens routed to them, and the partial outputs are combined by
   another all-reduce. Gradients of replicated weights are summed across ranks after the
   step (the DP all-reduce).
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.nn.functional import all_reduce
from torch.nn import functional as F

from .moe import TinyMoE, packed_causal_mask, packed_next_token_loss, predicted_tokens


def _exchange(local: torch.Tensor, rank: int, world: int, rows: int) -> torch.Tensor:
    """[world, rows, ...]: every rank's ``local`` ([M_p, ...], zero-padded to ``rows``)."""
    padded = F.pad(local, (0, 0) * (local.dim() - 1) + (0, rows - local.shape[0]))
    buf = torch.zeros((world,) + padded.shape, dtype=local.dtype)
    buf = buf.index_copy(0, torch.tensor([rank]), padded[None])
    return all_reduce(buf)


def ep_moe(layer, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, rank: int, world: int,
           slots_local: dict[str, torch.Tensor]) -> torch.Tensor:
    """Output of an MoE layer for the local tokens, computed across EP ranks."""
    sizes = torch.zeros(world, dtype=torch.long)
    sizes[rank] = x.shape[0]
    dist.all_reduce(sizes)
    rows = int(sizes.max())
    k = ids.shape[1]
    both = _exchange(torch.cat([x, weights], dim=1), rank, world, rows)     # [W, rows, h + k]
    all_ids = _exchange_ids(ids, rank, world, rows)                          # [W, rows, k], -1 = padding
    h = x.shape[1]
    xs, ws = both[..., :h].reshape(-1, h), both[..., h:].reshape(-1, k)
    flat_ids = all_ids.reshape(-1, k)
    per_rank = layer.num_experts // world
    slots = torch.where(flat_ids >= 0, layer.log2phy[flat_ids.clamp(min=0)], -1)
    partial = torch.zeros_like(xs)
    for s in range(rank * per_rank, (rank + 1) * per_rank):  # this rank's slots only
        # a slot without tokens still runs (on zero rows): every rank's backward then holds
        # the same all-reduces (a rank whose slots got no token would skip them and hang or
        # mismatch the others' collectives), and its experts' gradients are zeros, not None
        token, choice = torch.nonzero(slots == s, as_tuple=True)
        j = s - rank * per_rank
        xt = xs[token]
        y = (F.silu(xt @ slots_local["w_gate"][j]) * (xt @ slots_local["w_up"][j])) @ slots_local["w_down"][j]
        partial = partial.index_add(0, token, y * ws[token, choice, None])
    combined = all_reduce(partial.reshape(world, rows, h))
    return combined[rank, : x.shape[0]]


def _exchange_ids(ids: torch.Tensor, rank: int, world: int, rows: int) -> torch.Tensor:
    buf = torch.zeros((world, rows, ids.shape[1]), dtype=torch.long)
    buf[rank, : ids.shape[0]] = ids + 1
    dist.all_reduce(buf)
    return buf - 1


def forward_ep(model: TinyMoE, local: list[dict], samples: list[torch.Tensor], rank: int, world: int):
    """Loss sum and routing of one cell (``samples``) on this rank."""
    lengths = [int(s.numel()) for s in samples]
    tokens = torch.cat(samples)
    allowed = packed_causal_mask(lengths)
    x = model.embed[tokens]
    routed = []
    for l in range(model.num_layers):
        x = model.attend(l, x, allowed)
        layer = model.moe[l]
        ids, weights = layer.route(x)
        x = x + ep_moe(layer, x, ids, weights, rank, world, local[l])
        routed.append(ids)
    loss = packed_next_token_loss(x @ model.head, tokens, lengths)
    return loss, np.split(torch.stack(routed, dim=1).numpy(), np.cumsum(lengths)[:-1])


def materialise_ep(model: TinyMoE, rank: int, world: int, transfers, rounds, log2phy: np.ndarray) -> list[dict]:
    """Local expert slots of this rank after executing the transfers round by round."""
    per_rank = model.num_experts // world
    names = ("w_gate", "w_up", "w_down")
    # identity at start: logical expert e sits in slot e
    local = [{n: getattr(layer, n).detach()[rank * per_rank:(rank + 1) * per_rank].clone() for n in names}
             for layer in model.moe]
    staged = {}
    for round_ in rounds:
        ops = []
        for t in (transfers[i] for i in round_):
            layer, expert, src, dst = int(t[0]), int(t[1]), int(t[2]), int(t[3])
            if src == rank:
                j = expert - rank * per_rank
                for n in names:
                    ops.append(dist.P2POp(dist.isend, local[layer][n][j].contiguous(), dst))
            if dst == rank:
                bufs = {n: torch.empty_like(local[layer][n][0]) for n in names}
                staged[layer, expert] = bufs
                for n in names:
                    ops.append(dist.P2POp(dist.irecv, bufs[n], src))
        if ops:
            for req in dist.batch_isend_irecv(ops):
                req.wait()
        dist.barrier()
    new_local = [{n: local[l][n].clone() for n in names} for l in range(model.num_layers)]
    for (layer, expert), bufs in staged.items():
        j = int(log2phy[layer, expert]) - rank * per_rank
        for n in names:
            new_local[layer][n][j] = bufs[n]
    for l, layer in enumerate(model.moe):
        layer.log2phy.copy_(torch.as_tensor(log2phy[l]))
    return [{n: t.requires_grad_() for n, t in slots.items()} for slots in new_local]


def run_rank(rank: int, world: int, port: int, payload: dict, out_dir: str) -> None:
    """Entry point of one process (torch.multiprocessing.spawn)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = TinyMoE(**payload["model"])
        if payload.get("state") is not None:  # weights other than the seed's (e.g. after training)
            model.load_state_dict(payload["state"])
        samples = [torch.as_tensor(s, dtype=torch.long) for s in payload["samples"]]
        local = materialise_ep(model, rank, world, payload["transfers"], payload["rounds"], payload["log2phy"])
        total = predicted_tokens(samples)
        loss_value = torch.zeros(1, dtype=torch.float64)
        routing = {}
        for row in payload["rows"]:
            cell = row[rank]
            loss, ids = forward_ep(model, local, [samples[i] for i in cell], rank, world)
            (loss / total).backward()
            loss_value += loss.detach() / total
            routing.update(zip(cell, ids))
        dist.all_reduce(loss_value)
        replicated = {}
        for name, p in model.named_parameters():
            if name.startswith("moe.") and not name.endswith("router"):
                continue  # expert slots of the full model are unused here
            grad = p.grad if p.grad is not None else torch.zeros_like(p)
            dist.all_reduce(grad)
            replicated[name] = grad
        per_rank = model.num_experts // world
        experts = {}
        for l, layer in enumerate(model.moe):
            phy2log = np.argsort(payload["log2phy"][l])
            for j in range(per_rank):
                e = int(phy2log[rank * per_rank + j])
                for n, t in local[l].items():
                    experts[f"moe.{l}.{n}.{e}"] = (t.grad[j].clone(), t.detach()[j].clone())
        torch.save({"loss": float(loss_value), "replicated": replicated, "experts": experts,
                    "routing": {int(i): r for i, r in routing.items()}}, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()
