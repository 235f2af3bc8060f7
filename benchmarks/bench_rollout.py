"""Benchmark: our own CPU cost per training sample in the tree rollout, with a zero-cost generator and an env whose
steps cost next to nothing."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from verl_mas.env import MultiAgentEnv, StepResult, Task, Workflow
from verl_mas.rollout import Generation, GenerationRequest, RolloutConfig, rollout_tasks
from verl_mas.router import PolicyRouter

TASKS, K, TURNS = 32, 8, 5
CANNED = [Generation(text=str(d), prompt_ids=(1, 2, 3), response_ids=(4,), logprobs=(-0.1,)) for d in (0, 1, -1, 0)]


async def zero_cost_generate(request: GenerationRequest) -> list[Generation]:
    return [CANNED[i % len(CANNED)] for i in range(request.n)]


class TallyEnv(MultiAgentEnv):
    """Two roles add an integer to a tally, for `max_turns` turns: never done, so every episode runs all its turns
    (the worst case for the rollout's bookkeeping); a step parses one integer and compares two."""

    def __init__(self, max_turns: int) -> None:
        self.max_turns = max_turns
        self.tally = 0

    def workflow(self) -> Workflow:
        return Workflow(roles=("a", "b"), max_turns=self.max_turns)

    def reset(self, task: Task) -> None:
        self.tally = task.seed % 7

    def observe(self, role: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"{role}: tally {self.tally}"}]

    def step(self, role: str, text: str) -> StepResult:
        before = abs(self.tally)
        self.tally += int(text)
        return StepResult(0.0, float(before - abs(self.tally)), False)

    def clone(self) -> TallyEnv:
        other = TallyEnv(self.max_turns)
        other.tally = self.tally
        return other

    @property
    def done(self) -> bool:
        return False

    def success(self) -> bool:
        return False


def tally_env(task: Task) -> TallyEnv:
    env = TallyEnv(max_turns=TURNS)
    env.reset(task)
    return env


def main() -> None:
    router = PolicyRouter.from_spec("shared", ("a", "b"))
    tasks = [Task(f"t{i}", "tally", i) for i in range(TASKS)]
    config = RolloutConfig(k=K)
    best, samples = float("inf"), 0
    for _ in range(5):
        start = time.perf_counter()
        results = asyncio.run(rollout_tasks(tasks, zero_cost_generate, router, config, tally_env))
        best = min(best, time.perf_counter() - start)
        samples = sum(len(r.samples) for r in results)
    assert samples == TASKS * K * 2 * TURNS
    per_sample_us = best / samples * 1e6
    print(f"{TASKS} tasks x K={K} x 2 roles x {TURNS} turns = {samples} samples")
    print(
        f"rollout wall time (best of 5): {best * 1e3:.1f} ms; our CPU work per training sample: {per_sample_us:.1f} us"
    )
    out = Path(__file__).parent / "results" / "rollout.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"samples": samples, "seconds": best, "us_per_sample": per_sample_us}, indent=2))


if __name__ == "__main__":
    main()
