"""rp-opt: expert placement and sample packing plans for MoE reinforcement-learning steps."""

from .errors import InputError
from .window import Cluster, CostModel, Instance, Stage, Window
from .solution import Layout, Placement
from .result import Plan, Result
from .bounds import cost_bounds
from .cost import layout_costs, rank_demand, score
from .objectives import Aggregate, Objective, get_objective, register_objective
from .check import check, check_plan

__version__ = "0.1.0"

# imported on first use (module __getattr__ below), so `import rp_opt` stays cheap: the
# trainer API pulls in the solvers' modules
_LAZY = {"Planner": "planner", "StepPlan": "planner"}

__all__ = [
    "Aggregate", "Cluster", "CostModel", "InputError", "Instance", "Layout", "Objective", "Placement",
    "Plan", "Planner", "Result", "Stage", "StepPlan", "Window", "check", "check_plan", "cost_bounds",
    "get_objective", "layout_costs", "rank_demand", "register_objective", "score",
]


def __getattr__(name):
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'rp_opt' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
