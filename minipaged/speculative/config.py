"""The speculative-decoding setting, in the style of vLLM's ``speculative_config``."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from minipaged.json_input import NotJSON, loads
from minipaged.python_numbers import take_python_numbers

if TYPE_CHECKING:  # a loaded draft model is also accepted; the config itself needs no torch
    from minipaged.model import Llama

METHODS = ("ngram", "draft")
MAX_TREE_NODES = 1024
"""The most guesses one tree may hold. The verify pass attends every node to the prefix and to
the nodes before it (scores and an ancestors mask of $n \times (P + n)$ per head), and every
node is a forked table: past about a thousand nodes a step costs seconds and gigabytes while it
can still accept at most $d + 1$ tokens."""

MAX_NGRAM = 64
"""The longest suffix prompt lookup may match (``ngram_max``, hence ``ngram_min``). The lookup
tries every earlier position for each length from ``ngram_max`` down, so its time grows with
``ngram_max`` times the context: at 64 and a 4,096-token context one sequence's lookup took
0.09 s a step here (0.6 s at 256), more than a decode step of the tiny model; and a suffix that
long recurs only in text that repeats itself, where a short one finds it too."""


_GUESSES = "the most guesses any tree holds (MAX_TREE_NODES), so its {}"
CAPS = {  # each size's cap, and why: the one rule every speculative size follows
    "max_tree_nodes": (MAX_TREE_NODES, "as a verify pass costs n^2 in the tree's size"),
    # a depth or branching past the cap was accepted as if it drafted more, and did not;
    # max_tree_nodes, often smaller, caps each tree further at run time
    "num_speculative_tokens": (MAX_TREE_NODES, _GUESSES.format("deepest")),
    "branching": (MAX_TREE_NODES, _GUESSES.format("widest")),
    "ngram_max": (MAX_NGRAM, "the longest suffix prompt lookup matches (MAX_NGRAM)"),
    "ngram_min": (MAX_NGRAM, "the longest suffix prompt lookup matches (MAX_NGRAM)"),
}


@dataclass(frozen=True)
class SpeculativeConfig:
    """How ``LLM(..., speculative=...)`` drafts and how big its token tree grows.

    - ``method``: ``"ngram"`` (prompt lookup: continue the sequence the way an earlier
      occurrence of its last tokens continued; no model) or ``"draft"`` (a smaller Llama with
      the target's tokenizer, ``draft_model``).
    - ``num_speculative_tokens``: the tree's depth $d$, the most draft tokens one step accepts;
      at most ``MAX_TREE_NODES``, as deep as a chain of that many guesses.
    - ``branching``: $k$, the children a node may have (the drafter's top $k$ guesses, or $k$
      draws from the draft distribution when sampling); $k = 1$ is a single chain. At most
      ``MAX_TREE_NODES``, as wide as a tree of that many guesses.
    - ``draft_model``: an embedded model's name (``"tiny-draft"``), a Hugging Face Llama
      directory, or a loaded ``Llama``; only for ``method="draft"``. A directory must exist
      (``FileNotFoundError`` otherwise, as for any missing path).
    - ``max_tree_nodes``: a cap on the draft nodes of one tree (each costs one block while the
      step runs), filled breadth first: a full tree has $k + k^2 + \\dots + k^d$. At most
      ``MAX_TREE_NODES``; the pool's free blocks and what the step's token budget leaves cap
      each tree further, before drafting (``Speculator.draft``). So a cap above the budget,
      or below $d$, is not refused: the tree is only smaller (under a budget of 6 the default
      32 drafts at most 5 guesses), and speculation works whenever one guess fits.
    - ``ngram_max`` / ``ngram_min``: the longest and shortest suffix prompt lookup matches; at
      most ``MAX_NGRAM``.

    Guarantee after construction: every value is in range, so a bad setting fails here, with
    its name and the way out, before any model loads.
    """

    method: str = "ngram"
    num_speculative_tokens: int = 4
    branching: int = 2
    draft_model: str | Path | Llama | None = None
    max_tree_nodes: int = 32
    ngram_max: int = 3
    ngram_min: int = 1

    def __post_init__(self) -> None:
        take_python_numbers(self)  # np.int64(4) is 4
        if not isinstance(self.method, str) or self.method not in METHODS:
            raise ValueError(
                f"speculative method must be one of {list(METHODS)}, got {self.method!r}"
            )
        for name in CAPS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"speculative {name} must be an integer >= 1, got {value!r}")
        for name, (cap, why) in CAPS.items():
            if getattr(self, name) > cap:
                raise ValueError(
                    f"speculative {name} must be at most {cap}, {why}, got "
                    f"{getattr(self, name)}; lower it"
                )
        if self.ngram_min > self.ngram_max:
            raise ValueError(
                f"speculative ngram_min ({self.ngram_min}) must be <= ngram_max ({self.ngram_max})"
            )
        if self.method == "draft" and self.draft_model is None:
            raise ValueError(
                "speculative method 'draft' needs draft_model: a model name such as 'tiny' or "
                "the directory of a Llama that shares the target's tokenizer"
            )
        if self.method == "draft":
            _check_draft_model(self.draft_model)
        if self.method == "ngram" and self.draft_model is not None:
            raise ValueError(
                f"draft_model={self.draft_model!r} is only used by method 'draft'; "
                "drop it, or set method='draft'"
            )


def _check_draft_model(model: object) -> None:
    """A draft model is a name or directory that is there, or a loaded ``Llama``."""
    if isinstance(model, str | os.PathLike):
        from minipaged.models import model_directory, no_directory

        if not str(model).strip():
            raise ValueError(
                "speculative draft_model must name a model such as 'tiny-draft' or a Llama "
                "directory, got an empty string"
            )
        if not model_directory(model).is_dir():
            raise FileNotFoundError(
                f"speculative draft_model {str(model)!r}: {no_directory(model_directory(model))}"
                "; pass an embedded model's name ('tiny-draft') or a Hugging Face Llama "
                "directory holding config.json and model.safetensors"
            )
        return
    # A loaded Llama means minipaged.model is imported already; importing it here would make
    # the engine's config, which checks this, import torch.
    model_module = sys.modules.get("minipaged.model")
    if model_module is None or not isinstance(model, model_module.Llama):
        raise ValueError(
            "speculative draft_model must be a model name such as 'tiny-draft', a Llama "
            f"directory or a loaded Llama, got {type(model).__name__} {model!r:.60}"
        )


NEEDED = '"method": "ngram" or "draft" (with "draft_model")'
"""The key every speculative setting given as a dict or JSON names, as vLLM's
``speculative_config`` names its method: an empty one asked for nothing."""


def speculative_config(value: SpeculativeConfig | dict | str | None) -> SpeculativeConfig | None:
    """``LLM(speculative=...)`` accepts a config, a dict of its fields (vLLM's style) that
    names its ``method`` (``NEEDED``), that dict as JSON (``minipaged generate
    --speculative-config``) or None."""
    if value is None or isinstance(value, SpeculativeConfig):
        return value
    if isinstance(value, str):
        try:
            value = loads(value)
        except NotJSON as error:
            raise ValueError(
                f"speculative (--speculative-config) must be a JSON object such as "
                f'\'{{"method": "ngram", "num_speculative_tokens": 4}}\', got {_shown(value)} '
                f"({error})"
            ) from None
    if isinstance(value, dict):
        known = sorted(SpeculativeConfig.__dataclass_fields__)
        unknown = set(value) - set(known)
        if unknown:
            raise ValueError(
                f"unknown speculative setting(s) {sorted(unknown, key=str)}; known: {known}, "
                f"of which {NEEDED} is needed"
            )
        if "method" not in value:  # {} asked for nothing, and would have drafted by ngram
            raise ValueError(
                f"a speculative setting needs its method: {NEEDED}; the others are optional "
                f"({', '.join(k for k in known if k != 'method')}), got {_shown(value)}"
            )
        return SpeculativeConfig(**value)
    raise ValueError(
        "speculative must be a SpeculativeConfig, a dict of its fields (a JSON object on the "
        f"command line) or None, got {value!r}"
    )


def _shown(value: object) -> str:
    """``value`` as a refusal shows it: its repr, cut past 200 characters where the cut is
    marked (cut unmarked at 80, a path looked like another, shorter one)."""
    text = repr(value)
    return text if len(text) <= 200 else f"{text[:200]}... ({len(text):,} characters)"
