"""Reference PyTorch integration: applying a plan changes nothing but speed.

A tiny float64 MoE transformer records the routing of a batch; the routing is replayed into
a window, planned, the placement materialised (expert weights copied into their new
physical slots, the logical-to-physical map swapped) and the plan's packed microbatches run
with gradient accumulation. Loss, every logical expert's gradients, every other gradient
and the routing must equal those of the unplanned run.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the optional extra torch is not installed (pip install torch)")
torch.set_num_threads(1)  # tiny tensors: threads only add contention on a shared CI machine

from rp_opt import Cluster, CostModel, Planner, Stage, check  # noqa: E402
from rp_opt.export import export_arrays  # noqa: E402
from rp_opt.reference.moe import TinyMoE, layout_cells, train_step  # noqa: E402
from rp_opt.replay import demand_from_samples  # noqa: E402

N, LAYERS, EXPERTS, TOP_K = 16, 2, 8, 2


def _batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 24, N)
    return [torch.as_tensor(rng.integers(0, 32, t), dtype=torch.long) for t in lengths]


def _grads(model):
    """Every gradient by name, expert weights in logical order."""
    out = {}
    for name, p in model.named_parameters():
        if not name.startswith("moe.") or name.endswith("router"):
            out[name] = p.grad.clone()
    for l, layer in enumerate(model.moe):
        for name, g in layer.logical_grads().items():
            out[f"moe.{l}.{name}"] = g.clone()
    return out


@pytest.fixture(scope="module")
def recorded():
    samples = _batch()
    model = TinyMoE(layers=LAYERS, num_experts=EXPERTS, top_k=TOP_K, seed=3)
    base = copy.deepcopy(model)
    # unplanned run: identity placement, one sample per microbatch in window order
    loss, routing = train_step(model, samples, [[i] for i in range(N)])
    return samples, base, loss, routing, _grads(model)


def _plan(routing, mode="heuristic"):
    cost = CostModel((Stage("attn", LAYERS, 1.0, 0.02),), gamma=0.5)
    planner = Planner(Cluster(dp=2, edp=1, ep=2, capacity=64), cost, mode=mode, time_limit=1.0, seed=0)
    step = planner.plan(routing=routing, num_experts=EXPERTS)
    report = check(step.instance, step.plan)
    assert report.valid, report.violations
    assert np.allclose(report.score, step.score)
    return step


def test_replayed_demand_matches_the_recorded_routing(recorded):
    """The window the planner sees counts exactly the routed tokens of the run."""
    samples, _, _, routing, _ = recorded
    rep = demand_from_samples(routing, EXPERTS)
    assert rep.lengths.tolist() == [s.numel() for s in samples]
    flat = np.concatenate(routing)  # [M, L, k]
    for l in range(LAYERS):
        assert rep.demand[:, l].sum(axis=0).tolist() == np.bincount(flat[:, l].ravel(), minlength=EXPERTS).tolist()


def test_planned_step_equals_unplanned_step(recorded):
    samples, base, loss0, routing0, grads0 = recorded
    step = _plan(routing0)
    model = copy.deepcopy(base)
    arrays = export_arrays(step.plan, previous_phy2log=np.tile(np.arange(EXPERTS), (LAYERS, 1)))
    model.materialise(arrays["log2phy"])
    # the slots really changed where the placement moved experts (the test is not vacuous)
    moved = {(t.layer, t.expert) for t in step.migration.transfers}
    changed = {(l, e) for l, e in zip(*np.nonzero(arrays["log2phy"] // (EXPERTS // 2)
                                                  != np.arange(EXPERTS) // (EXPERTS // 2)))}
    assert moved == changed
    assert len(step.layout.to_rows()) == step.num_rows and step.num_rows < N // 2

    loss1, routing1 = train_step(model, samples, layout_cells(step.rows))
    assert loss1 == pytest.approx(loss0, rel=1e-12, abs=1e-12)
    for i in range(N):
        assert np.array_equal(routing1[i], routing0[i]), f"sample {i} routed differently"
    grads1 = _grads(model)
    assert grads1.keys() == grads0.keys()
    for name in grads0:
        assert torch.allclose(grads1[name], grads0[name], rtol=1e-10, atol=1e-12), name
    # router gradients too (logical order is the router's own order)
    for l in range(LAYERS):
        assert model.moe[l].router.grad is not None


def test_replayed_routing_gives_the_same_step(recorded):
    """Forcing the recorded routing (R3 replay) reproduces the free-routing step."""
    samples, base, loss0, routing0, grads0 = recorded
    step = _plan(routing0, mode="baseline")
    model = copy.deepcopy(base)
    model.materialise(export_arrays(step.plan)["log2phy"])
    loss1, routing1 = train_step(model, samples, layout_cells(step.rows), replay=routing0)
    assert loss1 == pytest.approx(loss0, rel=1e-12)
    assert all(np.array_equal(a, b) for a, b in zip(routing1, routing0))
    grads1 = _grads(model)
    for name in grads0:
        assert torch.allclose(grads1[name], grads0[name], rtol=1e-10, atol=1e-12), name


def test_a_wrong_map_changes_the_gradients(recorded):
    """Control: copying weights without swapping the map breaks equality (the check has teeth)."""
    samples, base, loss0, _, _ = recorded
    model = copy.deepcopy(base)
    perm = np.tile(np.roll(np.arange(EXPERTS), 1), (LAYERS, 1))
    model.materialise(perm)
    for layer in model.moe:  # undo the map swap but keep the moved weights
        layer.log2phy.copy_(torch.arange(EXPERTS))
    loss1, _ = train_step(model, samples, [[i] for i in range(N)])
    assert abs(loss1 - loss0) > 1e-9


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_expert_parallel_simulation_with_gloo(recorded, tmp_path):
    """2 processes (gloo) = 2 EP ranks = 2 DP slots: the migration's transfers run as
    point-to-point rounds, tokens meet their experts across processes, and loss, every
    gradient (replicated ones after the DP all-reduce, expert ones on the owning rank) and
    the routing equal the single-process unplanned step."""
    import torch.multiprocessing as mp

    from rp_opt.reference.distributed import run_rank

    samples, base, loss0, routing0, grads0 = recorded
    step = _plan(routing0)
    assert step.migration.num_transfers > 0
    arrays = export_arrays(step.plan, previous_phy2log=np.tile(np.arange(EXPERTS), (LAYERS, 1)))
    payload = {
        "model": {"layers": LAYERS, "num_experts": EXPERTS, "top_k": TOP_K, "seed": 3},
        "samples": [s.numpy() for s in samples], "rows": step.rows,
        "transfers": [tuple(t) for t in step.migration.transfers], "rounds": [list(r) for r in step.migration.rounds],
        "log2phy": arrays["log2phy"],
    }
    mp.spawn(run_rank, args=(2, _free_port(), payload, str(tmp_path)), nprocs=2, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    seen = set()
    for res in results:
        assert res["loss"] == pytest.approx(loss0, rel=1e-12)
        for name, grad in res["replicated"].items():
            assert torch.allclose(grad, grads0[name], rtol=1e-10, atol=1e-12), name
        for key, (grad, weight) in res["experts"].items():
            _, l, n, e = key.split(".")
            l, e = int(l), int(e)
            assert torch.equal(weight, getattr(base.moe[l], n)[e].detach()), f"{key} was not materialised"
            assert torch.allclose(grad, grads0[f"moe.{l}.{n}"][e], rtol=1e-10, atol=1e-12), key
            seen.add((l, e))
        for i, r in res["routing"].items():
            assert np.array_equal(r, routing0[i])
    assert seen == {(l, e) for l in range(LAYERS) for e in range(EXPERTS)}
    assert sorted(i for res in results for i in res["routing"]) == list(range(N))


def test_gloo_simulation_with_a_rank_whose_experts_get_no_token(tmp_path):
    """E = 4 experts on P = 2 ranks (identity: rank 1 holds experts 2 and 3), top-1, router
    column 1 = -column 0 and columns 2, 3 zero: every token's best logit is |logit_0| >= 0,
    so every token picks expert 0 or 1 and rank 1's slots get no token in any row. Rank 1
    must still join the backward all-reduces of the token exchange (it used to skip its
    empty slots, so its backward held fewer collectives than rank 0's and gloo aborted on
    the mismatch), and experts 2 and 3 end with zero gradients, as in the single-process
    step."""
    import torch.multiprocessing as mp

    from rp_opt.reference.distributed import run_rank

    experts, layers = 4, 1
    model = TinyMoE(layers=layers, num_experts=experts, top_k=1, seed=5)
    with torch.no_grad():
        router = model.moe[0].router
        router[:, 1] = -router[:, 0]
        router[:, 2:] = 0.0
    state = copy.deepcopy(model.state_dict())
    rng = np.random.default_rng(1)
    samples = [torch.as_tensor(rng.integers(0, 32, t), dtype=torch.long) for t in (3, 5, 2, 4)]
    loss0, routing0 = train_step(model, samples, [[i] for i in range(4)])
    assert set(np.concatenate(routing0).ravel().tolist()) <= {0, 1}
    grads0 = _grads(model)
    assert torch.count_nonzero(grads0["moe.0.w_gate"][2:]) == 0
    payload = {"model": {"layers": layers, "num_experts": experts, "top_k": 1, "seed": 5}, "state": state,
               "samples": [s.numpy() for s in samples], "rows": [[[0], [1]], [[2], [3]]],
               "transfers": [], "rounds": [], "log2phy": np.tile(np.arange(experts), (layers, 1))}
    mp.spawn(run_rank, args=(2, _free_port(), payload, str(tmp_path)), nprocs=2, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    for res in results:
        assert res["loss"] == pytest.approx(loss0, rel=1e-12)
        for name, grad in res["replicated"].items():
            assert torch.allclose(grad, grads0[name], rtol=1e-10, atol=1e-12), name
    empty = {k: g for k, (g, _) in results[1]["experts"].items()}
    assert sorted(empty) == [f"moe.0.{n}.{e}" for n in ("w_down", "w_gate", "w_up") for e in (2, 3)]
    assert all(torch.count_nonzero(g) == 0 for g in empty.values())
    for key, (grad, _) in results[0]["experts"].items():
        _, l, n, e = key.split(".")
        assert torch.allclose(grad, grads0[f"moe.{l}.{n}"][int(e)], rtol=1e-10, atol=1e-12), key


@pytest.mark.parametrize("make", [lambda ps: torch.optim.Adam(ps, lr=1e-3),
                                  lambda ps: torch.optim.SGD(ps, lr=1e-5, momentum=0.9)], ids=["adam", "sgd-momentum"])
def test_migration_moves_the_optimizer_state_with_the_weights(recorded, make):
    """Two steps with a stateful optimizer. The unplanned model keeps the identity slots;
    the planned one swaps experts 0, 1 with 2, 3 (log2phy [2, 3, 0, 1] in every layer)
    between the steps. Passing the optimizer to ``materialise`` moves the Adam moments /
    momentum buffers with the weights, and after step 2 every logical expert's weights
    equal the unplanned ones. Without it (the old ``materialise``, weights only) expert 0
    is updated with expert 2's moments and the weights differ."""
    samples, base, _, _, _ = recorded

    def logical_weights(model):
        return {f"{l}.{n}": getattr(layer, n).detach()[layer.log2phy].clone()
                for l, layer in enumerate(model.moe) for n in ("w_gate", "w_up", "w_down")}

    cells = [[i] for i in range(N)]
    swap = np.tile([2, 3, 0, 1, 6, 7, 4, 5], (LAYERS, 1))
    runs = {}
    for mode in ("unplanned", "planned", "weights only"):
        model = copy.deepcopy(base)
        opt = make(model.parameters())
        train_step(model, samples, cells)
        opt.step()
        if mode == "planned":
            model.materialise(swap, opt)
        elif mode == "weights only":
            model.materialise(swap)
        train_step(model, samples, cells)
        opt.step()
        runs[mode] = logical_weights(model)
    for name, w in runs["unplanned"].items():
        assert torch.allclose(runs["planned"][name], w, rtol=1e-10, atol=1e-12), name
    assert any(not torch.allclose(runs["weights only"][n], w, rtol=1e-6) for n, w in runs["unplanned"].items())


def test_replay_keeps_the_routing_where_router_logits_nearly_tie():
    """Packing changes the order of the sums before the router, so a token's logits differ
    in the last bits between a packed and an unpacked run. Router columns 0 and 1 that
    differ by 1e-15 (columns 2, 3 zero) make top-1 ties that such bits can flip under free
    routing (docs/trainer.md: 13 of 180 samples on the development machine); forcing the
    recorded routing (R3 replay) gives every sample exactly its recorded experts and the
    same loss and gradients whatever the packing."""
    model = TinyMoE(layers=2, num_experts=4, top_k=1, seed=7)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in model.moe:
            layer.router[:, 1] = layer.router[:, 0] + 1e-15 * torch.randn(layer.router.shape[0], generator=g,
                                                                          dtype=torch.float64)
            layer.router[:, 2:] = 0.0
    base = copy.deepcopy(model)
    rng = np.random.default_rng(2)
    samples = [torch.as_tensor(rng.integers(0, 32, t), dtype=torch.long) for t in rng.integers(2, 30, 6)]
    loss0, routing0 = train_step(model, samples, [[i] for i in range(6)])
    grads0 = _grads(model)
    model = copy.deepcopy(base)
    model.materialise(np.tile([2, 3, 0, 1], (2, 1)))
    loss1, routing1 = train_step(model, samples, [[0, 1, 2], [3, 4, 5]], replay=routing0)
    assert all(np.array_equal(a, b) for a, b in zip(routing1, routing0))
    assert loss1 == pytest.approx(loss0, rel=1e-12)
    grads1 = _grads(model)
    for name in grads0:
        assert torch.allclose(grads1[name], grads0[name], rtol=1e-10, atol=1e-12), name


@pytest.mark.parametrize("seed", range(3))
def test_random_plans_over_three_adam_steps_train_as_unplanned(recorded, seed):
    """Three Adam steps, each under a random balanced placement (relabelled against the map
    in force, as a trainer exports it) and a random layout of the window into R rows of 3
    slots, with the recorded routing forced: loss and every logical weight equal those of
    the unplanned steps (one sample per microbatch, identity placement) to 1e-10. The
    tests above check one planner plan; any valid plan must preserve the training."""
    from rp_opt import Layout, Placement
    from rp_opt.export import relabel_to_previous
    from rp_opt.result import Plan

    samples, base, _, routing, _ = recorded
    rng = np.random.default_rng(seed)
    ranks, slots = 4, 3

    def logical_weights(model):
        return {f"{l}.{n}": getattr(layer, n).detach()[layer.log2phy].clone()
                for l, layer in enumerate(model.moe) for n in ("w_gate", "w_up", "w_down")}

    unplanned, planned = copy.deepcopy(base), copy.deepcopy(base)
    opt_u, opt_p = torch.optim.Adam(unplanned.parameters(), lr=1e-2), torch.optim.Adam(planned.parameters(), lr=1e-2)
    phy2log = np.tile(np.arange(EXPERTS), (LAYERS, 1))                     # identity in force at step 0
    for _ in range(3):
        loss_u, _ = train_step(unplanned, samples, [[i] for i in range(N)], replay=routing)
        opt_u.step()
        opt_u.zero_grad()
        placement = Placement(np.stack([rng.permutation(np.arange(EXPERTS) // (EXPERTS // ranks))
                                        for _ in range(LAYERS)]), ranks)
        rows = int(rng.integers(1, N // slots + 1))
        cell_of = rng.permutation(np.concatenate([rng.permutation(rows * slots),
                                                  rng.integers(0, rows * slots, N - rows * slots)]))
        plan, _ = relabel_to_previous(Plan(placement, Layout(cell_of, rows, slots), "sync", None), phy2log)
        maps = export_arrays(plan, phy2log)
        planned.materialise(maps["log2phy"], opt_p)
        phy2log = maps["phy2log"]
        loss_p, _ = train_step(planned, samples, layout_cells(plan.layout.to_rows()), replay=routing)
        opt_p.step()
        opt_p.zero_grad()
        assert loss_p == pytest.approx(loss_u, rel=1e-10)
    expected = logical_weights(unplanned)
    for name, w in logical_weights(planned).items():
        assert torch.allclose(w, expected[name], rtol=1e-10, atol=1e-12), name
