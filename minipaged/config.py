"""Every engine setting in one frozen object, ``EngineConfig``, checked once, when it is made.

``LLM``, ``LLMEngine``, the TUI's scenarios and both command lines (``minipaged generate`` /
``trace record`` and ``minipaged tui``) build from it, and the command lines' engine flags are
generated from its fields (``minipaged.arguments.add_config_flags``): a new setting is one
field here, with its help and its bounds, plus the code that uses it. vLLM splits the same
settings over ``EngineArgs``, ``CacheConfig`` and ``SchedulerConfig``; one flat object, grouped
by comments, reads better at this size.

Guarantee: a config that constructs can run. Every value has the right type and range, and no
two settings contradict each other (an FP8 cache under a 16-bit model on the reference, swap
preemption with no host pool, a token budget below one decode per sequence); what else needs
the model (its context, a kernel backend's dtypes) is checked by ``LLM`` and ``LLMEngine``
before anything runs. Each refusal is one ``ValueError`` (``TypeError`` for a value of the
wrong kind) naming the setting, the value and the way out.

This module imports no torch: the command line builds its parser from it before any heavy
import.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
from dataclasses import dataclass

from minipaged.memory import KV_DTYPE_BYTES
from minipaged.python_numbers import MAX_COUNT, python_number, take_python_numbers
from minipaged.setting_rules import Setting, check_rule, setting
from minipaged.speculative.config import SpeculativeConfig, speculative_config
from minipaged.watermark import DEFAULT_WATERMARK, watermark_blocks

DEVICE_INDEX = r"(0|[1-9][0-9]?|1[01][0-9]|12[0-7])"
"""A device number as torch spells it: no sign, no leading zero, at most 127 (torch keeps it
in 8 bits: ``torch.device("cuda:128")`` is ``cuda:-128``). Every CPU number is the one CPU:
``torch.zeros(1, device="cpu:1").device`` is ``cpu``."""

DTYPES = ("float32", "float16", "bfloat16")
"""The weights' dtypes ``dtype`` names (a ``torch.dtype`` among them is taken by its name)."""

KV_CACHE_DTYPES = ("auto", "fp8_e4m3", "fp8_e5m2")
"""``"auto"``: the KV cache in the model's dtype; the FP8 formats of ``minipaged.fp8``."""

FP8_NAMES = {"torch.float8_e4m3fn": "fp8_e4m3", "torch.float8_e5m2": "fp8_e5m2"}
"""An FP8 ``torch.dtype`` given as ``kv_cache_dtype`` stands for its name (by ``str``: no torch
is imported here)."""

MIN_WATERMARK = 2**-30
"""The smallest positive ``watermark``: the watermark keeps ``int(watermark * P_max)`` blocks,
and below $2^{-30}$ that is 0 blocks of every pool up to ``MAX_COUNT`` ($2^{31} - 1$) blocks,
so a smaller positive share keeps nothing, as 0 does, while it reads as a watermark."""

DEFAULT_KV_CACHE_BYTES = 256 * 2**20
"""The device pool's bytes when ``num_gpu_blocks`` is None (``default_num_gpu_blocks``)."""


@dataclass(frozen=True)
class EngineConfig:
    """The engine's settings (see the module docstring). vLLM's names throughout."""

    # -- the model: how LLM loads it (an engine given a loaded model reads these from it) ----
    model: str | os.PathLike = setting(
        "tiny", '"tiny" (embedded) or a Hugging Face Llama directory', object, metavar="MODEL"
    )
    dtype: str = setting("float32", "the weights' dtype", str, choices=DTYPES)
    device: str = setting(
        "cpu",
        "where the model and its KV cache live",
        str,
        pattern=rf"(cpu|cuda)(:{DEVICE_INDEX})?",
        what="'cpu', 'cuda', 'cpu:N' or 'cuda:N' (N from 0 to 127, as torch numbers devices)",
    )
    skip_tokenizer_init: bool = setting(
        False,
        "load no tokenizer: prompts are token ids, outputs carry no text",
        bool,
        flag=False,  # the command lines take prompts as text
    )
    max_model_len: int | None = setting(
        None,
        "the longest a sequence (prompt and output) may grow, in tokens; a shorter one than the "
        "model's context shrinks the default pools and token budget to match",
        int,
        low=1,
        high=MAX_COUNT,
        none="the model's context (max_position_embeddings)",
    )
    # -- the paged KV cache (§3) -----------------------------------------------------------
    block_size: int = setting(16, "B, token slots per block", int, low=1, high=4096)
    num_gpu_blocks: int | None = setting(
        None,
        "P_max, the device pool's blocks",
        int,
        low=1,
        high=MAX_COUNT,
        none="as many as fit in 256 MiB, and at least one full context",
    )
    num_cpu_blocks: int | None = setting(
        None,
        "the host swap pool's blocks (§6)",
        int,
        low=0,
        high=MAX_COUNT,
        none="as large as the device pool",
    )
    kv_cache_dtype: str = setting(
        "auto",
        "auto: the model's dtype; fp8: b = 1, twice the blocks of a 16-bit cache (§1)",
        str,
        choices=KV_CACHE_DTYPES,
        fix="a 16-bit cache follows the model: pass dtype='float16' with kv_cache_dtype='auto'",
    )
    watermark: float = setting(
        DEFAULT_WATERMARK,
        "share of the device pool kept free when admitting new work: int(share * blocks), "
        "rounded down as in vLLM (the default keeps no block of a pool under 100)",
        float,
        low=0,
        high=1,
        below=True,
        smallest=MIN_WATERMARK,
        fix="pass 0 to keep no block free",
    )
    prefix_caching: str | None = setting(
        None,
        "share cached prompt prefixes between requests (§7)",
        str,
        choices=("hash", "radix"),
        none="off",
    )
    # -- the scheduler (§6) ----------------------------------------------------------------
    preemption: str = setting(
        "recompute", "§6's two ways to make room", str, choices=("recompute", "swap")
    )
    max_num_seqs: int = setting(
        32, "most sequences in one step's batch", int, low=1, high=MAX_COUNT
    )
    max_num_batched_tokens: int | None = setting(
        None,
        "most tokens one step computes (its token budget)",
        int,
        low=1,
        high=MAX_COUNT,
        none="the model's context, and at least 2048",
    )
    enable_chunked_prefill: bool = setting(
        False,
        "compute a prompt over several steps, a chunk per step within the token budget, "
        "beside the running decodes (vLLM V1's scheduler)",
        bool,
    )
    long_prefill_token_threshold: int = setting(
        0,
        "with chunked prefill, the most prompt tokens one request computes in a step "
        "(0: as many as the budget leaves)",
        int,
        low=0,
        high=MAX_COUNT,
    )
    # -- attention, sampling, speculation ----------------------------------------------------
    backend: str = setting(
        "auto",
        "torch (the reference), numba-cpu (the kernels' CPU twins), numba (the CUDA kernels); "
        "auto: numba-cpu on a CPU when numba is installed, else torch",
        str,
        choices=("auto", "torch", "numba", "numba-cpu"),
    )
    seed: int = setting(
        0, "the seed requests without their own sample with", int, low=0, high=2**64 - 1
    )
    speculative: SpeculativeConfig | None = setting(
        None,
        'speculative tree decoding, e.g. {"method": "ngram"} (minipaged.speculative)',
        object,
        none="off",
        flag_name="--speculative-config",
        metavar="JSON",
    )
    block_manager_class: type | None = setting(
        None,
        "another manager with BlockManager's interface (a student's, from the exercises)",
        object,
        none="minipaged.block_manager.BlockManager",
        flag=False,
    )

    def __post_init__(self) -> None:
        # Normalized here, once, before anyone reads them; a config never changes after this.
        take_python_numbers(self)  # np.int64(16) is 16
        normal = {
            "device": _device_name(self.device),
            "dtype": _dtype_name(self.dtype),
            "kv_cache_dtype": FP8_NAMES.get(str(self.kv_cache_dtype), self.kv_cache_dtype),
            "speculative": speculative_config(self.speculative),
        }
        for name, value in normal.items():
            object.__setattr__(self, name, value)
        for each in dataclasses.fields(self):
            check_rule(each.name, getattr(self, each.name), each.metadata["setting"])
        _check_model(self.model)
        _check_block_manager_class(self.block_manager_class)
        self._check_pairs()

    def _check_pairs(self) -> None:
        """Settings that are each fine but cannot run together."""
        if self.preemption == "swap" and self.num_cpu_blocks == 0:
            raise ValueError(
                "preemption='swap' needs a host pool to swap to, but num_cpu_blocks=0; give "
                "num_cpu_blocks some blocks, or use preemption='recompute'"
            )
        check_fp8_model(self.kv_cache_dtype, self.dtype, self.backend)
        if self.num_gpu_blocks is not None:  # else checked once the pool is sized
            watermark_blocks(self.watermark, self.num_gpu_blocks)
        check_token_budget(
            self.max_num_seqs,
            self.max_num_batched_tokens,
            self.enable_chunked_prefill,
            self.long_prefill_token_threshold,
        )

    def context(self, max_position_embeddings: int) -> int:
        """``max_model_len`` with None resolved for a model of ``max_position_embeddings``
        positions; a longer one is refused (RoPE never turned to a later position in training)."""
        limit = max_position_embeddings
        if self.max_model_len is not None and self.max_model_len > limit:
            raise ValueError(
                f"max_model_len={self.max_model_len} is past the model's context of {limit} "
                f"tokens (max_position_embeddings): pass at most {limit}, or leave it unset"
            )
        return self.max_model_len or limit

    def pool_sizes(self, block_bytes: int, max_context: int) -> tuple[int, int]:
        """``(num_gpu_blocks, num_cpu_blocks)`` with None resolved, for blocks of
        ``block_bytes`` and a model of ``max_context`` tokens: the device pool as many blocks
        as fit in 256 MiB and at least one full context, the host pool as large as the
        device's. A narrower cache (FP8, $b = 1$) makes smaller blocks, hence more of them.
        A watermark set by hand that keeps none of those blocks is refused here."""
        device = self.num_gpu_blocks
        if device is None:
            per_context = -(-max_context // self.block_size)
            device = max(DEFAULT_KV_CACHE_BYTES // block_bytes, per_context)
            watermark_blocks(self.watermark, device)
        return device, device if self.num_cpu_blocks is None else self.num_cpu_blocks

    def as_json(self) -> dict[str, object]:
        """The settings the command lines offer, as JSON-ready values (what a trace's header
        records of the engine it ran on): a new flagged field is recorded too."""
        values = {name: getattr(self, name) for name, rule in settings_of().items() if rule.flag}
        values["model"] = str(self.model)
        if self.speculative is not None:
            values["speculative"] = dataclasses.asdict(self.speculative)
            values["speculative"]["draft_model"] = _json_model(self.speculative.draft_model)
        return values

    def token_budget(self, max_context: int) -> int:
        """``max_num_batched_tokens`` with None resolved for a model of ``max_context`` tokens:
        the context, and at least 2048, so a whole prompt always fits one step."""
        return self.max_num_batched_tokens or max(max_context, 2048)

    def replace(self, **settings: object) -> EngineConfig:
        """This config with ``settings`` changed (checked again, as a new config). An unknown
        name is a ``TypeError`` that names the closest setting."""
        unknown = sorted(set(settings) - {each.name for each in dataclasses.fields(self)})
        if unknown:
            names = [each.name for each in dataclasses.fields(self)]
            close = difflib.get_close_matches(unknown[0], names, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise TypeError(f"unknown engine setting(s) {unknown}; {hint}the settings are {names}")
        return dataclasses.replace(self, **settings)

    @property
    def kv_dtype_bytes(self) -> int:
        """$b$, bytes per KV-cache element: the model's for ``"auto"``, 1 for FP8 (§1)."""
        name = self.dtype if self.kv_cache_dtype == "auto" else self.kv_cache_dtype
        return KV_DTYPE_BYTES[name]


def settings_of(config_class: type = EngineConfig) -> dict[str, Setting]:
    """Every field of ``config_class`` and its ``Setting``, in order."""
    return {each.name: each.metadata["setting"] for each in dataclasses.fields(config_class)}


def check_fp8_model(kv_cache_dtype: str, dtype: str, backend: str) -> None:
    """Refuse an FP8 cache under a model that is not float32 on the reference (``"torch"``,
    or ``"auto"``, which picks it for such a model): the reference dequantizes FP8 to float32
    and would meet a 16-bit query at the first step. The kernel backends refuse the pair
    themselves (``backend.kernels_misfit``)."""
    if kv_cache_dtype != "auto" and dtype != "float32" and backend in ("auto", "torch"):
        raise ValueError(
            f"kv_cache_dtype={kv_cache_dtype!r} with a {dtype} model: the reference attention "
            "dequantizes an FP8 cache to float32, so the model must be float32 too; pass "
            "dtype='float32', or kv_cache_dtype='auto'"
        )


def check_token_budget(
    max_num_seqs: int,
    max_num_batched_tokens: int | None,
    enable_chunked_prefill: bool,
    long_prefill_token_threshold: int,
) -> None:
    """Refuse scheduler settings that each pass their own rule but mean nothing together, naming
    both values: a threshold with chunking off, or above the step's token budget (a chunk
    never exceeds the budget, so such a threshold caps nothing); a budget below one decode per
    sequence. ``EngineConfig`` checks the budget it is given, ``Scheduler`` the one it runs on
    (None resolved from the model's context)."""
    threshold, budget = long_prefill_token_threshold, max_num_batched_tokens
    if threshold and not enable_chunked_prefill:
        raise ValueError(
            f"long_prefill_token_threshold={threshold} caps a prefill chunk, but chunked "
            "prefill is off; pass enable_chunked_prefill=True (--enable-chunked-prefill), or "
            "leave the threshold at 0"
        )
    if budget is None:
        return
    if threshold > budget:
        raise ValueError(
            f"long_prefill_token_threshold={threshold} is above max_num_batched_tokens={budget}"
            ", the most tokens one step computes, so it caps nothing; pass a threshold of at "
            f"most {budget} (--long-prefill-token-threshold), 0 for none, or raise "
            "max_num_batched_tokens (--max-num-batched-tokens)"
        )
    if budget < max_num_seqs:
        raise ValueError(
            f"max_num_batched_tokens={budget} is below max_num_seqs={max_num_seqs}: every "
            "running sequence decodes one token a step; raise the budget "
            "(--max-num-batched-tokens) or lower max_num_seqs (--max-num-seqs)"
        )


def check_setting(name: str, value: object, resolved: bool = False) -> object:
    """Refuse ``value`` for the engine setting ``name`` as ``EngineConfig`` would, or return
    it as ``EngineConfig`` keeps it (``np.int64(16)`` as ``16``, ``minipaged.python_numbers``):
    the parts built from a config (``BlockManager``, ``Scheduler``, the prefix caches) check
    the arguments they are given with this, so each setting's rule is written once, on its
    field. ``resolved``: the caller needs the value a None stands for (the engine works it
    out), so None is refused."""
    rule = settings_of()[name]
    value = python_number(value)
    check_rule(name, value, dataclasses.replace(rule, none=None) if resolved else rule)
    return value


def _dtype_name(dtype: object) -> object:
    """A ``torch.dtype`` by its name (``torch.float32`` is ``"float32"``); anything else as
    given, for ``check_rule`` to judge. Duck-typed, so this module needs no torch."""
    if type(dtype).__name__ == "dtype" and str(dtype).startswith("torch."):
        return str(dtype).removeprefix("torch.")
    return dtype


def _device_name(device: object) -> object:
    """A ``torch.device`` by its name (``torch.device("cuda", 0)`` is ``"cuda:0"``), as a
    ``torch.dtype`` is taken by its name; anything else as given, for ``check_rule`` to judge."""
    return str(device) if type(device).__name__ == "device" and hasattr(device, "type") else device


def _json_model(model: object) -> object:
    """A model named by text stays as it is; a loaded one (a ``Llama``) is named by its type."""
    return model if model is None or isinstance(model, str | os.PathLike) else type(model).__name__


MANAGER_ARGUMENTS = (
    "num_gpu_blocks",
    "num_cpu_blocks",
    "block_size",
    "watermark",
    "prefix_caching",
)
"""What the engine passes a block manager's constructor, in order (``LLMEngine.__init__``)."""


def _check_block_manager_class(manager: object) -> None:
    """A block manager class must take ``BlockManager``'s constructor arguments: refused here,
    naming its signature, rather than as a ``TypeError`` from inside the engine."""
    if manager is None:
        return
    fix = "(BlockManager or a student's)"
    if not isinstance(manager, type):
        raise TypeError(
            "block_manager_class must be a class with BlockManager's constructor and methods "
            f"{fix}, got {manager!r}"
        )
    try:
        inspect.signature(manager).bind(*MANAGER_ARGUMENTS)
    except (TypeError, ValueError) as error:  # ValueError: a signature Python cannot read
        raise TypeError(
            f"block_manager_class {manager.__name__} must take BlockManager's constructor "
            f"arguments ({', '.join(MANAGER_ARGUMENTS)}) {fix}: {error}"
        ) from None


def _check_model(model: object) -> None:
    if not isinstance(model, str | os.PathLike) or not str(model).strip():
        raise (ValueError if isinstance(model, str) else TypeError)(
            f'model must name a model: "tiny" or a Hugging Face Llama directory, got {model!r}'
        )
