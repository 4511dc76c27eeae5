"""What a run prints: each request's prompt and samples, the block manager's memory summary,
and a recorded trace replayed step by step as text. ``minipaged generate`` and ``minipaged
trace`` print through these.

User text (prompts, samples) is always a ``rich.text.Text``, never markup, so a prompt that
holds ``[p]`` or ``[/dim]`` prints as written; styles come from ``Text``'s own spans.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from minipaged.arguments import say

if TYPE_CHECKING:  # these import torch; printing needs none of it
    from minipaged.outputs import RequestOutput
    from minipaged.stats import RunStats
    from minipaged.tokenizer import Tokenizer
    from minipaged.trace import Trace


def print_outputs(console: Console, outputs: Iterable[RequestOutput]) -> None:
    """Each request's prompt in bold, then each of its samples (numbered when there are
    several). User text is a ``Text``, never markup: a prompt may contain ``[p]``."""
    for output in outputs:
        console.rule(Text(f"request {output.request_id}"))
        console.print(Text(output.prompt or str(output.prompt_token_ids), style="bold"), end="")
        if output.error:
            console.print(Text.assemble("\n", ("rejected: ", "red"), output.error))
        for completion in output.outputs:
            label = f"\n[{completion.index}] " if len(output.outputs) > 1 else ""
            console.print(Text.assemble((label, "dim"), completion.text), highlight=False)
        console.print()


def print_summary(console: Console, stats: RunStats, prefix_caching: str | None) -> None:
    """The run's memory table; with prefix caching and no hit, why there was none."""
    table = Table(title="memory", show_header=False)
    for label, value in stats.rows():
        table.add_row(Text(label), Text(value))
    console.print(table)
    if prefix_caching and stats.events["prefix-hit"] == 0:
        console.print(
            Text(
                "no prefix hits: requests share only whole blocks of B tokens that start "
                "their prompts alike; give them a common start longer than B (requests "
                "admitted in the same step share too: a block is cached when it is allocated)",
                style="dim",
            )
        )


def load_recorded(
    path: str | Path, model: str = "tiny", command: str = "trace replay"
) -> tuple[Trace, Tokenizer | None]:
    """The trace at ``path`` and the tokenizer of its model (the header's, else ``model``), or
    None with a note on stderr where that model is not here. With the model's config here,
    every token id of the trace is checked against its vocabulary as the trace loads."""
    from minipaged import trace
    from minipaged.checkpoint import CheckpointError, load_config
    from minipaged.models import model_directory

    recorded_model = trace.read_header(path).get("model", model)
    tokenizer = tokenizer_of(recorded_model, command)
    try:
        vocab_size = load_config(model_directory(recorded_model)).vocab_size
    except (CheckpointError, OSError):  # no model here: ids are only checked to be int32
        vocab_size = None
    return trace.load(path, vocab_size), tokenizer


def replay(recorded: Trace, tokenizer: Tokenizer | None) -> None:
    """Print each step's new tokens as text (decoded with the recorded model's ``tokenizer``
    when it is here, else as ids) and what the block manager did."""
    steps = recorded.steps
    print(f"trace of {recorded.header.get('model', '?')}: {len(steps)} steps")
    for step in steps:
        tokens = ", ".join(
            f"seq {seq} {_word(tokenizer, token)}" for seq, token in step.new_tokens.items()
        )
        print(f"step {step.step}: {tokens or 'no new tokens'}")
        for event in step.events:
            print(f"  {event.narrate()}")


def _word(tokenizer: Tokenizer | None, token: int) -> str:
    if tokenizer is None:
        return f"token {token}"
    return json.dumps(tokenizer.decode([token]), ensure_ascii=False)


def tokenizer_of(model: object, command: str = "trace replay") -> Tokenizer | None:
    """The tokenizer of the trace's model, or None (with a note from ``command``) where it is
    not here."""
    from minipaged.models import model_directory
    from minipaged.tokenizer import Tokenizer, TokenizerError

    if isinstance(model, str) and (model_directory(model) / "tokenizer.json").is_file():
        try:
            return Tokenizer(model_directory(model))
        except TokenizerError as error:
            say(command, f"{error}; showing token ids")
            return None
    say(command, f"no tokenizer for the model {model!r} here; showing token ids")
    return None
