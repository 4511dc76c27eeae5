"""minipaged: PagedAttention, the paged KV-cache memory manager of vLLM (Kwon et al., SOSP 2023),
written to be read, stepped through, tested and taught from.

The source text's notation is used throughout: block size $B$ (``block_size``), pool size
$\\mathcal{P}_{\\max}$ (``num_blocks``), block table $\\mathcal{T}_r$ (``BlockTable``),
refcount $\\mathcal{R}[p]$ (``refcount(p)``).

Reading order, following the source text:

1. ``memory``: §1–3's arithmetic (bytes per token, blocks, slots, the three kinds of waste).
2. ``allocator``, ``block_table``, ``block_manager``: the physical pool with refcounts
   $\\mathcal{R}[p]$, the tables $\\mathcal{T}_r$, fork and copy-on-write (§3, §5), swap (§6).
3. ``events``, ``invariants``: what each operation did, in words, and the rules it keeps.
4. ``prefix_cache``, then ``radix_cache``: sharing prompt prefixes across requests (§7).
5. ``kv_cache``, ``attention``: the tensors behind the blocks and §4's gather-attention.
6. ``model``, ``checkpoint``, ``tokenizer``: the Llama that writes into those blocks.
7. ``config``, ``sequence``, ``scheduler``, ``sampling``, ``beam_search``, ``decoding``,
   ``engine``, ``outputs``, ``llm``: every setting in one object, continuous batching,
   preemption (§6), one engine step, and the ``LLM`` API.
8. ``trace``, ``stats``, ``walkthrough``: recording, counting and narrating a run.

Beside the system: ``minipaged.study`` (baselines, the simulator, benchmarks) measures it,
``minipaged.grader`` grades the classroom exercises, ``cuda_kernels`` holds the GPU kernels and
``tui`` the step-through visualizer.
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
