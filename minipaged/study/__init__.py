"""The study: model-free code that measures the paging system against its alternatives.

Nothing in the serving path imports this package. It holds what the source text's §2 and §7
compare, and the benchmarks that turn each quantitative claim into a printed table:

- ``baselines``: the allocators paging is compared with (static reservation, Orca's
  $\\Delta L$ growth, vAttention's pages) beside paging on the real ``BlockManager``;
- ``fast_manager``: that ``BlockManager`` as the simulator drives it, with no event stream and
  two steps taken at once (the core block manager reads as the source text, without them);
- ``workloads``: synthetic request streams (prompt and output lengths, branching factors);
- ``simulator``: runs a workload through any allocator at a real model's scale, without a model;
- ``report``: tables that print in the terminal and write the docs' results page;
- ``bench``: ``minipaged bench``, one sub-benchmark per claim.
"""
