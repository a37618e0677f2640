"""Helpers shared by the subcommands: argument types, instance and plan loading, output
files, JSON output, tables, progress."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import sys
import time
from importlib import resources

import numpy as np

from ..errors import MAX_SEED, InputError, integer, number, require
from ..io import check_fingerprint, check_writable, load_instance, plan_from_dict, read_plan_file
from ..result import strict_json
from ..solution import cell_samples
from ..window import Instance

DEFAULT_INSTANCE = "default.npz"


def default_instance_path() -> str:
    """Path of the embedded default instance (shipped in ``instances/``)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = [os.path.join(here, "instances", DEFAULT_INSTANCE)]
    try:
        candidates.append(str(resources.files("rp_opt").joinpath("data", DEFAULT_INSTANCE)))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover
        pass
    for path in candidates:
        if os.path.exists(path):
            return path
    raise InputError("file", f"the default instance {DEFAULT_INSTANCE} is not installed; pass a FILE.npz")


def open_instance(path: str | None, cost: str | None = None) -> tuple[Instance, str]:
    """Load ``path`` (or the embedded default when None) and return it with its path.

    Parameters
    ----------
    path
        Instance ``.npz``; None: the embedded default.
    cost
        ``--cost``: a cost model file (``rp-opt calibrate -o COST.json``) or a model spec
        name that replaces the window's own cost model; None keeps it.
    """
    path = path or default_instance_path()
    instance = load_instance(path)
    if cost is not None:
        instance = dataclasses.replace(instance, cost=load_cost(cost, instance.window.num_layers))
    check_cost_range(instance, "cost" if cost is None else "--cost")
    return instance, path


# far beyond any measured cost; past them J overflows to inf, or a subnormal coefficient
# makes 1 / gamma inf in the exact model's integer scaling
MIN_COEFFICIENT, MAX_WINDOW_COST = 1e-100, 1e100


def check_cost_range(instance: Instance, field: str) -> None:
    """:class:`InputError` on ``field`` (``cost``, or ``--cost`` for a cost model given
    apart) when a non-zero alpha, beta or gamma is below :data:`MIN_COEFFICIENT`, or the
    window's whole modelled cost (every sample's attention and expert cost) is above
    :data:`MAX_WINDOW_COST`."""
    cost, window = instance.cost, instance.window
    named = [(f"cost.stages[{s.name}].{key}", getattr(s, key)) for s in cost.stages for key in ("alpha", "beta")]
    for name, value in named + [("cost.gamma", cost.gamma)]:
        require(value == 0 or value >= MIN_COEFFICIENT, field,
                f"{name}: must be 0 or >= {MIN_COEFFICIENT:g}, got {value!r}")
    tokens = float(window.lengths.sum())
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.sum(cost.layers * (cost.alpha * tokens + cost.beta * float(np.sum(window.attn_work))))
                      + cost.gamma * tokens * window.top_k * window.num_layers)
    total = math.inf if math.isnan(total) else total  # inf x 0 (a zero coefficient): the cost overflowed
    require(total <= MAX_WINDOW_COST, field,
            f"alpha, beta, gamma (or attn_work) give the window a modelled cost of {total:g}, above "
            f"{MAX_WINDOW_COST:g}")


def load_cost(cost: str, num_layers: int):
    """The :class:`~rp_opt.window.CostModel` of ``--cost``: a cost JSON file or a model spec
    name (read by the same loader as ``Planner(cluster, cost)``)."""
    from ..planner import load_cost as planner_cost

    try:
        model, spec = planner_cost(cost)
        if model is None:
            from ..models import cost_from_spec

            model = cost_from_spec(spec, num_layers)
    except InputError as exc:
        raise InputError("--cost", exc.message if exc.field == "cost" else str(exc)) from None
    return model


def add_cost(parser) -> None:
    """``--cost COST.json``: score with a calibrated cost model instead of the window's."""
    parser.add_argument("--cost", metavar="COST.json",
                        help="cost model to use instead of the window's: a file written by 'rp-opt calibrate -o' "
                             "(or a model spec name)")


def load_plan_for(path: str, instance: Instance, field: str = "plan"):
    """Read the plan file ``path`` for ``instance`` into a validated :class:`~rp_opt.result.Plan`.

    A plan written for another window (its fingerprint, or another sample count, slot count
    or placement shape) is reported as such, naming ``field``, before the cell-by-cell checks.
    """
    return plan_for_data(read_plan_file(path, field), instance, field, path)


def plan_for_data(data: dict, instance: Instance, field: str, path: str):
    """:func:`load_plan_for` of a plan file already read (``data``), for a caller that
    also needs its raw fields (``show --plan``'s claimed score)."""
    require_same_window(data, instance, field, path)
    require_score(data)
    return plan_from_dict(instance, data)


def check_plan_data(instance: Instance, data: dict, objective, rows: int | None = None):
    """:func:`rp_opt.check.check_plan` of a raw plan file's placement and rows: violations
    as the checker reports them, also a sample index beyond 64-bit integers (out of range,
    as a negative one) and a boolean rank (JSON ``true`` is not the rank 1)."""
    from ..check import check_plan

    return check_plan(instance, data["placement"], data["rows"], objective, rows)


def scores_match(score, claimed) -> bool:
    """Whether a plan file's ``claimed`` score is the recomputed ``score``: as many levels,
    each finite and equal to 1e-6 relative (the file holds the solver's floats)."""
    return len(score) == len(claimed) and all(
        math.isfinite(b) and abs(a - b) <= 1e-6 * max(1.0, abs(b)) for a, b in zip(score, claimed))


def compare_claimed(score, data: dict, objective_name: str, instance: Instance, cost_given: bool = False) -> dict:
    """The plan file ``data``'s claimed score against the recomputed ``score``:
    ``claimed_score``, ``claimed_objective`` and ``score_matches``, which is None (neither)
    when the file was scored under another objective or another cost model (its
    ``cost_fingerprint``), with ``score_note`` saying which. An older file without the
    fingerprint is compared under the window's own cost model, and not at all under
    ``--cost`` (``cost_given``): its cost model is unknown. Empty when the file claims no
    score."""
    from ..io import COST_FINGERPRINT_KEY, cost_fingerprint

    claimed = data.get("score")
    if claimed is None:
        return {}
    claimed_objective = data.get("objective", "sync")      # as the plan reader takes it
    out = {"claimed_score": claimed, "claimed_objective": claimed_objective, "score_matches": None}
    claimed_cost = data.get(COST_FINGERPRINT_KEY)
    require(claimed_cost is None or isinstance(claimed_cost, str), COST_FINGERPRINT_KEY,
            f"must be a string, got {claimed_cost!r}")
    if claimed_objective != objective_name:
        out["score_note"] = f"the plan file's score is under objective {claimed_objective!r}, not {objective_name!r}"
    elif claimed_cost is not None and claimed_cost != cost_fingerprint(instance.cost):
        out["score_note"] = ("the plan file's score is under another cost model (its cost_fingerprint "
                             f"{claimed_cost}, this one {cost_fingerprint(instance.cost)}: --cost?)")
    elif claimed_cost is None and cost_given:
        out["score_note"] = "the plan file does not say which cost model its score is under (no cost_fingerprint)"
    else:
        out["score_matches"] = scores_match(score, claimed)
    return out


def require_score(data: dict) -> None:
    """:class:`InputError` on ``score`` unless the raw plan's stored score (if any) is a
    list of numbers."""
    claimed = data.get("score")
    require(claimed is None or (isinstance(claimed, list) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and _fits_a_float(x) for x in claimed)), "score",
        f"must be a list of numbers, got {_short(claimed)}")


def _fits_a_float(x) -> bool:
    """Whether a JSON number reads as a float (an integer of 400 digits overflows)."""
    try:
        float(x)
    except OverflowError:
        return False
    return True


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def require_same_window(data: dict, instance: Instance, field: str, path: str) -> None:
    """:class:`InputError` on ``field`` when the raw plan ``data`` is plainly for another
    window: another N, D (slots per row) or (L, E) placement shape, or another window's
    fingerprint (:func:`rp_opt.io.check_fingerprint`). Malformed files pass through (the
    full parsers name their problem).

    The plan is said to be for N' samples only when its cells hold exactly the samples
    0..N'-1, each once; a sample repeated or missing is left to the layout parser, which
    names it (``rows[0][1]: sample 1 appears twice``, ``rows: sample 5 is in no cell``).
    """
    window, cluster = instance.window, instance.cluster
    rows, placement = data.get("rows"), data.get("placement")
    if isinstance(rows, list) and rows and all(isinstance(row, list) for row in rows):
        slots = {len(row) for row in rows}
        require(len(slots) != 1 or slots == {cluster.dp}, field,
                f"{path}: plan has {len(rows[0])} slots per row, the window's cluster has D={cluster.dp}")
        if len(slots) == 1:
            # malformed cells are named by the cell parser, before the count can mislead
            samples = [i for r, row in enumerate(rows) for d, cell in enumerate(row)
                       for i in cell_samples(cell, f"rows[{r}][{d}]")]
            count = len(samples)
            require(count == window.num_samples or sorted(samples) != list(range(count)), field,
                    f"{path}: plan is for N={count} samples, the window has {window.num_samples}")
    if isinstance(placement, list) and placement and all(isinstance(layer, list) for layer in placement):
        shape = (len(placement), len(placement[0]))
        require(shape == (window.num_layers, window.num_experts), field,
                f"{path}: plan is for L={shape[0]} layers x E={shape[1]} experts, the window has "
                f"L={window.num_layers} x E={window.num_experts}")
    check_fingerprint(data, window, field)


# ------------------------------------------------------------------ argument types
def _argument(text: str, check, *args, **kwargs):
    """``check("value", text, *args, text=True, **kwargs)`` (a checker of :mod:`rp_opt.errors`)
    for an argparse ``type``: its :class:`InputError` becomes the one-line
    ``argparse.ArgumentTypeError`` that the parser reports with the flag's name."""
    try:
        return check("value", text, *args, text=True, **kwargs)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _checked_arg(name: str, check, *args):
    """An argparse ``type`` named ``name`` that reads its text with ``check(..., *args)``
    (see :func:`_argument`)."""

    def parse(text: str):
        return _argument(text, check, *args)

    parse.__name__ = name
    return parse


def int_arg(minimum: int, maximum: int | None = None):
    """An argparse ``type``: an integer >= ``minimum`` (and <= ``maximum`` when given;
    one-line error naming the flag)."""
    return _checked_arg(f"int>={minimum}", integer, minimum, maximum)


def number_arg(minimum: float, maximum: float | None = None):
    """An argparse ``type``: a finite number >= ``minimum`` (and <= ``maximum`` when given;
    one-line error naming the flag)."""
    return _checked_arg(f"number>={minimum:g}", number, minimum, maximum)


# CP-SAT and HiGHS take 32-bit seeds: a larger one would fail inside the solver
seed_arg = _checked_arg("seed", integer, 0, MAX_SEED)


def seconds_arg(text: str) -> float:
    """An argparse ``type`` for ``--time-limit``: a finite number of seconds > 0."""
    return _argument(text, number, above=0, hint="seconds")


# ------------------------------------------------------------------ output files
def check_output(path: str | None, flag: str = "-o", inputs: dict | None = None) -> None:
    """Before any work: :class:`InputError` naming ``flag`` when ``path`` (if given) cannot
    be written (its directory is missing, or it is a directory), or when it is one of the
    command's ``inputs`` (``{"window": FILE.npz, ...}``; None values are skipped): writing
    the result there would destroy that input (``rp-opt plan w.npz -o w.npz``)."""
    if path is None:
        return
    check_writable(path, flag)
    for what, source in (inputs or {}).items():
        if source and os.path.exists(path) and os.path.exists(source) and os.path.samefile(path, source):
            raise InputError(flag, f"{path} is the {what} this command reads; writing there would destroy it")


def write_output(save, path: str, *what, flag: str = "-o") -> str | None:
    """``save(path, *what)`` after the work is done; when writing fails anyway, print one
    line on stderr and return it (the caller still prints its result), else None."""
    try:
        save(path, *what)
    except (OSError, InputError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        message = f"{flag}: cannot write {path} ({reason})"
        print(f"error: {message}", file=sys.stderr)
        return message
    return None


def write_reported(out: dict, save, path: str | None, *what, flag: str = "-o") -> str | None:
    """:func:`write_output` when ``path`` is given, recorded in the command's summary the
    same way by every command: ``out["output"]`` is the path written, or None (no path
    asked for, or writing failed: then ``out["write_error"]`` says why). Returns the error."""
    error = write_output(save, path, *what, flag=flag) if path else None
    out["output"] = None if error or not path else path
    if error:
        out["write_error"] = error
    return error


def add_json(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON summary on stdout instead of tables")


def emit_json(data: dict) -> None:
    """Print ``data`` as strict JSON on stdout (NaN and infinities become ``null``)."""
    json.dump(strict_json(data), sys.stdout, indent=1, allow_nan=False)
    sys.stdout.write("\n")


def table(headers: list[str], rows: list[list], file=None) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[k]) for r in cells) for k in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    text = "\n".join(lines)
    if file is not None:
        print(text, file=file)
    return text


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


class Progress:
    """A one-line progress indicator on stderr (only on a terminal, or when forced);
    otherwise each step is an INFO line of the ``rp_opt.progress`` logger on stderr (shown
    by default; with ``--json`` only under ``-v``)."""

    def __init__(self, total: int, label: str, enabled: bool | None = None):
        self.total, self.label, self.done = total, label, 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.start = time.perf_counter()

    def step(self, note: str = "") -> None:
        self.done += 1
        if not self.enabled:
            logging.getLogger("rp_opt.progress").info("%s %d/%d %.1f s %s", self.label, self.done, self.total,
                                                      time.perf_counter() - self.start, note)
        else:
            elapsed = time.perf_counter() - self.start
            sys.stderr.write(f"\r{self.label} {self.done}/{self.total} {elapsed:6.1f}s {note[:40]:<40}")
            sys.stderr.flush()
            if self.done >= self.total:
                sys.stderr.write("\n")
