"""Speculative steps as two frames, so the branches can be seen before they are pruned.

The engine forks a tree's branches, verifies them and prunes them within one step, so the
step's end state shows only the kept branch. The step's output also keeps the moment the
branches existed (``StepOutput.drafted``); the timeline shows such a step twice: first that
moment (the drafter's tree as forked tables sharing the prefix's blocks, the proposals and
their copy-on-write copies), then the step's end (the verify pass, the accepted tokens, the
pruning), each with the events that happened up to it.
"""

from __future__ import annotations

from dataclasses import replace

from minipaged.outputs import StepOutput


def frames(step: StepOutput, number: int) -> list[StepOutput]:
    """The frames the timeline shows for one engine ``step``, numbered from ``number`` (frames,
    not engine steps, are what the timeline counts): the step itself, or its drafted moment and
    then the rest of it."""
    moment = step.drafted
    if moment is None:
        return [step if step.step == number else replace(step, step=number)]
    rest = step.events[len(moment.events) :]
    return [replace(moment, step=number), replace(step, step=number + 1, events=rest, drafted=None)]
