"""``LLM``: vLLM's offline API over the step-through engine, so what a student learns here
carries over: ``LLM(model=...).generate(prompts, SamplingParams(...))``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from minipaged.block_manager import BlockManager
from minipaged.checkpoint import load_model, model_directory
from minipaged.engine import LLMEngine, Prompt, RequestOutput, RequestRejected, StepOutput
from minipaged.memory import ModelShape
from minipaged.model import LlamaConfig
from minipaged.sampling import SamplingParams
from minipaged.tokenizer import Tokenizer

DEFAULT_KV_CACHE_BYTES = 256 * 2**20
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class LLM:
    """A model, its tokenizer and an engine with a paged KV cache.

    - ``model``: ``"tiny"`` (the embedded model trained by ``minipaged.train``) or the path of
      a Hugging Face Llama directory (``config.json``, ``model.safetensors``,
      ``tokenizer.json``). Nothing is downloaded.
    - ``block_size``: $B$. ``num_gpu_blocks``: $\\mathcal{P}_{\\max}$; by default as many
      blocks as fit in 256 MiB (and at least one full context). ``num_cpu_blocks``: the host
      swap pool; by default as large as the device pool. These are vLLM's names, and every
      layer (block manager, KV cache, simulator) uses them. "GPU" means wherever the model
      runs, a CPU included; the events call the two pools ``"device"`` and ``"host"``.
    - ``dtype``: of the weights and the KV cache, a ``torch.dtype`` or one of ``"float32"``,
      ``"float16"`` and ``"bfloat16"``.
    - ``backend``: the attention path, ``"torch"`` (the reference), ``"numba"`` (the
      ``cuda_kernels``: on a GPU, or in Numba's CUDA simulator on a CPU) or ``"numba-cpu"``
      (their Numba CPU twins: the same loop nests, compiled for the CPU).
    - ``preemption``: ``"recompute"`` or ``"swap"`` (source text §6).
    - ``prefix_caching``: ``None``, ``"hash"`` (vLLM) or ``"radix"`` (SGLang): requests that
      share a prefix share its blocks and skip its prefill.
    - ``block_manager_class``: another manager with ``BlockManager``'s interface (a student's).
    - ``skip_tokenizer_init``: load no tokenizer (the directory needs no ``tokenizer.json``);
      as in vLLM, prompts must then be ``{"prompt_token_ids": [...]}``, outputs carry token
      ids and empty text, and generation stops at ``max_tokens`` (no tokenizer names EOS).
    """

    def __init__(
        self,
        model: str | Path = "tiny",
        *,
        block_size: int = 16,
        num_gpu_blocks: int | None = None,
        num_cpu_blocks: int | None = None,
        backend: str = "torch",
        preemption: str = "recompute",
        prefix_caching: str | None = None,
        block_manager_class: type[BlockManager] = BlockManager,
        seed: int = 0,
        device: str = "cpu",
        dtype: torch.dtype | str = torch.float32,
        max_num_seqs: int = 32,
        watermark: float = 0.01,
        skip_tokenizer_init: bool = False,
    ) -> None:
        if not isinstance(block_size, int) or block_size <= 0:
            raise ValueError(f"block_size (B) must be a positive integer, got {block_size!r}")
        dtype = _torch_dtype(dtype)
        path = model_directory(model)
        self.model = load_model(path, dtype=dtype, device=device)
        self.tokenizer = None if skip_tokenizer_init else Tokenizer(path)
        config = self.model.config
        if num_gpu_blocks is None:
            num_gpu_blocks = default_num_gpu_blocks(config, block_size, dtype)
        self.engine = LLMEngine(
            self.model,
            self.tokenizer,
            block_size=block_size,
            num_gpu_blocks=num_gpu_blocks,
            num_cpu_blocks=num_gpu_blocks if num_cpu_blocks is None else num_cpu_blocks,
            backend=backend,
            preemption=preemption,
            seed=seed,
            max_num_seqs=max_num_seqs,
            watermark=watermark,
            prefix_caching=prefix_caching,
            block_manager_class=block_manager_class,
        )

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | None = None,
        show_progress: bool | None = None,
        on_step: Callable[[StepOutput], None] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt (a string or ``{"prompt_token_ids": [...]}``) and return
        one ``RequestOutput`` each, in the order given.

        Every prompt is checked before any runs: a bad one raises ``ValueError`` and nothing
        starts. A request that can never fit the device pool gets an output with ``error`` set
        and no sequences, and so does one aborted because it grew too large to ever come back
        after preemption; the others still run. If anything interrupts the run (Ctrl-C, an
        exception, in ``on_step`` too), this call's unfinished requests are aborted and their
        blocks released before the exception goes on: the engine is left as it was found.
        ``show_progress`` (default: when the output is a terminal) draws a progress bar over
        finished requests. ``on_step`` sees every ``StepOutput``, events and block state
        included.
        """
        if isinstance(prompts, str | dict):
            prompts = [prompts]
        params = sampling_params or SamplingParams()
        engine = self.engine
        for prompt in prompts:  # a bad prompt raises before anything queues
            with contextlib.suppress(RequestRejected):  # refused below, while the others run
                engine.check_request(prompt, params)
        results: dict[str, RequestOutput] = {}
        ids: list[str] = []
        try:
            for index, prompt in enumerate(prompts):
                try:
                    ids.append(engine.add_request(prompt, params))
                except RequestRejected as rejected:
                    token_ids, text = engine.prompt_tokens(prompt)
                    ids.append(f"rejected-{index}")
                    results[ids[-1]] = RequestOutput(
                        ids[-1], text, token_ids, [], error=str(rejected)
                    )
            self._run(ids, results, show_progress, on_step)
        except BaseException:
            for request_id in ids:
                if request_id in engine.requests:
                    engine.abort_request(request_id)
            engine.block_manager.pop_events()  # nobody will see this run's events
            raise
        return [results[request_id] for request_id in ids]

    def _run(
        self,
        ids: list[str],
        results: dict[str, RequestOutput],
        show_progress: bool | None,
        on_step: Callable[[StepOutput], None] | None,
    ) -> None:
        """Step until every request is done, filling ``results`` by request id."""
        engine = self.engine
        if show_progress is None:
            show_progress = Console(stderr=True).is_terminal
        with Progress(
            TextColumn("generating"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            disable=not show_progress,
            transient=True,
        ) as progress:
            task = progress.add_task("requests", total=len(ids) - len(results))
            while engine.has_unfinished():
                step = engine.step()
                if on_step is not None:
                    on_step(step)
                for output in step.finished:
                    results[output.request_id] = output
                    progress.advance(task)
                del step  # held by no one, its snapshot is never built (engine.Deferred)


def _torch_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be a torch.dtype or one of {list(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def default_num_gpu_blocks(
    config: LlamaConfig, block_size: int, dtype: torch.dtype = torch.float32
) -> int:
    """$\\mathcal{P}_{\\max}$ when none is given: as many blocks as fit in 256 MiB, and at
    least enough for one full context of ``config.max_position_embeddings`` tokens."""
    shape = ModelShape(
        config.num_hidden_layers,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.head_dim,
        torch.finfo(dtype).bits // 8,
    )
    per_context = -(-config.max_position_embeddings // block_size)
    fits = DEFAULT_KV_CACHE_BYTES // shape.block_bytes(block_size)
    return max(fits, per_context)
