"""What the block manager's methods take from their callers, checked before anything changes:
sequence ids, prompts (a length or token ids) and token ids.

A sequence id is a key of the tables $\\mathcal{T}_r$: an integer (``np.int64(3)`` and
``torch.tensor(3)`` are sequence 3, by the one rule of ``minipaged.python_numbers``) or a name
(the fork benchmark's ``"parent"``); never a bool, which a dict takes as sequence 0 or 1, nor
None or a float. Token ids are integers $\\ge 0$: the prefix caches hash them.

This module imports no torch, as the paging modules it serves."""

from __future__ import annotations

from collections.abc import Sequence

from minipaged.python_numbers import python_number
from minipaged.unknown_key import UnknownKey


class UnknownSequence(UnknownKey):
    """A sequence id no block table is kept for: a ``ValueError`` and a ``KeyError``
    (``UnknownKey``), the latter as exercise 03 asks a student's block manager to raise for
    an unknown parent. Nothing is changed."""


def check_known_sequence(seq: object, tables: dict) -> None:
    """Refuse ``seq`` (an id, as ``sequence_id`` gives it) when ``tables`` holds no table for
    it, naming it and the way out."""
    if seq not in tables:
        raise UnknownSequence(
            f"unknown sequence {seq!r:.60}: it was never allocated or is already freed; pass "
            "one that holds a block table (allocate gives it one)"
        )


def sequence_id(seq: object) -> object:
    """``seq`` as the key of its block table, or a ``TypeError`` naming it."""
    seq = python_number(seq)
    if isinstance(seq, bool | float) or seq is None or not isinstance(seq, int | str):
        raise TypeError(
            f"a sequence id must be an integer (or a name such as 'parent'), got {seq!r:.60}: "
            "True would be sequence 1, and 1.5 no sequence at all"
        )
    return seq


def prompt_length(prompt: object) -> tuple[int, Sequence[int] | None]:
    """A prompt given by its length $L$ or by its token ids, as ``(L, token ids or None)``."""
    prompt = python_number(prompt)
    if isinstance(prompt, int) and not isinstance(prompt, bool):
        return prompt, None
    if isinstance(prompt, Sequence) and not isinstance(prompt, str | bytes):
        check_token_ids(prompt)
        return len(prompt), prompt
    raise TypeError(
        f"a prompt is its length (an integer) or its token ids (a list), got {prompt!r:.60}"
    )


def check_token_ids(ids: Sequence[object], first: int = 0) -> None:
    """Refuse ``ids`` unless each from position ``first`` on (those before were checked when
    they were new) is a token id, naming the first that is not."""
    for t in range(first, len(ids)):
        token = python_number(ids[t])
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise ValueError(
                f"token_ids[{t}] must be a token id (an integer >= 0), got {token!r:.40}"
            )
