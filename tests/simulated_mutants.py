"""Grade kernel mutants in Numba's CUDA simulator, all in this one process:
``python tests/simulated_mutants.py NUMBER:FOLDER[:FIRST] ...`` prints, as JSON, each folder's
failed criteria with their messages, up to the first failure (``run_criteria``'s
``first_failure``), trying the criterion named ``FIRST``, where given, before the others, in
their order.

A grading child would start a simulating interpreter for every mutant (torch and Numba
imported again each time, seconds under load) and send every kernel argument over its pipe;
here one interpreter grades them all. What a mutant is graded against is the same: the
exercise's criteria, in the simulator, on shared memory that starts as garbage, as the
grading child sets it (``minipaged.grader.child``). The child's stubs and confinement are
tested apart (``test_grader_integrity.py``); here only the checks' power is at stake.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(arguments: list[str]) -> None:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        raise SystemExit("run with NUMBA_ENABLE_CUDASIM=1: Numba chooses when first imported")
    import cuda_kernels.launch  # noqa: F401  (importing it installs the simulator's repair)
    from cuda_kernels import simulator
    from minipaged.grader.exercises import EXERCISES
    from minipaged.grader.grading import run_criteria
    from minipaged.grader.report import FAIL
    from minipaged.grader.student import load_folder

    simulator.shared_memory_garbage = True
    failed = {}
    for argument in arguments:
        number, _, rest = argument.partition(":")
        folder, _, first = rest.partition(":")
        ex = EXERCISES[int(number)]
        student = load_folder(Path(folder), tuple(ex.solution))
        simulated = [c for c in ex.criteria() if c.runs_in == "simulator"]
        simulated.sort(key=lambda criterion: criterion.name != first)  # stable: the rest in order
        results = run_criteria(simulated, student, first_failure=True)
        failed[argument] = {r.name: r.message for r in results if r.outcome == FAIL}
    json.dump(failed, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
