"""The functions a student's code may not look up by name in a shared library (``ctypes``)
while it is graded: those that do, past the audit events ``minipaged.grader.runtime_code``
judges, what those events would have shown it.

``ctypes`` reaches a C function by name (``ctypes.pythonapi.PyRun_String``,
``ctypes.CDLL(None).execve``, ``_ctypes.dlsym(handle, name)``), each look-up an audit event
(``SYMBOLS``) raised whatever name ``ctypes`` was imported under. Two kinds are refused: the C
library's ways to start a program (``EXEC_SYMBOLS``), and Python's C API ways to compile, load
or run code (``RUNS_UNSEEN``). This is a tripwire for
the easy ways, not a wall: code that writes raw memory (numpy's ``__array_interface__`` on an
address) or calls a function by its address reaches as much without a look-up
(``minipaged.grader.delegation`` says what it finds).
"""

from __future__ import annotations

SYMBOLS = ("ctypes.dlsym", "ctypes.dlsym/handle")
"""Audit events of a function looked up by name in a shared library (``args[1]``: the name)."""

EXEC_SYMBOLS = frozenset(
    {"execve", "execv", "execvp", "execvpe", "execl", "execlp", "execle", "fexecve"}
    | {"execveat", "system", "posix_spawn", "posix_spawnp", "popen", "syscall"}
)
"""The C library's ways to start a program (or make any system call) that ``ctypes`` reaches
past the audit events of ``runtime_code.STARTS``."""

RUNS_UNSEEN = (
    "PyRun_",
    "Py_CompileString",
    "PyEval_EvalCode",
    "PyEval_EvalFrame",
    "_PyEval_EvalFrame",
    "PyFunction_New",
    "PyMarshal_ReadObject",
    "PyMarshal_ReadLastObject",
    "PyImport_ExecCodeModule",
    "PyCode_New",
    "PyUnstable_Code_New",
    "PyFrame_New",
    "Py_RunMain",
    "Py_Main",
    "Py_BytesMain",
)
"""The starts of the names of Python's C API that compile, load or run code, most of which
raise none of the audit events their Python counterparts raise (``exec``,
``function.__new__``, ``marshal.loads``): called through ``ctypes``, ``PyEval_EvalCode`` and
``PyFunction_New`` each ran a copy of the library's code unheard, from its bytes
(``hostile_corpus.C_API``)."""

UNSEEN = (
    "your code may not call Python's {} (through ctypes) while it is graded: it compiles or "
    "runs code where the grader does not see it; write your functions as source in your files"
)
"""The refusal of a look-up of ``RUNS_UNSEEN``'s, naming the function."""
