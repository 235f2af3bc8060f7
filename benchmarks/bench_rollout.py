"""Benchmark: our own CPU cost per training sample in the tree rollout, with a zero-cost generator."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "testkit"))
from mas_testkit import CounterEnv  # noqa: E402  (the test environment: cheap, deterministic)
from verl_mas.env import Task  # noqa: E402
from verl_mas.rollout import Generation, GenerationRequest, RolloutConfig, rollout_tasks  # noqa: E402
from verl_mas.router import PolicyRouter  # noqa: E402

TASKS, K, TURNS = 32, 8, 5
CANNED = [Generation(text=str(d), prompt_ids=(1, 2, 3), response_ids=(4,), logprobs=(-0.1,)) for d in (0, 1, -1, 0)]


async def zero_cost_generate(request: GenerationRequest) -> list[Generation]:
    return [CANNED[i % len(CANNED)] for i in range(request.n)]


def never_done_env(task: Task) -> CounterEnv:
    env = CounterEnv(max_turns=TURNS)
    env.reset(task)
    env.target = 10_000  # unreachable: every episode runs all turns, the worst case for bookkeeping
    return env


def main() -> None:
    router = PolicyRouter.from_spec("shared", ("a", "b"))
    tasks = [Task(f"t{i}", "counter", i) for i in range(TASKS)]
    config = RolloutConfig(k=K)
    best, samples = float("inf"), 0
    for _ in range(5):
        start = time.perf_counter()
        results = asyncio.run(rollout_tasks(tasks, zero_cost_generate, router, config, never_done_env))
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
