"""``LLM``: vLLM's offline API over the step-through engine, so what a student learns here
carries over: ``LLM(model=...).generate(prompts, SamplingParams(...))``."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from minipaged import fp8
from minipaged.checkpoint import load_config, load_model
from minipaged.checkpoint_files import no_file
from minipaged.checkpoint_tensors import check_weights_match
from minipaged.config import EngineConfig, check_token_budget
from minipaged.device import check_device, check_pools_fit_on
from minipaged.engine import LLMEngine, RequestRejected
from minipaged.kv_calibration import calibrate_kv_scales, calibration_tokens
from minipaged.memory import ModelShape
from minipaged.model import LlamaConfig
from minipaged.models import model_directory
from minipaged.outputs import RequestOutput, StepOutput
from minipaged.prompts import Prompt, check_tokenizer_fits
from minipaged.sampling import SamplingParams
from minipaged.speculative.fits import check_speculation_fits
from minipaged.tokenizer import Tokenizer


class LLM:
    """A model, its tokenizer and an engine with a paged KV cache, built from one
    ``EngineConfig`` (``minipaged.config``): ``LLM("tiny", block_size=16)`` takes its fields as
    keywords, vLLM's names, and ``LLM(config=...)`` a whole config (keywords change it). The
    config's docstring lists every setting; the ones a student meets first:

    - ``model``: ``"tiny"`` (the embedded model trained by ``minipaged.train``) or the path of
      a Hugging Face Llama directory (``config.json``, ``model.safetensors``, and
      ``tokenizer.json`` for text prompts: without one it runs as ``skip_tokenizer_init``
      does). Nothing is downloaded.
    - ``block_size``: $B$. ``num_gpu_blocks``: $\\mathcal{P}_{\\max}$; by default as many
      blocks as fit in 256 MiB (and at least one full context). ``num_cpu_blocks``: the host
      swap pool; by default as large as the device pool. These are vLLM's names, and every
      layer (block manager, KV cache, simulator) uses them. "GPU" means wherever the model
      runs, a CPU included; the events call the two pools ``"device"`` and ``"host"``.
    - ``dtype``: of the weights and the KV cache, ``"float32"``, ``"float16"`` or
      ``"bfloat16"`` (or that ``torch.dtype``).
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
      ids and empty text, and a sequence ends at any ``eos_token_id`` the checkpoint names
      (``generation_config.json``'s, else ``config.json``'s, as transformers' ``generate``
      reads them) or at ``max_tokens``.
    - ``speculative``: a ``SpeculativeConfig`` (or a dict of its fields, as vLLM's
      ``speculative_config``) turns on speculative tree decoding: an n-gram or draft-model
      drafter guesses a token tree, the model verifies it in one pass (``minipaged.speculative``).

    A bad setting, or a pair that cannot run together, is refused here, before the model
    loads; ``llm.config`` is the config the engine runs.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        config: EngineConfig | None = None,
        **settings: object,
    ) -> None:
        if model is not None:
            settings["model"] = model
        if config is not None and not isinstance(config, EngineConfig):
            raise TypeError(
                f"config must be an EngineConfig, got {type(config).__name__} {config!r:.60}: "
                "build one with EngineConfig(...), or pass the settings by name"
            )
        config = (config or EngineConfig()).replace(**settings)
        check_device(config.device)
        path = model_directory(config.model)
        model_config = check_kv_cache_fits(config)  # pools that fit no memory: before any is made
        # Read before the weights, which can take a minute: a bad tokenizer.json is refused
        # first. A checkpoint saved with save_pretrained alone has no tokenizer.json: it runs
        # on token ids, as with skip_tokenizer_init, and a text prompt is refused naming it.
        tokenizer_file = path / "tokenizer.json"
        if tokenizer_file.exists() and not tokenizer_file.is_file():
            raise no_file(tokenizer_file, "the tokenizer")
        has_tokenizer = tokenizer_file.is_file() and not config.skip_tokenizer_init
        self.tokenizer = Tokenizer(path) if has_tokenizer else None
        check_tokenizer_fits(self.tokenizer, model_config.vocab_size)  # before the weights load
        budget = config.token_budget(model_config.max_position_embeddings)  # None resolved
        check_token_budget(
            config.max_num_seqs,
            budget,
            config.enable_chunked_prefill,
            config.long_prefill_token_threshold,
        )
        draft_shape = None  # the draft's config.json, read once here, passed to the engine
        if config.speculative is not None:
            draft_shape = check_speculation_fits(config.speculative, model_config, budget)
        self.config = config
        dtype = getattr(torch, config.dtype)  # config.json as read and checked above
        self.model = load_model(path, dtype, config.device, config=model_config)
        self.engine = LLMEngine(self.model, self.tokenizer, config, draft_shape=draft_shape)
        if fp8.is_fp8(self.engine.kv_cache.dtype):
            kv_cache_dtype = self.engine.kv_cache.dtype
            token_ids = calibration_tokens(self.model, self.tokenizer)
            scales = calibrate_kv_scales(self.model, token_ids, kv_cache_dtype, config.block_size)
            self.engine.kv_cache.set_scales(*scales)

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        show_progress: bool | None = None,
        on_step: Callable[[StepOutput], None] | None = None,
        *,
        use_tqdm: bool | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt (a string or ``{"prompt_token_ids": [...]}``) and return
        one ``RequestOutput`` each, in the order given. ``sampling_params`` is one
        ``SamplingParams`` for every prompt, or a list of one per prompt.

        Every prompt is checked before any runs: a bad one raises ``ValueError`` (``TypeError``
        for one of the wrong kind) that says which prompt of the list it is, and nothing starts:
        one bad prompt in a batch stops the batch, since its outputs would not line up. An
        engine with requests of its own in flight (``llm.engine.add_request``) is refused with
        ``RuntimeError``, before anything changes: this call would step them to their end and
        nobody would see their outputs. A
        request that can never fit the device pool gets an output with ``error`` set
        and no sequences, and so does one aborted because it grew too large to ever come back
        after preemption; the others still run. If anything interrupts the run (Ctrl-C, an
        exception, in ``on_step`` too), this call's unfinished requests are aborted and their
        blocks released before the exception goes on: the engine is left as it was found.
        ``show_progress`` (default: when the output is a terminal; ``use_tqdm`` is vLLM's name
        for it: give one, or both alike) draws a progress bar over finished requests.
        ``on_step`` sees every ``StepOutput``, events and block state included; it may read the
        engine, and a call that would change it (``add_request``, ``abort_request``, ``step``,
        ``generate``) is refused with ``RuntimeError`` (``LLMEngine.check_not_in_callback``).
        """
        self.engine.check_not_in_callback("LLM.generate")
        if None not in (show_progress, use_tqdm) and show_progress != use_tqdm:
            raise ValueError(  # one setting under two names: neither may win in silence
                f"show_progress={show_progress!r:.40} and use_tqdm={use_tqdm!r:.40} disagree, "
                "and use_tqdm is vLLM's name for show_progress; pass one of them"
            )
        show_progress = show_progress if use_tqdm is None else use_tqdm
        flag = show_progress is None or isinstance(show_progress, bool)
        if not flag or not (on_step is None or callable(on_step)):  # before anything queues
            raise TypeError(
                f"show_progress (use_tqdm) must be True, False or None, and on_step a function "
                f"of a StepOutput or None; got show_progress={show_progress!r:.40}, "
                f"on_step={on_step!r:.40}"
            )
        prompts = prompt_list(prompts)
        params_of = params_list(sampling_params, len(prompts))
        engine = self.engine
        for index, (prompt, params) in enumerate(zip(prompts, params_of, strict=True)):
            try:  # a bad one raises here, before anything queues, naming its place in the
                engine.check_request(prompt, params)  # list; a rejected one is refused
            except RequestRejected:  # below, and the rest run
                pass
            except (ValueError, TypeError) as error:
                if len(prompts) > 1:
                    error.args = (f"prompt {index} of {len(prompts)}: {error}",)
                raise
        if engine.requests:  # stepping past them would finish them where no one sees it
            pending = ", ".join(repr(request_id) for request_id in list(engine.requests)[:5])
            raise RuntimeError(
                f"the engine has {len(engine.requests)} request(s) in flight ({pending}), added "
                "with llm.engine.add_request: generate would step them to their end and their "
                "outputs would be lost; finish them first (llm.engine.step() until "
                "has_unfinished() is False, or abort_request), or add these prompts with "
                "add_request too"
            )
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
                step = engine.step(snapshot=on_step is not None)  # nobody else reads the state
                if on_step is not None:
                    engine.in_callback = "LLM.generate's on_step"
                    try:
                        on_step(step)
                    finally:
                        engine.in_callback = None
                for output in step.finished:
                    results[output.request_id] = output
                    progress.advance(task)


def _settings_signature() -> inspect.Signature:
    """``LLM``'s signature as ``help(LLM)`` and ``inspect.signature`` show it: ``model``, then
    ``config`` and every other ``EngineConfig`` field by keyword, with its default. ``__init__``
    takes the fields as ``**settings``, so a new field is a new keyword with no edit here."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    model = inspect.Parameter(
        "model", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation="str | Path"
    )
    config = inspect.Parameter("config", keyword, default=None, annotation="EngineConfig")
    fields = [f for f in dataclasses.fields(EngineConfig) if f.name != "model"]
    settings = [
        inspect.Parameter(f.name, keyword, default=f.default, annotation=f.type) for f in fields
    ]
    return inspect.Signature([model, config, *settings])


LLM.__signature__ = _settings_signature()


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


def check_kv_cache_fits(config: EngineConfig) -> LlamaConfig:
    """Refuse pools the memory free now would not hold, before anything is allocated or
    loaded: device and host blocks of BlockSizeBytes with the KV cache's $b$, the device's
    against ``config.device``'s free memory and the host's against the host's
    (``device.check_pools_fit_on``: on the CPU both against the host's). The checkpoint's
    config.json is first checked against its weights' shapes (``check_weights_match``): the
    pools are sized from it, so a config that inflates the layers is told as that, not as a
    pool too large. Returns that config, for the other checks made before the weights load."""
    model = load_config(config.model)
    check_weights_match(model_directory(config.model), model)
    shape = ModelShape(
        model.num_hidden_layers,
        model.num_attention_heads,
        model.num_key_value_heads,
        model.head_dim,
        config.kv_dtype_bytes,
    )
    block_bytes = shape.block_bytes(config.block_size)
    device, host = config.pool_sizes(block_bytes, model.max_position_embeddings)
    of_b = f"of B = {config.block_size} ({block_bytes:,} B each)"
    check_pools_fit_on(
        torch.device(config.device),
        (device * block_bytes, f"{device:,} device blocks {of_b}"),
        (host * block_bytes, f"{host:,} host blocks {of_b}"),
        "lower num_gpu_blocks, num_cpu_blocks or block_size (--num-gpu-blocks, ...)",
    )
    return model
