"""Checks for exercise 01: block-table arithmetic (source text §1 and §3).

The student's ``memory.py`` mirrors ``minipaged.memory``: ``logical_block``, ``block_offset``,
``num_logical_blocks``, ``slot`` and ``ModelShape``'s byte counts.
"""

from __future__ import annotations

import math

from minipaged.grader.report import CheckFailed, Criterion, expect

EXAMPLE_TABLE = [47, 12, 93]
"""§3's worked example: with $B = 16$, token $t = 38$ lives in $\\mathcal{T}_r[2] = 93$."""


LLAMA3_8B = "ModelShape(32, 32, 8, 128, 2)"
"""Llama-3-8B's shape, as the checks build it: N_L = 32, N_Q = 32, N_KV = 8, d_h = 128, b = 2."""

SMALL_FP8 = (5, 6, 2, 8, 1)
"""A small shape whose every factor differs from Llama's (N_L = 5, N_Q = 6, N_KV = 2, d_h = 8)
and whose cache is FP8 (b = 1): a byte count written with Llama's b = 2, or §3's B = 16, in
place of the shape's own or the argument is right for Llama alone."""

MANY_BLOCKS = [5, 0, 3, 300, 9, 1027, 2, 256, 11, 4]
"""A table of more blocks than §3's example, whose ids pass 255 (a byte's)."""

BLOCK_SIZES = (1, 3, 4, 6, 16)
"""Block sizes the arithmetic is checked at: powers of two and not (a bit mask or a shift is
right only for the first)."""

LARGE_T = 2**60 - 1
"""A position past float64's 53-bit mantissa: ``t / B`` rounds there, ``t // B`` does not
(``LARGE_T / 16`` rounds up to 2**56, ``(LARGE_T + 2) / 16`` down to it)."""


def expect_integer_division(got, exact: int, rounded: int, what: str) -> None:
    """Fail with the cause named when ``got`` is what float division gives (``rounded``)
    instead of the integer answer ``exact`` (exercise 13's waste formulas use it too)."""
    if got == rounded != exact:
        raise CheckFailed(
            f"{what}: got {got}, what float division gives (a float holds 53 bits, so a "
            f"quotient past 2**53 rounds); expected {exact}: use integers only (//, not /)"
        )
    expect(got, exact, what)


def check_logical_block(student):
    """logical_block(t, B) is j = floor(t / B), the logical block holding token t"""
    memory = student.memory
    expect(memory.logical_block(38, 16), 2, "§3's example: logical_block(t=38, B=16)")
    for block_size in BLOCK_SIZES:
        for t in range(3 * block_size + 2):
            got = memory.logical_block(t, block_size)
            if got == t >> (block_size.bit_length() - 1) != t // block_size:
                raise CheckFailed(
                    f"logical_block({t}, {block_size}) gave j = {got}, a shift by log2(B); that is "
                    f"floor(t / B) only when B is a power of two, expected {t // block_size}: "
                    "use //"
                )
            expect(
                got,
                t // block_size,
                f"logical_block({t}, {block_size}), j for t={t}, B={block_size}",
            )
    got = memory.logical_block(LARGE_T, 16)
    expect_integer_division(got, LARGE_T // 16, int(LARGE_T / 16), "logical_block(2**60 - 1, 16)")


def check_block_offset(student):
    """block_offset(t, B) is o = t mod B, the token's place inside its block"""
    memory = student.memory
    expect(memory.block_offset(38, 16), 6, "§3's example: block_offset(t=38, B=16)")
    for block_size in BLOCK_SIZES:
        for t in range(3 * block_size + 2):
            got = memory.block_offset(t, block_size)
            if got == t & (block_size - 1) != t % block_size:
                raise CheckFailed(
                    f"block_offset({t}, {block_size}) gave o = {got}, which is t & (B - 1); that "
                    f"is t mod B only when B is a power of two, expected {t % block_size}: use %"
                )
            expect(
                got, t % block_size, f"block_offset({t}, {block_size}), o for t={t}, B={block_size}"
            )


def check_num_logical_blocks(student):
    """num_logical_blocks(L, B) is M = ceil(L / B): a partly filled last block counts"""
    memory = student.memory
    for length, block_size, blocks in [
        (0, 16, 0),
        (1, 16, 1),
        (16, 16, 1),
        (17, 16, 2),
        (500, 16, 32),
        (38, 16, 3),
        (7, 1, 7),
    ]:
        expect(
            memory.num_logical_blocks(length, block_size),
            blocks,
            f"num_logical_blocks({length}, {block_size}), M for L={length} tokens, B={block_size}",
        )
    got = memory.num_logical_blocks(LARGE_T + 2, 16)
    exact, rounded = -(-(LARGE_T + 2) // 16), math.ceil((LARGE_T + 2) / 16)
    expect_integer_division(got, exact, rounded, "num_logical_blocks(2**60 + 1, 16)")


def check_slot(student):
    """slot(T_r, t, B) is T_r[j] * B + o, the token's row in the flattened pool

    Checked at block sizes that are powers of two and not, over a table of 10 blocks whose ids
    pass 255 (a shift for the product, or a byte for an id, is right for the example alone)."""
    memory = student.memory
    expect(
        memory.slot(EXAMPLE_TABLE, 38, 16),
        93 * 16 + 6,
        "§3's example: slot(T_r=[47, 12, 93], t=38, B=16) = T_r[2] * 16 + 6",
    )
    for block_size in BLOCK_SIZES:
        for t in range(len(MANY_BLOCKS) * block_size):
            _slot_of(memory.slot(MANY_BLOCKS, t, block_size), t, block_size)


def _slot_of(got, t: int, block_size: int) -> None:
    """Fail with the cause named when ``got`` is not slot(``MANY_BLOCKS``, t, B): a shift for
    the product, or a block id cut to a byte."""
    block, offset = MANY_BLOCKS[t // block_size], t % block_size
    expected = block * block_size + offset
    what = f"slot(T_r={MANY_BLOCKS}, t={t}, B={block_size})"
    if got == (block << block_size.bit_length() - 1) + offset != expected:
        raise CheckFailed(
            f"{what} gave {got}, T_r[j] shifted by log2(B) plus o; that is T_r[j] * B only "
            f"when B is a power of two, expected {expected}: use *"
        )
    if got == block % 256 * block_size + offset != expected:
        raise CheckFailed(
            f"{what} gave {got}, the slot of block {block % 256}: block {block} cut to a byte "
            f"(a uint8 holds 0..255), expected {expected}: keep block ids as Python ints"
        )
    expect(got, expected, what)


OUTSIDE_THE_TABLE = {
    48: "j = 3 is past the table's 3 blocks (positions 0..47)",
    -1: "j = floor(-1/16) = -1 names no block, though Python's T_r[-1] is the table's last: "
    "check 0 <= j < len(T_r)",
}
"""Positions §3's example table does not reach, on either side, with why."""


def check_slot_outside_the_table(student):
    """slot refuses a token the table does not reach, with a ValueError"""
    memory = student.memory
    for t, why in OUTSIDE_THE_TABLE.items():
        what = f"slot(T_r=[47, 12, 93], t={t}, B=16)"
        try:
            got = memory.slot(EXAMPLE_TABLE, t, 16)
        except ValueError:
            continue
        except IndexError:
            raise CheckFailed(
                f"{what} raised IndexError: {why}; raise a ValueError that says which "
                "positions the table holds"
            ) from None
        raise CheckFailed(f"{what} returned {got!r}: {why}, so it must raise a ValueError")


def check_kv_bytes_per_token(student):
    """ModelShape.kv_bytes_per_token is 2 * N_L * N_KV * d_h * b (§1)"""
    shape = student.memory.ModelShape
    for args, model, expected in [
        ((32, 32, 8, 128, 2), "Llama-3-8B", 131_072),
        ((80, 64, 8, 128, 2), "Llama-3-70B", 327_680),
        ((80, 64, 64, 128, 2), "Llama-2-70B as §1 states it (N_KV = 64)", 2_621_440),
        ((2, 4, 4, 8, 1), "N_L=2, N_KV=4, d_h=8, b=1", 128),
    ]:
        name = f"ModelShape{args}.kv_bytes_per_token ({model})"
        got = shape(*args).kv_bytes_per_token
        if got == 2 * args[0] * args[1] * args[3] * args[4] and args[1] != args[2]:
            raise CheckFailed(
                f"{name}: got {got} bytes per token, which counts N_Q={args[1]} query heads; "
                f"the cache stores keys and values for the N_KV={args[2]} KV heads only"
            )
        expect(got, expected, name)


def check_kv_bytes(student):
    """ModelShape.kv_bytes(L) is M_KV(L) = 2 * N_L * N_KV * d_h * L * b (§1), for every L"""
    llama3_8b = student.memory.ModelShape(32, 32, 8, 128, 2)
    expect(llama3_8b.kv_bytes(8192), 1_073_741_824, f"{LLAMA3_8B}.kv_bytes(8192) (about 1.07 GB)")
    per_token = 2 * 32 * 8 * 128 * 2
    for length in (0, 1, 2, 15, 16, 17, 100, 1000, 4097, 8191):
        got = llama3_8b.kv_bytes(length)
        rounded = per_token * 16 * -(-length // 16)
        if got == rounded != per_token * length:
            raise CheckFailed(
                f"{LLAMA3_8B}.kv_bytes({length}) gave {got}, the bytes of ceil(L/16) whole blocks "
                f"of 16 tokens; M_KV(L) counts the L tokens themselves, expected "
                f"{per_token * length}"
            )
        expect(got, per_token * length, f"{LLAMA3_8B}.kv_bytes({length}), M_KV(L={length})")
    small = student.memory.ModelShape(*SMALL_FP8)
    _own_factors(small.kv_bytes(5), 2 * 5 * 2 * 8 * 5, f"ModelShape{SMALL_FP8}.kv_bytes(5)")


def _own_factors(got, expected: int, what: str, block_size: int | None = None) -> None:
    """Fail with the cause named when ``got``, a byte count of ``SMALL_FP8``, is what Llama's
    b = 2 or §3's B = 16 gives instead of the shape's own b = 1 or the ``block_size`` given."""
    if got == 2 * expected:
        raise CheckFailed(
            f"{what}: got {got}, twice {expected}: it counts b = 2 bytes a value, but this "
            "shape's cache is FP8 (dtype_bytes = 1): use self.dtype_bytes, not FP16's 2"
        )
    if block_size is not None and got == expected // block_size * 16 != expected:
        raise CheckFailed(
            f"{what}: got {got}, the bytes of a block of 16 tokens (§3's example); use the "
            f"block_size given, B = {block_size}: expected {expected}"
        )
    expect(got, expected, what)


def check_block_bytes(student):
    """block_bytes_per_layer(B) is 2 * N_KV * d_h * B * b; block_bytes(B) is N_L times that (§3),
    for Llama-3-70B's B = 16 and b = 2 and for a small FP8 shape at B = 3"""
    llama3_70b = student.memory.ModelShape(80, 64, 8, 128, 2)
    what = "ModelShape(80, 64, 8, 128, 2).block_bytes_per_layer(16), Llama-3-70B's"
    expect(llama3_70b.block_bytes_per_layer(16), 65_536, f"{what} one block of B=16 (64 KB, §3)")
    expect(
        llama3_70b.block_bytes(16),
        5_242_880,
        "ModelShape(80, 64, 8, 128, 2).block_bytes(16), one block of B=16 in all 80 layers "
        "(80 × 64 KiB, §3's '5.12 MB')",
    )
    small, shape = student.memory.ModelShape(*SMALL_FP8), f"ModelShape{SMALL_FP8}"
    per_layer = 2 * 2 * 8 * 3  # 2 N_KV d_h B b with B = 3, b = 1
    what = f"{shape}.block_bytes_per_layer(3)"
    _own_factors(small.block_bytes_per_layer(3), per_layer, what, block_size=3)
    _own_factors(small.block_bytes(3), 5 * per_layer, f"{shape}.block_bytes(3)", block_size=3)


CRITERIA = tuple(
    Criterion(check)
    for check in (
        check_logical_block,
        check_block_offset,
        check_num_logical_blocks,
        check_slot,
        check_slot_outside_the_table,
        check_kv_bytes_per_token,
        check_kv_bytes,
        check_block_bytes,
    )
)
