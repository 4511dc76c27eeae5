"""Native code a student's code reaches while it is graded: C functions called through
``ctypes`` or from code Numba compiles, and shared libraries loaded. Python's C API compiles,
loads and runs code past the audit events ``minipaged.grader.runtime_code`` judges
(``PyCode_New*``, ``PyFunction_New``, ``PyEval_EvalCode`` raise none), and a library of the
student's own runs machine code no check can read. In a grading child:

- a look-up by name through ``ctypes`` (``ctypes.pythonapi.PyRun_String``,
  ``_ctypes.dlsym(handle, name)``, whatever ``ctypes`` was imported as: the audit events
  ``SYMBOLS``) of the C library's ways to start a program (``EXEC_SYMBOLS``) or of the C
  API's ways to compile, load or run code (``RUNS_UNSEEN``) is refused (``native_judge``);
- LLVM, which resolves the functions Numba's compiled code declares (an ``@intrinsic``) and
  answers ``llvmlite.binding.address_of_symbol``, finds for each of those (``API_FUNCTIONS``)
  a stand-in that refuses it and returns None (``seal_symbols``);
- a shared library or compiled module loaded (``ctypes.CDLL``, ``_imp.create_dynamic``) from
  anywhere but the Python installation, its packages and the system's library folders is
  refused (``native_judge``); one the student brought in their folder is refused with the
  folder, before any of their code runs (``minipaged.grader.native_files``).

A tripwire for the easy ways, not a wall: a ``ctypes`` call raises no audit event, so a C
function called at an address found with no look-up by name (read from raw memory with
numpy's ``__array_interface__``, or computed from another function's) runs unheard, as does
code that puts the real address back in LLVM's table (``minipaged.grader.delegation`` says
what such code can reach).
"""

from __future__ import annotations

from minipaged.grader.provenance import private

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
    "_PyRun_",
    "_PyAST_Compile",
    "_PyCode_New",
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
    "your code may not call Python's {} from native code (ctypes, Numba, llvmlite) while it is "
    "graded: it compiles or runs code where the grader does not see it; write your functions as "
    "source in your files"
)
"""The refusal of a look-up, call or declaration of ``RUNS_UNSEEN``'s, naming the function."""

API_FUNCTIONS = (
    *("PyCode_New", "PyCode_NewEmpty", "PyCode_NewWithPosOnlyArgs", "_PyCode_New"),
    *("PyUnstable_Code_New", "PyUnstable_Code_NewWithPosOnlyArgs"),
    *("PyFunction_New", "PyFunction_NewWithQualName", "PyFrame_New"),
    *("PyEval_EvalCode", "PyEval_EvalCodeEx", "PyEval_EvalFrame", "PyEval_EvalFrameEx"),
    "_PyEval_EvalFrameDefault",
    *("PyMarshal_ReadObjectFromString", "PyMarshal_ReadObjectFromFile"),
    "PyMarshal_ReadLastObjectFromFile",
    *("PyImport_ExecCodeModule", "PyImport_ExecCodeModuleEx", "PyImport_ExecCodeModuleObject"),
    "PyImport_ExecCodeModuleWithPathnames",
    *("Py_CompileString", "Py_CompileStringExFlags", "Py_CompileStringObject", "_PyAST_Compile"),
    *("PyRun_String", "PyRun_StringFlags", "PyRun_SimpleString", "PyRun_SimpleStringFlags"),
    *("PyRun_File", "PyRun_FileEx", "PyRun_FileExFlags", "PyRun_FileFlags"),
    *("PyRun_SimpleFile", "PyRun_SimpleFileEx", "PyRun_SimpleFileExFlags"),
    *("PyRun_AnyFile", "PyRun_AnyFileEx", "PyRun_AnyFileExFlags", "PyRun_AnyFileFlags"),
    *("PyRun_InteractiveOne", "PyRun_InteractiveOneFlags", "PyRun_InteractiveOneObject"),
    *("PyRun_InteractiveLoop", "PyRun_InteractiveLoopFlags", "_PyRun_SimpleFileObject"),
    *("_PyRun_AnyFileObject", "_PyRun_InteractiveLoopObject"),
    *("Py_RunMain", "Py_Main", "Py_BytesMain"),
)
"""Every function of ``RUNS_UNSEEN``'s that CPython 3.11 to 3.13 export: the names LLVM
resolves to a refusal in a grading child (``seal_symbols``)."""

LOADED, EXTENSION = "ctypes.dlopen", "import"
"""Audit events of a shared library loaded by ``ctypes`` (``args[0]``: its path or name), and
of a module imported (``args[1]``: the file, for a compiled module ``_imp.create_dynamic``
loads; None for an ``import`` statement's)."""

NATIVE, ANYONES = (*SYMBOLS, LOADED, EXTENSION), (LOADED, EXTENSION)
"""The audit events ``native_judge`` judges, and those it judges whoever raises them."""

SYSTEM_LIBRARIES = ("/usr/", "/lib/", "/lib32/", "/lib64/", "/opt/")
"""Where the system keeps shared libraries (a GPU's driver, the CUDA toolkit), beside the
Python installation and its packages, from which a grading child may load one."""

NATIVE_LIBRARY = (
    "your code may not load the native library {} while it is graded: it is no installed "
    "library (one your code brought or wrote), and its machine code would run where no check "
    "can read it; write what it does in Python, in your files"
)


def native_judge(installed: tuple[str, ...], theirs: tuple[str, ...], refused, elsewhere):
    """``judged(event, args, student)``: refuse, for one of ``NATIVE``'s events, a shared
    library or compiled module loaded (``ctypes.CDLL``, ``_imp.create_dynamic``) from anywhere
    but ``installed`` (folders) or ``SYSTEM_LIBRARIES``, or from ``theirs`` (the student's
    folder, the child's temporary one) wherever those are, whoever loads it; and, where the
    student's frame ``student`` asks, a look-up by name of ``EXEC_SYMBOLS``' or
    ``RUNS_UNSEEN``'s. ``refused(message)``: the refusal to raise; ``elsewhere``:
    ``runtime_code.ELSEWHERE``."""
    loadable, exec_symbols, prefixes = installed + SYSTEM_LIBRARIES, EXEC_SYMBOLS, RUNS_UNSEEN
    unseen, library, loaded, extension = UNSEEN, NATIVE_LIBRARY, LOADED, EXTENSION

    def judged(event: str, args: tuple, student) -> None:
        if event in (loaded, extension):
            path = args[0] if event == loaded else args[1]
            if path is None:  # the program itself; an import statement
                return
            if type(path) is bytes:
                path = path.decode(errors="replace")
            if type(path) is not str:  # a path-like object of theirs may answer twice
                if student is None:
                    return
                raise refused(library.format("given as an object: give its path as a str"))
            if "/" in path and (
                not path.startswith(loadable) or path.startswith(theirs) or "/.." in path
            ):
                raise refused(library.format(path[-200:]))
        elif student is not None:  # a look-up by name
            if args[1] in exec_symbols:
                raise refused(elsewhere.format(f"calls the C library's {args[1]}"))
            if type(args[1]) is str and args[1].startswith(prefixes):
                raise refused(unseen.format(args[1]))

    return private(judged)


def seal_symbols(refused) -> list:
    """Make LLVM resolve each of ``API_FUNCTIONS`` to a stand-in that refuses it
    (``refused(message)``: ``notices.refusal_not_raised``'s, which fails the call whatever it
    returns) and returns None, where llvmlite is installed: native code Numba compiles (an
    ``@intrinsic`` declaring ``PyCode_NewEmpty``) and ``llvmlite.binding.address_of_symbol``
    then find the stand-in, not Python's function. LLVM looks up the symbols a program adds
    before those of the process, so this holds until code that knows the real address (read
    from raw memory) adds it back. Returns the stand-ins, which must stay alive as long as the
    process."""
    try:
        import ctypes

        import llvmlite.binding as llvm
    except ImportError:  # no LLVM here: nothing compiles native code to call them
        return []
    unseen, kept = UNSEEN, []
    for name in API_FUNCTIONS:

        def stand_in(name=name):
            refused(unseen.format(name))  # the call fails; the native code gets None
            return None

        kept.append(ctypes.PYFUNCTYPE(ctypes.py_object)(private(stand_in)))
        llvm.add_symbol(name, ctypes.cast(kept[-1], ctypes.c_void_p).value)
    return kept
