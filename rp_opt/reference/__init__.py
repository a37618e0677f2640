"""Reference trainer integration in PyTorch (optional extra ``torch``).

:mod:`rp_opt.reference.moe` holds a tiny MoE transformer whose router records and replays
top-k routing and whose experts live in physical slots behind a logical-to-physical map,
and :func:`rp_opt.reference.moe.train_step`, which runs the packed microbatches of a plan.
Importing this package does not import torch; importing ``rp_opt.reference.moe`` does.
"""
