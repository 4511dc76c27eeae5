"""``LLM``: vLLM's offline API over the step-through engine, so what a student learns here
carries over: ``LLM(model=...).generate(prompts, SamplingParams(...))``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from minipaged import fp8
from minipaged.block_manager import BlockManager
from minipaged.checkpoint import load_config, load_model, model_directory
from minipaged.engine import LLMEngine, Prompt, RequestOutput, RequestRejected, StepOutput
from minipaged.kv_calibration import calibrate_kv_scales, calibration_tokens
from minipaged.memory import ModelShape
from minipaged.model import LlamaConfig
from minipaged.sampling import SamplingParams
from minipaged.speculative.config import SpeculativeConfig, speculative_config
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
    - ``kv_cache_dtype``: ``"auto"`` (the KV cache in ``dtype``), ``"fp8_e4m3"`` or
      ``"fp8_e5m2"``: one byte per element (source text §1's $b = 1$), so the default pool
      holds twice the blocks of a 16-bit cache in the same bytes; the scales are calibrated
      once at load (``minipaged.kv_calibration``), and attention dequantizes (``minipaged.fp8``).
    - ``backend``: the attention path, ``"torch"`` (the reference), ``"numba"`` (the
      ``cuda_kernels``: on a GPU, or in Numba's CUDA simulator on a CPU) or ``"numba-cpu"``
      (their Numba CPU twins: the same loop nests, compiled for the CPU). ``"auto"``, the
      default, picks the twins on a CPU when numba is installed and the reference otherwise
      (``backend.resolve_backend``); ``llm.engine.backend`` says which.
    - ``preemption``: ``"recompute"`` or ``"swap"`` (source text §6).
    - ``prefix_caching``: ``None``, ``"hash"`` (vLLM) or ``"radix"`` (SGLang): requests that
      share a prefix share its blocks and skip its prefill.
    - ``block_manager_class``: another manager with ``BlockManager``'s interface (a student's).
    - ``skip_tokenizer_init``: load no tokenizer (the directory needs no ``tokenizer.json``);
      as in vLLM, prompts must then be ``{"prompt_token_ids": [...]}``, outputs carry token
      ids and empty text, and generation stops at ``max_tokens`` (no tokenizer names EOS).
    - ``speculative``: a ``SpeculativeConfig`` (or a dict of its fields, as vLLM's
      ``speculative_config``) turns on speculative tree decoding: an n-gram or draft-model
      drafter guesses a token tree, the model verifies it in one pass (``minipaged.speculative``).
    """

    def __init__(
        self,
        model: str | Path = "tiny",
        *,
        block_size: int = 16,
        num_gpu_blocks: int | None = None,
        num_cpu_blocks: int | None = None,
        backend: str = "auto",
        preemption: str = "recompute",
        prefix_caching: str | None = None,
        block_manager_class: type[BlockManager] = BlockManager,
        seed: int = 0,
        device: str = "cpu",
        dtype: torch.dtype | str = torch.float32,
        max_num_seqs: int = 32,
        watermark: float = 0.01,
        skip_tokenizer_init: bool = False,
        kv_cache_dtype: str = "auto",
        speculative: SpeculativeConfig | dict | str | None = None,
    ) -> None:
        if not isinstance(block_size, int) or block_size <= 0:
            raise ValueError(f"block_size (B) must be a positive integer, got {block_size!r}")
        dtype = _torch_dtype(dtype)
        cache_dtype = _kv_cache_dtype(kv_cache_dtype, dtype)
        path = model_directory(model)
        self.model = load_model(path, dtype=dtype, device=device)
        self.tokenizer = None if skip_tokenizer_init else Tokenizer(path)
        config = self.model.config
        if num_gpu_blocks is None:
            num_gpu_blocks = default_num_gpu_blocks(config, block_size, cache_dtype)
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
            kv_cache_dtype=cache_dtype,
            speculative=speculative_config(speculative),
        )
        if fp8.is_fp8(cache_dtype):
            token_ids = calibration_tokens(self.model, self.tokenizer)
            scales = calibrate_kv_scales(self.model, token_ids, cache_dtype, block_size)
            self.engine.kv_cache.set_scales(*scales)

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        show_progress: bool | None = None,
        on_step: Callable[[StepOutput], None] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt (a string or ``{"prompt_token_ids": [...]}``) and return
        one ``RequestOutput`` each, in the order given. ``sampling_params`` is one
        ``SamplingParams`` for every prompt, or a list of one per prompt.

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
        prompts = prompt_list(prompts)
        params_of = params_list(sampling_params, len(prompts))
        engine = self.engine
        for prompt, params in zip(prompts, params_of, strict=True):  # a bad one raises here,
            with contextlib.suppress(RequestRejected):  # before anything queues; a rejected
                engine.check_request(prompt, params)  # one is refused below, the rest run
        results: dict[str, RequestOutput] = {}
        ids: list[str] = []
        try:
            for index, (prompt, params) in enumerate(zip(prompts, params_of, strict=True)):
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


def prompt_list(prompts) -> list[Prompt]:
    """``generate``'s prompts as a list: one prompt (a string or a dict) becomes a list of one.
    A flat list of ints is refused as ambiguous: one prompt's token ids go in a list of their
    own, or in a dict."""
    if isinstance(prompts, str | dict):
        return [prompts]
    if not isinstance(prompts, list | tuple):
        raise TypeError(
            "prompts must be a string, a {'prompt_token_ids': [...]} dict, or a list of them, "
            f"got {type(prompts).__name__} {prompts!r:.60}"
        )
    if prompts and all(isinstance(p, int) for p in prompts):
        raise TypeError(
            f"prompts is a list of ints, {list(prompts)!r:.60}: pass one prompt's token ids as "
            "[[...]] or {'prompt_token_ids': [...]}"
        )
    return list(prompts)


def params_list(sampling_params, count: int) -> list[SamplingParams]:
    """One ``SamplingParams`` per prompt: the same for all (the default when None), or the
    given list, which must have one per prompt. Their types are checked where each is used
    (``LLMEngine.check_request``)."""
    if sampling_params is None:
        return [SamplingParams()] * count
    if not isinstance(sampling_params, list | tuple):
        return [sampling_params] * count
    if len(sampling_params) != count:
        raise ValueError(
            f"got {len(sampling_params)} SamplingParams for {count} prompts: give one "
            "SamplingParams for all, or a list of one per prompt"
        )
    return list(sampling_params)


def _torch_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be a torch.dtype or one of {list(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def _kv_cache_dtype(kv_cache_dtype: str, dtype: torch.dtype) -> torch.dtype:
    """The pools' dtype for ``LLM(kv_cache_dtype=...)``, with errors that name the way out."""
    if isinstance(kv_cache_dtype, torch.dtype) or kv_cache_dtype in DTYPES:
        raise ValueError(
            f"kv_cache_dtype {kv_cache_dtype!r}: a float KV cache follows the model, so pass "
            f"kv_cache_dtype='auto' with dtype={kv_cache_dtype!r}; kv_cache_dtype itself is "
            f"'auto' or one of {list(fp8.KV_CACHE_DTYPES)}"
        )
    return fp8.cache_dtype(kv_cache_dtype, dtype)


def check_kv_cache_fits(
    model: str | Path,
    block_size: int,
    num_gpu_blocks: int | None,
    num_cpu_blocks: int | None,
    kv_cache_dtype: str,
    free: int | None,
) -> None:
    """Refuse pools that would not fit in ``free`` bytes (None: unknown, never refuse), before
    anything is allocated: device plus host blocks of BlockSizeBytes with the KV cache's $b$."""
    config = load_config(model)
    dtype = _kv_cache_dtype(kv_cache_dtype, torch.float32)  # the weights load as float32
    shape = ModelShape(
        config.num_hidden_layers,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.head_dim,
        torch.finfo(dtype).bits // 8,
    )
    device = num_gpu_blocks or default_num_gpu_blocks(config, block_size, dtype)
    host = device if num_cpu_blocks is None else num_cpu_blocks
    need = (device + host) * shape.block_bytes(block_size)
    if free is not None and need > free:
        raise ValueError(
            f"the KV cache would take {need / 1e9:,.1f} GB ({device:,} device + {host:,} host "
            f"blocks of B = {block_size}) but {free / 1e9:,.1f} GB are free; lower "
            "--num-gpu-blocks, --num-cpu-blocks or --block-size"
        )


def default_num_gpu_blocks(
    config: LlamaConfig, block_size: int, dtype: torch.dtype = torch.float32
) -> int:
    """$\\mathcal{P}_{\\max}$ when none is given: as many blocks as fit in 256 MiB, and at
    least enough for one full context of ``config.max_position_embeddings`` tokens. ``dtype``
    is the KV cache's: its bytes per element $b$ set the block's size, so an FP8 cache
    ($b = 1$) gets twice the blocks of a 16-bit one."""
    shape = ModelShape(
        config.num_hidden_layers,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.head_dim,
        torch.finfo(dtype).bits // 8,  # b: 4 for float32, 2 for 16-bit, 1 for FP8
    )
    per_context = -(-config.max_position_embeddings // block_size)
    fits = DEFAULT_KV_CACHE_BYTES // shape.block_bytes(block_size)
    return max(fits, per_context)
