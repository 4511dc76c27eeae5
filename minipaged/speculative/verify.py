"""The verify pass: the target model reads every node of every tree in one forward pass.

Rows are the trees' nodes, tree after tree, root first. Node $i$ of a sequence with prefix $P$
is the token at position $P + \\delta_i$. In every layer its key and value are written to its
slot in its own branch and to the same position in the branches below it
(``Branches.extra_writes``), then ``attention.paged_attention_tree`` lets it see the prefix
and its ancestors (the ancestors mask $M$). Row $i$ of the logits is the target's prediction
after node $i$: what acceptance compares with node $i$'s children.

The tree mask runs on the reference attention whatever the backend: the Numba kernels have no
tree mask, so the ``"numba"`` and ``"numba-cpu"`` backends fall back to the reference for this
pass (the pools have the same layout) and say so once, in the log.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from minipaged.attention import NO_BLOCK, paged_attention_tree
from minipaged.attention_call import engine_attention
from minipaged.kv_cache import KVCache, write_kv
from minipaged.model import Llama
from minipaged.speculative.branches import Branches
from minipaged.speculative.tree import TokenTree

log = logging.getLogger(__name__)
_told: set[str] = set()


def fallback_note(backend: str) -> str | None:
    """What the verify pass runs on instead of ``backend``'s kernels, or None for the
    reference."""
    if backend == "torch":
        return None
    return f"backend {backend!r} has no tree-mask kernel: the verify pass runs on the reference"


@torch.inference_mode()
def verify(
    model: Llama, kv_cache: KVCache, trees: list[tuple[TokenTree, Branches]], backend: str
) -> list[Tensor]:
    """One forward pass over every node of ``trees``; returns each tree's logits
    ``[len(tree), vocab]``, row $i$ predicting the token after node $i$."""
    note = fallback_note(backend)
    if note is not None and backend not in _told:
        _told.add(backend)
        log.info(note)
    device = kv_cache.device
    tokens, positions, masks, tables, home, write_rows, write_slots = [], [], [], [], [], [], []
    for tree, branches in trees:
        base = len(tokens)
        tokens += [node.token for node in tree.nodes]
        positions += [branches.prefix_len + node.depth for node in tree.nodes]
        masks.append(tree.ancestors_mask())
        home += branches.home_slots
        write_rows += range(base, base + len(tree))
        write_slots += branches.home_slots
        for node, slot in branches.extra_writes:
            write_rows.append(base + node)
            write_slots.append(slot)
        tables.append(branches.seq_blocks)
    width = max(len(t) for t in tables)
    block_tables = torch.tensor(
        [t + [NO_BLOCK] * (width - len(t)) for t in tables], dtype=torch.int32, device=device
    )  # [batch, width]: each sequence's own table, whose first P positions are the prefix
    prefix_lens = torch.tensor([b.prefix_len for _, b in trees], dtype=torch.int32, device=device)
    query_lens = torch.tensor([len(t) for t, _ in trees], dtype=torch.int32, device=device)
    tree_mask = torch.block_diag(*masks).to(device)  # [N, N]: no tree sees another
    node_slots = torch.tensor(home, device=device)
    rows = torch.tensor(write_rows, device=device)
    slots = torch.tensor(write_slots, device=device)
    scale = model.config.head_dim**-0.5

    def attend(layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        key_pool, value_pool = kv_cache.key[layer], kv_cache.value[layer]
        # An FP8 cache quantizes on the write and dequantizes on the read, as in Llama.forward.
        scales = kv_cache.scales(layer, q.dtype)
        write_kv(key_pool, value_pool, k[rows].contiguous(), v[rows].contiguous(), slots, **scales)
        return paged_attention_tree(
            q.contiguous(),
            key_pool,
            value_pool,
            block_tables,
            prefix_lens,
            query_lens,
            scale,
            kv_cache.block_size,
            tree_mask=tree_mask,
            node_slots=node_slots,
            **scales,
        )

    ids = torch.tensor(tokens, device=device)
    with engine_attention():  # the model's scale and the cache's scales: no value read back
        logits = model.forward_with(ids, torch.tensor(positions, device=device), attend)
    return list(torch.split(logits, query_lens.tolist()))
