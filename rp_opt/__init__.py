"""rp-opt: expert placement and sample packing plans for MoE reinforcement-learning steps."""

from .errors import InputError
from .window import Cluster, CostModel, Instance, Stage, Window
from .solution import Layout, Placement
from .result import Plan, Result
from .cost import (Aggregate, Objective, cost_bounds, get_objective, layout_costs,
                   rank_demand, register_objective, score)
from .check import check, check_plan

__version__ = "0.1.0"


def __getattr__(name):
    # the trainer API is imported on first use, so `import rp_opt` stays cheap
    if name == "Planner":
        from .planner import Planner

        return Planner
    raise AttributeError(f"module 'rp_opt' has no attribute {name!r}")
