"""What a request's prompt may be, and the token ids it stands for: a string (encoded by the
tokenizer), a list of token ids, or vLLM's ``{"prompt_token_ids": [...]}``.

Every id a request names, its prompt's and its stop tokens', lies in the model's vocabulary
$[0, V)$; a refusal says which ids are wrong and whose they are (the caller's, or a tokenizer's
that does not belong to the checkpoint).
"""

from __future__ import annotations

from minipaged.python_numbers import python_number
from minipaged.tokenizer import Tokenizer, TokenizerError

Prompt = str | list[int] | dict


def prompt_token_ids(
    prompt: Prompt, tokenizer: Tokenizer | None, vocab: int
) -> tuple[list[int], str | None]:
    """The prompt's token ids (NumPy integers become ints) and its text, when it was one.
    ``TypeError`` for a prompt of the wrong kind, ``ValueError`` naming the problem for an
    empty one or ids outside $[0, V)$ with $V$ = ``vocab``."""
    if isinstance(prompt, dict):
        keys = [f"{key!r:.40}" for key in list(prompt)[:6]]  # a few, each cut: an echo
        text_instead = " (for text, pass the string itself as the prompt)" * ("prompt" in prompt)
        if "prompt_token_ids" not in prompt:
            raise ValueError(
                "a dict prompt needs the key 'prompt_token_ids' (a list of token ids), "
                f"got keys [{', '.join(keys)}]{text_instead}"
            )
        if len(prompt) > 1:  # a key nothing reads would be ignored without a word
            extra = [key for key in keys if key != "'prompt_token_ids'"][:5]
            raise ValueError(
                f"a dict prompt holds only 'prompt_token_ids', got also [{', '.join(extra)}]"
                f"{text_instead}; drop the other keys"
            )
        token_ids, text = prompt["prompt_token_ids"], None
    elif isinstance(prompt, str):
        if not prompt:  # as an empty prompt_token_ids is: there is nothing to continue
            raise ValueError("the prompt is empty: give at least one token")
        if tokenizer is None:
            raise ValueError(
                "this model has no tokenizer (its directory holds no tokenizer.json): pass "
                "prompt_token_ids instead of text, or put the tokenizer.json beside the weights"
            )
        token_ids, text = tokenizer.encode(prompt), prompt
    else:
        token_ids, text = prompt, None
    if not isinstance(token_ids, list | tuple):
        array = hasattr(token_ids, "tolist")  # a tensor or an array: its ids, in a list
        raise TypeError(
            "a prompt is a string, a list of token ids or {'prompt_token_ids': [...]}, "
            f"got {type(token_ids).__name__} {token_ids!r:.60}"
            + ("; pass a tensor's or an array's ids as a list (ids.tolist())" if array else "")
        )
    token_ids = [python_number(token) for token in token_ids]  # NumPy ints as ints
    if not token_ids and text:  # the tokenizer has no token for any of its characters
        raise ValueError(
            f"the prompt {text[:60]!r} encodes to no tokens: the tokenizer knows none of its "
            "characters (is its tokenizer.json the model's?); give other text or token ids"
        )
    if not token_ids:
        raise ValueError("the prompt is empty: give at least one token")
    # bool is an int to Python, but True is no token id
    bad = [t for t in token_ids if type(t) is bool or not (isinstance(t, int) and 0 <= t < vocab)]
    if bad and text is not None:  # the ids came from the tokenizer, not from the caller
        raise ValueError(
            f"the tokenizer gave token ids {bad[:5]}, outside the model's vocabulary of "
            f"{vocab}: its tokenizer.json does not belong to this checkpoint; use the "
            "tokenizer the model was trained with"
        )
    if bad:
        raise ValueError(
            f"prompt token ids must be integers in [0, {vocab}), got {bad[:5]}; pass Python "
            "ints (tensor.tolist() for a tensor's)"
        )
    return token_ids, text


def check_tokenizer_fits(tokenizer: Tokenizer | None, vocab: int) -> None:
    """Refuse, where a model and a tokenizer are put together, a tokenizer whose vocabulary is
    larger than the model's embedding ($V$ rows): it can encode text to ids of $V$ or more,
    which the model has no row for. A smaller one is fine (checkpoints often pad $V$ to a round
    number)."""
    if tokenizer is not None and tokenizer.vocab_size > vocab:
        raise TokenizerError(
            f"the tokenizer has {tokenizer.vocab_size:,} tokens but the model's embedding has "
            f"{vocab:,} rows (vocab_size in config.json): the tokenizer.json does not belong to "
            "this checkpoint; put the model's own tokenizer.json beside its weights, or pass "
            "skip_tokenizer_init=True and give prompts as token ids"
        )


def check_stop_tokens(stop_token_ids: tuple[int, ...], vocab: int) -> None:
    """Refuse stop tokens outside $[0, V)$: the model never writes them, so they could never
    stop a sequence (``SamplingParams`` checks that they are ids at all)."""
    past = [token for token in stop_token_ids if token >= vocab]
    if past:
        raise ValueError(
            f"stop_token_ids {past[:5]} lie outside the model's vocabulary of {vocab} tokens, "
            f"so they could never stop a sequence; use ids below {vocab}"
        )
