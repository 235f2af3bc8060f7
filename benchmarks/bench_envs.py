"""Benchmark of the built-in environments in compact mode: step throughput, clone cost, board generation cost.

Each task is played like a tree rollout: for every role and turn, four candidate replies (the expert's move, a
truncated copy of it, the expert's tokens reversed, unparsable text) are each stepped on a fresh clone; the
episode then continues with the truncated move, so it lasts several turns. Only `step` calls are timed.
Run: python benchmarks/bench_envs.py  (writes benchmarks/results/envs.json)
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

from verl_mas.env import MultiAgentEnv, Task, make_env

TASKS = 300
CLONES = 200_000
RESULTS = Path(__file__).parent / "results" / "envs.json"


def candidate_texts(env: MultiAgentEnv, role: str) -> list[str]:
    expert = env.expert(role)
    tokens = expert.split()
    return [expert, " ".join(tokens[: max(2, len(tokens) - 3)]), " ".join(reversed(tokens)), "I am not sure."]


def bench(name: str, env: MultiAgentEnv) -> dict[str, float]:
    reset_s = step_s = 0.0
    steps = 0
    mid_episode = None
    for seed in range(TASKS):
        started = time.perf_counter()
        env.reset(Task(uid=str(seed), env=name, seed=seed))
        reset_s += time.perf_counter() - started
        workflow = env.workflow()
        for _ in range(workflow.max_turns):
            if env.done:
                break
            for role in workflow.roles:
                if env.done:
                    break
                texts = candidate_texts(env, role)
                for text in texts:
                    branch = env.clone()
                    started = time.perf_counter()
                    branch.step(role, text)
                    step_s += time.perf_counter() - started
                    steps += 1
                env.step(role, texts[1])
            mid_episode = mid_episode or env.clone()
    started = time.perf_counter()
    for _ in range(CLONES):
        mid_episode.clone()
    clone_s = time.perf_counter() - started
    return {
        "steps_per_s": steps / step_s,
        "step_us": 1e6 * step_s / steps,
        "clone_us": 1e6 * clone_s / CLONES,
        "reset_ms": 1e3 * reset_s / TASKS,
        "steps": steps,
    }


def main() -> None:
    envs = {
        "plan_path": make_env("plan_path", tool_mode="compact"),
        "sokoban": make_env("sokoban", tool_mode="compact"),
        "sudoku_4x4": make_env("sudoku", size=4, tool_mode="compact"),
        "sudoku_9x9": make_env("sudoku", size=9, tool_mode="compact"),
    }
    results = {name: bench(name.split("_4x4")[0].split("_9x9")[0], env) for name, env in envs.items()}
    print(f"{'env':<11} {'steps/s':>10} {'step µs':>9} {'clone µs':>9} {'reset ms':>9} {'steps':>7}")
    for name, row in results.items():
        print(
            f"{name:<11} {row['steps_per_s']:>10.0f} {row['step_us']:>9.1f} {row['clone_us']:>9.2f} "
            f"{row['reset_ms']:>9.2f} {row['steps']:>7}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    machine = {"python": platform.python_version(), "processor": platform.processor() or platform.machine()}
    settings = {
        "tasks": TASKS,
        "clones": CLONES,
        "tool_mode": "compact",
        "boards": "reference (10x10/22%, 6x6/1 box); sudoku 4x4, 9x9",
    }
    RESULTS.write_text(json.dumps({"machine": machine, "settings": settings, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
