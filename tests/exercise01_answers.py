"""Exercise 01 written by a student: every function right, or with one planted mistake. The
grader refuses a file that copies the library's, so the tests of batch grading and of the
handout write the answers into the starter, as a student would."""

from __future__ import annotations

from pathlib import Path

from minipaged.grader.exercises import EXERCISES, TUTORIALS

ANSWERS = {
    "return j = floor(t / B)": "return t // block_size",
    "return o = t mod B": "return t % block_size",
    "return M = ceil(L / B)": "return -(-num_tokens // block_size)",
    "look up T_r[j], then return T_r[j] * B + o": (
        "j = t // block_size\n"
        "    if not 0 <= j < len(block_table):\n"
        "        raise ValueError(f'no block {j} for token {t}')\n"
        "    return block_table[j] * block_size + t % block_size"
    ),
    "keys and values, for every layer and KV head": (
        "return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes"
    ),
    "M_KV(L)": "return self.kv_bytes_per_token * num_tokens",
    "one block, one layer": (
        "return 2 * self.num_kv_heads * self.head_dim * block_size * self.dtype_bytes"
    ),
    "one block, all layers": "return self.num_layers * self.block_bytes_per_layer(block_size)",
}

ROUNDED_DOWN = {"return M = ceil(L / B)": "return num_tokens // block_size"}
"""The classic mistake: the partly filled last block forgotten."""


def answered(folder: Path, replaced: dict[str, str] | None = None) -> Path:
    """Exercise 01's ``memory.py`` in ``folder`` (made if need be), every TODO answered, the
    answers named by their TODO in ``replaced`` swapped for the code given."""
    source = (TUTORIALS / EXERCISES[1].folder / "starter" / "memory.py").read_text()
    for todo, code in (ANSWERS | (replaced or {})).items():
        line = f'raise NotImplementedError("exercise 01: {todo}")'
        assert line in source, todo
        source = source.replace(line, code)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memory.py").write_text(source)
    return folder
