"""Every count of blocks, slots, tokens, requests, threads ... and every limit that the site
states about something code decides comes from that code: the kind of number
``test_docs_measured_numbers`` does not see, since it has no unit ("a pool of 12 blocks", "a
10-token prompt", "forks it into three samples", "at most 1024").

A count in a page's prose is accounted for when

- the code of its section holds the number: an input the section hands its examples, or a
  value they assert (``test_docs`` runs both), as in "a 20-token prompt" above
  ``allocate(0, 20)``;
- it is a ``{{ expression }}`` the build fills (docs/hooks/prose_values.py);
- ``CHECKED`` reads it from the code the page describes but does not run (``minipaged demo``'s
  pool, a TUI scenario, a figure's inputs, a screenshot's numbers) and finds the page's words;
- or ``ALLOWED_COUNTS`` gives its reason: a quotation, a fact about hardware, an input the
  page chooses for its prose.
"""

from __future__ import annotations

import re

import pytest
from test_docs import DOCS, NOT_PROSE, OUTPUT_INFO, SHELL_OUTPUT_INFO, fence_spans, numbers_in
from test_docs_measured_numbers import (
    GENERATED,
    HARDWARE,
    INPUT,
    ONE_OFF,
    PAPER,
    SOURCE_TEXT,
    fenced_lines,
)

OUTPUTS = (OUTPUT_INFO, SHELL_OUTPUT_INFO)

COUNT_NOUNS = (
    r"blocks?|slots?|tokens?|sequences?|requests?|samples?|steps?|layers?|heads?|threads?"
    r"|rounds?|partitions?"
)
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
"""How a page writes a small count in words."""
# "a pool of 12 blocks", "a 10-token prompt", "five steps"; not an exercise's number ("01
# block-table"), nor one or two of a thing, which prose says of anything ("one token a step").
COUNTED = re.compile(
    rf"(?i:(?<![\w.{{§/#-])(?!0\d)\d[\d,]*|\b(?:{'|'.join(WORDS[3:])}))[\s-](?:{COUNT_NOUNS})\b"
)
# A limit: "max_tree_nodes (at most 1024)", "up to 55%"; the code that sets one is what the
# reader is told about.
LIMITED = re.compile(r"\b(?:at most|up to|no more than|at least) \d[\d,]*(?:\.\d+)?%?")
HARDWARE_WARP = HARDWARE + " (a warp is 32 threads)"

# A count the page states about something it does not run: each with its reason.
ALLOWED_COUNTS = {
    ("explanation/chunked-prefill.md", "20-token"): INPUT + " (the example's range(5, 25))",
    ("explanation/chunked-prefill.md", "8,000-token"): INPUT + " (a long prompt, for scale)",
    ("explanation/comparison.md", "16-token"): INPUT + " (the page's B = 16)",
    ("explanation/cpu-and-cuda-kernels.md", "1,024 tokens"): INPUT + " (a benchmark row's shape)",
    ("explanation/how-an-llm-generates.md", "100 tokens"): INPUT,
    ("explanation/kv-memory.md", "4,096 tokens"): PAPER + " (Llama-2-70B's context window)",
    ("explanation/online-softmax.md", "32 threads"): HARDWARE_WARP,
    ("explanation/online-softmax.md", "6 tokens"): INPUT + " (the worked example's sequence 1)",
    ("explanation/preemption.md", "64 tokens"): PAPER + " (the vLLM paper's block sizes)",
    ("how-to/load-a-hugging-face-checkpoint.md", "40 layers"): INPUT + " (a broken config)",
    ("reference/concepts.md", "32 threads"): HARDWARE_WARP,
    ("tutorials/swap-or-recompute.md", "64 tokens"): PAPER + " (the vLLM paper's block sizes)",
    ("explanation/comparison.md", "up to 55%"): SOURCE_TEXT,
    ("explanation/copy-on-write.md", "up to 55%"): SOURCE_TEXT,
    ("explanation/comparison.md", "Three requests"): INPUT + " (the workload the page replays)",
    ("explanation/comparison.md", "three sequences"): INPUT + " (that workload, sections up)",
    ("explanation/online-softmax.md", "six tokens"): INPUT + " (the example's list of values)",
    ("explanation/waste.md", "Six sample"): INPUT + " (the example's lengths)",
    ("explanation/waste.md", "four sequences"): INPUT + " (the example's list of prompts)",
    ("how-to/teach-with-the-exercises.md", "ten steps"): ONE_OFF + " (how TAB_MB was measured)",
    ("tutorials/share-a-prefix.md", "four requests"): INPUT + " (the example's prompts)",
    ("tutorials/share-a-prefix.md", "Four requests"): INPUT + " (the example's prompts)",
    ("tutorials/swap-or-recompute.md", "three requests"): INPUT + " (the example's prompts)",
    ("tutorials/swap-or-recompute.md", "Three requests"): INPUT + " (the example's prompts)",
    ("tutorials/swap-or-recompute.md", "four requests"): INPUT + " (tests/test_engine.py's)",
    ("tutorials/fork-and-copy-on-write.md", "1,000-token"): INPUT,
}


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
    return [f"{WORDS[request.params.n]} samples of a {prompt}-token prompt"]


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
}


def as_digits(count: str) -> set[str]:
    """The number of a count, in digits: ``{"4"}`` for "four samples" or "4 samples"."""
    word = count.split()[0].split("-")[0].lower()
    return {str(WORDS.index(word))} if word in WORDS else numbers_in(count)


def counts_in(markdown: str, page: str) -> list[tuple[int, str]]:
    """``(line, "number noun")`` for each count in the prose that the code of its section
    (up to the next heading) does not hold: a number written in a code block is an input
    the section hands its examples, or a value they assert, and test_docs runs both. Code
    further away is about something else ("9" in one example is no witness for "9 blocks"
    three sections on)."""
    lines = markdown.splitlines()
    inside = fenced_lines(lines, page)
    section, sections = 0, []
    for n, line in enumerate(lines):
        section += n not in inside and line.startswith("#")
        sections.append(section)
    in_code: dict[int, set[str]] = {}
    for span in fence_spans(lines, page):
        if span.info not in OUTPUTS:
            in_code.setdefault(sections[span.line - 1], set()).update(numbers_in(span.source))
    return [
        (n + 1, match[0])
        for n, line in enumerate(lines)
        if n not in inside
        for pattern in (COUNTED, LIMITED)
        for match in pattern.finditer(NOT_PROSE.sub(" ", line))
        if as_digits(match[0]).isdisjoint(in_code.get(sections[n], ()))
    ]


def counts_on_the_site() -> dict[tuple[str, str], list[int]]:
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted(DOCS.rglob("*.md")):
        page = path.relative_to(DOCS).as_posix()
        if not page.startswith(GENERATED):
            for line, count in counts_in(path.read_text(encoding="utf-8"), page):
                found.setdefault((page, count), []).append(line)
    return found


def test_no_page_states_a_count_the_code_makes_typed_by_hand() -> None:
    """The class of "a pool of 12 blocks" describing ``minipaged demo``: a count of blocks,
    slots or tokens that code decides, typed into a page that does not run that code, is
    silently wrong after the code changes."""
    found = counts_on_the_site()
    typed = [
        f"docs/{page}:{lines[0]}: {count}"
        for (page, count), lines in found.items()
        if (page, count) not in ALLOWED_COUNTS | CHECKED
    ]
    assert not typed, (
        "counts typed by hand into the prose; write each as {{ expression }} computed by the "
        "page's examples, or add it to CHECKED with a function that reads it from the code, "
        "or, for a quotation or a chosen input, to ALLOWED_COUNTS with its reason:\n"
        + "\n".join(typed)
    )
    stale = sorted(key for key in ALLOWED_COUNTS | CHECKED if key not in found)
    assert not stale, f"remove these entries, their pages no longer state them: {stale}"


@pytest.mark.parametrize("read", sorted(set(CHECKED.values()), key=lambda f: f.__name__))
def test_every_checked_count_is_what_the_code_says(read) -> None:
    pages = {page for (page, _), how in CHECKED.items() if how is read}
    text = " ".join(
        " ".join((DOCS / page).read_text(encoding="utf-8").split()) for page in sorted(pages)
    )
    missing = [phrase for phrase in read() if phrase not in text]
    assert not missing, (
        f"{sorted(pages)} no longer say what the code does: {missing} (fix the page, "
        "or make the number a {{ expression }})"
    )


def test_the_count_check_finds_a_count_the_page_does_not_run() -> None:
    page = """A pool of 12 blocks, a 10-token prompt, then 24 tokens more, in 3 steps.
It was exercise 01 block-table arithmetic; {{ n }} blocks; `4 blocks`; $5$ blocks.
Four samples over five steps, one token a step, a tree of at most 64 nodes.

```python
bm.allocate(0, 24)
fork(n=4)
```

## Later

Then 24 tokens more.
"""
    assert [count for _, count in counts_in(page, "planted.md")] == [
        "12 blocks",
        "10-token",
        "3 steps",
        "five steps",
        "at most 64",
        "24 tokens",
    ]
