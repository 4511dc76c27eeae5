"""``cpu_clock``: a one-thread row's calls are timed by the thread's CPU time, which counts work
and leaves out time off the core; rows on more threads, and GPU rows, by the wall clock."""

from __future__ import annotations

import time

import pytest
import torch

from minipaged.study.bench import Options, cpu_clock, kernels, rounds


def spin(seconds: float) -> None:
    """Keep this thread's core busy for ``seconds`` of its own CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_the_thread_clock_counts_work_and_not_sleep():
    assert cpu_clock.thread_seconds(lambda: spin(0.030)) >= 0.030
    assert cpu_clock.thread_seconds(lambda: time.sleep(0.030)) < 0.005
    assert cpu_clock.wall_seconds(lambda: time.sleep(0.030)) >= 0.030


@pytest.mark.parametrize(
    ("device", "threads", "clock"),
    [
        ("cpu", 1, cpu_clock.thread_seconds),
        ("cpu", 2, cpu_clock.wall_seconds),
        ("cuda", 1, rounds.synchronized_wall_seconds),
        ("cuda", 2, rounds.synchronized_wall_seconds),
    ],
)
def test_each_row_is_timed_by_its_devices_and_thread_counts_clock(device, threads, clock):
    assert rounds.device_clock(device, threads) is clock


@pytest.mark.parametrize(("threads", "sleep_shows"), [(1, False), (2, True)])
def test_a_row_times_its_calls_by_the_clock_of_its_thread_count(monkeypatch, threads, sleep_shows):
    """A path that sleeps 30 ms on top of its work: on one thread the sleep is not the call's
    (time off the core), on two the wall clock sees it."""
    kernel = kernels.attention.paged_attention_decode

    def sleepy(*args, **kwargs):
        time.sleep(0.030)
        return kernel(*args, **kwargs)

    previous = torch.get_num_threads()
    row = kernels.measure(1, 64, 16, Options(quick=True), 3, threads, {"sleepy": sleepy})
    assert torch.get_num_threads() == previous
    assert (row["sleepy_ms"] >= 30) is sleep_shows
