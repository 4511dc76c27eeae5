"""minipaged: PagedAttention, the paged KV-cache memory manager of vLLM (Kwon et al., SOSP 2023),
written to be read, stepped through, tested and taught from.

The source text's notation is used throughout: block size $B$ (``block_size``), pool size
$\\mathcal{P}_{\\max}$ (``num_blocks``), block table $\\mathcal{T}_r$ (``BlockTable``),
refcount $\\mathcal{R}[p]$ (``refcount(p)``).
"""

__version__ = "0.1.0"

__all__ = ["LLM", "SamplingParams"]


def __getattr__(name: str):
    # Imported on first use, so `minipaged demo` and the allocator need not load torch.
    if name == "LLM":
        from minipaged.llm import LLM

        return LLM
    if name == "SamplingParams":
        from minipaged.sampling import SamplingParams

        return SamplingParams
    raise AttributeError(f"module 'minipaged' has no attribute {name!r}")
