"""What a student's code raised, raised again in the grader
(``minipaged.grader.student_exceptions``): never as an exception Python gives a meaning besides
an error (the end of a loop, of a generator, of the program), which would act on the checks
instead of failing them."""

from __future__ import annotations

import builtins

import pytest

from minipaged.grader.child_errors import StudentBaseException, StudentExit, StudentStopIteration
from minipaged.grader.student_exceptions import StudentExceptions

PYTHONS = sorted(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)
"""Every exception class of Python's built-ins."""

MEANING = (StopIteration, StopAsyncIteration, GeneratorExit, KeyboardInterrupt, SystemExit)
"""Python's exceptions that a loop, a generator or the interpreter acts on."""


def _raised(cls: dict) -> BaseException:
    exceptions = StudentExceptions(lambda handle, classes: None)
    return exceptions.exception({"cls": cls, "args": ["done"], "text": "done", "where": ""})


@pytest.mark.parametrize("own", [False, True], ids=["python-s", "a-subclass-of-the-student-s"])
@pytest.mark.parametrize("name", PYTHONS)
def test_no_exception_of_the_student_s_acts_on_the_grader(name, own):
    python = {"N": f"builtins:{name}"}
    error = _raised({"X": 1, "q": "Theirs", "b": [python]} if own else python)
    assert not isinstance(error, MEANING), type(error).__mro__
    assert isinstance(error, Exception)
    if issubclass(getattr(builtins, name), StopIteration | StopAsyncIteration):
        assert isinstance(error, StudentStopIteration)
    elif not issubclass(getattr(builtins, name), Exception):
        assert isinstance(error, StudentBaseException | StudentExit)


@pytest.mark.parametrize("name", ["StopIteration", "StopAsyncIteration"])
def test_a_stop_iteration_of_the_student_s_ends_no_loop_of_the_checks(name):
    """Raised as itself, it ended ``map`` here at the student's second value, as if there were
    no third to check: the check saw two answers and no error."""
    error = _raised({"N": f"builtins:{name}"})

    def theirs(value: int) -> int:
        if value == 2:
            raise error
        return value

    with pytest.raises(StudentStopIteration):
        list(map(theirs, [1, 2, 3]))
    assert type(error).__name__ == name and str(error) == "done"
