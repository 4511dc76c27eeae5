"""What every entry point of §4's attention checks of a whole call, around its body: the
reference (``minipaged.attention``), the CPU twins and the CUDA wrappers (``cuda_kernels``)
wear the one decorator ``attention_entry_point``, so they take the same numbers, refuse the
same scales and refuse the same overflow, with the same words.

- Numbers: ``scale``, ``block_size`` and ``partition_size`` by the project's one rule
  (``minipaged.python_numbers``): ``np.float32(0.125)`` and ``torch.tensor(16)`` are Python
  numbers before any check reads them.
- ``k_scale`` and ``v_scale`` ``[num_kv_heads]``: a pool narrower than the query's dtype (FP8,
  or 16-bit under a float32 query) stores $\\hat{k} = k / s_k$ and is read as
  $s_k \\hat{k}$; a pool in the query's own dtype stores $k$ itself, so a scale given for it
  would be silently ignored (vLLM ignores it), and is refused instead.
- Overflow: a scale the dtype holds can still overflow the computation. With
  ``scale=3e38`` in float32 the logit $q \\cdot k \\cdot s$ is $\\infty$, and the softmax of an
  infinite logit is NaN ($\\infty - \\infty$). A NaN result from finite queries, keys and
  values is such an overflow: refused, naming the largest scale that keeps every logit
  finite for these inputs, $\\max_{\\text{dtype}} / (2 \\max\\lVert q \\rVert
  \\max\\lVert k \\rVert)$: by Cauchy-Schwarz every logit and every difference $s - m$ the
  softmax takes is then finite. A NaN that NaN or inf inputs carry in is the
  caller's data and comes back as it is, as from ``scaled_dot_product_attention``. The check
  reads only the result on the way out (``holds_nan``), or, for a kernel that looks for NaN
  in each row as it writes it (the CPU twins), only that kernel's count
  (``ResultHoldsNaN``); the inputs are read only to word a refusal.

The engine's own calls (``engine_attention``) skip both reads of values, the scales' and the
result's: reading a tensor back to the host makes a GPU wait, once for every layer of every
step, for numbers the engine chose itself (``engine_attention`` says why they need no check).

This module imports only ``minipaged.contract``, ``minipaged.fp8`` and
``minipaged.python_numbers``, which import no other project module but the last: the kernels
use it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import math
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from minipaged.contract import HALF_POOL_DTYPES, NARROWER_POOL_DTYPES
from minipaged.fp8 import check_scale_values
from minipaged.python_numbers import python_number_arguments

NUMBER_ARGUMENTS = ("scale", "block_size", "partition_size")
"""The arguments of an attention entry point that are numbers, where it has them."""

_values_checked = contextvars.ContextVar("values_checked", default=True)

_scales_read: contextvars.ContextVar[tuple] = contextvars.ContextVar("scales_read", default=())
"""The scale tensors the running call's check read, each with its values: ``scale_values``
gives them to the kernel's arguments, so a call reads each scale once."""


@contextlib.contextmanager
def engine_attention() -> Iterator[None]:
    """Within this block (one engine forward pass: ``ModelRunner.execute``, the speculative
    ``verify``), attention calls and cache writes read no tensor's values back to the host:
    neither ``k_scale`` / ``v_scale`` (their kind and shape are still checked, which reads no
    value) nor the result for an overflow (the module's docstring). Each read would cost a
    host sync per layer per step on a GPU, where the kernels would otherwise queue ahead of
    the host. Safe because the engine chose every such number itself:

    - the scale is the model's $1/\\sqrt{d_h}$, and the queries and keys come from weights
      ``minipaged.checkpoint_files`` found finite;
    - ``k_scale`` and ``v_scale`` are the ``KVCache``'s, which hold 1 until
      ``KVCache.set_scales`` stores scales it checked (``fp8.check_scales``), once, at load.
    """
    token = _values_checked.set(False)
    try:
        yield
    finally:
        _values_checked.reset(token)


class ResultHoldsNaN(Exception):
    """Raised by an entry point that looks for NaN in its result itself, as its kernel writes
    each row (``attention_entry_point(finds_nan=True)``), carrying that result: the wrapper
    then refuses an overflow, or gives the result back, exactly as after its own look."""

    def __init__(self, result: Tensor) -> None:
        super().__init__("the attention result holds NaN")
        self.result = result


def attention_entry_point(function: Callable | None = None, *, finds_nan: bool = False):
    """Wrap an attention entry point whose first two arguments are ``query`` and
    ``key_pool`` and whose keyword-only ``k_scale`` and ``v_scale`` are FP8 scales: its
    numbers taken by the one rule, its scales checked before it runs, and its result checked
    for overflow after (the module's docstring). With ``finds_nan``, the function raises
    ``ResultHoldsNaN`` when its result holds a NaN and returns it otherwise, so the wrapper
    need not read the whole result again: from cold caches, as a layer's attention runs, that
    read cost a CPU twin's call about 0.1 ms, on every call, of 0.6 to 0.9 over 16 tokens."""
    if function is None:
        return functools.partial(attention_entry_point, finds_nan=finds_nan)

    @functools.wraps(function)
    def checked(query, key_pool, *args, k_scale=None, v_scale=None, **kwargs):
        given = k_scale is not None or v_scale is not None
        scales_read = ()
        if isinstance(query, Tensor) and isinstance(key_pool, Tensor) and key_pool.dim() == 4:
            if given:
                dtypes_and_heads = (query.dtype, key_pool.dtype, key_pool.shape[1])
                scales_read = check_kv_scales(*dtypes_and_heads, k_scale, v_scale, key_pool.device)
            k_scale, v_scale = unit_scales(query, key_pool, k_scale, v_scale)
        kwargs |= {"k_scale": k_scale, "v_scale": v_scale}
        # Only a call given scales sets what it read: setting costs microseconds from cold
        # caches, on every call, and a call given none asks scale_values only for the ones
        # unit_scales made just now, which no call has read.
        token = _scales_read.set(scales_read) if given else None
        try:
            result = function(query, key_pool, *args, **kwargs)
        except ResultHoldsNaN as found:
            if _values_checked.get():
                refuse_overflow(signature.bind(query, key_pool, *args, **kwargs).arguments)
            return found.result
        finally:
            if token is not None:
                _scales_read.reset(token)
        outputs = result if isinstance(result, tuple) else (result,)
        looked = finds_nan or not _values_checked.get()
        if not looked and any(holds_nan(output) for output in outputs):
            refuse_overflow(signature.bind(query, key_pool, *args, **kwargs).arguments)
        return result

    signature = inspect.signature(function)
    numbers = (name for name in NUMBER_ARGUMENTS if name in signature.parameters)
    return python_number_arguments(*numbers)(checked)


def unit_scales(query: Tensor, key_pool: Tensor, *scales: Tensor | None) -> tuple:
    """``scales`` with 1 for each one not given, when the pools are 16-bit under a float32
    query: such a pool stores $k / s$, and with no $s$ given it holds $k$ itself, read widened
    to float32 (``NARROWER_POOL_DTYPES``). Handed to torch as it is, a 16-bit pool beside a
    float32 query failed inside ``scaled_dot_product_attention`` ("Expected query, key, and
    value to have the same dtype"). Any other pool is returned with its scales unchanged."""
    if key_pool.dtype not in HALF_POOL_DTYPES or query.dtype != torch.float32:
        return scales
    ones = torch.ones(key_pool.shape[1], device=key_pool.device)
    return tuple(ones if scale is None else scale for scale in scales)


def scale_values(scale: Tensor) -> tuple[float, ...]:
    """The values of a CPU scale tensor ``[num_kv_heads]``, for a kernel's arguments: those
    the running call's check read (``check_kv_scales``), when it read this very tensor,
    else read now. A direct call so reads each scale once; values read before the call began
    are never reused, since the call's body is all that runs between the read and this."""
    for seen, values in _scales_read.get():
        if seen is scale:
            return values
    return tuple(scale.tolist())


def holds_nan(output: Tensor) -> bool:
    """Whether ``output`` holds a NaN. Its sum is NaN whenever it does (and rarely when it
    holds both infinities), and one sum costs a fraction of an elementwise test, which then
    runs only to confirm: every call of every entry point pays this."""
    output = output.detach()  # a result that needs grad: read its values, not its graph
    return math.isnan(float(output.sum())) and bool(torch.isnan(output).any())


def check_kv_scales(
    compute_dtype: torch.dtype,
    pool_dtype: torch.dtype,
    num_kv_heads: int,
    k_scale: object = None,
    v_scale: object = None,
    device: torch.device | None = None,
) -> tuple[tuple[Tensor, tuple[float, ...]], ...]:
    """Refuse ``k_scale`` / ``v_scale`` unless each is ``[num_kv_heads]`` positive finite
    numbers (``fp8.check_scale_values``, the rule's one home) for a pool of ``pool_dtype``
    narrower than ``compute_dtype``, the query's or the written keys' (the module's
    docstring), in a float dtype no wider than float32, on the pools' ``device``. Returns each
    scale it read with its values (read once, ``tolist``); under ``engine_attention`` none is
    read (its shape, dtype and device are still checked: they cost no read).

    Every FP8 call pays this from cold caches, as a layer's attention runs, where each tensor
    attribute or method read costs microseconds: each scale is asked for its dtype (which says
    whether it is floating-point), shape, device and values, nothing more, and
    ``engine_attention``'s setting is read once."""
    if k_scale is None and v_scale is None:
        return ()
    if pool_dtype not in NARROWER_POOL_DTYPES or compute_dtype != torch.float32:
        name = "k_scale" if k_scale is not None else "v_scale"
        raise ValueError(
            f"{name} is given, but the pools hold {pool_dtype} under {compute_dtype}: only a "
            f"narrower pool (FP8, or 16-bit under float32) stores k / k_scale, and this one "
            f"stores the keys and values themselves, so the scale would be ignored; pass "
            f"{name}=None, or quantize the pools to FP8 (minipaged.fp8.quantize)"
        )
    values_checked = _values_checked.get()  # engine_attention's are the cache's, checked once
    read = []
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        if scale is None:
            continue
        if not isinstance(scale, Tensor) or not scale.dtype.is_floating_point:
            raise TypeError(
                f"{name} must be a floating-point torch.Tensor [num_kv_heads], got "
                f"{type(scale).__name__} {scale!r:.60}: build it with torch.tensor([...])"
            )
        if scale.shape != (num_kv_heads,):
            raise ValueError(
                f"{name} must be [num_kv_heads] = [{num_kv_heads}], one scale per KV head, got "
                f"shape {list(scale.shape)}"
            )
        if scale.dtype == torch.float64:  # torch's own refusal came from deep in the call
            raise TypeError(
                f"{name} is float64, but attention computes in float32 and a float64 scale "
                f"would turn the call to float64; pass {name}.float()"
            )
        if device is not None and scale.device != device:
            raise ValueError(
                f"{name} is on {scale.device}, but the pools are on {device}: a scale is read "
                f"beside the keys and values it scales; pass {name}.to({str(device)!r})"
            )
        if values_checked:
            values = tuple(scale.tolist())
            check_scale_values(values, name)
            read.append((scale, values))
    return tuple(read)


def refuse_overflow(arguments: dict[str, object]) -> None:
    """Raise the refusal of an overflow, given the call's ``arguments`` by name, when the
    queries, keys and values it attends to are finite and the scale or their size can
    overflow the logits; else return, and the NaN goes back as it came (NaN in, NaN out; or a
    bug of the function's own, which a refusal would hide)."""
    query, key_pool, value_pool = (arguments[n] for n in ("query", "key_pool", "value_pool"))
    lens = arguments.get("seq_lens", arguments.get("prefix_lens"))
    tables, block_size = arguments["block_tables"], arguments["block_size"]
    keys = attended(key_pool, tables, lens, block_size, arguments.get("k_scale"))
    values = attended(value_pool, tables, lens, block_size, arguments.get("v_scale"))
    if not all(bool(torch.isfinite(x).all()) for x in (query, keys, values)):
        return
    scale, dtype = arguments["scale"], query.dtype
    largest = torch.finfo(dtype).max
    max_q = float(query.double().norm(dim=-1).max())
    max_k = float(keys.norm(dim=-1).max()) if keys.numel() else 0.0
    # |s| <= scale |q| |k|, and the softmax takes differences s - m: both must stay finite
    bound = largest / (2 * max_q * max_k) if max_q * max_k else math.inf
    usual = f"the usual scale is 1/sqrt(head_dim) = {query.shape[-1] ** -0.5:.4g}"
    if scale > bound:
        raise ValueError(
            f"scale={scale!r} makes the logits q.k*scale overflow {dtype} (largest "
            f"{largest:.4g}), and the softmax of an infinite logit is NaN: for these queries "
            f"and keys (|q| up to {max_q:.4g}, |k| up to {max_k:.4g}) a scale up to "
            f"{bound:.4g} keeps the softmax finite; {usual}"
        )
    if 2 * max_q * max_k > largest:  # q.k itself, before the scale
        raise ValueError(
            f"attention over finite queries and keys gave NaN: their products q.k overflow "
            f"{dtype} (largest {largest:.4g}; |q| up to {max_q:.4g}, |k| up to {max_k:.4g}) "
            f"before scale={scale!r} applies; scale the queries and keys down"
        )
    # Nothing here can overflow: the NaN is the function's own (a student's copy of it, say).


def attended(
    pool: Tensor, tables: Tensor, lens: Tensor, block_size: int, scale: Tensor | None
) -> Tensor:
    """The float64 rows ``[tokens, head_dim]`` of ``pool`` that the sequences attend to:
    positions $t < L_b$ of each block table $\\mathcal{T}_b$, times the KV head's ``scale``."""
    rows = []
    for table, length in zip(tables.tolist(), lens.tolist(), strict=True):
        blocks = pool[table[: -(-length // block_size)]].double()  # [n, N_KV, B, d_h]
        if scale is not None:
            blocks = blocks * scale.double().view(1, -1, 1, 1)
        rows.append(blocks.transpose(1, 2).flatten(0, 1)[:length].flatten(0, 1))
    return torch.cat(rows) if rows else pool.new_empty(0, pool.shape[-1], dtype=torch.float64)
