"""minipaged: PagedAttention, the paged KV-cache memory manager of vLLM (Kwon et al., SOSP 2023),
written to be read, stepped through, tested and taught from.

The source text's notation is used throughout: block size $B$ (``block_size``), pool size
$\\mathcal{P}_{\\max}$ (``num_blocks``), block table $\\mathcal{T}_r$ (``BlockTable``),
refcount $\\mathcal{R}[p]$ (``refcount(p)``).
"""

__version__ = "0.1.0"
