"""The parts of speculative decoding, each against an oracle: the setting's checks, the
drafters, the ancestors mask, tree attention against contiguous attention, and the acceptance
rules (greedy: the target's argmax path; sampling: the target's distribution, by a chi-square
test)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minipaged.attention import paged_attention_prefill, paged_attention_tree
from minipaged.sampling import SamplingParams
from minipaged.speculative import SpeculativeConfig
from minipaged.speculative.acceptance import accept_greedy, accept_sampling
from minipaged.speculative.config import speculative_config
from minipaged.speculative.drafters import NgramDrafter
from minipaged.speculative.tree import TokenTree, grow_tree

FALSE_ALARM = 1e-3  # each chi-square test fails a correct sampler this often (seeds are fixed)


def chi_square_p_value(observed: list[int], expected: list[float]) -> float:
    """P(chi-square with len - 1 degrees of freedom >= the statistic), cells with expected > 0."""
    cells = [(o, e) for o, e in zip(observed, expected, strict=True) if e > 0]
    assert all(o == 0 for o, e in zip(observed, expected, strict=True) if e == 0)
    statistic = sum((o - e) ** 2 / e for o, e in cells)
    dof = len(cells) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2), torch.tensor(statistic / 2)))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(method="medusa"), "method must be one of"),
        (dict(num_speculative_tokens=0), "num_speculative_tokens must be an integer >= 1"),
        (dict(branching=True), "branching must be an integer >= 1"),
        (dict(max_tree_nodes=-1), "max_tree_nodes must be an integer >= 1"),
        (dict(ngram_min=4, ngram_max=2), "ngram_min"),
        (dict(method="draft"), "needs draft_model"),
        (dict(draft_model="tiny"), "only used by method 'draft'"),
    ],
)
def test_bad_settings_are_refused_naming_the_value_and_the_way_out(fields, message):
    with pytest.raises(ValueError, match=message):
        SpeculativeConfig(**fields)


def test_a_dict_setting_is_read_as_vllm_reads_speculative_config():
    assert speculative_config({"method": "ngram", "branching": 3}).branching == 3
    with pytest.raises(ValueError, match="unknown speculative setting"):
        speculative_config({"num_tokens": 3})


def test_ngram_lookup_proposes_what_followed_the_latest_longest_match():
    drafter = NgramDrafter(max_n=2, min_n=1)
    context = [1, 2, 3, 9, 2, 3, 4, 7, 2, 3]
    # "2 3" was followed by 4 (latest) and 9; "3" alone adds nothing new.
    assert drafter.lookup(context, 3) == [4, 9]
    assert drafter.lookup([5, 6, 7], 2) == []


def test_grow_tree_branches_top_k_per_depth_and_respects_the_node_cap():
    class Counting:  # guesses tokens 10 * depth + rank
        def propose(self, contexts, k, params, generator):
            return [[(10 * (len(c) - 2) + r, None) for r in range(k)] for c in contexts]

    greedy = SamplingParams(temperature=0)
    tree = grow_tree(Counting(), [7, 8], 3, 2, 100, greedy, torch.Generator())
    assert len(tree) == 1 + 2 + 4 + 8 and tree.depth == 3
    assert [tree.nodes[i].parent for i in tree.children(0)] == [0, 0]
    capped = grow_tree(Counting(), [7, 8], 3, 2, 5, greedy, torch.Generator())
    assert len(capped) == 6 and all(node.parent < i for i, node in enumerate(capped.nodes))


def test_the_ancestors_mask_of_a_chain_is_causal_and_of_a_tree_is_its_paths():
    chain = TokenTree.rooted_at(0)
    for i in range(3):
        chain.add(i + 1, i)
    assert torch.equal(chain.ancestors_mask(), torch.tril(torch.ones(4, 4, dtype=torch.bool)))
    tree = TokenTree.rooted_at(0)
    a, b = tree.add(1, 0), tree.add(2, 0)
    aa = tree.add(3, a)
    mask = tree.ancestors_mask()
    assert mask[aa].tolist() == [True, True, False, True]
    assert mask[b].tolist() == [True, False, True, False]


def _pools(num_blocks, kv_heads, block_size, head_dim, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (num_blocks, kv_heads, block_size, head_dim)
    return torch.randn(shape, generator=g), torch.randn(shape, generator=g)


def test_tree_attention_on_a_chain_is_a_causal_prefill():
    block_size, prefix, count = 4, 6, 5
    key_pool, value_pool = _pools(8, 2, block_size, 16, seed=1)
    table = torch.tensor([[5, 1, 7, 2]], dtype=torch.int32)
    query = torch.randn(count, 4, 16, generator=torch.Generator().manual_seed(2))
    positions = range(prefix, prefix + count)
    slots = torch.tensor(
        [int(table[0, t // block_size]) * block_size + t % block_size for t in positions]
    )
    tree = torch.tril(torch.ones(count, count, dtype=torch.bool))
    lens = torch.tensor([prefix], dtype=torch.int32), torch.tensor([count], dtype=torch.int32)
    got = paged_attention_tree(
        query,
        key_pool,
        value_pool,
        table,
        *lens,
        0.25,
        block_size,
        tree_mask=tree,
        node_slots=slots,
    )
    seq_lens = torch.tensor([prefix + count], dtype=torch.int32)
    want = paged_attention_prefill(
        query, key_pool, value_pool, table, seq_lens, lens[1], 0.25, block_size
    )
    torch.testing.assert_close(got, want)


def test_tree_attention_sees_exactly_the_prefix_and_each_nodes_ancestors():
    block_size, prefix, kv_heads, heads, head_dim = 2, 3, 1, 2, 8
    key_pool, value_pool = _pools(12, kv_heads, block_size, head_dim, seed=3)
    tree = TokenTree.rooted_at(0)
    a, b = tree.add(1, 0), tree.add(2, 0)
    tree.add(3, a), tree.add(4, b), tree.add(5, a)
    table = torch.tensor([[4, 9]], dtype=torch.int32)  # positions 0..2 of the prefix
    slots = torch.tensor([1, 6, 7, 10, 11, 13])  # any distinct slots outside the prefix
    query = torch.randn(len(tree), heads, head_dim, generator=torch.Generator().manual_seed(4))
    got = paged_attention_tree(
        query, key_pool, value_pool, table,
        torch.tensor([prefix], dtype=torch.int32), torch.tensor([len(tree)], dtype=torch.int32),
        0.5, block_size, tree_mask=tree.ancestors_mask(), node_slots=slots,
    )  # fmt: skip
    flat_k = key_pool.transpose(1, 2).reshape(-1, kv_heads, head_dim)  # [slots, N_KV, d_h]
    flat_v = value_pool.transpose(1, 2).reshape(-1, kv_heads, head_dim)
    prefix_slots = [
        int(table[0, t // block_size]) * block_size + t % block_size for t in range(prefix)
    ]
    for i in range(len(tree)):  # the oracle: contiguous attention over prefix + path(i)
        seen = prefix_slots + [int(slots[j]) for j in tree.path(i)]
        k = flat_k[seen].transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        v = flat_v[seen].transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        want = F.scaled_dot_product_attention(query[i][:, None], k, v, scale=0.5)[:, 0]
        torch.testing.assert_close(got[i], want)


def _tree_with_children(tokens_and_qs):
    tree = TokenTree.rooted_at(0)
    for token, q in tokens_and_qs:
        tree.add(token, 0, q)
    return tree


def test_greedy_acceptance_keeps_the_argmax_path_and_adds_the_targets_next_token():
    tree = TokenTree.rooted_at(0)
    a, b = tree.add(3, 0), tree.add(1, 0)
    ba = tree.add(2, b)
    logits = torch.full((len(tree), 5), -1.0)
    logits[0, 1] = logits[b, 2] = logits[ba, 4] = 1.0  # target: 0 -> 1 -> 2 -> 4
    logits[a, 0] = 1.0
    verdict = accept_greedy(tree, logits)
    assert verdict.accepted == (b, ba) and verdict.bonus == 4 and verdict.last == ba


@pytest.mark.parametrize("draft", ["model", "deterministic"])
def test_speculative_sampling_draws_each_token_from_the_targets_distribution(draft):
    """Two children drawn i.i.d. from q (or two fixed guesses, one-hot q): the token the
    verdict writes first (a kept child, or the residual's bonus) must follow p exactly."""
    p_logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 1.5])
    q = torch.softmax(torch.tensor([0.0, 2.0, 1.0, 1.5, 0.0, -2.0]), dim=0)
    params = SamplingParams(temperature=1.0)
    generator = torch.Generator().manual_seed(11)
    logits = torch.stack([p_logits] + [torch.zeros(6)] * 2)
    trials, counts = 4000, [0] * 6
    kept = 0
    for _ in range(trials):
        if draft == "model":
            drawn = torch.multinomial(q, 2, replacement=True, generator=generator).tolist()
            tree = _tree_with_children([(t, q) for t in drawn])
        else:
            tree = _tree_with_children([(1, None), (3, None)])
        verdict = accept_sampling(tree, logits, params, generator)
        first = tree.nodes[verdict.accepted[0]].token if verdict.accepted else verdict.bonus
        kept += bool(verdict.accepted)
        counts[first] += 1
    p = torch.softmax(p_logits, dim=0)
    assert 0 < kept < trials, "both verdicts must occur for the test to mean anything"
    assert chi_square_p_value(counts, (p * trials).tolist()) > FALSE_ALARM


def test_the_chi_square_test_catches_a_biased_sampler():
    """The planted bug: keeping a child always (no min(1, p/q) test) is drafting, not p."""
    p = torch.softmax(torch.tensor([2.0, 1.0, 0.5, 0.0]), dim=0)
    q = torch.tensor([0.1, 0.6, 0.2, 0.1])
    generator = torch.Generator().manual_seed(5)
    counts = [0] * 4
    for token in torch.multinomial(q, 2000, replacement=True, generator=generator).tolist():
        counts[token] += 1
    assert chi_square_p_value(counts, (p * 2000).tolist()) < FALSE_ALARM
