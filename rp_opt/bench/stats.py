"""Statistics for benchmark reports: mean +- std, moving-block bootstrap intervals, rank
correlation."""

from __future__ import annotations

import math

import numpy as np


def mean_std(values) -> tuple[float, float, int]:
    """(mean, sample standard deviation (ddof 1; 0 for one value), count) of the finite values."""
    x = np.asarray([v for v in values if v is not None], dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return math.nan, math.nan, 0
    return float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else 0.0, int(x.size)


def pm(values, digits: int = 2, scale: float = 1.0) -> str:
    """``mean ± std`` of the values (times ``scale``) as text; ``-`` when there are none."""
    mean, std, n = mean_std(values)
    if n == 0:
        return "-"
    return f"{scale * mean:.{digits}f} ± {scale * std:.{digits}f}"


def default_block(n: int) -> int:
    """Block length n^(1/3) (rounded, at least 1): the usual order for the mean of a
    weakly dependent series."""
    return max(1, int(round(n ** (1 / 3))))


def block_bootstrap_ci(series, *, block: int | None = None, reps: int = 2000, level: float = 0.95,
                       seed: int = 0, statistic=np.mean) -> tuple[float, float, float]:
    """Moving-block bootstrap percentile interval of ``statistic`` of a series.

    Consecutive windows of a training run are correlated (routing drifts slowly), so
    resampling single steps would understate the spread; blocks of ``block`` consecutive
    steps keep the short-range dependence (Kunsch 1989). Resamples are made of
    ceil(n / block) blocks drawn with replacement among the n - block + 1 overlapping
    blocks, cut to length n.

    Returns
    -------
    (estimate, low, high)
    """
    x = np.asarray(series, dtype=np.float64)
    n = x.size
    if n == 0:
        return math.nan, math.nan, math.nan
    estimate = float(statistic(x))
    if n == 1:
        return estimate, estimate, estimate
    block = default_block(n) if block is None else max(1, min(int(block), n))
    rng = np.random.default_rng(seed)
    count = -(-n // block)
    starts = rng.integers(0, n - block + 1, size=(reps, count))
    index = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(reps, -1)[:, :n]
    values = np.apply_along_axis(statistic, 1, x[index]) if statistic is not np.mean else x[index].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(values, [tail, 1 - tail])
    return estimate, float(low), float(high)


def kendall_tau(a, b) -> float:
    """Kendall's tau-b of two score vectors (scipy.stats.kendalltau); nan when undefined."""
    from scipy.stats import kendalltau

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size < 2:
        return math.nan
    return float(kendalltau(a, b).statistic)
