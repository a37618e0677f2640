"""The heuristic's arguments and options (``rp-opt plan --solver heuristic --option
KEY=VALUE``, ``Planner(solver_options=...)``): each one's rule, checked before anything
runs, so that a bad value is a one-line :class:`~rp_opt.errors.InputError` naming it."""

from __future__ import annotations

from functools import partial

from ..errors import MAX_SEED, MAX_WORKERS, InputError, integer, is_none, number, require, switch

_SEED_RULES = ("witness", "ffd", "kk", "blocks", "greedy", "anchors")


def _seed_rules(field: str, value, *, text: bool = True) -> tuple[str, ...] | None:
    """``seeds``: None, or a non-empty list (or comma-separated string) of seed rules."""
    if is_none(value, text):
        return None
    rules = [r.strip() for r in value.split(",")] if isinstance(value, str) else value
    require(isinstance(rules, (list, tuple)) and rules and all(
        isinstance(r, str) and (r in _SEED_RULES or (r.startswith("blocks-") and r[7:] in _SEED_RULES))
        for r in rules), field,
        f"must be a non-empty list of seed rules ({', '.join(_SEED_RULES)}, blocks-<rule>) or None, got {value!r}")
    return tuple(rules)


def _auto_switch(field: str, value, *, text: bool = True) -> bool | None:
    """A switch, or None (the default: the heuristic decides)."""
    if is_none(value, text):
        return None
    try:
        return switch(field, value, text=text)
    except InputError:
        raise InputError(field, f"must be true, false or None (None: decided by the objective), got {value!r}") \
            from None


def _count(none: str | None = None, high: int | None = None):
    """An integer >= 1 (at most ``high``); with ``none``, also None, meaning ``none``."""
    return partial(integer, low=1, high=high, none=none is not None, hint=none and f"None: {none}")


# the anneal's sizes: the population (a layout per replica: 4096 x N = 16384 samples is
# 256 MiB), moves drawn per step, and moves per step in all (each move's arrays hold its
# rank loads: 2^16 moves x L = 48 x P = 8 is 200 MiB); far above the defaults (32, 4, 128),
# and low enough that no value asks for more memory than a machine has
MAX_REPLICAS, MAX_CANDIDATES, MAX_MOVES_PER_STEP = 4096, 1024, 2**16


# name -> check. The heuristic's arguments and options, checked by :func:`check_option`
# before anything runs, with the shared rules of :mod:`rp_opt.errors` and ``text=True`` (the
# CLI's strings "3", "0.5", "yes" pass too): ``integer`` takes whole numbers only (1.7 is an
# error, 8.0 is 8), ``number`` finite numbers, ``switch`` true/false (also 1/0, yes/no);
# ``seeds`` takes seed rule names.
OPTION_RULES: dict = {
    "time_limit": partial(number, above=0, hint="seconds"),
    "seed": partial(integer, low=0, high=MAX_SEED),
    "workers": _count("one per core", high=MAX_WORKERS),
    "anneal_share": partial(number, low=0, high=1),
    "candidates": _count(high=MAX_CANDIDATES),
    "cycles": switch,
    "no_improvement": _count("off"),
    "num_rows": _count("R*"),
    "refine": switch,
    "regroup": _auto_switch,
    "refine_rounds": _count(),
    "refine_share": partial(number, low=0, high=1),
    "refine_sweeps": _count(),
    "replicas": _count(high=MAX_REPLICAS),
    "report_baseline": switch,
    "reserve": partial(number, low=0, hint="seconds, below time_limit"),
    "search": switch,
    "search_cap": _count("whole blocks"),
    "search_evaluations": _count("until the deadline"),
    "search_screen": _count("every swap"),
    "search_workers": _count("by the load", high=MAX_WORKERS),
    "seeds": _seed_rules,
    "steps_per_temperature": _count(),
    "surrogate": partial(number, low=0),
    "anchor_margin": partial(number, low=0),
    "background_bound": switch,
    "temperatures": _count("time-limited run"),
    "trust_warm_rows": switch,
}
HEURISTIC_OPTIONS = frozenset(OPTION_RULES) - {"time_limit", "seed"}
"""Option names :func:`heuristic` accepts (any other is an input error)."""


def check_option(name: str, value):
    """``value`` of the heuristic's argument or option ``name`` as its type (``OPTION_RULES``).

    Values come as Python values or as the CLI's ``--option KEY=VALUE`` gives them (read
    as JSON when they parse, else as text), so numbers and true/false may also be strings.

    Raises
    ------
    InputError
        One line naming the option and the value when the value is not valid.
    """
    return OPTION_RULES[name](name, value, text=True)



def heuristic_inputs(time_limit, seed, workers, options: dict, solver: str = "heuristic") -> tuple[
        float, int, int | None, dict]:
    """The heuristic's ``time_limit`` (None: 5 s), ``seed``, ``workers`` and ``options``,
    checked (:func:`check_option`) and converted, before anything runs; ``solver`` is the
    name an unknown option's message gives (``auto`` passes its options to the heuristic).

    Returns
    -------
    (time_limit, seed, workers, options)

    Raises
    ------
    InputError
        An unknown option, or the first invalid value (one line naming it).
    """
    unknown = sorted(set(options) - HEURISTIC_OPTIONS)
    require(not unknown, "options", f"unknown option(s) {unknown} for solver {solver}; known: "
            f"{', '.join(sorted(HEURISTIC_OPTIONS))}")
    time_limit = check_option("time_limit", 5.0 if time_limit is None else time_limit)
    options = {name: check_option(name, value) for name, value in options.items()}
    require(options.get("reserve", 0.0) < time_limit, "reserve",
            f"must be a number of seconds >= 0 and below time_limit={time_limit}, got {options.get('reserve')!r}")
    replicas, candidates = options.get("replicas", 32), options.get("candidates", 4)
    require(replicas * candidates <= MAX_MOVES_PER_STEP, "candidates",
            f"replicas x candidates must be at most {MAX_MOVES_PER_STEP} (the moves drawn per step), "
            f"got {replicas} x {candidates}")
    return time_limit, check_option("seed", seed), check_option("workers", workers), options
