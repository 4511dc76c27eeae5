"""Bad input to ``Tokenizer``: a source that names no file, text that is not a string, ids
that are no token ids. Each is a ``TypeError`` or ``ValueError`` that names the argument,
never an ``AttributeError`` or an ``OverflowError`` from inside the ``tokenizers`` library;
ids past the vocabulary decode to nothing, as that library decodes them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from minipaged.checkpoint import model_directory
from minipaged.tokenizer import Tokenizer

TOKENIZER = Tokenizer(model_directory("tiny"))


@pytest.mark.parametrize("source", [None, 5, 1.5, ["tokenizer.json"], b"x", "", "  "], ids=repr)
def test_a_source_that_names_no_file_is_refused_naming_what_to_pass(source):
    with pytest.raises(TypeError, match="pass its path, the model directory"):
        Tokenizer(source)


@pytest.mark.parametrize("text", [None, 5, b"It is", ["It is"], 1.5, torch.tensor([1])], ids=repr)
def test_text_that_is_not_a_string_is_refused_naming_text(text):
    with pytest.raises(TypeError, match="text must be a string"):
        TOKENIZER.encode(text)


def test_bytes_are_told_how_to_become_text():
    with pytest.raises(TypeError, match=r"data.decode\('utf-8'\)"):
        TOKENIZER.encode(b"It is")


@pytest.mark.parametrize("flag", ["no", 1, None], ids=repr)
def test_add_bos_takes_only_a_bool(flag):
    with pytest.raises(TypeError, match="add_bos must be True or False"):
        TOKENIZER.encode("It is", add_bos=flag)


@pytest.mark.parametrize("ids", [None, 5, "abc", b"ab"], ids=repr)
def test_ids_that_are_not_a_list_are_refused_naming_ids(ids):
    with pytest.raises(TypeError, match="ids must be a list of token ids"):
        TOKENIZER.decode(ids)


@pytest.mark.parametrize("token", [-1, -(2**70), 1.5, math.nan, True, "3", None], ids=repr)
def test_an_id_that_is_no_integer_or_is_negative_is_refused(token):
    with pytest.raises(ValueError, match="token ids must be integers >= 0"):
        TOKENIZER.decode([65, token])


@pytest.mark.parametrize("token", [TOKENIZER.vocab_size, 10**9, 2**32, 2**64])
def test_an_id_past_the_vocabulary_has_no_text(token):
    assert TOKENIZER.decode([65, token, 66]) == TOKENIZER.decode([65, 66])


@pytest.mark.parametrize(
    "ids", [np.array([65, 66]), torch.tensor([65, 66]), [np.int64(65), torch.tensor(66)]]
)
def test_numpy_and_torch_ids_decode_as_the_integers_they_equal(ids):
    assert TOKENIZER.decode(ids) == TOKENIZER.decode([65, 66])
