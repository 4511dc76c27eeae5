"""Nothing waits forever, nothing is lost: admission as OK / LATER / NEVER, aborts (by the
caller, by an interrupted ``generate``, by a request that can never come back), a scheduler
that refuses to spin, and the bounds every entry point checks."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from minipaged import invariants
from minipaged.block_manager import AllocStatus, BlockManager
from minipaged.block_state import BlockState
from minipaged.checkpoint import load_model
from minipaged.engine import LLMEngine, RequestRejected
from minipaged.llm import LLM
from minipaged.sampling import SamplingParams
from minipaged.scheduler import Scheduler, SchedulerStuck
from minipaged.sequence import Sequence, SequenceGroup

GREEDY = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def model(hf_llama):
    return load_model(hf_llama[1])


@pytest.fixture(scope="module")
def tiny():
    return LLM("tiny", block_size=4, num_gpu_blocks=10, num_cpu_blocks=0, watermark=0.1)


def held(state: BlockState) -> BlockState:
    """The state with its free lists as sets: which blocks are free, not in which order."""
    return replace(state, device_free=sorted(state.device_free), host_free=sorted(state.host_free))


def group_of(request_id: str, *token_lists: list[int], arrival: int = 0) -> SequenceGroup:
    seqs = [Sequence(i, list(tokens), len(tokens)) for i, tokens in enumerate(token_lists)]
    return SequenceGroup(request_id, arrival, GREEDY, seqs, torch.Generator())


# -- the block manager's answer ----------------------------------------------------------------


def test_can_allocate_says_never_when_an_empty_pool_minus_the_watermark_is_too_small():
    manager = BlockManager(10, block_size=4, watermark=0.1)  # W = 1 block
    assert manager.can_allocate(36) is AllocStatus.OK  # 9 blocks: an empty pool keeps W
    assert manager.can_allocate(37) is AllocStatus.NEVER  # 10 blocks: never, W included
    assert manager.can_allocate(20, 20) is AllocStatus.NEVER  # 5 + 5 blocks, together


def test_can_allocate_says_later_when_only_running_sequences_stand_in_the_way():
    manager = BlockManager(10, block_size=4, watermark=0.1)
    manager.allocate(0, 20)  # 5 blocks
    assert manager.can_allocate(16) is AllocStatus.OK  # 4 more, 1 left as the watermark
    assert manager.can_allocate(17) is AllocStatus.LATER
    manager.free(0)
    assert manager.can_allocate(17) is AllocStatus.OK


def test_only_ok_is_true_so_yes_no_callers_keep_working():
    assert AllocStatus.OK and not AllocStatus.LATER and not AllocStatus.NEVER


def test_can_swap_in_says_never_for_a_group_an_empty_device_pool_cannot_take():
    manager = BlockManager(4, 4, block_size=2, watermark=0.0)
    manager.allocate(0, 8)  # 4 full blocks: the next token needs a fifth
    manager.swap_out([0])
    assert manager.can_swap_in([0]) is AllocStatus.OK
    assert manager.can_swap_in([0], extra_blocks=manager.next_token_blocks(0)) is AllocStatus.NEVER


# -- the engine refuses up front ------------------------------------------------------------------


def test_the_issue_example_is_refused_up_front_while_the_other_request_runs(tiny):
    long_prompt = {"prompt_token_ids": list(range(5, 42))}  # 37 tokens: 10 blocks of B=4
    refused, served = tiny.generate([long_prompt, "Emma"], SamplingParams(max_tokens=1))
    assert refused.outputs == [] and "watermark" in refused.error
    assert "num_gpu_blocks" in refused.error
    assert served.error is None and len(served.outputs[0].token_ids) == 1
    with pytest.raises(RequestRejected, match="only 9"):
        tiny.engine.add_request(long_prompt, SamplingParams(max_tokens=1))
    (refusal,) = [e for e in tiny.engine.block_manager.pop_events() if e.kind == "refuse"]
    assert (refusal.num_blocks, refusal.limit) == (10, 9) and "refused" in refusal.narrate()


@pytest.mark.parametrize(
    "params",
    [SamplingParams(max_tokens=4, n=5), SamplingParams(max_tokens=4, use_beam_search=True,
                                                       beam_width=5, temperature=0)],
    ids=["n>pool", "beams>pool"],
)  # fmt: skip
def test_more_sequences_than_the_pool_can_hold_are_refused(model, params):
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=4)
    with pytest.raises(RequestRejected, match="5 sequence"):
        engine.add_request([3, 4, 5], params)
    assert not engine.has_unfinished()


# -- the scheduler: NEVER after preemption, and no spinning --------------------------------------


def test_a_waiting_group_that_grew_too_large_is_aborted_with_its_reason_and_others_run():
    manager = BlockManager(4, block_size=2, watermark=0.0)
    scheduler = Scheduler(manager)
    grown = group_of("grown", list(range(10)))  # 5 blocks: more than the whole pool
    small = group_of("small", [1, 2, 3], arrival=1)
    scheduler.add(grown)
    scheduler.add(small)
    plan = scheduler.schedule()
    ((aborted, reason),) = plan.aborted
    assert aborted is grown and "never fit" in reason and "num_gpu_blocks" in reason
    assert grown.seqs == [] and grown.finished[0].finish_reason == "abort"
    assert [item.group for item in plan.scheduled] == [small]
    assert [e.kind for e in manager.pop_events()][:1] == ["abort"]


def test_a_swapped_group_that_can_never_come_back_is_aborted_and_its_host_blocks_freed():
    manager = BlockManager(4, 4, block_size=2, watermark=0.0)
    scheduler = Scheduler(manager)
    group = group_of("big", list(range(8)))
    manager.allocate(0, 8)
    manager.swap_out([0])
    scheduler.swapped.append(group)
    plan = scheduler.schedule()
    assert [g for g, _ in plan.aborted] == [group]
    assert manager.host.num_free == 4 and manager.tables == {}
    assert not scheduler.has_unfinished()


def test_a_step_that_can_change_nothing_raises_instead_of_spinning():
    class NeverRoom(BlockManager):  # a manager whose admission always answers LATER
        def can_allocate(self, *prompts):
            return AllocStatus.LATER

    scheduler = Scheduler(NeverRoom(8, block_size=2))
    scheduler.add(group_of("stuck", [1, 2, 3]))
    with pytest.raises(SchedulerStuck, match=r"no progress.*waiting \['stuck'\]"):
        scheduler.schedule()


# -- aborts -------------------------------------------------------------------------------------


def test_abort_request_frees_every_block_records_an_event_and_forgets_the_request(model):
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=16)
    before = engine.block_manager.snapshot()
    request = engine.add_request([3, 4, 5, 6, 7], SamplingParams(max_tokens=8, n=3, seed=1))
    engine.step()
    engine.step()
    assert engine.block_manager.device.num_free < 16
    engine.abort_request(request)
    assert held(engine.block_manager.snapshot()) == held(before)
    assert request not in engine.requests and not engine.has_unfinished()
    (abort,) = [e for e in engine.step().events if e.kind == "abort"]
    assert abort.request_id == request and "aborted by its caller" in abort.narrate()
    with pytest.raises(KeyError, match="no unfinished request"):
        engine.abort_request(request)


def test_finished_requests_do_not_pile_up_in_the_engine(model):
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=16)
    for _ in range(3):
        engine.add_request([3, 4, 5], GREEDY)
    while engine.has_unfinished():
        engine.step()
    assert engine.requests == {}


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_generate_leaves_the_pool_as_it_found_it(tiny, interrupt):
    llm = LLM("tiny", block_size=4, num_gpu_blocks=64, num_cpu_blocks=8)
    before = llm.engine.block_manager.snapshot()
    steps = 0

    def stop_after_two_steps(step):
        nonlocal steps
        steps += 1
        if steps == 2:
            raise interrupt("stop")

    params = SamplingParams(max_tokens=20, n=2, seed=0, ignore_eos=True)
    with pytest.raises(interrupt):
        llm.generate(["Emma", "Mr. Darcy", "It is"], params, on_step=stop_after_two_steps)
    assert held(llm.engine.block_manager.snapshot()) == held(before)
    assert not llm.engine.has_unfinished() and llm.engine.requests == {}
    invariants.assert_holds(llm.engine.block_manager)
    counted = []
    llm.generate(["Emma"], SamplingParams(max_tokens=5, ignore_eos=True), on_step=counted.append)
    assert len(counted) == 5, "the next call runs only its own request"


# -- bounds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_max_num_seqs_must_be_a_positive_integer(value):
    with pytest.raises(
        ValueError, match=f"max_num_seqs must be an integer from 1 to 2,147,483,647, got {value}"
    ):
        Scheduler(BlockManager(4), max_num_seqs=value)


@pytest.mark.parametrize("field", ["n", "beam_width", "max_tokens"])
def test_zero_sequences_or_tokens_are_refused(field):
    with pytest.raises(ValueError, match=f"{field} must be an integer from 1 to .*, got 0"):
        SamplingParams(**{field: 0})


def test_an_empty_text_prompt_and_empty_token_ids_are_refused_alike(tiny):
    messages = []
    for prompt in ["", {"prompt_token_ids": []}]:
        with pytest.raises(ValueError, match="the prompt is empty") as error:
            tiny.generate(prompt)
        messages.append(str(error.value))
    assert messages[0] == messages[1]


def test_dtype_may_be_named_and_a_bad_name_is_refused_with_the_choices():
    llm = LLM("tiny", dtype="float16", num_gpu_blocks=16)
    assert next(llm.model.parameters()).dtype == torch.float16
    (output,) = llm.generate("Emma", SamplingParams(max_tokens=3, temperature=0))
    assert len(output.outputs[0].token_ids) == 3
    with pytest.raises(ValueError, match=r"dtype must be .*'float16'.*got 'fp8'"):
        LLM("tiny", dtype="fp8")
