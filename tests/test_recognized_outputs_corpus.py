"""Files that looked like minipaged's and were replaced without ``force``: each writer now
replaces, without being told, only a file that carries the mark minipaged puts in what it
writes (``checkpoint_kinds``, ``study.bench.plot``).

Before, three rules read a file's kind from a trait anyone's file may have: weights were
recognized by a Llama's tensor names, so another Llama's ``model.safetensors`` standing alone
(no config beside it to refuse first) was replaced; a model card by being UTF-8 text, so a
user's notes named ``MODEL_CARD.md`` were; a plot by being a Matplotlib SVG, so any figure
drawn with Matplotlib was. Each case here was replaced then and is refused now, naming the file
and ``force=True``, and left as it was; what minipaged wrote is still replaced without it.
"""

from __future__ import annotations

import re
import struct

import pytest
import torch
from matplotlib.figure import Figure
from safetensors.torch import save_file

from minipaged import train
from minipaged.checkpoint import load_model, save_model
from minipaged.checkpoint_kinds import KINDS, MODEL_CARD_FILE, model_card_title
from minipaged.grader.report_files import REPORT
from minipaged.models import EMBEDDED_MODELS
from minipaged.replaceable import OutputKind
from minipaged.study.bench import PAGE, plot
from minipaged.trace import TRACE

TOKENIZER = EMBEDDED_MODELS["tiny"]


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


def another_llamas_weights(path) -> None:
    """A Llama's weights as transformers saves them: the same tensor names as ours,
    ``{"format": "pt"}`` metadata and nothing that names minipaged."""
    save_file({"model.embed_tokens.weight": torch.zeros(4, 2)}, path, metadata={"format": "pt"})


def a_matplotlib_figure(path) -> None:
    """A figure a user drew with Matplotlib, saved as SVG the ordinary way."""
    fig = Figure()
    fig.subplots().plot([0, 1], [1, 0])
    fig.savefig(path, format="svg")


def refused(call, path) -> None:
    before = path.read_bytes()
    with pytest.raises(ValueError) as error:
        call()
    message = str(error.value)
    assert f"{path} is there and is not" in message and "force=True" in message, message
    assert path.read_bytes() == before


def test_another_llamas_weights_alone_in_the_folder_are_refused(tmp_path, tiny):
    folder = tmp_path / "model"
    folder.mkdir()
    another_llamas_weights(folder / "model.safetensors")
    refused(lambda: save_model(tiny, TOKENIZER, folder), folder / "model.safetensors")
    assert [p.name for p in folder.iterdir()] == ["model.safetensors"]
    save_model(tiny, TOKENIZER, folder, force=True)
    save_model(tiny, TOKENIZER, folder)  # now minipaged's own: replaced without force


def test_the_embedded_models_weights_are_minipageds_own(tmp_path, tiny):
    """``python -m minipaged.train`` writes over ``minipaged/models/tiny`` by default."""
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("tiny", "tiny-draft"):
        weights = (EMBEDDED_MODELS[name] / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(weights)
        save_model(tiny, TOKENIZER, folder)


def test_text_that_is_no_model_card_of_ours_is_refused(tmp_path, tiny):
    folder = tmp_path / "model"
    save_model(tiny, TOKENIZER, folder, extra={MODEL_CARD_FILE: model_card_title("a") + "\n"})
    card = folder / MODEL_CARD_FILE
    card.write_text("# My fine-tune\n\nNotes on the run I care about.\n")
    new = {MODEL_CARD_FILE: model_card_title("b") + "\n"}
    refused(lambda: save_model(tiny, TOKENIZER, folder, extra=new), card)
    save_model(tiny, TOKENIZER, folder, extra=new, force=True)
    save_model(tiny, TOKENIZER, folder, extra={MODEL_CARD_FILE: model_card_title("c") + "\n"})
    assert card.read_text() == model_card_title("c") + "\n"


def test_train_out_refuses_a_model_card_it_did_not_write_before_training(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("A paragraph.\n" * 10)
    out = tmp_path / "model"
    out.mkdir()
    (out / MODEL_CARD_FILE).write_text("my notes on this model\n")
    with pytest.raises(SystemExit) as ended:
        train.parse_args(["--corpus", str(corpus), "--out", str(out)])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and "give --force" in err, err
    assert re.search(re.escape(f"{out / MODEL_CARD_FILE} is there and is not a model card"), err)


def test_an_extra_file_of_another_name_is_replaced_only_with_force(tmp_path, tiny):
    """Nothing in it says who wrote it: even minipaged's own save of it is not told apart."""
    folder = tmp_path / "model"
    save_model(tiny, TOKENIZER, folder, extra={"NOTES.md": "first\n"})
    refused(
        lambda: save_model(tiny, TOKENIZER, folder, extra={"NOTES.md": "x"}), folder / "NOTES.md"
    )
    save_model(tiny, TOKENIZER, folder, extra={"NOTES.md": "second\n"}, force=True)
    assert (folder / "NOTES.md").read_text() == "second\n"


def _figure():
    fig, (axes,) = plot.figure()
    axes.plot([0, 1], [1, 0])
    return fig


def test_a_matplotlib_svg_that_bench_did_not_draw_is_refused(tmp_path):
    path = tmp_path / "memory.svg"
    a_matplotlib_figure(path)
    refused(lambda: plot.save(_figure(), tmp_path, "memory"), path)
    plot.save(_figure(), tmp_path, "memory", force=True)
    plot.save(_figure(), tmp_path, "memory")  # bench's own: replaced without force
    assert plot.is_plot(path.read_bytes())


def test_the_committed_bench_plots_are_recognized_as_bench_plots():
    """``bench`` writes into ``docs/results`` by default: its plots there are its own."""
    plots = sorted((EMBEDDED_MODELS["tiny"].parents[2] / "docs" / "results").glob("*.svg"))
    assert plots and all(plot.is_plot(path.read_bytes()) for path in plots)


DEEP = 200_000  # far past Python's recursion limit: json.loads alone raises RecursionError
UNREADABLE_HEADS = {
    "arrays nested too deeply": b"[" * DEEP + b"]" * DEEP,
    "objects nested too deeply": b'{"a":' * DEEP + b"1" + b"}" * DEEP,
    "a key twice": b'{"architectures": ["LlamaForCausalLM"], "architectures": []}',
    "not UTF-8": b'{"architectures": "\xff\xfe"}',
    "a number past float's range": b'{"hidden_size": 1e400}',
    "NaN": b'{"hidden_size": NaN}',
    "cut off": b'{"architectures": ["LlamaForCaus',
}
"""What anyone's file may hold where minipaged is about to write one of its own."""


def every_output_kind() -> dict[str, OutputKind]:
    return {
        **{f"checkpoint's {name}": kind for name, kind in KINDS.items()},
        "trace": TRACE,
        "report": REPORT,
        "bench page": PAGE,
        "bench plot": plot.PLOT,
    }


@pytest.mark.parametrize("head", UNREADABLE_HEADS.values(), ids=UNREADABLE_HEADS.keys())
def test_every_recognizer_says_no_to_a_head_it_cannot_read(head):
    """A recognizer reads the first bytes of whatever stands where a file is about to be
    written: anyone's file. It says no to what it cannot read, and never raises (a deeply
    nested ``config.json`` once raised RecursionError out of ``save_model``)."""
    safetensors_like = struct.pack("<Q", len(head)) + head  # the head as a safetensors header
    for name, kind in every_output_kind().items():
        for start in (head, safetensors_like, b"", b"\n" + head):
            assert kind.recognizes(start) is False, (name, start[:40])


@pytest.mark.parametrize("head", UNREADABLE_HEADS.values(), ids=UNREADABLE_HEADS.keys())
@pytest.mark.parametrize("name", list(KINDS)[:4])  # the JSON files of a checkpoint
def test_a_checkpoint_file_of_unreadable_json_is_refused_and_kept(tmp_path, tiny, head, name):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / name).write_bytes(head)
    refused(lambda: save_model(tiny, TOKENIZER, folder), folder / name)
