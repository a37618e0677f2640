"""Benchmark of the exact packing planner (and the joint model on tiny windows).

Usage::

    python scripts/bench_exact.py --runs 24:2:sync:cpsat:1 32:1:sync:cpsat:0 --time-limit 60
    python scripts/bench_exact.py --runs --joint 30 --time-limit 30
    python scripts/bench_exact.py --runs --highs-start-repro /tmp/repro
    python scripts/bench_exact.py --runs 24:1:sync:cpsat:1 --subsolvers cpsat   # CP-SAT's own portfolio

A run is N:G:objective:backend:symmetry. Windows come from rp_opt.synth.generate
(ling-tiny-like, D=4, P=4, L=8, E=16, capacity 16384) with the LPT placement (identity
when LPT is absent) and R = R*. Prints one table row per run.

``--joint K``: K tiny windows (N=8, D=2, G in {1, 2}; P, L, E from ``--joint-ranks``,
``--joint-layers``, ``--joint-experts``, default 2, 2, 4) whose capacity is cut
to force R* >= 2 and whose gamma is scaled so the expert cost equals ``--expert-ratio``
times the attention cost (aggregate bounds); joint model vs LPT placement then exact
packing, both proven optimal.

``--highs-start-repro DIR``: writes the 8-sample HiGHS model (level 1 of ``shard``) as
MPS with the feasible MIP start, and solves it with highspy alone, presolve on and off.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time

import numpy as np

from rp_opt.check import check
from rp_opt.bounds import cost_bounds
from rp_opt.packing.exact import default_num_rows, default_placement, solve_packing
from rp_opt.packing.exact.cpsat_model import PROOF, TOGETHER, TOGETHER_MODES
from rp_opt.solvers import get_solver
from rp_opt.synth import generate
from rp_opt.window import Cluster


def window(n, g, seed, layers=8, experts=16, capacity=16384):
    return generate(model="ling-tiny-like", samples=n, dp=4, edp=g, ep=4, capacity=capacity, layers=layers,
                    experts=experts, seed=seed)


def run_packing(spec: str, time_limit: float, seed: int, workers: int | None, subsolvers, row_search: bool = True,
                together: str = TOGETHER, pooled_bound: bool = True, polish: bool = True, cubes: bool = False):
    n, g, objective, backend, sym = spec.split(":")
    inst = window(int(n), int(g), seed)
    rows = default_num_rows(inst)
    place = default_placement(inst)
    t0 = time.perf_counter()
    res = solve_packing(inst, place, rows, objective=objective, backend=backend, symmetry=bool(int(sym)),
                        time_limit=time_limit, seed=seed, workers=workers, subsolvers=subsolvers,
                        row_search=row_search, together=together, pooled_bound=pooled_bound,
                        polish=polish, cubes=cubes)
    secs = time.perf_counter() - t0
    rep = check(inst, res.plan, num_rows=rows)
    gap = res.gap
    print(f"| {n:>3} | {g} | {rows} | {objective:5} | {backend:5} | {'on' if int(sym) else 'off':3} | "
          f"{res.status:8} | {secs:6.1f} | {res.score[0]:.6g} | {res.bound:.6g} | {100 * gap:.4f} | {rep.valid} |",
          flush=True)


def tiny_window(seed: int, shards: int, expert_ratio: float, experts: int = 4, ranks: int = 2, layers: int = 2):
    """N=8, D=2, P=``ranks``, L=``layers``, E=``experts``; capacity cut so that the lengths need more than D bins
    (R* >= 2); gamma scaled so expert/attention aggregate bounds = ``expert_ratio``."""
    inst = generate(model="ling-tiny-like", samples=8, dp=2, edp=shards, ep=ranks, capacity=8192, layers=layers,
                    experts=experts, seed=seed)
    T = inst.window.lengths
    cap = int(max(T.max(), math.ceil(T.sum() / 2.6)))
    inst = dataclasses.replace(inst, cluster=Cluster(2, shards, ranks, cap))
    b = cost_bounds(inst, 1)
    gamma = inst.cost.gamma * expert_ratio * b.attention_total / max(b.expert_total, 1e-12)
    return dataclasses.replace(inst, cost=dataclasses.replace(inst.cost, gamma=gamma))


def run_joint(count: int, time_limit: float, expert_ratio: float, objective: str, experts: int, ranks: int,
              layers: int):
    rows_out = []
    for shards in (1, 2):
        wins = total = 0
        gains = []
        for seed in range(count):
            inst = tiny_window(seed, shards, expert_ratio, experts, ranks, layers)
            rows = default_num_rows(inst)
            if rows is None or rows < 2:
                print(f"G={shards} seed {seed}: R*={rows}; skipped")
                continue
            hier = get_solver("exact")(inst, objective=objective, time_limit=time_limit, num_rows=rows)
            joint = get_solver("joint")(inst, objective=objective, time_limit=time_limit, num_rows=rows)
            assert check(inst, joint.plan, num_rows=rows).valid and check(inst, hier.plan, num_rows=rows).valid
            if joint.status != "optimal" or hier.status != "optimal":
                print(f"G={shards} seed {seed}: not proven ({joint.status}, {hier.status}); skipped")
                continue
            total += 1
            gain = (hier.score[0] - joint.score[0]) / hier.score[0]
            if gain > 1e-6:
                wins += 1
                gains.append(gain)
            print(f"G={shards} seed {seed}: R={rows} hier {hier.score[0]:.6g} joint {joint.score[0]:.6g} "
                  f"gain {100 * gain:.3f} % ({joint.seconds:.1f} s)", flush=True)
        mean = 100 * float(np.mean(gains)) if gains else 0.0
        most = 100 * float(np.max(gains)) if gains else 0.0
        rows_out.append((shards, wins, total, mean, most))
    for shards, wins, total, mean, most in rows_out:
        print(f"E={experts} P={ranks} L={layers} ratio={expert_ratio} G={shards}: joint beats LPT-then-exact "
              f"on {wins}/{total} windows ({objective}); "
              f"mean gain when it does {mean:.3f} %, max {most:.3f} %")


def highs_start_repro(out_dir: str):
    """The HiGHS 1.16 MIP-start bug, reproduced with highspy alone (see pyomo_model.py)."""
    import highspy
    from pyomo.contrib.appsi.solvers import Highs

    from rp_opt.cost import rank_load
    from rp_opt.objectives import get_objective
    from rp_opt.packing.exact.common import canonical_layout, greedy_layout, packing_data, symmetry_mode
    from rp_opt.packing.exact.pyomo_model import PyomoPacking
    from rp_opt.solution import Placement
    from rp_opt.window import CostModel, Instance, Stage, Window

    rng = np.random.default_rng(3)  # tests/test_exact.py make_window(8, D=2, G=2, seed=3)
    n, L, E = 8, 2, 4
    T = rng.integers(5, 40, n)
    dem = np.zeros((n, L, E), dtype=np.int64)
    for l in range(L):
        probs = rng.dirichlet(np.full(E, 0.5), n)
        dem[:, l] = [rng.multinomial(2 * T[i], probs[i]) for i in range(n)]
    inst = Instance(Window(T, dem, 2), Cluster(2, 2, 2, 100),
                    CostModel((Stage("linear", 2, 1.0, 0.0), Stage("softmax", 1, 0.5, 0.02)), 0.3))
    place, obj = Placement.identity(2, 4, 2), get_objective("shard")
    data = packing_data(inst, place, 2)
    start = canonical_layout(greedy_layout(data), 2, symmetry_mode(obj))
    b = PyomoPacking(data, obj, symmetry_mode(obj), eq4=rank_load(inst.window, place).max(axis=1))
    b._start(start, Highs())
    opt = Highs()
    opt.config.load_solution = False
    opt.set_instance(b.m)
    col = np.zeros(len(opt._pyomo_var_to_solver_var_map))
    for vid, j in opt._pyomo_var_to_solver_var_map.items():
        col[j] = float(opt._vars[vid][0].value)
    os.makedirs(out_dir, exist_ok=True)
    h = highspy.Highs()
    h.passModel(opt._solver_model.getLp())
    h.writeModel(os.path.join(out_dir, "model.mps"))
    with open(os.path.join(out_dir, "start.json"), "w") as f:
        json.dump(col.tolist(), f)
    for label, opts, use in (("no start", {}, False), ("start, presolve on", {}, True),
                             ("start, presolve off", {"presolve": "off"}, True)):
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        for k, v in opts.items():
            h.setOptionValue(k, v)
        h.readModel(os.path.join(out_dir, "model.mps"))
        if use:
            sol = highspy.HighsSolution()
            sol.col_value = col.tolist()
            sol.value_valid = True
            h.setSolution(sol)
        h.run()
        x = np.array(h.getSolution().col_value)
        true = float(np.dot(h.getLp().col_cost_, x))
        print(f"{label:22}: status {h.modelStatusToString(h.getModelStatus())}, reported objective "
              f"{h.getInfo().objective_function_value:.6f}, c.x of returned solution {true:.6f}, "
              f"start c.x {float(np.dot(h.getLp().col_cost_, col)):.6f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", nargs="*", default=["16:1:sync:cpsat:1", "16:2:shard:cpsat:1", "24:1:sync:cpsat:1",
                                                   "24:2:sync:cpsat:1", "24:2:shard:cpsat:1", "24:1:sync:highs:1",
                                                   "32:1:sync:cpsat:1", "64:2:sync:cpsat:1", "64:2:shard:cpsat:1"])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None,
                    help="CP-SAT threads (default: one per subsolver plus one for its LNS, 8 with --subsolvers cpsat)")
    ap.add_argument("--subsolvers", nargs="*", default=None,
                    help="CP-SAT full-problem workers by name, or 'cpsat' for CP-SAT's own portfolio "
                         "(default: per objective, rp_opt.packing.exact.cpsat_model.proof_subsolvers)")
    ap.add_argument("--no-pooled-bound", action="store_true",
                    help="without the pooled window's bound before the model (rp_opt.packing.exact.pooled)")
    ap.add_argument("--no-row-search", action="store_true",
                    help="without the row-pair search before the model (rp_opt.packing.exact.row_search)")
    ap.add_argument("--no-polish", action="store_true",
                    help="two-row windows: without CP-SAT's portfolio improving the start before the proof "
                         "(rp_opt.packing.exact.cpsat_model.CpsatPacking.polish)")
    ap.add_argument("--cubes", action="store_true",
                    help="two-row windows: the proof split into cubes searched by processes side by side "
                         "(rp_opt._cubes; the solve_packing switch cubes)")
    ap.add_argument("--together", choices=TOGETHER_MODES, default=TOGETHER,
                    help="which levels one CP-SAT solve minimises together "
                         "(rp_opt.packing.exact.cpsat_model.CpsatPacking.solve_groups)")
    ap.add_argument("--joint", type=int, default=0, help="number of tiny windows (per G) for the joint comparison")
    ap.add_argument("--expert-ratio", type=float, default=2.0)
    ap.add_argument("--objective", default="sync", help="objective of the joint comparison")
    ap.add_argument("--joint-experts", type=int, default=4)
    ap.add_argument("--joint-ranks", type=int, default=2)
    ap.add_argument("--joint-layers", type=int, default=2)
    ap.add_argument("--highs-start-repro", default=None, metavar="DIR")
    args = ap.parse_args()
    if args.runs:
        print("|   N | G | R | obj   | back  | sym | status   | secs   | score | bound | gap % | valid |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        # solve_packing reads "cpsat" (CP-SAT's own portfolio) and comma-separated names
        subsolvers = PROOF if args.subsolvers is None else ",".join(args.subsolvers)
        for spec in args.runs:
            run_packing(spec, args.time_limit, args.seed, args.workers, subsolvers, not args.no_row_search,
                        args.together, not args.no_pooled_bound, not args.no_polish, args.cubes)
    if args.joint:
        run_joint(args.joint, args.time_limit, args.expert_ratio, args.objective, args.joint_experts,
                  args.joint_ranks, args.joint_layers)
    if args.highs_start_repro:
        highs_start_repro(args.highs_start_repro)


if __name__ == "__main__":
    main()
