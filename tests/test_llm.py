"""The offline API on the embedded tiny model: ``LLM("tiny").generate(...)``, the
``minipaged generate`` and ``minipaged trace`` commands, and their errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from minipaged import backend, cli
from minipaged.checkpoint import EMBEDDED_MODELS, CheckpointError
from minipaged.llm import LLM
from minipaged.sampling import SamplingParams

PROMPT = "It is a truth universally acknowledged"
COMMON_WORDS = {
    "the", "of", "and", "to", "a", "in", "was", "her", "she", "he", "it", "that", "not", "be",
    "is", "i", "you", "his", "had", "with", "for", "as", "but", "have", "my", "which", "by",
    "mr", "so", "all", "at", "on", "been", "very", "would", "could", "him", "no", "were", "they",
}  # fmt: skip


@pytest.fixture(scope="module")
def llm():
    return LLM("tiny", num_gpu_blocks=64, num_cpu_blocks=32)


def test_the_tiny_model_writes_english(llm):
    (output,) = llm.generate(PROMPT, SamplingParams(max_tokens=40, temperature=0, ignore_eos=True))
    words = [w.strip('.,;:!?"').lower() for w in output.outputs[0].text.split()]
    assert len(output.outputs[0].token_ids) == 40
    assert len([w for w in words if w in COMMON_WORDS]) >= 5, output.outputs[0].text


def test_the_tiny_model_export_gives_transformers_the_same_greedy_tokens(llm, transformers):
    hf = transformers.LlamaForCausalLM.from_pretrained(EMBEDDED_MODELS["tiny"]).eval()
    ids = llm.tokenizer.encode(PROMPT)
    with torch.no_grad():
        # The prompt starts with BOS = id 0; without an explicit attention mask transformers
        # would take id 0 for padding (pad_token_id=0) and mask the BOS out.
        prompt = torch.tensor([ids])
        expected = hf.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=30,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )[0, len(ids) :].tolist()
    (output,) = llm.generate(PROMPT, SamplingParams(max_tokens=30, temperature=0, ignore_eos=True))
    assert output.outputs[0].token_ids == expected


def test_text_and_token_id_prompts_give_the_same_output(llm):
    params = SamplingParams(max_tokens=8, temperature=0)
    ids = llm.tokenizer.encode(PROMPT)
    by_text, by_ids = llm.generate([PROMPT, {"prompt_token_ids": ids}], params)
    assert by_text.prompt_token_ids == ids == by_ids.prompt_token_ids
    assert by_text.outputs[0].token_ids == by_ids.outputs[0].token_ids


def test_a_prompt_longer_than_the_context_is_refused_before_anything_runs(llm):
    context = llm.model.config.max_position_embeddings
    too_long = {"prompt_token_ids": [5] * (context + 1)}
    with pytest.raises(ValueError, match=f"context is {context} tokens"):
        llm.generate([PROMPT, too_long], SamplingParams(max_tokens=4))
    assert not llm.engine.has_unfinished()


@pytest.mark.parametrize(
    ("prompts", "params", "error", "message"),
    [
        (None, None, TypeError, "prompts must be a string"),
        (5, None, TypeError, "got int 5"),
        ([1, 2, 3], None, TypeError, r"\[\[\.\.\.\]\]"),
        ([PROMPT, 7], None, TypeError, "a prompt is a string"),
        ([torch.tensor([1, 2])], None, TypeError, "got Tensor"),
        ({"prompt_token_ids": 5}, None, TypeError, "got int 5"),
        ([[True, 2]], None, ValueError, r"got \[True\]"),
        (PROMPT, {"max_tokens": 2}, TypeError, "must be a SamplingParams, got dict"),
        ([PROMPT, PROMPT], [SamplingParams()], ValueError, "1 SamplingParams for 2 prompts"),
        ([PROMPT, PROMPT], [SamplingParams(), "greedy"], TypeError, "got str 'greedy'"),
    ],
)
def test_prompts_and_params_of_the_wrong_kind_are_refused_before_anything_runs(
    llm, prompts, params, error, message
):
    with pytest.raises(error, match=message):
        llm.generate(prompts, params)
    assert not llm.engine.has_unfinished() and not llm.engine.requests


def test_each_prompt_may_have_its_own_sampling_params(llm):
    first, second = SamplingParams(max_tokens=3, seed=0), SamplingParams(max_tokens=5, n=2, seed=1)
    both = llm.generate([PROMPT, "Emma"], [first, second])
    alone = [*llm.generate(PROMPT, first), *llm.generate("Emma", second)]
    assert [[c.token_ids for c in out.outputs] for out in both] == [
        [c.token_ids for c in out.outputs] for out in alone
    ]
    assert [len(c.token_ids) for out in both for c in out.outputs] == [3, 5, 5]


def test_a_request_id_must_be_a_string(llm):
    with pytest.raises(TypeError, match="request_id must be a string"):
        llm.engine.add_request(PROMPT, request_id=3)
    too_large = SamplingParams(max_tokens=400, n=8)  # more blocks than the pool: a Refuse event
    with pytest.raises(TypeError, match="request_id must be a string"):
        llm.engine.add_request(PROMPT, too_large, request_id=4)
    assert not llm.engine.requests and not llm.engine.block_manager.pop_events()


def test_a_request_larger_than_the_pool_is_rejected_and_the_others_finish():
    small = LLM("tiny", block_size=16, num_gpu_blocks=4)  # 64 tokens at most
    too_long = " ".join(["and she said"] * 30)
    ok, rejected = small.generate([PROMPT, too_long], SamplingParams(max_tokens=8, temperature=0))
    assert ok.error is None and len(ok.outputs[0].token_ids) == 8
    assert rejected.outputs == [] and "num_gpu_blocks" in rejected.error


def test_a_missing_model_directory_is_named_in_the_error(tmp_path):
    with pytest.raises(CheckpointError, match="not a directory"):
        LLM(tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"block_size": 0}, "block_size"),
        ({"preemption": "drop"}, "preemption"),
        ({"prefix_caching": "lru"}, "prefix_caching"),
        ({"backend": "triton"}, "backend"),
        ({"seed": "x"}, "seed must be an integer"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"watermark": "x"}, "watermark"),
        ({"watermark": float("nan")}, "watermark"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"num_gpu_blocks": "8"}, "num_gpu_blocks must be an integer from 1 to"),
        ({"num_cpu_blocks": -1}, "num_cpu_blocks must be an integer from 0 to"),
        ({"device": None}, "device must be 'cpu', 'cuda', 'cpu:N' or 'cuda:N' .*, got None$"),
        ({"device": "tpu"}, "device must be 'cpu', 'cuda', 'cpu:N' or 'cuda:N' .*, got 'tpu'$"),
        ({"device": "cuda:99"}, "device 'cuda:99': CUDA is not available here|device 'cuda:99': "),
        ({"block_manager_class": 5}, "block_manager_class must be a class"),
    ],
)
def test_bad_engine_settings_are_refused_naming_the_setting(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        LLM("tiny", **kwargs)


def test_auto_runs_the_cpu_twins_where_they_fit_and_the_reference_elsewhere(monkeypatch):
    pytest.importorskip("numba")
    assert LLM("tiny", num_gpu_blocks=8).engine.backend == "numba-cpu"
    assert LLM("tiny", num_gpu_blocks=8, kv_cache_dtype="fp8_e4m3").engine.backend == "numba-cpu"
    # The twins take float32 and FP8 caches only.
    assert LLM("tiny", num_gpu_blocks=8, dtype="bfloat16").engine.backend == "torch"
    assert LLM("tiny", num_gpu_blocks=8, backend="torch").engine.backend == "torch"

    def no_numba(name):
        raise ImportError("No module named 'numba'")

    monkeypatch.setattr(backend, "kernels_for", no_numba)
    assert backend.resolve_backend("auto", torch.device("cpu"), *[torch.float32] * 2) == "torch"


def test_an_unknown_backend_is_refused_naming_every_choice(capsys):
    with pytest.raises(ValueError, match=r"'auto', 'torch', 'numba', 'numba-cpu', got 'triton'"):
        LLM("tiny", backend="triton")
    assert cli.main(["generate", "--prompt", PROMPT, "--backend", "triton"]) == 2
    assert "invalid choice: 'triton' (choose from 'auto', 'torch', 'numba', 'numba-cpu')" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dtype": "bfloat16"}, r"got a torch.bfloat16 model.*load the model in float32"),
        ({"dtype": "float16", "kv_cache_dtype": "fp8_e4m3"}, r"float16 model.*backend 'torch'"),
    ],
)
@pytest.mark.parametrize("name", ["numba-cpu", "numba"])
def test_a_kernel_backend_that_cannot_run_the_model_is_refused_before_any_step(
    name, kwargs, message
):
    with pytest.raises(ValueError, match=rf"backend '{name}' cannot run this model: .*{message}"):
        LLM("tiny", num_gpu_blocks=8, backend=name, **kwargs)


def test_the_cuda_kernels_on_a_cpu_outside_the_simulator_are_refused_before_any_step(capsys):
    pytest.importorskip("numba.cuda")
    if backend.numba_simulator():
        pytest.skip("this process runs Numba's CUDA simulator, where the kernels take the CPU")
    with pytest.raises(
        ValueError, match=r"run on a CUDA GPU, got device cpu: use backend 'numba-cpu"
    ):
        LLM("tiny", num_gpu_blocks=8, backend="numba")
    assert cli.main(["generate", "--prompt", PROMPT, "--backend", "numba"]) == 2
    assert "NUMBA_ENABLE_CUDASIM=1" in capsys.readouterr().err


def test_the_cpu_twins_refuse_a_model_off_the_cpu():
    problem = backend.kernels_misfit("numba-cpu", torch.device("meta"), *[torch.float32] * 2)
    assert "run on the CPU, got device meta: use backend 'numba' on a GPU" in problem
    assert backend.kernels_misfit("torch", torch.device("meta"), *[torch.bfloat16] * 2) is None


def test_generate_command_says_which_backend_ran(capsys):
    args = ["generate", "--prompt", PROMPT, "--max-tokens", "2", "--backend", "torch"]
    assert cli.main(args) == 0
    assert re.search(r"attention backend\s+│ torch", capsys.readouterr().out)


def test_generate_command_prints_the_texts_and_the_memory_summary(capsys):
    code = cli.main(
        ["generate", "--prompt", PROMPT, "--n", "2", "--max-tokens", "12", "--block-size", "4"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert PROMPT in out and "[1]" in out
    assert "copy-on-write copies" in out and "peak blocks shared" in out


def test_generate_command_reports_bad_input_without_a_traceback(capsys):
    assert cli.main(["generate", "--prompt", PROMPT, "--temperature", "-1"]) == 2
    assert "argument --temperature: temperature must be 0 (greedy)" in capsys.readouterr().err


def test_trace_record_then_replay_prints_the_recorded_events(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    args = ["--prompt", PROMPT, "--n", "2", "--max-tokens", "6", "--block-size", "5"]
    assert cli.main(["trace", "record", str(path), *args]) == 0
    assert cli.main(["trace", "replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert "forks from seq 0" in out and "copy-on-write" in out


def test_the_readme_python_example_runs():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    exec(compile(example, "README.md", "exec"), {})


@pytest.mark.parametrize("kind", ["hash", "radix"])
def test_generate_command_reports_prefix_cache_savings(kind, capsys):
    system = "It is a truth universally acknowledged, that a single man in possession of a"
    prompts = [f"{system} {end}" for end in ("fortune", "house", "horse")]
    args = ["generate", "--max-tokens", "4", "--block-size", "4", "--prefix-caching", kind]
    assert cli.main([*args, *(f"--prompt={p}" for p in prompts)]) == 0
    out = capsys.readouterr().out
    hits = re.search(r"prefix cache hits\s*│?\s*(\d+)", out)
    assert hits and int(hits.group(1)) >= 2, out


def test_skip_tokenizer_init_needs_no_tokenizer_and_gives_token_ids(tmp_path):
    import shutil

    from minipaged.checkpoint import EMBEDDED_MODELS

    for name in ("config.json", "model.safetensors"):
        shutil.copy(EMBEDDED_MODELS["tiny"] / name, tmp_path / name)
    llm = LLM(tmp_path, skip_tokenizer_init=True)
    (output,) = llm.generate({"prompt_token_ids": [0, 37, 746]}, SamplingParams(max_tokens=4))
    assert len(output.outputs[0].token_ids) == 4 and output.outputs[0].text == ""
    with pytest.raises(ValueError, match="no tokenizer"):
        llm.generate("Emma", SamplingParams(max_tokens=4))
