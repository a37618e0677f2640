"""Export of a plan for trainers outside Python (JSON + .npz with phy2log / log2phy)."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings, strategies as st

from rp_opt import Layout, Placement, check
from rp_opt.cli import main
from rp_opt.export import (export_plan, load_export, microbatch_lists, physical_maps, placement_in_force,
                           relabel_to_previous)
from rp_opt.io import save_instance, save_plan
from rp_opt.solvers import get_solver


def test_physical_maps_hand():
    """L=1, E=4, P=2: ranks [1, 0, 0, 1] -> rank 0 holds experts 1, 2 in slots 0, 1 and
    rank 1 holds experts 0, 3 in slots 2, 3."""
    placement = Placement(np.array([[1, 0, 0, 1]]), 2)
    phy2log, log2phy = physical_maps(placement)
    assert phy2log.tolist() == [[1, 2, 0, 3]]
    assert log2phy.tolist() == [[2, 0, 1, 3]]


def test_previous_map_keeps_staying_experts_in_their_slot():
    """Previous slots [e0 e1 | e2 e3]; new ranks [0, 1, 0, 1]: e0 and e3 stay (slots 0, 3),
    e2 moves into the slot e1 left (slot 1), e1 into slot 2."""
    placement = Placement(np.array([[0, 1, 0, 1]]), 2)
    phy2log, log2phy = physical_maps(placement, np.array([[0, 1, 2, 3]]))
    assert phy2log.tolist() == [[0, 2, 1, 3]]
    assert log2phy.tolist() == [[0, 2, 1, 3]]


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 3), st.sampled_from([(4, 2), (6, 3), (8, 2), (8, 4)]), st.integers(0, 2 ** 31))
def test_maps_invariants(num_layers, shape, seed):
    """log2phy inverts phy2log, slot s is on rank s div (E/P) as the placement says, and an
    expert on the same rank as before keeps its slot."""
    experts, ranks = shape
    rng = np.random.default_rng(seed)
    per = experts // ranks
    placement = Placement(np.stack([rng.permutation(np.arange(experts) // per) for _ in range(num_layers)]), ranks)
    prev = np.stack([rng.permutation(experts) for _ in range(num_layers)])
    for previous in (None, prev):
        phy2log, log2phy = physical_maps(placement, previous)
        rows = np.arange(num_layers)[:, None]
        assert np.array_equal(phy2log[rows, log2phy], np.tile(np.arange(experts), (num_layers, 1)))
        assert np.array_equal(log2phy // per, placement.ranks)
    prev_slot = np.argsort(prev, axis=1)
    stays = (prev_slot // per) == placement.ranks
    assert np.array_equal(log2phy[stays], prev_slot[stays])


def test_microbatch_lists_are_slot_major():
    """2 rows x 2 slots: cell_of = [0, 3, 1, 2, 0] -> slot 0: rows [[0, 4], [3]], slot 1: [[2], [1]]."""
    layout = Layout(np.array([0, 3, 1, 2, 0]), 2, 2)
    samples, offsets = microbatch_lists(layout)
    cells = [[samples[offsets[d, r]:offsets[d, r + 1]].tolist() for r in range(2)] for d in range(2)]
    assert cells == [[[0, 4], [3]], [[2], [1]]]
    assert offsets.shape == (2, 3)


def test_export_files_and_cli(tmp_path, capsys):
    from conftest import random_instance

    instance = random_instance(5, n=16, layers=2, experts=8, dp=2, ep=2, capacity=64)
    result = get_solver("lpt-ffd")(instance, objective="sync")
    assert check(instance, result.plan).valid
    json_path, npz_path = export_plan(result.plan, tmp_path / "out")
    data = json.load(open(json_path))
    arrays = load_export(npz_path)
    rows = result.plan.layout.to_rows()
    assert data["rows"] == rows
    assert data["microbatches"] == [[rows[r][d] for r in range(len(rows))] for d in range(2)]
    assert np.array_equal(arrays["log2phy"] // 4, result.plan.placement.ranks)
    assert arrays["logical_to_physical_map"].shape == (2, 8, 1)
    assert data["phy2log"] == arrays["phy2log"].tolist()
    # the exported plan file is a valid plan for the checker
    assert check(instance, result.plan).valid

    save_instance(tmp_path / "w.npz", instance)
    save_plan(tmp_path / "p.json", result.plan)
    code = main(["export", str(tmp_path / "w.npz"), str(tmp_path / "p.json"), "-o", str(tmp_path / "cli"), "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] and out["num_rows"] == result.plan.num_rows
    assert np.array_equal(load_export(tmp_path / "cli.npz")["phy2log"], arrays["phy2log"])
    code = main(["export", str(tmp_path / "w.npz"), str(tmp_path / "p.json"), "-o", str(tmp_path / "cli2"),
                 "--previous", str(tmp_path / "cli.npz")])
    assert code == 0


def test_cli_rejects_invalid_plan(tmp_path, capsys):
    from conftest import hand_instance

    instance = hand_instance()
    save_instance(tmp_path / "w.npz", instance)
    bad = {"placement": [[0, 0, 1, 1], [0, 1, 0, 1]], "rows": [[[0, 1], [2, 3]]], "objective": "sync"}
    (tmp_path / "bad.json").write_text(json.dumps(bad))  # cell (0,1) holds 4 tokens: fine; cell (0,0) 4: fine
    bad["rows"] = [[[0, 2], [1, 3]]]  # cell (0,0) holds 3 + 2 = 5 > C = 4
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    code = main(["export", str(tmp_path / "w.npz"), str(tmp_path / "bad.json"), "-o", str(tmp_path / "x")])
    assert code == 1
    assert "capacity" in capsys.readouterr().out
    assert not (tmp_path / "x.npz").exists()
    code = main(["export", str(tmp_path / "w.npz"), str(tmp_path / "missing.json"), "-o", str(tmp_path / "x")])
    assert code == 2


def test_relabel_to_previous_hand():
    """L = 1, E = 4, P = 2, identity map in force (rank 0: e0 e1, rank 1: e2 e3). The plan
    puts e2, e3 on rank 0 and e0, e1 on rank 1: as planned no expert stays; swapping the
    two rank labels (same cost) keeps all four, and the maps then move nothing."""
    from rp_opt.result import Plan

    identity = np.array([[0, 1, 2, 3]])
    assert placement_in_force(identity, 2).ranks.tolist() == [[0, 0, 1, 1]]
    plan = Plan(Placement(np.array([[1, 1, 0, 0]]), 2), Layout(np.array([0, 1]), 1, 2), "sync", None)
    relabelled, info = relabel_to_previous(plan, identity)
    assert relabelled.placement.ranks.tolist() == [[0, 0, 1, 1]]
    assert info == {"experts": 4, "kept_on_rank": 4, "kept_without_relabelling": 0}
    assert physical_maps(relabelled.placement, identity)[0].tolist() == [[0, 1, 2, 3]]
    # a layer whose labels already keep the most keeps them, ties included: ranks
    # [0, 1, 0, 1] keep two experts under either labelling
    tied = Plan(Placement(np.array([[0, 1, 0, 1]]), 2), plan.layout, "sync", None)
    same, info = relabel_to_previous(tied, identity)
    assert same.placement.ranks.tolist() == [[0, 1, 0, 1]] and info["kept_on_rank"] == 2


def test_export_with_previous_relabels_ranks(tmp_path, capsys):
    """`export --previous` kept experts in their slots only where the plan's rank labels
    happened to match: a plan exported twice against its own first export moved experts.
    Now the ranks are relabelled first (same score, checked): every expert stays."""
    from conftest import random_instance

    instance = random_instance(5, n=16, layers=3, experts=8, dp=2, ep=4, capacity=64)
    result = get_solver("lpt-ffd")(instance, objective="sync")
    save_instance(tmp_path / "w.npz", instance)
    save_plan(tmp_path / "p.json", result.plan)
    args = ["export", str(tmp_path / "w.npz"), str(tmp_path / "p.json"), "--json"]
    assert main(args + ["-o", str(tmp_path / "first"), "--previous", "identity"]) == 0
    first = json.loads(capsys.readouterr().out)["relabelled"]
    assert first["kept_on_rank"] >= first["kept_without_relabelling"]
    assert main(args + ["-o", str(tmp_path / "again"), "--previous", str(tmp_path / "first.npz")]) == 0
    again = json.loads(capsys.readouterr().out)["relabelled"]
    assert again["kept_on_rank"] == again["experts"] == 24
    before, after = load_export(tmp_path / "first.npz"), load_export(tmp_path / "again.npz")
    assert np.array_equal(before["phy2log"], after["phy2log"])      # nothing moves
    # the exported plan file (relabelled placement) is valid and scores as the plan
    assert main(["eval", str(tmp_path / "w.npz"), str(tmp_path / "again.json"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] and np.allclose(report["score"], result.plan.score)


def test_export_refuses_a_plan_whose_score_this_window_does_not_give(tmp_path, capsys):
    """A plan saved without its window (``save_plan(path, plan)``: no fingerprint) for a
    window A, exported against a window B of the same shape: it exited 0, stamped B's
    fingerprint on the file and kept A's score. The claimed score is now compared: exit 1,
    one violation naming both scores, nothing written."""
    from conftest import random_instance
    from rp_opt.window import Cluster, Instance

    first = random_instance(3, n=12, layers=2, experts=4, dp=2, ep=2, capacity=256)
    other = random_instance(9, n=12, layers=2, experts=4, dp=2, ep=2, capacity=256)
    other = Instance(other.window, Cluster(2, 1, 2, 4096), other.cost)
    plan = get_solver("lpt-ffd")(first, objective="sync").plan
    save_plan(tmp_path / "p.json", plan)
    save_instance(tmp_path / "b.npz", other)
    assert main(["export", str(tmp_path / "b.npz"), str(tmp_path / "p.json"), "-o", str(tmp_path / "x"),
                 "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False and "a plan for another window?" in out["violations"][0]
    assert not (tmp_path / "x.json").exists()
    save_instance(tmp_path / "a.npz", first)                      # its own window: exported
    assert main(["export", str(tmp_path / "a.npz"), str(tmp_path / "p.json"), "-o", str(tmp_path / "y")]) == 0
