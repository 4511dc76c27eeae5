from minipaged.block_manager import BlockManager
from minipaged.stats import slot_usage


def test_slot_usage_counts_a_shared_block_once_and_only_the_last_block_as_partly_empty():
    manager = BlockManager(num_gpu_blocks=8, block_size=4)
    manager.allocate(0, num_tokens=6)  # blocks: 4 + 2 tokens
    manager.fork(0, 1)  # shares both
    manager.allocate(2, num_tokens=1)
    filled, allocated = slot_usage(manager.snapshot())
    assert (filled, allocated) == (4 + 2 + 1, 3 * 4)


def test_slot_usage_ignores_sequences_swapped_to_the_host():
    manager = BlockManager(num_gpu_blocks=4, num_cpu_blocks=4, block_size=4)
    manager.allocate(0, num_tokens=3)
    manager.swap_out([0])
    assert slot_usage(manager.snapshot()) == (0, 0)
