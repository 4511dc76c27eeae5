"""``minipaged simulate`` with a KV cache too small for its workload: refused in one line that
names the flags that give the cache room, each a real flag of ``simulate``; a cache smaller
than the workload's largest request holds (a vAttention page larger than the budget maps none)
is refused before any allocator runs. Generated over the flags that size the cache."""

from __future__ import annotations

import re

import pytest

from minipaged import cli
from minipaged.study import simulator

UP_FRONT = [
    ["--page-kb", "1048576"],  # a 1 GiB page is larger than the budget: no page, no slot
    ["--page-kb", "65536", "--hbm-gb", "20"],
    ["--page-kb", "64", "--page-kb", "262144", "--hbm-gb", "30"],
    ["--hbm-gb", "16.1"],
    ["--weights-gb", "79.99"],
    ["--hbm-gb", "16.2", "--workload", "chat"],
    ["--hbm-gb", "16.1", "--kv-cache-dtype", "fp8_e4m3"],
    ["--n", "1024"],  # a request of 1,024 samples holds more than the whole cache
    ["--beam-width", "1024", "--hbm-gb", "17"],
]
AT_RUN_TIME = [  # the longest sequence fits, but static's L_max buffers or a request's beams do not
    ["--hbm-gb", "16.5"],
    ["--hbm-gb", "17", "--beam-width", "4"],
]


def simulate_flags() -> set[str]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and a.choices)
    return {flag for action in sub.choices["simulate"]._actions for flag in action.option_strings}


def refusal(capsys, flags: list[str]) -> str:
    assert cli.main(["simulate", "--requests", "20", *flags]) == 2
    printed = capsys.readouterr()
    assert printed.out == ""
    assert len(printed.err.strip().splitlines()) == 1, printed.err
    return printed.err


def check_names_real_flags(message: str, needed: str) -> None:
    named = set(re.findall(r"--[a-z][a-z0-9-]*", message))
    assert needed in named, message
    assert named <= simulate_flags(), f"{named - simulate_flags()} are no flags of simulate"


@pytest.mark.parametrize("flags", UP_FRONT, ids=" ".join)
def test_a_cache_smaller_than_the_longest_sequence_is_refused_before_any_run(
    capsys, monkeypatch, flags
):
    def no_run(*args, **kwargs):
        raise AssertionError("an allocator ran before the cache was refused")

    monkeypatch.setattr(simulator.Simulation, "run", no_run)
    message = refusal(capsys, flags)
    assert "so it could never finish" in message
    check_names_real_flags(message, "--page-kb" if "--page-kb" in flags else "--hbm-gb")


@pytest.mark.parametrize("flags", AT_RUN_TIME, ids=" ".join)
def test_a_request_no_empty_cache_can_take_names_the_flags_that_give_room(capsys, flags):
    message = refusal(capsys, flags)
    assert "give the cache more memory" in message
    check_names_real_flags(message, "--hbm-gb")
