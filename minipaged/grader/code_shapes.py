"""The shape of a function's bytecode: what a copy of it keeps when it is rebuilt by hand.

A code object made by ``types.CodeType`` or ``code.replace`` raises the audit event
``code.__new__`` before it exists, with its bytecode (``co_code``) but not its constants,
names or variable names: that is all a grading child can judge it by
(``minipaged.grader.made_code``). The bytecode itself changes when a copy of the library's
function is disguised: its constants renumbered (``LOAD_CONST 3`` becomes ``LOAD_CONST 1``),
its names reordered, ``NOP``\\ s or ``EXTENDED_ARG`` prefixes added. Its shape does not.

``shaper()`` makes ``shape(co_code)``: a digest of the instructions, in order, where

- each index into the constants, into the names, and into the local variables (cells and free
  variables included: one table in CPython 3.11) is numbered by its first use in the function,
  so that only which instructions use the same one counts, not where it sits in its table;
- a jump is the number of instructions to its target, not a byte offset;
- what runs nothing is left out: ``NOP``, ``EXTENDED_ARG`` (folded into the argument it
  widens), the inline caches after an instruction, and the specialised forms of an
  instruction, written as their generic one (``LOAD_ATTR_SLOT`` is ``LOAD_ATTR``).

So a copy keeps its shape with its docstring dropped, its constants, names and locals renamed,
renumbered or reordered, and its line table or first line changed. What the shape keeps is the
sequence of operations with every other argument (how many a call passes, which operator, which
comparison): honest code shares it only by writing the same function again, instruction for
instruction, which students do for short ones (``return list(self._free)``), so only graded
functions of ``library_copies.LONG_SHAPE`` instructions or more are judged by their shape
(``tests/test_grader_code_shapes.py`` measures the answers of ``tests/student_answers``). A
copy rewritten by operations (a statement added, two swapped) is a new shape: this judges
copies, not the work a rewrite takes.
"""

from __future__ import annotations

import dis
import opcode
import sys
from bisect import bisect_left
from hashlib import sha256

from minipaged.grader.provenance import private


def shaper():
    """``shape(co_code)``: the hex digest of the bytecode ``co_code``'s shape (see the module's
    docstring). Its tables are taken now, so that a student's code changing ``dis`` or
    ``opcode`` later changes no shape: a grading child makes its own before their code loads."""
    every = getattr(dis, "_all_opmap", opcode.opmap)  # the specialised forms too (3.11+)
    generic = {
        every[special]: every[base]
        for special, base in getattr(dis, "deoptmap", {}).items()
        if special in every and base in every
    }
    generic_of = tuple(generic.get(op, op) for op in range(256))
    caches = tuple(_caches(generic_of[op]) for op in range(256))
    constants, names = frozenset(dis.hasconst), frozenset(dis.hasname)
    variables = frozenset(dis.haslocal) | frozenset(dis.hasfree)
    relative, absolute = frozenset(dis.hasjrel), frozenset(dis.hasjabs)
    backward = frozenset(op for op in relative if "BACKWARD" in opcode.opname[op])
    widen, silent = opcode.opmap["EXTENDED_ARG"], frozenset({0, opcode.opmap["NOP"]})
    # A name's index shares its argument with flags in the low bits (LOAD_GLOBAL's "push NULL")
    flags = {opcode.opmap["LOAD_GLOBAL"]: 1}
    if sys.version_info >= (3, 12):
        flags |= {opcode.opmap["LOAD_ATTR"]: 1, opcode.opmap.get("LOAD_SUPER_ATTR", -1): 2}
    have_argument, digest, search = opcode.HAVE_ARGUMENT, sha256, bisect_left

    def instructions(code: bytes) -> list:
        """``(offset, op, argument)`` of each instruction that runs something."""
        found, offset, wide, end = [], 0, 0, len(code) - len(code) % 2
        while offset < end:
            op = generic_of[code[offset]]
            argument = code[offset + 1] | wide
            wide = argument << 8 if op == widen else 0
            if op != widen and op not in silent:
                found.append((offset, op, argument))
            offset += 2 + 2 * caches[op]
        return found

    def shape(code: bytes) -> str:
        found = instructions(code)
        offsets = [offset for offset, _, _ in found]
        numbered: tuple[dict, dict, dict] = ({}, {}, {})
        parts = []
        for index, (offset, op, argument) in enumerate(found):
            if op < have_argument:
                parts.append(op)
                continue
            if op in constants or op in names or op in variables:
                table = numbered[0 if op in constants else 1 if op in names else 2]
                bits = flags.get(op, 0)
                first_use = table.setdefault(argument >> bits, len(table))
                argument = (first_use << bits) | (argument & ((1 << bits) - 1))
            elif op in relative or op in absolute:
                after = offset + 2 + 2 * caches[op]
                target = (
                    2 * argument
                    if op in absolute
                    else after - 2 * argument
                    if op in backward
                    else after + 2 * argument
                )
                argument = search(offsets, target) - index
            parts.append((op, argument))
        return digest(repr(parts).encode()).hexdigest()

    instructions = private(instructions)
    return private(shape)


def _caches(op: int) -> int:
    """How many inline cache entries follow the instruction ``op`` (none before 3.11)."""
    entries = getattr(opcode, "_inline_cache_entries", None)
    if isinstance(entries, dict):  # 3.13: by name
        return entries.get(opcode.opname[op], 0)
    return entries[op] if entries is not None else 0


shape = shaper()
"""The grader's own ``shape``; a grading child's hook makes one of its own (``shaper``)."""
