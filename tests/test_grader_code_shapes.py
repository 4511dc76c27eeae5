"""The shape of a function's bytecode (``minipaged.grader.code_shapes``): a copy of a graded
library function rebuilt by hand keeps it, however it is disguised, and no honest answer of
``student_answers`` has it, so a grading child can refuse a code object built in that shape
(``made_code.hand_made_judge``) without refusing a student's own work."""

from __future__ import annotations

import dis
import importlib.util
import inspect
import sys
from itertools import pairwise
from pathlib import Path

import pytest
from hostile_corpus import ANSWERS, disguised

from minipaged.grader.code_shapes import shape, shaper
from minipaged.grader.exercises import EXERCISES
from minipaged.grader.library_copies import LONG_SHAPE, Library
from minipaged.grader.made_code import hand_made_judge
from minipaged.grader.provenance import walk

NUMBA = importlib.util.find_spec("numba") is not None
KERNELS = (8, 9, 10, 11)
"""The exercises whose library functions are Numba kernels: looked up only where Numba is."""

GRADED = [ex for ex in EXERCISES.values() if NUMBA or ex.number not in KERNELS]


def _graded_codes(ex):
    """The code of each function exercise ``ex`` grades, as the library holds it."""
    for name in ex.graded:
        value = ex.lookup(name)[2]
        function = value.fget if isinstance(value, property) else value
        function = inspect.unwrap(getattr(function, "py_func", function))
        yield name, function.__code__


@pytest.mark.parametrize("ex", GRADED, ids=lambda ex: f"{ex.number:02d}")
def test_a_disguised_copy_keeps_the_shape_of_the_librarys_function(ex):
    shapes = Library(ex).shapes
    for name, code in _graded_codes(ex):
        copy = disguised(code)
        for inner, inner_copy in zip(walk(code), walk(copy), strict=True):
            long = sum(1 for _ in dis.get_instructions(inner)) >= LONG_SHAPE
            assert (shape(inner.co_code) in shapes) == long, name
            assert shape(inner_copy.co_code) == shape(inner.co_code), name


def test_the_longer_graded_functions_are_judged_by_shape():
    """A third of the graded functions and those inside them (fork, allocate, append_slot,
    the kernels ...) are long enough; the shorter ones are written so by honest students too,
    and a copy of one is its answer."""
    codes = [inner for ex in GRADED for _, code in _graded_codes(ex) for inner in walk(code)]
    judged = [c.co_qualname for c in codes if sum(1 for _ in dis.get_instructions(c)) >= LONG_SHAPE]
    assert "BlockManager.fork" in judged and len(judged) >= len(codes) // 3, judged


def test_the_disguise_changes_the_bytecode_the_shape_survives():
    """The disguise is no disguise if the bytecode stays the same: most graded functions use
    more than one constant or name, and theirs changes (the digest of exact bytecode missed
    them: ``hostile_corpus.DISGUISED``)."""
    codes = [code for ex in GRADED for _, code in _graded_codes(ex)]
    changed = [c.co_qualname for c in codes if disguised(c).co_code != c.co_code]
    assert len(changed) >= len(codes) // 2, changed


def _straight(block, size):  # no jump: a NOP between instructions moves no target
    return block.num_tokens * size + len(block.items) // 2


def test_the_shape_leaves_out_what_runs_nothing():
    """A ``NOP`` before every instruction, or an ``EXTENDED_ARG 0`` before each one with an
    argument, runs nothing: the shape is the same. A different operator is another shape."""
    code = _straight.__code__.co_code
    offsets = [offset for offset, _, _ in dis._unpack_opargs(code)] + [len(code)]
    pieces = [code[a:b] for a, b in pairwise(offsets)]  # each with its caches
    nop, wide = dis.opmap["NOP"], dis.opmap["EXTENDED_ARG"]
    padded = b"".join(bytes([nop, 0]) + piece for piece in pieces)
    widened = b"".join(
        (bytes([wide, 0]) if piece[0] >= dis.HAVE_ARGUMENT else b"") + piece for piece in pieces
    )
    assert shape(padded) == shape(code) == shape(widened)
    other = _straight.__code__.replace(co_code=code.replace(b"\x7a\x05", b"\x7a\x06"))
    assert other.co_code != code and shape(other.co_code) != shape(code)  # * became %


@pytest.mark.parametrize("ex", GRADED, ids=lambda ex: f"{ex.number:02d}")
def test_no_honest_answer_has_the_shape_of_a_graded_library_function(ex):
    """Every function of every answer in ``student_answers`` (right ones, and wrong ones,
    which are honest work too) and of the starter: none would be refused if an installed
    caller rebuilt its code by hand."""
    shapes = Library(ex).shapes
    folders = sorted((ANSWERS / f"ex{ex.number:02d}").glob("*/")) + [ex.starter]
    found = []
    for folder in folders:
        for path in sorted(Path(folder).glob("*.py")):
            for code in walk(compile(path.read_text(), str(path), "exec")):
                if shape(code.co_code) in shapes:
                    found.append(f"{path.parent.name}/{path.name}: {code.co_qualname}")
    assert folders and not found


def test_a_code_object_built_in_the_librarys_shape_is_refused_whoever_builds_it():
    """``hand_made_judge`` as the runtime hook calls it on ``code.__new__``'s arguments (the
    bytecode, the file, the name ...), the caller installed code (``pickle``'s): the disguised
    ``fork`` is refused, saying what happened; an honest ``fork`` built so is not."""
    ex = EXERCISES[3]
    judged = hand_made_judge(lambda where: True, Library(ex).shapes, ValueError)
    library = dict(_graded_codes(ex))["minipaged.block_manager:BlockManager.fork"]
    copy = disguised(library)
    with pytest.raises(ValueError, match="built a copy of the library's solution as a code"):
        judged((copy.co_code, copy.co_filename, copy.co_name), sys._getframe())
    source = (ANSWERS / "ex03" / "right" / "block_manager.py").read_text()
    for honest in walk(compile(source, "block_manager.py", "exec")):
        judged((honest.co_code, honest.co_filename, honest.co_name), sys._getframe())


def test_a_shaper_made_before_the_students_code_keeps_its_tables():
    """A grading child's hook makes its shape function before the student's code loads; what
    that code then does to ``dis`` and ``opcode`` changes no shape it computes."""
    mine = shaper()
    code = test_a_shaper_made_before_the_students_code_keeps_its_tables.__code__
    before = mine(code.co_code)
    saved = list(dis.hasconst)
    dis.hasconst.clear()
    try:
        assert shaper()(code.co_code) != before  # the tables matter ...
        assert mine(code.co_code) == before  # ... and the one made before keeps its own
    finally:
        dis.hasconst.extend(saved)
