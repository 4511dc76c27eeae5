"""The counts that pages state about code they do not run, read from that code: ``CHECKED``
maps each ``(page, count)`` to a function that returns the phrases the page must hold, made
from what the code says now (``minipaged demo``'s pool, a TUI scenario, a figure's inputs, a
screenshot the page shows, which test_docs keeps current)."""

from __future__ import annotations

import re

from test_docs import DOCS

WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
"""How a page writes a small count in words."""
ORDINALS = ("third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
"""How a page writes a place in words: "the third block" is the number 3 (``ORDINALS[i]`` is
``i + 3``). "First" and "second" are left out: prose says them of order, not of a count."""


def demo_manager(steps: int):
    """The block manager ``minipaged demo`` walks through, after its first ``steps`` steps."""
    import io
    from unittest import mock

    from rich.console import Console

    from minipaged import walkthrough

    made = []

    class Recorded(walkthrough.BlockManager):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    with mock.patch.object(walkthrough, "BlockManager", Recorded):
        walkthrough.run(Console(file=io.StringIO()), steps=steps)
    return made[0]


def screen_text(screenshot: str) -> str:
    """The text of a TUI screenshot in docs/assets/screenshots/, spaces as spaces."""
    import html

    svg = (DOCS / "assets" / "screenshots" / screenshot).read_text(encoding="utf-8")
    return html.unescape("".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg))).replace(
        "\xa0", " "
    )


def figures():
    """docs/figures.py, whose functions draw the site's figures from the code."""
    from test_docs import load_figures

    return load_figures()


def tiny_tokenizer():
    """The embedded tiny model's tokenizer, which the TUI's scenarios and the CLI use."""
    from minipaged.models import EMBEDDED_MODELS
    from minipaged.tokenizer import Tokenizer

    return Tokenizer(EMBEDDED_MODELS["tiny"])


def demo_phrases() -> list[str]:
    pools = demo_manager(steps=1)
    return [
        f"a pool of {pools.device.num_blocks} blocks of $B = {pools.block_size}$ tokens",
        f"host pool of {pools.host.num_blocks} blocks",
        f"allocates a {pools.table(0).num_tokens}-token prompt",
        f"forks it into {WORDS[len(demo_manager(steps=2).tables)]} samples",
    ]


def chunked_phrases() -> list[str]:
    from tui.scenarios import LONG_PROMPT

    return [f"shows an {len(tiny_tokenizer().encode(LONG_PROMPT))}-token prompt"]


def pressure_phrases() -> list[str]:
    from tui.scenarios import SCENARIOS

    (pool,) = {SCENARIOS[name].config.num_gpu_blocks for name in ("swap", "recompute")}
    (requests,) = {len(SCENARIOS[name].requests) for name in ("swap", "recompute")}
    shown = re.findall(r"s\d+\s+L=(\d+)", screen_text("recompute-step-29-tables.svg"))
    *first, last = shown
    return [
        f"scenarios run {WORDS[requests]} requests in a pool of {pool} blocks",
        f"$L = {first[0]}$, {', '.join(first[1:])} and {last} for seqs",
        f"prefilled again with {', '.join(first)} and {last} tokens",
        f"all {WORDS[len(shown)]} sequences",
    ]


def parallel_phrases() -> list[str]:
    from tui.scenarios import SCENARIOS

    (request,) = SCENARIOS["parallel"].requests
    prompt = len(tiny_tokenizer().encode(request.prompt))
    return [
        f"{WORDS[request.params.n]} samples of a {prompt}-token prompt",
        f"the {ORDINALS[request.params.n - 3]} sample kept block 1 itself",
    ]


def radix_phrases() -> list[str]:
    first, second, *_ = figures().RADIX_PROMPTS.values()
    shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    return [f"share a {shared}-token system prompt"]


def tiny_layers_phrases() -> list[str]:
    import json

    from minipaged.models import EMBEDDED_MODELS

    config = json.loads((EMBEDDED_MODELS["tiny"] / "config.json").read_text(encoding="utf-8"))
    layers = config["num_hidden_layers"]
    return [f"for weights that hold {layers} is told", f"the weights hold {layers} layers"]


def decoded_phrases() -> list[str]:
    (length,) = re.findall(r"s0\s+L=\d+→(\d+)", screen_text("tour-attention-step-12.svg"))
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(int(length) % 10, "th")
    suffix = "th" if int(length) % 100 in (11, 12, 13) else suffix
    return [f"step 12, where sequence 0 decodes its {length}{suffix} token"]


def memory_bench_phrases() -> list[str]:
    import inspect

    from minipaged.study.bench.memory import simulate_report

    defaults = inspect.signature(simulate_report).parameters
    requests, gpu = defaults["num_requests"].default, defaults["hbm_gb"].default
    return [f"the same at {requests:,} requests on an {gpu:g} GB GPU"]


def waste_phrases() -> list[str]:
    (waste,) = re.findall(
        r"waste +(\d+/\d+) slots empty", screen_text("parallel-step-2-memory.svg")
    )
    empty, slots = waste.split("/")
    slots_in_all, max_len = figures().TIMELINE_SLOTS, figures().TIMELINE_MAX_LEN
    return [
        f"a pool of {slots_in_all:,} slots, $L_{{\\max}} = {max_len}$",
        f"the waste line, {empty} of {slots} slots empty",
    ]


def fragmentation_phrases() -> list[str]:
    import figures_pools  # docs/, on the path test_docs gives it

    pool, requests = figures_pools.POOL, WORDS[len(figures_pools.BUFFERS)]
    return [
        f"in a pool of {pool:,} slots. {requests.capitalize()} requests took buffers",
        f"a new request of {figures_pools.REQUEST} slots",
        f"in blocks of $B = {figures_pools.BLOCK}$",
    ]


def tree_limit_phrases() -> list[str]:
    from minipaged.speculative.config import MAX_TREE_NODES

    return [f"`max_tree_nodes` (at most {MAX_TREE_NODES})"]


def v2_phrases() -> list[str]:
    length, size = figures().V2_LENGTH, figures().V2_PARTITION_SIZE
    return [
        f"over {length} tokens, each partition of {size} tokens",
        f"The last partition holds only {length % size} tokens",
        f"the {WORDS[-(-length // size)]} v2 partitions of a {length}-token sequence",
    ]


def threads_phrases() -> list[str]:
    from cuda_kernels import launch

    threads = 4 * launch.WARP_SIZE  # NUM_THREADS on a GPU (the simulator runs fewer)
    return [
        f"$T = {threads}$",
        f"a {threads}-thread block",
        f"at {threads} threads per thread block",
    ]


def contiguous_phrases() -> list[str]:
    *first, last = figures().CONTIGUOUS_LENGTHS
    count = WORDS[len(first) + 1]
    return [
        f"{count.capitalize()} sequences of {', '.join(map(str, first))} and {last} tokens",
        f"The same {count} sequences",
    ]


def partition_phrases() -> list[str]:
    (size,) = re.findall(r"v2, (\d+) tokens a partition", screen_text("tour-attention-step-12.svg"))
    return [f"partitions of {size} tokens"]


def vocabulary_phrases() -> list[str]:

    return [f"a {tiny_tokenizer().tokenizer.get_vocab_size():,}-token byte-level BPE"]


# A count the page states about code it does not run on the page: what the code says, read
# from the code (or from the screenshot the page shows, which test_docs keeps current), in
# the words of the page; each phrase must be on the page.
CHECKED = {
    ("reference/cli.md", "12 blocks"): demo_phrases,
    ("reference/cli.md", "8 blocks"): demo_phrases,
    ("reference/cli.md", "10-token"): demo_phrases,
    ("explanation/chunked-prefill.md", "80-token"): chunked_phrases,
    ("tutorials/swap-or-recompute.md", "20 blocks"): pressure_phrases,
    ("tutorials/swap-or-recompute.md", "17 tokens"): pressure_phrases,
    ("explanation/online-softmax.md", "200 tokens"): v2_phrases,
    ("explanation/online-softmax.md", "64 tokens"): v2_phrases,
    ("explanation/online-softmax.md", "200-token"): v2_phrases,
    ("explanation/online-softmax.md", "128-thread"): threads_phrases,
    ("how-to/run-kernels-on-a-gpu.md", "128 threads"): threads_phrases,
    ("explanation/kv-memory.md", "61 tokens"): contiguous_phrases,
    ("explanation/waste.md", "1,024 slots"): waste_phrases,
    ("explanation/waste.md", "20 slots"): waste_phrases,
    ("explanation/comparison.md", "1,000 requests"): memory_bench_phrases,
    ("tutorials/fork-and-copy-on-write.md", "6-token"): parallel_phrases,
    ("tutorials/fork-and-copy-on-write.md", "four samples"): parallel_phrases,
    ("reference/cli.md", "three samples"): demo_phrases,
    ("reference/cli.md", "at most 1024"): tree_limit_phrases,
    ("tutorials/swap-or-recompute.md", "three sequences"): pressure_phrases,
    ("explanation/waste.md", "Five requests"): fragmentation_phrases,
    ("explanation/kv-memory.md", "Four sequences"): contiguous_phrases,
    ("explanation/kv-memory.md", "four sequences"): contiguous_phrases,
    ("tutorials/watch-one-query-attend.md", "12 tokens"): partition_phrases,
    ("reference/concepts.md", "2,048-token"): vocabulary_phrases,
    ("tutorials/fork-and-copy-on-write.md", "fourth sample"): parallel_phrases,
    ("explanation/comparison.md", "32-token"): radix_phrases,
    ("how-to/load-a-hugging-face-checkpoint.md", "4 layers"): tiny_layers_phrases,
    ("tutorials/watch-one-query-attend.md", "37th token"): decoded_phrases,
}
