"""The one error type of the operator table: a ``RouteError`` is a ValueError whose message
is one line naming the operator, the argument and what was expected
(``"softmax: axis must be < rank 2 (got 5)"``)."""

from __future__ import annotations


class RouteError(ValueError):
    """A refused operator, attribute, input or record; the message is one line that names the
    operator (or the record) and the argument at fault."""


class DecodeError(RouteError):
    """A wire record that names no operator (unknown tag, wrong fields, newer version, an
    attribute failing its check); the message gives the reason."""
