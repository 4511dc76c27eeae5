"""The step-through engine: add requests, call ``LLMEngine.step``, watch what happens.

An engine is built from one ``EngineConfig`` (``minipaged.config``). One step does six things,
in this order, each by one part: schedule (admit, decode, preempt: ``minipaged.scheduler``),
allocate and copy on write (the block manager, asked by the scheduler; the speculative
branches, ``minipaged.speculative``), run the model (the block copies, then one forward pass:
``minipaged.model_runner``), sample or accept (pick tokens, fork for parallel sampling or beam
search: ``minipaged.decoding``), free what finished, and record. Every step returns a
``StepOutput`` (``minipaged.outputs``) with the new tokens, the events the block manager
recorded and a snapshot of the block state: what the TUI draws and a trace records.
"""

from __future__ import annotations

import itertools

import torch

from minipaged import fp8
from minipaged.backend import kernels_for, resolve_backend
from minipaged.block_manager import BlockManager
from minipaged.checkpoint import check_loaded_model
from minipaged.config import EngineConfig, check_fp8_model
from minipaged.decoding import Sampler, ranked
from minipaged.events import Event, Finish, Refuse
from minipaged.kv_cache import KVCache
from minipaged.memory import ModelShape
from minipaged.model import Llama, LlamaConfig
from minipaged.model_runner import ModelRunner
from minipaged.outputs import CompletionOutput, RequestOutput, SeqView, StepOutput
from minipaged.prompts import Prompt, check_stop_tokens, check_tokenizer_fits, prompt_token_ids
from minipaged.request_limits import (
    RequestRejected,
    UnknownRequest,
    automatic_id,
    check_fits,
    check_id_free,
    check_request_id,
    shown_ids,
)
from minipaged.sampling import SamplingParams
from minipaged.scheduler import Scheduler
from minipaged.sequence import Sequence, SequenceGroup
from minipaged.speculative.speculator import Speculator, make_drafter
from minipaged.tokenizer import Tokenizer


class LLMEngine:
    """The step-through engine: a model, a ``BlockManager`` over device and host pools, the
    ``KVCache`` tensors those blocks index, a ``Scheduler`` and a ``ModelRunner``.

    Invariant between steps: the block manager's invariants hold, and every live sequence has
    a cached key and value for every token but its last (the next step computes that one).
    """

    def __init__(
        self,
        model: Llama,
        tokenizer: Tokenizer | None = None,
        config: EngineConfig | None = None,
        *,
        draft_shape: LlamaConfig | None = None,
        **settings: object,
    ) -> None:
        """An engine for ``model`` built from ``config`` (``minipaged.config``; its defaults
        when None), with ``settings`` (its fields, by name) changed. The model's own dtype and
        device are used: the config's ``model``, ``dtype``, ``device`` and
        ``skip_tokenizer_init`` say how ``LLM`` loads one. ``config.block_manager_class`` swaps
        in another manager with ``BlockManager``'s constructor and methods: a student's, from
        the exercises, to watch it run the real model. An FP8 ``kv_cache_dtype`` starts with
        scales of 1; ``LLM`` calibrates them. ``draft_shape``: a draft model's config.json as
        ``LLM`` read and checked it (``minipaged.speculative.fits``), so it is not read again."""
        check_loaded_model(model, "LLMEngine")  # not its name: LLM(model="tiny") loads that
        config = (config or EngineConfig()).replace(**settings)
        check_tokenizer_fits(tokenizer, model.config.vocab_size)
        param = next(model.parameters())
        check_fp8_model(
            config.kv_cache_dtype, str(param.dtype).removeprefix("torch."), config.backend
        )
        cache_dtype = fp8.cache_dtype(config.kv_cache_dtype, param.dtype)
        self.config = config
        self.backend = resolve_backend(config.backend, param.device, param.dtype, cache_dtype)
        self.model = model
        self.tokenizer = tokenizer
        shape = model.config
        self.max_model_len = config.context(shape.max_position_embeddings)
        block_bytes = ModelShape(
            shape.num_hidden_layers,
            shape.num_attention_heads,
            shape.num_key_value_heads,
            shape.head_dim,
            torch.finfo(cache_dtype).bits // 8,  # b: 4 for float32, 2 for 16-bit, 1 for FP8
        ).block_bytes(config.block_size)
        num_gpu_blocks, num_cpu_blocks = config.pool_sizes(block_bytes, self.max_model_len)
        self.block_manager = (config.block_manager_class or BlockManager)(
            num_gpu_blocks,
            num_cpu_blocks,
            config.block_size,
            config.watermark,
            config.prefix_caching,
        )
        self.kv_cache = KVCache(
            shape.num_hidden_layers,
            num_gpu_blocks,
            shape.num_key_value_heads,
            config.block_size,
            shape.head_dim,
            num_cpu_blocks=num_cpu_blocks,
            dtype=cache_dtype,
            device=param.device,
            kernels=kernels_for(self.backend),
        )
        budget = config.token_budget(self.max_model_len)  # the scheduler's and speculation's
        self.scheduler = Scheduler(
            self.block_manager,
            config.preemption,
            config.max_num_seqs,
            budget,
            config.enable_chunked_prefill,
            config.long_prefill_token_threshold,
        )
        self.runner = ModelRunner(model, self.kv_cache, self.backend)
        # EOS: every one config.json lists (transformers' generate stops at any), and the
        # tokenizer's
        eos_ids = {*shape.eos_token_ids, tokenizer.eos_id if tokenizer is not None else None}
        self.sampler = Sampler(frozenset(eos_ids - {None}), self.max_model_len)
        self.speculator = None
        if config.speculative is not None:
            drafter = make_drafter(config.speculative, model, budget, draft_shape)
            self.speculator = Speculator(
                config.speculative, drafter, model, self.kv_cache, self.sampler, self.backend
            )
        self.seed = config.seed
        self.step_count = 0
        self.requests: dict[str, SequenceGroup] = {}  # unfinished requests only
        self._arrivals = itertools.count()
        self.in_callback: str | None = None  # whose callback runs now: see check_not_in_callback
        # A step that raised partway: its number, the error's name, the requests then in flight
        self.interrupted: tuple[int, str, list[SequenceGroup]] | None = None

    # -- requests --------------------------------------------------------------------------

    def add_request(
        self, prompt: Prompt, params: SamplingParams | None = None, request_id: str | None = None
    ) -> str:
        """Queue a request; it is admitted by a later ``step``, and its id is returned. Raises
        ``ValueError`` for a prompt that is empty, holds unknown token ids or does not fit the
        context, and ``RequestRejected`` for one that needs more blocks than the device pool
        has. ``request_id`` follows vLLM's rule (``request_limits.check_id_free``): no two
        requests in flight share an id, and the id of a finished or aborted request may be
        used again. None picks the arrival number, skipping any id in flight."""
        self.check_not_in_callback("add_request")
        if request_id is not None:  # before any event names it
            check_request_id(request_id, "pass None for an automatic one")
            check_id_free(request_id, self.requests)
        params = SamplingParams() if params is None else params  # 0 or [] is refused below
        try:
            token_ids, text = self.check_request(prompt, params)
        except RequestRejected as rejected:  # the refusal shows in the next step's events
            name = "new" if request_id is None else request_id
            self.block_manager.record(Refuse(name, rejected.num_blocks, rejected.limit))
            raise
        arrival = next(self._arrivals)
        request_id = automatic_id(arrival, self.requests) if request_id is None else request_id
        # Each request's own seed, derived from the engine's: within a generator's 64 bits.
        derived = (self.seed * 1_000_003 + arrival) % 2**64
        seed = params.seed if params.seed is not None else derived
        generator = torch.Generator(self.kv_cache.device).manual_seed(seed)
        seq = Sequence(self.sampler.new_seq_id(), token_ids, len(token_ids))
        group = SequenceGroup(request_id, arrival, params, [seq], generator, prompt=text)
        self.requests[request_id] = group
        self.scheduler.add(group)
        return request_id

    def has_unfinished(self) -> bool:
        """Whether any request is still waiting, running or swapped out."""
        return self.scheduler.has_unfinished()

    def abort_request(self, request_id: str) -> None:
        """End an unfinished request now, wherever it is (waiting, running or swapped out):
        its blocks are released and an ``Abort`` event is recorded for the next step. One rule
        for any other id: ``UnknownRequest``, a ``ValueError`` (and ``KeyError``), whether its
        request finished, was aborted already or never existed (the engine keeps no finished
        requests, and an abort that found nothing to end should not pass in silence)."""
        self.check_not_in_callback("abort_request")
        check_request_id(request_id, "pass the id add_request returned")
        if request_id not in self.requests:
            raise UnknownRequest(
                f"no unfinished request {request_id!r}: it finished, was aborted or never "
                f"existed; pass the id of one in flight, unfinished: {shown_ids(self.requests)}"
            )
        self.scheduler.abort(self.requests.pop(request_id), "aborted by its caller")
        if self.speculator is not None:  # an interrupted step may have left branches
            self.speculator.drop_branches(self.block_manager)

    def check_not_in_callback(self, action: str) -> None:
        """Refuse ``action`` (a call that changes the engine) while a caller that drives it is
        inside its callback (``in_callback`` names it: ``LLM.generate``'s ``on_step``). That
        caller owns the requests until it returns: a request added now would run with its
        output lost, one aborted or stepped to its end would vanish from the caller's results.
        Reading the engine (``has_unfinished``, the block manager's state) stays allowed."""
        if self.in_callback is not None:
            raise RuntimeError(
                f"{action} from inside {self.in_callback}: the call that owns the engine's "
                "requests until it returns would lose them; read the engine here, and change "
                "it after that call returns, or drive llm.engine yourself (add_request, step) "
                "instead of generate"
            )

    def check_not_interrupted(self) -> None:
        """Refuse a step while a request that was in flight when a step raised partway (Ctrl-C,
        an error in a student's block manager) is still in flight: the step may have reserved
        its slots, copied or swapped its blocks, and computed no token for them, so stepping on
        would fail somewhere inside, or worse, run on. Aborting those requests releases their
        blocks (``LLM.generate`` does it itself); then the engine steps again."""
        if self.interrupted is None:
            return
        number, error, in_flight = self.interrupted
        stuck = [g.request_id for g in in_flight if self.requests.get(g.request_id) is g]
        if not stuck:
            self.interrupted = None
            return
        raise RuntimeError(
            f"step {number} was interrupted partway ({error}), and request(s) {stuck} were in "
            "flight: they may hold slots for tokens never computed. Abort them "
            "(engine.abort_request) to release their blocks, and the engine steps again"
        )

    def check_request(self, prompt: Prompt, params: SamplingParams) -> tuple[list[int], str | None]:
        """Everything ``add_request`` checks, without queuing anything: the prompt's token
        ids and text, or ``ValueError`` / ``RequestRejected`` naming the problem (``TypeError``
        for a prompt or ``params`` of the wrong kind)."""
        if not isinstance(params, SamplingParams):
            raise TypeError(
                f"sampling params must be a SamplingParams, got {type(params).__name__} "
                f"{params!r:.60}: build one with SamplingParams(max_tokens=..., ...)"
            )
        token_ids, text = self.prompt_tokens(prompt)
        check_stop_tokens(params.stop_token_ids, self.model.config.vocab_size)
        check_fits(token_ids, params, self.max_model_len, self.scheduler, self.block_manager)
        return token_ids, text

    def prompt_tokens(self, prompt: Prompt) -> tuple[list[int], str | None]:
        """The prompt's token ids (and its text, when it was one), checked against the
        vocabulary (``minipaged.prompts.prompt_token_ids``)."""
        return prompt_token_ids(prompt, self.tokenizer, self.model.config.vocab_size)

    # -- one step --------------------------------------------------------------------------

    def step(self, snapshot: bool = True) -> StepOutput:
        """One iteration, in the order it happens:

        1. schedule: decode every running request, preempting the newest when the pool is
           full (§6), swap back in, admit waiting requests (``Scheduler.schedule``);
        2. allocate and copy on write: scheduling reserved each row's slots, taking blocks on
           demand (§3) and listing the copies a shared block needs (§5); speculative decoding
           forks its trees' branches on top (``Speculator.draft``);
        3. run the model: the swaps and copies, then one forward pass over the batch;
        4. sample or accept: each row's next token, forking for parallel samples and beams
           (``Sampler.sample``); the trees' verify pass keeps the longest agreed path;
        5. free: every sequence that finished releases its blocks, and its request ends when
           it was the last;
        6. record: one ``StepOutput`` (``report``).

        ``snapshot=False`` leaves the output's block state and sequences out (None): a caller
        that reads only tokens (``LLM.generate`` with nobody watching) does not pay for them.
        A step that raises partway leaves its requests half-stepped: the next is refused until
        they are aborted (``check_not_interrupted``)."""
        self.check_not_in_callback("step")
        if not isinstance(snapshot, bool):  # before anything is scheduled
            raise TypeError(f"snapshot must be True or False, got {snapshot!r}")
        self.check_not_interrupted()
        number = self.step_count + 1
        try:
            return self._run_step(snapshot)
        except BaseException as error:  # Ctrl-C, or an error inside any of the six parts
            self.interrupted = (number, type(error).__name__, list(self.requests.values()))
            raise

    def _run_step(self, snapshot: bool) -> StepOutput:
        """The six parts of ``step``, in order."""
        bm = self.block_manager
        plan = self.scheduler.schedule()  # 1, and 2: slots reserved, copy-on-write pairs listed
        self.step_count += 1
        drafted = []  # 2: the speculative branches, within what the token budget has left
        if self.speculator is not None:
            left = self.scheduler.max_num_batched_tokens - sum(
                item.num_query_tokens for item in plan.scheduled
            )
            drafted = self.speculator.draft(bm, plan, left)
        tree_moment = None
        if drafted and snapshot:
            tree_moment = self.report(tuple(bm.pop_events()), snapshot=True)
        logits = self.runner.execute(plan)  # 3
        new_tokens: dict[int, int] = {}
        sampled = self.sampler.sample(bm, plan.scheduled, logits, new_tokens)  # 4
        if drafted:
            sampled += self.speculator.verify(bm, drafted, new_tokens)
        finished = [self._output(group, error=reason) for group, reason in plan.aborted]
        for group, _ in plan.aborted:
            del self.requests[group.request_id]
        finished += self._release_finished(sampled)  # 5
        events = tuple(bm.pop_events())
        return self.report(  # 6
            (*tree_moment.events, *events) if tree_moment else events,
            new_tokens,
            tuple(finished),
            num_prefill_tokens=plan.num_prefill_tokens,
            # a tree's nodes are decoded in its verify pass
            num_decode_tokens=sum(1 for item in plan.scheduled if not item.is_prefill)
            + sum(len(d.tree) for d in drafted),
            num_cached_tokens=plan.num_cached_tokens,
            drafted=tree_moment,
            snapshot=snapshot,
            attention=self.runner.take_attention(),
        )

    def report(
        self,
        events: tuple[Event, ...] = (),
        new_tokens: dict[int, int] | None = None,
        finished: tuple[RequestOutput, ...] = (),
        *,
        num_prefill_tokens: int = 0,
        num_decode_tokens: int = 0,
        num_cached_tokens: int = 0,
        drafted: StepOutput | None = None,
        snapshot: bool = True,
        attention: tuple | None = None,
    ) -> StepOutput:
        """The one place a ``StepOutput`` is made: what a step did (its ``events``, new tokens,
        finished requests and token counts) beside the engine as it stands now (the block
        state, every live sequence, the queues), numbered ``step_count``. ``step`` reports each
        step, and the moment its speculative branches exist; with no arguments it is the
        engine before anything runs (a TUI's frame 0). ``attention``: the probe's records."""
        scheduler = self.scheduler
        return StepOutput(
            step=self.step_count,
            new_tokens=new_tokens or {},
            events=events,
            state=self.block_manager.snapshot() if snapshot else None,
            sequences=self._views() if snapshot else None,
            queues={
                name: tuple(group.request_id for group in getattr(scheduler, name))
                for name in ("waiting", "running", "swapped")
            },
            finished=finished,
            num_prefill_tokens=num_prefill_tokens,
            num_decode_tokens=num_decode_tokens,
            num_cached_tokens=num_cached_tokens,
            drafted=drafted,
            attention=attention,
        )

    def _release_finished(self, groups: list[SequenceGroup]) -> list[RequestOutput]:
        """Step 5: free every sequence of ``groups`` that is done (EOS, a stop token, its
        length), and end each request whose last sequence that was; returns their outputs."""
        outputs = []
        for group in groups:
            for seq in list(group.seqs):
                reason = self.sampler.finish_reason(group, seq)
                if reason is not None:
                    self._finish(group, seq, reason)
            if group.is_finished:
                self.scheduler.finish(group)
                del self.requests[group.request_id]
                outputs.append(self._output(group))
        return outputs

    def _finish(self, group: SequenceGroup, seq: Sequence, reason: str) -> None:
        seq.finish_reason = reason
        self.block_manager.record(Finish(seq.seq_id, reason, len(seq.token_ids)))
        self.block_manager.free(seq.seq_id)
        group.seqs.remove(seq)
        group.finished.append(seq)

    def _output(self, group: SequenceGroup, error: str | None = None) -> RequestOutput:
        outputs = [
            CompletionOutput(
                index=i,
                token_ids=seq.output_ids,
                text=self.tokenizer.decode(seq.output_ids) if self.tokenizer else "",
                cumulative_logprob=seq.cumulative_logprob,
                finish_reason=seq.finish_reason,
            )
            for i, seq in enumerate(ranked(group))
        ]
        return RequestOutput(
            group.request_id, group.prompt, group.prompt_token_ids, outputs, error=error
        )

    def _views(self) -> dict[int, SeqView]:
        views = {}
        for queue in (self.scheduler.waiting, self.scheduler.running, self.scheduler.swapped):
            for group in queue:
                for seq in group.seqs:
                    tokens = tuple(seq.token_ids)
                    view = (seq.seq_id, tokens, seq.prompt_len, group.status.value)
                    views[seq.seq_id] = SeqView(group.request_id, *view)
        return views
