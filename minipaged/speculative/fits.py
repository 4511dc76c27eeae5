"""What speculation needs of the models and of the step's token budget, checked together.

Each of ``SpeculativeConfig``'s sizes is checked alone when it is made; these are the settings
that only mean something beside another one, each refused naming both values:

- the tree's depth $d$ (``num_speculative_tokens``) against the target's context
  (``max_position_embeddings``): one prompt token leaves one fewer to write;
- $d$ against the step's token budget: a sequence verified in a step needs its own token and
  the $d$ its tree drafts, so ``max_num_batched_tokens`` must hold at least $1 + d$, or no
  sequence ever drafts as deep as the setting says. A full batch may draft less deep: the
  trees share what the sequences' own tokens leave of the budget (``LLMEngine.step``), and
  that is the budget working, not a setting to refuse;
- a draft model against the target: the same vocabulary (its token ids are the target's), a
  context at least as long (it writes every position the target does), and, for a draft
  already loaded, the target's dtype and device (it runs as it is).

A draft model named by a directory has its ``config.json`` read once, here, and checked against
its weights' headers; the reading is returned, for ``load_model`` to build the draft from, as
``LLM`` does for the target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from minipaged.checkpoint import load_config
from minipaged.checkpoint_tensors import check_weights_match
from minipaged.model import Llama
from minipaged.models import model_directory

if TYPE_CHECKING:
    import torch

    from minipaged.model import LlamaConfig
    from minipaged.speculative.config import SpeculativeConfig

__all__ = ["check_loaded_draft", "check_speculation_fits"]


def check_speculation_fits(
    config: SpeculativeConfig,
    target: LlamaConfig,
    budget: int,
    draft_shape: LlamaConfig | None = None,
) -> LlamaConfig | None:
    """Refuse, from the models' ``config.json`` alone (before any weights load), speculation
    that cannot run as set (see the module docstring); ``budget`` is ``max_num_batched_tokens``
    with None resolved. Returns the draft model's config (``draft_shape`` when the caller read
    it already), None for prompt lookup."""
    depth = config.num_speculative_tokens
    context = target.max_position_embeddings
    if depth >= context:
        raise ValueError(
            f"speculative num_speculative_tokens={depth:,} drafts as deep as the model's "
            f"context of {context:,} tokens, past what any sequence can write after its "
            f"prompt; lower it below {context:,}"
        )
    if budget - 1 < depth:
        raise ValueError(
            f"speculative num_speculative_tokens={depth:,} needs {depth:,} tokens of a step "
            f"beside its sequence's own, but max_num_batched_tokens={budget:,} less that one "
            f"token leaves {budget - 1:,}: raise max_num_batched_tokens "
            f"(--max-num-batched-tokens) to at least {depth + 1:,} or lower "
            "num_speculative_tokens"
        )
    if config.method != "draft":
        return None
    draft = config.draft_model
    read_here = draft_shape is None and not isinstance(draft, Llama)
    if draft_shape is None:
        draft_shape = (
            draft.config if isinstance(draft, Llama) else load_config(model_directory(draft))
        )
    _check_draft_shape(draft_shape, target)
    if read_here:  # its weights' headers (no tensor loads): the shapes the draft is built from
        check_weights_match(model_directory(draft), draft_shape)
    return draft_shape


def _check_draft_shape(draft: LlamaConfig, target: LlamaConfig) -> None:
    if draft.vocab_size != target.vocab_size:
        raise ValueError(
            f"the draft model's vocabulary has {draft.vocab_size:,} tokens but the target's "
            f"has {target.vocab_size:,}: a draft model must share the target's tokenizer; "
            "give a draft_model trained with it, or method 'ngram'"
        )
    if draft.max_position_embeddings < target.max_position_embeddings:
        raise ValueError(
            f"the draft model's context is {draft.max_position_embeddings:,} tokens but the "
            f"target's is {target.max_position_embeddings:,}: the draft writes every position "
            "the target does; give a draft_model with a context at least as long, or method "
            "'ngram'"
        )


def check_loaded_draft(draft: Llama, dtype: torch.dtype, device: torch.device) -> None:
    """A draft passed loaded runs as it is: it must have the target's dtype and device."""
    param = next(draft.parameters())
    if param.dtype != dtype or param.device != device:
        raise ValueError(
            f"the loaded draft model is {str(param.dtype).removeprefix('torch.')} on "
            f"{param.device} but the target is {str(dtype).removeprefix('torch.')} on "
            f"{device}: move it with draft.to(dtype=..., device=...), or pass the draft "
            "model's name or directory to load it as the target is loaded"
        )
