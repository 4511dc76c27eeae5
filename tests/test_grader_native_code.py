"""Native code in a grading child (``minipaged.grader.native_files``,
``minipaged.grader.native_calls``): a folder holding a compiled module or shared library, under
any name, is refused before any student code runs; a library loaded from no installed place,
and Python's C API looked up by name, are refused as they happen, and LLVM finds a refusing
stand-in for each of Python's C API functions that make code. The hand-ins that use them:
``hostile_corpus.NATIVE_IN_THE_FOLDER``, ``WRITTEN_NATIVE``, ``NATIVE_CODE``."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from minipaged.grader.native_calls import EXTENSION, LOADED, SYMBOLS, native_judge
from minipaged.grader.native_files import native_code

NATIVE = Path(importlib.util.find_spec("_bisect").origin).read_bytes()
"""A compiled module of Python's own: native code, whatever it does."""


@pytest.mark.parametrize(
    "name", [f"fast{importlib.machinery.EXTENSION_SUFFIXES[0]}", "lib/fast.so", "x.pyd"]
)
def test_a_folder_with_a_compiled_module_is_refused_naming_it(tmp_path, name):
    (tmp_path / "memory.py").write_text("def f():\n    return 1\n")
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_bytes(b"not even a library")  # its name is enough
    said = native_code(tmp_path)
    assert name in said and "loads no compiled code of yours" in said


def test_native_code_under_another_name_is_found_by_its_first_bytes(tmp_path):
    (tmp_path / "notes.bin").write_bytes(NATIVE)
    assert "notes.bin is an ELF shared library" in native_code(tmp_path)
    windows = bytearray(128)
    windows[:2], windows[60:64], windows[64:68] = b"MZ", (64).to_bytes(4, "little"), b"PE\0\0"
    (tmp_path / "notes.bin").write_bytes(bytes(windows))
    assert "a Windows library or program" in native_code(tmp_path)


def test_a_folder_of_source_and_notes_is_not_refused(tmp_path):
    (tmp_path / "memory.py").write_text("def f():\n    return 1\n")
    (tmp_path / "notes.txt").write_text("MZ is a postcode; ELF a creature\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "memory.cpython-311.pyc").write_bytes(b"\xa7\r\r\n" + bytes(12))
    assert native_code(tmp_path) == ""


def _judged(tmp_path):
    folder, temp = tmp_path / "student", tmp_path / "temp"
    return (
        native_judge(("/srv/python/",), (f"{folder}/", f"{temp}/"), ValueError, "your code {}"),
        folder,
        temp,
    )


def test_a_library_is_loaded_only_from_an_installed_place(tmp_path):
    judged, folder, temp = _judged(tmp_path)
    for path in ("/srv/python/lib/libllvmlite.so", "/usr/lib/libcuda.so.1", "libc.so.6", None):
        judged(LOADED, (path, 0), None)  # the installation's, the system's, by name, itself
    refused = [
        f"{temp}/fast.so",
        f"{folder}/notes.bin",
        "./fast.so",
        "/usr/lib/../../tmp/fast.so",
        "/proc/self/fd/3",
        "/dev/shm/fast.so",
        b"/tmp/fast.so",
    ]
    for path in refused:
        with pytest.raises(ValueError, match="may not load the native library"):
            judged(LOADED, (path, 0), None)
    with pytest.raises(ValueError, match="give its path as a str"):
        judged(LOADED, (Path("/usr/lib/libm.so.6"), 0), object())


def test_a_compiled_module_is_imported_only_from_an_installed_place(tmp_path):
    judged, _, temp = _judged(tmp_path)
    judged(EXTENSION, ("json", None), None)  # an import statement: no file
    judged(EXTENSION, ("_bisect", "/srv/python/lib/_bisect.so"), None)
    with pytest.raises(ValueError, match=r"may not load the native library .*fast\.so"):
        judged(EXTENSION, ("_bisect", f"{temp}/fast.so"), None)  # _imp.create_dynamic's


def test_pythons_c_api_looked_up_by_name_is_refused(tmp_path):
    judged, _, _ = _judged(tmp_path)
    with pytest.raises(ValueError, match="PyEval_EvalCode"):
        judged(SYMBOLS[0], (None, "PyEval_EvalCode"), object())
    with pytest.raises(ValueError, match="calls the C library's system"):
        judged(SYMBOLS[1], (None, "system"), object())
    judged(SYMBOLS[0], (None, "PyEval_EvalCode"), None)  # a look-up no student frame asked
    judged(SYMBOLS[0], (None, "Py_GetVersion"), object())


SEALED = """
import sys
from minipaged.grader.native_calls import seal_symbols
told = []
kept = seal_symbols(lambda message: told.append(message))
import llvmlite.binding as llvm
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from llvmlite import ir

@intrinsic
def _empty(context, name):  # Python's PyCode_NewEmpty, declared by name: LLVM resolves it
    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.IntType(64), [i8p, i8p, ir.IntType(32)]),
            "PyCode_NewEmpty")
        name = builder.inttoptr(args[0], i8p)
        return builder.call(fn, [name, name, ir.Constant(ir.IntType(32), 1)])
    return types.int64(types.int64), codegen

made = njit(lambda name: _empty(name))(id(b"x"))
print(made == id(None), llvm.address_of_symbol("PyFunction_New") == made or "stand-in", told)
"""


def test_llvm_finds_a_refusing_stand_in_for_pythons_c_api(tmp_path):
    """Sealed as a grading child's runtime hook seals it (``native_calls.seal_symbols``), a
    Numba ``@intrinsic`` that declares ``PyCode_NewEmpty`` calls the stand-in: it gets None,
    and the refusal is told."""
    pytest.importorskip("numba")
    ran = subprocess.run(
        [sys.executable, "-c", SEALED], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.startswith("True"), ran.stdout
    assert "Python's PyCode_NewEmpty from native code" in ran.stdout, ran.stdout
