"""Expert placement: LPT, swap local search, exact MILP with swappable objectives.

Public API::

    lpt_placement(window, P) -> Placement           lpt_ranks(load[L,E], P) -> ranks[L,E]
    local_search_placement(window, P) -> Placement  local_search_ranks(load, ranks, P)
    placement_lower_bound(load[L,E], P) -> [L]
    solve_layer(LayerProblem, objective, ...) -> LayerResult
    exact_placement(instance_or_window, P, objective, ...) -> PlacementResult
    register_placement_objective / get_placement_objective / placement_objective_names
"""

from .bounds import placement_lower_bound
from .local_search import local_search_placement, local_search_ranks, lpt_local_search_ranks
from .lpt import layer_rank_loads, lpt_placement, lpt_ranks
from .milp import LayerResult, PlacementResult, canonical_ranks, cell_loads, exact_placement, solve_layer
from .objectives import (LayerProblem, PlacementObjective, get_placement_objective, placement_objective_names,
                         register_placement_objective)

__all__ = [
    "placement_lower_bound", "local_search_placement", "local_search_ranks", "lpt_local_search_ranks",
    "layer_rank_loads", "lpt_placement", "lpt_ranks", "LayerResult", "PlacementResult", "canonical_ranks",
    "cell_loads", "exact_placement", "solve_layer", "LayerProblem", "PlacementObjective",
    "get_placement_objective", "placement_objective_names", "register_placement_objective",
]
