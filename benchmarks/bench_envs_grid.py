"""Benchmark of the grid puzzles in compact mode: step throughput, clone cost and board generation cost.

Each task is played like a tree rollout: for every role and turn, four candidate replies (the expert's list, its
first move only, a random five-move list, unparsable text) are each stepped on a fresh clone; the episode then
continues with the first expert move, so it lasts several turns. Only `step` calls are timed for steps/s.
Run: python benchmarks/bench_envs_grid.py  (writes benchmarks/results/envs_grid.json)
"""

from __future__ import annotations

import json
import platform
import random
import time
from pathlib import Path

from verl_mas.env import Task
from verl_mas_envs.grid import MOVES, GridPuzzleEnv
from verl_mas_envs.plan_path import PlanPathEnv
from verl_mas_envs.sokoban import SokobanEnv

TASKS = 300
CLONES = 200_000
RESULTS = Path(__file__).parent / "results" / "envs_grid.json"


def candidate_texts(env: GridPuzzleEnv, role: str, rng: random.Random) -> list[str]:
    expert = env.expert(role)
    first_move = expert.split()[:2]
    random_moves = " ".join(rng.choice(list(MOVES)) for _ in range(5))
    return [expert, " ".join(first_move), f"Actions: {random_moves}", "I am not sure."]


def bench(name: str, env: GridPuzzleEnv) -> dict[str, float]:
    rng = random.Random(0)
    reset_s = step_s = 0.0
    steps = 0
    mid_episode = None
    for seed in range(TASKS):
        started = time.perf_counter()
        env.reset(Task(uid=str(seed), env=name, seed=seed))
        reset_s += time.perf_counter() - started
        while not env.done:
            for role in ("tool", "plan"):
                texts = candidate_texts(env, role, rng)
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
    envs = {"plan_path": PlanPathEnv(tool_mode="compact"), "sokoban": SokobanEnv(tool_mode="compact")}
    results = {name: bench(name, env) for name, env in envs.items()}
    print(f"{'env':<10} {'steps/s':>10} {'step µs':>9} {'clone µs':>9} {'reset ms':>9} {'steps':>7}")
    for name, row in results.items():
        print(
            f"{name:<10} {row['steps_per_s']:>10.0f} {row['step_us']:>9.1f} {row['clone_us']:>9.2f} "
            f"{row['reset_ms']:>9.2f} {row['steps']:>7}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    machine = {"python": platform.python_version(), "processor": platform.processor() or platform.machine()}
    settings = {"tasks": TASKS, "clones": CLONES, "tool_mode": "compact", "boards": "reference (10x10/22%, 6x6/1 box)"}
    RESULTS.write_text(json.dumps({"machine": machine, "settings": settings, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
