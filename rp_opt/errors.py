"""Errors rp-opt raises for bad input, and the checks of scalar inputs.

Every message is one line naming the field and the offending value, so that the CLI can
print it as it is (exit code 2) and a trainer can log it without a traceback.

:func:`integer`, :func:`number` and :func:`switch` are the one set of rules for scalar
inputs (counts, seconds, coefficients, on/off options) wherever they come from: Python
and numpy values, JSON files, and with ``text=True`` the command line's strings. A bad
value raises :class:`InputError` with ``must be <what>, got <repr(value)>``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
_NONE = ("none", "null")
_LONGEST_VALUE = 120  # characters of a value's repr shown in a message
MAX_SEED = 2**31 - 1  # the largest seed: CP-SAT's random_seed is a 32-bit integer
MAX_WORKERS = 256  # the most processes or solver threads one planner call starts


class InputError(ValueError):
    """Bad input data: a field holds a value the model does not accept.

    Parameters
    ----------
    field
        Dotted name of the offending field (``"lengths"``, ``"cluster.dp"``).
    message
        What is wrong with it, naming the value.
    """

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


def require(condition: bool, field: str, message: str) -> None:
    """Raise :class:`InputError` for ``field`` when ``condition`` is false."""
    if not condition:
        raise InputError(field, message)


def integer(field: str, value, low=None, high=None, *, text: bool = False, none: bool = False,
            hint: str | None = None) -> int | None:
    """``value`` as an ``int`` within [``low``, ``high``].

    Parameters
    ----------
    field
        Name of the input, for the message.
    value
        A Python or numpy integer, or an integral finite float (``8.0`` is 8); never a
        bool. With ``text``, also a string that parses as such (``"3"``, ``" 3 "``, ``"3.0"``).
    low, high
        Inclusive bounds; None: unbounded on that side.
    text
        Accept strings (values from the command line or ``--option KEY=VALUE``).
    none
        None (and with ``text`` the strings ``"none"`` and ``"null"``) pass and give None.
    hint
        A few words on the meaning, shown in parentheses after what a valid value is.

    Returns
    -------
    int or None

    Raises
    ------
    InputError
        ``<field>: must be an integer >= 1, got 0`` (one line).
    """
    what = "an integer" + _span(low, high) + (" or None" if none else "")
    if none and is_none(value, text):
        return None
    out = _as_integer(value, text)
    if out is not None and (low is None or out >= low) and (high is None or out <= high):
        return out
    raise _bad(field, value, what, hint)


def number(field: str, value, low=None, high=None, *, text: bool = False, none: bool = False,
           above=None, hint: str | None = None) -> float | None:
    """``value`` as a finite ``float`` within [``low``, ``high``] (or above ``above``).

    Parameters
    ----------
    field
        Name of the input, for the message.
    value
        A finite real number (Python or numpy), not a bool. With ``text``, also a string
        that parses as a finite float.
    low, high
        Inclusive bounds; None: unbounded on that side.
    above
        Strict lower bound instead of ``low`` (``above=0``: "> 0", e.g. a time limit).
    text, none, hint
        As for :func:`integer`: accept strings, accept None, words shown after what a
        valid value is.

    Returns
    -------
    float or None

    Raises
    ------
    InputError
        ``<field>: must be a finite number > 0, got inf`` (one line).
    """
    if low is not None and above is not None:
        raise TypeError("number(): give low or above, not both")
    bounded = (low is not None or above is not None) and high is not None
    what = ("a number" if bounded else "a finite number") + _span(low, high, above) + (" or None" if none else "")
    if none and is_none(value, text):
        return None
    out = _as_real(value, text)
    if out is not None and (low is None or out >= low) and (high is None or out <= high) \
            and (above is None or out > above):
        return out
    raise _bad(field, value, what, hint)


def switch(field: str, value, *, text: bool = False) -> bool:
    """``value`` as a ``bool``: True/False (Python or numpy) or the integers 1/0.

    Parameters
    ----------
    field
        Name of the input, for the message.
    value
        The switch's value.
    text
        Also accept the strings true/false, 1/0, yes/no (any case, surrounding blanks ignored).

    Returns
    -------
    bool

    Raises
    ------
    InputError
        ``<field>: must be true or false, got 'maybe'`` (one line).
    """
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    word = value.strip().lower() if text and isinstance(value, str) else None
    if word in _TRUE + _FALSE:
        return word in _TRUE
    raise _bad(field, value, "true or false")


def read_array(value, field: str, dtype=None) -> np.ndarray:
    """``np.asarray(value, dtype)``, or a one-line :class:`InputError` on ``field`` when
    numpy cannot read it (ragged nested lists, a torch tensor on a device or of dtype
    bfloat16, strings as numbers)."""
    try:
        return np.asarray(value, dtype=dtype)
    except Exception as exc:  # torch tensors on a device, ragged lists, odd objects
        reason = " ".join(str(exc).split())
        reason = f"{type(exc).__name__}: {reason[:117] + '...' if len(reason) > 120 else reason}" if reason \
            else type(exc).__name__
        raise InputError(field, f"cannot be read as an array ({reason})") from None


# ------------------------------------------------------------------ helpers
def is_none(value, text: bool) -> bool:
    """True for None and, with ``text``, the strings "none" and "null" (any case, blanks
    ignored): how every checker here reads a value that means "not set"."""
    return value is None or (text and isinstance(value, str) and value.strip().lower() in _NONE)


def _as_integer(value, text: bool) -> int | None:
    """``value`` as an int when it is an integer, an integral finite float (or, with
    ``text``, a string of one), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if text and isinstance(value, str):
        if not _plain_number(value):
            return None
        try:
            return int(value.strip())  # exact, also beyond a float's 53 bits
        except ValueError:
            pass
    real = _as_real(value, text)
    return int(real) if real is not None and real.is_integer() else None


def _plain_number(text: str) -> bool:
    """Whether ``text`` may be read as a number: ASCII without underscores (Python's int()
    and float() also read "1_0" as 10 and Arabic-Indic digits as digits)."""
    return text.isascii() and "_" not in text


def _as_real(value, text: bool) -> float | None:
    """``value`` as a finite float when it is a real number (or, with ``text``, a string
    of one), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        if isinstance(value, numbers.Real):
            out = float(value)
        elif text and isinstance(value, str) and _plain_number(value):
            out = float(value.strip())
        else:
            return None
    except (ValueError, OverflowError):
        return None
    return out if math.isfinite(out) else None


def _span(low, high, above=None) -> str:
    """`` in [0, 1]``, `` in (0, 1]``, `` >= 1``, `` > 0``, `` <= 8`` or nothing."""
    def show(bound) -> str:
        return str(bound) if isinstance(bound, numbers.Integral) else f"{float(bound):g}"

    if high is not None and (low is not None or above is not None):
        opening = f"[{show(low)}" if low is not None else f"({show(above)}"
        return f" in {opening}, {show(high)}]"
    if low is not None:
        return f" >= {show(low)}"
    if above is not None:
        return f" > {show(above)}"
    return f" <= {show(high)}" if high is not None else ""


def _bad(field: str, value, what: str, hint: str | None = None) -> InputError:
    """The :class:`InputError` ``must be <what> (<hint>), got <repr(value)>``, on one line
    (a multi-line repr, e.g. of an array, is joined; a long one is cut)."""
    hint = f" ({hint})" if hint else ""
    return InputError(field, f"must be {what}{hint}, got {shown(value)}")


def shown(value) -> str:
    """``repr(value)`` for a one-line message: a multi-line repr (an array's) joined, a
    long one cut to ``_LONGEST_VALUE`` characters."""
    text = repr(value)
    if "\n" in text or "\r" in text:
        text = " ".join(text.split())
    return text if len(text) <= _LONGEST_VALUE else text[:_LONGEST_VALUE - 3] + "..."
