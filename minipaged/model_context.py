"""``--max-model-len`` against the context of the model it is for, read from the checkpoint's
``config.json`` before any weight loads. ``EngineConfig.context`` refuses the same length, but
only once the engine is built from the loaded model, and in the Python API's words
(``max_model_len=``), which a command line never typed."""

from __future__ import annotations

from pathlib import Path

from minipaged.checkpoint import load_config


def check_context(directory: Path, max_model_len: int | None) -> None:
    """Refuse ``max_model_len`` (``--max-model-len``; None: the whole context) past the
    ``max_position_embeddings`` that ``directory``'s ``config.json`` states, naming the flag."""
    if max_model_len is None:
        return
    limit = load_config(directory).max_position_embeddings
    if max_model_len > limit:
        raise ValueError(
            f"--max-model-len {max_model_len:,} is past the model's context of {limit:,} "
            f"tokens (max_position_embeddings in {directory / 'config.json'}): pass "
            f"--max-model-len {limit} or less, or leave it out for the whole context"
        )
