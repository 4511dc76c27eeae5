"""The watermark keeps $W = \\lfloor \\text{watermark} \\cdot \\mathcal{P}_{\\max} \\rfloor$
blocks, vLLM's rule, everywhere it is read; the default share keeps none of a small pool, as the
docs say; any other positive share that keeps none is refused before anything is built, by
every entry a user reaches (``BlockManager``, ``EngineConfig``, ``LLM`` with its pool sized
for it, the command line), naming the share, the pool and the smallest share that keeps one.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from minipaged import LLM, cli
from minipaged.block_manager import BlockManager
from minipaged.config import EngineConfig
from minipaged.watermark import DEFAULT_WATERMARK, watermark_blocks

POOLS = (1, 2, 3, 7, 10, 49, 50, 99, 100, 101, 333, 1000, 4099, 8192)
SHARES = (0.001, 0.005, 0.01, 0.02, 0.1, 0.25, 1 / 3, 0.5, 0.9, 0.999)


def smallest_named(message: str) -> float:
    return float(message.split("at least ")[1].split(" to keep one")[0])


@pytest.mark.parametrize(("share", "pool"), itertools.product(SHARES, POOLS))
def test_the_watermark_is_the_share_rounded_down_or_refused_when_it_keeps_none(share, pool):
    kept = int(share * pool)
    if kept or share == DEFAULT_WATERMARK:
        assert BlockManager(pool, watermark=share).watermark_blocks == kept
        assert EngineConfig(num_gpu_blocks=pool, watermark=share).watermark == share
        return
    for build in (
        lambda: BlockManager(pool, watermark=share),
        lambda: EngineConfig(num_gpu_blocks=pool, watermark=share),
    ):
        with pytest.raises(ValueError, match=rf"watermark={share!r} keeps .* = 0 of the") as no:
            build()
        smallest = smallest_named(str(no.value))
        assert watermark_blocks(smallest, pool) == 1 and int(smallest * pool) == 1
        assert "--watermark 0" in str(no.value) and "num_gpu_blocks" in str(no.value)


def test_the_smallest_share_named_keeps_exactly_one_block_of_every_pool():
    """1/P can round to just under one block (1/49 * 49 is 0.9999...): the share named is the
    first float that keeps one."""
    for pool in range(1, 5000):
        try:
            watermark_blocks(0.999 / pool, pool)
        except ValueError as refusal:
            assert int(smallest_named(str(refusal)) * pool) == 1, pool
        else:
            raise AssertionError(f"0.999/{pool} kept a block of {pool}")


def test_the_default_keeps_no_block_under_100_as_in_vllm():
    assert BlockManager(99).watermark_blocks == 0 and BlockManager(100).watermark_blocks == 1
    assert EngineConfig().watermark == DEFAULT_WATERMARK == 0.01


def test_a_pool_sized_for_the_share_is_refused_before_the_weights_load(monkeypatch):
    """``LLM`` sizes a pool left None from memory (thousands of blocks) and checks the share
    against it before loading anything."""
    from minipaged import llm as llm_module

    def no_loading(*args, **kwargs):
        raise AssertionError("the weights were loaded before the watermark was checked")

    monkeypatch.setattr(llm_module, "load_model", no_loading)
    with pytest.raises(ValueError, match=r"watermark=1e-06 keeps int\(1e-06 \* [\d,]+\) = 0"):
        LLM("tiny", watermark=1e-6)


def test_the_command_line_says_it_in_one_line_and_exits_2(capsys):
    flags = ["--prompt", "Hi", "--num-gpu-blocks", "50", "--watermark", "0.005"]
    assert cli.main(["generate", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--watermark 0.005 keeps int(0.005 * 50) = 0" in err[0], err
    assert "at least 0.02 to keep one" in err[0] and "Traceback" not in err[0]


def test_the_docs_and_the_flag_say_the_rule():
    help_text = EngineConfig.__dataclass_fields__["watermark"].metadata["setting"].help
    assert "rounded down" in help_text and "under 100" in help_text
    page = Path(__file__).parents[1] / "docs" / "explanation" / "preemption.md"
    assert f"keeps none of a pool of fewer than $1 / {DEFAULT_WATERMARK}$" in page.read_text()
