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


def _checkpoint_with_tokens_added(tmp_path, added: int):
    """The tiny checkpoint with ``added`` tokens put on its tokenizer: ``added`` > 0 makes a
    tokenizer larger than the model's embedding of 2,048 rows."""
    import shutil

    from tokenizers import Tokenizer as HFTokenizer

    folder = tmp_path / f"tiny-plus-{added}"
    shutil.copytree(model_directory("tiny"), folder)
    grown = HFTokenizer.from_file(str(folder / "tokenizer.json"))
    grown.add_tokens([f"<extra{i}>" for i in range(added)])
    grown.save(str(folder / "tokenizer.json"))
    return folder


@pytest.mark.parametrize("added", [1, 100])
def test_a_tokenizer_larger_than_the_embedding_is_refused_when_the_llm_is_built(tmp_path, added):
    from minipaged import LLM
    from minipaged.tokenizer import TokenizerError

    folder = _checkpoint_with_tokens_added(tmp_path, added)
    size = f"{2048 + added:,}"
    with pytest.raises(
        TokenizerError,
        match=f"tokenizer has {size} tokens but the model's "
        "embedding has 2,048 rows.*skip_tokenizer_init=True",
    ):
        LLM(str(folder))


def test_a_tokenizer_as_large_as_the_embedding_or_one_skipped_is_accepted(tmp_path):
    from minipaged import LLM

    assert LLM(str(_checkpoint_with_tokens_added(tmp_path, 0))).tokenizer.vocab_size == 2048
    assert LLM(str(_checkpoint_with_tokens_added(tmp_path, 5)), skip_tokenizer_init=True)


def test_an_engine_given_a_tokenizer_larger_than_its_model_is_refused(tmp_path):
    from minipaged import LLM
    from minipaged.engine import LLMEngine
    from minipaged.tokenizer import TokenizerError

    model = LLM("tiny").model
    grown = Tokenizer(_checkpoint_with_tokens_added(tmp_path, 1))
    with pytest.raises(TokenizerError, match="2,049 tokens but the model's embedding has 2,048"):
        LLMEngine(model, grown)


def test_the_command_line_refuses_the_pair_in_one_line_with_status_1(tmp_path, capsys):
    from minipaged.cli import main

    folder = _checkpoint_with_tokens_added(tmp_path, 3)
    assert main(["generate", "--model", str(folder), "--prompt", "It is"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "2,051 tokens" in err and "2,048 rows" in err
