"""Errors rp-opt raises for bad input.

Every message is one line naming the field and the offending value, so that the CLI can
print it as it is (exit code 2) and a trainer can log it without a traceback.
"""

from __future__ import annotations


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
