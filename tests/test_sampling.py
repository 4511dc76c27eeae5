import pytest
import torch

from minipaged.sampling import SamplingParams, sample


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"n": 0}, "n must be"),
        ({"beam_width": 0}, "beam_width"),
        ({"seed": 1.5}, "seed"),
        ({"use_beam_search": True, "beam_width": 2, "n": 2, "temperature": 0}, "leave n at 1"),
        ({"use_beam_search": True, "beam_width": 2}, "deterministic"),
    ],
)
def test_bad_sampling_params_are_refused_naming_the_rule(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_beam_search_runs_beam_width_sequences():
    params = SamplingParams(use_beam_search=True, beam_width=4, temperature=0)
    assert params.num_sequences == 4
    assert SamplingParams(n=3).num_sequences == 3


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
