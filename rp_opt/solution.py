"""The two decisions of a plan: expert placement and sample layout.

Both are immutable. A :class:`Placement` is balanced by construction (E/P experts per rank
in every layer); a :class:`Layout` is a bijection by construction (it stores the cell of
each sample). Capacity, non-empty cells and the rectangular shape are properties of a
layout for a given window and are verified by :mod:`rp_opt.check`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InputError, integer, read_array, require, shown
from .window import _ArrayFields, _frozen


@dataclass(frozen=True, eq=False)
class Placement(_ArrayFields):
    """Per-layer map of logical experts to EP ranks, pi_l(e) = ranks[l, e].

    Parameters
    ----------
    ranks
        [L, E] integer array with values in [0, P); every rank holds exactly E/P experts
        of every layer.
    num_ranks
        P, an integer >= 1 that divides E (an integral float such as 4.0 counts as 4; a
        bool or a fractional value raises :class:`~rp_opt.errors.InputError`).

    ``==`` compares contents; a placement is not hashable.
    """

    ranks: np.ndarray
    num_ranks: int

    def __post_init__(self):
        ranks = read_array(self.ranks, "placement")  # ragged lists: one line, not numpy's traceback
        require(ranks.ndim == 2, "placement", f"must be [L, E], got shape {ranks.shape}")
        require(ranks.dtype.kind in "iu" or ranks.size == 0, "placement",
                f"must hold integer ranks, got dtype {ranks.dtype}")
        p = integer("placement.num_ranks", self.num_ranks, low=1)
        num_layers, num_experts = ranks.shape
        require(num_experts % p == 0, "placement", f"P={p} does not divide E={num_experts}")
        ranks = ranks.astype(np.int64)
        bad = np.argwhere((ranks < 0) | (ranks >= p))
        if bad.size:
            l, e = bad[0]
            raise InputError("placement", f"layer {l} expert {e} is on rank {ranks[l, e]}, outside [0, {p})")
        counts = rank_counts(ranks, p)
        wrong = np.argwhere(counts != num_experts // p)
        if wrong.size:
            l, q = wrong[0]
            raise InputError(
                "placement",
                f"layer {l} rank {q} holds {counts[l, q]} experts, not E/P={num_experts // p}",
            )
        object.__setattr__(self, "ranks", _frozen(ranks))
        object.__setattr__(self, "num_ranks", p)

    @property
    def num_layers(self) -> int:
        return int(self.ranks.shape[0])

    @property
    def num_experts(self) -> int:
        return int(self.ranks.shape[1])

    @classmethod
    def identity(cls, num_layers: int, num_experts: int, num_ranks: int) -> "Placement":
        """Expert e on rank e div (E/P) in every layer (the baseline).

        Parameters
        ----------
        num_layers, num_experts
            L and E, integers >= 0.
        num_ranks
            P, an integer >= 1 that divides E.

        Raises
        ------
        InputError
            A count that is not an integer in range (one line naming it), or P not dividing E.
        """
        num_layers = integer("placement.num_layers", num_layers, low=0)
        num_experts = integer("placement.num_experts", num_experts, low=0)
        num_ranks = integer("placement.num_ranks", num_ranks, low=1)
        per_rank = max(num_experts // num_ranks, 1)
        row = np.arange(num_experts) // per_rank
        return cls(np.tile(row, (num_layers, 1)), num_ranks)

    def experts_of_ranks(self) -> np.ndarray:
        """[L, P, E/P]: the experts held by every rank, in increasing expert order."""
        order = np.argsort(self.ranks, axis=1, kind="stable")
        return order.reshape(self.num_layers, self.num_ranks, -1)

    def to_list(self) -> list[list[int]]:
        return self.ranks.tolist()


def placement_for(placement, num_ranks: int, field: str = "placement", num_layers: int | None = None,
                  num_experts: int | None = None, *, none: bool = False) -> Placement | None:
    """``placement`` checked as one on ``num_ranks`` EP ranks (and, when given, for a
    window of ``num_layers`` x ``num_experts``): a one-line
    :class:`~rp_opt.errors.InputError` naming ``field`` otherwise (a bare array or a
    placement for another cluster used to fail deep inside a solver). ``none``: None
    passes."""
    if none and placement is None:
        return None
    require(isinstance(placement, Placement), field,
            f"must be a Placement{' or None' if none else ''}, got {type(placement).__name__}")
    if num_layers is not None:
        require(placement.ranks.shape == (num_layers, num_experts), field,
                f"has (L, E) = {placement.ranks.shape}, the window has ({num_layers}, {num_experts})")
    require(placement.num_ranks == num_ranks, field,
            f"has P={placement.num_ranks} ranks, the cluster has P={num_ranks}")
    return placement


def cell_samples(cell, field: str) -> list[int]:
    """The sample indices of one plan-file cell ``rows[r][d]``.

    The one parser of a cell for every reader of plan files (:meth:`Layout.from_rows` and
    the independent checker), so that they accept exactly the same files.

    Parameters
    ----------
    cell
        A list of sample indices: JSON integers or numpy integers (not booleans, floats,
        strings, ``null`` or nested lists).
    field
        Name of the cell in messages (``"rows[0][3]"``).

    Returns
    -------
    The indices as Python ints (range is the caller's check).
    """
    require(isinstance(cell, (list, tuple)), field, f"must be a list of sample indices, got {cell!r}")
    for i in cell:
        require(isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)), field,
                f"sample {i!r} is not an integer sample index")
    return [int(i) for i in cell]


def require_integer_ranks(placement, int64: bool = False) -> None:
    """Every entry of a plan-file placement [L][E] (nested lists) is an integer rank: not a
    bool (numpy would read JSON ``true`` as the rank 1), a float (1.0 included), a string
    or None; with ``int64``, also within 64-bit integers. The one check of rank entries
    for every reader of plan files (:func:`rp_opt.io.placement_from_list` and the
    independent checker), so that they name a bad rank in the same words.

    Raises
    ------
    InputError
        ``placement[l][e]: must be an integer rank, got 0.5``. Anything that is not a list
        of lists is left to the caller's shape check.
    """
    if not isinstance(placement, (list, tuple)):
        return
    for l, layer in enumerate(placement):
        for e, rank in enumerate(layer if isinstance(layer, (list, tuple)) else ()):
            require(isinstance(rank, (int, np.integer)) and not isinstance(rank, (bool, np.bool_))
                    and (not int64 or -2**63 <= rank < 2**63),
                    f"placement[{l}][{e}]", f"must be an integer rank, got {rank!r}")


def checked_ranks(values, num_ranks: int, field: str, shape: tuple, balanced: bool = True) -> np.ndarray:
    """``values`` as int64 ranks of one layer [E] or of every layer [L, E], checked.

    The one check of a rank assignment given to a placement routine (a local search's
    start, a layer model's warm start or current placement); :class:`Placement` checks its
    own, naming the expert.

    Parameters
    ----------
    values
        The ranks (array-like).
    num_ranks
        P: every rank in [0, P).
    field
        Name of the argument in messages.
    shape
        The shape ``values`` must have.
    balanced
        Also E/P experts on every rank of every layer.

    Raises
    ------
    InputError
        One line naming ``field``: another shape, a dtype that is not an integer, a rank
        outside [0, P), or (``balanced``) a rank without E/P experts.
    """
    raw = np.asarray(values)
    require(raw.shape == tuple(shape), field, f"must have shape {tuple(shape)}, got {raw.shape}")
    require(raw.dtype.kind in "iu", field, f"must hold integer ranks, got dtype {raw.dtype}")
    ranks = raw.astype(np.int64)   # a copy: the caller may change it
    if ranks.size and not bool(np.all((ranks >= 0) & (ranks < num_ranks))):
        raise InputError(field, f"must hold ranks in [0, {num_ranks - 1}], got {int(ranks.min())}..{int(ranks.max())}")
    if balanced and ranks.size:
        per_rank = ranks.shape[-1] // num_ranks
        counts = rank_counts(np.atleast_2d(ranks), num_ranks)
        bad = np.argwhere(counts != per_rank)
        if bad.size:
            layer, rank = (int(v) for v in bad[0])
            where = f"layer {layer} has" if ranks.ndim == 2 else "it has"
            raise InputError(field, f"must hold E/P = {per_rank} experts on every rank; {where} "
                                    f"{int(counts[layer, rank])} on rank {rank}")
    return ranks


def rank_counts(ranks: np.ndarray, num_ranks: int) -> np.ndarray:
    """[L, P]: number of experts each rank holds in each layer."""
    num_layers = ranks.shape[0]
    flat = ranks + num_ranks * np.arange(num_layers)[:, None]
    return np.bincount(flat.ravel(), minlength=num_layers * num_ranks).reshape(num_layers, num_ranks)


@dataclass(frozen=True, eq=False)
class Layout(_ArrayFields):
    """R rows x D slots of cells; ``cell_of[i] = r * D + d`` is the cell of sample i.

    Parameters
    ----------
    cell_of
        [N] integer array with values in [0, R*D).
    num_rows
        R, an integer >= 1.
    num_slots
        D, an integer >= 1.

    An integral float (2.0) counts as an integer; a bool or a fractional value of R or D
    raises :class:`~rp_opt.errors.InputError` naming the field. ``==`` compares contents;
    a layout is not hashable.
    """

    cell_of: np.ndarray
    num_rows: int
    num_slots: int

    def __post_init__(self):
        cell_of = read_array(self.cell_of, "layout")
        require(cell_of.ndim == 1, "layout", f"cell_of must be 1-D, got shape {cell_of.shape}")
        require(cell_of.dtype.kind in "iu" or cell_of.size == 0, "layout",
                f"cell_of must be integer, got {cell_of.dtype}")
        rows = integer("layout.num_rows", self.num_rows, low=1)
        slots = integer("layout.num_slots", self.num_slots, low=1)
        cell_of = cell_of.astype(np.int64)
        bad = np.flatnonzero((cell_of < 0) | (cell_of >= rows * slots))
        if bad.size:
            raise InputError("layout", f"sample {bad[0]} is in cell {cell_of[bad[0]]}, outside [0, {rows * slots})")
        object.__setattr__(self, "cell_of", _frozen(cell_of))
        object.__setattr__(self, "num_rows", rows)
        object.__setattr__(self, "num_slots", slots)

    @property
    def num_cells(self) -> int:
        return self.num_rows * self.num_slots

    @property
    def row_of(self) -> np.ndarray:
        return self.cell_of // self.num_slots

    @property
    def slot_of(self) -> np.ndarray:
        return self.cell_of % self.num_slots

    def cell_sizes(self) -> np.ndarray:
        """[R, D] number of samples in every cell."""
        return np.bincount(self.cell_of, minlength=self.num_cells).reshape(self.num_rows, self.num_slots)

    @classmethod
    def from_bins(cls, bin_of: np.ndarray, num_rows: int, num_slots: int) -> "Layout":
        """Cells from R*D bins: bin b becomes cell (b div D, b mod D)."""
        return cls(np.asarray(bin_of, dtype=np.int64), num_rows, num_slots)

    @classmethod
    def from_rows(cls, rows: list, num_samples: int) -> "Layout":
        """Build from nested lists rows[r][d] = sample indices (the plan-file form).

        Raises :class:`InputError` unless the lists are rectangular and every sample
        0..N-1 appears exactly once.
        """
        require(isinstance(rows, list) and len(rows) >= 1, "rows", "must be a non-empty list of rows")
        num_slots = len(rows[0]) if isinstance(rows[0], list) else -1
        cell_of = np.full(num_samples, -1, dtype=np.int64)
        for r, row in enumerate(rows):
            require(isinstance(row, list) and len(row) == num_slots and num_slots >= 1, f"rows[{r}]",
                    f"must be a list of {max(num_slots, 1)} slots")
            for d, cell in enumerate(row):
                for i in cell_samples(cell, f"rows[{r}][{d}]"):
                    require(0 <= i < num_samples, f"rows[{r}][{d}]", f"sample {i} is not in [0, {num_samples})")
                    require(cell_of[i] < 0, f"rows[{r}][{d}]", f"sample {i} appears twice")
                    cell_of[i] = r * num_slots + d
        missing = np.flatnonzero(cell_of < 0)
        require(missing.size == 0, "rows", f"sample {missing[0] if missing.size else 0} is in no cell")
        return cls(cell_of, len(rows), num_slots)

    def to_rows(self) -> list[list[list[int]]]:
        """Nested lists rows[r][d] = sorted sample indices."""
        order = np.argsort(self.cell_of, kind="stable")
        bounds = np.searchsorted(self.cell_of[order], np.arange(self.num_cells + 1))
        cells = [order[bounds[c]:bounds[c + 1]].tolist() for c in range(self.num_cells)]
        return [cells[r * self.num_slots:(r + 1) * self.num_slots] for r in range(self.num_rows)]

    def permute_rows(self, order) -> "Layout":
        """The layout whose row k is this layout's row order[k].

        Raises
        ------
        InputError
            On ``order`` unless it is a permutation of 0..R-1 (one line).
        """
        order = read_array(order, "order")
        rows = self.num_rows
        require(order.shape == (rows,), "order", f"must list the R={rows} rows once each, got shape {order.shape}")
        require(order.dtype.kind in "iu", "order", f"must hold integer row indices, got {shown(order)}")
        # every row exactly once: otherwise new_row below keeps uninitialised entries
        require(bool(np.array_equal(np.sort(order), np.arange(rows))), "order",
                f"is not a permutation of the rows 0..{rows - 1}, got {shown(order.tolist())}")
        new_row = np.empty(self.num_rows, dtype=np.int64)
        new_row[order] = np.arange(self.num_rows)
        return Layout(new_row[self.row_of] * self.num_slots + self.slot_of, self.num_rows, self.num_slots)
