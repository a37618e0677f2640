"""Problem data of one optimizer step: the window of samples and the cluster.

Symbols follow MODEL.md: N samples with lengths T_i and attention work Q_i, routed demand
a[i,l,e] over L MoE layers and E experts; a cluster of D DP slots in G EDP shards, P EP
ranks per shard, cell capacity C and an optional per-cell sample limit m.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, fields

import numpy as np

from .errors import InputError, integer, number, read_array, require, shown

# the read-only arrays _frozen made (by id), so that their views are known to be safe to share
_OWNERS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _frozen(array: np.ndarray, caller: np.ndarray | None = None) -> np.ndarray:
    """``array`` as problem data: C-contiguous, read-only, in memory no one else can write.

    The result is a read-only view of a read-only array made here; numpy refuses to make
    such a view writable again, so data checked once stay as they were checked. Data
    frozen here before (another window's arrays, slices of them) are shared as they are.

    Parameters
    ----------
    array
        The checked data.
    caller
        The array the caller passed (numpy's reading of it), or None when ``array`` is
        memory only the calling constructor holds. ``array`` is copied, once, when it
        may share memory with ``caller``: the caller's array stays writable, and its later
        changes do not reach the copy.
    """
    if _is_frozen(array):
        return array
    private = array.flags.owndata and array.flags.c_contiguous \
        and (caller is None or not np.may_share_memory(array, caller))
    owner = array if private else np.array(array, order="C")
    owner.setflags(write=False)
    _OWNERS[id(owner)] = owner
    return owner.view()


def _adopted(array: np.ndarray) -> np.ndarray:
    """:func:`_frozen` for an array whose memory no one else holds (what ``np.load`` just
    returned: a reshaped view of a buffer of its own): its buffer, and ``array`` itself,
    are frozen in place, not copied (the copy took 1.1 s and 400 MB at N = 16384). Any
    other view of that buffer the caller kept stays writable: the caller must hold none.
    An array that is not such a view is copied."""
    owner = array if array.base is None else array.base
    if not (isinstance(owner, np.ndarray) and owner.flags.owndata and owner.flags.c_contiguous
            and array.flags.c_contiguous and owner.dtype == array.dtype and owner.nbytes == array.nbytes):
        return _frozen(array)
    owner.setflags(write=False)
    array.setflags(write=False)  # the caller's view too: no writable reference is left
    _OWNERS[id(owner)] = owner
    return owner.reshape(array.shape).view()


def _is_frozen(array: np.ndarray) -> bool:
    """Whether ``array`` is a contiguous view of an array :func:`_frozen` made (read-only
    for good: no one holds a writable reference to its memory)."""
    base = array.base
    return base is not None and _OWNERS.get(id(base)) is base and array.flags.c_contiguous


class _ArrayFields:
    """``==``, ``hash`` and copies for frozen dataclasses that hold numpy arrays.

    The dataclass ``==`` compares tuples of fields, and an array field made it raise
    "truth value of an array is ambiguous". Here ``==`` compares contents (arrays by
    shape and values, other fields with ``==``; fields with ``compare=False`` are skipped),
    and the objects are unhashable (``hash`` raises :class:`TypeError`), like the arrays
    they hold. Subclasses are declared with ``eq=False`` so that the dataclass keeps these.
    Copies (``copy``, ``deepcopy``, ``pickle``) keep their arrays read-only.
    """

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        for f in fields(self):
            if not f.compare:
                continue
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, np.ndarray) or isinstance(theirs, np.ndarray):
                if not (isinstance(mine, np.ndarray) and isinstance(theirs, np.ndarray)
                        and mine.shape == theirs.shape and np.array_equal(mine, theirs)):
                    return False
            elif not mine == theirs:
                return False
        return True

    __hash__ = None

    def __setstate__(self, state):
        # a copy or an unpickled object holds new arrays, which numpy makes writable: they
        # are frozen as the constructor freezes its own (they are private: no copy)
        for name, value in state.items():
            object.__setattr__(self, name, _frozen(value) if isinstance(value, np.ndarray) else value)


def compact_counts(demand: np.ndarray, name: str = "demand") -> np.ndarray:
    """Return ``demand`` as the smallest unsigned integer type that holds it.

    A production window (N=4096, L=48, E=256) holds 50M counts: uint16 keeps it at 100 MB.
    ``demand`` itself comes back (no copy) when it already has that type; :class:`Window`
    copies such an array of the caller's once, when it freezes it.
    """
    demand = np.asarray(demand)
    if demand.size == 0:
        return demand.astype(np.uint16)
    if demand.dtype.kind == "f":
        require(bool(np.all(np.isfinite(demand))), name, "holds a non-finite value")
        require(bool(np.all(demand == np.round(demand))), name, "holds a non-integer value")
    elif demand.dtype.kind not in "iu":
        raise InputError(name, f"must be integer counts, got dtype {demand.dtype}")
    low = demand.min()
    require(low >= 0, name, f"holds a negative count {low}")
    high = int(demand.max())
    for dtype in (np.uint16, np.uint32, np.uint64):
        if high <= np.iinfo(dtype).max:
            return demand.astype(dtype, copy=False)
    raise InputError(name, f"count {high} is too large")  # pragma: no cover


def routing_violation(demand: np.ndarray, lengths: np.ndarray, k: int | None,
                      visits: bool = True) -> tuple | None:
    """The first sign that counts ``demand`` [N, L, E] cannot come from routing each of
    T_i tokens to k distinct experts, or None: ``("visits", i, l, e, count)`` when expert e
    gets more than T_i tokens of sample i at layer l (a token picks an expert at most
    once; ``visits`` False: not checked), else ``("routed", i, l, None, total)`` when the
    layer routes more than k T_i (``k`` None: not checked). Vectorised: a max and a sum
    over the experts."""
    lengths = np.asarray(lengths)[:, None]
    most = None
    if visits:
        most = demand.max(axis=2)  # [N, L]
        bad = np.argwhere(most > lengths)
        if bad.size:
            i, l = (int(x) for x in bad[0])
            return "visits", i, l, int(np.argmax(demand[i, l])), int(most[i, l])
    if k is None or demand.size == 0:
        return None
    # a bound on the largest count: the dtype's (no pass over a[i,l,e]: this runs on the
    # Planner's replay path), else the counts' own maximum
    largest = int(np.iinfo(demand.dtype).max) if demand.dtype.kind in "iu" else None
    if largest is None or demand.shape[2] * largest >= 2**63:
        largest = int((most if most is not None else demand).max())
    if max(k * int(lengths.max()), demand.shape[2] * largest) < 2**63:
        routed, limit = demand.sum(axis=2, dtype=np.int64), k * lengths
    else:
        # k T_i or a layer's sum beyond int64 (lengths near 2^62): exact Python integers;
        # in int64, 4 x 2^61 wrapped to -2^63 and one routed token was "more than" that
        routed, limit = demand.astype(object).sum(axis=2), lengths.astype(object) * k
    bad = np.argwhere(routed > limit)
    if bad.size:
        i, l = (int(x) for x in bad[0])
        return "routed", i, l, None, int(routed[i, l])
    return None


def checked_lengths(lengths: np.ndarray, field: str = "lengths") -> np.ndarray:
    """``lengths`` (T_i, an array) as int64 when every entry is an integer >= 1 (an integral
    float such as 3.0 counts); else a one-line :class:`InputError` naming the first bad
    sample (2.5 is not truncated to 2, NaN or inf not read as -2^63, a float of 2^62 or
    more said to be too large), or the sum when it reaches 2^62."""
    if lengths.dtype.kind == "f":
        odd = np.flatnonzero(~(np.isfinite(lengths) & (lengths == np.round(lengths))))
        if odd.size:
            raise InputError(field, f"sample {odd[0]} has length {lengths[odd[0]]}, not an integer")
        # whole floats of 2^62 or more are integers, but too large to be a sample's tokens
        # (the sums below would overflow 64-bit integers): said so, not "not an integer"
        huge = np.flatnonzero(lengths >= 2.0**62)
        if huge.size:
            raise InputError(field, f"sample {huge[0]} has length {lengths[huge[0]]:.6g}, too large: at least 2^62 "
                                    "tokens (sums would overflow 64-bit integers)")
        short = np.flatnonzero(lengths < 1)
        if short.size and lengths[short[0]] <= -2.0**62:  # would not survive the cast to int64 below
            raise InputError(field, f"sample {short[0]} has length {lengths[short[0]]:.6g}; "
                                    "every sample needs >= 1 token")
        lengths = np.maximum(lengths, -2.0**62)  # a later -1e300 (an earlier sample is named) casts cleanly
    elif lengths.dtype.kind not in "iu":
        raise InputError(field, f"must be integers, got dtype {lengths.dtype}")
    elif lengths.dtype.kind == "u" and lengths.size:
        huge = np.flatnonzero(lengths > np.iinfo(np.int64).max)  # would wrap to negatives
        if huge.size:
            raise InputError(field, f"sample {huge[0]} has length {int(lengths[huge[0]])}, beyond 64-bit integers")
    lengths = lengths.astype(np.int64)
    short = np.flatnonzero(lengths < 1)
    if short.size:
        raise InputError(field, f"sample {short[0]} has length {lengths[short[0]]}; every sample needs >= 1 token")
    # sums of lengths (a cell's, a row's, the window's) must not wrap around in int64
    total = float(lengths.sum(dtype=np.float64))
    require(total < 2.0**62, field, f"sum to {total:.4g} tokens, beyond 2^62 (sums would overflow 64-bit integers)")
    return lengths


@dataclass(frozen=True, eq=False)
class Window(_ArrayFields):
    """Samples of one optimizer step and their replayed routing.

    The window keeps its own read-only copy of every array it is given (no copy of data
    already frozen by another window): the caller's arrays stay writable, and changing
    them later does not change the window. ``==`` compares contents; a window is not
    hashable.

    Parameters
    ----------
    lengths
        T[N], tokens of each sample that train (integers >= 1).
    demand
        a[N, L, E], tokens of sample i routed to expert e at MoE layer l (integers >= 0).
    top_k
        Experts each token is routed to.
    attn_work
        Q[N], attention work of each sample; defaults to T^2.
    """

    lengths: np.ndarray
    demand: np.ndarray
    top_k: int
    attn_work: np.ndarray | None = None

    def __post_init__(self):
        lengths = read_array(self.lengths, "lengths")
        require(lengths.ndim == 1, "lengths", f"must be 1-D [N], got shape {lengths.shape}")
        require(lengths.size >= 1, "lengths", "is empty: a window needs at least one sample")
        lengths = checked_lengths(lengths)
        n = lengths.size

        given = demand = read_array(self.demand, "demand")
        require(demand.ndim == 3, "demand", f"must be 3-D [N, L, E], got shape {demand.shape}")
        require(demand.shape[0] == n, "demand", f"has {demand.shape[0]} samples but lengths has {n}")
        require(demand.shape[1] >= 1 and demand.shape[2] >= 1, "demand",
                f"shape {demand.shape} has no layers or no experts")
        demand = compact_counts(demand)

        k = integer("top_k", self.top_k, 1)
        require(k <= demand.shape[2], "top_k", f"{k} exceeds the {demand.shape[2]} experts")

        if self.attn_work is None:
            attn_work = lengths.astype(np.float64) ** 2
        else:
            attn_work = read_array(self.attn_work, "attn_work")
            require(attn_work.dtype.kind in "iuf", "attn_work", f"must be real numbers, got dtype {attn_work.dtype}")
            attn_work = attn_work.astype(np.float64)
            require(attn_work.shape == (n,), "attn_work", f"must have shape ({n},), got {attn_work.shape}")
            require(bool(np.all(np.isfinite(attn_work))), "attn_work", "holds a non-finite value")
            neg = np.flatnonzero(attn_work < 0)
            if neg.size:
                raise InputError("attn_work", f"sample {neg[0]} has negative work {attn_work[neg[0]]}")

        object.__setattr__(self, "lengths", _frozen(lengths))
        object.__setattr__(self, "demand", _frozen(demand, given))
        object.__setattr__(self, "attn_work", _frozen(attn_work))
        object.__setattr__(self, "top_k", k)
        self.check_routing()

    @property
    def num_samples(self) -> int:
        """N."""
        return int(self.lengths.size)

    @property
    def num_layers(self) -> int:
        """L."""
        return int(self.demand.shape[1])

    @property
    def num_experts(self) -> int:
        """E."""
        return int(self.demand.shape[2])

    @property
    def squared_attention(self) -> bool:
        """Whether the attention work is the default Q_i = T_i^2 for every sample (window
        files then store no ``attn_work``, and it adds nothing to the fingerprint)."""
        return bool(np.array_equal(self.attn_work, self.lengths.astype(np.float64) ** 2))

    def expert_load(self) -> np.ndarray:
        """Aggregate load of every expert over the window, load[l, e] = sum_i a[i,l,e]."""
        return self.demand.sum(axis=0, dtype=np.int64)

    def check_routing(self) -> None:
        """Reject physically impossible routing (every window runs it on construction): a
        token picks k distinct experts, so a[i,l,e] <= T_i and sum_e a[i,l,e] <= k T_i
        (partial replays, with less, pass).

        :class:`InputError` on ``demand`` naming the first offending sample, layer and value.
        """
        bad = routing_violation(self.demand, self.lengths, self.top_k)
        if bad is None:
            return
        kind, i, l, e, value = bad
        if kind == "visits":
            raise InputError("demand", f"sample {i}, layer {l}: expert {e} gets {value} tokens from a "
                                       f"sample of {int(self.lengths[i])} tokens "
                                       "(a token picks an expert at most once)")
        raise InputError("demand", f"sample {i}, layer {l} routes {value} tokens, more than "
                                   f"top_k x T = {self.top_k} x {int(self.lengths[i])} = "
                                   f"{self.top_k * int(self.lengths[i])}")

    def subset(self, samples) -> "Window":
        """The window restricted to ``samples`` (indices in [0, N), repeats allowed), in
        that order.

        Raises
        ------
        InputError
            On ``samples``: not a 1-D list of integers, or an index outside [0, N) (one
            line naming the first).
        """
        samples = read_array(samples, "samples")
        require(samples.ndim == 1, "samples", f"must be a 1-D list of sample indices, got shape {samples.shape}")
        require(samples.dtype.kind in "iu" or samples.size == 0, "samples",
                f"must hold integer sample indices, got {shown(samples)}")
        samples = samples.astype(np.int64)
        outside = np.flatnonzero((samples < 0) | (samples >= self.num_samples))
        if outside.size:
            raise InputError("samples", f"index {int(samples[outside[0]])} (position {int(outside[0])}) is not a "
                                        f"sample of the window, outside [0, {self.num_samples})")
        # the gathered demand is a fresh copy: frozen as it is, the new window shares it
        return Window(self.lengths[samples], _frozen(self.demand[samples]), self.top_k, self.attn_work[samples])


MAX_CAPACITY = 2**31 - 1  # tokens per cell; the certifier's bounds and the baselines compute in int64


@dataclass(frozen=True)
class Cluster:
    """Parallel layout of the trainer.

    Parameters
    ----------
    dp
        D, data-parallel slots (one microbatch per slot per row).
    edp
        G, EDP shards; slot d belongs to shard d div (D/G). G divides D.
    ep
        P, EP ranks per shard.
    capacity
        C, token capacity of one cell (microbatch), at most :data:`MAX_CAPACITY`.
    max_samples_per_cell
        m, most samples in one cell, or None for no limit.
    """

    dp: int
    edp: int
    ep: int
    capacity: int
    max_samples_per_cell: int | None = None

    def __post_init__(self):
        for name in ("dp", "edp", "ep", "capacity"):
            object.__setattr__(self, name, integer(f"cluster.{name}", getattr(self, name), 1))
        # what the window file refuses too (rp_opt.io): 2^63 overflowed the baselines and the exact solver
        require(self.capacity <= MAX_CAPACITY, "cluster.capacity",
                f"must be at most {MAX_CAPACITY} tokens, got {self.capacity!r}")
        require(self.dp % self.edp == 0, "cluster.edp", f"G={self.edp} does not divide D={self.dp}")
        object.__setattr__(self, "max_samples_per_cell",
                           integer("cluster.max_samples_per_cell", self.max_samples_per_cell, 1, none=True))

    @property
    def slots_per_shard(self) -> int:
        """D/G."""
        return self.dp // self.edp

    def shard_of_slot(self) -> np.ndarray:
        """g(d) = d div (D/G) for every slot d."""
        return np.arange(self.dp) // self.slots_per_shard

    def check_experts(self, num_experts: int) -> None:
        """Check that E = ``num_experts`` experts spread evenly over the P ranks."""
        require(num_experts % self.ep == 0, "cluster.ep", f"P={self.ep} does not divide E={num_experts}")

    def validate_window(self, window: Window) -> None:
        """Check that ``window`` can run on this cluster at all (E divisible by P, T_i <= C)."""
        self.check_experts(window.num_experts)
        too_long = np.flatnonzero(window.lengths > self.capacity)
        if too_long.size:
            i = int(too_long[0])
            raise InputError(
                "lengths",
                f"sample {i} has {window.lengths[i]} tokens, more than the capacity C={self.capacity}",
            )


@dataclass(frozen=True)
class Stage:
    """One attention stage: n_s layers with coefficients alpha_s (per token), beta_s (per unit of Q)."""

    name: str
    layers: int
    alpha: float
    beta: float

    def __post_init__(self):
        require(isinstance(self.name, str) and self.name != "", "cost.stages.name",
                f"must be a non-empty string, got {self.name!r}")
        prefix = f"cost.stages[{self.name}]"
        object.__setattr__(self, "layers", integer(f"{prefix}.layers", self.layers, 0))
        for key in ("alpha", "beta"):
            object.__setattr__(self, key, number(f"{prefix}.{key}", getattr(self, key), 0))


_STAGE_KEYS = ("name", "layers", "alpha", "beta")


def _stage(stage, k: int) -> Stage:
    """Entry ``k`` of :attr:`CostModel.stages`: a :class:`Stage`, or a dict with exactly
    the keys of one (one line naming an unexpected or missing key otherwise)."""
    if isinstance(stage, Stage):
        return stage
    require(isinstance(stage, dict), f"cost.stages[{k}]", f"must be a Stage or a dict, got {type(stage).__name__}")
    unknown = [key for key in stage if key not in _STAGE_KEYS]
    if unknown:
        raise InputError(f"cost.stages[{k}]", f"has an unexpected key {unknown[0]!r} "
                                              f"(a stage has {', '.join(_STAGE_KEYS)})")
    missing = [key for key in _STAGE_KEYS if key not in stage]
    require(not missing, f"cost.stages[{k}]", f"misses {missing}")
    return Stage(**stage)


@dataclass(frozen=True)
class CostModel:
    """Coefficients of the modelled step cost (MODEL.md, "Cost of a layout").

    Parameters
    ----------
    stages
        Attention stages; A[r,g] = sum_s n_s max_{d in g}(alpha_s T_{r,d} + beta_s Q_{r,d}).
    gamma
        Cost of one routed token through one expert; X[r,g] = gamma sum_l max_p W[r,g,l,p].
    """

    stages: tuple[Stage, ...]
    gamma: float

    def __post_init__(self):
        require(isinstance(self.stages, (list, tuple)), "cost.stages",
                f"must be a list of stages (Stage objects or dicts), got {type(self.stages).__name__}")
        stages = tuple(_stage(s, k) for k, s in enumerate(self.stages))
        require(len(stages) >= 1, "cost.stages", "needs at least one attention stage")
        names = [s.name for s in stages]
        require(len(set(names)) == len(names), "cost.stages", f"stage names repeat: {names}")
        object.__setattr__(self, "stages", stages)
        object.__setattr__(self, "gamma", number("cost.gamma", self.gamma, 0))

    @property
    def layers(self) -> np.ndarray:
        """n_s of every stage."""
        return np.array([s.layers for s in self.stages], dtype=np.float64)

    @property
    def alpha(self) -> np.ndarray:
        """alpha_s of every stage."""
        return np.array([s.alpha for s in self.stages], dtype=np.float64)

    @property
    def beta(self) -> np.ndarray:
        """beta_s of every stage."""
        return np.array([s.beta for s in self.stages], dtype=np.float64)

    def to_dict(self) -> dict:
        return {
            "stages": [{"name": s.name, "layers": s.layers, "alpha": s.alpha, "beta": s.beta} for s in self.stages],
            "gamma": self.gamma,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "CostModel":
        require(isinstance(data, dict), "cost", f"must be an object, got {type(data).__name__}")
        # an extra key (a typo beside the real one, a calibration report's fields) was
        # dropped silently
        unknown = sorted(map(str, set(data) - {"stages", "gamma"}))
        require(not unknown, "cost", f"unknown keys {unknown} (a cost model has 'stages' and 'gamma')")
        require("stages" in data, "cost.stages", "is missing")
        require("gamma" in data, "cost.gamma", "is missing")
        require(isinstance(data["stages"], list), "cost.stages", "must be a list")
        stages = []
        for k, s in enumerate(data["stages"]):
            require(isinstance(s, dict), f"cost.stages[{k}]", "must be an object")
            missing = {"name", "layers", "alpha", "beta"} - set(s)
            require(not missing, f"cost.stages[{k}]", f"misses {sorted(missing)}")
            unknown = sorted(map(str, set(s) - {"name", "layers", "alpha", "beta"}))
            require(not unknown, f"cost.stages[{k}]",
                    f"unknown keys {unknown} (a stage has 'name', 'layers', 'alpha' and 'beta')")
            stages.append(Stage(str(s["name"]), s["layers"], s["alpha"], s["beta"]))
        return cls(tuple(stages), data["gamma"])

    @classmethod
    def from_model(cls, spec) -> "CostModel":
        """FLOP-based default coefficients of a model spec (see :mod:`rp_opt.models`)."""
        from .models import cost_from_spec

        return cost_from_spec(spec)


@dataclass(frozen=True, eq=False)
class Instance(_ArrayFields):
    """A window, the cluster it runs on and the cost model: everything a planner needs.

    ``window``, ``cluster`` and ``cost`` must be a :class:`Window`, a :class:`Cluster` and
    a :class:`CostModel` (:class:`~rp_opt.errors.InputError` naming the field and the type
    received otherwise). ``==`` compares contents (not ``meta``); an instance is not
    hashable.
    """

    window: Window
    cluster: Cluster
    cost: CostModel
    model: str = "custom"
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        for name, kind in (("window", Window), ("cluster", Cluster), ("cost", CostModel)):
            value = getattr(self, name)
            require(isinstance(value, kind), name, f"must be a {kind.__name__}, got {type(value).__name__}")
        self.cluster.validate_window(self.window)
