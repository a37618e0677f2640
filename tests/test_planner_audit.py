"""Audit of the trainer-facing Planner: where defaulted E and k come from, re-planning an
unchanged window, the bound and gap of a kept plan, solver_options checked at
construction, the package's public names, and the trainer doc's example error."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import rp_opt
from rp_opt import Cluster, CostModel, InputError, Planner, Stage, cost_bounds, score
from rp_opt.replay import demand_from_counts
from rp_opt.result import relative_gap

from test_planner import checked as checked_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COST = CostModel((Stage("attn", 2, 1.0, 0.01),), gamma=0.5)
SPEC_NOTE = "from the model spec 'ling-tiny-like'; pass top_k= or lengths= if your router differs"


def top_k_ids(rng, lengths, layers: int, experts: int, k: int, popularity=None) -> list[np.ndarray]:
    """Per-sample ids [T_i, L, k], k distinct experts per token (``popularity``: per-expert
    probabilities, default uniform)."""
    return [np.stack([np.stack([rng.choice(experts, k, replace=False, p=popularity) for _ in range(layers)])
                      for _ in range(int(t))]) for t in lengths]


def counts_of(routing, experts: int) -> np.ndarray:
    """a[N, L, E] of per-sample ids."""
    out = np.zeros((len(routing), routing[0].shape[1], experts), dtype=np.int64)
    for i, ids in enumerate(routing):
        for layer in range(ids.shape[1]):
            np.add.at(out[i, layer], ids[:, layer].ravel(), 1)
    return out


def checked(step):
    """The step, once its plan has passed the independent checker (test_planner.checked)."""
    checked_report(step)
    return step


# ----------------------------------------------------------------- 1. where E and k came from
def test_counts_with_the_spec_k_say_where_k_came_from():
    """Counts [N, L, E] without lengths= or top_k= take k from the model spec (8 for
    ling-tiny-like). The error for a per-layer total that is no multiple of 8 named a k=8
    the caller never gave; it now says it is the spec's and what to pass. Given top_k=2,
    the same counts give the true lengths."""
    rng = np.random.default_rng(0)
    lengths = np.array([7, 12, 9, 20])  # top-2: 14, 24, 18, 40 ids per layer; 14 is no multiple of 8
    counts = counts_of(top_k_ids(rng, lengths, 2, 16, 2), 16)
    planner = Planner(Cluster(dp=2, edp=1, ep=4, capacity=64), "ling-tiny-like", mode="baseline", time_limit=1.0)
    with pytest.raises(InputError) as err:
        planner.instance(routing=counts[:, :, :], num_experts=16)
    assert str(err.value) == f"counts[0]: routes 14 tokens per layer, not a multiple of k=8 (k=8 {SPEC_NOTE})"
    instance = planner.instance(routing=counts, num_experts=16, top_k=2)
    assert instance.window.lengths.tolist() == lengths.tolist() and instance.window.top_k == 2
    # called directly with its own top_k, the replay's message is as it was (no note)
    with pytest.raises(InputError, match=r"^counts\[0\]: routes 14 tokens per layer, not a multiple of k=8$"):
        demand_from_counts(counts, top_k=8)


def test_counts_no_top_k_routing_of_the_derived_lengths_gives_are_refused():
    """Top-2 counts read with the spec's k=8 give T_i = S_i / 8; a token visits an expert at
    most once, so no expert may get more than T_i of a sample's tokens. Skewed top-2
    routing breaks that: expert 0 gets all 8 tokens of sample 0 (16 ids, T_i = 2 under
    k=8). The window's own check caught it as "expert 0 gets 8 tokens from a sample of 2
    tokens", with nothing on where the 2 came from; now the message says the lengths were
    derived with the spec's k and which k the counts allow."""
    counts = np.zeros((2, 1, 16), dtype=np.int64)
    counts[0, 0, 0], counts[0, 0, 1:9] = 8, 1      # 8 tokens of top-2: expert 0 always, one other each
    counts[1, 0, :16] = 1                           # 8 tokens spread over all 16 experts
    planner = Planner(Cluster(dp=1, edp=1, ep=4, capacity=64), "ling-tiny-like", mode="baseline", time_limit=1.0)
    with pytest.raises(InputError) as err:
        planner.instance(routing=counts, num_experts=16)
    assert str(err.value) == (
        "counts[0]: expert 0 at layer 0 gets 8 of the 16 tokens routed per layer, more than T_i = 16 / 8 = 2: a "
        f"token picks an expert at most once, so these counts come from a router with k <= 2 (k=8 {SPEC_NOTE})")
    # the condition is also sufficient: counts that pass are those of some top-8 routing
    # (here 2 tokens x 8 distinct experts), so they plan
    assert planner.instance(routing=counts[1:], num_experts=16).window.lengths.tolist() == [2]


def test_counts_with_lengths_and_the_spec_k_and_the_inputs_record():
    """With lengths= the spec's k still bounds the routed ids (k T_i per layer); a router
    with more experts per token than the spec's is named with the note. Valid counts plan,
    and step.stats["inputs"] says where E, k and the lengths came from."""
    rng = np.random.default_rng(1)
    lengths = np.array([5, 6, 7, 8])
    top16 = counts_of(top_k_ids(rng, lengths, 1, 32, 16), 32)
    planner = Planner(Cluster(dp=2, edp=1, ep=4, capacity=64), "ling-tiny-like", mode="baseline", time_limit=1.0)
    with pytest.raises(InputError) as err:
        planner.instance(routing=top16, lengths=lengths, num_experts=32)
    assert str(err.value) == f"counts[0]: layer 0 routes 80 tokens, more than k x T_i = 8 x 5 = 40 (k=8 {SPEC_NOTE})"
    step = checked(planner.plan(routing=top16, lengths=lengths, num_experts=32, top_k=16))
    assert step.stats["inputs"] == {"num_experts": "num_experts", "top_k": "top_k", "lengths": "lengths"}
    top8 = counts_of(top_k_ids(rng, lengths, 1, 32, 8), 32)
    step = checked(planner.plan(routing=top8, num_experts=32))
    assert step.instance.window.lengths.tolist() == lengths.tolist()
    assert step.stats["inputs"] == {"num_experts": "num_experts", "top_k": "the model spec 'ling-tiny-like'",
                                    "lengths": "the counts: T_i = tokens per layer / k=8"}


def test_ids_read_with_the_spec_e_say_so():
    """Per-sample ids without num_experts= are read with the spec's E (256); an id outside
    it names E as the spec's (it named an E the caller never gave), and the window of a
    16-expert model's ids has 256 experts, recorded in step.stats["inputs"]."""
    rng = np.random.default_rng(2)
    routing = top_k_ids(rng, [6, 9, 4, 7], 2, 16, 2)
    planner = Planner(Cluster(dp=2, edp=1, ep=4, capacity=64), "ling-tiny-like", mode="baseline", time_limit=1.0)
    bad = [routing[0], routing[1] + 250, *routing[2:]]
    with pytest.raises(InputError) as err:
        planner.instance(routing=bad, num_experts=None)
    assert re.fullmatch(r"routing\[1\]: expert id 2\d\d at token 0 layer 0 is outside \[0, 256\) \(E=256 from the "
                        r"model spec 'ling-tiny-like'; pass num_experts= if your model has another E\)", str(err.value))
    with pytest.raises(InputError, match=r"is outside \[0, 16\)$"):  # E given: the message is as it was
        planner.instance(routing=bad, num_experts=16)
    step = planner.plan(routing=routing, commit=False)
    assert step.instance.window.num_experts == 256
    assert step.stats["inputs"] == {"num_experts": "the model spec 'ling-tiny-like'", "top_k": "the routing",
                                    "lengths": "the routing"}


# ----------------------------------------------------------------- 2. re-planning a window
def skewed_window(seed: int = 0):
    """The audit's window: 24 samples of 20-200 tokens, L = 3, E = 16, top-2 with four
    popular experts, on D = 4, G = 2, P = 4, C = 512."""
    rng = np.random.default_rng(seed)
    popularity = np.r_[np.full(4, 0.15), np.full(12, 0.4 / 12)]
    lengths = rng.integers(20, 200, 24)
    return top_k_ids(rng, lengths, 3, 16, 2, popularity), Cluster(dp=4, edp=2, ep=4, capacity=512)


def test_replanning_the_same_window_is_never_worse_and_moves_nothing_for_nothing():
    """Re-planning the identical window (mode auto, temperatures=5) returned 76.7411 with 16
    experts moved where the previous plan, still valid, scores 76.5335. The previous plan is
    now a candidate: the step scores no worse than it, moves experts only for a strictly
    better score, and says which plan it returned."""
    routing, cluster = skewed_window()
    planner = Planner(cluster, "ling-tiny-like", time_limit=1.0, seed=0, mode="auto",
                      solver_options={"temperatures": 5})
    first = checked(planner.plan(routing=routing, num_experts=16))
    again = checked(planner.plan(routing=routing, num_experts=16))
    previous = score(again.instance, first.placement, first.layout, "sync")
    assert tuple(again.score) <= tuple(previous)
    assert again.warm_start == "layout" and "previous" in again.stats["candidates"]
    if again.migration.num_transfers:
        assert again.decision == "new" and tuple(again.score) < tuple(previous)
    else:
        assert again.decision in ("previous", "placement")
    if again.decision == "previous":
        assert np.array_equal(again.layout.cell_of, first.layout.cell_of)
        assert np.array_equal(again.placement.ranks, first.placement.ranks)
    assert again.to_dict()["decision"] == again.decision


def test_no_step_is_worse_than_the_placement_in_force_with_its_layout():
    """The same window again with the heuristic on a fixed schedule (temperatures=5, two
    workers: a deterministic run): from the changed placement seed it found a layout that
    scores 76.4652 with 16 experts moved, while the placement in force with that same
    layout scores 76.4212. A step now scores no worse than the placement in force with the
    solver's layout (nor than the previous plan), and one that returns either moves
    nothing. Then other samples (only the placement seeds the search): the same holds."""
    routing, cluster = skewed_window()
    planner = Planner(cluster, "ling-tiny-like", time_limit=0.5, seed=0, mode="heuristic",
                      solver_options={"temperatures": 5, "workers": 2})
    first = checked(planner.plan(routing=routing, num_experts=16))
    rng = np.random.default_rng(5)
    others = top_k_ids(rng, rng.integers(20, 200, 20), 3, 16, 2)
    for step_routing, kind in ((routing, "layout"), (others, "placement")):
        before = planner.current_placement
        step = checked(planner.plan(routing=step_routing, num_experts=16))
        assert step.warm_start == kind
        stay = score(step.instance, before, step.result.plan.layout, "sync")
        assert tuple(step.score) <= tuple(stay)
        if kind == "layout":
            assert tuple(step.score) <= tuple(score(step.instance, first.placement, first.layout, "sync"))
        if step.decision == "new":
            assert tuple(step.score) < tuple(stay)
        else:
            assert step.migration.num_transfers == 0 and np.array_equal(step.placement.ranks, before.ranks)


# ----------------------------------------------------------------- 3. bound and gap of a kept plan
def test_kept_plan_reports_its_own_gap():
    """A migration_cost that keeps the placement in force: step.gap was the solver's plan's
    (0.45 %) while the kept plan's own gap was 18.5 %. The heuristic's bound holds for every
    placement of the same rows, so it stays, and the gap is the kept plan's."""
    routing, cluster = skewed_window()
    step = checked(Planner(cluster, "ling-tiny-like", time_limit=1.0, seed=0, mode="heuristic",
                           migration_cost=1e9).plan(routing=routing, num_experts=16))
    assert step.stats["migration_decision"]["migrate"] is False and step.migration.num_transfers == 0
    assert step.bound == step.result.bound <= step.score[0]
    assert step.gap == relative_gap(step.score[0], step.bound) and step.gap > step.result.gap
    assert step.decision == "placement" and step.bound_scope == "every placement"
    assert step.status == "feasible"
    out = step.to_dict()
    assert (out["gap"], out["bound"], out["decision"]) == (step.gap, step.bound, "placement")


def test_kept_plan_after_exact_gets_the_placement_free_bound():
    """The exact model's bound holds for its own placement only; a kept plan (another
    placement) gets the analytic bound for every placement of its rows instead, and says
    so."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=48)
    rng = np.random.default_rng(6)
    popularity = np.r_[np.full(2, 0.3), np.full(6, 0.4 / 6)]
    routing = top_k_ids(rng, rng.integers(4, 24, 8), 3, 8, 2, popularity)
    planner = Planner(cluster, COST, mode="exact", time_limit=2.0, migration_cost=1e9, expert_bytes=1)
    step = checked(planner.plan(routing=routing, num_experts=8))
    assert step.result.stats["bound_scope"] == "the given placement"
    assert step.stats["migration_decision"]["migrate"] is False  # the exact plan moved experts: kept
    assert step.bound == pytest.approx(cost_bounds(step.instance, step.num_rows).objective("sync")[0])
    assert step.bound <= step.score[0] and step.gap == relative_gap(step.score[0], step.bound)
    assert step.stats["bound_from"] == "analytic (every placement)" and step.bound_scope == "every placement"


# ----------------------------------------------------------------- 4. solver_options at construction
@pytest.mark.parametrize("mode, options, message", [
    ("auto", {"bogus": 3}, r"^solver_options: unknown option\(s\) \['bogus'\] for solver auto; known: "),
    ("heuristic", {"temperatures": 0}, r"^solver_options\.temperatures: must be an integer >= 1"),
    ("exact", {"bogus": 3}, r"^solver_options: unknown option\(s\) \['bogus'\] for solver exact; known: "),
    ("exact", {"symmetry": "nope"}, r"^solver_options\.symmetry: "),
    ("baseline", {"refine": True}, r"^solver_options: unknown option\(s\) \['refine'\] for solver baseline; "
                                   r"known: num_rows$"),
    ("lpt-ffd", {"num_rows": 0}, r"^solver_options\.num_rows: "),
])
def test_solver_options_are_checked_at_construction(mode, options, message):
    """An unknown option was refused only at the first plan(), after replay and
    certification, naming `options`; now at construction, naming solver_options."""
    with pytest.raises(InputError, match=message):
        Planner(Cluster(dp=2, edp=1, ep=2, capacity=64), COST, mode=mode, solver_options=options)


def test_valid_solver_options_still_pass():
    """The options each solver takes pass the construction check."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    for mode, options in (("auto", {"workers": 1, "temperatures": 5, "num_rows": 2}),
                          ("heuristic", {"refine": "yes", "seeds": "ffd"}),
                          ("exact", {"symmetry": False, "workers": 1, "backend": "highs"}),
                          ("baseline", {"num_rows": 3}), ("kk", {})):
        assert Planner(cluster, COST, mode=mode, solver_options=options).solver_options == options


# ----------------------------------------------------------------- 5. public names
def test_planner_is_a_public_name_and_stays_lazy():
    """`from rp_opt import *` and dir(rp_opt) did not show Planner (no __all__, loaded
    through __getattr__); importing rp_opt still does not load the planner."""
    assert {"Planner", "StepPlan"} <= set(dir(rp_opt)) and "Planner" in rp_opt.__all__
    names: dict = {}
    exec("from rp_opt import *", names)
    assert names["Planner"] is Planner and all(name in names for name in rp_opt.__all__)
    code = "import sys, rp_opt; print('rp_opt.planner' in sys.modules, 'Planner' in dir(rp_opt))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.split() == ["False", "True"], out.stderr


# ----------------------------------------------------------------- 6. the doc's example error, 7. engine
def test_trainer_doc_shows_the_actual_no_plan_error():
    """docs/trainer.md showed status no_solution for solver_options={"num_rows": 1}; the
    heuristic proves the row count infeasible. The doc's text is the one a run gives (the
    window of docs/trainer.md's example: 24 samples of 20-200 tokens, C = 512)."""
    rng = np.random.default_rng(0)
    routing = [np.stack([np.stack([rng.choice(16, 2, replace=False) for _ in range(3)]) for _ in range(int(t))])
               for t in rng.integers(20, 200, 24)]
    planner = Planner(Cluster(dp=4, edp=2, ep=4, capacity=512), "ling-tiny-like", time_limit=1.0, mode="heuristic",
                      solver_options={"num_rows": 1})
    with pytest.raises(InputError) as err:
        planner.plan(routing=routing, num_experts=16)
    assert "(status infeasible: " in str(err.value)
    doc = " ".join(open(os.path.join(ROOT, "docs", "trainer.md")).read().split())
    assert f"`{err.value}`" in doc


def test_engine_says_which_solver_auto_ran():
    """step.solver is `auto` in mode auto; step.engine is the solver that produced the
    plan (the stats' auto_choice, or auto_kept), and the solver itself in other modes."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=48)
    rng = np.random.default_rng(6)
    routing = top_k_ids(rng, rng.integers(4, 24, 8), 3, 8, 2)
    step = checked(Planner(cluster, COST, mode="auto", time_limit=1.0).plan(routing=routing, num_experts=8))
    stats = step.result.stats
    assert step.solver == "auto" and step.engine == (stats.get("auto_kept") or stats["auto_choice"])
    assert step.engine in ("heuristic", "exact") and step.to_dict()["engine"] == step.engine
    step = Planner(cluster, COST, mode="lpt-ffd", time_limit=1.0).plan(routing=routing, num_experts=8)
    assert step.engine == step.solver == "lpt-ffd" and step.result.solver == "lpt+ffd"
