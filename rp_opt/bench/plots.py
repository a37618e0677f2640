"""Plots for the benchmark reports (matplotlib is the optional extra ``plot``).

Every function returns the path it wrote, or None (and logs why) when matplotlib is not
installed, so scripts and tests run without it.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict

import numpy as np

log = logging.getLogger("rp_opt")


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        log.info("matplotlib is not installed (pip install 'rp-opt[plot]'): no plots")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, plt, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def rank_load_matrix(instance, plan, layer: int | None = None) -> np.ndarray:
    """[R*G, P] rank loads of a plan: W[r,g,l,p] at ``layer``, or the max over layers."""
    from ..cost import layout_costs

    loads = layout_costs(instance, plan.placement, plan.layout).rank_load  # [R, G, L, P]
    per = loads.max(axis=2) if layer is None else loads[:, :, layer, :]
    return per.reshape(-1, per.shape[-1])


def load_heatmap(instance, plans: dict, path: str, layer: int | None = None, title: str = "") -> str | None:
    """Heat maps of the per-row, per-rank expert load of several plans side by side (rows
    of the picture: (row, shard) pairs; columns: EP ranks), on one colour scale."""
    plt = pyplot()
    if plt is None:
        return None
    from ..cost import layout_costs

    mats = {name: rank_load_matrix(instance, plan, layer) for name, plan in plans.items()}
    # sum over (r, g, l) of max_p W: the expert tokens on the critical path (X / gamma)
    critical = {name: float(layout_costs(instance, plan.placement, plan.layout).rank_load.max(axis=3).sum())
                for name, plan in plans.items()}
    vmax = max(float(m.max()) for m in mats.values())
    fig, axes = plt.subplots(1, len(mats), figsize=(3.2 * len(mats) + 1, 4), squeeze=False)
    for ax, (name, m) in zip(axes[0], mats.items()):
        im = ax.imshow(m, aspect="auto", cmap="viridis", vmin=0, vmax=vmax, interpolation="nearest")
        ax.set_title(f"{name}\nsum max_p W = {critical[name]:.4g} tok", fontsize=9)
        ax.set_xlabel("EP rank p")
        ax.set_ylabel("row x shard (r, g)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.yaxis.get_major_locator().set_params(integer=True)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8,
                 label="tokens" + (" (max over layers)" if layer is None else f" (layer {layer})"))
    if title:
        fig.suptitle(title, fontsize=10, y=1.04)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def gap_distribution(records: list[dict], path: str) -> str | None:
    """Box plot of the gap to the best bound (percent) per solver."""
    plt = pyplot()
    if plt is None:
        return None
    by = defaultdict(list)
    for rec in records:
        if rec.get("valid") and rec.get("gap_bound_pct") is not None:
            by[rec["solver"]].append(rec["gap_bound_pct"])
    if not by:
        return None
    fig, ax = plt.subplots(figsize=(1.4 * len(by) + 2, 3.5))
    ax.boxplot(list(by.values()), showmeans=True)
    ax.set_xticks(range(1, len(by) + 1), list(by.keys()), rotation=20)
    ax.set_ylabel("gap to best bound (%)")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, plt, path)


def curves(series: dict, path: str, xlabel: str, ylabel: str, logx: bool = False, logy: bool = False,
           bands: dict | None = None, title: str = "") -> str | None:
    """Line plot of named series {name: (x, y)}, optional bands {name: (low, high)}."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, (x, y) in series.items():
        ax.plot(x, y, marker="o", label=name)
        if bands and name in bands:
            low, high = bands[name]
            ax.fill_between(x, low, high, alpha=0.2)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return _save(fig, plt, path)


def scaling_panels(points: list[dict], path: str) -> str | None:
    """One panel per swept parameter: plan seconds (left axis) and peak MiB (right)."""
    plt = pyplot()
    if plt is None:
        return None
    params = list(dict.fromkeys(p["param"] for p in points))
    fig, axes = plt.subplots(1, len(params), figsize=(3.6 * len(params), 3.2), squeeze=False)
    for ax, param in zip(axes[0], params):
        pts = [p for p in points if p["param"] == param and p.get("seconds") is not None]
        x = [p["value"] for p in pts]
        ax.plot(x, [p["seconds"] for p in pts], "o-", color="C0", label="plan s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(param)
        ax.set_ylabel("plan seconds", color="C0")
        twin = ax.twinx()
        key = "peak_mib" if all(p.get("peak_mib") is not None for p in pts) else "rss_mib"
        twin.plot(x, [p[key] for p in pts], "s--", color="C1", label="MiB")
        twin.set_ylabel("traced peak MiB" if key == "peak_mib" else "max RSS MiB", color="C1")
        ax.grid(alpha=0.3)
    return _save(fig, plt, path)
