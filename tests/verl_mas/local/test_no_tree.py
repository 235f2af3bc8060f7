"""The no-tree ablation: K independent K = 1 episodes per task, whose samples form the task's groups."""

from __future__ import annotations

import asyncio

from mas_testkit import CounterEnv, ScriptedGenerator
from verl_mas.env import Task
from verl_mas.metrics import rollout_metrics
from verl_mas.rollout import RolloutConfig, rollout_independent
from verl_mas.router import PolicyRouter

TARGET = 100  # unreachable in two turns: every episode plays all its turns


def unreachable_target(task: Task) -> CounterEnv:
    env = CounterEnv(max_turns=2)
    env.reset(task)
    env.target = TARGET
    return env


def test_episodes_are_independent_and_grouped_per_task():
    answers = iter(range(1000))
    generator = ScriptedGenerator(lambda fields, n, request: [str(next(answers) % 3 + 1) for _ in range(n)])
    tasks = [Task("t0", "counter", 0), Task("t1", "counter", 1)]
    router = PolicyRouter.from_spec("shared", ("a", "b"))
    results = asyncio.run(rollout_independent(tasks, generator, router, RolloutConfig(k=3), unreachable_target))

    assert [r.task.uid for r in results] == ["t0"] * 3 + ["t1"] * 3
    assert {request.n for request in generator.requests} == {1}
    assert generator.peak_in_flight == 6  # every episode of every task is in flight at once
    for index, result in enumerate(results):
        assert [(s.role, s.turn) for s in result.samples] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
        assert {s.branch for s in result.samples} == {index % 3} and all(s.continued for s in result.samples)
        value = sum(int(s.text) for s in result.samples)  # the counter moved by this episode's own moves only
        assert result.team_reward == 1 - abs(TARGET - value) / TARGET
    first_moves = [int(r.samples[0].text) for r in results]
    assert first_moves == [1, 2, 3, 1, 2, 3]  # one request per episode, served in task-major order
    metrics = rollout_metrics(results)
    assert metrics["rollout/samples"] == 24 and metrics["rollout/a/turn0/samples"] == 6
    assert metrics["rollout/a/turn0/group_reward_std"] > 0  # a group is one task's 3 episodes, not one episode
