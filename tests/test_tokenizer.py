"""The tokenizer: trained byte-level BPE round-trips text, and BOS/EOS ids are found both in
our files and in Hugging Face Llama-style ones."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from minipaged.tokenizer import ENDOFTEXT, Tokenizer, train_tokenizer

CORPUS = [
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife.",
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, "
    "seemed to unite some of the best blessings of existence.",
    '"My dear Mr. Bennet," said his lady to him one day, "have you heard that Netherfield Park '
    'is let at last?"',
] * 30


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer(train_tokenizer(texts=CORPUS, vocab_size=320))


def test_trained_vocabulary_has_the_requested_size(tokenizer):
    assert tokenizer.vocab_size == 320


def test_endoftext_is_both_bos_and_eos(tokenizer):
    assert tokenizer.bos_id == tokenizer.eos_id == tokenizer.tokenizer.token_to_id(ENDOFTEXT)


def test_encode_prepends_bos_only_when_asked(tokenizer):
    with_bos = tokenizer.encode("a single man")
    without = tokenizer.encode("a single man", add_bos=False)
    assert with_bos == [tokenizer.bos_id, *without]
    assert tokenizer.bos_id not in without


def test_merges_make_the_training_text_shorter_than_its_bytes(tokenizer):
    text = CORPUS[0]
    assert len(tokenizer.encode(text, add_bos=False)) < len(text.encode()) * 2 / 3


def test_decode_drops_special_tokens(tokenizer):
    ids = [*tokenizer.encode("a wife"), tokenizer.eos_id]
    assert tokenizer.decode(ids) == "a wife"


@given(st.text(alphabet=string.printable, max_size=80))
def test_ascii_text_round_trips(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_corpus_file_trains_the_same_tokenizer_as_its_lines(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    from_file = train_tokenizer(corpus, vocab_size=300)
    from_lines = train_tokenizer(texts=CORPUS, vocab_size=300)
    assert from_file.get_vocab() == from_lines.get_vocab()


def test_saved_file_loads_with_the_same_ids(tokenizer, tmp_path):
    tokenizer.save(tmp_path / "tokenizer.json")
    again = Tokenizer(tmp_path / "tokenizer.json")
    assert again.encode("Netherfield Park") == tokenizer.encode("Netherfield Park")
    assert (again.bos_id, again.eos_id) == (tokenizer.bos_id, tokenizer.eos_id)


def llama_style_tokenizer() -> HFTokenizer:
    """A tokenizer.json shaped like TinyLlama's: <unk>, <s>, </s> as ids 0, 1, 2."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4}
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    hf.add_special_tokens(["<unk>", "<s>", "</s>"])
    return hf


def test_llama_style_file_uses_s_and_slash_s_as_bos_and_eos(tmp_path):
    llama_style_tokenizer().save(str(tmp_path / "tokenizer.json"))
    tokenizer = Tokenizer(tmp_path)
    assert (tokenizer.bos_id, tokenizer.eos_id) == (1, 2)
    assert tokenizer.encode("a b") == [1, 3, 4]


def test_tokenizer_config_names_override_conventional_names(tmp_path):
    llama_style_tokenizer().save(str(tmp_path / "tokenizer.json"))
    names = {"bos_token": "</s>", "eos_token": {"content": "<unk>"}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(names))
    tokenizer = Tokenizer(tmp_path)
    assert (tokenizer.bos_id, tokenizer.eos_id) == (2, 0)


def test_missing_file_says_what_was_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json does not exist"):
        Tokenizer(tmp_path)


def test_vocab_smaller_than_the_byte_alphabet_is_rejected():
    with pytest.raises(ValueError, match=r"vocab_size must be at least 257.*got 100"):
        train_tokenizer(texts=CORPUS, vocab_size=100)
