"""Objectives (rp_opt.objectives): the MODEL.md example, registration and weights."""

import numpy as np
import pytest

from rp_opt import InputError, Layout, Placement, get_objective, score
from rp_opt.cost import Costs

HAND_PLACEMENT = Placement(np.array([[0, 0, 1, 1], [0, 1, 0, 1]]), 2)
# row 0: slot 0 {0}, slot 1 {1}; row 1: slot 0 {2}, slot 1 {3}
HAND_LAYOUT = Layout(np.array([0, 1, 2, 3]), 2, 2)


def test_model_example_shard_vs_sync():
    """MODEL.md: J_A = [[100,0],[0,100]] vs J_B = [[60,60],[60,60]] (rows x shards)."""
    zero = np.zeros((2, 2))
    a = Costs(np.array([[100.0, 0.0], [0.0, 100.0]]), zero, np.zeros((2, 2, 1, 1)))
    b = Costs(np.full((2, 2), 60.0), zero, np.zeros((2, 2, 1, 1)))
    shard, sync = get_objective("shard"), get_objective("sync")
    assert shard.evaluate(a)[0] == 100 and sync.evaluate(a)[0] == 200
    assert shard.evaluate(b)[0] == 120 and sync.evaluate(b)[0] == 120
    assert shard.evaluate(a) < shard.evaluate(b)
    assert sync.evaluate(b) < sync.evaluate(a)


def test_unknown_objective_names_known_ones():
    from rp_opt import InputError
    with pytest.raises(InputError, match="unknown objective 'fast'.*shard.*sync"):
        get_objective("fast")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), -0.5, True, "1"])
def test_objective_weights_must_be_finite_and_non_negative(bad):
    """NaN passed the old `< 0` checks (and inf made every score inf or NaN); the weights
    of A and X and the level coefficients are read by rp_opt.errors.number."""
    from rp_opt.objectives import Aggregate, Objective, objective_names, register_objective

    with pytest.raises(InputError, match=r"^objective\.attention: must be a finite number >= 0 \(weight of A\)"):
        Aggregate("sum", "rows", "max", bad, 1.0)
    with pytest.raises(InputError, match=r"^objective\.expert: must be a finite number >= 0 \(weight of X\)"):
        Aggregate("sum", "rows", "max", 1.0, bad)
    good = Aggregate("sum", "rows", "max")
    with pytest.raises(InputError, match=r"^objective\.levels\[0\]\[1\]: must be a finite number >= 0 "
                                         r"\(coefficient in objective 'bad'\)"):
        Objective("bad", (((1.0, good), (bad, good)),))
    with pytest.raises(InputError, match=r"^objective: must be an Objective"):
        register_objective("bad")
    assert "bad" not in objective_names()


@pytest.mark.parametrize("levels, field", [
    ((), "objective.levels"),
    (((),), "objective.levels[0]"),
    (((1.0, "max"),), "objective.levels[0][0]"),
    (((1.0,),), "objective.levels[0][0]"),
])
def test_an_objective_needs_a_level_of_coefficient_aggregate_pairs(levels, field):
    """An objective with no level, an empty level, or a pair that is not (coefficient,
    Aggregate) was accepted and crashed every solver (IndexError, Pyomo's
    InvalidConstraintError): one line naming the field now, at construction."""
    from rp_opt.objectives import Objective

    with pytest.raises(InputError) as info:
        Objective("odd", levels)
    assert info.value.field == field and "\n" not in str(info.value)


def test_valid_objective_weights_still_score(hand):
    from rp_opt.objectives import Aggregate, Objective

    agg = Aggregate("max", "shards", "sum", np.float32(1), 0)
    assert (agg.attention, agg.expert) == (1.0, 0.0) and type(agg.expert) is float
    objective = Objective("custom-a", (((2, agg), (0.0, Aggregate("sum", "rows", "sum"))),))
    # sum_r max_g A = 21 + 10 (test_hand_computed_costs), twice
    assert score(hand, HAND_PLACEMENT, HAND_LAYOUT, objective) == (62.0,)
