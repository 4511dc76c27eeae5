"""The one place that chooses how attention and the cache operations run: the reference in
PyTorch, or the Numba kernels of ``cuda_kernels`` (on a GPU, or their CPU twins). It is the
only module that imports ``cuda_kernels``; the reference (``attention``, ``kv_cache``) imports
no kernel, so every kernel can be tested against it.

- ``"torch"``: ``minipaged.attention`` and ``minipaged.kv_cache``, the reference;
- ``"numba"``: ``cuda_kernels``, the CUDA kernels (on a GPU, or on the CPU under Numba's CUDA
  simulator, which checks what they compute, not how fast);
- ``"numba-cpu"``: ``cuda_kernels.cpu``, the kernels' CPU twins: the same names and loop nests,
  compiled by Numba for the CPU, one parallel loop iteration per (sequence, KV head) where the
  CUDA kernel has a thread block per (sequence, query head).

``"auto"``, the default of ``LLM`` and ``LLMEngine``, is the fastest of these that the machine
has (``resolve_backend``). Prefill has no kernel: it runs on the reference on every backend,
a chunk of a prompt too (``attention_paths`` says so in words).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import torch
from torch import Tensor

from minipaged import attention, memory
from minipaged.attention import NO_BLOCK
from minipaged.contract import check_query_lens, table_too_short
from minipaged.environment import check_environment
from minipaged.fp8 import is_fp8
from minipaged.kv_cache import quantize_kv, write_kv

SUPPORTED_BACKENDS = ("torch", "numba", "numba-cpu")
"""The attention paths; ``LLM(backend=...)`` also accepts ``"auto"``. See the module docstring."""


def check_backend(backend: str, names: tuple[str, ...] = SUPPORTED_BACKENDS) -> None:
    """``backend`` is one of ``names``: ``SUPPORTED_BACKENDS``, or what ``LLM`` accepts."""
    if backend not in names:
        raise ValueError(f"unknown attention backend {backend!r}; supported: {list(names)}")


def resolve_backend(
    backend: str, device: torch.device, model_dtype: torch.dtype, cache_dtype: torch.dtype
) -> str:
    """The path an engine runs for a model in ``model_dtype`` on ``device`` with a KV cache of
    ``cache_dtype``: ``backend``, or for ``"auto"`` the fastest one here. That is the kernels'
    CPU twins (``"numba-cpu"``) on a CPU with numba installed, where the kernels fit (see
    ``kernels_misfit``): end to end, ``minipaged bench engine`` measures them faster than the
    reference. Anywhere else it is the reference, ``"torch"``: the CUDA kernels are written to
    be read beside vLLM's, not tuned to beat PyTorch's own GPU attention.

    A kernel backend asked for by name that cannot run this model is refused here, before any
    request is added, rather than at its first step."""
    if backend == "auto":
        if kernels_misfit("numba-cpu", device, model_dtype, cache_dtype) is not None:
            return "torch"
        try:
            kernels_for("numba-cpu")
        except ImportError:  # numba is an optional dependency (minipaged[cuda])
            return "torch"
        return "numba-cpu"
    check_backend(backend, ("auto", *SUPPORTED_BACKENDS))
    problem = kernels_misfit(backend, device, model_dtype, cache_dtype)
    if problem is not None:
        raise ValueError(f"backend {backend!r} cannot run this model: {problem}")
    return backend


def kernels_misfit(
    backend: str, device: torch.device, model_dtype: torch.dtype, cache_dtype: torch.dtype
) -> str | None:
    """Why ``backend``'s kernels cannot run a ``model_dtype`` model with a ``cache_dtype`` KV
    cache on ``device``, and the way out; None when they can (and always for ``"torch"``)."""
    if backend == "torch":
        return None
    if model_dtype != torch.float32 or not (cache_dtype == torch.float32 or is_fp8(cache_dtype)):
        return (
            f"the kernels compute in float32 and read float32 or FP8 caches, got a "
            f"{model_dtype} model with a {cache_dtype} cache: load the model in float32 "
            "(an FP8 kv_cache_dtype is fine), or use backend 'torch'"
        )
    device = torch.device(device)
    if backend == "numba-cpu" and device.type != "cpu":
        return (
            f"the CPU twins run on the CPU, got device {device}: use backend 'numba' on a GPU, "
            "or 'torch'"
        )
    simulator = backend == "numba" and numba_simulator()
    if backend == "numba" and device.type != ("cpu" if simulator else "cuda"):
        where = "in Numba's CUDA simulator, on the CPU" if simulator else "on a CUDA GPU"
        return (
            f"in this process the CUDA kernels run {where}, got device {device}: use "
            "backend 'numba-cpu' (their CPU twins) or 'torch' on a CPU; the simulator needs "
            "NUMBA_ENABLE_CUDASIM=1 set before numba is imported"
        )
    return None


def attention_paths(backend: str) -> str:
    """Which code computes attention on ``backend``, in words. A row of one query (a decode,
    or a prompt chunk of one token) runs ``backend``'s decode path; a row of several (a whole
    prompt or a chunk of one, ``paged_attention``'s prefill part) runs the reference's
    ``paged_attention_prefill`` on every backend: the kernels take one query per sequence."""
    if backend == "torch":
        return "torch"
    return f"{backend} for decodes; torch, the reference, for prompts and their chunks"


def numba_simulator() -> bool:
    """Whether this process runs the CUDA kernels in Numba's CUDA simulator (decided once, by
    ``NUMBA_ENABLE_CUDASIM`` when numba is first imported)."""
    return kernels_for("numba").launch.SIMULATOR


def kernels_for(backend: str) -> ModuleType | None:
    """The module whose functions run ``backend``'s kernels, or None for the reference. Both
    kernel modules have the same names: ``paged_attention_decode``,
    ``paged_attention_decode_v2``, ``reshape_and_cache``, ``copy_blocks``, ``swap_blocks``."""
    check_backend(backend)
    if backend in ("numba", "numba-cpu"):
        check_environment()  # before numba reads it, at its first import
    if backend == "numba":
        try:
            import cuda_kernels
            import cuda_kernels.launch  # numba loads only when a kernel backend is asked for
        except ImportError as error:
            raise ImportError(
                f"backend 'numba' needs numba and numba-cuda ({error}): install them with "
                "pip install 'minipaged[cuda]', or use backend 'torch'"
            ) from error
        return cuda_kernels
    if backend == "numba-cpu":
        try:
            from cuda_kernels import cpu
        except ImportError as error:
            raise ImportError(
                f"backend 'numba-cpu' needs numba ({error}): install it with "
                "pip install 'minipaged[cuda]', or use backend 'torch'"
            ) from error
        return cpu
    return None


@dataclass(frozen=True, slots=True, eq=False)  # eq on tensors would be ambiguous
class PagedBatch:
    """One engine step's attention metadata, shared by every layer.

    - ``slot_mapping`` ``[N]`` int64: where token $i$'s key and value are written,
      slot $= \\mathcal{T}_r[\\lfloor t/B \\rfloor] \\cdot B + (t \\bmod B)$; negative = skip;
    - ``block_tables`` ``[batch, max_blocks]`` int32: row $r$ is $\\mathcal{T}_r$, padded;
    - ``seq_lens`` ``[batch]`` int32: tokens in the cache per sequence after this step's writes;
    - ``query_lens`` ``[batch]`` int32: tokens computed this step (1 when decoding), so
      $N = \\sum_b$ ``query_lens[b]``;
    - ``block_size``: $B$ (the KV cache's, already checked); ``backend``: one of
      ``SUPPORTED_BACKENDS``;
    - ``split``: which rows decode and which prefill (``split_rows``), worked out once per
      step from the lists the batch is made of.
    """

    slot_mapping: Tensor
    block_tables: Tensor
    seq_lens: Tensor
    query_lens: Tensor
    block_size: int
    split: Split | None
    backend: str = "torch"

    def __post_init__(self) -> None:
        check_backend(self.backend)
        num_queries = int(self.query_lens.sum())
        if self.slot_mapping.shape != (num_queries,):
            raise ValueError(
                f"slot_mapping must have one slot per computed token: query_lens add up to "
                f"{num_queries}, got slot_mapping of shape {tuple(self.slot_mapping.shape)}"
            )

    @classmethod
    def from_lists(
        cls,
        block_tables: Sequence[Sequence[int]],
        seq_lens: Sequence[int],
        block_size: int,
        query_lens: Sequence[int] | None = None,
        slot_mapping: Sequence[int] | None = None,
        backend: str = "torch",
        device: torch.device | str = "cpu",
    ) -> PagedBatch:
        """Build a batch from Python lists: tables of varying length are padded with
        ``NO_BLOCK``; ``query_lens`` defaults to all 1 (a decode step); ``slot_mapping``
        defaults to the slots of each sequence's last ``query_lens[b]`` positions $t$,
        $\\mathcal{T}_b[\\lfloor t/B \\rfloor] \\cdot B + (t \\bmod B)$."""
        if query_lens is None:
            query_lens = [1] * len(seq_lens)
        check_query_lens(list(seq_lens), list(query_lens))
        if slot_mapping is None:
            slot_mapping = []
            lens = zip(block_tables, seq_lens, query_lens, strict=True)
            for b, (table, seq_len, query_len) in enumerate(lens):
                if len(table) * block_size < seq_len:
                    raise ValueError(table_too_short(b, seq_len, block_size, len(table)))
                slot_mapping += [
                    memory.slot(table, t, block_size) for t in range(seq_len - query_len, seq_len)
                ]
        width = max((len(table) for table in block_tables), default=0)
        padded = [list(table) + [NO_BLOCK] * (width - len(table)) for table in block_tables]
        tables = torch.tensor(padded, dtype=torch.int32, device=device)
        return cls(
            slot_mapping=torch.tensor(slot_mapping, dtype=torch.int64, device=device),
            block_tables=tables.reshape(len(padded), width),  # [batch, max_blocks]
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            query_lens=torch.tensor(query_lens, dtype=torch.int32, device=device),
            block_size=block_size,
            split=split_rows(query_lens, device),
            backend=backend,
        )


def paged_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    batch: PagedBatch,
    scale: float,
    *,
    k_scale: Tensor | None = None,
    v_scale: Tensor | None = None,
) -> Tensor:
    """One layer's attention for one engine step: write this step's keys and values
    (``[N, num_kv_heads, head_dim]``) at ``batch.slot_mapping``, then attend each query
    (``[N, num_heads, head_dim]``) to its sequence's cache. Returns ``[N, num_heads, head_dim]``.

    A step that admits a prompt while others decode holds both kinds of sequence: the decode
    rows (query_len 1) go through the decode path, the prompts through prefill, each with its
    own rows of the tables (``PagedBatch.split``), so a long prompt never slows the decodes
    down.

    FP8 pools: ``k_scale`` and ``v_scale`` (``[num_kv_heads]``, the layer's) quantize the
    writes (``kv_cache.quantize_kv``, before a kernel copies the bytes) and dequantize the
    reads, on every path."""
    scales = {"k_scale": k_scale, "v_scale": v_scale}
    kernels = kernels_for(batch.backend)
    if kernels is None:
        write_kv(key_pool, value_pool, key, value, batch.slot_mapping, **scales)
    else:
        key, value = quantize_kv(key_pool.dtype, key, value, k_scale, v_scale)
        kernels.reshape_and_cache(key, value, key_pool, value_pool, batch.slot_mapping)
    decode = attention.paged_attention_decode if kernels is None else kernels.paged_attention_decode
    if batch.split is None:  # every sequence decodes
        paged = (key_pool, value_pool, batch.block_tables, batch.seq_lens)
        return decode(query, *paged, scale, batch.block_size, **scales)
    output = torch.empty_like(query)
    (decode_rows, decode_seqs), (prefill_rows, prefill_seqs) = batch.split
    if decode_seqs.numel():
        output[decode_rows] = decode(
            query[decode_rows],
            key_pool,
            value_pool,
            batch.block_tables[decode_seqs],
            batch.seq_lens[decode_seqs],
            scale,
            batch.block_size,
            **scales,
        )
    output[prefill_rows] = attention.paged_attention_prefill(
        query[prefill_rows],
        key_pool,
        value_pool,
        batch.block_tables[prefill_seqs],
        batch.seq_lens[prefill_seqs],
        batch.query_lens[prefill_seqs],
        scale,
        batch.block_size,
        **scales,
    )
    return output


Split = tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]
"""``((rows, seqs), (rows, seqs))``: the decode part of a batch, then the prefill part."""


def split_rows(query_lens: Sequence[int], device: torch.device | str = "cpu") -> Split | None:
    """How ``paged_attention`` divides a step: None when every sequence decodes; else the decode
    sequences' part, then the prefill sequences', each as the rows of the step's ``[N]``
    tokens and the sequences (rows of ``block_tables``) it owns.

    The rule, an assumption chunked prefill will lean on: *a sequence computing one token is a
    decode*, one query at its last position reading every key before it through
    $\\mathcal{T}_r$; several tokens go through the prefill path, whose queries are the last
    ``query_lens[b]`` of the ``seq_lens[b]`` cached positions, causal among themselves. Today
    a prefill computes a whole prompt (or what the prefix cache did not hold), so both hold; a
    prompt computed in chunks keeps them only if ``seq_lens`` counts the tokens computed so
    far, not the prompt's length."""
    decodes = [count == 1 for count in query_lens]
    if all(decodes):
        return None
    row_decodes = [
        decode for decode, count in zip(decodes, query_lens, strict=True) for _ in range(count)
    ]

    def where(flags: list[bool], wanted: bool) -> Tensor:
        rows = [i for i, flag in enumerate(flags) if flag == wanted]
        return torch.tensor(rows, dtype=torch.long, device=device)

    return (
        (where(row_decodes, True), where(decodes, True)),
        (where(row_decodes, False), where(decodes, False)),
    )
