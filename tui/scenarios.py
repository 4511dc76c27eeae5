"""The runs the visualizer can show: each a small pool and a few requests chosen so that one
mechanism of the source text happens within the first few dozen steps.

A ``Scenario`` is plain data: requests and an ``EngineConfig``; ``Scenario.build`` turns it
into a live ``LLMEngine`` with its requests queued, ready for ``step()``. Every scenario samples
with a fixed seed (the tiny model loops when greedy), except beam search, which is deterministic
by definition, so a run is the same every time it is built.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minipaged.checkpoint import load_config
from minipaged.config import EngineConfig
from minipaged.engine import LLMEngine
from minipaged.grader.student_run import TUI_EXERCISES
from minipaged.llm import LLM
from minipaged.model import Llama
from minipaged.models import model_directory
from minipaged.sampling import SamplingParams
from minipaged.speculative import SpeculativeConfig
from minipaged.tokenizer import Tokenizer
from tui.engine_config import TUI_CONFIG


@dataclass(frozen=True)
class Request:
    prompt: str
    params: SamplingParams


@dataclass(frozen=True)
class Scenario:
    """The requests, all queued at step 0, and the engine they run on (``config``: the device
    pool of ``num_gpu_blocks`` blocks of $B$ slots, the host pool, the preemption mode of §6,
    an optional prefix cache of §7, ...)."""

    name: str
    title: str
    story: str
    requests: tuple[Request, ...]
    config: EngineConfig = TUI_CONFIG

    def build(self, model: str | None = None) -> LLMEngine:
        """Load ``model`` (the config's when None) and return its engine with every request
        added (nothing run yet), recording each step's attention for the attention view
        (``minipaged.attention_probe``). Raises ``FileNotFoundError`` or ``ValueError`` naming
        what is wrong."""
        llm = LLM(model, config=self.config)
        llm.engine.runner.record_attention()
        for request in self.requests:
            llm.engine.add_request(request.prompt, request.params)
        return llm.engine

    def check(self, model: str | None = None) -> None:
        """Refuse now what ``build`` would refuse of the requests once the app runs (a prompt
        past the model's context, a request no empty pool can hold), without loading any
        weights: the model is made on PyTorch's ``meta`` device, which holds shapes only,
        and an engine over it checks each request as ``add_request`` will. The command line
        calls this before the app takes the screen."""
        # The library's manager, the reference path, no drafter: none decides what fits
        config = self.config.replace(block_manager_class=None, backend="torch", speculative=None)
        directory = model_directory(model or config.model)
        with torch.device("meta"):
            shapes = Llama(load_config(directory)).to(getattr(torch, config.dtype))
        tokenizer = None
        if (directory / "tokenizer.json").is_file() and not config.skip_tokenizer_init:
            tokenizer = Tokenizer(directory)
        engine = LLMEngine(shapes, tokenizer, config)
        for request in self.requests:
            engine.check_request(request.prompt, request.params)


def sampled(max_tokens: int, seed: int, n: int = 1) -> SamplingParams:
    """Temperature 0.8, top-k 40: varied text from a small model that loops when greedy.
    EOS is ignored so a run's length, and so when its memory events happen, depends on
    ``max_tokens`` alone."""
    return SamplingParams(
        max_tokens=max_tokens, temperature=0.8, top_k=40, n=n, seed=seed, ignore_eos=True
    )


def beams(max_tokens: int, beam_width: int, n: int = 1) -> SamplingParams:
    """Beam search with ``beam_width`` beams, returning the ``n`` best (all of them when
    ``n`` is 1, as ``SamplingParams`` reads it)."""
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=0.0,
        n=n,
        use_beam_search=True,
        beam_width=beam_width,
        ignore_eos=True,
    )


PRESSURE_PROMPTS = (
    "It is a truth universally acknowledged, that a single man",
    "Emma Woodhouse, handsome, clever, and rich,",
    "Elizabeth could not help",
    "Sir Walter Elliot",
)

SYSTEM_PROMPT = "It is a truth universally acknowledged, that a single man in possession of a"

LONG_PROMPT = (
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife. However little known the feelings or views of such a "
    "man may be on his first entering a neighbourhood, this truth is so well fixed in the "
    "minds of the surrounding families"
)
"""80 tokens: the long prompt that arrives while two short ones decode."""

ARRIVALS = (
    Request("Mr. Darcy", sampled(24, seed=30)),
    Request("Emma Woodhouse, handsome, clever, and rich,", sampled(24, seed=31)),
    Request(LONG_PROMPT, sampled(16, seed=32)),
)
"""Two short prompts (4 and 13 tokens), then the long one: the chunked-prefill scenarios."""

CHUNKED = TUI_CONFIG.replace(num_gpu_blocks=48, max_num_seqs=4)

SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario
    for scenario in (
        Scenario(
            name="tour",
            title="a tour of every mechanism",
            story="Two requests share a long opening and a third asks for n = 3 samples, on a "
            "16-block pool with prefix caching. Step 1: a prefix hit (§7) and a fork (§5); "
            "step 2: copy-on-write. Soon the pool runs out (§6): the sampled request, the "
            "latest arrival, is swapped out to host memory, a single request is preempted by "
            "recompute, and both come back. c, w, p and h jump to each. At any step, a opens "
            "the attention view: one sequence's decode, read block by block through its table "
            "(§4); . reads the next block.",
            requests=(
                Request(f"{SYSTEM_PROMPT} good fortune", sampled(24, seed=20)),
                Request(f"{SYSTEM_PROMPT} large house", sampled(24, seed=21)),
                Request("Elizabeth could not help", sampled(12, seed=3, n=3)),
            ),
            config=TUI_CONFIG.replace(num_gpu_blocks=16, num_cpu_blocks=16, prefix_caching="hash"),
        ),
        Scenario(
            name="several",
            title="several requests",
            story="Four requests of different lengths share one device pool: blocks are taken "
            "one at a time as sequences grow (§3) and return to the pool as each finishes.",
            requests=tuple(
                Request(prompt, sampled(max_tokens, seed=i))
                for i, (prompt, max_tokens) in enumerate(
                    (
                        ("It is a truth universally acknowledged", 24),
                        ("Mr. Darcy", 12),
                        ("Emma Woodhouse, handsome, clever, and rich,", 32),
                        ("Elizabeth", 18),
                    )
                )
            ),
        ),
        Scenario(
            name="parallel",
            title="parallel sampling, n = 4",
            story="One prompt, four samples (§5): the prompt's blocks are forked, not copied "
            "(R[p] = 4); each sample's first write into the shared, partly filled last block "
            "copies it (copy-on-write).",
            requests=(Request("Elizabeth could not help", sampled(20, seed=3, n=4)),),
        ),
        Scenario(
            name="beam",
            title="beam search, K = 4",
            story="Beam search (§5): beams fork from their parents each step and share "
            "everything before the split; beams that fall out of the top K free their blocks.",
            requests=(Request("Mr. Darcy", beams(16, beam_width=4)),),
            config=TUI_CONFIG.replace(num_gpu_blocks=24),
        ),
        Scenario(
            name="swap",
            title="memory pressure: swapping",
            story="Four requests outgrow a 20-block pool (§6): the latest arrival is preempted "
            "and its blocks are copied to the host pool, then swapped back in when room "
            "returns.",
            requests=tuple(
                Request(prompt, sampled(28, seed=10 + i))
                for i, prompt in enumerate(PRESSURE_PROMPTS)
            ),
            config=TUI_CONFIG.replace(num_gpu_blocks=20, num_cpu_blocks=20, preemption="swap"),
        ),
        Scenario(
            name="recompute",
            title="memory pressure: recomputation",
            story="The same four requests and pool (§6), preempted by recomputation: the "
            "latest arrival drops its blocks, keeps its tokens, and prefills them all again "
            "when it is readmitted.",
            requests=tuple(
                Request(prompt, sampled(28, seed=10 + i))
                for i, prompt in enumerate(PRESSURE_PROMPTS)
            ),
            config=TUI_CONFIG.replace(num_gpu_blocks=20),
        ),
        Scenario(
            name="prefix",
            title="a shared system prompt, prefix caching",
            story="Four requests start with the same long prompt (§7, the agent scenario). With "
            "prefix caching, the first request's full prompt blocks are registered by their "
            "tokens; the others find them cached, share them (R[p] = 4) and prefill only their "
            "own last tokens.",
            requests=tuple(
                Request(f"{SYSTEM_PROMPT} {ending}", sampled(16, seed=20 + i))
                for i, ending in enumerate(("good fortune", "large house", "fine horse", "wife"))
            ),
            config=TUI_CONFIG.replace(prefix_caching="hash"),
        ),
        Scenario(
            name="chunked",
            title="chunked prefill, a budget of 20 tokens a step",
            story="Two short prompts and a long one (80 tokens) share a token budget of 20 a "
            "step (max_num_batched_tokens, chunked prefill on). Step 1 prefills both short "
            "prompts and the long one's first 3 tokens; from then on each step gives the two "
            "running sequences one token each first, and the long prompt a chunk of 18 with "
            "what is left: its blocks fill over five steps, ceil(t/B) after t tokens (§3), "
            "while the others keep producing a token every step. The scheduler pane's budget "
            "line says who used the budget; L marks a chunk.",
            requests=ARRIVALS,
            config=CHUNKED.replace(enable_chunked_prefill=True, max_num_batched_tokens=20),
        ),
        Scenario(
            name="chunked-off",
            title="the same arrivals, chunked prefill off",
            story="The chunked scenario's three requests with chunked prefill off: step 1 "
            "computes all 97 prompt tokens in one forward pass, the long prompt whole. On a "
            "server that step takes as long as its 97 tokens, and every running sequence waits "
            "for it: with long prompts arriving, the time between its tokens jumps (minipaged "
            "bench chunked measures it).",
            requests=ARRIVALS,
            config=CHUNKED,
        ),
        Scenario(
            name="speculative",
            title="speculative tree decoding",
            story="A draft model (tiny-draft) guesses a tree of next tokens, two per node, two "
            "deep (§5's fourth workload). First frame of a step: every guess gets a branch "
            "forked from its parent's, sharing the prefix's blocks (R[p] rises) and copying on "
            "write where a branch splits a block. Second frame: one target pass verifies the "
            "whole tree with the ancestors mask, the longest agreeing path is kept with the "
            "target's own next token, its branch becomes the sequence's table, and the rejected "
            "branches are freed.",
            requests=(Request("Elizabeth could not help", sampled(20, seed=5)),),
            config=TUI_CONFIG.replace(
                num_gpu_blocks=40,
                speculative=SpeculativeConfig(
                    "draft", num_speculative_tokens=2, branching=2, draft_model="tiny-draft"
                ),
            ),
        ),
    )
}

DEFAULT_SCENARIO = "tour"


EXERCISE_SCENARIOS = {number: run.scenario for number, run in TUI_EXERCISES.items()}
"""Which run shows a student's work on exercise N best (each exercise declares its own)."""


def custom(
    prompts: tuple[str, ...],
    *,
    n: int = 1,
    beam_width: int | None = None,
    max_tokens: int = 24,
    config: EngineConfig = TUI_CONFIG,
) -> Scenario:
    """One request per prompt, from the command line: ``n`` parallel samples each, or beam
    search with ``beam_width`` beams returning the ``n`` best (all of them when ``n`` is 1),
    on ``config``. Raises ``ValueError`` naming a bad value."""
    if not prompts or not all(prompts):
        raise ValueError("a custom scenario needs at least one non-empty --prompt")
    if beam_width is not None:
        params, what = beams(max_tokens, beam_width, n), f"beam search, K = {beam_width}"
        what += f", the {n} best returned" if n > 1 else ""
    else:
        # No per-request seed: the engine derives one from its seed and the arrival order, so
        # two identical prompts still sample differently.
        params = SamplingParams(max_tokens=max_tokens, temperature=0.8, top_k=40, n=n)
        what = f"n = {n}"
    pools = f"{config.num_gpu_blocks or 'default'} device blocks and {config.num_cpu_blocks}"
    return Scenario(
        name="custom",
        title=f"custom: {what}, B = {config.block_size}",
        story=f"{len(prompts)} prompt(s) of yours on {pools} host blocks, preemption by "
        f"{config.preemption}, KV cache {config.kv_cache_dtype}.",
        requests=tuple(Request(prompt, params) for prompt in prompts),
        config=config,
    )
