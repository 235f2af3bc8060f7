"""The AT-GRPO tree rollout (K candidates per role and turn, best continues) and the plain K = 1 rollout."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from verl_mas.env import INFRA_FAILURE, Message, MultiAgentEnv, StepResult, Task, make_env
from verl_mas.offload import offloaded_steps, step_in_thread
from verl_mas.router import PolicyRouter
from verl_mas.sample import Sample

logger = logging.getLogger(__name__)

SelectRule = Literal["reward", "team_reward"]


@dataclass(frozen=True)
class GenerationRequest:
    """K samples for one rendered prompt. `request_id` is stable per (task, role) conversation.

    `expert` carries the environment's correct move only when `RolloutConfig.with_expert` is set, and `near_misses`
    its plausible wrong ones only when `with_near_misses` is set too: for scripted policies and for collecting
    warm-start data, never for model generation.
    """

    request_id: str
    policy: str
    role: str
    messages: tuple[Message, ...]
    n: int
    turn: int = 0
    expert: str | None = None
    near_misses: tuple[str, ...] = ()
    # (task, episode, role) positions in the rollout: a batching generator serves a batch in this order, so the
    # order in which threads finish env steps cannot change which request gets which random draws
    order: tuple[int, ...] = ()


@dataclass(frozen=True)
class Generation:
    """One sampled response with the token ids the sampler saw and produced."""

    text: str
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None = None


Generate = Callable[[GenerationRequest], Awaitable[Sequence[Generation]]]
EnvFactory = Callable[[Task], MultiAgentEnv]


@dataclass(frozen=True)
class RolloutConfig:
    """Tree-rollout settings.

    Attributes:
        k: candidates per (task, role, turn); 1 gives the plain rollout used for evaluation.
        alpha: weight of the team reward in the mixed reward alpha * team + local.
        max_turns: cap on turns; None uses the environment's workflow limit.
        select: which score picks the continuing branch ("reward": the mixed reward).
        with_expert: attach the environment's expert move to each generation request.
        with_near_misses: with `with_expert`, also its near misses (an env may judge programs to find them).
    """

    k: int = 8
    alpha: float = 1.0
    max_turns: int | None = None
    select: SelectRule = "reward"
    with_expert: bool = False
    with_near_misses: bool = False

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"rollout.k must be >= 1, got {self.k}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"rollout.max_turns must be >= 1 or None, got {self.max_turns}")
        if self.select not in ("reward", "team_reward"):
            raise ValueError(f"rollout.select must be 'reward' or 'team_reward', got {self.select!r}")
        alpha = self.alpha
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not math.isfinite(alpha) or alpha < 0:
            raise ValueError(f"rollout.alpha must be a finite number >= 0, got {alpha!r}")


@dataclass
class EpisodeResult:
    """Everything one task's rollout produced. `error` is set when the environment raised; `move_infos[i]` is the
    environment's `StepResult.info` for the move of `samples[i]`."""

    task: Task
    samples: list[Sample] = field(default_factory=list)
    move_infos: list[Mapping[str, Any]] = field(default_factory=list)
    success: bool = False
    turns: int = 0
    team_reward: float = 0.0
    invalid_moves: int = 0
    error: str | None = None


class EnvironmentFailure(RuntimeError):
    """The environment raised: the task is abandoned, the batch goes on."""


def default_env_factory(task: Task) -> MultiAgentEnv:
    env = make_env(task.env, **task.options)
    env.reset(task)
    return env


def _require_unique_uids(tasks: Sequence[Task]) -> None:
    uids = [t.uid for t in tasks]
    if len(set(uids)) != len(uids):
        raise ValueError("rollout: task uids must be unique within a batch")


async def rollout_tasks(
    tasks: Sequence[Task],
    generate: Generate,
    router: PolicyRouter,
    config: RolloutConfig,
    env_factory: EnvFactory = default_env_factory,
) -> list[EpisodeResult]:
    """Roll out every task concurrently; results are in task order."""
    _require_unique_uids(tasks)
    episodes = (rollout_task(t, generate, router, config, env_factory, (i,)) for i, t in enumerate(tasks))
    return list(await asyncio.gather(*episodes))


async def rollout_independent(
    tasks: Sequence[Task],
    generate: Generate,
    router: PolicyRouter,
    config: RolloutConfig,
    env_factory: EnvFactory = default_env_factory,
) -> list[EpisodeResult]:
    """The no-tree baseline: `config.k` independent K = 1 episodes per task, all in flight at once.

    Episode j of a task tags its samples with branch j and keeps the task's uid, so a task's episodes form its
    groups (no candidate is scored on a clone). Results are task-major: task 0's k episodes, then task 1's, ...
    """
    _require_unique_uids(tasks)
    single = dataclasses.replace(config, k=1)
    results = await asyncio.gather(
        *(
            rollout_task(t, generate, router, single, env_factory, (i, j))
            for i, t in enumerate(tasks)
            for j in range(config.k)
        )
    )
    for index, result in enumerate(results):
        result.samples = [dataclasses.replace(s, branch=index % config.k) for s in result.samples]
    return list(results)


async def rollout_task(
    task: Task,
    generate: Generate,
    router: PolicyRouter,
    config: RolloutConfig,
    env_factory: EnvFactory = default_env_factory,
    order: tuple[int, ...] = (),
) -> EpisodeResult:
    """Play one task with tree sampling. Environment exceptions are caught here and recorded.

    `order` is the episode's position among those rolled out together (its requests carry it, with the role's).
    """
    result = EpisodeResult(task=task)
    steps = offloaded_steps()
    if config.with_expert:
        steps.lockstep = True  # see verl_mas.offload.OffloadedSteps
    blocking = False
    try:
        state = _guard(lambda: env_factory(task), task, "reset")
        # Read once: an episode of a blocking env counts among those a lockstep barrier waits for until it is over.
        blocking = bool(_guard(lambda: state.blocking_step, task, "blocking_step"))
        steps.on_the_way += blocking
        workflow = _guard(state.workflow, task, "workflow")
        max_turns = min(workflow.max_turns, config.max_turns or workflow.max_turns)
        last_team_reward = 0.0  # team reward of the state the episode is in: after the chosen (or replayed) moves
        for turn in range(max_turns):
            if _guard(lambda state=state: state.done, task, "done"):
                break
            if workflow.mode == "sequential":
                for role in workflow.roles:
                    if _guard(lambda state=state: state.done, task, "done"):
                        break
                    step = _tree_step(state, task, (role,), turn, generate, router, config, result, order, blocking)
                    state = (await step)[role][0]
                    last_team_reward = next(s.team_reward for s in reversed(result.samples) if s.continued)
            else:
                step = _tree_step(state, task, workflow.roles, turn, generate, router, config, result, order, blocking)
                state, last_team_reward = await _apply_joint(state, task, workflow.roles, await step, order, blocking)
            result.turns = turn + 1
        result.success = bool(_guard(state.success, task, "success"))
        result.team_reward = last_team_reward
    except EnvironmentFailure as exc:
        result.error = str(exc)
        logger.warning("task %s abandoned: %s", task.uid, exc)
    finally:
        if blocking:
            steps.leave()
    return result


async def _tree_step(
    state: MultiAgentEnv,
    task: Task,
    roles: tuple[str, ...],
    turn: int,
    generate: Generate,
    router: PolicyRouter,
    config: RolloutConfig,
    result: EpisodeResult,
    order: tuple[int, ...],
    blocking: bool,
) -> dict[str, tuple[MultiAgentEnv, str]]:
    """Sample K candidates for each of `roles` against the same `state`; return each role's best clone and text."""
    requests = [
        GenerationRequest(
            request_id=f"{task.uid}/{role}",
            policy=router.policy_of(role),
            role=role,
            messages=tuple(_guard(lambda r=role: state.observe(r), task, f"observe({role})")),
            n=config.k,
            turn=turn,
            expert=_guard(lambda r=role: state.expert(r), task, f"expert({role})") if config.with_expert else None,
            near_misses=_guard(lambda r=role: tuple(state.near_misses(r)), task, f"near_misses({role})")
            if config.with_expert and config.with_near_misses
            else (),
            order=(*order, index),
        )
        for index, role in enumerate(roles)
    ]
    generations = await asyncio.gather(*(generate(req) for req in requests))
    best_states: dict[str, tuple[MultiAgentEnv, str]] = {}
    for req, candidates in zip(requests, generations, strict=True):
        if len(candidates) != config.k:
            raise RuntimeError(
                f"generate returned {len(candidates)} candidates for {req.request_id}, expected {config.k}"
            )
        # Each candidate is scored on its own clone of the same state, so rewards reflect that move alone.
        branches = [_guard(state.clone, task, "clone") for _ in candidates]
        moves = [lambda b=b, r=req.role, t=g.text: b.step(r, t) for b, g in zip(branches, candidates, strict=True)]
        steps = await _run_steps(moves, task, f"step({req.role})", req.order, blocking)
        rewards = [config.alpha * s.team_reward + s.local_reward for s in steps]
        scores = rewards if config.select == "reward" else [s.team_reward for s in steps]
        # a candidate the judge could not run goes on only if every one failed so; ties: lowest index
        best = max(range(len(scores)), key=lambda i: (INFRA_FAILURE not in steps[i].info, scores[i], -i))
        for branch, (gen, step, reward) in enumerate(zip(candidates, steps, rewards, strict=True)):
            result.samples.append(_make_sample(task, req, turn, branch, gen, step, reward, branch == best))
            result.move_infos.append(step.info)
            result.invalid_moves += int(not step.valid)
        best_states[req.role] = (branches[best], candidates[best].text)
    return best_states


async def _apply_joint(
    state: MultiAgentEnv,
    task: Task,
    roles: tuple[str, ...],
    chosen: dict[str, tuple[MultiAgentEnv, str]],
    order: tuple[int, ...],
    blocking: bool,
) -> tuple[MultiAgentEnv, float]:
    """Parallel workflow: replay each role's chosen move, in role order, on one fresh clone of `state`; return it
    with the team reward of the last replayed move (each candidate was scored without the other roles' moves)."""
    joint = _guard(state.clone, task, "clone")
    team_reward = 0.0
    for index, role in enumerate(roles):
        text = chosen[role][1]
        replayed = await _run_steps(
            [lambda r=role, t=text: joint.step(r, t)], task, f"step({role})", (*order, index), blocking
        )
        team_reward = replayed[0].team_reward
    return joint, float(team_reward)


async def _run_steps(
    moves: Sequence[Callable[[], StepResult]], task: Task, what: str, order: tuple[int, ...], blocking: bool
) -> list[StepResult]:
    """Run `moves`, steps on distinct env clones: for a `blocking` env (its steps run model-written code) all at
    once in worker threads, then in lockstep to the barrier at `order` (see verl_mas.offload); else one by one on
    the event loop."""
    if not blocking:
        return [_guard(move, task, what) for move in moves]
    guarded = [lambda move=move: _guard(move, task, what) for move in moves]
    results = list(await asyncio.gather(*(step_in_thread(move) for move in guarded)))
    steps = offloaded_steps()
    if steps.lockstep:
        await steps.barrier(order)
    return results


def _make_sample(
    task: Task,
    req: GenerationRequest,
    turn: int,
    branch: int,
    gen: Generation,
    step: StepResult,
    reward: float,
    cont: bool,
) -> Sample:
    return Sample(
        task_uid=task.uid,
        role=req.role,
        turn=turn,
        branch=branch,
        policy=req.policy,
        prompt_ids=tuple(gen.prompt_ids),
        response_ids=tuple(gen.response_ids),
        logprobs=None if gen.logprobs is None else tuple(gen.logprobs),
        team_reward=float(step.team_reward),
        local_reward=float(step.local_reward),
        reward=float(reward),
        continued=cont,
        valid=step.valid,
        text=gen.text,
        infra_failure=None if step.info.get(INFRA_FAILURE) is None else str(step.info[INFRA_FAILURE]),
    )


def _guard(fn: Callable, task: Task, what: str):
    try:
        return fn()
    except Exception as exc:  # an environment bug must not take down the batch: isolate it to this task
        raise EnvironmentFailure(f"{task.env}.{what} raised {type(exc).__name__}: {exc}") from exc
