"""A corpus of realistic student bugs, each a small edit of the library file that solves an
exercise: the mistakes students make (an off-by-one at a block boundary, a refcount not
decremented on one path, a swap that forgets the last block, a softmax without the max). Every
mutant must fail at least one criterion of its exercise (``test_grader_mutants.py``), so each
check is proven able to fail on the code a student writes, not only on the starter.

A mutant replaces ``old`` by ``new`` once, inside the function ``within`` when given (the same
line can occur in several functions), then makes the edits ``also`` lists, when one bug takes
more than one edit. Exercise 06's answers are properties, not library
edits: its corpus is the knobs of ``test_exercises.student_properties``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    exercise: int
    stem: str  # the student file it edits: "block_manager" for block_manager.py
    bug: str  # the mistake, as a teacher would name it
    old: str
    new: str
    within: str = ""  # the function whose text holds ``old``: "def decref("
    also: tuple[tuple[str, str], ...] = ()  # further (old, new) edits of the same bug


def _m(exercise: int, stem: str, bug: str, old: str, new: str, within: str = "", also=()) -> Mutant:
    return Mutant(exercise, stem, bug, old, new, within, also)


MUTANTS: tuple[Mutant, ...] = (
    # -- 01: block-table arithmetic (memory.py) --------------------------------------------
    _m(1, "memory", "j off by one", "return t // block_size", "return (t + 1) // block_size"),
    _m(
        1,
        "memory",
        "j by a shift: right only for B a power of two",
        "return t // block_size",
        "return t >> (block_size.bit_length() - 1)",
    ),
    _m(
        1,
        "memory",
        "o by a bit mask: right only for B a power of two",
        "return t % block_size",
        "return t & (block_size - 1)",
    ),
    _m(
        1,
        "memory",
        "M one too many at exact multiples",
        "return -(-num_tokens // block_size)",
        "return num_tokens // block_size + 1",
    ),
    _m(
        1,
        "memory",
        "M floored: a partly filled last block not counted",
        "return -(-num_tokens // block_size)",
        "return num_tokens // block_size",
    ),
    _m(
        1,
        "memory",
        "slot of the last token past the table: an IndexError, not a ValueError",
        "if j >= len(block_table):",
        "if j > len(block_table):",
    ),
    _m(
        1,
        "memory",
        "slot uses t for the offset",
        "return _physical_block(block_table, t, block_size) * block_size + block_offset(t, "
        "block_size)",
        "return _physical_block(block_table, t, block_size) * block_size + t",
    ),
    _m(
        1,
        "memory",
        "M_KV per token without the factor 2 for K and V",
        "return 2 * self.num_layers * self.num_kv_heads",
        "return self.num_layers * self.num_kv_heads",
    ),
    _m(
        1,
        "memory",
        "M_KV per token counts query heads",
        "return 2 * self.num_layers * self.num_kv_heads",
        "return 2 * self.num_layers * self.num_q_heads",
    ),
    _m(
        1,
        "memory",
        "block bytes per layer without the factor 2",
        "return 2 * self.num_kv_heads * self.head_dim * block_size",
        "return self.num_kv_heads * self.head_dim * block_size",
    ),
    _m(
        1,
        "memory",
        "block bytes of one layer only",
        "return self.num_layers * self.block_bytes_per_layer(block_size)",
        "return self.block_bytes_per_layer(block_size)",
    ),
    _m(
        1,
        "memory",
        "M_KV per token without b, the bytes per element",
        "self.head_dim * self.dtype_bytes\n",
        "self.head_dim\n",
        within="def kv_bytes_per_token",
    ),
    # -- 02: the refcounted allocator (allocator.py) -----------------------------------------
    _m(
        2,
        "allocator",
        "allocate takes the last free block (a stack, not a queue)",
        "block, _ = self._free.popitem(last=False)",
        "block, _ = self._free.popitem()",
    ),
    _m(
        2,
        "allocator",
        "a freed block goes to the front of the free list",
        "            self._free[block] = None\n",
        "            self._free[block] = None\n"
        "            self._free.move_to_end(block, last=False)\n",
        within="def decref(",
    ),
    _m(
        2,
        "allocator",
        "double free not refused",
        'if self._refcounts[block] == 0:\n            raise ValueError(f"double free',
        'if self._refcounts[block] < 0:\n            raise ValueError(f"double free',
    ),
    _m(
        2,
        "allocator",
        "a free block may be shared",
        "if self._refcounts[block] == 0:",
        "if self._refcounts[block] < 0:",
        within="def incref(",
    ),
    _m(
        2,
        "allocator",
        "refcount of a negative id wraps around",
        "if not 0 <= block < self.num_blocks:",
        "if not block < self.num_blocks:",
        within="def refcount(",
    ),
    _m(2, "allocator", "take leaves the block on the free list", "del self._free[block]", "pass"),
    _m(
        2,
        "allocator",
        "decref frees a block still held once",
        "self._refcounts[block] -= 1\n        if self._refcounts[block] == 0:",
        "self._refcounts[block] -= 1\n        if self._refcounts[block] <= 1:",
    ),
    _m(
        2,
        "allocator",
        "free_blocks sorted instead of in allocation order",
        "return tuple(self._free)",
        "return tuple(sorted(self._free))",
    ),
    _m(
        2,
        "allocator",
        "incref returns the refcount before the increment",
        "self._refcounts[block] += 1\n        return self._refcounts[block]",
        "self._refcounts[block] += 1\n        return self._refcounts[block] - 1",
    ),
    _m(
        2,
        "allocator",
        "take of a block in use not refused",
        "if block not in self._free:",
        "if self._refcounts[block] > 1:",
    ),
    _m(
        2,
        "allocator",
        "a full pool raises IndexError",
        "raise OutOfBlocks(",
        "raise IndexError(",
        within="def allocate(",
    ),
    # -- 03: fork and free (block_manager.py) ------------------------------------------------
    _m(
        3,
        "block_manager",
        "fork raises no refcount",
        "self.device.incref(block)))",
        "self.device.refcount(block)))",
        within="def fork(",
    ),
    _m(
        3,
        "block_manager",
        "fork shares the parent's list of blocks (aliasing)",
        "BlockTable(self.block_size, list(source.blocks), source.num_tokens)",
        "BlockTable(self.block_size, source.blocks, source.num_tokens)",
    ),
    _m(
        3,
        "block_manager",
        "fork gives the child no tokens",
        "BlockTable(self.block_size, list(source.blocks), source.num_tokens)",
        "BlockTable(self.block_size, list(source.blocks), 0)",
    ),
    _m(
        3,
        "block_manager",
        "fork over an existing child not refused",
        "if child in self.tables:",
        "if child == parent:",
        within="def fork(",
    ),
    _m(
        3,
        "block_manager",
        "free releases the first block first",
        "for block in reversed(table.blocks):\n            after = pool.decref(block)",
        "for block in table.blocks:\n            after = pool.decref(block)",
    ),
    _m(
        3,
        "block_manager",
        "free keeps the table",
        "        del self.tables[seq]\n",
        "",
        within="def free(",
    ),
    _m(
        3,
        "block_manager",
        "free decrements only the blocks it alone holds",
        "after = pool.decref(block)",
        "after = pool.decref(block) if pool.refcount(block) == 1 else pool.refcount(block)",
        within="def free(",
    ),
    _m(
        3,
        "block_manager",
        "free always returns blocks to the device pool",
        "pool = self._pool(table.pool)\n        for block in reversed",
        "pool = self.device\n        for block in reversed",
    ),
    _m(
        3,
        "block_manager",
        "fork of a swapped-out parent not refused",
        "source = self._device_table(parent)",
        "source = self.table(parent)",
    ),
    _m(
        3,
        "block_manager",
        "fork increfs only the last block",
        "for j, block in enumerate(table.blocks):\n            self.record(events.Incref",
        "for j, block in list(enumerate(table.blocks))[-1:]:\n"
        "            self.record(events.Incref",
    ),
    # -- 04: append with copy-on-write (block_manager.py) -----------------------------------
    _m(
        4,
        "block_manager",
        "copies an exclusive block too (R >= 1)",
        "elif self.device.refcount(table.blocks[j]) > 1:",
        "elif self.device.refcount(table.blocks[j]) >= 1:",
    ),
    _m(
        4,
        "block_manager",
        "copies only when three tables share (R > 2)",
        "elif self.device.refcount(table.blocks[j]) > 1:",
        "elif self.device.refcount(table.blocks[j]) > 2:",
    ),
    _m(
        4,
        "block_manager",
        "copy without decrementing the source's refcount",
        "self.device.decref(src)  # 3. R[src] <- R[src] - 1",
        "# 3. R[src] stays",
    ),
    _m(
        4,
        "block_manager",
        "copy without updating the table",
        "table.blocks[j] = dst  # 4. T_r[j] <- dst",
        "# 4. T_r[j] stays",
    ),
    _m(
        4,
        "block_manager",
        "length not advanced",
        "        table.num_tokens += 1\n        if token_ids",
        "        if token_ids",
    ),
    _m(
        4,
        "block_manager",
        "slot from t instead of the offset",
        "AppendResult(table.blocks[j] * self.block_size + o, cow)",
        "AppendResult(table.blocks[j] * self.block_size + t, cow)",
    ),
    _m(
        4,
        "block_manager",
        "a new block only past a full one (off by one at the boundary)",
        "if table.is_last_block_full:\n            self._append_block(seq, table)",
        "if len(table.blocks) * self.block_size < t:\n            self._append_block(seq, table)",
    ),
    _m(
        4,
        "block_manager",
        "the copy pair reversed",
        "cow = (src, dst)  # 2.",
        "cow = (dst, src)  # 2.",
    ),
    _m(
        4,
        "block_manager",
        "no check first, and the decref before the allocation: a refusal changes R",
        "        self._check_append(seq, table, token_ids)\n",
        "",
        within="def append_slot(",
        also=(
            (
                "            dst = self._fresh_block()  # 1. a new block, R[dst] = 1\n"
                "            cow = (src, dst)  # 2. the caller copies the o rows already written\n"
                "            self.device.decref(src)  # 3. R[src] <- R[src] - 1\n",
                "            self.device.decref(src)  # 3. R[src] <- R[src] - 1\n"
                "            dst = self._fresh_block()  # 1. a new block, R[dst] = 1\n"
                "            cow = (src, dst)  # 2. the caller copies the o rows already written\n",
            ),
        ),
    ),
    _m(
        4,
        "block_manager",
        "position of the last token, not the next",
        "j, o = divmod(t, self.block_size)  # the manager",
        "j, o = divmod(max(t - 1, 0), self.block_size)  # the manager",
    ),
    _m(
        4,
        "block_manager",
        "append to a swapped-out sequence not refused",
        "table = self._device_table(seq)\n        self._check_append",
        "table = self.table(seq)\n        self._check_append",
    ),
    # -- 05: swapping (block_manager.py) and preemption (scheduler.py) ----------------------
    _m(
        5,
        "block_manager",
        "a swap that forgets the last block",
        "for block in old:\n                if block in mapping:",
        "for block in old[:-1]:\n                if block in mapping:",
    ),
    _m(
        5,
        "block_manager",
        "a block shared inside the group copied twice",
        "if block in mapping:\n                    dst.incref(mapping[block])",
        "if False:\n                    dst.incref(mapping[block])",
    ),
    _m(
        5,
        "block_manager",
        "room checked against the pool's size, not its free blocks",
        "if needed > dst.num_free:",
        "if needed > dst.num_blocks:",
    ),
    _m(
        5,
        "block_manager",
        "room counted per table, not per distinct block",
        "needed = len(self._distinct_blocks(seqs, src_name))",
        "needed = sum(len(self.tables[s].blocks) for s in seqs)",
    ),
    _m(
        5,
        "block_manager",
        "source blocks released first block first",
        "for block in reversed(old):  # last block first",
        "for block in old:  # first block first",
    ),
    _m(
        5,
        "block_manager",
        "the table's pool not updated",
        "table.pool = dst_name",
        "table.pool = table.pool",
    ),
    _m(
        5,
        "block_manager",
        "the copies returned as (destination, source)",
        "return list(mapping.items())",
        "return [(b, a) for a, b in mapping.items()]",
        within="def _move(",
    ),
    _m(
        5,
        "block_manager",
        "source blocks not released",
        "            for block in reversed(old):  # last block first, as free releases them\n"
        "                src.decref(block)\n",
        "",
    ),
    _m(
        5,
        "scheduler",
        "recompute frees only the first sequence of a request",
        "for seq_id in ids:\n                bm.free(seq_id)",
        "bm.free(ids[0])",
    ),
    _m(
        5,
        "scheduler",
        "a victim appended to the waiting queue",
        "_insert_by_arrival(self.waiting, group)\n        out.preempted",
        "self.waiting.append(group)\n        out.preempted",
    ),
    _m(
        5,
        "scheduler",
        "a request of several sequences recomputed under recompute",
        'wants_swap = self.preemption == "swap" or len(ids) > 1',
        'wants_swap = self.preemption == "swap"',
    ),
    _m(
        5,
        "scheduler",
        "swap without asking whether the host has room",
        'mode = "swap" if wants_swap and bm.can_swap_out(ids) else "recompute"',
        'mode = "swap" if wants_swap else "recompute"',
    ),
    _m(
        5,
        "scheduler",
        "the victim not reported preempted",
        "        out.preempted.append(group)\n\n\ndef",
        "\n\ndef",
    ),
    _m(
        5,
        "scheduler",
        "the swap's copies not handed to the step",
        "out.blocks_to_swap_out += bm.swap_out(ids)",
        "bm.swap_out(ids)",
    ),
    _m(
        5,
        "scheduler",
        "a recomputed victim keeps its running status",
        "            group.status = Status.WAITING\n            _insert_by_arrival",
        "            _insert_by_arrival",
    ),
    # -- 07: paged attention in PyTorch (attention.py) ---------------------------------------
    _m(
        7,
        "attention",
        "running max started at 0",
        'm_prev = torch.full((num_heads, 1), -float("inf"), dtype=query.dtype, '
        "device=query.device)",
        "m_prev = torch.zeros((num_heads, 1), dtype=query.dtype, device=query.device)",
    ),
    _m(
        7,
        "attention",
        "softmax without the max",
        "m_curr = torch.maximum(m_prev, torch.max(scores, dim=-1, keepdim=True)[0])",
        "m_curr = torch.zeros_like(m_prev)",
    ),
    _m(
        7,
        "attention",
        "accumulator not rescaled",
        "acc = acc * p_prev + torch.einsum",
        "acc = acc + torch.einsum",
    ),
    _m(
        7,
        "attention",
        "running sum not rescaled",
        "l_curr = p_prev * l_prev + torch.sum",
        "l_curr = l_prev + torch.sum",
    ),
    _m(
        7,
        "attention",
        "all B slots of a partly filled block read",
        "tokens_in_block = min(block_size, seq_len - blk_idx * block_size)",
        "tokens_in_block = block_size",
    ),
    _m(
        7,
        "attention",
        "GQA by repeat (head h reads KV head h mod N_KV)",
        "k_block = k_block.repeat_interleave(group, dim=0)  # [num_heads, tokens, head_dim]\n"
        "            v_block = v_block.repeat_interleave(group, dim=0)",
        "k_block = k_block.repeat(group, 1, 1)  # [num_heads, tokens, head_dim]\n"
        "            v_block = v_block.repeat(group, 1, 1)",
    ),
    _m(
        7,
        "attention",
        "M floored: the partly filled last block skipped",
        "num_blocks = (seq_len + block_size - 1) // block_size",
        "num_blocks = seq_len // block_size",
    ),
    _m(
        7,
        "attention",
        "scores not scaled",
        'torch.einsum("hd,htd->ht", q, k_block) * scale',
        'torch.einsum("hd,htd->ht", q, k_block)',
    ),
    _m(
        7,
        "attention",
        "the vectorized path ignores the scale it is given",
        "valid[None, :, None, :], scale=scale)",
        "valid[None, :, None, :])",
    ),
    _m(
        7,
        "attention",
        "blocks read in logical order, not through the table",
        "phys_block_id = int(block_tables[b, blk_idx])",
        "phys_block_id = int(block_tables[b, 0]) + blk_idx",
    ),
    _m(
        7,
        "attention",
        "the loop's output left unnormalized",
        "output[b] = acc / l_prev",
        "output[b] = acc",
    ),
    _m(
        7,
        "attention",
        "the loop's output made in float32 whatever the query's dtype",
        "output = torch.zeros_like(query)\n\n    for b in range(batch_size):",
        "output = torch.zeros(query.shape)\n\n    for b in range(batch_size):",
    ),
    # -- 12: prefix caching with a radix tree (radix_cache.py) -------------------------------
    _m(
        12,
        "radix_cache",
        "forget leaves the children under a shortened edge",
        "        node.children.clear()\n        for gone in",
        "        for gone in",
    ),
    _m(
        12,
        "radix_cache",
        "forget drops the children's blocks but keeps their nodes",
        "        for child in list(node.children.values()):\n            self._drop(child)\n"
        "        node.children.clear()\n",
        "        for child in list(node.children.values()):\n            self._drop(child)\n",
    ),
    _m(
        12,
        "radix_cache",
        "insert never splits an edge",
        "if k < len(node.blocks):  # the path",
        "if False:  # the path",
    ),
    _m(
        12,
        "radix_cache",
        "a split leaves the moved blocks filed under the old node",
        "        for block in tail.blocks:\n            self._node_of[block] = tail\n",
        "",
    ),
    _m(
        12,
        "radix_cache",
        "a block cached elsewhere added again",
        "if any(block in self._node_of for block in new_blocks) or not rest:",
        "if not rest:",
    ),
    _m(
        12,
        "radix_cache",
        "insert returns the whole table, not the blocks newly cached",
        "        return new_blocks\n",
        "        return list(blocks)\n",
    ),
    _m(
        12,
        "radix_cache",
        "the walk compares only an edge's first chunk",
        "                and node.chunks[k] == chunks[len(matched)]\n",
        "",
    ),
    _m(
        12,
        "radix_cache",
        "forget drops the whole edge, not from p on",
        "i = node.blocks.index(block)",
        "i = 0",
    ),
    _m(
        12,
        "radix_cache",
        "the partly filled last block cached",
        "new_blocks = list(blocks[len(matched) : len(chunks)])",
        "new_blocks = list(blocks[len(matched) :])",
    ),
    _m(
        12,
        "radix_cache",
        "forget of an uncached block says True",
        "if node is None:\n            return False",
        "if node is None:\n            return True",
    ),
    _m(
        12,
        "radix_cache",
        "dropping a subtree forgets only its top edge",
        "        for child in node.children.values():\n            self._drop(child)\n"
        "        for block in node.blocks:",
        "        for block in node.blocks:",
    ),
    _m(
        12,
        "radix_cache",
        "match also splits the edge it leaves",
        "return self._walk(full_blocks(token_ids, self.block_size))[2]",
        "node, k, matched = self._walk(full_blocks(token_ids, self.block_size))\n"
        "        if 0 < k < len(node.blocks):\n            self._split(node, k)\n"
        "        return matched",
    ),
    # -- 13: the three wastes (memory.py) of a recorded run (recorded_waste.py) -------------
    _m(
        13,
        "memory",
        "paged waste B - (L mod B): a full last block counted as wasting B",
        "return num_logical_blocks(num_tokens, block_size) * block_size - num_tokens",
        "return block_size - num_tokens % block_size",
    ),
    _m(
        13,
        "memory",
        "paged waste with floor(L/B) + 1 blocks: one too many at exact multiples",
        "return num_logical_blocks(num_tokens, block_size) * block_size - num_tokens",
        "return (num_tokens // block_size + 1) * block_size - num_tokens",
    ),
    _m(
        13,
        "memory",
        "paged waste with floor for ceil",
        "return num_logical_blocks(num_tokens, block_size) * block_size - num_tokens",
        "return num_tokens // block_size * block_size - num_tokens",
    ),
    _m(
        13,
        "memory",
        "paged waste counted in blocks, not token slots",
        "return num_logical_blocks(num_tokens, block_size) * block_size - num_tokens",
        "return num_logical_blocks(num_tokens, block_size) - num_tokens // block_size",
    ),
    _m(
        13,
        "memory",
        "static waste refuses a sequence of exactly L_max",
        "if length > max_length:",
        "if length >= max_length:",
    ),
    _m(
        13,
        "memory",
        "reservation counted from the wrong end: the filled part of the last chunk",
        "return -(-t // delta) * delta - t",
        "return t % delta",
    ),
    _m(
        13,
        "memory",
        "reservation with floor(t/ΔL) + 1 chunks: ΔL at chunk boundaries",
        "return -(-t // delta) * delta - t",
        "return (t // delta + 1) * delta - t",
    ),
    _m(
        13,
        "memory",
        "a hole exactly the request's size counted as too small",
        "return largest < request <= sum(free_segments)",
        "return largest <= request <= sum(free_segments)",
    ),
    _m(
        13,
        "memory",
        "every refusal a stall: the free total never compared",
        "return largest < request <= sum(free_segments)",
        "return largest < request",
    ),
    _m(
        13,
        "memory",
        "exactly enough memory in total not counted as enough",
        "return largest < request <= sum(free_segments)",
        "return largest < request < sum(free_segments)",
    ),
    _m(
        13,
        "recorded_waste",
        "paged waste of a run counted in blocks",
        "memory.paged_internal_waste(length, run.block_size)",
        "memory.num_logical_blocks(length, run.block_size)",
    ),
    _m(
        13,
        "recorded_waste",
        "static waste from the length now (L_max - l_i), not the final length",
        "memory.static_internal_waste(final[seq], run.max_length) for seq in lengths",
        "memory.static_internal_waste(length, run.max_length) for seq, length in lengths.items()",
    ),
    _m(
        13,
        "recorded_waste",
        "static waste of every sequence of the run at every step, live or not",
        "for seq in lengths)",
        "for seq in final)",
        within="def static_waste(",
    ),
    _m(
        13,
        "recorded_waste",
        "Orca's reservation in chunks of B, not of ΔL",
        "memory.reservation_waste(length, delta)",
        "memory.reservation_waste(length, run.block_size)",
    ),
    _m(
        13,
        "recorded_waste",
        "departed sequences' buffers never given back to the heap",
        "heap.release(*buffers.pop(seq))",
        "buffers.pop(seq)",
    ),
    _m(
        13,
        "recorded_waste",
        "every refused buffer counted as a stall, enough memory in total or not",
        "elif memory.external_fragmentation_stalls(heap.hole_sizes(), sizes[seq]):",
        "else:",
    ),
    _m(
        13,
        "recorded_waste",
        "a sequence back from preemption not asking for a buffer again",
        "before = set(lengths)",
        "before |= set(lengths)",
    ),
)

KERNEL_MUTANTS: tuple[Mutant, ...] = (
    # -- 11: the decode kernel (paged_attention.py), graded in the simulator -----------------
    _m(11, "paged_attention", "running max started at 0", "m_prev = NEG_INF", "m_prev = ZERO"),
    _m(
        11,
        "paged_attention",
        "softmax without the max",
        "p_prev = math.exp(m_prev - m_curr)",
        "p_prev = np.float32(1.0)",
        also=(("p_curr = math.exp(score - m_curr)", "p_curr = math.exp(score)"),),
    ),
    _m(11, "paged_attention", "the accumulator never cleared", "            acc[d] = ZERO\n", ""),
    _m(
        11,
        "paged_attention",
        "a token's block found as if a round of T tokens started on a block boundary",
        "value_pool[blocks[i], kv_head, offset, d]",
        "value_pool[table[first // block_size + i // block_size], kv_head, offset, d]",
    ),
    _m(
        11,
        "paged_attention",
        "one round of threads only (L <= T assumed)",
        "for first in range(start, end, num_threads):",
        "for first in range(start, min(end, start + num_threads), num_threads):",
    ),
    _m(
        11,
        "paged_attention",
        "GQA by modulo (head h reads KV head h mod N_KV)",
        "kv_head = head // (query.shape[1] // key_pool.shape[1])",
        "kv_head = head % key_pool.shape[1]",
    ),
    _m(
        11,
        "paged_attention",
        "the values of every thread's slot read, past the sequence's end too",
        "tokens = min(num_threads, end - first)",
        "tokens = num_threads",
    ),
    _m(
        11,
        "paged_attention",
        "the output not divided by l",
        "acc[d] * (v_scale[kv_head] / l_prev)",
        "acc[d] * v_scale[kv_head]",
    ),
    _m(
        11,
        "paged_attention",
        "running sum not rescaled",
        "l_curr = p_prev * l_prev + block_sum",
        "l_curr = l_prev + block_sum",
    ),
    _m(
        11,
        "paged_attention",
        "no barrier between writing probs and reading them",
        "            probs[thread] = p_curr\n            cuda.syncthreads()\n",
        "            probs[thread] = p_curr\n",
    ),
    # -- 08 and 09: the cache kernels (cache_ops.py) ----------------------------------------
    _m(
        8,
        "cache_ops",
        "keys copied, values not",
        "        value_pool[dst, kv_head, offset, d] = value_pool[src, kv_head, offset, d]\n",
        "",
    ),
    _m(
        8,
        "cache_ops",
        "the offset not taken mod B",
        "offset = (e // head_dim) % block_size",
        "offset = e // head_dim",
    ),
    _m(
        8,
        "cache_ops",
        "the pair read backwards (dst onto src)",
        "src, dst = pairs[cuda.blockIdx.x, 0], pairs[cuda.blockIdx.x, 1]",
        "dst, src = pairs[cuda.blockIdx.x, 0], pairs[cuda.blockIdx.x, 1]",
    ),
    _m(
        8,
        "cache_ops",
        "every thread block copies the first pair",
        "src, dst = pairs[cuda.blockIdx.x, 0], pairs[cuda.blockIdx.x, 1]",
        "src, dst = pairs[0, 0], pairs[0, 1]",
    ),
    _m(
        8,
        "cache_ops",
        "the KV head from the wrong stride",
        "kv_head = e // (block_size * head_dim)",
        "kv_head = (e // head_dim) % num_kv_heads",
    ),
    _m(
        9,
        "cache_ops",
        "a negative slot written, not skipped",
        "    if slot < 0:\n        return\n",
        "",
    ),
    _m(
        9,
        "cache_ops",
        "block and offset exchanged",
        "    block = slot // block_size\n    offset = slot % block_size\n",
        "    block = slot % block_size\n    offset = slot // block_size\n",
    ),
    _m(
        9,
        "cache_ops",
        "keys written, values not",
        "        value_pool[block, kv_head, offset, d] = value[token, kv_head, d]\n",
        "",
    ),
    _m(
        9,
        "cache_ops",
        "one element per thread (no loop over a token wider than the threads)",
        "    for e in range(cuda.threadIdx.x, num_kv_heads * head_dim, cuda.blockDim.x):\n"
        "        kv_head, d",
        "    for e in range(cuda.threadIdx.x, min(cuda.threadIdx.x + 1, num_kv_heads * head_dim)):"
        "\n        kv_head, d",
    ),
    _m(
        9,
        "cache_ops",
        "the token's head index from the element's offset",
        "kv_head, d = e // head_dim, e % head_dim",
        "kv_head, d = e % num_kv_heads, e % head_dim",
    ),
    # -- 10: one warp's reduction (block_reduce.py) -------------------------------------------
    _m(
        10,
        "block_reduce",
        "the tree starts at a quarter of the threads",
        "stride = scratch.shape[0] // 2",
        "stride = scratch.shape[0] // 4",
    ),
    _m(
        10,
        "block_reduce",
        "the stride's own thread also combines (off by one)",
        "            if thread < stride:",
        "            if thread <= stride:",
    ),
    _m(
        10,
        "block_reduce",
        "no barrier between filling scratch and the first combine",
        "        scratch[thread] = value\n        cuda.syncthreads()\n",
        "        scratch[thread] = value\n",
    ),
    _m(
        10,
        "block_reduce",
        "no barrier between the levels of the tree",
        "            cuda.syncthreads()\n            stride //= 2",
        "            stride //= 2",
    ),
    _m(
        10,
        "block_reduce",
        "the result read from this thread's own entry",
        "        result = scratch[0]",
        "        result = scratch[thread]",
        within="def tree_reduce(",
    ),
)
"""Kernel bugs, graded in the simulator (a grading child each: slow)."""
