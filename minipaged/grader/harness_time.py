"""The grading child's own time: the CPU its harness spends on a request outside the student's
code (reading and decoding the request, encoding the answer, looking for threads left running,
writing the answer), which the grader credits to the criterion's clock as it credits its own
work (``minipaged.grader.criterion_clock``): on a machine twice as slow that work takes twice
as long, and it is never the student's.

It is CPU time (``time.thread_time``), not wall-clock time: the time the child's thread waited
for a CPU is already credited by the clock from ``/proc``, and counting it here as well would
credit it twice. The child's word is not trusted: the student's code runs in the same process
and could change what it says, so the grader credits no more of it than the worker's main
thread has run in the criterion (``CriterionClock.credit_harness``), and only once the request
is answered, so code that never returns is still stopped at its seconds.

Code of the student's also runs where no call of theirs is: a ``__del__``, a
``weakref.finalize`` or a weak reference's callback runs when its object goes, which may be
inside the harness's own work. So the cycle collector runs only inside ``theirs`` (it is off
in the harness's work: a finalizer it would run there waits for the next call of theirs), and
the harness lets go of the student's objects (``Harness.reset``, an exception they raised)
inside ``theirs``: a finalizer's time is the student's, never the grader's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from gc import collect, disable, enable  # bound now, as thread_time is
from time import thread_time  # bound now, before any student code can replace time's


class HarnessTime:
    """The harness's CPU seconds on this thread since it was made, less the student's."""

    def __init__(self) -> None:
        self._since = thread_time()
        self._theirs = 0.0
        disable()  # the harness's work from here: no student finalizer runs in it

    @contextlib.contextmanager
    def theirs(self, collecting: bool = False) -> Iterator[None]:
        """Around a call into the student's code: its CPU time is the student's, and so is the
        cycle collector's, which runs their finalizers (on here, and only here). With
        ``collecting``, around letting go of their objects: the cycles among them are
        collected before it ends, so their finalizers run here too."""
        start = thread_time()
        enable()
        try:
            yield
            if collecting:
                collect()
        finally:
            disable()  # whatever their code turned on or off
            self._theirs += thread_time() - start

    def own(self) -> float:
        """The harness's own CPU seconds so far (never negative)."""
        return max(thread_time() - self._since - self._theirs, 0.0)
