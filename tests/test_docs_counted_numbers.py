"""Every count of blocks, slots, tokens, requests, threads ... and every limit that the site
states about something code decides comes from that code: the kind of number
``test_docs_measured_numbers`` does not see, since it has no unit ("a pool of 12 blocks", "a
10-token prompt", "forks it into three samples", "the third block", "at most 1024").

A count in a page's prose is accounted for when

- the code of its section uses the number as that kind of count (``tests/code_counts.py``): an
  input the section hands its examples, or a value they assert (``test_docs`` runs both), as
  "a 20-token prompt" above ``allocate(0, 20)``, whose parameter is ``num_tokens``. The same
  20 as a sequence id, a loop's bound, a list's element or a comment witnesses nothing;
- it is a ``{{ expression }}`` the build fills (docs/hooks/prose_values.py);
- ``CHECKED`` reads it from the code the page describes but does not run (``minipaged demo``'s
  pool, a TUI scenario, a figure's inputs, a screenshot's numbers) and finds the page's words;
- or ``ALLOWED_COUNTS`` gives its reason: a quotation, a fact about hardware, an input the
  page chooses for its prose.
"""

from __future__ import annotations

import re

import pytest
from checked_counts import CHECKED, ORDINALS, WORDS
from code_counts import bindings, witnessed
from test_docs import DOCS, NOT_PROSE, OUTPUT_INFO, SHELL_OUTPUT_INFO, fence_spans
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
# "a pool of 12 blocks", "a 10-token prompt", "two blocks", "the third block", "the 37th
# token"; not an exercise's number ("01 block-table"), nor one of a thing, which prose says of
# anything ("one token a step").
COUNTED = re.compile(
    rf"(?i:(?<![\w.{{§/#-])(?!0\d)\d[\d,]*(?:st|nd|rd|th)?"
    rf"|\b(?:{'|'.join(WORDS[2:] + ORDINALS)}))[\s-](?:{COUNT_NOUNS})\b"
)
# A limit: "max_tree_nodes (at most 1024)", "up to 55%"; the code that sets one is what the
# reader is told about.
LIMITED = re.compile(r"\b(?:at most|up to|no more than|at least) \d[\d,]*(?:\.\d+)?%?")
HARDWARE_WARP = HARDWARE + " (a warp is 32 threads)"
ANY_RUN = "said of any run, not a count of this page's: a general statement"
DIAGRAM = "a label of the diagram docs/figures.py writes (RADIX_MARKER); test_docs keeps it current"

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
    ("explanation/address-translation.md", "80 layers"): INPUT + " (Llama-3-70B's, the factor 80)",
    ("explanation/address-translation.md", "two sequences"): ANY_RUN + " (what CoW is)",
    ("explanation/comparison.md", "100 steps"): INPUT + " (new_tokens = 100, a token a step)",
    ("explanation/comparison.md", "256 slots"): INPUT + " (delta=256: the text's ΔL)",
    ("explanation/comparison.md", "32 tokens"): DIAGRAM,
    ("explanation/comparison.md", "16 tokens"): DIAGRAM,
    ("explanation/comparison.md", "8,192 token"): INPUT + " (capacity = 8192)",
    ("explanation/comparison.md", "900 tokens"): INPUT + " (the example's prompts dictionary)",
    ("explanation/comparison.md", "two sequences"): INPUT + " (vattn.admit's a and b)",
    ("explanation/copy-on-write.md", "128 tokens"): INPUT + " (the example's range(128))",
    ("explanation/copy-on-write.md", "8 tokens"): INPUT + " (40 mod 16, worked in the prose)",
    ("explanation/copy-on-write.md", "Four samples"): INPUT + " (the example's seqs 0 to 3)",
    ("explanation/cpu-and-cuda-kernels.md", "four sequences"): INPUT + " (a benchmark row's shape)",
    ("explanation/cpu-and-cuda-kernels.md", "two sequences"): INPUT + " (seq_lens' two lengths)",
    ("explanation/cpu-and-cuda-kernels.md", "two tokens"): ANY_RUN + " (the twin's loop, unrolled)",
    ("explanation/fp8-kv-cache.md", "third layer"): INPUT
    + " (largest[2], the index the page reads)",
    ("explanation/online-softmax.md", "Two sequences"): INPUT + " (seq_lens' two lengths)",
    ("explanation/online-softmax.md", "third block"): INPUT + " (maxima[2], the index it reads)",
    ("explanation/online-softmax.md", "third partition"): INPUT + " (6 tokens, partitions of 2)",
    ("explanation/waste.md", "300-slot"): INPUT + " (the figure's new request)",
    ("explanation/waste.md", "4 blocks"): INPUT + " (allocate(seq, 64) at B = 16)",
    ("explanation/waste.md", "80-layer"): SOURCE_TEXT,
    ("explanation/waste.md", "two requests"): INPUT + " (the timeline figure's requests)",
    ("how-to/teach-with-the-exercises.md", "two threads"): ANY_RUN + " (what a race is)",
    ("reference/trace-format.md", "two-request"): INPUT + " (trace_bytes' two prompts)",
    ("tutorials/fork-and-copy-on-write.md", "two steps"): PAPER + " (§5's steps 1 and 2)",
    ("tutorials/fork-and-copy-on-write.md", "three steps"): ANY_RUN + " (a question to the reader)",
    ("tutorials/read-the-kernel.md", "Two sequences"): INPUT + " (the example's seqs 0 and 1)",
    ("tutorials/read-the-kernel.md", "third block"): INPUT + " (T = [0, 1, 4] in the output)",
    ("tutorials/read-the-kernel.md", "two blocks"): INPUT + " (6 tokens at B = 4)",
    ("tutorials/swap-or-recompute.md", "two requests"): INPUT + " (three requests, one preempted)",
    ("tutorials/watch-a-block-table-grow.md", "three tokens"): INPUT + " (the example's range(3))",
    ("tutorials/watch-a-block-table-grow.md", "two slots"): INPUT + " (positions 10 and 11)",
    ("tutorials/watch-a-block-table-grow.md", "4 tokens"): INPUT + " (the example's range(4))",
    ("explanation/waste.md", "three sequences"): INPUT + " (the example's seqs 0, 1 and 2)",
}


def as_number(count: str) -> int:
    """The number of a count: 4 for "four samples", "4 samples" or "the fourth sample"; the
    number of a limit ("at most 1,024") the same way."""
    word = count.split()[0].split("-")[0].lower()
    if word in WORDS:
        return WORDS.index(word)
    if word in ORDINALS:
        return ORDINALS.index(word) + 3
    return int(re.search(r"\d[\d,]*", count)[0].replace(",", ""))


def counts_in(markdown: str, page: str) -> list[tuple[int, str]]:
    """``(line, "number noun")`` for each count in the prose that the code of its section
    (up to the next heading) does not use as that kind of count (tests/code_counts.py); a
    limit ("at most 64"), which names no kind, needs its number bound to some name. Code
    further away is about something else ("9" in one example is no witness for "9 blocks"
    three sections on)."""
    lines = markdown.splitlines()
    inside = fenced_lines(lines, page)
    section, sections = 0, []
    for n, line in enumerate(lines):
        section += n not in inside and line.startswith("#")
        sections.append(section)
    bound: dict[int, set[tuple[int, str]]] = {}
    for span in fence_spans(lines, page):
        if span.info not in OUTPUTS:
            bound.setdefault(sections[span.line - 1], set()).update(
                bindings(span.language, span.source)
            )
    found = []
    for n, line in enumerate(lines):
        if n in inside:
            continue
        prose, code = NOT_PROSE.sub(" ", line), bound.get(sections[n], set())
        for match in COUNTED.finditer(prose):
            if not witnessed(as_number(match[0]), match[0], code):
                found.append((n + 1, match.start(), match[0]))
        for match in LIMITED.finditer(prose):
            if "%" in match[0] or as_number(match[0]) not in {value for value, _ in code}:
                found.append((n + 1, match.start(), match[0]))
    return [(line, count) for line, _, count in sorted(found)]


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


def test_a_number_in_the_code_witnesses_only_the_count_it_is_used_as() -> None:
    """Planted wrong counts that the same number in the code, used as something else, once let
    pass: a sequence id, a loop's bound, a list's element, a comment, a diagram's label, a
    factor; and the ways code does state a count, which still pass."""
    wrong = """Three sequences, 3 blocks, a 7-token prompt, 4 layers, the third block,
the 12th token, 5 samples, eight requests.

```python
bm.allocate(3, 20)                     # 7 tokens
for _ in range(4):
    bm.append_slot(0)
table = [8, 12, 5]
assert bm.table(0).blocks == [2, 0, 1]
kv_bytes = 2 * 8 * 64
```

```mermaid
flowchart LR
    a["two sequences"]
```
"""
    assert [count for _, count in counts_in(wrong, "planted.md")] == [
        "Three sequences",
        "3 blocks",
        "7-token",
        "4 layers",
        "third block",
        "12th token",
        "5 samples",
        "eight requests",
        "two sequences",  # a diagram's label is prose: the mermaid fence binds nothing
    ]
    right = """Two sequences, 3 blocks, a 7-token prompt, 4 layers, the third block,
the 12th token, 5 samples, eight requests, 9 threads, at most 64.

```python
bm = BlockManager(num_gpu_blocks=3, block_size=16)
bm.allocate(0, 7)
config = {"num_hidden_layers": 4}
assert len(bm.table(0).blocks) == 3
seq_lens = torch.tensor([12, 5])
params = SamplingParams(n=5, max_tokens=12)
num_requests = 8
beam_width, max_tree_nodes = 2, 64
```

```bash
minipaged bench --threads 9
```
"""
    assert counts_in(right, "planted.md") == []
