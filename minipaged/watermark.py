"""The watermark $W$: device blocks kept free when admitting new work (vLLM's rule).

A share ``watermark`` of a device pool of $\\mathcal{P}_{\\max}$ blocks keeps
$W = \\lfloor \\text{watermark} \\cdot \\mathcal{P}_{\\max} \\rfloor$ blocks free, rounded down as
vLLM rounds it (``int(watermark * num_gpu_blocks)``), so that what a student learns here
carries over. So the default share, ``DEFAULT_WATERMARK`` (vLLM's 0.01), keeps no block of a
pool under 100 blocks, the TUI's scenarios' and most tests' pools among them: the docs and the
``--watermark`` help say so. Any other positive share that keeps no block was set by hand and
means nothing on that pool (it admits work as 0 does): ``watermark_blocks`` refuses it, naming
the share, the pool and the smallest share that keeps one block.
"""

from __future__ import annotations

import math

__all__ = ["DEFAULT_WATERMARK", "watermark_blocks"]

DEFAULT_WATERMARK = 0.01
"""vLLM's default share: 1% of the device pool."""


def watermark_blocks(watermark: float, num_blocks: int) -> int:
    """$W$ for ``watermark`` (a share already checked to be in $[0, 1)$) of ``num_blocks``
    device blocks; ``ValueError`` for a share set by hand that keeps none."""
    kept = int(watermark * num_blocks)
    if kept == 0 and watermark > 0 and watermark != DEFAULT_WATERMARK:
        smallest = 1 / num_blocks
        while int(smallest * num_blocks) < 1:  # 1/P may round to just below one block
            smallest = math.nextafter(smallest, 1)
        raise ValueError(
            f"watermark={watermark!r} keeps int({watermark!r} * {num_blocks:,}) = 0 of the "
            f"{num_blocks:,} device blocks free (the share rounds down, as in vLLM), so it "
            f"admits work as watermark=0 does; pass 0 to keep no block free (--watermark 0), "
            f"at least {smallest!r} to keep one, or give the pool more blocks "
            "(num_gpu_blocks, --num-gpu-blocks)"
        )
    return kept
