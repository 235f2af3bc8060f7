"""The `mas_agent` verl agent loop: one task row -> one tree rollout -> one AgentLoopOutput per sample."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from verl_mas.dataset import AGENT_NAME, row_task
from verl_mas.env import Message, Task
from verl_mas.rollout import EnvironmentFailure, EpisodeResult, Generation, GenerationRequest, rollout_task
from verl_mas.sample import Sample
from verl_mas.verl_engine.batch import SampleTag
from verl_mas.verl_engine.config import MasConfig, mas_config_of
from verl_mas.verl_engine.routing import GenerateClient, PolicyRoutingClient
from verl_mas.verl_engine.timeline import append_records


def routing_client_for(server_manager: GenerateClient | PolicyRoutingClient, mas: MasConfig) -> PolicyRoutingClient:
    """The trainer hands a `PolicyRoutingClient`; a plain verl client serves only a single-policy router.

    Raises:
        ValueError: several policies but one plain client (the run was not started by `AtGrpoTrainer`).
    """
    router = mas.policy_router()
    if isinstance(server_manager, PolicyRoutingClient):
        if server_manager.router != router:
            raise ValueError(
                f"routing: the server client routes {dict(server_manager.router.role_to_policy)} but mas.router "
                f"gives {dict(router.role_to_policy)}"
            )
        return server_manager
    if len(router.policies) != 1:
        raise ValueError(
            f"routing: mas.router uses policies {list(router.policies)} but verl handed one LLM client; "
            "several policies need AtGrpoTrainer (python -m verl_mas.main)"
        )
    return PolicyRoutingClient({router.policies[0]: server_manager}, router)


@dataclass
class ServerGenerate:
    """The rollout's `Generate` over verl's LLM servers: K sticky requests per prompt, routed by role.

    Attributes:
        client: routes each request to its role's policy.
        tokenize: chat messages -> prompt token ids (verl's continuous-token builder, capped to prompt_length).
        decode: response token ids -> text the environment scores.
        sampling_params: verl's sampling params for this run (train or validation).
        response_length: responses are cut to this many tokens, before decoding, so text and tokens agree.
        weight_versions: the `global_steps` (weight version) each server answer reported, for staleness tags.
        generate_seconds: wall time spent waiting on the servers.
        request_spans: (policy, sent, answered) of every request, `time.time()` seconds: when each policy's
            servers had this session's requests in flight (`mas.timeline`).
    """

    client: PolicyRoutingClient
    tokenize: Callable[[list[Message]], Awaitable[list[int]]]
    decode: Callable[[list[int]], str]
    sampling_params: dict[str, Any]
    response_length: int
    weight_versions: list[int] = field(default_factory=list)
    generate_seconds: float = 0.0
    request_spans: list[tuple[str, float, float]] = field(default_factory=list)

    async def __call__(self, request: GenerationRequest) -> list[Generation]:
        prompt_ids = await self.tokenize(list(request.messages))
        policy = self.client.router.policy_of(request.role)

        async def one() -> Any:
            sent = time.time()
            try:
                return await self.client.generate(
                    request.request_id,
                    role=request.role,
                    prompt_ids=prompt_ids,
                    sampling_params=dict(self.sampling_params),
                )
            finally:
                self.request_spans.append((policy, sent, time.time()))

        started = time.perf_counter()
        outputs = await asyncio.gather(*(one() for _ in range(request.n)))
        self.generate_seconds += time.perf_counter() - started
        generations = []
        for output in outputs:
            response_ids = list(output.token_ids)[: self.response_length]
            logprobs = tuple(output.log_probs[: len(response_ids)]) if output.log_probs else None
            for key in ("min_global_steps", "max_global_steps", "global_steps"):
                if output.extra_fields.get(key) is not None:
                    self.weight_versions.append(int(output.extra_fields[key]))
            generations.append(Generation(self.decode(response_ids), tuple(prompt_ids), tuple(response_ids), logprobs))
        return generations


def session_task(row: Mapping[str, Any], session_id: int) -> Task:
    """The task of a verl row (written by `verl_mas.dataset.task_rows`), made unique per rollout session.

    The tree's uid is verl's prompt uid plus the session, so `rollout.n` > 1 sessions of one row form
    separate groups; the board comes from the row's env, seed, split and options.
    """
    uid = row.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ValueError(f"mas_agent: row has no verl uid (got {uid!r})")
    task = row_task(row, f"mas_agent row {uid}")
    return replace(task, uid=f"{uid}/{int(session_id)}")


def episode_outputs(
    result: EpisodeResult, *, eos_token_id: int, weight_versions: Sequence[int] = ()
) -> list[AgentLoopOutput]:
    """One AgentLoopOutput per sample, with its tags (`SampleTag`) and rewards in extra_fields.

    Every output sets `reward_score` to its own mixed reward and carries the episode's `reward_extra_info`
    (verl's list postprocess needs it on the last output and copies the last reward over the others; the
    trainer restores each row's reward from extra_fields["mixed_reward"]). A sample with an empty response
    is one eos token with mask 0: it keeps its reward in its group but trains no token.
    Log-probs are kept only if every sample has them, because verl stacks one put's optional fields together.
    """
    samples = result.samples
    with_logprobs = bool(samples) and all(s.logprobs is not None for s in samples)
    episode_info = {
        "acc": float(result.success),
        "episode_team_reward": float(result.team_reward),
        "episode_turns": int(result.turns),
        "invalid_moves": int(result.invalid_moves),
        "env_failures": int(result.error is not None),
    }
    versions = (
        {"min_global_steps": min(weight_versions), "max_global_steps": max(weight_versions)} if weight_versions else {}
    )
    outputs = []
    for sample in samples:
        response_ids, response_mask, logprobs = _response_of(sample, eos_token_id)
        extra = {
            **_sample_tag(sample, env_error=result.error is not None).fields(),
            **versions,
            "reward_extra_info": dict(episode_info),
        }
        outputs.append(
            AgentLoopOutput(
                prompt_ids=list(sample.prompt_ids),
                response_ids=response_ids,
                response_mask=response_mask,
                response_logprobs=logprobs if with_logprobs else None,
                reward_score=sample.reward,
                num_turns=2,  # each sample is one exchange: the role's prompt and its reply
                metrics=AgentLoopMetrics(),
                extra_fields=extra,
            )
        )
    return outputs


def _response_of(sample: Sample, eos_token_id: int) -> tuple[list[int], list[int], list[float]]:
    if not sample.response_ids:
        return [eos_token_id], [0], [0.0]
    logprobs = list(sample.logprobs) if sample.logprobs is not None else []
    return list(sample.response_ids), [1] * len(sample.response_ids), logprobs


def _sample_tag(sample: Sample, *, env_error: bool) -> SampleTag:
    return SampleTag(
        task_uid=sample.task_uid,
        role=sample.role,
        turn=sample.turn,
        policy=sample.policy,
        mixed_reward=sample.reward,
        env_error=env_error,
        valid=sample.valid,
        infra_failure=sample.infra_failure is not None,
        branch=sample.branch,
        team_reward=sample.team_reward,
        local_reward=sample.local_reward,
        continued=sample.continued,
    )


@register(AGENT_NAME)
class MasAgentLoop(AgentLoopBase):
    """Plays one task row with the AT-GRPO tree rollout through verl's LLM servers.

    Training rows (split "train") sample `mas.rollout.k` candidates per (task, role, turn); evaluation rows
    (split "eval") use the plain K = 1 rollout, so validation measures the policy, not the tree search.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.mas = mas_config_of(self.config)
        self.client = routing_client_for(self.server_manager, self.mas)
        eos = self.tokenizer.eos_token_id
        self.eos_token_id = eos if eos is not None else self.tokenizer.pad_token_id

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> list[AgentLoopOutput]:
        """Roll out the row's task; raises EnvironmentFailure when the environment failed before any sample."""
        task = session_task(kwargs, kwargs.get("session_id", 0))
        rollout = self.mas.rollout if task.split == "train" else replace(self.mas.rollout, k=1)
        generate = ServerGenerate(
            client=self.client,
            tokenize=self.ct_build_initial_tokens,
            decode=functools.partial(self.tokenizer.decode, skip_special_tokens=True),
            sampling_params=sampling_params,
            response_length=self.rollout_config.response_length,
        )
        try:
            result = await rollout_task(task, generate, self.client.router, rollout)
        finally:
            if self.mas.timeline:
                step = kwargs.get("global_steps")
                record = {"kind": "requests", "step": None if step is None else int(step), "split": task.split}
                record["task"] = task.uid
                record["spans"] = [list(span) for span in generate.request_spans]
                append_records(os.path.abspath(os.path.expanduser(self.mas.timeline)), [record])
        if not result.samples:
            raise EnvironmentFailure(f"task {task.uid}: no samples: {result.error or 'the episode had no turn'}")
        outputs = episode_outputs(result, eos_token_id=self.eos_token_id, weight_versions=generate.weight_versions)
        for output in outputs:
            output.metrics.generate_sequences = generate.generate_seconds
        return outputs
