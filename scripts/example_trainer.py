"""Use rp-opt in a trainer: plan every optimizer step from the replayed routing.

Run: python scripts/example_trainer.py   (tests/test_planner.py runs it as written)
"""

import numpy as np

from rp_opt import Cluster, Planner, check
from rp_opt.export import physical_maps

L, E, K = 4, 32, 4                                   # MoE layers, experts per layer, top-k
cluster = Cluster(dp=4, edp=2, ep=4, capacity=4096)  # D slots, G EDP shards, P EP ranks, C tokens
planner = Planner(cluster, "ling-tiny-like", objective="sync", mode="auto", time_limit=1.0, seed=0)


def rollout(step: int, num_samples: int = 64) -> list[np.ndarray]:
    """Stand-in for the rollout engine: per sample, the top-k expert ids [T_i, L, k] its
    router chose (routing replay). Skewed expert popularity, long-tailed lengths."""
    rng = np.random.default_rng(step)
    lengths = np.minimum(rng.lognormal(6.0, 0.8, num_samples).astype(int) + 16, cluster.capacity)
    popularity = np.log(rng.dirichlet(np.full(E, 0.5), size=L))          # [L, E]
    routing = []
    for t in lengths:  # top-k without replacement by Gumbel keys, vectorised over tokens
        keys = popularity[None] + rng.gumbel(size=(t, L, E))
        routing.append(np.argsort(-keys, axis=2)[:, :, :K])
    return routing


# physical slot -> logical expert, per layer, in force on the trainer: at step 0 the
# identity (slot e holds expert e), the placement the Planner starts from
phy2log = np.tile(np.arange(E), (L, 1))
for step in range(2):
    routing = rollout(step)
    plan = planner.plan(routing=routing, num_experts=E)
    assert check(plan.instance, plan.plan).valid  # the independent checker agrees

    # 1. materialise the placement: copy the experts that change rank (the migration is
    #    relabelled to keep as many experts in place as possible), then swap the map
    previous, (phy2log, log2phy) = phy2log, physical_maps(plan.placement, phy2log)
    moved = plan.migration.num_transfers
    assert int((phy2log != previous).sum()) == moved  # only the experts it moves change slot
    # trainer: for round in plan.migration.rounds: send/recv the transfers of that round

    # 2. train: in row r, DP slot d runs the microbatch plan.rows[r][d] (sample indices);
    #    accumulate gradients over the rows, normalise the loss by the window's tokens
    tokens = np.array([[sum(len(routing[i]) for i in cell) for cell in row] for row in plan.rows])
    assert tokens.max() <= cluster.capacity

    # plan.engine: the solver mode auto ran; plan.decision: the solver's plan ("new"), or
    # one that moves nothing and scores no worse ("previous", "placement"); bound and gap
    # are those of the plan returned
    print(f"step {step}: {plan.solver} ({plan.engine}) {plan.status}, {plan.decision} plan, "
          f"R={plan.num_rows} (R*={plan.r_star}), score {plan.score[0]:.4g}, bound {plan.bound:.4g}, "
          f"gap {100 * plan.gap:.2f} %, {moved} experts moved in {plan.migration.num_rounds} rounds, "
          f"planned in {plan.timings['total']:.2f} s, warm start: {plan.warm_start}")
