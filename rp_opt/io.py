"""File formats: instance ``.npz`` (format ``rp-opt-window/1``) and plan JSON.

Instance file: arrays ``lengths`` [N] int, ``demand`` [N, L, E] int, optional
``attn_work`` [N] float, and ``meta``, a JSON string::

    {"format": "rp-opt-window/1", "top_k": 8, "model": "ling-flash-like",
     "cluster": {"dp": 64, "edp": 8, "ep": 8, "capacity": 32768, "max_samples_per_cell": null},
     "cost": {"stages": [{"name": "linear", "layers": 36, "alpha": ..., "beta": 0.0}, ...],
              "gamma": ...}}

Plan file: ``{"placement": [[rank per expert] per layer], "rows": [[[samples] per slot] per
row], "objective": "sync", "score": [...], "stats": {...}, "window_fingerprint": "..."}``.
``window_fingerprint`` (:func:`window_fingerprint`, optional: older files have none) names
the window the plan was made for; a plan read against another window is refused.

Every problem is reported as :class:`~rp_opt.errors.InputError` naming the field.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import zipfile
import zlib

import numpy as np

from .errors import InputError, _bad, require
from .result import Plan
from .solution import Layout, Placement, require_integer_ranks
from .window import Cluster, CostModel, Instance, Window, _adopted

FORMAT = "rp-opt-window/1"
log = logging.getLogger("rp_opt")


def check_writable(path: str | os.PathLike, field: str = "-o") -> str:
    """Check, before any work, that a file can be written at ``path``.

    Parameters
    ----------
    path
        The output file.
    field
        The option that named it, for the message (``"-o"``).

    Returns
    -------
    The path as a string; :class:`InputError` naming ``field`` and the path when it is
    empty, a directory, or its directory is missing or not writable, or when the file
    cannot be opened for writing there (a new file is created and removed again).
    """
    path = os.fspath(path)
    require(path.strip() != "", field, "is empty")
    require(not os.path.isdir(path), field, f"{path} is a directory")
    directory = os.path.dirname(path)
    if directory:
        require(os.path.isdir(directory), field, f"directory {directory} does not exist")
    require(os.access(directory or ".", os.W_OK), field, f"directory {directory or '.'} is not writable")
    require(not os.path.exists(path) or os.access(path, os.W_OK), field, f"{path} is not writable")
    # os.access says yes to root and knows nothing of file systems such as /proc: create
    # the file (removed again) or open an existing one for appending, as the write will
    if not os.path.exists(path) or os.path.isfile(path):
        existed = os.path.exists(path)
        try:
            with open(path, "a" if existed else "x"):
                pass
        except OSError as exc:
            raise InputError(field, f"cannot write {path} ({exc.strerror or type(exc).__name__})") from None
        if not existed:
            os.remove(path)
    return path


def save_instance(path: str | os.PathLike, instance: Instance) -> None:
    """Write ``instance`` as an rp-opt-window/1 ``.npz`` (compressed)."""
    window, cluster = instance.window, instance.cluster
    meta = {
        "format": FORMAT,
        "top_k": window.top_k,
        "model": instance.model,
        "cluster": {"dp": cluster.dp, "edp": cluster.edp, "ep": cluster.ep,
                    "capacity": cluster.capacity, "max_samples_per_cell": cluster.max_samples_per_cell},
        "cost": instance.cost.to_dict(),
    }
    meta.update({k: v for k, v in instance.meta.items() if k not in meta})
    arrays = {"lengths": window.lengths, "demand": window.demand, "meta": np.array(json.dumps(meta))}
    if not window.squared_attention:
        arrays["attn_work"] = window.attn_work
    # deflate level 1: a production window's demand compresses well at a tenth of the
    # time of numpy's default level
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


CLUSTER_KEYS = ("dp", "edp", "ep", "capacity", "max_samples_per_cell")
# the arrays of an rp-opt-window/1 file; others are left unread (with a warning)
ARRAYS = ("lengths", "demand", "attn_work", "meta")


def cluster_from_meta(data) -> Cluster:
    """The :class:`Cluster` of an instance file's ``meta.cluster`` object (:class:`Cluster`
    refuses a capacity above :data:`~rp_opt.window.MAX_CAPACITY`: it overflowed the row
    certifier). An unknown key is an error: a misspelt ``max_samples_per_cell`` would
    drop the sample limit m without a word."""
    require(isinstance(data, dict), "meta.cluster", "is missing or not an object")
    for key in ("dp", "edp", "ep", "capacity"):
        require(key in data, f"cluster.{key}", "is missing")
    unknown = sorted(str(k) for k in data if k not in CLUSTER_KEYS)
    require(not unknown, f"cluster.{unknown[0] if unknown else ''}",
            f"is not a cluster key (known: {', '.join(CLUSTER_KEYS)})")
    return Cluster(data["dp"], data["edp"], data["ep"], data["capacity"], data.get("max_samples_per_cell"))


def read_instance_arrays(path: str | os.PathLike, arrays=("lengths", "demand")) -> tuple[dict, dict]:
    """(meta, {name: array}) of an instance file, checking the archive, the named arrays
    and the meta format only (the caller validates the contents)."""
    path = os.fspath(path)
    require(os.path.exists(path), "file", f"{path} does not exist")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:  # EOFError: an empty file
        raise InputError("file", f"{path} is not an .npz archive ({type(exc).__name__})") from None
    # np.load reads a lone .npy array too (a renamed file): not an archive of named arrays
    require(isinstance(archive, np.lib.npyio.NpzFile), "file",
            f"{path} is not an .npz archive (it holds one .npy array)")
    names = set(archive.files)
    def member(key):
        try:
            return archive[key]
        except ValueError as exc:
            if "allow_pickle" in str(exc):
                raise InputError(key, f"array in {path} holds Python objects (dtype object); "
                                      "rp-opt reads numeric arrays only") from None
            raise InputError(key, f"array in {path} cannot be read ({type(exc).__name__})") from None
        except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            raise InputError(key, f"array in {path} cannot be read ({type(exc).__name__})") from None

    with archive:
        for key in (*arrays, "meta"):
            require(key in names, key, f"array is missing from {path}")
        try:
            meta = json.loads(str(member("meta")))
        except json.JSONDecodeError as exc:
            raise InputError("meta", f"is not valid JSON ({exc.msg} at position {exc.pos})") from None
        except RecursionError:
            raise InputError("meta", "is not valid JSON (nested too deeply)") from None
        require(isinstance(meta, dict), "meta", "must be a JSON object")
        # a meta nested a thousand deep loads, and then copying the instance recursed too deep
        require(_depth(meta) <= MAX_META_DEPTH, "meta", f"is nested more than {MAX_META_DEPTH} deep")
        require(meta.get("format") == FORMAT, "meta.format", f"must be {FORMAT!r}, got {meta.get('format')!r}")
        unknown = sorted(names - set(ARRAYS))
        if unknown:  # a misspelt attn_work would fall back to T^2 unseen
            log.warning("%s: array%s %s not read (%s holds %s)", path, "s" if len(unknown) > 1 else "",
                        ", ".join(unknown), FORMAT, ", ".join(ARRAYS))
        found = {key: member(key) for key in sorted(names & set(ARRAYS)) if key != "meta"}
    return meta, found


MAX_META_DEPTH = 64


def _depth(value, limit: int = MAX_META_DEPTH + 1) -> int:
    """Nesting depth of a JSON value (lists and objects), counted up to ``limit``."""
    depth, level = 0, [value]
    while level and depth < limit:
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x if isinstance(x, list) else ())]
        depth += 1
    return depth if not level else limit


def load_instance(path: str | os.PathLike) -> Instance:
    """Read and validate an instance file; :class:`InputError` on any problem."""
    meta, arrays = read_instance_arrays(path)
    # the arrays np.load just made are this function's alone: frozen as they are, the
    # window keeps them (its copy of a caller's array took 1.1 s and 400 MB at N = 16384)
    arrays = {key: _adopted(value) if isinstance(value, np.ndarray) else value for key, value in arrays.items()}
    require("top_k" in meta, "meta.top_k", "is missing")
    require("cost" in meta, "meta.cost", "is missing")
    window = Window(arrays["lengths"], arrays["demand"], meta["top_k"], arrays.get("attn_work"))
    cluster = cluster_from_meta(meta.get("cluster"))
    cost = CostModel.from_dict(meta["cost"])
    extra = {k: v for k, v in meta.items() if k not in ("format", "top_k", "model", "cluster", "cost")}
    return Instance(window, cluster, cost, str(meta.get("model", "custom")), extra)


FINGERPRINT_KEY = "window_fingerprint"


def window_fingerprint(window: Window) -> str:
    """A short identity of ``window``: the first 16 hex digits of the SHA-256 of its shape,
    top_k, lengths and demand (the bytes of the arrays as they are, hashed at once), and of
    its attention work Q where that is not T^2.

    The demand is kept in the smallest unsigned type that holds it (a function of its
    values), so equal windows give equal fingerprints however they were made or read.
    """
    digest = hashlib.sha256()
    digest.update(np.array([*window.demand.shape, window.top_k], dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(window.lengths, dtype="<i8"))
    demand = window.demand
    digest.update(np.ascontiguousarray(demand, dtype=demand.dtype.newbyteorder("<")))
    if not window.squared_attention:
        # attention work other than Q = T^2 changes every score: another window (T^2, the
        # default, adds nothing, so the fingerprints of such windows are as before)
        digest.update(np.ascontiguousarray(window.attn_work + 0.0, dtype="<f8"))   # -0.0 as 0.0
    return digest.hexdigest()[:16]


COST_FINGERPRINT_KEY = "cost_fingerprint"


def cost_fingerprint(cost) -> str:
    """A short identity of a :class:`~rp_opt.window.CostModel` (16 hex digits of the SHA-256
    of its stages and gamma, floats by their exact repr): a plan's score holds under the
    cost model it was scored with, so ``eval`` compares a claimed score only under the same."""
    parts = [[s.name, int(s.layers), repr(float(s.alpha)), repr(float(s.beta))] for s in cost.stages]
    text = json.dumps([parts, repr(float(cost.gamma))], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_fingerprint(data: dict, window: Window, field: str = "plan") -> None:
    """:class:`InputError` on ``field`` when the raw plan ``data`` carries a
    ``window_fingerprint`` other than ``window``'s (a plan made for another window); a plan
    without one (an older file) passes."""
    claimed = data.get(FINGERPRINT_KEY) if isinstance(data, dict) else None
    if claimed is None:
        return
    require(isinstance(claimed, str), field, f"{FINGERPRINT_KEY} must be a string, got {claimed!r}")
    ours = window_fingerprint(window)
    require(claimed == ours, field, f"plan was made for another window (fingerprint {claimed}, this window {ours})")


def plan_to_dict(plan: Plan, instance: Instance | None = None) -> dict:
    """The plan-file form of ``plan``, with the fingerprints of ``instance``'s window and
    cost model (the one its score is under) when given."""
    data = plan.to_dict()
    if instance is not None:
        data[FINGERPRINT_KEY] = window_fingerprint(instance.window)
        data[COST_FINGERPRINT_KEY] = cost_fingerprint(instance.cost)
    return data


def save_plan(path: str | os.PathLike, plan: Plan, instance: Instance | None = None) -> None:
    """Write the plan file (JSON); with ``instance``, stamped with its window's fingerprint
    (every command writes it so; readers refuse the plan for another window)."""
    with open(path, "w") as handle:
        json.dump(plan_to_dict(plan, instance), handle)
        handle.write("\n")


def read_json(path: str | os.PathLike, field: str = "file") -> object:
    """Parse a JSON file; :class:`InputError` on ``field`` when it is missing or not JSON."""
    path = os.fspath(path)
    require(os.path.exists(path), field, f"{path} does not exist")
    try:
        with open(path) as handle:
            return json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(field, f"{path} is not valid JSON ({exc})") from None
    except OSError as exc:  # a directory, no read permission
        raise InputError(field, f"{path} cannot be read ({exc.strerror or type(exc).__name__})") from None


def read_plan_file(path: str | os.PathLike, field: str = "plan") -> dict:
    """The raw plan dictionary of a plan file (for the checker, which wants it unvalidated);
    a file that is missing, not JSON or not an object is an :class:`InputError` on ``field``."""
    data = read_json(path, field)
    require(isinstance(data, dict), field, f"{os.fspath(path)} must hold a JSON object")
    for key in ("placement", "rows"):
        require(key in data, key, f"is missing from {os.fspath(path)}")
    return data


def placement_from_list(instance: Instance, placement) -> Placement:
    """A validated :class:`Placement` of ``instance`` from the plan-file form [L][E]; a
    rank that is not a 64-bit integer (0.5, true, 2**70) is named, never truncated."""
    require_integer_ranks(placement, int64=True)
    try:
        ranks = np.asarray(placement, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        raise InputError("placement", "must be a rectangular [L][E] list of integer ranks") from None
    window = instance.window
    require(ranks.shape == (window.num_layers, window.num_experts), "placement",
            f"shape {ranks.shape} does not match (L, E) = ({window.num_layers}, {window.num_experts})")
    return Placement(ranks, instance.cluster.ep)


def plan_from_dict(instance: Instance, data: dict) -> Plan:
    """A validated :class:`Plan` from the plan-file form (bijection and balance enforced)."""
    placement = placement_from_list(instance, data["placement"])
    layout = Layout.from_rows(data["rows"], instance.window.num_samples)
    require(layout.num_slots == instance.cluster.dp, "rows",
            f"have {layout.num_slots} slots, the cluster has D={instance.cluster.dp}")
    # the optional fields too: one line naming them, never a ValueError/TypeError traceback
    score = [] if data.get("score") is None else data["score"]
    stats = {} if data.get("stats") is None else data["stats"]
    if not (isinstance(score, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in score)):
        raise _bad("score", score, "a list of numbers")
    if not isinstance(stats, dict):
        raise _bad("stats", stats, "a JSON object")
    return Plan(placement, layout, str(data.get("objective", "sync")), tuple(float(x) for x in score), dict(stats))


def load_plan(path: str | os.PathLike, instance: Instance) -> Plan:
    """Read a plan file into a validated :class:`Plan` for ``instance`` (refused when it
    carries the fingerprint of another window)."""
    data = read_plan_file(path)
    check_fingerprint(data, instance.window)
    return plan_from_dict(instance, data)
