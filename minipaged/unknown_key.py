"""An id that names nothing the API holds, as one exception: a ``ValueError``, as every other
bad argument of the Python API is, and a ``KeyError`` too, as the dict lookup it stands for
raised and as code written against it catches.

A ``KeyError`` shows its message as a key, quoted (``'unknown sequence 7: ...'``); this one
shows it as a ``ValueError`` does, as the words they are. Each kind of id has its own subclass,
beside what checks it (``paging_arguments.UnknownSequence``, ``request_limits.UnknownRequest``).
This module imports nothing, so both the paging modules (no torch) and the engine can import
it."""

from __future__ import annotations


class UnknownKey(ValueError, KeyError):
    """An id that names nothing held: a ``ValueError`` and a ``KeyError``, its message shown
    as words. Raising it changes nothing."""

    __str__ = ValueError.__str__  # KeyError's would show the message quoted, as a key
