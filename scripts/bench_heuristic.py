"""Benchmarks of the production heuristic (issue 8). Prints three tables:

1. small windows (N <= 24, D=4, L=8, E=16, P=4): heuristic vs the exact solver's plan;
2. the production window (N=4096, L=48, E=256, D=64, G=8, P=8, ling-flash-like): identity+ffd,
   identity+kk, LPT+ffd and the heuristic, against the best provable lower bound;
3. move-kernel throughput and plan time from N=512 to N=16384 (``--scaling``).

Usage: python scripts/bench_heuristic.py [--small K] [--production [--reference S] [--routing-corr X]]
       [--kernel] [--scaling] [--time S] [--samples N] [--sizes N ...] [--kernel-seconds S] [--cache DIR]
(windows are cached under --cache, default /tmp)
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from rp_opt import synth
from rp_opt.check import check
from rp_opt.solvers import get_solver
from rp_opt.packing import anneal
from rp_opt.bounds import timed_window_bound
from rp_opt.packing.heuristic import certified_rows, default_placement
from rp_opt.packing.improve import search_layout
from rp_opt.packing.state import load_layouts, make_problem, State


def small(count: int, exact_time: float, objective: str = "sync"):
    """Small windows (N in 16, 20, 24; D=4, G=2, L=8, E=16, P=4): the heuristic with a 1-s
    limit, then the exact solver warm-started by it; gap of the heuristic to the exact
    solver's best plan (the optimum where it proved it) and to the exact solver's bound."""
    print("| seed | N | exact status | exact primary | exact bound | heuristic primary | gap to exact plan % | "
          "gap to exact bound % | heuristic s |")
    print("|---|---|---|---|---|---|---|---|---|")
    gaps, proven, seconds = [], [], []
    for seed in range(count):
        n = 16 + (seed % 3) * 4
        inst = synth.generate(model="ling-flash-like", samples=n, dp=4, edp=2, ep=4, capacity=4096, layers=8,
                              experts=16, seed=seed)
        heur = get_solver("heuristic")(inst, objective=objective, time_limit=1.0, seed=seed, workers=1)
        assert check(inst, heur.plan).valid
        exact = get_solver("exact")(inst, objective=objective, time_limit=exact_time, seed=0, warm_start=heur.plan,
                                    placement=heur.plan.placement)
        ref = min(exact.score[0], heur.score[0])
        gap = (heur.score[0] - ref) / ref
        gaps.append(gap)
        seconds.append(heur.seconds)
        if exact.status == "optimal":
            proven.append(gap)
        bound = exact.bound if exact.bound is not None else float("nan")
        print(f"| {seed} | {n} | {exact.status} | {exact.score[0]:.1f} | {bound:.1f} | {heur.score[0]:.1f} | "
              f"{100 * gap:.3f} | {100 * (heur.score[0] - bound) / bound:.3f} | {heur.seconds:.2f} |")
    print(f"all {len(gaps)} windows: median gap to the exact plan {100 * statistics.median(gaps):.3f} %, worst "
          f"{100 * max(gaps):.3f} %; heuristic seconds max {max(seconds):.2f}")
    if proven:
        print(f"proven optimal {len(proven)}: median gap {100 * statistics.median(proven):.3f} %, "
              f"worst {100 * max(proven):.3f} %")


def window(n: int, cache: str = "/tmp", corr: float | None = None):
    """The ling-flash-like production window with N=n (cached as .npz under ``cache``);
    ``corr`` sets the generator's routing correlation within a prompt group and a topic
    (``group_corr`` = ``topic_corr``; default 0.5 each)."""
    import os

    from rp_opt.io import load_instance, save_instance

    knobs = {} if corr is None else {"group_corr": corr, "topic_corr": corr}
    suffix = "" if corr is None else f"_corr{corr:g}"
    path = os.path.join(cache, f"rp_bench_ling_flash_{n}{suffix}.npz")
    if os.path.exists(path):
        return load_instance(path)
    inst = synth.generate("ling-flash-like", samples=n, dp=64, edp=8, ep=8, capacity=32768, seed=0, **knobs)
    os.makedirs(cache, exist_ok=True)  # a new --cache folder: made, not a lost window
    save_instance(path, inst)
    return inst


def production(seconds: float, samples: int = 4096, reference: float = 0.0, corr: float | None = None,
               cache: str = "/tmp", objective: str = "sync"):
    inst = window(samples, cache, corr)
    import rp_opt.placement  # noqa: F401  (imports outside the timed plan, as in a trainer)
    print(f"| solver | primary ({objective}) | vs identity+ffd | vs bound | seconds |")
    print("|---|---|---|---|---|")
    rows = {}
    for name in ("baseline", "kk", "lpt-ffd"):
        rows[name] = get_solver(name)(inst, objective=objective)
    heur = get_solver("heuristic")(inst, objective=objective, time_limit=seconds, seed=0)
    assert check(inst, heur.plan).valid
    rows["heuristic"] = heur
    if reference:
        ref = get_solver("heuristic")(inst, objective=objective, time_limit=reference, seed=1, report_baseline=False)
        assert check(inst, ref.plan).valid
        rows[f"heuristic {reference:g} s"] = ref
    certificate, certificate_seconds = timed_window_bound(inst, heur.stats["num_rows"], objective)
    bound = max(heur.stats["lower_bound"], certificate)
    base = rows["baseline"].score[0]
    names = {"baseline": "identity+ffd", "kk": "identity+kk", "lpt-ffd": "LPT+ffd"}
    for name, r in rows.items():
        print(f"| {names.get(name, name)} | {r.score[0]:.6g} | {100 * (r.score[0] - base) / base:+.2f} % | "
              f"{100 * (r.score[0] - bound) / bound:+.2f} % | {r.seconds:.2f} |")
    # the paper's decomposition: placement (identity -> LPT, both with ffd), packing (ffd -> heuristic)
    lpt = rows["lpt-ffd"].score[0]
    print(f"placement gain (identity+ffd -> LPT+ffd) {100 * (base - lpt) / base:.2f} %, "
          f"packing gain (LPT+ffd -> heuristic) {100 * (lpt - heur.score[0]) / base:.2f} % of identity+ffd")
    print(f"best provable lower bound {bound:.6g} (the plan's report {heur.stats['lower_bound']:.6g}, the window's "
          f"certificate {certificate:.6g} in {certificate_seconds:.2f} s; "
          f"analytic {heur.stats['analytic_bound']:.6g}); "
          f"for this placement {heur.stats['placement_bound']:.6g} "
          f"(the plan {100 * heur.stats['placement_gap']:.2f} % above it)")
    if reference:
        ref = rows[f"heuristic {reference:g} s"].score[0]
        print(f"5-s plan vs the {reference:g}-s plan: {100 * (heur.score[0] - ref) / ref:+.2f} %")
    print(f"plan seconds {heur.seconds:.2f} (limit {seconds}), report-only baseline "
          f"{heur.stats.get('report_seconds', 0):.2f} s")
    print("heuristic timings", {k: round(v, 2) for k, v in heur.stats["timings"].items()},
          "seeds", heur.stats["seeds"], "seed energies", {k: f"{v:.6g}" for k, v in heur.stats["seed_energy"].items()},
          "search workers", heur.stats.get("search_workers"), "search start", heur.stats.get("search_start"))
    print("search", heur.stats["search"])


def kernel(samples: int = 4096, seconds: float = 3.0, cache: str = "/tmp"):
    """Move throughput: the anneal kernel (moves proposed / s, 1 core) and the block-pair
    search from the ``blocks`` seed for ``seconds`` each: exact evaluation of 16-sample
    subsets (the previous default), screened evaluation of whole blocks (bound on every
    swap, exact on the best 32), and the screened search on two processes; CPU seconds are
    this process plus its children, so evaluations per CPU second show the parallel
    overhead apart from the machine's load."""
    import resource

    from rp_opt.cost import rank_demand_major, rank_major_view
    from rp_opt.packing.improve import BlockSearch
    from rp_opt.packing.seeds import seed_layouts

    def cpu():
        a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

    inst = window(samples, cache)
    placement, _ = default_placement(inst.window, 8)
    rows, witness, _ = certified_rows(inst, 5.0)
    major = rank_demand_major(inst.window, placement)
    demand = rank_major_view(major, inst.window.num_layers)
    problem = make_problem(inst, major, rows, "sync")
    state = State(problem, 32)
    load_layouts(problem, state, range(32), [witness.cell_of] * 32)
    t = time.perf_counter()
    anneal.metropolis_steps(problem, state, 0, 32, 1.0, 50, np.random.default_rng(0), 4)
    rate = 50 * 32 * 4 / (time.perf_counter() - t)
    print(f"anneal kernel {rate:.0f} proposed moves/s (1 core, 32 replicas x 4 candidates)")
    start = seed_layouts(inst, rows, demand, witness, ("ffd", "blocks"))["blocks"].cell_of
    search = BlockSearch(problem, start, cap=16)
    st = search.sweep(time.perf_counter() + seconds, np.random.default_rng(0))
    print(f"block search, exact, 16-sample subsets: {st.candidates / st.seconds:.0f} candidate moves/s, "
          f"{st.evaluations / st.seconds:.0f} block pairs/s, {st.improvements} improving moves, energy "
          f"{search.energy():.6g} after {st.seconds:.1f} s (1 core)")
    print("| search | workers | wall s | CPU s | block pairs | pairs / wall s | pairs / CPU s | improving | energy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for workers in (1, 2):
        c, t = cpu(), time.perf_counter()
        _, energy, st = search_layout(problem, start, deadline=time.perf_counter() + seconds, seed=0,
                                      cap=None, screen=32, workers=workers)
        wall, used = time.perf_counter() - t, cpu() - c
        evals = st.get("sweep_evaluations", 0) + st.get("exact_evaluations", 0)
        better = st.get("sweep_improvements", 0) + st.get("exact_improvements", 0)
        print(f"| screened (32 exact) | {workers} | {wall:.2f} | {used:.2f} | {evals} | {evals / wall:.0f} | "
              f"{evals / used:.0f} | {better} | {energy:.6g} |")


def scaling(seconds: float, sizes=(512, 1024, 2048, 4096, 8192, 16384), cache: str = "/tmp",
            objective: str = "sync", corr: float | None = None):
    """Plan time and quality from N = 512 to 16384 (``corr``: the windows' routing
    correlation, as for the production window; None: the generator's default)."""
    print("| N | R* | blocks | plan s (limit) | placement | R* | rank demand | seeds | regroup | "
          "bounds | anneal | search | "
          "score | primary vs LPT+ffd | vs bound | vs window bound (s) | search start | search block pairs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    import rp_opt.placement  # noqa: F401
    for n in sizes:
        inst = window(n, cache, corr)
        r = get_solver("heuristic")(inst, objective=objective, time_limit=seconds, seed=0, report_baseline=False)
        assert check(inst, r.plan).valid
        lpt = get_solver("lpt-ffd")(inst, objective=objective).score[0]
        s = r.stats["search"]
        tm = r.stats["timings"]
        evals = s.get("sweep_evaluations", 0) + s.get("exact_evaluations", 0)
        certificate, certificate_seconds = timed_window_bound(inst, r.plan.num_rows, objective)
        certificate = max(certificate, r.bound)
        phases = " | ".join(f"{tm.get(k, 0):.2f}" for k in ("placement", "rows", "rank_demand", "seeds", "regroup",
                                                             "bounds", "anneal", "search", "score"))
        print(f"| {n} | {r.plan.num_rows} | {r.plan.num_rows * inst.cluster.edp} | {r.seconds:.2f} ({seconds}) | "
              f"{phases} | {100 * (r.score[0] - lpt) / lpt:+.2f} % | {100 * (r.score[0] - r.bound) / r.bound:+.2f} % | "
              f"{100 * (r.score[0] - certificate) / certificate:+.2f} % ({certificate_seconds:.1f}) | "
              f"{r.stats.get('search_start', '-')} | {evals} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=0)
    parser.add_argument("--exact-time", type=float, default=30.0)
    parser.add_argument("--production", action="store_true")
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--time", type=float, default=5.0)
    parser.add_argument("--reference", type=float, default=0.0, help="also a long run of that many seconds")
    parser.add_argument("--kernel", action="store_true")
    parser.add_argument("--routing-corr", type=float, default=None,
                        help="production and scaling windows with this group and topic routing correlation "
                             "(default 0.5)")
    parser.add_argument("--samples", type=int, default=4096, help="N of the production and kernel windows")
    parser.add_argument("--kernel-seconds", type=float, default=3.0, help="seconds per kernel measurement")
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384],
                        help="N of the scaling windows")
    parser.add_argument("--cache", default="/tmp", help="directory of the cached windows")
    parser.add_argument("--objective", default="sync", choices=("sync", "shard"),
                        help="objective of the small, production and scaling runs")
    args = parser.parse_args()
    if args.small:
        small(args.small, args.exact_time, args.objective)
    if args.production:
        production(args.time, args.samples, args.reference, args.routing_corr, args.cache, args.objective)
    if args.kernel:
        kernel(args.samples, args.kernel_seconds, args.cache)
    if args.scaling:
        scaling(args.time, args.sizes, args.cache, args.objective, args.routing_corr)
