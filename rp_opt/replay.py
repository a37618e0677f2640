"""Routing-replay adapters: the routing a rollout engine records -> demand counts a[N, L, E].

Three input forms are accepted (MODEL.md, "Data of one window"):

- **per sample**: a sequence of N integer arrays of shape [T_i, L, k], the top-k expert ids
  of every token of sample i at every MoE layer (what rollout engines return per sample);
- **padded**: one integer array [B, S, L, k] with an attention mask [B, S] (1 = a token of
  the sample, 0 = padding; ids at padded positions are ignored);
- **counts**: precomputed demand [N, L, E].

Counting is one ``np.bincount`` over flattened (sample, layer, expert) keys, in chunks of
samples so that the int64 count buffer stays bounded on production windows (N = 8192,
L = 48, E = 256 is 100M counts). Every problem raises :class:`~rp_opt.errors.InputError`
naming the sample, e.g. ``routing[3]: expert id 300 at token 17 layer 2 is outside [0, 256)``.

A caller that fills in E or k itself (the :class:`~rp_opt.planner.Planner` takes them from
its model spec when the call gives none) passes ``num_experts_from`` / ``top_k_from``, a
few words saying where the value came from; every message that depends on it then says so
(``... outside [0, 256) (E=256 from the model spec 'ling-tiny-like'; pass num_experts= if
your model has another E)``), so an error never names a value the user did not give
without saying whose it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .errors import InputError, integer, read_array, require
from .window import Window, _ArrayFields, _frozen, checked_lengths, compact_counts, routing_violation

_CHUNK_KEYS = 1 << 24  # counts per chunk of samples (128 MB of int64)
_SLICE_KEYS = 1 << 24  # routed ids per bincount call (see _count)


@dataclass(frozen=True, eq=False)
class Replay(_ArrayFields):
    """Demand and lengths recovered from replayed routing.

    Attributes
    ----------
    lengths
        T[N], tokens of every sample.
    demand
        a[N, L, E] (smallest unsigned dtype that holds it).
    top_k
        k, experts per token (None when the input was counts and k was not given).
    """

    lengths: np.ndarray
    demand: np.ndarray
    top_k: int | None

    def __post_init__(self):
        # read-only, and never the caller's memory (copied once when it may be): a replay
        # does not change when the arrays it was made from do. The demand_from_* functions
        # hand in arrays frozen already, which are kept as they are (no copy of 100 MB)
        for name in ("lengths", "demand"):
            value = getattr(self, name)
            object.__setattr__(self, name, _frozen(np.asarray(value), value))

    def window(self, top_k: int | None = None, attn_work=None) -> Window:
        """The :class:`~rp_opt.window.Window` of this replay."""
        k = top_k if top_k is not None else self.top_k
        if k is None:
            k = infer_top_k(self.lengths, self.demand)
        return Window(self.lengths, self.demand, k, attn_work)


def _as_int_array(value, field: str) -> np.ndarray:
    array = read_array(value, field)
    if array.dtype == object:
        raise InputError(field, "is ragged (nested lists of different lengths)")
    if array.dtype.kind == "b" or array.dtype.kind not in "iuf":
        raise InputError(field, f"must hold integer expert ids, got dtype {array.dtype}")
    if array.dtype.kind == "f":
        if array.size and not bool(np.all(np.isfinite(array) & (array == np.round(array)))):
            raise InputError(field, "holds a non-integer expert id")
        # said before the cast, which would wrap an id past int64 (1e20 read as -2^63)
        huge = np.abs(array) >= 2**62
        if huge.any():
            raise InputError(field, f"holds the expert id {array[huge][0]:g}, far outside any expert count")
        array = array.astype(np.int64)
    return array


def experts_note(num_experts: int, source: str | None) -> str:
    """`` (E=256 from SOURCE; pass num_experts= ...)`` for messages that depend on an E the
    caller did not give (``source``: where it came from); empty when ``source`` is None."""
    if source is None:
        return ""
    return f" (E={num_experts} from {source}; pass num_experts= if your model has another E)"


def top_k_note(k: int | None, source: str | None) -> str:
    """`` (k=8 from SOURCE; pass top_k= or lengths= ...)`` for messages that depend on a k the
    caller did not give; empty when ``source`` is None."""
    if source is None:
        return ""
    return f" (k={k} from {source}; pass top_k= or lengths= if your router differs)"


def _check_ids(ids: np.ndarray, num_experts: int, field: str, sample_of: np.ndarray | None = None,
               token_of: np.ndarray | None = None, num_experts_from: str | None = None) -> None:
    """Raise naming the first id outside [0, E); ``ids`` is [T, L, k] of one sample or a
    flattened batch with the sample and token of every row. ``num_experts_from``: where E
    came from when the caller did not give it (said in the message)."""
    bad = (ids < 0) | (ids >= num_experts)
    if not bad.any():
        return
    row, layer, _ = np.argwhere(bad)[0]
    value = ids[row, layer][bad[row, layer]][0]
    note = experts_note(num_experts, num_experts_from)
    if sample_of is None:
        raise InputError(field, f"expert id {value} at token {row} layer {layer} is outside [0, {num_experts}){note}")
    raise InputError(f"{field}[{sample_of[row]}]",
                     f"expert id {value} at token {token_of[row]} layer {layer} is outside [0, {num_experts}){note}")


def _check_distinct(ids: np.ndarray, field: str, sample_of: np.ndarray | None = None,
                    token_of: np.ndarray | None = None) -> None:
    """Raise naming the first token whose top-k lists an expert twice (a token picks k
    distinct experts); ``ids`` as for :func:`_check_ids`. Counts alone catch a repeat only
    when it lifts an expert above T_i tokens (``[[0, 0], [1, 2]]`` of a 2-token sample
    counts [2, 1, 1] and passed)."""
    k = ids.shape[2]
    if k < 2:
        return
    if k <= 8:
        # the k (k - 1) / 2 comparisons of contiguous columns take about half the time of a
        # sort along the short last axis (10^8 ids, k = 8: 0.36 s against 0.65 s); the sort
        # below then only names the repeat
        columns = [np.ascontiguousarray(ids[:, :, j]) for j in range(k)]
        if not any(np.any(columns[a] == columns[b]) for a in range(k) for b in range(a + 1, k)):
            return
    ordered = np.sort(ids, axis=2)
    repeat = ordered[:, :, 1:] == ordered[:, :, :-1]
    if not repeat.any():
        return
    row, layer, j = np.argwhere(repeat)[0]
    value = ordered[row, layer, j]
    if sample_of is None:
        raise InputError(field, f"token {row} lists expert {value} twice at layer {layer} (top-k ids must be distinct)")
    raise InputError(f"{field}[{sample_of[row]}]",
                     f"token {token_of[row]} lists expert {value} twice at layer {layer} (top-k ids must be distinct)")


def _count(sample: np.ndarray, ids: np.ndarray, num_samples: int, num_experts: int,
           out: np.ndarray, first: int) -> None:
    """Add the counts of ``ids`` [M, L, k] (token rows of samples ``sample`` [M], numbered from
    ``first``) into ``out[first:first + num_samples]``, at most :data:`_SLICE_KEYS` ids per
    bincount: one call over 10^8 ids (64 samples of 4096 tokens, L = 48, k = 8) took 2.5 s,
    the same ids in slices of 2^24 0.5 s (one call's int64 copy of the keys is 800 MB)."""
    _, num_layers, k = ids.shape
    # a chunk holds at most _CHUNK_KEYS counts, so int32 keys suffice (half the memory traffic)
    layer = np.arange(num_layers, dtype=np.int32)[None, :, None]
    bins = num_samples * num_layers * num_experts
    counts = None
    step = max(1, _SLICE_KEYS // (num_layers * k))
    for lo in range(0, ids.shape[0], step):
        rows = slice(lo, lo + step)
        base = ((sample[rows].astype(np.int32)[:, None, None] - first) * num_layers + layer) * num_experts
        keys = base + ids[rows].astype(np.int32, copy=False)
        part = np.bincount(keys.ravel(), minlength=bins)
        counts = part if counts is None else counts + part
    out[first:first + num_samples] = counts.reshape(num_samples, num_layers, num_experts)


def _chunks(num_samples: int, per_sample: int):
    step = max(1, _CHUNK_KEYS // max(per_sample, 1))
    for start in range(0, num_samples, step):
        yield start, min(num_samples, start + step)


def demand_from_samples(routing: Sequence, num_experts: int, num_layers: int | None = None,
                        top_k: int | None = None, *, num_experts_from: str | None = None) -> Replay:
    """Demand from per-sample routing arrays [T_i, L, k].

    Parameters
    ----------
    routing
        N integer arrays (numpy, lists, or CPU tensors) of shape [T_i, L, k].
    num_experts
        E, an integer >= 1; every id must be in [0, E).
    num_layers, top_k
        Expected L and k, integers >= 1 (default: those of the first sample; every sample
        must agree).
    num_experts_from
        Where E came from when the caller did not give it (``"the model spec 'x'"``): an
        id outside [0, E) then says so.

    Returns
    -------
    Replay
        lengths T_i, demand a[N, L, E] and k.

    Raises
    ------
    InputError
        A bad count (``top_k: must be an integer >= 1 or None, got 0``) or bad routing,
        naming the sample.
    """
    num_experts = integer("num_experts", num_experts, low=1)
    num_layers = integer("num_layers", num_layers, low=1, none=True)
    top_k = integer("top_k", top_k, low=1, none=True)
    require(isinstance(routing, (list, tuple)) or hasattr(routing, "__len__"), "routing",
            f"must be a sequence of per-sample arrays, got {type(routing).__name__}")
    require(len(routing) >= 1, "routing", "is empty: a window needs at least one sample")
    arrays = []
    for i, item in enumerate(routing):  # per-sample shape checks only; counting is vectorised
        ids = _as_int_array(item, f"routing[{i}]")
        require(ids.ndim == 3, f"routing[{i}]", f"must be [T, L, k], got shape {ids.shape}")
        if num_layers is None:
            num_layers = ids.shape[1]
        if top_k is None:
            top_k = ids.shape[2]
        require(ids.shape[0] >= 1, f"routing[{i}]", "has no tokens; every sample needs >= 1 token")
        require(ids.shape[1] == num_layers, f"routing[{i}]",
                f"has {ids.shape[1]} layers, expected L={num_layers}")
        require(ids.shape[2] == top_k, f"routing[{i}]", f"has k={ids.shape[2]} experts per token, expected k={top_k}")
        _check_ids(ids, num_experts, f"routing[{i}]", num_experts_from=num_experts_from)
        _check_distinct(ids, f"routing[{i}]")
        arrays.append(ids)
    _check_layers_k(num_layers, top_k, num_experts, num_experts_from)
    lengths = np.array([a.shape[0] for a in arrays], dtype=np.int64)
    n = lengths.size
    demand = np.empty((n, num_layers, num_experts), dtype=np.uint32)
    per_sample = int(num_layers * num_experts)
    for start, stop in _chunks(n, per_sample):
        ids = np.concatenate(arrays[start:stop], axis=0)
        sample = np.repeat(np.arange(start, stop, dtype=np.int64), lengths[start:stop])
        _count(sample, ids, stop - start, num_experts, demand, start)
    return Replay(_frozen(lengths), _frozen(compact_counts(demand)), int(top_k))


def _checked_mask(mask, b: int, s: int) -> np.ndarray:
    """The attention mask of a padded batch [B, S] as booleans (all True when ``mask`` is
    None); one :class:`~rp_opt.errors.InputError` line otherwise.

    A mask holds booleans or the numbers 0 and 1 (integers, or floats 0.0 and 1.0); any
    other value (2, -1, 0.5, NaN) is rejected naming the sample, the token and the value
    (``mask[0]: holds 2 at token 1; expected 0 or 1``) rather than read as a token: such a
    mask is not an attention mask (token-type or segment ids, a corrupted array), and
    counting it as one would give silently wrong lengths.
    """
    if mask is None:
        return np.ones((b, s), dtype=bool)
    mask = read_array(mask, "mask")
    require(mask.shape == (b, s), "mask", f"must have shape (B, S) = ({b}, {s}), got {mask.shape}")
    require(mask.dtype.kind in "biuf", "mask", f"must hold booleans or 0/1, got dtype {mask.dtype}")
    if mask.dtype.kind != "b":
        odd = np.argwhere((mask != 0) & (mask != 1))  # NaN is neither
        if odd.size:
            raise InputError(f"mask[{odd[0][0]}]", f"holds {mask[tuple(odd[0])].item()!r} at token {odd[0][1]}; "
                                                   f"expected 0 or 1")
        mask = mask != 0
    return mask


def demand_from_padded(routing, mask=None, num_experts: int | None = None,
                       num_layers: int | None = None, *, num_experts_from: str | None = None) -> Replay:
    """Demand from a padded batch [B, S, L, k] and its attention mask [B, S].

    Parameters
    ----------
    routing
        [B, S, L, k] integer expert ids; positions where ``mask`` is 0 are ignored.
    mask
        [B, S], 1 (or True) for a token, 0 for padding; default: every position is a token.
    num_experts
        E, an integer >= 1.
    num_layers
        Expected L, an integer >= 1 (optional).
    num_experts_from
        Where E came from when the caller did not give it (said in the messages).

    Returns
    -------
    Replay
        lengths (the mask's row sums), demand a[B, L, E] and k.
    """
    num_experts = integer("num_experts", num_experts, low=1)
    num_layers = integer("num_layers", num_layers, low=1, none=True)
    ids = _as_int_array(routing, "routing")
    require(ids.ndim == 4, "routing", f"a padded batch must be [B, S, L, k], got shape {ids.shape}")
    b, s, num_layers_seen, k = ids.shape
    require(b >= 1, "routing", "is empty: a window needs at least one sample")
    if num_layers is not None:
        require(num_layers_seen == num_layers, "routing", f"has {num_layers_seen} layers, expected L={num_layers}")
    _check_layers_k(num_layers_seen, k, num_experts, num_experts_from)
    mask = _checked_mask(mask, b, s)
    lengths = mask.sum(axis=1).astype(np.int64)
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        raise InputError(f"mask[{empty[0]}]", "sample has no tokens; every sample needs >= 1 token")
    sample_all, token_all = np.nonzero(mask)  # row-major: samples in order
    demand = np.empty((b, num_layers_seen, num_experts), dtype=np.uint32)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    for start, stop in _chunks(b, num_layers_seen * num_experts):
        rows = slice(bounds[start], bounds[stop])
        sample, token = sample_all[rows], token_all[rows]
        chunk = ids[sample, token]  # [M, L, k]
        _check_ids(chunk, num_experts, "routing", sample_of=sample, token_of=token,
                   num_experts_from=num_experts_from)
        _check_distinct(chunk, "routing", sample_of=sample, token_of=token)
        _count(sample, chunk, stop - start, num_experts, demand, start)
    return Replay(_frozen(lengths), _frozen(compact_counts(demand)), int(k))


def demand_from_counts(counts, num_experts: int | None = None, num_layers: int | None = None,
                       lengths=None, top_k: int | None = None, *, top_k_from: str | None = None,
                       num_experts_from: str | None = None) -> Replay:
    """Validate precomputed counts a[N, L, E].

    ``lengths`` default to T_i = sum_e a[i, 0, e] / k when ``top_k`` is given (a full replay
    routes k T_i tokens per layer); otherwise they must be given. Counts do not record k:
    top-2 counts read with k = 8 give lengths 4x too small, and nothing in the counts can
    always tell (below). Pass ``lengths`` whenever the trainer has them.

    Derived lengths are checked against what k distinct experts per token allow: every
    layer routes the same number S_i of tokens, S_i is a multiple of k, and no expert gets
    more than T_i = S_i / k of them (a token visits an expert at most once). For one
    layer these conditions are also sufficient (a T_i x E 0/1 matrix with row sums k and
    column sums a[i,l,e] exists exactly when sum_e a = k T_i and every a <= T_i, by the
    Gale-Ryser theorem), so counts that pass are the counts of some top-k routing: a wrong
    k is caught only when an expert gets more than S_i / k tokens, which skewed routing
    often does and uniform routing rarely does.

    Parameters
    ----------
    counts
        a[N, L, E], non-negative integers.
    num_experts, num_layers
        Expected E and L, integers >= 1 (optional).
    lengths
        T[N] (default: from the counts and ``top_k``).
    top_k
        k, an integer >= 1 (optional unless ``lengths`` is None).
    top_k_from, num_experts_from
        Where k and E came from when the caller did not give them (``"the model spec
        'ling-tiny-like'"``): every message that depends on them says so. With
        ``top_k_from`` and ``lengths``, the counts are also checked against k T_i (the
        :class:`~rp_opt.window.Window` check, with the note).

    Returns
    -------
    Replay

    Raises
    ------
    InputError
        A bad count (``top_k: must be an integer >= 1 or None, got 0``), counts of the
        wrong shape, negative or uneven counts, counts no top-k routing of the derived
        lengths gives (``counts[0]: expert 3 at layer 0 gets 40 of the 64 tokens routed per
        layer, more than T_i = 64 / 8 = 8 ...``).
    """
    num_experts = integer("num_experts", num_experts, low=1, none=True)
    num_layers = integer("num_layers", num_layers, low=1, none=True)
    top_k = integer("top_k", top_k, low=1, none=True)
    counts = read_array(counts, "counts")
    require(counts.ndim == 3, "counts", f"must be [N, L, E], got shape {counts.shape}")
    require(counts.shape[0] >= 1, "counts", "is empty: a window needs at least one sample")
    require(counts.shape[1] >= 1 and counts.shape[2] >= 1, "counts",
            f"shape {counts.shape} has no layers or no experts")
    if num_experts is not None:
        require(counts.shape[2] == num_experts, "counts", f"has {counts.shape[2]} experts, expected E={num_experts}"
                + experts_note(num_experts, num_experts_from))
    if num_layers is not None:
        require(counts.shape[1] == num_layers, "counts", f"has {counts.shape[1]} layers, expected L={num_layers}")
    # (unsigned counts cannot be negative; a signed array is scanned once by min, and only
    # a negative one again to name the count: argwhere alone took 0.3 s at N = 16384, L = 48)
    if counts.dtype.kind == "i" and counts.size and counts.min() < 0:
        neg = np.argwhere(counts < 0)
        if neg.size:
            i, l, e = neg[0]
            raise InputError(f"counts[{i}]", f"count {counts[i, l, e]} of expert {e} at layer {l} is negative")
    demand = compact_counts(counts, "counts")
    note = top_k_note(top_k, top_k_from)
    if lengths is None:
        require(top_k is not None, "lengths", "are needed with precomputed counts unless top_k is given")
        per_layer = demand.sum(axis=2, dtype=np.int64)  # [N, L]
        tokens = per_layer[:, 0]
        uneven = np.argwhere(per_layer != tokens[:, None])
        if uneven.size:
            i, l = uneven[0]
            raise InputError(f"counts[{i}]", f"layer {l} routes {per_layer[i, l]} tokens, layer 0 routes {tokens[i]}"
                                             " (lengths from counts need a full replay: "
                                             "give lengths for a partial one)")
        odd = np.flatnonzero(tokens % top_k != 0)
        if odd.size:
            raise InputError(f"counts[{odd[0]}]",
                             f"routes {tokens[odd[0]]} tokens per layer, not a multiple of k={top_k}{note}")
        empty = np.flatnonzero(tokens == 0)
        if empty.size:
            raise InputError(f"counts[{empty[0]}]", "routes no tokens; every sample needs >= 1 token "
                                                    "(give lengths for a partial replay)")
        lengths = tokens // top_k
        # derived lengths: every layer routes exactly k T_i, so only the visits can fail
        _check_counts(demand, lengths, top_k, note, derived=True)
    lengths = read_array(lengths, "lengths")
    require(lengths.shape == (counts.shape[0],), "lengths",
            f"must have shape ({counts.shape[0]},), got {lengths.shape}")
    lengths = checked_lengths(lengths)
    if top_k_from is not None and top_k is not None:
        # given lengths and a k the caller did not give: the Window's sum check
        # (Window.check_routing), here with the note saying where k came from
        _check_counts(demand, lengths, top_k, note, derived=False)
    # counts of a dtype compact already come back as they are: the caller's memory
    return Replay(_frozen(lengths), _frozen(demand, counts), top_k)


def _check_counts(demand: np.ndarray, lengths: np.ndarray, k: int, note: str, derived: bool) -> None:
    """:func:`rp_opt.window.routing_violation` of the counts, as an :class:`InputError` on
    ``counts[i]`` that ends with ``note``. ``derived`` lengths (T_i = S_i / k): every layer
    routes k T_i, so only an expert with more than T_i tokens can fail, and then the
    counts come from a router with fewer experts per token than k (its largest possible k
    said). Given lengths: the sum check alone (the Window checks the rest)."""
    bad = routing_violation(demand, lengths, None if derived else k, visits=derived)
    if bad is None:
        return
    kind, i, l, e, value = bad
    routed = int(lengths[i]) * k
    if kind == "visits":
        raise InputError(f"counts[{i}]", f"expert {e} at layer {l} gets {value} of the {routed} tokens routed per "
                                         f"layer, more than T_i = {routed} / {k} = {int(lengths[i])}: a token picks an "
                                         f"expert at most once, so these counts come from a router with "
                                         f"k <= {routed // value}{note}")
    raise InputError(f"counts[{i}]", f"layer {l} routes {value} tokens, more than k x T_i = "
                                     f"{k} x {int(lengths[i])} = {routed}{note}")


def replay(routing, *, num_experts: int, mask=None, num_layers: int | None = None,
           lengths=None, top_k: int | None = None, top_k_from: str | None = None,
           num_experts_from: str | None = None) -> Replay:
    """Demand counts from routing in any accepted form (module docstring).

    A 4-D array is a padded batch, a 3-D array with a 2-D ``mask`` too is not accepted (a
    single sample must be wrapped in a list); a 3-D array otherwise is precomputed counts;
    a list or tuple is per-sample routing.

    ``num_layers`` and ``top_k`` (optional) must be integers >= 1 whatever the form
    (:class:`~rp_opt.errors.InputError` naming the argument otherwise); a padded batch
    takes its k from the ids and ignores ``top_k``. ``top_k_from`` and ``num_experts_from``
    say where k and E came from when the caller did not give them
    (:func:`demand_from_counts`).
    """
    num_layers = integer("num_layers", num_layers, low=1, none=True)
    top_k = integer("top_k", top_k, low=1, none=True)
    if isinstance(routing, Replay):
        return routing
    if isinstance(routing, (list, tuple)):
        require(mask is None, "mask", "is only used with a padded [B, S, L, k] batch")
        return demand_from_samples(routing, num_experts, num_layers, top_k, num_experts_from=num_experts_from)
    array = read_array(routing, "routing")
    if array.ndim == 4:
        return demand_from_padded(array, mask, num_experts, num_layers, num_experts_from=num_experts_from)
    if array.ndim == 3:
        require(mask is None, "mask", "is only used with a padded [B, S, L, k] batch")
        return demand_from_counts(array, num_experts, num_layers, lengths, top_k, top_k_from=top_k_from,
                                  num_experts_from=num_experts_from)
    raise InputError("routing", f"must be per-sample arrays [T_i, L, k], a padded batch [B, S, L, k] or counts "
                                f"[N, L, E]; got an array of shape {array.shape}")


def lengths_from_routing(routing, mask=None) -> np.ndarray:
    """T[N] of per-sample routing (T_i rows each) or of a padded batch (mask sums).

    Parameters
    ----------
    routing
        N per-sample arrays [T_i, ...] (a list or tuple), or a padded batch [B, S, L, k].
    mask
        Only with a padded batch: [B, S] booleans or 0/1 numbers (1 = a token); default:
        every position is a token. Checked as :func:`demand_from_padded` checks it.

    Raises
    ------
    InputError
        One line naming the field and value: a mask value other than 0/1
        (``mask[0]: holds 2 at token 1; expected 0 or 1``), a mask of the wrong shape or
        dtype, a mask given with per-sample routing, or routing of another shape.
    """
    if isinstance(routing, (list, tuple)):
        require(mask is None, "mask", "is only used with a padded [B, S, L, k] batch")
        lengths = []
        for i, item in enumerate(routing):
            shape = _shape(item, f"routing[{i}]")
            require(len(shape) >= 1, f"routing[{i}]", f"must be [T, L, k], got shape {shape}")
            lengths.append(shape[0])
        return np.array(lengths, dtype=np.int64)
    shape = _shape(routing, "routing")
    require(len(shape) == 4, "routing", f"lengths need per-sample arrays or a padded batch, got shape {shape}")
    return _checked_mask(mask, shape[0], shape[1]).sum(axis=1).astype(np.int64)


def _shape(value, field: str) -> tuple:
    """``np.shape(value)``, or the one-line :class:`InputError` of :func:`read_array` on
    ``field`` when numpy cannot read it (ragged nested lists)."""
    try:
        return np.shape(value)
    except Exception:  # ragged lists: numpy >= 1.24 raises ValueError
        return read_array(value, field).shape


def infer_top_k(lengths: np.ndarray, demand: np.ndarray) -> int:
    """k of counts: the most routed tokens per token over samples and layers (>= 1)."""
    per_layer = demand.sum(axis=2, dtype=np.int64)
    return max(1, int(np.ceil((per_layer / np.asarray(lengths)[:, None]).max())))


def _check_layers_k(num_layers: int, k: int, num_experts: int, num_experts_from: str | None = None) -> None:
    require(num_layers >= 1, "routing", "has no layers")
    require(1 <= k <= num_experts, "routing", f"has k={k} experts per token; needs 1 <= k <= E={num_experts}"
            + experts_note(num_experts, num_experts_from))

