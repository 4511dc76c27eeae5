"""Text to token ids and back, with a Hugging Face ``tokenizer.json``.

``Tokenizer`` reads any ``tokenizer.json`` the ``tokenizers`` library reads: the byte-level
BPE that ``train_tokenizer`` makes for the embedded tiny model, and the files that ship with
real Llama-family checkpoints (SmolLM, TinyLlama). It adds the beginning-of-sequence token
itself, so the ids do not depend on a file's post-processor.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from minipaged import atomic_write
from minipaged.json_input import NotJSON, loads
from minipaged.python_numbers import python_number
from minipaged.replaceable import OutputKind

ENDOFTEXT = "<|endoftext|>"
"""The one special token of the trained tokenizer: it separates documents (paragraphs), so it
is both the beginning-of-sequence and the end-of-sequence token."""

# Where real checkpoints name their special tokens when tokenizer_config.json is absent or
# silent, most specific first.
_BOS_CANDIDATES = ("<s>", "<|begin_of_text|>", "<|im_start|>", ENDOFTEXT)
_EOS_CANDIDATES = ("</s>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", ENDOFTEXT)


class TokenizerError(ValueError):
    """A tokenizer file that cannot be read; the message names the file and the fix."""


class Tokenizer:
    """A ``tokenizers.Tokenizer`` plus the ids of its BOS and EOS tokens.

    ``encode`` never adds special tokens other than an optional leading BOS; ``decode`` drops
    special tokens. For the trained byte-level tokenizer, ``decode(encode(x, add_bos=False))``
    equals ``x`` for every ASCII string.
    """

    def __init__(self, source: str | Path | HFTokenizer) -> None:
        """``source`` is a ``tokenizers.Tokenizer``, a ``tokenizer.json`` file, or a model
        directory holding one. BOS and EOS come from the directory's ``tokenizer_config.json``
        when it names them, else from the vocabulary's conventional names (``<s>``/``</s>``,
        ``<|endoftext|>``, ...); either is ``None`` when the vocabulary has neither."""
        named: dict[str, str] = {}
        if isinstance(source, HFTokenizer):
            self.tokenizer = source
        elif not isinstance(source, str | os.PathLike) or not str(source).strip():
            raise TypeError(
                "a Tokenizer is read from a tokenizer.json: pass its path, the model directory "
                f"that holds it, or a tokenizers.Tokenizer, got {type(source).__name__} "
                f"{source!r:.60}"
            )
        else:
            path = Path(source)
            file = path / "tokenizer.json" if path.is_dir() else path
            if not file.is_file():
                what = "is a folder, not a file" if file.is_dir() else "does not exist"
                raise FileNotFoundError(
                    f"{file} {what}: a tokenizer is read from a Hugging Face "
                    "tokenizer.json (pass the file or the model directory that holds it)"
                )
            try:
                self.tokenizer = HFTokenizer.from_file(str(file))
            except Exception as error:  # tokenizers raises a bare Exception for a bad file
                first = str(error).splitlines()[0] if str(error) else type(error).__name__
                raise TokenizerError(
                    f"{file} is not a tokenizer.json the tokenizers library reads ({first}); "
                    "copy it again from the model's files"
                ) from error
            named = _special_tokens_from_config(file.parent / "tokenizer_config.json")
        self.bos_id = _token_id(self.tokenizer, named.get("bos_token"), _BOS_CANDIDATES)
        self.eos_id = _token_id(self.tokenizer, named.get("eos_token"), _EOS_CANDIDATES)

    @property
    def vocab_size(self) -> int:
        """Number of token ids, added special tokens included."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Token ids of ``text``, preceded by BOS when ``add_bos`` and the tokenizer has one.
        ``ValueError`` for text that is not Unicode throughout (a lone surrogate: what Python
        makes of a command-line byte that is not UTF-8)."""
        if not isinstance(text, str):
            bytes_fix = (
                "; decode bytes first: data.decode('utf-8')" if isinstance(text, bytes) else ""
            )
            raise TypeError(
                f"text must be a string, got {type(text).__name__} {text!r:.60}{bytes_fix}"
            )
        if not isinstance(add_bos, bool):
            raise TypeError(f"add_bos must be True or False, got {add_bos!r:.60}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"the text holds {text[error.start]!r} at position {error.start}, which is no "
                "Unicode character (a lone surrogate, or a byte that is not UTF-8); give UTF-8 "
                "text"
            ) from None
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if add_bos and self.bos_id is not None:
            return [self.bos_id, *ids]
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens left out. Each id is an integer $\\geq 0$
        (NumPy and torch integers too), else ``ValueError``; an id past the vocabulary has no
        text, as in the ``tokenizers`` library (a model whose embedding is padded past its
        tokenizer's vocabulary can sample one), where that library would raise an
        ``OverflowError`` for one past $2^{32}$."""
        if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
            raise TypeError(
                f"ids must be a list of token ids, got {type(ids).__name__} {ids!r:.60}"
            )
        ids = [python_number(token) for token in ids]
        # bool is an int to Python, but True is no token id
        bad = [t for t in ids if type(t) is bool or not (isinstance(t, int) and t >= 0)]
        if bad:
            raise ValueError(f"token ids must be integers >= 0, got {bad[:5]!r:.200}")
        known = [token for token in ids if token < self.vocab_size]
        return self.tokenizer.decode(known, skip_special_tokens=True)

    def save(self, path: str | Path, force: bool = False) -> None:
        """Write ``tokenizer.json`` to ``path`` (a file name), whole or not at all, replacing
        (never following) a symbolic link there (``minipaged.atomic_write``), and a file that
        is no tokenizer only with ``force`` (``minipaged.replaceable``)."""
        text = self.tokenizer.to_str(pretty=True)
        atomic_write.write_text(path, text, replaces=TOKENIZER, force=force)


def is_tokenizer(head: bytes) -> bool:
    """Whether ``head``, a file's first bytes, starts a ``tokenizers`` JSON file (what
    ``Tokenizer.save`` writes, and every Hugging Face ``tokenizer.json``)."""
    start = head.lstrip()[:4096]
    return start.startswith(b"{") and b'"added_tokens"' in start and b'"version"' in start


TOKENIZER = OutputKind("a tokenizer (a tokenizers JSON file)", is_tokenizer)
"""What ``Tokenizer.save`` may replace without ``force``."""


def train_tokenizer(
    corpus_path: str | Path | None = None,
    vocab_size: int = 2048,
    texts: Iterable[str] | None = None,
) -> HFTokenizer:
    """Train a byte-level BPE (GPT-2's scheme) on the lines of ``corpus_path`` or on ``texts``.

    Every byte is in the base alphabet, so any text encodes without an unknown token and
    decodes back to itself; ``<|endoftext|>`` is id 0. Deterministic for a given input.
    """
    if (corpus_path is None) == (texts is None):
        raise ValueError("train_tokenizer needs exactly one of corpus_path or texts")
    if vocab_size < 257:
        raise ValueError(
            f"vocab_size must be at least 257 (256 bytes + {ENDOFTEXT}), got {vocab_size}"
        )
    tokenizer = HFTokenizer(models.BPE())
    # add_prefix_space=False keeps decode(encode(x)) == x: no space is invented before the text.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[ENDOFTEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    if corpus_path is not None:
        tokenizer.train([str(corpus_path)], trainer)
    else:
        tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def _special_tokens_from_config(path: Path) -> dict[str, str]:
    """``bos_token`` / ``eos_token`` strings from ``tokenizer_config.json``, if it has them."""
    if not path.is_file():
        return {}
    try:
        config = loads(path.read_bytes())  # bytes: loads names a byte that is no UTF-8
    except NotJSON as error:
        raise TokenizerError(
            f"{path} is not valid JSON ({error}); fix or delete it (it only names BOS and EOS)"
        ) from error
    if not isinstance(config, dict):
        raise TokenizerError(f"{path} must hold a JSON object, got {type(config).__name__}")
    named = {}
    for key in ("bos_token", "eos_token"):
        token = config.get(key)
        if isinstance(token, dict):  # older files store an AddedToken as a dict
            token = token.get("content")
        if isinstance(token, str):
            named[key] = token
    return named


def _token_id(tokenizer: HFTokenizer, named: str | None, candidates: Sequence[str]) -> int | None:
    for token in (named, *candidates):
        if token is not None and (token_id := tokenizer.token_to_id(token)) is not None:
            return token_id
    return None
