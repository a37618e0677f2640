"""Sample packing: which samples train together in which cell (row, slot), for a placement.

Modules, in the order a plan uses them::

    baseline     what trainers run today: length-only ffd (AReaL) and kk (verl) packers
    seeds        diverse starting layouts of R* rows (ffd, kk, blocks, greedy, anchors)
    anchors      the anchor seed (rows of like blocks for ``sync``)
    state        the kernel's data: Problem (one window) and State (a population of layouts)
    workers      forked worker processes and shared-memory segments
    anneal       population annealing (the move kernel, the GPU seam)
    improve      the block-pair search and its driver ``search_layout``
    regroup      whole cells regrouped and blocks rearranged for the primary's aggregate
    heuristic    the production solver ``heuristic``: cycles of search, anneal, refinement
    heuristic_options   the heuristic's option rules, checked before anything runs
    report       the heuristic's report: lower bounds, background bound, baseline score
    exact        exact packing (CP-SAT, Pyomo + HiGHS) and the joint model
"""
