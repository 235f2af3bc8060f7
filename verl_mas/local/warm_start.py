"""The supervised warm start: expert pairs from DAgger-style play, the tokenizer they train, and the loss and lr."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from verl_mas.dataset import split_tasks
from verl_mas.env import Message, make_env
from verl_mas.local.config import LocalTrainConfig, WarmStartConfig
from verl_mas.local.generator import SamplingConfig
from verl_mas.local.logprob import sequence_logprobs
from verl_mas.local.tokenizer import render_prompt, train_tokenizer
from verl_mas.rollout import Generation, GenerationRequest, RolloutConfig, rollout_tasks
from verl_mas.router import PolicyRouter
from verl_mas.scripted import corrupt

WARM_START_FIRST_INDEX = 10**6  # expert episodes use train boards far past those the RL steps reach


@dataclass(frozen=True)
class ExpertPair:
    """One warm-start example: the expert's move for `role` (served by `policy`) at the prompt `messages`."""

    policy: str
    role: str
    messages: tuple[Message, ...]
    move: str


@dataclass(frozen=True)
class CutMoves:
    """Expert moves longer (with eos) than the sampling limit `key` of their role: how many, and the longest."""

    key: str
    limit: int
    moves: int
    cut: int
    longest: int


def warm_start_env_options(config: LocalTrainConfig) -> dict[str, Any]:
    """The env options of the warm-start boards: `env_options` with `warm_start.env_options` on top."""
    return {**config.env_options, **config.warm_start.env_options}


def check_warm_start_roles(config: LocalTrainConfig, roles: Sequence[str]) -> None:
    """The warm-start boards' env must be valid and have the roles RL trains (checked even when no warm start runs).

    Raises:
        ValueError: `warm_start.env_options` the env refuses, or that give other roles.
    """
    if not config.warm_start.env_options:  # the same env as training's, already built
        return
    try:
        warm_roles = make_env(config.env, **warm_start_env_options(config)).workflow().roles
    except ValueError as error:
        raise ValueError(f"warm_start.env_options: {error}") from error
    if list(warm_roles) != list(roles):
        raise ValueError(
            f"warm_start.env_options give the roles {list(warm_roles)}, but training has {list(roles)}: "
            "the warm start must teach the roles RL trains"
        )


class ExpertRecorder:
    """A `Generate` that records (policy, prompt, expert move) for the warm start and plays the expert's move with
    probability `play_skill`, else a wrong one: with probability `near_misses` one of the env's near misses (where it
    gives any), else a garbled copy of the expert's. Deterministic in seed, request and turn. Only the moves of
    `corrupt_roles` (None: every role) are ever wrong."""

    def __init__(
        self,
        play_skill: float = 1.0,
        seed: int = 0,
        corrupt_roles: tuple[str, ...] | None = None,
        near_misses: float = 0.0,
    ) -> None:
        self.play_skill = play_skill
        self.seed = seed
        self.corrupt_roles = None if corrupt_roles is None else frozenset(corrupt_roles)
        self.near_misses = near_misses
        self.pairs: list[ExpertPair] = []

    async def __call__(self, request: GenerationRequest) -> list[Generation]:
        if request.expert is None:
            raise ValueError(f"the environment gives no expert move for {request.request_id}: no warm start possible")
        self.pairs.append(ExpertPair(request.policy, request.role, request.messages, request.expert))
        rng = random.Random(f"{self.seed}|{request.request_id}|{request.turn}")
        exempt = self.corrupt_roles is not None and request.role not in self.corrupt_roles
        played = request.expert if exempt or rng.random() < self.play_skill else self._wrong_move(request, rng)
        return [Generation(text=played, prompt_ids=(), response_ids=())] * request.n

    def _wrong_move(self, request: GenerationRequest, rng: random.Random) -> str:
        # No draw without near misses in play: a warm start without them replays the same moves as before they existed
        if self.near_misses > 0 and request.near_misses and rng.random() < self.near_misses:
            return rng.choice(request.near_misses)
        return corrupt(request.expert, rng)


def collect_expert_pairs(config: LocalTrainConfig, router: PolicyRouter) -> list[ExpertPair]:
    """Expert moves at the states of warm-start episodes on training boards (never evaluation ones)."""
    warm_start = config.warm_start
    recorder = ExpertRecorder(warm_start.play_skill, config.seed, warm_start.corrupt_roles, warm_start.near_misses)
    options = warm_start_env_options(config)
    tasks = split_tasks(config.env, "train", config.warm_start.tasks, config.seed, options, WARM_START_FIRST_INDEX)
    rollout = RolloutConfig(k=1, with_expert=True, with_near_misses=warm_start.near_misses > 0)
    asyncio.run(rollout_tasks(tasks, recorder, router, rollout))
    return recorder.pairs


def expert_tokenizer(pairs: list[ExpertPair], vocab_size: int):
    """A tokenizer trained on the text of the expert data: every prompt message and every expert move."""
    texts = [m["content"] for pair in pairs for m in pair.messages] + [pair.move for pair in pairs]
    return train_tokenizer(texts, vocab_size=vocab_size)


def expert_move_lengths(tokenizer, pairs: Sequence[ExpertPair]) -> dict[str, dict[int, int]]:
    """Per role, how many expert moves take each length in tokens, eos included (what a reply needs of its limit)."""
    lengths: dict[str, Counter[int]] = defaultdict(Counter)
    for pair in pairs:
        lengths[pair.role][len(tokenizer.encode(pair.move, add_special_tokens=False)) + 1] += 1
    return {role: dict(sorted(found.items())) for role, found in sorted(lengths.items())}


def expert_moves_cut(lengths: Mapping[str, Mapping[int, int]], sampling: SamplingConfig) -> list[CutMoves]:
    """Per sampling limit that applies to some role: how many of those roles' expert moves (`expert_move_lengths`)
    exceed it."""
    by_limit: dict[tuple[str, int], Counter[int]] = defaultdict(Counter)
    for role, found in lengths.items():
        by_limit[sampling.limit_for(role)].update(found)
    return [
        CutMoves(key, limit, sum(found.values()), sum(n for length, n in found.items() if length > limit), max(found))
        for (key, limit), found in sorted(by_limit.items())
    ]


def cut_moves_text(cut: CutMoves) -> str:
    """What a cut limit does, and the value that leaves room."""
    return (
        f"{cut.cut} of {cut.moves} expert moves are longer than {cut.key}={cut.limit} "
        f"(longest: {cut.longest} tokens with eos); sampled replies of that length are cut. "
        f"Set {cut.key}={cut.longest} to leave room."
    )


def warn_of_cut_moves(
    lengths: Mapping[str, Mapping[int, int]], sampling: SamplingConfig, log: Callable[[str], None]
) -> None:
    """Log each sampling limit that expert moves exceed: the warm start teaches whole moves, and a sampler that stops
    short turns each such move into a cut reply."""
    for cut in expert_moves_cut(lengths, sampling):
        if cut.cut:
            log(f"warning: {cut_moves_text(cut)}")


def warm_start(
    model: torch.nn.Module,
    tokenizer,
    pairs: list[tuple[tuple[Message, ...], str]],
    config: WarmStartConfig,
    seed: int,
    log: Callable[[str], None] | None = None,
) -> float:
    """Cross-entropy on the expert's response tokens (prompt tokens masked); returns the last epoch's mean loss.
    With `log`, one line per epoch (its mean loss and seconds): a pretrained model's epoch takes minutes on a CPU."""
    examples = []
    for messages, move in pairs:
        prompt = render_prompt(tokenizer, messages)
        response = tokenizer.encode(move, add_special_tokens=False) + [tokenizer.eos_token_id]
        examples.append((prompt, response))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr, weight_decay=0.0)
    total_batches = config.epochs * math.ceil(len(examples) / config.batch_size)
    batch_index = 0
    order_rng = random.Random(seed)
    model.train()
    last_losses: list[float] = []
    for epoch in range(config.epochs):
        epoch_started = time.perf_counter()
        order_rng.shuffle(examples)
        last_losses = []
        for start in range(0, len(examples), config.batch_size):
            prompts, responses = zip(*examples[start : start + config.batch_size], strict=True)
            for group in optimizer.param_groups:
                group["lr"] = warm_start_lr(config, batch_index, total_batches)
            batch_index += 1
            # Mean cross-entropy over the response tokens; logits are computed at response positions only.
            loss = -torch.cat(sequence_logprobs(model, prompts, responses, 1.0, tokenizer.pad_token_id)).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            last_losses.append(loss.item())
        if log is not None:
            seconds = time.perf_counter() - epoch_started
            log(f"epoch {epoch + 1}/{config.epochs}: mean loss {np.mean(last_losses):.3f} ({seconds:.0f} s)")
    return float(np.mean(last_losses)) if last_losses else 0.0


def warm_start_lr(config: WarmStartConfig, batch_index: int, total_batches: int) -> float:
    """The warm start's lr for one batch: constant, or a half cosine from `config.lr` (batch 0) towards zero."""
    if config.lr_schedule == "constant":
        return config.lr
    return config.lr * 0.5 * (1.0 + math.cos(math.pi * batch_index / total_batches))
