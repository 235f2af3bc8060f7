"""Fakes for the verl engine tests: LLM servers (tiny model or scripted), a server manager, a CPU worker."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from verl_mas.local.generator import SamplingConfig, eos_token_ids, sample_batch
from verl_mas.local.model import build_tiny_model
from verl_mas.local.tokenizer import train_tokenizer

WEIGHT_VERSION = 7  # the `global_steps` every fake server reports


def tiny_tokenizer():
    texts = [
        f"role={r} value={v} target={t} moves={m} {d}"
        for r in "ab"
        for v in range(-5, 10)
        for t in range(4, 10)
        for m in range(3)
        for d in (-3, -1, 0, 1, 2, 3)
    ]
    return train_tokenizer(texts, vocab_size=300)


@dataclass
class Call:
    request_id: str
    prompt_ids: list[int]
    sampling_params: dict[str, Any]


@dataclass
class TinyModelServer:
    """verl's LLMServerClient contract served by a tiny random Llama: real sampled tokens and log-probs."""

    tokenizer: Any
    name: str = "server"
    max_new_tokens: int = 6
    seed: int = 0
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.model = build_tiny_model(len(self.tokenizer), hidden=32, layers=1, heads=2, seed=self.seed)
        self.eos = eos_token_ids(self.model, self.tokenizer)
        self.rng = torch.Generator().manual_seed(self.seed)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        if kwargs:
            raise TypeError(f"fake server got unexpected generate arguments {sorted(kwargs)}")
        self.calls.append(Call(request_id, list(prompt_ids), dict(sampling_params)))
        config = SamplingConfig(
            temperature=float(sampling_params.get("temperature", 1.0)), max_new_tokens=self.max_new_tokens
        )
        (sequence,) = sample_batch(
            self.model, [prompt_ids], config, eos_ids=self.eos, pad_id=self.tokenizer.pad_token_id, generator=self.rng
        )
        return TokenOutput(
            token_ids=list(sequence.response_ids),
            log_probs=list(sequence.logprobs),
            stop_reason="completed",
            extra_fields={"global_steps": WEIGHT_VERSION},
        )


@dataclass
class ScriptedServer:
    """Replies with texts chosen by `script(prompt_text, call_number)`, tokenized; log-prob -0.25 per token."""

    tokenizer: Any
    script: Callable[[str, int], str]
    name: str = "scripted"
    calls: list[Call] = field(default_factory=list)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        if kwargs:
            raise TypeError(f"fake server got unexpected generate arguments {sorted(kwargs)}")
        self.calls.append(Call(request_id, list(prompt_ids), dict(sampling_params)))
        text = self.script(self.tokenizer.decode(prompt_ids, skip_special_tokens=True), len(self.calls) - 1)
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), extra_fields={"global_steps": WEIGHT_VERSION})


@dataclass
class FakeServerManager:
    """The part of verl's LLMServerManager the trainer hands to the agent loop: one client per manager."""

    client: Any

    def get_client(self):
        return self.client


def loop_config(mas: dict, prompt_length: int = 256, response_length: int = 16):
    """The slice of verl's whole config an agent loop reads, plus the `mas:` group."""
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": prompt_length, "response_length": response_length}},
            "data": {},
            "mas": mas,
        }
    )


def make_agent_loop(config, server_manager, tokenizer):
    from verl_mas.verl_engine.agent_loop import MasAgentLoop

    return MasAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server_manager,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
    )


def counter_row(uid: str, seed: int = 3, split: str = "train", index: int = 0) -> dict:
    """A verl row for the test kit's counter env, as the agent-loop worker passes it to `run`."""
    return {
        "uid": uid,
        "session_id": 0,
        "data_source": "verl_mas/counter",
        "agent_name": "mas_agent",
        "raw_prompt": [{"role": "user", "content": "start"}],
        "extra_info": {"env": "counter", "seed": seed, "split": split, "options": "{}", "index": index},
        "global_steps": 1,
        "index": index,
    }


class PolicyEchoWorker(Worker):
    """A CPU worker that reports which policy it serves and the worker-group prefix Ray gave it."""

    def __init__(self, policy: str) -> None:
        super().__init__()
        self.policy = policy

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self) -> tuple[str, str, int]:
        return self.policy, os.environ["WG_PREFIX"], self.rank
