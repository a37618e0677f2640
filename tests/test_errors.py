"""The shared checks of scalar inputs (rp_opt.errors.integer, number, switch): what they
accept and convert, the one-line message of what they reject, text and none modes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rp_opt.errors import InputError, integer, number, switch

# (checker, keyword arguments, value, expected result)
ACCEPTED = [
    (integer, {}, 3, 3),
    (integer, {}, -7, -7),
    (integer, {}, np.int64(3), 3),
    (integer, {}, np.uint16(65535), 65535),
    (integer, {}, 8.0, 8),
    (integer, {}, np.float32(8.0), 8),
    (integer, {}, 10**30, 10**30),
    (integer, {"low": 1, "high": 8}, 1, 1),
    (integer, {"low": 1, "high": 8}, 8, 8),
    (integer, {"low": 0}, 0, 0),
    (integer, {"high": 8}, -100, -100),
    (integer, {"text": True}, "3", 3),
    (integer, {"text": True}, " 3 ", 3),
    (integer, {"text": True}, "3.0", 3),
    (integer, {"text": True}, "1e3", 1000),
    (integer, {"text": True}, "123456789012345678901", 123456789012345678901),
    (integer, {"text": True}, 5, 5),
    (integer, {"none": True}, None, None),
    (integer, {"none": True, "low": 1}, 4, 4),
    (integer, {"none": True, "text": True}, "none", None),
    (integer, {"none": True, "text": True}, " NULL ", None),
    (number, {}, 0, 0.0),
    (number, {}, -2.5, -2.5),
    (number, {}, np.float32(0.5), 0.5),
    (number, {}, np.int64(4), 4.0),
    (number, {"low": 0, "high": 1}, 0, 0.0),
    (number, {"low": 0, "high": 1}, 1, 1.0),
    (number, {"above": 0}, 1e-9, 1e-9),
    (number, {"above": 0, "high": 1}, 1.0, 1.0),
    (number, {"text": True}, " 2.5 ", 2.5),
    (number, {"text": True}, "1e3", 1000.0),
    (number, {"none": True}, None, None),
    (number, {"none": True, "text": True}, "null", None),
    (switch, {}, True, True),
    (switch, {}, False, False),
    (switch, {}, np.bool_(True), True),
    (switch, {}, 1, True),
    (switch, {}, 0, False),
    (switch, {}, np.int64(1), True),
    (switch, {"text": True}, "YES", True),
    (switch, {"text": True}, " no ", False),
    (switch, {"text": True}, "1", True),
    (switch, {"text": True}, "false", False),
    (switch, {"text": True}, "True", True),
]


@pytest.mark.parametrize("check, kwargs, value, expected", ACCEPTED)
def test_accepted_values_and_their_conversions(check, kwargs, value, expected):
    out = check("f", value, **kwargs)
    assert out == expected and type(out) is type(expected)


# (checker, keyword arguments, value, what the message says a valid value is)
REJECTED = [
    (integer, {}, True, "an integer"),
    (integer, {}, np.bool_(False), "an integer"),
    (integer, {}, 1.5, "an integer"),
    (integer, {}, float("nan"), "an integer"),
    (integer, {}, float("inf"), "an integer"),
    (integer, {}, "3", "an integer"),
    (integer, {}, [3], "an integer"),
    (integer, {}, None, "an integer"),
    (integer, {"low": 1}, 0, "an integer >= 1"),
    (integer, {"low": 1}, None, "an integer >= 1"),
    (integer, {"high": 8}, 9, "an integer <= 8"),
    (integer, {"low": 1, "high": 8}, 9, "an integer in [1, 8]"),
    (integer, {"low": 1, "high": 8}, 0.0, "an integer in [1, 8]"),
    (integer, {"low": 1, "none": True}, 0, "an integer >= 1 or None"),
    (integer, {"low": 1, "none": True}, "none", "an integer >= 1 or None"),
    (integer, {"low": 1, "text": True}, "none", "an integer >= 1"),
    (integer, {"text": True}, "3.5", "an integer"),
    (integer, {"text": True}, "abc", "an integer"),
    (integer, {"text": True}, "", "an integer"),
    (integer, {"text": True}, "nan", "an integer"),
    (integer, {"text": True}, "true", "an integer"),
    (integer, {"text": True}, "1_0", "an integer"),        # int() and float() read 10
    (integer, {"text": True}, "\u0661", "an integer"),     # an Arabic-Indic one, read as 1
    (number, {"text": True}, "2_5", "a finite number"),
    (integer, {"low": 1, "high": 8, "hint": "the experts"}, 9, "an integer in [1, 8] (the experts)"),
    (number, {}, float("nan"), "a finite number"),
    (number, {}, float("-inf"), "a finite number"),
    (number, {}, True, "a finite number"),
    (number, {}, "1", "a finite number"),
    (number, {}, None, "a finite number"),
    (number, {}, 10**400, "a finite number"),
    (number, {"low": 0}, -1, "a finite number >= 0"),
    (number, {"low": 0}, -0.5, "a finite number >= 0"),
    (number, {"low": 0, "high": 1}, 1.5, "a number in [0, 1]"),
    (number, {"low": 0.25, "high": 0.5}, 0.75, "a number in [0.25, 0.5]"),
    (number, {"above": 0}, 0, "a finite number > 0"),
    (number, {"above": 0}, float("inf"), "a finite number > 0"),
    (number, {"above": 0, "high": 1}, 0.0, "a number in (0, 1]"),
    (number, {"above": 0, "text": True}, "inf", "a finite number > 0"),
    (number, {"text": True}, "abc", "a finite number"),
    (number, {"low": 0, "none": True}, -1, "a finite number >= 0 or None"),
    (number, {"above": 0, "hint": "seconds"}, -1, "a finite number > 0 (seconds)"),
    (switch, {}, 2, "true or false"),
    (switch, {}, 1.0, "true or false"),
    (switch, {}, None, "true or false"),
    (switch, {}, "yes", "true or false"),
    (switch, {"text": True}, "maybe", "true or false"),
    (switch, {"text": True}, "2", "true or false"),
]


@pytest.mark.parametrize("check, kwargs, value, what", REJECTED)
def test_rejected_values_name_the_field_and_the_value(check, kwargs, value, what):
    with pytest.raises(InputError) as info:
        check("opt.f", value, **kwargs)
    shown = repr(value) if len(repr(value)) <= 120 else repr(value)[:117] + "..."
    assert info.value.field == "opt.f"
    assert info.value.message == f"must be {what}, got {shown}"
    assert str(info.value) == f"opt.f: must be {what}, got {shown}"


def test_a_multi_line_value_is_shown_on_one_line():
    with pytest.raises(InputError) as info:
        integer("f", np.zeros((40, 40)))
    message = str(info.value)
    assert "\n" not in message and message.startswith("f: must be an integer, got array([[0., 0.")
    assert len(message) < 200


def test_low_and_above_are_alternatives():
    with pytest.raises(TypeError):
        number("f", 1.0, 0, above=0)


# ------------------------------------------------------------------ properties
bounds = st.one_of(st.none(), st.integers(-10**6, 10**6))


@given(st.integers(-10**12, 10**12), bounds, bounds)
def test_every_integer_in_range_round_trips(value, low, high):
    low = None if low is None else min(low, value)
    high = None if high is None else max(high, value)
    assert integer("f", value, low, high) == value
    assert integer("f", np.int64(value), low, high) == value
    assert integer("f", str(value), low, high, text=True) == value
    assert integer("f", float(value), low, high) == value  # exact below 2**53


@given(st.integers(-10**12, 10**12), st.integers(-10**6, 10**6), st.booleans())
def test_every_integer_out_of_range_is_a_one_line_error(value, bound, text):
    below = value < bound
    low, high = (bound, None) if below else (None, bound - 1)
    given_value = str(value) if text else value
    with pytest.raises(InputError) as info:
        integer("count", given_value, low, high, text=text)
    message = str(info.value)
    assert "\n" not in message and message.startswith("count: must be an integer ")
    assert message.endswith(f", got {given_value!r}")


@given(st.floats(allow_nan=False, allow_infinity=False), st.booleans())
def test_every_finite_float_round_trips(value, text):
    given_value = repr(value) if text else value
    assert number("f", given_value, text=text) == value
    if value.is_integer():
        assert integer("f", given_value, text=text) == int(value)


@given(st.floats(allow_nan=False, allow_infinity=False), st.floats(allow_nan=False, allow_infinity=False))
def test_number_bounds_are_inclusive_and_above_is_strict(value, bound):
    assert (value >= bound) == _passes(number, value, low=bound)
    assert (value > bound) == _passes(number, value, above=bound)


@given(st.one_of(st.floats(), st.integers(), st.text(max_size=8), st.booleans(), st.none()))
def test_no_value_escapes_as_another_error(value):
    """Whatever comes in, the checkers answer with a value or an InputError."""
    _passes(integer, value, text=True, none=True)
    assert _passes(number, value, text=True, none=True) or not (isinstance(value, float) and math.isfinite(value))
    _passes(switch, value, text=True)


@given(st.booleans(), st.sampled_from(["{}", " {} ", "\t{}\n"]), st.booleans())
def test_switch_words_in_any_case(value, layout, upper):
    word = "yes" if value else "no"
    word = word.upper() if upper else word
    assert switch("f", layout.format(word), text=True) is value
    assert switch("f", layout.format(str(value)), text=True) is value
    assert switch("f", int(value)) is value


def _passes(check, value, **kwargs) -> bool:
    try:
        check("f", value, **kwargs)
    except InputError as exc:
        assert "\n" not in str(exc)
        return False
    return True
