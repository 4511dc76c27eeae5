"""Every file a command reads is kept from its outputs: the model's directory, a speculative
draft model's, the trace a TUI replays, the code of an exercise it runs, the library modules
of ``--solution``. Before ``models.files_read``, ``trace record`` compared its trace with the
model's files only, so ``trace record DRAFT/config.json`` with a draft model ``DRAFT`` put a
trace in place of the draft's config, and ``tui --screenshot`` compared its picture with the
trace or the student's code only: ``tui --model M --screenshot M/config.json`` replaced the
model's config with an SVG, and ``--exercise N --solution`` let the picture replace a library
module. Each is refused before any work, with status 2, in one line naming the file, what it
is and the fix, and every file of the model is left as it was."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from minipaged import cli
from minipaged.grader.student_folder import graded_code
from minipaged.models import EMBEDDED_MODELS
from tui.engine_config import TUI_CONFIG
from tui.shown_run import check_screenshot_apart

USAGE = 2


@pytest.fixture
def models(tmp_path) -> tuple[Path, Path]:
    """Copies of the embedded model and its draft, whose files a command must not replace."""
    copies = tmp_path / "model", tmp_path / "draft"
    for name, copy in zip(("tiny", "tiny-draft"), copies, strict=True):
        shutil.copytree(EMBEDDED_MODELS[name], copy)
    return copies


def contents(folder: Path) -> dict[str, bytes]:
    return {file.name: file.read_bytes() for file in sorted(folder.iterdir())}


def draft_flag(draft: Path) -> list[str]:
    config = {"method": "draft", "num_speculative_tokens": 2, "draft_model": str(draft)}
    return ["--speculative-config", json.dumps(config)]


CASES = {  # (command line, the file it would have replaced, what that file is)
    "trace over the draft's config": (
        lambda model, draft: ["trace", "record", str(draft / "config.json"), *draft_flag(draft)],
        "draft/config.json",
        "a file of the draft model",
    ),
    "trace over the draft's weights": (
        lambda model, draft: [
            "trace",
            "record",
            str(draft / "model.safetensors"),
            "--model",
            str(model),
            *draft_flag(draft),
        ],
        "draft/model.safetensors",
        "a file of the draft model",
    ),
    "trace over the model's tokenizer": (
        lambda model, draft: [
            "trace",
            "record",
            str(model / "tokenizer.json"),
            "--model",
            str(model),
        ],
        "model/tokenizer.json",
        "a file of the model",
    ),
    "screenshot over the model's config": (
        lambda model, draft: [
            "tui",
            "--screenshot",
            str(model / "config.json"),
            "--model",
            str(model),
        ],
        "model/config.json",
        "a file of the model",
    ),
    "screenshot over the draft's config": (
        lambda model, draft: [
            "tui",
            "--screenshot",
            str(draft / "config.json"),
            "--prompt",
            "It is",
            *draft_flag(draft),
        ],
        "draft/config.json",
        "a file of the draft model",
    ),
    "screenshot of a replay over the model's tokenizer": (
        lambda model, draft: [
            "tui",
            "--screenshot",
            str(model / "tokenizer.json"),
            "--model",
            str(model),
            "--trace",
            str(model.parent / "run.jsonl"),
        ],
        "model/tokenizer.json",
        "a file of the model",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_output_over_a_file_the_command_reads_is_refused_and_the_file_kept(
    case, models, tmp_path, capsys
):
    command, replaced, what = CASES[case]
    model, draft = models
    (tmp_path / "run.jsonl").write_text('{"format": "minipaged-trace"}\n')
    before = contents(model), contents(draft)
    argv = command(model, draft)
    if argv[0] == "trace":
        argv += ["--prompt", "It is", "--max-tokens", "2"]
    assert cli.main(argv) == USAGE
    err = capsys.readouterr().err
    assert f"{tmp_path / replaced}, {what}" in err and "name another file to write" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert (contents(model), contents(draft)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft", "model", "run.jsonl"]


def shown(**flags) -> argparse.Namespace:
    """``tui``'s parsed flags where only ``flags`` are given."""
    given = {"trace": None, "exercise": None, "path": None, "solution": False}
    return argparse.Namespace(**{**given, **flags})


def test_a_screenshot_of_the_solution_is_kept_off_the_library_modules_it_runs():
    """Tried on the rule, not the command: with the rule broken, the command would write its
    picture over a module of the checkout running the test."""
    number = 2  # a TUI exercise
    for _, module in graded_code(number, None, solution=True):
        args = shown(screenshot=module, exercise=number, solution=True)
        with pytest.raises(ValueError, match=rf"--screenshot {module} would replace .*library"):
            check_screenshot_apart(args, TUI_CONFIG)


def test_a_screenshot_beside_the_files_it_reads_is_written(models):
    """The rule refuses the files read, not their folders: a picture may go beside them."""
    model = models[0]
    config = TUI_CONFIG.replace(model=str(model))
    check_screenshot_apart(shown(screenshot=model / "run.svg"), config)
    check_screenshot_apart(shown(screenshot=None), config)  # no picture: nothing to compare
