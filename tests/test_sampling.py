import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from minipaged.sampling import SamplingParams, argmax_rows, distributions, sample, sample_rows


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"n": 0}, "n must be"),
        ({"beam_width": 0}, "beam_width"),
        ({"seed": 1.5}, "seed"),
        ({"temperature": float("inf")}, "greedy. or from 0.01 to 100"),
        ({"temperature": 1e-300}, "from 0.01 to 100"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": "0.7"}, "temperature"),
        ({"length_penalty": float("nan")}, "length_penalty"),
        ({"length_penalty": "1"}, "length_penalty"),
        ({"ignore_eos": "no"}, "ignore_eos must be True or False"),
        ({"use_beam_search": 1}, "use_beam_search must be True or False"),
        ({"stop_token_ids": 5}, "stop_token_ids"),
        ({"stop_token_ids": [1, "2"]}, "stop_token_ids"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"use_beam_search": True, "beam_width": 2, "n": 3}, "n=3 needs beam_width of at least 3"),
        ({"use_beam_search": True, "beam_width": 2, "temperature": 0.7}, "samples nothing"),
        ({"use_beam_search": True, "top_k": 5}, "top_k at 0"),
        ({"beam_width": 3}, "beam_width=3 needs use_beam_search=True"),
    ],
)
def test_bad_sampling_params_are_refused_naming_the_rule(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_beam_search_runs_beam_width_sequences():
    params = SamplingParams(use_beam_search=True, beam_width=4, temperature=0)
    assert params.num_sequences == 4
    # nothing is sampled, so the default temperature (the model's distribution) is accepted
    assert SamplingParams(use_beam_search=True, beam_width=4).num_sequences == 4
    assert SamplingParams(n=3).num_sequences == 3


def test_top_k_minus_one_is_vllms_off_and_reads_back_as_zero():
    assert SamplingParams(top_k=-1) == SamplingParams(top_k=0)


def test_greedy_returns_the_argmax_for_every_sample():
    logits = torch.tensor([0.1, 3.0, 0.2])
    params = SamplingParams(temperature=0)
    assert sample(logits, params, torch.Generator().manual_seed(0), 3) == [1, 1, 1]


def test_top_k_never_samples_outside_the_k_most_likely():
    logits = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0])
    params = SamplingParams(temperature=1.0, top_k=2)
    drawn = sample(logits, params, torch.Generator().manual_seed(0), 500)
    assert set(drawn) == {0, 1}


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    params = SamplingParams(temperature=1.0, top_p=0.8)
    drawn = sample(probs.log(), params, torch.Generator().manual_seed(0), 1000)
    assert set(drawn) == {0, 1}, "0.5 + 0.3 reaches 0.8: the tail is cut"


def test_seeded_samples_repeat():
    logits = torch.randn(50)
    params = SamplingParams(temperature=1.0)
    first = sample(logits, params, torch.Generator().manual_seed(4), 20)
    assert sample(logits, params, torch.Generator().manual_seed(4), 20) == first


def one_row_distribution(logits, params):
    """The distribution of one row, written the plain way: the oracle for the batched one."""
    logits = logits.float() / params.temperature
    if params.top_k:
        kth = torch.topk(logits, min(params.top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1:
        sorted_probs, order = torch.sort(probs, descending=True)
        drop = sorted_probs.cumsum(0) - sorted_probs >= params.top_p
        probs = probs.scatter(0, order, sorted_probs.masked_fill(drop, 0.0))
    return probs


@st.composite
def batches(draw):
    """Logits of 1–6 rows (small integers when ``ties``, so top-k and top-p meet equal values)
    and, per row, parameters (greedy or sampled, with or without top-k and top-p), a seed and
    how many tokens to draw (0 draws none)."""
    rows = draw(st.integers(1, 6))
    vocab = draw(st.sampled_from([2, 5, 64, 2048]))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    if draw(st.booleans()):  # ties
        logits = torch.randint(-3, 3, (rows, vocab), generator=generator).float()
    else:
        logits = torch.randn(rows, vocab, generator=generator) * draw(st.sampled_from([0.1, 1, 8]))
    params = [
        SamplingParams(
            temperature=draw(st.sampled_from([0, 0.3, 1.0, 1.7])),
            top_k=draw(st.sampled_from([0, 1, 2, 5, 4096])),
            top_p=draw(st.sampled_from([1.0, 0.9, 0.5])),
        )
        for _ in range(rows)
    ]
    seeds = draw(st.lists(st.integers(0, 99), min_size=rows, max_size=rows))
    counts = draw(st.lists(st.integers(0, 3), min_size=rows, max_size=rows))
    return logits, params, seeds, counts


@given(batches())
def test_batched_distributions_equal_each_row_alone_bit_for_bit(batch):
    logits, params, _, _ = batch
    sampled = [r for r, p in enumerate(params) if p.temperature > 0]
    if not sampled:
        return
    probs = distributions(logits[sampled], [params[r] for r in sampled])
    for row, r in zip(probs, sampled, strict=True):
        assert torch.equal(row, one_row_distribution(logits[r], params[r]))


@given(batches())
def test_batched_sampling_draws_each_row_as_its_own_seeded_generator_would(batch):
    """A row's tokens depend on its logits, parameters and generator only, not on the rows
    beside it: the greedy argmax, or draws from its own generator's stream."""
    logits, params, seeds, counts = batch
    generators = [torch.Generator().manual_seed(seed) for seed in seeds]
    tokens = sample_rows(logits, params, generators, counts)
    for r, (p, seed, count) in enumerate(zip(params, seeds, counts, strict=True)):
        if count == 0:
            assert tokens[r] == []
        elif p.temperature == 0:
            assert tokens[r] == [int(torch.argmax(logits[r]))] * count
        else:
            alone = torch.Generator().manual_seed(seed)
            probs = one_row_distribution(logits[r], p)
            expected = torch.multinomial(probs, count, replacement=True, generator=alone)
            assert tokens[r] == expected.tolist()


@given(
    st.integers(1, 8),
    st.sampled_from([1, 3, 2048]),
    st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    st.integers(0, 2**16),
)
def test_argmax_rows_follows_torch_argmax_on_ties_and_nan(rows, vocab, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randint(-2, 2, (rows, vocab), generator=generator).to(dtype)  # many ties
    nan = torch.rand(rows, vocab, generator=generator) < 0.05
    logits = logits.masked_fill(nan, float("nan"))
    assert argmax_rows(logits) == torch.argmax(logits, dim=-1).tolist()
