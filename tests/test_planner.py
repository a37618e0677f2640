"""The trainer-facing Planner: replay -> R* certificate -> solver -> migration, step to step."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from rp_opt import Cluster, CostModel, InputError, Placement, Planner, Stage, check
from rp_opt import planner as planner_module
from rp_opt.materialise import apply_transfers
from rp_opt.result import _jsonable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COST = CostModel((Stage("attn", 2, 1.0, 0.01),), gamma=0.5)


def routing_of(seed: int, n: int = 16, layers: int = 3, experts: int = 8, k: int = 2, low: int = 4, high: int = 40):
    """Per-sample top-k ids [T_i, L, k] with skewed expert popularity."""
    rng = np.random.default_rng(seed)
    popularity = np.log(rng.dirichlet(np.full(experts, 0.4), size=layers))
    return [np.argsort(-(popularity[None] + rng.gumbel(size=(t, layers, experts))), axis=2)[:, :, :k]
            for t in rng.integers(low, high, n)]


def checked(step):
    """Every plan goes through the independent checker; its score must match."""
    report = check(step.instance, step.plan)
    assert report.valid, report.violations
    assert np.allclose(report.score, step.score, rtol=1e-9)
    return report


def test_baseline_mode_and_migration():
    """Mode `lpt-ffd` (a registered solver name): LPT placement relabelled against the
    identity in force; the migration's transfers turn the identity into the new placement."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    planner = Planner(cluster, COST, mode="lpt-ffd", time_limit=2.0, expert_bytes=10)
    assert planner.current_placement is None
    routing = routing_of(0)
    step = planner.plan(routing=routing, num_experts=8)
    checked(step)
    # the registered name (an audit: the rule's label "lpt+ffd" is the result's solver)
    assert step.solver == "lpt-ffd" and step.result.solver == "lpt+ffd" and step.step == 0 and planner.step == 1
    assert step.r_star == step.num_rows
    identity = Placement.identity(3, 8, 2)
    assert np.array_equal(apply_transfers(identity, step.migration.transfers).ranks, step.placement.ranks)
    assert step.migration.total_bytes == 10 * step.migration.num_transfers
    # relabelling kept at least half of every layer in place (the better of a label swap)
    assert step.migration.kept >= 3 * 4
    assert planner.current_placement is step.placement
    assert step.bound <= step.score[0] and 0 <= step.gap < 1
    assert set(step.timings) >= {"replay", "certify", "solve", "migrate", "total"}
    json.dumps(_jsonable(step.to_dict()))
    # the same window again: nothing to move
    again = planner.plan(routing=routing, num_experts=8)
    checked(again)
    assert again.migration.num_transfers == 0 and again.warm_start == "layout"


def test_the_solver_leaves_the_time_the_last_step_spent_after_its_solve():
    """The migration plan and the choice of plan run after the solve (0.6 s at N = 16384,
    where steps ran 10 % over a 5-s limit): the next step's solver gets the limit less
    what the step so far took and less those seconds of the last step (`solve_limit`),
    its scoring scaled to the three plans a step may score, and what the solve ran past
    its own limit."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    planner = Planner(cluster, COST, mode="heuristic", time_limit=1.0)
    first = planner.plan(routing=routing_of(0), num_experts=8)
    checked(first)
    # the choice scored 2 plans (none before it): the next may score 3
    scored, scoring = first.stats["scored"], first.stats["scoring_seconds"]
    assert scored in (0, 2) and 0 <= scoring <= first.timings["choose"]
    after = (first.timings["migrate"] + first.timings["choose"] - scoring + (3 * scoring / scored if scored else 0)
             + max(0.0, first.timings["solve"] - first.timings["solve_limit"]))
    assert after > 0 and first.timings["solve_limit"] <= 1.0
    second = planner.plan(routing=routing_of(1), num_experts=8)
    checked(second)
    spent = second.timings["replay"] + second.timings["certify"] + second.timings["warm_start"]
    assert second.timings["solve_limit"] <= 1.0 - spent - after + 1e-9


def test_a_step_runs_no_identity_ffd_report():
    """The heuristic's identity + ffd score is for reports and ran after the plan, outside
    its limit (0.17 s at N = 16384): the Planner turns it off, and a caller can turn it on."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    step = Planner(cluster, COST, mode="heuristic", time_limit=1.0).plan(routing=routing_of(0), num_experts=8)
    checked(step)
    assert "report_seconds" not in step.result.stats and "baseline_score" not in step.result.stats
    step = Planner(cluster, COST, mode="heuristic", time_limit=1.0,
                   solver_options={"report_baseline": True}).plan(routing=routing_of(0), num_experts=8)
    assert step.result.stats["baseline_score"] and "report_seconds" in step.result.stats


def test_migration_cost_decides_whether_experts_move():
    """With a price per byte on the migration's critical path, the LPT placement is adopted
    only when its modelled gain on the step's layout (times the horizon) exceeds the price;
    otherwise the identity in force stays, with the new layout and no transfer."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    routing = routing_of(0)
    free = Planner(cluster, COST, mode="lpt-ffd", time_limit=2.0, expert_bytes=10)
    moved = free.plan(routing=routing, num_experts=8, commit=False)
    identity = Placement.identity(3, 8, 2)
    from rp_opt.cost import score

    gain = score(moved.instance, identity, moved.layout, "sync")[0] - moved.score[0]
    assert gain > 0 and moved.migration.num_transfers > 0
    critical = moved.migration.critical_bytes
    assert 10 <= critical <= moved.migration.total_bytes
    # price = 2 x gain: kept at horizon 1, adopted at horizon 3
    cost = 2 * gain / critical
    kept = Planner(cluster, COST, mode="lpt-ffd", time_limit=2.0, expert_bytes=10, migration_cost=cost).plan(
        routing=routing, num_experts=8)
    checked(kept)
    assert np.array_equal(kept.placement.ranks, identity.ranks) and kept.migration.num_transfers == 0
    assert np.array_equal(kept.layout.cell_of, moved.layout.cell_of)
    decision = kept.to_dict()["migration_decision"]
    assert decision["migrate"] is False and decision["gain"] == pytest.approx(gain)
    assert decision["price"] == pytest.approx(2 * gain)
    adopted = Planner(cluster, COST, mode="lpt-ffd", time_limit=2.0, expert_bytes=10, migration_cost=cost,
                      migration_horizon=3).plan(routing=routing, num_experts=8)
    checked(adopted)
    assert np.array_equal(adopted.placement.ranks, moved.placement.ranks)
    assert adopted.stats["migration_decision"]["migrate"] is True
    json.dumps(_jsonable(kept.to_dict()))
    for bad in ({"migration_cost": -1.0}, {"migration_cost": float("nan")}, {"migration_cost": "fast"},
                {"migration_horizon": 0}):
        with pytest.raises(InputError):
            Planner(cluster, COST, mode="lpt-ffd", **bad)


@pytest.mark.parametrize("field, bad, message", [
    ("time_limit", 0, "must be a finite number > 0 (seconds), got 0"),
    ("time_limit", float("inf"), "must be a finite number > 0 (seconds), got inf"),
    ("time_limit", "2", "must be a finite number > 0 (seconds), got '2'"),
    ("certify_share", 0.0, "must be a finite number > 0, got 0.0"),
    ("certify_share", float("nan"), "must be a finite number > 0, got nan"),
    ("certify_share", 1, "must be a number in (0, 1), got 1"),
    ("certify_share", 1.5, "must be a number in (0, 1), got 1.5"),
    ("expert_bytes", -1, "must be an integer >= 0, got -1"),
    ("expert_bytes", 2.5, "must be an integer >= 0, got 2.5"),
    ("expert_bytes", True, "must be an integer >= 0, got True"),
    ("migration_cost", -1.0, "must be a finite number >= 0 or None, got -1.0"),
    ("migration_cost", "fast", "must be a finite number >= 0 or None, got 'fast'"),
    ("migration_horizon", 0, "must be an integer >= 1, got 0"),
    ("migration_horizon", 1.5, "must be an integer >= 1, got 1.5"),
])
def test_scalar_arguments_follow_the_shared_rules(field, bad, message):
    """Each scalar argument is checked by rp_opt.errors at construction: one line naming
    the argument and the value."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    with pytest.raises(InputError) as info:
        Planner(cluster, COST, mode="lpt-ffd", **{field: bad})
    assert str(info.value) == f"{field}: {message}"


@pytest.mark.parametrize("flag", ["warm_start", "fallback", "keep_placement"])
@pytest.mark.parametrize("bad", ["no", "False", 2, -1, 0.5, None, [True]])
def test_switches_take_only_true_or_false(flag, bad):
    """bool(x) made "no" and 2 switch a flag on; the switches now follow
    rp_opt.errors.switch: one line naming the flag and the value."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    with pytest.raises(InputError, match=rf"^{flag}: must be true or false, got "):
        Planner(cluster, COST, mode="lpt-ffd", **{flag: bad})


def test_switches_accept_bools():
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    planner = Planner(cluster, COST, mode="heuristic", warm_start=np.bool_(False), fallback=False,
                      keep_placement=np.True_)
    assert (planner.warm_start, planner.fallback, planner.keep_placement) == (False, False, True)
    assert all(type(v) is bool for v in (planner.warm_start, planner.fallback, planner.keep_placement))
    planner = Planner(cluster, COST, mode="lpt-ffd", warm_start=True, keep_placement=False)
    assert planner.warm_start is True and planner.keep_placement is False
    with pytest.raises(InputError, match=r"^commit: must be true or false, got 'no'$"):
        planner.plan(routing=routing_of(0), num_experts=8, commit="no")
    assert planner.step == 0 and planner.current_placement is None  # nothing planned
    checked(planner.plan(routing=routing_of(0), num_experts=8, commit=np.False_))
    assert planner.step == 0 and planner.current_placement is None  # not committed


def test_integral_floats_count_as_integers():
    """The shared rules take 8.0 as 8 where an integer is asked for (the hand checks did not)."""
    planner = Planner(Cluster(dp=2, edp=1, ep=2, capacity=64), COST, mode="lpt-ffd", time_limit=2,
                      expert_bytes=10.0, migration_horizon=3.0, migration_cost=np.float32(0.5))
    assert planner.expert_bytes == 10 and type(planner.expert_bytes) is int
    assert planner.migration_horizon == 3 and type(planner.migration_horizon) is int
    assert planner.time_limit == 2.0 and planner.migration_cost == 0.5
    step = planner.plan(routing=routing_of(0), num_experts=8.0)
    checked(step)
    assert step.migration.total_bytes == 10 * step.migration.num_transfers


def test_warm_starts_and_commit():
    """Same N and shape -> the previous layout seeds; other samples -> only the placement
    seeds (with the certificate's layout); commit=False changes nothing."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    planner = Planner(cluster, COST, mode="heuristic", time_limit=0.6, seed=1)
    first = planner.plan(routing=routing_of(1), num_experts=8)
    checked(first)
    assert first.warm_start is None
    state = (planner.step, planner.current_placement)
    dry = planner.plan(routing=routing_of(1), num_experts=8, commit=False)
    checked(dry)
    assert dry.warm_start == "layout"
    assert planner.step == state[0] and planner.current_placement is state[1]
    other = planner.plan(routing=routing_of(2, n=20), num_experts=8)
    checked(other)
    assert other.warm_start == "placement" and other.step == 1


def test_keep_placement_plans_packing_only():
    """keep_placement: the placement in force stays, nothing migrates, the layout is new."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    start = Placement(np.tile([1, 0, 1, 0, 1, 0, 1, 0], (3, 1)), 2)
    planner = Planner(cluster, COST, mode="heuristic", time_limit=0.5, keep_placement=True, current_placement=start)
    for seed in (8, 9):
        step = planner.plan(routing=routing_of(seed), num_experts=8)
        checked(step)
        assert np.array_equal(step.placement.ranks, start.ranks)
        assert step.migration.num_transfers == 0
    for mode in ("baseline", "joint"):
        with pytest.raises(InputError, match=r"^keep_placement: mode '\w+' chooses its own placement"):
            Planner(cluster, COST, mode=mode, keep_placement=True)


def test_refine_through_solver_options():
    """The heuristic's refine round: on the first step the heuristic picks the placement and
    refines it (its default); from the second step the planner hands it a placement seed,
    so refine runs only with solver_options={"refine": True}. Steps are checked; refine
    with keep_placement is a one-line contradiction."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    runs = {}
    for refine in (None, True):
        options = {} if refine is None else {"refine": True}
        planner = Planner(cluster, COST, mode="heuristic", time_limit=1.0, seed=2, solver_options=options)
        steps = [planner.plan(routing=routing_of(seed), num_experts=8) for seed in (4, 5)]
        for step in steps:
            checked(step)
        runs[refine] = [bool(step.result.stats["refine"]) for step in steps]     # (a round per cycle)
    assert runs == {None: [True, False], True: [True, True]}
    with pytest.raises(InputError, match=r"^solver_options: refine=True changes the placement"):
        Planner(cluster, COST, mode="heuristic", keep_placement=True, solver_options={"refine": True})
    # a placement in the solver's options would win over keep_placement in silence
    with pytest.raises(InputError, match=r"^solver_options: a placement here replaces the one in force"):
        Planner(cluster, COST, mode="heuristic", keep_placement=True,
                solver_options={"placement": Placement.identity(2, 8, 2)})


def test_seed_placement_is_no_worse_than_either_start():
    from rp_opt.placement import layer_rank_loads, local_search_placement
    from rp_opt.replay import demand_from_samples

    window = demand_from_samples(routing_of(3, layers=4, experts=16), 16).window()
    previous = Placement(np.stack([np.random.default_rng(l).permutation(np.arange(16) // 4) for l in range(4)]), 4)
    seed = planner_module._seed_placement(window, previous)
    load = window.expert_load()
    peak = layer_rank_loads(load, seed.ranks, 4).max(axis=1)
    assert np.all(peak <= layer_rank_loads(load, local_search_placement(window, 4).ranks, 4).max(axis=1))
    assert np.all(peak <= layer_rank_loads(load, previous.ranks, 4).max(axis=1))


def test_input_forms_give_the_same_instance():
    routing = routing_of(4, n=6)
    planner = Planner(Cluster(dp=2, edp=1, ep=2, capacity=64), COST, mode="baseline")
    a = planner.instance(routing=routing, num_experts=8)
    width = max(len(r) for r in routing)
    padded = np.zeros((6, width, 3, 2), dtype=np.int64)
    mask = np.zeros((6, width), dtype=bool)
    for i, r in enumerate(routing):
        padded[i, :len(r)] = r
        mask[i, :len(r)] = True
    b = planner.instance(routing=padded, mask=mask, num_experts=8)
    c = planner.instance(routing=np.asarray(a.window.demand), top_k=2)
    for other in (b, c):
        assert np.array_equal(other.window.lengths, a.window.lengths)
        assert np.array_equal(other.window.demand, a.window.demand)
        assert other.window.top_k == 2
    with pytest.raises(InputError, match=r"^routing\[2\]: expert id \d+ at token 0 layer 0 is outside \[0, 8\)$"):
        planner.plan(routing=[*routing[:2], routing[2] + 9, *routing[3:]], num_experts=8)
    with pytest.raises(InputError, match=r"^num_experts"):
        Planner(Cluster(dp=2, edp=1, ep=2, capacity=64), COST).plan(routing=routing)


def test_model_spec_cost_and_modes(monkeypatch):
    """A spec name gives FLOP costs rescaled to the window's layers and the expert size;
    unknown modes fail at configuration; a missing solver falls back along MODES."""
    from rp_opt.models import cost_from_spec, load_spec

    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    planner = Planner(cluster, "ling-tiny-like", mode="baseline")
    assert planner.cost_model(3) == cost_from_spec("ling-tiny-like", 3)
    assert planner.expert_bytes == load_spec("ling-tiny-like").expert_bytes
    step = planner.plan(routing=routing_of(5), num_experts=8)
    checked(step)
    assert step.instance.model == "ling-tiny-like"
    with pytest.raises(InputError, match=r"^mode: "):
        Planner(cluster, COST, mode="no-such-solver")
    monkeypatch.setitem(planner_module.MODES, "auto", ("no-such-solver", "kk"))
    assert Planner(cluster, COST, mode="auto").solver_name == "kk"
    with pytest.raises(InputError, match=r"^mode: "):
        Planner(cluster, COST, mode="auto", fallback=False)
    for mode in ("heuristic", "exact"):
        assert Planner(cluster, COST, mode=mode).solver_name == mode


def test_auto_and_exact_modes_plan_valid_steps():
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=48)
    routing = routing_of(6, n=8, low=4, high=24)
    for mode in ("auto", "exact"):
        step = Planner(cluster, COST, mode=mode, time_limit=2.0).plan(routing=routing, num_experts=8)
        checked(step)
        assert step.status in ("optimal", "feasible")


def test_joint_mode_plans_step_after_step():
    """Mode ``joint`` (placement and packing in one exact model) plans a second step too:
    the Planner gives it the previous step as a warm start, not a ``placement`` option,
    which joint does not take (regression: step 2 raised ``options: unknown option(s)
    ['placement'] for solver joint``)."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=48)
    planner = Planner(cluster, COST, mode="joint", time_limit=2.0)
    for seed in (6, 7):
        step = planner.plan(routing=routing_of(seed, n=6, low=4, high=24), num_experts=8)
        checked(step)
        assert step.solver == "joint" and step.status in ("optimal", "feasible")


def test_infeasible_window_is_one_line():
    """3 samples cannot fill R*·D = 4 cells."""
    planner = Planner(Cluster(dp=4, edp=1, ep=2, capacity=64), COST, mode="baseline")
    with pytest.raises(InputError, match=r"^window: "):
        planner.plan(routing=routing_of(7, n=3), num_experts=8)


def test_solver_without_a_plan_is_one_line_with_its_reason():
    """A planner told to use one row where R* > 1 returns no plan; the trainer API raises
    one line with the solver's status and reason (a step cannot go on without a plan).
    Eight samples of 20-24 tokens in C = 48 fit two to a cell: one row of D = 2 is too few
    by the L2 bound."""
    planner = Planner(Cluster(dp=2, edp=1, ep=2, capacity=48), COST, mode="heuristic", time_limit=2.0,
                      solver_options={"num_rows": 1})
    with pytest.raises(InputError, match=r"^window: solver heuristic returned no plan \(status infeasible: "
                                         r"R=1 rows hold R x D = 2 cells, but the samples need at least 4 cells"):
        planner.plan(routing=routing_of(6, n=8, low=20, high=24), num_experts=8)


def test_example_script_runs_as_written():
    """scripts/example_trainer.py is the README's "Use it in a trainer" example, and
    README.md and docs/trainer.md show it verbatim; its lines name the solver auto ran
    (step.engine; they printed only `auto`) and the plan it returned."""
    script = open(os.path.join(ROOT, "scripts", "example_trainer.py")).read().rstrip("\n")
    for doc in ("README.md", os.path.join("docs", "trainer.md")):
        assert "```python\n" + script + "\n```" in open(os.path.join(ROOT, doc)).read(), doc
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "example_trainer.py")], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["step 0", "step 1"]
    assert "warm start: placement" in lines[1]
    # mode auto says which of its solvers ran, and which plan came back
    assert all(re.match(r"step \d: auto \((heuristic|exact)\) (optimal|feasible), (new|previous|placement) plan, ",
                        line) for line in lines), lines


def test_cost_file_under_any_name(tmp_path):
    """A cost file is read whatever its name (``rp-opt calibrate -o cost.txt``); a name
    that is no file stays a model spec name. One rule for the Planner and the CLI."""
    from rp_opt.planner import load_cost

    model = CostModel((Stage("softmax", 4, 1.0, 0.5),), 0.25)
    path = tmp_path / "cost.txt"
    path.write_text(json.dumps(model.to_dict()))
    assert load_cost(str(path)) == (model, None)
    loaded, spec = load_cost("ling-tiny-like")
    assert loaded is None and spec.name == "ling-tiny-like"


def test_ctrl_c_during_a_step_stops_the_loop(monkeypatch):
    """A Ctrl-C while a step plans (here: as the heuristic creates its shared arrays) raises
    KeyboardInterrupt from plan(), as it would anywhere in a training loop, and the step is
    not committed: the placement in force and the step counter stay."""
    from tests.helpers import interrupt_at, small

    inst = small(samples=48)
    planner = Planner(inst.cluster, inst.cost, mode="heuristic", time_limit=1.0,
                      solver_options={"workers": 2, "search_workers": 2})
    before = planner.current_placement
    interrupt_at(monkeypatch, "segment", 1)
    with pytest.raises(KeyboardInterrupt):
        planner.plan(lengths=inst.window.lengths, routing=np.array(inst.window.demand), top_k=inst.window.top_k)
    monkeypatch.undo()
    assert planner.step == 0 and planner.current_placement == before
    checked(planner.plan(lengths=inst.window.lengths, routing=np.array(inst.window.demand), top_k=inst.window.top_k))
    assert planner.step == 1


@pytest.mark.parametrize("mode", ["heuristic", "auto", "exact"])
def test_num_rows_option_above_r_star_plans_every_step(mode):
    """``solver_options={"num_rows": R}`` with R above R*: the warm start of step 2 has R
    rows (the previous layout), not the certificate's R* witness (step 2 failed with
    ``warm_start: is not a valid layout of R*=6 rows: shape 5x4``)."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=48)
    routing = routing_of(6, n=8, low=4, high=24)
    planner = Planner(cluster, COST, mode=mode, time_limit=1.0, solver_options={"num_rows": 4})
    for _ in range(2):
        step = planner.plan(routing=routing, num_experts=8)
        checked(step)
        assert step.plan.num_rows == 4


def test_replay_input_checks_num_experts_and_mask():
    """A Replay carries its own E and has no padding: a different ``num_experts`` and any
    ``mask`` are one-line errors (both were ignored, and the stats said E came from the call)."""
    from rp_opt.replay import demand_from_samples

    replay = demand_from_samples(routing_of(3, n=8), 8)
    planner = Planner(Cluster(dp=2, edp=1, ep=2, capacity=64), COST, time_limit=0.5)
    with pytest.raises(InputError, match=r"^num_experts: is 16, the Replay has E=8$"):
        planner.plan(routing=replay, num_experts=16)
    with pytest.raises(InputError, match=r"^mask: is only used with a padded batch"):
        planner.plan(routing=replay, num_experts=8, mask=np.ones((8, 5)))
    checked(planner.plan(routing=replay, num_experts=8))


def test_counts_tensor_gives_e_without_a_model_spec():
    """Counts [N, L, E] as a torch tensor give E by their last axis, as a numpy array does
    (the tensor was taken for expert ids: "num_experts: is needed to read expert ids")."""
    torch = pytest.importorskip("torch")
    counts = np.zeros((8, 3, 8), dtype=np.int64)
    counts[:, :, 0] = 10
    counts[:, :, 3] = 10
    planner = Planner(Cluster(dp=2, edp=1, ep=2, capacity=64), COST, time_limit=0.5)
    step = planner.plan(lengths=np.full(8, 10), routing=torch.from_numpy(counts), top_k=2)
    checked(step)
    assert step.instance.window.num_experts == 8 and step.stats["inputs"]["num_experts"] == "the counts"


def test_a_float_id_past_int64_is_named_as_given():
    """An expert id of 1e20 (floats) is reported as 1e+20, not as the -2^63 its cast gave."""
    routing = [ids.astype(float) for ids in routing_of(4, n=8)]
    routing[1][0, 0, 0] = 1e20
    with pytest.raises(InputError, match=r"^routing\[1\]: holds the expert id 1e\+20"):
        Planner(Cluster(dp=2, edp=1, ep=2, capacity=64), COST, time_limit=0.5).plan(routing=routing, num_experts=8)


def test_routing_that_does_not_fit_the_lengths_names_the_lengths():
    """Ids of 10 tokens given with a length of 4 (and counts of 67 routed tokens with T = 33,
    k = 2): one line naming ``lengths``, which the caller passed, not the internal
    ``demand``."""
    planner = Planner(Cluster(dp=2, edp=1, ep=2, capacity=256), COST, time_limit=0.5)
    routing = routing_of(5, n=6, low=5, high=12)
    lengths = [ids.shape[0] for ids in routing]
    lengths[5] = 4
    with pytest.raises(InputError, match=r"^lengths: sample 5, layer 0.* \(the routing does not fit these lengths\)$"):
        planner.plan(lengths=lengths, routing=routing, num_experts=8)
    counts = np.zeros((6, 3, 8), dtype=np.int64)
    counts[:, :, 0] = counts[:, :, 1] = 33
    counts[2, 0, 2] = 1
    with pytest.raises(InputError, match=r"^lengths: sample 2, layer 0 routes 67 tokens, more than top_k x T = "
                                         r"2 x 33 = 66"):
        planner.plan(lengths=np.full(6, 33), routing=counts, top_k=2)


def test_exact_mode_is_not_held_to_the_certificates_layout():
    """In mode exact, a step of new samples handed the R* certificate's layout to the exact
    planner as its warm start, which then skipped its heuristic start: 3654.2 (gap 7.3 %)
    against 3404.6 cold on an audit's 200-sample windows. The certificate's layout now goes
    as ``witness`` (the start only when first fit finds none): steps after the first start
    from the heuristic as the first does, and a limit too short for anything else still
    plans (it raised "no layout of R=8 rows found" on a window whose R* was proven)."""
    cluster = Cluster(dp=8, edp=2, ep=4, capacity=2048)
    windows = [routing_of(600 + s, n=200, layers=4, experts=32, k=4, low=16, high=1200) for s in range(2)]
    planner = Planner(cluster, "ling-tiny-like", mode="exact", time_limit=1.0, seed=0)
    for routing in windows:
        step = planner.plan(routing=routing, num_experts=32)
        checked(step)
        assert step.result.stats["start"] != "warm_start" and step.gap < 0.03
    short = Planner(cluster, "ling-tiny-like", mode="exact", time_limit=0.2, seed=0).plan(routing=windows[0],
                                                                                          num_experts=32)
    checked(short)
    assert short.num_rows == short.r_star


def test_exact_mode_reads_num_rows_as_every_planner_does():
    """``solver_options={"num_rows": "8"}`` passed the Planner's check (which reads text)
    and failed in the exact planner at step 0 (the heuristic reads it too)."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    step = Planner(cluster, COST, mode="exact", time_limit=2.0, solver_options={"num_rows": "6"}).plan(
        routing=routing_of(0), num_experts=8)
    checked(step)
    assert step.num_rows == 6


def test_a_plan_kept_on_the_solvers_own_placement_keeps_its_proof():
    """``keep_placement=True`` in mode exact: re-planning the same window ties, and the
    previous plan comes back; its placement is the solver's own, so the solver's proof
    and bound for that placement hold for it (they fell to "feasible" and the analytic
    bound, a gap of 11 %, in an audit)."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    planner = Planner(cluster, COST, mode="exact", time_limit=5.0, keep_placement=True)
    first = planner.plan(routing=routing_of(3, n=8), num_experts=8)
    again = planner.plan(routing=routing_of(3, n=8), num_experts=8)
    checked(again)
    assert first.status == "optimal" and again.decision == "previous" and again.migration.num_transfers == 0
    assert again.status == "optimal" and again.bound == pytest.approx(first.bound, rel=1e-9)
    assert again.stats["bound_from"] == "solver"


def test_an_uncommitted_step_leaves_the_planners_time_estimates():
    """``commit=False`` plans without changing the planner: its seconds after the solve no
    longer set the next step's reserve (an audit: a slow uncommitted step cut the next
    committed one to 0.2 s of 0.5)."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    planner = Planner(cluster, COST, mode="heuristic", time_limit=0.5)
    checked(planner.plan(routing=routing_of(0), num_experts=8))
    before = (planner._after_solve, planner._score_seconds)
    checked(planner.plan(routing=routing_of(1), num_experts=8, commit=False))
    assert (planner._after_solve, planner._score_seconds) == before and planner.step == 1


def test_to_dict_carries_the_migration_for_a_trainer_outside_python():
    """``StepPlan.to_dict()`` had the migration's summary only: a trainer reading the JSON
    could not move the experts. It now has every transfer and the rounds, strict JSON,
    and applying them to the identity gives the new placement."""
    cluster = Cluster(dp=2, edp=1, ep=2, capacity=64)
    step = Planner(cluster, COST, mode="lpt-ffd", time_limit=1.0, expert_bytes=10).plan(routing=routing_of(0),
                                                                                        num_experts=8)
    data = json.loads(json.dumps(step.to_dict(), allow_nan=False))
    migration = data["migration"]
    assert migration["transfers"] == len(migration["transfer_list"]) == step.migration.num_transfers > 0
    assert sorted(i for r in migration["round_list"] for i in r) == list(range(migration["transfers"]))
    ranks = Placement.identity(3, 8, 2).ranks.copy()
    for layer, expert, src, dst, size in migration["transfer_list"]:
        assert ranks[layer, expert] == src and size == 10
        ranks[layer, expert] = dst
    assert np.array_equal(ranks, step.placement.ranks)
