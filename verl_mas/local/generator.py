"""Batched sampling with a KV cache for the local engine, and the async `Generate` that gathers concurrent requests.

Sampling draws from softmax(logits / temperature), optionally truncated by top-k / top-p, and records the
log-prob of each chosen token under the untruncated temperature-scaled distribution: exactly what
`logprob.response_logprobs` recomputes at training time. No repetition penalty or other logits processor is
applied, because training would not see it (at-grpo notes, defect 11). Top-k / top-p only restrict which tokens
can be drawn; the log-probs stay those of the policy being trained.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from verl_mas.local.logprob import prefill, scaled_log_softmax
from verl_mas.local.tokenizer import render_prompt
from verl_mas.rollout import Generation, GenerationRequest, offloaded_steps


@dataclass(frozen=True)
class SamplingConfig:
    """How responses are drawn. `top_k` 0 and `top_p` 1.0 disable truncation; `greedy` takes the argmax.

    `role_max_new_tokens` replaces `max_new_tokens` for the named roles: a plan agent's list of moves needs far fewer
    tokens than a tool agent's program, and a confused policy otherwise runs on to the longer limit.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64
    greedy: bool = False
    role_max_new_tokens: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"sampling.temperature must be > 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"sampling.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"sampling.top_k must be >= 0 (0: off), got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"sampling.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        for role, limit in self.role_max_new_tokens.items():
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(f"sampling.role_max_new_tokens.{role} must be an integer >= 1, got {limit!r}")

    def limit_for(self, role: str) -> tuple[str, int]:
        """The config key that limits `role`'s replies, and its value."""
        if role in self.role_max_new_tokens:
            return f"sampling.role_max_new_tokens.{role}", self.role_max_new_tokens[role]
        return "sampling.max_new_tokens", self.max_new_tokens


@dataclass(frozen=True)
class SampledSequence:
    """One response: its tokens (ending with eos unless cut at max_new_tokens) and their sampler log-probs."""

    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...]


@dataclass(frozen=True)
class PolicyModel:
    """The model and tokenizer that serve one policy; several policies may share one instance.

    `adapter` names the peft LoRA adapter of this policy on a shared base model: it is activated before
    the policy's requests are sampled, and requests for different adapters are never in one batch.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    adapter: str | None = None


@dataclass
class GeneratorStats:
    """Counters that show how well requests were batched."""

    requests: int = 0
    flushes: int = 0  # times the pending requests were taken and served
    batched_calls: int = 0  # calls of sample_batch (one per model per flush, more if over max_batch_sequences)
    forward_calls: int = 0  # model forward passes (prefill + decode steps)
    sequences: int = 0
    generated_tokens: int = 0
    sampling_s: float = 0.0  # inside sample_batch: the model's forward passes and token choice
    serving_s: float = 0.0  # all of serving: sampling plus prompt rendering, tokenizing and decoding


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """The tokenizer's eos plus the model's generation-config eos ids (real chat checkpoints often list several)."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if configured is not None:
        ids.update(configured if isinstance(configured, (list, tuple)) else [configured])
    if not ids:
        raise ValueError("generator: neither the tokenizer nor the model defines an eos token")
    return frozenset(ids)


def _choose_tokens(logprobs: torch.Tensor, config: SamplingConfig, generator: torch.Generator) -> torch.Tensor:
    """Pick one token per row from temperature-scaled log-probs, restricted by top-k / top-p when set."""
    if config.greedy:
        return logprobs.argmax(dim=-1)
    allowed = logprobs
    if config.top_k and config.top_k < allowed.shape[-1]:
        kth_best = torch.topk(allowed, config.top_k, dim=-1).values[:, -1:]
        allowed = allowed.masked_fill(allowed < kth_best, float("-inf"))
    if config.top_p < 1.0:
        sorted_lp, order = torch.sort(allowed, dim=-1, descending=True)
        sorted_probs = sorted_lp.exp()
        # Drop a token when the tokens ranked above it already reach top_p; the best token always stays.
        drop_sorted = sorted_probs.cumsum(-1) - sorted_probs >= config.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        allowed = allowed.masked_fill(drop, float("-inf"))
    probs = torch.softmax(allowed, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.inference_mode()
def sample_batch(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    config: SamplingConfig,
    *,
    eos_ids: frozenset[int],
    pad_id: int,
    generator: torch.Generator,
    stats: GeneratorStats | None = None,
    row_limits: Sequence[int] | None = None,
) -> list[SampledSequence]:
    """Sample one response per prompt row in one batch, with a KV cache.

    Identical prompt rows (the n copies of one request) are prefilled once and their cache rows repeated.
    Prompts are left-padded and positions count real tokens only, so a row's result does not depend on what
    it was batched with. Finished rows are dropped from the batch; a row stops at eos (kept) or at its token
    limit: `row_limits[i]` for row i when given, else max_new_tokens.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("sample_batch: every prompt row needs at least one token")
    limits = list(row_limits) if row_limits is not None else [config.max_new_tokens] * len(prompts)
    if len(limits) != len(prompts) or min(limits) < 1:
        raise ValueError(f"sample_batch: need one token limit >= 1 per prompt row, got {limits}")
    position_limit = getattr(model.config, "max_position_embeddings", None)
    longest = max(len(p) for p in prompts)
    row, need = max(enumerate(len(p) + n for p, n in zip(prompts, limits, strict=True)), key=lambda item: item[1])
    if position_limit is not None and need > position_limit:
        raise ValueError(
            f"sample_batch: prompt of {len(prompts[row])} tokens + max_new_tokens {limits[row]} exceeds the "
            f"model's max_position_embeddings {position_limit}"
        )
    device = next(model.parameters()).device
    unique_index: dict[tuple[int, ...], int] = {}
    row_prompt = [unique_index.setdefault(tuple(p), len(unique_index)) for p in prompts]
    unique_prompts = list(unique_index)

    input_ids = torch.full((len(unique_prompts), longest), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for i, prompt in enumerate(unique_prompts):
        input_ids[i, longest - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[i, longest - len(prompt) :] = 1
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)

    was_training = model.training
    model.eval()
    try:
        out = prefill(model, input_ids, attention_mask)
        if stats is not None:
            stats.forward_calls += 1
        rows = torch.tensor(row_prompt, dtype=torch.long, device=device)
        cache = out.past_key_values
        cache.batch_select_indices(rows)
        logits = out.logits[rows, -1, :]
        attention_mask = attention_mask[rows]
        next_position = attention_mask.sum(-1)
        active = torch.arange(len(prompts), device=device)  # which output row each batch row is
        eos = torch.tensor(sorted(eos_ids), dtype=torch.long, device=device)
        row_limit = torch.tensor(limits, dtype=torch.long, device=device)
        responses: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        for step in range(max(limits)):
            step_logprobs = scaled_log_softmax(logits, config.temperature)
            tokens = _choose_tokens(step_logprobs, config, generator)
            chosen = step_logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
            for row, token, logprob in zip(active.tolist(), tokens.tolist(), chosen.tolist(), strict=True):
                responses[row].append(token)
                logprobs[row].append(logprob)
            running = ~torch.isin(tokens, eos) & (row_limit[active] > step + 1)
            if not running.any():
                break
            if not running.all():
                keep = running.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                attention_mask, next_position, active, tokens = (
                    attention_mask[keep],
                    next_position[keep],
                    active[keep],
                    tokens[keep],
                )
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(active), 1))], dim=-1)
            out = model(
                input_ids=tokens.unsqueeze(-1),
                attention_mask=attention_mask,
                position_ids=next_position.unsqueeze(-1),
                past_key_values=cache,
                use_cache=True,
            )
            if stats is not None:
                stats.forward_calls += 1
            next_position = next_position + 1
            logits = out.logits[:, -1, :]
    finally:
        model.train(was_training)
    return [SampledSequence(tuple(r), tuple(lp)) for r, lp in zip(responses, logprobs, strict=True)]


@dataclass
class _Pending:
    request: GenerationRequest
    future: asyncio.Future


class BatchingGenerator:
    """`Generate` for one or several policies: requests that arrive together are served by one batch per model.

    A request waits until the event loop has gone one full tick without a new request arriving (plus
    `window_s`, when set), so everything an `asyncio.gather` fans out, however deeply nested, lands in the
    same batch. Requests of policies that share a model are batched together. Sampling runs synchronously
    on the event loop: batch composition then depends only on the order requests were made, so the same
    seed gives the same samples. Env steps that run in threads (model-written code) would make both depend on
    which thread finished first, so a batch also waits for those in flight and is then served in the rollout's
    request order.
    """

    def __init__(
        self,
        policies: Mapping[str, PolicyModel | tuple[PreTrainedModel, PreTrainedTokenizerBase]],
        sampling: SamplingConfig,
        *,
        seed: int = 0,
        max_batch_sequences: int = 256,
        window_s: float = 0.0,
    ) -> None:
        if not policies:
            raise ValueError("BatchingGenerator: no policies")
        if max_batch_sequences < 1:
            raise ValueError(f"max_batch_sequences must be >= 1, got {max_batch_sequences}")
        self.policies = {name: p if isinstance(p, PolicyModel) else PolicyModel(*p) for name, p in policies.items()}
        self.sampling = sampling
        self.max_batch_sequences = max_batch_sequences
        self.window_s = window_s
        self.stats = GeneratorStats()
        device = next(next(iter(self.policies.values())).model.parameters()).device
        self._rng = torch.Generator(device=device).manual_seed(seed)
        self._pending: list[_Pending] = []
        self._flusher: asyncio.Task | None = None

    async def __call__(self, request: GenerationRequest) -> list[Generation]:
        if request.policy not in self.policies:
            raise KeyError(f"generator: unknown policy {request.policy!r}; known: {sorted(self.policies)}")
        if request.n < 1:
            raise ValueError(f"generator: request {request.request_id} asks for n={request.n} samples")
        offloaded_steps().lockstep = True
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(request, future))
        self.stats.requests += 1
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_when_settled())
        return await future

    async def _flush_when_settled(self) -> None:
        if self.window_s > 0:
            await asyncio.sleep(self.window_s)
        steps = offloaded_steps()
        while True:
            seen = len(self._pending)
            await asyncio.sleep(0)
            if seen == len(self._pending) and steps.in_flight == 0:
                break
            await steps.idle.wait()  # each env step in a thread ends in a request or in its episode's end
        batch, self._pending, self._flusher = self._pending, [], None
        if steps.ran:  # arrivals followed thread timing: serve in the rollout's order instead
            batch.sort(key=lambda item: item.request.order)
        self.stats.flushes += 1
        by_model: dict[tuple[int, str | None], list[_Pending]] = {}
        for item in batch:
            if not item.future.cancelled():
                policy = self.policies[item.request.policy]
                by_model.setdefault((id(policy.model), policy.adapter), []).append(item)
        for items in by_model.values():
            try:
                self._serve(items)
            except Exception as exc:  # forwarded to every caller of this batch; nothing is swallowed
                for item in items:
                    if not item.future.done():
                        item.future.set_exception(exc)

    def rng_state(self) -> torch.Tensor:
        """The sampling generator's state, for checkpoints (sampling is the only consumer of this stream)."""
        return self._rng.get_state()

    def set_rng_state(self, state: torch.Tensor) -> None:
        self._rng.set_state(state)

    def _serve(self, items: list[_Pending]) -> None:
        """Sample every request of one model (and adapter), in chunks of at most max_batch_sequences rows."""
        started = time.perf_counter()
        policy = self.policies[items[0].request.policy]
        if policy.adapter is not None:
            policy.model.set_adapter(policy.adapter)
        tokenizer = policy.tokenizer
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos_ids = eos_token_ids(policy.model, tokenizer)
        rows: list[tuple[int, tuple[int, ...], int]] = []  # (item index, prompt ids, token limit), n rows per request
        for index, item in enumerate(items):
            prompt_ids = tuple(render_prompt(tokenizer, item.request.messages))
            _, limit = self.sampling.limit_for(item.request.role)
            rows.extend((index, prompt_ids, limit) for _ in range(item.request.n))
        results: list[list[Generation]] = [[] for _ in items]
        for start in range(0, len(rows), self.max_batch_sequences):
            chunk = rows[start : start + self.max_batch_sequences]
            sampling_started = time.perf_counter()
            sampled = sample_batch(
                policy.model,
                [prompt for _, prompt, _ in chunk],
                self.sampling,
                eos_ids=eos_ids,
                pad_id=pad_id,
                generator=self._rng,
                stats=self.stats,
                row_limits=[limit for _, _, limit in chunk],
            )
            self.stats.sampling_s += time.perf_counter() - sampling_started
            self.stats.batched_calls += 1
            for (index, prompt, _), seq in zip(chunk, sampled, strict=True):
                text = tokenizer.decode(list(seq.response_ids), skip_special_tokens=True)
                results[index].append(Generation(text, prompt, seq.response_ids, seq.logprobs))
                self.stats.generated_tokens += len(seq.response_ids)
            self.stats.sequences += len(chunk)
        for item, generations in zip(items, results, strict=True):
            if not item.future.done():
                item.future.set_result(generations)
        self.stats.serving_s += time.perf_counter() - started
