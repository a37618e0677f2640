"""``eval`` and ``show --plan`` on plan files whose claims are false or not comparable."""

from __future__ import annotations

import json

import pytest

from rp_opt.cli import main
from rp_opt.io import COST_FINGERPRINT_KEY, FINGERPRINT_KEY

GEN = ["gen", "--samples", "16", "--dp", "4", "--edp", "2", "--ep", "2", "--capacity", "4096", "--layers", "2"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A 16-sample window, its baseline plan, and a 24-sample window with its plan."""
    root = tmp_path_factory.mktemp("eval_claims")
    w16, w24 = str(root / "w16.npz"), str(root / "w24.npz")
    plan16, plan24 = str(root / "p16.json"), str(root / "p24.json")
    assert main(GEN + ["--seed", "0", "-o", w16, "--json"]) == 0
    assert main(GEN[:2] + ["24"] + GEN[3:] + ["--seed", "1", "-o", w24, "--json"]) == 0
    assert main(["plan", w16, "--solver", "baseline", "-o", plan16, "--json"]) == 0
    assert main(["plan", w24, "--solver", "baseline", "-o", plan24, "--json"]) == 0
    return {"root": root, "w16": w16, "w24": w24, "plan16": plan16, "plan24": plan24}


def _edited(files, name: str, **changes) -> str:
    """The 16-sample plan file with ``changes`` (None removes a key), written as ``name``."""
    with open(files["plan16"]) as handle:
        data = json.load(handle)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = files["root"] / name
    path.write_text(json.dumps(data))
    return str(path)


def _eval(capsys, files, plan, *extra):
    code = main(["eval", files["w16"], plan, "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("claim", ["one level", "extra level", "infinite", "empty", "tampered"])
def test_a_false_claimed_score_is_not_a_match_and_exits_1(files, capsys, claim):
    """A claimed score with fewer or more levels than the objective's, an infinite one
    (JSON 1e400), an empty list, or other numbers: ``score_matches`` false and exit code 1,
    although the plan itself is valid (zip compared only the common levels, and inf
    matched inf * 1e-6 within tolerance)."""
    with open(files["plan16"]) as handle:
        score = json.load(handle)["score"]
    claimed = {"one level": score[:1], "extra level": score + [42.0], "infinite": [1e400] + score[1:],
               "empty": [], "tampered": [s * 0.9 for s in score]}[claim]
    path = _edited(files, f"claim_{claim.replace(' ', '_')}.json")
    text = open(path).read().replace(json.dumps(score), json.dumps(claimed).replace("Infinity", "1e400"))
    open(path, "w").write(text)
    code, out = _eval(capsys, files, path)
    assert out["valid"] is True and out["score_matches"] is False and code == 1
    assert main(["show", files["w16"], "--plan", path, "--json"]) == 1          # as eval
    assert json.loads(capsys.readouterr().out)["plan"]["score_matches"] is False


def test_the_untouched_plan_matches(files, capsys):
    """The plan as written: valid, its score matches, exit 0."""
    code, out = _eval(capsys, files, files["plan16"])
    assert code == 0 and out["score_matches"] is True and out["claimed_objective"] == "sync"


def test_a_score_under_another_cost_model_is_not_compared(files, capsys, tmp_path):
    """A plan scored under ``--cost C.json`` and evaluated without it (and the other way
    round) is neither a match nor not: ``score_matches`` null, ``score_note`` names the cost
    model, exit 0; with the same ``--cost`` it matches. The file records the cost model's
    fingerprint."""
    from rp_opt.calibrate import save_cost
    from rp_opt.window import CostModel, Stage

    cost, plan = str(tmp_path / "cost.json"), str(tmp_path / "p_cost.json")
    save_cost(cost, CostModel((Stage("linear", 2, 1e-3, 0.0),), 1e-4))
    assert main(["plan", files["w16"], "--solver", "baseline", "--cost", cost, "-o", plan, "--json"]) == 0
    capsys.readouterr()
    assert COST_FINGERPRINT_KEY in json.loads(open(plan).read())
    code, out = _eval(capsys, files, plan)
    assert code == 0 and out["score_matches"] is None and "another cost model" in out["score_note"]
    code, out = _eval(capsys, files, plan, "--cost", cost)
    assert code == 0 and out["score_matches"] is True
    code, out = _eval(capsys, files, files["plan16"], "--cost", cost)
    assert code == 0 and out["score_matches"] is None
    # an older file without the fingerprint is compared as before, but not under --cost
    # (its cost model is unknown: a valid old plan failed the gate)
    old = _edited(files, "no_cost_fp.json", **{COST_FINGERPRINT_KEY: None})
    code, out = _eval(capsys, files, old)
    assert code == 0 and out["score_matches"] is True
    code, out = _eval(capsys, files, old, "--cost", cost)
    assert code == 0 and out["score_matches"] is None and "no cost_fingerprint" in out["score_note"]


def test_a_file_without_objective_is_compared_as_sync(files, capsys):
    """A plan file without ``objective`` is read as ``sync``; its claimed score was compared
    with objective None, so a false one passed (exit 0). Now it is checked."""
    with open(files["plan16"]) as handle:
        score = json.load(handle)["score"]
    code, out = _eval(capsys, files, _edited(files, "no_objective.json", objective=None))
    assert code == 0 and out["score_matches"] is True and out["claimed_objective"] == "sync"
    code, out = _eval(capsys, files, _edited(files, "no_objective_bad.json", objective=None,
                                             score=[s + 1 for s in score]))
    assert code == 1 and out["score_matches"] is False


@pytest.mark.parametrize("changes, field", [
    ({COST_FINGERPRINT_KEY: ["x"]}, "cost_fingerprint"),
    ({"score": [10 ** 400, 1, 2]}, "score"),              # an OverflowError traceback
])
def test_malformed_claims_are_one_line(files, capsys, changes, field):
    path = _edited(files, f"bad_{field}.json", **changes)
    for argv in (["eval", files["w16"], path], ["show", files["w16"], "--plan", path]):
        assert main(argv) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
        assert len(err) == 1 and err[0].startswith(f"error: {field}:"), err


def test_a_plan_for_another_window_is_bad_input_in_one_line(files, capsys):
    """The 24-sample window's plan without its fingerprint, evaluated on the 16-sample
    window: one line naming ``plan`` and both sample counts, exit 2, as ``show --plan``
    says it (eval listed dozens of violations, exit 1)."""
    with open(files["plan24"]) as handle:
        data = json.load(handle)
    data.pop(FINGERPRINT_KEY)
    path = files["root"] / "p24_nofp.json"
    path.write_text(json.dumps(data))
    assert main(["eval", files["w16"], str(path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(err) == 1 and err[0].startswith("error: plan:") and "N=24" in err[0] and "16" in err[0]


def test_ctrl_c_while_the_command_line_is_read_is_one_line(monkeypatch, capsys):
    """A Ctrl-C before the command runs (while the parser is built, or HiGHS is loaded for
    its banner: about half a second) ends with "error: interrupted" and exit code 130, not
    a traceback."""
    import rp_opt.cli as cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["show"]) == 130
    assert capsys.readouterr().err == "error: interrupted\n"
