"""The chunked-prefill scheduler driven by hypothesis: random arrivals (prompts from a tiny
alphabet, so prefixes repeat; one or two samples) and steps, on small pools, with each
preemption mode, with and without a prefix cache and a long-prefill cap, on a tiny random
model. After every step:

1. the step's token budget is never exceeded (the ``StepBudget`` the scheduler records, and
   the tokens the step computed);
2. every sequence holds $\\lceil t/B \\rceil$ blocks for its $t$ computed tokens, and a partly
   prefilled one has computed exactly up to the end of its last chunk;
3. the shared invariants (``minipaged.invariants``) hold;

and once every request is done, every device block is free again.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from minipaged import invariants
from minipaged.chunked_prefill import PrefillChunk, StepBudget
from minipaged.engine import LLMEngine, RequestRejected
from minipaged.model import Llama
from minipaged.sampling import SamplingParams
from tests.test_model_runner import CONFIG

torch.manual_seed(0)
MODEL = Llama(dataclasses.replace(CONFIG, max_position_embeddings=96)).eval()


class ChunkedScheduler(RuleBasedStateMachine):
    @initialize(
        block_size=st.sampled_from([1, 2, 4]),
        num_gpu_blocks=st.integers(12, 40),
        budget=st.integers(1, 12),
        preemption=st.sampled_from(["recompute", "swap"]),
        prefix_caching=st.sampled_from([None, "hash"]),
        cap=st.sampled_from([0, 0, 1, 3]),
    )
    def start(self, block_size, num_gpu_blocks, budget, preemption, prefix_caching, cap):
        self.engine = LLMEngine(
            MODEL,
            block_size=block_size,
            num_gpu_blocks=num_gpu_blocks,
            num_cpu_blocks=num_gpu_blocks,
            preemption=preemption,
            prefix_caching=prefix_caching,
            enable_chunked_prefill=True,
            max_num_batched_tokens=budget,
            max_num_seqs=min(budget, 4),
            long_prefill_token_threshold=min(cap, budget),  # above the budget: refused
            backend="torch",
        )
        self.chunk_end: dict[int, int] = {}  # seq id -> where its last chunk ended

    @rule(
        prompt=st.lists(st.integers(3, 5), min_size=1, max_size=30),  # a tiny alphabet
        max_tokens=st.integers(1, 6),
        n=st.sampled_from([1, 1, 2]),
    )
    def arrive(self, prompt, max_tokens, n):
        params = SamplingParams(max_tokens=max_tokens, temperature=0, n=n, ignore_eos=True)
        # Too large for this pool or batch: refused, and nothing else changes.
        with contextlib.suppress(RequestRejected, ValueError):
            self.engine.add_request({"prompt_token_ids": prompt}, params)

    @precondition(lambda self: self.engine.has_unfinished())
    @rule()
    def step(self):
        engine = self.engine
        step = engine.step()
        [spent] = [event for event in step.events if isinstance(event, StepBudget)]
        assert spent.used <= spent.budget == engine.scheduler.max_num_batched_tokens
        assert step.num_prefill_tokens + step.num_decode_tokens <= spent.budget
        for event in step.events:
            if isinstance(event, PrefillChunk):
                self.chunk_end[event.seq] = event.first + event.num_tokens
        bm = engine.block_manager
        for seq_id, table in bm.tables.items():
            assert table.num_blocks == -(-table.num_tokens // bm.block_size)
            length = len(step.sequences[seq_id].token_ids)
            assert table.num_tokens <= length - 1, "nothing computed ahead of its tokens"
            if table.num_tokens < length - 1:  # part way through its prompt
                assert table.num_tokens == self.chunk_end[seq_id]
        invariants.assert_holds(step.state)

    def teardown(self):
        engine = getattr(self, "engine", None)
        if engine is None:
            return
        for _ in range(2000):
            if not engine.has_unfinished():
                break
            engine.step(snapshot=False)
        assert not engine.has_unfinished(), "every request finishes"
        bm = engine.block_manager
        assert bm.device.num_free == bm.device.num_blocks, "every block comes back"


ChunkedScheduler.TestCase.settings = settings(
    max_examples=max(25, settings().max_examples // 4), stateful_step_count=30, deadline=None
)
TestChunkedScheduler = ChunkedScheduler.TestCase
