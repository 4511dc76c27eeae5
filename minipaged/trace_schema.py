"""What a trace line may hold, checked before anything it describes is built.

A trace is a file, so nothing in it is trusted. ``Checker`` reads the header's claims (the
block size $B$, the device and host pool sizes, a keyframe every K lines) and holds every step
to them: a pool keeps the size of the header (or, where the header does not say, of the first
keyframe), since a run never resizes its pools; every block id in a table or a free list is a
block of its pool; a table holds at most $|\\mathcal{T}_r| \\cdot B$ tokens; every token id is
an id of the vocabulary. Sizes are checked as numbers, before any list they describe is built,
and against the machine too (``Budget``): a 1.5 KB line whose free list names 30 million
blocks is refused, not expanded.

A problem raises ``TraceError`` naming the field by its path and the value, for example
``state.tables.3.num_tokens must be an integer >= 0, got -4``; ``trace.load`` adds the file
and the line. What is checked here is that a step is *well formed*; whether its block state is
*sound* (refcounts match the tables, no leak) is for ``minipaged.invariants``, whose panel shows
a recorded student's broken state as broken rather than refusing it.
"""

from __future__ import annotations

from dataclasses import dataclass

from minipaged.memory import free_memory, memory_amount
from minipaged.trace_values import (
    TraceError,
    array,
    check_event,
    fail,
    integer,
    mapping,
    require,
    seq_key,
    show,
    string,
    typed,
)

__all__ = ["Budget", "Checker", "Claims", "TraceError", "check_header"]

MAX_BLOCK_SIZE = 4096
"""The largest $B$ a trace may claim: the largest the command line's ``--block-size`` takes."""

TOKEN_ID_LIMIT = 2**31
"""Token ids are int32 in the model and the kernels (and a tokenizer's ids are 32-bit)."""

BYTES_PER_ID = 40
"""What one block or token id costs a loaded trace: a tuple slot and an int object."""

BYTES_PER_REFCOUNT = 8
"""A refcount is a tuple slot: refcounts are small ints, which Python shares."""

BYTES_PER_JSON_BYTE = 24
"""What parsing one byte of a line may cost at most: ``[1,2,3]`` builds an int per two bytes."""

UNKNOWN_FREE_MEMORY = 4 * 2**30
"""The memory assumed free where the system does not say (not Linux)."""

POOLS = ("device", "host")
STATUSES = ("waiting", "running", "swapped", "finished")
QUEUES = ("waiting", "running", "swapped")
STEP_FIELDS = (
    "step",
    "keyframe",
    "new_tokens",
    "events",
    "state",
    "sequences",
    "queues",
    "finished",
    "num_prefill_tokens",
    "num_decode_tokens",
    "num_cached_tokens",
)


class Budget:
    """The bytes a load may still use: half the memory free when it began, so that a trace
    that claims more than this machine holds is refused before it is built."""

    def __init__(self, num_bytes: int | None = None) -> None:
        free = free_memory() if num_bytes is None else num_bytes
        self.left = (UNKNOWN_FREE_MEMORY if free is None else free) // 2

    def spend(self, num_bytes: int, what: str) -> None:
        self.afford(num_bytes, what)
        self.left -= num_bytes

    def afford(self, num_bytes: int, what: str) -> None:
        if num_bytes > self.left:
            raise TraceError(
                f"{what} would take {memory_amount(num_bytes)} to load, more than the "
                f"{memory_amount(self.left)} "
                "this machine has free for it"
            )


@dataclass(frozen=True)
class Claims:
    """What the header says of the run: $B$ and the pool sizes (None where it does not say),
    the keyframe period, and the vocabulary the token ids come from."""

    block_size: int | None
    pool_sizes: dict[str, int | None]
    keyframe_every: int | None
    vocab_size: int


def check_header(header: dict, vocab_size: int | None = None) -> Claims:
    """The header's claims, each checked for its type and range (a header describes what the
    recorder chose, so unknown keys are kept). ``vocab_size``: the model's, where it is here."""
    for name in ("model", "scenario", "error"):
        if name in header:
            string(header[name], name)
    if "prompts" in header:
        for i, prompt in enumerate(array(header["prompts"], "prompts")):
            string(prompt, f"prompts.{i}")
    every = header.get("keyframe_every")
    if every is not None:
        integer(every, "keyframe_every", 1)
    engine = mapping(header.get("engine", {}), "engine")
    block_size = engine.get("block_size")
    if block_size is not None:
        integer(block_size, "engine.block_size", 1, MAX_BLOCK_SIZE + 1)
    sizes: dict[str, int | None] = {}
    for pool, name in zip(POOLS, ("num_gpu_blocks", "num_cpu_blocks"), strict=True):
        sizes[pool] = engine.get(name)
        if sizes[pool] is not None:
            integer(sizes[pool], f"engine.{name}")
    if engine.get("kv_cache") is not None:
        kv = mapping(engine["kv_cache"], "engine.kv_cache")
        require(kv, ("dtype", "b", "bytes_per_block"), "engine.kv_cache")
        string(kv["dtype"], "engine.kv_cache.dtype")
        integer(kv["b"], "engine.kv_cache.b", 1, 64)
        integer(kv["bytes_per_block"], "engine.kv_cache.bytes_per_block", 1)
    return Claims(block_size, sizes, every, vocab_size or TOKEN_ID_LIMIT)


class Checker:
    """Checks a trace's steps in order against the header's claims, the steps before them and
    the machine's ``Budget`` (see the module docstring)."""

    def __init__(self, claims: Claims, budget: Budget | None = None) -> None:
        self.claims = claims
        self.budget = budget or Budget()
        self.pool_sizes = dict(claims.pool_sizes)
        self.block_size = claims.block_size
        self.last_step: int | None = None
        self.since_keyframe = 0

    def record(self, record: object, previous) -> dict:
        """Check one step line's record against ``previous``, the ``StepOutput`` decoded from
        the line before (None for the first); return it."""
        record = mapping(record, "the step")
        require(record, STEP_FIELDS, "")
        step = integer(record["step"], "step")
        if self.last_step is not None and step <= self.last_step:
            fail("step", f"must count up from the step before ({self.last_step}), got {step}")
        keyframe = record["keyframe"]
        if not isinstance(keyframe, bool):
            fail("keyframe", f"must be true or false, got {show(keyframe)}")
        if not keyframe and previous is None:
            raise TraceError("a delta line with no keyframe before it")
        base = None if keyframe else previous
        previous_tables = base.state.tables if base is not None else {}
        previous_seqs = base.sequences if base is not None else {}
        every = self.claims.keyframe_every
        self.since_keyframe = 0 if keyframe else self.since_keyframe + 1
        if every is not None and self.since_keyframe >= every:
            fail(
                "keyframe",
                f"is false {self.since_keyframe} lines after the last keyframe, but "
                f"the header says one every {every}",
            )
        for name in ("num_prefill_tokens", "num_decode_tokens", "num_cached_tokens"):
            integer(record[name], name)
        for key, token in mapping(record["new_tokens"], "new_tokens").items():
            seq_key(key, "new_tokens")
            self.token(token, f"new_tokens.{key}")
        for i, event in enumerate(array(record["events"], "events")):
            check_event(event, f"events.{i}")
        for name, ids in mapping(record["queues"], "queues").items():
            string(name, "queues", QUEUES)
            for i, request in enumerate(array(ids, f"queues.{name}")):
                string(request, f"queues.{name}.{i}")
        for i, output in enumerate(array(record["finished"], "finished")):
            self.finished(output, f"finished.{i}")
        self.state(mapping(record["state"], "state"), keyframe, previous_tables)
        self.diffs(record["sequences"], "sequences", previous_seqs, SEQ_FIELDS)
        self.last_step = step
        return record

    def token(self, value: object, path: str) -> int:
        return integer(value, path, 0, self.claims.vocab_size)

    def tokens(self, value: object, path: str) -> None:
        for i, token in enumerate(array(value, path)):
            self.token(token, f"{path}.{i}")

    def finished(self, output: object, path: str) -> None:
        output = mapping(output, path)
        require(output, ("request_id", "prompt", "prompt_token_ids", "outputs"), path)
        for name in output.keys() - {
            "request_id",
            "prompt",
            "prompt_token_ids",
            "outputs",
            "finished",
            "error",
        }:
            fail(f"{path}.{name}", "is not a field of a finished request")
        string(output["request_id"], f"{path}.request_id")
        for name in ("prompt", "error"):
            if output.get(name) is not None:
                string(output[name], f"{path}.{name}")
        typed(output.get("finished", True), bool, f"{path}.finished")
        self.tokens(output["prompt_token_ids"], f"{path}.prompt_token_ids")
        for i, completion in enumerate(array(output["outputs"], f"{path}.outputs")):
            where = f"{path}.outputs.{i}"
            completion = mapping(completion, where)
            names = ("index", "token_ids", "text", "cumulative_logprob", "finish_reason")
            require(completion, names, where)
            for name in completion.keys() - set(names):
                fail(f"{where}.{name}", "is not a field of a completion")
            integer(completion["index"], f"{where}.index")
            self.tokens(completion["token_ids"], f"{where}.token_ids")
            string(completion["text"], f"{where}.text")
            typed(completion["cumulative_logprob"], float, f"{where}.cumulative_logprob")
            typed(completion["finish_reason"], str | None, f"{where}.finish_reason")

    def state(self, state: dict, keyframe: bool, previous_tables: dict) -> None:
        if keyframe:
            require(state, ("block_size", "device_free", "host_free", "cached", "tables"), "state")
            block_size = integer(state["block_size"], "state.block_size", 1, MAX_BLOCK_SIZE + 1)
            if self.block_size is not None and block_size != self.block_size:
                fail("state.block_size", f"is {block_size}, but the run's B is {self.block_size}")
            self.block_size = block_size
        require(state, ("tables",), "state")
        for pool in POOLS:
            key = f"{pool}_refcounts"
            if key in state:
                self.refcounts(state[key], f"state.{key}", pool)
            elif keyframe:  # a keyframe leaves out only an empty pool
                self.pool_size(pool, 0, f"state.{key}")
        for key, pool in (("device_free", "device"), ("host_free", "host"), ("cached", "device")):
            if key in state:
                self.runs(state[key], f"state.{key}", pool)
        self.diffs(state["tables"], "state.tables", previous_tables, TABLE_FIELDS)

    def pool_size(self, pool: str, size: int, path: str) -> None:
        """A pool has one size for the whole run: the header's, else the first keyframe's."""
        known = self.pool_sizes[pool]
        if known is not None and size != known:
            fail(path, f"gives the {pool} pool {size:,} blocks, but the run's has {known:,}")
        self.budget.afford(size * BYTES_PER_REFCOUNT, f"a {pool} pool of {size:,} blocks")
        self.pool_sizes[pool] = size

    def refcounts(self, value: object, path: str, pool: str) -> None:
        """``[size, [[index, R], ...]]``: the pool's size and the refcounts that moved."""
        pair = array(value, path)
        if len(pair) != 2:
            fail(path, f"must be [size, [[index, refcount], ...]], got {show(value)}")
        size = integer(pair[0], f"{path}.0")
        self.pool_size(pool, size, f"{path}.0")
        entries = array(pair[1], f"{path}.1")
        for i, entry in enumerate(entries):
            where = f"{path}.1.{i}"
            if not isinstance(entry, list) or len(entry) != 2:
                fail(where, f"must be [index, refcount], got {show(entry)}")
            integer(entry[0], f"{where}.0", 0, size)
            integer(entry[1], f"{where}.1")

    def runs(self, value: object, path: str, pool: str) -> None:
        """``[[first, last], ...]``: runs of block ids of ``pool``, counted before expanding."""
        size = self.pool_sizes[pool] or 0
        count = 0
        for i, run in enumerate(array(value, path)):
            where = f"{path}.{i}"
            if not isinstance(run, list) or len(run) != 2:
                fail(where, f"must be a run [first, last], got {show(run)}")
            for k in (0, 1):
                if type(run[k]) is int and not 0 <= run[k] < size:
                    fail(
                        f"{where}.{k}",
                        f"is not a block of the {size:,}-block {pool} pool, got {show(run[k])}",
                    )
                integer(run[k], f"{where}.{k}")
            count += abs(run[1] - run[0]) + 1
        self.budget.afford(count * BYTES_PER_ID, f"{path} ({count:,} blocks)")

    def diffs(self, value: object, path: str, previous: dict, rules: dict) -> None:
        """A map of changes ``{id: fields | None, "order": [ids]}`` (``trace_lines._diff_map``) that
        applies to ``previous`` (id -> fields)."""
        changes = mapping(value, path)
        ids = set(previous)
        for key, diff in changes.items():
            if key == "order":
                continue
            seq = seq_key(key, path)
            where = f"{path}.{key}"
            if diff is None:
                if seq not in previous:
                    fail(where, "removes a sequence the step before did not have")
                ids.discard(seq)
                continue
            diff = mapping(diff, where)
            for name in diff.keys() - rules.keys() - {"append"}:
                fail(f"{where}.{name}", "is not a field here")
            if seq not in previous:
                require(diff, rules, where)
                if "append" in diff:
                    fail(f"{where}.append", "appends to a sequence the step before did not have")
            for name, value in diff.items():
                rule = rules[GROWS[path]] if name == "append" else rules[name]
                rule(self, value, f"{where}.{name}")
            ids.add(seq)
        if "order" in changes:
            order = array(changes["order"], f"{path}.order")
            for i, seq in enumerate(order):
                integer(seq, f"{path}.order.{i}")
            if sorted(order) != sorted(ids):
                fail(
                    f"{path}.order", f"must list the ids {sorted(ids)} once each, got {show(order)}"
                )

    def result(self, state, sequences: dict) -> None:
        """What only the decoded step shows: each table within its pool and its slots; each
        sequence's own id and prompt; and the step's cost against the budget."""
        sizes = {"device": len(state.device_refcounts), "host": len(state.host_refcounts)}
        ids = len(state.device_free) + len(state.host_free) + len(state.cached)
        for seq, table in state.tables.items():
            where = f"state.tables.{seq}"
            for j, block in enumerate(table.blocks):
                if block >= sizes[table.pool]:
                    fail(
                        f"{where}.blocks.{j}",
                        f"is not a block of the {sizes[table.pool]:,}-"
                        f"block {table.pool} pool, got {block}",
                    )
            if table.num_tokens > len(table.blocks) * state.block_size:
                fail(
                    f"{where}.num_tokens",
                    f"is {table.num_tokens}, more than its "
                    f"{len(table.blocks)} block(s) of B={state.block_size} slots hold",
                )
            ids += len(table.blocks)
        for seq, view in sequences.items():
            where = f"sequences.{seq}"
            if view.seq_id != seq:
                fail(f"{where}.seq_id", f"is {view.seq_id}, not the id it is filed under")
            if view.prompt_len > len(view.token_ids):
                fail(
                    f"{where}.prompt_len",
                    f"is {view.prompt_len}, more than its {len(view.token_ids)} tokens",
                )
            ids += len(view.token_ids)
        refcounts = (sizes["device"] + sizes["host"]) * BYTES_PER_REFCOUNT
        self.budget.spend(ids * BYTES_PER_ID + refcounts, f"step {self.last_step}")


def _blocks(checker: Checker, value: object, path: str) -> None:
    for i, block in enumerate(array(value, path)):
        integer(block, f"{path}.{i}")


TABLE_FIELDS = {
    "blocks": _blocks,
    "num_tokens": lambda checker, value, path: integer(value, path),
    "pool": lambda checker, value, path: string(value, path, POOLS),
}
SEQ_FIELDS = {
    "request_id": lambda checker, value, path: string(value, path),
    "seq_id": lambda checker, value, path: integer(value, path),
    "token_ids": Checker.tokens,
    "prompt_len": lambda checker, value, path: integer(value, path),
    "status": lambda checker, value, path: string(value, path, STATUSES),
}
GROWS = {"state.tables": "blocks", "sequences": "token_ids"}
"""The list field an ``append`` extends, by map."""
